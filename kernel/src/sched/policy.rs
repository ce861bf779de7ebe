//! Every call the kernel makes into the policy crate (`asym-sched`), in one place: the core's
//! steps (`asym_sched::sched_core`) and the few `Rq` operations no step covers, in Linux's
//! vocabulary. The mechanism around them (locks, threads, context switch, IPIs, timers) is
//! `crate::sched`'s; the lock each function needs is named in its doc.
//!
//! Wake-ups are placed by `select_task_rq_fair`: `find_energy_efficient_cpu` over the DT's
//! energy model while EAS is active ([`super::eas_active`]) and the root domain is not
//! overutilized, else the capacity-aware `select_idle_sibling`. The root domain's flags are
//! [`super::root_domain`]'s (the overutilized flag a lock-free atomic), updated by Linux's
//! rule: a wake-up and a tick set it from their own CPU only; the load balancer's statistics
//! (`super::balance`) set or clear it, and without the balancer the tick runs
//! [`root_stats_overutilized`], the root level's `update_sd_lb_stats`, once per root interval
//! when `sched_core::sched_tick` says so (`TickSteps::root_stats`) — and, a deliberate
//! difference, with the balancer on the same interval from `crate::sched`'s own test.
use asym_sched::pelt::RemovedLoad;
use asym_sched::root_domain::RootDomain;
use asym_sched::rq::{
    migrate_task_rq_fair, Block, DequeueFlags, EnqueueError, RqError, RqSnapshot, Task,
};
use asym_sched::sched_core::{
    self, CoreCtx, Pick, Placement, Resched, TickCtx, TickCurr, TickSteps, WakeCtx, WakeOutcome,
};
use asym_sched::topology::Topology;
use asym_sched::types::{CpuId, CpuMask, Nanos, TaskId};
use asym_sched::uclamp::{TaskUclamp, UclampSysctl};
use asym_sched::wakeup::{select_task_rq_interim, wake_wide, WakeKind, WakeeFlips, WakerInfo};

use super::CpuSched;
use crate::task::{ThreadId, ThreadParams};

fn core_ctx(topology: &Topology) -> CoreCtx<'_> {
    CoreCtx {
        topology,
        features: super::features(),
        uclamp_used: super::uclamp_used(),
        load_balance: super::balance::enabled(),
    }
}

/// `sched_fork` + `__sched_setscheduler`'s nice and clamps: a new thread's policy task.
pub fn new_task(id: ThreadId, p: &ThreadParams) -> Result<Task, RqError> {
    let mut uclamp = TaskUclamp::default();
    if p.uclamp != (0, 1024) {
        // Validated at spawn.
        let _ = uclamp.set_request(p.uclamp.0, p.uclamp.1);
    }
    Task::new(id.task_id(), p.nice, uclamp, p.affinity)
}

/// Whether a wake-up of a task allowed on `allowed` needs every CPU's snapshot: only for a
/// choice of CPU (`select_task_rq_fair`); the overutilized check reads the target's own run
/// queue. A task allowed on one online CPU needs none ([`select_cpu`] and [`activate`] then
/// take an empty slice): reading every CPU's snapshot is most of a wake-up's cost.
pub fn needs_snapshots(allowed: CpuMask, online: CpuMask) -> bool {
    sched_core::select_task_rq_wanted(allowed.and(online))
}

/// `select_task_rq` (no lock but the task's own): a task allowed on one online CPU goes
/// there (Linux skips `select_task_rq_fair` then: `sched_core::select_task_rq_wanted`, here
/// over the online CPUs, so a task held to offline CPUs besides counts as pinned); otherwise
/// `sched_core::ttwu_select` over every CPU's published snapshot. Always an allowed online
/// CPU.
#[allow(clippy::too_many_arguments)] // the wake-up's inputs, as `select_task_rq` takes them
pub fn select_cpu(
    topology: &Topology,
    task: &Task,
    prev: CpuId,
    this: CpuId,
    kind: WakeKind,
    online: CpuMask,
    snaps: &[RqSnapshot],
    rd: RootDomain,
    waker: WakerInfo,
) -> CpuId {
    let allowed = task.cpus_allowed.and(online);
    if !sched_core::select_task_rq_wanted(allowed) {
        return allowed.first().unwrap_or(prev);
    }
    let ctx = WakeCtx {
        core: core_ctx(topology),
        cpus: snaps,
        em: super::energy_model(),
        rd,
        uclamp_sysctl: sysctl(),
        placement: Placement::Linux,
        waker,
    };
    let chosen = sched_core::ttwu_select(task, prev, this, kind, &ctx);
    if allowed.contains(chosen) {
        chosen
    } else {
        // ttwu_select's answer is allowed; an offline one falls back as Linux's
        // `select_fallback_rq` does.
        select_task_rq_interim(prev, allowed, snaps)
    }
}

/// What `select_task_rq_fair` learns about the waker of `wakee`: `record_wakee(p)` on
/// `waker_flips` (`current`'s, updated in place) at jiffy `jiffies` of `hz`, then
/// `wake_wide(p)` over both threads' flips with the waking CPU's `llc_size`
/// (`Topology::llc_size`, as the simulator takes it). Only for a wake-up that chooses among CPUs
/// ([`needs_snapshots`]), where Linux calls `record_wakee`. No `WF_SYNC`: the kernel's
/// wake-ups (wait queues, timers) are not synchronous ones, as rt-app's futex wake-ups on
/// Linux are not.
pub fn waker_info(
    llc_size: u32,
    waker_flips: &mut WakeeFlips,
    wakee: TaskId,
    wakee_flips: &WakeeFlips,
    jiffies: u64,
    hz: u64,
) -> WakerInfo {
    waker_flips.record_wakee(wakee, jiffies, hz);
    WakerInfo {
        wake_wide: wake_wide(waker_flips, wakee_flips, llc_size),
        ..WakerInfo::default()
    }
}

/// `set_task_cpu` → `migrate_task_rq_fair` for a sleeping task leaving `prev` (no run-queue
/// lock): pure over `prev`'s published PELT clocks; the caller queues the result on `prev`.
pub fn migrate(prev: &RqSnapshot, task: &mut Task, now: Nanos) -> Result<RemovedLoad, RqError> {
    migrate_task_rq_fair(&prev.pelt, task, now)
}

/// [`activate`] of a woken task from `slot`, where it was parked while it slept: moved into
/// the run queue once (`sched_core::ttwu_activate_from`); a refusal leaves it in `slot`.
pub fn activate_from(
    topology: &Topology,
    cs: &mut CpuSched,
    slot: &mut Option<Task>,
    migrated: bool,
    rd: &RootDomain,
) -> Result<WakeOutcome, RqError> {
    sched_core::ttwu_activate_from(
        &mut cs.rq,
        slot,
        WakeKind::Wakeup,
        migrated,
        rd,
        &core_ctx(topology),
    )
}

/// `ttwu_do_activate` / `wake_up_new_task`'s activation under the target's run-queue lock,
/// after its clock update: `sched_core::ttwu_activate` (enqueue, `wakeup_preempt`, the
/// `avg_idle` update, the overutilized check for this CPU). The caller stores
/// [`WakeOutcome::overutilized`].
#[allow(clippy::result_large_err)] // the refused task is handed back
pub fn activate(
    topology: &Topology,
    cs: &mut CpuSched,
    task: Task,
    kind: WakeKind,
    migrated: bool,
    rd: &RootDomain,
) -> Result<WakeOutcome, EnqueueError> {
    sched_core::ttwu_activate(&mut cs.rq, task, kind, migrated, rd, &core_ctx(topology))
}

/// The root level's `update_sd_lb_stats` → `set_rd_overutilized(rd, sg_overutilized)` (no
/// lock; over every CPU's published snapshot), once per root interval whether or not the
/// balancer runs (see the module docs). Reads the snapshots one at a time from `this` on, up
/// to the first overutilized CPU. `Some`: the new value.
pub fn root_stats_overutilized(rd: &RootDomain, this: CpuId, nr_cpus: usize) -> Option<bool> {
    let first = this.index().min(nr_cpus);
    let cpus = (first..nr_cpus)
        .chain(0..first)
        .filter_map(|c| super::snapshot::read(CpuId(c as u16)));
    rd.update_root_stats(cpus, super::features(), super::uclamp_used())
}

/// `ttwu_runnable`'s `wakeup_preempt` for a task still queued (woken before it got round to
/// sleeping), under its run-queue lock.
pub fn check_preempt(cs: &mut CpuSched, id: TaskId) -> Resched {
    Resched::from_bool(cs.rq.check_preempt_wakeup(id).unwrap_or(false))
}

/// `__schedule`'s `block_task` of the running task going to sleep, under the rq lock:
/// `dequeue_task(DEQUEUE_SLEEP)`, which is what `sched_core::block_task` does without
/// `DELAY_DEQUEUE` (the kernel refuses it, `super::set_features`), called directly to keep
/// the feature test off every sleep. The task lands in `parked` (the thread's slot for it
/// while it sleeps) without a copy on the way.
pub fn deactivate_into(
    cs: &mut CpuSched,
    id: TaskId,
    parked: &mut Option<Task>,
) -> Result<(), RqError> {
    cs.rq.dequeue_task_into(id, DequeueFlags::SLEEP, parked)
}

/// `__schedule`'s `block_task` of the dying task (`TASK_DEAD`), under the rq lock:
/// `sched_core::block_task` with `DEQUEUE_SPECIAL`. The task lands in `parked`, where it waits
/// for [`task_dead`] after the thread's last switch. Never [`Block::Delayed`]
/// (`DEQUEUE_SPECIAL`).
pub fn block_dead(
    cs: &mut CpuSched,
    id: TaskId,
    parked: &mut Option<Task>,
) -> Result<Block, RqError> {
    sched_core::block_task(&mut cs.rq, id, true, parked)
}

/// `finish_task_switch` → `task_dead_fair` for a thread that died on `prev` (after its last
/// switch, on the next thread, no run-queue lock held): `sched_core::task_dead_fair` over
/// `prev`'s published PELT clocks; the caller queues the result on `prev`'s removed load, as
/// a wake-up that moves a task away does ([`migrate`]).
pub fn task_dead(prev: &RqSnapshot, task: &mut Task) -> Result<RemovedLoad, RqError> {
    sched_core::task_dead_fair(&prev.pelt, task)
}

/// `yield_task_fair`, under the rq lock.
pub fn yield_curr(cs: &mut CpuSched) {
    cs.rq.yield_task();
}

/// `__schedule`'s `pick_next_task` under the rq lock: `sched_core::schedule_pick`. With load
/// balancing on, finding nothing is [`Pick::Newidle`]: the caller unlocks, runs
/// `balance::sched_balance_newidle`, relocks and hands it to [`pick_finish`].
pub fn pick_first(topology: &Topology, cs: &mut CpuSched) -> Pick {
    sched_core::schedule_pick(&mut cs.rq, &core_ctx(topology))
}

/// The rest of the pick under the rq lock: after a newidle balance ([`Pick::Newidle`]) the
/// repick (`sched_core::schedule_repick`, which goes idle if nothing arrived), then
/// `schedule_finish`. `None`: go idle.
pub fn pick_finish(topology: &Topology, cs: &mut CpuSched, pick: Pick) -> Option<TaskId> {
    let ctx = core_ctx(topology);
    let next = match pick {
        Pick::Next(id) => Some(id),
        Pick::Idle => None,
        Pick::Newidle => match sched_core::schedule_repick(&mut cs.rq) {
            Pick::Next(id) => Some(id),
            _ => None,
        },
    };
    sched_core::schedule_finish(&mut cs.rq, &ctx);
    next
}

/// The running task is put back in its run queue, still queued (`put_prev_task_fair`): the
/// stopper takes the CPU, under the rq lock.
pub fn put_prev(cs: &mut CpuSched) {
    cs.rq.put_prev_task();
}

/// The CPU switched to its idle thread (`do_idle` → `tick_nohz_idle_enter`), under its rq
/// lock.
pub fn idle_enter(cs: &mut CpuSched) {
    sched_core::idle_enter(&mut cs.rq);
}

/// `sched_tick` under the rq lock after the clock update: `sched_core::sched_tick` (the fair
/// task's tick, misfit, the overutilized check for this CPU, `idle_cpu` and the balance
/// trigger), which says what the caller does next and in which order. A CPU not running a fair
/// task first decays its blocked averages (Linux leaves that to the NOHZ idle balancer; see
/// `crate::sched`).
pub fn tick(
    topology: &Topology,
    cs: &mut CpuSched,
    rd: &RootDomain,
    now: Nanos,
    curr: TickCurr,
    root_stats_next: Nanos,
) -> TickSteps {
    if curr != TickCurr::Fair {
        cs.rq.update_blocked_averages();
    }
    let tick = TickCtx {
        now,
        tick_ns: super::balance::tick_nsec(),
        curr,
        root_stats_next,
    };
    sched_core::sched_tick(&mut cs.rq, rd, &tick, &core_ctx(topology))
}

/// `set_user_nice` of a queued task, under its rq lock.
pub fn set_nice_queued(cs: &mut CpuSched, id: TaskId, nice: i32) -> Result<(), RqError> {
    cs.rq.set_nice(id, nice)
}

/// `set_user_nice` of a task sleeping with its signals on this CPU, under its rq lock.
pub fn set_nice_parked(cs: &mut CpuSched, task: &mut Task, nice: i32) -> Result<(), RqError> {
    cs.rq.set_nice_blocked(task, nice)
}

/// The uclamp sysctls (defaults; `sched_uclamp_used` as the kernel tracks it).
fn sysctl() -> UclampSysctl {
    UclampSysctl {
        used: super::uclamp_used(),
        ..UclampSysctl::default()
    }
}
