//! CPU utilisation getters and the capacity-fit helpers.
//!
//! Re-derives Linux's `kernel/sched/fair.c` v6.12 (`cpu_util`, `cpu_util_cfs`,
//! `cpu_util_cfs_boost`, `cpu_util_without`, `fits_capacity`, `capacity_greater`,
//! `util_fits_cpu`, `task_fits_cpu`) and `kernel/sched/core.c`/`sched.h`
//! (`effective_cpu_util`, `sched_cpu_util`, `cpu_bw_dl`, `scale_irq_capacity`).
//!
//! Deliberate differences: inputs are plain value snapshots ([`CpuSnapshot`], [`TaskUtil`],
//! [`RqNonCfsUtil`], [`CpuCapacityInfo`]) so that the run queue, the simulator and the kernel
//! can all supply them; Linux's `dst_cpu = -1` is `None`; `util_fits_cpu` returns [`Fit`]
//! rather than `1/0/-1`, and its v6.1 two-way form is kept behind `UCLAMP_FIT_TRISTATE`
//! (off: seed 003's "before" behaviour, where a uclamp_min-only misfit is `No` on a
//! non-biggest CPU and `Yes` on a biggest one). In `cpu_util`, a queued task's estimate is
//! subtracted from `util_est` only on the task's own CPU: Linux does not check (its callers
//! only ever pass that CPU), and a task queued elsewhere is not part of this rq's sum.

use crate::features::{Feature, SchedFeatures};
use crate::pelt::SchedAvg;
use crate::types::{Capacity, CpuId, Util, SCHED_CAPACITY_SCALE};
use crate::uclamp::ClampRange;
use crate::util_est::task_util_est_raw;

/// `BW_SHIFT`: the fixed point of deadline bandwidths.
pub const BW_SHIFT: u32 = 20;

/// A cfs_rq's utilisation signals (`cfs_rq->avg.{util_avg, runnable_avg, util_est}`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CfsRqUtil {
    /// `util_avg`.
    pub util_avg: Util,
    /// `runnable_avg` (may exceed 1024).
    pub runnable_avg: Util,
    /// `util_est`: Σ of the queued tasks' estimates.
    pub util_est: Util,
}

/// What `cpu_util()` needs to know about a CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuSnapshot {
    /// The CPU.
    pub cpu: CpuId,
    /// `arch_scale_cpu_capacity(cpu)`.
    pub capacity_orig: Capacity,
    /// Its cfs_rq's signals.
    pub cfs: CfsRqUtil,
}

/// What `cpu_util()` needs to know about a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskUtil {
    /// `task_util(p)` = `p->se.avg.util_avg`.
    pub util_avg: Util,
    /// `_task_util_est(p)`: the ewma without the flag.
    pub util_est: Util,
    /// `task_cpu(p)`.
    pub cpu: CpuId,
    /// `task_on_rq_queued(p) || current == p`.
    pub queued_or_current: bool,
}

/// The non-CFS inputs of `effective_cpu_util()`; all zero/false where we have none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RqNonCfsUtil {
    /// `cpu_util_irq(rq)` = `rq->avg_irq.util_avg`.
    pub irq: Util,
    /// `cpu_util_rt(rq)` = `rq->avg_rt.util_avg`.
    pub rt: Util,
    /// `cpu_util_dl(rq)` = `rq->avg_dl.util_avg`.
    pub dl: Util,
    /// `cpu_bw_dl(rq)`: the running deadline bandwidth on the 1024 scale (see [`cpu_bw_dl`]).
    pub dl_bw: Util,
    /// `rt_rq_is_runnable(&rq->rt)`.
    pub rt_runnable: bool,
}

/// The result of `effective_cpu_util()`: the utilisation and the min/max performance
/// bounds (v6.8+ outputs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EffectiveUtil {
    /// The aggregated utilisation, ≤ capacity.
    pub util: Util,
    /// `*min`: the performance floor (irq + DL bandwidth, uclamp_min, RT → max).
    pub min: Util,
    /// `*max`: the performance ceiling (uclamp_max).
    pub max: Util,
}

/// The capacities `util_fits_cpu()` compares against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuCapacityInfo {
    /// `capacity_of(cpu)`: what is left for CFS after RT/DL/irq/pressure.
    pub capacity: Capacity,
    /// `arch_scale_cpu_capacity(cpu)`.
    pub capacity_orig: Capacity,
    /// `get_actual_cpu_capacity(cpu)`: `capacity_orig` minus hw/cpufreq pressure.
    pub actual: Capacity,
}

impl CpuCapacityInfo {
    /// A CPU without RT/DL/irq pressure: all three capacities are `capacity_orig`.
    pub const fn unpressured(capacity_orig: Capacity) -> CpuCapacityInfo {
        CpuCapacityInfo {
            capacity: capacity_orig,
            capacity_orig,
            actual: capacity_orig,
        }
    }
}

/// Does a utilisation fit a CPU (`util_fits_cpu()`)? Linux's `1 / 0 / -1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// Fits, uclamp_min included (`1`).
    Yes,
    /// Does not fit (`0`).
    No,
    /// Fits by utilisation but the CPU cannot deliver the task's uclamp_min (`-1`).
    UclampMinOnly,
}

impl Fit {
    /// Linux treats `-1` as "fits" for overutilization: true for `Yes` and `UclampMinOnly`.
    pub fn fits_ignoring_uclamp_min(self) -> bool {
        self != Fit::No
    }
}

impl CfsRqUtil {
    /// The signals of a cfs_rq's [`SchedAvg`].
    pub fn from_avg(avg: &SchedAvg) -> CfsRqUtil {
        CfsRqUtil {
            util_avg: avg.util(),
            runnable_avg: avg.runnable(),
            util_est: Util(avg.util_est),
        }
    }
}

impl TaskUtil {
    /// The inputs for a task with signals `avg` on `cpu`.
    pub fn from_avg(avg: &SchedAvg, cpu: CpuId, queued_or_current: bool) -> TaskUtil {
        TaskUtil {
            util_avg: avg.util(),
            util_est: task_util_est_raw(avg),
            cpu,
            queued_or_current,
        }
    }
}

/// `cpu_util(cpu, p, dst_cpu, boost)`: the CFS utilisation of `cpu` if task `p` were moved
/// to `dst_cpu` (`Some(cpu.cpu)`: `p` lands here; another CPU or `None`: `p` is not here),
/// with runnable boosting when `boost`, util_est under `UTIL_EST`, capped at `capacity_orig`.
pub fn cpu_util(
    cpu: &CpuSnapshot,
    p: Option<&TaskUtil>,
    dst_cpu: Option<CpuId>,
    boost: bool,
    features: SchedFeatures,
) -> Util {
    let here = cpu.cpu;
    let mut util = cpu.cfs.util_avg.0;
    if boost {
        util = util.max(cpu.cfs.runnable_avg.0);
    }
    if let Some(p) = p {
        if p.cpu == here && dst_cpu != Some(here) {
            util -= util.min(p.util_avg.0);
        } else if p.cpu != here && dst_cpu == Some(here) {
            util += p.util_avg.0;
        }
    }
    if features.enabled(Feature::UTIL_EST) {
        let mut util_est = cpu.cfs.util_est.0;
        if let Some(p) = p {
            if dst_cpu == Some(here) {
                util_est += p.util_est.0;
            } else if p.queued_or_current {
                // `p` is accounted in this rq's util_est only if queued here.
                if p.cpu == here {
                    util_est -= util_est.min(p.util_est.0);
                }
            }
        }
        util = util.max(util_est);
    }
    Util(util.min(cpu.capacity_orig.0))
}

/// `cpu_util_cfs(cpu)`: no task moved, no boost.
pub fn cpu_util_cfs(cpu: &CpuSnapshot, features: SchedFeatures) -> Util {
    cpu_util(cpu, None, None, false, features)
}

/// `cpu_util_cfs_boost(cpu)`: runnable-boosted when `RUNNABLE_BOOST` is on (schedutil, EAS
/// max util, `migrate_util`).
pub fn cpu_util_cfs_boost(cpu: &CpuSnapshot, features: SchedFeatures) -> Util {
    cpu_util(
        cpu,
        None,
        None,
        features.enabled(Feature::RUNNABLE_BOOST),
        features,
    )
}

/// `cpu_util_without(cpu, p)`: `cpu`'s utilisation without `p`'s contribution. Callers pass
/// `p` only when it is attached ([`crate::pelt::SchedAvg::attached`]); a task on another CPU changes
/// nothing.
pub fn cpu_util_without(cpu: &CpuSnapshot, p: &TaskUtil, features: SchedFeatures) -> Util {
    if p.cpu != cpu.cpu {
        return cpu_util_cfs(cpu, features);
    }
    cpu_util(cpu, Some(p), None, false, features)
}

/// `cpu_bw_dl()`: `(running_bw × 1024) >> BW_SHIFT`.
pub fn cpu_bw_dl(running_bw: u64) -> Util {
    Util(((running_bw * SCHED_CAPACITY_SCALE as u64) >> BW_SHIFT).min(u32::MAX as u64) as u32)
}

/// `effective_cpu_util(cpu, util_cfs, &min, &max)` (v6.8+): CFS + RT + DL utilisation with
/// the irq time scaled in, and the min/max performance bounds from irq, DL bandwidth, the
/// rq's uclamp values (`rq_clamp`, i.e. `uclamp_rq_get`) and runnable RT tasks.
pub fn effective_cpu_util(
    capacity_orig: Capacity,
    util_cfs: Util,
    other: &RqNonCfsUtil,
    rq_clamp: ClampRange,
    uclamp_used: bool,
) -> EffectiveUtil {
    let scale = capacity_orig.0 as u64;
    let irq = other.irq.0 as u64;
    if irq >= scale {
        return EffectiveUtil {
            util: capacity_orig_util(scale),
            min: capacity_orig_util(scale),
            max: capacity_orig_util(scale),
        };
    }
    let mut min = (irq + other.dl_bw.0 as u64).max(rq_clamp.min.0 as u64);
    if !uclamp_used && other.rt_runnable {
        // Without uclamp, RT tasks run at the highest frequency.
        min = min.max(scale);
    }
    let max = scale.min(rq_clamp.max.0 as u64);
    let mut util = util_cfs.0 as u64 + other.rt.0 as u64 + other.dl.0 as u64;
    let util = if util >= scale {
        scale
    } else {
        // `scale_irq_capacity`: the rest runs only in the time irqs leave.
        util = util * (scale - irq) / scale;
        (util + irq).min(scale)
    };
    EffectiveUtil {
        util: capacity_orig_util(util),
        min: capacity_orig_util(min),
        max: capacity_orig_util(max),
    }
}

/// `sched_cpu_util(cpu)`: `effective_cpu_util(cpu, cpu_util_cfs(cpu))`, for thermal and EM.
pub fn sched_cpu_util(cpu: &CpuSnapshot, other: &RqNonCfsUtil, features: SchedFeatures) -> Util {
    effective_cpu_util(
        cpu.capacity_orig,
        cpu_util_cfs(cpu, features),
        other,
        ClampRange::NONE,
        false,
    )
    .util
}

/// `fits_capacity(cap, max)`: `cap` leaves 20 % headroom in `max` (`cap × 1280 < max × 1024`).
pub const fn fits_capacity(cap: u32, max: u32) -> bool {
    (cap as u64) * 1280 < (max as u64) * 1024
}

/// `capacity_greater(cap1, cap2)`: `cap1` is more than ~5 % above `cap2`.
pub const fn capacity_greater(cap1: u32, cap2: u32) -> bool {
    (cap1 as u64) * 1024 > (cap2 as u64) * 1078
}

/// `util_fits_cpu(util, uclamp_min, uclamp_max, cpu)` (§3.1).
///
/// With `UCLAMP_FIT_TRISTATE` on (v6.2+), a CPU that fits by utilisation (or by uclamp_max)
/// but cannot deliver uclamp_min is [`Fit::UclampMinOnly`]. Off (v6.1), that case is
/// [`Fit::No`] on CPUs below 1024 (compared with `actual`, Linux's `capacity_orig_thermal`)
/// and [`Fit::Yes`] on the biggest CPUs.
pub fn util_fits_cpu(
    util: Util,
    uclamp_min: Util,
    uclamp_max: Util,
    cpu: CpuCapacityInfo,
    uclamp_used: bool,
    features: SchedFeatures,
) -> Fit {
    let mut fits = fits_capacity(util.0, cpu.capacity.0);
    if !uclamp_used {
        return fit_from(fits);
    }
    let capacity_orig = cpu.capacity_orig.0;
    // A uclamp_max at or below the CPU's capacity makes it fit regardless of util — except
    // on the biggest CPUs with no effective cap, where util must decide (overutilized).
    let max_cap_unclamped =
        capacity_orig == SCHED_CAPACITY_SCALE && uclamp_max.0 == SCHED_CAPACITY_SCALE;
    let uclamp_max_fits = !max_cap_unclamped && uclamp_max.0 <= capacity_orig;
    fits = fits || uclamp_max_fits;
    let uclamp_min = uclamp_min.min(uclamp_max);
    if features.enabled(Feature::UCLAMP_FIT_TRISTATE) {
        if fits && util < uclamp_min && uclamp_min.0 > cpu.actual.0 {
            return Fit::UclampMinOnly;
        }
    } else if util < uclamp_min && capacity_orig != SCHED_CAPACITY_SCALE {
        fits = fits && uclamp_min.0 <= cpu.actual.0;
    }
    fit_from(fits)
}

/// `task_fits_cpu(p, cpu)`: `util_fits_cpu(task_util_est(p), uclamp_eff(p), cpu) > 0`.
/// `task_util_est` is `max(util_avg, _task_util_est)` (see [`crate::util_est`]).
pub fn task_fits_cpu(
    task_util_est: Util,
    task_clamp: ClampRange,
    cpu: CpuCapacityInfo,
    uclamp_used: bool,
    features: SchedFeatures,
) -> bool {
    util_fits_cpu(
        task_util_est,
        task_clamp.min,
        task_clamp.max,
        cpu,
        uclamp_used,
        features,
    ) == Fit::Yes
}

fn fit_from(fits: bool) -> Fit {
    if fits {
        Fit::Yes
    } else {
        Fit::No
    }
}

fn capacity_orig_util(v: u64) -> Util {
    Util(v.min(u32::MAX as u64) as u32)
}
