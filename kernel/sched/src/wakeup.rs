//! CFS wake-up placement on asymmetric CPUs: the fast path's capacity-aware idle scan and
//! the fork slow path, behind one `select_task_rq_fair` decision.
//!
//! Re-derives Linux's `kernel/sched/fair.c` v6.12: `select_task_rq_fair`,
//! `select_idle_sibling` (its `sched_asym_cpucap_active()` branch), `asym_fits_cpu`,
//! `select_idle_capacity` and `sched_balance_find_dst_cpu` (`find_idlest_cpu`) with
//! `sched_balance_find_dst_group` (`find_idlest_group`) and
//! `sched_balance_find_dst_group_cpu` (`find_idlest_group_cpu`).
//!
//! Deliberate differences from Linux:
//! - The input is a value snapshot ([`WakeupView`]) of the same per-CPU [`RqSnapshot`]
//!   records as [`crate::eas`] (`available_idle_cpu` is [`RqSnapshot::idle`]). The caller
//!   syncs the task's signals to `prev_cpu` (`sync_entity_load_avg`) before building
//!   [`EasTask`].
//! - One root domain spans every CPU and is the `sd_asym_cpucapacity` domain when
//!   [`Topology::asym_cpucapacity`] holds; there is no `sd_llc` scan
//!   (`select_idle_cpu`/SMT): on a symmetric system the fast path returns the target if
//!   idle, else the first idle allowed CPU scanning from the target (a stand-in for the
//!   LLC scan over the whole machine).
//! - `wake_affine` (`WA_IDLE`, `WA_WEIGHT`, `WA_BIAS`) and `wake_wide` choose the
//!   fast path's target as in v6.12, with the waker's `WF_SYNC`, load and wakee flips
//!   passed in as [`WakerInfo`]; `task_h_load` is the task's `load_avg` (no cgroups).
//!   There is no `recent_used_cpu` and no per-CPU-kthread stacking; `SCHED_IDLE`
//!   (`sched_idle_cpu`) does not exist.
//! - The fork slow path walks the two domain levels our boards have (`MC`: a cluster, one
//!   group per CPU; `PKG`: every CPU, one group per cluster; degenerate levels dropped) as
//!   Linux's `sched_balance_find_dst_cpu` does, with `SD_ASYM_CPUCAPACITY` on a level whose
//!   span mixes capacities and `imbalance_pct` 117 everywhere. Groups are visited from the
//!   local one round the ring. There are no cpuidle states, so
//!   `sched_balance_find_dst_group_cpu` picks the idle CPU with the latest `idle_stamp`
//!   (no exit-latency choice). Only forks come here (no `WF_EXEC`), so the
//!   `*_without(p)` sums never subtract the task. `FORK_FIND_IDLEST=off` (not a Linux
//!   feature) restores the earlier simplified cluster-then-CPU choice.
//! - Where Linux's core falls back to `select_fallback_rq` because the answer is not in
//!   `p->cpus_ptr`, [`select_task_rq_fair`] returns the first allowed CPU itself, so the
//!   result is always allowed when any CPU is (with an empty mask it returns `prev_cpu`,
//!   for the caller to reject). Shortcuts (target, prev) test affinity explicitly.
//! - `find_energy_efficient_cpu` returns `prev_cpu` rather than `-1` when it cannot
//!   decide (see [`crate::eas`]), so the EAS branch never falls through to the fast path.

use crate::balance::stats::{group_classify, SgLbStats};
use crate::balance::GroupType;
use crate::cpu_util::{cpu_util_cfs, task_fits_cpu, util_fits_cpu, Fit};
use crate::eas::{find_energy_efficient_cpu, task_util_est, EasTask, EasView};
use crate::em::EnergyModel;
use crate::features::{Feature, SchedFeatures};
use crate::rq::RqSnapshot;
use crate::topology::Topology;
use crate::types::{Capacity, CpuId, CpuMask, Nanos, TaskId, SCHED_CAPACITY_SCALE};

/// What the wake-up path reads about the system.
#[derive(Clone, Copy, Debug)]
pub struct WakeupView<'a> {
    /// Every CPU, indexed by [`CpuId`] (capacities, utilisation, rq clamps, idle).
    pub cpus: &'a [RqSnapshot],
    /// CPUs, clusters and performance domains.
    pub topology: &'a Topology,
    /// The energy model when `sched_energy_enabled()`.
    pub em: Option<&'a EnergyModel>,
    /// `is_rd_overutilized()`: the root domain's overutilized flag.
    pub overutilized: bool,
    /// Scheduler features (`UTIL_EST`, `UCLAMP_FIT_TRISTATE`, ...).
    pub features: SchedFeatures,
    /// `uclamp_is_used()`.
    pub uclamp_used: bool,
    /// What the wake-up knows about its waker (`WF_SYNC`, `wake_wide`).
    pub waker: WakerInfo,
}

/// What `try_to_wake_up` knows about the waker, `current` on `this_cpu`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WakerInfo {
    /// `WF_SYNC` (and the waker is not exiting): the waker is about to sleep.
    pub sync: bool,
    /// `wake_wide(p)` ([`wake_wide`]): waker and wakee each wake many different tasks,
    /// so the wakee is not pulled towards the waker.
    pub wake_wide: bool,
    /// `task_h_load(current)`, read by a sync wake-up.
    pub current_load: u64,
}

/// A task's `wakee_flips`, `last_wakee` and `wakee_flip_decay_ts` (Linux keeps them in
/// `task_struct`; here the caller keeps one per task and one per CPU's idle task).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WakeeFlips {
    /// `wakee_flips`: how often the task switched to waking a different task, halved
    /// once a second.
    pub flips: u32,
    last_wakee: Option<TaskId>,
    decay_ts_j: u64,
}

impl WakeeFlips {
    /// The three fields as a caller stored them (a kernel keeps them in separate atomics of
    /// the task, as Linux keeps them in `task_struct`): `wakee_flips`, `last_wakee` and
    /// `wakee_flip_decay_ts` in jiffies.
    pub const fn from_parts(flips: u32, last_wakee: Option<TaskId>, decay_ts_j: u64) -> Self {
        WakeeFlips {
            flips,
            last_wakee,
            decay_ts_j,
        }
    }

    /// `last_wakee`: the task this one woke last (`None`: none yet).
    pub const fn last_wakee(&self) -> Option<TaskId> {
        self.last_wakee
    }

    /// `wakee_flip_decay_ts`: the jiffy `flips` was last halved at.
    pub const fn decay_ts_j(&self) -> u64 {
        self.decay_ts_j
    }

    /// `record_wakee(p)` on the waker at `jiffies`: halve the flips when more than `hz`
    /// jiffies (one second) passed since the last decay, then count a change of wakee.
    pub fn record_wakee(&mut self, wakee: TaskId, jiffies: u64, hz: u64) {
        if jiffies > self.decay_ts_j.saturating_add(hz) {
            self.flips >>= 1;
            self.decay_ts_j = jiffies;
        }
        if self.last_wakee != Some(wakee) {
            self.last_wakee = Some(wakee);
            self.flips = self.flips.saturating_add(1);
        }
    }
}

/// `wake_wide(p)`: the larger of the waker's and the wakee's flips is at least
/// `llc_size` times the smaller, and the smaller at least `llc_size` (`sd_llc_size`, the
/// waking CPU's cluster here): a 1:N waker/wakee relation wider than one LLC.
pub fn wake_wide(waker: &WakeeFlips, wakee: &WakeeFlips, llc_size: u32) -> bool {
    let (master, slave) = if waker.flips < wakee.flips {
        (wakee.flips, waker.flips)
    } else {
        (waker.flips, wakee.flips)
    };
    !(slave < llc_size || u64::from(master) < u64::from(slave) * u64::from(llc_size))
}

/// Why a task is being placed: `WF_TTWU` or `WF_FORK`/`WF_EXEC`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WakeKind {
    /// `try_to_wake_up`: EAS when not overutilized, else the fast path.
    Wakeup,
    /// `wake_up_new_task` (and exec): the slow path, never EAS.
    Fork,
}

/// `select_task_rq_fair(p, prev_cpu, wake_flags)`: where `p` should run.
///
/// A wake-up uses `find_energy_efficient_cpu` while EAS is enabled and the root domain
/// is not overutilized, else [`select_idle_sibling`] with `prev_cpu` as target; a fork
/// uses [`sched_balance_find_dst_cpu`] from `this_cpu`. The result is an allowed CPU
/// whenever `p.allowed` names one.
pub fn select_task_rq_fair(
    p: &EasTask,
    prev_cpu: CpuId,
    this_cpu: CpuId,
    kind: WakeKind,
    view: &WakeupView<'_>,
) -> CpuId {
    let cpu = match kind {
        WakeKind::Fork => sched_balance_find_dst_cpu(p, this_cpu, prev_cpu, view),
        WakeKind::Wakeup => match view.em {
            Some(em) if !view.overutilized => {
                let eas = EasView {
                    cpus: view.cpus,
                    topology: view.topology,
                    em,
                    features: view.features,
                    uclamp_used: view.uclamp_used,
                };
                find_energy_efficient_cpu(p, prev_cpu, &eas)
            }
            _ => {
                // want_affine: the lowest SD_WAKE_AFFINE domain of this_cpu spanning
                // prev_cpu always exists here (every level has the flag).
                let want_affine = !view.waker.wake_wide && is_allowed(p, this_cpu, view);
                let target = if want_affine && this_cpu != prev_cpu {
                    wake_affine(p, this_cpu, prev_cpu, view)
                } else {
                    prev_cpu
                };
                select_idle_sibling(p, prev_cpu, target, view)
            }
        },
    };
    if is_allowed(p, cpu, view) {
        cpu
    } else {
        select_fallback_rq(p, prev_cpu, view)
    }
}

/// `wake_affine(sd, p, this_cpu, prev_cpu, sync)`: the wake-up target, `this_cpu` (pull
/// the wakee towards its waker) when `WA_IDLE`'s [`wake_affine_idle`] or else
/// `WA_WEIGHT`'s [`wake_affine_weight`] chooses it, else `prev_cpu`.
pub fn wake_affine(p: &EasTask, this_cpu: CpuId, prev_cpu: CpuId, view: &WakeupView<'_>) -> CpuId {
    let mut target = None;
    if view.features.enabled(Feature::WA_IDLE) {
        target = wake_affine_idle(this_cpu, prev_cpu, view);
    }
    if view.features.enabled(Feature::WA_WEIGHT) && target.is_none() {
        target = wake_affine_weight(p, this_cpu, prev_cpu, view);
    }
    if target == Some(this_cpu) {
        this_cpu
    } else {
        prev_cpu
    }
}

/// `wake_affine_idle(this_cpu, prev_cpu, sync)`: an idle waking CPU (an interrupt) takes
/// the wakee only from a CPU it shares a cache with, and only if that one is busy; a sync
/// waker alone on its CPU takes it; else an idle `prev_cpu` keeps it. `None`: no opinion.
pub fn wake_affine_idle(this_cpu: CpuId, prev_cpu: CpuId, view: &WakeupView<'_>) -> Option<CpuId> {
    if is_idle(this_cpu, view) && same_cluster(this_cpu, prev_cpu, view.topology) {
        return Some(if is_idle(prev_cpu, view) {
            prev_cpu
        } else {
            this_cpu
        });
    }
    if view.waker.sync
        && view
            .cpus
            .get(this_cpu.index())
            .is_some_and(|c| c.nr_running == 1)
    {
        return Some(this_cpu);
    }
    if is_idle(prev_cpu, view) {
        return Some(prev_cpu);
    }
    None
}

/// `wake_affine_weight(sd, p, this_cpu, prev_cpu, sync)`: `this_cpu` if its load with the
/// wakee (minus a sync waker's) is below `prev_cpu`'s without it, each scaled by the other
/// CPU's capacity; `WA_BIAS` weighs `prev_cpu`'s load up by half the domain's
/// `imbalance_pct` (117), which favours `this_cpu`. `None`: no opinion.
pub fn wake_affine_weight(
    p: &EasTask,
    this_cpu: CpuId,
    prev_cpu: CpuId,
    view: &WakeupView<'_>,
) -> Option<CpuId> {
    let (Some(this), Some(prev)) = (
        view.cpus.get(this_cpu.index()),
        view.cpus.get(prev_cpu.index()),
    ) else {
        return None;
    };
    let bias = view.features.enabled(Feature::WA_BIAS);
    let mut this_eff_load = this.load_avg as i128;
    if view.waker.sync {
        let current_load = view.waker.current_load as i128;
        if current_load > this_eff_load {
            return Some(this_cpu);
        }
        this_eff_load -= current_load;
    }
    let task_load = p.load_avg as i128;
    this_eff_load += task_load;
    if bias {
        this_eff_load *= 100;
    }
    this_eff_load *= i128::from(prev.capacity.capacity.0);
    let mut prev_eff_load = prev.load_avg as i128 - task_load;
    if bias {
        prev_eff_load *= 100 + (IMBALANCE_PCT as i128 - 100) / 2;
    }
    prev_eff_load *= i128::from(this.capacity.capacity.0);
    if view.waker.sync {
        prev_eff_load += 1;
    }
    (this_eff_load < prev_eff_load).then_some(this_cpu)
}

/// `asym_fits_cpu(util, util_min, util_max, cpu)`: on an asymmetric system, does the task
/// fully fit `cpu` (`util_fits_cpu(...) > 0`, uclamp_min included)? Always true on a
/// symmetric one.
pub fn asym_fits_cpu(p: &EasTask, cpu: CpuId, view: &WakeupView<'_>) -> bool {
    if !view.topology.asym_cpucapacity() {
        return true;
    }
    match view.cpus.get(cpu.index()) {
        Some(c) => fit_of(p, c, view) == Fit::Yes,
        None => false,
    }
}

/// `select_idle_sibling(p, prev, target)`, asymmetric branch: `target` if it is idle and
/// fits, else `prev` if idle and fits, else [`select_idle_capacity`] over the
/// `sd_asym_cpucapacity` span, else `target`.
pub fn select_idle_sibling(
    p: &EasTask,
    prev: CpuId,
    target: CpuId,
    view: &WakeupView<'_>,
) -> CpuId {
    let idle_fit =
        |cpu: CpuId| is_idle(cpu, view) && is_allowed(p, cpu, view) && asym_fits_cpu(p, cpu, view);
    if idle_fit(target) {
        return target;
    }
    // cpus_share_cache(prev, target): one LLC domain per cluster.
    if prev != target && same_cluster(prev, target, view.topology) && idle_fit(prev) {
        return prev;
    }
    if view.topology.asym_cpucapacity() {
        return select_idle_capacity(p, target, view).unwrap_or(target);
    }
    // Symmetric stand-in for select_idle_cpu over sd_llc.
    wrap_from(
        view.topology.cpu_mask().and(p.allowed),
        target,
        view.cpus.len(),
    )
    .find(|&c| is_idle(c, view))
    .unwrap_or(target)
}

/// `select_idle_capacity(p, sd, target)`: scan the allowed idle CPUs of the root
/// (`sd_asym_cpucapacity`) domain starting at `target`; return the first where the task
/// fully fits, else the best by fit (uclamp_min-only misfit before misfit), then by
/// capacity (`get_actual_cpu_capacity` for uclamp_min-only misfits, `capacity_of`
/// otherwise). `None` when no allowed CPU is idle.
pub fn select_idle_capacity(p: &EasTask, target: CpuId, view: &WakeupView<'_>) -> Option<CpuId> {
    let span = view.topology.cpu_mask().and(p.allowed);
    let mut best: Option<(CpuId, Fit, Capacity)> = None;
    for cpu in wrap_from(span, target, view.cpus.len()) {
        if !is_idle(cpu, view) {
            continue;
        }
        let Some(c) = view.cpus.get(cpu.index()) else {
            continue;
        };
        let fits = fit_of(p, c, view);
        let cap = match fits {
            Fit::Yes => return Some(cpu),
            Fit::UclampMinOnly => c.capacity.actual,
            Fit::No => c.capacity.capacity,
        };
        let better = match best {
            None => true,
            Some((_, best_fits, best_cap)) => {
                fit_rank(fits) > fit_rank(best_fits) || (fits == best_fits && cap > best_cap)
            }
        };
        if better {
            best = Some((cpu, fits, cap));
        }
    }
    best.map(|(cpu, _, _)| cpu)
}

/// `sched_balance_find_dst_cpu(sd, p, cpu, prev_cpu, SD_BALANCE_FORK)` (`find_idlest_cpu`)
/// from the highest domain of `this_cpu`: at each level,
/// [`sched_balance_find_dst_group`] picks the idlest group, or none when the local group
/// (the one holding `this_cpu`) is at least as idle — then the walk goes down to the
/// child level of the same CPU; otherwise [`sched_balance_find_dst_group_cpu`] picks a
/// CPU in that group and the walk continues at its lower levels. `prev_cpu` (the
/// forking CPU for a fork) when no domain spans an allowed CPU.
pub fn sched_balance_find_dst_cpu(
    p: &EasTask,
    this_cpu: CpuId,
    prev_cpu: CpuId,
    view: &WakeupView<'_>,
) -> CpuId {
    if !view.features.enabled(Feature::FORK_FIND_IDLEST) {
        return find_dst_cpu_simplified(p, this_cpu, prev_cpu, view);
    }
    let Some(top) = top_level(this_cpu, view.topology) else {
        return prev_cpu;
    };
    if top.span(this_cpu, view.topology).and(p.allowed).is_empty() {
        return prev_cpu;
    }
    let mut cpu = this_cpu;
    let mut new_cpu = this_cpu;
    let mut sd = Some(top);
    while let Some(level) = sd {
        let Some(group) = sched_balance_find_dst_group(level, p, cpu, view) else {
            sd = child_level(level, cpu, view.topology);
            continue;
        };
        new_cpu = sched_balance_find_dst_group_cpu(group, p, cpu, view);
        if new_cpu == cpu {
            // Try balancing at a lower domain level of `cpu`.
            sd = child_level(level, cpu, view.topology);
            continue;
        }
        // Now the lower levels of `new_cpu`: the highest one spanning fewer CPUs.
        let weight = level.span(cpu, view.topology).weight();
        cpu = new_cpu;
        sd = [DomainLevel::Pkg, DomainLevel::Mc]
            .into_iter()
            .filter(|&l| levels_of(cpu, view.topology).contains(&Some(l)))
            .find(|l| l.span(cpu, view.topology).weight() < weight);
    }
    new_cpu
}

/// The two sched-domain levels our boards have: `MC` (the CPUs of one cluster, one
/// group per CPU) and `PKG` (every CPU, one group per cluster). A level whose span is a
/// single CPU or equals its child's is degenerate (`sd_degenerate`) and absent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DomainLevel {
    Mc,
    Pkg,
}

impl DomainLevel {
    /// `sched_domain_span(sd)` of `cpu`'s domain at this level.
    fn span(self, cpu: CpuId, topology: &Topology) -> CpuMask {
        match self {
            DomainLevel::Mc => topology
                .cpu(cpu)
                .map_or(CpuMask::of(cpu), |c| topology.cluster_mask(c.cluster)),
            DomainLevel::Pkg => topology.cpu_mask(),
        }
    }

    /// The group of this level holding `cpu` (`sched_group_span`).
    fn group_of(self, cpu: CpuId, topology: &Topology) -> CpuMask {
        match self {
            DomainLevel::Mc => CpuMask::of(cpu),
            DomainLevel::Pkg => DomainLevel::Mc.span(cpu, topology),
        }
    }
}

/// `cpu`'s non-degenerate domains, lowest first.
fn levels_of(cpu: CpuId, topology: &Topology) -> [Option<DomainLevel>; 2] {
    let mc = DomainLevel::Mc.span(cpu, topology);
    let pkg = DomainLevel::Pkg.span(cpu, topology);
    [
        (mc.weight() > 1).then_some(DomainLevel::Mc),
        (pkg != mc).then_some(DomainLevel::Pkg),
    ]
}

/// The highest domain of `cpu` with `SD_BALANCE_FORK` (every level has it).
fn top_level(cpu: CpuId, topology: &Topology) -> Option<DomainLevel> {
    levels_of(cpu, topology).into_iter().flatten().last()
}

/// `sd->child` of `cpu`'s domain at `level`.
fn child_level(level: DomainLevel, cpu: CpuId, topology: &Topology) -> Option<DomainLevel> {
    match level {
        DomainLevel::Pkg => levels_of(cpu, topology)[0],
        DomainLevel::Mc => None,
    }
}

/// `sd->imbalance_pct` at every level here (`sd_init`: neither SMT nor NUMA).
const IMBALANCE_PCT: u64 = 117;

/// One group's `sgc->capacity` and `sgc->max_capacity` with its wake-up statistics.
#[derive(Clone, Copy, Debug)]
struct WakeupGroup {
    span: CpuMask,
    max_capacity: u32,
    sgs: SgLbStats,
}

/// `sched_balance_find_dst_group(sd, p, this_cpu)` (`find_idlest_group`) over the groups
/// of `this_cpu`'s domain at `level`, visited from the local group round the ring:
/// the idlest non-local group by [`update_pick_idlest`], or `None` to stay in the local
/// group when it is idler — a lower group type, or for `group_has_spare` at least as
/// many idle CPUs, for `group_misfit_task` at least the same `max_capacity`, for fully
/// busy and overloaded groups an `avg_load` within `imbalance` and `imbalance_pct`.
fn sched_balance_find_dst_group(
    level: DomainLevel,
    p: &EasTask,
    this_cpu: CpuId,
    view: &WakeupView<'_>,
) -> Option<CpuMask> {
    let topo = view.topology;
    let span = level.span(this_cpu, topo);
    let asym = {
        let mut caps = span.iter().map(|c| topo.capacity_orig(c));
        let first = caps.next();
        caps.any(|c| Some(c) != first)
    };
    let mut local: Option<WakeupGroup> = None;
    let mut idlest: Option<WakeupGroup> = None;
    let mut seen = CpuMask::default();
    for first in wrap_from(span, this_cpu, view.cpus.len()) {
        if seen.contains(first) {
            continue;
        }
        let group = level.group_of(first, topo).and(span);
        seen = seen.or(group);
        if group.and(p.allowed).is_empty() {
            continue;
        }
        let g = update_sg_wakeup_stats(group, asym, p, view);
        if group.contains(this_cpu) {
            local = Some(g);
        } else if update_pick_idlest(idlest.as_ref(), &g) {
            idlest = Some(g);
        }
    }
    let idlest = idlest?;
    let Some(local) = local else {
        return Some(idlest.span);
    };
    let (l, i) = (&local.sgs, &idlest.sgs);
    if l.ty() < i.ty() {
        return None;
    }
    if l.ty() > i.ty() {
        return Some(idlest.span);
    }
    let stay = match l.ty() {
        GroupType::Overloaded | GroupType::FullyBusy => {
            // scale_load_down(NICE_0_LOAD) * (imbalance_pct - 100) / 100
            let imbalance = SCHED_CAPACITY_SCALE as u64 * (IMBALANCE_PCT - 100) / 100;
            i.avg_load >= l.avg_load + imbalance || 100 * l.avg_load <= IMBALANCE_PCT * i.avg_load
        }
        GroupType::MisfitTask => local.max_capacity >= idlest.max_capacity,
        GroupType::HasSpare => l.idle_cpus >= i.idle_cpus,
    };
    (!stay).then_some(idlest.span)
}

/// `update_sg_wakeup_stats(sd, group, sgs, p)` for a task that is on no CPU (a fork: no
/// `*_without` subtraction): load, utilisation and runnable sums, running and idle CPU
/// counts over the whole group, and `group_misfit_task` under `SD_ASYM_CPUCAPACITY`
/// when the task fits none of its CPUs; `avg_load` for fully busy and overloaded groups.
fn update_sg_wakeup_stats(
    group: CpuMask,
    asym: bool,
    p: &EasTask,
    view: &WakeupView<'_>,
) -> WakeupGroup {
    let mut sgs = SgLbStats {
        group_misfit_task_load: u64::from(asym),
        ..SgLbStats::default()
    };
    let mut max_capacity = 0;
    let util = task_util_est(&p.util, view.features);
    for cpu in group {
        let Some(c) = view.cpus.get(cpu.index()) else {
            continue;
        };
        sgs.group_load += c.load_avg;
        sgs.group_util += u64::from(cpu_util_cfs(&c.util, view.features).0);
        sgs.group_runnable += c.runnable_avg;
        sgs.sum_h_nr_running += c.nr_running;
        sgs.sum_nr_running += c.nr_running;
        if c.nr_running == 0 && c.idle {
            sgs.idle_cpus += 1;
        }
        if asym
            && sgs.group_misfit_task_load != 0
            && task_fits_cpu(util, p.clamp, c.capacity, view.uclamp_used, view.features)
        {
            sgs.group_misfit_task_load = 0;
        }
        sgs.group_capacity += u64::from(c.capacity.capacity.0);
        max_capacity = max_capacity.max(c.capacity.capacity.0);
    }
    sgs.group_weight = group.weight();
    sgs.group_type = Some(group_classify(IMBALANCE_PCT, &sgs));
    if matches!(sgs.ty(), GroupType::FullyBusy | GroupType::Overloaded) && sgs.group_capacity > 0 {
        sgs.avg_load = sgs.group_load * SCHED_CAPACITY_SCALE as u64 / sgs.group_capacity;
    }
    WakeupGroup {
        span: group,
        max_capacity,
        sgs,
    }
}

/// `update_pick_idlest(idlest, idlest_sgs, group, sgs)`: is `g` idler than the idlest
/// so far? A lower group type; within a type the lower `avg_load` (fully busy,
/// overloaded), the higher `max_capacity` (misfit), or more idle CPUs, then the lower
/// `group_util` (has spare). Ties keep the group seen first.
fn update_pick_idlest(idlest: Option<&WakeupGroup>, g: &WakeupGroup) -> bool {
    let Some(best) = idlest else {
        // idlest_sgs starts as { group_overloaded, avg_load = UINT_MAX }.
        return g.sgs.ty() < GroupType::Overloaded || g.sgs.avg_load < u64::from(u32::MAX);
    };
    let (b, s) = (&best.sgs, &g.sgs);
    if s.ty() != b.ty() {
        return s.ty() < b.ty();
    }
    match s.ty() {
        GroupType::Overloaded | GroupType::FullyBusy => b.avg_load > s.avg_load,
        GroupType::MisfitTask => best.max_capacity < g.max_capacity,
        GroupType::HasSpare => {
            b.idle_cpus < s.idle_cpus || (b.idle_cpus == s.idle_cpus && b.group_util > s.group_util)
        }
    }
}

/// `sched_balance_find_dst_group_cpu(group, p, this_cpu)` (`find_idlest_group_cpu`): a
/// single-CPU group's CPU; else among the group's allowed CPUs the idle one that went
/// idle last (`rq->idle_stamp`; no cpuidle states here, so no exit-latency choice), or
/// while none is idle the one with the lowest `cpu_load`; `this_cpu` when neither exists
/// (an idle CPU without an `idle_stamp` is no candidate, as in Linux).
fn sched_balance_find_dst_group_cpu(
    group: CpuMask,
    p: &EasTask,
    this_cpu: CpuId,
    view: &WakeupView<'_>,
) -> CpuId {
    if group.weight() == 1 {
        return group.first().unwrap_or(this_cpu);
    }
    let mut min_load = u64::MAX;
    let mut least_loaded_cpu = this_cpu;
    let mut latest_idle: Option<(Nanos, CpuId)> = None;
    let mut found_idle = false;
    for cpu in group.and(p.allowed) {
        let Some(c) = view.cpus.get(cpu.index()) else {
            continue;
        };
        if c.idle {
            if let Some(stamp) = c.idle_stamp {
                if latest_idle.is_none_or(|(t, _)| stamp > t) {
                    latest_idle = Some((stamp, cpu));
                    found_idle = true;
                }
            }
        } else if !found_idle && c.load_avg < min_load {
            min_load = c.load_avg;
            least_loaded_cpu = cpu;
        }
    }
    latest_idle.map_or(least_loaded_cpu, |(_, cpu)| cpu)
}

/// `sched_balance_find_dst_cpu(sd, p, cpu, prev_cpu, SD_BALANCE_FORK)`, simplified to
/// cluster-then-CPU (see the module header): the idlest allowed CPU of the idlest
/// cluster where the task fits. `this_cpu` when no CPU is allowed.
fn find_dst_cpu_simplified(
    p: &EasTask,
    this_cpu: CpuId,
    _prev_cpu: CpuId,
    view: &WakeupView<'_>,
) -> CpuId {
    let asym = view.topology.asym_cpucapacity();
    let nr_clusters = view
        .topology
        .cpus()
        .iter()
        .map(|c| c.cluster + 1)
        .max()
        .unwrap_or(0);
    // (type, -idle_cpus or 0, util per capacity or util, cluster): lowest wins.
    let mut best: Option<(SimpleGroupType, i64, u64, CpuMask)> = None;
    for cluster in 0..nr_clusters {
        let span = view.topology.cluster_mask(cluster).and(p.allowed);
        if span.is_empty() {
            continue;
        }
        let mut idle_cpus = 0i64;
        let mut util = 0u64;
        let mut cap = 0u64;
        let mut fits_one = false;
        for cpu in span {
            let Some(c) = view.cpus.get(cpu.index()) else {
                continue;
            };
            if is_idle(cpu, view) {
                idle_cpus += 1;
            }
            util += u64::from(cpu_util_cfs(&c.util, view.features).0);
            cap += u64::from(c.capacity.capacity.0);
            fits_one |= task_fits_cpu(
                task_util_est(&p.util, view.features),
                p.clamp,
                c.capacity,
                view.uclamp_used,
                view.features,
            );
        }
        let ty = if asym && !fits_one {
            SimpleGroupType::MisfitTask
        } else if idle_cpus > 0 {
            SimpleGroupType::HasSpare
        } else {
            SimpleGroupType::FullyBusy
        };
        let key = match ty {
            SimpleGroupType::HasSpare => (ty, -idle_cpus, util, span),
            _ => (ty, 0, util * 1024 / cap.max(1), span),
        };
        if best.is_none_or(|b| (key.0, key.1, key.2) < (b.0, b.1, b.2)) {
            best = Some(key);
        }
    }
    let Some((_, _, _, span)) = best else {
        return this_cpu;
    };
    // The MC level: each CPU is a group; idle (has_spare) before busy, then lowest util.
    span.iter()
        .filter_map(|cpu| {
            let c = view.cpus.get(cpu.index())?;
            let util = cpu_util_cfs(&c.util, view.features);
            Some((!is_idle(cpu, view), util, cpu))
        })
        .min()
        .map_or(this_cpu, |(_, _, cpu)| cpu)
}

/// Linux's `enum group_type`, the three values the fork path can produce here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum SimpleGroupType {
    HasSpare,
    FullyBusy,
    MisfitTask,
}

fn fit_of(p: &EasTask, c: &RqSnapshot, view: &WakeupView<'_>) -> Fit {
    util_fits_cpu(
        task_util_est(&p.util, view.features),
        p.clamp.min,
        p.clamp.max,
        c.capacity,
        view.uclamp_used,
        view.features,
    )
}

/// Linux compares `fits` as integers with `-1` better than `0`; `1` returns at once.
fn fit_rank(f: Fit) -> u8 {
    match f {
        Fit::No => 0,
        Fit::UclampMinOnly => 1,
        Fit::Yes => 2,
    }
}

/// `available_idle_cpu(cpu)`.
fn is_idle(cpu: CpuId, view: &WakeupView<'_>) -> bool {
    view.cpus.get(cpu.index()).is_some_and(|c| c.idle)
}

fn is_allowed(p: &EasTask, cpu: CpuId, view: &WakeupView<'_>) -> bool {
    p.allowed.contains(cpu) && cpu.index() < view.cpus.len() && view.cpus[cpu.index()].online
}

/// `select_fallback_rq`: the first allowed online CPU, else `prev_cpu`.
fn select_fallback_rq(p: &EasTask, prev_cpu: CpuId, view: &WakeupView<'_>) -> CpuId {
    p.allowed
        .iter()
        .find(|&c| is_allowed(p, c, view))
        .unwrap_or(prev_cpu)
}

fn same_cluster(a: CpuId, b: CpuId, topology: &Topology) -> bool {
    match (topology.cpu(a), topology.cpu(b)) {
        (Some(x), Some(y)) => x.cluster == y.cluster,
        _ => false,
    }
}

/// `for_each_cpu_wrap(cpu, mask, start)`.
fn wrap_from(mask: CpuMask, start: CpuId, nr_cpus: usize) -> impl Iterator<Item = CpuId> {
    let start = start.index().min(nr_cpus);
    (start..nr_cpus)
        .chain(0..start)
        .map(|i| CpuId(i as u16))
        .filter(move |&c| mask.contains(c))
}

/// The interim placement rule used before the Linux wake-up path existed (kept for
/// comparison with earlier measurements, and as the fallback when
/// [`select_task_rq_fair`]'s answer cannot be used): the previous CPU if it is idle and
/// allowed, else the first idle allowed CPU, else the previous CPU if allowed, else the
/// first allowed CPU (`prev` when none is).
pub fn select_task_rq_interim(prev: CpuId, allowed: CpuMask, cpus: &[RqSnapshot]) -> CpuId {
    let ok = |c: CpuId| allowed.contains(c);
    let idle = |c: CpuId| cpus.get(c.index()).is_some_and(|s| s.idle);
    if ok(prev) && idle(prev) {
        return prev;
    }
    let all = || (0..cpus.len()).map(|i| CpuId(i as u16));
    if let Some(c) = all().find(|&c| ok(c) && idle(c)) {
        return c;
    }
    if ok(prev) {
        return prev;
    }
    all().find(|&c| ok(c)).unwrap_or(prev)
}
