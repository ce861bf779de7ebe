//! Arm Juno r2: 2× Cortex-A72 + 4× Cortex-A53, GIC-400, SCP firmware behind SCMI (or SCPI on
//! old firmware), booted by TF-A → u-boot → `booti`.
//!
//! Everything asym knows about the board that is not read at run time, each value with its
//! source: the mainline device tree (Linux `arch/arm64/boot/dts/arm/juno-r2.dts`,
//! `juno-base.dtsi`, `juno-scmi.dtsi`, as compiled in Debian's arm64 kernel package, which
//! `cargo xtask test` checks this crate against), u-boot (`include/configs/vexpress_aemv8.h`,
//! `board/armltd/vexpress64/vexpress64.c`), TF-A (`plat/arm/board/juno/`,
//! `include/plat/arm/common/arm_def.h`) and SCP-firmware (`product/juno/scp_ramfw/`).
//!
//! Logical CPU order is the DT's (A72s first). Linux numbers CPUs in boot order, and the boot
//! CPU is chosen by the firmware (often an A53): the kernel finds its logical id by MPIDR.
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

// source: seed 004 (mailing list, Juno r2 legacy SCPI firmware): LITTLE 450/829, 800/909,
// 950/1010 MHz/mV. The SCP-firmware SCMI table (product/juno/scp_ramfw/config_dvfs.c) has
// 820/900/1000 mV at the same frequencies; see SCMI_* below.
const LITTLE_OPPS: &[OppDesc] = &[opp(450, 829), opp(800, 909), opp(950, 1010)];
// source: seed 004 (legacy SCPI): big 600/829, 1000/909, 1200/1010 MHz/mV.
const BIG_OPPS: &[OppDesc] = &[opp(600, 829), opp(1000, 909), opp(1200, 1010)];

/// LITTLE OPPs as the SCMI SCP firmware reports them (documented alternative).
// source: ARM-software/SCP-firmware product/juno/scp_ramfw/config_dvfs.c (Juno r2 A53).
pub const SCMI_LITTLE_OPPS: &[OppDesc] = &[opp(450, 820), opp(800, 900), opp(950, 1000)];
/// big OPPs as the SCMI SCP firmware reports them (documented alternative).
// source: ARM-software/SCP-firmware product/juno/scp_ramfw/config_dvfs.c (Juno r2 A72).
pub const SCMI_BIG_OPPS: &[OppDesc] = &[opp(600, 820), opp(1000, 900), opp(1200, 1000)];

// source: SCP-firmware config_dvfs.c DVFS latency 1450 µs (SCMI firmware). UNCONFIRMED for
// the legacy SCPI firmware, which does not document what it reports to Linux.
const DVFS_LATENCY_NS: u64 = 1_450_000;

const fn a72(mpidr: u64) -> CpuDesc {
    CpuDesc {
        mpidr,          // source: juno-r2.dts cpu@0/cpu@1 `reg`
        cluster: 0,     // source: juno-r2.dts cpu-map/cluster0
        perf_domain: 0, // source: juno-r2.dts `clocks = <&scpi_dvfs 0>` (atlclk), SCMI `<&scmi_dvfs 0>`
        // source: juno-r2.dts A72 `capacity-dmips-mhz = <1024>`
        capacity_dmips_mhz: Some(1024),
        // source: juno-r2.dts A72 `dynamic-power-coefficient = <450>`
        dynamic_power_coefficient: Some(450),
        core: "cortex-a72",
    }
}

const fn a53(mpidr: u64) -> CpuDesc {
    CpuDesc {
        mpidr,          // source: juno-r2.dts cpu@100..cpu@103 `reg`
        cluster: 1,     // source: juno-r2.dts cpu-map/cluster1
        perf_domain: 1, // source: juno-r2.dts `clocks = <&scpi_dvfs 1>` (aplclk), SCMI `<&scmi_dvfs 1>`
        // source: juno-r2.dts A53 `capacity-dmips-mhz = <485>`
        capacity_dmips_mhz: Some(485),
        // source: juno-r2.dts A53 `dynamic-power-coefficient = <140>`
        dynamic_power_coefficient: Some(140),
        core: "cortex-a53",
    }
}

/// Juno r2's CPUs, clusters and cpufreq policies (one per cluster) with the firmware's OPPs.
pub const SCHED: BoardDesc = BoardDesc {
    name: "juno-r2",
    cpus: &[
        a72(0x0),
        a72(0x1),
        a53(0x100),
        a53(0x101),
        a53(0x102),
        a53(0x103),
    ],
    perf_domains: &[
        PerfDomainDesc {
            name: "big",
            opps: BIG_OPPS,
            transition_latency_ns: DVFS_LATENCY_NS,
        },
        PerfDomainDesc {
            name: "little",
            opps: LITTLE_OPPS,
            transition_latency_ns: DVFS_LATENCY_NS,
        },
    ],
};

// ---------------------------------------------------------------------------------------
// Memory, boot flow, devices, firmware
// ---------------------------------------------------------------------------------------

/// DRAM as the DT describes it and u-boot passes it on: the top 16 MiB of the first 2 GiB are
/// the secure world's and not part of bank 0.
// source: juno-base.dtsi memory@80000000 `reg = <0 0x80000000 0 0x7f000000>, <8 0x80000000 1
// 0x80000000>`; u-boot reads its bank table from that DT (vexpress64.c dram_init_banksize →
// fdtdec_setup_memory_banksize) and writes it back at booti (arch_fixup_fdt).
const MEMORY: &[MemRange] = &[
    range(0x8000_0000, 0x7f00_0000),
    range(0x8_8000_0000, 0x1_8000_0000),
];

/// The board's configuration beyond the scheduling description.
pub const CONFIG: BoardConfig = BoardConfig {
    name: "juno-r2",
    sched: &SCHED,
    // source: juno-r2.dts has no operating-points-v2: the SCP reports OPPs (SCMI
    // PERFORMANCE_DESCRIBE_LEVELS, or SCPI GET_DVFS_INFO on old firmware).
    opps: OppSource::Firmware,
    uboot: UBoot {
        layout: BootLayout {
            // source: the DT's first bank (above), u-boot's gd->dram[0].
            dram0_start: 0x8000_0000,
            // source: u-boot include/configs/vexpress_aemv8.h (Juno): VEXPRESS_KERNEL_ADDR,
            // VEXPRESS_FDT_ADDR, VEXPRESS_SCRIPT_ADDR, VEXPRESS_RAMDISK_ADDR.
            kernel_addr_r: 0x8008_0000,
            fdt_addr_r: 0x8fc0_0000,
            scriptaddr: Some(0x8fd0_0000),
            ramdisk_addr_r: Some(0x8fe0_0000),
            // source: booti_setup (u-boot arch/arm/lib/image.c): flags bit 3 clear → bank 0's
            // 2 MiB-aligned start + text_offset 0x80000 = kernel_addr_r, so booti does not move it.
            link_base: 0x8008_0000,
        },
        // source: vexpress_aemv8.h BOOT_TARGET_DEVICES for CONFIG_TARGET_VEXPRESS64_JUNO.
        boot_targets: &["usb0", "sata0", "sata1", "pxe", "dhcp", "afs"],
        // source: u-boot's control DT is the one flashed to NOR as `board.dtb`
        // (vexpress64.c board_fdt_blob_setup → find_dtb_in_nor_flash(CONFIG_JUNO_DTB_PART),
        // board/armltd/vexpress64/Kconfig default "board.dtb"): juno-r2.dtb or juno-r2-scmi.dtb.
        fdt: FdtSource::Control,
        memory_banks: MEMORY,
    },
    dt_memory: DtMemory::Banks(MEMORY),
    // source: juno-r2.dts / juno-base.dtsi: no /memreserve/ and no /reserved-memory.
    dt_reserved: &[],
    carve_outs: &[Region {
        // source: TF-A include/plat/arm/common/arm_def.h ARM_TZC_DRAM1_SIZE 16 MiB at the top
        // of DRAM1 (SCP, EL3 and OP-TEE memory behind the TZC-400); u-boot vexpress_aemv8.h
        // DRAM_SEC_SIZE "Top 16MB reserved for secure world use". Outside /memory already:
        // listed so the layout checks prove nothing is placed there.
        range: range(0xff00_0000, 0x0100_0000),
        name: "secure DRAM (TF-A BL31 data, SCP, OP-TEE)",
        no_map: true,
    }],
    console: Console {
        // source: juno-base.dtsi serial@7ff80000 (`arm,pl011`, `interrupts = <GIC_SPI 83 ...>`),
        // juno-r2.dts `stdout-path = "serial0:115200n8"`, aliases serial0.
        uart_base: 0x7ff8_0000,
        uart_intid: 83 + 32,
        alias: "serial0",
        // source: juno-clocks.dtsi soc_uartclk 7372800 Hz; u-boot vexpress_aemv8.h
        // CFG_PL011_CLOCK 7372800.
        clock_hz: 7_372_800,
        // source: juno-r2.dts stdout-path "115200n8"; TF-A arm_def.h ARM_CONSOLE_BAUDRATE.
        baud: 115_200,
    },
    // source: juno-base.dtsi interrupt-controller@2c010000 `arm,gic-400`: GICD 0x2c010000,
    // GICC 0x2c02f000 (reg sizes 4 KiB, 8 KiB; u-boot vexpress_aemv8.h GICD_BASE/GICC_BASE
    // agree).
    gic: GicDesc::V2 {
        gicd: range(0x2c01_0000, 0x1000),
        gicc: range(0x2c02_f000, 0x2000),
    },
    timer: Timer {
        // source: juno-base.dtsi timer `arm,armv8-timer` PPIs 13, 14, 11, 10: NS EL1
        // physical PPI 14 (INTID 30), virtual PPI 11 (INTID 27).
        el1_phys_intid: 30,
        el1_virt_intid: 27,
        // source: TF-A plat/arm/common/arm_common.c plat_get_syscnt_freq2 programs CNTFRQ from
        // the system counter's CNTFID0; juno-base.dtsi timer@2a810000 `clock-frequency =
        // <50000000>` gives that counter's rate. UNCONFIRMED as the CNTFRQ_EL0 value (the
        // kernel reads the register and prints it).
        cntfrq_hz: 50_000_000,
    },
    // source: juno-base.dtsi psci `arm,psci-0.2`, `method = "smc"` (TF-A BL31).
    psci: Conduit::Smc,
    idle_states: &[
        // source: juno-r2.dts idle-states/cpu-sleep-0.
        IdleState {
            name: "cpu-sleep-0",
            psci_suspend_param: 0x001_0000,
            entry_latency_us: 300,
            exit_latency_us: 1200,
            min_residency_us: 2000,
            local_timer_stop: true,
        },
        // source: juno-r2.dts idle-states/cluster-sleep-0.
        IdleState {
            name: "cluster-sleep-0",
            psci_suspend_param: 0x101_0000,
            entry_latency_us: 400,
            exit_latency_us: 1200,
            min_residency_us: 2500,
            local_timer_stop: true,
        },
    ],
    // source: juno-r2.dts every cpu `cpu-idle-states = <&CPU_SLEEP_0 &CLUSTER_SLEEP_0>`.
    cpu_idle_states: &[&[0, 1], &[0, 1], &[0, 1], &[0, 1], &[0, 1], &[0, 1]],
    dvfs: &[
        // source: juno-scmi.dtsi firmware/scmi (`mboxes = <&mailbox 0 0>`, shmem
        // cpu_scp_lpri0 = sram@2e000000 + 0x0, 0x80 bytes) and its protocol@13 (`mboxes =
        // <&mailbox 1 0>`, shmem cpu_scp_hpri0 = + 0x100); juno-base.dtsi mhu@2b1f0000 (4 KiB).
        DvfsTransport::Scmi {
            mhu: range(0x2b1f_0000, 0x1000),
            base_doorbell: (0, 0),
            base_shmem: range(0x2e00_0000, 0x80),
            perf_doorbell: Some((1, 0)),
            perf_shmem: Some(range(0x2e00_0100, 0x80)),
        },
        // source: juno-base.dtsi scpi (`mboxes = <&mailbox 1>`, shmem cpu_scp_hpri =
        // sram@2e000000 + 0x200, 0x200 bytes), mhu@2b1f0000 `arm,mhu` (old SCP firmware).
        DvfsTransport::Scpi {
            mhu: range(0x2b1f_0000, 0x1000),
            channel: 1,
            shmem: range(0x2e00_0200, 0x200),
        },
    ],
    // SYSTEM_OFF after a pass: TF-A asks the SCP to power the board down (css_system_off);
    // the motherboard controller stays up (its `Cmd>` prompt takes `reboot`). After a
    // failure: halt, so the report stays on the console and nothing reboots into a loop.
    end: EndPolicy {
        success: EndAction::SystemOff,
        failure: EndAction::Halt,
    },
};
