//! Walking the tree with ancestors, and translating a `reg` address to a physical address
//! through the ancestors' `ranges` (Linux `drivers/of/address.c`, `of_translate_address`).
//! The DT crate's nodes do not know their parent, so the walk keeps the path.

use alloc::vec::Vec;

use flat_device_tree::node::FdtNode;
use flat_device_tree::Fdt;

use super::{bad, BoardDtError};
use crate::dt::MemRange;

/// Deepest nesting the walk follows (DTs of the boards nest 4 levels).
const MAX_DEPTH: usize = 16;

/// The first node (depth first, document order) satisfying `pred`, with its ancestors from
/// the root down (the root included, the node itself not).
pub fn find_with_ancestors<'b, 'a>(
    fdt: &'b Fdt<'a>,
    mut pred: impl FnMut(FdtNode<'b, 'a>) -> bool,
) -> Option<(Vec<FdtNode<'b, 'a>>, FdtNode<'b, 'a>)> {
    let root = fdt.find_node("/")?;
    let mut path = Vec::new();
    find_in(root, &mut path, &mut pred)
}

fn find_in<'b, 'a>(
    node: FdtNode<'b, 'a>,
    path: &mut Vec<FdtNode<'b, 'a>>,
    pred: &mut impl FnMut(FdtNode<'b, 'a>) -> bool,
) -> Option<(Vec<FdtNode<'b, 'a>>, FdtNode<'b, 'a>)> {
    if path.len() >= MAX_DEPTH {
        return None;
    }
    path.push(node);
    for child in node.children() {
        if pred(child) {
            return Some((path.clone(), child));
        }
        if let Some(found) = find_in(child, path, pred) {
            return Some(found);
        }
    }
    path.pop();
    None
}

/// The node with `phandle`, with its ancestors.
pub fn find_phandle<'b, 'a>(
    fdt: &'b Fdt<'a>,
    phandle: u32,
) -> Option<(Vec<FdtNode<'b, 'a>>, FdtNode<'b, 'a>)> {
    find_with_ancestors(fdt, |n| {
        ["phandle", "linux,phandle"]
            .iter()
            .any(|p| super::u32_prop(n, p) == Some(phandle))
    })
}

/// `reg` entry `index` of `node` as a physical range: the address is translated through every
/// ancestor's `ranges` (an empty `ranges` is the identity; a bus without `ranges` cannot be
/// translated, which is an error naming the node).
pub fn reg_phys(
    ancestors: &[FdtNode<'_, '_>],
    node: FdtNode<'_, '_>,
    index: usize,
    path: &str,
) -> Result<MemRange, BoardDtError> {
    let r =
        node.reg()
            .nth(index)
            .ok_or(bad(path, "reg", "missing (or fewer entries than needed)"))?;
    let size = r
        .size
        .ok_or(bad(path, "reg", "no size (#size-cells = 0)"))?;
    let mut addr = r.starting_address as usize;
    // The node's own parent is the last ancestor; its `ranges` maps the node's addresses
    // into the grandparent's space, and so on up to the root.
    for bus in ancestors.iter().skip(1).rev() {
        let Some(prop) = bus.property("ranges") else {
            return Err(bad(
                path,
                "reg",
                "a parent bus has no `ranges`: not translatable",
            ));
        };
        if prop.value.is_empty() {
            continue;
        }
        let hit = bus
            .ranges()
            .find(|m| addr >= m.child_bus_address && addr - m.child_bus_address < m.size);
        match hit {
            Some(m) => addr = addr - m.child_bus_address + m.parent_bus_address,
            None => return Err(bad(path, "reg", "outside every `ranges` entry of its bus")),
        }
    }
    Ok(MemRange { base: addr, size })
}

/// A node's path from its ancestors (for error messages and reports).
pub fn path_of(ancestors: &[FdtNode<'_, '_>], node: FdtNode<'_, '_>) -> alloc::string::String {
    let mut s = alloc::string::String::new();
    for a in ancestors.iter().skip(1) {
        s.push('/');
        s.push_str(a.name);
    }
    s.push('/');
    s.push_str(node.name);
    s
}
