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
//! The crate owns both sequences, and the simulator and the kernel call them: a busy CPU's
//! tick asks [`Nohz::nohz_balancer_kick`] whom to kick and with which [`NohzKickFlags`] (one
//! `kick_ilb(flags)`: the kernel raises `SCHED_SOFTIRQ` there and sends an IPI; the
//! simulator runs the softirq at once), and the kicked CPU's softirq — or a CPU going idle,
//! with [`NohzKickFlags::STATS`] (`nohz_newidle_balance`) — runs [`nohz_idle_balance`], the
//! one `_nohz_idle_balance` walk over the idle CPUs in [`ilb_order`]. The walk reaches the
//! run queues and the NOHZ state only through the driver's [`NohzWalk`], one run queue at a
//! time: for each CPU the driver's `update_nohz_stats` ([`blocked_load_check`], then after
//! that CPU's clock update [`update_blocked_load`]) and `sched_balance_domains(CPU_IDLE)`.
//! In the kernel [`Nohz`] lives in atomics (`idle_cpus` in an `AtomicU64`), read and written
//! without run-queue locks; the per-CPU parts are the owner's run queue, changed under its
//! lock.
//!
//! Load balancing off (asym's switch; Linux has none) takes the balancing away and nothing
//! else ([`nohz_parts`], which both drivers ask): idle CPUs still stop their tick and enter
//! the idle mask ([`Nohz::enter_idle`]), and their blocked load still decays through the
//! stats kick and `nohz_newidle_balance`, so a comparison of the switch's two positions
//! differs in balancing only, not in how (or how often) an idle CPU's signals decay for
//! schedutil.
//!
//! Deliberate differences: time is in jiffies the caller passes; the ILB is the first
//! tickless idle CPU other than the kicker (`find_new_ilb` without housekeeping masks); a
//! kick's balance is due in ns, not jiffies ([`nohz_idle_balance`]); no `NOHZ_NEXT_KICK`
//! (`nohz.needs_update`); an idle CPU keeps its tick when its last idle period was shorter than a tick
//! ([`idle_tick_kept`], standing in for `tick_nohz_idle_stop_tick`'s next-timer test).

use crate::balance::{Snapshots, SYSCTL_SCHED_MIGRATION_COST_NS};
use crate::rq::{CpufreqUpdate, Rq, RqSnapshot};
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
    /// idle longer than a migration costs (`sysctl_sched_migration_cost`) and an update is
    /// due at jiffy `j`.
    pub fn newidle_stats_due(&self, avg_idle: u64, j: u64) -> bool {
        avg_idle >= SYSCTL_SCHED_MIGRATION_COST_NS && self.blocked_update_due(j)
    }

    /// The half of [`Nohz::newidle_stats_due`] that needs no run queue: some idle CPU has
    /// blocked load and its update is due at jiffy `j` (`nohz.has_blocked` and
    /// `nohz.next_blocked`).
    pub fn blocked_update_due(&self, j: u64) -> bool {
        self.has_blocked && j >= self.next_blocked_j
    }

    /// `nohz_balancer_kick` from the tick of busy `this` at jiffy `j`, with `kick_ilb`'s
    /// `nohz.next_balance` update and `find_new_ilb`: whom to kick, and with which flags, or
    /// `None`. `this` leaves the idle mask first (`nohz_balance_exit_idle`). With no tickless
    /// CPU nothing is kicked; [`NohzKickFlags::STATS`] once `nohz.next_blocked` has passed
    /// with blocked load left; from `nohz.next_balance` on, a CPU with two tasks or a misfit
    /// one asks for both flags (Linux's `flags = NOHZ_STATS_KICK | NOHZ_BALANCE_KICK`), and
    /// the next balance kick is then not before the next jiffy. The kicked CPU is the first
    /// tickless idle online CPU other than `this` ([`ilb_candidate`]).
    ///
    /// `parts` ([`nohz_parts`] of asym's load-balancing switch): without
    /// [`NohzParts::balance`] the kick never carries [`NohzKickFlags::BALANCE`], without
    /// [`NohzParts::stats`] never [`NohzKickFlags::STATS`].
    pub fn nohz_balancer_kick<S: Snapshots + ?Sized>(
        &mut self,
        this: &RqSnapshot,
        j: u64,
        cpus: &S,
        parts: NohzParts,
    ) -> Option<(CpuId, NohzKickFlags)> {
        let me = this.cpu();
        self.exit_idle(me);
        if self.idle_cpus.is_empty() {
            return None;
        }
        let mut flags = NohzKickFlags::NONE;
        if parts.stats && self.has_blocked && j > self.next_blocked_j {
            flags = NohzKickFlags::STATS;
        }
        if parts.balance
            && j >= self.next_balance_j
            && (this.nr_running >= 2 || this.misfit_task_load != 0)
        {
            flags = NohzKickFlags::BALANCE;
            if parts.stats {
                flags = flags.union(NohzKickFlags::STATS);
            }
        }
        if flags.is_empty() {
            return None;
        }
        if flags.contains(NohzKickFlags::BALANCE) {
            self.next_balance_j = j + 1;
        }
        let ilb = (0..cpus.nr_cpus())
            .map(|i| CpuId(i as u16))
            .find(|&c| c != me && self.idle_cpus.contains(c) && ilb_candidate(&cpus.snapshot(c)))?;
        Some((ilb, flags))
    }
}

/// Which parts of NOHZ idle run, given asym's load-balancing switch (Linux has none: all of
/// them always run). Both drivers ask [`nohz_parts`] rather than testing the switch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NohzParts {
    /// Blocked load: an idle CPU stops its tick with blocked load left and joins the idle
    /// mask ([`Nohz::enter_idle`]), and the stats kick and `nohz_newidle_balance`
    /// ([`Nohz::newidle_stats_due`]) decay it; blocked load never keeps a tick running.
    pub stats: bool,
    /// Balancing: a kick may carry [`NohzKickFlags::BALANCE`].
    pub balance: bool,
}

/// The rule for asym's load-balancing switch in NOHZ idle: off takes the balancing away
/// (no `NOHZ_BALANCE_KICK`, as no trigger and no newidle balance) and nothing else. Idle
/// CPUs still stop their tick and their blocked load still decays through the stats kick
/// every `LOAD_AVG_PERIOD`, as Linux's do: that decay is PELT's input to schedutil, not
/// balancing, so the switch's two positions compare balancing alone — not also an idle
/// CPU's tick left running to decay its own signals (the kernel's earlier rule, under which
/// an idle CPU's utilisation fell a tick at a time instead of every 32 ms, and which Linux
/// never does).
pub const fn nohz_parts(load_balance: bool) -> NohzParts {
    NohzParts {
        stats: true,
        balance: load_balance,
    }
}

/// The work a NOHZ kick asks of the idle load balancer (fair.c's `nohz_flags`:
/// `NOHZ_BALANCE_KICK`, `NOHZ_STATS_KICK`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NohzKickFlags(pub u8);

impl NohzKickFlags {
    /// No kick.
    pub const NONE: NohzKickFlags = NohzKickFlags(0);
    /// `NOHZ_BALANCE_KICK`: balance the idle CPUs whose `next_balance` is due.
    pub const BALANCE: NohzKickFlags = NohzKickFlags(1);
    /// `NOHZ_STATS_KICK`: update the idle CPUs' blocked load.
    pub const STATS: NohzKickFlags = NohzKickFlags(2);

    /// Both sets of flags.
    pub const fn union(self, other: NohzKickFlags) -> NohzKickFlags {
        NohzKickFlags(self.0 | other.0)
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: NohzKickFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether no flag is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// What [`nohz_idle_balance`] needs from its driver on the idle load balancer: each method
/// is one step of Linux's `_nohz_idle_balance` that touches a run queue or the NOHZ state,
/// and the driver does it with its own locks, accounting and tracing (one run-queue lock at
/// a time: no method is called with another's lock held).
pub trait NohzWalk {
    /// What a step may fail with.
    type Error;
    /// `nohz.idle_cpus_mask` as it is now.
    fn idle_cpus(&self) -> CpuMask;
    /// Linux's `idle_cpu(cpu)`: nothing runs there but the idle task and nothing is queued
    /// (and the CPU is online, [`ilb_candidate`]).
    fn idle_cpu(&self, cpu: CpuId) -> bool;
    /// `need_resched()` on the idle load balancer: it got work, so it stops walking.
    fn need_resched(&self) -> bool;
    /// `update_nohz_stats(cpu_rq(cpu))`: under `cpu`'s rq lock [`blocked_load_check`], then,
    /// when an update is due, its clock update and [`update_blocked_load`] (a decay asks for
    /// a cpufreq update). Returns whether `cpu` still has blocked load.
    fn update_nohz_stats(&mut self, cpu: CpuId, j: u64) -> Result<bool, Self::Error>;
    /// `rq->next_balance` of `cpu`.
    fn next_balance(&self, cpu: CpuId) -> Nanos;
    /// `sched_balance_domains(cpu_rq(cpu), CPU_IDLE)` with `cpu`'s clock updated.
    fn sched_balance_domains(&mut self, cpu: CpuId) -> Result<(), Self::Error>;
    /// `WRITE_ONCE(nohz.has_blocked, v)`.
    fn set_has_blocked(&mut self, v: bool);
    /// `nohz.next_balance = j`.
    fn set_next_balance(&mut self, j: u64);
    /// `WRITE_ONCE(nohz.next_blocked, j)`.
    fn set_next_blocked(&mut self, j: u64);
}

/// Linux's `nohz_idle_balance` + `_nohz_idle_balance` on kicked `ilb` at `now` (jiffies of
/// `tick_ns`, HZ `hz`): with `flags` empty or `ilb` no longer idle nothing happens (Linux's
/// `nohz_csd_func` drops such a kick) and the result is `false`. Otherwise, for each CPU of
/// the idle mask from the one after `ilb`, wrapping, `ilb` itself last ([`ilb_order`]):
/// skip it when it is not idle; stop when `ilb` got work (`need_resched`, the blocked load
/// left for the next kick); [`NohzWalk::update_nohz_stats`] on [`NohzKickFlags::STATS`];
/// [`NohzWalk::sched_balance_domains`] on [`NohzKickFlags::BALANCE`] when its
/// `next_balance` is due; note its `next_balance`. Then `nohz.next_balance` is the earliest
/// noted, `nohz.next_blocked` (stats kick) `LOAD_AVG_PERIOD` later, and `nohz.has_blocked`
/// set again if some CPU kept blocked load. Returns `true`: the kick was handled, the
/// softirq does not balance `ilb` for itself.
///
/// Deliberate difference: a CPU's balance is due at `now >= rq->next_balance` in ns (as
/// [`crate::balance::sched_balance_trigger`]) rather than in jiffies.
pub fn nohz_idle_balance<W: NohzWalk + ?Sized>(
    ilb: CpuId,
    flags: NohzKickFlags,
    now: Nanos,
    tick_ns: u64,
    hz: u32,
    nr_cpus: usize,
    w: &mut W,
) -> Result<bool, W::Error> {
    if flags.is_empty() || !w.idle_cpu(ilb) {
        return Ok(false);
    }
    let stats = flags.contains(NohzKickFlags::STATS);
    let balance = flags.contains(NohzKickFlags::BALANCE);
    let j = now.0 / tick_ns.max(1);
    if stats {
        w.set_has_blocked(false);
    }
    let mut has_blocked = false;
    let mut next: Option<u64> = None;
    let mut aborted = false;
    for c in ilb_order(ilb, nr_cpus) {
        if !w.idle_cpus().contains(c) || !w.idle_cpu(c) {
            continue;
        }
        if w.need_resched() {
            has_blocked |= stats;
            aborted = true;
            break;
        }
        if stats {
            has_blocked |= w.update_nohz_stats(c, j)?;
        }
        if balance && now >= w.next_balance(c) {
            w.sched_balance_domains(c)?;
        }
        let nb = w.next_balance(c).0 / tick_ns.max(1);
        next = Some(next.map_or(nb, |n| n.min(nb)));
    }
    if !aborted {
        if let Some(n) = next {
            w.set_next_balance(n);
        }
        if stats {
            w.set_next_blocked(j + (LOAD_AVG_PERIOD_MS * hz as u64).div_ceil(1000));
        }
    }
    if has_blocked {
        w.set_has_blocked(true);
    }
    Ok(true)
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

/// `sched_balance_update_blocked_averages`'s `if (decayed) cpufreq_update_util(rq, 0)`, after
/// [`update_blocked_load`] under the same rq lock: the cpufreq request to answer now — the run
/// queue's, when the decay changed its averages (`decayed`); `None` when it changed nothing,
/// and then a request an earlier change left in the run queue is taken and not answered
/// either: Linux makes no call here, and a request left pending would surface at the CPU's
/// next unrelated answer (its idle entry or tick), a frequency change Linux never makes then
/// (on QEMU it put a cpufreq update into a later timer wake-up's path: 111 us late against
/// the 100 us the sleep self test allows, on hikey960). Both drivers call it after every
/// blocked-load update.
pub fn blocked_load_cpufreq(rq: &mut Rq, decayed: bool) -> Option<CpufreqUpdate> {
    let update = rq.take_cpufreq_update();
    if decayed {
        update
    } else {
        None
    }
}

/// Whether idle `rq` keeps its tick (with load balancing on: its last idle period was
/// shorter than a tick, so `tick_nohz_idle_stop_tick` would find a timer within a tick);
/// such a tick only runs `sched_balance_trigger`.
pub fn idle_tick_kept(rq: &Rq, tick_ns: u64, load_balance: bool) -> bool {
    load_balance && rq.last_idle_ns() < tick_ns
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rq::{DequeueFlags, EnqueueFlags, RqConfig, Task};
    use crate::types::TaskId;
    use crate::uclamp::TaskUclamp;

    /// A blocked-load update that changed nothing makes no cpufreq call and leaves no request
    /// behind (an earlier change's is taken with it); one that decayed the averages hands its
    /// request over (`if (decayed) cpufreq_update_util(rq, 0)`).
    #[test]
    fn cpufreq_only_after_a_decay_and_nothing_left_pending() {
        let mut now = 1_000_000_000u64;
        let mut rq = Rq::new(RqConfig::new(CpuId(0), 2), Nanos(now));
        let t = Task::new(TaskId(1), 0, TaskUclamp::new(), CpuMask(1)).unwrap();
        rq.enqueue_task(t, EnqueueFlags::NEW).unwrap();
        rq.pick_next_task();
        now += 20_000_000;
        rq.update_rq_clock(Nanos(now)).unwrap();
        rq.task_tick();
        let _ = rq.take_cpufreq_update();
        // The sleep changes the root cfs_rq (a request); the same instant decays nothing.
        now += 3_000_000;
        rq.update_rq_clock(Nanos(now)).unwrap();
        let _task = rq.dequeue_task(TaskId(1), DequeueFlags::SLEEP).unwrap();
        rq.pick_next_task();
        let (decayed, still) = update_blocked_load(&mut rq, 1);
        assert!(!decayed && still);
        assert_eq!(blocked_load_cpufreq(&mut rq, decayed), None);
        assert!(
            rq.take_cpufreq_update().is_none(),
            "a request was left pending"
        );
        now += 8_000_000;
        rq.update_rq_clock(Nanos(now)).unwrap();
        let (decayed, _) = update_blocked_load(&mut rq, 3);
        assert!(decayed);
        assert!(blocked_load_cpufreq(&mut rq, decayed).is_some());
        assert!(rq.take_cpufreq_update().is_none());
    }
}
