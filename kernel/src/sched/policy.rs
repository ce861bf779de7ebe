//! Every call the kernel makes into the policy crate (`asym-sched`), in one place: what the
//! kernel's scheduler core (`crate::sched`) asks of a run queue, in Linux's vocabulary. The
//! mechanism around it (locks, threads, context switch, IPIs, timers) is `crate::sched`'s.
//!
//! Until the policy crate has a lock-free `migrate_task_rq_fair(&PeltRemote, ..)`, a cross-CPU
//! wake-up syncs and detaches the task's signals under its old CPU's run-queue lock, then
//! enqueues it under the new one's (two locks in turn, never nested).

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use asym_sched::cpu_util::{CfsRqUtil, CpuCapacityInfo, CpuSnapshot, RqNonCfsUtil, TaskUtil};
use asym_sched::eas::{EasCpu, EasTask};
use asym_sched::features::SchedFeatures;
use asym_sched::rq::{DequeueFlags, EnqueueError, EnqueueFlags, RqError, Task};
use asym_sched::schedutil::SugovCpuInput;
use asym_sched::types::{Capacity, CpuId, CpuMask, TaskId, Util};
use asym_sched::uclamp::{uclamp_eff_range, ClampRange, TaskUclamp};
use asym_sched::wakeup::{select_task_rq_fair, WakeKind, WakeupView};

use super::CpuSched;
use crate::dt::MAX_CPUS;
use crate::task::{ThreadId, ThreadParams};

/// What other CPUs read about a run queue without its lock: the fields the wake-up path and
/// the NOHZ decision need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuView {
    /// The cfs_rq's signals (`cpu_util`'s inputs).
    pub cfs: CfsRqUtil,
    /// `uclamp_rq_get(rq, UCLAMP_MIN/MAX)`.
    pub rq_clamp: ClampRange,
    /// `uclamp_rq_is_idle(rq)`.
    pub uclamp_rq_idle: bool,
    /// `available_idle_cpu`: the idle thread runs and nothing is queued.
    pub idle: bool,
    /// Its cfs_rq still has blocked load or utilisation to decay.
    pub blocked: bool,
    /// A cpufreq request waits for its next tick.
    pub cpufreq_pending: bool,
}

/// A [`CpuView`] in three words, written with plain stores by the rq lock's holder at the end
/// of every section that changes it, read with plain loads by anyone (Linux reads remote rq
/// fields with `READ_ONCE` one by one, so a reader may see two updates' fields mixed: so here).
#[derive(Debug)]
pub struct PackedView {
    /// `util_avg` (low 32) and `runnable_avg` (high 32).
    util: AtomicU64,
    /// `util_est` (low 32), clamp min (bits 32..48) and max (48..64).
    est_clamp: AtomicU64,
    /// [`F_VALID`], [`F_IDLE`], ...
    flags: AtomicU32,
}

const F_VALID: u32 = 1;
const F_IDLE: u32 = 2;
const F_BLOCKED: u32 = 4;
const F_CPUFREQ: u32 = 8;
const F_UCLAMP_IDLE: u32 = 16;

impl PackedView {
    /// Nothing published yet.
    pub const fn new() -> Self {
        PackedView {
            util: AtomicU64::new(0),
            est_clamp: AtomicU64::new(0),
            flags: AtomicU32::new(0),
        }
    }

    /// Publishes `v`.
    pub fn store(&self, v: &CpuView) {
        let util = u64::from(v.cfs.util_avg.0) | u64::from(v.cfs.runnable_avg.0) << 32;
        let est = u64::from(v.cfs.util_est.0)
            | u64::from(v.rq_clamp.min.0.min(0xffff)) << 32
            | u64::from(v.rq_clamp.max.0.min(0xffff)) << 48;
        let flags = F_VALID
            | if v.idle { F_IDLE } else { 0 }
            | if v.blocked { F_BLOCKED } else { 0 }
            | if v.cpufreq_pending { F_CPUFREQ } else { 0 }
            | if v.uclamp_rq_idle { F_UCLAMP_IDLE } else { 0 };
        self.util.store(util, Ordering::Relaxed);
        self.est_clamp.store(est, Ordering::Relaxed);
        self.flags.store(flags, Ordering::Release);
    }

    /// The latest view (`None` before the first).
    pub fn load(&self) -> Option<CpuView> {
        let flags = self.flags.load(Ordering::Acquire);
        if flags & F_VALID == 0 {
            return None;
        }
        let util = self.util.load(Ordering::Relaxed);
        let est = self.est_clamp.load(Ordering::Relaxed);
        Some(CpuView {
            cfs: CfsRqUtil {
                util_avg: Util(util as u32),
                runnable_avg: Util((util >> 32) as u32),
                util_est: Util(est as u32),
            },
            rq_clamp: ClampRange {
                min: Util(((est >> 32) & 0xffff) as u32),
                max: Util((est >> 48) as u32),
            },
            uclamp_rq_idle: flags & F_UCLAMP_IDLE != 0,
            idle: flags & F_IDLE != 0,
            blocked: flags & F_BLOCKED != 0,
            cpufreq_pending: flags & F_CPUFREQ != 0,
        })
    }
}

impl Default for PackedView {
    fn default() -> Self {
        Self::new()
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

/// `wake_up_new_task`: `activate_task(ENQUEUE_NEW)` then `wakeup_preempt`.
#[allow(clippy::result_large_err)] // the refused task is handed back
pub fn wake_up_new(cs: &mut CpuSched, task: Task) -> Result<(), EnqueueError> {
    let id = task.id;
    cs.rq.enqueue_task(task, EnqueueFlags::NEW)?;
    let _ = cs.rq.check_preempt_wakeup(id);
    Ok(())
}

/// `ttwu_do_activate`: `activate_task(ENQUEUE_WAKEUP [| ENQUEUE_MIGRATED])` then
/// `wakeup_preempt`.
#[allow(clippy::result_large_err)] // the refused task is handed back
pub fn activate(cs: &mut CpuSched, task: Task, migrated: bool) -> Result<(), EnqueueError> {
    let id = task.id;
    let flags = if migrated {
        EnqueueFlags::WAKEUP | EnqueueFlags::MIGRATED
    } else {
        EnqueueFlags::WAKEUP
    };
    cs.rq.enqueue_task(task, flags)?;
    let _ = cs.rq.check_preempt_wakeup(id);
    Ok(())
}

/// `wakeup_preempt` for a task already queued (woken before it got round to sleeping).
pub fn check_preempt(cs: &mut CpuSched, id: TaskId) {
    let _ = cs.rq.check_preempt_wakeup(id);
}

/// `deactivate_task(DEQUEUE_SLEEP)` of the running task in `__schedule`.
pub fn deactivate(cs: &mut CpuSched, id: TaskId) -> Result<Task, RqError> {
    cs.rq.dequeue_task(id, DequeueFlags::SLEEP)
}

/// `task_dead_fair` → `remove_entity_load_avg`: the dead task's blocked contribution leaves
/// the cfs_rq it was attached to.
pub fn task_dead(cs: &mut CpuSched, mut task: Task) {
    let _ = cs.rq.migrate_task_rq_fair(&mut task);
}

/// `yield_task_fair`.
pub fn yield_curr(cs: &mut CpuSched) {
    cs.rq.yield_task();
}

/// `pick_next_task` (`put_prev_task` of a still-runnable previous task included).
pub fn pick_next(cs: &mut CpuSched) -> Option<TaskId> {
    cs.rq.pick_next_task()
}

/// `sched_tick` for the fair class: `task_tick_fair` with a task running, else the blocked
/// averages' decay (Linux decays them from the balance softirq; see `crate::sched`).
pub fn tick(cs: &mut CpuSched, running: bool) {
    if running {
        cs.rq.task_tick();
    } else {
        cs.rq.update_blocked_averages();
    }
}

/// `set_user_nice` of a queued task.
pub fn set_nice_queued(cs: &mut CpuSched, id: TaskId, nice: i32) -> Result<(), RqError> {
    cs.rq.set_nice(id, nice)
}

/// `set_user_nice` of a task sleeping with its signals on this CPU.
pub fn set_nice_parked(cs: &mut CpuSched, task: &mut Task, nice: i32) -> Result<(), RqError> {
    cs.rq.set_nice_blocked(task, nice)
}

/// `select_task_rq` for a waking task sleeping with its signals on `prev` (whose run queue
/// `prev_cs` is, locked): a task allowed on one CPU goes there (Linux skips
/// `select_task_rq_fair` then); otherwise its signals are brought up to date there
/// (`sync_entity_load_avg`) and the policy picks. If the CPU is another one, the signals are
/// detached (`migrate_task_rq_fair`). Returns the CPU.
pub fn select_and_migrate(
    prev_cs: &mut CpuSched,
    task: &mut Task,
    this: CpuId,
    kind: WakeKind,
    online: CpuMask,
) -> CpuId {
    let prev = prev_cs.rq.cpu();
    let allowed = task.cpus_allowed.and(online);
    let target = if allowed.weight() == 1 {
        allowed.first().unwrap_or(prev)
    } else {
        if kind == WakeKind::Wakeup && task.cpu == Some(prev) {
            let _ = prev_cs.rq.sync_entity_load_avg(task);
        }
        select_cpu(task, prev, this, kind, online, prev_cs.rq.features())
    };
    if target != prev && task.cpu == Some(prev) {
        let _ = prev_cs.rq.migrate_task_rq_fair(task);
    }
    target
}

/// `select_task_rq`: a task allowed on one CPU goes there; otherwise the policy crate's
/// `select_task_rq_fair` over the published views, or, without a topology (a DT without a
/// scheduling description), `prev` if allowed and idle, else the first idle allowed CPU, else
/// `prev` if allowed, else the first allowed one (Linux `select_fallback_rq`). Always an
/// allowed online CPU.
pub fn select_cpu(
    task: &Task,
    prev: CpuId,
    this: CpuId,
    kind: WakeKind,
    online: CpuMask,
    features: SchedFeatures,
) -> CpuId {
    let allowed = task.cpus_allowed.and(online);
    if allowed.weight() <= 1 {
        return allowed.first().unwrap_or(prev);
    }
    let mut cpus = [EasCpu {
        util: CpuSnapshot {
            cpu: CpuId(0),
            capacity_orig: Capacity(0),
            cfs: CfsRqUtil::default(),
        },
        non_cfs: RqNonCfsUtil::default(),
        capacity: CpuCapacityInfo::unpressured(Capacity(0)),
        rq_clamp: ClampRange::NONE,
        uclamp_rq_idle: true,
        online: false,
    }; MAX_CPUS];
    let mut idle = CpuMask::EMPTY;
    let nr = super::nr_cpus();
    for cpu in allowed.iter().filter(|c| c.index() < nr) {
        if let Some(v) = super::view(cpu) {
            let cap = super::capacity_orig(cpu);
            cpus[cpu.index()] = EasCpu {
                util: CpuSnapshot {
                    cpu,
                    capacity_orig: cap,
                    cfs: v.cfs,
                },
                non_cfs: RqNonCfsUtil::default(),
                capacity: CpuCapacityInfo::unpressured(cap),
                rq_clamp: v.rq_clamp,
                uclamp_rq_idle: v.uclamp_rq_idle,
                online: true,
            };
            if v.idle {
                idle.set(cpu);
            }
        }
    }
    let chosen = match super::topology() {
        Some(topo) => {
            let sys = asym_sched::uclamp::UclampSysctl::default();
            let p = EasTask {
                util: TaskUtil::from_avg(&task.avg, prev, false),
                clamp: uclamp_eff_range(&task.uclamp, &sys, false),
                allowed,
            };
            let view = WakeupView {
                cpus: &cpus[..nr.min(topo.nr_cpus())],
                topology: topo,
                idle,
                em: None,
                overutilized: false,
                features,
                uclamp_used: false,
            };
            select_task_rq_fair(&p, prev, this, kind, &view)
        }
        None => {
            if allowed.contains(prev) && idle.contains(prev) {
                prev
            } else if let Some(c) = idle.first() {
                c
            } else if allowed.contains(prev) {
                prev
            } else {
                allowed.first().unwrap_or(prev)
            }
        }
    };
    if allowed.contains(chosen) {
        chosen
    } else {
        allowed.first().unwrap_or(prev)
    }
}

/// The record other CPUs read about `cs`.
pub fn view(cs: &CpuSched) -> CpuView {
    let rq = &cs.rq;
    let avg = rq.cfs_avg();
    CpuView {
        cfs: rq.cfs_util(),
        rq_clamp: rq.uclamp_range(),
        uclamp_rq_idle: rq.uclamp().is_idle(),
        idle: cs.curr == cs.idle && rq.nr_running() == 0,
        blocked: avg.util_avg != 0 || avg.load_avg != 0 || avg.runnable_avg != 0,
        cpufreq_pending: cs.cpufreq_pending.is_some(),
    }
}

/// Schedutil's view of the CPU (`sugov_get_util`'s inputs).
pub fn sugov_input(cs: &CpuSched) -> SugovCpuInput {
    SugovCpuInput {
        cpu: cs.rq.cpu_snapshot(),
        other: RqNonCfsUtil::default(),
        rq_clamp: cs.rq.uclamp_range(),
        uclamp_used: false,
        idle_calls: cs.idle_calls,
    }
}
