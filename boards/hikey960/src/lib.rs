//! HiKey960 (Kirin 960 / Hi3660): 4× Cortex-A53 + 4× Cortex-A73, GIC-400, frequency set through
//! the stub clock over the Hi3660 mailbox to the LPM3 firmware, booted by TF-A → u-boot →
//! `booti` from the microSD card.
//!
//! Sources: the mainline device tree (Linux `arch/arm64/boot/dts/hisilicon/hi3660.dtsi`,
//! `hi3660-hikey960.dts`, as compiled in Debian's arm64 kernel package, which `cargo xtask
//! test` checks this crate against), u-boot (`include/configs/hikey960.h`,
//! `board/hisilicon/hikey960/hikey960.c`) and TF-A (`plat/hisilicon/hikey960/`).
#![no_std]
#![forbid(unsafe_code)]

use asym_kernel::board::{
    BoardConfig, BootLayout, Console, DtMemory, DvfsTransport, EndAction, EndPolicy, FdtSource,
    IdleState, OppSource, Region, Timer, UBoot,
};
use asym_kernel::dt::{Conduit, GicDesc, MemRange};
use asym_sched::topology::{BoardDesc, CpuDesc, OppDesc, PerfDomainDesc};
use asym_sched::types::{Khz, MicroVolt};

const fn opp(mhz: u32, mv: u32) -> OppDesc {
    OppDesc {
        freq: Khz(mhz * 1000),
        voltage: MicroVolt(mv * 1000),
    }
}

const fn range(base: usize, size: usize) -> MemRange {
    MemRange { base, size }
}

// ---------------------------------------------------------------------------------------
// Scheduling description (CPUs, domains, OPPs, energy model)
// ---------------------------------------------------------------------------------------

// source: hi3660.dtsi cluster0_opp (opp-shared): 533/999/1402/1709/1844 MHz at
// 700/800/900/1000/1100 mV.
const LITTLE_OPPS: &[OppDesc] = &[
    opp(533, 700),
    opp(999, 800),
    opp(1402, 900),
    opp(1709, 1000),
    opp(1844, 1100),
];
// source: hi3660.dtsi cluster1_opp (opp-shared): 903/1421/1805/2112/2362 MHz at
// 700/800/900/1000/1100 mV.
const BIG_OPPS: &[OppDesc] = &[
    opp(903, 700),
    opp(1421, 800),
    opp(1805, 900),
    opp(2112, 1000),
    opp(2362, 1100),
];
// source: hi3660.dtsi `clock-latency-ns = <300000>` on each OPP.
const LATENCY_NS: u64 = 300_000;

const fn a53(mpidr: u64) -> CpuDesc {
    CpuDesc {
        mpidr,          // source: hi3660.dtsi cpu0..cpu3 `reg` 0x0..0x3
        cluster: 0,     // source: hi3660.dtsi cpu-map/cluster0
        perf_domain: 0, // source: hi3660.dtsi `operating-points-v2 = <&cluster0_opp>`
        // source: hi3660.dtsi A53 `capacity-dmips-mhz = <592>`
        capacity_dmips_mhz: Some(592),
        // source: hi3660.dtsi `dynamic-power-coefficient = <110>` (on cpu0, the policy CPU
        // whose value Linux's dev_pm_opp_of_register_em uses for the whole domain)
        dynamic_power_coefficient: Some(110),
        core: "cortex-a53",
    }
}

const fn a73(mpidr: u64) -> CpuDesc {
    CpuDesc {
        mpidr,          // source: hi3660.dtsi cpu4..cpu7 `reg` 0x100..0x103
        cluster: 1,     // source: hi3660.dtsi cpu-map/cluster1
        perf_domain: 1, // source: hi3660.dtsi `operating-points-v2 = <&cluster1_opp>`
        // source: hi3660.dtsi A73 `capacity-dmips-mhz = <1024>`
        capacity_dmips_mhz: Some(1024),
        // source: hi3660.dtsi `dynamic-power-coefficient = <550>` (on cpu4, the policy CPU)
        dynamic_power_coefficient: Some(550),
        core: "cortex-a73",
    }
}

/// HiKey960's CPUs, clusters and cpufreq policies (one per cluster).
pub const SCHED: BoardDesc = BoardDesc {
    name: "hikey960",
    cpus: &[
        a53(0x0),
        a53(0x1),
        a53(0x2),
        a53(0x3),
        a73(0x100),
        a73(0x101),
        a73(0x102),
        a73(0x103),
    ],
    perf_domains: &[
        PerfDomainDesc {
            name: "little",
            opps: LITTLE_OPPS,
            transition_latency_ns: LATENCY_NS,
        },
        PerfDomainDesc {
            name: "big",
            opps: BIG_OPPS,
            transition_latency_ns: LATENCY_NS,
        },
    ],
};

// ---------------------------------------------------------------------------------------
// Memory, boot flow, devices, firmware
// ---------------------------------------------------------------------------------------

/// The one bank u-boot writes into `/memory` at booti.
// source: u-boot include/configs/hikey960.h PHYS_SDRAM_1 0x0, PHYS_SDRAM_1_SIZE 0xC0000000;
// board/hisilicon/hikey960/hikey960.c dram_init_banksize (one bank); written into the DT by
// arch_fixup_fdt at booti.
const MEMORY: &[MemRange] = &[range(0x0, 0xc000_0000)];

/// The board's configuration beyond the scheduling description.
pub const CONFIG: BoardConfig = BoardConfig {
    name: "hikey960",
    sched: &SCHED,
    // source: hi3660.dtsi cluster0_opp / cluster1_opp.
    opps: OppSource::Dt,
    uboot: UBoot {
        layout: BootLayout {
            // source: hikey960.c dram_init_banksize gd->dram[0].start = PHYS_SDRAM_1 = 0.
            dram0_start: 0x0,
            // source: u-boot include/configs/hikey960.h CFG_EXTRA_ENV_SETTINGS
            // (kernel_addr_r, fdt_addr_r, scriptaddr; no ramdisk_addr_r).
            kernel_addr_r: 0x1100_0000,
            fdt_addr_r: 0x1000_0000,
            scriptaddr: Some(0x0002_0000),
            ramdisk_addr_r: None,
            // source: booti_setup (u-boot arch/arm/lib/image.c): flags bit 3 clear → moved from
            // kernel_addr_r to bank 0's start + text_offset 0x80000.
            link_base: 0x0008_0000,
        },
        // source: hikey960.h BOOT_TARGET_DEVICES: func(MMC, mmc, 0), the microSD slot.
        boot_targets: &["mmc0"],
        // u-boot's own DT is a built-in copy (CONFIG_DEFAULT_DEVICE_TREE="hi3660-hikey960",
        // configs/hikey960_defconfig) that may be older than mainline: boot.scr loads the
        // mainline one from the card (fdtfile=hi3660-hikey960.dtb in hikey960.h).
        fdt: FdtSource::File("hi3660-hikey960.dtb"),
        memory_banks: MEMORY,
    },
    // source: hi3660-hikey960.dts memory@0 `reg = <0x0 0x0 0x0 0x0>` ("rewrite this at bootloader").
    dt_memory: DtMemory::Placeholder,
    // source: hi3660-hikey960.dts reserved-memory/ramoops@32000000 (1 MiB).
    dt_reserved: &[Region {
        range: range(0x3200_0000, 0x10_0000),
        name: "ramoops@32000000",
        no_map: false,
    }],
    carve_outs: &[
        // source: TF-A plat/hisilicon/hikey960/include/platform_def.h BL31_BASE 0x1AC58000,
        // BL31_LIMIT 0x1AC98000: the PSCI runtime stays resident in DRAM and no DT node says so.
        Region {
            range: range(0x1ac5_8000, 0x4_0000),
            name: "TF-A BL31",
            no_map: false,
        },
        // source: hi3660-hikey960.dts reboot-mode-syscon@32100000: the reboot-reason word, a
        // syscon in DRAM rather than a /reserved-memory child.
        Region {
            range: range(0x3210_0000, 0x1000),
            name: "reboot-mode-syscon@32100000",
            no_map: false,
        },
        // source: TF-A plat/hisilicon/hikey960/hikey960_def.h "DDR for TEE (80MB from
        // 0x3E00000-0x43000FFF)": OP-TEE's secure DDR (DDR_SEC_BASE 0x3F000000, 60 MiB), its
        // shared memory, SDP, SPMC data (DDR2_SEC_BASE 0x42C00000) and manifest
        // (DDR_SEC_CONFIG_BASE 0x43000000, 4 KiB). Parts are TZC-protected: not mapped.
        Region {
            range: range(0x3e00_0000, 0x0500_1000),
            name: "OP-TEE / SPMC DDR",
            no_map: true,
        },
    ],
    console: Console {
        // source: hi3660.dtsi serial@fff32000 (uart6, `interrupts = <GIC_SPI 79 ...>`),
        // hi3660-hikey960.dts `stdout-path = "serial6:115200n8"`.
        uart_base: 0xfff3_2000,
        uart_intid: 79 + 32,
        alias: "serial6",
        // source: TF-A hikey960_def.h PL011_UART_CLK_IN_HZ 19200000.
        clock_hz: 19_200_000,
        // source: hikey960_def.h PL011_BAUDRATE 115200; stdout-path "115200n8".
        baud: 115_200,
    },
    // source: hi3660.dtsi interrupt-controller@e82b0000 `arm,gic-400` reg: GICD 0xe82b1000,
    // GICC 0xe82b2000 (reg sizes 4 KiB, 8 KiB; u-boot hikey960.h GICD_BASE/GICC_BASE agree).
    gic: GicDesc::V2 {
        gicd: range(0xe82b_1000, 0x1000),
        gicc: range(0xe82b_2000, 0x2000),
    },
    timer: Timer {
        // source: hi3660.dtsi timer `arm,armv8-timer` PPIs 13, 14, 11, 10.
        el1_phys_intid: 30,
        el1_virt_intid: 27,
        // source: TF-A plat/hisilicon/hikey960/aarch64/hikey960_common.c
        // plat_get_syscnt_freq2 returns 1920000 (programmed into CNTFRQ_EL0 by BL1 and BL31).
        cntfrq_hz: 1_920_000,
    },
    // source: hi3660.dtsi psci `method = "smc"`.
    psci: Conduit::Smc,
    idle_states: &[
        // source: hi3660.dtsi idle-states (cpu-sleep-0 / cluster-sleep-0 for the A53s,
        // cpu-sleep-1 / cluster-sleep-1 for the A73s).
        IdleState {
            name: "cpu-sleep-0",
            psci_suspend_param: 0x001_0000,
            entry_latency_us: 400,
            exit_latency_us: 650,
            min_residency_us: 1500,
            local_timer_stop: true,
        },
        IdleState {
            name: "cluster-sleep-0",
            psci_suspend_param: 0x101_0000,
            entry_latency_us: 500,
            exit_latency_us: 1600,
            min_residency_us: 3500,
            local_timer_stop: true,
        },
        IdleState {
            name: "cpu-sleep-1",
            psci_suspend_param: 0x001_0000,
            entry_latency_us: 400,
            exit_latency_us: 550,
            min_residency_us: 1500,
            local_timer_stop: true,
        },
        IdleState {
            name: "cluster-sleep-1",
            psci_suspend_param: 0x101_0000,
            entry_latency_us: 800,
            exit_latency_us: 2900,
            min_residency_us: 3500,
            local_timer_stop: true,
        },
    ],
    // source: hi3660.dtsi cpu0..3 `cpu-idle-states = <&CPU_SLEEP_0 &CLUSTER_SLEEP_0>`,
    // cpu4..7 `<&CPU_SLEEP_1 &CLUSTER_SLEEP_1>`.
    cpu_idle_states: &[
        &[0, 1],
        &[0, 1],
        &[0, 1],
        &[0, 1],
        &[2, 3],
        &[2, 3],
        &[2, 3],
        &[2, 3],
    ],
    // source: hi3660.dtsi mailbox@e896b000 (`hisilicon,hi3660-mbox`, 4 KiB) and
    // stub_clock@e896b500 (0x100 bytes, `mboxes = <&mailbox 13 3 0>`).
    dvfs: &[DvfsTransport::Hi3660Stub {
        mailbox: range(0xe896_b000, 0x1000),
        channel: 13,
        dst_irq: 3,
        ack_irq: 0,
        stub_clk: range(0xe896_b500, 0x100),
    }],
    // SYSTEM_OFF after a pass: TF-A's hikey960_system_off drives GPIO 176 low, which cuts the
    // PMIC. After a failure: halt, keeping the report on the console (no reboot loop through
    // u-boot's autoboot).
    end: EndPolicy {
        success: EndAction::SystemOff,
        failure: EndAction::Halt,
    },
};
