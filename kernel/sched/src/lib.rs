//! asym's scheduling policy, re-derived from Linux's `kernel/sched/`.
//!
//! This crate is pure: no `unsafe`, no MMIO, no global state, no floats. Callers
//! (the kernel from interrupt context, the simulator from its event loop) pass in
//! time, CPU capacity and frequency; every decision comes back as a value. The same
//! code therefore runs on the host under `cargo test`, in the deterministic
//! simulator and in the kernel.
//!
//! It needs `alloc` (the kernel has a heap) only for what is built once at set-up: the run
//! queue's arenas ([`fair::tree`], sized by [`rq::RqConfig::max_tasks`] and never grown),
//! the sched domains, the energy model and the cpufreq tables. No scheduler path
//! allocates after that: a full run queue refuses an enqueue with an error value, and the
//! balancer's lists are fixed-size (`heapless`).
//!
//! Module map (Linux file in brackets):
//! - [`types`]: fixed-point newtypes shared by everything (`Util`, `Capacity`, ...).
//! - [`features`]: the runtime feature set (`sched_features`).
//! - [`pelt`]: per-entity load tracking and the PELT clock (`pelt.c`, `pelt.h`).
//! - [`util_est`]: utilisation estimation (`fair.c`).
//! - [`uclamp`]: utilisation clamping (`core.c`, `sched.h`).
//! - [`cpu_util`]: CPU utilisation getters and `util_fits_cpu` (`fair.c`, `sched.h`).
//! - [`topology`]: CPUs, clusters, capacities and performance domains (`topology.c`,
//!   `arch_topology.c`).
//! - [`fair`]: the fair class, EEVDF (`fair.c`).
//! - [`rq`]: the per-CPU run queue tying the above together (`core.c`, `sched.h`).
//! - [`em`], [`cpufreq`], [`schedutil`]: the energy model, cpufreq policies and the
//!   schedutil governor (`energy_model.c`, `cpufreq.c`, `cpufreq_schedutil.c`).
//! - [`eas`]: energy-aware wake-up placement, overutilized and misfit status (`fair.c`).
//! - [`balance`]: sched domains and load balancing, periodic, newidle and misfit
//!   (`topology.c`, `fair.c`).
//! - [`wakeup`]: wake-up and fork placement, `select_task_rq_fair` and
//!   `select_idle_capacity` (`fair.c`).
//! - [`nohz`]: NOHZ idle — tickless idle CPUs, the ILB kick, blocked-load updates
//!   (`fair.c`).
//! - [`root_domain`]: the root domain's overutilized flag and EAS switch (`sched.h`,
//!   `fair.c`).
//! - [`sched_core`]: the core's steps — wake-up selection and activation, `schedule()`'s
//!   pick with the newidle hook, the tick, exit — with the lock each needs (`core.c`).
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

#[cfg(test)]
extern crate std;

pub mod balance;
pub mod cpu_util;
pub mod cpufreq;
pub mod eas;
pub mod em;
pub mod fair;
pub mod features;
mod flags;
pub mod nohz;
pub mod pelt;
pub mod root_domain;
pub mod rq;
pub mod sched_core;
pub mod schedutil;
pub mod topology;
pub mod types;
pub mod uclamp;
pub mod util_est;
pub mod wakeup;
