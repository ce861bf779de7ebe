//! The DVFS firmware transport the device tree describes: Juno's SCMI (`/firmware/scmi`,
//! `arm,scmi`, with the performance protocol `protocol@13`) or legacy SCPI (`arm,scpi`), the
//! HiKey960 stub clock (`hisilicon,hi3660-stub-clk` over `hisilicon,hi3660-mbox`) and the HiKey
//! stub clock (`hisilicon,hi6220-stub-clk` over `hisilicon,hi6220-mbox` and its SRAM), each
//! CPU's firmware domain from its `clocks`, and the QEMU firmware stand-in (`asym,fw-standin`,
//! only in the emulated boards' DTs).
//!
//! Re-derives the bindings Linux reads (`Documentation/devicetree/bindings/firmware/arm,scmi.yaml`
//! and `arm,scpi.yaml`, `mailbox/arm,mhu.yaml` `#mbox-cells = <2>` doorbells,
//! `clock/hisi,hi3660-stub-clk` / `hi6220-stub-clk`, `mailbox/hisilicon,hi3660-mailbox.txt`
//! (`<&mailbox channel dst_irq ack_irq>`), `hisilicon,hi6220-mailbox.txt`) and their mainline
//! users (`arch/arm64/boot/dts/arm/juno-scmi.dtsi`, `juno-base.dtsi`, `hisilicon/hi3660.dtsi`,
//! `hi6220.dtsi`).
//!
//! Deliberate differences: shared-memory nodes below an `mmio-sram` node are translated
//! through its `ranges` (the only translation the kernel does; Juno's `sram@2e000000` needs
//! it), and a region inside RAM is accepted with a note (HiKey's mailbox buffer is in DRAM, in
//! a hole of `/memory` that u-boot's rewrite may lose) instead of refused.

use flat_device_tree::node::FdtNode;
use flat_device_tree::Fdt;

use super::{
    be32, cells, child_cells, child_path, is_enabled, u32_prop, DtError, MemRange, NodePath,
    MAX_CPUS,
};
// `find` walks from the root with its own paths: `Fdt::find_node` misses nodes in some
// vm-fdt-written blobs (see `crate::board_dt`).

/// An Arm MHU doorbell: the MHU register block and the `mboxes` cells (channel, doorbell).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MhuDoorbellDt {
    pub regs: MemRange,
    pub channel: u32,
    pub doorbell: u32,
}

/// One SCMI A2P channel: its shared memory and doorbell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScmiChannelDt {
    pub shmem: MemRange,
    pub doorbell: MhuDoorbellDt,
}

/// The DVFS transports the kernel knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// SCMI: the base protocol's channel and the performance protocol's.
    Scmi {
        base: ScmiChannelDt,
        perf: ScmiChannelDt,
    },
    /// Legacy SCPI (`arm,scpi`): described, not driven; `sram` is the shared memory, `mhu`
    /// the mailbox (an SCMI probe there tells which firmware runs).
    Scpi { sram: MemRange, mhu: MemRange },
    /// HiKey960: the mailbox block, the stub-clock region, `mboxes` (channel, dst, ack).
    Hi3660 {
        mbox: MemRange,
        stub: MemRange,
        channel: u32,
        dst_irq: u32,
        ack_irq: u32,
    },
    /// HiKey: SRAM, the IPC registers, the DRAM mailbox buffer, `mboxes` (slot, dst, ack).
    Hi6220 {
        sram: MemRange,
        ipc: MemRange,
        buf: MemRange,
        slot: u32,
        dst_irq: u32,
        ack_irq: u32,
    },
}

impl Transport {
    /// Its name, for messages.
    pub fn name(&self) -> &'static str {
        match self {
            Transport::Scmi { .. } => "SCMI (arm,scmi)",
            Transport::Scpi { .. } => "SCPI (arm,scpi)",
            Transport::Hi3660 { .. } => "Hi3660 stub clock",
            Transport::Hi6220 { .. } => "Hi6220 stub clock",
        }
    }
}

/// The QEMU firmware stand-in: a vCPU the scheduler does not own runs the firmware.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StandinDt {
    /// The firmware vCPU's MPIDR (PSCI `CPU_ON` target).
    pub mpidr: u64,
    /// The SGI the doorbell raises on it.
    pub doorbell_sgi: u8,
}

/// Everything the DT says about DVFS firmware.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DvfsDt {
    pub transport: Transport,
    /// Per kept CPU (logical order): the firmware domain its `clocks` names on the
    /// transport's clock provider (`<&scmi_dvfs 1>` → 1), if any.
    pub cpu_domain: heapless::Vec<Option<u32>, MAX_CPUS>,
    pub standin: Option<StandinDt>,
    /// A region that lies in RAM without `/reserved-memory` or `/memreserve/` covering it
    /// (named here): nothing keeps the kernel from allocating it.
    pub in_ram: Option<MemRange>,
}

impl DvfsDt {
    /// The memory-mapped regions, to map as Device memory.
    pub fn regions(&self) -> heapless::Vec<MemRange, 4> {
        let mut v = heapless::Vec::new();
        let all: &[MemRange] = match &self.transport {
            Transport::Scmi { base, perf } => &[
                base.shmem,
                base.doorbell.regs,
                perf.shmem,
                perf.doorbell.regs,
            ],
            Transport::Scpi { sram, mhu } => &[*sram, *mhu],
            Transport::Hi3660 { mbox, stub, .. } => &[*mbox, *stub],
            Transport::Hi6220 { sram, ipc, buf, .. } => &[*sram, *ipc, *buf],
        };
        for r in all {
            if !v.contains(r) {
                let _ = v.push(*r);
            }
        }
        v
    }
}

/// Parses the DVFS description of the kept CPUs `cpus` (in logical order, as
/// `crate::dt::parse_cpus` found them): `Ok(None)` when the DT has none. `ram` is `/memory`,
/// `reserved` what `/memreserve/` and `/reserved-memory` exclude from it.
pub(crate) fn parse(
    fdt: &Fdt<'_>,
    cpus: &[(FdtNode<'_, '_>, NodePath)],
    ram: &[MemRange],
    reserved: &[super::Reserved],
) -> Result<Option<DvfsDt>, DtError> {
    let Some(found) = find(fdt, |n| {
        has_compatible(
            n,
            &[
                "arm,scmi",
                "arm,scpi",
                "hisilicon,hi3660-stub-clk",
                "hisilicon,hi6220-stub-clk",
            ],
        )
    }) else {
        return Ok(None);
    };
    let (transport, provider) = if has_compatible(found.node, &["arm,scmi"]) {
        parse_scmi(fdt, &found)?
    } else if has_compatible(found.node, &["arm,scpi"]) {
        (parse_scpi(fdt, &found)?, None)
    } else if has_compatible(found.node, &["hisilicon,hi3660-stub-clk"]) {
        (parse_hi3660(fdt, &found)?, phandle(found.node))
    } else {
        (parse_hi6220(fdt, &found)?, phandle(found.node))
    };
    let mut cpu_domain = heapless::Vec::new();
    for (cpu, _) in cpus {
        let _ = cpu_domain.push(clock_cell(*cpu, provider));
    }
    let standin = match find(fdt, |n| has_compatible(n, &["asym,fw-standin"])) {
        None => None,
        Some(s) => {
            let (hi, lo) = {
                let mut c =
                    cells(s.node, "cpu").ok_or_else(|| DtError::new(&s.path, "cpu", "missing"))?;
                (c.next().unwrap_or(0), c.next())
            };
            let mpidr = match lo {
                Some(lo) => (u64::from(hi) << 32) | u64::from(lo),
                None => u64::from(hi),
            };
            let sgi = u32_prop(s.node, "doorbell-sgi")
                .filter(|&v| v < 16)
                .ok_or_else(|| DtError::new(&s.path, "doorbell-sgi", "missing or not 0..=15"))?;
            Some(StandinDt {
                mpidr,
                doorbell_sgi: sgi as u8,
            })
        }
    };
    let mut dt = DvfsDt {
        transport,
        cpu_domain,
        standin,
        in_ram: None,
    };
    dt.in_ram = dt
        .regions()
        .into_iter()
        .find(|r| ram.iter().any(|b| b.overlaps(r)) && !reserved.iter().any(|v| v.range.covers(r)));
    Ok(Some(dt))
}

/// A node with its path, the cells its `reg` is in, and the `ranges` of its ancestors
/// (innermost first) to translate it to a CPU address.
struct Loc<'b, 'a> {
    node: FdtNode<'b, 'a>,
    path: NodePath,
    cells: (u32, u32),
    ranges: heapless::Vec<Ranges, 4>,
}

/// One ancestor's `ranges`: `None` = not translatable (no `ranges`), empty = identity.
#[derive(Clone)]
struct Ranges {
    entries: Option<heapless::Vec<(u64, u64, u64), 4>>,
    path: NodePath,
}

fn has_compatible(n: FdtNode<'_, '_>, any: &[&str]) -> bool {
    n.compatible()
        .is_some_and(|c| c.all().any(|s| any.contains(&s)))
}

fn phandle(n: FdtNode<'_, '_>) -> Option<u32> {
    u32_prop(n, "phandle").or_else(|| u32_prop(n, "linux,phandle"))
}

/// The first enabled node (depth-first, at most 8 deep) for which `want` holds.
fn find<'b, 'a>(fdt: &'b Fdt<'a>, want: impl Fn(FdtNode<'b, 'a>) -> bool) -> Option<Loc<'b, 'a>> {
    let root = fdt.find_node("/")?;
    let mut ranges = heapless::Vec::new();
    walk(
        root,
        NodePath::new(),
        child_cells(root),
        &mut ranges,
        &want,
        0,
    )
}

fn walk<'b, 'a>(
    node: FdtNode<'b, 'a>,
    path: NodePath,
    cells: (u32, u32),
    ranges: &mut heapless::Vec<Ranges, 4>,
    want: &impl Fn(FdtNode<'b, 'a>) -> bool,
    depth: usize,
) -> Option<Loc<'b, 'a>> {
    for child in node.children() {
        if !is_enabled(child) {
            continue;
        }
        let p = child_path(if path.is_empty() { "/" } else { &path }, child.name);
        if want(child) {
            let mut r = ranges.clone();
            r.reverse();
            return Some(Loc {
                node: child,
                path: p,
                cells,
                ranges: r,
            });
        }
        if depth < 8 && ranges.len() < 4 {
            let own = Ranges {
                entries: parse_ranges(child, cells),
                path: p.clone(),
            };
            let _ = ranges.push(own);
            let found = walk(child, p, child_cells(child), ranges, want, depth + 1);
            ranges.pop();
            if found.is_some() {
                return found;
            }
        }
    }
    None
}

/// `node`'s `ranges` as (child address, parent address, size) with `parent_cells` the cells
/// of `node`'s own parent; `None` when absent or malformed.
fn parse_ranges(
    node: FdtNode<'_, '_>,
    parent_cells: (u32, u32),
) -> Option<heapless::Vec<(u64, u64, u64), 4>> {
    let v = node.property("ranges")?.value;
    let (cac, csc) = child_cells(node);
    let pac = parent_cells.0;
    let entry = 4 * (cac + pac + csc) as usize;
    if entry == 0 || !v.len().is_multiple_of(entry) || cac > 2 || pac > 2 || csc > 2 {
        return None;
    }
    let read = |b: &[u8], n: u32| -> u64 {
        (0..n as usize).fold(0u64, |a, i| {
            (a << 32) | u64::from(be32(b, 4 * i).unwrap_or(0))
        })
    };
    let mut out = heapless::Vec::new();
    for e in v.chunks_exact(entry).take(4) {
        let c = read(e, cac);
        let p = read(&e[4 * cac as usize..], pac);
        let s = read(&e[4 * (cac + pac) as usize..], csc);
        let _ = out.push((c, p, s));
    }
    Some(out)
}

impl Loc<'_, '_> {
    /// `reg` entry `i` at its CPU address, at least `min` bytes.
    fn reg(&self, i: usize, what: &str, min: usize) -> Result<MemRange, DtError> {
        let located = super::Located {
            node: self.node,
            path: &self.path,
            cells: self.cells,
        };
        let regs: heapless::Vec<(u64, u64), 4> = super::reg_entries(&located)?;
        let &(mut base, size) = regs.get(i).ok_or_else(|| {
            DtError::new(
                &self.path,
                "reg",
                format_args!("entry {i} ({what}) missing"),
            )
        })?;
        for r in &self.ranges {
            let Some(entries) = &r.entries else {
                return Err(DtError::new(
                    &r.path,
                    "ranges",
                    format_args!("missing: {what} at {} is not a CPU address", self.path),
                ));
            };
            if entries.is_empty() {
                continue;
            }
            let hit = entries
                .iter()
                .find(|(c, _, s)| base >= *c && base.saturating_add(size) <= c.saturating_add(*s));
            let Some(&(c, p, _)) = hit else {
                return Err(DtError::new(
                    &r.path,
                    "ranges",
                    format_args!("does not cover {what} {base:#x}+{size:#x} of {}", self.path),
                ));
            };
            base = base - c + p;
        }
        let range = MemRange::checked(base, size).map_err(|p| {
            DtError::new(
                &self.path,
                "reg",
                format_args!("{what} {base:#x} size {size:#x}: {p}"),
            )
        })?;
        if range.size < min {
            return Err(DtError::new(
                &self.path,
                "reg",
                format_args!("{what} {range}: smaller than the {min:#x} bytes the protocol uses"),
            ));
        }
        Ok(range)
    }
}

/// The node `phandle` points to, located.
fn by_phandle<'b, 'a>(fdt: &'b Fdt<'a>, ph: u32) -> Option<Loc<'b, 'a>> {
    find(fdt, |n| phandle(n) == Some(ph))
}

/// The `index`-th specifier of a `<&provider cells...>` list property whose provider has
/// `#cells_prop` cells: (provider, cells).
fn specifier<'b, 'a>(
    fdt: &'b Fdt<'a>,
    n: &Loc<'_, '_>,
    prop: &'static str,
    cells_prop: &str,
    index: usize,
) -> Result<(Loc<'b, 'a>, heapless::Vec<u32, 4>), DtError> {
    let words: heapless::Vec<u32, 32> = cells(n.node, prop)
        .ok_or_else(|| DtError::new(&n.path, prop, "missing"))?
        .take(32)
        .collect();
    let mut at = 0usize;
    for i in 0..=index {
        let ph = *words
            .get(at)
            .ok_or_else(|| DtError::new(&n.path, prop, format_args!("no entry {index}")))?;
        let target = by_phandle(fdt, ph).ok_or_else(|| {
            DtError::new(&n.path, prop, format_args!("phandle {ph:#x} names no node"))
        })?;
        let nc = u32_prop(target.node, cells_prop).unwrap_or(0) as usize;
        if nc > 4 || at + 1 + nc > words.len() {
            return Err(DtError::new(
                &n.path,
                prop,
                format_args!("entry {i}: too few cells for {}", target.path),
            ));
        }
        if i == index {
            let c = words[at + 1..at + 1 + nc].iter().copied().collect();
            return Ok((target, c));
        }
        at += 1 + nc;
    }
    Err(DtError::new(&n.path, prop, "no such entry"))
}

/// `target`, which `referrer`'s `prop` names, must be compatible with one of `want`.
fn require_compatible(
    target: &Loc<'_, '_>,
    referrer: &Loc<'_, '_>,
    prop: &'static str,
    want: &[&str],
) -> Result<(), DtError> {
    if has_compatible(target.node, want) {
        Ok(())
    } else {
        Err(DtError::new(
            &referrer.path,
            prop,
            format_args!(
                "names {}, which is not \"{}\"",
                target.path,
                want.first().copied().unwrap_or("?")
            ),
        ))
    }
}

fn scmi_channel(fdt: &Fdt<'_>, n: &Loc<'_, '_>, what: &str) -> Result<ScmiChannelDt, DtError> {
    let (mbox, c) = specifier(fdt, n, "mboxes", "#mbox-cells", 0)?;
    require_compatible(&mbox, n, "mboxes", &["arm,mhu-doorbell"])?;
    if c.len() != 2 {
        return Err(DtError::new(
            &n.path,
            "mboxes",
            "an MHU doorbell takes 2 cells (channel, doorbell)",
        ));
    }
    let shm_ph = cells(n.node, "shmem")
        .and_then(|mut c| c.next())
        .ok_or_else(|| DtError::new(&n.path, "shmem", "missing"))?;
    let shm = by_phandle(fdt, shm_ph)
        .ok_or_else(|| DtError::new(&n.path, "shmem", "phandle names no node"))?;
    require_compatible(&shm, n, "shmem", &["arm,scmi-shmem"])?;
    Ok(ScmiChannelDt {
        shmem: shm.reg(0, what, 0x20)?,
        doorbell: MhuDoorbellDt {
            regs: mbox.reg(0, "MHU", 0x200)?,
            channel: c[0],
            doorbell: c[1],
        },
    })
}

fn parse_scmi(fdt: &Fdt<'_>, scmi: &Loc<'_, '_>) -> Result<(Transport, Option<u32>), DtError> {
    let base = scmi_channel(fdt, scmi, "SCMI base channel")?;
    let mut perf_node = None;
    for child in scmi.node.children() {
        if u32_prop(child, "reg") == Some(0x13) {
            perf_node = Some(child);
        }
    }
    let perf_node = perf_node.ok_or_else(|| {
        DtError::new(
            &scmi.path,
            "protocol@13",
            "no performance protocol node (reg = <0x13>)",
        )
    })?;
    let ploc = Loc {
        node: perf_node,
        path: child_path(&scmi.path, perf_node.name),
        cells: child_cells(scmi.node),
        ranges: heapless::Vec::new(),
    };
    // A protocol without its own channel uses the base protocol's (arm,scmi.yaml).
    let perf = if perf_node.property("mboxes").is_some() {
        scmi_channel(fdt, &ploc, "SCMI performance channel")?
    } else {
        base
    };
    Ok((Transport::Scmi { base, perf }, phandle(perf_node)))
}

fn parse_scpi(fdt: &Fdt<'_>, scpi: &Loc<'_, '_>) -> Result<Transport, DtError> {
    let (mbox, _) = specifier(fdt, scpi, "mboxes", "#mbox-cells", 0)?;
    let shm_ph = cells(scpi.node, "shmem")
        .and_then(|mut c| c.next())
        .ok_or_else(|| DtError::new(&scpi.path, "shmem", "missing"))?;
    let shm = by_phandle(fdt, shm_ph)
        .ok_or_else(|| DtError::new(&scpi.path, "shmem", "phandle names no node"))?;
    Ok(Transport::Scpi {
        sram: shm.reg(0, "SCPI shared memory", 0x80)?,
        mhu: mbox.reg(0, "MHU", 0x200)?,
    })
}

fn parse_hi3660(fdt: &Fdt<'_>, stub: &Loc<'_, '_>) -> Result<Transport, DtError> {
    let (mbox, c) = specifier(fdt, stub, "mboxes", "#mbox-cells", 0)?;
    require_compatible(&mbox, stub, "mboxes", &["hisilicon,hi3660-mbox"])?;
    if c.len() != 3 || c.iter().any(|&v| v >= 32) {
        return Err(DtError::new(
            &stub.path,
            "mboxes",
            "expected <&mailbox channel dst_irq ack_irq>, each below 32",
        ));
    }
    Ok(Transport::Hi3660 {
        mbox: mbox.reg(0, "mailbox", 0xa04)?,
        stub: stub.reg(0, "stub clock", 0x78)?,
        channel: c[0],
        dst_irq: c[1],
        ack_irq: c[2],
    })
}

fn parse_hi6220(fdt: &Fdt<'_>, stub: &Loc<'_, '_>) -> Result<Transport, DtError> {
    let (mbox, c) = specifier(fdt, stub, "mboxes", "#mbox-cells", 0)?;
    require_compatible(&mbox, stub, "mboxes", &["hisilicon,hi6220-mbox"])?;
    if c.len() != 3 || c.iter().any(|&v| v >= 32) {
        return Err(DtError::new(
            &stub.path,
            "mboxes",
            "expected <&mailbox slot dst_irq ack_irq>, each below 32",
        ));
    }
    let sram_ph = cells(stub.node, "hisilicon,hi6220-clk-sram")
        .and_then(|mut c| c.next())
        .ok_or_else(|| DtError::new(&stub.path, "hisilicon,hi6220-clk-sram", "missing"))?;
    let sram = by_phandle(fdt, sram_ph).ok_or_else(|| {
        DtError::new(
            &stub.path,
            "hisilicon,hi6220-clk-sram",
            "phandle names no node",
        )
    })?;
    Ok(Transport::Hi6220 {
        sram: sram.reg(0, "SRAM", 0x1b3c)?,
        ipc: mbox.reg(0, "mailbox IPC", 0x508)?,
        buf: mbox.reg(1, "mailbox buffer", (c[0] as usize + 1) * 0x40)?,
        slot: c[0],
        dst_irq: c[1],
        ack_irq: c[2],
    })
}

/// The cell of `cpu`'s `clocks = <&provider N>` when it names `provider`.
fn clock_cell(cpu: FdtNode<'_, '_>, provider: Option<u32>) -> Option<u32> {
    let provider = provider?;
    let mut c = cells(cpu, "clocks")?;
    (c.next()? == provider).then(|| c.next()).flatten()
}

#[cfg(test)]
mod tests;
