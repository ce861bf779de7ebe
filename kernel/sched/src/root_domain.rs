//! The root domain's flags: overutilized, overloaded, and whether EAS is active.
//!
//! Re-derives the parts of Linux's `struct root_domain` the fair class reads and writes:
//! `rd->overutilized` (`is_rd_overutilized`, `set_rd_overutilized`,
//! `check_update_overutilized_status`) and `rd->pd` (`sched_energy_enabled()`: a perf
//! domain list exists, so EAS places wake-ups while not overutilized). One root domain
//! spans every CPU.
//!
//! The overutilized lifecycle is Linux v6.12's:
//! [`RootDomain::check_update_overutilized_status`] *sets* the flag when the enqueuing CPU
//! (a wake-up, not a new task's first enqueue) or the ticking CPU is `cpu_overutilized`;
//! only the load balancer's statistics *clear* it — `update_sd_lb_stats` at the root level
//! sets it to "some CPU of the system is overutilized" ([`RootDomain::set_rd_overutilized`]
//! with [`crate::balance::BalanceReport::overutilized`]); lower levels can only set it.
//!
//! With load balancing off (an experiment switch; Linux has none) the rule is the same, and the
//! root level's statistics the top-level balance would have run still run, from the tick, once
//! per root interval ([`RootDomain::root_stats_due`], then [`RootDomain::update_root_stats`]
//! over every CPU's [`RqSnapshot`]), so the first overutilized stretch does not turn EAS off
//! for good. Both drivers take that decision from [`crate::sched_core::sched_tick`]
//! ([`crate::sched_core::TickSteps::root_stats`]). The flag is maintained wherever an energy
//! model exists on asymmetric CPUs ([`RootDomain::tracked`]), EAS active or not, so reports can
//! say how long the system was overutilized; Linux's `set_rd_overutilized` does nothing without
//! EAS, and the flag has no effect on placement or balancing unless EAS is active.
//!
//! In the kernel the flags are atomics read locklessly (as Linux's `READ_ONCE`); the
//! decisions here return the new value and the caller stores it.

use core::borrow::Borrow;

use crate::eas::cpu_overutilized;
use crate::features::SchedFeatures;
use crate::rq::RqSnapshot;
use crate::types::Nanos;

/// `struct root_domain`'s flags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RootDomain {
    /// `rd->overutilized`.
    pub overutilized: bool,
    /// `rd->overloaded` (newidle balance's gate): set when an enqueue gives a CPU its second
    /// task ([`crate::sched_core::WakeOutcome::overloaded`], the balancer's attaches), set
    /// or cleared only by the root level's load-balance statistics
    /// ([`crate::balance::RqAccess::set_rd_overloaded`]), as v6.12's `add_nr_running` and
    /// `update_sd_lb_stats` keep it. Read only under `STICKY_OVERLOADED`.
    pub overloaded: bool,
    /// The overutilized flag is maintained: an energy model on asymmetric CPUs.
    pub tracked: bool,
    /// `sched_energy_enabled()` with `rd->pd`: EAS places wake-ups while not
    /// overutilized (`ENERGY_AWARE`, schedutil, a complete energy model, asymmetric CPUs).
    pub eas: bool,
}

/// The root level's `sd->max_interval` in ns (`sd_init`: twice the span's weight, in ms), where
/// a balanced root domain's `balance_interval` settles: how often the root level's statistics
/// run without the balancer ([`RootDomain::root_stats_due`]).
pub const fn root_stats_interval_ns(nr_cpus: usize) -> u64 {
    2 * nr_cpus as u64 * 1_000_000
}

impl RootDomain {
    /// `check_update_overutilized_status(rq)` for the CPU of `this` (an enqueue at
    /// wake-up, or the tick of a CPU running a fair task): `Some(true)` when the flag is
    /// clear and that CPU is `cpu_overutilized`. Never clears the flag.
    pub fn check_update_overutilized_status(
        &self,
        this: &RqSnapshot,
        features: SchedFeatures,
        uclamp_used: bool,
    ) -> Option<bool> {
        (self.tracked && !self.overutilized && cpu_overutilized(this, features, uclamp_used))
            .then_some(true)
    }

    /// `set_rd_overutilized(rd, flag)` from the load balancer's statistics: `Some(flag)`
    /// when the flag is tracked and changes.
    pub fn set_rd_overutilized(&self, flag: bool) -> Option<bool> {
        (self.tracked && flag != self.overutilized).then_some(flag)
    }

    /// Whether a tick at `now` runs the root level's statistics for the overutilized flag
    /// ([`RootDomain::update_root_stats`]), given when they are next due (`next`: the caller's
    /// state, zero at boot): `Some(when they are due after this run)`, which the caller stores
    /// (the kernel, where several CPUs tick at once: a compare-and-swap from `next`, running
    /// them only if it wins) before running them; `None`: not now.
    ///
    /// With load balancing on, never: Linux clears the flag only from the root level's
    /// `update_sd_lb_stats` inside a balance ([`RootDomain::set_rd_overutilized`] with
    /// [`crate::balance::BalanceReport::overutilized`]). With it off — deliberate, Linux has no
    /// such switch — once per root interval ([`root_stats_interval_ns`] of `nr_cpus`), by the
    /// first CPU to tick after it, as the top-level balance would have run them.
    pub fn root_stats_due(
        &self,
        load_balance: bool,
        next: Nanos,
        now: Nanos,
        nr_cpus: usize,
    ) -> Option<Nanos> {
        (self.tracked && !load_balance && now >= next)
            .then(|| Nanos(now.0 + root_stats_interval_ns(nr_cpus)))
    }

    /// `update_sd_lb_stats` at the root level for a caller without the balancer (its
    /// `set_rd_overutilized(rd, sg_overutilized)`, which here is "some CPU of the system is
    /// `cpu_overutilized`"), over every CPU's snapshot: `Some(flag)` when it changes. Without
    /// load balancing this is what clears the flag ([`RootDomain::root_stats_due`]). `cpus` is
    /// consumed only up to the first overutilized CPU, so a caller may read the snapshots
    /// lazily.
    pub fn update_root_stats<S: Borrow<RqSnapshot>>(
        &self,
        cpus: impl IntoIterator<Item = S>,
        features: SchedFeatures,
        uclamp_used: bool,
    ) -> Option<bool> {
        if !self.tracked {
            return None;
        }
        let over = cpus
            .into_iter()
            .any(|c| cpu_overutilized(c.borrow(), features, uclamp_used));
        self.set_rd_overutilized(over)
    }
}
