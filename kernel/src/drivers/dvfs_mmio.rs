//! The memory-mapped regions of the DVFS firmware (SCMI shared memory, MHU and HiSilicon
//! mailbox registers, stub-clock SRAM) as the `asym_dvfs::io::Mmio` the drivers use.
//!
//! Why not `tock-registers` as the PL011 and the GIC: these regions' layouts are protocols
//! (the SMT channel, mailbox slots) that the pure `asym-dvfs` crate defines by offset, and the
//! same offsets must work against its firmware models on the host; so the kernel only provides
//! word access. The regions are mapped Device-nGnRnE (`arch::aarch64::mmu`), so accesses are not
//! merged, reordered among themselves or cached; `wmb`/`rmb` are `dsb st`/`dsb ld`.

use asym_dvfs::io::Mmio;

use crate::arch::aarch64::cpu_regs;
use crate::dt::MemRange;

/// One device region, accessed as aligned 32-bit words.
#[derive(Debug)]
pub struct DeviceRegion {
    base: usize,
    size: usize,
}

impl DeviceRegion {
    /// The region `range`.
    ///
    /// # Safety
    /// `range` must be a device region the DT describes, mapped as Device memory by the kernel's
    /// map, that no Rust reference points into; accesses through other `DeviceRegion`s of the
    /// same range are the protocol's business (the drivers and the firmware share it by design).
    pub const unsafe fn new(range: MemRange) -> Self {
        DeviceRegion {
            base: range.base,
            size: range.size,
        }
    }

    /// The region's physical (= virtual) address range.
    pub fn range(&self) -> MemRange {
        MemRange {
            base: self.base,
            size: self.size,
        }
    }

    fn word(&self, offset: usize) -> Option<*mut u32> {
        (offset.is_multiple_of(4) && offset.checked_add(4)? <= self.size)
            .then(|| (self.base + offset) as *mut u32)
    }
}

impl Mmio for DeviceRegion {
    fn read32(&self, offset: usize) -> u32 {
        match self.word(offset) {
            // SAFETY: an aligned word inside a mapped device region (see `new`); volatile, so the
            // access happens exactly once, in program order with the region's other accesses.
            Some(p) => u32::from_le(unsafe { p.read_volatile() }),
            None => 0,
        }
    }

    fn write32(&mut self, offset: usize, value: u32) {
        if let Some(p) = self.word(offset) {
            // SAFETY: as in `read32`.
            unsafe { p.write_volatile(value.to_le()) }
        }
    }

    fn size(&self) -> usize {
        self.size
    }

    fn wmb(&self) {
        cpu_regs::dsb_st();
    }

    fn rmb(&self) {
        cpu_regs::dsb_ld();
    }
}
