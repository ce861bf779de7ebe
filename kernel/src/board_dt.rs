//! The device tree's scheduling description — CPU capacities, power coefficients, clusters and
//! `operating-points-v2` tables — turned into the policy crate's [`BoardDesc`].
//!
//! Re-derives what Linux reads in `drivers/base/arch_topology.c`
//! (`topology_parse_cpu_capacity`: `capacity-dmips-mhz`), `drivers/opp/of.c`
//! (`_of_add_opp_table_v2`: `opp-hz`, `opp-microvolt`, `clock-latency-ns`, `opp-shared`),
//! `drivers/cpufreq/cpufreq-dt.c` (one policy per shared OPP table) and
//! `drivers/opp/of.c:dev_pm_opp_of_register_em` (`dynamic-power-coefficient`).
//!
//! Deliberate differences: a table without `opp-shared` gives each of its CPUs its own
//! domain (Linux then asks the clock framework; we have no clocks); `opp-microvolt` takes the
//! first (target) cell; the transition latency is the largest `clock-latency-ns` of the table
//! (Linux `dev_pm_opp_get_max_clock_latency`); disabled OPPs (`status` not "okay") are
//! skipped. Clusters come from `crate::dt` (the `cpu-map` walk there).
//!
//! Parsed with the rest of the device tree into owned data ([`SchedDt`], in
//! `Platform::sched`); [`board_desc`] turns that into the policy crate's `'static` description
//! (allocating and leaking it: boot-time, once).

// `DtError` carries where and what as text (~270 bytes) by design: errors are rare, made once
// at boot, and must name the node; not worth a heap box the early boot does not have.
#![allow(clippy::result_large_err)]

extern crate alloc;

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;

use asym_sched::em::MAX_PERF_STATES;
use asym_sched::topology::{BoardDesc, CpuDesc, OppDesc, PerfDomainDesc};
use asym_sched::types::{Khz, MicroVolt};
use flat_device_tree::node::FdtNode;
use flat_device_tree::Fdt;

use crate::board::DvfsTransport;
use crate::dt::{CpuNode, DtError, NodePath, Platform, MAX_CPUS};

pub mod dvfs;
pub mod idle;
pub mod tree;

/// The firmware-facing rest of the DT, beyond [`Platform`] (which has the memory banks and
/// reservations) and the scheduling description: idle states, the clocks the CPUs run on and
/// the DVFS transport behind them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FirmwareDesc {
    pub idle: idle::IdleStates,
    /// The CPUs grouped by clock (provider, first specifier cell), as `scmi-cpufreq` and
    /// `scpi-cpufreq` group them into policies when the DT has no OPP tables; each entry lists
    /// logical CPU indices.
    pub clock_domains: Vec<ClockDomain>,
    pub dvfs: Option<DvfsTransport>,
}

/// CPUs sharing one clock output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClockDomain {
    /// The provider's node name and the clock index.
    pub provider: String,
    pub index: u32,
    pub cpus: Vec<usize>,
}

/// Parses the [`FirmwareDesc`] of `dtb`, whose platform part is `plat`.
pub fn parse_firmware(dtb: &[u8], plat: &Platform) -> Result<FirmwareDesc, DtError> {
    let fdt = Fdt::new(dtb).map_err(|_| bad("/", "header", "not a valid FDT"))?;
    let cpu_nodes = cpu_nodes(&fdt, plat)?;
    let idle = idle::parse(&fdt, &cpu_nodes)?;
    let mut clock_domains: Vec<ClockDomain> = Vec::new();
    for (i, node) in cpu_nodes.iter().enumerate() {
        let Some(p) = node.property("clocks") else {
            continue;
        };
        let c: Vec<u32> = p
            .value
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let (ph, index) = (
            c.first().copied().unwrap_or(0),
            c.get(1).copied().unwrap_or(0),
        );
        let provider = fdt
            .find_phandle(ph)
            .map(|n| String::from(n.name))
            .ok_or(bad(&cpu_path(node.name), "clocks", "phandle names no node"))?;
        match clock_domains
            .iter_mut()
            .find(|d| d.provider == provider && d.index == index)
        {
            Some(d) => d.cpus.push(i),
            None => clock_domains.push(ClockDomain {
                provider,
                index,
                cpus: alloc::vec![i],
            }),
        }
    }
    let dvfs = match cpu_nodes.first() {
        Some(cpu) => dvfs::transport(&fdt, *cpu)?,
        None => None,
    };
    Ok(FirmwareDesc {
        idle,
        clock_domains,
        dvfs,
    })
}

/// The CPU nodes the kernel keeps (DT order, at most [`MAX_CPUS`] and `plat.cpus.len()`).
fn cpu_nodes<'b, 'a>(fdt: &'b Fdt<'a>, plat: &Platform) -> Result<Vec<FdtNode<'b, 'a>>, DtError> {
    let cpus_node = fdt
        .find_node("/")
        .and_then(|root| root.children().find(|c| c.name == "cpus"))
        .ok_or(bad("/cpus", "", "missing"))?;
    Ok(cpus_node
        .children()
        .filter(|n| {
            n.property("device_type")
                .and_then(|p| p.as_str())
                .is_some_and(|s| s.trim_end_matches('\0') == "cpu")
        })
        .take(MAX_CPUS.min(plat.cpus.len()))
        .collect())
}

/// The errors of this module's firmware parsers are the DT's.
type BoardDtError = DtError;

fn bad(node: &str, property: &'static str, problem: &str) -> DtError {
    DtError::new(node, property, problem)
}

fn cpu_path(name: &str) -> String {
    alloc::format!("/cpus/{name}")
}

/// Longest core or domain name kept.
pub const NAME_MAX: usize = 24;

/// The DT's scheduling description, owned (parsed with the rest of [`Platform`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedDt {
    /// Per kept CPU, in logical order (as `Platform::cpus`).
    pub cpus: heapless::Vec<SchedCpu, MAX_CPUS>,
    /// Performance domains, indexed by [`SchedCpu::perf_domain`], in first-use order.
    pub domains: heapless::Vec<PerfDomainDt, MAX_CPUS>,
}

/// One CPU's scheduling properties.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedCpu {
    pub perf_domain: u16,
    pub capacity_dmips_mhz: Option<u32>,
    pub dynamic_power_coefficient: Option<u32>,
    /// The first `compatible` without its vendor prefix ("cortex-a53").
    pub core: heapless::String<NAME_MAX>,
}

/// One `operating-points-v2` table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PerfDomainDt {
    pub name: heapless::String<NAME_MAX>,
    /// Ascending in frequency.
    pub opps: heapless::Vec<OppDesc, MAX_PERF_STATES>,
    pub transition_latency_ns: u64,
}

/// The policy crate's [`BoardDesc`] for `plat`'s scheduling description: `Ok(None)` when the
/// DT has no OPP tables. Allocates and leaks the description's slices (boot-time, once).
pub fn board_desc(plat: &Platform) -> Result<Option<BoardDesc>, DtError> {
    let Some(s) = plat.sched.clone()? else {
        return Ok(None);
    };
    let cpus: Vec<CpuDesc> = s
        .cpus
        .iter()
        .zip(plat.cpus.iter())
        .map(|(c, node)| CpuDesc {
            mpidr: node.mpidr,
            cluster: node.cluster,
            perf_domain: c.perf_domain,
            capacity_dmips_mhz: c.capacity_dmips_mhz,
            dynamic_power_coefficient: c.dynamic_power_coefficient,
            core: leak_str(&c.core),
        })
        .collect();
    let domains: Vec<PerfDomainDesc> = s
        .domains
        .iter()
        .map(|d| PerfDomainDesc {
            name: leak_str(&d.name),
            opps: Box::leak(Vec::from(d.opps.as_slice()).into_boxed_slice()),
            transition_latency_ns: d.transition_latency_ns,
        })
        .collect();
    Ok(Some(BoardDesc {
        name: "dt",
        cpus: Box::leak(cpus.into_boxed_slice()),
        perf_domains: Box::leak(domains.into_boxed_slice()),
    }))
}

/// Parses the scheduling description of the kept CPUs `nodes` (with their paths) whose
/// platform part is `cpus` (see [`Platform::sched`]).
pub(crate) fn parse_sched(
    fdt: &Fdt<'_>,
    nodes: &[(FdtNode<'_, '_>, NodePath)],
    cpus: &[CpuNode],
) -> Result<Option<SchedDt>, DtError> {
    let with_opps = nodes
        .iter()
        .filter(|(n, _)| n.property("operating-points-v2").is_some())
        .count();
    if with_opps == 0 {
        return Ok(None);
    }
    // (table phandle, owner cpu for unshared tables) per domain, in first-use order.
    let mut keys: heapless::Vec<(u32, Option<usize>), MAX_CPUS> = heapless::Vec::new();
    let mut out = SchedDt {
        cpus: heapless::Vec::new(),
        domains: heapless::Vec::new(),
    };
    for (i, ((node, path), _)) in nodes.iter().zip(cpus).enumerate() {
        let ph = u32_prop(*node, "operating-points-v2").ok_or_else(|| {
            DtError::new(
                path,
                "operating-points-v2",
                "missing on this CPU while other CPUs have one",
            )
        })?;
        let table = fdt.find_phandle(ph).ok_or_else(|| {
            DtError::new(
                path,
                "operating-points-v2",
                format_args!("phandle {ph:#x} names no node"),
            )
        })?;
        let shared = table.property("opp-shared").is_some();
        let key = (ph, if shared { None } else { Some(i) });
        let pd = match keys.iter().position(|k| *k == key) {
            Some(pd) => pd,
            None => {
                // At most one domain per CPU, and there are at most MAX_CPUS CPUs.
                let _ = out.domains.push(parse_opp_table(table)?);
                let _ = keys.push(key);
                out.domains.len() - 1
            }
        };
        let dmips = u32_prop(*node, "capacity-dmips-mhz");
        if dmips == Some(0) {
            return Err(DtError::new(path, "capacity-dmips-mhz", "zero"));
        }
        let coeff = u32_prop(*node, "dynamic-power-coefficient");
        if coeff == Some(0) {
            return Err(DtError::new(path, "dynamic-power-coefficient", "zero"));
        }
        let core = node
            .compatible()
            .and_then(|c| c.first())
            .map(|s| s.trim_start_matches("arm,"))
            .unwrap_or("cpu");
        let _ = out.cpus.push(SchedCpu {
            perf_domain: pd as u16,
            capacity_dmips_mhz: dmips,
            dynamic_power_coefficient: coeff,
            core: name(core),
        });
    }
    // Linux registers a policy's energy model from the policy CPU's node alone
    // (`dev_pm_opp_of_register_em` in cpufreq-dt, for `policy->cpus`): a CPU without its own
    // `dynamic-power-coefficient` (HiKey960's cpu1-3, cpu5-7) takes its domain's first CPU's.
    for pd in 0..out.domains.len() {
        let first = out
            .cpus
            .iter()
            .find(|c| usize::from(c.perf_domain) == pd)
            .and_then(|c| c.dynamic_power_coefficient);
        for c in out
            .cpus
            .iter_mut()
            .filter(|c| usize::from(c.perf_domain) == pd)
        {
            if c.dynamic_power_coefficient.is_none() {
                c.dynamic_power_coefficient = first;
            }
        }
    }
    Ok(Some(out))
}

fn parse_opp_table(table: FdtNode<'_, '_>) -> Result<PerfDomainDt, DtError> {
    let path = table.name;
    let compatible = table
        .compatible()
        .is_some_and(|c| c.all().any(|s| s == "operating-points-v2"));
    if !compatible {
        return Err(DtError::new(
            path,
            "compatible",
            "not \"operating-points-v2\"",
        ));
    }
    let mut opps: heapless::Vec<OppDesc, MAX_PERF_STATES> = heapless::Vec::new();
    let mut latency_ns = 0u64;
    for opp in table.children() {
        let okay = opp
            .property("status")
            .and_then(|p| p.as_str())
            .is_none_or(|s| matches!(s.trim_end_matches('\0'), "okay" | "ok"));
        if !okay {
            continue;
        }
        let hz = match opp.property("opp-hz").map(|p| p.value) {
            Some(v) if v.len() == 8 => {
                u64::from_be_bytes([v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]])
            }
            Some(v) if v.len() == 4 => u64::from(u32::from_be_bytes([v[0], v[1], v[2], v[3]])),
            _ => {
                return Err(DtError::new(
                    path,
                    "opp-hz",
                    format_args!("{}: missing or not 32/64-bit", opp.name),
                ))
            }
        };
        let khz = u32::try_from(hz / 1000)
            .ok()
            .filter(|k| *k > 0)
            .ok_or_else(|| {
                DtError::new(
                    path,
                    "opp-hz",
                    format_args!("{}: {hz} Hz is zero or beyond 4.29 THz", opp.name),
                )
            })?;
        let uv = u32_prop(opp, "opp-microvolt").ok_or_else(|| {
            DtError::new(path, "opp-microvolt", format_args!("{}: missing", opp.name))
        })?;
        if let Some(l) = u32_prop(opp, "clock-latency-ns") {
            latency_ns = latency_ns.max(u64::from(l));
        }
        opps.push(OppDesc {
            freq: Khz(khz),
            voltage: MicroVolt(uv),
        })
        .map_err(|_| DtError::new(path, "opp-*", "more than 16 OPPs"))?;
    }
    if opps.is_empty() {
        return Err(DtError::new(path, "opp-*", "no enabled OPP"));
    }
    // DT order is conventionally ascending; sort so a reordered table still works. Equal
    // frequencies and voltages falling with frequency are left for `validate_opps` to name.
    opps.sort_unstable_by_key(|o| (o.freq.0, o.voltage.0));
    let short = table
        .name
        .trim_start_matches("opp-table")
        .trim_start_matches(['-', '_']);
    Ok(PerfDomainDt {
        name: name(if short.is_empty() { table.name } else { short }),
        opps,
        transition_latency_ns: latency_ns,
    })
}

fn u32_prop(n: FdtNode<'_, '_>, prop: &str) -> Option<u32> {
    let v = n.property(prop)?.value;
    (v.len() >= 4).then(|| u32::from_be_bytes([v[0], v[1], v[2], v[3]]))
}

/// `s` cut to [`NAME_MAX`] bytes (on a character boundary).
fn name(s: &str) -> heapless::String<NAME_MAX> {
    let mut end = s.len().min(NAME_MAX);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = heapless::String::new();
    let _ = out.push_str(&s[..end]);
    out
}

fn leak_str(s: &str) -> &'static str {
    Box::leak(String::from(s).into_boxed_str())
}

#[cfg(test)]
mod tests {
    //! Oracles: the emulated Juno r2 DTB made by `cargo xtask` from QEMU's own DTB
    //! (`kernel/tests/dtb/qemu-juno-r2-gicv3-smp6.dtb`) must give back Juno r2's numbers as
    //! the mainline DTs give them; QEMU's plain DTB has no tables.
    use super::*;
    use asym_sched::topology::Topology;

    fn load(name: &str) -> Vec<u8> {
        let path = alloc::format!("{}/tests/dtb/{}", env!("CARGO_MANIFEST_DIR"), name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn emulated_juno_r2_gives_back_the_board() {
        let dtb = load("qemu-juno-r2-gicv3-smp6.dtb");
        let plat = Platform::from_fdt(&dtb, 0x4000_0000).unwrap();
        let b = board_desc(&plat).unwrap().unwrap();
        assert_eq!(b.cpus.len(), 6);
        assert_eq!(b.perf_domains.len(), 2);
        assert_eq!(b.perf_domains[0].name, "big");
        let mhz = |pd: usize| -> Vec<u32> {
            b.perf_domains[pd]
                .opps
                .iter()
                .map(|o| o.freq.0 / 1000)
                .collect()
        };
        assert_eq!(mhz(0), [600, 1000, 1200]);
        assert_eq!(mhz(1), [450, 800, 950]);
        let mv: Vec<u32> = b.perf_domains[1]
            .opps
            .iter()
            .map(|o| o.voltage.0 / 1000)
            .collect();
        assert_eq!(mv, [829, 909, 1010]);
        let pds: Vec<u16> = b.cpus.iter().map(|c| c.perf_domain).collect();
        assert_eq!(pds, [0, 0, 1, 1, 1, 1]);
        assert_eq!(b.cpus[0].dynamic_power_coefficient, Some(450));
        assert_eq!(b.cpus[5].dynamic_power_coefficient, Some(140));
        // capacity_orig: 1024 and 485 × 950 / (1024 × 1200) × 1024 = 383 (juno-r2.dts capacity-dmips-mhz and OPPs).
        let t = Topology::from_board(&b).unwrap();
        let caps: Vec<u32> = t.cpus().iter().map(|c| c.capacity_orig.0).collect();
        assert_eq!(caps, [1024, 1024, 383, 383, 383, 383]);
        assert_ne!(b.cpus[0].cluster, b.cpus[2].cluster);
    }

    /// The hand-written `firmware-like.dts`: every value below is read off that source.
    #[test]
    fn firmware_description_of_the_fixture() {
        use crate::dt::MemRange;
        let dtb = load("firmware-like.dtb");
        let plat = Platform::from_fdt(&dtb, 0).unwrap();
        let fw = parse_firmware(&dtb, &plat).unwrap();
        let r = |base, size| MemRange { base, size };
        let names: Vec<&str> = fw.idle.states.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["cpu-sleep", "cluster-sleep"]);
        assert_eq!(fw.idle.states[1].min_residency_us, 1500);
        assert!(fw.idle.states[0].local_timer_stop && !fw.idle.states[1].local_timer_stop);
        assert_eq!(fw.idle.per_cpu, [vec![0, 1], vec![0], vec![0, 1]]);
        let cpus: Vec<Vec<usize>> = fw.clock_domains.iter().map(|d| d.cpus.clone()).collect();
        assert_eq!(cpus, [vec![0, 1], vec![2]]);
        assert_eq!(fw.clock_domains[0].index, 1);
        // The shared memory's `reg` is relative to the SRAM bus: translated by its `ranges`.
        assert_eq!(
            fw.dvfs,
            Some(DvfsTransport::Scmi {
                mhu: r(0x2b1f_0000, 0x1000),
                base_doorbell: (0, 0),
                base_shmem: r(0x2e00_0000, 0x80),
                perf_doorbell: Some((1, 0)),
                perf_shmem: Some(r(0x2e00_0100, 0x80)),
            })
        );
    }

    /// Linux builds a domain's energy model from its first CPU's coefficient; CPUs without one
    /// take it, so EAS is possible on a DT that writes it once per cluster (HiKey960's).
    #[test]
    fn power_coefficient_is_the_domains_first_cpus() {
        let dtb = load("firmware-like.dtb");
        let plat = Platform::from_fdt(&dtb, 0).unwrap();
        let b = board_desc(&plat).unwrap().unwrap();
        let coeffs: Vec<Option<u32>> = b.cpus.iter().map(|c| c.dynamic_power_coefficient).collect();
        assert_eq!(coeffs, [Some(100), Some(100), Some(400)]);
        assert!(Topology::from_board(&b).unwrap().eas_possible());
    }

    #[test]
    fn qemu_own_dt_has_no_tables() {
        let dtb = load("qemu-virt-gicv3-el2-smp4.dtb");
        let plat = Platform::from_fdt(&dtb, 0x4000_0000).unwrap();
        assert_eq!(board_desc(&plat), Ok(None));
    }
}
