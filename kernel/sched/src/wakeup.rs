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
//! - No `wake_affine`/`wake_wide`, no `recent_used_cpu` and no per-CPU-kthread stacking:
//!   the wake-up target is `prev_cpu`. `SCHED_IDLE` (`sched_idle_cpu`) does not exist.
//! - The fork slow path is simplified to the two levels our boards have: pick a cluster
//!   (the package-level group) by Linux's group type — `group_has_spare` (an allowed
//!   CPU is idle) before `group_fully_busy` before `group_misfit_task` (the task fits no
//!   allowed CPU of the group, asymmetric systems only) — then most idle CPUs and lowest
//!   utilisation (`has_spare`), or lowest utilisation per capacity (the others); then
//!   inside it the first idle allowed CPU with the lowest utilisation, else the one with
//!   the lowest utilisation (Linux's MC-level pass; no idle-state exit latencies or idle
//!   timestamps, and `cpu_util_cfs` stands in for `cpu_load`). The local group gets no
//!   preference: ties go to the lower cluster index.
//! - Where Linux's core falls back to `select_fallback_rq` because the answer is not in
//!   `p->cpus_ptr`, [`select_task_rq_fair`] returns the first allowed CPU itself, so the
//!   result is always allowed when any CPU is (with an empty mask it returns `prev_cpu`,
//!   for the caller to reject). Shortcuts (target, prev) test affinity explicitly.
//! - `find_energy_efficient_cpu` returns `prev_cpu` rather than `-1` when it cannot
//!   decide (see [`crate::eas`]), so the EAS branch never falls through to the fast path.

use crate::cpu_util::{cpu_util_cfs, task_fits_cpu, util_fits_cpu, Fit};
use crate::eas::{find_energy_efficient_cpu, task_util_est, EasTask, EasView};
use crate::em::EnergyModel;
use crate::features::SchedFeatures;
use crate::rq::RqSnapshot;
use crate::topology::Topology;
use crate::types::{Capacity, CpuId, CpuMask};

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
}

/// Why a task is being placed: `WF_TTWU` or `WF_FORK`/`WF_EXEC`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WakeKind {
    /// `try_to_wake_up`: EAS when not overutilized, else the fast path.
    Wakeup,
    /// `wake_up_new_task` (and exec): the slow path, never EAS.
    Fork,
}

/// Linux's `enum group_type`, the three values the fork path can produce here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum GroupType {
    HasSpare,
    FullyBusy,
    MisfitTask,
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
            _ => select_idle_sibling(p, prev_cpu, prev_cpu, view),
        },
    };
    if is_allowed(p, cpu, view) {
        cpu
    } else {
        select_fallback_rq(p, prev_cpu, view)
    }
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

/// `sched_balance_find_dst_cpu(sd, p, cpu, prev_cpu, SD_BALANCE_FORK)`, simplified to
/// cluster-then-CPU (see the module header): the idlest allowed CPU of the idlest
/// cluster where the task fits. `this_cpu` when no CPU is allowed.
pub fn sched_balance_find_dst_cpu(
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
    let mut best: Option<(GroupType, i64, u64, CpuMask)> = None;
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
            GroupType::MisfitTask
        } else if idle_cpus > 0 {
            GroupType::HasSpare
        } else {
            GroupType::FullyBusy
        };
        let key = match ty {
            GroupType::HasSpare => (ty, -idle_cpus, util, span),
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
