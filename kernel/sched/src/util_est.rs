//! Utilisation estimation (util_est), the v6.9+ single-word form.
//!
//! Re-derives Linux's `kernel/sched/fair.c` (`_task_util_est`, `task_util_est`,
//! `util_est_enqueue`, `util_est_dequeue`, `util_est_update`) and `kernel/sched/pelt.h`
//! (`cfs_se_util_change`). A task's estimate lives in [`SchedAvg::util_est`]: the ewma of
//! its util_avg at dequeue time, with bit 31 ([`UTIL_AVG_UNCHANGED`]) set while util_avg has
//! not changed since the ewma was last updated. A cfs_rq's `util_est` is the sum of its
//! queued tasks' estimates.
//!
//! Deliberate differences: the `UTIL_EST` switch arrives as a [`SchedFeatures`] argument, and
//! `arch_scale_cpu_capacity` as a [`Capacity`]. Fast ramp-up is unconditional, as in v6.9+.

use crate::features::{Feature, SchedFeatures};
use crate::pelt::SchedAvg;
use crate::types::{Capacity, Util, SCHED_CAPACITY_SCALE};

/// `UTIL_EST_WEIGHT_SHIFT`: the ewma's new sample weighs 1/4.
pub const UTIL_EST_WEIGHT_SHIFT: u32 = 2;

/// `UTIL_AVG_UNCHANGED`: util_avg not updated since the estimate was last written.
pub const UTIL_AVG_UNCHANGED: u32 = 0x8000_0000;

/// `UTIL_EST_MARGIN`: changes below 1 % of capacity are ignored.
pub const UTIL_EST_MARGIN: u32 = SCHED_CAPACITY_SCALE / 100;

/// `task_util(p)`: the task's `util_avg`.
pub fn task_util(task: &SchedAvg) -> Util {
    task.util()
}

/// `task_runnable(p)`: the task's `runnable_avg`.
pub fn task_runnable(task: &SchedAvg) -> Util {
    task.runnable()
}

/// Linux's `_task_util_est(p)`: the ewma without the flag.
pub fn task_util_est_raw(task: &SchedAvg) -> Util {
    Util(task.util_est & !UTIL_AVG_UNCHANGED)
}

/// `task_util_est(p)`: `max(task_util, _task_util_est)`.
pub fn task_util_est(task: &SchedAvg) -> Util {
    task_util(task).max(task_util_est_raw(task))
}

/// `util_est_enqueue()`: add the task's estimate to its cfs_rq's.
pub fn util_est_enqueue(cfs_rq: &mut SchedAvg, task: &SchedAvg, features: SchedFeatures) {
    if !features.enabled(Feature::UTIL_EST) {
        return;
    }
    cfs_rq.util_est = cfs_rq.util_est.saturating_add(task_util_est_raw(task).0);
}

/// `util_est_dequeue()`: remove the task's estimate from its cfs_rq's (never below zero).
pub fn util_est_dequeue(cfs_rq: &mut SchedAvg, task: &SchedAvg, features: SchedFeatures) {
    if !features.enabled(Feature::UTIL_EST) {
        return;
    }
    cfs_rq.util_est -= task_util_est_raw(task).0.min(cfs_rq.util_est);
}

/// `util_est_update()`: at dequeue, fold the task's util_avg into its ewma when it goes to
/// sleep (`task_sleep`). `cpu_capacity` is `arch_scale_cpu_capacity()` of the task's CPU.
pub fn util_est_update(
    task: &mut SchedAvg,
    task_sleep: bool,
    cpu_capacity: Capacity,
    features: SchedFeatures,
) {
    if !features.enabled(Feature::UTIL_EST) || !task_sleep {
        return;
    }
    let mut ewma = task.util_est;
    if ewma & UTIL_AVG_UNCHANGED != 0 {
        // Nothing ran since the last update: the same sample would be counted twice.
        return;
    }
    let dequeued = task_util(task).0;
    'done: {
        if ewma <= dequeued {
            ewma = dequeued;
            break 'done;
        }
        let last_ewma_diff = ewma - dequeued;
        if last_ewma_diff < UTIL_EST_MARGIN {
            break 'done;
        }
        // A util above the CPU's capacity says nothing about the task's real needs.
        if dequeued > cpu_capacity.0 {
            return;
        }
        // The task spent time waiting rather than running: its util underestimates it.
        let mut last_ewma_diff = last_ewma_diff;
        let runnable = task_runnable(task).0;
        if dequeued + UTIL_EST_MARGIN < runnable {
            // Linux keeps the ewma. asym's UTIL_EST_DECAY_TO_RUNNABLE: an ewma above even
            // the runnable_avg (util had the task run whenever it was runnable) is stale, so
            // decay it towards runnable_avg instead.
            if !features.enabled(Feature::UTIL_EST_DECAY_TO_RUNNABLE)
                || ewma < runnable + UTIL_EST_MARGIN
            {
                break 'done;
            }
            last_ewma_diff = ewma - runnable;
        }
        // ewma = ewma - diff/4, computed as Linux does in the << 2 domain.
        ewma <<= UTIL_EST_WEIGHT_SHIFT;
        ewma -= last_ewma_diff;
        ewma >>= UTIL_EST_WEIGHT_SHIFT;
    }
    task.util_est = ewma | UTIL_AVG_UNCHANGED;
}

/// `cfs_se_util_change()`: util_avg was just recomputed, so the next dequeue may update the
/// estimate again. (Linux skips this when `UTIL_EST` is off; the flag is only ever read
/// under `UTIL_EST`, so clearing it unconditionally behaves the same.)
pub fn cfs_se_util_change(avg: &mut SchedAvg) {
    avg.util_est &= !UTIL_AVG_UNCHANGED;
}
