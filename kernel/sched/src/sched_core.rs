//! The scheduler core's steps: wake-up, `schedule()`, the tick and exit, as values.
//!
//! Re-derives the fair-class sequences of Linux v6.12 `kernel/sched/core.c` —
//! `try_to_wake_up` (`select_task_rq`, `set_task_cpu` → `migrate_task_rq_fair`,
//! `ttwu_do_activate`: `activate_task`, `wakeup_preempt`, the `avg_idle` update),
//! `wake_up_new_task`, `__schedule` (`pick_next_task` with `pick_next_task_fair`'s newidle
//! balance), `sched_tick` — and the `fair.c` hooks they reach (`task_tick_fair` with
//! `update_misfit_status`, `check_update_overutilized_status`, `task_dead_fair`). Each step
//! takes the state it may touch — one [`Rq`] (`&mut`, under that CPU's rq lock), other CPUs
//! only through their published [`RqSnapshot`]s — and returns its decisions (where to run,
//! whether to reschedule, the root domain's new flag) for the caller to carry out. The
//! kernel and the simulator call the same steps; the caller owns time, locks, IPIs, the
//! context switch and tracing.
//!
//! # Call sequences and locks (kernel)
//!
//! | path | steps, in order (locks in brackets) |
//! |---|---|
//! | wake-up | [task's own lock] read the snapshots → [`ttwu_select`] (only when [`select_task_rq_wanted`]; else the one allowed CPU) → if the CPU changes: [`migrate_task_rq_fair`](crate::rq::migrate_task_rq_fair) over the old CPU's [`RqSnapshot::pelt`] and add the result to the old CPU's removed load [its leaf lock] → [`RQ[target]`] `update_rq_clock`, `apply_removed`, [`ttwu_activate`], publish the snapshot, store a changed overutilized flag → drop the locks, send a reschedule IPI if [`WakeOutcome::resched`] and the target is another CPU |
//! | `schedule()` | [`RQ[this]`] `update_rq_clock`, `apply_removed`, dequeue the blocking task (`DEQUEUE_SLEEP`: [`block_task`] without `DELAY_DEQUEUE`, which the kernel refuses) → [`schedule_pick`] → on [`Pick::Newidle`]: newidle's closed gate under the lock (`balance::newidle_skipped_locked`: no CPU overloaded), else drop the rq lock, `balance::sched_balance_newidle` (it locks one rq at a time), retake it, [`schedule_repick`] → [`schedule_finish`] → publish → cpufreq (after dropping the rq lock) → context switch; on switching to idle, [`idle_enter`] |
//! | tick | [`RQ[this]`] `update_rq_clock`, `apply_removed`, `set_freq_scale`, [`sched_tick`] (task tick, misfit, overutilized, `idle_cpu`, the balance trigger; the kernel also decays an idle CPU's blocked averages), publish → (no rq lock) store [`TickSteps::overutilized`], raise `SCHED_SOFTIRQ` on [`TickSteps::softirq`] (without load balancing: claim [`TickSteps::root_stats`] and run `RootDomain::update_root_stats` over the snapshots), the NOHZ kick on [`TickSteps::nohz_kick`]; cpufreq → the softirq at `irq_exit` → `schedule()` on [`TickSteps::resched`] at the interrupt's return |
//! | NOHZ kick | (busy tick, no rq lock; the NOHZ state is atomics) [`crate::nohz::Nohz::nohz_balancer_kick`] → set the flags on the kicked CPU, raise `SCHED_SOFTIRQ` there and send one IPI → its softirq (or a CPU going idle, stats only) runs [`crate::nohz::nohz_idle_balance`], whose [`crate::nohz::NohzWalk`] takes one lock at a time: [`RQ[cpu]`] for each idle CPU's blocked-load update (cpufreq after dropping it), that CPU's balance lock then one rq lock at a time for its `sched_balance_domains(CPU_IDLE)` |
//! | exit | `schedule()` as above, the dying task blocking through [`block_task`] with `special` (`DEQUEUE_SLEEP \| DEQUEUE_SPECIAL`, `TASK_DEAD`) → context switch → on the next thread, after it released the rq lock handed over (`finish_task_switch`): [`task_dead_fair`] over this CPU's published [`RqSnapshot::pelt`], the result added to this CPU's removed load [its leaf lock] → release the dead thread's stack |
//!
//! Delayed dequeue (`DELAY_DEQUEUE`, v6.12; the simulator only, the kernel refuses it): the
//! blocking task's dequeue is [`block_task`], which may leave it queued; the pick is then
//! [`schedule_pick_with`] / [`schedule_repick_with`], which hand back each delayed task whose
//! dequeue they finish (`pick_next_entity`); a wake-up first tries [`ttwu_runnable`] on the
//! task's CPU (`try_to_wake_up`: `p->on_rq && ttwu_runnable()`), and only a task that is not
//! queued goes on to [`ttwu_select`] and [`ttwu_activate`].
//!
//! No step allocates, blocks or takes a lock; none holds two run queues.
//!
//! Deliberate differences: `update_misfit_status` runs only while load balancing is on
//! ([`CoreCtx::load_balance`]; misfit has no other reader); `avg_idle` is capped at
//! `2 * sysctl_sched_migration_cost` rather than `2 * rq->max_idle_balance_cost`; without load
//! balancing the tick still runs the root level's overutilized statistics, once per root
//! interval ([`TickSteps::root_stats`], see [`crate::root_domain`]).

use crate::balance::{sched_balance_trigger, SYSCTL_SCHED_MIGRATION_COST_NS};
use crate::cpu_util::TaskUtil;
use crate::eas::EasTask;
use crate::em::EnergyModel;
use crate::features::SchedFeatures;
use crate::nohz::idle_tick_kept;
use crate::pelt::RemovedLoad;
use crate::root_domain::RootDomain;
use crate::rq::{
    remove_entity_load_avg, synced_avg, Block, DequeueFlags, EnqueueError, EnqueueFlags,
    PeltRemote, Rq, RqError, RqSnapshot, Task,
};
use crate::topology::Topology;
use crate::types::{CpuId, CpuMask, Nanos, TaskId};
use crate::uclamp::{uclamp_eff_range, UclampSysctl};
use crate::wakeup::{select_task_rq_fair, select_task_rq_interim, WakeKind, WakerInfo, WakeupView};

pub use crate::rq::Resched;

/// Which placement rule a wake-up uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Placement {
    /// Linux's `select_task_rq_fair` ([`crate::wakeup`]).
    #[default]
    Linux,
    /// The interim rule ([`select_task_rq_interim`]) wherever EAS does not place the task,
    /// kept to compare with earlier measurements.
    Interim,
}

/// The system-wide inputs every step reads.
#[derive(Clone, Copy, Debug)]
pub struct CoreCtx<'a> {
    /// CPUs, clusters and capacities.
    pub topology: &'a Topology,
    /// The feature set.
    pub features: SchedFeatures,
    /// `sched_uclamp_used`.
    pub uclamp_used: bool,
    /// Load balancing is on (periodic, newidle, misfit).
    pub load_balance: bool,
}

/// What the wake-up selection reads.
#[derive(Clone, Copy, Debug)]
pub struct WakeCtx<'a> {
    /// The common inputs.
    pub core: CoreCtx<'a>,
    /// Every CPU's published snapshot, indexed by CPU.
    pub cpus: &'a [RqSnapshot],
    /// The energy model when EAS is enabled (`sched_energy_enabled()`), else `None`.
    pub em: Option<&'a EnergyModel>,
    /// The root domain's flags (overutilized).
    pub rd: RootDomain,
    /// The uclamp sysctls (`uclamp_eff_value`).
    pub uclamp_sysctl: UclampSysctl,
    /// The placement rule.
    pub placement: Placement,
    /// The waker (`WF_SYNC`, `wake_wide`) for `wake_affine`.
    pub waker: WakerInfo,
}

/// What [`ttwu_activate`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WakeOutcome {
    /// `wakeup_preempt`: the target's running task should make way (an idle target always
    /// reschedules); on another CPU that is a reschedule IPI.
    pub resched: Resched,
    /// The root domain's overutilized flag changed to this value (the caller stores it).
    pub overutilized: Option<bool>,
    /// The enqueue gave the target its second task: `add_nr_running` sets the root
    /// domain's overloaded flag ([`RootDomain::overloaded`]; the caller stores `true`).
    pub overloaded: bool,
}

/// The first half of `schedule()`'s pick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pick {
    /// Run this task.
    Next(TaskId),
    /// Nothing to run: go idle.
    Idle,
    /// Nothing to run and load balancing is on: drop this rq's lock, run
    /// `balance::sched_balance_newidle` for this CPU, retake the lock and call
    /// [`schedule_repick`].
    Newidle,
}

/// `select_task_rq`'s test before the class's own: `p->nr_cpus_allowed > 1 &&
/// !is_migration_disabled(p)` (migration is never disabled here). Only then does Linux call
/// `select_task_rq_fair` — [`ttwu_select`] here — and, for a wake-up, the waker's
/// `record_wakee` in it ([`crate::wakeup::WakeeFlips::record_wakee`]); a task allowed on one
/// CPU goes there (`cpumask_any(p->cpus_ptr)`) and counts no wakee flip.
pub fn select_task_rq_wanted(allowed: CpuMask) -> bool {
    allowed.weight() > 1
}

/// `select_task_rq` for a waking (or, with [`WakeKind::Fork`], new) task `p` that last
/// ran on `prev`, woken from `this_cpu`: read-only over the snapshots. Syncs a copy of a
/// waking task's signals to `prev` (`sync_entity_load_avg`), then Linux's
/// `select_task_rq_fair` (EAS while the root domain is not overutilized, else the
/// capacity-aware `select_idle_sibling`; forks take the slow path), or the interim rule
/// where [`Placement::Interim`] asks for it or the answer cannot be used. The result is
/// allowed whenever `p` allows any CPU.
pub fn ttwu_select(
    p: &Task,
    prev: CpuId,
    this_cpu: CpuId,
    kind: WakeKind,
    ctx: &WakeCtx<'_>,
) -> CpuId {
    let allowed = p.cpus_allowed;
    let interim = || select_task_rq_interim(prev, allowed, ctx.cpus);
    if ctx.placement == Placement::Interim
        && (ctx.em.is_none() || kind == WakeKind::Fork || ctx.rd.overutilized)
    {
        return interim();
    }
    // wake_affine_weight reads task_h_load(p) before select_idle_sibling syncs it.
    let load_avg = p.avg.load_avg;
    let avg = match kind {
        WakeKind::Fork => p.avg,
        WakeKind::Wakeup => {
            let Some(snap) = ctx.cpus.get(prev.index()) else {
                return interim();
            };
            match synced_avg(&snap.pelt, p) {
                Ok(avg) => avg,
                Err(_) => return interim(),
            }
        }
    };
    let et = EasTask {
        util: TaskUtil::from_avg(&avg, prev, false),
        clamp: uclamp_eff_range(&p.uclamp, &ctx.uclamp_sysctl, false),
        allowed,
        load_avg,
    };
    let view = WakeupView {
        cpus: ctx.cpus,
        topology: ctx.core.topology,
        em: ctx.em,
        overutilized: ctx.rd.overutilized,
        features: ctx.core.features,
        uclamp_used: ctx.core.uclamp_used,
        waker: ctx.waker,
    };
    let cpu = select_task_rq_fair(&et, prev, this_cpu, kind, &view);
    if cpu.index() < ctx.cpus.len() && allowed.contains(cpu) {
        cpu
    } else {
        interim()
    }
}

/// `ttwu_do_activate` on the target CPU, under its rq lock after its clock update: fold
/// the idle time a wake-up ends into `avg_idle`, `enqueue_task` (`ENQUEUE_WAKEUP`, with
/// `ENQUEUE_MIGRATED` when the task changed CPU, or `wake_up_new_task`'s initial enqueue),
/// `wakeup_preempt`, then `check_update_overutilized_status` for this CPU (a wake-up, not a
/// new task; no other CPU is read). A refused enqueue hands the task back.
#[allow(clippy::result_large_err)] // the refused task must be handed back, not lost
pub fn ttwu_activate(
    rq: &mut Rq,
    task: Task,
    kind: WakeKind,
    migrated: bool,
    rd: &RootDomain,
    ctx: &CoreCtx<'_>,
) -> Result<WakeOutcome, EnqueueError> {
    let mut slot = Some(task);
    match ttwu_activate_from(rq, &mut slot, kind, migrated, rd, ctx) {
        Ok(out) => Ok(out),
        Err(reason) => match slot {
            Some(task) => Err(EnqueueError { reason, task }),
            None => unreachable!("a refused enqueue took the task"),
        },
    }
}

/// [`ttwu_activate`] of the task in `slot` (where the caller kept it while it slept),
/// moved into `rq` once by [`Rq::enqueue_task_from`]; a refusal leaves it in `slot`.
pub fn ttwu_activate_from(
    rq: &mut Rq,
    slot: &mut Option<Task>,
    kind: WakeKind,
    migrated: bool,
    rd: &RootDomain,
    ctx: &CoreCtx<'_>,
) -> Result<WakeOutcome, RqError> {
    let Some(id) = slot.as_ref().map(|t| t.id) else {
        return Err(RqError::NoTask { cpu: rq.cpu() });
    };
    rq.update_avg_idle(2 * SYSCTL_SCHED_MIGRATION_COST_NS);
    let mut flags = match kind {
        WakeKind::Fork => EnqueueFlags::NEW,
        WakeKind::Wakeup => EnqueueFlags::WAKEUP,
    };
    if migrated {
        flags = flags | EnqueueFlags::MIGRATED;
    }
    let nr_before = rq.nr_running();
    rq.enqueue_task_from(slot, flags)?;
    let overloaded = nr_before < 2 && rq.nr_running() >= 2;
    // The task was just enqueued here, so the preemption check finds it.
    let resched = Resched::from_bool(rq.check_preempt_wakeup(id).unwrap_or(true));
    // enqueue_task_fair: `if (!task_new) check_update_overutilized_status(rq)`.
    let overutilized = match kind {
        WakeKind::Fork => None,
        WakeKind::Wakeup => own_overutilized(rq, rd, ctx),
    };
    Ok(WakeOutcome {
        resched,
        overutilized,
        overloaded,
    })
}

/// `try_to_wake_up`'s `ttwu_runnable` for a task still queued on `rq` because its dequeue was
/// delayed (`DELAY_DEQUEUE`), under that rq's lock after its clock update: no
/// `select_task_rq` (so no wake-up placement, EAS or otherwise, and no `record_wakee`), no
/// migration, no `avg_idle` update; `enqueue_task(ENQUEUE_DELAYED)`
/// ([`Rq::requeue_delayed_task`]) and `wakeup_preempt`. `enqueue_task_fair` returns right
/// after `requeue_delayed_entity`, so neither the overutilized nor the overloaded flag is
/// touched. Returns `Ok(None)` when `id` is not delayed on `rq` (not queued there: the
/// caller takes the usual path, [`ttwu_select`] then [`ttwu_activate`]).
pub fn ttwu_runnable(rq: &mut Rq, id: TaskId) -> Result<Option<WakeOutcome>, RqError> {
    if !rq.task(id).is_some_and(|t| t.se.sched_delayed) {
        return Ok(None);
    }
    rq.requeue_delayed_task(id)?;
    // `!task_on_cpu(rq, p)`: a delayed task is never the running one here.
    let resched = Resched::from_bool(rq.check_preempt_wakeup(id)?);
    Ok(Some(WakeOutcome {
        resched,
        overutilized: None,
        overloaded: false,
    }))
}

/// `__schedule`'s `block_task` for the running task `id` of `rq` (under its lock, after its
/// clock update): `dequeue_task(DEQUEUE_SLEEP)`, with `DEQUEUE_SPECIAL` when it blocks in a
/// special state (`special`: here, exit — `TASK_DEAD`). Under `DELAY_DEQUEUE` a task that is
/// not eligible stays queued ([`Block::Delayed`]; see [`Rq::block_task_into`]); otherwise it
/// is moved into `out`. Then [`schedule_pick_with`].
pub fn block_task(
    rq: &mut Rq,
    id: TaskId,
    special: bool,
    out: &mut Option<Task>,
) -> Result<Block, RqError> {
    let flags = if special {
        DequeueFlags::SLEEP | DequeueFlags::SPECIAL
    } else {
        DequeueFlags::SLEEP
    };
    rq.block_task_into(id, flags, out)
}

/// `attach_task`'s `wakeup_preempt` for a task the balancer moved to `rq` (under its
/// lock): an idle CPU always runs it; a busy one reschedules if EEVDF says so.
pub fn attach_preempt(rq: &mut Rq, id: TaskId) -> Result<Resched, RqError> {
    if rq.curr_is_idle() {
        return Ok(Resched::Yes);
    }
    rq.check_preempt_wakeup(id).map(Resched::from_bool)
}

/// `__schedule`'s `pick_next_task` under this CPU's rq lock (after a blocking task was
/// dequeued): `put_prev_task` + `pick_next_task_fair`. With load balancing on, finding
/// nothing asks the caller for a newidle balance ([`Pick::Newidle`]).
///
/// For a caller that never has delayed tasks (`DELAY_DEQUEUE` off); otherwise
/// [`schedule_pick_with`].
pub fn schedule_pick(rq: &mut Rq, ctx: &CoreCtx<'_>) -> Pick {
    schedule_pick_with(rq, ctx, &mut |_| {
        debug_assert!(false, "a delayed task was picked: use schedule_pick_with");
    })
}

/// [`schedule_pick`] handing every delayed task whose dequeue the pick finished
/// (`pick_next_entity` → `dequeue_entities(DEQUEUE_SLEEP | DEQUEUE_DELAYED)` →
/// `__block_task`) to `blocked`: from then on the caller owns it as a sleeping task.
pub fn schedule_pick_with(rq: &mut Rq, ctx: &CoreCtx<'_>, blocked: &mut dyn FnMut(Task)) -> Pick {
    if !ctx.load_balance {
        return match rq.pick_next_task_with(blocked) {
            Some(id) => Pick::Next(id),
            None => Pick::Idle,
        };
    }
    // The rq goes idle (clock_pelt resync) only after newidle found nothing.
    match rq.pick_next_task_before_newidle_with(blocked) {
        Some(id) => Pick::Next(id),
        None => Pick::Newidle,
    }
}

/// The pick after a newidle balance (`goto again` when it pulled something): never
/// [`Pick::Newidle`]. For a caller that never has delayed tasks; otherwise
/// [`schedule_repick_with`].
pub fn schedule_repick(rq: &mut Rq) -> Pick {
    schedule_repick_with(rq, &mut |_| {
        debug_assert!(false, "a delayed task was picked: use schedule_repick_with");
    })
}

/// [`schedule_repick`] handing finished delayed tasks to `blocked` (see
/// [`schedule_pick_with`]).
pub fn schedule_repick_with(rq: &mut Rq, blocked: &mut dyn FnMut(Task)) -> Pick {
    match rq.pick_next_task_with(blocked) {
        Some(id) => Pick::Next(id),
        None => Pick::Idle,
    }
}

/// The rest of the pick under the rq lock: `update_misfit_status` for what now runs
/// (`set_next_task_fair`; nothing: `update_misfit_status(NULL, rq)`).
pub fn schedule_finish(rq: &mut Rq, ctx: &CoreCtx<'_>) {
    if ctx.load_balance {
        rq.update_misfit_status(ctx.topology, ctx.uclamp_used);
    }
}

/// The CPU switched to its idle task (`do_idle` → `tick_nohz_idle_enter`), under its rq
/// lock: count the idle entry and stamp `idle_stamp`.
pub fn idle_enter(rq: &mut Rq) {
    rq.idle_enter();
}

/// What runs on a ticking CPU (`rq->curr`'s class), which only the caller knows: the
/// policy's run queue holds the fair tasks only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TickCurr {
    /// A fair task: `task_tick_fair`.
    Fair,
    /// The idle task (`rq->curr == rq->idle`).
    Idle,
    /// A task of another class (the kernel's stopper): no fair tick, and not idle.
    Other,
}

/// The tick's inputs besides the run queue and the root domain.
#[derive(Clone, Copy, Debug)]
pub struct TickCtx {
    /// Now (`jiffies` as ns).
    pub now: Nanos,
    /// The tick period (`TICK_NSEC`).
    pub tick_ns: u64,
    /// What runs on the CPU.
    pub curr: TickCurr,
    /// When the root level's overutilized statistics are next due without load balancing
    /// (the caller's state for [`RootDomain::root_stats_due`], zero at boot).
    pub root_stats_next: Nanos,
}

/// What [`sched_tick`] leaves to its caller, in the order Linux carries it out: the flag
/// (stored at once), then, still in the interrupt, `sched_balance_trigger`'s SCHED_SOFTIRQ
/// and its `nohz_balancer_kick`; the softirq runs at `irq_exit`; last, `__schedule` on the
/// interrupt's return when [`TickSteps::resched`] asks for it — so a balance the tick
/// raised runs before the switch the tick asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TickSteps {
    /// `task_tick_fair`'s `check_update_overutilized_status`: the root domain's overutilized
    /// flag changed to this value (the caller stores it).
    pub overutilized: Option<bool>,
    /// `rq->idle_balance = idle_cpu(cpu)`: the idle task runs, nothing is queued.
    pub idle_balance: bool,
    /// `sched_balance_trigger`: raise SCHED_SOFTIRQ (`sched_balance_softirq` on this CPU at
    /// `irq_exit`, before the resched).
    pub softirq: bool,
    /// `sched_balance_trigger` goes on to `nohz_balancer_kick` (it returns at once on a CPU
    /// with `rq->idle_balance`); the caller runs the kick.
    pub nohz_kick: bool,
    /// Without load balancing, the root level's overutilized statistics are due
    /// ([`RootDomain::root_stats_due`]): the caller stores this as the next due time and, if
    /// it is the one to claim them, runs [`RootDomain::update_root_stats`] over every CPU's
    /// snapshot where the softirq would have run, and stores a changed flag. Never with load
    /// balancing on (the balancer's root level clears the flag).
    pub root_stats: Option<Nanos>,
    /// `resched_curr` from `task_tick_fair` (`TIF_NEED_RESCHED`): `__schedule` at the
    /// interrupt's return, after the softirq.
    pub resched: Resched,
}

/// `idle_cpu(cpu)`: the idle task runs and no task is queued (a wake-up enqueues on the
/// target at once, so Linux's `ttwu_pending` is `nr_running > 0` here).
pub fn idle_cpu(rq: &Rq, curr: TickCurr) -> bool {
    curr == TickCurr::Idle && rq.nr_running() == 0
}

/// `sched_tick` under this CPU's rq lock after its clock update: for a fair task
/// `task_tick_fair` (EEVDF charge, PELT, util_est, the resched decision), then
/// `update_misfit_status` and `check_update_overutilized_status` for this CPU; then
/// `rq->idle_balance = idle_cpu(cpu)` and `sched_balance_trigger` — SCHED_SOFTIRQ when
/// `rq->next_balance` has passed, and the NOHZ kick's gate; without load balancing, whether the
/// root level's overutilized statistics are due. The caller carries the steps out in
/// [`TickSteps`]' order (cpufreq between the rq lock and the softirq).
///
/// Deliberate differences: with load balancing off ([`CoreCtx::load_balance`]) there is no
/// misfit status and no softirq; an idle CPU's tick raises the softirq only where Linux would
/// have kept that tick ([`crate::nohz::idle_tick_kept`]), since the kernel also ticks idle
/// CPUs Linux would have left tickless.
pub fn sched_tick(rq: &mut Rq, rd: &RootDomain, tick: &TickCtx, ctx: &CoreCtx<'_>) -> TickSteps {
    let (resched, overutilized) = if tick.curr == TickCurr::Fair {
        let resched = rq.task_tick();
        if ctx.load_balance {
            rq.update_misfit_status(ctx.topology, ctx.uclamp_used);
        }
        (resched, tick_overutilized(rq, rd, ctx))
    } else {
        (Resched::No, None)
    };
    let idle_balance = idle_cpu(rq, tick.curr);
    let softirq = ctx.load_balance
        && (!idle_balance || idle_tick_kept(rq, tick.tick_ns, ctx.load_balance))
        && sched_balance_trigger(tick.now, rq);
    let root_stats = rd.root_stats_due(
        ctx.load_balance,
        tick.root_stats_next,
        tick.now,
        ctx.topology.nr_cpus(),
    );
    TickSteps {
        overutilized,
        idle_balance,
        softirq,
        nohz_kick: !idle_balance,
        root_stats,
        resched,
    }
}

/// The end of `task_tick_fair` on a CPU running a fair task, under its rq lock (part of
/// [`sched_tick`]): `check_update_overutilized_status(rq)` — set the root domain's flag
/// if this CPU is overutilized (`Some(true)`; the caller stores it).
pub fn tick_overutilized(rq: &Rq, rd: &RootDomain, ctx: &CoreCtx<'_>) -> Option<bool> {
    own_overutilized(rq, rd, ctx)
}

/// `check_update_overutilized_status(rq)` for `rq`'s CPU, building its snapshot only when
/// the answer can be `Some` (the flag tracked and clear): a wake-up or tick of a system
/// already overutilized costs a load.
fn own_overutilized(rq: &Rq, rd: &RootDomain, ctx: &CoreCtx<'_>) -> Option<bool> {
    if !rd.tracked || rd.overutilized {
        return None;
    }
    rd.check_update_overutilized_status(&rq.snapshot(), ctx.features, ctx.uclamp_used)
}

/// `finish_task_switch` → `prev->sched_class->task_dead(prev)` → `task_dead_fair` →
/// `remove_entity_load_avg` for a task that died on `prev`, called after its last context
/// switch, on the next task, with no rq lock held (Linux calls it after `finish_lock_switch`):
/// its signals, synced to `prev`'s cfs_rq's last update, leave that cfs_rq at its next
/// update instead of decaying there as blocked load. Until then (the pick, a newidle
/// balance, the switch) they are still `prev`'s blocked load, as in Linux. `prev`: `prev`'s
/// PELT clocks as published (the kernel: its [`RqSnapshot::pelt`]; the simulator: its
/// [`Rq::pelt_remote`]). The caller adds the result to `prev`'s removed load (the kernel:
/// under that leaf lock; the simulator: [`Rq::apply_removed`]).
///
/// v6.12's `task_dead_fair` first finishes a delayed dequeue; here an exiting task blocks
/// with `DEQUEUE_SPECIAL` ([`block_task`] with `special`), as `TASK_DEAD` does in v6.12, so
/// it is never delayed and always reaches this dequeued. Only `remove_entity_load_avg`, not
/// `migrate_task_rq_fair`: no `migrate_se_pelt_lag` (the task is not going anywhere).
pub fn task_dead_fair(prev: &PeltRemote, task: &mut Task) -> Result<RemovedLoad, RqError> {
    remove_entity_load_avg(prev, task)
}
