//! cpufreq policies: one per performance domain, with user limits, OPP resolution,
//! governors and statistics. The driver interface and the emulated driver live in
//! [`driver`]; [`policies::CpufreqCore`] ties a board's policies, their schedutil state
//! and the driver together for the kernel and the simulator.
//!
//! Re-derives Linux's `drivers/cpufreq/cpufreq.c` (`cpufreq_set_policy`,
//! `cpufreq_driver_resolve_freq`/`__resolve_freq`, `cpufreq_policy_transition_delay_us`
//! as of v6.12), `include/linux/cpufreq.h` (`cpufreq_frequency_table_target` and the
//! `cpufreq_table_find_index_{al,ah,ac}` helpers with `CPUFREQ_RELATION_E`,
//! `cpufreq_policy_apply_limits`), `freq_table.c` (`cpufreq_frequency_table_verify`),
//! `cpufreq_stats.c`, the `performance`/`powersave` governors, and
//! `arch_scale_freq_capacity` (`drivers/base/arch_topology.c`).
//!
//! Deliberate differences from Linux:
//! - Limits are one (min, max) pair set through [`CpufreqPolicy::set_limits`] instead of
//!   the freq-QoS aggregation of several requesters; `min > max` is an error (Linux's QoS
//!   layer silently lets max win). Values outside `[cpuinfo.min_freq,
//!   cpuinfo.max_freq]` are clamped into it (as `cpufreq_verify_within_cpu_limits`).
//! - On a limit change the governor's answer comes back as a value (the frequency to
//!   apply now, if any) instead of a call into the driver; schedutil additionally sees
//!   `limits_changed` on its next update. Unlike Linux (which does this for
//!   slow-switch drivers only) we always pull `cur` into the new limits at once.
//! - Statistics are kept in nanoseconds rather than jiffies.
//! - Only ascending, sorted tables exist (the OPP table is validated to be strictly
//!   increasing), so there is no unsorted or descending search.
//! - The frequency table and the statistics are heap slices sized from the domain's OPP
//!   count (as Linux's `kcalloc`ed `freq_table` and `cpufreq_stats`), so a policy is a
//!   few hundred bytes and is never built at its maximum size on a stack.

pub mod driver;
pub mod policies;

use alloc::boxed::Box;
use alloc::vec;
use core::fmt;

use crate::em::{perf_domain_cpus, validate_opps, EmError, EmPerfDomain};
use crate::topology::BoardDesc;
use crate::types::{CpuMask, Khz, Nanos};

/// The governor driving a policy (`scaling_governor`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Governor {
    /// `schedutil` (the default): frequency follows utilisation, see [`crate::schedutil`].
    #[default]
    Schedutil,
    /// `performance`: always `policy->max`.
    Performance,
    /// `powersave`: always `policy->min`.
    Powersave,
}

/// How a target frequency maps onto the table (`CPUFREQ_RELATION_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relation {
    /// `CPUFREQ_RELATION_L`: lowest frequency at or above the target.
    L,
    /// `CPUFREQ_RELATION_H`: highest frequency at or below the target.
    H,
    /// `CPUFREQ_RELATION_C`: closest frequency (ties go down).
    C,
}

/// One frequency table entry (`struct cpufreq_frequency_table`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FreqEntry {
    /// `frequency`.
    pub frequency: Khz,
    /// `CPUFREQ_INEFFICIENT_FREQ`: set from the energy model.
    pub inefficient: bool,
}

/// `cpufreq_stats`: time in state per table index, transitions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpufreqStats {
    /// One entry per table index.
    time_in_state_ns: Box<[u64]>,
    /// `total_trans`.
    pub total_trans: u64,
    /// `trans_table[from * max_state + to]`, row-major as Linux's flat table.
    trans_table: Box<[u32]>,
    max_state: usize,
    last_index: usize,
    last_time: Nanos,
}

/// One cpufreq policy (`struct cpufreq_policy`), i.e. one performance domain.
///
/// Not `Copy`: the table and the statistics are on the heap; `clone` copies them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpufreqPolicy {
    /// The performance-domain index on the board.
    pub pd: usize,
    /// `policy->cpus`.
    pub cpus: CpuMask,
    /// `freq_table`: one entry per OPP, never empty.
    table: Box<[FreqEntry]>,
    /// `cpuinfo.min_freq`.
    pub cpuinfo_min_freq: Khz,
    /// `cpuinfo.max_freq` (also the frequency-invariance reference, `arch_scale_freq_ref`).
    pub cpuinfo_max_freq: Khz,
    /// `cpuinfo.transition_latency`, in ns.
    pub transition_latency_ns: u64,
    /// `transition_delay_us`: an explicit rate limit that overrides the latency rule.
    pub transition_delay_us: Option<u32>,
    min: Khz,
    max: Khz,
    cur: Khz,
    governor: Governor,
    efficiencies_available: bool,
    limits_changed: bool,
    stats: CpufreqStats,
}

/// Why a cpufreq request was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpufreqError {
    /// The OPP table is unusable (empty, not strictly increasing, ...).
    Table(EmError),
    /// Domain `pd` does not exist on the board.
    NoSuchDomain { pd: usize },
    /// Domain `pd` has no CPUs.
    NoCpus { pd: usize },
    /// The requested `scaling_min_freq` is above `scaling_max_freq`.
    MinAboveMax { pd: usize, min: Khz, max: Khz },
    /// The driver refused or failed the transition to `freq`.
    DriverFailed { pd: usize, freq: Khz },
}

impl fmt::Display for CpufreqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            CpufreqError::Table(e) => write!(f, "cpufreq: {e}"),
            CpufreqError::NoSuchDomain { pd } => write!(f, "cpufreq: no perf domain {pd}"),
            CpufreqError::NoCpus { pd } => write!(f, "cpufreq: perf domain {pd} has no CPUs"),
            CpufreqError::MinAboveMax { pd, min, max } => write!(
                f,
                "cpufreq policy {pd}: scaling_min_freq {} kHz above scaling_max_freq {} kHz",
                min.0, max.0
            ),
            CpufreqError::DriverFailed { pd, freq } => write!(
                f,
                "cpufreq policy {pd}: driver failed to set {} kHz",
                freq.0
            ),
        }
    }
}

impl From<EmError> for CpufreqError {
    fn from(e: EmError) -> Self {
        CpufreqError::Table(e)
    }
}

impl CpufreqStats {
    /// Statistics for a table of `max_state` entries (`cpufreq_stats_create_table`).
    fn new(max_state: usize, index: usize, now: Nanos) -> Self {
        CpufreqStats {
            time_in_state_ns: vec![0; max_state].into_boxed_slice(),
            total_trans: 0,
            trans_table: vec![0; max_state * max_state].into_boxed_slice(),
            max_state,
            last_index: index,
            last_time: now,
        }
    }

    fn account(&mut self, now: Nanos) {
        let delta = now.0.saturating_sub(self.last_time.0);
        self.time_in_state_ns[self.last_index] += delta;
        self.last_time = Nanos(self.last_time.0.max(now.0));
    }

    fn record_transition(&mut self, new_index: usize, now: Nanos) {
        self.account(now);
        if new_index != self.last_index {
            self.trans_table[self.last_index * self.max_state + new_index] += 1;
            self.total_trans += 1;
            self.last_index = new_index;
        }
    }
}

impl CpufreqPolicy {
    /// The policy for performance domain `pd` of `board`, starting at `cpuinfo.max_freq`
    /// (the boot frequency of our emulated boards) with limits wide open and `now` as
    /// the statistics' start.
    pub fn new(board: &BoardDesc, pd: usize, now: Nanos) -> Result<Self, CpufreqError> {
        let desc = board
            .perf_domains
            .get(pd)
            .ok_or(CpufreqError::NoSuchDomain { pd })?;
        let cpus = perf_domain_cpus(board, pd);
        if cpus.weight() == 0 {
            return Err(CpufreqError::NoCpus { pd });
        }
        validate_opps(pd, desc.opps)?;
        // validate_opps: 1..=`MAX_PERF_STATES` entries, strictly increasing.
        let table: Box<[FreqEntry]> = desc
            .opps
            .iter()
            .map(|opp| FreqEntry {
                frequency: opp.freq,
                inefficient: false,
            })
            .collect();
        let nr = table.len();
        let fmin = table[0].frequency;
        let fmax = table[nr - 1].frequency;
        Ok(CpufreqPolicy {
            pd,
            cpus,
            table,
            cpuinfo_min_freq: fmin,
            cpuinfo_max_freq: fmax,
            transition_latency_ns: desc.transition_latency_ns,
            transition_delay_us: None,
            min: fmin,
            max: fmax,
            cur: fmax,
            governor: Governor::Schedutil,
            efficiencies_available: false,
            limits_changed: false,
            stats: CpufreqStats::new(nr, nr - 1, now),
        })
    }

    /// The frequency table.
    pub fn table(&self) -> &[FreqEntry] {
        &self.table
    }

    /// `policy->min` (`scaling_min_freq`), always a table frequency.
    pub fn min(&self) -> Khz {
        self.min
    }

    /// `policy->max` (`scaling_max_freq`), always a table frequency.
    pub fn max(&self) -> Khz {
        self.max
    }

    /// `policy->cur`: the frequency the hardware runs at.
    pub fn cur(&self) -> Khz {
        self.cur
    }

    /// The governor.
    pub fn governor(&self) -> Governor {
        self.governor
    }

    /// `policy->efficiencies_available`.
    pub fn efficiencies_available(&self) -> bool {
        self.efficiencies_available
    }

    /// Mark the frequencies the energy model found inefficient
    /// (`em_cpufreq_update_efficiencies` → `cpufreq_table_set_inefficient`); returns
    /// how many table entries were marked.
    pub fn set_efficiencies(&mut self, em: &EmPerfDomain) -> usize {
        let mut found = 0;
        for st in em.states().iter().filter(|s| s.inefficient) {
            if let Some(e) = self.table.iter_mut().find(|e| e.frequency == st.frequency) {
                e.inefficient = true;
                found += 1;
            }
        }
        if found > 0 {
            self.efficiencies_available = true;
        }
        found
    }

    /// Turn efficient-frequency selection off or back on (Linux does this with
    /// `cpufreq_disable_fast_switch`-style per-driver knobs; here it is a test hook).
    pub fn set_efficiencies_available(&mut self, on: bool) {
        self.efficiencies_available = on && self.table().iter().any(|e| e.inefficient);
    }

    /// `cpufreq_frequency_table_target`: the table index for `target` under
    /// `relation`, with inefficient frequencies skipped when `efficient` is asked and
    /// the policy has efficiencies. The target is first clamped to `[min, max]`; if
    /// skipping inefficiencies lands outside the limits the search is retried without.
    pub fn frequency_table_target(
        &self,
        target: Khz,
        relation: Relation,
        efficient: bool,
    ) -> usize {
        let target = Khz(target.0.clamp(self.min.0, self.max.0));
        let mut efficiencies = efficient && self.efficiencies_available;
        loop {
            let idx = self.find_index(target, relation, efficiencies);
            let f = self.table[idx].frequency;
            if (self.min..=self.max).contains(&f) || !efficiencies {
                return idx;
            }
            efficiencies = false;
        }
    }

    /// `cpufreq_driver_resolve_freq` (v6.12): clamp `target` to `[min, max]` and return
    /// the lowest table frequency at or above it, skipping inefficient frequencies when
    /// the policy has them (`CPUFREQ_RELATION_LE`). A target outside the table is
    /// clamped into it (documented clamp, never an error).
    pub fn resolve_freq(&self, target: Khz) -> Khz {
        self.table[self.frequency_table_target(target, Relation::L, true)].frequency
    }

    /// The table frequency for `target` under `relation`, without efficiency skipping
    /// (what `__cpufreq_driver_target` resolves for the performance/powersave governors).
    pub fn resolve_freq_relation(&self, target: Khz, relation: Relation) -> Khz {
        self.table[self.frequency_table_target(target, relation, false)].frequency
    }

    /// Set `scaling_min_freq`/`scaling_max_freq` (`cpufreq_set_policy`). `min > max` is
    /// an error; values are clamped into `[cpuinfo.min_freq, cpuinfo.max_freq]`; if no
    /// table frequency lies within `[min, max]`, `max` is raised to the next one above
    /// (`cpufreq_frequency_table_verify`); then `min` resolves up and `max` down to table
    /// frequencies. Returns the frequency the governor wants applied now, if `cur` must
    /// change (performance → `max`, powersave → `min`, schedutil → `cur` pulled into the
    /// limits, as `cpufreq_policy_apply_limits`). Schedutil also sees `limits_changed`.
    pub fn set_limits(&mut self, min: Khz, max: Khz) -> Result<Option<Khz>, CpufreqError> {
        if min > max {
            return Err(CpufreqError::MinAboveMax {
                pd: self.pd,
                min,
                max,
            });
        }
        let lo = self.cpuinfo_min_freq.0;
        let hi = self.cpuinfo_max_freq.0;
        let min = min.0.clamp(lo, hi);
        let mut max = max.0.clamp(lo, hi);
        let table = &self.table;
        if !table.iter().any(|e| (min..=max).contains(&e.frequency.0)) {
            // There is always one above: min ≤ max ≤ cpuinfo.max_freq, a table entry.
            max = table
                .iter()
                .map(|e| e.frequency.0)
                .find(|&f| f > max)
                .unwrap_or(hi);
        }
        let new_min = table
            .iter()
            .map(|e| e.frequency)
            .find(|f| f.0 >= min)
            .unwrap_or(self.cpuinfo_max_freq);
        let new_max = table
            .iter()
            .rev()
            .map(|e| e.frequency)
            .find(|f| f.0 <= max)
            .unwrap_or(self.cpuinfo_min_freq);
        self.min = new_min;
        self.max = new_max;
        self.limits_changed = true;
        Ok(self.governor_limits())
    }

    /// Switch governors (`cpufreq_set_policy` → `cpufreq_start_governor`); returns the
    /// frequency the new governor wants now, if it differs from `cur`.
    pub fn set_governor(&mut self, governor: Governor) -> Option<Khz> {
        self.governor = governor;
        self.limits_changed = true;
        self.governor_limits()
    }

    /// `sugov_limits` → `limits_changed`: read and clear (schedutil calls this).
    pub fn take_limits_changed(&mut self) -> bool {
        core::mem::take(&mut self.limits_changed)
    }

    /// `cpufreq_policy_transition_delay_us` (v6.12): the default schedutil
    /// `rate_limit_us`: `transition_delay_us` if set, else 1.5 × the transition latency
    /// in µs, or 1000 µs when the latency is unknown (0).
    pub fn transition_delay_us(&self) -> u32 {
        if let Some(d) = self.transition_delay_us {
            return d;
        }
        let lat = (self.transition_latency_ns / 1000).min(u32::MAX as u64 / 2) as u32;
        if lat > 0 {
            lat + lat / 2
        } else {
            1000
        }
    }

    /// The frequency the driver found the hardware at when it started (Linux `cpufreq_online`:
    /// `policy->cur = cpufreq_driver->get()`): `cur` becomes `freq` (pulled into the table as
    /// [`Self::freq_transition`] does) and the statistics restart at `now` in that state,
    /// counting no transition.
    pub fn init_cur(&mut self, freq: Khz, now: Nanos) {
        let idx = self
            .table
            .iter()
            .position(|e| e.frequency >= freq)
            .unwrap_or(self.table.len() - 1);
        self.stats = CpufreqStats::new(self.table.len(), idx, now);
        self.cur = freq;
    }

    /// `cpufreq_policy_transition_delay_us` of Linux v4.14 to v6.7 (the seed era):
    /// `transition_delay_us` if set, else `min(latency_us × 1000, 10 000)` µs, or 1000 µs
    /// (`LATENCY_MULTIPLIER`) when the latency is unknown.
    pub fn transition_delay_us_legacy(&self) -> u32 {
        if let Some(d) = self.transition_delay_us {
            return d;
        }
        let lat = (self.transition_latency_ns / 1000).min(u32::MAX as u64) as u32;
        if lat > 0 {
            lat.saturating_mul(1000).min(10_000)
        } else {
            1000
        }
    }

    /// The driver has switched the hardware to `freq` at `now`
    /// (`cpufreq_freq_transition_end` + `cpufreq_stats_record_transition`). A frequency
    /// that is not in the table is recorded against the nearest entry at or above it.
    pub fn freq_transition(&mut self, freq: Khz, now: Nanos) {
        let idx = self
            .table
            .iter()
            .position(|e| e.frequency >= freq)
            .unwrap_or(self.table.len() - 1);
        self.stats.record_transition(idx, now);
        self.cur = freq;
    }

    /// The statistics, with time in the current state accounted up to `now` (a copy:
    /// allocates, so not for scheduler paths).
    pub fn stats(&self, now: Nanos) -> CpufreqStats {
        let mut s = self.stats.clone();
        s.account(now);
        s
    }

    /// `arch_scale_freq_capacity` for the policy's CPUs: `cur × 1024 / cpuinfo.max_freq`
    /// (the arm64 AMU/cpufreq frequency-invariance factor, `freq_scale`).
    pub fn arch_scale_freq_capacity(&self) -> u32 {
        crate::topology::arch_scale_freq_capacity(self.cur, self.cpuinfo_max_freq)
    }

    fn governor_limits(&self) -> Option<Khz> {
        let want = match self.governor {
            Governor::Performance => self.max,
            Governor::Powersave => self.min,
            Governor::Schedutil => Khz(self.cur.0.clamp(self.min.0, self.max.0)),
        };
        (want != self.cur).then_some(want)
    }

    fn find_index(&self, target: Khz, relation: Relation, efficiencies: bool) -> usize {
        let entries = self
            .table
            .iter()
            .enumerate()
            .filter(|(_, e)| !(efficiencies && e.inefficient));
        let mut best: Option<usize> = None;
        for (idx, e) in entries {
            let freq = e.frequency;
            match relation {
                // cpufreq_table_find_index_al
                Relation::L => {
                    if freq >= target {
                        return idx;
                    }
                    best = Some(idx);
                }
                // cpufreq_table_find_index_ah / _ac
                Relation::H | Relation::C => {
                    if freq == target {
                        return idx;
                    }
                    if freq < target {
                        best = Some(idx);
                        continue;
                    }
                    let Some(b) = best else { return idx };
                    if relation == Relation::C
                        && target.0 - self.table[b].frequency.0 > freq.0 - target.0
                    {
                        return idx;
                    }
                    return b;
                }
            }
        }
        // The top entry is never inefficient, so `best` is set whenever the table is
        // non-empty (validated at construction).
        best.unwrap_or(self.table.len() - 1)
    }
}

impl CpufreqStats {
    /// Time spent at table index `idx`, in ns.
    pub fn time_in_state_ns(&self, idx: usize) -> u64 {
        self.time_in_state_ns.get(idx).copied().unwrap_or(0)
    }

    /// `trans_table[from][to]`: transitions from table index `from` to `to` (0 for an
    /// index outside the table).
    pub fn trans_table(&self, from: usize, to: usize) -> u32 {
        if from >= self.max_state || to >= self.max_state {
            return 0;
        }
        self.trans_table[from * self.max_state + to]
    }
}
