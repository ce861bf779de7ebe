//! The root domain's flags: overutilized, overloaded, and whether EAS is active.
//!
//! Re-derives the parts of Linux's `struct root_domain` the fair class reads and writes:
//! `rd->overutilized` (`is_rd_overutilized`, `set_rd_overutilized`,
//! `check_update_overutilized_status`) and `rd->pd` (`sched_energy_enabled()`: a perf
//! domain list exists, so EAS places wake-ups while not overutilized). One root domain
//! spans every CPU.
//!
//! The overutilized lifecycle is Linux v6.12's while load balancing runs:
//! [`RootDomain::check_update_overutilized_status`] *sets* the flag when the enqueuing CPU
//! (a wake-up, not a new task's first enqueue) or the ticking CPU is `cpu_overutilized`;
//! only the load balancer's statistics *clear* it — `update_sd_lb_stats` at the root level
//! sets it to "some CPU of the system is overutilized" ([`RootDomain::set_rd_overutilized`]
//! with [`crate::balance::BalanceReport::overutilized`]); lower levels can only set it.
//!
//! Where no balancer runs, the caller picks the rule ([`OverutilizedRule`]): Linux's, with
//! the root level's statistics stood in for by [`RootDomain::update_root_stats`] at the root
//! domain's balance interval (the kernel, so a wake-up and a tick read only their own CPU),
//! or — deliberate difference, the simulator's experiment switch with load balancing off —
//! [`RootDomain::check_overutilized`] re-evaluating it over every CPU's [`RqSnapshot`] at each
//! enqueue and tick (see [`OverutilizedCheck`]). The flag is maintained wherever an energy model exists on
//! asymmetric CPUs ([`RootDomain::tracked`]), EAS active or not, so reports can say how
//! long the system was overutilized; Linux's `set_rd_overutilized` does nothing without
//! EAS, and the flag has no effect on placement or balancing unless EAS is active.
//!
//! In the kernel the flags are atomics read locklessly (as Linux's `READ_ONCE`); the
//! decisions here return the new value and the caller stores it.

use core::borrow::Borrow;

use crate::eas::cpu_overutilized;
use crate::features::SchedFeatures;
use crate::rq::RqSnapshot;

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

/// How enqueues and ticks update the overutilized flag.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OverutilizedRule {
    /// Linux v6.12: an enqueue at wake-up and a tick only *set* it, for their own CPU
    /// ([`RootDomain::check_update_overutilized_status`]); only the root level's statistics
    /// clear it ([`RootDomain::set_rd_overutilized`] from the balancer, or
    /// [`RootDomain::update_root_stats`] where no balancer runs).
    #[default]
    Linux,
    /// Re-evaluated over every CPU at each enqueue and tick
    /// ([`RootDomain::check_overutilized`]): without load balancing, in the simulator.
    EveryCpu,
}

/// Where the overutilized flag is re-evaluated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverutilizedCheck {
    /// An enqueue at wake-up (`new`: `wake_up_new_task`, whose utilisation is not settled
    /// yet and which Linux ignores under EAS).
    Enqueue {
        /// A new task's first enqueue.
        new: bool,
    },
    /// The tick.
    Tick,
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

    /// `update_sd_lb_stats` at the root level for a caller without the balancer (its
    /// `set_rd_overutilized(rd, sg_overutilized)`, which here is "some CPU of the system is
    /// `cpu_overutilized`"), over every CPU's snapshot: `Some(flag)` when it changes. Under
    /// [`OverutilizedRule::Linux`] this is what clears the flag. `cpus` is consumed only up
    /// to the first overutilized CPU, so a caller may read the snapshots lazily.
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

    /// [`OverutilizedRule::EveryCpu`] only: the overutilized flag after `at`, given every CPU's snapshot: `Some(new value)` when
    /// it changes, `None` when it stays (or is not tracked). The caller stores it.
    pub fn check_overutilized<'a>(
        &self,
        at: OverutilizedCheck,
        cpus: impl IntoIterator<Item = &'a RqSnapshot>,
        features: SchedFeatures,
        uclamp_used: bool,
    ) -> Option<bool> {
        if !self.tracked {
            return None;
        }
        let (may_set, may_clear) = match at {
            OverutilizedCheck::Enqueue { new } => (!(self.eas && new), !self.eas),
            OverutilizedCheck::Tick => (true, true),
        };
        let over = cpus
            .into_iter()
            .any(|c| cpu_overutilized(c, features, uclamp_used));
        let allowed = if over { may_set } else { may_clear };
        (over != self.overutilized && allowed).then_some(over)
    }
}
