//! Utilisation clamping (uclamp): per-task requests, effective values, per-rq aggregation.
//!
//! Re-derives Linux's `kernel/sched/core.c` (`uclamp_eff_get`, `uclamp_eff_value`,
//! `uclamp_rq_inc_id`, `uclamp_rq_dec_id`, `uclamp_rq_max_value`, `uclamp_idle_value`,
//! `uclamp_idle_reset`, `uclamp_validate`, the `sysctl_sched_uclamp_*` defaults) and
//! `kernel/sched/sched.h` (`uclamp_rq_get`, `uclamp_rq_is_idle`, `uclamp_rq_util_with`).
//!
//! Deliberate differences:
//! - Per-rq aggregation is an *exact* multiset of the runnable tasks' effective clamps (one
//!   counter per value 0..=1024 plus a two-level bitmap, so inc/dec and the max are O(1), no
//!   allocation) instead of Linux's 5 buckets, whose per-bucket value is sticky until the
//!   bucket empties. The rq clamp is therefore exactly the max over runnable tasks; Linux's
//!   may over-estimate within a bucket (by less than 205).
//! - No cgroups (`uclamp_tg_restrict` is the identity). An RT task without a user-defined
//!   minimum requests `sysctl_sched_uclamp_util_min_rt_default` (Linux writes that into
//!   `uclamp_req` at fork/setscheduler; we apply it at effective-value time).
//! - `uclamp_is_used()` (a static key in Linux) is [`UclampSysctl::used`].

use core::fmt;

use crate::types::{Util, SCHED_CAPACITY_SCALE};

/// Linux's `enum uclamp_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UclampId {
    /// `UCLAMP_MIN`: the minimum utilisation (performance floor).
    Min = 0,
    /// `UCLAMP_MAX`: the maximum utilisation (performance ceiling).
    Max = 1,
}

impl UclampId {
    /// Both clamp ids, in Linux's order.
    pub const ALL: [UclampId; 2] = [UclampId::Min, UclampId::Max];

    /// `uclamp_none()`: 0 for min, 1024 for max.
    pub const fn none(self) -> Util {
        match self {
            UclampId::Min => Util(0),
            UclampId::Max => Util(SCHED_CAPACITY_SCALE),
        }
    }
}

/// A (min, max) pair of clamp values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClampRange {
    /// `UCLAMP_MIN` value.
    pub min: Util,
    /// `UCLAMP_MAX` value.
    pub max: Util,
}

impl ClampRange {
    /// No clamping: (0, 1024).
    pub const NONE: ClampRange = ClampRange {
        min: Util(0),
        max: Util(SCHED_CAPACITY_SCALE),
    };

    /// The value for `id`.
    pub fn get(self, id: UclampId) -> Util {
        match id {
            UclampId::Min => self.min,
            UclampId::Max => self.max,
        }
    }
}

/// Linux's `struct uclamp_se` (without the bucket id: our rq counts values exactly).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UclampSe {
    /// The clamp value.
    pub value: Util,
    /// Accounted in an rq (only meaningful in [`TaskUclamp::eff`]).
    pub active: bool,
    /// Set by the user (`sched_setattr`), not a default.
    pub user_defined: bool,
}

/// A task's clamps: what it asked for (`p->uclamp_req`) and what is accounted in its rq
/// while runnable (`p->uclamp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskUclamp {
    /// `p->uclamp_req[]`, indexed by [`UclampId`].
    pub req: [UclampSe; 2],
    /// `p->uclamp[]`: the effective values accounted at enqueue.
    pub eff: [UclampSe; 2],
}

/// The system-wide uclamp settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UclampSysctl {
    /// `sysctl_sched_uclamp_util_min`: the highest min clamp any task may get.
    pub util_min: Util,
    /// `sysctl_sched_uclamp_util_max`: the highest max clamp any task may get.
    pub util_max: Util,
    /// `sysctl_sched_uclamp_util_min_rt_default`: RT tasks' default min clamp.
    pub util_min_rt_default: Util,
    /// `sched_uclamp_used`: some task or sysctl ever set a clamp. While false, uclamp is
    /// transparent (`util_fits_cpu` and `uclamp_rq_util_with` skip it).
    pub used: bool,
}

impl Default for UclampSysctl {
    fn default() -> Self {
        UclampSysctl {
            util_min: Util(SCHED_CAPACITY_SCALE),
            util_max: Util(SCHED_CAPACITY_SCALE),
            util_min_rt_default: Util(SCHED_CAPACITY_SCALE),
            used: false,
        }
    }
}

/// A rejected clamp request (`uclamp_validate` → `-EINVAL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UclampError {
    /// A value above 1024.
    OutOfRange {
        /// Which clamp.
        id: UclampId,
        /// The value asked for.
        value: u32,
    },
    /// `min > max`.
    MinAboveMax {
        /// The min asked for.
        min: u32,
        /// The max asked for.
        max: u32,
    },
}

impl fmt::Display for UclampError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            UclampError::OutOfRange { id, value } => write!(
                f,
                "uclamp {id:?} value {value} out of range 0..={SCHED_CAPACITY_SCALE}"
            ),
            UclampError::MinAboveMax { min, max } => {
                write!(f, "uclamp min {min} is above uclamp max {max}")
            }
        }
    }
}

const NR_VALUES: usize = SCHED_CAPACITY_SCALE as usize + 1;
const NR_WORDS: usize = NR_VALUES.div_ceil(64);

/// A CPU's clamp aggregation (`rq->uclamp[]` + `rq->uclamp_flags`): per clamp id, the max
/// of the effective clamps of the runnable tasks; when the last task leaves, the max clamp
/// keeps its value (`UCLAMP_FLAG_IDLE`) until the next enqueue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UclampRq {
    counts: [[u32; NR_VALUES]; 2],
    bitmap: [[u64; NR_WORDS]; 2],
    summary: [u32; 2],
    value: [Util; 2],
    idle: bool,
}

impl Default for TaskUclamp {
    fn default() -> Self {
        TaskUclamp::new()
    }
}

impl TaskUclamp {
    /// A task with no request (min 0, max 1024, not user-defined).
    pub const fn new() -> TaskUclamp {
        let min = UclampSe {
            value: UclampId::Min.none(),
            active: false,
            user_defined: false,
        };
        let max = UclampSe {
            value: UclampId::Max.none(),
            active: false,
            user_defined: false,
        };
        TaskUclamp {
            req: [min, max],
            eff: [min, max],
        }
    }

    /// `sched_setattr(SCHED_FLAG_UTIL_CLAMP_*)`: set the requested clamps after
    /// `uclamp_validate`. Takes effect at the next enqueue (Linux also re-accounts a
    /// runnable task immediately; callers do that with dec + inc).
    pub fn set_request(&mut self, min: u32, max: u32) -> Result<(), UclampError> {
        for (id, value) in [(UclampId::Min, min), (UclampId::Max, max)] {
            if value > SCHED_CAPACITY_SCALE {
                return Err(UclampError::OutOfRange { id, value });
            }
        }
        if min > max {
            return Err(UclampError::MinAboveMax { min, max });
        }
        self.req[UclampId::Min as usize] = UclampSe {
            value: Util(min),
            active: false,
            user_defined: true,
        };
        self.req[UclampId::Max as usize] = UclampSe {
            value: Util(max),
            active: false,
            user_defined: true,
        };
        Ok(())
    }
}

/// `uclamp_eff_get()`: the task's request, capped by the system default for `id`.
pub fn uclamp_eff_get(task: &TaskUclamp, id: UclampId, sys: &UclampSysctl, is_rt: bool) -> Util {
    let req = task.req[id as usize];
    let requested = if id == UclampId::Min && is_rt && !req.user_defined {
        sys.util_min_rt_default
    } else {
        req.value
    };
    let cap = match id {
        UclampId::Min => sys.util_min,
        UclampId::Max => sys.util_max,
    };
    requested.min(cap)
}

/// `uclamp_eff_value()`: the accounted value while the task is runnable, else
/// [`uclamp_eff_get`].
pub fn uclamp_eff_value(task: &TaskUclamp, id: UclampId, sys: &UclampSysctl, is_rt: bool) -> Util {
    let eff = task.eff[id as usize];
    if eff.active {
        eff.value
    } else {
        uclamp_eff_get(task, id, sys, is_rt)
    }
}

/// Both effective values of a task.
pub fn uclamp_eff_range(task: &TaskUclamp, sys: &UclampSysctl, is_rt: bool) -> ClampRange {
    ClampRange {
        min: uclamp_eff_value(task, UclampId::Min, sys, is_rt),
        max: uclamp_eff_value(task, UclampId::Max, sys, is_rt),
    }
}

/// `uclamp_rq_util_with(rq, util, p)`: clamp `util` by the rq's clamps, and by the task's
/// effective clamps `task` when a task is about to be placed there. When the rq is idle its
/// retained max clamp is ignored (the task will reset it). Identity unless `used`.
pub fn uclamp_rq_util_with(
    rq: &UclampRq,
    util: Util,
    task: Option<ClampRange>,
    used: bool,
) -> Util {
    if !used {
        return util;
    }
    let (mut min_util, mut max_util) = (Util(0), Util(0));
    let mut rq_too = true;
    if let Some(t) = task {
        min_util = t.min;
        max_util = t.max;
        rq_too = !rq.is_idle();
    }
    if rq_too {
        min_util = min_util.max(rq.value(UclampId::Min));
        max_util = max_util.max(rq.value(UclampId::Max));
    }
    if min_util >= max_util {
        return min_util;
    }
    util.clamp(min_util, max_util)
}

impl Default for UclampRq {
    fn default() -> Self {
        UclampRq::new()
    }
}

impl UclampRq {
    /// `init_uclamp_rq()`: no task, min 0, max 1024, idle.
    pub fn new() -> UclampRq {
        UclampRq {
            counts: [[0; NR_VALUES]; 2],
            bitmap: [[0; NR_WORDS]; 2],
            summary: [0; 2],
            value: [UclampId::Min.none(), UclampId::Max.none()],
            idle: true,
        }
    }

    /// `uclamp_rq_get(rq, id)`.
    pub fn value(&self, id: UclampId) -> Util {
        self.value[id as usize]
    }

    /// Both rq clamp values.
    pub fn range(&self) -> ClampRange {
        ClampRange {
            min: self.value(UclampId::Min),
            max: self.value(UclampId::Max),
        }
    }

    /// `uclamp_rq_is_idle()`: no runnable task has been accounted since the last left.
    pub fn is_idle(&self) -> bool {
        self.idle
    }

    /// Number of tasks accounted (for invariant checks).
    pub fn nr_tasks(&self) -> u32 {
        self.counts[UclampId::Max as usize].iter().sum()
    }

    /// `uclamp_rq_inc()`: account a task that becomes runnable here. Its effective clamps
    /// are computed now and stored in `task.eff` (so the matching dec removes the same
    /// values even if the request changes meanwhile). A task already accounted is left alone.
    pub fn inc(&mut self, task: &mut TaskUclamp, sys: &UclampSysctl, is_rt: bool) {
        for id in UclampId::ALL {
            if task.eff[id as usize].active {
                continue;
            }
            let value = uclamp_eff_get(task, id, sys, is_rt);
            task.eff[id as usize] = UclampSe {
                value,
                active: true,
                user_defined: task.req[id as usize].user_defined,
            };
            self.add(id, value);
            if self.idle {
                // `uclamp_idle_reset`: the retained value gives way to the new task's.
                self.value[id as usize] = value;
            }
            if value > self.value[id as usize] {
                self.value[id as usize] = value;
            }
        }
        self.idle = false;
    }

    /// `uclamp_rq_dec()`: un-account a task leaving the runnable set. When the last task
    /// leaves, the max clamp is retained (idle) and the min clamp drops to 0.
    pub fn dec(&mut self, task: &mut TaskUclamp) {
        for id in UclampId::ALL {
            let se = &mut task.eff[id as usize];
            if !se.active {
                continue;
            }
            se.active = false;
            let value = se.value;
            if self.remove(id, value) {
                continue;
            }
            // The last task of this value left: recompute if it held the rq's clamp.
            if value >= self.value[id as usize] {
                self.value[id as usize] = match self.max_value(id) {
                    Some(v) => v,
                    None => match id {
                        UclampId::Max => {
                            self.idle = true;
                            value
                        }
                        UclampId::Min => UclampId::Min.none(),
                    },
                };
            }
        }
    }

    /// Add one task of `value`.
    fn add(&mut self, id: UclampId, value: Util) {
        let (i, v) = (id as usize, value.0.min(SCHED_CAPACITY_SCALE) as usize);
        self.counts[i][v] += 1;
        self.bitmap[i][v / 64] |= 1 << (v % 64);
        self.summary[i] |= 1 << (v / 64);
    }

    /// Remove one task of `value`; true if others of the same value remain.
    fn remove(&mut self, id: UclampId, value: Util) -> bool {
        let (i, v) = (id as usize, value.0.min(SCHED_CAPACITY_SCALE) as usize);
        self.counts[i][v] = self.counts[i][v].saturating_sub(1);
        if self.counts[i][v] > 0 {
            return true;
        }
        self.bitmap[i][v / 64] &= !(1 << (v % 64));
        if self.bitmap[i][v / 64] == 0 {
            self.summary[i] &= !(1 << (v / 64));
        }
        false
    }

    /// The highest accounted value (`uclamp_rq_max_value` without the idle fallback).
    fn max_value(&self, id: UclampId) -> Option<Util> {
        let i = id as usize;
        if self.summary[i] == 0 {
            return None;
        }
        let w = 31 - self.summary[i].leading_zeros() as usize;
        let b = 63 - self.bitmap[i][w].leading_zeros() as usize;
        Some(Util((w * 64 + b) as u32))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(min: u32, max: u32) -> TaskUclamp {
        let mut t = TaskUclamp::new();
        t.set_request(min, max).unwrap();
        t
    }

    #[test]
    fn validate_rejects_bad_requests() {
        let mut t = TaskUclamp::new();
        assert_eq!(
            t.set_request(0, 1025),
            Err(UclampError::OutOfRange {
                id: UclampId::Max,
                value: 1025
            })
        );
        assert_eq!(
            t.set_request(600, 500),
            Err(UclampError::MinAboveMax { min: 600, max: 500 })
        );
    }

    #[test]
    fn eff_value_capped_by_sysctl_and_rt_default() {
        let sys = UclampSysctl {
            util_min: Util(300),
            util_max: Util(800),
            ..UclampSysctl::default()
        };
        let t = task(500, 900);
        assert_eq!(uclamp_eff_get(&t, UclampId::Min, &sys, false), Util(300));
        assert_eq!(uclamp_eff_get(&t, UclampId::Max, &sys, false), Util(800));
        let rt = TaskUclamp::new();
        let sys = UclampSysctl::default();
        assert_eq!(uclamp_eff_get(&rt, UclampId::Min, &sys, true), Util(1024));
        assert_eq!(uclamp_eff_get(&rt, UclampId::Min, &sys, false), Util(0));
    }
}
