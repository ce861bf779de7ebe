//! EL0 address spaces: per-task translation tables with ASIDs, in the upper VA range (TTBR1).
//!
//! Layout. The kernel stays identity-mapped in TTBR0 ([`super::mmu`]), with global entries that
//! EL0 can never access (AP[1] = 0 on every kernel descriptor). Each user address space is its
//! own set of tables, built with Google's `aarch64-paging` crate in the upper 39-bit range
//! (`0xffff_ff80_0000_0000..`), loaded into TTBR1_EL1 with its ASID (TCR_EL1.A1 = 1: the ASID
//! comes from TTBR1). Linux does it the other way round (user in TTBR0, kernel in TTBR1);
//! moving the kernel to TTBR1 means relinking it at a high address, which this layout avoids
//! for now: the two ranges are disjoint either way, and a kernel thread runs with TTBR1 on
//! [`EMPTY_ROOT`] (ASID 0, no valid entry), so no user page is reachable outside its task.
//!
//! Permissions: every user page is non-global (tagged with its ASID), never executable at EL1
//! (PXN), and either executable or writable, never both (W^X): text is read-only+executable
//! at EL0, data and stack are read/write and never executable (UXN). The stack has an unmapped
//! guard page below and above it.
//!
//! PAN (Armv8.1 FEAT_PAN). Where the CPU has it, PSTATE.PAN is set on every CPU at start and
//! SCTLR_EL1.SPAN is cleared, so the hardware sets PAN again on every exception taken to EL1:
//! an EL1 load or store to any EL0-accessible page faults, whichever code path the kernel is
//! on. The kernel never needs to lift it: system calls reach user memory through the kernel's
//! identity alias of the checked pages (`crate::user`), never through the user VA. Cortex-A53
//! and -A72 (Armv8.0; QEMU's models of the emulated boards) have no PAN: there only the
//! page-list check protects user memory, and the boot log says which case holds.
//!
//! TLB maintenance. ASIDs are unique among live address spaces (8-bit, 1..=255), so switching
//! TTBR1 needs no invalidation (Linux `cpu_switch_mm` with ASIDs), only an ISB before the
//! kernel's own next access through TTBR1. Entries are only ever added to tables that are not
//! live yet; an address space is torn down only when no CPU runs it any more, and then
//! `TLBI ASIDE1IS` removes whatever any CPU cached for its ASID before the ASID (or any of its
//! pages) can be handed out again.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::arch::asm;
use core::fmt;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use aarch64_paging::descriptor::{El1Attributes, PhysicalAddress};
use aarch64_paging::linearmap::LinearTranslation;
use aarch64_paging::paging::{Constraints, El1And0, MemoryRegion, VaRange};
use aarch64_paging::Mapping;

/// Lowest user virtual address: the upper range of a 39-bit TTBR1 (T1SZ = 25).
pub const USER_BASE: usize = 0xffff_ff80_0000_0000;
/// TCR_EL1.T1SZ: the same 39 bits as TTBR0.
const T1SZ: u64 = 25;
const PAGE: usize = 4096;

/// TCR_EL1 bits for TTBR1 walks: T1SZ, A1 (ASID from TTBR1), IRGN1/ORGN1 write-back
/// write-allocate, SH1 inner shareable, TG1 4 KiB.
const TCR_TTBR1: u64 =
    (T1SZ << 16) | (1 << 22) | (0b01 << 24) | (0b01 << 26) | (0b11 << 28) | (0b10 << 30);
/// TCR_EL1.T1SZ, A1, EPD1, IRGN1, ORGN1, SH1, TG1: everything [`TCR_TTBR1`] owns.
const TCR_TTBR1_MASK: u64 = 0xffff_0000 & !(0b11 << 14);
const TCR_EPD1: u64 = 1 << 23;

/// A level-1 table with no valid entry: TTBR1 of every CPU while no user task runs there.
#[repr(C, align(4096))]
struct EmptyRoot([u64; 512]);
static EMPTY_ROOT: EmptyRoot = EmptyRoot([0; 512]);

/// The TTBR1 value of "no address space": [`EMPTY_ROOT`], ASID 0.
pub fn empty_ttbr() -> u64 {
    (&raw const EMPTY_ROOT) as u64
}

/// SCTLR_EL1.SPAN: with PAN implemented, 0 makes every exception taken to EL1 set PSTATE.PAN.
const SCTLR_SPAN: u64 = 1 << 23;
/// PSTATE.PAN's bit in the PAN system register (`S3_0_C4_C2_3`).
const PAN_BIT: u64 = 1 << 22;

/// Whether this CPU implements FEAT_PAN (ID_AA64MMFR1_EL1.PAN, bits [23:20], non-zero).
pub fn has_pan() -> bool {
    let mmfr1: u64;
    // SAFETY: ID_AA64MMFR1_EL1 is a read-only ID register, readable at EL1.
    unsafe {
        asm!("mrs {}, id_aa64mmfr1_el1", out(reg) mmfr1, options(nomem, nostack, preserves_flags))
    };
    (mmfr1 >> 20) & 0xf != 0
}

/// PSTATE.PAN on this CPU now (false on a CPU without PAN).
pub fn pan_on() -> bool {
    if !has_pan() {
        return false;
    }
    let v: u64;
    // SAFETY: the PAN register exists (FEAT_PAN, checked above) and is readable at EL1; it is
    // named by its encoding because the baseline target's assembler lacks `pan`.
    unsafe { asm!("mrs {}, s3_0_c4_c2_3", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v & PAN_BIT != 0
}

/// Sets PSTATE.PAN on this CPU to `on` and returns what it was (no-op and false without PAN).
/// For self tests that show a fault is PAN's; the kernel itself never lowers it.
pub fn set_pan(on: bool) -> bool {
    let was = pan_on();
    if has_pan() {
        // SAFETY: FEAT_PAN is implemented; PSTATE.PAN only changes which EL1 accesses to
        // EL0-accessible pages fault, and no such access is in flight across this instruction.
        unsafe {
            asm!(
                "msr s3_0_c4_c2_3, {}",
                in(reg) if on { PAN_BIT } else { 0 },
                options(nomem, nostack, preserves_flags)
            )
        };
    }
    was
}

/// Whether SCTLR_EL1.SPAN is clear on this CPU (exceptions to EL1 set PAN).
pub fn span_clear() -> bool {
    let sctlr: u64;
    // SAFETY: SCTLR_EL1 is readable at EL1.
    unsafe { asm!("mrs {}, sctlr_el1", out(reg) sctlr, options(nomem, nostack, preserves_flags)) };
    sctlr & SCTLR_SPAN == 0
}

/// CPUs that turned PAN on in [`init_cpu`].
static PAN_CPUS: AtomicU32 = AtomicU32::new(0);

/// How many CPUs run with PAN on (0 on CPUs without FEAT_PAN).
pub fn pan_cpus() -> u32 {
    PAN_CPUS.load(Ordering::Relaxed)
}

/// PAN on for the calling CPU where the CPU has it (module docs): SPAN cleared, then
/// PSTATE.PAN set. Returns whether PAN is on.
fn enable_pan() -> bool {
    if !has_pan() {
        return false;
    }
    let sctlr: u64;
    // SAFETY: SCTLR_EL1 is readable at EL1; clearing SPAN (defined with FEAT_PAN, checked
    // above) changes only what an exception entry does to PSTATE.PAN; the ISB makes it
    // effective before the next exception. Nothing in the kernel touches EL0 pages through
    // their user VA (module docs), so setting PAN makes no kernel access fault.
    unsafe {
        asm!("mrs {}, sctlr_el1", out(reg) sctlr, options(nomem, nostack, preserves_flags));
        asm!(
            "msr sctlr_el1, {}",
            "isb",
            in(reg) sctlr & !SCTLR_SPAN,
            options(nostack, preserves_flags)
        );
    }
    set_pan(true);
    let on = pan_on();
    if on {
        PAN_CPUS.fetch_add(1, Ordering::Relaxed);
    }
    on
}

/// Turns on TTBR1 walks on the calling CPU, with TTBR1 on [`EMPTY_ROOT`]: from the first
/// thread switch on, a thread's TTBR1 is loaded on every switch ([`switch_ttbr1`]); and PAN
/// where the CPU has it. Each CPU, once, before it runs threads.
pub fn init_cpu() {
    let tcr: u64;
    // SAFETY: TCR_EL1 is readable at EL1.
    unsafe { asm!("mrs {}, tcr_el1", out(reg) tcr, options(nomem, nostack, preserves_flags)) };
    let tcr = (tcr & !TCR_TTBR1_MASK & !TCR_EPD1) | TCR_TTBR1;
    // SAFETY: TTBR1 is pointed at a table with no valid entry before walks through it are
    // enabled, so no translation of the kernel's (TTBR0) addresses changes; the TLBI drops
    // whatever a reset-time TTBR1 could have left, the DSB/ISB complete it before returning.
    unsafe {
        asm!(
            "msr ttbr1_el1, {ttbr}",
            "isb",
            "msr tcr_el1, {tcr}",
            "isb",
            "tlbi vmalle1",
            "dsb nsh",
            "isb",
            ttbr = in(reg) empty_ttbr(),
            tcr = in(reg) tcr,
            options(nostack, preserves_flags),
        )
    };
    enable_pan();
}

/// Loads `ttbr` (an [`AddressSpace::ttbr`] or [`empty_ttbr`]) into TTBR1 on this CPU. No TLB
/// invalidation: ASIDs are unique among live address spaces (module docs).
///
/// # Safety
/// `ttbr` must be [`empty_ttbr`] or the value of an address space that stays alive until this
/// CPU's TTBR1 is switched away from it again.
pub unsafe fn switch_ttbr1(ttbr: u64) {
    // SAFETY: the caller keeps the tables alive while loaded; the kernel's own code and data
    // are in TTBR0 and do not move.
    unsafe { asm!("msr ttbr1_el1, {}", "isb", in(reg) ttbr, options(nostack, preserves_flags)) };
}

/// The TTBR1 value loaded on this CPU now.
pub fn current_ttbr1() -> u64 {
    let v: u64;
    // SAFETY: TTBR1_EL1 is readable at EL1.
    unsafe { asm!("mrs {}, ttbr1_el1", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// ASIDs in use (bit `n` of word `n / 64`); ASID 0 is [`EMPTY_ROOT`]'s, never handed out.
static ASIDS: [AtomicU64; 4] = [
    AtomicU64::new(1),
    AtomicU64::new(0),
    AtomicU64::new(0),
    AtomicU64::new(0),
];

fn alloc_asid() -> Option<u16> {
    crate::sync::bitmap_claim(&ASIDS).map(|n| n as u16)
}

/// ASIDs in use now, [`EMPTY_ROOT`]'s included (the leak check's count).
pub fn asids_in_use() -> u32 {
    ASIDS
        .iter()
        .map(|w| w.load(Ordering::Relaxed).count_ones())
        .sum()
}

/// What a user page may be used for. Never writable and executable at once (W^X).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Perm {
    /// Read and execute at EL0.
    Text,
    /// Read only at EL0.
    ReadOnly,
    /// Read and write at EL0, never executable.
    Data,
}

impl Perm {
    fn attrs(self) -> El1Attributes {
        // Normal memory (MAIR attr1), inner shareable, accessed, tagged with the ASID, EL0
        // accessible, never executable at EL1.
        let base = El1Attributes::VALID
            | El1Attributes::ATTRIBUTE_INDEX_1
            | El1Attributes::INNER_SHAREABLE
            | El1Attributes::ACCESSED
            | El1Attributes::NON_GLOBAL
            | El1Attributes::USER
            | El1Attributes::PXN;
        match self {
            Perm::Text => base | El1Attributes::READ_ONLY,
            Perm::ReadOnly => base | El1Attributes::READ_ONLY | El1Attributes::UXN,
            Perm::Data => base | El1Attributes::UXN,
        }
    }
}

/// Why an address space could not be built or changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpaceError {
    /// All 255 ASIDs are in use.
    NoAsid,
    /// `va` is not a page-aligned user address.
    BadAddress(usize),
    /// `va` is mapped already.
    Mapped(usize),
    /// The page tables refused the mapping (the crate's error, flattened).
    Map,
    /// More bytes than fit in the page.
    TooLong(usize),
}

impl fmt::Display for SpaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SpaceError::NoAsid => write!(f, "uspace: all 255 ASIDs are in use"),
            SpaceError::BadAddress(va) => {
                write!(f, "uspace: {va:#x} is not a page-aligned user address")
            }
            SpaceError::Mapped(va) => write!(f, "uspace: {va:#x} is mapped already"),
            SpaceError::Map => write!(f, "uspace: the page tables refused the mapping"),
            SpaceError::TooLong(n) => write!(f, "uspace: {n} bytes do not fit in a page"),
        }
    }
}

/// One user page, as atomics: EL0 writes it through its own mapping while the kernel owns it.
#[repr(C, align(4096))]
struct UserPage([AtomicU64; PAGE / 8]);

/// A user address space: its tables, its ASID and the pages it maps (freed with it).
pub struct AddressSpace {
    map: Mapping<LinearTranslation<El1Attributes>, El1And0>,
    asid: u16,
    pages: Vec<(usize, Perm, Box<UserPage>)>,
}

impl AddressSpace {
    /// An empty address space with a fresh ASID.
    pub fn new() -> Result<AddressSpace, SpaceError> {
        let asid = alloc_asid().ok_or(SpaceError::NoAsid)?;
        // The kernel is identity-mapped: a table's (heap) address is its physical address.
        let map = Mapping::with_asid_and_va_range(
            LinearTranslation::new(0),
            usize::from(asid),
            1,
            El1And0,
            VaRange::Upper,
        );
        Ok(AddressSpace {
            map,
            asid,
            pages: Vec::new(),
        })
    }

    /// The ASID.
    pub fn asid(&self) -> u16 {
        self.asid
    }

    /// The TTBR1 value that selects this address space.
    pub fn ttbr(&self) -> u64 {
        self.map.root_address().0 as u64 | (u64::from(self.asid) << 48)
    }

    /// Maps a fresh zeroed page at user address `va` with `perm`, filled from `bytes` (at most
    /// a page). Only before the address space is first loaded (no break-before-make needed:
    /// the entry was invalid).
    pub fn map_page(&mut self, va: usize, perm: Perm, bytes: &[u8]) -> Result<(), SpaceError> {
        if va < USER_BASE || !va.is_multiple_of(PAGE) || va > usize::MAX - PAGE {
            return Err(SpaceError::BadAddress(va));
        }
        if bytes.len() > PAGE {
            return Err(SpaceError::TooLong(bytes.len()));
        }
        if self.lookup(va).is_some() {
            return Err(SpaceError::Mapped(va));
        }
        let page = Box::new(UserPage([const { AtomicU64::new(0) }; PAGE / 8]));
        for (i, chunk) in bytes.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            page.0[i].store(u64::from_le_bytes(w), Ordering::Relaxed);
        }
        let pa = (&raw const *page) as usize;
        if perm == Perm::Text {
            sync_icache(pa);
        }
        self.map
            .map_range(
                &MemoryRegion::new(va, va + PAGE),
                PhysicalAddress(pa),
                perm.attrs(),
                Constraints::empty(),
            )
            .map_err(|_| SpaceError::Map)?;
        // Kept sorted by address: a program loaded from an ELF maps hundreds of pages, and
        // every user pointer a system call takes is looked up here.
        let at = self.pages.partition_point(|(v, _, _)| *v < va);
        self.pages.insert(at, (va, perm, page));
        Ok(())
    }

    /// The permission and physical address of the page holding `va`, if mapped.
    pub fn lookup(&self, va: usize) -> Option<(Perm, usize)> {
        let page = va & !(PAGE - 1);
        self.pages
            .binary_search_by_key(&page, |(v, _, _)| *v)
            .ok()
            .map(|i| {
                let (_, perm, p) = &self.pages[i];
                (*perm, (&raw const **p) as usize + (va - page))
            })
    }

    /// Pages mapped.
    pub fn nr_pages(&self) -> usize {
        self.pages.len()
    }
}

impl Drop for AddressSpace {
    fn drop(&mut self) {
        if current_ttbr1() == self.ttbr() {
            // SAFETY: the empty root is always valid.
            unsafe { switch_ttbr1(empty_ttbr()) };
        }
        // Whatever any CPU cached for this ASID goes before the tables, the pages or the ASID
        // are reused (`self.map` and `self.pages` are freed after this body).
        free_asid(self.asid);
    }
}

impl fmt::Debug for AddressSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "AddressSpace(asid {}, {} pages)",
            self.asid,
            self.pages.len()
        )
    }
}

/// Invalidates every CPU's TLB entries for `asid`, then releases it.
fn free_asid(asid: u16) {
    // SAFETY: TLB maintenance only; the DSBs order it after the table writes and before the
    // ASID's release.
    unsafe {
        asm!(
            "dsb ishst",
            "tlbi aside1is, {asid}",
            "dsb ish",
            "isb",
            asid = in(reg) u64::from(asid) << 48,
            options(nostack, preserves_flags),
        )
    };
    crate::sync::bitmap_release(&ASIDS, usize::from(asid));
}

/// Makes instructions written to the page at `pa` (through its identity mapping) visible to
/// instruction fetch on every CPU: clean the data cache to the point of unification, then
/// invalidate all instruction caches (Linux `flush_icache_range`, the whole-cache variant).
fn sync_icache(pa: usize) {
    let ctr: u64;
    // SAFETY: CTR_EL0 is a read-only ID register.
    unsafe { asm!("mrs {}, ctr_el0", out(reg) ctr, options(nomem, nostack, preserves_flags)) };
    let line = 4usize << ((ctr >> 16) & 0xf);
    let mut a = pa;
    while a < pa + PAGE {
        // SAFETY: cleaning a line of memory the caller owns has no architectural effect on data.
        unsafe { asm!("dc cvau, {}", in(reg) a, options(nostack, preserves_flags)) };
        a += line;
    }
    // SAFETY: barriers and an instruction-cache invalidation have no effect on data.
    unsafe {
        asm!(
            "dsb ish",
            "ic ialluis",
            "dsb ish",
            "isb",
            options(nostack, preserves_flags)
        )
    };
}

/// What the MMU says about an access to `va` by EL0 (or EL1) with this CPU's current tables
/// (`AT S1E0R/W`, `AT S1E1R/W`): `Ok(pa)` or `Err(fault status code)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    El0Read,
    El0Write,
    El1Read,
    El1Write,
}

/// Translates `va` for `access` with the tables loaded on this CPU (PAR_EL1): the physical
/// address, or the fault status code (PAR_EL1.FST) of the access that would fault.
pub fn translate(va: usize, access: Access) -> Result<usize, u8> {
    let par: u64;
    // SAFETY: AT only writes PAR_EL1 (read right after, IRQs masked so no handler clobbers it
    // in between); it never faults.
    unsafe {
        let irq = super::irq_save_disable();
        match access {
            Access::El0Read => asm!("at s1e0r, {}", "isb", in(reg) va, options(nostack)),
            Access::El0Write => asm!("at s1e0w, {}", "isb", in(reg) va, options(nostack)),
            Access::El1Read => asm!("at s1e1r, {}", "isb", in(reg) va, options(nostack)),
            Access::El1Write => asm!("at s1e1w, {}", "isb", in(reg) va, options(nostack)),
        }
        asm!("mrs {}, par_el1", out(reg) par, options(nomem, nostack));
        super::irq_restore(irq);
    }
    if par & 1 != 0 {
        Err(((par >> 1) & 0x3f) as u8)
    } else {
        Ok(((par & 0x0000_ffff_ffff_f000) as usize) | (va & (PAGE - 1)))
    }
}
