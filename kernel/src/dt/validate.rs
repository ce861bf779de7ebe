//! Structural check of a flattened device tree before any parser walks it.
//!
//! Re-derives the checks of libfdt's `fdt_check_header` and `fdt_check_full`
//! (`scripts/dtc/libfdt/fdt_ro.c`, `fdt.c`) as used by Linux's `drivers/of/fdt.c` before
//! unflattening: header magic, version and block bounds, then one walk of the structure block's
//! tokens. Deliberate differences: the nesting limit is [`MAX_DEPTH`] (32; libfdt has none,
//! Linux's unflatten uses 64, and `flat_device_tree` 3.1.1 indexes a 64-entry parent array
//! with the depth, so 64 or an `FDT_END_NODE` too many panics inside the crate); a property after
//! a child node, a second root and a non-UTF-8 node name are rejected (the crate would silently
//! stop walking there); only version 17 layouts are accepted (the crate reads
//! `size_dt_struct`, which is new in 17).
//!
//! Errors name the byte offset in the blob and what was wrong there.

use super::DtError;

/// FDT magic (`FDT_MAGIC`, big-endian `d00dfeed`).
const FDT_MAGIC: u32 = 0xd00d_feed;
/// Size of the version 17 header.
const FDT_V17_SIZE: usize = 40;
const FDT_BEGIN_NODE: u32 = 1;
const FDT_END_NODE: u32 = 2;
const FDT_PROP: u32 = 3;
const FDT_NOP: u32 = 4;
const FDT_END: u32 = 9;

/// Deepest node nesting accepted (the root is depth 1). Below the 63 `flat_device_tree`
/// can index; real trees stay under 10.
pub const MAX_DEPTH: usize = 32;

/// Largest DTB accepted (Linux arm64 `MAX_FDT_SIZE`, `arch/arm64/include/asm/page.h`: 2 MiB).
pub const MAX_FDT_SIZE: usize = 2 << 20;

fn be32(blob: &[u8], at: usize) -> Option<u32> {
    let b = blob.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn err(offset: usize, property: &'static str, problem: &'static str) -> DtError {
    DtError::at(offset, property, problem)
}

/// Checks that `blob` is a well-formed FDT the parser can walk without running off its slice,
/// underflowing or overflowing its nesting: header, block bounds, memory reservation list and
/// every structure-block token. `Ok` does not mean any node the kernel needs is present.
pub fn validate_fdt(blob: &[u8]) -> Result<(), DtError> {
    if blob.len() < FDT_V17_SIZE {
        return Err(err(
            blob.len(),
            "header",
            "truncated: shorter than the 40-byte FDT header",
        ));
    }
    let h = |i: usize| be32(blob, i * 4).unwrap_or(0) as usize;
    if h(0) as u32 != FDT_MAGIC {
        return Err(err(0, "magic", "not 0xd00dfeed"));
    }
    let (total, off_struct, off_strings, off_rsv) = (h(1), h(2), h(3), h(4));
    let (version, last_comp) = (h(5), h(6));
    let (size_strings, size_struct) = (h(8), h(9));
    if total < FDT_V17_SIZE || total > blob.len() || total > MAX_FDT_SIZE {
        return Err(err(
            4,
            "totalsize",
            "below the header size, beyond the blob or over 2 MiB",
        ));
    }
    if version < 17 || last_comp > 17 {
        return Err(err(20, "version", "not a version 17 compatible FDT"));
    }
    let within = |off: usize, size: usize| off >= FDT_V17_SIZE && off + size <= total;
    if !off_struct.is_multiple_of(4) || !within(off_struct, size_struct) {
        return Err(err(
            8,
            "off_dt_struct",
            "structure block misaligned or outside totalsize",
        ));
    }
    if !within(off_strings, size_strings) {
        return Err(err(12, "off_dt_strings", "strings block outside totalsize"));
    }
    check_rsvmap(blob, off_rsv, total)?;
    let strings = &blob[off_strings..off_strings + size_strings];
    walk_struct(blob, off_struct, off_struct + size_struct, strings)
}

/// The memory reservation list: 16-byte (address, size) pairs ending with a (0, 0) pair, all
/// inside `total`.
fn check_rsvmap(blob: &[u8], off: usize, total: usize) -> Result<(), DtError> {
    if off < FDT_V17_SIZE || !off.is_multiple_of(8) {
        return Err(err(
            16,
            "off_mem_rsvmap",
            "inside the header or not 8-byte aligned",
        ));
    }
    let mut at = off;
    while at + 16 <= total {
        if blob[at..at + 16].iter().all(|&b| b == 0) {
            return Ok(());
        }
        at += 16;
    }
    Err(err(
        at,
        "off_mem_rsvmap",
        "reservation list without a terminating zero entry",
    ))
}

/// Walks the tokens of the structure block `blob[start..end]`.
fn walk_struct(blob: &[u8], start: usize, end: usize, strings: &[u8]) -> Result<(), DtError> {
    let block = &blob[..end];
    let mut at = start;
    let mut depth = 0usize;
    let mut seen_root = false;
    // False once a child node has closed: properties must precede a node's children.
    let mut props_allowed = false;
    loop {
        let token =
            be32(block, at).ok_or(err(at, "struct", "structure block ends before FDT_END"))?;
        match token {
            FDT_BEGIN_NODE => {
                if depth == 0 && seen_root {
                    return Err(err(at, "struct", "FDT_BEGIN_NODE of a second root node"));
                }
                let name_at = at + 4;
                let name_len = block[name_at.min(end)..]
                    .iter()
                    .position(|&b| b == 0)
                    .ok_or(err(
                        name_at,
                        "struct",
                        "node name not NUL-terminated in the block",
                    ))?;
                if core::str::from_utf8(&block[name_at..name_at + name_len]).is_err() {
                    return Err(err(name_at, "struct", "node name is not UTF-8"));
                }
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(err(at, "struct", "nodes nested deeper than 32"));
                }
                seen_root = true;
                props_allowed = true;
                at = (name_at + name_len + 1).next_multiple_of(4);
            }
            FDT_END_NODE => {
                if depth == 0 {
                    return Err(err(
                        at,
                        "struct",
                        "FDT_END_NODE without a matching FDT_BEGIN_NODE",
                    ));
                }
                depth -= 1;
                props_allowed = false;
                at += 4;
            }
            FDT_PROP => {
                if depth == 0 {
                    return Err(err(at, "struct", "FDT_PROP outside any node"));
                }
                if !props_allowed {
                    return Err(err(at, "struct", "FDT_PROP after a child node"));
                }
                let len = be32(block, at + 4);
                let nameoff = be32(block, at + 8);
                let (Some(len), Some(nameoff)) = (len, nameoff) else {
                    return Err(err(at, "struct", "FDT_PROP header runs past the block"));
                };
                let value_end = (at + 12).checked_add(len as usize).filter(|&e| e <= end);
                let Some(value_end) = value_end else {
                    return Err(err(at + 4, "struct", "FDT_PROP length runs past the block"));
                };
                let name_ok = strings
                    .get(nameoff as usize..)
                    .is_some_and(|s| s.contains(&0));
                if !name_ok {
                    return Err(err(
                        at + 8,
                        "struct",
                        "FDT_PROP name offset outside the strings block",
                    ));
                }
                at = value_end.next_multiple_of(4);
            }
            FDT_NOP => at += 4,
            FDT_END => {
                if !seen_root {
                    return Err(err(at, "struct", "FDT_END before any node"));
                }
                if depth != 0 {
                    return Err(err(at, "struct", "FDT_END inside an open node"));
                }
                return Ok(());
            }
            _ => return Err(err(at, "struct", "unknown structure-block token")),
        }
    }
}

#[cfg(test)]
mod tests {
    //! Oracles: blobs assembled here token by token after the devicetree specification v0.4
    //! §5 (header layout, token values, 4-byte alignment), so each corruption's offset is known
    //! independently of the validator; the fixture DTBs were written by QEMU and dtc.
    use super::*;
    use crate::dt::Platform;

    fn load(name: &str) -> Vec<u8> {
        let path = format!("{}/tests/dtb/{}", env!("CARGO_MANIFEST_DIR"), name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    const FIXTURES: [&str; 4] = [
        "qemu-virt-gicv2-smp6.dtb",
        "qemu-virt-gicv3-el2-smp4.dtb",
        "juno-r2-like.dtb",
        "qemu-juno-r2-gicv3-smp6.dtb",
    ];

    /// Structure-block builder; `offset()` is the next token's offset in the final blob.
    #[derive(Default)]
    struct Tokens(Vec<u8>);

    /// Header (40 bytes) + one empty reservation entry (16 bytes): where the structure block starts.
    const STRUCT_OFF: usize = 56;
    /// Strings block: "compatible\0" at 0, "reg\0" at 11.
    const STRINGS: &[u8] = b"compatible\0reg\0";

    impl Tokens {
        fn offset(&self) -> usize {
            STRUCT_OFF + self.0.len()
        }
        fn word(mut self, w: u32) -> Self {
            self.0.extend_from_slice(&w.to_be_bytes());
            self
        }
        fn begin(mut self, name: &str) -> Self {
            self = self.word(FDT_BEGIN_NODE);
            self.0.extend_from_slice(name.as_bytes());
            self.0.push(0);
            while !self.0.len().is_multiple_of(4) {
                self.0.push(0);
            }
            self
        }
        fn prop(mut self, nameoff: u32, value: &[u8]) -> Self {
            self = self.word(FDT_PROP).word(value.len() as u32).word(nameoff);
            self.0.extend_from_slice(value);
            while !self.0.len().is_multiple_of(4) {
                self.0.push(0);
            }
            self
        }
        fn end_node(self) -> Self {
            self.word(FDT_END_NODE)
        }
        fn end(self) -> Self {
            self.word(FDT_END)
        }
        fn blob(&self) -> Vec<u8> {
            let total = STRUCT_OFF + self.0.len() + STRINGS.len();
            let header = [
                FDT_MAGIC,
                total as u32,
                STRUCT_OFF as u32,
                (STRUCT_OFF + self.0.len()) as u32,
                40,
                17,
                16,
                0,
                STRINGS.len() as u32,
                self.0.len() as u32,
            ];
            let mut b: Vec<u8> = header.iter().flat_map(|w| w.to_be_bytes()).collect();
            b.extend_from_slice(&[0; 16]);
            b.extend_from_slice(&self.0);
            b.extend_from_slice(STRINGS);
            b
        }
    }

    fn root() -> Tokens {
        Tokens::default().begin("").prop(0, b"test\0")
    }

    fn fails_at(t: &Tokens, offset: usize, problem: &str) {
        let e = validate_fdt(&t.blob()).unwrap_err();
        assert_eq!(e.offset, Some(offset), "{e}");
        assert!(e.problem.contains(problem), "{e}");
    }

    #[test]
    fn fixtures_and_a_minimal_tree_pass() {
        for f in FIXTURES {
            assert_eq!(validate_fdt(&load(f)), Ok(()), "{f}");
        }
        let t = root()
            .begin("a@0")
            .prop(11, &[0; 8])
            .end_node()
            .end_node()
            .end();
        assert_eq!(validate_fdt(&t.blob()), Ok(()));
    }

    #[test]
    fn unbalanced_end_node_is_named_at_its_offset() {
        let t = root().end_node();
        let at = t.offset();
        let t = t.end_node().end();
        fails_at(&t, at, "FDT_END_NODE without a matching FDT_BEGIN_NODE");
        // Through the platform parser, the same error (no crate panic).
        let e = Platform::from_fdt(&t.blob(), 0).unwrap_err();
        assert_eq!(e.offset, Some(at));
        assert!(e.to_string().contains(&format!("{at:#x}")), "{e}");
    }

    #[test]
    fn nesting_limit() {
        let nest = |n: usize| {
            let mut t = Tokens::default();
            for _ in 0..n {
                t = t.begin("n");
            }
            let deepest = t.offset() - 8; // "n\0" padded to 4 + the token
            for _ in 0..n {
                t = t.end_node();
            }
            (t.end(), deepest)
        };
        assert_eq!(validate_fdt(&nest(MAX_DEPTH).0.blob()), Ok(()));
        let (t, deepest) = nest(MAX_DEPTH + 1);
        fails_at(&t, deepest, "deeper than 32");
        // 64 and more is what made flat_device_tree index past its parent array.
        let (t, _) = nest(70);
        assert!(Platform::from_fdt(&t.blob(), 0).is_err());
    }

    #[test]
    fn bad_property_length_and_name_offset() {
        let t = Tokens::default().begin("");
        let at = t.offset();
        let t = t.word(FDT_PROP).word(0x1000).word(0).end_node().end();
        fails_at(&t, at + 4, "length runs past the block");
        let t = Tokens::default().begin("");
        let at = t.offset();
        let t = t.prop(STRINGS.len() as u32, b"x").end_node().end();
        fails_at(&t, at + 8, "name offset outside the strings block");
    }

    #[test]
    fn misplaced_and_missing_tokens() {
        let t = root().begin("c").end_node();
        let at = t.offset();
        fails_at(&t.prop(0, b"x").end_node().end(), at, "after a child node");

        let t = root();
        let at = t.offset();
        fails_at(&t.end(), at, "inside an open node");

        let t = root().end_node();
        let at = t.offset();
        fails_at(&t.begin("").end_node().end(), at, "second root");

        let t = root();
        let at = t.offset();
        fails_at(&t.word(7).end_node().end(), at, "unknown");

        let t = root().end_node();
        let at = t.offset();
        fails_at(&t, at, "ends before FDT_END");

        let t = Tokens::default();
        fails_at(
            &t.word(FDT_PROP).word(0).word(0).end(),
            STRUCT_OFF,
            "outside any node",
        );
    }

    #[test]
    fn truncated_and_bad_headers() {
        let blob = load("juno-r2-like.dtb");
        let e = validate_fdt(&blob[..30]).unwrap_err();
        assert_eq!((e.property, e.offset), ("header", Some(30)));
        let e = validate_fdt(&blob[..blob.len() - 1]).unwrap_err();
        assert_eq!((e.property, e.offset), ("totalsize", Some(4)));
        let mut v16 = blob.clone();
        v16[20..24].copy_from_slice(&16u32.to_be_bytes());
        assert_eq!(validate_fdt(&v16).unwrap_err().property, "version");
        let mut far = blob.clone();
        far[36..40].copy_from_slice(&(blob.len() as u32).to_be_bytes()); // size_dt_struct
        assert_eq!(validate_fdt(&far).unwrap_err().property, "off_dt_struct");
        let mut far = blob;
        far[32..36].copy_from_slice(&u32::MAX.to_be_bytes()); // size_dt_strings
        assert_eq!(validate_fdt(&far).unwrap_err().property, "off_dt_strings");
    }

    /// xorshift64 (Marsaglia 2003): deterministic, so a failure names a reproducible case.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Mutates `blob` once: a random byte, a structure-block token overwritten with another
    /// token (the corruption that underflowed the crate's depth), or a random big-endian word.
    fn mutate(blob: &mut [u8], rng: &mut Rng) -> (usize, &'static str) {
        let off_struct = u32::from_be_bytes(blob[8..12].try_into().unwrap()) as usize;
        let size_struct = u32::from_be_bytes(blob[36..40].try_into().unwrap()) as usize;
        match rng.below(3) {
            0 => {
                let at = rng.below(blob.len());
                blob[at] = rng.next() as u8;
                (at, "byte")
            }
            1 => {
                let at = off_struct + rng.below(size_struct / 4) * 4;
                let tokens = [FDT_BEGIN_NODE, FDT_END_NODE, FDT_PROP, FDT_NOP, FDT_END];
                let tok = tokens[rng.below(tokens.len())];
                blob[at..at + 4].copy_from_slice(&tok.to_be_bytes());
                (at, "token")
            }
            _ => {
                let at = rng.below(blob.len() / 4) * 4;
                let w = if rng.below(2) == 0 {
                    rng.below(256) as u32
                } else {
                    rng.next() as u32
                };
                blob[at..at + 4].copy_from_slice(&w.to_be_bytes());
                (at, "word")
            }
        }
    }

    /// Mutations per fixture.
    const MUTATIONS: usize = 5000;

    #[test]
    fn mutated_fixtures_never_panic_the_parsers() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut rejected = 0;
        for f in FIXTURES {
            let orig = load(f);
            for i in 0..MUTATIONS {
                let mut blob = orig.clone();
                let (at, kind) = mutate(&mut blob, &mut rng);
                let res = std::panic::catch_unwind(|| {
                    let plat = Platform::from_fdt(&blob, 0)?;
                    let _ = crate::board_dt::board_desc(&plat);
                    Ok::<(), crate::dt::DtError>(())
                });
                match res {
                    Ok(Err(e)) if e.offset.is_some() => rejected += 1,
                    Ok(_) => {}
                    Err(_) => panic!("{f}: mutation {i} ({kind} at {at:#x}) panicked the parser"),
                }
            }
        }
        // The mutations do reach the validator (not a vacuous run): many are structural.
        assert!(rejected > FIXTURES.len() * MUTATIONS / 10, "{rejected}");
    }
}
