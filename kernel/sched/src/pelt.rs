//! Per-entity load tracking (PELT) and the per-rq PELT clock.
//!
//! Re-derives Linux's `kernel/sched/pelt.c` (`decay_load`, `__accumulate_pelt_segments`,
//! `accumulate_sum`, `___update_load_sum`, `___update_load_avg`, `__update_load_avg_se`,
//! `__update_load_avg_blocked_se`, `__update_load_avg_cfs_rq`), `kernel/sched/pelt.h`
//! (`update_rq_clock_pelt`, `update_idle_rq_clock_pelt`, `rq_clock_pelt`), the constants of
//! `sched-pelt.h`, and from `fair.c` the attach/detach/remove of an entity's signals
//! (`attach_entity_load_avg`, `detach_entity_load_avg`, `remove_entity_load_avg`,
//! `update_cfs_rq_load_avg`, `update_load_avg`, `migrate_se_pelt_lag`),
//! `init_entity_runnable_average`, `post_init_entity_util_avg`, and the RT/DL class signals
//! (`update_rt_rq_load_avg`, `update_dl_rq_load_avg`). The integer arithmetic is Linux's, operation for operation.
//!
//! Scale invariance comes in two modes ([`PeltInvariance`], selected by the `PELT_CLOCK`
//! feature):
//! - [`PeltInvariance::ClockPelt`] (Linux ≥ v5.0): contributions are unscaled and the rq's
//!   `clock_pelt` advances at `capacity_orig/1024 × freq/fmax` of `clock_task` while the CPU is
//!   busy, re-synchronised to `clock_task` when it goes idle.
//! - [`PeltInvariance::Contribution`] (Linux v4.15–v4.20 `accumulate_sum`, seed 001):
//!   `clock_pelt == clock_task`; each contribution is scaled by the frequency factor
//!   (load, runnable and util) and the running one additionally by the CPU capacity (util).
//!
//! Deliberate differences: no global `arch_scale_*` — the rq's [`PeltClock`] receives the
//! scale factors with each clock update, and entity updates take a [`PeltScale`] (the clock
//! hands out the right one for its mode). No task groups: `se_runnable` is `on_rq`, and
//! `UPDATE_TG`/propagation do not exist. The remote `removed` accumulator is a plain value
//! ([`RemovedLoad`]); the caller provides the locking Linux does with `removed.lock`.
//! Whether an entity's signals belong to a cfs_rq is [`SchedAvg::attached`], not Linux's
//! `last_update_time != 0`: that encoding assumes a PELT clock is never at 0, and ours start
//! wherever the caller starts them (the simulator at 0), so an entity attached to a cfs_rq
//! last updated at PELT time 0 keeps that time (in phase with the cfs_rq) and stays attached.

use crate::features::{Feature, SchedFeatures};
use crate::types::{cap_scale, Capacity, Nanos, Util, SCHED_CAPACITY_SCALE, SCHED_CAPACITY_SHIFT};

/// `runnable_avg_yN_inv[n]` ≈ `(2^32 - 1) × y^n` with `y^32 = 1/2` (`sched-pelt.h`).
pub const RUNNABLE_AVG_YN_INV: [u32; 32] = [
    0xffffffff, 0xfa83b2da, 0xf5257d14, 0xefe4b99a, 0xeac0c6e6, 0xe5b906e6, 0xe0ccdeeb, 0xdbfbb796,
    0xd744fcc9, 0xd2a81d91, 0xce248c14, 0xc9b9bd85, 0xc5672a10, 0xc12c4cc9, 0xbd08a39e, 0xb8fbaf46,
    0xb504f333, 0xb123f581, 0xad583ee9, 0xa9a15ab4, 0xa5fed6a9, 0xa2704302, 0x9ef5325f, 0x9b8d39b9,
    0x9837f050, 0x94f4efa8, 0x91c3d373, 0x8ea4398a, 0x8b95c1e3, 0x88980e80, 0x85aac367, 0x82cd8698,
];

/// `LOAD_AVG_PERIOD`: the half-life, in periods.
pub const LOAD_AVG_PERIOD: u32 = 32;

/// `LOAD_AVG_MAX`: the maximum of a PELT sum (fixed point of the truncating recurrence).
pub const LOAD_AVG_MAX: u32 = 47742;

/// `PELT_MIN_DIVIDER`: the divider right after a period boundary.
pub const PELT_MIN_DIVIDER: u32 = LOAD_AVG_MAX - 1024;

/// PELT counts time in units of 1024 ns (`delta >>= 10`).
pub const PELT_UNIT_SHIFT: u32 = 10;

/// One PELT period: 1024 units of 1024 ns.
pub const PELT_PERIOD_NS: u64 = 1024 << PELT_UNIT_SHIFT;

/// `update_load_avg()` flag: do not age the entity's own signals first.
pub const SKIP_AGE_LOAD: u8 = 0x2;
/// `update_load_avg()` flag: attach an entity that is not attached (migrated/new).
pub const DO_ATTACH: u8 = 0x4;
/// `update_load_avg()` flag: detach the entity (it is migrating away while queued).
pub const DO_DETACH: u8 = 0x8;

/// The scale factors applied to a contribution in [`PeltInvariance::Contribution`] mode
/// (`arch_scale_freq_capacity`, `arch_scale_cpu_capacity`). [`PeltScale::NONE`] in clock_pelt
/// mode, where time itself is scaled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeltScale {
    /// Frequency factor, `cur_freq × 1024 / max_freq`.
    pub freq: u32,
    /// CPU capacity factor, `capacity_orig`.
    pub cpu: u32,
}

impl PeltScale {
    /// No scaling (1024, 1024).
    pub const NONE: PeltScale = PeltScale {
        freq: SCHED_CAPACITY_SCALE,
        cpu: SCHED_CAPACITY_SCALE,
    };
}

impl Default for PeltScale {
    fn default() -> Self {
        PeltScale::NONE
    }
}

/// Which scale-invariance scheme PELT uses (the `PELT_CLOCK` feature).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeltInvariance {
    /// Current Linux: scaled `clock_pelt`, unscaled contributions.
    ClockPelt,
    /// Pre-v5.0 Linux: `clock_pelt == clock_task`, scaled contributions.
    Contribution,
}

impl PeltInvariance {
    /// `ClockPelt` when `PELT_CLOCK` is on.
    pub fn from_features(f: SchedFeatures) -> PeltInvariance {
        if f.enabled(Feature::PELT_CLOCK) {
            PeltInvariance::ClockPelt
        } else {
            PeltInvariance::Contribution
        }
    }
}

/// Linux's `struct sched_avg`, field for field (widths as on 64-bit Linux).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedAvg {
    /// PELT-clock time (ns) of the last update, sub-unit remainder excluded.
    pub last_update_time: u64,
    /// Σ load × contribution (geometric).
    pub load_sum: u64,
    /// Σ runnable × contribution × 1024.
    pub runnable_sum: u64,
    /// Σ running × contribution × 1024.
    pub util_sum: u32,
    /// Units (1024 ns) already accumulated in the current, incomplete period.
    pub period_contrib: u32,
    /// `load_sum × weight / divider`.
    pub load_avg: u64,
    /// `runnable_sum / divider`.
    pub runnable_avg: u64,
    /// `util_sum / divider`.
    pub util_avg: u64,
    /// util_est: for a task the ewma with the `UTIL_AVG_UNCHANGED` flag, for a cfs_rq the sum
    /// of its queued tasks' estimates (see [`crate::util_est`]).
    pub util_est: u32,
    /// An entity's signals are part of its cfs_rq's (attached at its first enqueue there,
    /// detached when it migrates). Linux encodes this as `last_update_time != 0`; a
    /// detached entity here also has `last_update_time == 0`, but an attached one may too.
    /// Unused for a cfs_rq's own signals.
    pub attached: bool,
}

/// What a cfs_rq has been told to remove by tasks that left it while blocked
/// (`cfs_rq->removed`): applied at its next [`CfsRqAvg::update_cfs_rq_load_avg`]. Remote
/// wakers build one ([`crate::rq::migrate_task_rq_fair`]) and add it to the old CPU's,
/// which the caller keeps under its own leaf lock until the owner takes it in
/// ([`crate::rq::Rq::apply_removed`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemovedLoad {
    /// Number of removed entities since the last update.
    pub nr: u32,
    /// Σ removed `load_avg`.
    pub load_avg: u64,
    /// Σ removed `util_avg`.
    pub util_avg: u64,
    /// Σ removed `runnable_avg`.
    pub runnable_avg: u64,
}

impl RemovedLoad {
    /// Add `other`'s removals to these.
    pub fn add(&mut self, other: RemovedLoad) {
        self.nr += other.nr;
        self.load_avg += other.load_avg;
        self.util_avg += other.util_avg;
        self.runnable_avg += other.runnable_avg;
    }

    /// Hand out what is pending and start again from nothing.
    pub fn take(&mut self) -> RemovedLoad {
        core::mem::take(self)
    }
}

/// A cfs_rq's PELT state: its `sched_avg` plus the `removed` accumulator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CfsRqAvg {
    /// `cfs_rq->avg`.
    pub avg: SchedAvg,
    /// `cfs_rq->removed`.
    pub removed: RemovedLoad,
}

/// The PELT inputs of a task entity at an update (`__update_load_avg_se`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntityState {
    /// `se_weight(se)`: user-visible weight (1024 for nice 0).
    pub weight: u64,
    /// `se->on_rq`: queued (runnable, including running).
    pub on_rq: bool,
    /// `cfs_rq->curr == se`.
    pub running: bool,
    /// `se->sched_delayed`: queued but blocked (`DELAY_DEQUEUE`). v6.12's `se_runnable`
    /// is false for it, so it adds load (`on_rq`) but no runnable time.
    pub sched_delayed: bool,
}

/// The PELT inputs of a cfs_rq at an update (`__update_load_avg_cfs_rq`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CfsRqState {
    /// `scale_load_down(cfs_rq->load.weight)`: Σ weights of queued entities.
    pub load_weight: u64,
    /// `cfs_rq->h_nr_running` (queued tasks).
    pub h_nr_running: u64,
    /// `cfs_rq->curr != NULL`.
    pub curr: bool,
}

/// The per-rq PELT clock (`rq->clock_task`, `rq->clock_pelt`, `rq->lost_idle_time`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeltClock {
    /// `rq->clock_task` (ns): task time, advanced by every [`PeltClock::update_rq_clock_pelt`].
    pub clock_task: u64,
    /// `rq->clock_pelt` (ns).
    pub clock_pelt: u64,
    /// `rq->lost_idle_time` (ns): idle time not given back because the rq was saturated.
    pub lost_idle_time: u64,
    /// `rq->clock_idle`: `clock_task` when the rq last went idle (we have no separate
    /// `rq->clock`).
    pub clock_idle: u64,
    /// `rq->clock_pelt_idle`: `rq_clock_pelt()` when the rq last went idle.
    pub clock_pelt_idle: u64,
    /// The invariance scheme in use.
    pub invariance: PeltInvariance,
    /// The scale factors of the last clock update (used in contribution mode).
    pub scale: PeltScale,
}

/// `decay_load(val, n)`: `val × y^n`, with Linux's truncations.
pub fn decay_load(val: u64, n: u64) -> u64 {
    if n > LOAD_AVG_PERIOD as u64 * 63 {
        return 0;
    }
    let mut val = val;
    let mut n = n;
    if n >= LOAD_AVG_PERIOD as u64 {
        val >>= n / LOAD_AVG_PERIOD as u64;
        n %= LOAD_AVG_PERIOD as u64;
    }
    mul_u64_u32_shr(val, RUNNABLE_AVG_YN_INV[n as usize], 32)
}

/// `__accumulate_pelt_segments(periods, d1, d3)`: the contribution of `d1` units ending the
/// oldest period, `periods - 1` full periods and `d3` units of the current one.
pub fn accumulate_pelt_segments(periods: u64, d1: u32, d3: u32) -> u32 {
    let c1 = decay_load(d1 as u64, periods) as u32;
    let c2 = LOAD_AVG_MAX - decay_load(LOAD_AVG_MAX as u64, periods) as u32 - 1024;
    c1 + c2 + d3
}

/// `init_entity_runnable_average()` for a task of `weight`: zero signals, `load_avg = weight`
/// so that a new task starts "fully loaded".
pub fn init_entity_runnable_average(weight: u64) -> SchedAvg {
    SchedAvg {
        load_avg: weight,
        ..SchedAvg::default()
    }
}

impl SchedAvg {
    /// `get_pelt_divider()`: `PELT_MIN_DIVIDER + period_contrib`.
    pub fn pelt_divider(&self) -> u32 {
        PELT_MIN_DIVIDER + self.period_contrib
    }

    /// `util_avg` as a [`Util`] (saturating at `u32::MAX`).
    pub fn util(&self) -> Util {
        Util(self.util_avg.min(u32::MAX as u64) as u32)
    }

    /// `runnable_avg` as a [`Util`] (saturating at `u32::MAX`).
    pub fn runnable(&self) -> Util {
        Util(self.runnable_avg.min(u32::MAX as u64) as u32)
    }

    /// `accumulate_sum()`: age the sums by the periods `delta` (in 1024-ns units) crosses and
    /// add the new contribution. Returns the number of period boundaries crossed.
    pub fn accumulate_sum(
        &mut self,
        delta: u64,
        load: u64,
        runnable: u64,
        running: bool,
        scale: PeltScale,
    ) -> u64 {
        // Linux keeps `contrib` as u32. The raw delta is only used when no period boundary
        // is crossed (delta < 1024 units), so clamping it never changes a used value.
        let mut contrib = delta.min(u32::MAX as u64) as u32;
        let mut delta = delta + self.period_contrib as u64;
        let periods = delta / 1024;
        if periods != 0 {
            self.load_sum = decay_load(self.load_sum, periods);
            self.runnable_sum = decay_load(self.runnable_sum, periods);
            self.util_sum = decay_load(self.util_sum as u64, periods) as u32;
            delta %= 1024;
            if load != 0 {
                // `1024 - period_contrib` units close the oldest period.
                contrib =
                    accumulate_pelt_segments(periods, 1024 - self.period_contrib, delta as u32);
            }
        }
        self.period_contrib = delta as u32;

        // Contribution scaling (v4.15–v4.20): identity when `scale` is NONE.
        let contrib_freq = cap_scale(contrib as u64, scale.freq);
        if load != 0 {
            self.load_sum += load * contrib_freq;
        }
        if runnable != 0 {
            self.runnable_sum += (runnable * contrib_freq) << SCHED_CAPACITY_SHIFT;
        }
        if running {
            self.util_sum += (contrib_freq * scale.cpu as u64) as u32;
        }
        periods
    }

    /// `___update_load_sum()`: advance to `now` (PELT-clock ns). Returns true when at least
    /// one period boundary was crossed (the averages then need recomputing).
    pub fn update_load_sum(
        &mut self,
        now: u64,
        load: u64,
        runnable: u64,
        running: bool,
        scale: PeltScale,
    ) -> bool {
        if now < self.last_update_time {
            // The clock went backwards (e.g. a migrated entity under a lagging clock).
            self.last_update_time = now;
            return false;
        }
        let delta = (now - self.last_update_time) >> PELT_UNIT_SHIFT;
        if delta == 0 {
            return false;
        }
        self.last_update_time += delta << PELT_UNIT_SHIFT;
        // Running an entity that is not on the rq (it is being dequeued): nothing to add.
        let (runnable, running) = if load == 0 {
            (0, false)
        } else {
            (runnable, running)
        };
        self.accumulate_sum(delta, load, runnable, running, scale) != 0
    }

    /// `___update_load_avg()`: recompute the averages from the sums.
    pub fn update_load_avg(&mut self, load: u64) {
        let divider = self.pelt_divider() as u64;
        self.load_avg = load * self.load_sum / divider;
        self.runnable_avg = self.runnable_sum / divider;
        self.util_avg = self.util_sum as u64 / divider;
    }

    /// `__update_load_avg_blocked_se()`: decay a blocked (not queued) entity to `now`.
    pub fn update_blocked_se(&mut self, now: u64, weight: u64) -> bool {
        if self.update_load_sum(now, 0, 0, false, PeltScale::NONE) {
            self.update_load_avg(weight);
            return true;
        }
        false
    }

    /// `__update_load_avg_se()` for a task: load = `on_rq`, runnable = `se_runnable` (`on_rq`
    /// unless delayed, v6.12 "Fixup PELT vs DELAYED_DEQUEUE"), running = current. Clears
    /// util_est's UNCHANGED flag when util_avg was recomputed (`cfs_se_util_change`).
    pub fn update_se(&mut self, now: u64, se: EntityState, scale: PeltScale) -> bool {
        let on_rq = se.on_rq as u64;
        let runnable = (se.on_rq && !se.sched_delayed) as u64;
        if self.update_load_sum(now, on_rq, runnable, se.running, scale) {
            self.update_load_avg(se.weight);
            crate::util_est::cfs_se_util_change(self);
            return true;
        }
        false
    }
}

impl SchedAvg {
    /// `update_rt_rq_load_avg()` / `update_dl_rq_load_avg()`: a class-level signal where
    /// load, runnable and running are all "the class is running" (`now` = `rq_clock_pelt`).
    pub fn update_rt_dl(&mut self, now: u64, running: bool, scale: PeltScale) -> bool {
        let r = running as u64;
        if self.update_load_sum(now, r, r, running, scale) {
            self.update_load_avg(1);
            return true;
        }
        false
    }
}

impl CfsRqAvg {
    /// `__update_load_avg_cfs_rq()`: advance the cfs_rq's own signals to `now`.
    pub fn update_cfs_rq(&mut self, now: u64, rq: CfsRqState, scale: PeltScale) -> bool {
        if self
            .avg
            .update_load_sum(now, rq.load_weight, rq.h_nr_running, rq.curr, scale)
        {
            self.avg.update_load_avg(1);
            return true;
        }
        false
    }

    /// `update_cfs_rq_load_avg()`: apply pending removals, then [`CfsRqAvg::update_cfs_rq`].
    /// Returns true if anything changed ("decayed").
    pub fn update_cfs_rq_load_avg(&mut self, now: u64, rq: CfsRqState, scale: PeltScale) -> bool {
        let mut decayed = false;
        if self.removed.nr != 0 {
            let removed = core::mem::take(&mut self.removed);
            let divider = self.avg.pelt_divider() as u64;
            let sa = &mut self.avg;
            sa.load_avg = sa.load_avg.saturating_sub(removed.load_avg);
            sa.load_sum = sa.load_sum.saturating_sub(removed.load_avg * divider);
            sa.load_sum = sa.load_sum.max(sa.load_avg * PELT_MIN_DIVIDER as u64);

            sa.util_avg = sa.util_avg.saturating_sub(removed.util_avg);
            let util_sum = (sa.util_sum as u64).saturating_sub(removed.util_avg * divider);
            sa.util_sum = sat_u32(util_sum.max(sa.util_avg * PELT_MIN_DIVIDER as u64));

            sa.runnable_avg = sa.runnable_avg.saturating_sub(removed.runnable_avg);
            sa.runnable_sum = sa
                .runnable_sum
                .saturating_sub(removed.runnable_avg * divider);
            sa.runnable_sum = sa
                .runnable_sum
                .max(sa.runnable_avg * PELT_MIN_DIVIDER as u64);
            decayed = true;
        }
        decayed |= self.update_cfs_rq(now, rq, scale);
        decayed
    }

    /// `enqueue_load_avg()`: add an entity's load to the cfs_rq's.
    pub fn enqueue_load_avg(&mut self, se: &SchedAvg, weight: u64) {
        self.avg.load_avg += se.load_avg;
        self.avg.load_sum += weight * se.load_sum;
    }

    /// `dequeue_load_avg()`: remove an entity's load from the cfs_rq's.
    pub fn dequeue_load_avg(&mut self, se: &SchedAvg, weight: u64) {
        let sa = &mut self.avg;
        sa.load_avg = sa.load_avg.saturating_sub(se.load_avg);
        sa.load_sum = sa.load_sum.saturating_sub(weight * se.load_sum);
        // Rounding can leave load_sum inconsistent with load_avg; keep it plausible.
        sa.load_sum = sa.load_sum.max(sa.load_avg * PELT_MIN_DIVIDER as u64);
    }

    /// `attach_entity_load_avg()`: align `se` with this cfs_rq's period (the sums are rebuilt
    /// from the averages against our divider) and add its signals to ours.
    pub fn attach_entity_load_avg(&mut self, se: &mut SchedAvg, weight: u64) {
        let divider = self.avg.pelt_divider() as u64;
        se.last_update_time = self.avg.last_update_time;
        se.attached = true;
        se.period_contrib = self.avg.period_contrib;
        se.util_sum = sat_u32(se.util_avg * divider);
        se.runnable_sum = se.runnable_avg * divider;
        se.load_sum = se.load_avg * divider;
        se.load_sum = if weight < se.load_sum {
            se.load_sum / weight
        } else {
            1
        };
        self.enqueue_load_avg(se, weight);
        self.avg.util_avg += se.util_avg;
        // Linux's u32 would wrap with absurd inputs; saturate instead.
        self.avg.util_sum = self.avg.util_sum.saturating_add(se.util_sum);
        self.avg.runnable_avg += se.runnable_avg;
        self.avg.runnable_sum += se.runnable_sum;
    }

    /// `detach_entity_load_avg()`: remove `se`'s signals from ours (it is migrating away
    /// while queued, with both updated to the same time).
    pub fn detach_entity_load_avg(&mut self, se: &SchedAvg, weight: u64) {
        self.dequeue_load_avg(se, weight);
        let sa = &mut self.avg;
        sa.util_avg = sa.util_avg.saturating_sub(se.util_avg);
        sa.util_sum = sa.util_sum.saturating_sub(se.util_sum);
        sa.util_sum = sat_u32((sa.util_sum as u64).max(sa.util_avg * PELT_MIN_DIVIDER as u64));
        sa.runnable_avg = sa.runnable_avg.saturating_sub(se.runnable_avg);
        sa.runnable_sum = sa.runnable_sum.saturating_sub(se.runnable_sum);
        sa.runnable_sum = sa
            .runnable_sum
            .max(sa.runnable_avg * PELT_MIN_DIVIDER as u64);
    }

    /// `sync_entity_load_avg()`: decay a blocked `se` to this cfs_rq's last update time.
    pub fn sync_entity_load_avg(&self, se: &mut SchedAvg, weight: u64) {
        se.update_blocked_se(self.avg.last_update_time, weight);
    }

    /// `remove_entity_load_avg()`: a blocked task that belonged to this cfs_rq is woken on
    /// another CPU. Sync it to our last update and queue exactly those signals for removal
    /// at our next update (they are what our sums hold of it). As in Linux, the caller
    /// (`migrate_task_rq_fair`) then may age it further with
    /// [`CfsRqAvg::migrate_se_pelt_lag`] and marks it unattached (`attached = false`,
    /// `last_update_time = 0`) so that its new cfs_rq attaches it.
    pub fn remove_entity_load_avg(&mut self, se: &mut SchedAvg, weight: u64) {
        self.sync_entity_load_avg(se, weight);
        self.removed.nr += 1;
        self.removed.util_avg += se.util_avg;
        self.removed.load_avg += se.load_avg;
        self.removed.runnable_avg += se.runnable_avg;
    }

    /// `migrate_se_pelt_lag()`: after [`CfsRqAvg::remove_entity_load_avg`] of a task woken
    /// on another CPU while its old rq is idle (an idle rq's cfs_rq is not updated, so the
    /// sync stopped at its last update), decay the task to an estimate of that rq's PELT
    /// time at task-clock `now`: `clock_pelt_idle + (now - clock_idle)`, never before the
    /// cfs_rq's last update. `se` must still be attached.
    pub fn migrate_se_pelt_lag(
        &self,
        se: &mut SchedAvg,
        weight: u64,
        clock: &PeltClock,
        rq_is_idle: bool,
        now: Nanos,
    ) {
        if !rq_is_idle {
            return;
        }
        let lut = self.avg.last_update_time;
        let est = clock.clock_pelt_idle;
        let pelt_now = if est < lut {
            lut
        } else {
            est + now.0.saturating_sub(clock.clock_idle)
        };
        se.update_blocked_se(pelt_now, weight);
    }

    /// `update_load_avg(cfs_rq, se, flags)`: age `se` (unless unattached or
    /// [`SKIP_AGE_LOAD`]), age the cfs_rq, then attach ([`DO_ATTACH`] and `se` unattached) or
    /// detach ([`DO_DETACH`]; `se` is then unattached, `last_update_time` 0) it. Returns whether
    /// the cfs_rq's signals changed (Linux calls `cfs_rq_util_change` → cpufreq then).
    pub fn update_load_avg(
        &mut self,
        now: u64,
        se: &mut SchedAvg,
        se_state: EntityState,
        rq: CfsRqState,
        flags: u8,
        scale: PeltScale,
    ) -> bool {
        if se.attached && flags & SKIP_AGE_LOAD == 0 {
            se.update_se(now, se_state, scale);
        }
        let decayed = self.update_cfs_rq_load_avg(now, rq, scale);
        if !se.attached && flags & DO_ATTACH != 0 {
            self.attach_entity_load_avg(se, se_state.weight);
            true
        } else if flags & DO_DETACH != 0 {
            self.detach_entity_load_avg(se, se_state.weight);
            se.last_update_time = 0;
            se.attached = false;
            true
        } else {
            decayed
        }
    }

    /// `post_init_entity_util_avg()`: a new task's initial util is its share of the cfs_rq's
    /// util by weight, at most half the spare capacity of `cpu_capacity`; runnable = util.
    /// `se` stays unattached so that the first enqueue attaches it.
    pub fn post_init_entity_util_avg(
        &self,
        se: &mut SchedAvg,
        weight: u64,
        cpu_capacity: Capacity,
    ) {
        let cap = (cpu_capacity.0 as i64 - self.avg.util_avg as i64) / 2;
        if cap > 0 {
            let cap = cap as u64;
            se.util_avg = if self.avg.util_avg != 0 {
                (self.avg.util_avg * weight / (self.avg.load_avg + 1)).min(cap)
            } else {
                cap
            };
        }
        se.runnable_avg = se.util_avg;
    }
}

impl PeltClock {
    /// A clock starting at task time `now`, with `clock_pelt == clock_task`.
    pub fn new(now: Nanos, invariance: PeltInvariance) -> PeltClock {
        PeltClock {
            clock_task: now.0,
            clock_pelt: now.0,
            lost_idle_time: 0,
            clock_idle: now.0,
            clock_pelt_idle: now.0,
            invariance,
            scale: PeltScale::NONE,
        }
    }

    /// `update_rq_clock_task()` + `update_rq_clock_pelt()`: `delta` of task time passed on a
    /// CPU of `cpu_capacity` (`capacity_orig`) running at `freq_capacity`
    /// (`arch_scale_freq_capacity`), with the rq idle (`rq->curr` is the idle task) or not.
    /// Both factors are at most 1024 by definition; larger values are treated as 1024 so
    /// that `clock_pelt` can never overtake `clock_task`.
    pub fn update_rq_clock_pelt(
        &mut self,
        delta: Nanos,
        cpu_capacity: Capacity,
        freq_capacity: Capacity,
        rq_is_idle: bool,
    ) {
        let cpu_capacity = Capacity(cpu_capacity.0.min(SCHED_CAPACITY_SCALE));
        let freq_capacity = Capacity(freq_capacity.0.min(SCHED_CAPACITY_SCALE));
        self.clock_task += delta.0;
        self.scale = PeltScale {
            freq: freq_capacity.0,
            cpu: cpu_capacity.0,
        };
        match self.invariance {
            PeltInvariance::Contribution => self.clock_pelt = self.clock_task,
            PeltInvariance::ClockPelt if rq_is_idle => self.sync_idle(),
            PeltInvariance::ClockPelt => {
                let d = cap_scale(delta.0, cpu_capacity.0);
                let d = cap_scale(d, freq_capacity.0);
                self.clock_pelt += d;
            }
        }
    }

    /// `update_idle_rq_clock_pelt()`: the rq goes idle. `util_sum_total` is
    /// `cfs.avg.util_sum + avg_rt.util_sum + avg_dl.util_sum`; when it shows the rq was
    /// saturated, the time clock_pelt lags behind is recorded as lost instead of given back.
    pub fn update_idle_rq_clock_pelt(&mut self, util_sum_total: u64) {
        let divider =
            (((LOAD_AVG_MAX - 1024) as u64) << SCHED_CAPACITY_SHIFT) - LOAD_AVG_MAX as u64;
        if self.invariance == PeltInvariance::ClockPelt && util_sum_total >= divider {
            self.lost_idle_time += self.clock_task.saturating_sub(self.clock_pelt);
        }
        self.sync_idle();
    }

    /// `rq_clock_pelt()`: `clock_pelt - lost_idle_time`, the `now` for PELT updates.
    pub fn rq_clock_pelt(&self) -> u64 {
        self.clock_pelt - self.lost_idle_time
    }

    /// `rq_clock_task()`.
    pub fn rq_clock_task(&self) -> u64 {
        self.clock_task
    }

    /// The [`PeltScale`] to pass to entity updates: the last scale factors in contribution
    /// mode, [`PeltScale::NONE`] in clock_pelt mode.
    pub fn contrib_scale(&self) -> PeltScale {
        match self.invariance {
            PeltInvariance::ClockPelt => PeltScale::NONE,
            PeltInvariance::Contribution => self.scale,
        }
    }

    /// Switch invariance scheme at run time. `clock_pelt` re-syncs to `clock_task` as if the
    /// rq went idle (PELT time only jumps forward, which entities see as elapsed time).
    pub fn set_invariance(&mut self, invariance: PeltInvariance) {
        if invariance != self.invariance {
            self.invariance = invariance;
            self.sync_idle();
        }
    }

    /// `_update_idle_rq_clock_pelt()`.
    fn sync_idle(&mut self) {
        self.clock_pelt = self.clock_task;
        self.clock_idle = self.clock_task;
        self.clock_pelt_idle = self.rq_clock_pelt();
    }
}

fn sat_u32(v: u64) -> u32 {
    v.min(u32::MAX as u64) as u32
}

/// `mul_u64_u32_shr(a, mul, shift)` with a 128-bit product.
fn mul_u64_u32_shr(a: u64, mul: u32, shift: u32) -> u64 {
    ((a as u128 * mul as u128) >> shift) as u64
}
