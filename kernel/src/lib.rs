//! asym's kernel: the mechanism half of asym (boot, exceptions, interrupts, timers, SMP,
//! drivers). The scheduling policy lives in `asym-sched`; each board is a binary crate that
//! defines [`boot::Board`] as `ASYM_BOARD` and links this library, whose entry code starts at
//! `_start`.
//!
//! Pure modules (`cmdline`, `dt`, `sync`) build and unit-test on the host (`cargo test -p
//! asym-kernel`); everything touching hardware is compiled only for `target_os = "none"`.
#![cfg_attr(not(test), no_std)]

extern crate alloc;

pub mod arch;
/// What a real board's crate states beyond the device tree (u-boot layout, carve-outs, end policy).
pub mod board;
/// The DT's scheduling description (capacities, OPP tables) as a `BoardDesc`.
pub mod board_dt;
pub mod cmdline;
pub mod dt;
pub mod elf;
pub mod sync;
pub mod time;

#[cfg(target_os = "none")]
pub mod boot;
#[cfg(target_os = "none")]
pub mod console;
#[cfg(target_os = "none")]
pub mod drivers;
#[cfg(target_os = "none")]
pub mod heap;
#[cfg(target_os = "none")]
pub mod log;
#[cfg(target_os = "none")]
pub mod panic;
#[cfg(target_os = "none")]
pub mod selftest;
#[cfg(target_os = "none")]
mod selftests;
#[cfg(target_os = "none")]
pub mod semihosting;

/// Counter ↔ time conversions, exact at the boards' slow counters (host-tested).
// Interrupts, timer, SMP.
#[cfg(target_os = "none")]
pub mod gic;
/// The GIC's pure register encodings, unit-tested on the host (on the target they are `gic::encode`).
#[cfg(all(test, not(target_os = "none")))]
#[path = "gic/encode.rs"]
mod gic_encode;
#[cfg(target_os = "none")]
pub mod ipi;
#[cfg(target_os = "none")]
pub mod percpu;
#[cfg(target_os = "none")]
pub mod psci;
#[cfg(target_os = "none")]
pub mod smp;
#[cfg(target_os = "none")]
pub mod timer;
// Run queues, tick-driven PELT and schedutil, emulated cpufreq.
#[cfg(target_os = "none")]
pub mod cpufreq;
// The board's DVFS firmware driver (SCMI, HiSilicon stub clocks) and the QEMU stand-in.
#[cfg(target_os = "none")]
pub mod dvfs;
// The energy model's energy so far, metered at idle transitions and frequency changes.
#[cfg(target_os = "none")]
pub mod energy;
#[cfg(target_os = "none")]
pub mod sched;
// SCHED_SOFTIRQ, run on interrupt exit.
#[cfg(target_os = "none")]
pub mod softirq;
// Threads, blocking, and what runs on them.
#[cfg(target_os = "none")]
pub mod bench;
#[cfg(target_os = "none")]
pub mod rtapp;
#[cfg(target_os = "none")]
pub mod rtapp_el0;
#[cfg(target_os = "none")]
pub mod soak;
#[cfg(target_os = "none")]
pub mod task;
#[cfg(target_os = "none")]
pub mod tracing;
#[cfg(target_os = "none")]
pub mod user;
#[cfg(target_os = "none")]
pub mod wait;
