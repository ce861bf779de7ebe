//! CPUs, clusters, capacities and performance domains.
//!
//! Re-derives Linux's `drivers/base/arch_topology.c` (`topology_normalize_cpu_scale`:
//! `capacity = capacity-dmips-mhz × fmax`, normalised so the biggest CPU is 1024) and
//! the performance-domain grouping of `kernel/power/energy_model.c`.
//!
//! The *description* types below are what a board supplies, as plain `const` data
//! (from `boards/data`) or built from a device tree: they mirror the DT properties
//! one to one so that every number can cite its DT node. [`Topology`] is what the policy
//! uses: logical CPUs with `capacity_orig`, clusters, performance domains and their masks.
//!
//! Deliberate differences: a board with `capacity-dmips-mhz` on only some CPUs is rejected
//! (Linux ignores the property on all CPUs then); EAS eligibility
//! ([`Topology::eas_possible`]) covers asymmetry, energy-model data and
//! `EM_MAX_COMPLEXITY`, leaving the governor and SMT checks of `sched_is_eas_possible()` to
//! the caller.

use core::fmt;

use crate::types::{
    Capacity, CpuId, CpuMask, Khz, MicroVolt, MAX_CPUS, SCHED_CAPACITY_SCALE, SCHED_CAPACITY_SHIFT,
};

/// One operating point of an `operating-points-v2` table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OppDesc {
    /// `opp-hz`, in kHz.
    pub freq: Khz,
    /// `opp-microvolt`.
    pub voltage: MicroVolt,
}

/// One CPU node of the device tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuDesc {
    /// `reg`: the CPU's MPIDR affinity bits.
    pub mpidr: u64,
    /// Index of the `cpu-map` cluster the CPU belongs to.
    pub cluster: u16,
    /// Index into [`BoardDesc::perf_domains`] (the cpufreq policy sharing a clock).
    pub perf_domain: u16,
    /// `capacity-dmips-mhz`; `None` when the DT has none (all CPUs then get 1024).
    pub capacity_dmips_mhz: Option<u32>,
    /// `dynamic-power-coefficient` (µW/MHz/V²); `None` when absent (no energy model).
    pub dynamic_power_coefficient: Option<u32>,
    /// The core's name, for reports ("cortex-a53").
    pub core: &'static str,
}

/// One performance domain: a set of CPUs sharing a clock and an OPP table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerfDomainDesc {
    /// A short name for reports and traces ("little", "big").
    pub name: &'static str,
    /// The OPP table, ascending in frequency.
    pub opps: &'static [OppDesc],
    /// `clock-latency-ns` (or the firmware's DVFS latency).
    pub transition_latency_ns: u64,
}

/// A whole board as its device tree (or firmware) describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoardDesc {
    /// The board's name as the simulator and xtask accept it ("juno-r2").
    pub name: &'static str,
    /// CPUs in logical order (logical CPU n is `cpus[n]`).
    pub cpus: &'static [CpuDesc],
    /// Performance domains, indexed by [`CpuDesc::perf_domain`].
    pub perf_domains: &'static [PerfDomainDesc],
}

impl PerfDomainDesc {
    /// The highest OPP's frequency (`policy->cpuinfo.max_freq`), `None` for an empty table.
    pub fn max_freq(&self) -> Option<Khz> {
        self.opps.iter().map(|o| o.freq).max()
    }
}

/// The most performance domains a [`Topology`] holds.
pub const MAX_PERF_DOMAINS: usize = 16;

/// Linux's `EM_MAX_COMPLEXITY`: EAS is refused when `nr_pd × (nr_cpus + nr_opps)` exceeds it.
pub const EM_MAX_COMPLEXITY: u32 = 2048;

/// One logical CPU of a [`Topology`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CpuTopology {
    /// The logical CPU number.
    pub id: CpuId,
    /// MPIDR affinity bits (`reg` of the DT node).
    pub mpidr: u64,
    /// `cpu-map` cluster index.
    pub cluster: u16,
    /// Index into [`Topology::perf_domain`].
    pub perf_domain: u16,
    /// `arch_scale_cpu_capacity()`: capacity at the highest OPP, biggest CPU = 1024.
    pub capacity_orig: Capacity,
    /// The CPU's highest frequency (`capacity_freq_ref`).
    pub max_freq: Khz,
}

/// One performance domain (cpufreq policy) of a [`Topology`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerfDomain {
    /// The CPUs sharing this domain's clock.
    pub cpus: CpuMask,
    /// The board description it came from (OPPs, latency).
    pub desc: PerfDomainDesc,
    /// Highest frequency of the domain.
    pub max_freq: Khz,
    /// Whether every CPU of the domain has a `dynamic-power-coefficient` (an EM can be built).
    pub has_power_coefficients: bool,
}

/// CPUs, clusters, capacities and performance domains, derived from a [`BoardDesc`].
///
/// Fixed-size (no allocation) so the kernel can build it before the heap exists.
#[derive(Clone, Copy, Debug)]
pub struct Topology {
    nr_cpus: usize,
    cpus: [CpuTopology; MAX_CPUS],
    nr_perf_domains: usize,
    perf_domains: [Option<PerfDomain>; MAX_PERF_DOMAINS],
    /// [`Topology::asym_cpucapacity`], decided once (Linux's `sched_asym_cpucapacity`
    /// static key): read on every wake-up and tick.
    asym_cpucapacity: bool,
}

/// Why a [`BoardDesc`] cannot be turned into a [`Topology`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopologyError {
    /// The board lists no CPU.
    NoCpus,
    /// More CPUs than [`MAX_CPUS`].
    TooManyCpus { nr: usize },
    /// More performance domains than [`MAX_PERF_DOMAINS`].
    TooManyPerfDomains { nr: usize },
    /// A CPU names a performance domain that does not exist.
    BadPerfDomain { cpu: CpuId, perf_domain: u16 },
    /// A performance domain has no OPP with a non-zero frequency.
    EmptyOppTable { perf_domain: u16 },
    /// A performance domain no CPU belongs to.
    UnusedPerfDomain { perf_domain: u16 },
    /// Two CPUs share an MPIDR.
    DuplicateMpidr { cpu: CpuId, mpidr: u64 },
    /// Some CPUs have `capacity-dmips-mhz` and others do not (Linux then ignores them all;
    /// we refuse, since a board table should be consistent).
    PartialDmips { cpu: CpuId },
    /// `capacity-dmips-mhz` of zero.
    ZeroDmips { cpu: CpuId },
}

impl fmt::Display for TopologyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TopologyError::NoCpus => write!(f, "board describes no CPU"),
            TopologyError::TooManyCpus { nr } => {
                write!(f, "board describes {nr} CPUs, at most {MAX_CPUS} supported")
            }
            TopologyError::TooManyPerfDomains { nr } => write!(
                f,
                "board describes {nr} performance domains, at most {MAX_PERF_DOMAINS} supported"
            ),
            TopologyError::BadPerfDomain { cpu, perf_domain } => write!(
                f,
                "cpu{}: performance domain {perf_domain} does not exist",
                cpu.0
            ),
            TopologyError::EmptyOppTable { perf_domain } => write!(
                f,
                "performance domain {perf_domain}: OPP table has no non-zero frequency"
            ),
            TopologyError::UnusedPerfDomain { perf_domain } => {
                write!(f, "performance domain {perf_domain}: no CPU belongs to it")
            }
            TopologyError::DuplicateMpidr { cpu, mpidr } => {
                write!(
                    f,
                    "cpu{}: MPIDR {mpidr:#x} already used by another CPU",
                    cpu.0
                )
            }
            TopologyError::PartialDmips { cpu } => write!(
                f,
                "cpu{}: capacity-dmips-mhz present on some CPUs but not on this one",
                cpu.0
            ),
            TopologyError::ZeroDmips { cpu } => write!(f, "cpu{}: capacity-dmips-mhz is 0", cpu.0),
        }
    }
}

impl Topology {
    /// Build the topology of `board`, computing `capacity_orig` as Linux's
    /// `topology_normalize_cpu_scale()`: `raw = capacity-dmips-mhz × fmax_khz` per CPU,
    /// `capacity_orig = (raw << 10) / max(raw)` (truncating division), so the biggest CPU is
    /// 1024. Without `capacity-dmips-mhz` every CPU gets 1024 (Linux's default `cpu_scale`).
    pub fn from_board(board: &BoardDesc) -> Result<Topology, TopologyError> {
        let nr_cpus = board.cpus.len();
        if nr_cpus == 0 {
            return Err(TopologyError::NoCpus);
        }
        if nr_cpus > MAX_CPUS {
            return Err(TopologyError::TooManyCpus { nr: nr_cpus });
        }
        let nr_pd = board.perf_domains.len();
        if nr_pd > MAX_PERF_DOMAINS {
            return Err(TopologyError::TooManyPerfDomains { nr: nr_pd });
        }
        let mut perf_domains = [None; MAX_PERF_DOMAINS];
        for (i, pd) in board.perf_domains.iter().enumerate() {
            let max_freq = match pd.max_freq() {
                Some(f) if f.0 > 0 => f,
                _ => {
                    return Err(TopologyError::EmptyOppTable {
                        perf_domain: i as u16,
                    })
                }
            };
            perf_domains[i] = Some(PerfDomain {
                cpus: CpuMask::EMPTY,
                desc: *pd,
                max_freq,
                has_power_coefficients: true,
            });
        }

        let with_dmips = board
            .cpus
            .iter()
            .filter(|c| c.capacity_dmips_mhz.is_some())
            .count();
        let mut cpus = [CpuTopology::default(); MAX_CPUS];
        for (i, c) in board.cpus.iter().enumerate() {
            let id = CpuId(i as u16);
            let pd = perf_domains
                .get_mut(c.perf_domain as usize)
                .and_then(Option::as_mut)
                .ok_or(TopologyError::BadPerfDomain {
                    cpu: id,
                    perf_domain: c.perf_domain,
                })?;
            pd.cpus.set(id);
            pd.has_power_coefficients &= c.dynamic_power_coefficient.is_some();
            if board.cpus[..i].iter().any(|o| o.mpidr == c.mpidr) {
                return Err(TopologyError::DuplicateMpidr {
                    cpu: id,
                    mpidr: c.mpidr,
                });
            }
            match c.capacity_dmips_mhz {
                None if with_dmips > 0 => return Err(TopologyError::PartialDmips { cpu: id }),
                Some(0) => return Err(TopologyError::ZeroDmips { cpu: id }),
                _ => {}
            }
            cpus[i] = CpuTopology {
                id,
                mpidr: c.mpidr,
                cluster: c.cluster,
                perf_domain: c.perf_domain,
                capacity_orig: Capacity(SCHED_CAPACITY_SCALE),
                max_freq: pd.max_freq,
            };
        }
        for (i, pd) in perf_domains[..nr_pd].iter().enumerate() {
            if pd.is_some_and(|pd| pd.cpus.is_empty()) {
                return Err(TopologyError::UnusedPerfDomain {
                    perf_domain: i as u16,
                });
            }
        }

        if with_dmips > 0 {
            let raw = |c: &CpuTopology| -> u64 {
                let dmips = board.cpus[c.id.index()].capacity_dmips_mhz.unwrap_or(0);
                dmips as u64 * c.max_freq.0 as u64
            };
            let scale = cpus[..nr_cpus].iter().map(raw).max().unwrap_or(1).max(1);
            for cpu in cpus[..nr_cpus].iter_mut() {
                cpu.capacity_orig = Capacity(((raw(cpu) << SCHED_CAPACITY_SHIFT) / scale) as u32);
            }
        }

        let first = cpus[0].capacity_orig;
        let asym_cpucapacity = cpus[..nr_cpus].iter().any(|c| c.capacity_orig != first);
        Ok(Topology {
            nr_cpus,
            cpus,
            nr_perf_domains: nr_pd,
            perf_domains,
            asym_cpucapacity,
        })
    }

    /// Number of CPUs (`nr_cpu_ids`).
    pub fn nr_cpus(&self) -> usize {
        self.nr_cpus
    }

    /// All CPUs (`cpu_possible_mask`).
    pub fn cpu_mask(&self) -> CpuMask {
        CpuMask::first_n(self.nr_cpus)
    }

    /// The CPUs, in logical order.
    pub fn cpus(&self) -> &[CpuTopology] {
        &self.cpus[..self.nr_cpus]
    }

    /// One CPU, `None` if out of range.
    pub fn cpu(&self, cpu: CpuId) -> Option<&CpuTopology> {
        self.cpus().get(cpu.index())
    }

    /// `arch_scale_cpu_capacity(cpu)`; 0 for a CPU that does not exist.
    pub fn capacity_orig(&self, cpu: CpuId) -> Capacity {
        self.cpu(cpu).map_or(Capacity(0), |c| c.capacity_orig)
    }

    /// The performance domains, in board order.
    pub fn perf_domains(&self) -> impl Iterator<Item = &PerfDomain> {
        self.perf_domains[..self.nr_perf_domains].iter().flatten()
    }

    /// Number of performance domains.
    pub fn nr_perf_domains(&self) -> usize {
        self.nr_perf_domains
    }

    /// One performance domain by index.
    pub fn perf_domain(&self, index: u16) -> Option<&PerfDomain> {
        self.perf_domains
            .get(index as usize)
            .and_then(Option::as_ref)
    }

    /// The performance domain `cpu` belongs to.
    pub fn perf_domain_of(&self, cpu: CpuId) -> Option<&PerfDomain> {
        self.cpu(cpu).and_then(|c| self.perf_domain(c.perf_domain))
    }

    /// `sd_llc_size` of `cpu`: the CPUs sharing its last-level cache, its cluster here
    /// (`wake_wide`'s factor); 1 for a CPU not in the topology.
    pub fn llc_size(&self, cpu: CpuId) -> u32 {
        self.cpu(cpu)
            .map_or(1, |c| self.cluster_mask(c.cluster).weight())
    }

    /// The CPUs of `cpu`'s cluster (`cpu_clustergroup_mask`).
    pub fn cluster_mask(&self, cluster: u16) -> CpuMask {
        self.cpus()
            .iter()
            .filter(|c| c.cluster == cluster)
            .map(|c| c.id)
            .collect()
    }

    /// Linux's `SD_ASYM_CPUCAPACITY` condition: CPUs of more than one capacity.
    pub fn asym_cpucapacity(&self) -> bool {
        self.asym_cpucapacity
    }

    /// How many different `capacity_orig` values the CPUs of `mask` have (those beyond the
    /// topology ignored): Linux's `asym_cap_list` entries that meet `mask`. More than one over
    /// the active CPUs is `sched_asym_cpucap_active`.
    pub fn nr_capacities(&self, mask: CpuMask) -> usize {
        let mut caps: heapless::Vec<u32, MAX_CPUS> = self
            .cpus()
            .iter()
            .filter(|c| mask.contains(c.id))
            .map(|c| c.capacity_orig.0)
            .collect();
        caps.sort_unstable();
        caps.windows(2).filter(|w| w[0] != w[1]).count() + usize::from(!caps.is_empty())
    }

    /// The largest `capacity_orig` (1024 by construction).
    pub fn max_capacity(&self) -> Capacity {
        self.cpus()
            .iter()
            .map(|c| c.capacity_orig)
            .max()
            .unwrap_or(Capacity(0))
    }

    /// Whether EAS can be enabled (`sched_is_eas_possible()` minus the governor/SMT checks,
    /// which are the caller's): asymmetric capacities, an energy model for every performance
    /// domain, and `nr_pd × (nr_cpus + nr_opps) ≤ EM_MAX_COMPLEXITY`.
    pub fn eas_possible(&self) -> bool {
        if !self.asym_cpucapacity() {
            return false;
        }
        let mut nr_opps = 0u32;
        for pd in self.perf_domains() {
            if !pd.has_power_coefficients {
                return false;
            }
            nr_opps += pd.desc.opps.len() as u32;
        }
        let complexity = self.nr_perf_domains as u32 * (self.nr_cpus as u32 + nr_opps);
        complexity <= EM_MAX_COMPLEXITY
    }
}

/// `arch_scale_freq_capacity()` as the cpufreq/AMU code computes it for a frequency:
/// `(cur_freq << 10) / max_freq`, truncating, capped at 1024. A zero `max_freq` gives 1024
/// (no frequency information: assume full speed, as Linux's default).
pub fn arch_scale_freq_capacity(cur_freq: Khz, max_freq: Khz) -> u32 {
    if max_freq.0 == 0 {
        return SCHED_CAPACITY_SCALE;
    }
    let scale = ((cur_freq.0 as u64) << SCHED_CAPACITY_SHIFT) / max_freq.0 as u64;
    scale.min(SCHED_CAPACITY_SCALE as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPPS_BIG: &[OppDesc] = &[
        OppDesc {
            freq: Khz(600_000),
            voltage: MicroVolt(829_000),
        },
        OppDesc {
            freq: Khz(1_200_000),
            voltage: MicroVolt(1_010_000),
        },
    ];
    const OPPS_LITTLE: &[OppDesc] = &[
        OppDesc {
            freq: Khz(450_000),
            voltage: MicroVolt(829_000),
        },
        OppDesc {
            freq: Khz(950_000),
            voltage: MicroVolt(1_010_000),
        },
    ];

    const fn cpu(mpidr: u64, cluster: u16, pd: u16, dmips: Option<u32>) -> CpuDesc {
        CpuDesc {
            mpidr,
            cluster,
            perf_domain: pd,
            capacity_dmips_mhz: dmips,
            dynamic_power_coefficient: Some(100),
            core: "test",
        }
    }

    const PDS: &[PerfDomainDesc] = &[
        PerfDomainDesc {
            name: "big",
            opps: OPPS_BIG,
            transition_latency_ns: 0,
        },
        PerfDomainDesc {
            name: "little",
            opps: OPPS_LITTLE,
            transition_latency_ns: 0,
        },
    ];

    #[test]
    fn normalise_truncates_like_linux() {
        let cpus: &[CpuDesc] =
            std::vec![cpu(0, 0, 0, Some(1024)), cpu(0x100, 1, 1, Some(485))].leak();
        let b = BoardDesc {
            name: "t",
            cpus,
            perf_domains: PDS,
        };
        let t = Topology::from_board(&b).unwrap();
        // 485 × 950 MHz / (1024 × 1200 MHz) × 1024 = 383.96 → 383 (truncation).
        assert_eq!(t.capacity_orig(CpuId(1)), Capacity(383));
        assert_eq!(t.capacity_orig(CpuId(0)), Capacity(1024));
        assert!(t.asym_cpucapacity());
        assert!(t.eas_possible());
        assert_eq!(t.perf_domain_of(CpuId(1)).unwrap().cpus, CpuMask(0b10));
    }

    #[test]
    fn no_dmips_means_all_1024_and_no_eas() {
        let cpus: &[CpuDesc] = std::vec![cpu(0, 0, 0, None), cpu(1, 0, 0, None)].leak();
        let b = BoardDesc {
            name: "t",
            cpus,
            perf_domains: &PDS[..1],
        };
        let t = Topology::from_board(&b).unwrap();
        assert!(t.cpus().iter().all(|c| c.capacity_orig == Capacity(1024)));
        assert!(!t.eas_possible());
    }

    #[test]
    fn bad_boards_are_rejected_with_the_place() {
        let cpus: &[CpuDesc] = std::vec![cpu(0, 0, 5, Some(1024))].leak();
        let b = BoardDesc {
            name: "t",
            cpus,
            perf_domains: PDS,
        };
        assert_eq!(
            Topology::from_board(&b).unwrap_err(),
            TopologyError::BadPerfDomain {
                cpu: CpuId(0),
                perf_domain: 5
            }
        );
        let cpus: &[CpuDesc] = std::vec![cpu(0, 0, 0, Some(1024)), cpu(0, 0, 1, Some(1024))].leak();
        let b = BoardDesc {
            name: "t",
            cpus,
            perf_domains: PDS,
        };
        assert_eq!(
            Topology::from_board(&b).unwrap_err(),
            TopologyError::DuplicateMpidr {
                cpu: CpuId(1),
                mpidr: 0
            }
        );
        let cpus: &[CpuDesc] = std::vec![cpu(0, 0, 0, Some(1024)), cpu(1, 0, 1, None)].leak();
        let b = BoardDesc {
            name: "t",
            cpus,
            perf_domains: PDS,
        };
        assert_eq!(
            Topology::from_board(&b).unwrap_err(),
            TopologyError::PartialDmips { cpu: CpuId(1) }
        );
        let cpus: &[CpuDesc] = std::vec![cpu(0, 0, 0, Some(1024))].leak();
        let b = BoardDesc {
            name: "t",
            cpus,
            perf_domains: PDS,
        };
        assert_eq!(
            Topology::from_board(&b).unwrap_err(),
            TopologyError::UnusedPerfDomain { perf_domain: 1 }
        );
    }

    #[test]
    fn freq_scale() {
        assert_eq!(arch_scale_freq_capacity(Khz(450_000), Khz(950_000)), 485);
        assert_eq!(arch_scale_freq_capacity(Khz(950_000), Khz(950_000)), 1024);
        assert_eq!(arch_scale_freq_capacity(Khz(2_000_000), Khz(950_000)), 1024);
        assert_eq!(arch_scale_freq_capacity(Khz(1), Khz(0)), 1024);
    }
}
