//! The modelled board: capacities, performance domains, OPPs and their power.
//!
//! Built from the shared board tables (`asym-boards`) through the policy crate's
//! [`Topology`] (Linux's `topology_normalize_cpu_scale`) and the energy model's DT
//! power formula ([`dt_opp_power`], `dev_pm_opp_calc_power`), so the simulator sees
//! exactly the numbers the kernel sees.
//!
//! Work emulation (rt-app's calibration convention: work is stated in time on the biggest CPU
//! at its top OPP): while a task runs on CPU c at
//! frequency f it completes work at `capacity_orig(c) × f / fmax(c) / 1024` of the
//! biggest CPU at its top OPP.

use asym_sched::em::dt_opp_power;
use asym_sched::topology::{BoardDesc, Topology};
use asym_sched::types::CpuId;

/// One OPP with its power.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opp {
    /// Frequency in kHz.
    pub khz: u32,
    /// Voltage in µV.
    pub uv: u32,
    /// Busy power in µW (0 when the board has no power coefficient).
    pub power_uw: u64,
}

/// One CPU of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuModel {
    /// `capacity_orig`.
    pub capacity_orig: u32,
    /// Index into [`Board::domains`].
    pub domain: usize,
}

/// One performance domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainModel {
    /// Name from the board table.
    pub name: &'static str,
    /// CPUs in the domain, ascending.
    pub cpus: Vec<usize>,
    /// OPPs, ascending.
    pub opps: Vec<Opp>,
    /// Highest frequency.
    pub fmax_khz: u32,
    /// Frequency transition latency.
    pub latency_ns: u64,
}

/// The whole board.
#[derive(Clone, Debug)]
pub struct Board {
    /// The description it was built from.
    pub desc: &'static BoardDesc,
    /// The policy crate's topology.
    pub topology: Topology,
    /// Per-CPU model.
    pub cpus: Vec<CpuModel>,
    /// Per-domain model.
    pub domains: Vec<DomainModel>,
    /// Whether every domain has power numbers (an energy model exists).
    pub has_energy_model: bool,
}

impl Board {
    /// Build the model of a board description.
    pub fn new(desc: &'static BoardDesc) -> Result<Board, String> {
        let topology =
            Topology::from_board(desc).map_err(|e| format!("board {}: {e}", desc.name))?;
        let cpus: Vec<CpuModel> = topology
            .cpus()
            .iter()
            .map(|c| CpuModel {
                capacity_orig: c.capacity_orig.0,
                domain: c.perf_domain as usize,
            })
            .collect();
        let mut has_energy_model = true;
        let mut domains = Vec::new();
        for (i, pd) in desc.perf_domains.iter().enumerate() {
            let members: Vec<usize> = (0..cpus.len()).filter(|&c| cpus[c].domain == i).collect();
            let coeff = members
                .first()
                .and_then(|&c| desc.cpus[c].dynamic_power_coefficient);
            has_energy_model &= coeff.is_some();
            let mut opps: Vec<Opp> = pd
                .opps
                .iter()
                .map(|o| Opp {
                    khz: o.freq.0,
                    uv: o.voltage.0,
                    power_uw: coeff.map_or(0, |c| dt_opp_power(c, o.freq, o.voltage.0).0),
                })
                .collect();
            opps.sort_by_key(|o| o.khz);
            let fmax_khz = topology
                .cpu(CpuId(members.first().copied().unwrap_or(0) as u16))
                .map_or(0, |c| c.max_freq.0);
            domains.push(DomainModel {
                name: pd.name,
                cpus: members,
                opps,
                fmax_khz,
                latency_ns: pd.transition_latency_ns,
            });
        }
        Ok(Board {
            desc,
            topology,
            cpus,
            domains,
            has_energy_model,
        })
    }

    /// Number of CPUs.
    pub fn nr_cpus(&self) -> usize {
        self.cpus.len()
    }

    /// Work rate of `cpu` at `khz`, in 2⁻²⁰ units of reference work per ns.
    pub fn rate_fp(&self, cpu: usize, khz: u32) -> u64 {
        let c = &self.cpus[cpu];
        let fmax = self.domains[c.domain].fmax_khz.max(1) as u128;
        ((c.capacity_orig as u128 * khz as u128) << 20).div_euclid(1024 * fmax) as u64
    }

    /// The OPP index of `khz` in `domain` (the highest OPP not above it).
    pub fn opp_index(&self, domain: usize, khz: u32) -> usize {
        let opps = &self.domains[domain].opps;
        opps.iter().rposition(|o| o.khz <= khz).unwrap_or(0)
    }
}
