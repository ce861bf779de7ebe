//! NOHZ idle: which idle CPUs stop their tick, and how their blocked load keeps decaying
//! and their run queues keep being balanced while they sleep.
//!
//! Re-derives Linux v6.12 `kernel/sched/fair.c`'s `struct nohz` (`idle_cpus_mask`,
//! `has_blocked`, `next_blocked`, `next_balance`), `nohz_balance_enter_idle` /
//! `nohz_balance_exit_idle`, `nohz_balancer_kick` with `find_new_ilb` (`NOHZ_STATS_KICK`
//! and `NOHZ_BALANCE_KICK`), `_nohz_idle_balance`, `update_nohz_stats` and
//! `nohz_newidle_balance`, and `rq->has_blocked_load` /
//! `rq->last_blocked_load_update_tick` (kept in [`Rq`]).
//!
//! The decisions are values: a busy CPU's tick asks [`Nohz::stats_kick`] and
//! [`Nohz::balance_kick`] whom to kick (the kernel sends that CPU an IPI; the simulator
//! runs its softirq at once); the kicked CPU walks the idle CPUs in [`ilb_order`] and, for
//! each, [`blocked_load_check`] then (after that CPU's clock update) [`update_blocked_load`],
//! or a `balance::sched_balance_domains` when its `next_balance` is due
//! ([`nohz_balance_due`]). In the kernel [`Nohz`] lives in atomics
//! (`idle_cpus` in an `AtomicU64`), read and written without run-queue locks; the per-CPU
//! parts are the owner's run queue, changed under its lock.
//!
//! Deliberate differences: time is in jiffies the caller passes; the ILB is the first
//! idle CPU other than the kicker (`find_new_ilb` without housekeeping masks); a
//! `NOHZ_BALANCE_KICK` considers every idle CPU tickless, also one that never ran a task;
//! an idle CPU keeps its tick when its last idle period was shorter than a tick
//! ([`idle_tick_kept`], standing in for `tick_nohz_idle_stop_tick`'s next-timer test).

use crate::balance::Snapshots;
use crate::rq::{Rq, RqSnapshot};
use crate::types::{CpuId, CpuMask, Nanos};

/// `LOAD_AVG_PERIOD` in ms: the spacing of NOHZ blocked-load updates.
pub const LOAD_AVG_PERIOD_MS: u64 = 32;

/// fair.c's `struct nohz`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Nohz {
    /// `nohz.idle_cpus_mask`: CPUs that entered idle with their tick stopped and have not
    /// ticked busy since (`rq->nohz_tick_stopped`).
    pub idle_cpus: CpuMask,
    /// `nohz.has_blocked`: some idle CPU may still have blocked load to decay.
    pub has_blocked: bool,
    /// `nohz.next_blocked` (jiffies): when the next blocked-load update is due.
    pub next_blocked_j: u64,
    /// `nohz.next_balance` (jiffies): the earliest `next_balance` of the idle CPUs.
    pub next_balance_j: u64,
}

/// What [`blocked_load_check`] found for one idle CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockedLoad {
    /// Nothing to do now; the bool says whether the CPU still has blocked load.
    Done(bool),
    /// Update it: take its rq lock, update its clock, call [`update_blocked_load`].
    Update,
}

impl Nohz {
    /// `nohz_balance_enter_idle` for `rq`'s CPU (with its rq lock held): its tick stops,
    /// and it has blocked load to decay from now on.
    pub fn enter_idle(&mut self, rq: &mut Rq) {
        rq.set_has_blocked_load(true);
        self.idle_cpus.set(rq.cpu());
        self.has_blocked = true;
    }

    /// `nohz_balance_exit_idle`: `cpu` ticks busy again.
    pub fn exit_idle(&mut self, cpu: CpuId) {
        self.idle_cpus.clear(cpu);
    }

    /// `nohz_newidle_balance`'s gate for a CPU going idle with `avg_idle` expected:
    /// update the idle CPUs' blocked load itself, without an IPI, when it expects to stay
    /// idle longer than a migration costs and an update is due at jiffy `j`.
    pub fn newidle_stats_due(&self, avg_idle: u64, migration_cost_ns: u64, j: u64) -> bool {
        avg_idle >= migration_cost_ns && self.has_blocked && j >= self.next_blocked_j
    }

    /// `nohz_balancer_kick`'s `NOHZ_STATS_KICK` from the tick of busy `this` at jiffy `j`:
    /// once `next_blocked` has passed, the idle CPU to kick (`find_new_ilb`: the first
    /// tickless idle online CPU other than `this`).
    pub fn stats_kick<S: Snapshots + ?Sized>(
        &self,
        this: CpuId,
        j: u64,
        cpus: &S,
    ) -> Option<CpuId> {
        if !self.has_blocked || j <= self.next_blocked_j {
            return None;
        }
        (0..cpus.nr_cpus())
            .map(|i| CpuId(i as u16))
            .find(|&c| c != this && self.idle_cpus.contains(c) && ilb_candidate(&cpus.snapshot(c)))
    }

    /// `_nohz_idle_balance(NOHZ_STATS_KICK)` starts: `has_blocked` is cleared (and set
    /// again by [`Nohz::stats_end`] if some CPU keeps blocked load).
    pub fn stats_begin(&mut self) {
        self.has_blocked = false;
    }

    /// `_nohz_idle_balance` is done at jiffy `j` (HZ `hz`): the next update is due
    /// `LOAD_AVG_PERIOD` later; `still_blocked` if some CPU kept blocked load.
    pub fn stats_end(&mut self, still_blocked: bool, j: u64, hz: u32) {
        self.next_blocked_j = j + (LOAD_AVG_PERIOD_MS * hz as u64).div_ceil(1000);
        if still_blocked {
            self.has_blocked = true;
        }
    }

    /// `nohz_balancer_kick`'s `NOHZ_BALANCE_KICK` from the tick of busy `this` at jiffy
    /// `j`: when `this` has more than one task or a misfit one and `nohz.next_balance` has
    /// passed, the idle CPU to kick (the first idle online CPU other than `this`); the next
    /// kick is then not before the next jiffy.
    pub fn balance_kick<S: Snapshots + ?Sized>(
        &mut self,
        this: &RqSnapshot,
        j: u64,
        cpus: &S,
    ) -> Option<CpuId> {
        if this.nr_running < 2 && this.misfit_task_load == 0 {
            return None;
        }
        if j < self.next_balance_j {
            return None;
        }
        let me = this.cpu();
        let ilb = (0..cpus.nr_cpus())
            .map(|i| CpuId(i as u16))
            .find(|&c| c != me && ilb_candidate(&cpus.snapshot(c)))?;
        self.next_balance_j = j + 1;
        Some(ilb)
    }

    /// The balancing walk of `_nohz_idle_balance` is done: `nohz.next_balance` is the
    /// earliest next balance of the idle CPUs visited (`None`: none was).
    pub fn balance_done(&mut self, next_balance_j: Option<u64>) {
        if let Some(j) = next_balance_j {
            self.next_balance_j = j;
        }
    }
}

/// Whether a CPU can be kicked as the idle load balancer, or balanced on behalf of by one:
/// idle and online. Linux's `nohz.idle_cpus_mask` never holds an inactive CPU
/// (`nohz_balance_enter_idle` returns early for one), so `find_new_ilb` and
/// `_nohz_idle_balance` never pick one; a CPU that was never brought up (`maxcpus=`) reads as
/// idle but runs nothing, and a task pulled onto it would be lost.
pub fn ilb_candidate(cpu: &RqSnapshot) -> bool {
    cpu.online && cpu.pelt.idle
}

/// The order `_nohz_idle_balance` on `ilb` visits the CPUs: from the one after `ilb`,
/// wrapping, `ilb` itself last (`for_each_cpu_wrap`).
pub fn ilb_order(ilb: CpuId, nr_cpus: usize) -> impl Iterator<Item = CpuId> {
    (1..=nr_cpus).map(move |k| CpuId(((ilb.index() + k) % nr_cpus) as u16))
}

/// `update_nohz_stats`, first half, for an idle CPU at jiffy `j`: nothing when it has no
/// blocked load or is not tickless, nothing yet when it was updated this jiffy, else
/// [`BlockedLoad::Update`].
pub fn blocked_load_check(nohz: &Nohz, rq: &Rq, j: u64) -> BlockedLoad {
    if !rq.has_blocked_load() || !nohz.idle_cpus.contains(rq.cpu()) {
        return BlockedLoad::Done(false);
    }
    if j <= rq.last_blocked_load_update_j() {
        return BlockedLoad::Done(true);
    }
    BlockedLoad::Update
}

/// `update_nohz_stats`, second half, under the CPU's rq lock after its clock update:
/// `sched_balance_update_blocked_averages`, stamp jiffy `j`, and `cfs_rq_has_blocked`.
/// Returns `(decayed, still has blocked load)`; a decay asks for a cpufreq update.
pub fn update_blocked_load(rq: &mut Rq, j: u64) -> (bool, bool) {
    let decayed = rq.update_blocked_averages();
    rq.set_last_blocked_load_update_j(j);
    let avg = rq.cfs_avg();
    let still = avg.load_avg != 0 || avg.util_avg != 0;
    rq.set_has_blocked_load(still);
    (decayed, still)
}

/// A `NOHZ_BALANCE_KICK` balances idle online CPU `cpu` when its `next_balance` is due at
/// `now` ([`ilb_candidate`]).
pub fn nohz_balance_due(cpu: &RqSnapshot, now: Nanos) -> bool {
    ilb_candidate(cpu) && now >= cpu.next_balance
}

/// Whether idle `rq` keeps its tick (with load balancing on: its last idle period was
/// shorter than a tick, so `tick_nohz_idle_stop_tick` would find a timer within a tick);
/// such a tick only runs `sched_balance_trigger`.
pub fn idle_tick_kept(rq: &Rq, tick_ns: u64, load_balance: bool) -> bool {
    load_balance && rq.last_idle_ns() < tick_ns
}
