//! The schedutil cpufreq governor (`sugov`): frequency follows utilisation.
//!
//! Re-derives Linux's `kernel/sched/cpufreq_schedutil.c` as of **v6.12**
//! (`sugov_update_shared`, `sugov_update_single_freq`, `sugov_next_freq_shared`,
//! `sugov_get_util`, `sugov_effective_cpu_perf`, `get_next_freq`,
//! `sugov_should_update_freq`, `sugov_update_next_freq`, `ignore_dl_rate_limit`, the
//! iowait-boost state machine and `sugov_hold_freq` with its v6.12 idle-calls test),
//! and `map_util_perf`/`map_util_freq` from `include/linux/sched/cpufreq.h`. The CPU's
//! utilisation comes from [`crate::cpu_util`] (`cpu_util_cfs_boost`,
//! `effective_cpu_util` in its v6.8+ min/max form).
//!
//! The caller (the kernel's `cpufreq_update_util` hook, or the simulator) calls
//! [`SugovPolicy::update`] at Linux's trigger points — the root cfs_rq PELT update
//! (`cfs_rq_util_change`, flags empty), an enqueue of a task that was in iowait
//! ([`UpdateFlags::IOWAIT`]) and the tick — and hands any frequency it returns to the
//! cpufreq driver.
//!
//! Deliberate differences from Linux:
//! - Per-CPU inputs come in through a closure that returns the CPU's published
//!   [`RqSnapshot`], rather than from global per-CPU data; `uclamp_is_used()` is an
//!   argument.
//! - Runnable boosting is switchable: with `RUNNABLE_BOOST` off the governor is fed
//!   `cpu_util_cfs` (Linux < v6.5) instead of `cpu_util_cfs_boost` (seed 000).
//! - There is no sched_ext (`scx_*` terms are zero) and no deferred-update kthread: a
//!   slow-switch request is returned like a fast-switch one and the driver's latency
//!   models the delay ([`crate::cpufreq::driver`]).
//! - Frequency invariance is always on, so the reference frequency is
//!   `cpuinfo.max_freq` (`arch_scale_freq_ref`).
//! - The policy's `sugov_cpu`s are a heap vector sized from the policy's CPUs, and a
//!   governor restart ([`SugovPolicy::restart`]) reuses it instead of allocating.

use alloc::vec::Vec;

use crate::cpu_util::{cpu_util_cfs, cpu_util_cfs_boost, effective_cpu_util};
use crate::cpufreq::{CpufreqPolicy, Governor};
use crate::features::{Feature, SchedFeatures};
use crate::flags::sched_flags;
use crate::pelt::decay_load;
use crate::rq::RqSnapshot;
use crate::types::{
    Capacity, CpuId, CpuMask, Khz, Nanos, Util, SCHED_CAPACITY_SCALE, SCHED_CAPACITY_SHIFT,
};

/// `IOWAIT_BOOST_MIN`: the first iowait boost, `SCHED_CAPACITY_SCALE / 8`.
pub const IOWAIT_BOOST_MIN: u32 = SCHED_CAPACITY_SCALE / 8;
/// `TICK_NSEC` at the default `HZ` = 250.
pub const DEFAULT_TICK_NSEC: u64 = 4_000_000;
/// The most CPUs one policy may span.
pub const MAX_POLICY_CPUS: usize = 16;

sched_flags! {
    /// `SCHED_CPUFREQ_*` flags of a `cpufreq_update_util` call;
    /// [`UpdateFlags::NONE`]: a utilisation change.
    pub struct UpdateFlags(u32) {
        /// `SCHED_CPUFREQ_IOWAIT`: a task that slept on I/O was enqueued.
        const IOWAIT = 1;
    }
}

impl UpdateFlags {
    /// Whether `SCHED_CPUFREQ_IOWAIT` is set.
    pub const fn iowait(self) -> bool {
        self.contains(UpdateFlags::IOWAIT)
    }
}

/// Per-CPU governor state (`struct sugov_cpu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SugovCpu {
    /// The CPU.
    pub cpu: CpuId,
    /// `util`: the CPU's performance request at the last evaluation (with headroom).
    pub util: Util,
    /// `bw_min`: the `min` output of `effective_cpu_util` at the last evaluation.
    pub bw_min: Util,
    /// `iowait_boost`, on the capacity scale (0 when off).
    pub iowait_boost: u32,
    /// `iowait_boost_pending`.
    pub iowait_boost_pending: bool,
    /// `last_update`.
    pub last_update: Nanos,
    /// `saved_idle_calls`, for `sugov_hold_freq`.
    pub saved_idle_calls: u64,
}

/// Per-policy governor state (`struct sugov_policy` with its CPUs' `sugov_cpu`s).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SugovPolicy {
    /// One per CPU of the policy (at most [`MAX_POLICY_CPUS`]), in CPU order.
    cpus: Vec<SugovCpu>,
    /// `next_freq`: the last frequency chosen (0 before the first).
    pub next_freq: Khz,
    /// `cached_raw_freq`: the unresolved frequency behind `next_freq`.
    pub cached_raw_freq: Khz,
    /// `last_freq_update_time`.
    pub last_freq_update_time: Nanos,
    /// `freq_update_delay_ns` = `rate_limit_us × 1000`.
    pub freq_update_delay_ns: u64,
    /// `limits_changed`.
    pub limits_changed: bool,
    /// `need_freq_update`.
    pub need_freq_update: bool,
    /// The driver has `CPUFREQ_NEED_UPDATE_LIMITS` (every limits update reaches it).
    pub driver_need_update_limits: bool,
    /// `TICK_NSEC`, for the iowait-boost reset.
    pub tick_ns: u64,
}

/// `map_util_perf`: add the 25 % DVFS headroom.
pub const fn map_util_perf(util: u32) -> u32 {
    util + (util >> 2)
}

/// `map_util_freq` (v6.8+): `freq × util / cap`, headroom already in `util`.
pub const fn map_util_freq(util: u32, freq: Khz, cap: Capacity) -> Khz {
    if cap.0 == 0 {
        return freq;
    }
    let f = freq.0 as u64 * util as u64 / cap.0 as u64;
    Khz(if f > u32::MAX as u64 {
        u32::MAX
    } else {
        f as u32
    })
}

/// One PELT period (1024 µs) in ns, as a shift.
const PELT_PERIOD_SHIFT: u32 = 20;

/// The utilisation a CPU at `util` reaches after running without a break for `horizon_ns`
/// at capacity `cap` (`capacity_orig × freq / max_freq`): with clock_pelt, PELT time
/// advances at `cap / 1024` of wall time, and a running signal closes the gap to
/// [`SCHED_CAPACITY_SCALE`] by `y^n` over `n` periods (`y^32 = 1/2`). The fractional period
/// is interpolated linearly between `y^⌊n⌋` and `y^(⌊n⌋+1)` (an underestimate of the growth
/// by less than 0.01 % of the gap). Part of [`sugov_growth_perf`]; not in Linux.
pub fn util_after_running(util: u32, cap: Capacity, horizon_ns: u64) -> u32 {
    let util = util.min(SCHED_CAPACITY_SCALE);
    // The gap to the maximum, with 20 fraction bits for the decay's precision.
    let gap = ((SCHED_CAPACITY_SCALE - util) as u64) << 20;
    let pelt_ns = ((horizon_ns as u128 * cap.0 as u128) >> SCHED_CAPACITY_SHIFT) as u64;
    let periods = pelt_ns >> PELT_PERIOD_SHIFT;
    let frac = pelt_ns & ((1 << PELT_PERIOD_SHIFT) - 1);
    // `decay_load(x, 0)` is a hair under `x` (`runnable_avg_yN_inv[0]` = 2^32 − 1).
    let left = if periods == 0 {
        gap
    } else {
        decay_load(gap, periods)
    };
    let next = decay_load(left, 1);
    let left = left - (((left - next) * frac) >> PELT_PERIOD_SHIFT);
    SCHED_CAPACITY_SCALE - (left >> 20) as u32
}

/// asym's `SUGOV_GROWTH_HEADROOM` (not in Linux): the performance request for `util` on a
/// policy whose OPP capacities are `caps` (ascending; `capacity_orig × freq / max_freq`),
/// when the governor next looks again within `horizon_ns`. Linux adds a flat 25 %
/// ([`map_util_perf`]) so that the utilisation can grow before the next update; here the
/// headroom is that growth itself, at the OPP it would run on: the request is
/// [`util_after_running`] at the lowest OPP whose capacity covers it, so it resolves to that
/// OPP. Never above `map_util_perf(util)` (so never a higher OPP than Linux's); when no
/// OPP covers the grown utilisation, `map_util_perf(util)` (the top OPP, as in Linux).
pub fn sugov_growth_perf<I>(util: u32, caps: I, horizon_ns: u64) -> u32
where
    I: IntoIterator<Item = Capacity>,
{
    let linux = map_util_perf(util);
    for cap in caps {
        let grown = util_after_running(util, cap, horizon_ns).max(util);
        if grown <= cap.0 {
            return grown.min(linux);
        }
    }
    linux
}

/// Whether a CPU runs within its estimate, the condition of `SUGOV_GROWTH_HEADROOM`: the
/// queued tasks' util_est covers the rq's util_avg (and, under `RUNNABLE_BOOST`, its
/// runnable_avg), so the utilisation is what the tasks reached at the end of their last
/// activations. Otherwise — a new task (util_est 0), one running longer than last time,
/// tasks waiting behind each other — the load is growing past its estimate and the
/// governor keeps Linux's 25 %. Not in Linux.
pub fn within_estimate(cfs: &crate::cpu_util::CfsRqUtil, features: SchedFeatures) -> bool {
    if !features.enabled(Feature::UTIL_EST) {
        return false;
    }
    let mut util = cfs.util_avg.0;
    if features.enabled(Feature::RUNNABLE_BOOST) {
        util = util.max(cfs.runnable_avg.0);
    }
    cfs.util_est.0 >= util
}

/// `sugov_effective_cpu_perf`: headroom on `actual`, capped by `max`, floored by `min`.
pub const fn sugov_effective_cpu_perf(actual: Util, min: Util, max: Util) -> Util {
    let actual = map_util_perf(actual.0);
    let max = if actual < max.0 { actual } else { max.0 };
    Util(if min.0 > max { min.0 } else { max })
}

impl SugovPolicy {
    /// Governor state for `policy` (`sugov_init` + `sugov_start`), with the default
    /// `rate_limit_us` (`cpufreq_policy_transition_delay_us`) and `TICK_NSEC` at HZ=250.
    /// `limits_changed` starts set, as `cpufreq_start_governor` calls `sugov_limits` right
    /// after `sugov_start`: the first update is not rate limited and always resolves a
    /// frequency (without it, a zero utilisation would match the zeroed
    /// `cached_raw_freq` and leave the boot frequency in place).
    pub fn new(policy: &CpufreqPolicy) -> SugovPolicy {
        Self::start(Vec::new(), policy)
    }

    /// Restart the governor on `policy` (`sugov_stop` + `sugov_start` on a governor
    /// switch): the same state as [`SugovPolicy::new`], reusing the per-CPU storage so a
    /// restart does not allocate when the policy's CPUs are unchanged.
    pub fn restart(&mut self, policy: &CpufreqPolicy) {
        let cpus = core::mem::take(&mut self.cpus);
        *self = Self::start(cpus, policy);
    }

    fn start(mut cpus: Vec<SugovCpu>, policy: &CpufreqPolicy) -> SugovPolicy {
        cpus.clear();
        cpus.extend(
            policy
                .cpus
                .iter()
                .take(MAX_POLICY_CPUS)
                .map(|cpu| SugovCpu {
                    cpu,
                    ..SugovCpu::default()
                }),
        );
        SugovPolicy {
            cpus,
            next_freq: Khz(0),
            cached_raw_freq: Khz(0),
            last_freq_update_time: Nanos(0),
            freq_update_delay_ns: policy.transition_delay_us() as u64 * 1000,
            limits_changed: true,
            need_freq_update: false,
            driver_need_update_limits: false,
            tick_ns: DEFAULT_TICK_NSEC,
        }
    }

    /// Set `rate_limit_us` (the sysfs tunable).
    pub fn set_rate_limit_us(&mut self, us: u32) {
        self.freq_update_delay_ns = us as u64 * 1000;
    }

    /// `rate_limit_us`.
    pub fn rate_limit_us(&self) -> u32 {
        (self.freq_update_delay_ns / 1000) as u32
    }

    /// The per-CPU state of `cpu`, if it belongs to the policy.
    pub fn cpu(&self, cpu: CpuId) -> Option<&SugovCpu> {
        self.cpus.iter().find(|c| c.cpu == cpu)
    }

    /// The policy's CPUs.
    pub fn cpus(&self) -> CpuMask {
        CpuMask(self.cpus.iter().fold(0, |m, c| m | 1 << c.cpu.0))
    }

    /// `sugov_limits`: the policy's limits changed; the next update bypasses the rate
    /// limit. ([`CpufreqPolicy::set_limits`] also flags this; [`Self::update`] reads it.)
    pub fn limits(&mut self) {
        self.limits_changed = true;
    }

    /// `cpufreq_update_util` on `cpu` at `now` with `flags`: `sugov_update_shared` for a
    /// multi-CPU policy, `sugov_update_single_freq` for a single-CPU one. `input(c)`
    /// is CPU `c`'s [`RqSnapshot`]; `uclamp_used` is `uclamp_is_used()`. Returns the new frequency to hand to the driver, or
    /// `None` when nothing is to be done (rate limited, unchanged, not schedutil, or
    /// `cpu` is not in the policy).
    #[allow(clippy::too_many_arguments)] // Linux's hook arguments plus the inputs
    pub fn update<F>(
        &mut self,
        policy: &mut CpufreqPolicy,
        now: Nanos,
        cpu: CpuId,
        flags: UpdateFlags,
        features: SchedFeatures,
        uclamp_used: bool,
        mut input: F,
    ) -> Option<Khz>
    where
        F: FnMut(CpuId) -> RqSnapshot,
    {
        if policy.governor() != Governor::Schedutil {
            return None;
        }
        let j = self.cpus.iter().position(|c| c.cpu == cpu)?;
        if policy.take_limits_changed() {
            self.limits_changed = true;
        }
        self.iowait_boost(j, now, flags);
        self.cpus[j].last_update = now;
        let this = input(cpu);
        // ignore_dl_rate_limit
        if this.non_cfs.dl_bw > self.cpus[j].bw_min {
            self.limits_changed = true;
        }
        if !self.should_update_freq(now) {
            return None;
        }
        let max_cap = this.util.capacity_orig;
        let next_f = if self.cpus.len() == 1 {
            let boost = self.iowait_apply(j, now, max_cap);
            self.get_util(j, boost, &this, features, uclamp_used, policy);
            let cached_freq = self.cached_raw_freq;
            let mut next_f = self.get_next_freq(policy, self.cpus[j].util, max_cap);
            if self.hold_freq(j, &this, features, uclamp_used)
                && next_f < self.next_freq
                && !self.need_freq_update
            {
                next_f = self.next_freq;
                self.cached_raw_freq = cached_freq;
            }
            next_f
        } else {
            // sugov_next_freq_shared: the domain follows its busiest CPU.
            let mut util = Util(0);
            for k in 0..self.cpus.len() {
                let inp = if k == j {
                    this
                } else {
                    input(self.cpus[k].cpu)
                };
                let boost = self.iowait_apply(k, now, max_cap);
                self.get_util(k, boost, &inp, features, uclamp_used, policy);
                util = util.max(self.cpus[k].util);
            }
            self.get_next_freq(policy, util, max_cap)
        };
        if !self.update_next_freq(now, next_f) {
            return None;
        }
        Some(next_f)
    }

    /// `sugov_iowait_reset`.
    fn iowait_reset(&mut self, k: usize, now: Nanos, set_iowait_boost: bool) -> bool {
        let c = &mut self.cpus[k];
        let delta = now.0 as i64 - c.last_update.0 as i64;
        if delta <= self.tick_ns as i64 {
            return false;
        }
        c.iowait_boost = if set_iowait_boost {
            IOWAIT_BOOST_MIN
        } else {
            0
        };
        c.iowait_boost_pending = set_iowait_boost;
        true
    }

    /// `sugov_iowait_boost`: on every update; starts or doubles the boost on an iowait
    /// enqueue, resets it after more than a tick without an update.
    fn iowait_boost(&mut self, k: usize, now: Nanos, flags: UpdateFlags) {
        let set = flags.iowait();
        if self.cpus[k].iowait_boost != 0 && self.iowait_reset(k, now, set) {
            return;
        }
        if !set {
            return;
        }
        let c = &mut self.cpus[k];
        if c.iowait_boost_pending {
            return;
        }
        c.iowait_boost_pending = true;
        c.iowait_boost = if c.iowait_boost != 0 {
            (c.iowait_boost << 1).min(SCHED_CAPACITY_SCALE)
        } else {
            IOWAIT_BOOST_MIN
        };
    }

    /// `sugov_iowait_apply`: the boost to apply now (capacity units); halves it when no
    /// new iowait enqueue arrived since the last application.
    fn iowait_apply(&mut self, k: usize, now: Nanos, max_cap: Capacity) -> u32 {
        if self.cpus[k].iowait_boost == 0 {
            return 0;
        }
        if self.iowait_reset(k, now, false) {
            return 0;
        }
        let c = &mut self.cpus[k];
        if !c.iowait_boost_pending {
            c.iowait_boost >>= 1;
            if c.iowait_boost < IOWAIT_BOOST_MIN {
                c.iowait_boost = 0;
                return 0;
            }
        }
        c.iowait_boost_pending = false;
        ((c.iowait_boost as u64 * max_cap.0 as u64) >> SCHED_CAPACITY_SHIFT) as u32
    }

    /// `sugov_get_util`: `cpu_util_cfs_boost` (plain `cpu_util_cfs` when
    /// `RUNNABLE_BOOST` is off) through `effective_cpu_util`, the iowait boost, then
    /// `sugov_effective_cpu_perf` — with `SUGOV_GROWTH_HEADROOM` on, the headroom of
    /// [`sugov_growth_perf`] over `policy`'s OPPs and [`SugovPolicy::growth_horizon_ns`]
    /// instead of the flat 25 %.
    fn get_util(
        &mut self,
        k: usize,
        boost: u32,
        inp: &RqSnapshot,
        features: SchedFeatures,
        uclamp_used: bool,
        policy: &CpufreqPolicy,
    ) {
        let cfs = cpu_util_cfs_boost(&inp.util, features);
        let eff = effective_cpu_util(
            inp.util.capacity_orig,
            cfs,
            &inp.non_cfs,
            inp.rq_clamp,
            uclamp_used,
        );
        let util = Util(eff.util.0.max(boost));
        let perf = if features.enabled(Feature::SUGOV_GROWTH_HEADROOM)
            && within_estimate(&inp.util.cfs, features)
        {
            let max_cap = inp.util.capacity_orig;
            let fmax = policy.cpuinfo_max_freq.0.max(1) as u64;
            let caps = policy
                .table()
                .iter()
                .map(|e| Capacity((max_cap.0 as u64 * e.frequency.0 as u64 / fmax) as u32));
            let actual = sugov_growth_perf(util.0, caps, self.growth_horizon_ns());
            Util(actual.min(eff.max.0).max(eff.min.0))
        } else {
            sugov_effective_cpu_perf(util, eff.min, eff.max)
        };
        let c = &mut self.cpus[k];
        c.bw_min = eff.min;
        c.util = perf;
    }

    /// The horizon of `SUGOV_GROWTH_HEADROOM`: how long a running CPU may go before the
    /// governor looks again — the next tick (`TICK_NSEC`), or the rate limit if longer.
    pub fn growth_horizon_ns(&self) -> u64 {
        self.tick_ns.max(self.freq_update_delay_ns)
    }

    /// `get_next_freq`.
    fn get_next_freq(&mut self, policy: &CpufreqPolicy, util: Util, max: Capacity) -> Khz {
        let freq = map_util_freq(util.0, policy.cpuinfo_max_freq, max);
        if freq == self.cached_raw_freq && !self.need_freq_update {
            return self.next_freq;
        }
        self.cached_raw_freq = freq;
        policy.resolve_freq(freq)
    }

    /// `sugov_should_update_freq` (v6.12).
    fn should_update_freq(&mut self, now: Nanos) -> bool {
        if self.limits_changed {
            self.limits_changed = false;
            self.need_freq_update = true;
            return true;
        }
        let delta = now.0 as i64 - self.last_freq_update_time.0 as i64;
        delta >= self.freq_update_delay_ns as i64
    }

    /// `sugov_update_next_freq` (v6.12).
    fn update_next_freq(&mut self, now: Nanos, next_freq: Khz) -> bool {
        if self.need_freq_update {
            self.need_freq_update = self.driver_need_update_limits;
        } else if self.next_freq == next_freq {
            return false;
        }
        self.next_freq = next_freq;
        self.last_freq_update_time = now;
        true
    }

    /// `sugov_hold_freq` (v6.12): keep the frequency of a CPU that has not been idle
    /// since the last update, unless uclamp max caps it.
    fn hold_freq(
        &mut self,
        k: usize,
        inp: &RqSnapshot,
        features: SchedFeatures,
        uclamp_used: bool,
    ) -> bool {
        // uclamp_rq_is_capped
        let rq_util = cpu_util_cfs(&inp.util, features).0 + inp.non_cfs.rt.0;
        let max_util = inp.rq_clamp.max.0;
        if uclamp_used && max_util != SCHED_CAPACITY_SCALE && rq_util >= max_util {
            return false;
        }
        let c = &mut self.cpus[k];
        let ret = inp.idle_calls == c.saved_idle_calls;
        c.saved_idle_calls = inp.idle_calls;
        ret
    }
}
