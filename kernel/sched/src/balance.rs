//! Load balancing: sched domains, the tick-driven periodic balance, newidle balance,
//! `sched_balance_rq` and misfit migration.
//!
//! Re-derives Linux v6.12:
//! - `kernel/sched/topology.c`: `sd_init`, `build_sched_domains` for arm64's default
//!   MC (per cluster) / PKG (all CPUs) levels, `asym_cpu_capacity_classify`
//!   (`SD_ASYM_CPUCAPACITY`), `sd_degenerate` / `sd_parent_degenerate`,
//!   `update_max_interval` (`max_load_balance_interval`);
//! - `kernel/sched/fair.c`: `get_sd_balance_interval`, `update_next_balance`,
//!   `update_newidle_cost`, `sched_balance_trigger` (`trigger_load_balance`),
//!   `sched_balance_softirq` (`run_rebalance_domains`), `sched_balance_domains`
//!   (`rebalance_domains`), `sched_balance_newidle` (`newidle_balance`),
//!   `sched_balance_rq` (`load_balance`) with `should_we_balance`,
//!   `update_sg_lb_stats`, `group_classify`, `update_sd_pick_busiest`,
//!   `sched_balance_find_src_group` (`find_busiest_group`), `calculate_imbalance`,
//!   `sibling_imbalance`, `sched_balance_find_src_rq` (`find_busiest_queue`),
//!   `detach_tasks`, `can_migrate_task`, `task_hot`, `need_active_balance` and
//!   `active_load_balance_cpu_stop`;
//! - `kernel/sched/core.c`: the `avg_idle` estimate (`update_avg` at wake-up).
//!
//! Time: Linux counts balance deadlines in jiffies. We do too (`*_jiffies` fields,
//! `jiffies = now / TICK_NSEC`), and store `rq->next_balance` in [`Rq`] as the
//! nanosecond start of that jiffy, so `now >= rq.next_balance()` is exactly
//! `time_after_eq(jiffies, rq->next_balance)`.
//!
//! Deliberate differences:
//! - The run queues are passed in as `&mut [Rq]` indexed by CPU; the kernel holds
//!   `double_rq_lock(dst, src)` around a call (lower CPU first). Detach and attach
//!   therefore happen under one lock and `LBF_NEED_BREAK` (drop the lock every 32
//!   tasks) does not exist.
//! - The root domain's flags come from the caller ([`LbContext`]): `overutilized`
//!   and whether EAS has a perf domain (`rd->pd`). `rd->overloaded` (newidle's gate)
//!   is computed from the run queues: some CPU runs more than one task or has a
//!   misfit task.
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

use alloc::vec::Vec;
use core::fmt;
use core::ops::IndexMut;

use crate::cpu_util::{cpu_util_cfs, cpu_util_cfs_boost, task_fits_cpu, CpuCapacityInfo, TaskUtil};
use crate::eas::task_util_est;
use crate::features::{Feature, SchedFeatures};
use crate::rq::{Rq, Task};
use crate::topology::Topology;
use crate::types::{Capacity, CpuId, CpuMask, Nanos, TaskId, Util, SCHED_CAPACITY_SCALE};
use crate::uclamp::uclamp_eff_range;

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
/// `MAX_PINNED_INTERVAL` (ms): backoff cap when every task was pinned.
pub const MAX_PINNED_INTERVAL_MS: u32 = 512;

/// `sd->flags` (`include/linux/sched/sd_flags.h`; the ones we use).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct SdFlags(pub u32);

impl SdFlags {
    /// Balance when about to become idle.
    pub const BALANCE_NEWIDLE: SdFlags = SdFlags(1 << 0);
    /// Balance on exec.
    pub const BALANCE_EXEC: SdFlags = SdFlags(1 << 1);
    /// Balance on fork/clone.
    pub const BALANCE_FORK: SdFlags = SdFlags(1 << 2);
    /// Balance on wake-up (off by default).
    pub const BALANCE_WAKE: SdFlags = SdFlags(1 << 3);
    /// Consider waking the task on the waking CPU.
    pub const WAKE_AFFINE: SdFlags = SdFlags(1 << 4);
    /// The domain spans CPUs of different capacities.
    pub const ASYM_CPUCAPACITY: SdFlags = SdFlags(1 << 5);
    /// ... and it sees every capacity of the system.
    pub const ASYM_CPUCAPACITY_FULL: SdFlags = SdFlags(1 << 6);
    /// The CPUs share the last-level cache (MC).
    pub const SHARE_LLC: SdFlags = SdFlags(1 << 9);
    /// Spread tasks to sibling domains first.
    pub const PREFER_SIBLING: SdFlags = SdFlags(1 << 12);

    /// Is every bit of `f` set?
    pub const fn contains(self, f: SdFlags) -> bool {
        self.0 & f.0 == f.0
    }

    fn insert(&mut self, f: SdFlags) {
        self.0 |= f.0;
    }

    fn remove(&mut self, f: SdFlags) {
        self.0 &= !f.0;
    }
}

impl fmt::Debug for SdFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SdFlags({:#x})", self.0)
    }
}

/// The topology level of a domain (`sched_domain_topology_level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SdLevel {
    /// One cluster (`cpu_coregroup_mask`, `SD_SHARE_LLC`).
    Mc,
    /// Every CPU (`cpu_cpu_mask`).
    Pkg,
}

/// `struct sched_group` with its `sched_group_capacity`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedGroup {
    /// The group's CPUs.
    pub span: CpuMask,
    /// `sgc->capacity`: sum of `capacity_of` over the span.
    pub capacity: u64,
    /// `sgc->min_capacity`.
    pub min_capacity: Capacity,
    /// `sgc->max_capacity`.
    pub max_capacity: Capacity,
}

/// One CPU's `struct sched_domain` at one level. Intervals are in ms (as Linux
/// stores them), deadlines in jiffies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedDomain {
    /// The level.
    pub level: SdLevel,
    /// `sched_domain_span(sd)`.
    pub span: CpuMask,
    /// `sd->groups`: the child domains' spans (single CPUs at the lowest level).
    pub groups: Vec<SchedGroup>,
    /// `sd->flags`.
    pub flags: SdFlags,
    /// `sd->min_interval` (ms): the span's weight.
    pub min_interval: u32,
    /// `sd->max_interval` (ms): twice the weight.
    pub max_interval: u32,
    /// `sd->busy_factor`: 16.
    pub busy_factor: u32,
    /// `sd->imbalance_pct`: 117.
    pub imbalance_pct: u32,
    /// `sd->cache_nice_tries`.
    pub cache_nice_tries: u32,
    /// `sd->balance_interval` (ms), doubled on each balanced attempt up to
    /// `max_interval`.
    pub balance_interval: u32,
    /// `sd->last_balance` (jiffies).
    pub last_balance: u64,
    /// `sd->nr_balance_failed`.
    pub nr_balance_failed: u32,
    /// `sd->max_newidle_lb_cost` (ns).
    pub max_newidle_lb_cost: u64,
    /// `sd->last_decay_max_lb_cost` (jiffies).
    pub last_decay_max_lb_cost: u64,
}

/// One CPU's balancing state: its domains (bottom-up) and the `struct rq` fields
/// load balancing owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuBalance {
    /// This CPU.
    pub cpu: CpuId,
    /// `for_each_domain(cpu, sd)`, lowest level first; empty on a one-CPU system.
    pub sd: Vec<SchedDomain>,
    /// `rq->avg_idle` (ns).
    pub avg_idle: u64,
    /// `rq->max_idle_balance_cost` (ns).
    pub max_idle_balance_cost: u64,
    /// `rq->idle_stamp`: when the CPU last went newly idle without pulling.
    pub idle_stamp: Option<Nanos>,
}

/// Every CPU's domains and the global balance parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedDomains {
    /// Per CPU, indexed by `CpuId::index`.
    pub cpus: Vec<CpuBalance>,
    /// `HZ`.
    pub hz: u32,
    /// `TICK_NSEC` = `(NSEC_PER_SEC + HZ/2) / HZ`.
    pub tick_nsec: u64,
    /// `max_load_balance_interval` (jiffies): `HZ * nr_cpus / 10`.
    pub max_load_balance_interval: u64,
    /// `sched_asym_cpucap_active()`.
    pub asym_cpucapacity: bool,
}

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
}

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
    /// The run-queue slice does not match the domains (wrong length, or `rqs[index]`
    /// is another CPU's).
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

/// The run queues a balance may touch, indexed by `CpuId::index`: a slice in tests,
/// the simulator's CPUs, or the kernel's locked per-CPU run queues (the kernel takes
/// `double_rq_lock(dst, src)` before handing them over).
pub trait RqSet: IndexMut<usize, Output = Rq> {
    /// How many CPUs (`rqs[0..nr_cpus()]` are valid).
    fn nr_cpus(&self) -> usize;
}

impl RqSet for [Rq] {
    fn nr_cpus(&self) -> usize {
        self.len()
    }
}

impl RqSet for Vec<Rq> {
    fn nr_cpus(&self) -> usize {
        self.len()
    }
}

// ---- domains -------------------------------------------------------------------

impl SchedDomains {
    /// `build_sched_domains` for arm64's default levels: MC per cluster, PKG over all
    /// CPUs, `SD_ASYM_CPUCAPACITY` on levels spanning several capacities, degenerate
    /// levels removed. `now` initialises `last_balance`.
    pub fn build(topo: &Topology, hz: u32, now: Nanos) -> Result<SchedDomains, BalanceError> {
        if hz == 0 || hz > 10_000 {
            return Err(BalanceError::BadHz { hz });
        }
        let tick_nsec = (1_000_000_000 + hz as u64 / 2) / hz as u64;
        let jiffies = now.0 / tick_nsec;
        let all = topo.cpu_mask();
        let nr_cpus = topo.nr_cpus();
        let cpu_group = |span: CpuMask| group_of(topo, span);
        let mut cpus = Vec::with_capacity(nr_cpus);
        for c in topo.cpus() {
            let mc_span = topo.cluster_mask(c.cluster);
            let mut levels: Vec<SchedDomain> = Vec::with_capacity(2);
            // MC: groups are single CPUs. Degenerate with one CPU.
            if mc_span.weight() > 1 {
                let groups = mc_span.iter().map(|i| cpu_group(CpuMask::of(i))).collect();
                levels.push(sd_init(topo, SdLevel::Mc, mc_span, groups, jiffies));
            }
            // PKG: groups are the clusters. Degenerate if it spans what MC spans.
            if all.weight() > 1 && all != mc_span {
                let mut groups: Vec<SchedGroup> = Vec::new();
                for i in all.iter() {
                    let span = topo.cluster_mask(topo.cpus()[i.index()].cluster);
                    if !groups.iter().any(|g| g.span == span) {
                        groups.push(cpu_group(span));
                    }
                }
                levels.push(sd_init(topo, SdLevel::Pkg, all, groups, jiffies));
            }
            // sd_init: an asymmetric parent clears its child's SD_PREFER_SIBLING.
            for i in 1..levels.len() {
                if levels[i].flags.contains(SdFlags::ASYM_CPUCAPACITY) {
                    levels[i - 1].flags.remove(SdFlags::PREFER_SIBLING);
                }
            }
            cpus.push(CpuBalance {
                cpu: c.id,
                sd: levels,
                avg_idle: 2 * SYSCTL_SCHED_MIGRATION_COST_NS,
                max_idle_balance_cost: SYSCTL_SCHED_MIGRATION_COST_NS,
                idle_stamp: None,
            });
        }
        Ok(SchedDomains {
            cpus,
            hz,
            tick_nsec,
            max_load_balance_interval: (hz as u64 * nr_cpus as u64 / 10).max(1),
            asym_cpucapacity: topo.asym_cpucapacity(),
        })
    }

    /// `jiffies` at `now`.
    pub fn jiffies(&self, now: Nanos) -> u64 {
        now.0 / self.tick_nsec
    }

    /// The start of jiffy `j`, as stored in `rq->next_balance`.
    pub fn jiffies_to_nanos(&self, j: u64) -> Nanos {
        Nanos(j.saturating_mul(self.tick_nsec))
    }

    /// `msecs_to_jiffies(ms)`: rounded up.
    pub fn msecs_to_jiffies(&self, ms: u64) -> u64 {
        (ms * self.hz as u64).div_ceil(1000)
    }

    /// `get_sd_balance_interval(sd, cpu_busy)` in jiffies.
    pub fn get_sd_balance_interval(&self, sd: &SchedDomain, cpu_busy: bool) -> u64 {
        let mut interval = sd.balance_interval as u64;
        if cpu_busy {
            interval *= sd.busy_factor as u64;
        }
        let mut interval = self.msecs_to_jiffies(interval);
        // Busy: just below a multiple of the tick, so CPUs don't balance in lock-step.
        if cpu_busy {
            interval = interval.saturating_sub(1);
        }
        interval.clamp(1, self.max_load_balance_interval)
    }

    /// `update_next_balance(sd, &next_balance)`: pull `next_balance` (jiffies) down to
    /// `sd->last_balance` + the idle interval.
    pub fn update_next_balance(&self, sd: &SchedDomain, next_balance: &mut u64) {
        let next = sd.last_balance + self.get_sd_balance_interval(sd, false);
        if *next_balance > next {
            *next_balance = next;
        }
    }

    /// `update_newidle_cost(sd, cost)`: raise `max_newidle_lb_cost` to `cost_ns`, or
    /// decay it by 253/256 once per second. Returns whether it decayed.
    pub fn update_newidle_cost(&self, sd: &mut SchedDomain, cost_ns: u64, jiffies: u64) -> bool {
        if cost_ns > sd.max_newidle_lb_cost {
            sd.max_newidle_lb_cost = cost_ns;
            sd.last_decay_max_lb_cost = jiffies;
        } else if jiffies > sd.last_decay_max_lb_cost + self.hz as u64 {
            sd.max_newidle_lb_cost = sd.max_newidle_lb_cost * 253 / 256;
            sd.last_decay_max_lb_cost = jiffies;
            return true;
        }
        false
    }

    /// The balancing state of `cpu`.
    pub fn cpu(&self, cpu: CpuId) -> Option<&CpuBalance> {
        self.cpus.get(cpu.index())
    }

    /// At wake-up on an idle CPU (`ttwu_do_activate`): fold the idle time since
    /// `idle_stamp` into `avg_idle` (EWMA 1/8, capped at `2 * max_idle_balance_cost`).
    pub fn update_avg_idle(&mut self, cpu: CpuId, now: Nanos) -> Result<(), BalanceError> {
        let b = self
            .cpus
            .get_mut(cpu.index())
            .ok_or(BalanceError::UnknownCpu { cpu })?;
        if let Some(stamp) = b.idle_stamp.take() {
            let delta = now.0.saturating_sub(stamp.0) as i64;
            let avg = b.avg_idle as i64;
            let new = avg + (delta - avg) / 8;
            b.avg_idle = (new.max(0) as u64).min(2 * b.max_idle_balance_cost);
        }
        Ok(())
    }

    fn check_rqs<R: RqSet + ?Sized>(&self, rqs: &R) -> Result<(), BalanceError> {
        for i in 0..self.cpus.len().max(rqs.nr_cpus()) {
            let found = (i < rqs.nr_cpus()).then(|| rqs[i].cpu());
            if found.map(|c| c.index()) != Some(i) || i >= self.cpus.len() {
                return Err(BalanceError::RqMismatch { index: i, found });
            }
        }
        Ok(())
    }
}

fn group_of(topo: &Topology, span: CpuMask) -> SchedGroup {
    let caps = || span.iter().map(|c| topo.capacity_orig(c).0);
    SchedGroup {
        span,
        capacity: caps().map(u64::from).sum(),
        min_capacity: Capacity(caps().min().unwrap_or(0)),
        max_capacity: Capacity(caps().max().unwrap_or(0)),
    }
}

/// `sd_init` for one level, with `asym_cpu_capacity_classify`.
fn sd_init(
    topo: &Topology,
    level: SdLevel,
    span: CpuMask,
    groups: Vec<SchedGroup>,
    jiffies: u64,
) -> SchedDomain {
    let weight = span.weight();
    let mut flags = SdFlags(
        SdFlags::BALANCE_NEWIDLE.0
            | SdFlags::BALANCE_EXEC.0
            | SdFlags::BALANCE_FORK.0
            | SdFlags::WAKE_AFFINE.0
            | SdFlags::PREFER_SIBLING.0,
    );
    if level == SdLevel::Mc {
        flags.insert(SdFlags::SHARE_LLC);
    }
    let cap_in = |m: CpuMask| {
        let mut caps: Vec<u32> = m.iter().map(|c| topo.capacity_orig(c).0).collect();
        caps.sort_unstable();
        caps.dedup();
        caps.len()
    };
    let here = cap_in(span);
    if here > 1 {
        flags.insert(SdFlags::ASYM_CPUCAPACITY);
        if here == cap_in(topo.cpu_mask()) {
            flags.insert(SdFlags::ASYM_CPUCAPACITY_FULL);
        }
    }
    SchedDomain {
        level,
        span,
        groups,
        flags,
        min_interval: weight,
        max_interval: 2 * weight,
        busy_factor: 16,
        imbalance_pct: 117,
        // MC (SD_SHARE_LLC) and PKG both get 1.
        cache_nice_tries: 1,
        balance_interval: weight,
        last_balance: jiffies,
        nr_balance_failed: 0,
        max_newidle_lb_cost: 0,
        last_decay_max_lb_cost: jiffies,
    }
}

// ---- tick, softirq, periodic and newidle balance ------------------------------------

/// `sched_balance_trigger` (`trigger_load_balance`), called from the tick: should
/// SCHED_SOFTIRQ be raised on this CPU? (`time_after_eq(jiffies, rq->next_balance)`.)
/// The NOHZ kick is not modelled.
pub fn sched_balance_trigger(now: Nanos, rq: &Rq) -> bool {
    now >= rq.next_balance()
}

/// `sched_balance_softirq` (`run_rebalance_domains`) on `cpu`: update blocked
/// averages, then [`sched_balance_domains`] with the idle state the tick saw
/// (`rq->idle_balance`).
pub fn sched_balance_softirq<R: RqSet + ?Sized>(
    sds: &mut SchedDomains,
    cpu: CpuId,
    rqs: &mut R,
    now: Nanos,
    ctx: &LbContext,
) -> Result<BalanceReport, BalanceError> {
    sds.check_rqs(rqs)?;
    let rq = &mut rqs[cpu.index()];
    rq.update_blocked_averages();
    let idle = if idle_cpu(rq) {
        CpuIdleType::Idle
    } else {
        CpuIdleType::NotIdle
    };
    sched_balance_domains(sds, cpu, rqs, idle, now, ctx)
}

/// `sched_balance_domains` (`rebalance_domains`): walk `cpu`'s domains bottom-up,
/// balance those whose interval has elapsed, back off or reset their intervals, and
/// set `rq->next_balance` to the earliest next deadline.
pub fn sched_balance_domains<R: RqSet + ?Sized>(
    sds: &mut SchedDomains,
    cpu: CpuId,
    rqs: &mut R,
    mut idle: CpuIdleType,
    now: Nanos,
    ctx: &LbContext,
) -> Result<BalanceReport, BalanceError> {
    sds.check_rqs(rqs)?;
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
        need_decay = sds.update_newidle_cost(sd, 0, jiffies) || need_decay;
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
                rqs,
                sd,
                child_flags,
                idle,
                &mut continue_balancing,
                ctx,
            )?;
            report.add(&r);
            if r.ld_moved > 0 {
                idle = if idle_cpu(&rqs[cpu.index()]) {
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
        rqs[cpu.index()].set_next_balance(t);
    }
    Ok(report)
}

/// `sched_balance_newidle` (`newidle_balance`): `cpu` is about to go idle; try to
/// pull work from its domains, bottom-up, while the expected idle time (`avg_idle`)
/// exceeds the cost of balancing. `sched_clock` reads `sched_clock_cpu` (ns) to
/// measure that cost. Pulls `rq->next_balance` earlier, never later: under
/// `AGGRESSIVE_NEXT_BALANCE` (Linux) from every domain visited, even unbalanced ones
/// with a stale `last_balance`; without it (seed 002) only from domains balanced
/// here, which stamp `last_balance`.
pub fn sched_balance_newidle<R: RqSet + ?Sized>(
    sds: &mut SchedDomains,
    cpu: CpuId,
    rqs: &mut R,
    now: Nanos,
    ctx: &LbContext,
    sched_clock: &mut dyn FnMut() -> u64,
) -> Result<BalanceReport, BalanceError> {
    sds.check_rqs(rqs)?;
    if cpu.index() >= sds.cpus.len() {
        return Err(BalanceError::UnknownCpu { cpu });
    }
    let aggressive = ctx.features.enabled(Feature::AGGRESSIVE_NEXT_BALANCE);
    let jiffies = sds.jiffies(now);
    let mut next_balance = jiffies + sds.hz as u64;
    let mut report = BalanceReport::default();
    let mut pulled = false;
    // update_misfit_status(NULL, rq): nothing runs, nothing misfits.
    if sds.asym_cpucapacity {
        rqs[cpu.index()].set_misfit_task_load(0);
    }
    sds.cpus[cpu.index()].idle_stamp = Some(now);
    let overloaded = rd_overloaded(rqs);
    let avg_idle = sds.cpus[cpu.index()].avg_idle;
    let mut sd_list = core::mem::take(&mut sds.cpus[cpu.index()].sd);
    let skip = match sd_list.first() {
        Some(sd) => !overloaded || avg_idle < sd.max_newidle_lb_cost,
        None => !overloaded,
    };
    let mut curr_cost = 0u64;
    if skip {
        if let (true, Some(sd)) = (aggressive, sd_list.first()) {
            sds.update_next_balance(sd, &mut next_balance);
        }
    } else {
        let mut t0 = sched_clock();
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
                    rqs,
                    sd,
                    child_flags,
                    CpuIdleType::NewlyIdle,
                    &mut continue_balancing,
                    ctx,
                )?;
                report.add(&r);
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
    let rq = &mut rqs[cpu.index()];
    if rq.h_nr_running() > 0 {
        pulled = true;
    }
    let nb = next_balance.saturating_mul(sds.tick_nsec);
    if rq.next_balance().0 > nb {
        rq.set_next_balance(Nanos(nb));
    }
    if pulled {
        sds.cpus[cpu.index()].idle_stamp = None;
    }
    report.pulled = pulled;
    Ok(report)
}

/// `rd->overloaded` as the balancer would have last set it: some CPU has more than
/// one task, or a misfit task.
fn rd_overloaded<R: RqSet + ?Sized>(rqs: &R) -> bool {
    (0..rqs.nr_cpus()).any(|i| rqs[i].nr_running() > 1 || rqs[i].misfit_task_load() > 0)
}

fn idle_cpu(rq: &Rq) -> bool {
    rq.nr_running() == 0
}

// ---- sched_balance_rq ----------------------------------------------------------------

const LBF_ALL_PINNED: u32 = 0x01;
const LBF_DST_PINNED: u32 = 0x04;
const LBF_SOME_PINNED: u32 = 0x08;
const LBF_ACTIVE_LB: u32 = 0x10;

/// `struct lb_env`.
struct LbEnv {
    dst_cpu: CpuId,
    dst_grpmask: CpuMask,
    new_dst_cpu: CpuId,
    src_cpu: CpuId,
    idle: CpuIdleType,
    imbalance: i64,
    cpus: CpuMask,
    flags: u32,
    loop_: u32,
    loop_max: u32,
    migration_type: MigrationType,
}

/// `struct sg_lb_stats`.
#[derive(Clone, Copy, Debug, Default)]
struct SgLbStats {
    avg_load: u64,
    group_load: u64,
    group_capacity: u64,
    group_util: u64,
    group_runnable: u64,
    sum_nr_running: u32,
    sum_h_nr_running: u32,
    idle_cpus: u32,
    group_weight: u32,
    group_type: Option<GroupType>,
    group_misfit_task_load: u64,
}

impl SgLbStats {
    fn ty(&self) -> GroupType {
        self.group_type.unwrap_or(GroupType::HasSpare)
    }
}

/// `struct sd_lb_stats`.
#[derive(Default)]
struct SdLbStats {
    busiest: Option<usize>,
    local: Option<usize>,
    total_load: u64,
    total_capacity: u64,
    avg_load: u64,
    prefer_sibling: bool,
    busiest_stat: SgLbStats,
    local_stat: SgLbStats,
}

/// `sched_balance_rq` (`load_balance`): balance `sd` of `this_cpu` by pulling tasks
/// to it (or to another CPU of its group when affinity pins them). `child_flags`
/// are the flags of the domain below `sd` (`sd->child`), if any. Clears
/// `continue_balancing` when another CPU of the group is the one that should balance.
#[allow(clippy::too_many_arguments)]
pub fn sched_balance_rq<R: RqSet + ?Sized>(
    sds: &SchedDomains,
    this_cpu: CpuId,
    rqs: &mut R,
    sd: &mut SchedDomain,
    child_flags: Option<SdFlags>,
    idle: CpuIdleType,
    continue_balancing: &mut bool,
    ctx: &LbContext,
) -> Result<LbResult, BalanceError> {
    sds.check_rqs(rqs)?;
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
    };
    let mut result = LbResult::default();
    let mut ld_moved = 0u32;
    let balanced = 'redo: loop {
        if !should_we_balance(&env, sd, rqs) {
            *continue_balancing = false;
            break 'redo true;
        }
        let Some(group) = sched_balance_find_src_group(&mut env, sd, child_flags, rqs, ctx) else {
            break 'redo true;
        };
        result.migration_type = Some(env.migration_type);
        let Some(busiest) = sched_balance_find_src_rq(&env, sd, &sd.groups[group], rqs, ctx) else {
            break 'redo true;
        };
        env.src_cpu = busiest;
        env.flags |= LBF_ALL_PINNED;
        let src_nr = rqs[busiest.index()].nr_running();
        if src_nr > 1 {
            env.loop_max = nr_migrate(ctx).min(src_nr);
            loop {
                let moved = move_tasks(&mut env, sd, rqs, ctx)?;
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
            let src = &rqs[env.src_cpu.index()];
            let curr_allowed = src
                .curr()
                .and_then(|c| src.task(c))
                .map(|t| t.cpus_allowed.contains(this_cpu));
            if curr_allowed == Some(true) {
                active = true;
                result.active_balance = Some(ActiveBalance {
                    src: env.src_cpu,
                    dst: this_cpu,
                    level: sd.level,
                    migration_type: env.migration_type,
                });
            } else if curr_allowed == Some(false) {
                // The running task cannot come here: all pinned.
                sd.nr_balance_failed = 0;
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

/// `should_we_balance`: newidle always may (if still idle); otherwise only the first
/// idle CPU of the local group, or its first CPU when none is idle.
fn should_we_balance<R: RqSet + ?Sized>(env: &LbEnv, sd: &SchedDomain, rqs: &R) -> bool {
    let _ = sd;
    if env.idle == CpuIdleType::NewlyIdle {
        return rqs[env.dst_cpu.index()].nr_running() == 0;
    }
    let group = env.dst_grpmask.and(env.cpus);
    let first_idle = group.iter().find(|c| idle_cpu(&rqs[c.index()]));
    match first_idle.or_else(|| group.first()) {
        Some(c) => c == env.dst_cpu,
        None => false,
    }
}

/// `capacity_greater(a, b)`: a is more than ~5% bigger.
fn capacity_greater(a: u64, b: u64) -> bool {
    a * 1024 > b * 1078
}

fn update_sg_lb_stats<R: RqSet + ?Sized>(
    env: &LbEnv,
    sd: &SchedDomain,
    group: &SchedGroup,
    local: bool,
    rqs: &R,
    ctx: &LbContext,
) -> SgLbStats {
    let mut s = SgLbStats::default();
    for i in group.span.and(env.cpus).iter() {
        let rq = &rqs[i.index()];
        s.group_load += rq.cfs_avg().load_avg;
        s.group_util += cpu_util_cfs(&rq.cpu_snapshot(), ctx.features).0 as u64;
        s.group_runnable += rq.cfs_avg().runnable_avg;
        s.sum_h_nr_running += rq.h_nr_running();
        s.sum_nr_running += rq.nr_running();
        if rq.nr_running() == 0 {
            s.idle_cpus += 1;
            continue;
        }
        if local {
            continue;
        }
        if sd.flags.contains(SdFlags::ASYM_CPUCAPACITY)
            && s.group_misfit_task_load < rq.misfit_task_load()
        {
            s.group_misfit_task_load = rq.misfit_task_load();
        }
    }
    s.group_capacity = group.capacity;
    s.group_weight = group.span.weight();
    s.group_type = Some(group_classify(sd.imbalance_pct as u64, &s));
    if matches!(s.ty(), GroupType::Overloaded | GroupType::FullyBusy) && s.group_capacity > 0 {
        s.avg_load = s.group_load * SCHED_CAPACITY_SCALE as u64 / s.group_capacity;
    }
    s
}

fn group_has_capacity(pct: u64, s: &SgLbStats) -> bool {
    if s.sum_nr_running < s.group_weight {
        return true;
    }
    if s.group_capacity * pct < s.group_runnable * 100 {
        return false;
    }
    s.group_capacity * 100 > s.group_util * pct
}

fn group_is_overloaded(pct: u64, s: &SgLbStats) -> bool {
    if s.sum_nr_running <= s.group_weight {
        return false;
    }
    s.group_capacity * 100 < s.group_util * pct || s.group_capacity * pct < s.group_runnable * 100
}

fn group_classify(pct: u64, s: &SgLbStats) -> GroupType {
    if group_is_overloaded(pct, s) {
        GroupType::Overloaded
    } else if s.group_misfit_task_load > 0 {
        GroupType::MisfitTask
    } else if !group_has_capacity(pct, s) {
        GroupType::FullyBusy
    } else {
        GroupType::HasSpare
    }
}

fn update_sd_pick_busiest<R: RqSet + ?Sized>(
    env: &LbEnv,
    sd: &SchedDomain,
    sds: &SdLbStats,
    sg: &SchedGroup,
    sgs: &SgLbStats,
    rqs: &R,
) -> bool {
    if sgs.sum_h_nr_running == 0 {
        return false;
    }
    let dst_cap = rqs[env.dst_cpu.index()].capacity_orig().0 as u64;
    if sgs.ty() == GroupType::MisfitTask
        && (!capacity_greater(dst_cap, sg.max_capacity.0 as u64)
            || sds.local_stat.ty() != GroupType::HasSpare)
    {
        return false;
    }
    if sds.busiest.is_none() {
        return !(sd.flags.contains(SdFlags::ASYM_CPUCAPACITY)
            && sgs.ty() <= GroupType::FullyBusy
            && capacity_greater(sg.min_capacity.0 as u64, dst_cap));
    }
    let busiest = &sds.busiest_stat;
    if sgs.ty() > busiest.ty() {
        return true;
    }
    if sgs.ty() < busiest.ty() {
        return false;
    }
    match sgs.ty() {
        GroupType::Overloaded => {
            if sgs.avg_load <= busiest.avg_load {
                return false;
            }
        }
        GroupType::MisfitTask => {
            if sgs.group_misfit_task_load < busiest.group_misfit_task_load {
                return false;
            }
        }
        GroupType::FullyBusy => {
            if sgs.avg_load < busiest.avg_load {
                return false;
            }
        }
        GroupType::HasSpare => {
            if sgs.idle_cpus > busiest.idle_cpus
                || (sgs.idle_cpus == busiest.idle_cpus
                    && sgs.sum_nr_running <= busiest.sum_nr_running)
            {
                return false;
            }
        }
    }
    // Don't pull from a bigger CPU group that is not overloaded.
    !(sd.flags.contains(SdFlags::ASYM_CPUCAPACITY)
        && sgs.ty() <= GroupType::FullyBusy
        && capacity_greater(sg.min_capacity.0 as u64, dst_cap))
}

fn update_sd_lb_stats<R: RqSet + ?Sized>(
    env: &LbEnv,
    sd: &SchedDomain,
    child_flags: Option<SdFlags>,
    rqs: &R,
    ctx: &LbContext,
) -> SdLbStats {
    let mut sds = SdLbStats {
        prefer_sibling: child_flags.is_some_and(|f| f.contains(SdFlags::PREFER_SIBLING)),
        ..SdLbStats::default()
    };
    // The local group first, as Linux's sd->groups starts with it.
    if let Some(li) = sd.groups.iter().position(|g| g.span.contains(env.dst_cpu)) {
        let s = update_sg_lb_stats(env, sd, &sd.groups[li], true, rqs, ctx);
        sds.local = Some(li);
        sds.local_stat = s;
        sds.total_load += s.group_load;
        sds.total_capacity += s.group_capacity;
    }
    for (gi, g) in sd.groups.iter().enumerate() {
        if Some(gi) == sds.local {
            continue;
        }
        let s = update_sg_lb_stats(env, sd, g, false, rqs, ctx);
        if update_sd_pick_busiest(env, sd, &sds, g, &s, rqs) {
            sds.busiest = Some(gi);
            sds.busiest_stat = s;
        }
        sds.total_load += s.group_load;
        sds.total_capacity += s.group_capacity;
    }
    sds
}

/// `sibling_imbalance`: tasks to move so both groups have as many per CPU.
fn sibling_imbalance(env: &LbEnv, local: &SgLbStats, busiest: &SgLbStats) -> i64 {
    if env.idle == CpuIdleType::NotIdle || busiest.sum_nr_running == 0 {
        return 0;
    }
    let (nl, nb) = (local.group_weight as i64, busiest.group_weight as i64);
    let (bl, ll) = (busiest.sum_nr_running as i64, local.sum_nr_running as i64);
    if nl == nb {
        return (bl - ll).max(0);
    }
    let imb = (nl * bl - nb * ll).max(0);
    let mut imb = (2 * imb + nl + nb) / (nl + nb);
    if imb <= 1 && ll == 0 && bl > 1 {
        imb = 2;
    }
    imb
}

fn calculate_imbalance(env: &mut LbEnv, sd: &SchedDomain, sds: &mut SdLbStats) {
    let local = sds.local_stat;
    let busiest = sds.busiest_stat;
    if busiest.ty() == GroupType::MisfitTask {
        // Linux's reduced-capacity variant (no SD_ASYM_CPUCAPACITY) cannot occur here:
        // misfit load is only recorded under SD_ASYM_CPUCAPACITY.
        env.migration_type = MigrationType::Misfit;
        env.imbalance = 1;
        return;
    }
    if local.ty() == GroupType::HasSpare {
        if busiest.ty() > GroupType::FullyBusy && !sd.flags.contains(SdFlags::SHARE_LLC) {
            env.migration_type = MigrationType::Util;
            env.imbalance = (local.group_capacity.max(local.group_util) - local.group_util) as i64;
            if env.idle != CpuIdleType::NotIdle && env.imbalance == 0 {
                env.migration_type = MigrationType::Task;
                env.imbalance = 1;
            }
            return;
        }
        env.migration_type = MigrationType::Task;
        env.imbalance = if busiest.group_weight == 1 || sds.prefer_sibling {
            sibling_imbalance(env, &local, &busiest)
        } else {
            (local.idle_cpus as i64 - busiest.idle_cpus as i64).max(0)
        };
        env.imbalance >>= 1;
        return;
    }
    let mut local_avg = local.avg_load;
    if local.ty() < GroupType::Overloaded {
        local_avg = local.group_load * SCHED_CAPACITY_SCALE as u64 / local.group_capacity.max(1);
        sds.local_stat.avg_load = local_avg;
        if local_avg >= busiest.avg_load {
            env.imbalance = 0;
            return;
        }
        sds.avg_load = sds.total_load * SCHED_CAPACITY_SCALE as u64 / sds.total_capacity.max(1);
        if local_avg >= sds.avg_load {
            env.imbalance = 0;
            return;
        }
    }
    env.migration_type = MigrationType::Load;
    let a = busiest.avg_load.saturating_sub(sds.avg_load) * busiest.group_capacity;
    let b = sds.avg_load.saturating_sub(local_avg) * local.group_capacity;
    env.imbalance = (a.min(b) / SCHED_CAPACITY_SCALE as u64) as i64;
}

/// `sched_balance_find_src_group` (`find_busiest_group`): the group to pull from,
/// with `env.imbalance` and `env.migration_type` set, or `None` when balanced.
fn sched_balance_find_src_group<R: RqSet + ?Sized>(
    env: &mut LbEnv,
    sd: &SchedDomain,
    child_flags: Option<SdFlags>,
    rqs: &R,
    ctx: &LbContext,
) -> Option<usize> {
    let mut sds = update_sd_lb_stats(env, sd, child_flags, rqs, ctx);
    let busiest_idx = sds.busiest?;
    let (local, busiest) = (sds.local_stat, sds.busiest_stat);
    let force = 'gates: {
        if busiest.ty() == GroupType::MisfitTask {
            break 'gates true;
        }
        if ctx.eas_active && !ctx.overutilized {
            return None;
        }
        if local.ty() > busiest.ty() {
            return None;
        }
        if local.ty() == GroupType::Overloaded {
            if local.avg_load >= busiest.avg_load {
                return None;
            }
            sds.avg_load = sds.total_load * SCHED_CAPACITY_SCALE as u64 / sds.total_capacity.max(1);
            if local.avg_load >= sds.avg_load {
                return None;
            }
            if 100 * busiest.avg_load <= sd.imbalance_pct as u64 * local.avg_load {
                return None;
            }
        }
        if sds.prefer_sibling
            && local.ty() == GroupType::HasSpare
            && sibling_imbalance(env, &local, &busiest) > 1
        {
            break 'gates true;
        }
        if busiest.ty() != GroupType::Overloaded {
            if env.idle == CpuIdleType::NotIdle {
                return None;
            }
            if busiest.group_weight > 1 && local.idle_cpus <= busiest.idle_cpus + 1 {
                return None;
            }
            if busiest.sum_h_nr_running == 1 {
                return None;
            }
        }
        true
    };
    debug_assert!(force);
    calculate_imbalance(env, sd, &mut sds);
    (env.imbalance > 0).then_some(busiest_idx)
}

/// `sched_balance_find_src_rq` (`find_busiest_queue`).
fn sched_balance_find_src_rq<R: RqSet + ?Sized>(
    env: &LbEnv,
    sd: &SchedDomain,
    group: &SchedGroup,
    rqs: &R,
    ctx: &LbContext,
) -> Option<CpuId> {
    let mut busiest = None;
    let (mut busiest_load, mut busiest_capacity, mut busiest_util, mut busiest_nr) =
        (0u64, 1u64, 0u64, 0u32);
    let dst_cap = rqs[env.dst_cpu.index()].capacity_orig().0 as u64;
    for i in group.span.and(env.cpus).iter() {
        let rq = &rqs[i.index()];
        let nr_running = rq.h_nr_running();
        if nr_running == 0 {
            continue;
        }
        let capacity = rq.capacity_orig().0 as u64;
        if sd.flags.contains(SdFlags::ASYM_CPUCAPACITY)
            && !capacity_greater(dst_cap, capacity)
            && nr_running == 1
        {
            continue;
        }
        match env.migration_type {
            MigrationType::Load => {
                let load = rq.cfs_avg().load_avg;
                // check_cpu_capacity is always false without capacity pressure.
                if nr_running == 1 && load as i64 > env.imbalance {
                    continue;
                }
                if load * busiest_capacity > busiest_load * capacity {
                    busiest_load = load;
                    busiest_capacity = capacity;
                    busiest = Some(i);
                }
            }
            MigrationType::Util => {
                let util = cpu_util_cfs_boost(&rq.cpu_snapshot(), ctx.features).0 as u64;
                if nr_running <= 1 {
                    continue;
                }
                if busiest_util < util {
                    busiest_util = util;
                    busiest = Some(i);
                }
            }
            MigrationType::Task => {
                if busiest_nr < nr_running {
                    busiest_nr = nr_running;
                    busiest = Some(i);
                }
            }
            MigrationType::Misfit => {
                if rq.misfit_task_load() > busiest_load {
                    busiest_load = rq.misfit_task_load();
                    busiest = Some(i);
                }
            }
        }
    }
    busiest
}

/// `need_active_balance`: misfit, or a migrate_task balance that failed repeatedly.
fn need_active_balance(env: &LbEnv, sd: &SchedDomain) -> bool {
    env.migration_type == MigrationType::Misfit
        || (env.migration_type == MigrationType::Task
            && sd.nr_balance_failed > sd.cache_nice_tries + 2)
}

/// `detach_tasks` + `attach_tasks` from `env.src_cpu` to `env.dst_cpu`.
fn move_tasks<R: RqSet + ?Sized>(
    env: &mut LbEnv,
    sd: &SchedDomain,
    rqs: &mut R,
    ctx: &LbContext,
) -> Result<u32, BalanceError> {
    let mut detached = Detached::new();
    detach_tasks_env(env, sd, rqs, ctx, &mut detached);
    let n = detached.len() as u32;
    for t in detached {
        attach_one(rqs, env.dst_cpu, env.src_cpu, t)?;
    }
    Ok(n)
}

fn attach_one<R: RqSet + ?Sized>(
    rqs: &mut R,
    dst: CpuId,
    src: CpuId,
    t: Task,
) -> Result<(), BalanceError> {
    let id = t.id;
    if let Err(e) = rqs[dst.index()].attach_task(t) {
        rqs[src.index()]
            .attach_task(e.task)
            .map_err(|_| BalanceError::AttachFailed { task: id, dst })?;
    }
    Ok(())
}

/// `sysctl_sched_nr_migrate` as used: at most [`MAX_NR_MIGRATE`].
fn nr_migrate(ctx: &LbContext) -> u32 {
    ctx.nr_migrate.min(MAX_NR_MIGRATE as u32)
}

/// One `detach_tasks` attempt from `src` for an imbalance of `imbalance` of kind
/// `migration_type`, as a balance from `dst` at domain `sd` would do it; returns the
/// detached tasks (the caller attaches them). Exposed for tests of the ordering:
/// least recently run first (the `cfs_tasks` tail), or, under `LB_BIGGEST_TASK`,
/// biggest first within the window of the `loop_max` least recently run tasks;
/// skipped tasks rotate to the head so that repeated attempts look at others.
#[allow(clippy::too_many_arguments)]
pub fn detach_tasks<R: RqSet + ?Sized>(
    rqs: &mut R,
    sd: &SchedDomain,
    src: CpuId,
    dst: CpuId,
    idle: CpuIdleType,
    migration_type: MigrationType,
    imbalance: i64,
    ctx: &LbContext,
) -> Detached {
    let mut env = LbEnv {
        dst_cpu: dst,
        dst_grpmask: CpuMask::of(dst),
        new_dst_cpu: dst,
        src_cpu: src,
        idle,
        imbalance,
        cpus: sd.span,
        flags: LBF_ALL_PINNED,
        loop_: 0,
        loop_max: nr_migrate(ctx).min(rqs[src.index()].nr_running()),
        migration_type,
    };
    let mut out = Detached::new();
    detach_tasks_env(&mut env, sd, rqs, ctx, &mut out);
    out
}

fn task_load(p: &Task) -> u64 {
    p.avg.load_avg
}

fn task_util(p: &Task, ctx: &LbContext) -> u64 {
    let cpu = p.cpu.unwrap_or(CpuId(0));
    task_util_est(&TaskUtil::from_avg(&p.avg, cpu, true), ctx.features).0 as u64
}

fn detach_tasks_env<R: RqSet + ?Sized>(
    env: &mut LbEnv,
    sd: &SchedDomain,
    rqs: &mut R,
    ctx: &LbContext,
    out: &mut Detached,
) {
    let src = env.src_cpu.index();
    if rqs[src].nr_running() <= 1 {
        env.flags &= !LBF_ALL_PINNED;
        return;
    }
    if env.imbalance <= 0 {
        return;
    }
    let biggest = ctx.features.enabled(Feature::LB_BIGGEST_TASK);
    // The window this attempt may examine: the loop_max least recently run tasks.
    let mut window: heapless::Vec<(TaskId, u64), MAX_NR_MIGRATE> = rqs[src]
        .cfs_tasks()
        .rev()
        .take(env.loop_max.saturating_sub(env.loop_) as usize)
        .take(MAX_NR_MIGRATE)
        .map(|id| (id, 0))
        .collect();
    if biggest {
        for (id, key) in window.iter_mut() {
            *key = rqs[src].task(*id).map_or(0, |p| match env.migration_type {
                MigrationType::Util => task_util(p, ctx),
                _ => task_load(p),
            });
        }
        // Stable: equal sizes keep least-recently-run first.
        insertion_sort_desc(&mut window);
    }
    for (id, _) in window {
        if env.idle != CpuIdleType::NotIdle && rqs[src].nr_running() <= 1 {
            break;
        }
        env.loop_ += 1;
        if env.loop_ > env.loop_max {
            break;
        }
        let Some(p) = rqs[src].task(id) else {
            continue;
        };
        let ok = can_migrate_task(p, env, sd, rqs, ctx) && {
            match env.migration_type {
                MigrationType::Load => {
                    let load = task_load(p).max(1);
                    let lb_min_skip = ctx.features.enabled(Feature::LB_MIN)
                        && load < 16
                        && sd.nr_balance_failed == 0;
                    if lb_min_skip || shr_bound(load, sd.nr_balance_failed) as i64 > env.imbalance {
                        false
                    } else {
                        env.imbalance -= load as i64;
                        true
                    }
                }
                MigrationType::Util => {
                    let util = task_util(p, ctx);
                    if shr_bound(util, sd.nr_balance_failed) as i64 > env.imbalance {
                        false
                    } else {
                        env.imbalance -= util as i64;
                        true
                    }
                }
                MigrationType::Task => {
                    env.imbalance -= 1;
                    true
                }
                MigrationType::Misfit => {
                    let cap = rqs[src].capacity_orig();
                    let clamp = uclamp_eff_range(&p.uclamp, &rqs[src].uclamp_sysctl(), false);
                    let fits = task_fits_cpu(
                        Util(task_util(p, ctx) as u32),
                        clamp,
                        CpuCapacityInfo::unpressured(cap),
                        ctx.uclamp_used,
                        ctx.features,
                    );
                    if fits {
                        false
                    } else {
                        env.imbalance = 0;
                        true
                    }
                }
            }
        };
        if !ok {
            // list_move to the head: the next attempt starts with other tasks.
            rqs[src].cfs_tasks_move_to_head(id);
            continue;
        }
        match rqs[src].detach_task(id) {
            // At most loop_max ≤ MAX_NR_MIGRATE tasks are detached: it always fits.
            Ok(t) => {
                if let Err(t) = out.push(t) {
                    let _ = rqs[src].attach_task(t);
                    break;
                }
            }
            Err(_) => continue,
        }
        // CONFIG_PREEMPTION: one task is enough to end newidle.
        if env.idle == CpuIdleType::NewlyIdle {
            break;
        }
        if env.imbalance <= 0 {
            break;
        }
    }
}

/// Stable insertion sort by key, largest first (no allocation; at most
/// [`MAX_NR_MIGRATE`] elements).
fn insertion_sort_desc(v: &mut [(TaskId, u64)]) {
    for i in 1..v.len() {
        let mut j = i;
        while j > 0 && v[j - 1].1 < v[j].1 {
            v.swap(j - 1, j);
            j -= 1;
        }
    }
}

fn shr_bound(v: u64, s: u32) -> u64 {
    v >> s.min(63)
}

/// `can_migrate_task`: allowed on dst (else note a pinned task and maybe another
/// dst of the group), not running, and not cache hot unless balancing kept failing.
fn can_migrate_task<R: RqSet + ?Sized>(
    p: &Task,
    env: &mut LbEnv,
    sd: &SchedDomain,
    rqs: &R,
    ctx: &LbContext,
) -> bool {
    if !p.cpus_allowed.contains(env.dst_cpu) {
        env.flags |= LBF_SOME_PINNED;
        if env.idle == CpuIdleType::NewlyIdle || env.flags & (LBF_DST_PINNED | LBF_ACTIVE_LB) != 0 {
            return false;
        }
        if let Some(c) = env
            .dst_grpmask
            .and(env.cpus)
            .iter()
            .find(|&c| c != env.dst_cpu && p.cpus_allowed.contains(c))
        {
            env.flags |= LBF_DST_PINNED;
            env.new_dst_cpu = c;
        }
        return false;
    }
    env.flags &= !LBF_ALL_PINNED;
    let src = &rqs[env.src_cpu.index()];
    if src.curr() == Some(p.id) {
        return false;
    }
    if env.flags & LBF_ACTIVE_LB != 0 {
        return true;
    }
    !task_hot(p, src, ctx) || sd.nr_balance_failed > sd.cache_nice_tries
}

/// `task_hot`: ran less than `sysctl_sched_migration_cost` ago.
fn task_hot(p: &Task, src: &Rq, ctx: &LbContext) -> bool {
    if ctx.migration_cost_ns == 0 || p.se.exec_start == 0 {
        return false;
    }
    let delta = src.clock_task().0.saturating_sub(p.se.exec_start);
    delta < ctx.migration_cost_ns
}

/// `active_load_balance_cpu_stop` on `src` (after the caller preempted its running
/// task): move one task that may run on `dst`, least recently run first, ignoring
/// cache hotness (`LBF_ACTIVE_LB`). Returns the moved task's id.
pub fn active_load_balance_cpu_stop<R: RqSet + ?Sized>(
    sds: &SchedDomains,
    rqs: &mut R,
    req: &ActiveBalance,
) -> Result<Option<TaskId>, BalanceError> {
    sds.check_rqs(rqs)?;
    if rqs[req.src.index()].nr_running() == 0 || req.src == req.dst {
        return Ok(None);
    }
    let Some(sd) = sds.cpus[req.dst.index()]
        .sd
        .iter()
        .find(|sd| sd.span.contains(req.src))
    else {
        return Ok(None);
    };
    let mut env = LbEnv {
        dst_cpu: req.dst,
        dst_grpmask: CpuMask::of(req.dst),
        new_dst_cpu: req.dst,
        src_cpu: req.src,
        idle: CpuIdleType::Idle,
        imbalance: 1,
        cpus: sd.span,
        flags: LBF_ACTIVE_LB,
        loop_: 0,
        loop_max: 0,
        migration_type: MigrationType::Load,
    };
    // detach_one_task: the first movable task from the tail. The first one
    // can_migrate_task accepts is detached; the walk ends there.
    let ctx = LbContext::new(SchedFeatures::none());
    let src = &rqs[req.src.index()];
    let found = src.cfs_tasks().rev().find(|&id| {
        src.task(id)
            .is_some_and(|p| can_migrate_task(p, &mut env, sd, rqs, &ctx))
    });
    let Some(id) = found else {
        return Ok(None);
    };
    match rqs[req.src.index()].detach_task(id) {
        Ok(t) => {
            attach_one(rqs, req.dst, req.src, t)?;
            Ok(Some(id))
        }
        Err(_) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capacity_greater_is_about_five_percent() {
        assert!(capacity_greater(1024, 446));
        assert!(!capacity_greater(1024, 1000));
        assert!(capacity_greater(1080, 1024));
    }

    #[test]
    fn sibling_imbalance_rounds_per_core() {
        let env = LbEnv {
            dst_cpu: CpuId(0),
            dst_grpmask: CpuMask::of(CpuId(0)),
            new_dst_cpu: CpuId(0),
            src_cpu: CpuId(1),
            idle: CpuIdleType::Idle,
            imbalance: 0,
            cpus: CpuMask::first_n(6),
            flags: 0,
            loop_: 0,
            loop_max: 0,
            migration_type: MigrationType::Task,
        };
        let g = |w, n| SgLbStats {
            group_weight: w,
            sum_nr_running: n,
            ..SgLbStats::default()
        };
        // Equal sizes: the difference.
        assert_eq!(sibling_imbalance(&env, &g(2, 0), &g(2, 3)), 3);
        // 2 vs 4 cores, 0 vs 2 tasks: (2*(2*2) + 6) / 6 = 2.
        assert_eq!(sibling_imbalance(&env, &g(2, 0), &g(4, 2)), 2);
    }
}
