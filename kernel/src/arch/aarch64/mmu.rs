//! Identity map and MMU enable.
//!
//! Linux builds its page tables in `arch/arm64/mm/mmu.c` (`paging_init`, `map_mem`,
//! `map_kernel` with per-segment permissions) with the linear map at a high VA; asym keeps the
//! kernel identity-mapped in TTBR0 (4 KiB granule, 39-bit VA, translation starting at level 1):
//! - RAM from the DT's memory node: Normal write-back, inner-shareable, read/write, never
//!   executable — whole GiBs as 1 GiB blocks, the rest as 2 MiB blocks (RAM not 2 MiB aligned
//!   at either end is left out, so nothing past RAM is mapped Normal and fetched speculatively);
//! - the kernel image in 4 KiB pages, as Linux's `map_kernel` does per segment: text read-only
//!   and executable, rodata (and the self-test table) read-only, data/BSS/stacks read/write;
//! - the UART and the GIC (distributor, CPU interface or redistributors) as Device-nGnRnE: a
//!   1 GiB block where the GiB holds no RAM, else 2 MiB blocks.
//!
//! Everything else is unmapped, so a stray access takes a translation fault. Why at all: with
//! the MMU off every access is Device memory, on which load/store-exclusive (our locks and
//! atomics) is not guaranteed to work across CPUs on real hardware, and caches are off.
//! Deliberate differences from Linux: no linear map / KASLR, tables built once and never
//! changed.

use core::arch::asm;
use core::cell::UnsafeCell;

use crate::dt::{GicDesc, Platform};

const ENTRIES: usize = 512;
const L1_SHIFT: u32 = 30;
const L2_SHIFT: u32 = 21;
const L3_SHIFT: u32 = 12;

/// MAIR_EL1: attr0 Device-nGnRnE, attr1 Normal inner/outer write-back read/write-allocate.
const MAIR: u64 = 0xff << 8;
const ATTR_DEVICE: u64 = 0 << 2;
const ATTR_NORMAL: u64 = 1 << 2;
const DESC_BLOCK: u64 = 0b01;
/// A table descriptor at levels 1–2, a page descriptor at level 3.
const DESC_TABLE: u64 = 0b11;
const DESC_PAGE: u64 = 0b11;
/// Next-level table address bits of a table descriptor (4 KiB granule, 48-bit OA).
const TABLE_ADDR: u64 = 0x0000_ffff_ffff_f000;
const AF: u64 = 1 << 10;
const SH_INNER: u64 = 0b11 << 8;
const PXN: u64 = 1 << 53;
const UXN: u64 = 1 << 54;
/// AP[2]: read-only (AP[1] = 0: no EL0 access).
const AP_RO: u64 = 0b10 << 6;

const RAM_RW: u64 = ATTR_NORMAL | AF | SH_INNER | PXN | UXN;
const KERNEL_TEXT: u64 = ATTR_NORMAL | AF | SH_INNER | AP_RO | UXN;
const KERNEL_RO: u64 = ATTR_NORMAL | AF | SH_INNER | AP_RO | PXN | UXN;
const DEVICE: u64 = ATTR_DEVICE | AF | PXN | UXN;

/// TCR_EL1 without IPS: T0SZ = 25 (39-bit VA), IRGN0/ORGN0 = WBWA, SH0 inner, TG0 4 KiB,
/// EPD1 (no TTBR1 walks).
const TCR_BASE: u64 = 25 | (0b01 << 8) | (0b01 << 10) | (0b11 << 12) | (1 << 23);

/// SCTLR_EL1 M (MMU), C (data cache), I (instruction cache) on top of the RES1 bits.
const SCTLR_MMU_ON: u64 = super::entry::SCTLR_EL1_MMU_OFF | 1 | (1 << 2) | (1 << 12);

/// Translation tables: index 0 is the level-1 table, the rest are handed out as level-2/3
/// tables while building (one per partly-RAM GiB, one per 2 MiB block the kernel image spans).
const TABLES: usize = 8;

#[repr(C, align(4096))]
struct Pool(UnsafeCell<[[u64; ENTRIES]; TABLES]>);

// SAFETY: written only by the boot CPU before the MMU is on and before secondaries start;
// read-only afterwards (and by the table walker).
unsafe impl Sync for Pool {}

static POOL: Pool = Pool(UnsafeCell::new([[0; ENTRIES]; TABLES]));

// Linker symbols (linker/kernel.ld), page aligned; declared here once.
unsafe extern "C" {
    /// Start of the image: text (executable, read-only) runs from here to `__text_end`.
    pub static __kernel_start: u8;
    /// End of text; rodata and the self-test table (read-only) run to `__rodata_end`.
    pub static __text_end: u8;
    /// End of the read-only part; data, BSS and boot stacks (read/write) run to `__kernel_end`.
    pub static __rodata_end: u8;
    /// End of the image including BSS and stacks.
    pub static __kernel_end: u8;
}

/// Builds the map in [`POOL`].
struct Builder<'a> {
    pool: &'a mut [[u64; ENTRIES]; TABLES],
    used: usize,
}

impl Builder<'_> {
    fn base(&self) -> u64 {
        self.pool.as_ptr() as u64
    }

    /// Sets the descriptor for `addr` at `level` (1: 1 GiB block, 2: 2 MiB block, 3: 4 KiB
    /// page), creating next-level tables on the way and splitting a block in the way into
    /// a table of the same attributes. `keep` leaves an existing valid entry alone.
    fn set(&mut self, addr: u64, level: u32, attrs: u64, keep: bool) -> Result<(), ()> {
        let mut table = 0;
        for lvl in 1..=level {
            let shift = match lvl {
                1 => L1_SHIFT,
                2 => L2_SHIFT,
                _ => L3_SHIFT,
            };
            let idx = ((addr >> shift) as usize) % ENTRIES;
            let entry = self.pool[table][idx];
            if lvl == level {
                if !(keep && entry & 1 == 1) {
                    let kind = if level == 3 { DESC_PAGE } else { DESC_BLOCK };
                    self.pool[table][idx] = (addr & !((1 << shift) - 1)) | attrs | kind;
                }
                return Ok(());
            }
            table = if entry & 0b11 == DESC_TABLE {
                (((entry & TABLE_ADDR) - self.base()) / 4096) as usize
            } else {
                if self.used == TABLES {
                    return Err(());
                }
                let new = self.used;
                self.used += 1;
                if entry & 0b11 == DESC_BLOCK {
                    // Split: the same attributes at the next level's granule.
                    let child_shift = if lvl == 1 { L2_SHIFT } else { L3_SHIFT };
                    let kind = if lvl + 1 == 3 { DESC_PAGE } else { DESC_BLOCK };
                    let block_attrs = entry & !TABLE_ADDR & !0b11;
                    let block_addr = entry & TABLE_ADDR;
                    for (i, e) in self.pool[new].iter_mut().enumerate() {
                        *e = (block_addr + ((i as u64) << child_shift)) | block_attrs | kind;
                    }
                }
                let pa = self.base() + (new as u64) * 4096;
                self.pool[table][idx] = pa | DESC_TABLE;
                new
            };
        }
        Ok(())
    }

    /// Maps `[start, end)` (2 MiB aligned) with the largest blocks that fit.
    fn map_blocks(&mut self, start: u64, end: u64, attrs: u64) -> Result<(), ()> {
        let mut a = start;
        while a < end {
            let gib = 1u64 << L1_SHIFT;
            if a.is_multiple_of(gib) && end - a >= gib {
                self.set(a, 1, attrs, false)?;
                a += gib;
            } else {
                self.set(a, 2, attrs, false)?;
                a += 1 << L2_SHIFT;
            }
        }
        Ok(())
    }
}

/// MAIR, TCR, TTBR0, SCTLR as the boot CPU programmed them, for `_secondary_entry`.
#[repr(C, align(64))]
pub struct MmuConfig(UnsafeCell<[u64; 4]>);

// SAFETY: written once by the boot CPU before any secondary starts, then only read.
unsafe impl Sync for MmuConfig {}

pub static MMU_CONFIG: MmuConfig = MmuConfig(UnsafeCell::new([0; 4]));

/// Builds the identity map for `plat` and turns the MMU and caches on, on the boot CPU.
///
/// # Safety
/// Call once, on the boot CPU, with the MMU off, before any other CPU runs and before code
/// relies on atomics across CPUs.
pub unsafe fn init_boot_cpu(plat: &Platform) {
    // SAFETY: the caller guarantees nobody else touches the tables yet.
    let pool = unsafe { &mut *POOL.0.get() };
    let mut b = Builder { pool, used: 1 };
    let two_mib = 1u64 << L2_SHIFT;

    let ram_start = (plat.memory.base as u64).next_multiple_of(two_mib);
    let ram_end = plat.memory.end() as u64 & !(two_mib - 1);
    let mut ok = ram_end <= ram_start || b.map_blocks(ram_start, ram_end, RAM_RW).is_ok();

    let (gic_a, gic_b) = match plat.gic {
        GicDesc::V2 { gicd, gicc } => ((gicd, 0x1_0000), (gicc, 0x2000)),
        GicDesc::V3 {
            gicd,
            gicr,
            gicr_stride,
        } => ((gicd, 0x1_0000), (gicr, gicr_stride * crate::dt::MAX_CPUS)),
    };
    for (base, len) in [(plat.uart.base, 0x1000), gic_a, gic_b] {
        let (base, len) = (base as u64, len as u64);
        let mut a = base & !(two_mib - 1);
        while a < base + len {
            let gib_entry = b.pool[0][((a >> L1_SHIFT) as usize) % ENTRIES];
            ok &= if gib_entry == 0 {
                b.set(a, 1, DEVICE, true).is_ok()
            } else {
                b.set(a, 2, DEVICE, true).is_ok()
            };
            a += two_mib;
        }
    }

    let (k_start, text_end, ro_end, k_end) = (
        (&raw const __kernel_start) as u64,
        (&raw const __text_end) as u64,
        (&raw const __rodata_end) as u64,
        (&raw const __kernel_end) as u64,
    );
    let mut page = k_start;
    while page < k_end && ok {
        let attrs = if page < text_end {
            KERNEL_TEXT
        } else if page < ro_end {
            KERNEL_RO
        } else {
            RAM_RW
        };
        ok &= b.set(page, 3, attrs, false).is_ok();
        page += 1 << L3_SHIFT;
    }
    if !ok {
        // Early console (lock-free): the tables are incomplete; the kernel cannot go on.
        crate::println!("mmu: out of translation tables ({} available)", TABLES);
        super::park();
    }
    let tables_end = b.base() + (b.used as u64) * 4096;
    let parange: u64;
    // SAFETY: ID_AA64MMFR0_EL1 is a read-only ID register.
    unsafe { asm!("mrs {}, id_aa64mmfr0_el1", out(reg) parange, options(nomem, nostack)) };
    let ips = (parange & 0xf).min(5);
    let tcr = TCR_BASE | (ips << 32);
    let ttbr0 = POOL.0.get() as u64;
    // SAFETY: single writer before secondaries exist.
    unsafe { *MMU_CONFIG.0.get() = [MAIR, tcr, ttbr0, SCTLR_MMU_ON] };
    // The tables were written with the MMU (and so the data cache) off; the walker will read
    // them through the cache: drop any stale lines first.
    invalidate_dcache(ttbr0, tables_end);
    // SAFETY: the tables map the running code (executable) and stack (RAM) identically, so execution
    // continues at the same addresses; the sequence follows the architecture's MMU-enable
    // recipe (invalidate stale table lines and TLBs, ISB, then SCTLR).
    unsafe {
        asm!(
            "msr mair_el1, {mair}",
            "msr tcr_el1, {tcr}",
            "msr ttbr0_el1, {tbl}",
            "isb",
            "tlbi vmalle1",
            "dsb nsh",
            "isb",
            "msr sctlr_el1, {sctlr}",
            "isb",
            "ic iallu",
            "dsb nsh",
            "isb",
            tbl = in(reg) ttbr0,
            mair = in(reg) MAIR,
            tcr = in(reg) tcr,
            sctlr = in(reg) SCTLR_MMU_ON,
            options(nostack),
        );
    }
    // Secondaries read MMU_CONFIG with their MMU (and so caches) off: push it to memory.
    // SAFETY: cleaning a cache line has no architectural effect on data.
    unsafe { asm!("dc cvac, {}", "dsb sy", in(reg) MMU_CONFIG.0.get() as u64, options(nostack)) };
}

/// `dc ivac` over `[start, end)`, stepping by the smallest data cache line (CTR_EL0.DminLine),
/// then DSB.
fn invalidate_dcache(start: u64, end: u64) {
    let ctr: u64;
    // SAFETY: CTR_EL0 is a read-only ID register.
    unsafe { asm!("mrs {}, ctr_el0", out(reg) ctr, options(nomem, nostack)) };
    let line = 4u64 << ((ctr >> 16) & 0xf);
    let mut a = start & !(line - 1);
    while a < end {
        // SAFETY: invalidating lines of memory nobody has written through the cache (the MMU is
        // off) loses no data.
        unsafe { asm!("dc ivac, {}", in(reg) a, options(nostack)) };
        a += line;
    }
    // SAFETY: a barrier has no memory-safety effect.
    unsafe { asm!("dsb sy", options(nostack)) };
}
