//! Typed board descriptions of the boards asym targets: Juno r2, HiKey960 (Hi3660) and
//! HiKey (Hi6220). Shared by the kernel (emulated boards on QEMU `virt`) and the simulator.
//!
//! Each table mirrors the board's device tree (Linux `arch/arm64/boot/dts/...`) or, where
//! the DT defers to firmware (Juno's SCPI OPPs), the firmware's table; every number carries
//! a `// source:` comment. `asym_sched::topology::Topology::from_board` derives capacities
//! (`capacity-dmips-mhz × fmax`, normalised) from these; nothing here is pre-computed.
//!
//! Logical CPU order: CPUs are listed in DT order. Linux numbers CPUs in boot order, and on
//! Juno the boot CPU is often an A53 (cpu0 = A53_0) — that depends on the firmware and is
//! unconfirmed (`linux-sched.md` §7.3), so we keep the DT order (A72s first) for Juno r2.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(test)]
extern crate std;

use asym_sched::topology::{BoardDesc, CpuDesc, OppDesc, PerfDomainDesc};
use asym_sched::types::{Khz, MicroVolt};

const fn opp(mhz: u32, mv: u32) -> OppDesc {
    OppDesc {
        freq: Khz(mhz * 1000),
        voltage: MicroVolt(mv * 1000),
    }
}

// ---------------------------------------------------------------------------------------
// Juno r2
// ---------------------------------------------------------------------------------------

// source: seed 004 (mailing list, Juno r2 legacy SCPI firmware): LITTLE 450/829, 800/909,
// 950/1010 MHz/mV. The SCP-firmware SCMI table (product/juno/scp_ramfw/config_dvfs.c) has
// 820/900/1000 mV at the same frequencies; see JUNO_R2_SCMI_* below.
const JUNO_R2_LITTLE_OPPS: &[OppDesc] = &[opp(450, 829), opp(800, 909), opp(950, 1010)];
// source: seed 004 (legacy SCPI): big 600/829, 1000/909, 1200/1010 MHz/mV.
const JUNO_R2_BIG_OPPS: &[OppDesc] = &[opp(600, 829), opp(1000, 909), opp(1200, 1010)];

/// Juno r2 LITTLE OPPs as the SCMI SCP firmware reports them (documented alternative).
// source: ARM-software/SCP-firmware product/juno/scp_ramfw/config_dvfs.c (Juno r2 A53).
pub const JUNO_R2_SCMI_LITTLE_OPPS: &[OppDesc] = &[opp(450, 820), opp(800, 900), opp(950, 1000)];
/// Juno r2 big OPPs as the SCMI SCP firmware reports them (documented alternative).
// source: ARM-software/SCP-firmware product/juno/scp_ramfw/config_dvfs.c (Juno r2 A72).
pub const JUNO_R2_SCMI_BIG_OPPS: &[OppDesc] = &[opp(600, 820), opp(1000, 900), opp(1200, 1000)];

// source: SCP-firmware config_dvfs.c DVFS latency 1450 µs (SCMI firmware). UNCONFIRMED for
// the legacy SCPI firmware, which does not document what it reports to Linux.
const JUNO_DVFS_LATENCY_NS: u64 = 1_450_000;

const fn juno_a72(mpidr: u64) -> CpuDesc {
    CpuDesc {
        mpidr,          // source: juno-r2.dts cpu@0/cpu@1 `reg`
        cluster: 0,     // source: juno-r2.dts cpu-map/cluster0
        perf_domain: 0, // source: juno-r2.dts `clocks = <&scpi_dvfs 0>` (atlclk)
        // source: juno-r2.dts A72 `capacity-dmips-mhz = <1024>`
        capacity_dmips_mhz: Some(1024),
        // source: juno-r2.dts A72 `dynamic-power-coefficient = <450>`
        dynamic_power_coefficient: Some(450),
        core: "cortex-a72",
    }
}

const fn juno_a53(mpidr: u64) -> CpuDesc {
    CpuDesc {
        mpidr,          // source: juno-r2.dts cpu@100..cpu@103 `reg`
        cluster: 1,     // source: juno-r2.dts cpu-map/cluster1
        perf_domain: 1, // source: juno-r2.dts `clocks = <&scpi_dvfs 1>` (aplclk)
        // source: juno-r2.dts A53 `capacity-dmips-mhz = <485>`
        capacity_dmips_mhz: Some(485),
        // source: juno-r2.dts A53 `dynamic-power-coefficient = <140>`
        dynamic_power_coefficient: Some(140),
        core: "cortex-a53",
    }
}

/// ARM Juno r2: 2× Cortex-A72 + 4× Cortex-A53, one cpufreq policy per cluster (SCPI).
pub const JUNO_R2: BoardDesc = BoardDesc {
    name: "juno-r2",
    cpus: &[
        juno_a72(0x0),
        juno_a72(0x1),
        juno_a53(0x100),
        juno_a53(0x101),
        juno_a53(0x102),
        juno_a53(0x103),
    ],
    perf_domains: &[
        PerfDomainDesc {
            name: "big",
            opps: JUNO_R2_BIG_OPPS,
            transition_latency_ns: JUNO_DVFS_LATENCY_NS,
        },
        PerfDomainDesc {
            name: "little",
            opps: JUNO_R2_LITTLE_OPPS,
            transition_latency_ns: JUNO_DVFS_LATENCY_NS,
        },
    ],
};

// ---------------------------------------------------------------------------------------
// HiKey960 (Hi3660)
// ---------------------------------------------------------------------------------------

// source: hi3660.dtsi cluster0_opp (opp-shared): 533/999/1402/1709/1844 MHz at
// 700/800/900/1000/1100 mV.
const HIKEY960_LITTLE_OPPS: &[OppDesc] = &[
    opp(533, 700),
    opp(999, 800),
    opp(1402, 900),
    opp(1709, 1000),
    opp(1844, 1100),
];
// source: hi3660.dtsi cluster1_opp (opp-shared): 903/1421/1805/2112/2362 MHz at
// 700/800/900/1000/1100 mV.
const HIKEY960_BIG_OPPS: &[OppDesc] = &[
    opp(903, 700),
    opp(1421, 800),
    opp(1805, 900),
    opp(2112, 1000),
    opp(2362, 1100),
];
// source: hi3660.dtsi `clock-latency-ns = <300000>` on each OPP.
const HIKEY960_LATENCY_NS: u64 = 300_000;

const fn hikey960_a53(mpidr: u64) -> CpuDesc {
    CpuDesc {
        mpidr,          // source: hi3660.dtsi cpu0..cpu3 `reg` 0x0..0x3
        cluster: 0,     // source: hi3660.dtsi cpu-map/cluster0
        perf_domain: 0, // source: hi3660.dtsi `clocks = <&stub_clock HI3660_CLK_STUB_CLUSTER0>`
        // source: hi3660.dtsi A53 `capacity-dmips-mhz = <592>`
        capacity_dmips_mhz: Some(592),
        // source: hi3660.dtsi A53 `dynamic-power-coefficient = <110>`
        dynamic_power_coefficient: Some(110),
        core: "cortex-a53",
    }
}

const fn hikey960_a73(mpidr: u64) -> CpuDesc {
    CpuDesc {
        mpidr,          // source: hi3660.dtsi cpu4..cpu7 `reg` 0x100..0x103
        cluster: 1,     // source: hi3660.dtsi cpu-map/cluster1
        perf_domain: 1, // source: hi3660.dtsi `clocks = <&stub_clock HI3660_CLK_STUB_CLUSTER1>`
        // source: hi3660.dtsi A73 `capacity-dmips-mhz = <1024>`
        capacity_dmips_mhz: Some(1024),
        // source: hi3660.dtsi A73 `dynamic-power-coefficient = <550>`
        dynamic_power_coefficient: Some(550),
        core: "cortex-a73",
    }
}

/// HiKey960 (Hi3660): 4× Cortex-A53 + 4× Cortex-A73, one cpufreq policy per cluster.
pub const HIKEY960: BoardDesc = BoardDesc {
    name: "hikey960",
    cpus: &[
        hikey960_a53(0x0),
        hikey960_a53(0x1),
        hikey960_a53(0x2),
        hikey960_a53(0x3),
        hikey960_a73(0x100),
        hikey960_a73(0x101),
        hikey960_a73(0x102),
        hikey960_a73(0x103),
    ],
    perf_domains: &[
        PerfDomainDesc {
            name: "little",
            opps: HIKEY960_LITTLE_OPPS,
            transition_latency_ns: HIKEY960_LATENCY_NS,
        },
        PerfDomainDesc {
            name: "big",
            opps: HIKEY960_BIG_OPPS,
            transition_latency_ns: HIKEY960_LATENCY_NS,
        },
    ],
};

// ---------------------------------------------------------------------------------------
// HiKey (Hi6220)
// ---------------------------------------------------------------------------------------

// source: hi6220.dtsi cpu_opp_table (opp-shared): 208/432/729/960/1200 MHz at
// 1040/1040/1090/1180/1330 mV.
const HIKEY_OPPS: &[OppDesc] = &[
    opp(208, 1040),
    opp(432, 1040),
    opp(729, 1090),
    opp(960, 1180),
    opp(1200, 1330),
];
// source: hi6220.dtsi `clock-latency-ns = <500000>` on each OPP.
const HIKEY_LATENCY_NS: u64 = 500_000;

const fn hikey_a53(mpidr: u64, cluster: u16) -> CpuDesc {
    CpuDesc {
        mpidr,          // source: hi6220.dtsi cpu0..3 `reg` 0x0..0x3, cpu4..7 0x100..0x103
        cluster,        // source: hi6220.dtsi cpu-map/cluster0, cluster1
        perf_domain: 0, // source: hi6220.dtsi one `opp-shared` table, `clocks = <&stub_clock 0>`
        // source: hi6220.dtsi has no `capacity-dmips-mhz` (symmetric: every CPU 1024)
        capacity_dmips_mhz: None,
        // source: hi6220.dtsi `dynamic-power-coefficient = <311>` (on cpu0; cpufreq-dt
        // registers the energy model of the shared policy from that CPU, so it holds for all)
        dynamic_power_coefficient: Some(311),
        core: "cortex-a53",
    }
}

/// HiKey (Hi6220): 8× Cortex-A53 in two clusters sharing one clock. Symmetric: no EAS.
pub const HIKEY: BoardDesc = BoardDesc {
    name: "hikey",
    cpus: &[
        hikey_a53(0x0, 0),
        hikey_a53(0x1, 0),
        hikey_a53(0x2, 0),
        hikey_a53(0x3, 0),
        hikey_a53(0x100, 1),
        hikey_a53(0x101, 1),
        hikey_a53(0x102, 1),
        hikey_a53(0x103, 1),
    ],
    perf_domains: &[PerfDomainDesc {
        name: "all",
        opps: HIKEY_OPPS,
        transition_latency_ns: HIKEY_LATENCY_NS,
    }],
};

/// Every board, default (Juno r2) first.
pub const ALL: &[&BoardDesc] = &[&JUNO_R2, &HIKEY960, &HIKEY];

/// Look a board up by name (`"juno-r2"`, `"hikey960"`, `"hikey"`); the emulated names
/// (`"qemu-juno-r2"`, ...) map to the same tables.
pub fn by_name(name: &str) -> Option<&'static BoardDesc> {
    let name = name.strip_prefix("qemu-").unwrap_or(name);
    ALL.iter().copied().find(|b| b.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use asym_sched::topology::Topology;
    use asym_sched::types::{Capacity, CpuId};

    /// boards.md "Targets" table: A72 1024 / A53 383; A73 1024 / A53 462; HiKey all 1024.
    #[test]
    fn capacity_orig_matches_boards_md() {
        let juno = Topology::from_board(&JUNO_R2).unwrap();
        let caps: [u32; 6] = core::array::from_fn(|i| juno.capacity_orig(CpuId(i as u16)).0);
        assert_eq!(caps, [1024, 1024, 383, 383, 383, 383]);

        let h960 = Topology::from_board(&HIKEY960).unwrap();
        let caps: [u32; 8] = core::array::from_fn(|i| h960.capacity_orig(CpuId(i as u16)).0);
        assert_eq!(caps, [462, 462, 462, 462, 1024, 1024, 1024, 1024]);

        let hikey = Topology::from_board(&HIKEY).unwrap();
        assert!(hikey
            .cpus()
            .iter()
            .all(|c| c.capacity_orig == Capacity(1024)));
    }

    #[test]
    fn eas_possible_only_on_asymmetric_boards() {
        assert!(Topology::from_board(&JUNO_R2).unwrap().eas_possible());
        assert!(Topology::from_board(&HIKEY960).unwrap().eas_possible());
        assert!(!Topology::from_board(&HIKEY).unwrap().eas_possible());
    }

    #[test]
    fn perf_domains_group_the_clusters() {
        let juno = Topology::from_board(&JUNO_R2).unwrap();
        assert_eq!(juno.perf_domain_of(CpuId(0)).unwrap().cpus.0, 0b000011);
        assert_eq!(juno.perf_domain_of(CpuId(5)).unwrap().cpus.0, 0b111100);
        let hikey = Topology::from_board(&HIKEY).unwrap();
        assert_eq!(hikey.nr_perf_domains(), 1);
        assert_eq!(hikey.perf_domain_of(CpuId(7)).unwrap().cpus.weight(), 8);
        assert_eq!(hikey.cluster_mask(1).0, 0xf0);
    }

    /// boards.md's EM tables: the OPPs and voltages, checked through the power formula
    /// `µW = C × mV² × MHz / 10⁶` against the µW column (independent of our tables' layout).
    #[test]
    fn power_formula_reproduces_boards_md_tables() {
        fn power_uw(c: u32, o: &OppDesc) -> u64 {
            let mv = (o.voltage.0 / 1000) as u64;
            let mhz = (o.freq.0 / 1000) as u64;
            c as u64 * mv * mv * mhz / 1_000_000
        }
        let check = |b: &BoardDesc, pd: usize, cpu: usize, want: &[u64]| {
            let c = b.cpus[cpu].dynamic_power_coefficient.unwrap();
            let got: std::vec::Vec<u64> = b.perf_domains[pd]
                .opps
                .iter()
                .map(|o| power_uw(c, o))
                .collect();
            assert_eq!(got, want, "{} pd{pd}", b.name);
        };
        check(&JUNO_R2, 1, 2, &[43296, 92543, 135673]);
        check(&JUNO_R2, 0, 0, &[185555, 371826, 550854]);
        check(&HIKEY960, 0, 0, &[28728, 70329, 124918, 187990, 245436]);
        check(&HIKEY960, 1, 4, &[243358, 500192, 804127, 1161600, 1571911]);
        check(&HIKEY, 0, 0, &[69966, 145315, 269364, 415714, 660153]);
    }

    #[test]
    fn lookup_by_name() {
        assert_eq!(by_name("juno-r2").unwrap().name, "juno-r2");
        assert_eq!(by_name("qemu-hikey960").unwrap().name, "hikey960");
        assert!(by_name("rpi4").is_none());
        assert_eq!(ALL[0].name, "juno-r2");
    }
}
