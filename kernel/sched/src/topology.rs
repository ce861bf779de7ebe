//! CPUs, clusters, capacities and performance domains.
//!
//! Re-derives Linux's `drivers/base/arch_topology.c` (`topology_normalize_cpu_scale`:
//! `capacity = capacity-dmips-mhz × fmax`, normalised so the biggest CPU is 1024) and
//! the performance-domain grouping of `kernel/power/energy_model.c`.
//!
//! The *description* types below are what a board supplies, as plain `const` data
//! (from `boards/data`) or built from a device tree: they mirror the DT properties
//! one to one so that every number can cite its DT node.

use crate::types::{Khz, MicroVolt};

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
