//! Energy-aware wake-up placement (EAS), the overutilized test and misfit status.
//!
//! Re-derives Linux's `kernel/sched/fair.c` v6.12 (identical in 6.18):
//! `find_energy_efficient_cpu`, `compute_energy`, `eenv_task_busy_time`,
//! `eenv_pd_busy_time`, `eenv_pd_max_util`, `cpu_overutilized` and
//! `update_misfit_status` (with `task_fits_cpu` and v6.10's `max_allowed_capacity`).
//!
//! Deliberate differences from Linux:
//! - The input is a value snapshot ([`EasView`]: the per-CPU [`RqSnapshot`]s plus the
//!   [`EnergyModel`] and [`Topology`]) rather than live run queues under RCU, so the kernel
//!   and the simulator can both build it. The caller syncs the waking task's signals to
//!   its previous CPU (`sync_entity_load_avg`, [`crate::rq::sync_entity_load_avg`])
//!   before building [`EasTask`].
//! - `sched_energy_enabled()` and `is_rd_overutilized()` are the caller's gates, as in
//!   `select_task_rq_fair`. There is one root domain spanning every CPU; the
//!   `SD_ASYM_CPUCAPACITY` domain is that span when [`Topology::asym_cpucapacity`] holds,
//!   and without it (or without any energy model) we return `prev_cpu` where Linux
//!   returns `-1` and lets the slow path choose.
//! - Performance domains are visited from the highest index down, the order of Linux's
//!   `rd->pd` list (`build_perf_domains` prepends each new domain); this matters only for
//!   ties in energy.
//! - `util_min`/`util_max` are reset for every CPU; in Linux (`find_energy_efficient_cpu`) they
//!   are declared per domain and a busy CPU's rq clamps can leak into the next CPU's test.
//! - Linux's `-1` states become types: "no candidate" is `None`, a spare capacity of `-1`
//!   is `None` (which `Option`'s ordering puts below every real spare capacity), and the
//!   `fits` ranking (`1` / `-1`, with "nothing yet" also `-1`) is [`FitRank`].
//! - `task_h_load` in `update_misfit_status` is the caller's input (no cgroups here: it is
//!   the task's `load_avg`).

use crate::cpu_util::{
    cpu_util, cpu_util_cfs, effective_cpu_util, task_fits_cpu, util_fits_cpu, CpuCapacityInfo, Fit,
    TaskUtil,
};
use crate::em::{EmPerfDomain, EnergyModel};
use crate::features::{Feature, SchedFeatures};
use crate::rq::RqSnapshot;
use crate::schedutil::sugov_effective_cpu_perf;
use crate::topology::Topology;
use crate::types::{Capacity, CpuId, CpuMask, Util, SCHED_CAPACITY_SCALE};
use crate::uclamp::ClampRange;

/// What EAS reads about the waking task `p`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EasTask {
    /// `task_util`, `_task_util_est`, `task_cpu(p)` (= prev_cpu) and whether it is queued.
    pub util: TaskUtil,
    /// `uclamp_eff_value(p, UCLAMP_MIN/MAX)`.
    pub clamp: ClampRange,
    /// `p->cpus_ptr`.
    pub allowed: CpuMask,
    /// `task_h_load(p)`: the task's `load_avg` as of its last update (`wake_affine_weight`
    /// reads it before any sync).
    pub load_avg: u64,
}

/// The system as `find_energy_efficient_cpu` sees it.
#[derive(Clone, Copy, Debug)]
pub struct EasView<'a> {
    /// Every CPU, indexed by [`CpuId`].
    pub cpus: &'a [RqSnapshot],
    /// CPUs and performance domains.
    pub topology: &'a Topology,
    /// The energy model (`rd->pd`'s `em_pd`s).
    pub em: &'a EnergyModel,
    /// Scheduler features (`UTIL_EST`, `RUNNABLE_BOOST`, `UCLAMP_FIT_TRISTATE`).
    pub features: SchedFeatures,
    /// `uclamp_is_used()`.
    pub uclamp_used: bool,
}

/// `struct energy_env`: per-wake-up (task) and per-domain estimates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EnergyEnv {
    /// `task_busy_time`: the task's utilisation with irq time scaled in.
    pub task_busy_time: Util,
    /// `pd_busy_time`: Σ of the domain's CPUs' effective utilisation without the task.
    pub pd_busy_time: Util,
    /// `cpu_cap`: the domain's actual (pressure-reduced) CPU capacity.
    pub cpu_cap: Capacity,
    /// `pd_cap`: `cpu_cap` × the domain's online CPUs.
    pub pd_cap: Capacity,
}

/// The inputs of `update_misfit_status` about the running task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MisfitTask {
    /// `task_util_est(p)`.
    pub util_est: Util,
    /// `uclamp_eff_value(p, UCLAMP_MIN/MAX)`.
    pub clamp: ClampRange,
    /// `p->nr_cpus_allowed`.
    pub nr_cpus_allowed: u32,
    /// `p->max_allowed_capacity` ([`task_max_allowed_capacity`]).
    pub max_allowed_capacity: Capacity,
    /// `task_h_load(p)`.
    pub h_load: u64,
}

/// The `fits` ranking of `find_energy_efficient_cpu`: Linux's `1` (fits) above `-1`
/// (fits but for uclamp_min, and also the "no candidate yet" starting value).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FitRank {
    /// `-1`: uclamp_min-only misfit, or nothing found yet.
    UclampMinOnlyOrNone,
    /// `1`: fits.
    Fits,
}

/// `task_util_est(p)`: `max(util_avg, util_est)` under `UTIL_EST`, else `util_avg`.
pub fn task_util_est(p: &TaskUtil, features: SchedFeatures) -> Util {
    if features.enabled(Feature::UTIL_EST) {
        p.util_avg.max(p.util_est)
    } else {
        p.util_avg
    }
}

/// `p->max_allowed_capacity`: the largest `capacity_orig` among `allowed` CPUs
/// (`update_task_max_allowed_capacity`, v6.10+); 0 when none is known.
pub fn task_max_allowed_capacity(allowed: CpuMask, topology: &Topology) -> Capacity {
    topology
        .cpus()
        .iter()
        .filter(|c| allowed.contains(c.id))
        .map(|c| c.capacity_orig)
        .max()
        .unwrap_or(Capacity(0))
}

/// `eenv_task_busy_time`: the task's utilisation scaled by the time irqs leave on
/// `prev` (`scale_irq_capacity`), all of `prev`'s capacity when irqs take it all.
pub fn eenv_task_busy_time(p: &TaskUtil, prev: &RqSnapshot, features: SchedFeatures) -> Util {
    let max_cap = prev.capacity.capacity_orig.0 as u64;
    let irq = prev.non_cfs.irq.0 as u64;
    if irq >= max_cap {
        return Util(max_cap as u32);
    }
    let util = task_util_est(p, features).0 as u64;
    Util((util * (max_cap - irq) / max_cap) as u32)
}

/// `eenv_pd_busy_time`: Σ over `pd_cpus` of `effective_cpu_util(cpu_util(cpu, p, -1))`,
/// capped at `pd_cap`.
pub fn eenv_pd_busy_time(
    view: &EasView<'_>,
    pd_cpus: CpuMask,
    p: &TaskUtil,
    pd_cap: Capacity,
) -> Util {
    let mut busy: u64 = 0;
    for cpu in pd_cpus.iter() {
        let Some(c) = view.cpus.get(cpu.index()) else {
            continue;
        };
        let util = cpu_util(&c.util, Some(p), None, false, view.features);
        busy += effective_cpu_util(
            c.capacity.capacity_orig,
            util,
            &c.non_cfs,
            c.rq_clamp,
            view.uclamp_used,
        )
        .util
        .0 as u64;
    }
    Util(busy.min(pd_cap.0 as u64) as u32)
}

/// `eenv_pd_max_util`: the performance level the domain would need (so its OPP) with
/// `p` on `dst_cpu` (`None`: nowhere in the domain): per CPU, runnable-boosted
/// `cpu_util` under `RUNNABLE_BOOST` (seed 000 (b)), `effective_cpu_util`, the task's
/// clamps on the destination, then `sugov_effective_cpu_perf` (25 % headroom, clamps);
/// the maximum, capped at `cpu_cap`.
pub fn eenv_pd_max_util(
    view: &EasView<'_>,
    pd_cpus: CpuMask,
    p: &EasTask,
    dst_cpu: Option<CpuId>,
    cpu_cap: Capacity,
) -> Util {
    let boost = view.features.enabled(Feature::RUNNABLE_BOOST);
    let mut max_util = Util(0);
    for cpu in pd_cpus.iter() {
        let Some(c) = view.cpus.get(cpu.index()) else {
            continue;
        };
        let util = cpu_util(&c.util, Some(&p.util), dst_cpu, boost, view.features);
        let eff = effective_cpu_util(
            c.capacity.capacity_orig,
            util,
            &c.non_cfs,
            c.rq_clamp,
            view.uclamp_used,
        );
        let (mut min, mut max) = (eff.min, eff.max);
        if dst_cpu == Some(cpu) && view.uclamp_used {
            min = min.max(p.clamp.min);
            max = if c.uclamp_rq_idle {
                p.clamp.max
            } else {
                max.max(p.clamp.max)
            };
        }
        max_util = max_util.max(sugov_effective_cpu_perf(eff.util, min, max));
    }
    Util(max_util.0.min(cpu_cap.0))
}

/// `compute_energy`: the domain's energy with `p` on `dst_cpu` (`None`: the domain's
/// base energy without `p`), in the EM's unit (`cost × util`).
pub fn compute_energy(
    view: &EasView<'_>,
    eenv: &EnergyEnv,
    pd: &EmPerfDomain,
    pd_cpus: CpuMask,
    p: &EasTask,
    dst_cpu: Option<CpuId>,
) -> u64 {
    let max_util = eenv_pd_max_util(view, pd_cpus, p, dst_cpu, eenv.cpu_cap);
    let mut busy_time = eenv.pd_busy_time.0;
    if dst_cpu.is_some() {
        busy_time = (busy_time + eenv.task_busy_time.0).min(eenv.pd_cap.0);
    }
    pd.em_cpu_energy(max_util, Util(busy_time), eenv.cpu_cap)
}

/// `cpu_overutilized(cpu)` (EAS enabled): the CPU's CFS utilisation does not fit its
/// capacity under its rq's clamps. A CPU that fits but for uclamp_min
/// ([`Fit::UclampMinOnly`]) is *not* overutilized (v6.2, seed 003).
pub fn cpu_overutilized(cpu: &RqSnapshot, features: SchedFeatures, uclamp_used: bool) -> bool {
    let util = cpu_util_cfs(&cpu.util, features);
    !util_fits_cpu(
        util,
        cpu.rq_clamp.min,
        cpu.rq_clamp.max,
        cpu.capacity,
        uclamp_used,
        features,
    )
    .fits_ignoring_uclamp_min()
}

/// `update_misfit_status(p, rq)`: the new `rq->misfit_task_load` for the task running on
/// a CPU of capacities `cpu`, or `None` to leave it unchanged (no asymmetric CPU
/// capacities: `sched_asym_cpucap_active()` is false). `p = None` (nothing running)
/// clears it; a task pinned to one CPU, already on its biggest allowed capacity or
/// fitting the CPU has none; otherwise it is `max(task_h_load, 1)`.
pub fn update_misfit_status(
    p: Option<&MisfitTask>,
    cpu: CpuCapacityInfo,
    asym_cpucap_active: bool,
    uclamp_used: bool,
    features: SchedFeatures,
) -> Option<u64> {
    if !asym_cpucap_active {
        return None;
    }
    let Some(p) = p else {
        return Some(0);
    };
    if p.nr_cpus_allowed <= 1
        || cpu.capacity_orig == p.max_allowed_capacity
        || task_fits_cpu(p.util_est, p.clamp, cpu, uclamp_used, features)
    {
        return Some(0);
    }
    Some(p.h_load.max(1))
}

/// `find_energy_efficient_cpu(p, prev_cpu)`: the allowed CPU where `p` adds the least
/// energy, among each performance domain's CPU with the most spare capacity and
/// `prev_cpu`, preferring CPUs that fit `p` fully, then (among uclamp_min-only misfits)
/// the biggest actual capacity. Returns `prev_cpu` when it cannot decide (no
/// asymmetric capacities, no energy model, a task without utilisation or clamp, no
/// candidate, or an energy estimate that went backwards).
pub fn find_energy_efficient_cpu(p: &EasTask, prev_cpu: CpuId, view: &EasView<'_>) -> CpuId {
    let target = prev_cpu;
    let (p_util_min, p_util_max) = if view.uclamp_used {
        (p.clamp.min, p.clamp.max)
    } else {
        (Util(0), Util(SCHED_CAPACITY_SCALE))
    };
    if !view.topology.asym_cpucapacity() {
        return target;
    }
    // The single root domain spans every CPU, so it contains prev_cpu.
    let sd_span = view.topology.cpu_mask();
    if !sd_span.contains(prev_cpu) {
        return target;
    }
    if task_util_est(&p.util, view.features).0 == 0 && p_util_min.0 == 0 {
        return target;
    }
    let Some(prev) = view.cpus.get(prev_cpu.index()) else {
        return target;
    };
    let mut eenv = EnergyEnv {
        task_busy_time: eenv_task_busy_time(&p.util, prev, view.features),
        ..EnergyEnv::default()
    };

    let mut best_delta = u64::MAX;
    let mut prev_delta = u64::MAX;
    let mut best_fits = FitRank::UclampMinOnlyOrNone;
    let mut prev_fits = FitRank::UclampMinOnlyOrNone;
    let mut best_actual_cap = Capacity(0);
    let mut prev_actual_cap = Capacity(0);
    let mut best_energy_cpu: Option<CpuId> = None;

    for pd_index in (0..view.em.nr_perf_domains()).rev() {
        let Some(pd) = view.em.pd(pd_index) else {
            continue;
        };
        let cpus = online_cpus(view, pd.cpus);
        let Some(first) = cpus.first() else {
            continue;
        };
        let cpu_actual_cap = view.cpus[first.index()].capacity.actual;
        eenv.cpu_cap = cpu_actual_cap;
        eenv.pd_cap = Capacity(0);

        let mut prev_spare_cap: Option<u32> = None;
        let mut max_spare_cap: Option<u32> = None;
        let mut max_spare_cap_cpu: Option<CpuId> = None;
        let mut max_fits = FitRank::UclampMinOnlyOrNone;

        for cpu in cpus.iter() {
            eenv.pd_cap = Capacity(eenv.pd_cap.0 + cpu_actual_cap.0);
            if !sd_span.contains(cpu) || !p.allowed.contains(cpu) {
                continue;
            }
            let c = &view.cpus[cpu.index()];
            let util = cpu_util(&c.util, Some(&p.util), Some(cpu), false, view.features);
            let (mut util_min, mut util_max) = (p_util_min, p_util_max);
            if view.uclamp_used && !c.uclamp_rq_idle {
                // uclamp_rq_util_with()'s max aggregation without the clamp: the fit test
                // wants the raw util against the aggregated clamps.
                util_min = util_min.max(c.rq_clamp.min);
                util_max = util_max.max(c.rq_clamp.max);
            }
            let fits = match util_fits_cpu(
                util,
                util_min,
                util_max,
                c.capacity,
                view.uclamp_used,
                view.features,
            ) {
                Fit::No => continue,
                Fit::Yes => FitRank::Fits,
                Fit::UclampMinOnly => FitRank::UclampMinOnlyOrNone,
            };
            let spare = c.capacity.capacity.0.saturating_sub(util.0);
            if cpu == prev_cpu {
                prev_spare_cap = Some(spare);
                prev_fits = fits;
            } else if fits > max_fits || (fits == max_fits && Some(spare) > max_spare_cap) {
                max_spare_cap = Some(spare);
                max_spare_cap_cpu = Some(cpu);
                max_fits = fits;
            }
        }

        if max_spare_cap_cpu.is_none() && prev_spare_cap.is_none() {
            continue;
        }

        eenv.pd_busy_time = eenv_pd_busy_time(view, cpus, &p.util, eenv.pd_cap);
        let base_energy = compute_energy(view, &eenv, pd, cpus, p, None);

        if prev_spare_cap.is_some() {
            let e = compute_energy(view, &eenv, pd, cpus, p, Some(prev_cpu));
            // Energy that falls when a task is added "shouldn't happen": give up.
            let Some(d) = e.checked_sub(base_energy) else {
                return target;
            };
            prev_delta = d;
            prev_actual_cap = cpu_actual_cap;
            best_delta = best_delta.min(prev_delta);
        }

        if let Some(cand) = max_spare_cap_cpu {
            if max_spare_cap > prev_spare_cap {
                if max_fits < best_fits {
                    continue;
                }
                // Both only uclamp_min misfits: the bigger CPU serves the hint better.
                if max_fits == FitRank::UclampMinOnlyOrNone && cpu_actual_cap <= best_actual_cap {
                    continue;
                }
                let e = compute_energy(view, &eenv, pd, cpus, p, Some(cand));
                let Some(cur_delta) = e.checked_sub(base_energy) else {
                    return target;
                };
                if max_fits == FitRank::Fits
                    && best_fits == FitRank::Fits
                    && cur_delta >= best_delta
                {
                    continue;
                }
                best_delta = cur_delta;
                best_energy_cpu = Some(cand);
                best_fits = max_fits;
                best_actual_cap = cpu_actual_cap;
            }
        }
    }

    let Some(best) = best_energy_cpu else {
        return target;
    };
    if best_fits > prev_fits
        || (best_fits == FitRank::Fits && best_delta < prev_delta)
        || (best_fits == FitRank::UclampMinOnlyOrNone && best_actual_cap > prev_actual_cap)
    {
        return best;
    }
    target
}

/// `perf_domain_span(pd) ∩ cpu_online_mask`, limited to CPUs the view describes.
fn online_cpus(view: &EasView<'_>, span: CpuMask) -> CpuMask {
    span.iter()
        .filter(|c| view.cpus.get(c.index()).is_some_and(|c| c.online))
        .collect()
}
