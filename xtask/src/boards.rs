//! The board binaries xtask builds (`--board`), and what each one's u-boot does with it.

use asym_kernel::board::{BoardConfig, BootLayout, FdtSource, Region};
use asym_kernel::dt::MemRange;

/// A board binary crate (`boards/<name>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    /// QEMU's `virt` machine (the emulated boards run this binary). The default.
    QemuVirt,
    /// Arm Juno r2.
    JunoR2,
    /// HiKey960 (Hi3660).
    Hikey960,
    /// HiKey (Hi6220).
    Hikey,
}

/// Every real board, in the order the checks run.
pub const REAL: [Target; 3] = [Target::JunoR2, Target::Hikey960, Target::Hikey];

/// QEMU `virt` through Debian's u-boot (`qemu_arm64`): the one board without a board crate
/// of data, whose binary still has a layout to check.
// source: u-boot board/emulation/qemu-arm/qemu-arm.env (fdt_addr, scriptaddr, kernel_addr_r,
// ramdisk_addr_r); QEMU hw/arm/virt.c base_memmap[VIRT_MEM] = 0x4000_0000.
const QEMU_VIRT_LAYOUT: BootLayout = BootLayout {
    dram0_start: 0x4000_0000,
    kernel_addr_r: 0x4040_0000,
    fdt_addr_r: 0x4000_0000,
    scriptaddr: Some(0x4020_0000),
    ramdisk_addr_r: Some(0x4400_0000),
    link_base: 0x4008_0000,
};

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::QemuVirt => "qemu-virt",
            Target::JunoR2 => "juno-r2",
            Target::Hikey960 => "hikey960",
            Target::Hikey => "hikey",
        }
    }

    /// The Cargo package (and binary) name.
    pub fn crate_name(self) -> &'static str {
        match self {
            Target::QemuVirt => "asym-qemu-virt",
            Target::JunoR2 => "asym-juno-r2",
            Target::Hikey960 => "asym-hikey960",
            Target::Hikey => "asym-hikey",
        }
    }

    /// The board crate's configuration (`None` for QEMU virt, which is all DT).
    pub fn config(self) -> Option<&'static BoardConfig> {
        match self {
            Target::QemuVirt => None,
            Target::JunoR2 => Some(&asym_juno_r2::CONFIG),
            Target::Hikey960 => Some(&asym_hikey960::CONFIG),
            Target::Hikey => Some(&asym_hikey::CONFIG),
        }
    }

    pub fn layout(self) -> BootLayout {
        self.config()
            .map(|c| c.uboot.layout)
            .unwrap_or(QEMU_VIRT_LAYOUT)
    }

    /// What boot.scr passes to `booti` as the DT.
    pub fn fdt(self) -> FdtSource {
        self.config()
            .map(|c| c.uboot.fdt)
            .unwrap_or(FdtSource::Control)
    }

    /// RAM u-boot hands over (QEMU virt: the first 1 GiB, the least xtask gives it).
    pub fn memory(self) -> &'static [MemRange] {
        const QEMU: &[MemRange] = &[MemRange {
            base: 0x4000_0000,
            size: 0x4000_0000,
        }];
        self.config().map(|c| c.uboot.memory_banks).unwrap_or(QEMU)
    }

    /// Reservations and carve-outs the placed image must avoid.
    pub fn reserved(self) -> Vec<Region> {
        self.config()
            .map(|c| c.reserved().copied().collect())
            .unwrap_or_default()
    }
}
