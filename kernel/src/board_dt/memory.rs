//! Every `/memory` bank, `/memreserve/` and `/reserved-memory`, as Linux's
//! `early_init_dt_scan_memory` and `fdt_scan_reserved_mem` / `early_init_fdt_reserve_self`
//! read them (`drivers/of/fdt.c`, `drivers/of/of_reserved_mem.c`).
//!
//! Deliberate differences: a `/reserved-memory` child with only `size` (a pool Linux allocates
//! at boot, such as `linux,cma`) reserves nothing here and is reported as dynamic; a bank of
//! size 0 is an error, not skipped, because a DT whose `/memory` is a placeholder for the boot
//! loader to fill (HiKey960's `reg = <0 0 0 0>`) must not boot without RAM silently.

use alloc::string::String;
use alloc::vec::Vec;

use flat_device_tree::Fdt;

use super::{bad, BoardDtError};
use crate::dt::MemRange;

/// A reserved region of the DT.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DtRegion {
    pub range: MemRange,
    /// The `/reserved-memory` child's name, or `/memreserve/`.
    pub name: String,
    /// `no-map`: not even to be mapped.
    pub no_map: bool,
}

/// What the DT reserves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reserved {
    /// Fixed regions, `/memreserve/` first, then `/reserved-memory` children in order.
    pub regions: Vec<DtRegion>,
    /// `/reserved-memory` children with a `size` but no `reg` (Linux allocates them), with the size.
    pub dynamic: Vec<(String, usize)>,
}

/// Every bank of every `device_type = "memory"` node under the root, in document order.
pub fn memory_banks(fdt: &Fdt<'_>) -> Result<Vec<MemRange>, BoardDtError> {
    let root = fdt.find_node("/").ok_or(bad("/", "", "no root node"))?;
    let mut banks = Vec::new();
    for node in root.children() {
        let is_memory = node
            .property("device_type")
            .and_then(|p| p.as_str())
            .is_some_and(|s| s.trim_end_matches('\0') == "memory");
        if !is_memory {
            continue;
        }
        let path = alloc::format!("/{}", node.name);
        for r in node.reg() {
            let size = r.size.ok_or(bad(&path, "reg", "bank without a size"))?;
            if size == 0 {
                return Err(bad(
                    &path,
                    "reg",
                    "a bank of size 0: a placeholder the boot loader is meant to fill",
                ));
            }
            let base = r.starting_address as usize;
            if base.checked_add(size).is_none() {
                return Err(bad(
                    &path,
                    "reg",
                    "bank runs past the end of the address space",
                ));
            }
            banks.push(MemRange { base, size });
        }
    }
    if banks.is_empty() {
        return Err(bad("/memory", "device_type", "no memory node with a bank"));
    }
    Ok(banks)
}

/// One entry of the DT's reservations, as [`walk_reserved`] finds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReservedEntry<'a> {
    /// A fixed region: a `/memreserve/` entry or a `/reserved-memory` child's `reg`.
    Fixed {
        range: MemRange,
        name: &'a str,
        no_map: bool,
    },
    /// A `/reserved-memory` child with only a `size` (Linux allocates it at boot).
    Dynamic { name: &'a str, size: usize },
    /// A child that cannot be read.
    Bad {
        name: &'a str,
        property: &'static str,
        problem: &'static str,
    },
}

/// Calls `f` for each `/memreserve/` entry, then each enabled `/reserved-memory` child, in
/// order, without allocating (the kernel walks them before its heap exists).
/// `/reserved-memory` must map its children 1:1 (`ranges;`, as the binding requires).
pub fn walk_reserved<'a>(fdt: &Fdt<'a>, mut f: impl FnMut(ReservedEntry<'a>)) {
    for r in fdt.memory_reservations() {
        f(ReservedEntry::Fixed {
            range: MemRange {
                base: r.address() as usize,
                size: r.size(),
            },
            name: "/memreserve/",
            no_map: false,
        });
    }
    let Some(node) = fdt
        .find_node("/")
        .and_then(|root| root.children().find(|c| c.name == "reserved-memory"))
    else {
        return;
    };
    let identity = node.property("ranges").is_some_and(|p| p.value.is_empty());
    for child in node.children() {
        let status_ok = child
            .property("status")
            .and_then(|p| p.as_str())
            .is_none_or(|s| matches!(s.trim_end_matches('\0'), "okay" | "ok"));
        if !status_ok {
            continue;
        }
        let name = child.name;
        let no_map = child.property("no-map").is_some();
        if child.property("reg").is_some() {
            if !identity {
                f(ReservedEntry::Bad {
                    name,
                    property: "ranges",
                    problem: "/reserved-memory does not map its children 1:1 (`ranges;`)",
                });
                continue;
            }
            let mut any = false;
            for r in child.reg() {
                any = true;
                match r.size {
                    Some(size) if (r.starting_address as usize).checked_add(size).is_some() => {
                        f(ReservedEntry::Fixed {
                            range: MemRange {
                                base: r.starting_address as usize,
                                size,
                            },
                            name,
                            no_map,
                        })
                    }
                    _ => f(ReservedEntry::Bad {
                        name,
                        property: "reg",
                        problem: "no size, or past the end of the address space",
                    }),
                }
            }
            if !any {
                f(ReservedEntry::Bad {
                    name,
                    property: "reg",
                    problem: "empty or shorter than #address-cells + #size-cells",
                });
            }
        } else if let Some(size) = child.property("size").and_then(|p| p.as_usize()) {
            f(ReservedEntry::Dynamic { name, size });
        } else {
            f(ReservedEntry::Bad {
                name,
                property: "reg",
                problem: "neither `reg` nor `size`",
            });
        }
    }
}

/// `/memreserve/` entries and the `/reserved-memory` children ([`walk_reserved`]); the first
/// unreadable child is an error.
pub fn reserved(fdt: &Fdt<'_>) -> Result<Reserved, BoardDtError> {
    let mut out = Reserved::default();
    let mut err = None;
    walk_reserved(fdt, |e| match e {
        ReservedEntry::Fixed {
            range,
            name,
            no_map,
        } => out.regions.push(DtRegion {
            range,
            name: String::from(name),
            no_map,
        }),
        ReservedEntry::Dynamic { name, size } => out.dynamic.push((String::from(name), size)),
        ReservedEntry::Bad {
            name,
            property,
            problem,
        } => {
            if err.is_none() {
                err = Some(bad(
                    &alloc::format!("/reserved-memory/{name}"),
                    property,
                    problem,
                ));
            }
        }
    });
    match err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}
