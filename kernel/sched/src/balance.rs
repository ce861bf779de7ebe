//! Load balancing: the tick-driven periodic balance, newidle balance,
//! `sched_balance_rq` and misfit migration, one run queue at a time.
//!
//! Re-derives Linux v6.12 `kernel/sched/fair.c`: `sched_balance_trigger`
//! (`trigger_load_balance`), `sched_balance_softirq` (`run_rebalance_domains`),
//! `sched_balance_domains` (`rebalance_domains`), `sched_balance_newidle`
//! (`newidle_balance`), `sched_balance_rq` (`load_balance`) and
//! `active_load_balance_cpu_stop`, in three layers:
//! - [`domains`]: the sched domains (`topology.c`), built once;
//! - [`stats`]: the statistics — which group and CPU are busiest and by how much —
//!   read-only over the CPUs' published [`RqSnapshot`]s;
//! - [`migrate`]: `detach_tasks` under the source's lock, `attach_tasks` under the
//!   destination's, each on one `&mut Rq`; the tasks in between travel in a fixed-size
//!   [`Detached`] list.
//!
//! The drivers here reach the run queues only through [`RqAccess`]: snapshots for reading
//! and [`RqAccess::with_rq`] for one CPU's run queue at a time, under its lock, for a
//! closure that cannot reach the accessor — so holding two run-queue locks cannot be
//! written (Linux's `sched_balance_rq` also locks `busiest` and `this_rq` one after the
//! other). Every task that changes CPU is reported to [`RqAccess::moved`] after its
//! attach, so callers update `task_cpu`, trace `sched_migrate_task` and kick the
//! destination without scanning run queues. The kernel implements [`RqAccess`] over its
//! per-CPU locks and published snapshots; [`RqAccess`] is implemented for a slice of
//! [`Rq`]s for tests.
//!
//! Time: Linux counts balance deadlines in jiffies. We do too (`*_jiffies` fields,
//! `jiffies = now / TICK_NSEC`), and store `rq->next_balance` in [`Rq`] as the
//! nanosecond start of that jiffy, so `now >= rq.next_balance()` is exactly
//! `time_after_eq(jiffies, rq->next_balance)`.
//!
//! Deliberate differences:
//! - Detach and attach happen in one pass each per attempt (at most
//!   [`MAX_NR_MIGRATE`] tasks), so `LBF_NEED_BREAK` does not exist.
//! - The root domain's flags come from the caller ([`LbContext`]): `overutilized`
//!   and whether EAS has a perf domain (`rd->pd`). `rd->overloaded` (newidle's gate) is
//!   the caller's sticky flag ([`RqAccess::rd_overloaded`], kept as Linux keeps it
//!   through [`RqAccess::set_rd_overloaded`]) under `STICKY_OVERLOADED`; otherwise it is
//!   recomputed from the snapshots: some CPU runs more than one task or has a misfit task.
//! - Not modelled: NUMA, SMT, asym packing, `group_imbalanced` (`sgc->imbalance` from
//!   `LBF_SOME_PINNED`), RT/DL/irq pressure (`capacity_of == capacity_orig`), cgroups
//!   (`task_h_load == load_avg`), NOHZ idle balance (the ILB kick and
//!   `nohz_newidle_balance`; the caller decides which CPUs tick), `SD_SERIALIZE`.
//! - No stopper class: [`sched_balance_rq`] returns an [`ActiveBalance`] request; the
//!   caller preempts the source CPU's running task and calls
//!   [`active_load_balance_cpu_stop`], which moves one task even when it is the
//!   source's only one (Linux's check `nr_running <= 1` counts the stopper).
//! - `detach_tasks` takes the biggest task of its window first under
//!   `LB_BIGGEST_TASK` (seed 004); see [`detach_tasks`].
//! - `sched_balance_newidle` measures its cost with a clock the caller passes
//!   (`sched_clock_cpu`), and under `NO_AGGRESSIVE_NEXT_BALANCE` applies seed 002's
//!   fix: only domains it actually balanced update `rq->next_balance`, and they stamp
//!   `sd->last_balance`.

use core::fmt;

use crate::features::{Feature, SchedFeatures};
use crate::rq::{Rq, RqSnapshot, Task};
use crate::types::{CpuId, CpuMask, Nanos, TaskId};

pub mod domains;
pub mod migrate;
pub mod stats;

#[cfg(test)]
mod oracle;

pub use domains::{CpuBalance, SchedDomain, SchedDomains, SchedGroup, SdFlags, SdLevel};
pub use migrate::{attach_tasks, detach_one_task, detach_tasks, Arrived};

use migrate::detach_tasks_env;
use stats::{
    need_active_balance, rd_overloaded, sched_balance_find_src_group, sched_balance_find_src_rq,
    should_we_balance,
};

/// `sysctl_sched_migration_cost`: 500 µs.
pub const SYSCTL_SCHED_MIGRATION_COST_NS: u64 = 500_000;
/// `sysctl_sched_nr_migrate` / `SCHED_NR_MIGRATE_BREAK` (non-RT).
pub const SYSCTL_SCHED_NR_MIGRATE: u32 = 32;
/// The most tasks one `detach_tasks` examines and detaches: [`LbContext::nr_migrate`] is
/// capped here, so the detached list is a fixed-size [`Detached`] (no allocation).
pub const MAX_NR_MIGRATE: usize = SYSCTL_SCHED_NR_MIGRATE as usize;

/// Tasks detached from one run queue, on their way to another (Linux's `env->tasks`):
/// at most [`MAX_NR_MIGRATE`], held by value so none is lost between the two locks.
pub type Detached = heapless::Vec<Task, MAX_NR_MIGRATE>;
/// The lists one move uses between the source's lock and the destination's: the detached
/// tasks and the arrivals (each arrival's id and `load_avg`). About 7.7 KB, so a driver on
/// small stacks (the kernel's are 16 KiB) lends one it allocated at set-up through
/// [`RqAccess::with_transit`] instead of the balancer's stack.
#[derive(Debug, Default)]
pub struct Transit {
    /// Detached, not yet attached (after an attach: what the destination refused).
    pub detached: Detached,
    /// Attached to the destination.
    pub arrived: Arrived,
}

impl Transit {
    /// Empty lists.
    pub const fn new() -> Transit {
        Transit {
            detached: Detached::new(),
            arrived: Arrived::new(),
        }
    }
}

/// `MAX_PINNED_INTERVAL` (ms): backoff cap when every task was pinned.
pub const MAX_PINNED_INTERVAL_MS: u32 = 512;

/// `enum cpu_idle_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuIdleType {
    /// `__CPU_NOT_IDLE`: the CPU runs a task.
    NotIdle,
    /// `CPU_IDLE`: the tick found the CPU idle.
    Idle,
    /// `CPU_NEWLY_IDLE`: the CPU is about to go idle.
    NewlyIdle,
}

/// `enum migration_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MigrationType {
    /// Move `task_h_load` worth of load.
    Load,
    /// Move utilisation (`task_util_est`).
    Util,
    /// Move a number of tasks.
    Task,
    /// Move the misfit task to a bigger CPU.
    Misfit,
}

impl MigrationType {
    /// Every type, in Linux's order (for per-reason counters).
    pub const ALL: [MigrationType; 4] = [
        MigrationType::Load,
        MigrationType::Util,
        MigrationType::Task,
        MigrationType::Misfit,
    ];

    /// Linux's name (`migrate_load`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            MigrationType::Load => "migrate_load",
            MigrationType::Util => "migrate_util",
            MigrationType::Task => "migrate_task",
            MigrationType::Misfit => "migrate_misfit",
        }
    }
}

/// `enum group_type`, in Linux's order (higher = busier).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum GroupType {
    /// Has spare capacity.
    HasSpare,
    /// Fully used, but no task waits for long.
    FullyBusy,
    /// A task does not fit its CPU.
    MisfitTask,
    /// Overloaded: more tasks than CPUs and not enough capacity.
    Overloaded,
}

/// A request to push the running task of `src` to `dst` (`stop_one_cpu_nowait` of
/// `active_load_balance_cpu_stop`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActiveBalance {
    /// `busiest`: the CPU whose running task should move.
    pub src: CpuId,
    /// `push_cpu`: where to.
    pub dst: CpuId,
    /// The domain level that asked.
    pub level: SdLevel,
    /// Why (misfit, or a task that failed to move repeatedly).
    pub migration_type: MigrationType,
}

/// What one `sched_balance_rq` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct LbResult {
    /// `ld_moved`: tasks moved.
    pub ld_moved: u32,
    /// The migration type of the attempt, if it got that far.
    pub migration_type: Option<MigrationType>,
    /// A push of a running task, for the caller to carry out.
    pub active_balance: Option<ActiveBalance>,
    /// The root domain's overutilized flag as the statistics set it (`None`: they did
    /// not touch it); the caller stores it where the root domain tracks the flag.
    pub overutilized: Option<bool>,
}

/// What a `sched_balance_domains` / `sched_balance_newidle` call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct BalanceReport {
    /// `sched_balance_rq` calls.
    pub lb_runs: u32,
    /// Tasks moved, by [`MigrationType`] (index = `as usize`).
    pub moved: [u32; 4],
    /// The last active-balance request.
    pub active_balance: Option<ActiveBalance>,
    /// Newidle only: `pulled_task` > 0 (a task arrived, pulled or woken).
    pub pulled: bool,
    /// The root domain's overutilized flag as the last statistics set it (`None`:
    /// untouched); the caller stores it.
    pub overutilized: Option<bool>,
}

impl BalanceReport {
    /// Total tasks moved.
    pub fn total_moved(&self) -> u32 {
        self.moved.iter().sum()
    }

    fn add(&mut self, r: &LbResult) {
        self.lb_runs += 1;
        if let Some(t) = r.migration_type {
            self.moved[t as usize] += r.ld_moved;
        }
        if r.active_balance.is_some() {
            self.active_balance = r.active_balance;
        }
        if r.overutilized.is_some() {
            self.overutilized = r.overutilized;
        }
    }
}

/// The root domain's state and tunables a balance reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LbContext {
    /// The feature set.
    pub features: SchedFeatures,
    /// `is_rd_overutilized(rd)`.
    pub overutilized: bool,
    /// `rd->pd != NULL`: EAS is active (then only misfit balancing runs while not
    /// overutilized).
    pub eas_active: bool,
    /// `sched_uclamp_used`.
    pub uclamp_used: bool,
    /// `sysctl_sched_migration_cost` (ns).
    pub migration_cost_ns: u64,
    /// `sysctl_sched_nr_migrate`, at most [`MAX_NR_MIGRATE`] (larger values act as it).
    pub nr_migrate: u32,
    /// `task_on_cpu(rq, p)`: whether the task's registers are still live on a CPU
    /// (`p->on_cpu`), for a caller whose run queues can hold such a task besides `curr`;
    /// `can_migrate_task` never detaches one. `None` (the default): only `curr` runs.
    pub task_on_cpu: Option<TaskOnCpu>,
}

/// The caller's `task_on_cpu` test ([`LbContext::task_on_cpu`]). Two are equal when they
/// are the same function.
#[derive(Clone, Copy, Debug)]
pub struct TaskOnCpu(pub fn(TaskId) -> bool);

impl PartialEq for TaskOnCpu {
    fn eq(&self, other: &TaskOnCpu) -> bool {
        self.0 as usize == other.0 as usize
    }
}

impl Eq for TaskOnCpu {}

impl LbContext {
    /// Linux's defaults with `features`; not overutilized, no EAS.
    pub fn new(features: SchedFeatures) -> LbContext {
        LbContext {
            features,
            overutilized: false,
            eas_active: false,
            uclamp_used: false,
            migration_cost_ns: SYSCTL_SCHED_MIGRATION_COST_NS,
            nr_migrate: SYSCTL_SCHED_NR_MIGRATE,
            task_on_cpu: None,
        }
    }
}

/// Why a balance call was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BalanceError {
    /// `HZ` must be between 1 and 10000.
    BadHz {
        /// The value given.
        hz: u32,
    },
    /// No CPU to build sched domains over (the active set and the topology do not meet).
    NoActiveCpu,
    /// The run queues do not match the domains (a different number of CPUs, or the
    /// snapshot at `index` is another CPU's).
    RqMismatch {
        /// The slice index.
        index: usize,
        /// The CPU found there (`None`: the slice is too short).
        found: Option<CpuId>,
    },
    /// The CPU is not in the domains.
    UnknownCpu {
        /// The CPU.
        cpu: CpuId,
    },
    /// A detached task could be attached neither to its destination nor back to its
    /// source (a broken run queue).
    AttachFailed {
        /// The task.
        task: TaskId,
        /// The destination.
        dst: CpuId,
    },
}

impl fmt::Display for BalanceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BalanceError::BadHz { hz } => write!(f, "sched domains: HZ {hz} out of 1..=10000"),
            BalanceError::NoActiveCpu => {
                write!(
                    f,
                    "sched domains: no active CPU of the topology to build them over"
                )
            }
            BalanceError::RqMismatch { index, found } => write!(
                f,
                "load balance: run queue slot {index} holds {found:?}, expected CPU {index}"
            ),
            BalanceError::UnknownCpu { cpu } => {
                write!(f, "load balance: CPU {} has no sched domains", cpu.0)
            }
            BalanceError::AttachFailed { task, dst } => write!(
                f,
                "load balance: task {} could not be attached to CPU {} nor put back",
                task.0, dst.0
            ),
        }
    }
}

/// A task the balancer moved, reported to [`RqAccess::moved`] after its attach.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Moved {
    /// The task.
    pub task: TaskId,
    /// Its CPU before.
    pub from: CpuId,
    /// Its CPU now.
    pub to: CpuId,
    /// Its `load_avg` on arrival.
    pub load: u64,
    /// The balance that moved it.
    pub migration_type: MigrationType,
}

/// What balancing reads about other CPUs: their published snapshots, without locks.
pub trait Snapshots {
    /// How many CPUs (`0..nr_cpus()` are valid).
    fn nr_cpus(&self) -> usize;
    /// `cpu`'s latest published [`RqSnapshot`].
    fn snapshot(&self, cpu: CpuId) -> RqSnapshot;
    /// The CPU whose snapshot [`Snapshots::snapshot`] returns for `cpu` (checked at every
    /// balance entry point). Default: read it; a caller whose snapshots are indexed by CPU
    /// by construction may answer `cpu` without copying one.
    fn snapshot_cpu(&self, cpu: CpuId) -> CpuId {
        self.snapshot(cpu).cpu()
    }
    /// Whether some CPU's latest snapshot is [`RqSnapshot::overloaded`] (newidle's gate
    /// without `STICKY_OVERLOADED`). Default: read every snapshot; a caller that keeps the
    /// answer as it publishes may return it without copying one.
    fn any_overloaded(&self) -> bool {
        (0..self.nr_cpus()).any(|i| self.snapshot(CpuId(i as u16)).overloaded())
    }
}

/// How balancing reaches the run queues: read any CPU's snapshot, change one run queue
/// at a time.
///
/// `with_rq` hands its closure `cpu`'s run queue and nothing else — not the accessor — so
/// a second run queue cannot be borrowed while the first is held:
///
/// ```compile_fail
/// use asym_sched::balance::RqAccess;
/// use asym_sched::types::CpuId;
/// fn two_at_once<A: RqAccess>(acc: &mut A) {
///     acc.with_rq(CpuId(0), |a| acc.with_rq(CpuId(1), |b| core::mem::swap(a, b)));
/// }
/// ```
pub trait RqAccess: Snapshots {
    /// Run `f` on `cpu`'s run queue (the kernel: under its rq lock) and republish
    /// `cpu`'s snapshot before returning.
    fn with_rq<R>(&mut self, cpu: CpuId, f: impl FnOnce(&mut Rq) -> R) -> R;
    /// A task changed CPU (after its attach, with no run-queue lock held): update
    /// `task_cpu`, trace, kick the destination. Default: nothing.
    fn moved(&mut self, m: &Moved) {
        let _ = m;
    }
    /// The root domain's `rd->overloaded` (`get_rd_overloaded`), read by newidle balance
    /// under `STICKY_OVERLOADED`. Default: recomputed from the snapshots, as without it.
    fn rd_overloaded(&self) -> bool {
        rd_overloaded(self)
    }
    /// `set_rd_overloaded(rd, v)`: the root level's statistics store "some CPU has two
    /// tasks or a misfit one"; an attach that gives a CPU its second task stores `true`
    /// (`add_nr_running`). Default: nothing (no sticky flag to keep).
    fn set_rd_overloaded(&mut self, v: bool) {
        let _ = v;
    }
    /// Runs `f` with this accessor and empty [`Transit`] lists for one move (no run-queue
    /// lock held). Default: lists on the stack; a driver with small stacks lends its own.
    fn with_transit<R>(&mut self, f: impl FnOnce(&mut Self, &mut Transit) -> R) -> R {
        let mut t = Transit::new();
        f(self, &mut t)
    }
}

impl Snapshots for [Rq] {
    fn nr_cpus(&self) -> usize {
        self.len()
    }

    fn snapshot(&self, cpu: CpuId) -> RqSnapshot {
        match self.get(cpu.index()) {
            Some(rq) => rq.snapshot(),
            None => RqSnapshot::idle(cpu, crate::types::Capacity(0)),
        }
    }
}

impl RqAccess for [Rq] {
    fn with_rq<R>(&mut self, cpu: CpuId, f: impl FnOnce(&mut Rq) -> R) -> R {
        f(&mut self[cpu.index()])
    }
}

impl Snapshots for alloc::vec::Vec<Rq> {
    fn nr_cpus(&self) -> usize {
        self.len()
    }

    fn snapshot(&self, cpu: CpuId) -> RqSnapshot {
        self.as_slice().snapshot(cpu)
    }
}

impl RqAccess for alloc::vec::Vec<Rq> {
    fn with_rq<R>(&mut self, cpu: CpuId, f: impl FnOnce(&mut Rq) -> R) -> R {
        f(&mut self[cpu.index()])
    }
}

impl Snapshots for [RqSnapshot] {
    fn nr_cpus(&self) -> usize {
        self.len()
    }

    fn snapshot(&self, cpu: CpuId) -> RqSnapshot {
        match self.get(cpu.index()) {
            Some(s) => *s,
            None => RqSnapshot::idle(cpu, crate::types::Capacity(0)),
        }
    }
}

/// The snapshots match the domains: one per CPU, each its own CPU's.
fn check_cpus<S: Snapshots + ?Sized>(sds: &SchedDomains, snaps: &S) -> Result<(), BalanceError> {
    for i in 0..sds.cpus.len().max(snaps.nr_cpus()) {
        let found = (i < snaps.nr_cpus()).then(|| snaps.snapshot_cpu(CpuId(i as u16)));
        if found.map(|c| c.index()) != Some(i) || i >= sds.cpus.len() {
            return Err(BalanceError::RqMismatch { index: i, found });
        }
    }
    Ok(())
}

fn idle_cpu<S: Snapshots + ?Sized>(snaps: &S, cpu: CpuId) -> bool {
    snaps.snapshot(cpu).nr_running == 0
}

// ---- sched_balance_rq ----------------------------------------------------------------

pub(crate) const LBF_ALL_PINNED: u32 = 0x01;
pub(crate) const LBF_DST_PINNED: u32 = 0x04;
pub(crate) const LBF_SOME_PINNED: u32 = 0x08;
pub(crate) const LBF_ACTIVE_LB: u32 = 0x10;

/// `struct lb_env`.
pub(crate) struct LbEnv {
    pub(crate) dst_cpu: CpuId,
    pub(crate) dst_grpmask: CpuMask,
    pub(crate) new_dst_cpu: CpuId,
    pub(crate) src_cpu: CpuId,
    pub(crate) idle: CpuIdleType,
    pub(crate) imbalance: i64,
    pub(crate) cpus: CpuMask,
    pub(crate) flags: u32,
    pub(crate) loop_: u32,
    pub(crate) loop_max: u32,
    pub(crate) migration_type: MigrationType,
    /// The root domain's overutilized flag as the statistics last set it
    /// (`set_rd_overutilized` in `update_sd_lb_stats`); `None`: untouched.
    pub(crate) rd_overutilized: Option<bool>,
    /// The root domain's overloaded flag as the root level's statistics set it
    /// (`set_rd_overloaded` in `update_sd_lb_stats`); `None`: untouched.
    pub(crate) rd_overloaded: Option<bool>,
}

/// `sched_balance_rq` (`load_balance`): balance `sd` of `this_cpu` by pulling tasks
/// to it (or to another CPU of its group when affinity pins them). `child_flags`
/// are the flags of the domain below `sd` (`sd->child`), if any. Clears
/// `continue_balancing` when another CPU of the group is the one that should balance.
#[allow(clippy::too_many_arguments)]
pub fn sched_balance_rq<A: RqAccess + ?Sized>(
    sds: &SchedDomains,
    this_cpu: CpuId,
    acc: &mut A,
    sd: &mut SchedDomain,
    child_flags: Option<SdFlags>,
    idle: CpuIdleType,
    continue_balancing: &mut bool,
    ctx: &LbContext,
) -> Result<LbResult, BalanceError> {
    check_cpus(sds, acc)?;
    let local_span = sd
        .groups
        .iter()
        .find(|g| g.span.contains(this_cpu))
        .map(|g| g.span)
        .ok_or(BalanceError::UnknownCpu { cpu: this_cpu })?;
    let mut env = LbEnv {
        dst_cpu: this_cpu,
        dst_grpmask: local_span,
        new_dst_cpu: this_cpu,
        src_cpu: this_cpu,
        idle,
        imbalance: 0,
        cpus: sd.span,
        flags: 0,
        loop_: 0,
        loop_max: 0,
        migration_type: MigrationType::Load,
        rd_overutilized: None,
        rd_overloaded: None,
    };
    let root = sd.span.weight() as usize == sds.cpus.len();
    let mut result = LbResult::default();
    let mut ld_moved = 0u32;
    let balanced = 'redo: loop {
        if !should_we_balance(&env, sd, acc) {
            *continue_balancing = false;
            break 'redo true;
        }
        let found = sched_balance_find_src_group(&mut env, sd, root, child_flags, acc, ctx);
        result.overutilized = env.rd_overutilized;
        if let Some(v) = env.rd_overloaded.take() {
            acc.set_rd_overloaded(v);
        }
        let Some(group) = found else {
            break 'redo true;
        };
        result.migration_type = Some(env.migration_type);
        let Some(busiest) = sched_balance_find_src_rq(&env, sd, &sd.groups[group], acc, ctx) else {
            break 'redo true;
        };
        env.src_cpu = busiest;
        env.flags |= LBF_ALL_PINNED;
        let src_nr = acc.snapshot(busiest).nr_running;
        if src_nr > 1 {
            env.loop_max = nr_migrate(ctx).min(src_nr);
            loop {
                let moved = move_tasks(&mut env, sd, acc, ctx)?;
                ld_moved += moved;
                if env.flags & LBF_DST_PINNED != 0 && env.imbalance > 0 {
                    // Some task could not go to dst_cpu but may go to another CPU of
                    // its group: retry there.
                    env.cpus.clear(env.dst_cpu);
                    env.dst_cpu = env.new_dst_cpu;
                    env.flags &= !LBF_DST_PINNED;
                    env.loop_ = 0;
                    continue;
                }
                break;
            }
            if env.flags & LBF_ALL_PINNED != 0 {
                env.cpus.clear(busiest);
                if env.cpus.and_not(env.dst_grpmask) != CpuMask::EMPTY {
                    env.loop_ = 0;
                    env.dst_cpu = this_cpu;
                    continue 'redo;
                }
                // out_all_pinned
                sd.nr_balance_failed = 0;
                backoff(sd, &env);
                result.ld_moved = 0;
                return Ok(result);
            }
        }
        break 'redo false;
    };
    if balanced {
        sd.nr_balance_failed = 0;
        backoff(sd, &env);
        result.ld_moved = 0;
        return Ok(result);
    }
    let mut active = false;
    if ld_moved == 0 {
        if env.idle != CpuIdleType::NewlyIdle && env.migration_type != MigrationType::Misfit {
            sd.nr_balance_failed += 1;
        }
        if need_active_balance(&env, sd) {
            // Linux reads busiest->curr under busiest's lock.
            let curr_allowed = acc.with_rq(env.src_cpu, |src| {
                src.curr()
                    .and_then(|c| src.task(c))
                    .map(|t| t.cpus_allowed.contains(this_cpu))
            });
            if curr_allowed == Some(true) {
                active = true;
                result.active_balance = Some(ActiveBalance {
                    src: env.src_cpu,
                    dst: this_cpu,
                    level: sd.level,
                    migration_type: env.migration_type,
                });
            } else if curr_allowed == Some(false) {
                // out_one_pinned: the running task cannot come here. Unlike
                // out_all_pinned, nr_balance_failed keeps counting.
                backoff(sd, &env);
                return Ok(result);
            }
        }
    } else {
        sd.nr_balance_failed = 0;
    }
    if !active || need_active_balance(&env, sd) {
        sd.balance_interval = sd.min_interval;
    }
    result.ld_moved = ld_moved;
    Ok(result)
}

/// `out_one_pinned`: double the interval, unless newidle or misfit.
fn backoff(sd: &mut SchedDomain, env: &LbEnv) {
    if env.idle == CpuIdleType::NewlyIdle || env.migration_type == MigrationType::Misfit {
        return;
    }
    if (env.flags & LBF_ALL_PINNED != 0 && sd.balance_interval < MAX_PINNED_INTERVAL_MS)
        || sd.balance_interval < sd.max_interval
    {
        sd.balance_interval *= 2;
    }
}

/// `detach_tasks` under the source's lock, then `attach_tasks` under the destination's;
/// a task the destination refuses goes back to the source. Each arrival is reported to
/// [`RqAccess::moved`]. Returns the number detached (Linux's `ld_moved`).
fn move_tasks<A: RqAccess + ?Sized>(
    env: &mut LbEnv,
    sd: &SchedDomain,
    acc: &mut A,
    ctx: &LbContext,
) -> Result<u32, BalanceError> {
    acc.with_transit(|acc, tr| {
        tr.detached.clear();
        tr.arrived.clear();
        let (src, dst) = (env.src_cpu, env.dst_cpu);
        acc.with_rq(src, |rq| {
            detach_tasks_env(env, sd, rq, ctx, &mut tr.detached)
        });
        let n = tr.detached.len() as u32;
        if n == 0 {
            return Ok(0);
        }
        attach_counted(acc, dst, &mut tr.detached, &mut tr.arrived);
        put_back(acc, src, dst, &mut tr.detached)?;
        for &(task, load) in &tr.arrived {
            acc.moved(&Moved {
                task,
                from: src,
                to: dst,
                load,
                migration_type: env.migration_type,
            });
        }
        Ok(n)
    })
}

/// [`attach_tasks`] under `dst`'s lock; an attach that gives `dst` its second task sets
/// the root domain's overloaded flag, as `add_nr_running` does.
fn attach_counted<A: RqAccess + ?Sized>(
    acc: &mut A,
    dst: CpuId,
    tasks: &mut Detached,
    arrived: &mut Arrived,
) {
    let crossed = acc.with_rq(dst, |rq| {
        let before = rq.nr_running();
        attach_tasks(rq, tasks, arrived);
        before < 2 && rq.nr_running() >= 2
    });
    if crossed {
        acc.set_rd_overloaded(true);
    }
}

/// Re-attach to `src` what `dst` refused (left empty).
fn put_back<A: RqAccess + ?Sized>(
    acc: &mut A,
    src: CpuId,
    dst: CpuId,
    refused: &mut Detached,
) -> Result<(), BalanceError> {
    if refused.is_empty() {
        return Ok(());
    }
    let crossed = acc.with_rq(src, |rq| {
        let before = rq.nr_running();
        let r = refused.iter().try_for_each(|t| {
            let id = t.id;
            rq.attach_task(t.clone())
                .map_err(|_| BalanceError::AttachFailed { task: id, dst })
        });
        refused.clear();
        r.map(|()| before < 2 && rq.nr_running() >= 2)
    })?;
    if crossed {
        acc.set_rd_overloaded(true);
    }
    Ok(())
}

/// `sysctl_sched_nr_migrate` as used: at most [`MAX_NR_MIGRATE`].
pub(crate) fn nr_migrate(ctx: &LbContext) -> u32 {
    ctx.nr_migrate.min(MAX_NR_MIGRATE as u32)
}

/// `active_load_balance_cpu_stop` on `src` (after the caller preempted its running
/// task): move one task that may run on `dst`, least recently run first, ignoring
/// cache hotness (`LBF_ACTIVE_LB`): [`detach_one_task`] under the source's lock, the
/// attach under the destination's. Returns the moved task's id.
pub fn active_load_balance_cpu_stop<A: RqAccess + ?Sized>(
    sds: &mut SchedDomains,
    acc: &mut A,
    req: &ActiveBalance,
) -> Result<Option<TaskId>, BalanceError> {
    check_cpus(sds, acc)?;
    if acc.snapshot(req.src).nr_running == 0 || req.src == req.dst {
        return Ok(None);
    }
    let dst_sd = &mut sds.cpus[req.dst.index()].sd;
    let Some(sd) = dst_sd.iter_mut().find(|sd| sd.span.contains(req.src)) else {
        return Ok(None);
    };
    let Some(t) = acc.with_rq(req.src, |rq| detach_one_task(rq, req.dst, sd)) else {
        return Ok(None);
    };
    // Active balancing done: reset the failure counter.
    sd.nr_balance_failed = 0;
    let id = t.id;
    acc.with_transit(|acc, tr| {
        tr.detached.clear();
        tr.arrived.clear();
        let _ = tr.detached.push(t);
        attach_counted(acc, req.dst, &mut tr.detached, &mut tr.arrived);
        put_back(acc, req.src, req.dst, &mut tr.detached)?;
        for &(task, load) in &tr.arrived {
            acc.moved(&Moved {
                task,
                from: req.src,
                to: req.dst,
                load,
                migration_type: req.migration_type,
            });
        }
        Ok::<(), BalanceError>(())
    })?;
    Ok(Some(id))
}

// ---- tick, softirq, periodic and newidle balance ------------------------------------

/// `sched_balance_trigger` (`trigger_load_balance`), called from the tick: should
/// SCHED_SOFTIRQ be raised on this CPU? (`time_after_eq(jiffies, rq->next_balance)`.)
/// The NOHZ kick is not modelled here.
pub fn sched_balance_trigger(now: Nanos, rq: &Rq) -> bool {
    now >= rq.next_balance()
}

/// `sched_balance_softirq` (`run_rebalance_domains`) on `cpu`: update blocked
/// averages, then [`sched_balance_domains`] with the idle state the tick saw
/// (`rq->idle_balance`).
pub fn sched_balance_softirq<A: RqAccess + ?Sized>(
    sds: &mut SchedDomains,
    cpu: CpuId,
    acc: &mut A,
    now: Nanos,
    ctx: &LbContext,
) -> Result<BalanceReport, BalanceError> {
    check_cpus(sds, acc)?;
    if cpu.index() >= sds.cpus.len() {
        return Err(BalanceError::UnknownCpu { cpu });
    }
    acc.with_rq(cpu, |rq| rq.update_blocked_averages());
    let idle = if idle_cpu(acc, cpu) {
        CpuIdleType::Idle
    } else {
        CpuIdleType::NotIdle
    };
    sched_balance_domains(sds, cpu, acc, idle, now, ctx)
}

/// `sched_balance_domains` (`rebalance_domains`): walk `cpu`'s domains bottom-up,
/// balance those whose interval has elapsed, back off or reset their intervals, and
/// set `rq->next_balance` to the earliest next deadline.
pub fn sched_balance_domains<A: RqAccess + ?Sized>(
    sds: &mut SchedDomains,
    cpu: CpuId,
    acc: &mut A,
    mut idle: CpuIdleType,
    now: Nanos,
    ctx: &LbContext,
) -> Result<BalanceReport, BalanceError> {
    check_cpus(sds, acc)?;
    // The statistics may change the root domain's overutilized flag; later levels see it.
    let mut ctx = *ctx;
    if cpu.index() >= sds.cpus.len() {
        return Err(BalanceError::UnknownCpu { cpu });
    }
    let jiffies = sds.jiffies(now);
    let mut report = BalanceReport::default();
    let mut busy = idle != CpuIdleType::Idle;
    let mut next_balance = jiffies + 60 * sds.hz as u64;
    let mut update_next_balance = false;
    let mut continue_balancing = true;
    let mut max_cost = 0u64;
    let mut need_decay = false;
    let mut sd_list = core::mem::take(&mut sds.cpus[cpu.index()].sd);
    for level in 0..sd_list.len() {
        let (lower, upper) = sd_list.split_at_mut(level);
        let sd = &mut upper[0];
        let child_flags = lower.last().map(|c| c.flags);
        // v6.12 overwrites it at each level: the last level's decay decides.
        need_decay = sds.update_newidle_cost(sd, 0, jiffies);
        max_cost += sd.max_newidle_lb_cost;
        if !continue_balancing {
            if need_decay {
                continue;
            }
            break;
        }
        let mut interval = sds.get_sd_balance_interval(sd, busy);
        if jiffies >= sd.last_balance + interval {
            let r = sched_balance_rq(
                sds,
                cpu,
                acc,
                sd,
                child_flags,
                idle,
                &mut continue_balancing,
                &ctx,
            )?;
            report.add(&r);
            if let Some(v) = r.overutilized {
                ctx.overutilized = v;
            }
            if r.ld_moved > 0 {
                idle = if idle_cpu(acc, cpu) {
                    CpuIdleType::Idle
                } else {
                    CpuIdleType::NotIdle
                };
                busy = idle != CpuIdleType::Idle;
            }
            sd.last_balance = jiffies;
            interval = sds.get_sd_balance_interval(sd, busy);
        }
        if next_balance > sd.last_balance + interval {
            next_balance = sd.last_balance + interval;
            update_next_balance = true;
        }
    }
    let b = &mut sds.cpus[cpu.index()];
    b.sd = sd_list;
    if need_decay {
        b.max_idle_balance_cost = max_cost.max(ctx.migration_cost_ns);
    }
    if update_next_balance {
        let t = sds.jiffies_to_nanos(next_balance);
        acc.with_rq(cpu, |rq| rq.set_next_balance(t));
    }
    Ok(report)
}

/// What newidle balance's closed gate needs of `cpu`'s domains, for a caller that decides
/// the gate while it still holds `this_rq`'s lock (Linux tests the gate in
/// `sched_balance_newidle` before `raw_spin_rq_unlock`; the kernel keeps this per CPU as the
/// domains change and, when no CPU is overloaded, takes [`sched_balance_newidle_skipped`]
/// without leaving the lock).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewidleSkipInfo {
    /// The lowest domain's `last_balance + get_sd_balance_interval(sd, false)` (jiffies), or
    /// `None` without domains.
    pub bound: Option<u64>,
    /// `HZ`.
    pub hz: u32,
    /// `TICK_NSEC`.
    pub tick_nsec: u64,
    /// `sched_asym_cpucap_active()`.
    pub asym_cpucapacity: bool,
}

impl SchedDomains {
    /// [`NewidleSkipInfo::bound`] of `cpu` as its domains are now.
    pub fn newidle_skip_bound(&self, cpu: CpuId) -> Option<u64> {
        self.cpus
            .get(cpu.index())
            .and_then(|b| b.sd.first())
            .map(|sd| self.sd_next_balance(sd))
    }

    /// [`NewidleSkipInfo`] of `cpu` as its domains are now.
    pub fn newidle_skip_info(&self, cpu: CpuId) -> NewidleSkipInfo {
        NewidleSkipInfo {
            bound: self.newidle_skip_bound(cpu),
            hz: self.hz,
            tick_nsec: self.tick_nsec,
            asym_cpucapacity: self.asym_cpucapacity,
        }
    }
}

/// `next_balance` when newidle's gate is closed: `jiffies + HZ`, pulled to the lowest
/// domain's next balance under `AGGRESSIVE_NEXT_BALANCE` (`update_next_balance` on the
/// skip path); without it (seed 002) a skipped newidle pulls nothing.
pub fn newidle_skip_next_balance(
    jiffies: u64,
    hz: u32,
    bound: Option<u64>,
    aggressive: bool,
) -> u64 {
    let next_balance = jiffies + hz as u64;
    match (aggressive, bound) {
        (true, Some(b)) => next_balance.min(b),
        _ => next_balance,
    }
}

/// `get_rd_overloaded(this_rq->rd)` as `sched_balance_newidle`'s gate reads it (after
/// `update_misfit_status(NULL, this_rq)`): under `STICKY_OVERLOADED`, the root domain's flag as
/// Linux keeps it (`rd`: [`RqAccess::rd_overloaded`]); otherwise asym's earlier approximation,
/// recomputed — this CPU's run queue as it is now (`this`: [`Rq::overloaded`]) or another
/// CPU's published snapshot (`others`: [`Snapshots::any_overloaded`]) is overloaded. The one
/// rule for [`sched_balance_newidle`] and for a caller that decides the closed gate under
/// `this_rq`'s lock before publishing it ([`sched_balance_newidle_skipped`]; the kernel).
pub fn newidle_rd_overloaded(
    features: SchedFeatures,
    rd: impl FnOnce() -> bool,
    this: bool,
    others: impl FnOnce() -> bool,
) -> bool {
    if features.enabled(Feature::STICKY_OVERLOADED) {
        rd()
    } else {
        this || others()
    }
}

/// [`sched_balance_newidle`] when no CPU is overloaded (its gate closes whatever
/// `avg_idle` is), on `this_rq` under its lock: `update_misfit_status(NULL, this_rq)`, and
/// `rq->next_balance` pulled to [`newidle_skip_next_balance`]. Leaves every domain as it
/// is, as the skip path does (nothing balanced, no cost to record).
pub fn sched_balance_newidle_skipped(
    rq: &mut Rq,
    info: &NewidleSkipInfo,
    now: Nanos,
    features: SchedFeatures,
) {
    if info.asym_cpucapacity {
        rq.set_misfit_task_load(0);
    }
    let jiffies = now.0 / info.tick_nsec;
    let aggressive = features.enabled(Feature::AGGRESSIVE_NEXT_BALANCE);
    let nb = newidle_skip_next_balance(jiffies, info.hz, info.bound, aggressive)
        .saturating_mul(info.tick_nsec);
    if rq.next_balance().0 > nb {
        rq.set_next_balance(Nanos(nb));
    }
}

/// `sched_balance_newidle` (`newidle_balance`): `cpu` is about to go idle; try to
/// pull work from its domains, bottom-up, while the expected idle time (`avg_idle`)
/// exceeds the cost of balancing. `sched_clock` reads `sched_clock_cpu` (ns) to
/// measure that cost. Pulls `rq->next_balance` earlier, never later: under
/// `AGGRESSIVE_NEXT_BALANCE` (Linux) from every domain visited, even unbalanced ones
/// with a stale `last_balance`; without it (seed 002) only from domains balanced
/// here, which stamp `last_balance`.
pub fn sched_balance_newidle<A: RqAccess + ?Sized>(
    sds: &mut SchedDomains,
    cpu: CpuId,
    acc: &mut A,
    now: Nanos,
    ctx: &LbContext,
    sched_clock: &mut dyn FnMut() -> u64,
) -> Result<BalanceReport, BalanceError> {
    check_cpus(sds, acc)?;
    // The statistics may change the root domain's overutilized flag; later levels see it.
    let mut ctx = *ctx;
    if cpu.index() >= sds.cpus.len() {
        return Err(BalanceError::UnknownCpu { cpu });
    }
    let aggressive = ctx.features.enabled(Feature::AGGRESSIVE_NEXT_BALANCE);
    let jiffies = sds.jiffies(now);
    let mut next_balance = jiffies + sds.hz as u64;
    let mut report = BalanceReport::default();
    let mut pulled = false;
    // update_misfit_status(NULL, rq): nothing runs, nothing misfits.
    let asym = sds.asym_cpucapacity;
    let (avg_idle, this_overloaded) = acc.with_rq(cpu, |rq| {
        if asym {
            rq.set_misfit_task_load(0);
        }
        (rq.avg_idle(), rq.overloaded())
    });
    let overloaded = newidle_rd_overloaded(
        ctx.features,
        || acc.rd_overloaded(),
        this_overloaded,
        || rd_overloaded(acc),
    );
    let mut sd_list = core::mem::take(&mut sds.cpus[cpu.index()].sd);
    let skip = match sd_list.first() {
        Some(sd) => !overloaded || avg_idle < sd.max_newidle_lb_cost,
        None => !overloaded,
    };
    let mut curr_cost = 0u64;
    if skip {
        let bound = sd_list.first().map(|sd| sds.sd_next_balance(sd));
        next_balance = newidle_skip_next_balance(jiffies, sds.hz, bound, aggressive);
    } else {
        let mut t0 = sched_clock();
        // sched_balance_update_blocked_averages(this_cpu): the local group's statistics
        // must not see stale blocked load.
        acc.with_rq(cpu, |rq| rq.update_blocked_averages());
        for level in 0..sd_list.len() {
            let (lower, upper) = sd_list.split_at_mut(level);
            let sd = &mut upper[0];
            let child_flags = lower.last().map(|c| c.flags);
            let mut continue_balancing = true;
            if aggressive {
                sds.update_next_balance(sd, &mut next_balance);
            }
            if avg_idle < curr_cost + sd.max_newidle_lb_cost {
                break;
            }
            if sd.flags.contains(SdFlags::BALANCE_NEWIDLE) {
                let r = sched_balance_rq(
                    sds,
                    cpu,
                    acc,
                    sd,
                    child_flags,
                    CpuIdleType::NewlyIdle,
                    &mut continue_balancing,
                    &ctx,
                )?;
                report.add(&r);
                if let Some(v) = r.overutilized {
                    ctx.overutilized = v;
                }
                pulled = r.ld_moved > 0;
                let t1 = sched_clock();
                let domain_cost = t1.saturating_sub(t0);
                sds.update_newidle_cost(sd, domain_cost, jiffies);
                curr_cost += domain_cost;
                t0 = t1;
                if !aggressive {
                    sd.last_balance = jiffies;
                    sds.update_next_balance(sd, &mut next_balance);
                }
            }
            if pulled || !continue_balancing {
                break;
            }
        }
    }
    let b = &mut sds.cpus[cpu.index()];
    b.sd = sd_list;
    if curr_cost > b.max_idle_balance_cost {
        b.max_idle_balance_cost = curr_cost;
    }
    let nb = next_balance.saturating_mul(sds.tick_nsec);
    let has_tasks = acc.with_rq(cpu, |rq| {
        if rq.next_balance().0 > nb {
            rq.set_next_balance(Nanos(nb));
        }
        rq.h_nr_running() > 0
    });
    report.pulled = pulled || has_tasks;
    Ok(report)
}
