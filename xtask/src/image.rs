//! The flat arm64 `Image` made from the kernel ELF, and checks of its Linux boot header.
//!
//! Re-derives what `objcopy -O binary` does for a kernel (Linux `arch/arm64/Makefile`), without
//! objcopy: the loadable segments with file contents, placed by physical address, the gaps
//! filled with zeros, the trailing `.bss` left out (the header's `image_size` covers it).
//! The header layout is Linux `Documentation/arch/arm64/booting.rst`, "Call the kernel image".

use anyhow::{bail, ensure, Context, Result};
use asym_kernel::board::{booti_placement, overlaps, BootLayout, Region};
use asym_kernel::dt::MemRange;
use object::elf::{FileHeader64, PT_LOAD};
use object::read::elf::{FileHeader, ProgramHeader};
use object::Endianness;

/// `"ARM\x64"`, little-endian, at offset 0x38 of the header.
pub const ARM64_IMAGE_MAGIC: u32 = 0x644d_5241;
/// Larger images are certainly a link error (e.g. a segment at a stray address).
const MAX_IMAGE_BYTES: u64 = 256 << 20;

/// The parsed 64-byte arm64 Image header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arm64Header {
    pub text_offset: u64,
    pub image_size: u64,
    pub flags: u64,
}

impl Arm64Header {
    /// Parses and validates the header at the start of `image`.
    pub fn parse(image: &[u8]) -> Result<Self> {
        ensure!(
            image.len() >= 64,
            "Image is {} bytes, shorter than the 64-byte arm64 header",
            image.len()
        );
        let u64_at = |off: usize| u64::from_le_bytes(image[off..off + 8].try_into().unwrap());
        let magic = u32::from_le_bytes(image[0x38..0x3c].try_into().unwrap());
        ensure!(
            magic == ARM64_IMAGE_MAGIC,
            "Image has no arm64 Linux header: magic at offset 0x38 is {magic:#010x}, \
             expected {ARM64_IMAGE_MAGIC:#010x} (\"ARM\\x64\"); u-boot's booti and QEMU's \
             -kernel need it (kernel/CONTRACTS.md)"
        );
        let header = Self {
            text_offset: u64_at(0x08),
            image_size: u64_at(0x10),
            flags: u64_at(0x18),
        };
        ensure!(
            header.flags & 1 == 0,
            "Image header flags {:#x}: bit 0 says big-endian, asym is little-endian",
            header.flags
        );
        ensure!(
            header.image_size == 0 || header.image_size >= image.len() as u64,
            "Image header image_size {:#x} is smaller than the Image file ({:#x} bytes); it \
             must cover the whole image including .bss",
            header.image_size,
            image.len()
        );
        Ok(header)
    }

    /// Bit 3: the kernel may be placed anywhere in physical memory (2 MiB aligned base).
    pub fn phys_placement_anywhere(&self) -> bool {
        self.flags & (1 << 3) != 0
    }

    /// Page size bits 1-2: 0 unspecified, 1 4K, 2 16K, 3 64K.
    pub fn page_size(&self) -> &'static str {
        match (self.flags >> 1) & 3 {
            0 => "unspecified",
            1 => "4K",
            2 => "16K",
            _ => "64K",
        }
    }
}

/// A flat image and where it belongs in memory.
#[derive(Debug, Clone)]
pub struct FlatImage {
    /// Physical address of the first byte.
    pub base: u64,
    /// ELF entry point (must be `base` for an arm64 Image: execution starts at byte 0).
    pub entry: u64,
    pub bytes: Vec<u8>,
}

/// Concatenates the `PT_LOAD` segments of a little-endian ELF64 by physical address.
pub fn elf_to_flat(elf: &[u8]) -> Result<FlatImage> {
    let header = FileHeader64::<Endianness>::parse(elf).context("parsing the kernel ELF header")?;
    let endian = header.endian().context("ELF endianness")?;
    ensure!(
        header.e_machine.get(endian) == object::elf::EM_AARCH64,
        "kernel ELF is for machine {}, not AArch64 ({})",
        header.e_machine.get(endian),
        object::elf::EM_AARCH64
    );
    let segments = header
        .program_headers(endian, elf)
        .context("reading the ELF program headers")?;

    let mut loads = Vec::new();
    for (i, ph) in segments.iter().enumerate() {
        if ph.p_type(endian) != PT_LOAD || ph.p_filesz(endian) == 0 {
            continue;
        }
        let data = ph
            .data(endian, elf)
            .map_err(|()| anyhow::anyhow!("ELF program header {i}: file range out of bounds"))?;
        loads.push((ph.p_paddr(endian), data));
    }
    if loads.is_empty() {
        bail!("kernel ELF has no loadable segment with contents");
    }
    loads.sort_by_key(|(addr, _)| *addr);

    let base = loads[0].0;
    let end = loads
        .iter()
        .map(|(addr, data)| addr + data.len() as u64)
        .max()
        .unwrap_or(base);
    ensure!(
        end - base <= MAX_IMAGE_BYTES,
        "loadable segments span {:#x}..{:#x} ({} MiB): a segment is placed at a stray address",
        base,
        end,
        (end - base) >> 20
    );

    let mut bytes = vec![0u8; (end - base) as usize];
    let mut written_to = base;
    for (addr, data) in &loads {
        ensure!(
            *addr >= written_to,
            "loadable segments overlap at physical address {addr:#x}"
        );
        let off = (addr - base) as usize;
        bytes[off..off + data.len()].copy_from_slice(data);
        written_to = addr + data.len() as u64;
    }
    Ok(FlatImage {
        base,
        entry: header.e_entry.get(endian),
        bytes,
    })
}

/// The arm64 boot protocol's limit on a DTB (Linux `Documentation/arch/arm64/booting.rst`:
/// "must not exceed 2 megabytes in size").
pub const DTB_MAX: u64 = 2 << 20;

/// Where everything lies when the board's u-boot runs `boot.scr`, for [`check_layout`].
#[derive(Debug, Clone)]
pub struct Placement {
    pub layout: BootLayout,
    /// A DTB loaded from the boot medium to `fdt_addr_r` (not u-boot's control DT).
    pub fdt_from_file: bool,
    /// RAM u-boot hands over.
    pub memory: Vec<MemRange>,
    /// Reservations and carve-outs: nothing may be placed there.
    pub reserved: Vec<Region>,
    /// Bytes of boot.scr (loaded at `scriptaddr`).
    pub script_len: u64,
}

/// Checks that `booti` will run `flat` where it is linked and that nothing u-boot loads
/// overlaps it: the link address equals u-boot's placement for this header (`booti_setup`),
/// the placed image (`image_size` bytes, BSS and stacks included) lies in one RAM bank, and it
/// overlaps neither the DTB's 2 MiB at `fdt_addr_r` (when loaded from the medium), nor
/// `boot.scr` at `scriptaddr`, nor `ramdisk_addr_r`, nor any reservation or carve-out; the file
/// loaded at `kernel_addr_r` (before the move) overlaps neither the script running it nor the
/// DTB. Returns one line per fact checked.
pub fn check_layout(flat: &FlatImage, h: &Arm64Header, p: &Placement) -> Result<Vec<String>> {
    let l = &p.layout;
    let mut facts = Vec::new();
    ensure!(
        flat.entry == flat.base,
        "ELF entry {:#x} is not the Image's first byte {:#x}: booti starts at byte 0",
        flat.entry,
        flat.base
    );
    ensure!(
        h.image_size > 0,
        "image_size is 0: booti would assume 16 MiB at text_offset 0x80000"
    );
    let placed = booti_placement(
        l.kernel_addr_r,
        l.dram0_start,
        h.text_offset,
        h.phys_placement_anywhere(),
    );
    ensure!(
        flat.base == l.link_base,
        "the kernel is linked at {:#x}, the board crate says {:#x} (linker script and board \
         crate disagree)",
        flat.base,
        l.link_base
    );
    ensure!(
        placed == flat.base,
        "booti places this Image (text_offset {:#x}, flags {:#x}) at {:#x}, but it is linked at \
         {:#x}",
        h.text_offset,
        h.flags,
        placed,
        flat.base
    );
    facts.push(format!(
        "booti places the Image at {placed:#x} (= link address; loaded at kernel_addr_r {:#x}{})",
        l.kernel_addr_r,
        if placed == l.kernel_addr_r {
            ", not moved"
        } else {
            ", then moved"
        }
    ));
    let image = MemRange {
        base: placed as usize,
        size: h.image_size as usize,
    };
    let bank = p
        .memory
        .iter()
        .find(|b| image.base >= b.base && (image.end() as u64) <= b.end() as u64);
    ensure!(
        bank.is_some(),
        "the placed image {:#x}..{:#x} does not lie inside one RAM bank ({})",
        image.base,
        image.end(),
        p.memory
            .iter()
            .map(|b| format!("{:#x}..{:#x}", b.base, b.end()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    facts.push(format!(
        "image {:#x}..{:#x} ({} KiB with BSS and stacks) inside RAM",
        image.base,
        image.end(),
        image.size / 1024
    ));
    let file = MemRange {
        base: l.kernel_addr_r as usize,
        size: flat.bytes.len(),
    };
    let mut others: Vec<(String, MemRange)> = Vec::new();
    if p.fdt_from_file {
        others.push((
            format!("the DTB at fdt_addr_r {:#x} (up to 2 MiB)", l.fdt_addr_r),
            MemRange {
                base: l.fdt_addr_r as usize,
                size: DTB_MAX as usize,
            },
        ));
    }
    if let Some(s) = l.scriptaddr {
        others.push((
            format!("boot.scr at scriptaddr {s:#x}"),
            MemRange {
                base: s as usize,
                size: p.script_len.max(1) as usize,
            },
        ));
    }
    for (what, r) in &others {
        ensure!(
            !overlaps(image, *r),
            "the placed image {:#x}..{:#x} overlaps {what}",
            image.base,
            image.end()
        );
        ensure!(
            !overlaps(file, *r),
            "the Image file loaded at kernel_addr_r ({:#x}..{:#x}) overlaps {what}",
            file.base,
            file.end()
        );
        facts.push(format!("no overlap with {what}"));
    }
    if let Some(rd) = l.ramdisk_addr_r {
        ensure!(
            !image.contains(rd as usize),
            "the placed image {:#x}..{:#x} covers ramdisk_addr_r {rd:#x}",
            image.base,
            image.end()
        );
        facts.push(format!("does not cover ramdisk_addr_r {rd:#x}"));
    }
    for r in &p.reserved {
        ensure!(
            !overlaps(image, r.range),
            "the placed image {:#x}..{:#x} overlaps {} ({:#x}..{:#x})",
            image.base,
            image.end(),
            r.name,
            r.range.base,
            r.range.end()
        );
    }
    if !p.reserved.is_empty() {
        facts.push(format!(
            "no overlap with {} reservations and carve-outs ({})",
            p.reserved.len(),
            p.reserved
                .iter()
                .map(|r| r.name)
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Ok(facts)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a minimal ELF64 AArch64 executable by hand (the layout from the ELF spec), so the
    /// test does not depend on our own output or on a cross toolchain.
    fn elf_with_segments(entry: u64, segs: &[(u32, u64, &[u8], u64)]) -> Vec<u8> {
        // (p_type, paddr, contents, memsz)
        let phoff = 64u64;
        let phnum = segs.len() as u64;
        let mut data_off = phoff + 56 * phnum;
        let mut out = Vec::new();
        out.extend_from_slice(b"\x7fELF");
        out.extend_from_slice(&[2, 1, 1, 0]); // 64-bit, little-endian, version 1, SysV
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&2u16.to_le_bytes()); // ET_EXEC
        out.extend_from_slice(&183u16.to_le_bytes()); // EM_AARCH64
        out.extend_from_slice(&1u32.to_le_bytes());
        out.extend_from_slice(&entry.to_le_bytes());
        out.extend_from_slice(&phoff.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes()); // shoff
        out.extend_from_slice(&0u32.to_le_bytes()); // flags
        out.extend_from_slice(&64u16.to_le_bytes()); // ehsize
        out.extend_from_slice(&56u16.to_le_bytes()); // phentsize
        out.extend_from_slice(&(phnum as u16).to_le_bytes());
        out.extend_from_slice(&64u16.to_le_bytes()); // shentsize
        out.extend_from_slice(&0u16.to_le_bytes()); // shnum
        out.extend_from_slice(&0u16.to_le_bytes()); // shstrndx
        assert_eq!(out.len(), 64);
        let mut payload = Vec::new();
        for (ty, paddr, contents, memsz) in segs {
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&5u32.to_le_bytes()); // R+X
            out.extend_from_slice(&data_off.to_le_bytes());
            // Virtual addresses deliberately differ from physical ones: the Image is placed
            // by physical (load) address.
            out.extend_from_slice(&(paddr + 0xffff_0000_0000_0000).to_le_bytes());
            out.extend_from_slice(&paddr.to_le_bytes());
            out.extend_from_slice(&(contents.len() as u64).to_le_bytes());
            out.extend_from_slice(&memsz.to_le_bytes());
            out.extend_from_slice(&0x1000u64.to_le_bytes());
            payload.extend_from_slice(contents);
            data_off += contents.len() as u64;
        }
        out.extend_from_slice(&payload);
        out
    }

    fn header_bytes(text_offset: u64, image_size: u64, flags: u64) -> Vec<u8> {
        let mut h = vec![0u8; 64];
        h[0..4].copy_from_slice(&0x1400_0010u32.to_le_bytes()); // b +0x40
        h[8..16].copy_from_slice(&text_offset.to_le_bytes());
        h[16..24].copy_from_slice(&image_size.to_le_bytes());
        h[24..32].copy_from_slice(&flags.to_le_bytes());
        h[0x38..0x3c].copy_from_slice(b"ARM\x64");
        h
    }

    #[test]
    fn segments_are_placed_by_physical_address_with_zero_gaps() {
        let text = header_bytes(0, 0x3000, 0b1010);
        let data = [0xAAu8; 16];
        let elf = elf_with_segments(
            0x4008_0000,
            &[
                // Out of order on purpose, plus a NOTE and a .bss-only segment to be ignored.
                (PT_LOAD, 0x4008_2000, &data, 16),
                (4, 0x1000, b"note", 4),
                (PT_LOAD, 0x4008_0000, &text, 64),
                (PT_LOAD, 0x4008_3000, &[], 0x1000),
            ],
        );
        let flat = elf_to_flat(&elf).unwrap();
        assert_eq!(flat.base, 0x4008_0000);
        assert_eq!(flat.entry, 0x4008_0000);
        assert_eq!(flat.bytes.len(), 0x2000 + 16);
        assert_eq!(&flat.bytes[..64], &text[..]);
        assert!(flat.bytes[64..0x2000].iter().all(|&b| b == 0));
        assert_eq!(&flat.bytes[0x2000..], &data);

        let h = Arm64Header::parse(&flat.bytes).unwrap();
        assert_eq!(h.text_offset, 0);
        assert_eq!(h.image_size, 0x3000);
        assert!(h.phys_placement_anywhere());
        assert_eq!(h.page_size(), "4K");
    }

    /// A flat Image linked at `base` with asym's header (text_offset 0x80000, flags 0b0010).
    fn image_at(base: u64, image_size: u64) -> (FlatImage, Arm64Header) {
        let mut bytes = header_bytes(0x8_0000, image_size, 0b0010);
        bytes.resize(0x4_0000, 0);
        let h = Arm64Header::parse(&bytes).unwrap();
        (
            FlatImage {
                base,
                entry: base,
                bytes,
            },
            h,
        )
    }

    /// HiKey960's u-boot (include/configs/hikey960.h) and one carve-out.
    fn hikey960_like() -> Placement {
        Placement {
            layout: BootLayout {
                dram0_start: 0,
                kernel_addr_r: 0x1100_0000,
                fdt_addr_r: 0x1000_0000,
                scriptaddr: Some(0x2_0000),
                ramdisk_addr_r: None,
                link_base: 0x8_0000,
            },
            fdt_from_file: true,
            memory: vec![MemRange {
                base: 0,
                size: 0xc000_0000,
            }],
            reserved: vec![Region {
                range: MemRange {
                    base: 0x1ac5_8000,
                    size: 0x4_0000,
                },
                name: "BL31",
                no_map: false,
            }],
            script_len: 0x200,
        }
    }

    #[test]
    fn layout_accepts_the_booti_placement() {
        let (flat, h) = image_at(0x8_0000, 0x12_4000);
        let facts = check_layout(&flat, &h, &hikey960_like()).unwrap();
        assert!(facts[0].contains("then moved"), "{facts:?}");
    }

    #[test]
    fn layout_errors_name_what_collides() {
        let err = |flat: &FlatImage, h: &Arm64Header, p: &Placement| {
            format!("{:#}", check_layout(flat, h, p).unwrap_err())
        };
        // Linked elsewhere than booti puts it (the linker script and board crate agree, but
        // booti moves a bit-3-clear Image to the start of DRAM).
        let (flat, h) = image_at(0x1108_0000, 0x12_4000);
        let mut p = hikey960_like();
        p.layout.link_base = 0x1108_0000;
        assert!(err(&flat, &h, &p).contains("booti places this Image"));
        // Linker script and board crate disagree.
        let (flat, h) = image_at(0x8_0000, 0x12_4000);
        let mut p = hikey960_like();
        p.layout.link_base = 0x20_0000;
        assert!(err(&flat, &h, &p).contains("board crate says"));
        // Over the script (scriptaddr inside the placed image).
        let mut p = hikey960_like();
        p.layout.scriptaddr = Some(0x10_0000);
        assert!(err(&flat, &h, &p).contains("boot.scr"));
        // An image so big it runs into the DTB at fdt_addr_r.
        let (flat2, h2) = image_at(0x8_0000, 0x1000_0000);
        assert!(err(&flat2, &h2, &hikey960_like()).contains("DTB"));
        // The file loaded at kernel_addr_r over the DTB.
        let mut p = hikey960_like();
        p.layout.fdt_addr_r = 0x1101_0000;
        assert!(err(&flat, &h, &p).contains("loaded at kernel_addr_r"));
        // Over a carve-out.
        let mut p = hikey960_like();
        p.reserved[0].range.base = 0x10_0000;
        assert!(err(&flat, &h, &p).contains("BL31"));
        // Past the end of its RAM bank.
        let mut p = hikey960_like();
        p.memory[0].size = 0x10_0000;
        assert!(err(&flat, &h, &p).contains("RAM bank"));
        // Over ramdisk_addr_r.
        let mut p = hikey960_like();
        p.layout.ramdisk_addr_r = Some(0x10_0000);
        assert!(err(&flat, &h, &p).contains("ramdisk_addr_r"));
    }

    #[test]
    fn bad_inputs_are_errors_naming_the_problem() {
        let e = elf_to_flat(b"not an elf").unwrap_err();
        assert!(format!("{e:#}").contains("ELF"), "{e:#}");

        let elf = elf_with_segments(0, &[(4, 0, b"note", 4)]);
        let e = elf_to_flat(&elf).unwrap_err();
        assert!(e.to_string().contains("no loadable segment"), "{e}");

        let elf = elf_with_segments(0, &[(PT_LOAD, 0, b"a", 1), (PT_LOAD, 1 << 40, b"b", 1)]);
        let e = elf_to_flat(&elf).unwrap_err();
        assert!(e.to_string().contains("stray address"), "{e}");

        let e = Arm64Header::parse(&[0u8; 128]).unwrap_err();
        assert!(e.to_string().contains("no arm64 Linux header"), "{e}");

        let mut img = header_bytes(0, 0x10, 0);
        img.resize(0x40, 0);
        let e = Arm64Header::parse(&img).unwrap_err();
        assert!(e.to_string().contains("image_size"), "{e}");
    }
}
