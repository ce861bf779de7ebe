//! Static AArch64 ELF executables for EL0: which pages a program needs, with which
//! permissions, filled from which bytes of the file — checked before anything is mapped, so a
//! bad file is an error naming the problem, never a fault or a panic. The headers are read
//! with the `object` crate (`read_core` + `elf`, no_std; the one xtask reads the kernel's own
//! ELF with); `crate::rtapp_el0` maps the pages this plans. Linux counterpart:
//! `fs/binfmt_elf.c` (`load_elf_binary`, `elf_map`); deliberate differences: static
//! `ET_EXEC` programs only (no interpreter, no relocation, no `PT_DYNAMIC`), every segment
//! inside one fixed user range, and W^X enforced rather than left to the file.

use core::fmt;

use object::elf::{FileHeader64, EM_AARCH64, ET_EXEC, PF_W, PF_X, PT_DYNAMIC, PT_INTERP, PT_LOAD};
use object::read::elf::{FileHeader, ProgramHeader};
use object::LittleEndian;

const PAGE: u64 = 4096;
/// Most `PT_LOAD` segments a program may have.
pub const MAX_SEGMENTS: usize = 8;

/// What a segment's pages may be used for (never writable and executable at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegPerm {
    /// `R E`.
    Text,
    /// `R`.
    ReadOnly,
    /// `RW`.
    Data,
}

/// One `PT_LOAD` segment: pages `[start, end)` (page-aligned), the file's bytes
/// `[offset, offset + filesz)` placed at `vaddr`, the rest zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub start: u64,
    pub end: u64,
    pub perm: SegPerm,
    pub vaddr: u64,
    pub offset: usize,
    pub filesz: usize,
}

impl Segment {
    /// The contents of the segment's page at `page_va` (in `[start, end)`), from `elf`.
    pub fn fill_page(&self, elf: &[u8], page_va: u64, out: &mut [u8]) {
        out.fill(0);
        let lo = self.vaddr.max(page_va);
        let hi = (self.vaddr + self.filesz as u64).min(page_va + PAGE);
        if lo >= hi {
            return;
        }
        let src = self.offset + (lo - self.vaddr) as usize;
        let dst = (lo - page_va) as usize;
        let n = (hi - lo) as usize;
        out[dst..dst + n].copy_from_slice(&elf[src..src + n]);
    }

    /// Pages in the segment.
    pub fn pages(&self) -> usize {
        ((self.end - self.start) / PAGE) as usize
    }
}

/// A program to load: its entry point and its segments (in file order, disjoint pages).
#[derive(Clone, Debug)]
pub struct Program {
    pub entry: u64,
    pub segments: heapless::Vec<Segment, MAX_SEGMENTS>,
}

impl Program {
    /// Pages the segments take.
    pub fn pages(&self) -> usize {
        self.segments.iter().map(Segment::pages).sum()
    }
}

/// Why a file is not a program this kernel loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElfError {
    /// The ELF header or program headers could not be read (`object`'s reason).
    Header(object::Error),
    /// Not for AArch64 (`e_machine`).
    Machine(u16),
    /// Not a static executable (`e_type`).
    Type(u16),
    /// A `PT_INTERP` or `PT_DYNAMIC` segment: a dynamically linked program.
    Dynamic,
    NoLoad,
    TooManySegments,
    /// Segment `index`'s file bytes are not in the file, or `filesz > memsz`.
    FileRange {
        index: usize,
    },
    /// Segment `index` at `[vaddr, end)` is outside `[lo, hi)`.
    OutOfRange {
        index: usize,
        vaddr: u64,
        end: u64,
        lo: u64,
        hi: u64,
    },
    /// Segment `index` is writable and executable.
    WriteExec {
        index: usize,
    },
    /// Segment `index` maps page `page`, which an earlier segment maps.
    Overlap {
        index: usize,
        page: u64,
    },
    /// More pages than the limit.
    TooBig {
        pages: usize,
        max: usize,
    },
    /// The entry point is not in an executable segment.
    Entry(u64),
}

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ElfError::Header(why) => write!(f, "not a 64-bit little-endian ELF file: {why}"),
            ElfError::Machine(m) => {
                write!(f, "not an AArch64 program (e_machine {m}, want {EM_AARCH64})")
            }
            ElfError::Type(t) => write!(
                f,
                "not a static executable (e_type {t}, want ET_EXEC {ET_EXEC})"
            ),
            ElfError::Dynamic => write!(
                f,
                "dynamically linked (PT_INTERP or PT_DYNAMIC): only static programs load"
            ),
            ElfError::NoLoad => write!(f, "no PT_LOAD segment"),
            ElfError::TooManySegments => {
                write!(f, "more than {MAX_SEGMENTS} PT_LOAD segments")
            }
            ElfError::FileRange { index } => write!(
                f,
                "PT_LOAD segment {index}: its file bytes are not in the file (or p_filesz > p_memsz)"
            ),
            ElfError::OutOfRange {
                index,
                vaddr,
                end,
                lo,
                hi,
            } => write!(
                f,
                "PT_LOAD segment {index} at {vaddr:#x}..{end:#x} is outside the program range \
                 {lo:#x}..{hi:#x} (link it at {lo:#x})"
            ),
            ElfError::WriteExec { index } => {
                write!(f, "PT_LOAD segment {index} is writable and executable (W^X)")
            }
            ElfError::Overlap { index, page } => write!(
                f,
                "PT_LOAD segment {index} shares page {page:#x} with an earlier segment \
                 (link with -z separate-loadable-segments)"
            ),
            ElfError::TooBig { pages, max } => {
                write!(f, "{pages} pages of segments, at most {max} load")
            }
            ElfError::Entry(e) => {
                write!(f, "entry point {e:#x} is not in an executable segment")
            }
        }
    }
}

/// Plans `elf` as a program whose segments lie in `[lo, hi)` and take at most `max_pages`.
pub fn plan(elf: &[u8], lo: u64, hi: u64, max_pages: usize) -> Result<Program, ElfError> {
    let h = FileHeader64::<LittleEndian>::parse(elf).map_err(ElfError::Header)?;
    let e = h.endian().map_err(ElfError::Header)?;
    if h.e_machine(e) != EM_AARCH64 {
        return Err(ElfError::Machine(h.e_machine(e)));
    }
    if h.e_type(e) != ET_EXEC {
        return Err(ElfError::Type(h.e_type(e)));
    }
    let phs = h.program_headers(e, elf).map_err(ElfError::Header)?;
    let mut segments: heapless::Vec<Segment, MAX_SEGMENTS> = heapless::Vec::new();
    for ph in phs {
        match ph.p_type(e) {
            PT_INTERP | PT_DYNAMIC => return Err(ElfError::Dynamic),
            PT_LOAD => {}
            _ => continue,
        }
        let index = segments.len();
        let (vaddr, memsz) = (ph.p_vaddr(e), ph.p_memsz(e));
        let (offset, filesz) = (ph.p_offset(e), ph.p_filesz(e));
        if filesz > memsz
            || offset
                .checked_add(filesz)
                .is_none_or(|end| end > elf.len() as u64)
        {
            return Err(ElfError::FileRange { index });
        }
        if memsz == 0 {
            continue;
        }
        let end = vaddr.saturating_add(memsz);
        if vaddr < lo || end > hi {
            return Err(ElfError::OutOfRange {
                index,
                vaddr,
                end,
                lo,
                hi,
            });
        }
        let flags = ph.p_flags(e);
        let perm = match (flags & PF_W != 0, flags & PF_X != 0) {
            (true, true) => return Err(ElfError::WriteExec { index }),
            (false, true) => SegPerm::Text,
            (true, false) => SegPerm::Data,
            (false, false) => SegPerm::ReadOnly,
        };
        let seg = Segment {
            start: vaddr & !(PAGE - 1),
            end: end.div_ceil(PAGE) * PAGE,
            perm,
            vaddr,
            offset: offset as usize,
            filesz: filesz as usize,
        };
        if let Some(prev) = segments
            .iter()
            .find(|s| s.start < seg.end && seg.start < s.end)
        {
            return Err(ElfError::Overlap {
                index,
                page: seg.start.max(prev.start),
            });
        }
        segments.push(seg).map_err(|_| ElfError::TooManySegments)?;
    }
    if segments.is_empty() {
        return Err(ElfError::NoLoad);
    }
    let p = Program {
        entry: h.e_entry(e),
        segments,
    };
    if p.pages() > max_pages {
        return Err(ElfError::TooBig {
            pages: p.pages(),
            max: max_pages,
        });
    }
    let entry_ok = p
        .segments
        .iter()
        .any(|s| s.perm == SegPerm::Text && (s.start..s.end).contains(&p.entry));
    if !entry_ok || !p.entry.is_multiple_of(4) {
        return Err(ElfError::Entry(p.entry));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LO: u64 = 0xffff_ff80_0010_0000;
    const HI: u64 = 0xffff_ff80_0100_0000;

    /// `(p_type, p_flags, vaddr, offset, filesz, memsz)`.
    type Ph = (u32, u32, u64, u64, u64, u64);

    /// A minimal ELF64 AArch64 executable: header, program headers, then `body` from 0x1000.
    fn elf(machine: u16, etype: u16, entry: u64, phs: &[Ph], body: usize) -> Vec<u8> {
        let mut f = vec![0u8; 0x1000 + body];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = 2; // ELFCLASS64
        f[5] = 1; // ELFDATA2LSB
        f[6] = 1; // EV_CURRENT
        let put16 =
            |f: &mut Vec<u8>, at: usize, v: u16| f[at..at + 2].copy_from_slice(&v.to_le_bytes());
        let put32 =
            |f: &mut Vec<u8>, at: usize, v: u32| f[at..at + 4].copy_from_slice(&v.to_le_bytes());
        let put64 =
            |f: &mut Vec<u8>, at: usize, v: u64| f[at..at + 8].copy_from_slice(&v.to_le_bytes());
        put16(&mut f, 16, etype);
        put16(&mut f, 18, machine);
        put32(&mut f, 20, 1);
        put64(&mut f, 24, entry);
        put64(&mut f, 32, 64); // e_phoff
        put16(&mut f, 52, 64); // e_ehsize
        put16(&mut f, 54, 56); // e_phentsize
        put16(&mut f, 56, phs.len() as u16);
        for (i, &(t, fl, va, off, fsz, msz)) in phs.iter().enumerate() {
            let at = 64 + 56 * i;
            put32(&mut f, at, t);
            put32(&mut f, at + 4, fl);
            put64(&mut f, at + 8, off);
            put64(&mut f, at + 16, va);
            put64(&mut f, at + 24, va);
            put64(&mut f, at + 32, fsz);
            put64(&mut f, at + 40, msz);
            put64(&mut f, at + 48, 0x1000);
        }
        for (i, b) in f[0x1000..].iter_mut().enumerate() {
            *b = (i % 251) as u8 + 1;
        }
        f
    }

    const R: u32 = 4;
    const RW: u32 = 6;
    const RX: u32 = 5;

    fn good() -> Vec<u8> {
        elf(
            EM_AARCH64,
            ET_EXEC,
            LO + 0x1010,
            &[
                (PT_LOAD, R, LO, 0x1000, 0x800, 0x800),
                (PT_LOAD, RX, LO + 0x1000, 0x1800, 0x1000, 0x1000),
                (PT_LOAD, RW, LO + 0x2100, 0x2800, 0x100, 0x3000),
            ],
            0x3000,
        )
    }

    #[test]
    fn a_static_program_plans_its_pages_and_bytes() {
        let f = good();
        let p = plan(&f, LO, HI, 64).unwrap();
        assert_eq!(p.entry, LO + 0x1010);
        assert_eq!(p.segments.len(), 3);
        assert_eq!(p.pages(), 1 + 1 + 4);
        let d = p.segments[2];
        assert_eq!(
            (d.start, d.end, d.perm),
            (LO + 0x2000, LO + 0x6000, SegPerm::Data)
        );
        let mut page = [0xffu8; 4096];
        d.fill_page(&f, LO + 0x2000, &mut page);
        assert!(page[..0x100].iter().all(|&b| b == 0));
        assert_eq!(&page[0x100..0x200], &f[0x2800..0x2900]);
        assert!(page[0x200..].iter().all(|&b| b == 0));
        d.fill_page(&f, LO + 0x3000, &mut page);
        assert!(page.iter().all(|&b| b == 0), "bss is zero");
        let t = p.segments[1];
        t.fill_page(&f, LO + 0x1000, &mut page);
        assert_eq!(&page[..], &f[0x1800..0x2800]);
    }

    #[test]
    fn bad_programs_are_refused_with_the_reason() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                b"{\"global\": {}}".to_vec(),
                "not a 64-bit little-endian ELF file",
            ),
            (
                good()[..100].to_vec(),
                "not a 64-bit little-endian ELF file",
            ),
            (
                elf(62, ET_EXEC, LO, &[(PT_LOAD, RX, LO, 0x1000, 16, 16)], 16),
                "e_machine 62",
            ),
            (
                elf(EM_AARCH64, 3, LO, &[(PT_LOAD, RX, LO, 0x1000, 16, 16)], 16),
                "e_type 3",
            ),
            (
                elf(
                    EM_AARCH64,
                    ET_EXEC,
                    LO,
                    &[(PT_INTERP, R, LO, 0x1000, 16, 16)],
                    16,
                ),
                "dynamically",
            ),
            (elf(EM_AARCH64, ET_EXEC, LO, &[], 16), "no PT_LOAD"),
            (
                elf(
                    EM_AARCH64,
                    ET_EXEC,
                    LO,
                    &[(PT_LOAD, 7, LO, 0x1000, 16, 16)],
                    16,
                ),
                "W^X",
            ),
            (
                elf(
                    EM_AARCH64,
                    ET_EXEC,
                    LO,
                    &[(PT_LOAD, RX, LO, 0x1000, 0x9000, 0x9000)],
                    16,
                ),
                "not in the file",
            ),
            (
                elf(
                    EM_AARCH64,
                    ET_EXEC,
                    LO,
                    &[(PT_LOAD, RX, LO, 0x1000, 32, 16)],
                    64,
                ),
                "p_filesz > p_memsz",
            ),
            (
                elf(
                    EM_AARCH64,
                    ET_EXEC,
                    0x40_0000,
                    &[(PT_LOAD, RX, 0x40_0000, 0x1000, 16, 16)],
                    16,
                ),
                "outside the program range",
            ),
            (
                elf(
                    EM_AARCH64,
                    ET_EXEC,
                    LO,
                    &[(PT_LOAD, RX, HI - 8, 0x1000, 16, 16)],
                    16,
                ),
                "outside the program range",
            ),
            (
                elf(
                    EM_AARCH64,
                    ET_EXEC,
                    LO,
                    &[(PT_LOAD, RX, u64::MAX - 8, 0x1000, 16, 16)],
                    16,
                ),
                "outside the program range",
            ),
            (
                elf(
                    EM_AARCH64,
                    ET_EXEC,
                    LO,
                    &[
                        (PT_LOAD, RX, LO, 0x1000, 16, 16),
                        (PT_LOAD, RW, LO + 0x800, 0x1000, 16, 16),
                    ],
                    16,
                ),
                "shares page",
            ),
            (
                elf(
                    EM_AARCH64,
                    ET_EXEC,
                    LO,
                    &[(PT_LOAD, RX, LO, 0x1000, 16, 0x80_0000)],
                    16,
                ),
                "pages of segments",
            ),
            (
                elf(
                    EM_AARCH64,
                    ET_EXEC,
                    LO + 0x2000,
                    &[(PT_LOAD, RX, LO, 0x1000, 16, 16)],
                    16,
                ),
                "entry point",
            ),
            (
                elf(
                    EM_AARCH64,
                    ET_EXEC,
                    LO,
                    &[(PT_LOAD, RW, LO, 0x1000, 16, 16)],
                    16,
                ),
                "entry point",
            ),
            (
                elf(
                    EM_AARCH64,
                    ET_EXEC,
                    LO + 2,
                    &[(PT_LOAD, RX, LO, 0x1000, 16, 16)],
                    16,
                ),
                "entry point",
            ),
        ];
        for (i, (f, want)) in cases.iter().enumerate() {
            let e = plan(f, LO, HI, 64).expect_err(want);
            let msg = e.to_string();
            assert!(msg.contains(want), "case {i}: {msg:?} lacks {want:?}");
        }
        let mut many = Vec::new();
        for i in 0..=MAX_SEGMENTS as u64 {
            many.push((PT_LOAD, RX, LO + i * 0x1000, 0x1000, 16, 16));
        }
        let f = elf(EM_AARCH64, ET_EXEC, LO, &many, 16);
        assert_eq!(plan(&f, LO, HI, 64).unwrap_err(), ElfError::TooManySegments);
    }
}
