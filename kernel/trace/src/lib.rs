//! asym's trace, shared by the simulator (`tests/sim`) and the kernel.
//!
//! - [`ftrace`]: the Linux ftrace text the simulator writes and the kernel is to write —
//!   `sched_switch`, `sched_wakeup`, `cpu_frequency`, LISA's `sched_pelt_*` and
//!   `sched_util_est_*`, rt-app's `tracing_mark_write` markers, ... — as `Display` of plain
//!   `Copy` values into any `core::fmt::Write` or a byte buffer. One formatter, so a
//!   kernel trace and a simulator trace of the same events are the same bytes.
//! - [`ring`]: a fixed-capacity, lock-free, single-producer ring of fixed-size records,
//!   one per CPU in the kernel, with every refused record counted.
//!
//! `no_std`, no `alloc`, no `unsafe`, no floats.

#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(test)]
extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod ftrace;
pub mod ring;
