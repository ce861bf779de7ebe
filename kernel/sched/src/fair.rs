//! The fair class: EEVDF (Earliest Eligible Virtual Deadline First).
//!
//! Re-derives Linux v6.12 `kernel/sched/fair.c` (EEVDF as merged in v6.6 and refined
//! through v6.12) and the weight tables of `kernel/sched/core.c`:
//! - weights: `sched_prio_to_weight`/`sched_prio_to_wmult`, `set_load_weight`,
//!   `__calc_delta`, `calc_delta_fair` (64-bit fixed point, `NICE_0_LOAD` = 1 << 20);
//! - virtual time: `avg_vruntime` kept as the sums `avg_vruntime = Σ (v_i − v0)·w_i`
//!   and `avg_load = Σ w_i` relative to `min_vruntime` (`avg_vruntime_add/sub/update`,
//!   `update_min_vruntime`); `entity_lag`/`update_entity_lag` with the
//!   `max(2·slice, TICK_NSEC)` clamp; `vruntime_eligible`/`entity_eligible`;
//! - `update_curr` → `update_deadline` (vd = v + slice/w) and the v6.12
//!   `did_preempt_short` resched; `place_entity` with `PLACE_LAG` (lag scaled by
//!   (W + w)/W), `PLACE_DEADLINE_INITIAL` and `PLACE_REL_DEADLINE`;
//! - `pick_eevdf`: `RUN_TO_PARITY`, leftmost-if-eligible, then the heap search down
//!   the deadline-ordered tree using each subtree's minimum vruntime;
//! - `set_next_entity`/`put_prev_entity`, `yield_task_fair`,
//!   `check_preempt_wakeup_fair` with `do_preempt_short`, and `reweight_entity` in
//!   its v6.14 form (lag and relative deadline scaled by old/new weight, then
//!   re-placed; backported to v6.12.y) for the dequeued case `set_user_nice` uses;
//! - delayed dequeue's EEVDF half: `finish_delayed_dequeue_entity` (`DELAY_ZERO` drops a
//!   positive lag) and `requeue_delayed_entity` (`DELAY_ZERO`: `update_entity_lag`, a
//!   positive lag clamped to 0 and the entity re-placed); the delay itself changes nothing
//!   here (the entity stays in the tree, the load and V), see [`crate::rq`].
//!
//! Deliberate differences:
//! - No cgroups (no group entities, `FAIR_GROUP_SCHED`), no CFS bandwidth, no
//!   `NEXT_BUDDY`, no custom slices
//!   (`sched_attr.sched_runtime`), no SCHED_IDLE/SCHED_BATCH policies. Without custom
//!   slices every entity has the base slice, so `PREEMPT_SHORT` (which compares
//!   slices) only acts if the base slice changes with the CPU count while tasks
//!   hold slices of the old size; it is implemented as in v6.12 all the same.
//! - Linux stashes the deadline at pick time in `se->vlag` ("HACK" in
//!   `set_next_entity`) and tests `vlag == deadline` for `RUN_TO_PARITY`; we keep it
//!   in its own field, [`SchedEntity::picked_deadline`], `None` when cancelled.
//! - The tree (see [`tree`]) is an arena AVL tree rather than an rbtree; it is keyed
//!   like Linux's by deadline (ties broken by task id, so keys are unique) and carries
//!   the subtree minimum vruntime (`min_vruntime_cb`).
//! - Functions take the current entity as a parameter instead of following
//!   `cfs_rq->curr`: entities live in the run queue's task map ([`crate::rq`]), not in
//!   the cfs_rq, and Rust's borrows want them passed explicitly.
//!
//! Virtual times are `u64` nanoseconds compared the way Linux does, through the
//! signed difference (`(s64)(a - b) < 0`), so they may wrap; `min_vruntime` starts
//! at `-(1 << 20)` like Linux's, which makes every test exercise the wrap.

pub mod tree;

use crate::features::{Feature, SchedFeatures};
use crate::types::TaskId;
use core::cmp::Ordering;
use tree::{AugTree, Augment};

/// `NICE_0_LOAD_SHIFT` on 64-bit: `2 * SCHED_FIXEDPOINT_SHIFT`.
pub const NICE_0_LOAD_SHIFT: u32 = 20;
/// `NICE_0_LOAD`: the internal (scaled-up) weight of a nice-0 task.
pub const NICE_0_LOAD: u64 = 1 << NICE_0_LOAD_SHIFT;
/// `SCHED_FIXEDPOINT_SHIFT`: the extra resolution `scale_load` adds on 64-bit.
pub const SCHED_FIXEDPOINT_SHIFT: u32 = 10;
/// `WMULT_CONST` (`~0U`).
const WMULT_CONST: u64 = 0xffff_ffff;
/// `WMULT_SHIFT`.
const WMULT_SHIFT: u32 = 32;
/// `sysctl_sched_base_slice` before CPU-count scaling (`normalized_sysctl_sched_base_slice`).
pub const NORMALIZED_SYSCTL_SCHED_BASE_SLICE_NS: u64 = 750_000;
/// `TICK_NSEC` at the default HZ=250.
pub const DEFAULT_TICK_NSEC: u64 = 4_000_000;

/// `sched_prio_to_weight` (core.c): nice −20 … 19; each step is ~×1.25 (10 % CPU).
// source: Linux kernel/sched/core.c
pub const SCHED_PRIO_TO_WEIGHT: [u32; 40] = [
    88761, 71755, 56483, 46273, 36291, //
    29154, 23254, 18705, 14949, 11916, //
    9548, 7620, 6100, 4904, 3906, //
    3121, 2501, 1991, 1586, 1277, //
    1024, 820, 655, 526, 423, //
    335, 272, 215, 172, 137, //
    110, 87, 70, 56, 45, //
    36, 29, 23, 18, 15, //
];

/// `sched_prio_to_wmult` (core.c): `2^32 / weight`, precomputed.
// source: Linux kernel/sched/core.c
pub const SCHED_PRIO_TO_WMULT: [u32; 40] = [
    48388, 59856, 76040, 92818, 118348, 147320, 184698, 229616, 287308, 360437, //
    449829, 563644, 704093, 875809, 1099582, 1376151, 1717300, 2157191, 2708050, 3363326, //
    4194304, 5237765, 6557202, 8165337, 10153587, 12820798, 15790321, 19976592, 24970740,
    31350126, //
    39045157, 49367440, 61356676, 76695844, 95443717, 119304647, 148102320, 186737708, 238609294,
    286331153, //
];

/// Errors from the fair class, naming the bad input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FairError {
    /// A nice value outside −20 … 19.
    NiceOutOfRange {
        /// The value given.
        nice: i32,
    },
}

impl core::fmt::Display for FairError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FairError::NiceOutOfRange { nice } => {
                write!(f, "fair: nice {nice} out of range -20..=19")
            }
        }
    }
}

/// A nice value, −20 (most CPU) … 19 (least).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nice(i8);

impl Nice {
    /// `MIN_NICE`.
    pub const MIN: Nice = Nice(-20);
    /// `MAX_NICE`.
    pub const MAX: Nice = Nice(19);

    /// Validate a nice value.
    pub const fn new(nice: i32) -> Result<Nice, FairError> {
        if nice < -20 || nice > 19 {
            Err(FairError::NiceOutOfRange { nice })
        } else {
            Ok(Nice(nice as i8))
        }
    }

    /// The value.
    pub const fn get(self) -> i32 {
        self.0 as i32
    }

    /// Index into the weight tables (`prio - MAX_RT_PRIO`).
    const fn index(self) -> usize {
        (self.0 as i32 + 20) as usize
    }
}

/// `scale_load`: user-visible weight to internal resolution.
pub const fn scale_load(w: u64) -> u64 {
    w << SCHED_FIXEDPOINT_SHIFT
}

/// `scale_load_down`: internal weight to user-visible, never below 2 unless zero.
pub const fn scale_load_down(w: u64) -> u64 {
    if w == 0 {
        0
    } else {
        let d = w >> SCHED_FIXEDPOINT_SHIFT;
        if d < 2 {
            2
        } else {
            d
        }
    }
}

/// `struct load_weight`: a weight at internal resolution and its cached inverse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadWeight {
    /// `scale_load(sched_prio_to_weight[..])` for a task.
    pub weight: u64,
    /// `2^32 / scale_load_down(weight)`; 0 means "not computed yet".
    pub inv_weight: u32,
}

impl LoadWeight {
    /// `set_load_weight` for a fair task of nice `nice`.
    pub const fn from_nice(nice: Nice) -> LoadWeight {
        LoadWeight {
            weight: scale_load(SCHED_PRIO_TO_WEIGHT[nice.index()] as u64),
            inv_weight: SCHED_PRIO_TO_WMULT[nice.index()],
        }
    }

    /// `se_weight`: the user-visible weight (`scale_load_down`).
    pub const fn weight_down(&self) -> u64 {
        scale_load_down(self.weight)
    }

    /// `__update_inv_weight`, without caching (callers hold `&self`).
    fn inv(&self) -> u64 {
        if self.inv_weight != 0 {
            return self.inv_weight as u64;
        }
        let w = scale_load_down(self.weight);
        if w >= WMULT_CONST {
            1
        } else {
            // A zero weight gets the largest inverse, as in Linux.
            WMULT_CONST.checked_div(w).unwrap_or(WMULT_CONST)
        }
    }
}

/// `__calc_delta`: `delta_exec * weight / lw.weight` with the 32-bit inverse, exactly
/// as Linux rounds it.
pub fn calc_delta(delta_exec: u64, weight: u64, lw: &LoadWeight) -> u64 {
    let mut fact = scale_load_down(weight);
    let mut shift = WMULT_SHIFT;
    let fact_hi = fact >> 32;
    if fact_hi != 0 {
        let fs = 64 - fact_hi.leading_zeros();
        shift -= fs;
        fact >>= fs;
    }
    fact = (fact & 0xffff_ffff) * lw.inv();
    let fact_hi = fact >> 32;
    if fact_hi != 0 {
        let fs = 64 - fact_hi.leading_zeros();
        shift -= fs;
        fact >>= fs;
    }
    ((delta_exec as u128 * fact as u128) >> shift) as u64
}

/// `calc_delta_fair`: wall time to virtual time for `lw` (identity at nice 0).
pub fn calc_delta_fair(delta: u64, lw: &LoadWeight) -> u64 {
    if lw.weight != NICE_0_LOAD {
        calc_delta(delta, NICE_0_LOAD, lw)
    } else {
        delta
    }
}

/// `sysctl_sched_base_slice` for `nr_cpus` online CPUs with the default
/// `SCHED_TUNABLESCALING_LOG`: `750 µs × (1 + ilog2(min(nr_cpus, 8)))`.
pub const fn sched_base_slice_ns(nr_cpus: u32) -> u64 {
    let n = if nr_cpus == 0 {
        1
    } else if nr_cpus > 8 {
        8
    } else {
        nr_cpus
    };
    NORMALIZED_SYSCTL_SCHED_BASE_SLICE_NS * (1 + n.ilog2() as u64)
}

/// `(s64)(a - b)`: the signed distance between two wrapping virtual times.
pub const fn vdiff(a: u64, b: u64) -> i64 {
    a.wrapping_sub(b) as i64
}

/// Linux's `min_vruntime(a, b)` helper: the earlier of two wrapping times.
pub const fn vmin(a: u64, b: u64) -> u64 {
    if vdiff(a, b) < 0 {
        a
    } else {
        b
    }
}

/// The EEVDF part of `struct sched_entity` for one task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedEntity {
    /// The owning task.
    pub id: TaskId,
    /// `se->load`.
    pub load: LoadWeight,
    /// `se->on_rq`: queued (in the tree or as `curr`).
    pub on_rq: bool,
    /// `se->exec_start` (`rq_clock_task` when it last started running / was updated).
    pub exec_start: u64,
    /// `se->sum_exec_runtime`, ns.
    pub sum_exec_runtime: u64,
    /// `se->prev_sum_exec_runtime`: `sum_exec_runtime` when last picked.
    pub prev_sum_exec_runtime: u64,
    /// `se->vruntime`.
    pub vruntime: u64,
    /// `se->deadline` (absolute, or relative to `vruntime` while `rel_deadline`).
    pub deadline: u64,
    /// `se->vlag`: V − v_i saved at dequeue, used by `place_entity` at the next enqueue.
    pub vlag: i64,
    /// `se->slice`: the request size r_i, ns.
    pub slice: u64,
    /// `se->rel_deadline`: `deadline` holds `deadline − vruntime`.
    pub rel_deadline: bool,
    /// The deadline when this entity was last picked (Linux's `vlag == deadline`
    /// hack); `RUN_TO_PARITY` protects the slice while it equals `deadline`.
    pub picked_deadline: Option<u64>,
    /// `se->nr_migrations`.
    pub nr_migrations: u64,
    /// `se->sched_delayed` (`DELAY_DEQUEUE`): the task blocked while not eligible and stays
    /// queued (`on_rq`, in the tree, in the load and in V) until a pick finishes its dequeue
    /// or a wake-up requeues it.
    pub sched_delayed: bool,
}

/// What wake-up preemption reads of the woken entity ([`CfsRq::check_preempt_wakee`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wakee {
    /// `pse`'s task.
    pub id: TaskId,
    /// `pse->slice`.
    pub slice: u64,
    /// `pse->deadline` (absolute: the entity is queued).
    pub deadline: u64,
    /// `pse->vruntime`.
    pub vruntime: u64,
}

impl Wakee {
    /// The fields of `se`.
    pub fn of(se: &SchedEntity) -> Wakee {
        Wakee {
            id: se.id,
            slice: se.slice,
            deadline: se.deadline,
            vruntime: se.vruntime,
        }
    }
}

impl SchedEntity {
    /// `__sched_fork` + `set_load_weight`: a fresh entity, zero lag, not queued.
    pub const fn new(id: TaskId, nice: Nice) -> SchedEntity {
        SchedEntity {
            id,
            load: LoadWeight::from_nice(nice),
            on_rq: false,
            exec_start: 0,
            sum_exec_runtime: 0,
            prev_sum_exec_runtime: 0,
            vruntime: 0,
            deadline: 0,
            vlag: 0,
            slice: NORMALIZED_SYSCTL_SCHED_BASE_SLICE_NS,
            rel_deadline: false,
            picked_deadline: None,
            nr_migrations: 0,
            sched_delayed: false,
        }
    }

    /// The user-visible weight (`se_weight`).
    pub const fn weight(&self) -> u64 {
        self.load.weight_down()
    }
}

/// Timeline key: virtual deadline, then task id (Linux's `entity_before` plus a
/// tie-break so keys are unique).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimelineKey {
    /// Absolute virtual deadline.
    pub deadline: u64,
    /// The task.
    pub id: TaskId,
}

impl Ord for TimelineKey {
    fn cmp(&self, other: &Self) -> Ordering {
        vdiff(self.deadline, other.deadline)
            .cmp(&0)
            .then(self.id.cmp(&other.id))
    }
}

impl PartialOrd for TimelineKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The timeline's augmentation: the subtree minimum vruntime (`min_vruntime_cb`).
#[derive(Debug)]
pub struct MinVruntime;

impl Augment<TimelineKey, Queued> for MinVruntime {
    type Summary = u64;
    fn summarize(_: &TimelineKey, v: &Queued, l: Option<&u64>, r: Option<&u64>) -> u64 {
        let mut m = v.vruntime;
        for c in [l, r].into_iter().flatten() {
            m = vmin(m, *c);
        }
        m
    }
}

/// What the timeline stores for a queued (not running) entity: the fields pick and
/// the averages read. They cannot go stale: Linux, and we, never change a queued
/// entity's vruntime, deadline or weight without taking it out of the tree first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Queued {
    /// `se->vruntime`.
    pub vruntime: u64,
    /// `se_weight(se)`.
    pub weight: u64,
}

/// What [`CfsRq::update_curr`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CurrUpdate {
    /// Wall time charged to the current entity, ns.
    pub delta_exec: u64,
    /// `resched_curr`: the current entity used up its request, or lost its
    /// `PREEMPT_SHORT` protection and is no longer eligible.
    pub resched: bool,
}

/// Why an entity is being enqueued (the EEVDF-relevant `ENQUEUE_*` flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlaceFlags {
    /// `ENQUEUE_INITIAL`: a new task (`wake_up_new_task`).
    pub initial: bool,
}

/// How an entity leaves the queue (the EEVDF-relevant `DEQUEUE_*` flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DequeueMode {
    /// `DEQUEUE_SLEEP`: the task blocks. Otherwise (migration, nice change) the
    /// deadline is kept relative under `PLACE_REL_DEADLINE`.
    pub sleep: bool,
    /// `DEQUEUE_SAVE` without `DEQUEUE_MOVE`: the entity comes straight back, so
    /// `min_vruntime` is not advanced.
    pub save: bool,
}

/// The EEVDF state of a `struct cfs_rq` (one per CPU; no groups).
#[derive(Debug)]
pub struct CfsRq {
    timeline: AugTree<TimelineKey, Queued, MinVruntime>,
    /// `cfs_rq->curr`: the running entity (not in the tree).
    curr: Option<TaskId>,
    /// `Σ (v_i − min_vruntime) · w_i` over the tree (not `curr`).
    avg_vruntime: i64,
    /// `Σ w_i` over the tree (not `curr`).
    avg_load: u64,
    /// `cfs_rq->min_vruntime`: monotonic base of the relative sums.
    min_vruntime: u64,
    /// `cfs_rq->load.weight`: Σ of queued entities' internal weights, `curr` included.
    load_weight: u64,
    /// `cfs_rq->nr_running`: queued entities, `curr` included when on_rq.
    nr_running: u32,
    /// `sysctl_sched_base_slice`, ns.
    base_slice_ns: u64,
    /// `TICK_NSEC`, ns (bounds the lag clamp).
    tick_nsec: u64,
}

impl CfsRq {
    /// An empty cfs_rq for a system of `nr_cpus` CPUs ticking every `tick_nsec`, with
    /// room for `max_entities` queued entities (allocated now; the caller never queues
    /// more: the run queue checks its own capacity, which is the same).
    pub fn new(nr_cpus: u32, tick_nsec: u64, max_entities: usize) -> CfsRq {
        CfsRq {
            timeline: AugTree::with_capacity(max_entities),
            curr: None,
            avg_vruntime: 0,
            avg_load: 0,
            // Linux: `(u64)(-(1LL << 20))`, to catch wrap-around bugs early.
            min_vruntime: (-(1i64 << 20)) as u64,
            load_weight: 0,
            nr_running: 0,
            base_slice_ns: sched_base_slice_ns(nr_cpus),
            tick_nsec,
        }
    }

    /// `cfs_rq->curr`.
    pub fn curr(&self) -> Option<TaskId> {
        self.curr
    }

    /// `cfs_rq->nr_running`.
    pub fn nr_running(&self) -> u32 {
        self.nr_running
    }

    /// `cfs_rq->load.weight` (internal resolution).
    pub fn load_weight(&self) -> u64 {
        self.load_weight
    }

    /// `cfs_rq->min_vruntime`.
    pub fn min_vruntime(&self) -> u64 {
        self.min_vruntime
    }

    /// `sysctl_sched_base_slice`, ns.
    pub fn base_slice_ns(&self) -> u64 {
        self.base_slice_ns
    }

    /// Re-scale the base slice (`update_sysctl` on CPU hotplug).
    pub fn set_nr_cpus(&mut self, nr_cpus: u32) {
        self.base_slice_ns = sched_base_slice_ns(nr_cpus);
    }

    /// Queued entities other than `curr`, in deadline order.
    pub fn queued(&self) -> impl Iterator<Item = (TimelineKey, Queued)> + '_ {
        self.timeline.iter().map(|(k, v)| (*k, *v))
    }

    /// The timeline, for invariant checks.
    pub fn timeline(&self) -> &AugTree<TimelineKey, Queued, MinVruntime> {
        &self.timeline
    }

    /// The raw sums `(avg_vruntime, avg_load)`, for invariant checks.
    pub fn avg_sums(&self) -> (i64, u64) {
        (self.avg_vruntime, self.avg_load)
    }

    /// `entity_key`.
    fn key(&self, vruntime: u64) -> i64 {
        vdiff(vruntime, self.min_vruntime)
    }

    /// The sums with `curr` folded in when it is queued.
    fn sums_with(&self, curr: Option<&SchedEntity>) -> (i64, i64) {
        let mut avg = self.avg_vruntime;
        let mut load = self.avg_load as i64;
        if let Some(c) = curr.filter(|c| c.on_rq) {
            let w = c.weight() as i64;
            avg += self.key(c.vruntime) * w;
            load += w;
        }
        (avg, load)
    }

    /// `avg_vruntime`: V, the load-weighted average vruntime of the queue
    /// (rounded towards −∞). `curr` must be the running entity, if any.
    pub fn avg_vruntime(&self, curr: Option<&SchedEntity>) -> u64 {
        let (mut avg, load) = self.sums_with(curr);
        if load != 0 {
            if avg < 0 {
                avg -= load - 1;
            }
            avg /= load;
        }
        self.min_vruntime.wrapping_add(avg as u64)
    }

    /// `vruntime_eligible`: `V >= vruntime`, evaluated without dividing:
    /// `Σ (v_i − v0)·w_i >= (vruntime − v0) · Σ w_i`.
    pub fn vruntime_eligible(&self, curr: Option<&SchedEntity>, vruntime: u64) -> bool {
        let (avg, load) = self.sums_with(curr);
        avg as i128 >= self.key(vruntime) as i128 * load as i128
    }

    /// `entity_eligible`: lag_i >= 0.
    pub fn entity_eligible(&self, curr: Option<&SchedEntity>, se: &SchedEntity) -> bool {
        self.vruntime_eligible(curr, se.vruntime)
    }

    /// `entity_lag`: V − v_i, clamped to ±(virtual time of `max(2·slice, TICK_NSEC)`).
    pub fn entity_lag(&self, avruntime: u64, se: &SchedEntity) -> i64 {
        let vlag = vdiff(avruntime, se.vruntime);
        let limit =
            calc_delta_fair(se.slice.saturating_mul(2).max(self.tick_nsec), &se.load) as i64;
        vlag.clamp(-limit, limit)
    }

    /// `__update_min_vruntime` + `update_min_vruntime`: advance (never retreat)
    /// `min_vruntime` to the smallest vruntime among `curr` and the tree.
    fn update_min_vruntime(&mut self, curr: Option<&SchedEntity>) {
        let curr = curr.filter(|c| c.on_rq);
        let mut vruntime = self.min_vruntime;
        if let Some(c) = curr {
            vruntime = c.vruntime;
        }
        if let Some(root) = self.timeline.root() {
            let m = *self.timeline.summary(root);
            vruntime = if curr.is_none() { m } else { vmin(vruntime, m) };
        }
        let delta = vdiff(vruntime, self.min_vruntime);
        if delta > 0 {
            // avg_vruntime_update: v' = v + d ⇒ Σ(v_i − v')w_i = Σ(v_i − v)w_i − d·W.
            self.avg_vruntime -= self.avg_load as i64 * delta;
            self.min_vruntime = vruntime;
        }
    }

    /// `update_curr` for the running entity `curr` at task-clock `now_ns`.
    pub fn update_curr(
        &mut self,
        curr: &mut SchedEntity,
        now_ns: u64,
        feat: SchedFeatures,
    ) -> CurrUpdate {
        debug_assert_eq!(self.curr, Some(curr.id));
        let delta = vdiff(now_ns, curr.exec_start);
        if delta <= 0 {
            return CurrUpdate::default();
        }
        let delta_exec = delta as u64;
        curr.exec_start = now_ns;
        curr.sum_exec_runtime += delta_exec;
        curr.vruntime = curr
            .vruntime
            .wrapping_add(calc_delta_fair(delta_exec, &curr.load));
        let deadline_reached = self.update_deadline(curr);
        self.update_min_vruntime(Some(curr));
        if self.nr_running == 1 {
            return CurrUpdate {
                delta_exec,
                resched: false,
            };
        }
        let resched = deadline_reached || self.did_preempt_short(curr, feat);
        CurrUpdate {
            delta_exec,
            resched,
        }
    }

    /// `update_deadline`: once vruntime passes the deadline, issue a new request
    /// (vd = v + r/w) and ask for a reschedule.
    fn update_deadline(&self, se: &mut SchedEntity) -> bool {
        if vdiff(se.vruntime, se.deadline) < 0 {
            return false;
        }
        se.slice = self.base_slice_ns;
        se.deadline = se
            .vruntime
            .wrapping_add(calc_delta_fair(se.slice, &se.load));
        true
    }

    /// `did_preempt_short`: `curr` lost its slice protection (a shorter-slice
    /// wake-up cancelled it) and is no longer eligible.
    fn did_preempt_short(&self, curr: &SchedEntity, feat: SchedFeatures) -> bool {
        if !feat.enabled(Feature::PREEMPT_SHORT) {
            return false;
        }
        if curr.picked_deadline == Some(curr.deadline) {
            return false;
        }
        !self.entity_eligible(Some(curr), curr)
    }

    /// `place_entity`: choose vruntime and deadline for an entity joining the queue.
    /// `curr` is the running entity (never `se`).
    pub fn place_entity(
        &self,
        curr: Option<&SchedEntity>,
        se: &mut SchedEntity,
        flags: PlaceFlags,
        feat: SchedFeatures,
    ) {
        let vruntime = self.avg_vruntime(curr);
        se.slice = self.base_slice_ns;
        let mut vslice = calc_delta_fair(se.slice, &se.load);
        let mut lag: i64 = 0;
        if feat.enabled(Feature::PLACE_LAG) && self.nr_running != 0 && se.vlag != 0 {
            // Adding an entity with lag moves V; pre-scale the lag by (W + w_i)/W so
            // the entity ends up with its old lag relative to the new average.
            let mut load = self.avg_load;
            if let Some(c) = curr.filter(|c| c.on_rq) {
                load += c.weight();
            }
            let load = load.max(1);
            let total = load.saturating_add(se.weight());
            // Linux computes this in s64; i128 keeps a huge lag exact, and the common case
            // takes the same quotient in i64 without the 128-bit division helper.
            lag = match (i64::try_from(load), i64::try_from(total)) {
                (Ok(l), Ok(t)) if se.vlag.checked_mul(t).is_some() => se.vlag * t / l,
                _ => (se.vlag as i128 * (load as i128 + se.weight() as i128) / load as i128) as i64,
            };
        }
        se.vruntime = vruntime.wrapping_sub(lag as u64);
        if se.rel_deadline {
            se.deadline = se.deadline.wrapping_add(se.vruntime);
            se.rel_deadline = false;
            return;
        }
        if feat.enabled(Feature::PLACE_DEADLINE_INITIAL) && flags.initial {
            vslice /= 2;
        }
        se.deadline = se.vruntime.wrapping_add(vslice);
    }

    /// The EEVDF half of `enqueue_entity` (after `update_curr` and the PELT update):
    /// place, `account_entity_enqueue`, `__enqueue_entity`. `curr` is the running
    /// entity; `se` must not be it.
    pub fn enqueue_entity(
        &mut self,
        curr: Option<&SchedEntity>,
        se: &mut SchedEntity,
        flags: PlaceFlags,
        feat: SchedFeatures,
    ) {
        debug_assert!(self.curr != Some(se.id) && !se.on_rq);
        self.place_entity(curr, se, flags, feat);
        self.account_entity_enqueue(se);
        self.enqueue_timeline(se);
        se.on_rq = true;
    }

    /// The EEVDF half of `dequeue_entity` (after `update_curr` and the PELT update):
    /// save the lag, make the deadline relative when not sleeping, take the entity
    /// out, `account_entity_dequeue`, advance `min_vruntime`. If `se` is `curr` it
    /// stops being `curr` (Linux keeps a dequeued `curr` until `put_prev_entity`,
    /// where it only clears the pointer; we do that here). `curr` is the running
    /// entity when it is not `se`.
    pub fn dequeue_entity(
        &mut self,
        curr: Option<&SchedEntity>,
        se: &mut SchedEntity,
        mode: DequeueMode,
        feat: SchedFeatures,
    ) {
        debug_assert!(se.on_rq);
        let is_curr = self.curr == Some(se.id);
        let view = if is_curr { Some(&*se) } else { curr };
        se.vlag = self.entity_lag(self.avg_vruntime(view), se);
        // Out of the tree before the key (deadline) changes.
        if !is_curr {
            self.dequeue_timeline(se);
        }
        if feat.enabled(Feature::PLACE_REL_DEADLINE) && !mode.sleep {
            se.deadline = se.deadline.wrapping_sub(se.vruntime);
            se.rel_deadline = true;
        }
        se.on_rq = false;
        self.account_entity_dequeue(se);
        if is_curr {
            self.curr = None;
        }
        if !mode.save {
            let curr = if is_curr { None } else { curr };
            self.update_min_vruntime(curr);
        }
    }

    /// `finish_delayed_dequeue_entity`, after [`CfsRq::dequeue_entity`] of a delayed entity
    /// (`DEQUEUE_DELAYED`): it is no longer delayed, and under `DELAY_ZERO` the positive lag
    /// it earned while it waited in the queue is dropped (a negative one is kept).
    pub fn finish_delayed_dequeue_entity(se: &mut SchedEntity, feat: SchedFeatures) {
        debug_assert!(se.sched_delayed && !se.on_rq);
        se.sched_delayed = false;
        if feat.enabled(Feature::DELAY_ZERO) && se.vlag > 0 {
            se.vlag = 0;
        }
    }

    /// The EEVDF half of `requeue_delayed_entity` (a wake-up of a delayed entity,
    /// `ENQUEUE_DELAYED`): the entity never left the queue, so it keeps its place; only
    /// under `DELAY_ZERO`, if its lag is now positive (V moved past it while it was
    /// delayed), the lag is clamped to 0 and the entity re-placed at V. `curr` is the
    /// running entity (never `se`). The caller clears `sched_delayed` after its PELT update.
    pub fn requeue_delayed_entity(
        &mut self,
        curr: Option<&SchedEntity>,
        se: &mut SchedEntity,
        feat: SchedFeatures,
    ) {
        debug_assert!(se.sched_delayed && se.on_rq && self.curr != Some(se.id));
        if !feat.enabled(Feature::DELAY_ZERO) {
            return;
        }
        // update_entity_lag: V with `se` still in it.
        se.vlag = self.entity_lag(self.avg_vruntime(curr), se);
        if se.vlag > 0 {
            // Out of the tree and of nr_running, so that place_entity's V is the others'.
            self.nr_running -= 1;
            self.dequeue_timeline(se);
            se.vlag = 0;
            self.place_entity(curr, se, PlaceFlags::default(), feat);
            self.enqueue_timeline(se);
            self.nr_running += 1;
        }
    }

    /// `set_next_entity`: `se` becomes `curr`, leaving the tree; the deadline at
    /// pick time is remembered for `RUN_TO_PARITY`.
    pub fn set_next_entity(&mut self, se: &mut SchedEntity, now_ns: u64) {
        debug_assert!(self.curr.is_none());
        if se.on_rq {
            self.dequeue_timeline(se);
            se.picked_deadline = Some(se.deadline);
        }
        se.exec_start = now_ns;
        se.prev_sum_exec_runtime = se.sum_exec_runtime;
        self.curr = Some(se.id);
    }

    /// `put_prev_entity` (after `update_curr`): a still-queued `prev` goes back
    /// into the tree.
    pub fn put_prev_entity(&mut self, prev: &mut SchedEntity) {
        debug_assert_eq!(self.curr, Some(prev.id));
        if prev.on_rq {
            self.enqueue_timeline(prev);
        }
        self.curr = None;
    }

    /// `pick_eevdf`: the eligible entity with the earliest virtual deadline; `curr`
    /// (the running entity, if any) competes with the tree.
    pub fn pick_eevdf(&self, curr: Option<&SchedEntity>, feat: SchedFeatures) -> Option<TaskId> {
        if self.nr_running == 1 {
            return match curr.filter(|c| c.on_rq) {
                Some(c) => Some(c.id),
                None => self.timeline.first().map(|(k, _)| k.id),
            };
        }
        let mut cand = curr.filter(|c| c.on_rq && self.entity_eligible(curr, c));
        if let Some(c) = cand {
            if feat.enabled(Feature::RUN_TO_PARITY) && c.picked_deadline == Some(c.deadline) {
                return Some(c.id);
            }
        }
        let mut best: Option<TimelineKey> = None;
        if let Some((k, q)) = self.timeline.first() {
            if self.vruntime_eligible(curr, q.vruntime) {
                best = Some(*k);
            }
        }
        if best.is_none() {
            let mut node = self.timeline.root();
            while let Some(n) = node {
                // Eligible entities on the left have earlier deadlines: prefer them.
                if let Some(l) = self.timeline.left(n) {
                    if self.vruntime_eligible(curr, *self.timeline.summary(l)) {
                        node = Some(l);
                        continue;
                    }
                }
                if self.vruntime_eligible(curr, self.timeline.value(n).vruntime) {
                    best = Some(*self.timeline.key(n));
                    break;
                }
                node = self.timeline.right(n);
            }
        }
        match (best, cand.take()) {
            (None, c) => c.map(|c| c.id),
            (Some(b), Some(c)) if vdiff(c.deadline, b.deadline) < 0 => Some(c.id),
            (Some(b), _) => Some(b.id),
        }
    }

    /// `yield_task_fair` (after `update_curr`): push the deadline one request later.
    pub fn yield_entity(&self, se: &mut SchedEntity) {
        if self.nr_running <= 1 {
            return;
        }
        se.deadline = se
            .deadline
            .wrapping_add(calc_delta_fair(se.slice, &se.load));
    }

    /// `check_preempt_wakeup_fair` after `pse` was enqueued: should `pse` preempt
    /// the running `curr`? Runs `update_curr` first (whose own resched also counts).
    pub fn check_preempt_wakeup(
        &mut self,
        curr: &mut SchedEntity,
        pse: &SchedEntity,
        now_ns: u64,
        feat: SchedFeatures,
    ) -> bool {
        self.check_preempt_wakee(curr, Wakee::of(pse), now_ns, feat)
    }

    /// [`CfsRq::check_preempt_wakeup`] with the woken entity's fields it reads: a caller
    /// whose running entity is borrowed mutably from the same arena as the woken one copies
    /// these four words instead of the whole entity (a `memcpy` on every wake-up).
    pub fn check_preempt_wakee(
        &mut self,
        curr: &mut SchedEntity,
        pse: Wakee,
        now_ns: u64,
        feat: SchedFeatures,
    ) -> bool {
        if curr.id == pse.id || !feat.enabled(Feature::WAKEUP_PREEMPTION) {
            return false;
        }
        let upd = self.update_curr(curr, now_ns, feat);
        // PREEMPT_SHORT: an eligible waker with a shorter slice cancels the current
        // entity's slice protection, even if it does not end up picked now.
        if self.do_preempt_short(curr, &pse, feat) && curr.picked_deadline == Some(curr.deadline) {
            curr.picked_deadline = None;
        }
        upd.resched || self.pick_eevdf(Some(curr), feat) == Some(pse.id)
    }

    /// `do_preempt_short`.
    fn do_preempt_short(&self, curr: &SchedEntity, pse: &Wakee, feat: SchedFeatures) -> bool {
        if !feat.enabled(Feature::PREEMPT_SHORT) || pse.slice >= curr.slice {
            return false;
        }
        if !self.vruntime_eligible(Some(curr), pse.vruntime) {
            return false;
        }
        vdiff(pse.deadline, curr.deadline) < 0 || !self.entity_eligible(Some(curr), curr)
    }

    /// `reweight_entity` for a dequeued entity (the `set_user_nice` path): lag is
    /// kept as `w_i·(V − v_i)`, so `vlag` scales by old/new weight, as does a
    /// relative deadline.
    pub fn reweight_entity(se: &mut SchedEntity, new: LoadWeight) {
        debug_assert!(!se.on_rq);
        let old = se.load.weight as i128;
        let neww = new.weight.max(1) as i128;
        se.vlag = (se.vlag as i128 * old / neww) as i64;
        if se.rel_deadline {
            se.deadline = (se.deadline as i64 as i128 * old / neww) as i64 as u64;
        }
        se.load = new;
    }

    fn account_entity_enqueue(&mut self, se: &SchedEntity) {
        self.load_weight += se.load.weight;
        self.nr_running += 1;
    }

    fn account_entity_dequeue(&mut self, se: &SchedEntity) {
        self.load_weight -= se.load.weight;
        self.nr_running -= 1;
    }

    /// `__enqueue_entity`: into the tree and the sums.
    fn enqueue_timeline(&mut self, se: &SchedEntity) {
        let w = se.weight();
        self.avg_vruntime += self.key(se.vruntime) * w as i64;
        self.avg_load += w;
        let key = TimelineKey {
            deadline: se.deadline,
            id: se.id,
        };
        let q = Queued {
            vruntime: se.vruntime,
            weight: w,
        };
        let inserted = self.timeline.insert(key, q);
        debug_assert!(inserted.is_ok(), "entity {:?} queued twice", se.id);
    }

    /// `__dequeue_entity`: out of the tree and the sums.
    fn dequeue_timeline(&mut self, se: &SchedEntity) {
        let key = TimelineKey {
            deadline: se.deadline,
            id: se.id,
        };
        let removed = self.timeline.remove(&key);
        debug_assert!(removed.is_some(), "entity {:?} not in the tree", se.id);
        let w = se.weight();
        self.avg_vruntime -= self.key(se.vruntime) * w as i64;
        self.avg_load -= w;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wmult_is_the_inverse_of_weight() {
        for (w, m) in SCHED_PRIO_TO_WEIGHT.iter().zip(SCHED_PRIO_TO_WMULT) {
            let exact = (1u64 << 32) as f64 / *w as f64;
            assert!((m as f64 - exact).abs() <= 1.0, "{w}: {m} vs {exact}");
        }
        // Each nice step is ~1.25× (the "10 % per nice level" rule).
        for p in SCHED_PRIO_TO_WEIGHT.windows(2) {
            let r = p[0] as f64 / p[1] as f64;
            assert!((1.15..1.35).contains(&r), "ratio {r}");
        }
    }

    #[test]
    fn calc_delta_fair_scales_by_nice0_over_weight() {
        for nice in -20..=19 {
            let lw = LoadWeight::from_nice(Nice::new(nice).unwrap());
            let w = SCHED_PRIO_TO_WEIGHT[(nice + 20) as usize] as f64;
            for delta in [1_000u64, 4_000_000, 1_000_000_000] {
                let got = calc_delta_fair(delta, &lw) as f64;
                let want = delta as f64 * 1024.0 / w;
                assert!(
                    (got - want).abs() <= want * 1e-4 + 1.0,
                    "nice {nice} d {delta}: {got} vs {want}"
                );
            }
        }
        assert_eq!(
            calc_delta_fair(12345, &LoadWeight::from_nice(Nice(0))),
            12345
        );
    }

    #[test]
    fn base_slice_scales_with_log_cpus() {
        assert_eq!(sched_base_slice_ns(1), 750_000);
        assert_eq!(sched_base_slice_ns(2), 1_500_000);
        assert_eq!(sched_base_slice_ns(6), 2_250_000);
        assert_eq!(sched_base_slice_ns(8), 3_000_000);
        assert_eq!(sched_base_slice_ns(64), 3_000_000);
    }

    /// V is rounded towards −∞ so that an entity placed at V with zero lag is
    /// eligible (`vruntime_eligible` compares the exact sums); truncating a negative
    /// average towards zero would put it just after the true V. Oracle: f64 floor.
    #[test]
    fn avg_vruntime_rounds_down_so_zero_lag_is_eligible() {
        let mut cfs = CfsRq::new(1, DEFAULT_TICK_NSEC, 16);
        for (sum, load) in [(-5i64, 2u64), (-7, 3), (5, 2), (-1, 1024), (0, 3)] {
            cfs.avg_vruntime = sum;
            cfs.avg_load = load;
            let v = cfs.avg_vruntime(None);
            let want = (sum as f64 / load as f64).floor() as i64;
            assert_eq!(vdiff(v, cfs.min_vruntime), want, "{sum}/{load}");
            assert!(
                cfs.vruntime_eligible(None, v),
                "{sum}/{load}: V itself eligible"
            );
            assert!(sum % load as i64 == 0 || !cfs.vruntime_eligible(None, v.wrapping_add(1)));
        }
    }

    #[test]
    fn nice_is_validated() {
        assert_eq!(Nice::new(20), Err(FairError::NiceOutOfRange { nice: 20 }));
        assert!(Nice::new(-21).is_err());
        assert_eq!(Nice::new(-20).unwrap(), Nice::MIN);
    }
}
