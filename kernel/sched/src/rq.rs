//! The per-CPU run queue: clocks, the fair class, PELT, util_est and uclamp together.
//!
//! Re-derives the fair-class paths of Linux v6.12 `kernel/sched/core.c` and `fair.c`
//! around `struct rq` / `struct cfs_rq`, in Linux's update order:
//! - `update_rq_clock` → `update_rq_clock_task` → `update_rq_clock_pelt`;
//! - `enqueue_task` → `enqueue_task_fair` (`util_est_enqueue`, iowait cpufreq kick,
//!   `enqueue_entity`: `update_curr` → `update_load_avg(DO_ATTACH)` → `place_entity` →
//!   `account_entity_enqueue` → `__enqueue_entity`; `h_nr_running++`) → `uclamp_rq_inc`;
//!   `wake_up_new_task` (`post_init_entity_util_avg`, `ENQUEUE_INITIAL`);
//! - `dequeue_task` → `uclamp_rq_dec` → `dequeue_task_fair` (`util_est_dequeue`,
//!   `dequeue_entity`: `update_curr` → `update_load_avg(DO_DETACH if migrating)` →
//!   `update_entity_lag` → `__dequeue_entity` → `account_entity_dequeue` →
//!   `update_min_vruntime`; `h_nr_running--`; `util_est_update`);
//! - `pick_next_task_fair` (v6.12 order: `update_curr`, `pick_eevdf` with `curr`
//!   competing, then `put_prev_set_next_task`; idle → `update_idle_rq_clock_pelt`),
//!   `put_prev_task_fair`, `set_next_task_fair`, `task_tick_fair` (`entity_tick`),
//!   `check_preempt_wakeup_fair`, `yield_task_fair`, `set_user_nice`
//!   (dequeue SAVE → `reweight_task_fair` → enqueue RESTORE → `prio_changed_fair`);
//! - migration: `detach_task`/`attach_task` (on-rq, `DO_DETACH`/`DO_ATTACH`, lag and
//!   relative deadline carried across) and, for a sleeping task woken elsewhere, the pure
//!   [`migrate_task_rq_fair`] over the old CPU's published [`PeltRemote`]
//!   (`remove_entity_load_avg`, `migrate_se_pelt_lag` when that CPU is idle) whose
//!   removal the old CPU takes in with [`Rq::apply_removed`], then attach on the new CPU
//!   (`rq/remote.rs`);
//! - `sched_balance_update_blocked_averages` (`__update_blocked_fair` for the root);
//! - `DELAY_DEQUEUE` / `DELAY_ZERO` (v6.12, off by default here): `block_task` →
//!   `dequeue_entity` of a task that is not eligible returns early with `sched_delayed`
//!   ([`Rq::block_task_into`]); `pick_next_entity` finishing a delayed task's dequeue
//!   (`dequeue_entities(DEQUEUE_SLEEP | DEQUEUE_DELAYED)`, `finish_delayed_dequeue_entity`,
//!   `__block_task`: [`Rq::pick_next_task_with`] hands it to the caller); `ttwu_runnable` →
//!   `enqueue_task(ENQUEUE_DELAYED)` → `requeue_delayed_entity` ([`Rq::requeue_delayed_task`]);
//!   v6.12's skips for a delayed task in `dequeue_task_fair`/`enqueue_task_fair` (no
//!   `util_est_dequeue`/`_enqueue` when it migrates or is saved/restored) and in
//!   `uclamp_rq_dec`/`_inc`. v6.12 has no `h_nr_delayed` (v6.13): a delayed task stays in
//!   `nr_running`/`h_nr_running` and so in the root cfs_rq's runnable signal, while its own
//!   runnable signal stops (`se_runnable`); `can_migrate_task` does not exclude it (v6.14
//!   does), so the balancer may move it, still delayed.
//!
//! Ownership: an [`Rq`] owns its queued [`Task`]s (running included); a dequeued task
//! is handed back by value and owned by the caller while it sleeps or migrates, so
//! "no task lost or duplicated" is checkable. A `Task` is a few hundred bytes: a hot
//! path moves it between the run queue and the caller's own slot for it with
//! [`Rq::dequeue_task_into`] / [`Rq::enqueue_task_from`] (one move each way) rather than
//! by value through every layer. Nothing here blocks, does I/O or
//! allocates: the task and timeline arenas are allocated once by [`Rq::new`] for
//! [`RqConfig::max_tasks`] tasks, and an enqueue beyond that is refused with
//! [`RqError::Full`], handing the task back, so every method may run with the rq lock
//! held in interrupt context.
//!
//! Callers drive time: call [`Rq::update_rq_clock`] before each operation, as Linux
//! does on entry to every scheduler path (`rq_clock_task` is what EEVDF charges;
//! `rq_clock_pelt` what PELT ages by).
//!
//! Hooks the callers drive:
//! - cpufreq: wherever Linux calls `cpufreq_update_util` for the fair class
//!   (`cfs_rq_util_change` after a root cfs_rq PELT change — enqueue, dequeue, tick,
//!   blocked-load decay, attach/detach — and `enqueue_task_fair` of an iowait task) we
//!   record a [`CpufreqUpdate`]; the caller takes it with [`Rq::take_cpufreq_update`]
//!   and runs schedutil.
//! - misfit: [`Rq::update_misfit_status`] (from the pick and the tick, see
//!   [`crate::sched_core`]) sets [`Rq::misfit_task_load`].
//! - load balancing: [`Rq::next_balance`] is stored, never acted upon here; `avg_idle`
//!   and `idle_stamp` are kept by the wake-up and idle-entry steps.
//! - other CPUs read this one only through [`Rq::snapshot`] ([`RqSnapshot`]).
//!
//! Deliberate differences: one class only (no RT/DL/idle classes: `nr_running` is
//! `cfs.h_nr_running`; the CPU is "idle" — `is_idle_task(rq->curr)`, which drives
//! `clock_pelt` — from a [`Rq::pick_next_task`] that found nothing until the next one
//! that finds a task); no cgroups. A dequeue of the running task
//! also does `put_prev_task`'s bookkeeping (Linux keeps `cfs_rq->curr` pointing at it
//! until `schedule()` picks the next task; the caller must call [`Rq::pick_next_task`]
//! next, and [`Rq::need_resched`] says so); a delayed running task is put back into the
//! tree at once the same way. `util_est_update` runs after `dequeue_entity`'s PELT update,
//! as up to v6.11 (v6.12 calls it before `dequeue_entities`, one update earlier), also for a
//! delayed dequeue, so the sample is the task's util at the moment it sleeps. A finished
//! delayed dequeue is handed to the caller through a sink ([`Rq::pick_next_task_with`])
//! rather than kept: the run queue owns queued tasks only.
//! `rq->clock` and `rq->clock_task` are equal (no IRQ-time or steal accounting).
//!
//! `cpu_util` inputs come from [`Rq::cpu_snapshot`] and [`Rq::task_util`] in the
//! shapes of [`crate::cpu_util`]; a sleeping task's signals are brought up to date
//! with [`sync_entity_load_avg`] before they are read.

use crate::balance::SYSCTL_SCHED_MIGRATION_COST_NS;
use crate::cpu_util::{CfsRqUtil, CpuCapacityInfo, CpuSnapshot, TaskUtil};
use crate::eas::{task_max_allowed_capacity, task_util_est, update_misfit_status, MisfitTask};
use crate::fair::{
    scale_load_down, CfsRq, DequeueMode, LoadWeight, Nice, PlaceFlags, DEFAULT_TICK_NSEC,
};
use crate::features::{Feature, SchedFeatures};
use crate::pelt::{
    CfsRqAvg, CfsRqState, EntityState, PeltClock, PeltInvariance, SchedAvg, DO_ATTACH, DO_DETACH,
};
use crate::topology::Topology;
use crate::types::{Capacity, CpuId, CpuMask, Nanos, TaskId, Util, SCHED_CAPACITY_SCALE};
use crate::uclamp::{uclamp_eff_range, ClampRange, TaskUclamp, UclampRq, UclampSysctl};
use crate::util_est::{util_est_dequeue, util_est_enqueue, util_est_update};

/// [`Rq::update_load_avg`] for `$task` on run queue `$rq` with `$flags`: the run queue's
/// fields borrowed one by one, so that `$task` may be borrowed from `$rq`'s own arena.
macro_rules! update_load_avg {
    ($rq:expr, $task:expr, $flags:expr) => {
        Rq::update_load_avg(
            &mut $rq.cfs_avg,
            &mut $rq.cpufreq_update,
            &$rq.pelt,
            &$rq.cfs,
            $rq.h_nr_running,
            $task,
            $flags,
        )
    };
}

mod arena;
mod invariants;
mod remote;
mod snapshot;
mod task;

pub use arena::ListIter;
use arena::TaskArena;
pub use remote::{
    migrate_task_rq_fair, remove_entity_load_avg, sync_entity_load_avg, synced_avg, PeltRemote,
};
pub use snapshot::RqSnapshot;
pub use task::{
    Block, CpufreqUpdate, DequeueFlags, EnqueueError, EnqueueFlags, Resched, RqError, Task,
};

/// How to build an [`Rq`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RqConfig {
    /// This CPU.
    pub cpu: CpuId,
    /// Number of online CPUs (scales the base slice).
    pub nr_cpus: u32,
    /// `arch_scale_cpu_capacity`.
    pub capacity_orig: Capacity,
    /// `TICK_NSEC`.
    pub tick_nsec: u64,
    /// The feature set (changeable later with [`Rq::set_features`]).
    pub features: SchedFeatures,
    /// The uclamp sysctls.
    pub uclamp: UclampSysctl,
    /// The most tasks the run queue can hold (running one included). Its arenas are
    /// allocated for this many when it is built and never grow: a further enqueue is
    /// refused with [`RqError::Full`].
    pub max_tasks: usize,
}

impl RqConfig {
    /// Defaults: HZ=250, Linux's features, capacity 1024, default uclamp sysctls, room
    /// for [`RqConfig::DEFAULT_MAX_TASKS`] tasks.
    pub fn new(cpu: CpuId, nr_cpus: u32) -> RqConfig {
        RqConfig {
            cpu,
            nr_cpus,
            capacity_orig: Capacity(SCHED_CAPACITY_SCALE),
            tick_nsec: DEFAULT_TICK_NSEC,
            features: SchedFeatures::default(),
            uclamp: UclampSysctl::default(),
            max_tasks: RqConfig::DEFAULT_MAX_TASKS,
        }
    }

    /// The default [`RqConfig::max_tasks`].
    pub const DEFAULT_MAX_TASKS: usize = 64;
}

/// One CPU's run queue (`struct rq` with its root `struct cfs_rq`).
#[derive(Debug)]
pub struct Rq {
    cpu: CpuId,
    /// `rq->clock` (= `rq->clock_task`: no IRQ or steal time).
    clock: u64,
    /// `clock_task`, `clock_pelt`, `lost_idle_time`.
    pelt: PeltClock,
    /// The EEVDF state of the root cfs_rq.
    cfs: CfsRq,
    /// The root cfs_rq's PELT signals (`cfs_rq->avg`, `removed`), util_est included.
    cfs_avg: CfsRqAvg,
    /// `cfs_rq->h_nr_running` (= `rq->nr_running`: one class).
    h_nr_running: u32,
    /// The queued tasks, running one included, and `rq->cfs_tasks` through them: most
    /// recently run at the head, least recently run at the tail, where `detach_tasks`
    /// starts.
    tasks: TaskArena,
    uclamp: UclampRq,
    uclamp_sysctl: UclampSysctl,
    capacity_orig: Capacity,
    freq_scale: Capacity,
    features: SchedFeatures,
    need_resched: bool,
    /// `is_idle_task(rq->curr)`: the CPU runs its idle task. Set by
    /// [`Rq::pick_next_task`] only, like Linux's context switch: between the dequeue
    /// of the running task and the next pick the CPU is not idle yet, so a clock
    /// update there must not re-sync `clock_pelt` (that would give a saturated rq
    /// idle time it never had, defeating `lost_idle_time`).
    curr_is_idle: bool,
    cpufreq_update: Option<CpufreqUpdate>,
    misfit_task_load: u64,
    next_balance: Nanos,
    /// `tick_nohz_get_idle_calls_cpu`: times the CPU entered its idle loop.
    idle_calls: u64,
    /// `rq->avg_idle` (ns): the expected length of the next idle period.
    avg_idle: u64,
    /// `rq->idle_stamp`: when the CPU went idle without pulling work (`rq->clock`).
    idle_stamp: Option<Nanos>,
    /// The length of the last idle period ended by a wake-up (ns; `u64::MAX` before the
    /// first).
    last_idle_ns: u64,
    /// `rq->has_blocked_load`: idle with signals still to decay (NOHZ).
    has_blocked_load: bool,
    /// `rq->last_blocked_load_update_tick` (jiffies).
    last_blocked_load_update_j: u64,
}

impl Rq {
    /// An idle run queue whose clocks start at `now`.
    pub fn new(config: RqConfig, now: Nanos) -> Rq {
        Rq {
            cpu: config.cpu,
            clock: now.0,
            pelt: PeltClock::new(now, PeltInvariance::from_features(config.features)),
            cfs: CfsRq::new(config.nr_cpus, config.tick_nsec, config.max_tasks),
            cfs_avg: CfsRqAvg::default(),
            h_nr_running: 0,
            tasks: TaskArena::with_capacity(config.max_tasks),
            uclamp: UclampRq::new(),
            uclamp_sysctl: config.uclamp,
            capacity_orig: config.capacity_orig,
            freq_scale: Capacity(SCHED_CAPACITY_SCALE),
            features: config.features,
            need_resched: false,
            curr_is_idle: true,
            cpufreq_update: None,
            misfit_task_load: 0,
            next_balance: now,
            idle_calls: 0,
            avg_idle: 2 * SYSCTL_SCHED_MIGRATION_COST_NS,
            // A CPU starts in its idle loop, as after a newidle balance that found nothing.
            idle_stamp: Some(now),
            last_idle_ns: u64::MAX,
            has_blocked_load: false,
            last_blocked_load_update_j: 0,
        }
    }

    // ---- clocks, capacity, features -------------------------------------------

    /// `update_rq_clock`: advance `clock`, `clock_task` and `clock_pelt` to `now`.
    pub fn update_rq_clock(&mut self, now: Nanos) -> Result<(), RqError> {
        if now.0 < self.clock {
            return Err(RqError::ClockWentBackwards {
                cpu: self.cpu,
                clock: Nanos(self.clock),
                now,
            });
        }
        let delta = now.0 - self.clock;
        self.clock = now.0;
        let idle = self.curr_is_idle;
        self.pelt
            .update_rq_clock_pelt(Nanos(delta), self.capacity_orig, self.freq_scale, idle);
        Ok(())
    }

    /// `rq->clock`.
    pub fn clock(&self) -> Nanos {
        Nanos(self.clock)
    }

    /// `rq_clock_task`.
    pub fn clock_task(&self) -> Nanos {
        Nanos(self.pelt.rq_clock_task())
    }

    /// `rq_clock_pelt`.
    pub fn clock_pelt(&self) -> Nanos {
        Nanos(self.pelt.rq_clock_pelt())
    }

    /// The PELT clock state.
    pub fn pelt_clock(&self) -> &PeltClock {
        &self.pelt
    }

    /// This CPU.
    pub fn cpu(&self) -> CpuId {
        self.cpu
    }

    /// `arch_scale_cpu_capacity`.
    pub fn capacity_orig(&self) -> Capacity {
        self.capacity_orig
    }

    /// Set `capacity_orig` (e.g. after a topology update). Takes effect at the next
    /// clock update.
    pub fn set_capacity_orig(&mut self, cap: Capacity) {
        self.capacity_orig = cap;
    }

    /// `arch_scale_freq_capacity`: current frequency / max frequency × 1024.
    pub fn freq_scale(&self) -> Capacity {
        self.freq_scale
    }

    /// Set `arch_scale_freq_capacity` (after a frequency change). Call
    /// [`Rq::update_rq_clock`] first so time already elapsed is scaled by the old value.
    pub fn set_freq_scale(&mut self, scale: Capacity) {
        self.freq_scale = scale;
    }

    /// CPUs came or went (`update_sysctl` on hotplug): re-scale the base slice. Tasks
    /// keep their current request until their next one.
    pub fn set_nr_cpus(&mut self, nr_cpus: u32) {
        self.cfs.set_nr_cpus(nr_cpus);
    }

    /// The feature set in force.
    pub fn features(&self) -> SchedFeatures {
        self.features
    }

    /// Change the feature set at run time (`/sys/kernel/debug/sched/features`).
    /// Switching `PELT_CLOCK` re-syncs the PELT clock. Switching `UTIL_EST` rebuilds
    /// the cfs_rq's estimate from the queued tasks (Linux leaves it stale until the
    /// tasks cycle through the queue; rebuilding keeps "Σ of queued tasks" exact).
    pub fn set_features(&mut self, features: SchedFeatures) {
        let util_est_was = self.features.enabled(Feature::UTIL_EST);
        self.features = features;
        self.pelt
            .set_invariance(PeltInvariance::from_features(features));
        if features.enabled(Feature::UTIL_EST) != util_est_was {
            self.cfs_avg.avg.util_est = 0;
            // A delayed task's estimate left the cfs_rq when it blocked.
            for t in self.tasks.iter().filter(|t| !t.se.sched_delayed) {
                util_est_enqueue(&mut self.cfs_avg.avg, &t.avg, features);
            }
        }
    }

    /// The uclamp sysctls.
    pub fn uclamp_sysctl(&self) -> UclampSysctl {
        self.uclamp_sysctl
    }

    /// Replace the uclamp sysctls (applies to tasks enqueued from now on).
    pub fn set_uclamp_sysctl(&mut self, sys: UclampSysctl) {
        self.uclamp_sysctl = sys;
    }

    // ---- getters ----------------------------------------------------------------

    /// `rq->nr_running`.
    pub fn nr_running(&self) -> u32 {
        self.h_nr_running
    }

    /// `cfs_rq->h_nr_running`.
    pub fn h_nr_running(&self) -> u32 {
        self.h_nr_running
    }

    /// The running task (`rq->curr`), `None` when idle.
    pub fn curr(&self) -> Option<TaskId> {
        self.cfs.curr()
    }

    /// `test_tsk_need_resched(rq->curr)`: the caller should call
    /// [`Rq::pick_next_task`] (after [`Rq::put_prev_task`] or not).
    pub fn need_resched(&self) -> bool {
        self.need_resched
    }

    /// A queued task.
    pub fn task(&self, id: TaskId) -> Option<&Task> {
        self.tasks.get(id)
    }

    /// The queued tasks (running one included), by id.
    pub fn tasks(&self) -> impl Iterator<Item = &Task> + '_ {
        self.tasks.iter()
    }

    /// The EEVDF state.
    pub fn cfs(&self) -> &CfsRq {
        &self.cfs
    }

    /// The root cfs_rq's PELT signals (`rq->cfs.avg`).
    pub fn cfs_avg(&self) -> &SchedAvg {
        &self.cfs_avg.avg
    }

    /// The root cfs_rq's PELT state with its pending removals.
    pub fn cfs_rq_avg(&self) -> &CfsRqAvg {
        &self.cfs_avg
    }

    pub(crate) fn cfs_avg_mut(&mut self) -> &mut CfsRqAvg {
        &mut self.cfs_avg
    }

    /// `is_idle_task(rq->curr)`: since the last [`Rq::pick_next_task`] found nothing
    /// (until the next one finds a task).
    pub fn curr_is_idle(&self) -> bool {
        self.curr_is_idle
    }

    /// The cfs_rq's utilisation signals, as `cpu_util` takes them.
    pub fn cfs_util(&self) -> CfsRqUtil {
        CfsRqUtil::from_avg(&self.cfs_avg.avg)
    }

    /// This CPU's `cpu_util` input.
    pub fn cpu_snapshot(&self) -> CpuSnapshot {
        CpuSnapshot {
            cpu: self.cpu,
            capacity_orig: self.capacity_orig,
            cfs: self.cfs_util(),
        }
    }

    /// A queued task's `cpu_util` input.
    pub fn task_util(&self, id: TaskId) -> Option<TaskUtil> {
        self.tasks
            .get(id)
            .map(|t| TaskUtil::from_avg(&t.avg, self.cpu, true))
    }

    /// `cpu_util_cfs` without util_est, capped at `capacity_orig`:
    /// `min(cfs util_avg, capacity_orig)`.
    pub fn cpu_util_avg(&self) -> Util {
        Util(self.cfs_avg.avg.util_avg.min(self.capacity_orig.0 as u64) as u32)
    }

    /// The rq's uclamp aggregation.
    pub fn uclamp(&self) -> &UclampRq {
        &self.uclamp
    }

    /// `uclamp_rq_get` for both ids.
    pub fn uclamp_range(&self) -> ClampRange {
        self.uclamp.range()
    }

    /// Take the pending cpufreq request, if any.
    pub fn take_cpufreq_update(&mut self) -> Option<CpufreqUpdate> {
        self.cpufreq_update.take()
    }

    /// `rq->misfit_task_load`.
    pub fn misfit_task_load(&self) -> u64 {
        self.misfit_task_load
    }

    /// Set `rq->misfit_task_load` (for `update_misfit_status`).
    pub fn set_misfit_task_load(&mut self, load: u64) {
        self.misfit_task_load = load;
    }

    /// `rq->next_balance`, as `rq->clock` time (Linux counts jiffies; our timers are
    /// in ns). Starts at the rq's creation time.
    pub fn next_balance(&self) -> Nanos {
        self.next_balance
    }

    /// Set `rq->next_balance`.
    pub fn set_next_balance(&mut self, t: Nanos) {
        self.next_balance = t;
    }

    /// `tick_nohz_get_idle_calls_cpu`: how often the CPU entered its idle loop
    /// ([`Rq::note_idle_entry`]); schedutil's `sugov_hold_freq` reads it.
    pub fn idle_calls(&self) -> u64 {
        self.idle_calls
    }

    /// The CPU entered its idle loop (`tick_nohz_idle_enter`: `ts->idle_calls++`).
    pub fn note_idle_entry(&mut self) {
        self.idle_calls += 1;
    }

    /// `rq->avg_idle` (ns): starts at twice `sysctl_sched_migration_cost`.
    pub fn avg_idle(&self) -> u64 {
        self.avg_idle
    }

    /// Set `rq->avg_idle` (tests, or a caller restoring state).
    pub fn set_avg_idle(&mut self, ns: u64) {
        self.avg_idle = ns;
    }

    /// `rq->idle_stamp`.
    pub fn idle_stamp(&self) -> Option<Nanos> {
        self.idle_stamp
    }

    /// The length of the last idle period a wake-up ended (ns; `u64::MAX` before the first).
    pub fn last_idle_ns(&self) -> u64 {
        self.last_idle_ns
    }

    /// `rq->has_blocked_load` ([`crate::nohz`]).
    pub fn has_blocked_load(&self) -> bool {
        self.has_blocked_load
    }

    /// Set `rq->has_blocked_load`.
    pub fn set_has_blocked_load(&mut self, b: bool) {
        self.has_blocked_load = b;
    }

    /// `rq->last_blocked_load_update_tick` (jiffies).
    pub fn last_blocked_load_update_j(&self) -> u64 {
        self.last_blocked_load_update_j
    }

    /// Set `rq->last_blocked_load_update_tick`.
    pub fn set_last_blocked_load_update_j(&mut self, j: u64) {
        self.last_blocked_load_update_j = j;
    }

    /// The CPU switched to its idle task without pulling work: `idle_calls++`, and
    /// `rq->idle_stamp = rq_clock(rq)` (as `sched_balance_newidle` leaves it when it
    /// pulled nothing).
    pub fn idle_enter(&mut self) {
        self.note_idle_entry();
        self.idle_stamp = Some(Nanos(self.clock));
    }

    /// `ttwu_do_activate`'s `avg_idle` update when a wake-up ends an idle period: fold the
    /// time since `idle_stamp` into `avg_idle` (`update_avg`: EWMA 1/8), capped at `max`
    /// (Linux: `2 * rq->max_idle_balance_cost`), and clear the stamp. Call after
    /// [`Rq::update_rq_clock`].
    pub fn update_avg_idle(&mut self, max: u64) {
        if let Some(stamp) = self.idle_stamp.take() {
            let delta = self.clock.saturating_sub(stamp.0);
            self.last_idle_ns = delta;
            let diff = delta as i64 - self.avg_idle as i64;
            self.avg_idle = (self.avg_idle as i64 + diff / 8) as u64;
            self.avg_idle = self.avg_idle.min(max);
        }
    }

    /// `update_misfit_status(rq->curr, rq)` (at pick and tick): set `rq->misfit_task_load`
    /// from the running task, or clear it when nothing runs; unchanged without asymmetric
    /// capacities (`sched_asym_cpucap_active()`).
    pub fn update_misfit_status(&mut self, topology: &Topology, uclamp_used: bool) {
        let asym = topology.asym_cpucapacity();
        let curr = self.cfs.curr().and_then(|id| self.tasks.get(id));
        // Linux's order: no asymmetry, nothing running and a pinned task return before any
        // of the task's signals are read (`update_misfit_status` is on every pick).
        if !asym {
            return;
        }
        if curr.is_none_or(|p| p.cpus_allowed.weight() <= 1) {
            self.misfit_task_load = 0;
            return;
        }
        let f = self.features;
        let cap = CpuCapacityInfo::unpressured(self.capacity_orig);
        let sys = self.uclamp_sysctl;
        let cpu = self.cpu;
        let p = curr.map(|p| MisfitTask {
            util_est: task_util_est(&TaskUtil::from_avg(&p.avg, cpu, true), f),
            clamp: uclamp_eff_range(&p.uclamp, &sys, false),
            nr_cpus_allowed: p.cpus_allowed.weight(),
            max_allowed_capacity: task_max_allowed_capacity(p.cpus_allowed, topology),
            h_load: p.avg.load_avg,
        });
        if let Some(load) = update_misfit_status(p.as_ref(), cap, asym, uclamp_used, f) {
            self.misfit_task_load = load;
        }
    }

    /// `rq->cfs_tasks` from head (most recently run or enqueued) to tail (least
    /// recently run: `detach_tasks` looks there first).
    pub fn cfs_tasks(&self) -> ListIter<'_> {
        self.tasks.list()
    }

    /// [`RqConfig::max_tasks`].
    pub fn max_tasks(&self) -> usize {
        self.tasks.capacity()
    }

    /// `list_move(&p->se.group_node, &rq->cfs_tasks)`: put a queued task at the head,
    /// as `detach_tasks` does with a task it skipped so the next attempt looks at
    /// others first. Returns false if `id` is not queued here. O(log n).
    pub fn cfs_tasks_move_to_head(&mut self, id: TaskId) -> bool {
        self.tasks.move_to_head(id)
    }

    // ---- enqueue / dequeue --------------------------------------------------------

    /// `enqueue_task` (`activate_task`; with [`EnqueueFlags::NEW`] `wake_up_new_task`).
    /// The task must be allowed here and either attached to this CPU's cfs_rq
    /// (woke where it slept) or detached (new, migrated: not [`SchedAvg::attached`]).
    #[allow(clippy::result_large_err)] // the refused task must be handed back, not lost
    pub fn enqueue_task(&mut self, task: Task, flags: EnqueueFlags) -> Result<(), EnqueueError> {
        let mut slot = Some(task);
        match self.enqueue_task_from(&mut slot, flags) {
            Ok(()) => Ok(()),
            Err(reason) => match slot {
                Some(task) => Err(EnqueueError { reason, task }),
                None => unreachable!("a refused enqueue took the task"),
            },
        }
    }

    /// [`Rq::enqueue_task`] of the task in `slot` (the place the caller kept it in while it
    /// was off every run queue): the enqueue is done in place and the task moved into the
    /// run queue once at its end, instead of being passed by value through every layer.
    /// Refused (the task left in `slot`) as [`Rq::enqueue_task`] refuses, and with
    /// [`RqError::NoTask`] when `slot` is empty.
    pub fn enqueue_task_from(
        &mut self,
        slot: &mut Option<Task>,
        flags: EnqueueFlags,
    ) -> Result<(), RqError> {
        let Some(task) = slot.as_mut() else {
            return Err(RqError::NoTask { cpu: self.cpu });
        };
        self.check_enqueue(task)?;
        let feat = self.features;
        if flags.contains(EnqueueFlags::NEW) {
            // wake_up_new_task: post_init_entity_util_avg before activate_task.
            self.cfs_avg.post_init_entity_util_avg(
                &mut task.avg,
                task.se.weight(),
                self.capacity_orig,
            );
        }
        if flags.contains(EnqueueFlags::MIGRATED) || task.cpu != Some(self.cpu) {
            if task.cpu.is_some() && task.cpu != Some(self.cpu) {
                task.se.nr_migrations += 1;
            }
            task.cpu = Some(self.cpu);
        }
        // enqueue_task_fair: util_est first, so schedutil sees it. A delayed task (moved by
        // the balancer, or restored after an attribute change) left the estimate when it
        // blocked and stays delayed: v6.12 skips it, and its clamps (`uclamp_rq_inc`).
        let delayed = task.se.sched_delayed;
        if !delayed {
            util_est_enqueue(&mut self.cfs_avg.avg, &task.avg, feat);
        }
        if task.in_iowait {
            self.request_cpufreq(true);
        }
        // enqueue_entity.
        self.update_curr();
        update_load_avg!(self, task, DO_ATTACH);
        let curr = self
            .cfs
            .curr()
            .and_then(|c| self.tasks.get(c))
            .map(|t| &t.se);
        let place = PlaceFlags {
            initial: flags.contains(EnqueueFlags::NEW),
        };
        self.cfs.enqueue_entity(curr, &mut task.se, place, feat);
        if flags.contains(EnqueueFlags::MIGRATED) {
            task.se.exec_start = 0;
        }
        self.h_nr_running += 1;
        // uclamp_rq_inc after the class enqueue (v6.12 order).
        if !delayed {
            self.uclamp
                .inc(&mut task.uclamp, &self.uclamp_sysctl, false);
        }
        task.in_iowait = false;
        let id = task.id;
        // account_entity_enqueue: list_add at the head. check_enqueue ruled a duplicate
        // and a full arena out.
        let inserted = self.tasks.insert_head_from(slot);
        debug_assert!(inserted, "task {id:?} inserted twice or past capacity");
        Ok(())
    }

    /// `dequeue_task`: take a queued task off this rq and hand it back. With
    /// [`DequeueFlags::SLEEP`] its signals stay here as blocked load; with
    /// [`DequeueFlags::MIGRATING`] they are detached (it must be enqueued elsewhere).
    /// Dequeuing the running task leaves the rq without `curr` and sets
    /// `need_resched`.
    pub fn dequeue_task(&mut self, id: TaskId, flags: DequeueFlags) -> Result<Task, RqError> {
        let mut out = None;
        self.dequeue_task_into(id, flags, &mut out)?;
        match out {
            Some(task) => Ok(task),
            None => unreachable!("dequeue_task_into succeeded without a task"),
        }
    }

    /// [`Rq::dequeue_task`] into `out`, the place the caller keeps the task in while it
    /// is off every run queue (the kernel: the sleeping thread's own slot): the task is
    /// moved there once and its dequeue done in place, instead of being handed back by
    /// value through every layer. On an error `out` is unchanged.
    pub fn dequeue_task_into(
        &mut self,
        id: TaskId,
        flags: DequeueFlags,
        out: &mut Option<Task>,
    ) -> Result<(), RqError> {
        let Some(task) = self.tasks.remove_into(id, out) else {
            return Err(RqError::NotQueued {
                task: id,
                cpu: self.cpu,
            });
        };
        let feat = self.features;
        // uclamp_rq_dec before the class dequeue (v6.12 order). A delayed task (moved by the
        // balancer, or saved for an attribute change) was taken out of both when it blocked.
        if !task.se.sched_delayed {
            self.uclamp.dec(&mut task.uclamp);
            util_est_dequeue(&mut self.cfs_avg.avg, &task.avg, feat);
        }
        // dequeue_entity.
        let is_curr = self.cfs.curr() == Some(id);
        if is_curr {
            let u = self
                .cfs
                .update_curr(&mut task.se, self.pelt.rq_clock_task(), feat);
            if u.resched {
                self.need_resched = true;
            }
        } else {
            self.update_curr();
        }
        let pelt_flags = if flags.contains(DequeueFlags::MIGRATING) {
            DO_DETACH
        } else {
            0
        };
        update_load_avg!(self, task, pelt_flags);
        let curr = self
            .cfs
            .curr()
            .and_then(|c| self.tasks.get(c))
            .map(|t| &t.se);
        let mode = DequeueMode {
            sleep: flags.contains(DequeueFlags::SLEEP),
            save: flags.contains(DequeueFlags::SAVE),
        };
        self.cfs.dequeue_entity(curr, &mut task.se, mode, feat);
        self.h_nr_running -= 1;
        util_est_update(
            &mut task.avg,
            flags.contains(DequeueFlags::SLEEP),
            self.capacity_orig,
            feat,
        );
        if is_curr {
            self.need_resched = true;
            task.se.exec_start = 0;
        }
        Ok(())
    }

    /// `block_task` (`__schedule` of a task that blocks) → `dequeue_task(DEQUEUE_SLEEP | flags)`:
    /// as [`Rq::dequeue_task_into`] with [`DequeueFlags::SLEEP`], except that under
    /// `DELAY_DEQUEUE` a task that is not eligible (negative lag) and not blocking in a
    /// [`DequeueFlags::SPECIAL`] state stays queued ([`Block::Delayed`], `out` untouched):
    /// v6.12 `dequeue_entity` returns early with `se->sched_delayed` set, after
    /// `update_load_avg(se, 0)`; its weight stays in `cfs_rq->load` and in V, and it stays
    /// counted in `nr_running`/`h_nr_running` (v6.12 has no `h_nr_delayed`; the cfs_rq's
    /// runnable signal counts it, its own does not: `se_runnable`). `dequeue_task` has
    /// already done `uclamp_rq_dec`, and `dequeue_task_fair` `util_est_dequeue` and
    /// `util_est_update` (after the PELT update here, as for every dequeue: module docs).
    /// A running task that is delayed is put back into the tree (`put_prev_task`'s
    /// bookkeeping, as every dequeue of `curr` here) and `need_resched` is set.
    pub fn block_task_into(
        &mut self,
        id: TaskId,
        flags: DequeueFlags,
        out: &mut Option<Task>,
    ) -> Result<Block, RqError> {
        let flags = flags | DequeueFlags::SLEEP;
        let feat = self.features;
        if !feat.enabled(Feature::DELAY_DEQUEUE) || flags.contains(DequeueFlags::SPECIAL) {
            self.dequeue_task_into(id, flags, out)?;
            return Ok(Block::Dequeued);
        }
        let cpu = self.cpu;
        if self.tasks.get(id).is_none() {
            return Err(RqError::NotQueued { task: id, cpu });
        }
        // dequeue_entity: update_curr, then the eligibility test against V with `curr` in it.
        self.update_curr();
        let curr = self.cfs.curr();
        let curr_se = curr.and_then(|c| self.tasks.get(c)).map(|t| t.se);
        let Some(task) = self.tasks.get(id) else {
            return Err(RqError::NotQueued { task: id, cpu });
        };
        debug_assert!(!task.se.sched_delayed, "a delayed task cannot block again");
        if self.cfs.entity_eligible(curr_se.as_ref(), &task.se) {
            self.dequeue_task_into(id, flags, out)?;
            return Ok(Block::Dequeued);
        }
        let Some(task) = self.tasks.get_mut(id) else {
            return Err(RqError::NotQueued { task: id, cpu });
        };
        self.uclamp.dec(&mut task.uclamp);
        util_est_dequeue(&mut self.cfs_avg.avg, &task.avg, feat);
        // update_load_avg(cfs_rq, se, 0) while still runnable: the time up to now counts.
        update_load_avg!(self, task, 0);
        task.se.sched_delayed = true;
        util_est_update(&mut task.avg, true, self.capacity_orig, feat);
        if curr == Some(id) {
            self.put_prev_task();
            self.need_resched = true;
        }
        Ok(Block::Delayed)
    }

    /// `enqueue_task(ENQUEUE_DELAYED)` → `enqueue_task_fair` → `requeue_delayed_entity`: a
    /// delayed task wakes up where it is queued (`ttwu_runnable`). `util_est_enqueue`, then
    /// under `DELAY_ZERO` a positive lag is clamped to 0 and the entity re-placed, then
    /// `update_load_avg(se, 0)` (the delayed time was not runnable), `sched_delayed`
    /// cleared and `uclamp_rq_inc`. No `update_curr`, no change of `nr_running`, no iowait
    /// cpufreq kick and no overutilized check: `enqueue_task_fair` returns right after the
    /// requeue.
    pub fn requeue_delayed_task(&mut self, id: TaskId) -> Result<(), RqError> {
        let cpu = self.cpu;
        let feat = self.features;
        let curr_se = self
            .cfs
            .curr()
            .and_then(|c| self.tasks.get(c))
            .map(|t| t.se);
        let Some(task) = self.tasks.get_mut(id) else {
            return Err(RqError::NotQueued { task: id, cpu });
        };
        if !task.se.sched_delayed {
            return Err(RqError::NotDelayed { task: id, cpu });
        }
        util_est_enqueue(&mut self.cfs_avg.avg, &task.avg, feat);
        self.cfs
            .requeue_delayed_entity(curr_se.as_ref(), &mut task.se, feat);
        update_load_avg!(self, task, 0);
        task.se.sched_delayed = false;
        self.uclamp
            .inc(&mut task.uclamp, &self.uclamp_sysctl, false);
        Ok(())
    }

    /// `dequeue_entities(rq, se, DEQUEUE_SLEEP | DEQUEUE_DELAYED)` of a delayed task, into
    /// `out`: its dequeue is finished (`dequeue_entity`: `update_curr`, `update_load_avg`,
    /// lag saved, out of the tree, load and V, `update_min_vruntime`, then
    /// `finish_delayed_dequeue_entity`: `DELAY_ZERO` drops a positive lag; `h_nr_running--`;
    /// `__block_task`). A pick does this when it finds a delayed task; v6.12 also does it
    /// from `task_dead_fair` and before an affinity change moves a queued task (here: the
    /// caller, when it needs the task off the queue). No `util_est` or `uclamp` change: both
    /// were done when it blocked.
    pub fn dequeue_delayed_task_into(
        &mut self,
        id: TaskId,
        out: &mut Option<Task>,
    ) -> Result<(), RqError> {
        let cpu = self.cpu;
        match self.tasks.get(id) {
            None => return Err(RqError::NotQueued { task: id, cpu }),
            Some(t) if !t.se.sched_delayed => return Err(RqError::NotDelayed { task: id, cpu }),
            Some(_) => {}
        }
        let Some(task) = self.tasks.remove_into(id, out) else {
            return Err(RqError::NotQueued { task: id, cpu });
        };
        let feat = self.features;
        self.update_curr();
        update_load_avg!(self, task, 0);
        let curr = self
            .cfs
            .curr()
            .and_then(|c| self.tasks.get(c))
            .map(|t| &t.se);
        let mode = DequeueMode {
            sleep: true,
            save: false,
        };
        self.cfs.dequeue_entity(curr, &mut task.se, mode, feat);
        CfsRq::finish_delayed_dequeue_entity(&mut task.se, feat);
        self.h_nr_running -= 1;
        Ok(())
    }

    /// `detach_task` (load balancing): dequeue as migrating; the signals leave with
    /// the task, the lag is kept relative to this queue's average.
    pub fn detach_task(&mut self, id: TaskId) -> Result<Task, RqError> {
        self.dequeue_task(id, DequeueFlags::MIGRATING)
    }

    /// `attach_task`: enqueue a task detached from another rq.
    #[allow(clippy::result_large_err)] // see enqueue_task
    pub fn attach_task(&mut self, task: Task) -> Result<(), EnqueueError> {
        // activate_task on a migrating task adds ENQUEUE_MIGRATED (and set_task_cpu's
        // migrate_task_rq_fair zeroes exec_start): a moved task is not cache hot here. A
        // task put back on the CPU it was detached from did not migrate.
        let flags = if task.cpu == Some(self.cpu) {
            EnqueueFlags::NONE
        } else {
            EnqueueFlags::MIGRATED
        };
        self.enqueue_task(task, flags)
    }

    // ---- pick / put / tick -----------------------------------------------------------

    /// `pick_next_task` for the fair class: choose and set `curr`. A still-running
    /// `curr` competes (v6.12 `pick_task_fair` + `put_prev_set_next_task`). Returns
    /// `None` when nothing is runnable: the rq goes idle (`update_idle_rq_clock_pelt`).
    ///
    /// A delayed task the pick finds has its dequeue finished and is dropped (debug builds
    /// panic): callers that may have delayed tasks (`DELAY_DEQUEUE`) use
    /// [`Rq::pick_next_task_with`].
    pub fn pick_next_task(&mut self) -> Option<TaskId> {
        self.pick_next_task_with(&mut no_delayed_tasks)
    }

    /// [`Rq::pick_next_task`] handing each delayed task whose dequeue the pick finished to
    /// `blocked` (v6.12 `pick_next_entity`: a delayed entity picked is dequeued with
    /// `DEQUEUE_SLEEP | DEQUEUE_DELAYED` — [`Rq::dequeue_delayed_task_into`] — and the pick
    /// starts again). From then on the caller owns it, as any sleeping task.
    pub fn pick_next_task_with(&mut self, blocked: &mut dyn FnMut(Task)) -> Option<TaskId> {
        let next = self.pick_next_task_fair(blocked);
        if next.is_none() {
            self.go_idle();
        }
        next
    }

    /// [`Rq::pick_next_task`] for a caller that balances (newidle) when nothing is
    /// runnable: the rq does *not* go idle yet — v6.12's `pick_next_task_fair` runs
    /// `sched_balance_newidle` first and `update_idle_rq_clock_pelt` only when nothing was
    /// pulled, so a CPU that pulls work keeps its `clock_pelt` lag. Follow a `None` with
    /// the balance and then [`Rq::pick_next_task`], which goes idle if still empty.
    pub fn pick_next_task_before_newidle(&mut self) -> Option<TaskId> {
        self.pick_next_task_fair(&mut no_delayed_tasks)
    }

    /// [`Rq::pick_next_task_before_newidle`] handing finished delayed tasks to `blocked`
    /// (see [`Rq::pick_next_task_with`]).
    pub fn pick_next_task_before_newidle_with(
        &mut self,
        blocked: &mut dyn FnMut(Task),
    ) -> Option<TaskId> {
        self.pick_next_task_fair(blocked)
    }

    /// The rq goes idle: `curr` is the idle task and `clock_pelt` is resynced
    /// (`update_idle_rq_clock_pelt`, which may declare lost idle time).
    fn go_idle(&mut self) {
        self.curr_is_idle = true;
        let util_sum = self.cfs_avg.avg.util_sum as u64;
        self.pelt.update_idle_rq_clock_pelt(util_sum);
    }

    fn pick_next_task_fair(&mut self, blocked: &mut dyn FnMut(Task)) -> Option<TaskId> {
        let feat = self.features;
        self.need_resched = false;
        self.update_curr();
        let prev = self.cfs.curr();
        // pick_task_fair: `pick_next_entity` → `pick_eevdf`; a delayed entity picked is
        // dequeued (`DEQUEUE_SLEEP | DEQUEUE_DELAYED`) and the pick starts again. `curr` is
        // never delayed here: a delayed running task was put back into the tree.
        let next = loop {
            let curr_se = prev.and_then(|c| self.tasks.get(c)).map(|t| &t.se);
            let next = self.cfs.pick_eevdf(curr_se, feat);
            let Some(id) = next.filter(|&n| self.tasks.get(n).is_some_and(|t| t.se.sched_delayed))
            else {
                break next;
            };
            debug_assert!(Some(id) != prev, "the running task is never delayed");
            let mut out = None;
            if self.dequeue_delayed_task_into(id, &mut out).is_err() {
                debug_assert!(false, "a picked delayed task could not be dequeued");
                break None;
            }
            if let Some(task) = out {
                blocked(task);
            }
        };
        if next.is_some() {
            self.curr_is_idle = false;
        }
        if next == prev && next.is_some() {
            return next;
        }
        if prev.is_some() {
            self.put_prev_task();
        }
        if let Some(id) = next {
            self.set_next_task(id);
        }
        next
    }

    /// `put_prev_task`: the running task stops running but stays queued.
    pub fn put_prev_task(&mut self) {
        let Some(id) = self.cfs.curr() else {
            return;
        };
        self.update_curr();
        let Some(task) = self.tasks.get_mut(id) else {
            return;
        };
        // Linux: `__enqueue_entity`, then `update_load_avg(cfs_rq, prev, 0)` while
        // `cfs_rq->curr` is still `prev` (its last segment counts as running), then
        // `cfs_rq->curr = NULL`.
        update_load_avg!(self, task, 0);
        self.cfs.put_prev_entity(&mut task.se);
    }

    /// `task_tick_fair` (`entity_tick`): charge the running task and age its
    /// signals. Returns whether a reschedule is needed.
    pub fn task_tick(&mut self) -> Resched {
        let Some(id) = self.cfs.curr() else {
            return Resched::from_bool(self.need_resched);
        };
        self.update_curr();
        if let Some(task) = self.tasks.get_mut(id) {
            update_load_avg!(self, task, 0);
        }
        Resched::from_bool(self.need_resched)
    }

    /// `wakeup_preempt` after enqueuing `id` (a wake-up): should it preempt the
    /// running task? An idle rq always reschedules. Sets `need_resched` if so.
    pub fn check_preempt_wakeup(&mut self, id: TaskId) -> Result<bool, RqError> {
        let Some(woken) = self.tasks.get(id) else {
            return Err(RqError::NotQueued {
                task: id,
                cpu: self.cpu,
            });
        };
        let Some(curr) = self.cfs.curr() else {
            self.need_resched = true;
            return Ok(true);
        };
        if self.need_resched {
            return Ok(true);
        }
        // A copy of what preemption reads: the running task's entity is borrowed mutably
        // from the same arena.
        let pse = crate::fair::Wakee::of(&woken.se);
        let now = self.pelt.rq_clock_task();
        let feat = self.features;
        if let Some(t) = self.tasks.get_mut(curr) {
            if self.cfs.check_preempt_wakee(&mut t.se, pse, now, feat) {
                self.need_resched = true;
            }
        }
        Ok(self.need_resched)
    }

    /// `yield_task_fair` (`sched_yield`): the running task gives up the rest of its
    /// request; its deadline moves one slice later and a reschedule is requested.
    pub fn yield_task(&mut self) {
        let Some(id) = self.cfs.curr() else {
            return;
        };
        if self.h_nr_running == 1 {
            return;
        }
        self.update_curr();
        if let Some(t) = self.tasks.get_mut(id) {
            self.cfs.yield_entity(&mut t.se);
        }
        self.need_resched = true;
    }

    /// `set_cpus_allowed_ptr` → `__do_set_cpus_allowed` for a queued task whose new mask
    /// still contains this CPU (the caller moves it first otherwise): only `cpus_mask`
    /// changes; balancing and wake-ups read it from now on.
    pub fn set_cpus_allowed(&mut self, id: TaskId, mask: CpuMask) -> Result<(), RqError> {
        let cpu = self.cpu;
        if !mask.contains(cpu) {
            return Err(RqError::NotAllowed { task: id, cpu });
        }
        let task = self
            .tasks
            .get_mut(id)
            .ok_or(RqError::NotQueued { task: id, cpu })?;
        task.cpus_allowed = mask;
        Ok(())
    }

    /// `set_user_nice` for a queued task: dequeue (SAVE), reweight, enqueue
    /// (RESTORE), restore `curr`, then `prio_changed_fair`.
    pub fn set_nice(&mut self, id: TaskId, nice: i32) -> Result<(), RqError> {
        let nice = Nice::new(nice).map_err(|err| RqError::Fair { task: id, err })?;
        let running = self.cfs.curr() == Some(id);
        // Charge the running task first, so a resched its deadline earns survives the
        // restore below (our dequeue of `curr` always asks for one; Linux's does not).
        self.update_curr();
        let resched_before = self.need_resched;
        let mut task = self.dequeue_task(id, DequeueFlags::SAVE)?;
        let old = task.nice;
        self.reweight_task(&mut task, nice);
        // The task was just dequeued from here: re-enqueue cannot fail.
        if let Err(e) = self.enqueue_task(task, EnqueueFlags::RESTORE) {
            debug_assert!(false, "re-enqueue after nice change failed: {}", e.reason);
            return Err(e.reason);
        }
        if running {
            self.need_resched = resched_before;
            self.set_next_task(id);
            // prio_changed_fair: a running task whose priority dropped reschedules,
            // unless it is alone.
            if nice > old && self.cfs.nr_running() > 1 {
                self.need_resched = true;
            }
        } else if self.cfs.curr().is_some() {
            self.check_preempt_wakeup(id)?;
        }
        Ok(())
    }

    /// `set_user_nice` for a task sleeping with its signals on this CPU (the caller
    /// owns it): reweight its lag and its blocked load contribution.
    pub fn set_nice_blocked(&mut self, task: &mut Task, nice: i32) -> Result<(), RqError> {
        let nice = Nice::new(nice).map_err(|err| RqError::Fair { task: task.id, err })?;
        if self.tasks.get(task.id).is_some() || (task.cpu.is_some() && task.cpu != Some(self.cpu)) {
            return Err(RqError::WrongCpu {
                task: task.id,
                cpu: self.cpu,
                task_cpu: task.cpu,
            });
        }
        self.reweight_task(task, nice);
        Ok(())
    }

    /// `__setscheduler_uclamp` for a queued task (`sched_setattr` with
    /// `SCHED_FLAG_UTIL_CLAMP_*`; the caller validated `req` with
    /// [`TaskUclamp::set_request`](crate::uclamp::TaskUclamp::set_request)). As
    /// `__sched_setscheduler` does: dequeue (SAVE), change, enqueue (RESTORE), so the
    /// rq's clamp buckets account the new request at once; `curr` stays `curr`.
    pub fn set_uclamp(&mut self, id: TaskId, req: TaskUclamp) -> Result<(), RqError> {
        let running = self.cfs.curr() == Some(id);
        self.update_curr();
        let resched_before = self.need_resched;
        let mut task = self.dequeue_task(id, DequeueFlags::SAVE)?;
        task.uclamp.req = req.req;
        if let Err(e) = self.enqueue_task(task, EnqueueFlags::RESTORE) {
            debug_assert!(
                false,
                "re-enqueue after a clamp change failed: {}",
                e.reason
            );
            return Err(e.reason);
        }
        if running {
            self.need_resched = resched_before;
            self.set_next_task(id);
        }
        // The clamped utilization may have changed the frequency this CPU wants.
        self.request_cpufreq(false);
        Ok(())
    }

    /// `sched_balance_update_blocked_averages` for the root cfs_rq: decay its signals
    /// (and apply pending removals) while idle or with blocked tasks. Returns whether
    /// anything changed (and then requests a cpufreq update, as Linux does).
    pub fn update_blocked_averages(&mut self) -> bool {
        let state = Self::cfs_state(&self.cfs, self.h_nr_running);
        let changed = self.cfs_avg.update_cfs_rq_load_avg(
            self.pelt.rq_clock_pelt(),
            state,
            self.pelt.contrib_scale(),
        );
        if changed {
            self.request_cpufreq(false);
        }
        changed
    }

    // ---- private -------------------------------------------------------------------

    fn check_enqueue(&self, task: &Task) -> Result<(), RqError> {
        let (id, cpu) = (task.id, self.cpu);
        if self.tasks.get(id).is_some() {
            return Err(RqError::AlreadyQueued { task: id, cpu });
        }
        if self.tasks.len() >= self.tasks.capacity() {
            return Err(RqError::Full {
                task: id,
                cpu,
                max_tasks: self.tasks.capacity(),
            });
        }
        if !task.cpus_allowed.contains(cpu) {
            return Err(RqError::NotAllowed { task: id, cpu });
        }
        if task.se.on_rq {
            return Err(RqError::AlreadyQueued { task: id, cpu });
        }
        if let Some(prev) = task.cpu {
            if prev != cpu && task.avg.attached {
                return Err(RqError::StillAttached {
                    task: id,
                    cpu,
                    attached_to: prev,
                });
            }
        }
        Ok(())
    }

    /// `update_curr` on the running task, if any.
    fn update_curr(&mut self) {
        let Some(id) = self.cfs.curr() else {
            return;
        };
        let now = self.pelt.rq_clock_task();
        let feat = self.features;
        if let Some(t) = self.tasks.get_mut(id) {
            if self.cfs.update_curr(&mut t.se, now, feat).resched {
                self.need_resched = true;
            }
        }
    }

    /// `set_next_task_fair` / `set_next_entity` for a queued task.
    fn set_next_task(&mut self, id: TaskId) {
        let now = self.pelt.rq_clock_task();
        let Some(task) = self.tasks.get_mut(id) else {
            return;
        };
        // Linux: `__dequeue_entity`, `update_load_avg(cfs_rq, se, UPDATE_TG)` with
        // `cfs_rq->curr` still NULL (the task was waiting until now), then
        // `cfs_rq->curr = se`.
        update_load_avg!(self, task, 0);
        self.cfs.set_next_entity(&mut task.se, now);
        // __set_next_task_fair: the running task moves to the head (most recent).
        self.cfs_tasks_move_to_head(id);
    }

    /// `reweight_task_fair` on a dequeued task: EEVDF lag/deadline, then the PELT
    /// load contribution to this cfs_rq (if attached here).
    fn reweight_task(&mut self, task: &mut Task, nice: Nice) {
        let new = LoadWeight::from_nice(nice);
        let attached = task.avg.attached && task.cpu == Some(self.cpu);
        if attached {
            self.cfs_avg.dequeue_load_avg(&task.avg, task.se.weight());
        }
        CfsRq::reweight_entity(&mut task.se, new);
        task.nice = nice;
        let divider = task.avg.pelt_divider() as u64;
        task.avg.load_avg = task.se.weight() * task.avg.load_sum / divider;
        if attached {
            self.cfs_avg.enqueue_load_avg(&task.avg, task.se.weight());
        }
    }

    fn request_cpufreq(&mut self, iowait: bool) {
        Self::request_cpufreq_in(&mut self.cpufreq_update, iowait);
    }

    /// [`Rq::request_cpufreq`] on the field alone, for callers that hold other fields of the
    /// run queue borrowed.
    fn request_cpufreq_in(cpufreq_update: &mut Option<CpufreqUpdate>, iowait: bool) {
        let u = cpufreq_update.get_or_insert_with(CpufreqUpdate::default);
        u.iowait |= iowait;
    }

    fn cfs_state(cfs: &CfsRq, h_nr_running: u32) -> CfsRqState {
        CfsRqState {
            load_weight: scale_load_down(cfs.load_weight()),
            h_nr_running: h_nr_running as u64,
            curr: cfs.curr().is_some(),
        }
    }

    /// `update_load_avg(cfs_rq, se, flags)` for a task on this rq; when the cfs_rq's averages
    /// changed, a cpufreq update is requested (`cfs_rq_util_change` →
    /// `cpufreq_update_util`), as Linux does from inside `update_load_avg`. The run queue's
    /// fields come one by one: the caller holds `task` borrowed from the arena (call it
    /// through `update_load_avg!`).
    fn update_load_avg(
        cfs_avg: &mut CfsRqAvg,
        cpufreq_update: &mut Option<CpufreqUpdate>,
        pelt: &PeltClock,
        cfs: &CfsRq,
        h_nr_running: u32,
        task: &mut Task,
        flags: u8,
    ) {
        let se = EntityState {
            weight: task.se.weight(),
            on_rq: task.se.on_rq,
            running: cfs.curr() == Some(task.id),
            sched_delayed: task.se.sched_delayed,
        };
        let changed = cfs_avg.update_load_avg(
            pelt.rq_clock_pelt(),
            &mut task.avg,
            se,
            Self::cfs_state(cfs, h_nr_running),
            flags,
            pelt.contrib_scale(),
        );
        if changed {
            Self::request_cpufreq_in(cpufreq_update, false);
        }
    }
}

/// The pick's sink for callers that never have delayed tasks (`DELAY_DEQUEUE` off).
fn no_delayed_tasks(task: Task) {
    debug_assert!(
        false,
        "task {:?} finished its delayed dequeue with no caller to take it: use pick_next_task_with",
        task.id
    );
}
