//! The energy model: per-performance-domain tables of power, performance and cost.
//!
//! Re-derives Linux's `kernel/power/energy_model.c` (`em_create_perf_table`,
//! `em_init_performance`, `em_compute_costs`), `include/linux/energy_model.h`
//! (`em_cpu_energy`, `em_pd_get_efficient_state`) as of v6.9–v6.12, and the DT power
//! callback `dev_pm_opp_calc_power` (`drivers/opp/of.c`, `_get_power` before v6.9).
//!
//! Deliberate differences from Linux:
//! - The table is built once from the board description ([`PerfDomainDesc`] plus the
//!   CPUs' `dynamic-power-coefficient` and `capacity_orig`); there is no RCU-swapped
//!   runtime-modifiable table and no artificial (`get_cost` callback) domain.
//! - Linux drops a performance domain with a warning when the DT power callback fails;
//!   we return an [`EmError`] naming the domain, the CPU or the OPP index, and let the
//!   caller decide. A *missing* coefficient is the documented "no energy model" case
//!   ([`EnergyModel::from_board`] stores `None` for that domain, so EAS stays off for
//!   it, as `sched_is_eas_possible` would); a coefficient of *zero* is an error.
//! - Linux reads the coefficient of the policy's first CPU (`policy->cpu`) only; so do
//!   we, and other CPUs' coefficients in the domain are ignored (HiKey's DT carries it on
//!   cpu0 only).
//! - The efficient-state flag `EM_PERF_DOMAIN_SKIP_INEFFICIENCIES` is set when at least
//!   one state is inefficient, as `em_cpufreq_update_efficiencies` does once cpufreq
//!   has accepted the inefficient frequencies (ours always does).
//! - The state table is a heap slice sized from the domain's OPP count and the board's
//!   model a vector sized from its domain count (Linux `kzalloc`s both too), so neither
//!   is built at [`MAX_PERF_STATES`]/[`MAX_PERF_DOMAINS`] size on a stack.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;

use crate::topology::{BoardDesc, PerfDomainDesc, Topology};
use crate::types::{Capacity, CpuId, CpuMask, Khz, MicroWatt, Util, MAX_CPUS};

/// The most OPPs a performance domain may have (boards have at most 5).
pub const MAX_PERF_STATES: usize = 16;
pub use crate::topology::MAX_PERF_DOMAINS;
/// `EM_MAX_POWER`: 64 W, the largest per-state power Linux accepts (µW).
pub const EM_MAX_POWER: MicroWatt = MicroWatt(64_000_000);

/// One performance state (`struct em_perf_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct EmPerfState {
    /// `frequency`.
    pub frequency: Khz,
    /// `power`, in µW (`EM_PERF_DOMAIN_MICROWATTS`).
    pub power: MicroWatt,
    /// `performance`: `capacity_orig × frequency / fmax`, on the capacity scale.
    pub performance: Capacity,
    /// `cost`: `power × 10 / performance` (v6.9+).
    pub cost: u64,
    /// `EM_PERF_STATE_INEFFICIENT`: a higher state has a lower or equal cost.
    pub inefficient: bool,
}

/// A performance domain's energy model (`struct em_perf_domain` + its table).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmPerfDomain {
    /// `em_table->state`: `nr_perf_states` entries, ascending in frequency, never empty.
    states: Box<[EmPerfState]>,
    /// `min_perf_state`: lowest state `em_cpu_energy` may pick (frequency QoS).
    min_perf_state: usize,
    /// `max_perf_state`: highest state `em_cpu_energy` may pick.
    max_perf_state: usize,
    /// `EM_PERF_DOMAIN_SKIP_INEFFICIENCIES`.
    pub skip_inefficiencies: bool,
    /// The domain's CPUs (`em_span_cpus`).
    pub cpus: CpuMask,
}

/// Why an energy model could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EmError {
    /// The domain has no OPPs.
    EmptyTable { pd: usize },
    /// The domain has more OPPs than [`MAX_PERF_STATES`].
    TooManyStates { pd: usize, nr: usize },
    /// OPP `index` does not have a higher frequency than OPP `index - 1` (or is 0 kHz).
    NonIncreasingFrequency { pd: usize, index: usize, freq: Khz },
    /// OPP `index` has a voltage below 1 mV.
    ZeroVoltage { pd: usize, index: usize },
    /// No CPU of the board belongs to the domain.
    NoCpus { pd: usize },
    /// The domain index is not one of the board's domains.
    NoSuchDomain { pd: usize },
    /// The board has more performance domains than [`MAX_PERF_DOMAINS`].
    TooManyDomains { nr: usize },
    /// `capacity_orig` was not given for `cpu`, or is 0.
    BadCapacity { cpu: CpuId },
    /// `cpu` (the domain's first CPU) has no `dynamic-power-coefficient`: no EM.
    MissingPowerCoefficient { cpu: CpuId },
    /// `cpu` (the domain's first CPU) has `dynamic-power-coefficient = <0>`.
    ZeroPowerCoefficient { cpu: CpuId },
    /// OPP `index`'s power is 0 or above [`EM_MAX_POWER`] (Linux: "EM: invalid power").
    InvalidPower {
        pd: usize,
        index: usize,
        power: MicroWatt,
    },
    /// OPP `index`'s performance rounds to 0, so its cost is undefined.
    ZeroPerformance { pd: usize, index: usize },
}

/// The energy model of a whole board: one optional domain per performance domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnergyModel {
    /// One per performance domain of the board.
    pds: Vec<Option<EmPerfDomain>>,
}

impl fmt::Display for EmError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            EmError::EmptyTable { pd } => write!(f, "perf domain {pd}: empty OPP table"),
            EmError::TooManyStates { pd, nr } => write!(
                f,
                "perf domain {pd}: {nr} OPPs, at most {MAX_PERF_STATES} supported"
            ),
            EmError::NonIncreasingFrequency { pd, index, freq } => write!(
                f,
                "perf domain {pd}: OPP {index} ({} kHz) is not above the previous OPP",
                freq.0
            ),
            EmError::ZeroVoltage { pd, index } => {
                write!(f, "perf domain {pd}: OPP {index} has a zero voltage")
            }
            EmError::NoCpus { pd } => write!(f, "perf domain {pd}: no CPUs"),
            EmError::NoSuchDomain { pd } => write!(f, "perf domain {pd} does not exist"),
            EmError::TooManyDomains { nr } => {
                write!(f, "{nr} perf domains, at most {MAX_PERF_DOMAINS} supported")
            }
            EmError::BadCapacity { cpu } => {
                write!(f, "cpu{}: capacity_orig missing or zero", cpu.0)
            }
            EmError::MissingPowerCoefficient { cpu } => write!(
                f,
                "cpu{}: no dynamic-power-coefficient (no energy model)",
                cpu.0
            ),
            EmError::ZeroPowerCoefficient { cpu } => {
                write!(f, "cpu{}: dynamic-power-coefficient is 0", cpu.0)
            }
            EmError::InvalidPower { pd, index, power } => write!(
                f,
                "perf domain {pd}: OPP {index} power {} uW outside 1..={}",
                power.0, EM_MAX_POWER.0
            ),
            EmError::ZeroPerformance { pd, index } => {
                write!(f, "perf domain {pd}: OPP {index} has zero performance")
            }
        }
    }
}

/// The CPUs of performance domain `pd` of `board` (`policy->related_cpus`).
pub fn perf_domain_cpus(board: &BoardDesc, pd: usize) -> CpuMask {
    board
        .cpus
        .iter()
        .enumerate()
        .filter(|(i, c)| c.perf_domain as usize == pd && *i < MAX_CPUS)
        .map(|(i, _)| CpuId(i as u16))
        .collect()
}

/// The DT power callback (`dev_pm_opp_calc_power`): `µW = C × mV² × MHz / 10⁶`, with
/// the voltage truncated to mV and the frequency to MHz first, as Linux does.
/// Computed in 128 bits and saturated, so absurd inputs give a huge power (rejected as
/// above [`EM_MAX_POWER`]) rather than an overflow.
pub const fn dt_opp_power(coefficient: u32, freq: Khz, voltage_uv: u32) -> MicroWatt {
    let mv = (voltage_uv / 1000) as u128;
    let mhz = (freq.0 / 1000) as u128;
    let uw = coefficient as u128 * mv * mv * mhz / 1_000_000;
    MicroWatt(if uw > u64::MAX as u128 {
        u64::MAX
    } else {
        uw as u64
    })
}

/// Check an OPP table: non-empty, at most [`MAX_PERF_STATES`], frequencies strictly
/// increasing and non-zero. Shared with [`crate::cpufreq`].
pub fn validate_opps(pd: usize, opps: &[crate::topology::OppDesc]) -> Result<(), EmError> {
    if opps.is_empty() {
        return Err(EmError::EmptyTable { pd });
    }
    if opps.len() > MAX_PERF_STATES {
        return Err(EmError::TooManyStates { pd, nr: opps.len() });
    }
    let mut prev = 0;
    for (index, opp) in opps.iter().enumerate() {
        if opp.freq.0 <= prev {
            return Err(EmError::NonIncreasingFrequency {
                pd,
                index,
                freq: opp.freq,
            });
        }
        prev = opp.freq.0;
    }
    Ok(())
}

impl EmPerfDomain {
    /// Build domain `pd`'s table (`em_create_perf_table` + `em_init_performance` +
    /// `em_compute_costs`). `capacity_orig[n]` is logical CPU n's capacity; the domain's
    /// first CPU gives both the coefficient and `max_cap`, as in Linux.
    pub fn new(
        board: &BoardDesc,
        pd: usize,
        capacity_orig: &[Capacity],
    ) -> Result<EmPerfDomain, EmError> {
        let desc: &PerfDomainDesc = board
            .perf_domains
            .get(pd)
            .ok_or(EmError::NoSuchDomain { pd })?;
        let cpus = perf_domain_cpus(board, pd);
        let first = cpus.first().ok_or(EmError::NoCpus { pd })?;
        let max_cap = match capacity_orig.get(first.index()) {
            Some(&c) if c.0 > 0 => c,
            _ => return Err(EmError::BadCapacity { cpu: first }),
        };
        let coefficient = match board.cpus[first.index()].dynamic_power_coefficient {
            None => return Err(EmError::MissingPowerCoefficient { cpu: first }),
            Some(0) => return Err(EmError::ZeroPowerCoefficient { cpu: first }),
            Some(c) => c,
        };
        Self::from_opps(pd, desc.opps, coefficient, max_cap, cpus)
    }

    /// Build a table from raw OPPs (for tests and for callers without a board).
    pub fn from_opps(
        pd: usize,
        opps: &[crate::topology::OppDesc],
        coefficient: u32,
        max_cap: Capacity,
        cpus: CpuMask,
    ) -> Result<EmPerfDomain, EmError> {
        validate_opps(pd, opps)?;
        let nr = opps.len();
        let mut states = alloc::vec![EmPerfState::default(); nr].into_boxed_slice();
        let fmax = opps[nr - 1].freq.0 as u64;
        for (index, (opp, st)) in opps.iter().zip(states.iter_mut()).enumerate() {
            if opp.voltage.0 < 1000 {
                return Err(EmError::ZeroVoltage { pd, index });
            }
            let power = dt_opp_power(coefficient, opp.freq, opp.voltage.0);
            if power.0 == 0 || power > EM_MAX_POWER {
                return Err(EmError::InvalidPower { pd, index, power });
            }
            let performance = max_cap.0 as u64 * opp.freq.0 as u64 / fmax;
            if performance == 0 {
                return Err(EmError::ZeroPerformance { pd, index });
            }
            *st = EmPerfState {
                frequency: opp.freq,
                power,
                performance: Capacity(performance as u32),
                cost: 0,
                inefficient: false,
            };
        }
        // em_compute_costs: scan from the top; a state whose cost is not strictly
        // below every higher state's is inefficient.
        let mut prev_cost = u64::MAX;
        let mut any_inefficient = false;
        for st in states.iter_mut().rev() {
            st.cost = st.power.0 * 10 / st.performance.0 as u64;
            if st.cost >= prev_cost {
                st.inefficient = true;
                any_inefficient = true;
            } else {
                prev_cost = st.cost;
            }
        }
        Ok(EmPerfDomain {
            states,
            min_perf_state: 0,
            max_perf_state: nr - 1,
            skip_inefficiencies: any_inefficient,
            cpus,
        })
    }

    /// The table, ascending in frequency.
    pub fn states(&self) -> &[EmPerfState] {
        &self.states
    }

    /// `nr_perf_states`.
    pub fn nr_perf_states(&self) -> usize {
        self.states.len()
    }

    /// Restrict the states `em_cpu_energy` may pick to those within `[min, max]`
    /// (`em_update_performance_limits`): `min_perf_state` is the lowest state at or
    /// above `min`, `max_perf_state` the highest at or below `max`. Out-of-range or
    /// crossed limits are clamped to the table and never leave an empty range.
    pub fn update_performance_limits(&mut self, min: Khz, max: Khz) {
        let st = self.states();
        let max_idx = st.iter().rposition(|s| s.frequency <= max).unwrap_or(0);
        let min_idx = st
            .iter()
            .position(|s| s.frequency >= min)
            .unwrap_or(self.states.len() - 1);
        self.max_perf_state = max_idx;
        self.min_perf_state = min_idx.min(max_idx);
    }

    /// `em_pd_get_efficient_state`: the lowest state in `[min_perf_state,
    /// max_perf_state]` whose performance covers `max_util`, skipping inefficient
    /// states when the domain skips them; the highest allowed state otherwise.
    pub fn efficient_state(&self, max_util: Util) -> usize {
        for i in self.min_perf_state..=self.max_perf_state {
            let ps = &self.states[i];
            if ps.performance.0 >= max_util.0 {
                if self.skip_inefficiencies && ps.inefficient {
                    continue;
                }
                return i;
            }
        }
        self.max_perf_state
    }

    /// `em_cpu_energy` (v6.9+): the energy the domain would use, in the EM's abstract
    /// unit (`cost × sum_util`, 10× the pre-v6.9 scale), when its busiest CPU needs
    /// `max_util` (already with headroom, `sugov_effective_cpu_perf`) and its CPUs'
    /// utilisations sum to `sum_util`; `allowed_cpu_cap` caps `max_util` (hw pressure).
    pub fn em_cpu_energy(&self, max_util: Util, sum_util: Util, allowed_cpu_cap: Capacity) -> u64 {
        if sum_util.0 == 0 {
            return 0;
        }
        let max_util = Util(max_util.0.min(allowed_cpu_cap.0));
        let ps = &self.states[self.efficient_state(max_util)];
        ps.cost * sum_util.0 as u64
    }
}

impl EnergyModel {
    /// Build every domain's model. A domain whose first CPU has no
    /// `dynamic-power-coefficient` gets `None` (no EM: EAS is off for it); every other
    /// problem is an error.
    pub fn from_board(
        board: &BoardDesc,
        capacity_orig: &[Capacity],
    ) -> Result<EnergyModel, EmError> {
        let nr_pds = board.perf_domains.len();
        if nr_pds > MAX_PERF_DOMAINS {
            return Err(EmError::NoSuchDomain {
                pd: MAX_PERF_DOMAINS,
            });
        }
        let mut pds = Vec::with_capacity(nr_pds);
        for pd in 0..nr_pds {
            pds.push(match EmPerfDomain::new(board, pd, capacity_orig) {
                Ok(em) => Some(em),
                Err(EmError::MissingPowerCoefficient { .. }) => None,
                Err(e) => return Err(e),
            });
        }
        Ok(EnergyModel { pds })
    }

    /// Every domain's model, with `capacity_orig` from `topology` (normalised
    /// as Linux's `topology_normalize_cpu_scale`).
    pub fn from_topology(board: &BoardDesc, topology: &Topology) -> Result<EnergyModel, EmError> {
        let mut caps = [Capacity(0); MAX_CPUS];
        for c in topology.cpus() {
            caps[c.id.index()] = c.capacity_orig;
        }
        Self::from_board(board, &caps[..topology.nr_cpus()])
    }

    /// Domain `pd`'s model, `None` if it has none (or `pd` is out of range).
    pub fn pd(&self, pd: usize) -> Option<&EmPerfDomain> {
        self.pds.get(pd).and_then(Option::as_ref)
    }

    /// Mutable access to domain `pd`'s model.
    pub fn pd_mut(&mut self, pd: usize) -> Option<&mut EmPerfDomain> {
        self.pds.get_mut(pd).and_then(Option::as_mut)
    }

    /// Number of performance domains (with or without a model).
    pub fn nr_perf_domains(&self) -> usize {
        self.pds.len()
    }

    /// The domain containing `cpu` (`em_cpu_get`), if it has a model.
    pub fn em_cpu_get(&self, cpu: CpuId) -> Option<&EmPerfDomain> {
        self.pds.iter().flatten().find(|pd| pd.cpus.contains(cpu))
    }

    /// Whether every domain has a model (one of `sched_is_eas_possible`'s conditions).
    pub fn complete(&self) -> bool {
        self.pds.iter().all(Option::is_some)
    }
}
