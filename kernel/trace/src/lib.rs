//! asym's trace, shared by the simulator (`tests/sim`) and the kernel.
//!
//! - [`ftrace`]: the Linux ftrace text the simulator writes and the kernel is to write —
//!   `sched_switch`, `sched_wakeup`, `cpu_frequency`, LISA's `sched_pelt_*` and
//!   `sched_util_est_*`, rt-app's `tracing_mark_write` markers, ... — as `Display` of plain
//!   `Copy` values into any `core::fmt::Write` or a byte buffer. One formatter, so a
//!   kernel trace and a simulator trace of the same events are the same bytes.
//! - `analyse` (feature `alloc`): what a run did — per-task running time and residency,
//!   per-OPP busy time and energy, frequency residency — read back from a trace's text,
//!   the one analyser for simulator and kernel traces alike.
//! - `validate` (feature `alloc`): the invariants every trace must hold, checked for the
//!   simulator's traces and the kernel's alike.
//! - [`ring`]: a fixed-capacity, lock-free, single-producer ring of fixed-size records,
//!   one per CPU in the kernel, with every refused record counted.
//!
//! `no_std`, no `unsafe`; no `alloc` and no floats outside `analyse` (a host-side module).

#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

#[cfg(any(test, feature = "alloc"))]
extern crate alloc;
#[cfg(test)]
extern crate std;

#[cfg(feature = "alloc")]
pub mod analyse;
pub mod ftrace;
pub mod ring;
#[cfg(feature = "alloc")]
pub mod validate;
