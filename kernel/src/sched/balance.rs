//! Load balancing in the kernel: the policy crate's balancer (`asym_sched::balance`) driven the
//! way Linux's `kernel/sched/fair.c` drives it.
//!
//! - **Periodic**: the tick asks `sched_balance_trigger` (`time_after_eq(jiffies,
//!   rq->next_balance)`) under its rq lock and raises `SCHED_SOFTIRQ` ([`crate::softirq`]);
//!   on the interrupt's exit [`sched_balance_softirq`] runs the crate's `sched_balance_softirq`
//!   (`run_rebalance_domains`) for this CPU.
//! - **NOHZ balance kick**: a busy tick asks the crate's `Nohz::balance_kick`
//!   (`nohz_balancer_kick`'s `NOHZ_BALANCE_KICK`, once per jiffy) whom to kick; that idle CPU
//!   gets `SCHED_SOFTIRQ` raised and an IPI, and its softirq balances every idle CPU whose
//!   `rq->next_balance` is due, itself last (`_nohz_idle_balance`), each with that CPU's own
//!   sched domains.
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
//! Runtime switch: `sched_balance=on|off` on the command line ([`set_enabled`]); off, the
//! kernel behaves as before load balancing existed (no trigger, no newidle, no misfit status).
//!
//! Active balance: a balance whose report asks for one (the crate's `ActiveBalance`, misfit
//! or after repeated failures) makes it the source's one in flight and wakes the source's
//! stopper (`super::stop`), which runs [`active_load_balance_cpu_stop`] with the preempted
//! task off the CPU.
//!
//! - **NOHZ blocked load** (`NOHZ_STATS_KICK`): an idle CPU stops its tick with blocked load
//!   left (`nohz_balance_enter_idle`, [`nohz_enter_idle`]); a busy tick asks the crate's
//!   `Nohz::stats_kick` whether `nohz.next_blocked` has passed and kicks the idle load
//!   balancer, whose `_nohz_idle_balance(NOHZ_STATS_KICK)` decays every tickless idle CPU's
//!   blocked averages under that CPU's rq lock (`update_nohz_stats`) and runs schedutil for each
//!   that decayed, every `LOAD_AVG_PERIOD` (32 ms); a CPU about to idle that expects to stay
//!   idle longer than a migration costs does the same itself when it is due
//!   (`nohz_newidle_balance` → `nohz_run_idle_balance`, [`nohz_run_idle_balance`]). With
//!   every CPU idle nothing decays, as on Linux. With `sched_balance=off` an idle CPU keeps
//!   its tick while its own blocked averages decay instead.
//!
//! Deliberate differences: a kicked CPU walks the idle CPUs once for the blocked load and
//! once for balancing (Linux does both in one `_nohz_idle_balance` walk); an idle CPU whose tick
//! still runs decays its own blocked averages at every tick (Linux at its `SCHED_SOFTIRQ`).

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

use alloc::boxed::Box;
use alloc::vec::Vec;
use asym_sched::balance::{
    self as lb, ActiveBalance, BalanceReport, CpuIdleType, LbContext, Moved, NewidleSkipInfo,
    RqAccess, SchedDomains, Snapshots, TaskOnCpu, Transit,
};
use asym_sched::features::Feature;
use asym_sched::nohz::{
    blocked_load_check, idle_tick_kept, ilb_order, nohz_balance_due, update_blocked_load,
    BlockedLoad, Nohz,
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
/// Per CPU: the NOHZ kicks pending for it (`nohz_flags(cpu)`: [`NOHZ_BALANCE_KICK`],
/// [`NOHZ_STATS_KICK`]).
static NOHZ_FLAGS: PerCpu<AtomicU8> = PerCpu::new([const { AtomicU8::new(0) }; MAX_CPUS]);
/// `NOHZ_BALANCE_KICK`: balance the idle CPUs whose `next_balance` is due.
const NOHZ_BALANCE_KICK: u8 = 1;
/// `NOHZ_STATS_KICK`: decay the idle CPUs' blocked load.
const NOHZ_STATS_KICK: u8 = 2;
/// `nohz.idle_cpus_mask`: CPUs that stopped their tick going idle and have not ticked busy
/// since (`rq->nohz_tick_stopped`).
static NOHZ_IDLE_CPUS: AtomicU64 = AtomicU64::new(0);
/// `nohz.has_blocked`: some tickless idle CPU may still have blocked load to decay.
static NOHZ_HAS_BLOCKED: AtomicBool = AtomicBool::new(false);
/// `nohz.next_blocked` (jiffies): when the next blocked-load update is due.
static NOHZ_NEXT_BLOCKED: AtomicU64 = AtomicU64::new(0);

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
    /// `_nohz_idle_balance(NOHZ_STATS_KICK)` walks this CPU ran (kicked, or itself about
    /// to idle), each decaying every tickless idle CPU's blocked load.
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

/// The tick's `sched_balance_trigger` under `cs`'s lock: should `SCHED_SOFTIRQ` be raised?
/// A busy CPU's tick asks (`busy`: Linux's `!idle_cpu()`, a thread on the CPU or tasks
/// queued); an idle CPU's only where Linux would have kept its tick
/// (`nohz::idle_tick_kept`: its last idle period was shorter than a tick), as the simulator
/// does: the kernel's other idle ticks (blocked-load decay, which Linux leaves to the NOHZ
/// idle balancer) do not balance, and a tickless idle CPU is balanced by a NOHZ kick.
pub(super) fn trigger(now: Nanos, cs: &CpuSched, busy: bool) -> bool {
    enabled()
        && LB.get().is_some()
        && (busy || idle_tick_kept(&cs.rq, TICK_NSEC.load(Ordering::Relaxed), true))
        && lb::sched_balance_trigger(now, &cs.rq)
}

/// `SCHED_SOFTIRQ`'s action on `cpu` (`run_rebalance_domains`), IRQs masked: a NOHZ balance
/// for the idle CPUs if this CPU was kicked, else `sched_balance_softirq` for itself.
pub fn sched_balance_softirq(cpu: CpuId) {
    let flags = NOHZ_FLAGS
        .get(cpu)
        .map_or(0, |k| k.swap(0, Ordering::AcqRel));
    if !enabled() {
        return;
    }
    let (Some(st), Some(lbs)) = (STATE.get(), LB.get()) else {
        return;
    };
    if flags & NOHZ_STATS_KICK != 0 {
        nohz_stats_update(cpu, st);
        if flags & NOHZ_BALANCE_KICK == 0 {
            // Linux's `nohz_idle_balance` returns true for any kick: the kicked CPU does not
            // balance its own domains in the same softirq.
            return;
        }
    }
    if flags & NOHZ_BALANCE_KICK != 0 && nohz_idle_balance(cpu, st, lbs) {
        return;
    }
    let Some(l) = lbs.get(cpu.index()) else {
        return;
    };
    let Some(mut g) = l.try_lock() else {
        // A NOHZ balancer works on this CPU's behalf right now.
        return;
    };
    let CpuLb { sds, transit } = &mut *g;
    let mut acc = KernelRqs::new(st.cpus, transit);
    let r = lb::sched_balance_softirq(sds, cpu, &mut acc, super::now(), &lb_context());
    let (mask, moved) = acc.done();
    store_skip_bound(cpu, sds);
    drop(g);
    COUNTERS.of(cpu).periodic.fetch_add(1, Ordering::Relaxed);
    account(cpu, &r, moved);
    kick(mask, None);
}

/// `_nohz_idle_balance(NOHZ_BALANCE_KICK)` on kicked `this`: `sched_balance_domains(CPU_IDLE)`
/// for every idle CPU whose `next_balance` is due, from the one after `this`, `this` last; then
/// `nohz.next_balance` is the earliest next balance seen. Returns whether `this` was balanced.
fn nohz_idle_balance(this: CpuId, st: &super::State, lbs: &[IrqSpinLock<CpuLb>]) -> bool {
    let now = super::now();
    let mut next: Option<u64> = None;
    let mut this_done = false;
    for c in ilb_order(this, st.cpus.len()) {
        let Some(snap) = super::snapshot::read(c) else {
            continue;
        };
        // Linux walks `nohz.idle_cpus_mask`, which never holds a CPU that is not active: one
        // `maxcpus=` left down publishes an idle snapshot but runs nothing.
        if !snap.online || (!snap.pelt.idle && c != this) {
            continue;
        }
        let Some(l) = lbs.get(c.index()) else {
            continue;
        };
        // A CPU busy with its own balance, or another balancer's, is skipped.
        let Some(mut g) = l.try_lock() else { continue };
        if nohz_balance_due(&snap, now) {
            let CpuLb { sds, transit } = &mut *g;
            let mut acc = KernelRqs::new(st.cpus, transit);
            let r = if c == this {
                lb::sched_balance_softirq(sds, c, &mut acc, now, &lb_context())
            } else {
                lb::sched_balance_domains(sds, c, &mut acc, CpuIdleType::Idle, now, &lb_context())
            };
            let (mask, moved) = acc.done();
            store_skip_bound(c, sds);
            drop(g);
            COUNTERS.of(c).nohz.fetch_add(1, Ordering::Relaxed);
            account(c, &r, moved);
            kick(mask, None);
            this_done |= c == this;
        } else {
            drop(g);
        }
        if let Some(s) = super::snapshot::read(c) {
            let j = jiffies(s.next_balance);
            next = Some(next.map_or(j, |n| n.min(j)));
        }
    }
    let mut nohz = Nohz {
        next_balance_j: NOHZ_NEXT_BALANCE.load(Ordering::Relaxed),
        ..Nohz::default()
    };
    nohz.balance_done(next);
    NOHZ_NEXT_BALANCE.store(nohz.next_balance_j, Ordering::Relaxed);
    this_done
}

/// `nohz_balancer_kick`'s `NOHZ_BALANCE_KICK` from the tick of busy `cpu` (no lock held): the
/// crate's `Nohz::balance_kick` decides whom; that CPU gets `SCHED_SOFTIRQ` and an IPI.
pub(super) fn nohz_balancer_kick(cpu: CpuId, this: &RqSnapshot, now: Nanos) {
    if !enabled() || LB.get().is_none() {
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
    let mut flags = 0;
    let mut target = nohz_state().stats_kick(cpu, j, &view);
    if target.is_some() {
        flags |= NOHZ_STATS_KICK;
    }
    let old = NOHZ_NEXT_BALANCE.load(Ordering::Relaxed);
    let mut nohz = Nohz {
        next_balance_j: old,
        ..Nohz::default()
    };
    // One balance kicker per jiffy: the others see the new deadline.
    if let Some(ilb) = nohz.balance_kick(this, j, &view) {
        if NOHZ_NEXT_BALANCE
            .compare_exchange(
                old,
                nohz.next_balance_j,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            flags |= NOHZ_BALANCE_KICK;
            target = Some(ilb);
        }
    }
    let Some(ilb) = target else { return };
    let Some(k) = NOHZ_FLAGS.get(ilb) else {
        return;
    };
    // `kick_ilb`: a kick already pending there carries these flags too.
    if k.fetch_or(flags, Ordering::AcqRel) != 0 {
        return;
    }
    crate::softirq::raise_on(ilb, crate::softirq::SCHED_SOFTIRQ);
    COUNTERS.of(cpu).kicks_sent.fetch_add(1, Ordering::Relaxed);
    let _ = crate::ipi::send(ilb, crate::ipi::IpiKind::Ping);
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

/// Whether idle CPUs leave their blocked load to the NOHZ idle balancer (load balancing on),
/// so blocked load does not keep an idle CPU's tick.
pub fn nohz_stats_active() -> bool {
    enabled() && LB.get().is_some()
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
    if !n.has_blocked || j < n.next_blocked_j {
        return;
    }
    let (Some(st), Some(lock)) = (STATE.get(), super::cpu_lock(cpu)) else {
        return;
    };
    let avg_idle = lock.lock().rq.avg_idle();
    if n.newidle_stats_due(avg_idle, lb::SYSCTL_SCHED_MIGRATION_COST_NS, j) {
        nohz_stats_update(cpu, st);
    }
}

/// `_nohz_idle_balance(NOHZ_STATS_KICK)` on `this` (no lock held): `update_nohz_stats` for
/// every idle CPU from the one after `this`, `this` last; the next update is due
/// `LOAD_AVG_PERIOD` later.
fn nohz_stats_update(this: CpuId, st: &super::State) {
    NOHZ_HAS_BLOCKED.store(false, Ordering::Release);
    let mut has_blocked = false;
    for c in ilb_order(this, st.cpus.len()) {
        let idle = super::snapshot::read(c).is_some_and(|s| s.online && s.pelt.idle);
        if idle {
            has_blocked |= update_nohz_stats(c);
        }
    }
    let j = jiffies(super::now());
    let mut n = nohz_state();
    n.stats_end(has_blocked, j, crate::timer::hz());
    NOHZ_NEXT_BLOCKED.store(n.next_blocked_j, Ordering::Relaxed);
    if has_blocked {
        NOHZ_HAS_BLOCKED.store(true, Ordering::Release);
    }
    COUNTERS.of(this).nohz_stats.fetch_add(1, Ordering::Relaxed);
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
        let update = cs.rq.take_cpufreq_update().filter(|_| decayed);
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
    // get_rd_overloaded: this CPU as it is now (the whole path publishes it first, with the
    // misfit load it clears only on asymmetric systems), the others as published.
    let overloaded = if features.enabled(Feature::STICKY_OVERLOADED) {
        super::OVERLOADED.load(Ordering::Relaxed)
    } else {
        cs.rq.nr_running() > 1
            || (!asym && cs.rq.misfit_task_load() > 0)
            || super::snapshot::any_overloaded(super::nr_cpus(), Some(cpu))
    };
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
