//! Identity map and MMU enable.
//!
//! Linux builds its page tables in `arch/arm64/mm/mmu.c` (`paging_init`, `map_mem`,
//! `map_kernel` with per-segment permissions) with the linear map at a high VA; asym keeps the
//! kernel identity-mapped in TTBR0 (4 KiB granule, 39-bit VA, translation starting at level 1):
//! - RAM, every bank of the DT's memory nodes: Normal write-back, inner-shareable, read/write,
//!   never executable — whole GiBs as 1 GiB blocks, the rest as 2 MiB blocks (RAM not 2 MiB
//!   aligned at either end is left out, so nothing past RAM is mapped Normal and fetched
//!   speculatively);
//! - the kernel image in 4 KiB pages, as Linux's `map_kernel` does per segment: text read-only
//!   and executable, rodata (and the self-test table) read-only, data/BSS/stacks read/write;
//! - the UART, the GIC (distributor, CPU interface or redistributors) and the DVFS firmware's
//!   shared memory and mailboxes (`crate::dt::dvfs`) as Device-nGnRnE: a 1 GiB block where the
//!   GiB holds no RAM, else 2 MiB blocks; a DVFS region in a GiB with RAM (the HiKey mailbox
//!   buffer, the QEMU firmware stand-in's carve-out) as 4 KiB Device pages of its own;
//! - RAM that must not be mapped (`no-map` `/reserved-memory` regions, the board crate's
//!   `no_map` carve-outs such as secure DRAM) left out, whole blocks where it can and 4 KiB
//!   pages at its edges, as Linux's `map_mem` skips `MEMBLOCK_NOMAP` memory: a Normal cacheable
//!   mapping lets the CPU fetch it speculatively, which the TrustZone controller answers with
//!   an external abort, and a non-coherent co-processor's buffer would be read through stale
//!   cache lines;
//!
//! Everything else is unmapped, so a stray access takes a translation fault. The builder
//! refuses an address at or above 2^39 (the map's reach, [`crate::dt::PA_LIMIT`]) instead of
//! wrapping its table index onto a lower address, and a map it cannot finish is an error the
//! boot reports, not a silent partial map. Why at all: with
//! the MMU off every access is Device memory, on which load/store-exclusive (our locks and
//! atomics) is not guaranteed to work across CPUs on real hardware, and caches are off.
//! The boot CPU first runs on an early map ([`init_early`]: kernel image, DTB, early UART) to
//! parse the DT with the MMU on, then switches to the final map ([`init_boot_cpu`]), whose
//! kernel-image entries are identical, so the switch needs no break-before-make. Deliberate
//! differences from Linux: no linear map / KASLR; the identity map is built once and never
//! changed. The one part that changes at run time is the thread-stack window
//! ([`STACK_WINDOW_VA`], Linux's vmalloc area for `VMAP_STACK`): the last GiB of the address
//! space, with its own preallocated level-2/3 tables, where thread stacks are mapped page by
//! page ([`map_stack_page`], [`unmap_stack_page`]) and everything else stays unmapped, so each
//! stack has unmapped guard space below it.

use core::arch::asm;
use core::cell::UnsafeCell;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::dt::{GicDesc, MemRange, Platform, PA_LIMIT};

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

/// TCR_EL1.T0SZ: 39-bit virtual addresses, translation starting at level 1.
const T0SZ: u64 = 25;
/// TCR_EL1 without IPS: T0SZ, IRGN0/ORGN0 = WBWA, SH0 inner, TG0 4 KiB, EPD1 (no TTBR1 walks).
const TCR_BASE: u64 = T0SZ | (0b01 << 8) | (0b01 << 10) | (0b11 << 12) | (1 << 23);
// The DT checks every address against PA_LIMIT: it must be what T0SZ gives.
const _: () = assert!(PA_LIMIT == 1 << (64 - T0SZ));

/// SCTLR_EL1 M (MMU), C (data cache), I (instruction cache) on top of the RES1 bits.
const SCTLR_MMU_ON: u64 = super::entry::SCTLR_EL1_MMU_OFF | 1 | (1 << 2) | (1 << 12);

/// Translation tables: index 0 is the level-1 table, the rest are handed out as level-2/3
/// tables while building (one per GiB partly RAM or shared by RAM and devices, one per 2 MiB
/// block the kernel image spans).
const TABLES: usize = 16;

/// Why a map could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapError {
    /// More translation tables needed than the pool has.
    OutOfTables,
    /// An address at or above 2^39, beyond what the map translates.
    OutOfRange { addr: u64 },
    /// RAM or a device lies in the thread-stack window's GiB.
    StackWindowInUse,
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            MapError::OutOfTables => {
                write!(f, "mmu: out of translation tables ({TABLES} available)")
            }
            MapError::OutOfRange { addr } => write!(
                f,
                "mmu: address {addr:#x} is beyond the 39-bit identity map"
            ),
            MapError::StackWindowInUse => write!(
                f,
                "mmu: RAM or a device lies in the thread-stack window at {STACK_WINDOW_VA:#x}"
            ),
        }
    }
}

#[repr(C, align(4096))]
struct Pool(UnsafeCell<[[u64; ENTRIES]; TABLES]>);

// SAFETY: written only by the boot CPU before the MMU is on and before secondaries start;
// read-only afterwards (and by the table walker).
unsafe impl Sync for Pool {}

static POOL: Pool = Pool(UnsafeCell::new([[0; ENTRIES]; TABLES]));
/// The early map's tables ([`init_early`]), unused once [`init_boot_cpu`] switched away.
static EARLY_POOL: Pool = Pool(UnsafeCell::new([[0; ENTRIES]; TABLES]));

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
    /// End of BSS (the boot stacks follow, in their own NOLOAD section).
    pub static __bss_end: u8;
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
    fn set(&mut self, addr: u64, level: u32, attrs: u64, keep: bool) -> Result<(), MapError> {
        let shift = match level {
            1 => L1_SHIFT,
            2 => L2_SHIFT,
            _ => L3_SHIFT,
        };
        let entry = self.entry(addr, level)?;
        if !(keep && *entry & 1 == 1) {
            let kind = if level == 3 { DESC_PAGE } else { DESC_BLOCK };
            *entry = (addr & !((1 << shift) - 1)) | attrs | kind;
        }
        Ok(())
    }

    /// Makes the 4 KiB page at `addr` invalid (a guard page), splitting blocks on the way.
    fn unmap_page(&mut self, addr: u64) -> Result<(), MapError> {
        *self.entry(addr, 3)? = 0;
        Ok(())
    }

    /// The descriptor for `addr` at `level`, creating next-level tables on the way (splitting a
    /// block into a table of the same attributes). An address the map cannot translate is an
    /// error, never folded onto another index.
    fn entry(&mut self, addr: u64, level: u32) -> Result<&mut u64, MapError> {
        if addr >= PA_LIMIT as u64 {
            return Err(MapError::OutOfRange { addr });
        }
        let mut table = 0;
        for lvl in 1..=level {
            let shift = match lvl {
                1 => L1_SHIFT,
                2 => L2_SHIFT,
                _ => L3_SHIFT,
            };
            // Below 2^39 every level's index is < ENTRIES (level 1 takes bits 38:30).
            let idx = ((addr >> shift) as usize) & (ENTRIES - 1);
            let entry = self.pool[table][idx];
            if lvl == level {
                return Ok(&mut self.pool[table][idx]);
            }
            table = if entry & 0b11 == DESC_TABLE {
                (((entry & TABLE_ADDR) - self.base()) / 4096) as usize
            } else {
                if self.used == TABLES {
                    return Err(MapError::OutOfTables);
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
        Err(MapError::OutOfTables)
    }

    /// The valid block or page descriptor that translates `addr`, and its level; `None` when
    /// `addr` is unmapped. Creates nothing.
    fn leaf(&self, addr: u64) -> Option<(u32, u64)> {
        if addr >= PA_LIMIT as u64 {
            return None;
        }
        let mut table = 0;
        for (lvl, shift) in [(1, L1_SHIFT), (2, L2_SHIFT), (3, L3_SHIFT)] {
            let e = self.pool[table][((addr >> shift) as usize) & (ENTRIES - 1)];
            match e & 0b11 {
                0b00 | 0b10 => return None,
                DESC_TABLE if lvl < 3 => {
                    table = (((e & TABLE_ADDR) - self.base()) / 4096) as usize;
                }
                _ => return Some((lvl, e)),
            }
        }
        None
    }

    /// Unmaps `[start, end)` (4 KiB aligned): whole 1 GiB and 2 MiB entries where the range
    /// covers them, 4 KiB pages at its edges (splitting the blocks there).
    fn unmap_range(&mut self, start: u64, end: u64) -> Result<(), MapError> {
        let mut a = start;
        while a < end {
            let (level, size) = [
                (1, 1u64 << L1_SHIFT),
                (2, 1 << L2_SHIFT),
                (3, 1 << L3_SHIFT),
            ]
            .into_iter()
            .find(|&(_, g)| a.is_multiple_of(g) && end - a >= g)
            .unwrap_or((3, 1 << L3_SHIFT));
            if self.leaf(a).is_some() || level < 3 && self.has_table(a, level) {
                *self.entry(a, level)? = 0;
            }
            a += size;
        }
        Ok(())
    }

    /// Whether the entry for `addr` at `level` (1 or 2) is a table (something below it may be
    /// mapped even if `addr` itself is not).
    fn has_table(&self, addr: u64, level: u32) -> bool {
        let l1 = self.pool[0][((addr >> L1_SHIFT) as usize) & (ENTRIES - 1)];
        if l1 & 0b11 != DESC_TABLE {
            return false;
        }
        if level == 1 {
            return true;
        }
        let t = (((l1 & TABLE_ADDR) - self.base()) / 4096) as usize;
        self.pool[t][((addr >> L2_SHIFT) as usize) & (ENTRIES - 1)] & 0b11 == DESC_TABLE
    }

    /// Maps `[start, end)` (2 MiB aligned) with the largest blocks that fit.
    fn map_blocks(&mut self, start: u64, end: u64, attrs: u64) -> Result<(), MapError> {
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

/// How much of the top of the boot stack the boot CPU may have used before the MMU is on
/// (`kernel_main`'s first frames: a few KiB), invalidated by [`enable_cold`].
const MMU_OFF_STACK: u64 = 64 * 1024;

/// Largest DTB the early map covers (the arm64 boot protocol's limit).
const DTB_MAX: u64 = 2 << 20;

/// Turns the MMU on with a minimal identity map before the device tree is parsed: the kernel
/// image exactly as the final map has it (4 KiB pages, same permissions, guard pages), the DTB
/// (read/write, never executable) and the board's early UART (Device). Why: with the MMU off
/// every data access is Device memory, where an unaligned access faults on hardware; the DT
/// parser reads byte streams and may well do unaligned loads (QEMU does not fault them, silicon
/// does), and the caches stay off. Linux likewise parses the DT only with the MMU on.
///
/// An address the DT parser will refuse (`crate::dt::check_dtb_pa`: 0, misaligned, beyond
/// 2^39) is not mapped. On error the MMU stays off (the caller reports and stops).
///
/// # Safety
/// Call once, on the boot CPU, with the MMU off, before any other CPU runs. `dtb_pa` is the
/// address the loader passed (it is only mapped, and read for its size when it holds the FDT
/// magic); `early_uart` is a device's base address or `None`.
pub unsafe fn init_early(dtb_pa: usize, early_uart: Option<usize>) -> Result<(), MapError> {
    // SAFETY: the caller guarantees nobody else touches the tables yet.
    let pool = unsafe { &mut *EARLY_POOL.0.get() };
    let mut b = Builder { pool, used: 1 };
    map_kernel_image(&mut b)?;
    if crate::dt::check_dtb_pa(dtb_pa).is_ok() {
        // Below 2^39 - 2 MiB (checked), so no sum below overflows or leaves the map.
        let dtb = dtb_pa as u64 & !0xfff;
        let dtb_end = dtb_pa as u64 + fdt_size_mmu_off(dtb_pa).clamp(1, DTB_MAX);
        let mut page = dtb;
        while page < dtb_end {
            b.set(page, 3, RAM_RW, true)?;
            page += 1 << L3_SHIFT;
        }
    }
    if let Some(uart) = early_uart {
        map_device(
            &mut b,
            MemRange {
                base: uart,
                size: crate::dt::UART_MIN,
            },
        )?;
    }
    let tables_end = b.base() + (b.used as u64) * 4096;
    // SAFETY: MMU off, boot CPU only; the map covers the running code and stack identically.
    unsafe { enable_cold(EARLY_POOL.0.get() as u64, tables_end) };
    Ok(())
}

/// Builds the final identity map for `plat` (see the module docs) and switches the boot CPU to
/// it: from the early map of [`init_early`] (same kernel-image entries, so the code and stack
/// translate identically across the switch), or from MMU off.
///
/// Returns an error, leaving the MMU as it was, when the map cannot be built (the caller
/// reports it and stops): the DT's ranges are checked, so that takes more tables than the pool
/// has.
///
/// `fallback_uart` (the board's early UART, if it has one) stays mapped as Device too, so the
/// console can stay on it when the DT's UART does not answer.
///
/// # Safety
/// Call once, on the boot CPU, before any other CPU runs, with the MMU off or on the early map.
pub unsafe fn init_boot_cpu(
    plat: &Platform,
    fallback_uart: Option<usize>,
    no_map: &[MemRange],
) -> Result<(), MapError> {
    // SAFETY: the caller guarantees nobody else touches the tables yet.
    let pool = unsafe { &mut *POOL.0.get() };
    let mut b = Builder { pool, used: 1 };
    let two_mib = 1u64 << L2_SHIFT;

    for bank in &plat.memory {
        // Banks lie below 2^39 (checked by the DT parser), so nothing here overflows.
        let ram_start = (bank.base as u64).next_multiple_of(two_mib);
        let ram_end = bank.end() as u64 & !(two_mib - 1);
        if ram_end > ram_start {
            b.map_blocks(ram_start, ram_end, RAM_RW)?;
        }
    }
    let (gic_a, gic_b) = match plat.gic {
        GicDesc::V2 { gicd, gicc } => (gicd, gicc),
        GicDesc::V3 { gicd, gicr, .. } => (gicd, gicr),
    };
    let uart = MemRange {
        base: plat.uart.base,
        size: plat.uart.size,
    };
    for range in [uart, gic_a, gic_b] {
        map_device(&mut b, range)?;
    }
    if let Some(base) = fallback_uart {
        let size = crate::dt::UART_MIN;
        map_device(&mut b, MemRange { base, size })?;
    }
    // RAM nobody may map: the DT's `no-map` reservations and the board's `no_map` carve-outs.
    for range in no_map_ranges(plat, no_map) {
        let start = range.base as u64 & !((1 << L3_SHIFT) - 1);
        let end = (range.end() as u64).next_multiple_of(1 << L3_SHIFT);
        b.unmap_range(start, end)?;
    }
    // The DVFS firmware's shared memory and mailboxes: Device memory, as Linux's `ioremap`
    // maps them (the firmware's processor is not coherent with ours).
    if let Ok(Some(dvfs)) = &plat.dvfs {
        for range in dvfs.regions() {
            map_shared_device(&mut b, range)?;
        }
    }
    map_kernel_image(&mut b)?;
    install_stack_window(&mut b)?;
    let tables_end = b.base() + (b.used as u64) * 4096;
    let ttbr0 = POOL.0.get() as u64;
    if mmu_enabled() {
        // SAFETY: the new tables give the running code and stack the same page entries as the
        // early map (map_kernel_image), so no live translation changes size or attributes
        // (no break-before-make needed); the DSB makes the table writes visible to the walker,
        // the TLBI drops the early map's entries.
        unsafe {
            asm!(
                "dsb ishst",
                "msr ttbr0_el1, {tbl}",
                "isb",
                "tlbi vmalle1",
                "dsb nsh",
                "isb",
                tbl = in(reg) ttbr0,
                options(nostack),
            );
        }
    } else {
        // SAFETY: MMU off, boot CPU only; the map covers the running code and stack identically.
        unsafe { enable_cold(ttbr0, tables_end) };
    }
    // SAFETY: single writer before secondaries exist.
    unsafe { *MMU_CONFIG.0.get() = [MAIR, tcr(), ttbr0, SCTLR_MMU_ON] };
    // Secondaries read MMU_CONFIG with their MMU (and so caches) off: push it to memory.
    // SAFETY: cleaning a cache line has no architectural effect on data.
    unsafe { asm!("dc cvac, {}", "dsb sy", in(reg) MMU_CONFIG.0.get() as u64, options(nostack)) };
    Ok(())
}

/// Maps the kernel image in 4 KiB pages (text RX, rodata RO, the rest RW) and leaves the
/// stacks' guard pages invalid. Identical in the early and the final map.
fn map_kernel_image(b: &mut Builder<'_>) -> Result<(), MapError> {
    let (k_start, text_end, ro_end, k_end) = kernel_bounds();
    let mut page = k_start;
    while page < k_end {
        let attrs = if page < text_end {
            KERNEL_TEXT
        } else if page < ro_end {
            KERNEL_RO
        } else {
            RAM_RW
        };
        b.set(page, 3, attrs, false)?;
        page += 1 << L3_SHIFT;
    }
    // Guard pages below every boot stack, and the guard halves of every overflow and IRQ stack
    // slot (arch::aarch64::entry::STACK_GUARD_SIZE, OVERFLOW_GUARD_SIZE).
    for slot in 0..=crate::dt::MAX_CPUS {
        b.unmap_page(super::entry::stack_guard_page(slot) as u64)?;
    }
    for cpu in 0..crate::dt::MAX_CPUS {
        for guard in [
            super::entry::overflow_guard_page(cpu),
            super::entry::irq_guard_page(cpu),
        ] {
            for page in (0..super::entry::OVERFLOW_GUARD_SIZE as u64).step_by(1 << L3_SHIFT) {
                b.unmap_page(guard as u64 + page)?;
            }
        }
    }
    Ok(())
}

/// The RAM [`init_boot_cpu`] leaves unmapped: `plat`'s `no-map` reservations and `extra` (the
/// board's `no_map` carve-outs).
pub fn no_map_ranges<'a>(
    plat: &'a Platform,
    extra: &'a [MemRange],
) -> impl Iterator<Item = MemRange> + 'a {
    plat.reserved
        .iter()
        .filter(|r| r.no_map)
        .map(|r| r.range)
        .chain(extra.iter().copied())
        .filter(|r| r.size > 0)
}

/// Maps a DVFS firmware region as Device memory: outside RAM as [`map_device`] does; in a GiB
/// that has RAM, as Device pages of its own (replacing Normal ones, or inside a `no-map` hole,
/// whose other pages stay unmapped), so no cacheable mapping of the region is left.
fn map_shared_device(b: &mut Builder<'_>, range: MemRange) -> Result<(), MapError> {
    let base = range.base as u64;
    let end = base
        .checked_add(range.size as u64)
        .ok_or(MapError::OutOfRange { addr: base })?;
    let mut a = base & !((1 << L3_SHIFT) - 1);
    while a < end {
        if a >= PA_LIMIT as u64 {
            return Err(MapError::OutOfRange { addr: a });
        }
        if b.pool[0][(a >> L1_SHIFT) as usize] == 0 {
            // A GiB without RAM: as any other device.
            let next = ((a >> L1_SHIFT) + 1) << L1_SHIFT;
            map_device(
                b,
                MemRange {
                    base: a as usize,
                    size: (next.min(end) - a) as usize,
                },
            )?;
            a = next;
        } else {
            b.set(a, 3, DEVICE, false)?;
            a += 1 << L3_SHIFT;
        }
    }
    Ok(())
}

/// Maps `range` as Device memory: whole 1 GiB blocks where the GiB holds nothing else, else
/// 2 MiB blocks (existing entries are kept).
fn map_device(b: &mut Builder<'_>, range: MemRange) -> Result<(), MapError> {
    let two_mib = 1u64 << L2_SHIFT;
    let base = range.base as u64;
    let end = base
        .checked_add(range.size as u64)
        .ok_or(MapError::OutOfRange { addr: base })?;
    let mut a = base & !(two_mib - 1);
    while a < end {
        if a >= PA_LIMIT as u64 {
            return Err(MapError::OutOfRange { addr: a });
        }
        let gib_entry = b.pool[0][(a >> L1_SHIFT) as usize];
        let level = if gib_entry == 0 { 1 } else { 2 };
        b.set(a, level, DEVICE, true)?;
        a += two_mib;
    }
    Ok(())
}

/// `__kernel_start`, `__text_end`, `__rodata_end`, `__kernel_end`.
fn kernel_bounds() -> (u64, u64, u64, u64) {
    (
        (&raw const __kernel_start) as u64,
        (&raw const __text_end) as u64,
        (&raw const __rodata_end) as u64,
        (&raw const __kernel_end) as u64,
    )
}

/// How the running map translates `addr` (`AT S1E1R`, the MMU's own walk).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Translation {
    Unmapped,
    Device,
    Normal,
}

/// How the current map translates the (identity-mapped) address `addr` for an EL1 read.
pub fn translate(addr: u64) -> Translation {
    let par: u64;
    // SAFETY: AT only walks the tables and writes PAR_EL1 (a scratch register nothing else
    // keeps a value in across this sequence); IRQs masked so no handler's AT clobbers PAR_EL1
    // between the two instructions.
    unsafe {
        asm!(
            "mrs {flags}, daif",
            "msr daifset, #2",
            "at s1e1r, {addr}",
            "isb",
            "mrs {par}, par_el1",
            "msr daif, {flags}",
            addr = in(reg) addr,
            par = out(reg) par,
            flags = out(reg) _,
            options(nostack),
        );
    }
    if par & 1 != 0 {
        Translation::Unmapped
    } else if par >> 56 == 0 {
        Translation::Device
    } else {
        Translation::Normal
    }
}

/// TCR_EL1 with IPS from the CPU's physical address range.
fn tcr() -> u64 {
    let parange: u64;
    // SAFETY: ID_AA64MMFR0_EL1 is a read-only ID register.
    unsafe { asm!("mrs {}, id_aa64mmfr0_el1", out(reg) parange, options(nomem, nostack)) };
    TCR_BASE | ((parange & 0xf).min(5) << 32)
}

/// Whether SCTLR_EL1.M is set.
fn mmu_enabled() -> bool {
    let sctlr: u64;
    // SAFETY: SCTLR_EL1 is readable at EL1.
    unsafe { asm!("mrs {}, sctlr_el1", out(reg) sctlr, options(nomem, nostack)) };
    sctlr & 1 != 0
}

/// The FDT's `totalsize` if `dtb_pa` holds the FDT magic, else one page's worth; read with
/// aligned 32-bit loads (safe with the MMU off).
fn fdt_size_mmu_off(dtb_pa: usize) -> u64 {
    if dtb_pa == 0 || !dtb_pa.is_multiple_of(8) {
        return 0;
    }
    let p = dtb_pa as *const u32;
    // SAFETY: the loader passed this address as the DTB (x0); two aligned words of the header.
    let (magic, total) = unsafe { (p.read_volatile(), p.add(1).read_volatile()) };
    if u32::from_be(magic) == 0xd00d_feed {
        u64::from(u32::from_be(total))
    } else {
        4096
    }
}

/// Turns the MMU and caches on with the tables at `ttbr0` (MMU off before).
///
/// # Safety
/// MMU off, boot CPU only, and the tables must map the running code and stack at their own
/// addresses (executable and writable respectively).
unsafe fn enable_cold(ttbr0: u64, tables_end: u64) {
    let (_, _, ro_end, _) = kernel_bounds();
    let bss_end = (&raw const __bss_end) as u64;
    let boot_stack_top = (super::entry::stack_guard_page(crate::dt::MAX_CPUS)
        + super::entry::BOOT_STACK_SIZE) as u64;
    // The tables, data/BSS and the top of the boot stack were written straight to memory so
    // far (MMU and so data cache off); the loader only had to clean the image to PoC, so clean
    // lines from before it jumped here may still be cached. Once the MMU is on, the walker and
    // our loads would hit those stale lines: drop them (Linux head.S does the same with
    // `dcache_inval_poc` for what it writes with the MMU off). Nothing is dirty in these
    // ranges from our side, so invalidating loses no data. The other stacks are first written
    // with the MMU on.
    invalidate_dcache(ttbr0, tables_end);
    invalidate_dcache(ro_end, bss_end);
    invalidate_dcache(boot_stack_top - MMU_OFF_STACK, boot_stack_top);
    // SAFETY: the caller guarantees the tables map the running code and stack identically, so
    // execution continues at the same addresses; the sequence follows the architecture's
    // MMU-enable recipe (invalidate stale table lines and TLBs, ISB, then SCTLR).
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
            tcr = in(reg) tcr(),
            sctlr = in(reg) SCTLR_MMU_ON,
            options(nostack),
        );
    }
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

/// Base of the thread-stack window: level-1 entry 511, the last GiB of the 39-bit address space,
/// which no RAM or device of a supported board reaches (checked when it is installed).
pub const STACK_WINDOW_VA: usize = 0x7f_c000_0000;
/// Bytes of the window: one [`super::context::STACK_SLOT_SIZE`] slot per thread.
pub const STACK_WINDOW_SIZE: usize = crate::task::MAX_THREADS * super::context::STACK_SLOT_SIZE;
/// Level-3 tables the window needs (each maps 2 MiB).
const WINDOW_L3: usize = STACK_WINDOW_SIZE.div_ceil(1 << L2_SHIFT);

/// A translation table the MMU walks while the kernel edits it: atomics, so the edits are plain
/// safe stores (a table entry is written with one 64-bit single-copy-atomic store, as Linux's
/// `WRITE_ONCE` of a PTE).
#[repr(C, align(4096))]
struct LiveTable([AtomicU64; ENTRIES]);

static WINDOW_L2: LiveTable = LiveTable([const { AtomicU64::new(0) }; ENTRIES]);
static WINDOW_L3S: [LiveTable; WINDOW_L3] =
    [const { LiveTable([const { AtomicU64::new(0) }; ENTRIES]) }; WINDOW_L3];

const _: () = assert!(STACK_WINDOW_VA.is_multiple_of(1 << L1_SHIFT));
// The DT keeps RAM, devices and the DTB below MAP_LIMIT: the window's GiB is free on every DT.
const _: () = assert!(STACK_WINDOW_VA == crate::dt::MAP_LIMIT);
const _: () = assert!(STACK_WINDOW_SIZE <= 1 << L1_SHIFT && WINDOW_L3 <= ENTRIES);

/// Links the window's (empty) tables into the level-1 table being built; refused if that GiB
/// is already used by the identity map.
fn install_stack_window(b: &mut Builder<'_>) -> Result<(), MapError> {
    let idx = (STACK_WINDOW_VA >> L1_SHIFT) % ENTRIES;
    if b.pool[0][idx] != 0 {
        return Err(MapError::StackWindowInUse);
    }
    for (i, l3) in WINDOW_L3S.iter().enumerate() {
        let pa = l3.0.as_ptr() as u64;
        WINDOW_L2.0[i].store(pa | DESC_TABLE, Ordering::Relaxed);
    }
    b.pool[0][idx] = WINDOW_L2.0.as_ptr() as u64 | DESC_TABLE;
    // The table walker reads the window tables once TTBR0 points at them (its `dsb ishst`
    // orders these stores first) or, on a secondary, after it enabled its MMU.
    Ok(())
}

/// Why a window page could not be mapped or unmapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowError {
    /// The address is outside the window or not page aligned.
    BadAddress(usize),
    /// Mapping a page that is mapped, or unmapping one that is not.
    State(usize),
}

fn window_entry(va: usize) -> Result<&'static AtomicU64, WindowError> {
    let off = va.wrapping_sub(STACK_WINDOW_VA);
    if off >= STACK_WINDOW_SIZE || !va.is_multiple_of(1 << L3_SHIFT) {
        return Err(WindowError::BadAddress(va));
    }
    let page = off >> L3_SHIFT;
    Ok(&WINDOW_L3S[page / ENTRIES].0[page % ENTRIES])
}

/// Maps the 4 KiB page at `va` in the stack window to physical page `pa`: normal memory,
/// read/write, never executable (the identity map's RAM attributes, so the two aliases agree).
///
/// # Safety
/// `pa` must be a page of RAM that the caller owns until it unmaps `va` again (nothing else may
/// use it meanwhile except through the caller).
pub(super) unsafe fn map_stack_page(va: usize, pa: usize) -> Result<(), WindowError> {
    let e = window_entry(va)?;
    if !pa.is_multiple_of(1 << L3_SHIFT) {
        return Err(WindowError::BadAddress(pa));
    }
    if e.load(Ordering::Relaxed) & 1 != 0 {
        return Err(WindowError::State(va));
    }
    e.store(pa as u64 | RAM_RW | DESC_PAGE, Ordering::Relaxed);
    // An invalid entry is never held in a TLB, so a new one needs no invalidation: the DSB
    // makes the store visible to the table walkers of every CPU, the ISB orders it before this
    // CPU's next access (Linux `__set_pte` for kernel mappings).
    // SAFETY: barriers only.
    unsafe { asm!("dsb ishst", "isb", options(nostack, preserves_flags)) };
    Ok(())
}

/// Unmaps the page at `va` in the stack window and invalidates its translation on every CPU
/// (Linux `flush_tlb_kernel_range`): after this returns no CPU can reach the old page through
/// `va`.
pub(super) fn unmap_stack_page(va: usize) -> Result<(), WindowError> {
    let e = window_entry(va)?;
    if e.load(Ordering::Relaxed) & 1 == 0 {
        return Err(WindowError::State(va));
    }
    e.store(0, Ordering::Relaxed);
    // SAFETY: the entry is invalid now; the DSB publishes that before the broadcast TLBI (by
    // VA, all ASIDs, last level: only the level-3 entry changed), the second DSB waits for every
    // CPU to complete it, and the ISB resynchronises this CPU.
    unsafe {
        asm!(
            "dsb ishst",
            "tlbi vaale1is, {page}",
            "dsb ish",
            "isb",
            page = in(reg) (va >> L3_SHIFT) as u64,
            options(nostack, preserves_flags),
        )
    };
    Ok(())
}

/// Whether the page at `va` in the stack window is mapped now.
pub fn stack_page_mapped(va: usize) -> bool {
    window_entry(va).is_ok_and(|e| e.load(Ordering::Relaxed) & 1 != 0)
}

/// Pages mapped in the stack window now (the leak check's count).
pub fn stack_pages_mapped() -> usize {
    WINDOW_L3S
        .iter()
        .flat_map(|t| t.0.iter())
        .filter(|e| e.load(Ordering::Relaxed) & 1 != 0)
        .count()
}
