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
//! The descriptions need `'static` slices: parsing allocates and leaks them (boot-time, once).

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use asym_sched::em::MAX_PERF_STATES;
use asym_sched::topology::{BoardDesc, CpuDesc, OppDesc, PerfDomainDesc};
use asym_sched::types::{Khz, MicroVolt};
use flat_device_tree::node::FdtNode;
use flat_device_tree::Fdt;

use crate::board::DvfsTransport;
use crate::dt::{Platform, MAX_CPUS};

pub mod dvfs;
pub mod idle;
pub mod memory;
pub mod tree;

/// The firmware-facing rest of the DT, beyond [`Platform`] and the scheduling description:
/// memory banks and reservations, idle states, the clocks the CPUs run on and the DVFS
/// transport behind them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FirmwareDesc {
    /// Every `/memory` bank.
    pub memory: Vec<crate::dt::MemRange>,
    pub reserved: memory::Reserved,
    pub idle: idle::IdleStates,
    /// The CPUs grouped by clock (provider phandle, first specifier cell), as
    /// `scmi-cpufreq`/`scpi-cpufreq` group them into policies when the DT has no OPP tables;
    /// each entry lists logical CPU indices.
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
pub fn parse_firmware(dtb: &[u8], plat: &Platform) -> Result<FirmwareDesc, BoardDtError> {
    let fdt = Fdt::new(dtb).map_err(|_| bad("/", "header", "not a valid FDT"))?;
    let memory = memory::memory_banks(&fdt)?;
    let reserved = memory::reserved(&fdt)?;
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
        memory,
        reserved,
        idle,
        clock_domains,
        dvfs,
    })
}

/// The CPU nodes the kernel keeps (DT order, at most [`MAX_CPUS`] and `plat.cpus.len()`).
fn cpu_nodes<'b, 'a>(
    fdt: &'b Fdt<'a>,
    plat: &Platform,
) -> Result<Vec<FdtNode<'b, 'a>>, BoardDtError> {
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

/// What is wrong with the DT's scheduling description; names the node and property.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoardDtError {
    pub node: String,
    pub property: &'static str,
    pub problem: &'static str,
    /// Byte offset in the blob of a structural error found by `crate::dt::validate_fdt`.
    pub offset: Option<usize>,
}

impl fmt::Display for BoardDtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "dt: {}: `{}`: {}",
            self.node, self.property, self.problem
        )?;
        match self.offset {
            Some(off) => write!(f, " (at byte offset {off:#x})"),
            None => Ok(()),
        }
    }
}

fn bad(node: &str, property: &'static str, problem: &'static str) -> BoardDtError {
    BoardDtError {
        node: String::from(node),
        property,
        problem,
        offset: None,
    }
}

/// Parses the scheduling description of the DT `dtb` whose platform part is `plat`.
/// `Ok(None)`: no CPU has an `operating-points-v2` table (no cpufreq; symmetric unless
/// `capacity-dmips-mhz` says otherwise, which `plat` already covers). `Err`: a description
/// that is present but unusable (partial or malformed).
pub fn parse_board(dtb: &[u8], plat: &Platform) -> Result<Option<BoardDesc>, BoardDtError> {
    crate::dt::validate_fdt(dtb).map_err(|e| BoardDtError {
        node: String::from(e.node),
        property: e.property,
        problem: e.problem,
        offset: e.offset,
    })?;
    let fdt = Fdt::new(dtb).map_err(|_| bad("/", "header", "not a valid FDT"))?;
    // The root's children, as crate::dt does: `find_node("/cpus")` does not find it in every
    // blob (seen with QEMU's DTB rewritten by vm-fdt).
    let cpus_node = fdt
        .find_node("/")
        .and_then(|root| root.children().find(|c| c.name == "cpus"))
        .ok_or(bad("/cpus", "", "missing"))?;
    let cpu_nodes: Vec<FdtNode<'_, '_>> = cpus_node
        .children()
        .filter(|n| {
            n.property("device_type")
                .and_then(|p| p.as_str())
                .is_some_and(|s| s.trim_end_matches('\0') == "cpu")
        })
        .take(MAX_CPUS.min(plat.cpus.len()))
        .collect();
    let with_opps = cpu_nodes
        .iter()
        .filter(|n| n.property("operating-points-v2").is_some())
        .count();
    if with_opps == 0 {
        return Ok(None);
    }
    // (table phandle, owner cpu for unshared tables) per domain, in first-use order.
    let mut keys: Vec<(u32, Option<usize>)> = Vec::new();
    let mut domains: Vec<PerfDomainDesc> = Vec::new();
    let mut cpus: Vec<CpuDesc> = Vec::new();
    for (i, node) in cpu_nodes.iter().enumerate() {
        let path = cpu_path(node.name);
        let ph = u32_prop(*node, "operating-points-v2").ok_or(bad(
            &path,
            "operating-points-v2",
            "missing on this CPU while other CPUs have one",
        ))?;
        let table = fdt.find_phandle(ph).ok_or(bad(
            &path,
            "operating-points-v2",
            "phandle names no node",
        ))?;
        let shared = table.property("opp-shared").is_some();
        let key = (ph, if shared { None } else { Some(i) });
        let pd = match keys.iter().position(|k| *k == key) {
            Some(pd) => pd,
            None => {
                domains.push(parse_opp_table(table)?);
                keys.push(key);
                domains.len() - 1
            }
        };
        let dmips = u32_prop(*node, "capacity-dmips-mhz");
        if dmips == Some(0) {
            return Err(bad(&path, "capacity-dmips-mhz", "zero"));
        }
        let coeff = u32_prop(*node, "dynamic-power-coefficient");
        if coeff == Some(0) {
            return Err(bad(&path, "dynamic-power-coefficient", "zero"));
        }
        let core = node
            .compatible()
            .and_then(|c| c.first())
            .map(|s| s.trim_start_matches("arm,"))
            .unwrap_or("cpu");
        cpus.push(CpuDesc {
            mpidr: plat.cpus[i].mpidr,
            cluster: plat.cpus[i].cluster,
            perf_domain: pd as u16,
            capacity_dmips_mhz: dmips,
            dynamic_power_coefficient: coeff,
            core: leak_str(core),
        });
    }
    // Linux registers a policy's energy model from the policy CPU's node alone
    // (`dev_pm_opp_of_register_em` in cpufreq-dt, for `policy->cpus`): a CPU without its own
    // `dynamic-power-coefficient` (HiKey960's cpu1-3, cpu5-7) takes its domain's first CPU's.
    for pd in 0..domains.len() {
        let first = cpus
            .iter()
            .find(|c| usize::from(c.perf_domain) == pd)
            .and_then(|c| c.dynamic_power_coefficient);
        for c in cpus.iter_mut().filter(|c| usize::from(c.perf_domain) == pd) {
            if c.dynamic_power_coefficient.is_none() {
                c.dynamic_power_coefficient = first;
            }
        }
    }
    Ok(Some(BoardDesc {
        name: "dt",
        cpus: Box::leak(cpus.into_boxed_slice()),
        perf_domains: Box::leak(domains.into_boxed_slice()),
    }))
}

fn parse_opp_table(table: FdtNode<'_, '_>) -> Result<PerfDomainDesc, BoardDtError> {
    let path = alloc::format!("/{}", table.name);
    let compatible = table
        .compatible()
        .is_some_and(|c| c.all().any(|s| s == "operating-points-v2"));
    if !compatible {
        return Err(bad(&path, "compatible", "not \"operating-points-v2\""));
    }
    let mut opps: Vec<OppDesc> = Vec::new();
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
            _ => return Err(bad(&path, "opp-hz", "missing or not 32/64-bit")),
        };
        let khz = u32::try_from(hz / 1000).ok().filter(|k| *k > 0).ok_or(bad(
            &path,
            "opp-hz",
            "zero or beyond 4.29 THz",
        ))?;
        let uv = u32_prop(opp, "opp-microvolt").ok_or(bad(&path, "opp-microvolt", "missing"))?;
        if let Some(l) = u32_prop(opp, "clock-latency-ns") {
            latency_ns = latency_ns.max(u64::from(l));
        }
        if opps.len() == MAX_PERF_STATES {
            return Err(bad(&path, "opp-*", "more than 16 OPPs"));
        }
        opps.push(OppDesc {
            freq: Khz(khz),
            voltage: MicroVolt(uv),
        });
    }
    if opps.is_empty() {
        return Err(bad(&path, "opp-*", "no enabled OPP"));
    }
    // DT order is conventionally ascending; sort so a reordered table still works. Equal
    // frequencies and voltages falling with frequency are left for `validate_opps` to name.
    opps.sort_by_key(|o| o.freq.0);
    let name = table
        .name
        .trim_start_matches("opp-table")
        .trim_start_matches(['-', '_']);
    Ok(PerfDomainDesc {
        name: leak_str(if name.is_empty() { table.name } else { name }),
        opps: Box::leak(opps.into_boxed_slice()),
        transition_latency_ns: latency_ns,
    })
}

fn u32_prop(n: FdtNode<'_, '_>, prop: &str) -> Option<u32> {
    let v = n.property(prop)?.value;
    (v.len() >= 4).then(|| u32::from_be_bytes([v[0], v[1], v[2], v[3]]))
}

fn cpu_path(name: &str) -> String {
    alloc::format!("/cpus/{name}")
}

fn leak_str(s: &str) -> &'static str {
    Box::leak(String::from(s).into_boxed_str())
}

#[cfg(test)]
mod tests {
    //! Oracles: the emulated Juno r2 DTB made by `cargo xtask` from QEMU's own DTB
    //! (`kernel/tests/dtb/qemu-juno-r2-gicv3-smp6.dtb`) must give back Juno r2's numbers as
    //! `boards.md` lists them; QEMU's plain DTB has no tables.
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
        let b = parse_board(&dtb, &plat).unwrap().unwrap();
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
        // capacity_orig: 1024 and 485 × 950 / (1024 × 1200) × 1024 = 383 (boards.md).
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
        assert_eq!(
            fw.memory,
            [r(0x4000_0000, 0x2000_0000), r(0x8_8000_0000, 0x4000_0000)]
        );
        let rsv: Vec<(&str, MemRange, bool)> = fw
            .reserved
            .regions
            .iter()
            .map(|x| (x.name.as_str(), x.range, x.no_map))
            .collect();
        assert_eq!(
            rsv,
            [
                ("/memreserve/", r(0x40f0_0000, 0x1000), false),
                ("trace@41000000", r(0x4100_0000, 0x10_0000), false),
                ("secure@5f000000", r(0x5f00_0000, 0x100_0000), true),
            ],
            "disabled children are left out"
        );
        assert_eq!(fw.reserved.dynamic, [(String::from("pool"), 0x80_0000)]);
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
        let b = parse_board(&dtb, &plat).unwrap().unwrap();
        let coeffs: Vec<Option<u32>> = b.cpus.iter().map(|c| c.dynamic_power_coefficient).collect();
        assert_eq!(coeffs, [Some(100), Some(100), Some(400)]);
        assert!(Topology::from_board(&b).unwrap().eas_possible());
    }

    #[test]
    fn placeholder_memory_is_named() {
        // HiKey960's `reg = <0 0 0 0>` before u-boot fills it: a clear error, not RAM of size 0.
        let mut dtb = load("firmware-like.dtb");
        let needle = [0u8, 0, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0];
        let pos = dtb
            .windows(16)
            .position(|w| w == needle)
            .expect("first bank in fixture");
        dtb[pos + 12] = 0; // size 0x2000_0000 → 0
        let fdt = Fdt::new(&dtb).unwrap();
        let e = memory::memory_banks(&fdt).unwrap_err();
        assert!(e.problem.contains("placeholder"), "{e}");
    }

    #[test]
    fn qemu_own_dt_has_no_tables() {
        let dtb = load("qemu-virt-gicv3-el2-smp4.dtb");
        let plat = Platform::from_fdt(&dtb, 0x4000_0000).unwrap();
        assert_eq!(parse_board(&dtb, &plat), Ok(None));
    }
}
