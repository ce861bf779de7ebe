//! HiKey (Kirin 620 / Hi6220): 8× Cortex-A53 in two clusters sharing one clock (symmetric: no
//! EAS), GIC-400, frequency set through the stub clock over the Hi6220 mailbox to the MCU
//! firmware, booted by TF-A → u-boot (instead of the default UEFI) → `booti`.
//!
//! Sources: the mainline device tree (Linux `arch/arm64/boot/dts/hisilicon/hi6220.dtsi`,
//! `hi6220-hikey.dts`, as compiled in Debian's arm64 kernel package, which `cargo xtask test`
//! checks this crate against), u-boot (`include/configs/hikey.h`,
//! `board/hisilicon/hikey/hikey.c`) and TF-A (`plat/hisilicon/hikey/`).
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

// source: hi6220.dtsi cpu_opp_table (opp-shared): 208/432/729/960/1200 MHz at
// 1040/1040/1090/1180/1330 mV.
const OPPS: &[OppDesc] = &[
    opp(208, 1040),
    opp(432, 1040),
    opp(729, 1090),
    opp(960, 1180),
    opp(1200, 1330),
];
// source: hi6220.dtsi `clock-latency-ns = <500000>` on each OPP.
const LATENCY_NS: u64 = 500_000;

const fn a53(mpidr: u64, cluster: u16) -> CpuDesc {
    CpuDesc {
        mpidr,          // source: hi6220.dtsi cpu0..3 `reg` 0x0..0x3, cpu4..7 0x100..0x103
        cluster,        // source: hi6220.dtsi cpu-map/cluster0, cluster1
        perf_domain: 0, // source: hi6220.dtsi one `opp-shared` table, `clocks = <&stub_clock 0>`
        // source: hi6220.dtsi has no `capacity-dmips-mhz` (symmetric: every CPU 1024)
        capacity_dmips_mhz: None,
        // source: hi6220.dtsi `dynamic-power-coefficient = <311>` on every cpu node
        dynamic_power_coefficient: Some(311),
        core: "cortex-a53",
    }
}

/// HiKey's CPUs: two clusters of four, one cpufreq policy for all eight.
pub const SCHED: BoardDesc = BoardDesc {
    name: "hikey",
    cpus: &[
        a53(0x0, 0),
        a53(0x1, 0),
        a53(0x2, 0),
        a53(0x3, 0),
        a53(0x100, 1),
        a53(0x101, 1),
        a53(0x102, 1),
        a53(0x103, 1),
    ],
    perf_domains: &[PerfDomainDesc {
        name: "all",
        opps: OPPS,
        transition_latency_ns: LATENCY_NS,
    }],
};

// ---------------------------------------------------------------------------------------
// Memory, boot flow, devices, firmware
// ---------------------------------------------------------------------------------------

/// The six banks: the 1 GiB board's DRAM less the MCU firmware, reboot reason, mailbox
/// buffer, MCU section and OP-TEE holes.
// source: hi6220-hikey.dts memory@0 `reg`; u-boot board/hisilicon/hikey/hikey.c
// dram_init_banksize writes the same six banks at booti.
const MEMORY: &[MemRange] = &[
    range(0x0000_0000, 0x05e0_0000),
    range(0x05f0_0000, 0x0000_1000),
    range(0x05f0_2000, 0x00ef_d000),
    range(0x06e0_0000, 0x0060_f000),
    range(0x0741_0000, 0x1aaf_0000),
    range(0x2200_0000, 0x1c00_0000),
];

/// The board's configuration beyond the scheduling description.
pub const CONFIG: BoardConfig = BoardConfig {
    name: "hikey",
    sched: &SCHED,
    // source: hi6220.dtsi cpu_opp_table.
    opps: OppSource::Dt,
    uboot: UBoot {
        layout: BootLayout {
            // source: hikey.c dram_init_banksize gd->dram[0].start = PHYS_SDRAM_1 = 0.
            dram0_start: 0x0,
            // source: u-boot include/configs/hikey.h CFG_EXTRA_ENV_SETTINGS
            // (kernel_addr_r 0x00080000, fdt_addr_r 0x02000000).
            kernel_addr_r: 0x0008_0000,
            fdt_addr_r: 0x0200_0000,
            // hikey.h sets no scriptaddr, which distro boot needs to load boot.scr:
            // docs/boards/hikey.md has the user set this value once (`setenv scriptaddr
            // 0x03000000; saveenv`). 0x0300_0000 lies in bank 4, above the DTB's 2 MiB.
            scriptaddr: Some(0x0300_0000),
            ramdisk_addr_r: None,
            // source: booti_setup: flags bit 3 clear → bank 0's start + text_offset 0x80000
            // = kernel_addr_r, so booti does not move it.
            link_base: 0x0008_0000,
        },
        // source: hikey.h BOOT_TARGET_DEVICES: USB 0, MMC 1 (microSD), DHCP.
        boot_targets: &["usb0", "mmc1", "dhcp"],
        // source: hikey.h fdtfile=hi6220-hikey.dtb (u-boot's built-in copy may be older).
        fdt: FdtSource::File("hi6220-hikey.dtb"),
        memory_banks: MEMORY,
    },
    dt_memory: DtMemory::Banks(MEMORY),
    // source: hi6220-hikey.dts reserved-memory/ramoops@21f00000 (1 MiB); its linux,cma has
    // only a size (Linux allocates it) and reserves nothing fixed.
    dt_reserved: &[Region {
        range: range(0x21f0_0000, 0x10_0000),
        name: "ramoops@21f00000",
        no_map: false,
    }],
    // The holes of /memory (hikey.c dram_init_banksize's comment, TF-A hikey_def.h): outside
    // RAM already; listed so the layout checks prove nothing is placed there.
    carve_outs: &[
        // source: hikey.c "0x05e0,0000 - 0x05ef,ffff: MCU firmware runtime using".
        Region {
            range: range(0x05e0_0000, 0x10_0000),
            name: "MCU firmware",
            no_map: true,
        },
        // source: hikey.c "0x05f0,1000 - 0x05f0,1fff: Reboot reason".
        Region {
            range: range(0x05f0_1000, 0x1000),
            name: "reboot reason",
            no_map: true,
        },
        // source: hikey.c "0x06df,f000 - 0x06df,ffff: Mailbox message data" (the hi6220
        // mailbox's buffer at 0x06dff800, hi6220.dtsi mailbox@f7510000 reg[1]).
        Region {
            range: range(0x06df_f000, 0x1000),
            name: "mailbox message data",
            no_map: true,
        },
        // source: hikey.c "0x0740,f000 - 0x0740,ffff: MCU firmware section".
        Region {
            range: range(0x0740_f000, 0x1000),
            name: "MCU firmware section",
            no_map: true,
        },
        // source: hikey.c "0x3e00,0000 - 0x3fff,ffff: OP-TEE"; TF-A hikey_def.h DDR_SEC_BASE
        // 0x3F000000 (16 MiB secure) and the 16 MiB of OP-TEE's shared/SDP memory below it.
        Region {
            range: range(0x3e00_0000, 0x0200_0000),
            name: "OP-TEE",
            no_map: true,
        },
    ],
    console: Console {
        // source: hi6220.dtsi serial@f7113000 (uart3, `interrupts = <GIC_SPI 39 ...>`),
        // hi6220-hikey.dts `stdout-path = "serial3:115200n8"`; TF-A platform.mk
        // CONSOLE_BASE := PL011_UART3_BASE.
        uart_base: 0xf711_3000,
        uart_intid: 39 + 32,
        alias: "serial3",
        // source: TF-A plat/hisilicon/hikey/include/hikey_def.h PL011_UART_CLK_IN_HZ 19200000.
        clock_hz: 19_200_000,
        // source: hikey_def.h PL011_BAUDRATE 115200; stdout-path "115200n8".
        baud: 115_200,
    },
    // source: hi6220.dtsi interrupt-controller@f6801000 `arm,gic-400`: GICD 0xf6801000,
    // GICC 0xf6802000 (reg sizes 4 KiB, 8 KiB; u-boot hikey.h GICD_BASE/GICC_BASE agree).
    gic: GicDesc::V2 {
        gicd: range(0xf680_1000, 0x1000),
        gicc: range(0xf680_2000, 0x2000),
    },
    timer: Timer {
        // source: hi6220.dtsi timer `arm,armv8-timer` PPIs 13, 14, 11, 10.
        el1_phys_intid: 30,
        el1_virt_intid: 27,
        // source: TF-A plat/hisilicon/hikey/aarch64/hikey_common.c plat_get_syscnt_freq2
        // returns 1200000.
        cntfrq_hz: 1_200_000,
    },
    // source: hi6220.dtsi psci `method = "smc"`.
    psci: Conduit::Smc,
    idle_states: &[
        // source: hi6220.dtsi idle-states/cpu-sleep.
        IdleState {
            name: "cpu-sleep",
            psci_suspend_param: 0x001_0000,
            entry_latency_us: 700,
            exit_latency_us: 250,
            min_residency_us: 1000,
            local_timer_stop: true,
        },
        // source: hi6220.dtsi idle-states/cluster-sleep (its wakeup-latency-us 1500 is not kept).
        IdleState {
            name: "cluster-sleep",
            psci_suspend_param: 0x101_0000,
            entry_latency_us: 1000,
            exit_latency_us: 700,
            min_residency_us: 2700,
            local_timer_stop: true,
        },
    ],
    // source: hi6220.dtsi every cpu `cpu-idle-states = <&CPU_SLEEP &CLUSTER_SLEEP>`.
    cpu_idle_states: &[
        &[0, 1],
        &[0, 1],
        &[0, 1],
        &[0, 1],
        &[0, 1],
        &[0, 1],
        &[0, 1],
        &[0, 1],
    ],
    // source: hi6220.dtsi mailbox@f7510000 (`reg = <IPC 0xf7510000 0x1000>, <buffer 0x06dff800
    // 0x800>`), stub_clock (`mboxes = <&mailbox 1 0 11>`, `hisilicon,hi6220-clk-sram =
    // <&sram>`), sram@fff80000 (0x12000).
    dvfs: &[DvfsTransport::Hi6220Stub {
        mailbox: range(0xf751_0000, 0x1000),
        mailbox_buffer: range(0x06df_f800, 0x800),
        channel: 1,
        dst_irq: 0,
        ack_irq: 11,
        sram: range(0xfff8_0000, 0x1_2000),
    }],
    // SYSTEM_OFF after a pass: TF-A's hikey_system_off drops PWR_HOLD, but the PMIC only cuts
    // power with jumper J1-2 removed; otherwise TF-A prints a notice and resets the board (see
    // docs/boards/hikey.md). After a failure: halt, so the report stays on the console.
    end: EndPolicy {
        success: EndAction::SystemOff,
        failure: EndAction::Halt,
    },
};
