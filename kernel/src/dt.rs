//! The device tree the firmware passes in x0, reduced to the [`Platform`] the kernel needs.
//!
//! Re-derives the parts of Linux's `drivers/of/fdt.c` (`early_init_dt_scan_memory`,
//! `early_init_dt_scan_chosen`), `drivers/base/arch_topology.c` (`parse_dt_topology`,
//! `topology_parse_cpu_capacity`) and the GIC/timer/PSCI probe code that read the same
//! properties. Deliberate differences: only the first `/memory` bank is used; cluster ids come
//! from `cpu-map` when present and from MPIDR Aff1 otherwise (Linux falls back to MPIDR too, but
//! via `store_cpu_topology`); at most [`MAX_CPUS`] CPUs are kept and the rest are counted in
//! [`Platform::cpus_ignored`].
//!
//! Parsing is pure (a byte slice in, a `Platform` out) so it runs in host unit tests against
//! device trees QEMU itself generated.

use core::fmt;

use asym_sched::types::{Capacity, CpuId, SCHED_CAPACITY_SCALE};
use flat_device_tree::node::FdtNode;
use flat_device_tree::Fdt;

mod validate;
pub use validate::{validate_fdt, MAX_DEPTH, MAX_FDT_SIZE};

/// The most CPUs the kernel brings up: boot stacks, per-CPU arrays and [`Platform::cpus`] are
/// sized by it. The one place this number lives.
pub const MAX_CPUS: usize = 8;

/// Longest `/chosen/bootargs` accepted.
pub const BOOTARGS_MAX: usize = 512;

/// A physical address range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemRange {
    pub base: usize,
    pub size: usize,
}

impl MemRange {
    /// One past the last byte.
    pub const fn end(&self) -> usize {
        self.base + self.size
    }

    pub const fn contains(&self, addr: usize) -> bool {
        addr >= self.base && addr - self.base < self.size
    }
}

/// The console UART (a PL011).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UartDesc {
    /// MMIO base address.
    pub base: usize,
    /// GIC INTID of the receive/transmit interrupt (SPI n is INTID n + 32).
    pub intid: u32,
}

/// The interrupt controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GicDesc {
    /// GICv2 (`arm,cortex-a15-gic`, `arm,gic-400`, ...): distributor and CPU interface MMIO.
    V2 { gicd: usize, gicc: usize },
    /// GICv3 (`arm,gic-v3`): distributor and the first redistributor region; each CPU's
    /// redistributor frame is `gicr_stride` bytes apart.
    V3 {
        gicd: usize,
        gicr: usize,
        gicr_stride: usize,
    },
}

impl GicDesc {
    /// 2 or 3.
    pub const fn version(&self) -> u8 {
        match self {
            GicDesc::V2 { .. } => 2,
            GicDesc::V3 { .. } => 3,
        }
    }
}

impl fmt::Display for GicDesc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GicDesc::V2 { gicd, gicc } => write!(f, "GICv2 (GICD {gicd:#x}, GICC {gicc:#x})"),
            GicDesc::V3 {
                gicd,
                gicr,
                gicr_stride,
            } => {
                write!(
                    f,
                    "GICv3 (GICD {gicd:#x}, GICR {gicr:#x} stride {gicr_stride:#x})"
                )
            }
        }
    }
}

/// The architected generic timer (`arm,armv8-timer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimerDesc {
    /// INTID of the EL1 (non-secure) physical timer PPI (CNTP).
    pub el1_phys_intid: u32,
    /// INTID of the EL1 virtual timer PPI (CNTV).
    pub el1_virt_intid: u32,
    /// `clock-frequency`, only when the firmware failed to program CNTFRQ_EL0.
    pub freq_hz: Option<u32>,
}

/// How PSCI calls reach the firmware.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conduit {
    Hvc,
    Smc,
}

/// PSCI (`arm,psci-*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PsciDesc {
    pub conduit: Conduit,
}

/// One CPU, in logical order (logical CPU n is `Platform::cpus[n]`; the boot CPU is the one
/// whose MPIDR the kernel reads at boot and need not be n = 0 on every board).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuNode {
    /// `reg`: the MPIDR affinity bits (Aff3..Aff0) PSCI `CPU_ON` takes.
    pub mpidr: u64,
    /// Cluster index: order of the cluster in `cpu-map`, else MPIDR Aff1.
    pub cluster: u16,
    /// `capacity-dmips-mhz`, if the DT has it.
    pub capacity_dmips_mhz: Option<u32>,
}

impl CpuNode {
    /// The raw DT capacity normalised to the 1024 scale against the largest CPU, as Linux's
    /// `topology_normalize_cpu_scale()` does before the frequency correction; 1024 without
    /// `capacity-dmips-mhz`. Frequency invariance (× fmax) is applied by the policy crate.
    pub fn capacity(&self, max_dmips_mhz: u32) -> Capacity {
        match self.capacity_dmips_mhz {
            Some(c) if max_dmips_mhz > 0 => Capacity(
                ((u64::from(c) * u64::from(SCHED_CAPACITY_SCALE)) / u64::from(max_dmips_mhz))
                    as u32,
            ),
            _ => Capacity(SCHED_CAPACITY_SCALE),
        }
    }
}

/// Everything the kernel needs from the device tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Platform {
    /// The first `/memory` bank.
    pub memory: MemRange,
    /// Where the DTB itself lies (the heap must not overwrite it).
    pub dtb: MemRange,
    pub uart: UartDesc,
    pub gic: GicDesc,
    pub timer: TimerDesc,
    pub psci: PsciDesc,
    pub cpus: heapless::Vec<CpuNode, MAX_CPUS>,
    /// CPUs beyond [`MAX_CPUS`] that the DT lists but the kernel does not bring up.
    pub cpus_ignored: usize,
    /// `/chosen/bootargs` (empty when absent).
    pub bootargs: heapless::String<BOOTARGS_MAX>,
    /// The length of `/chosen/bootargs` when it was longer than [`BOOTARGS_MAX`] and was cut
    /// (at the last whole option that fits, as Linux truncates `COMMAND_LINE_SIZE`).
    pub bootargs_truncated_from: Option<usize>,
}

impl Platform {
    /// Parses a flattened device tree held in `dtb`, which was found at physical address
    /// `dtb_pa` (only recorded, so the heap can avoid it).
    /// The blob is checked by [`validate_fdt`] first: the crate would panic on some malformed
    /// structure blocks.
    pub fn from_fdt(dtb: &[u8], dtb_pa: usize) -> Result<Platform, DtError> {
        validate_fdt(dtb)?;
        let fdt = Fdt::new(dtb).map_err(|_| {
            DtError::new(
                "/",
                "header",
                "not a valid FDT blob (bad magic or truncated)",
            )
        })?;
        let memory = parse_memory(&fdt)?;
        let found = Found::scan(&fdt);
        let uart = parse_uart(&fdt, &found)?;
        let gic = parse_gic(found.gic_v3, found.gic_v2)?;
        let timer = parse_timer(found.timer)?;
        let psci = parse_psci(found.psci)?;
        let (cpus, cpus_ignored) = parse_cpus(found.cpus)?;
        let mut bootargs = heapless::String::new();
        let mut bootargs_truncated_from = None;
        let args = found
            .chosen
            .and_then(|c| c.property("bootargs"))
            .and_then(|p| p.as_str());
        if let Some(args) = args {
            let args = args.trim_end_matches('\0');
            let kept = truncate_bootargs(args, BOOTARGS_MAX);
            // Cannot fail: `kept` is at most BOOTARGS_MAX bytes.
            let _ = bootargs.push_str(kept);
            if kept.len() < args.len() {
                bootargs_truncated_from = Some(args.len());
            }
        }
        Ok(Platform {
            memory,
            dtb: MemRange {
                base: dtb_pa,
                size: fdt.total_size(),
            },
            uart,
            gic,
            timer,
            psci,
            cpus,
            cpus_ignored,
            bootargs,
            bootargs_truncated_from,
        })
    }

    /// Parses the DTB at physical address `dtb_pa`.
    ///
    /// # Safety
    /// `dtb_pa` must be the address of a readable FDT (the header is read to learn its size)
    /// that stays unmodified while this runs, and physical addresses must be accessible at
    /// their own value (MMU off or identity-mapped).
    pub unsafe fn from_dtb_pa(dtb_pa: usize) -> Result<Platform, DtError> {
        if dtb_pa == 0 || !dtb_pa.is_multiple_of(8) {
            return Err(DtError::new(
                "/",
                "x0",
                "the boot loader passed no (or a misaligned) DTB address",
            ));
        }
        // SAFETY: the caller guarantees a readable FDT header at `dtb_pa`; 40 bytes is the v17 header.
        let header = unsafe { core::slice::from_raw_parts(dtb_pa as *const u8, 40) };
        if header[0..4] != [0xd0, 0x0d, 0xfe, 0xed] {
            return Err(DtError::new(
                "/",
                "header",
                "no FDT magic at the address in x0",
            ));
        }
        let total = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
        if !(40..=MAX_FDT_SIZE).contains(&total) {
            return Err(DtError::at(
                4,
                "totalsize",
                "below the header size or over 2 MiB",
            ));
        }
        // SAFETY: the header says the blob is `total` bytes long; the caller guarantees it is readable.
        let blob = unsafe { core::slice::from_raw_parts(dtb_pa as *const u8, total) };
        Platform::from_fdt(blob, dtb_pa)
    }

    /// Largest `capacity-dmips-mhz` among the kept CPUs (0 if none has one).
    pub fn max_dmips_mhz(&self) -> u32 {
        self.cpus
            .iter()
            .filter_map(|c| c.capacity_dmips_mhz)
            .max()
            .unwrap_or(0)
    }

    /// CPU `cpu`'s capacity on the 1024 scale (see [`CpuNode::capacity`]).
    pub fn capacity_of(&self, cpu: CpuId) -> Option<Capacity> {
        let max = self.max_dmips_mhz();
        self.cpus.get(cpu.index()).map(|c| c.capacity(max))
    }

    /// Logical id of the CPU with affinity `mpidr` (Aff3..Aff0 compared, other bits ignored).
    pub fn cpu_by_mpidr(&self, mpidr: u64) -> Option<CpuId> {
        let aff = mpidr & MPIDR_AFF_MASK;
        self.cpus
            .iter()
            .position(|c| c.mpidr & MPIDR_AFF_MASK == aff)
            .map(|i| CpuId(i as u16))
    }
}

/// Aff3 (bits 39:32) and Aff2..Aff0 (bits 23:0) of MPIDR_EL1.
pub const MPIDR_AFF_MASK: u64 = 0xff_00ff_ffff;

/// A required node or property is missing or malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DtError {
    /// Node path (or the compatible string searched for).
    pub node: &'static str,
    pub property: &'static str,
    pub problem: &'static str,
    /// Byte offset in the blob, for errors found by [`validate_fdt`] (then `node` is "FDT" and
    /// `property` the header field or "struct" for the structure block).
    pub offset: Option<usize>,
}

impl DtError {
    const fn new(node: &'static str, property: &'static str, problem: &'static str) -> Self {
        DtError {
            node,
            property,
            problem,
            offset: None,
        }
    }

    /// A structural error at byte `offset` of the blob.
    pub const fn at(offset: usize, property: &'static str, problem: &'static str) -> Self {
        DtError {
            node: "FDT",
            property,
            problem,
            offset: Some(offset),
        }
    }
}

impl fmt::Display for DtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "device tree: {} property `{}`: {}",
            self.node, self.property, self.problem
        )?;
        match self.offset {
            Some(off) => write!(f, " (at byte offset {off:#x})"),
            None => Ok(()),
        }
    }
}

fn parse_memory(fdt: &Fdt<'_>) -> Result<MemRange, DtError> {
    let mem = fdt
        .memory()
        .map_err(|_| DtError::new("/memory", "device_type", "no memory node"))?;
    let region = mem
        .regions()
        .next()
        .ok_or(DtError::new("/memory", "reg", "no memory bank"))?;
    let size = region
        .size
        .ok_or(DtError::new("/memory", "reg", "memory bank without a size"))?;
    Ok(MemRange {
        base: region.starting_address as usize,
        size,
    })
}

/// Big-endian 32-bit cells of a property.
fn cells<'a>(node: FdtNode<'_, 'a>, prop: &str) -> Option<impl Iterator<Item = u32> + 'a> {
    let p = node.property(prop)?;
    Some(
        p.value
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]])),
    )
}

/// The GIC INTID of the `index`-th 3-cell GIC interrupt specifier of `node`.
fn gic_intid(node: FdtNode<'_, '_>, index: usize) -> Option<u32> {
    let cells: heapless::Vec<u32, 16> = cells(node, "interrupts")?.take(16).collect();
    let spec = cells.chunks_exact(3).nth(index)?;
    match spec[0] {
        0 => Some(spec[1] + 32), // SPI
        1 => Some(spec[1] + 16), // PPI
        _ => None,
    }
}

fn first_reg(node: FdtNode<'_, '_>, n: usize) -> Option<usize> {
    node.reg().nth(n).map(|r| r.starting_address as usize)
}

fn is_pl011(node: FdtNode<'_, '_>) -> bool {
    node.compatible()
        .is_some_and(|c| c.all().any(|s| s == "arm,pl011"))
}

/// The nodes the kernel needs, found in one walk over the root's children and one over the
/// whole tree. Each `Fdt::find_compatible`/`find_node` is a walk of its own (skipping
/// subtrees by parsing them); doing one walk per kind made the DT parse the largest part of
/// boot (~11 of 13 ms of guest time under QEMU `-icount`).
struct Found<'b, 'a> {
    /// PL011s in document order (the console is the one `stdout-path` names, else the first).
    pl011s: heapless::Vec<FdtNode<'b, 'a>, 4>,
    chosen: Option<FdtNode<'b, 'a>>,
    cpus: Option<FdtNode<'b, 'a>>,
    gic_v3: Option<FdtNode<'b, 'a>>,
    gic_v2: Option<FdtNode<'b, 'a>>,
    timer: Option<FdtNode<'b, 'a>>,
    psci: Option<FdtNode<'b, 'a>>,
}

const GIC_V2_COMPATIBLE: [&str; 5] = [
    "arm,cortex-a15-gic",
    "arm,gic-400",
    "arm,cortex-a9-gic",
    "arm,cortex-a7-gic",
    "arm,gic-v2",
];

impl<'b, 'a> Found<'b, 'a> {
    fn scan(fdt: &'b Fdt<'a>) -> Self {
        let mut f = Found {
            pl011s: heapless::Vec::new(),
            chosen: None,
            cpus: None,
            gic_v3: None,
            gic_v2: None,
            timer: None,
            psci: None,
        };
        if let Some(root) = fdt.find_node("/") {
            for child in root.children() {
                match child.name {
                    "chosen" => f.chosen = Some(child),
                    "cpus" => f.cpus = Some(child),
                    _ => {}
                }
            }
        }
        for node in fdt.all_nodes() {
            let Some(compatible) = node.compatible() else {
                continue;
            };
            for c in compatible.all() {
                let slot = match c {
                    "arm,pl011" => {
                        let _ = f.pl011s.push(node);
                        continue;
                    }
                    "arm,gic-v3" => &mut f.gic_v3,
                    "arm,armv8-timer" | "arm,armv7-timer" => &mut f.timer,
                    "arm,psci-1.0" | "arm,psci-0.2" | "arm,psci" => &mut f.psci,
                    c if GIC_V2_COMPATIBLE.contains(&c) => &mut f.gic_v2,
                    _ => continue,
                };
                slot.get_or_insert(node);
            }
        }
        f
    }
}

fn parse_uart(fdt: &Fdt<'_>, found: &Found<'_, '_>) -> Result<UartDesc, DtError> {
    const NODE: &str = "arm,pl011";
    // `stdout-path = "/pl011@9000000:115200n8"` or an alias (`"serial0:115200n8"`).
    let stdout = found
        .chosen
        .and_then(|c| {
            c.property("stdout-path")
                .or_else(|| c.property("linux,stdout-path"))
        })
        .and_then(|p| p.as_str())
        .map(|p| p.trim_end_matches('\0').split(':').next().unwrap_or(""));
    let from_chosen = match stdout {
        Some(path) if path.starts_with('/') => {
            let leaf = path.rsplit('/').next().unwrap_or("");
            found.pl011s.iter().copied().find(|n| n.name == leaf)
        }
        Some(alias) if !alias.is_empty() => fdt.find_node(alias).filter(|n| is_pl011(*n)),
        _ => None,
    };
    let node = from_chosen
        .or(found.pl011s.first().copied())
        .ok_or(DtError::new(
            NODE,
            "compatible",
            "no PL011 UART (neither /chosen/stdout-path nor any node)",
        ))?;
    let base = first_reg(node, 0).ok_or(DtError::new(NODE, "reg", "missing"))?;
    let intid = gic_intid(node, 0).ok_or(DtError::new(
        NODE,
        "interrupts",
        "missing or not a GIC SPI/PPI",
    ))?;
    Ok(UartDesc { base, intid })
}

fn parse_gic(v3: Option<FdtNode<'_, '_>>, v2: Option<FdtNode<'_, '_>>) -> Result<GicDesc, DtError> {
    if let Some(node) = v3 {
        const NODE: &str = "arm,gic-v3";
        let gicd = first_reg(node, 0).ok_or(DtError::new(NODE, "reg", "missing distributor"))?;
        let gicr =
            first_reg(node, 1).ok_or(DtError::new(NODE, "reg", "missing redistributor region"))?;
        // GICv3 redistributors are two 64 KiB frames (RD_base, SGI_base) unless the DT says otherwise.
        let gicr_stride = match node.property("redistributor-stride") {
            Some(p) => {
                p.as_usize()
                    .ok_or(DtError::new(NODE, "redistributor-stride", "not a number"))?
            }
            None => 0x2_0000,
        };
        return Ok(GicDesc::V3 {
            gicd,
            gicr,
            gicr_stride,
        });
    }
    let node = v2.ok_or(DtError::new(
        "interrupt-controller",
        "compatible",
        "no arm,gic-v3 nor GICv2-compatible node",
    ))?;
    const NODE: &str = "arm,gic-v2";
    let gicd = first_reg(node, 0).ok_or(DtError::new(NODE, "reg", "missing distributor"))?;
    let gicc = first_reg(node, 1).ok_or(DtError::new(NODE, "reg", "missing CPU interface"))?;
    Ok(GicDesc::V2 { gicd, gicc })
}

fn parse_timer(node: Option<FdtNode<'_, '_>>) -> Result<TimerDesc, DtError> {
    const NODE: &str = "arm,armv8-timer";
    let node = node.ok_or(DtError::new(
        NODE,
        "compatible",
        "no architected timer node",
    ))?;
    // Order fixed by the binding: secure phys, non-secure phys, virtual, hypervisor.
    let el1_phys_intid = gic_intid(node, 1).ok_or(DtError::new(
        NODE,
        "interrupts",
        "no non-secure physical timer PPI",
    ))?;
    let el1_virt_intid =
        gic_intid(node, 2).ok_or(DtError::new(NODE, "interrupts", "no virtual timer PPI"))?;
    let freq_hz = node
        .property("clock-frequency")
        .and_then(|p| p.as_usize())
        .map(|f| f as u32);
    Ok(TimerDesc {
        el1_phys_intid,
        el1_virt_intid,
        freq_hz,
    })
}

fn parse_psci(node: Option<FdtNode<'_, '_>>) -> Result<PsciDesc, DtError> {
    const NODE: &str = "arm,psci";
    let node = node.ok_or(DtError::new(NODE, "compatible", "no PSCI node"))?;
    let method = node
        .property("method")
        .and_then(|p| p.as_str())
        .ok_or(DtError::new(NODE, "method", "missing"))?;
    let conduit = match method.trim_end_matches('\0') {
        "hvc" => Conduit::Hvc,
        "smc" => Conduit::Smc,
        _ => return Err(DtError::new(NODE, "method", "neither \"hvc\" nor \"smc\"")),
    };
    Ok(PsciDesc { conduit })
}

type CpuList = heapless::Vec<CpuNode, MAX_CPUS>;

fn parse_cpus(cpus_node: Option<FdtNode<'_, '_>>) -> Result<(CpuList, usize), DtError> {
    const NODE: &str = "/cpus";
    let cpus_node = cpus_node.ok_or(DtError::new(NODE, "", "missing"))?;
    let addr_cells = match cells(cpus_node, "#address-cells").and_then(|mut c| c.next()) {
        Some(n @ (1 | 2)) => n as usize,
        _ => {
            return Err(DtError::new(
                NODE,
                "#address-cells",
                "missing or not 1 or 2",
            ))
        }
    };
    // One walk over /cpus (children() re-parses the subtree, so walk it once): the cpu-map's
    // (phandle, cluster index) pairs, and the cpu nodes in order.
    let mut clusters: heapless::Vec<(u32, u16), 64> = heapless::Vec::new();
    let mut cpu_nodes: heapless::Vec<FdtNode<'_, '_>, 64> = heapless::Vec::new();
    let mut ignored = 0;
    for node in cpus_node.children() {
        if node.name == "cpu-map" {
            let mut next_cluster = 0u16;
            walk_cpu_map(node, &mut next_cluster, &mut clusters);
            continue;
        }
        let is_cpu = node
            .property("device_type")
            .and_then(|p| p.as_str())
            .is_some_and(|s| s.trim_end_matches('\0') == "cpu");
        if is_cpu && cpu_nodes.push(node).is_err() {
            ignored += 1;
        }
    }
    let mut list = CpuList::new();
    for node in cpu_nodes {
        let reg: heapless::Vec<u32, 2> = cells(node, "reg")
            .ok_or(DtError::new("/cpus/cpu", "reg", "missing"))?
            .take(addr_cells)
            .collect();
        if reg.len() != addr_cells {
            return Err(DtError::new(
                "/cpus/cpu",
                "reg",
                "shorter than #address-cells",
            ));
        }
        let mpidr = reg.iter().fold(0u64, |acc, c| (acc << 32) | u64::from(*c));
        let phandle = cells(node, "phandle").and_then(|mut c| c.next());
        let cluster = phandle
            .and_then(|ph| clusters.iter().find(|(p, _)| *p == ph).map(|(_, c)| *c))
            .unwrap_or(((mpidr >> 8) & 0xff) as u16);
        let capacity_dmips_mhz = cells(node, "capacity-dmips-mhz").and_then(|mut c| c.next());
        if capacity_dmips_mhz == Some(0) {
            return Err(DtError::new("/cpus/cpu", "capacity-dmips-mhz", "zero"));
        }
        if list
            .push(CpuNode {
                mpidr,
                cluster,
                capacity_dmips_mhz,
            })
            .is_err()
        {
            ignored += 1;
        }
    }
    if list.is_empty() {
        return Err(DtError::new(NODE, "device_type", "no cpu nodes"));
    }
    Ok((list, ignored))
}

/// Numbers the `clusterN` nodes of `cpu-map` in document order (nested clusters, e.g. under
/// `socketN`, count as their own clusters when they hold cores) and records each core's CPU
/// phandle with its cluster.
fn walk_cpu_map(
    node: FdtNode<'_, '_>,
    next_cluster: &mut u16,
    out: &mut heapless::Vec<(u32, u16), 64>,
) {
    let mut has_cores = false;
    let this = *next_cluster;
    for child in node.children() {
        if child.name.starts_with("core") {
            if !has_cores && node.name.starts_with("cluster") {
                *next_cluster += 1;
            }
            has_cores = true;
            // A core may have threads; take the core's own cpu or its threads' cpus.
            let mut phandles: heapless::Vec<u32, 8> = heapless::Vec::new();
            if let Some(ph) = cells(child, "cpu").and_then(|mut c| c.next()) {
                let _ = phandles.push(ph);
            }
            for thread in child.children() {
                if let Some(ph) = cells(thread, "cpu").and_then(|mut c| c.next()) {
                    let _ = phandles.push(ph);
                }
            }
            for ph in phandles {
                let _ = out.push((ph, this));
            }
        } else {
            walk_cpu_map(child, next_cluster, out);
        }
    }
}

/// The longest prefix of `args` of at most `max` bytes that ends between two options, so no
/// option is cut in half.
fn truncate_bootargs(args: &str, max: usize) -> &str {
    if args.len() <= max {
        return args;
    }
    let mut end = max;
    while !args.is_char_boundary(end) {
        end -= 1;
    }
    if args.as_bytes().get(end) == Some(&b' ') {
        return args[..end].trim_end();
    }
    args[..end].rfind(' ').map_or("", |i| args[..i].trim_end())
}

#[cfg(test)]
mod tests {
    //! Oracles: the QEMU DTBs were dumped by QEMU itself (`-M virt,dumpdtb=...`, see
    //! `kernel/tests/dtb/README.md`); expected addresses and interrupts are QEMU's
    //! `hw/arm/virt.c` memory map and IRQ numbers, and Juno r2's from boards.md.
    use super::*;

    #[test]
    fn long_bootargs_are_cut_between_options() {
        let long = "selftest hz=100 loglevel=debug";
        assert_eq!(truncate_bootargs(long, 100), long);
        assert_eq!(truncate_bootargs(long, 15), "selftest hz=100");
        assert_eq!(truncate_bootargs(long, 14), "selftest");
        assert_eq!(truncate_bootargs(long, 16), "selftest hz=100");
        assert_eq!(truncate_bootargs("averyveryverylongoption", 5), "");
        let many = "x=1 ".repeat(300);
        let kept = truncate_bootargs(&many, BOOTARGS_MAX);
        assert!(kept.len() <= BOOTARGS_MAX && kept.ends_with("x=1"));
    }

    fn load(name: &str) -> Vec<u8> {
        let path = format!("{}/tests/dtb/{}", env!("CARGO_MANIFEST_DIR"), name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    #[test]
    fn qemu_virt_gicv2_smp6() {
        let p = Platform::from_fdt(&load("qemu-virt-gicv2-smp6.dtb"), 0x4800_0000).unwrap();
        assert_eq!(
            p.memory,
            MemRange {
                base: 0x4000_0000,
                size: 256 << 20
            }
        );
        // VIRT_UART at 0x0900_0000, SPI 1.
        assert_eq!(
            p.uart,
            UartDesc {
                base: 0x0900_0000,
                intid: 33
            }
        );
        assert_eq!(
            p.gic,
            GicDesc::V2 {
                gicd: 0x0800_0000,
                gicc: 0x0801_0000
            }
        );
        // ARCH_TIMER_NS_EL1_IRQ = PPI 14, ARCH_TIMER_VIRT_IRQ = PPI 11.
        assert_eq!(p.timer.el1_phys_intid, 30);
        assert_eq!(p.timer.el1_virt_intid, 27);
        assert_eq!(p.psci.conduit, Conduit::Hvc);
        assert_eq!(p.cpus.len(), 6);
        for (i, c) in p.cpus.iter().enumerate() {
            assert_eq!(c.mpidr, i as u64);
            assert_eq!(c.cluster, 0);
            assert_eq!(c.capacity_dmips_mhz, None);
            assert_eq!(p.capacity_of(CpuId(i as u16)), Some(Capacity(1024)));
        }
        assert_eq!(p.bootargs.as_str(), "selftest hz=100");
        assert_eq!(p.dtb.base, 0x4800_0000);
        assert_eq!(
            p.cpu_by_mpidr(0x8000_0003),
            Some(CpuId(3)),
            "MPIDR bit 31 (RES1) ignored"
        );
    }

    #[test]
    fn qemu_virt_gicv3_el2_smp4() {
        let p = Platform::from_fdt(&load("qemu-virt-gicv3-el2-smp4.dtb"), 0).unwrap();
        assert_eq!(p.memory.size, 512 << 20);
        assert_eq!(
            p.gic,
            GicDesc::V3 {
                gicd: 0x0800_0000,
                gicr: 0x080a_0000,
                gicr_stride: 0x2_0000
            }
        );
        assert_eq!(p.gic.version(), 3);
        // With virtualization=on QEMU's PSCI is reached through smc.
        assert_eq!(p.psci.conduit, Conduit::Smc);
        assert_eq!(p.cpus.len(), 4);
        assert!(p.bootargs.is_empty());
    }

    #[test]
    fn juno_r2_clusters_and_capacities() {
        let p = Platform::from_fdt(&load("juno-r2-like.dtb"), 0).unwrap();
        let mpidrs: Vec<u64> = p.cpus.iter().map(|c| c.mpidr).collect();
        assert_eq!(mpidrs, [0x0, 0x1, 0x100, 0x101, 0x102, 0x103]);
        let clusters: Vec<u16> = p.cpus.iter().map(|c| c.cluster).collect();
        assert_eq!(clusters, [0, 0, 1, 1, 1, 1]);
        let caps: Vec<u32> = (0..6).map(|i| p.capacity_of(CpuId(i)).unwrap().0).collect();
        // 485 * 1024 / 1024 = 485: normalised to the biggest CPU.
        assert_eq!(caps, [1024, 1024, 485, 485, 485, 485]);
        assert_eq!(
            p.uart,
            UartDesc {
                base: 0x7ff8_0000,
                intid: 83 + 32
            }
        );
        assert_eq!(
            p.gic,
            GicDesc::V2 {
                gicd: 0x2c01_0000,
                gicc: 0x2c02_f000
            }
        );
        assert_eq!(p.psci.conduit, Conduit::Smc);
        assert_eq!(p.memory.base, 0x8000_0000);
        assert_eq!(p.bootargs.as_str(), "hz=300 loglevel=debug");
    }

    #[test]
    fn garbage_is_an_error_naming_the_header() {
        let e = Platform::from_fdt(&[0u8; 64], 0).unwrap_err();
        assert_eq!((e.property, e.offset), ("magic", Some(0)));
        let mut blob = load("juno-r2-like.dtb");
        blob.truncate(100);
        assert!(Platform::from_fdt(&blob, 0).is_err());
    }

    #[test]
    fn missing_psci_is_named() {
        // Rename the PSCI compatible strings in place (same length) so the node is not found.
        let mut blob = load("juno-r2-like.dtb");
        let needle = b"arm,psci-1.0\0arm,psci-0.2";
        let pos = blob
            .windows(needle.len())
            .position(|w| w == needle)
            .expect("psci compatible in fixture");
        blob[pos..pos + needle.len()].copy_from_slice(b"xxx,psci-1.0\0xxx,psci-0.2");
        let e = Platform::from_fdt(&blob, 0).unwrap_err();
        assert_eq!(e.node, "arm,psci");
        assert!(e.to_string().contains("no PSCI node"), "{e}");
    }
}
