//! Load balancing in the kernel: the policy crate's balancer (`asym_sched::balance`) driven the
//! way Linux's `kernel/sched/fair.c` drives it.
//!
//! - **Periodic**: the tick asks `sched_balance_trigger` (`time_after_eq(jiffies,
//!   rq->next_balance)`) under its rq lock and raises `SCHED_SOFTIRQ` ([`crate::softirq`]);
//!   on the interrupt's exit [`sched_balance_softirq`] runs the crate's `sched_balance_softirq`
//!   (`run_rebalance_domains`) for this CPU.
//! - **NOHZ kick**: a busy tick asks the crate's `Nohz::nohz_balancer_kick` whom to kick and
//!   with which flags (`NOHZ_STATS_KICK`, with `NOHZ_BALANCE_KICK` once per jiffy); that idle
//!   CPU gets them in its `nohz_flags`, `SCHED_SOFTIRQ` raised and one IPI (`kick_ilb`), and
//!   its softirq runs the crate's `nohz_idle_balance` walk ([`KernelNohzWalk`]): for each
//!   tickless idle CPU, itself last, the blocked-load update and, when its `rq->next_balance`
//!   is due, `sched_balance_domains(CPU_IDLE)` with that CPU's own sched domains.
//! - **Newidle**: `schedule()` about to pick idle (the crate's `Pick::Newidle`) drops its rq
//!   lock, IRQs still masked, and calls [`sched_balance_newidle`] (`sched_balance_newidle`,
//!   gated by the crate on `avg_idle` against `max_newidle_lb_cost` and on the root domain's
//!   overload), then retakes the lock and picks again. When no CPU is overloaded the gate is
//!   closed and [`newidle_skipped_locked`] takes it under the rq lock instead (no unlock).
//!
//! The run queues are reached through [`KernelRqs`], the crate's `RqAccess`: `snapshot(cpu)`
//! reads the published snapshot (`super::snapshot`), `with_rq(cpu, f)` takes that CPU's rq
//! lock, updates its clock, runs `f` and republishes. Only one rq lock is held at a time (the
//! crate cannot express two). Tasks detached under the source lock travel in a [`Transit`]
//! allocated at boot, lent to the crate through `RqAccess::with_transit` (7.7 KB: not on a
//! 16 KiB stack). Under the destination lock, every task whose `task_cpu` is another CPU has
//! just arrived: its `task_cpu` is set there (so a `task_rq_lock`-style reader that locked the
//! old CPU sees it gone and retries, [`super::lock_task_rq`]), `sched_migrate_task` is traced,
//! and `attach_preempt` (`wakeup_preempt` of `attach_task`) decides whether the destination is
//! kicked with a reschedule IPI after the balance. A task whose registers are still live on a
//! CPU (`p->on_cpu`) is never detached (`LbContext::task_on_cpu`, Linux `can_migrate_task`),
//! nor the running one, nor one its `cpus_allowed` keeps off the destination.
//!
//! Each CPU's sched domains and transit lists are its [`CpuLb`], behind a lock of rank
//! `BALANCE` (below the run queues'): taken by the CPU itself in its softirq and newidle
//! balance (IRQs masked, so never both at once) and, with a try-lock, by a NOHZ balancer
//! working on its behalf (a CPU busy with its own balance is skipped, as Linux skips one that
//! is no longer idle). Every CPU holds a copy of the domains of all CPUs, of which only its
//! own entry is used: `SchedDomains` is one value in the crate, and one copy per CPU lets the
//! CPUs balance at once without sharing a lock.
//!
//! Runtime switch: `sched_balance=on|off` on the command line ([`set_enabled`]); off, nothing
//! is balanced (no trigger, no newidle, no misfit status, no `NOHZ_BALANCE_KICK`), while NOHZ
//! idle and its blocked-load updates run as with it on.
//!
//! Active balance: a balance whose report asks for one (the crate's `ActiveBalance`, misfit
//! or after repeated failures) makes it the source's one in flight and wakes the source's
//! stopper (`super::stop`), which runs [`active_load_balance_cpu_stop`] with the preempted
//! task off the CPU.
//!
//! - **NOHZ blocked load** (`NOHZ_STATS_KICK`): an idle CPU stops its tick with blocked load
//!   left (`nohz_balance_enter_idle`, [`nohz_enter_idle`]); a busy tick's kick carries
//!   `NOHZ_STATS_KICK` once `nohz.next_blocked` has passed, and the idle load balancer's walk
//!   then decays every tickless idle CPU's
//!   blocked averages under that CPU's rq lock (`update_nohz_stats`) and runs schedutil for each
//!   that decayed, every `LOAD_AVG_PERIOD` (32 ms); a CPU about to idle that expects to stay
//!   idle longer than a migration costs does the same itself when it is due
//!   (`nohz_newidle_balance` → `nohz_run_idle_balance`, [`nohz_run_idle_balance`]). With
//!   every CPU idle nothing decays, as on Linux. `sched_balance=off` changes none of this
//!   (the crate's `nohz_parts`): it only takes `NOHZ_BALANCE_KICK` away, so blocked load
//!   decays the same way with the switch in either position.
//!
//! Deliberate differences: an idle CPU whose tick still runs decays its own blocked averages
//! at every tick (Linux at its `SCHED_SOFTIRQ`); the kick raises `SCHED_SOFTIRQ` on the idle
//! load balancer from the kicker (Linux raises it in the IPI's `nohz_csd_func`), so a kicked CPU
//! that is busy again runs its own `sched_balance_softirq` (Linux drops the kick).

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

use alloc::boxed::Box;
use alloc::vec::Vec;
use asym_sched::balance::{
    self as lb, ActiveBalance, BalanceReport, CpuIdleType, LbContext, Moved, NewidleSkipInfo,
    RqAccess, SchedDomains, Snapshots, TaskOnCpu, Transit,
};
use asym_sched::nohz::{
    blocked_load_check, blocked_load_cpufreq, ilb_candidate, nohz_parts, update_blocked_load,
    BlockedLoad, Nohz, NohzKickFlags, NohzWalk,
};
use asym_sched::rq::{Rq, RqSnapshot};
use asym_sched::sched_core;
use asym_sched::topology::Topology;
use asym_sched::types::{CpuId, CpuMask, Nanos, TaskId};

use super::{CpuSched, STATE};
use crate::dt::MAX_CPUS;
use crate::percpu::{current_cpu, PerCpu};
use crate::sync::{InitOnce, IrqSpinLock, LockRank};
use crate::task::{self, ThreadId};
use crate::tracing;

/// Load balancing at boot without `sched_balance=` (Linux: always on).
pub const DEFAULT_ON: bool = true;

/// One CPU's balancing state.
pub struct CpuLb {
    /// Every CPU's sched domains; this CPU's entry is the one in use.
    sds: SchedDomains,
    /// The lists a move uses between the two rq locks.
    transit: Box<Transit>,
}

static LB: InitOnce<&'static [IrqSpinLock<CpuLb>]> = InitOnce::new();
/// Load balancing is on (`sched_balance=`).
static ENABLED: AtomicBool = AtomicBool::new(false);
/// `TICK_NSEC` of the domains (jiffies = ns / this).
static TICK_NSEC: AtomicU64 = AtomicU64::new(1);
/// Per CPU: its lowest domain's next balance as newidle's closed gate reads it
/// ([`NewidleSkipInfo::bound`], jiffies; `u64::MAX`: no domains), stored whenever a balance
/// leaves that CPU's domains ([`store_skip_bound`]) so [`newidle_skipped_locked`] need not
/// take the balance lock.
static NEWIDLE_BOUND: PerCpu<AtomicU64> =
    PerCpu::new([const { AtomicU64::new(u64::MAX) }; MAX_CPUS]);
/// `(HZ, sched_asym_cpucap_active())` of the domains.
static SKIP_CONST: InitOnce<(u32, bool)> = InitOnce::new();
/// `nohz.next_balance` (jiffies).
static NOHZ_NEXT_BALANCE: AtomicU64 = AtomicU64::new(0);
/// Per CPU: the NOHZ kicks pending for it (`nohz_flags(cpu)`: the bits of the crate's
/// `NohzKickFlags`).
static NOHZ_FLAGS: PerCpu<AtomicU8> = PerCpu::new([const { AtomicU8::new(0) }; MAX_CPUS]);
/// `nohz.idle_cpus_mask`: CPUs that stopped their tick going idle and have not ticked busy
/// since (`rq->nohz_tick_stopped`).
static NOHZ_IDLE_CPUS: AtomicU64 = AtomicU64::new(0);
/// `nohz.has_blocked`: some tickless idle CPU may still have blocked load to decay.
static NOHZ_HAS_BLOCKED: AtomicBool = AtomicBool::new(false);
/// `nohz.next_blocked` (jiffies): when the next blocked-load update is due.
static NOHZ_NEXT_BLOCKED: AtomicU64 = AtomicU64::new(0);

/// Per CPU: guest ns at the start and the end of the latest `_nohz_idle_balance` walk this CPU
/// ran ([`last_nohz_walk`]).
static NOHZ_WALK_AT: PerCpu<[AtomicU64; 2]> =
    PerCpu::new([const { [AtomicU64::new(0), AtomicU64::new(0)] }; MAX_CPUS]);

/// Per CPU counters ([`Stats`]).
struct Counters {
    periodic: AtomicU64,
    newidle: AtomicU64,
    newidle_moved: AtomicU64,
    nohz: AtomicU64,
    nohz_stats: AtomicU64,
    lb_runs: AtomicU64,
    moved: AtomicU64,
    active_pushed: AtomicU64,
    active_failed: AtomicU64,
    active_refused: AtomicU64,
    kicks_sent: AtomicU64,
    errors: AtomicU64,
}

static COUNTERS: PerCpu<Counters> = PerCpu::new(
    [const {
        Counters {
            periodic: AtomicU64::new(0),
            newidle: AtomicU64::new(0),
            newidle_moved: AtomicU64::new(0),
            nohz: AtomicU64::new(0),
            nohz_stats: AtomicU64::new(0),
            lb_runs: AtomicU64::new(0),
            moved: AtomicU64::new(0),
            active_pushed: AtomicU64::new(0),
            active_failed: AtomicU64::new(0),
            active_refused: AtomicU64::new(0),
            kicks_sent: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }; MAX_CPUS],
);

/// What one CPU's balancing did so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// `sched_balance_softirq` runs for this CPU.
    pub periodic: u64,
    /// `sched_balance_newidle` calls.
    pub newidle: u64,
    /// Tasks those newidle balances pulled to this CPU (part of [`moved`](Self::moved)).
    pub newidle_moved: u64,
    /// `sched_balance_domains` runs on this CPU's behalf by a NOHZ balancer.
    pub nohz: u64,
    /// `_nohz_idle_balance` walks with `NOHZ_STATS_KICK` this CPU ran (kicked, or itself
    /// about to idle), each decaying every tickless idle CPU's blocked load.
    pub nohz_stats: u64,
    /// `sched_balance_rq` calls.
    pub lb_runs: u64,
    /// Tasks moved to this CPU by its balances (pulled, or pushed by an active balance).
    pub moved: u64,
    /// Active balances carried out: a stopper pushed a task to this CPU (`sd->alb_pushed`).
    pub active_pushed: u64,
    /// Active balances whose stopper ran and found nothing to push here: the source went
    /// idle, or no task there may run here (`sd->alb_failed`).
    pub active_failed: u64,
    /// Active-balance requests of this CPU's not started: one was already in flight from the
    /// source (`busiest->active_balance`), or the source has no stopper.
    pub active_refused: u64,
    /// NOHZ balance kicks this CPU sent.
    pub kicks_sent: u64,
    /// Balances the crate refused (a broken run queue; never expected).
    pub errors: u64,
}

/// `cpu`'s counters.
pub fn stats(cpu: CpuId) -> Stats {
    let Some(c) = COUNTERS.get(cpu) else {
        return Stats::default();
    };
    let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
    Stats {
        periodic: l(&c.periodic),
        newidle: l(&c.newidle),
        newidle_moved: l(&c.newidle_moved),
        nohz: l(&c.nohz),
        nohz_stats: l(&c.nohz_stats),
        lb_runs: l(&c.lb_runs),
        moved: l(&c.moved),
        active_pushed: l(&c.active_pushed),
        active_failed: l(&c.active_failed),
        active_refused: l(&c.active_refused),
        kicks_sent: l(&c.kicks_sent),
        errors: l(&c.errors),
    }
}

/// `cpu`'s domains, lowest first: `(sd->balance_interval ms, sd->nr_balance_failed,
/// sd->max_newidle_lb_cost ns)` (`None`: busy, or no domains).
pub fn domain_state(cpu: CpuId) -> Option<heapless::Vec<(u32, u32, u64), 4>> {
    let g = LB.get()?.get(cpu.index())?.try_lock()?;
    let b = g.sds.cpu(cpu)?;
    Some(
        b.sd.iter()
            .take(4)
            .map(|sd| {
                (
                    sd.balance_interval,
                    sd.nr_balance_failed,
                    sd.max_newidle_lb_cost,
                )
            })
            .collect(),
    )
}

/// Builds every CPU's sched domains and transit lists (boot, before the tick starts).
pub(super) fn init(topology: &Topology, hz: u32, now: Nanos, enabled: bool) {
    let sds = match SchedDomains::build(topology, hz, now) {
        Ok(s) => s,
        Err(e) => {
            crate::println!("sched: {}; load balancing off", e);
            return;
        }
    };
    let nr = topology.nr_cpus().min(MAX_CPUS);
    let mut v: Vec<IrqSpinLock<CpuLb>> = Vec::with_capacity(nr);
    for _ in 0..nr {
        v.push(IrqSpinLock::with_rank(
            CpuLb {
                sds: sds.clone(),
                transit: Box::new(Transit::new()),
            },
            LockRank::BALANCE,
        ));
    }
    TICK_NSEC.store(sds.tick_nsec.max(1), Ordering::Relaxed);
    let _ = SKIP_CONST.set((sds.hz, sds.asym_cpucapacity));
    for i in 0..nr {
        store_skip_bound(CpuId(i as u16), &sds);
    }
    let _ = LB.set(Vec::leak(v));
    ENABLED.store(enabled, Ordering::Relaxed);
}

/// Rebuilds every CPU's sched domains from the topology over the online CPUs at `now`, as
/// Linux's `rebuild_sched_domains` does when cpusets, the topology or the active CPUs change
/// (and `sched_init_smp` once the secondaries are up): a CPU not online gets none, so nothing
/// is balanced onto it and no group counts it; intervals back to
/// `min_interval`, failure counts and newidle costs to zero (not for interrupt context: it
/// allocates). Returns false without domains.
pub fn rebuild_sched_domains() -> bool {
    let (Some(st), Some(lbs)) = (STATE.get(), LB.get()) else {
        return false;
    };
    let hz = (1_000_000_000 / TICK_NSEC.load(Ordering::Relaxed).max(1)) as u32;
    let online = CpuMask(crate::smp::online_mask());
    let Ok(fresh) = SchedDomains::build_for(&st.topology, online, hz, super::now()) else {
        return false;
    };
    for (i, l) in lbs.iter().enumerate() {
        // Built outside the lock (no allocation under it); the old one is freed after it.
        let mut sds = fresh.clone();
        {
            let mut g = l.lock();
            core::mem::swap(&mut g.sds, &mut sds);
            store_skip_bound(CpuId(i as u16), &g.sds);
        }
        drop(sds);
        if let Some(rq) = st.cpus.get(i) {
            let mut g = rq.lock();
            let now = super::now();
            g.rq.set_next_balance(now);
            super::publish(&g);
        }
    }
    true
}

/// Whether the sched domains were built (load balancing can then be on).
pub fn has_domains() -> bool {
    LB.get().is_some()
}

/// Whether load balancing runs (lock-free: read on every tick and pick).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Turns load balancing on or off at run time (off: nothing is triggered, newidle skipped);
/// false if it cannot be on (no sched domains).
pub fn set_enabled(on: bool) -> bool {
    if on && LB.get().is_none() {
        return false;
    }
    ENABLED.store(on, Ordering::Relaxed);
    true
}

/// `task_on_cpu`: the thread's registers are live on some CPU.
fn task_on_cpu(id: TaskId) -> bool {
    let s = ThreadId::from_task_id(id).slot();
    s < task::MAX_THREADS && task::slot(s).ctx.on_cpu()
}

fn lb_context() -> LbContext {
    let rd = super::root_domain();
    LbContext {
        overutilized: rd.overutilized,
        eas_active: rd.eas,
        uclamp_used: super::uclamp_used(),
        task_on_cpu: Some(TaskOnCpu(task_on_cpu)),
        ..LbContext::new(super::features())
    }
}

/// The run queues as the crate's `RqAccess` (see the module docs).
struct KernelRqs<'t> {
    cpus: &'static [IrqSpinLock<CpuSched>],
    transit: Option<&'t mut Transit>,
    /// CPUs to send a reschedule IPI once the balance is done (a task arrived that
    /// `attach_preempt` says should run).
    kick: CpuMask,
    /// Tasks the crate reported moved.
    moved: u64,
}

impl<'t> KernelRqs<'t> {
    fn new(cpus: &'static [IrqSpinLock<CpuSched>], transit: &'t mut Transit) -> Self {
        KernelRqs {
            cpus,
            transit: Some(transit),
            kick: CpuMask::EMPTY,
            moved: 0,
        }
    }

    /// What the balance left to do once the locks are dropped: `(kick, moved)`.
    fn done(self) -> (CpuMask, u64) {
        (self.kick, self.moved)
    }
}

/// Sends the reschedule requests a balance collected, except to `skip` (a CPU about to pick
/// anyway).
fn kick(mask: CpuMask, skip: Option<CpuId>) {
    for c in mask.iter() {
        if Some(c) != skip {
            super::resched_cpu(c);
        }
    }
}

impl Snapshots for KernelRqs<'_> {
    fn nr_cpus(&self) -> usize {
        self.cpus.len()
    }

    fn snapshot(&self, cpu: CpuId) -> RqSnapshot {
        super::snapshot::read_or_idle(cpu)
    }

    /// The published snapshots are per CPU by construction (`snapshot::publish` stores each
    /// run queue's under its own CPU; an unpublished one reads as that CPU's idle one).
    fn snapshot_cpu(&self, cpu: CpuId) -> CpuId {
        cpu
    }

    fn any_overloaded(&self) -> bool {
        super::snapshot::any_overloaded(self.nr_cpus(), None)
    }
}

impl RqAccess for KernelRqs<'_> {
    fn with_rq<R>(&mut self, cpu: CpuId, f: impl FnOnce(&mut Rq) -> R) -> R {
        let mut g = self.cpus[cpu.index() % self.cpus.len()].lock();
        let cs = &mut *g;
        super::clock_update(cs);
        let before = cs.rq.nr_running();
        let r = f(&mut cs.rq);
        if cs.rq.nr_running() > before && arrivals(cs, cpu) {
            self.kick.set(cpu);
        }
        super::stash_cpufreq(cs);
        super::publish(cs);
        r
    }

    fn moved(&mut self, m: &Moved) {
        let _ = m;
        self.moved += 1;
    }

    fn rd_overloaded(&self) -> bool {
        super::OVERLOADED.load(Ordering::Relaxed)
    }

    fn set_rd_overloaded(&mut self, v: bool) {
        super::OVERLOADED.store(v, Ordering::Relaxed);
    }

    fn with_transit<R>(&mut self, f: impl FnOnce(&mut Self, &mut Transit) -> R) -> R {
        // The crate's moves never nest (one `with_transit` per move, none inside another).
        let Some(t) = self.transit.take() else {
            panic!("sched: nested load-balance moves: the transit lists are in use");
        };
        let r = f(self, t);
        self.transit = Some(t);
        r
    }
}

/// Under `cpu`'s rq lock, after tasks were attached: every queued thread whose `task_cpu` is
/// another CPU has just arrived (`set_task_cpu`). Returns whether one should preempt what runs
/// here (`attach_preempt`).
fn arrivals(cs: &mut CpuSched, cpu: CpuId) -> bool {
    let mut ids: heapless::Vec<TaskId, { lb::MAX_NR_MIGRATE }> = heapless::Vec::new();
    for t in cs.rq.tasks() {
        let s = ThreadId::from_task_id(t.id).slot();
        if s >= task::MAX_THREADS {
            continue;
        }
        let th = task::slot(s);
        let from = th.cpu.load(Ordering::Relaxed);
        if from != cpu.0 {
            th.cpu.store(cpu.0, Ordering::Release);
            th.stats.nr_migrations.fetch_add(1, Ordering::Relaxed);
            tracing::migrate(s, CpuId(from), cpu);
            let _ = ids.push(t.id);
        }
    }
    let mut resched = false;
    for id in ids {
        resched |= sched_core::attach_preempt(&mut cs.rq, id).is_ok_and(|r| r.is_yes());
    }
    resched
}

/// Stores what a balance's statistics decided about the root domain and counts it.
fn account(cpu: CpuId, r: &Result<BalanceReport, lb::BalanceError>, moved: u64) {
    let c = COUNTERS.of(cpu);
    match r {
        Ok(rep) => {
            c.lb_runs
                .fetch_add(u64::from(rep.lb_runs), Ordering::Relaxed);
            c.moved.fetch_add(moved, Ordering::Relaxed);
            let rd = super::root_domain();
            super::set_overutilized(rep.overutilized.and_then(|v| rd.set_rd_overutilized(v)));
            if let Some(req) = rep.active_balance {
                active_balance_start(&req);
            }
        }
        Err(e) => {
            if c.errors.fetch_add(1, Ordering::Relaxed) == 0 {
                crate::println!("sched: cpu {}: {}", cpu.0, e);
            }
        }
    }
}

/// The end of `sched_balance_rq` asking for an active balance (no lock held): under the
/// source's rq lock, unless one is in flight from there already (`busiest->active_balance`),
/// it becomes the one, and the source's stopper is woken (`stop_one_cpu_nowait(cpu_of(busiest),
/// active_load_balance_cpu_stop, ...)`). The crate checked that the source's running task may
/// run on the destination.
fn active_balance_start(req: &ActiveBalance) {
    let Some(st) = STATE.get() else { return };
    let Some(lock) = st.cpus.get(req.src.index()) else {
        return;
    };
    let started = {
        let mut g = lock.lock();
        g.active_balance.is_none() && super::stop::stop_one_cpu_nowait(&mut g) && {
            g.active_balance = Some(*req);
            true
        }
    };
    if started {
        super::resched_cpu(req.src);
    } else if let Some(c) = COUNTERS.get(req.dst) {
        c.active_refused.fetch_add(1, Ordering::Relaxed);
    }
}

/// `active_load_balance_cpu_stop`, run by `cpu`'s stopper (`super::stop`) with the task it
/// preempted off the CPU: the crate's `active_load_balance_cpu_stop` under the destination's
/// balance lock (its sched domains, whose `nr_balance_failed` a push resets, and its transit
/// lists) detaches one task that may run on the destination from this CPU's run queue, under
/// this rq lock, and attaches it under the destination's, one rq lock at a time, through
/// [`KernelRqs`] as every other move (`sched_migrate_task`, `attach_preempt`'s kick). Then the
/// in-flight flag is cleared. `detach_one_task` asks no `task_on_cpu`: the task the stopper
/// preempted was saved by the switch to it, and no other task queued here can be live on a
/// CPU (a wake-up enqueues after `p->on_cpu` cleared; the balancer moves no task on a CPU).
pub(super) fn active_load_balance_cpu_stop(cpu: CpuId) {
    let (Some(st), Some(lbs)) = (STATE.get(), LB.get()) else {
        return;
    };
    let Some(lock) = st.cpus.get(cpu.index()) else {
        return;
    };
    let req = lock.lock().active_balance;
    let Some(req) = req else { return };
    // Linux checks `busiest_cpu != smp_processor_id()`; a balancer turned off meanwhile
    // pushes nothing more.
    let r = match lbs.get(req.dst.index()) {
        Some(l) if req.src == cpu && enabled() => {
            // May wait for the destination's own balance (a bounded wait: a balance holds
            // no lock of this CPU's while it waits for nothing).
            let mut g = l.lock();
            let CpuLb { sds, transit } = &mut *g;
            let mut acc = KernelRqs::new(st.cpus, transit);
            let r = lb::active_load_balance_cpu_stop(sds, &mut acc, &req);
            let (mask, _) = acc.done();
            store_skip_bound(req.dst, sds);
            drop(g);
            kick(mask, None);
            r
        }
        _ => Ok(None),
    };
    lock.lock().active_balance = None;
    let c = COUNTERS.of(req.dst);
    match r {
        Ok(Some(_)) => {
            c.active_pushed.fetch_add(1, Ordering::Relaxed);
            c.moved.fetch_add(1, Ordering::Relaxed);
        }
        Ok(None) => {
            c.active_failed.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            if c.errors.fetch_add(1, Ordering::Relaxed) == 0 {
                crate::println!("sched: cpu {}: active balance: {}", cpu.0, e);
            }
        }
    }
}

/// `TICK_NSEC` of the domains, which `sched_core::sched_tick` reads for an idle CPU's tick
/// (`nohz::idle_tick_kept`).
pub(super) fn tick_nsec() -> u64 {
    TICK_NSEC.load(Ordering::Relaxed)
}

/// `SCHED_SOFTIRQ`'s action on `cpu` (`sched_balance_softirq`), IRQs masked: if this CPU was
/// kicked, the crate's `nohz_idle_balance` walk over the idle CPUs ([`nohz_idle_balance`]);
/// else, or when this CPU is no longer idle (the kick is dropped), `sched_balance_softirq`
/// for itself.
pub fn sched_balance_softirq(cpu: CpuId) {
    let mut flags = NohzKickFlags(
        NOHZ_FLAGS
            .get(cpu)
            .map_or(0, |k| k.swap(0, Ordering::AcqRel)),
    );
    let (Some(st), Some(lbs)) = (STATE.get(), LB.get()) else {
        return;
    };
    // A balance kick sent before load balancing was turned off balances nothing now.
    let parts = nohz_parts(enabled());
    if !parts.balance {
        flags = NohzKickFlags(flags.0 & !NohzKickFlags::BALANCE.0);
    }
    if !parts.stats {
        flags = NohzKickFlags(flags.0 & !NohzKickFlags::STATS.0);
    }
    if nohz_idle_balance(cpu, flags, st) || !enabled() {
        return;
    }
    let Some(l) = lbs.get(cpu.index()) else {
        return;
    };
    // Skipped when a NOHZ balancer works on this CPU's behalf right now.
    balance_pass(st, l, cpu, &COUNTERS.of(cpu).periodic, |sds, acc| {
        lb::sched_balance_softirq(sds, cpu, acc, super::now(), &lb_context())
    });
}

/// One balance pass over `cpu`'s sched domains, `pass`, under its balance lock (nothing when
/// another CPU holds that lock), then what every pass is followed by: the skip bound stored,
/// `counter` counted, the report accounted and the CPUs a task arrived on kicked.
fn balance_pass(
    st: &super::State,
    l: &IrqSpinLock<CpuLb>,
    cpu: CpuId,
    counter: &AtomicU64,
    pass: impl FnOnce(&mut SchedDomains, &mut KernelRqs<'_>) -> Result<BalanceReport, lb::BalanceError>,
) {
    let Some(mut g) = l.try_lock() else {
        return;
    };
    let CpuLb { sds, transit } = &mut *g;
    let mut acc = KernelRqs::new(st.cpus, transit);
    let r = pass(sds, &mut acc);
    let (mask, moved) = acc.done();
    store_skip_bound(cpu, sds);
    drop(g);
    counter.fetch_add(1, Ordering::Relaxed);
    account(cpu, &r, moved);
    kick(mask, None);
}

/// Linux's `nohz_idle_balance` on `this` with `flags` (no lock held): the crate's
/// `nohz_idle_balance` walk through [`KernelNohzWalk`]. Returns whether the kick was handled
/// (`false`: no kick, or `this` no longer idle).
fn nohz_idle_balance(this: CpuId, flags: NohzKickFlags, st: &super::State) -> bool {
    let mut w = KernelNohzWalk {
        this,
        st,
        lbs: LB.get().copied(),
        now: super::now(),
    };
    let tick_ns = TICK_NSEC.load(Ordering::Relaxed);
    let nr = st.cpus.len();
    let hz = crate::timer::hz();
    let start = w.now;
    let Ok(done) = asym_sched::nohz::nohz_idle_balance(this, flags, w.now, tick_ns, hz, nr, &mut w);
    if done {
        let at = NOHZ_WALK_AT.of(this);
        at[0].store(start.0, Ordering::Relaxed);
        at[1].store(super::now().0, Ordering::Relaxed);
        if flags.contains(NohzKickFlags::STATS) {
            COUNTERS.of(this).nohz_stats.fetch_add(1, Ordering::Relaxed);
        }
    }
    done
}

/// Guest ns at the start and the end of the latest NOHZ idle-balance walk `cpu` ran
/// (`(0, 0)` before its first): under `-icount` another CPU's walk takes guest time from
/// every CPU, and the self tests that time wake-ups say when one overlapped theirs.
pub fn last_nohz_walk(cpu: CpuId) -> (Nanos, Nanos) {
    NOHZ_WALK_AT.get(cpu).map_or((Nanos(0), Nanos(0)), |at| {
        (
            Nanos(at[0].load(Ordering::Relaxed)),
            Nanos(at[1].load(Ordering::Relaxed)),
        )
    })
}

/// The idle load balancer's steps in the kernel (the crate's `NohzWalk`), each under at
/// most one rq lock: the NOHZ state is the atomics, a CPU's idleness and `next_balance` its
/// published snapshot, `update_nohz_stats` takes its rq lock ([`update_nohz_stats`]), and a
/// balance its balance lock with a try-lock (a CPU busy with its own balance, or another
/// balancer's, is skipped) and then one rq lock at a time through [`KernelRqs`].
struct KernelNohzWalk<'s> {
    this: CpuId,
    st: &'s super::State,
    lbs: Option<&'static [IrqSpinLock<CpuLb>]>,
    now: Nanos,
}

impl NohzWalk for KernelNohzWalk<'_> {
    type Error = core::convert::Infallible;

    fn idle_cpus(&self) -> CpuMask {
        CpuMask(NOHZ_IDLE_CPUS.load(Ordering::Acquire))
    }

    /// Linux walks `nohz.idle_cpus_mask`, which never holds a CPU that is not active: one
    /// `maxcpus=` left down publishes an idle snapshot but runs nothing.
    fn idle_cpu(&self, cpu: CpuId) -> bool {
        super::snapshot::read(cpu).is_some_and(|s| ilb_candidate(&s))
    }

    fn need_resched(&self) -> bool {
        super::NEED_RESCHED.of(self.this).load(Ordering::Acquire)
    }

    fn update_nohz_stats(&mut self, cpu: CpuId, _j: u64) -> Result<bool, Self::Error> {
        Ok(update_nohz_stats(cpu))
    }

    fn next_balance(&self, cpu: CpuId) -> Nanos {
        super::snapshot::read(cpu).map_or(Nanos(u64::MAX), |s| s.next_balance)
    }

    fn sched_balance_domains(&mut self, c: CpuId) -> Result<(), Self::Error> {
        let Some(l) = self.lbs.and_then(|lbs| lbs.get(c.index())) else {
            return Ok(());
        };
        let now = self.now;
        balance_pass(self.st, l, c, &COUNTERS.of(c).nohz, |sds, acc| {
            lb::sched_balance_domains(sds, c, acc, CpuIdleType::Idle, now, &lb_context())
        });
        Ok(())
    }

    fn set_has_blocked(&mut self, v: bool) {
        NOHZ_HAS_BLOCKED.store(v, Ordering::Release);
    }

    fn set_next_balance(&mut self, j: u64) {
        NOHZ_NEXT_BALANCE.store(j, Ordering::Relaxed);
    }

    fn set_next_blocked(&mut self, j: u64) {
        NOHZ_NEXT_BLOCKED.store(j, Ordering::Relaxed);
    }
}

/// `nohz_balancer_kick` from the tick of busy `cpu` (no lock held): the crate's
/// `Nohz::nohz_balancer_kick` decides whom to kick and with which flags; `kick_ilb` sets them
/// in that CPU's `nohz_flags`, and the first flag set there raises `SCHED_SOFTIRQ` and sends
/// the IPI (a kick already pending carries the new flags too).
pub(super) fn nohz_balancer_kick(cpu: CpuId, this: &RqSnapshot, now: Nanos) {
    if LB.get().is_none() {
        return;
    }
    let Some(st) = STATE.get() else { return };
    // `nohz_balance_exit_idle`: this CPU ticks busy again.
    let bit = CpuMask::of(cpu).0;
    if NOHZ_IDLE_CPUS.load(Ordering::Relaxed) & bit != 0 {
        NOHZ_IDLE_CPUS.fetch_and(!bit, Ordering::AcqRel);
    }
    let j = jiffies(now);
    let view = KernelSnaps(st.cpus.len());
    let mut nohz = nohz_state();
    let old = nohz.next_balance_j;
    let parts = nohz_parts(enabled());
    let Some((ilb, flags)) = nohz.nohz_balancer_kick(this, j, &view, parts) else {
        return;
    };
    // One balance kicker per jiffy: the others see the new deadline (and the kick that won
    // carries the stats kick as well).
    if flags.contains(NohzKickFlags::BALANCE)
        && NOHZ_NEXT_BALANCE
            .compare_exchange(
                old,
                nohz.next_balance_j,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_err()
    {
        return;
    }
    let Some(k) = NOHZ_FLAGS.get(ilb) else {
        return;
    };
    // `kick_ilb`: nothing new for `ilb`, or a kick pending there that now carries these
    // flags too.
    if k.load(Ordering::Acquire) & flags.0 == flags.0 || k.fetch_or(flags.0, Ordering::AcqRel) != 0
    {
        return;
    }
    crate::softirq::raise_on(ilb, crate::softirq::SCHED_SOFTIRQ);
    COUNTERS.of(cpu).kicks_sent.fetch_add(1, Ordering::Relaxed);
    // From the tick's interrupt: no `yield` after the IPI (`ipi::send_no_yield`).
    let _ = crate::ipi::send_no_yield(ilb, crate::ipi::IpiKind::Ping);
}

/// Guest time `t` in jiffies of the domains' `TICK_NSEC`.
fn jiffies(t: Nanos) -> u64 {
    t.0 / TICK_NSEC.load(Ordering::Relaxed)
}

/// The NOHZ state as the crate's [`Nohz`] (its parts are separate atomics here).
fn nohz_state() -> Nohz {
    Nohz {
        idle_cpus: CpuMask(NOHZ_IDLE_CPUS.load(Ordering::Acquire)),
        has_blocked: NOHZ_HAS_BLOCKED.load(Ordering::Acquire),
        next_blocked_j: NOHZ_NEXT_BLOCKED.load(Ordering::Relaxed),
        next_balance_j: NOHZ_NEXT_BALANCE.load(Ordering::Relaxed),
    }
}

/// Whether idle CPUs leave their blocked load to the NOHZ idle balancer, so blocked load does
/// not keep an idle CPU's tick: whenever the sched domains exist, with load balancing on or
/// off (the crate's `nohz_parts`).
pub fn nohz_stats_active() -> bool {
    LB.get().is_some() && nohz_parts(enabled()).stats
}

/// `nohz_balance_enter_idle` for `cs`'s CPU, which just stopped its tick (its rq lock held):
/// it is in `nohz.idle_cpus_mask` with blocked load to decay from now on.
pub(super) fn nohz_enter_idle(cs: &mut CpuSched) {
    if !nohz_stats_active() {
        return;
    }
    let mut n = Nohz::default();
    n.enter_idle(&mut cs.rq);
    NOHZ_IDLE_CPUS.fetch_or(n.idle_cpus.0, Ordering::AcqRel);
    // After the mask, as Linux's `smp_mb()` before `WRITE_ONCE(nohz.has_blocked, 1)`: a
    // balancer that clears `has_blocked` then walks the mask sees this CPU.
    NOHZ_HAS_BLOCKED.store(true, Ordering::Release);
}

/// `nohz_newidle_balance` + `nohz_run_idle_balance` on `cpu` about to wait in idle (no lock
/// held): when it expects to stay idle longer than a migration costs and a blocked-load
/// update is due, it runs that update itself instead of waiting for a kick.
pub(super) fn nohz_run_idle_balance(cpu: CpuId, now: Nanos) {
    if !nohz_stats_active() {
        return;
    }
    let n = nohz_state();
    let j = jiffies(now);
    // The cheap part of the gate first: most idle entries end here without the rq lock.
    if !n.blocked_update_due(j) {
        return;
    }
    let (Some(st), Some(lock)) = (STATE.get(), super::cpu_lock(cpu)) else {
        return;
    };
    let avg_idle = lock.lock().rq.avg_idle();
    if n.newidle_stats_due(avg_idle, j) {
        nohz_idle_balance(cpu, NohzKickFlags::STATS, st);
    }
}

/// `update_nohz_stats` → `sched_balance_update_blocked_averages` for idle `cpu`: under its
/// rq lock, its clock updated, its blocked averages decayed (at most once a jiffy); then, with
/// the lock dropped, schedutil for its domain if they decayed. Whether it still has blocked
/// load.
fn update_nohz_stats(cpu: CpuId) -> bool {
    let Some(lock) = super::cpu_lock(cpu) else {
        return false;
    };
    let (still, update, now, features) = {
        let mut g = lock.lock();
        let cs = &mut *g;
        let now = super::now();
        let j = jiffies(now);
        match blocked_load_check(&nohz_state(), &cs.rq, j) {
            BlockedLoad::Done(still) => return still,
            BlockedLoad::Update => {}
        }
        let now = super::clock_only(cs);
        let (decayed, still) = update_blocked_load(&mut cs.rq, j);
        let update = blocked_load_cpufreq(&mut cs.rq, decayed);
        super::publish(cs);
        (still, update, now, cs.rq.features())
    };
    if update.is_some() {
        crate::cpufreq::update_util(cpu, now, update, features);
    }
    still
}

/// Every CPU's published snapshot, read-only.
struct KernelSnaps(usize);

impl Snapshots for KernelSnaps {
    fn nr_cpus(&self) -> usize {
        self.0
    }

    fn snapshot(&self, cpu: CpuId) -> RqSnapshot {
        super::snapshot::read_or_idle(cpu)
    }

    /// The published snapshots are per CPU by construction (`snapshot::publish` stores each
    /// run queue's under its own CPU; an unpublished one reads as that CPU's idle one).
    fn snapshot_cpu(&self, cpu: CpuId) -> CpuId {
        cpu
    }

    fn any_overloaded(&self) -> bool {
        super::snapshot::any_overloaded(self.nr_cpus(), None)
    }
}

/// Stores `cpu`'s [`NewidleSkipInfo::bound`] from its domains (with its balance lock held,
/// after they changed).
fn store_skip_bound(cpu: CpuId, sds: &SchedDomains) {
    if let Some(b) = NEWIDLE_BOUND.get(cpu) {
        b.store(
            sds.newidle_skip_bound(cpu).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }
}

/// `sched_balance_newidle`'s closed gate decided where Linux decides it, under this CPU's
/// rq lock (`cs`, clock updated at `now`), before any unlock: when no CPU is overloaded the
/// gate closes whatever `avg_idle` is, and the crate's [`lb::sched_balance_newidle_skipped`]
/// does on `cs` what the whole newidle balance would (misfit cleared, `next_balance` pulled).
/// Returns false when the gate may open (or there are no domains): the caller unlocks and
/// runs [`sched_balance_newidle`]. A balancer working on this CPU's domains right now makes
/// the whole path return at once, so this does nothing then either.
pub(super) fn newidle_skipped_locked(cpu: CpuId, cs: &mut CpuSched, now: Nanos) -> bool {
    let (Some(lbs), Some(&(hz, asym)), Some(bound)) =
        (LB.get(), SKIP_CONST.get(), NEWIDLE_BOUND.get(cpu))
    else {
        return false;
    };
    let Some(l) = lbs.get(cpu.index()) else {
        return false;
    };
    let features = super::features();
    // update_misfit_status(NULL, this_rq) before the gate, under the lock, as Linux does
    // (asymmetric systems only; both paths below clear it too).
    if asym {
        cs.rq.set_misfit_task_load(0);
    }
    // get_rd_overloaded(this_rq->rd), the crate's rule: this CPU as it is now, the others as
    // published.
    let overloaded = lb::newidle_rd_overloaded(
        features,
        || super::OVERLOADED.load(Ordering::Relaxed),
        cs.rq.overloaded(),
        || super::snapshot::any_overloaded(super::nr_cpus(), Some(cpu)),
    );
    if overloaded {
        return false;
    }
    if l.is_locked() {
        return true;
    }
    let b = bound.load(Ordering::Relaxed);
    let info = NewidleSkipInfo {
        bound: (b != u64::MAX).then_some(b),
        hz,
        tick_nsec: TICK_NSEC.load(Ordering::Relaxed),
        asym_cpucapacity: asym,
    };
    lb::sched_balance_newidle_skipped(&mut cs.rq, &info, now, features);
    COUNTERS.of(cpu).newidle.fetch_add(1, Ordering::Relaxed);
    true
}

/// `sched_balance_newidle` for `cpu`, from `schedule()` with no rq lock held and IRQs masked.
/// Returns whether a task arrived (pulled, or woken meanwhile).
pub(super) fn sched_balance_newidle(cpu: CpuId) -> bool {
    let (Some(st), Some(lbs)) = (STATE.get(), LB.get()) else {
        return false;
    };
    let Some(l) = lbs.get(cpu.index()) else {
        return false;
    };
    let Some(mut g) = l.try_lock() else {
        // A NOHZ balancer works on this CPU's behalf right now.
        return false;
    };
    let CpuLb { sds, transit } = &mut *g;
    let mut acc = KernelRqs::new(st.cpus, transit);
    let mut clock = || super::now().0;
    let r = lb::sched_balance_newidle(sds, cpu, &mut acc, super::now(), &lb_context(), &mut clock);
    let (mask, moved) = acc.done();
    store_skip_bound(cpu, sds);
    drop(g);
    let c = COUNTERS.of(cpu);
    c.newidle.fetch_add(1, Ordering::Relaxed);
    if r.is_ok() {
        c.newidle_moved.fetch_add(moved, Ordering::Relaxed);
    }
    account(cpu, &r, moved);
    // This CPU picks next anyway.
    kick(mask, Some(current_cpu()));
    r.is_ok_and(|rep| rep.pulled)
}
