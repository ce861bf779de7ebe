//! DVFS firmware drivers for the boards asym targets, and firmware models written from the
//! same specifications to test them.
//!
//! - [`scmi`]: Juno r2 — Arm SCMI (DEN0056) base and performance protocols over the
//!   shared-memory transport with the Arm MHU doorbell ([`scmi::perf::ScmiPerf`]).
//! - [`hi3660`]: HiKey960 — the Hi3660 stub clock (LPM3 firmware) over the Hi3660 mailbox,
//!   with frequency read-back ([`hi3660::StubClock`]).
//! - [`hi6220`]: HiKey — the Hi6220 stub clock (MCU firmware) over the Hi6220 mailbox and
//!   SRAM ([`hi6220::StubClock`]).
//! - [`opp`]: firmware OPPs checked against the device tree and the board's data.
//! - [`juno`]: which DVFS protocol a Juno DT describes against the one the firmware speaks.
//! - [`AnyDriver`]: whichever of the three a board has, as one type.
//! - [`model`]: the firmware (SCP, LPM3, MCU) and mailbox hardware as models, for host tests
//!   and for the firmware stand-in of the emulated QEMU boards. Not used on a board.
//!
//! Every driver implements the policy crate's
//! [`CpufreqDriver`](asym_sched::cpufreq::driver::CpufreqDriver): a request never blocks, its
//! completion (the frequency read back, or an [`Error`]) comes from `poll`, which the kernel
//! calls from its tick, a timer or the mailbox interrupt. The hardware is reached only through
//! the [`io::Mmio`] trait (32-bit accesses to a memory-mapped region) and time through
//! [`io::Clock`], so the same code runs on a board, on the host against the models and on QEMU.
//! No allocation, no `unsafe`, no panics on any firmware reply.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(test)]
extern crate std;

mod any;
mod error;
pub mod hi3660;
pub mod hi6220;
pub mod io;
pub mod juno;
pub mod model;
pub mod opp;
mod queue;
pub mod scmi;

pub use any::AnyDriver;
pub use error::{Error, Wait};
