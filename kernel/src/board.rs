//! What a real board crate (`boards/<name>`) states about its board beyond the device tree:
//! where u-boot puts things, the firmware's memory that the DT does not describe, the console
//! u-boot leaves set up, the DVFS transport, and how a run ends there.
//!
//! Pure data and pure functions: built on the host too, where `cargo xtask image` checks an
//! Image's layout against [`BootLayout`] and `cargo xtask dt-check --board` compares a
//! published device tree, parsed by this crate's DT code, with a [`BoardConfig`]. The types
//! reuse the DT parser's ([`crate::dt`]) so that comparison is field by field.
//!
//! Deliberate difference from Linux: Linux learns firmware carve-outs only from the DT
//! (`/memreserve/`, `/reserved-memory`) or from UEFI's memory map; the boards' u-boot flows pass
//! a DT that omits some of them (TF-A's BL31 and OP-TEE on HiKey960), so the board crate lists
//! them and the kernel never hands them out.

use asym_sched::topology::BoardDesc;

use crate::dt::{Conduit, GicDesc, MemRange};

/// A named physical memory region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub range: MemRange,
    /// The DT node name, or what the firmware keeps there.
    pub name: &'static str,
    /// `no-map` in `/reserved-memory` (or a carve-out that must not even be mapped: secure
    /// memory, whose speculative access by a cacheable mapping may abort).
    pub no_map: bool,
}

/// Where u-boot's `booti` finds and places things (its default environment, `CFG_EXTRA_ENV_SETTINGS`
/// of the board's `include/configs/<board>.h`, and `gd->dram[0]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BootLayout {
    /// `gd->dram[0].start`: `booti` moves an Image whose header flags have bit 3 clear to
    /// `ALIGN(dram0_start, 2 MiB) + text_offset` (u-boot `arch/arm/lib/image.c`, `booti_setup`).
    pub dram0_start: u64,
    /// `kernel_addr_r`: where the script loads `Image` (before the move).
    pub kernel_addr_r: u64,
    /// `fdt_addr_r`: where a DTB loaded from the boot medium goes.
    pub fdt_addr_r: u64,
    /// `scriptaddr`: where distro boot loads `boot.scr`. `None` when the board's default
    /// environment has none (the board's docs say what to set).
    pub scriptaddr: Option<u64>,
    /// `ramdisk_addr_r` (asym loads no ramdisk, but the Image must not cover it).
    pub ramdisk_addr_r: Option<u64>,
    /// The kernel's link address: `dram0_start` aligned up to 2 MiB, plus `text_offset`.
    pub link_base: u64,
}

/// What the script tells `booti` to pass as the device tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FdtSource {
    /// `${fdtcontroladdr}`: the DT u-boot runs with (on Juno the one flashed to NOR as `board.dtb`).
    Control,
    /// A file next to `Image` on the boot partition, loaded to `${fdt_addr_r}`.
    File(&'static str),
}

/// How the board's u-boot is reached and what it does to the DT before `booti` starts us.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UBoot {
    pub layout: BootLayout,
    /// Distro boot's device order (`BOOT_TARGET_DEVICES`), for the docs.
    pub boot_targets: &'static [&'static str],
    pub fdt: FdtSource,
    /// The banks u-boot writes into `/memory` at `booti` (`arch_fixup_fdt` →
    /// `fdt_fixup_memory_banks` from `gd->dram[]`): what the kernel sees, whatever the DTB had.
    pub memory_banks: &'static [MemRange],
}

/// What `/memory` holds in the board's published DTB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DtMemory {
    /// These banks (u-boot's fix-up writes the same ones).
    Banks(&'static [MemRange]),
    /// `reg = <0 0 0 0>`, to be filled by the boot loader (HiKey960).
    Placeholder,
}

/// The console: a PL011 left enabled by u-boot, which the kernel uses as it finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Console {
    /// MMIO base and GIC INTID of the PL011 `/chosen/stdout-path` names.
    pub uart_base: usize,
    pub uart_intid: u32,
    /// `stdout-path`'s alias (`serial0`).
    pub alias: &'static str,
    /// UARTCLK, Hz (what the divisors u-boot programmed are relative to).
    pub clock_hz: u32,
    /// Baud rate u-boot set: the host's terminal must use it (8N1).
    pub baud: u32,
}

/// The architected timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timer {
    /// INTIDs of the non-secure EL1 physical and the virtual timer PPIs.
    pub el1_phys_intid: u32,
    pub el1_virt_intid: u32,
    /// `CNTFRQ_EL0` as the firmware programs it; the kernel reads the register, this is the
    /// value to expect (and the one tick conversions must be exact at).
    pub cntfrq_hz: u64,
}

/// An `arm,idle-state` of `/cpus/idle-states`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdleState {
    pub name: &'static str,
    pub psci_suspend_param: u32,
    pub entry_latency_us: u32,
    pub exit_latency_us: u32,
    pub min_residency_us: u32,
    /// `local-timer-stop`: needs a broadcast timer to be entered.
    pub local_timer_stop: bool,
}

/// How the kernel asks firmware for a frequency: the DT's binding data, with addresses
/// translated to physical ones. The drivers themselves live elsewhere; this is their input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DvfsTransport {
    /// `arm,scmi` over an `arm,mhu-doorbell` MHU (Linux `drivers/firmware/arm_scmi`).
    Scmi {
        /// MHU registers.
        mhu: MemRange,
        /// Base protocol channel: (MHU channel, doorbell bit) and its transmit shared memory.
        base_doorbell: (u32, u32),
        base_shmem: MemRange,
        /// The performance protocol's (0x13) own channel, when it has one.
        perf_doorbell: Option<(u32, u32)>,
        perf_shmem: Option<MemRange>,
    },
    /// `arm,scpi` over an `arm,mhu` MHU (Linux `drivers/firmware/arm_scpi.c`).
    Scpi {
        mhu: MemRange,
        /// `mboxes` cell: the MHU channel (0 low, 1 high priority).
        channel: u32,
        shmem: MemRange,
    },
    /// `hisilicon,hi3660-stub-clk` over a `hisilicon,hi3660-mbox` (Linux
    /// `drivers/clk/hisilicon/clk-hi3660-stub.c`).
    Hi3660Stub {
        mailbox: MemRange,
        /// `mboxes` cells: channel, destination interrupt, acknowledge interrupt.
        channel: u32,
        dst_irq: u32,
        ack_irq: u32,
        /// The stub clock's registers (frequency read-back at +0x70).
        stub_clk: MemRange,
    },
    /// `hisilicon,hi6220-stub-clk` over a `hisilicon,hi6220-mbox` (Linux
    /// `drivers/clk/hisilicon/clk-hi6220-stub.c`).
    Hi6220Stub {
        /// The mailbox's IPC registers and its DRAM message buffer.
        mailbox: MemRange,
        mailbox_buffer: MemRange,
        /// `mboxes` cells: channel (slot), destination interrupt, acknowledge interrupt.
        channel: u32,
        dst_irq: u32,
        ack_irq: u32,
        /// `hisilicon,hi6220-clk-sram`: the SRAM holding the request and current-frequency words.
        sram: MemRange,
    },
}

impl DvfsTransport {
    /// Whether the device tree's transport `dt` is this one: the same protocol at the same
    /// registers and shared memory with the same `mboxes` cells. (The DT does not give SCPI's
    /// MHU channel in a form the kernel keeps, so SCPI compares its regions only.)
    pub fn matches(&self, dt: &crate::dt::dvfs::Transport) -> bool {
        use crate::dt::dvfs::Transport as Dt;
        match (*self, *dt) {
            (
                DvfsTransport::Scmi {
                    mhu,
                    base_doorbell,
                    base_shmem,
                    perf_doorbell,
                    perf_shmem,
                },
                Dt::Scmi { base, perf },
            ) => {
                let (perf_db, perf_sh) = (
                    perf_doorbell.unwrap_or(base_doorbell),
                    perf_shmem.unwrap_or(base_shmem),
                );
                base.doorbell.regs == mhu
                    && perf.doorbell.regs == mhu
                    && (base.doorbell.channel, base.doorbell.doorbell) == base_doorbell
                    && base.shmem == base_shmem
                    && (perf.doorbell.channel, perf.doorbell.doorbell) == perf_db
                    && perf.shmem == perf_sh
            }
            (DvfsTransport::Scpi { mhu, shmem, .. }, Dt::Scpi { sram, mhu: dt_mhu }) => {
                mhu == dt_mhu && shmem == sram
            }
            (
                DvfsTransport::Hi3660Stub {
                    mailbox,
                    channel,
                    dst_irq,
                    ack_irq,
                    stub_clk,
                },
                Dt::Hi3660 {
                    mbox,
                    stub,
                    channel: c,
                    dst_irq: d,
                    ack_irq: a,
                },
            ) => mailbox == mbox && stub_clk == stub && (channel, dst_irq, ack_irq) == (c, d, a),
            (
                DvfsTransport::Hi6220Stub {
                    mailbox,
                    mailbox_buffer,
                    channel,
                    dst_irq,
                    ack_irq,
                    sram,
                },
                Dt::Hi6220 {
                    sram: s,
                    ipc,
                    buf,
                    slot,
                    dst_irq: d,
                    ack_irq: a,
                },
            ) => {
                mailbox == ipc
                    && mailbox_buffer == buf
                    && sram == s
                    && (channel, dst_irq, ack_irq) == (slot, d, a)
            }
            _ => false,
        }
    }

    /// A short name for reports.
    pub const fn name(&self) -> &'static str {
        match self {
            DvfsTransport::Scmi { .. } => "SCMI over MHU doorbell",
            DvfsTransport::Scpi { .. } => "SCPI over MHU",
            DvfsTransport::Hi3660Stub { .. } => "Hi3660 stub clock over mailbox",
            DvfsTransport::Hi6220Stub { .. } => "Hi6220 stub clock over mailbox",
        }
    }
}

/// Where the OPP tables come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OppSource {
    /// `operating-points-v2` tables in the DT.
    Dt,
    /// The firmware reports them at run time (Juno: SCMI `DESCRIBE_LEVELS` / SCPI
    /// `GET_DVFS_INFO`); the board data's tables are the firmware's, for the simulator and the
    /// cross-check at boot.
    Firmware,
}

/// What ends a run that is meant to end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndAction {
    /// PSCI `SYSTEM_OFF`.
    SystemOff,
    /// PSCI `SYSTEM_RESET`.
    SystemReset,
    /// Print and stop every CPU; the board stays on with the console readable.
    Halt,
}

/// How a run that is meant to end (self tests done, `ticks=`, a fatal error under
/// `semihosting`) ends when no semihosting host takes the status: a board's own choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndPolicy {
    /// Status 0.
    pub success: EndAction,
    /// Any other status.
    pub failure: EndAction,
}

impl EndPolicy {
    /// What to do for exit status `status`.
    pub const fn action(&self, status: u32) -> EndAction {
        if status == 0 {
            self.success
        } else {
            self.failure
        }
    }
}

/// Everything a real board's crate states, each value with a `// source:` where it is defined.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoardConfig {
    /// The board's name ("juno-r2"), as `cargo xtask --board` takes it.
    pub name: &'static str,
    /// CPUs, clusters, capacities, perf domains and OPPs, power coefficients (also what the
    /// simulator runs).
    pub sched: &'static BoardDesc,
    pub opps: OppSource,
    pub uboot: UBoot,
    /// `/memory` in the published DTB.
    pub dt_memory: DtMemory,
    /// `/memreserve/` entries and `/reserved-memory` children of the published DTB.
    pub dt_reserved: &'static [Region],
    /// Firmware memory the DT does not describe: never allocated (and never mapped if `no_map`).
    pub carve_outs: &'static [Region],
    pub console: Console,
    pub gic: GicDesc,
    pub timer: Timer,
    pub psci: Conduit,
    /// `/cpus/idle-states`, and per CPU (logical order) the indices of its `cpu-idle-states`.
    pub idle_states: &'static [IdleState],
    pub cpu_idle_states: &'static [&'static [u8]],
    /// The DVFS transports a DT for this board may describe (Juno: SCMI or, on old firmware, SCPI).
    pub dvfs: &'static [DvfsTransport],
    pub end: EndPolicy,
}

impl BoardConfig {
    /// Every region the kernel must not allocate: the DT's reservations and the carve-outs.
    pub fn reserved(&self) -> impl Iterator<Item = &Region> {
        self.dt_reserved.iter().chain(self.carve_outs.iter())
    }
}

/// Whether `[a.base, a.end())` and `[b.base, b.end())` share a byte.
pub const fn overlaps(a: MemRange, b: MemRange) -> bool {
    a.size > 0 && b.size > 0 && a.base < b.base + b.size && b.base < a.base + a.size
}

/// `addr` rounded up to a multiple of `align` (a power of two).
pub const fn align_up(addr: u64, align: u64) -> u64 {
    (addr + align - 1) & !(align - 1)
}

/// The address `booti` places an Image at whose header has `text_offset` and flags bit 3
/// (`phys_placement_anywhere`) as given, loaded at `kernel_addr_r` on a board whose first DRAM
/// bank starts at `dram0_start` (u-boot `booti_setup`).
pub const fn booti_placement(
    kernel_addr_r: u64,
    dram0_start: u64,
    text_offset: u64,
    anywhere: bool,
) -> u64 {
    let dst = if anywhere {
        kernel_addr_r - text_offset
    } else {
        dram0_start
    };
    align_up(dst, 2 << 20) + text_offset
}

/// The part of `[start, end)` that avoids every range in `avoid`: the start moves past any
/// range covering it (rounded up to `align`), the end stops at the first range beginning above
/// the start. `None` when nothing is left. (What the kernel's heap may use.)
pub fn free_window(
    start: usize,
    end: usize,
    avoid: &[MemRange],
    align: usize,
) -> Option<(usize, usize)> {
    let mut start = start;
    // Each pass moves `start` past one covering range; at most one pass per range.
    for _ in 0..=avoid.len() {
        match avoid.iter().find(|r| r.size > 0 && r.contains(start)) {
            Some(r) => start = r.end().checked_next_multiple_of(align)?,
            None => break,
        }
    }
    if avoid.iter().any(|r| r.size > 0 && r.contains(start)) {
        return None;
    }
    let end = avoid
        .iter()
        .filter(|r| r.size > 0 && r.base >= start)
        .map(|r| r.base)
        .fold(end, usize::min);
    (end > start).then_some((start, end))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_window_steps_around_reservations() {
        let heap = |avoid: &[MemRange]| free_window(0x1000, 0x10_0000, avoid, 0x1000);
        assert_eq!(heap(&[]), Some((0x1000, 0x10_0000)));
        // A carve-out inside: the window ends where it starts.
        assert_eq!(heap(&[r(0x8_0000, 0x1000)]), Some((0x1000, 0x8_0000)));
        // One covering the start: the window starts after it (page aligned), and a chain of
        // them is followed.
        assert_eq!(
            heap(&[r(0x800, 0x1801), r(0x3000, 0x1000)]),
            Some((0x4000, 0x10_0000))
        );
        // Below the start or empty: ignored.
        assert_eq!(
            heap(&[r(0x0, 0x800), r(0x2000, 0)]),
            Some((0x1000, 0x10_0000))
        );
        // Covering everything: nothing left.
        assert_eq!(heap(&[r(0x0, 0x20_0000)]), None);
    }

    const fn r(base: usize, size: usize) -> MemRange {
        MemRange { base, size }
    }

    #[test]
    fn overlap_is_half_open() {
        assert!(overlaps(r(0x1000, 0x1000), r(0x1fff, 1)));
        assert!(!overlaps(r(0x1000, 0x1000), r(0x2000, 1)));
        assert!(!overlaps(r(0x2000, 0x10), r(0x1000, 0x1000)));
        assert!(overlaps(r(0x0, 0x10_0000), r(0x8_0000, 0x10)));
        assert!(
            !overlaps(r(0x1000, 0), r(0x1000, 0x1000)),
            "empty ranges overlap nothing"
        );
    }

    /// u-boot `booti_setup`: bit 3 clear → moved to the 2 MiB-aligned start of DRAM plus
    /// text_offset; bit 3 set → stays in the 2 MiB-aligned block it was loaded into.
    #[test]
    fn booti_places_like_u_boot() {
        // QEMU virt (the u-boot run in `cargo xtask test` prints "Moving Image from 0x40400000
        // to 0x40080000").
        assert_eq!(
            booti_placement(0x4040_0000, 0x4000_0000, 0x8_0000, false),
            0x4008_0000
        );
        // HiKey960: loaded at 0x11000000, moved to 0x80000.
        assert_eq!(booti_placement(0x1100_0000, 0x0, 0x8_0000, false), 0x8_0000);
        // A Linux Image (text_offset 0, bit 3 set) stays where it is if 2 MiB aligned.
        assert_eq!(booti_placement(0x1100_0000, 0x0, 0, true), 0x1100_0000);
        assert_eq!(
            booti_placement(0x8008_0000, 0x8000_0000, 0, true),
            0x8020_0000
        );
    }

    /// Juno r2's SCMI channels as `juno-scmi.dtsi` gives them (MHU 0x2b1f0000, base channel
    /// 0/0 at 0x2e000000, perf channel 1/0 at 0x2e000100) and each way a DT can differ.
    #[test]
    fn dvfs_transport_matches_the_dt_field_by_field() {
        use crate::dt::dvfs::{MhuDoorbellDt, ScmiChannelDt, Transport};
        let mhu = r(0x2b1f_0000, 0x1000);
        let board = DvfsTransport::Scmi {
            mhu,
            base_doorbell: (0, 0),
            base_shmem: r(0x2e00_0000, 0x80),
            perf_doorbell: Some((1, 0)),
            perf_shmem: Some(r(0x2e00_0100, 0x80)),
        };
        let ch = |shmem, channel| ScmiChannelDt {
            shmem,
            doorbell: MhuDoorbellDt {
                regs: mhu,
                channel,
                doorbell: 0,
            },
        };
        let dt = Transport::Scmi {
            base: ch(r(0x2e00_0000, 0x80), 0),
            perf: ch(r(0x2e00_0100, 0x80), 1),
        };
        assert!(board.matches(&dt));
        // The perf protocol on the base channel: a different DT.
        let shared = Transport::Scmi {
            base: ch(r(0x2e00_0000, 0x80), 0),
            perf: ch(r(0x2e00_0000, 0x80), 0),
        };
        assert!(!board.matches(&shared));
        // Shared memory moved (the QEMU stand-in's carve-out), or another protocol.
        let moved = Transport::Scmi {
            base: ch(r(0x5fe0_0000, 0x80), 0),
            perf: ch(r(0x2e00_0100, 0x80), 1),
        };
        assert!(!board.matches(&moved));
        let scpi = Transport::Scpi {
            sram: r(0x2e00_0200, 0x200),
            mhu,
        };
        assert!(!board.matches(&scpi));
        let board_scpi = DvfsTransport::Scpi {
            mhu,
            channel: 1,
            shmem: r(0x2e00_0200, 0x200),
        };
        assert!(board_scpi.matches(&scpi));
        let hi3660 = DvfsTransport::Hi3660Stub {
            mailbox: r(0xe896_b000, 0x1000),
            channel: 13,
            dst_irq: 3,
            ack_irq: 0,
            stub_clk: r(0xe896_b500, 0x100),
        };
        let dt3660 = |channel| Transport::Hi3660 {
            mbox: r(0xe896_b000, 0x1000),
            stub: r(0xe896_b500, 0x100),
            channel,
            dst_irq: 3,
            ack_irq: 0,
        };
        assert!(hi3660.matches(&dt3660(13)));
        assert!(!hi3660.matches(&dt3660(12)));
    }

    #[test]
    fn end_policy_picks_by_status() {
        let p = EndPolicy {
            success: EndAction::SystemOff,
            failure: EndAction::Halt,
        };
        assert_eq!(p.action(0), EndAction::SystemOff);
        assert_eq!(p.action(1), EndAction::Halt);
        assert_eq!(p.action(101), EndAction::Halt);
    }
}
