//! RAM and reserved memory: every `/memory` node's banks (Linux `early_init_dt_scan_memory` +
//! `early_init_dt_add_memory_arch`), the FDT's `/memreserve/` entries and the static
//! `/reserved-memory` regions (`early_init_fdt_scan_reserved_mem`), and the free range the
//! heap may take.
//!
//! As Linux does, a bank of size 0 is ignored, one reaching past the addressable range is
//! clipped there, one wholly beyond it ignored — each with a note naming the node; an
//! overlapping bank is ignored too (Linux's memblock would merge it). Deliberate difference:
//! dynamically placed `/reserved-memory` regions (`size` + `alloc-ranges`) are not allocated,
//! only noted.

use core::fmt::Write as _;

use flat_device_tree::Fdt;

use super::{reg_entries, DtError, FoundNode, MemRange, Notes, MAP_LIMIT};

/// Most RAM banks kept (Juno r2 has two, in one node).
pub const MAX_MEM_BANKS: usize = 8;
/// Most reserved regions kept.
pub const MAX_RESERVED: usize = 16;

/// A region of memory nobody may allocate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reserved {
    pub range: MemRange,
    /// `no-map`: not even to be mapped (firmware, secure carve-outs). Only `/reserved-memory`
    /// regions have it.
    pub no_map: bool,
}

/// The RAM banks of the `/memory` nodes `nodes`; notes for banks ignored or clipped.
pub(super) fn parse_memory(
    nodes: &[FoundNode<'_, '_>],
    notes: &mut Notes,
) -> Result<heapless::Vec<MemRange, MAX_MEM_BANKS>, DtError> {
    let first = nodes
        .first()
        .ok_or_else(|| DtError::new("/memory", "device_type", "no memory node"))?;
    let mut banks: heapless::Vec<MemRange, MAX_MEM_BANKS> = heapless::Vec::new();
    let mut last_reason: heapless::String<96> = heapless::String::new();
    for f in nodes {
        let n = f.located()?;
        let entries: heapless::Vec<(u64, u64), 16> = reg_entries(&n)?;
        for (i, &(base, size)) in entries.iter().enumerate() {
            let mut ignore = |why: core::fmt::Arguments<'_>| {
                let e = DtError::new(&f.path, "reg", why);
                last_reason.clear();
                let _ = write!(super::Cut(&mut last_reason), "{}", e.problem);
                notes.push(e);
            };
            if size == 0 {
                ignore(format_args!("bank {i} at {base:#x} has size 0: ignored"));
                continue;
            }
            let Some(end) = base.checked_add(size) else {
                ignore(format_args!(
                    "bank {i} {base:#x} + size {size:#x} wraps past 2^64: ignored"
                ));
                continue;
            };
            if base >= MAP_LIMIT as u64 {
                ignore(format_args!(
                    "bank {i} at {base:#x} is beyond the 39-bit range the kernel maps: ignored"
                ));
                continue;
            }
            let end = if end > MAP_LIMIT as u64 {
                ignore(format_args!(
                    "bank {i} {base:#x}..{end:#x} ends beyond the 39-bit range less its last \
                     GiB (thread stacks): clipped to {MAP_LIMIT:#x}"
                ));
                MAP_LIMIT as u64
            } else {
                end
            };
            let bank = MemRange {
                base: base as usize,
                size: (end - base) as usize,
            };
            if let Some(other) = banks.iter().find(|b| b.overlaps(&bank)) {
                let other = *other;
                ignore(format_args!(
                    "bank {i} {bank} overlaps bank {other}: ignored"
                ));
                continue;
            }
            if banks.push(bank).is_err() {
                ignore(format_args!(
                    "bank {i} {bank}: more than {MAX_MEM_BANKS} banks: ignored"
                ));
            }
        }
    }
    if banks.is_empty() {
        return Err(DtError::new(
            &first.path,
            "reg",
            format_args!("no usable RAM bank (last: {last_reason})"),
        ));
    }
    Ok(banks)
}

/// The `/memreserve/` entries and the static `/reserved-memory` regions, range-checked (bad
/// ones noted and left out).
pub(super) fn parse_reserved(
    fdt: &Fdt<'_>,
    reserved_memory: Option<&FoundNode<'_, '_>>,
    notes: &mut Notes,
) -> heapless::Vec<Reserved, MAX_RESERVED> {
    let mut out: heapless::Vec<Reserved, MAX_RESERVED> = heapless::Vec::new();
    let mut add =
        |node: &str, range: Result<MemRange, &str>, no_map: bool, notes: &mut Notes| match range {
            Ok(range) => {
                if out.push(Reserved { range, no_map }).is_err() {
                    notes.push(DtError::new(
                        node,
                        "reg",
                        format_args!("more than {MAX_RESERVED} reserved regions: {range} ignored"),
                    ));
                }
            }
            Err(p) => notes.push(DtError::new(
                node,
                "reg",
                format_args!("reserved region: {p}: ignored"),
            )),
        };
    for r in fdt.memory_reservations() {
        let range = MemRange::checked(r.address() as u64, r.size() as u64);
        add("/memreserve/", range, false, notes);
    }
    let Some(f) = reserved_memory else {
        return out;
    };
    let cells = super::child_cells(f.node);
    for child in f.node.children() {
        if !super::is_enabled(child) {
            continue;
        }
        let path = super::child_path(&f.path, child.name);
        if child.property("reg").is_none() {
            notes.push(DtError::new(
                &path,
                "size",
                "a dynamically placed region (no `reg`) is not supported: not reserved",
            ));
            continue;
        }
        let no_map = child.property("no-map").is_some();
        let n = super::Located {
            node: child,
            path: &path,
            cells,
        };
        match reg_entries::<4>(&n) {
            Ok(regs) => {
                for (base, size) in regs {
                    add(&path, MemRange::checked(base, size), no_map, notes);
                }
            }
            Err(e) => notes.push(e),
        }
    }
    out
}

/// See [`super::Platform::free_ram_from`].
pub(super) fn free_range(
    bank: MemRange,
    start: usize,
    max: usize,
    dtb: MemRange,
    reserved: &[Reserved],
) -> Option<MemRange> {
    const PAGE: usize = 4096;
    const BLOCK: usize = 2 << 20;
    let mut start = start.checked_next_multiple_of(PAGE)?.max(bank.base);
    let mut end = (bank.end() & !(BLOCK - 1)).min(start.saturating_add(max));
    let obstacles = core::iter::once(dtb).chain(reserved.iter().map(|r| r.range));
    // Each pass either moves `start` past an obstacle or `end` below one: at most one pass
    // per obstacle changes anything.
    for _ in 0..=reserved.len() + 1 {
        let mut changed = false;
        for o in obstacles.clone() {
            if o.contains(start) {
                start = o.end().checked_next_multiple_of(PAGE)?;
                changed = true;
            } else if o.base > start && o.base < end {
                end = o.base & !(PAGE - 1);
                changed = true;
            }
        }
        if !changed || start >= end {
            break;
        }
    }
    (start < end).then(|| MemRange {
        base: start,
        size: end - start,
    })
}
