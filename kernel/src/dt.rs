//! The device tree the firmware passes in x0, reduced to the [`Platform`] the kernel needs:
//! parsed once, early in boot, into owned data, every address, size and interrupt number
//! checked; the blob is never read again.
//!
//! Re-derives the parts of Linux's `drivers/of/fdt.c` (`early_init_dt_scan_memory`,
//! `early_init_dt_add_memory_arch`, `early_init_fdt_scan_reserved_mem`,
//! `early_init_dt_scan_chosen`), `drivers/base/arch_topology.c` (`parse_dt_topology`,
//! `topology_parse_cpu_capacity`), `arch/arm64/kernel/smp.c` (`of_parse_and_init_cpus`: MPIDR
//! checks, duplicates skipped) and the GIC/timer/PSCI probe code that read the same properties.
//! What Linux does with a bad value is what we do: a memory bank of size 0 is ignored, one
//! reaching beyond the addressable range is clipped, a CPU with an invalid or duplicate MPIDR
//! is skipped — each with a [`Platform::notes`] entry naming the node and property; a device
//! the kernel cannot use is a [`DtError`] that stops the boot with the same location.
//!
//! Deliberate differences: addresses are used as the CPU sees them (nodes below a bus whose
//! `ranges` translates addresses are refused, not translated); cluster ids come from `cpu-map`
//! when present and from MPIDR Aff1 otherwise; at most [`MAX_CPUS`] CPUs are kept and the rest
//! are counted in [`Platform::cpus_ignored`]; the scheduling description (capacities, OPP
//! tables, `crate::board_dt`) is parsed in the same pass and kept in [`Platform::sched`].
//!
//! Parsing is pure (a byte slice in, a `Platform` out), so it runs in host unit tests against
//! device trees QEMU itself generated, and in host tools.

// `DtError` carries where and what as text (~270 bytes) by design: errors are rare, made once
// at boot, and must name the node; not worth a heap box the early boot does not have.
#![allow(clippy::result_large_err)]

use core::fmt::{self, Write as _};

use asym_sched::types::{Capacity, CpuId, SCHED_CAPACITY_SCALE};
use flat_device_tree::node::FdtNode;
use flat_device_tree::Fdt;

use crate::board_dt::SchedDt;

pub mod dvfs;
mod memory;
mod validate;
pub use memory::{Reserved, MAX_MEM_BANKS, MAX_RESERVED};
pub use validate::{validate_fdt, MAX_DEPTH, MAX_FDT_SIZE};

/// The most CPUs the kernel brings up: boot stacks, per-CPU arrays and [`Platform::cpus`] are
/// sized by it. The one place this number lives.
pub const MAX_CPUS: usize = 8;

/// Longest `/chosen/bootargs` accepted.
pub const BOOTARGS_MAX: usize = 512;

/// One past the highest physical address the kernel can use. It runs on an identity map of
/// 39-bit virtual addresses (`TCR_EL1.T0SZ` = 25, `arch::aarch64::mmu`), so RAM, devices and
/// the DTB must all lie below 2^39 (512 GiB); the device tree's addresses are checked
/// against [`MAP_LIMIT`], which leaves out the range's last GiB.
pub const PA_LIMIT: usize = 1 << 39;

/// One past the highest physical address RAM, devices and the DTB may use: [`PA_LIMIT`] less
/// its last GiB, where the kernel maps thread stacks (`arch::aarch64::mmu::STACK_WINDOW_VA`).
pub const MAP_LIMIT: usize = PA_LIMIT - (1 << 30);

/// Largest device region accepted (the GICv3 redistributors of 512 CPUs need 64 MiB).
pub const DEVICE_MAX: usize = 1 << 30;

/// Longest node path kept in a message (longer ones are cut).
pub const NODE_MAX: usize = 64;
/// Longest problem description kept in a message.
pub const PROBLEM_MAX: usize = 160;
/// Notes kept in [`Platform::notes`]; later ones are only counted.
pub const MAX_NOTES: usize = 8;

/// A node path (or the compatible string searched for when no node was found).
pub type NodePath = heapless::String<NODE_MAX>;

/// A physical address range, `base..base + size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemRange {
    pub base: usize,
    pub size: usize,
}

impl MemRange {
    /// One past the last byte (saturating; ranges in a [`Platform`] never wrap).
    pub const fn end(&self) -> usize {
        self.base.saturating_add(self.size)
    }

    pub const fn contains(&self, addr: usize) -> bool {
        addr >= self.base && addr - self.base < self.size
    }

    /// Whether the two ranges share a byte.
    pub const fn overlaps(&self, other: &MemRange) -> bool {
        self.base < other.end() && other.base < self.end()
    }

    /// Whether `other` lies wholly inside this range.
    pub const fn covers(&self, other: &MemRange) -> bool {
        other.base >= self.base && other.end() <= self.end()
    }

    /// `base..base + size` if it is not empty, does not wrap and ends at or below
    /// [`MAP_LIMIT`]; else what is wrong with it.
    pub fn checked(base: u64, size: u64) -> Result<MemRange, &'static str> {
        if size == 0 {
            return Err("size 0");
        }
        let end = base
            .checked_add(size)
            .ok_or("base + size wraps past 2^64")?;
        if end > MAP_LIMIT as u64 {
            return Err(
                "beyond the 39-bit (512 GiB) physical range the kernel maps, less its last GiB \
                 (thread stacks)",
            );
        }
        Ok(MemRange {
            base: base as usize,
            size: size as usize,
        })
    }
}

impl fmt::Display for MemRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}..{:#x}", self.base, self.end())
    }
}

/// The console UART (a PL011).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UartDesc {
    /// The node's path, for messages about it.
    pub node: NodePath,
    /// MMIO base address.
    pub base: usize,
    /// MMIO size from `reg` (at least [`UART_MIN`]).
    pub size: usize,
    /// GIC INTID of the receive/transmit interrupt (SPI n is INTID n + 32).
    pub intid: u32,
}

/// Bytes of PL011 registers the driver uses.
pub const UART_MIN: usize = 0x1000;

/// The interrupt controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GicDesc {
    /// GICv2 (`arm,cortex-a15-gic`, `arm,gic-400`, ...): distributor and CPU interface MMIO.
    V2 { gicd: MemRange, gicc: MemRange },
    /// GICv3 (`arm,gic-v3`): distributor and the first redistributor region. Each CPU's
    /// redistributor is `gicr_stride` bytes after the previous one when the DT says so
    /// (`redistributor-stride`), else two 64 KiB frames (four with GICv4 vLPIs) after it.
    V3 {
        gicd: MemRange,
        gicr: MemRange,
        gicr_stride: Option<usize>,
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
            GicDesc::V2 { gicd, gicc } => {
                write!(f, "GICv2 (GICD {:#x}, GICC {:#x})", gicd.base, gicc.base)
            }
            GicDesc::V3 {
                gicd,
                gicr,
                gicr_stride,
            } => {
                write!(f, "GICv3 (GICD {:#x}, GICR {gicr}", gicd.base)?;
                match gicr_stride {
                    Some(s) => write!(f, " stride {s:#x})"),
                    None => write!(f, ")"),
                }
            }
        }
    }
}

/// Bytes of GICv2 distributor registers the driver uses (a GIC-400's is 4 KiB).
pub const GICV2_GICD_MIN: usize = 0x1000;
/// Bytes of GICv2 CPU interface registers the driver uses.
pub const GICV2_GICC_MIN: usize = 0x2000;
/// Bytes of GICv3 distributor registers the driver uses (`GICD_IROUTER` is at 0x6000+).
pub const GICV3_GICD_MIN: usize = 0x1_0000;
/// One GICv3 redistributor: the RD_base and SGI_base 64 KiB frames.
pub const GICV3_GICR_MIN: usize = 0x2_0000;

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

/// Problems that did not stop the parse (a bank ignored, a CPU skipped, an option dropped),
/// in the order found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Notes {
    pub list: heapless::Vec<DtError, MAX_NOTES>,
    /// Notes beyond [`MAX_NOTES`], only counted.
    pub dropped: usize,
}

impl Notes {
    fn push(&mut self, e: DtError) {
        if self.list.push(e).is_err() {
            self.dropped += 1;
        }
    }
}

/// Everything the kernel needs from the device tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Platform {
    /// RAM: the banks of every `/memory` node in DT order, each non-empty, not wrapping and
    /// below [`MAP_LIMIT`] (banks that were not are clipped or ignored with a note). At least one.
    pub memory: heapless::Vec<MemRange, MAX_MEM_BANKS>,
    /// Memory nobody may allocate: the FDT's `/memreserve/` entries and the static
    /// `/reserved-memory` regions, in that order.
    pub reserved: heapless::Vec<Reserved, MAX_RESERVED>,
    /// Where the DTB itself lies (the heap must not overwrite it).
    pub dtb: MemRange,
    pub uart: UartDesc,
    pub gic: GicDesc,
    /// The interrupt controller's node path, for messages about it.
    pub gic_node: NodePath,
    pub timer: TimerDesc,
    pub psci: PsciDesc,
    pub cpus: heapless::Vec<CpuNode, MAX_CPUS>,
    /// CPUs beyond [`MAX_CPUS`] that the DT lists but the kernel does not bring up.
    pub cpus_ignored: usize,
    /// `/chosen/bootargs` (empty when absent): its valid UTF-8 options, cut to [`BOOTARGS_MAX`].
    pub bootargs: heapless::String<BOOTARGS_MAX>,
    /// The length of `/chosen/bootargs` when it was longer than [`BOOTARGS_MAX`] and was cut
    /// (at the last whole option that fits, as Linux truncates `COMMAND_LINE_SIZE`).
    pub bootargs_truncated_from: Option<usize>,
    /// The scheduling description (capacities, power coefficients, OPP tables): `Ok(None)`
    /// when no CPU has an `operating-points-v2` table; `Err` when it is there but unusable
    /// (the kernel then falls back to symmetric CPUs without cpufreq).
    pub sched: Result<Option<SchedDt>, DtError>,
    /// The DVFS firmware transport (`crate::dt::dvfs`): `Ok(None)` when the DT describes
    /// none; `Err` when it is there but unusable (cpufreq then uses no firmware driver).
    pub dvfs: Result<Option<dvfs::DvfsDt>, DtError>,
    /// What was clipped, ignored or skipped, with where.
    pub notes: Notes,
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
        let dtb_range = MemRange::checked(dtb_pa as u64, fdt.total_size() as u64)
            .map_err(|p| DtError::new("/", "x0", format_args!("the DTB at {dtb_pa:#x}: {p}")))?;
        let mut notes = Notes::default();
        let found = Found::scan(&fdt)?;
        let memory = memory::parse_memory(&found.memory, &mut notes)?;
        let reserved = memory::parse_reserved(&fdt, found.reserved_memory.as_ref(), &mut notes);
        let uart = parse_uart(&fdt, &found, &memory)?;
        let (gic, gic_node) = parse_gic(&found, &memory)?;
        let timer = parse_timer(found.timer.as_ref())?;
        check_interrupts(&uart, &timer)?;
        let psci = parse_psci(found.psci.as_ref())?;
        let cpus = parse_cpus(found.cpus.as_ref(), &mut notes)?;
        let sched = crate::board_dt::parse_sched(&fdt, &cpus.nodes, &cpus.list);
        let dvfs = dvfs::parse(&fdt, &cpus.nodes, &memory, &reserved);
        let (bootargs, bootargs_truncated_from) = parse_bootargs(found.chosen, &mut notes);
        Ok(Platform {
            memory,
            reserved,
            dtb: dtb_range,
            uart,
            gic,
            gic_node,
            timer,
            psci,
            cpus: cpus.list,
            cpus_ignored: cpus.ignored,
            bootargs,
            bootargs_truncated_from,
            sched,
            dvfs,
            notes,
        })
    }

    /// Parses the DTB at physical address `dtb_pa`.
    ///
    /// # Safety
    /// `dtb_pa` must be the address of a readable FDT (the header is read to learn its size)
    /// that stays unmodified while this runs, and physical addresses must be accessible at
    /// their own value (MMU off or identity-mapped) up to `dtb_pa + totalsize`.
    pub unsafe fn from_dtb_pa(dtb_pa: usize) -> Result<Platform, DtError> {
        check_dtb_pa(dtb_pa)?;
        // SAFETY: the caller guarantees a readable FDT header at `dtb_pa`; 40 bytes is the v17 header.
        let header = unsafe { core::slice::from_raw_parts(dtb_pa as *const u8, 40) };
        let total = fdt_totalsize(header)?;
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

    /// The device-tree device whose registers hold `addr`: its node path and which registers
    /// (for fault reports on a DT address that is not what the DT says).
    pub fn device_at(&self, addr: usize) -> Option<(&str, &'static str)> {
        let uart = MemRange {
            base: self.uart.base,
            size: self.uart.size,
        };
        let gic: [(MemRange, &'static str); 2] = match self.gic {
            GicDesc::V2 { gicd, gicc } => [(gicd, "distributor"), (gicc, "CPU interface")],
            GicDesc::V3 { gicd, gicr, .. } => [(gicd, "distributor"), (gicr, "redistributors")],
        };
        if uart.contains(addr) {
            return Some((&self.uart.node, "UART registers"));
        }
        gic.iter()
            .find(|(r, _)| r.contains(addr))
            .map(|(_, what)| (self.gic_node.as_str(), *what))
    }

    /// The RAM bank that holds all of `image` (the kernel), or an error naming `/memory`.
    pub fn bank_holding(&self, image: MemRange) -> Result<MemRange, DtError> {
        self.memory
            .iter()
            .copied()
            .find(|b| b.covers(&image))
            .ok_or_else(|| {
                DtError::new(
                    "/memory",
                    "reg",
                    format_args!("no RAM bank holds the running kernel image {image}"),
                )
            })
    }

    /// The free RAM from `start` (rounded up to a page) in `bank`, at most `max` bytes: up to
    /// the end of the bank's last whole 2 MiB (what the identity map covers), stopping below
    /// the DTB and every reserved region, and starting past any of them that covers `start`.
    /// `None` if nothing is left.
    pub fn free_ram_from(&self, bank: MemRange, start: usize, max: usize) -> Option<MemRange> {
        memory::free_range(bank, start, max, self.dtb, &self.reserved)
    }
}

/// Checks the DTB address the loader passed (x0): non-zero, 8-byte aligned (the arm64 boot
/// protocol), below [`MAP_LIMIT`].
pub fn check_dtb_pa(dtb_pa: usize) -> Result<(), DtError> {
    if dtb_pa == 0 || !dtb_pa.is_multiple_of(8) {
        return Err(DtError::new(
            "/",
            "x0",
            "the boot loader passed no (or a misaligned) DTB address",
        ));
    }
    if dtb_pa.saturating_add(MAX_FDT_SIZE) > MAP_LIMIT {
        return Err(DtError::new(
            "/",
            "x0",
            format_args!(
                "the DTB address {dtb_pa:#x} (+ up to 2 MiB) is beyond the 39-bit range the \
                 kernel maps"
            ),
        ));
    }
    Ok(())
}

/// The `totalsize` of an FDT from its first 40 bytes, checked against [`MAX_FDT_SIZE`].
pub fn fdt_totalsize(header: &[u8]) -> Result<usize, DtError> {
    if header.get(0..4) != Some(&[0xd0, 0x0d, 0xfe, 0xed]) {
        return Err(DtError::new(
            "/",
            "header",
            "no FDT magic at the address in x0",
        ));
    }
    let total = be32(header, 4).unwrap_or(0) as usize;
    if !(40..=MAX_FDT_SIZE).contains(&total) {
        return Err(DtError::at(
            4,
            "totalsize",
            "below the header size or over 2 MiB",
        ));
    }
    Ok(total)
}

/// Aff3 (bits 39:32) and Aff2..Aff0 (bits 23:0) of MPIDR_EL1.
pub const MPIDR_AFF_MASK: u64 = 0xff_00ff_ffff;

/// A node or property the kernel needs is missing or malformed: where, and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DtError {
    /// Node path (or the compatible string searched for when no node has it).
    pub node: NodePath,
    pub property: &'static str,
    pub problem: heapless::String<PROBLEM_MAX>,
    /// Byte offset in the blob, for errors found by [`validate_fdt`] (then `node` is "FDT" and
    /// `property` the header field or "struct" for the structure block).
    pub offset: Option<usize>,
}

impl DtError {
    /// An error at `node`'s `property` (cut to [`NODE_MAX`] / [`PROBLEM_MAX`] bytes).
    pub fn new(node: &str, property: &'static str, problem: impl fmt::Display) -> Self {
        let mut e = DtError {
            node: NodePath::new(),
            property,
            problem: heapless::String::new(),
            offset: None,
        };
        push_cut(&mut e.node, node);
        let _ = write!(Cut(&mut e.problem), "{problem}");
        e
    }

    /// A structural error at byte `offset` of the blob.
    pub fn at(offset: usize, property: &'static str, problem: &str) -> Self {
        let mut e = DtError::new("FDT", property, problem);
        e.offset = Some(offset);
        e
    }
}

impl fmt::Display for DtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device tree: {}", self.node)?;
        if !self.property.is_empty() {
            write!(f, " property `{}`", self.property)?;
        }
        write!(f, ": {}", self.problem)?;
        match self.offset {
            Some(off) => write!(f, " (at byte offset {off:#x})"),
            None => Ok(()),
        }
    }
}

/// Writes into a bounded string, keeping what fits (cut on a character boundary).
struct Cut<'a, const N: usize>(&'a mut heapless::String<N>);

impl<const N: usize> fmt::Write for Cut<'_, N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        push_cut(self.0, s);
        Ok(())
    }
}

fn push_cut<const N: usize>(out: &mut heapless::String<N>, s: &str) {
    let room = N - out.len();
    let mut end = s.len().min(room);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let _ = out.push_str(&s[..end]);
}

/// `parent`'s child `name` as a path.
fn child_path(parent: &str, name: &str) -> NodePath {
    let mut p = NodePath::new();
    push_cut(&mut p, parent);
    if !parent.ends_with('/') {
        push_cut(&mut p, "/");
    }
    push_cut(&mut p, name);
    p
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    let w = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([w[0], w[1], w[2], w[3]]))
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

fn u32_prop(node: FdtNode<'_, '_>, prop: &str) -> Option<u32> {
    cells(node, prop).and_then(|mut c| c.next())
}

/// Whether `status` says the node is usable (absent, "okay" or "ok").
fn is_enabled(node: FdtNode<'_, '_>) -> bool {
    node.property("status")
        .and_then(|p| p.as_str())
        .is_none_or(|s| matches!(s.trim_end_matches('\0'), "okay" | "ok"))
}

/// A node with its path and the `#address-cells`/`#size-cells` its `reg` is written in (its
/// parent's).
#[derive(Clone, Copy)]
struct Located<'b, 'a> {
    node: FdtNode<'b, 'a>,
    path: &'b str,
    cells: (u32, u32),
}

/// The `#address-cells` and `#size-cells` `node` gives its children (the DT spec's defaults
/// 2 and 1 when absent).
fn child_cells(node: FdtNode<'_, '_>) -> (u32, u32) {
    (
        u32_prop(node, "#address-cells").unwrap_or(2),
        u32_prop(node, "#size-cells").unwrap_or(1),
    )
}

/// The `reg` entries of `n` as (address, size) pairs, at most `N`.
fn reg_entries<const N: usize>(
    n: &Located<'_, '_>,
) -> Result<heapless::Vec<(u64, u64), N>, DtError> {
    let (ac, sc) = n.cells;
    if !(1..=2).contains(&ac) || sc > 2 {
        return Err(DtError::new(
            n.path,
            "reg",
            format_args!(
                "the parent's #address-cells = {ac} / #size-cells = {sc}: only 1-2 / 0-2 supported"
            ),
        ));
    }
    let value = n
        .node
        .property("reg")
        .ok_or_else(|| DtError::new(n.path, "reg", "missing"))?
        .value;
    let entry = 4 * (ac + sc) as usize;
    if value.is_empty() || !value.len().is_multiple_of(entry) {
        return Err(DtError::new(
            n.path,
            "reg",
            format_args!(
                "{} bytes: not a whole number of {ac}+{sc}-cell entries",
                value.len()
            ),
        ));
    }
    let read = |b: &[u8], cells: u32| -> u64 {
        b.chunks_exact(4).take(cells as usize).fold(0u64, |acc, c| {
            (acc << 32) | u64::from(be32(c, 0).unwrap_or(0))
        })
    };
    let mut out = heapless::Vec::new();
    for e in value.chunks_exact(entry).take(N) {
        let (a, s) = e.split_at(4 * ac as usize);
        let _ = out.push((read(a, ac), read(s, sc)));
    }
    Ok(out)
}

/// A device's `index`-th `reg` entry as a checked range of at least `min` bytes that does not
/// overlap RAM.
fn device_reg(
    n: &Located<'_, '_>,
    index: usize,
    what: &str,
    min: usize,
    ram: &[MemRange],
) -> Result<MemRange, DtError> {
    let regs: heapless::Vec<(u64, u64), 4> = reg_entries(n)?;
    let &(base, size) = regs.get(index).ok_or_else(|| {
        DtError::new(
            n.path,
            "reg",
            format_args!("entry {index} ({what}) missing"),
        )
    })?;
    if n.cells.1 == 0 {
        return Err(DtError::new(
            n.path,
            "reg",
            format_args!("{what}: no size (#size-cells = 0)"),
        ));
    }
    let r = MemRange::checked(base, size).map_err(|p| {
        DtError::new(
            n.path,
            "reg",
            format_args!("{what} {base:#x} size {size:#x}: {p}"),
        )
    })?;
    if r.size < min || r.size > DEVICE_MAX {
        return Err(DtError::new(
            n.path,
            "reg",
            format_args!(
                "{what} {r}: size {:#x} is not in {min:#x}..={DEVICE_MAX:#x}",
                r.size
            ),
        ));
    }
    if let Some(bank) = ram.iter().find(|b| b.overlaps(&r)) {
        return Err(DtError::new(
            n.path,
            "reg",
            format_args!("{what} {r} overlaps RAM {bank} (/memory)"),
        ));
    }
    Ok(r)
}

/// Which GIC interrupt a specifier names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IrqKind {
    Spi,
    Ppi,
}

/// SPIs are INTIDs 32..1020: SPI numbers 0..988.
const NR_SPI: u32 = 988;
/// PPIs are INTIDs 16..32: PPI numbers 0..16.
const NR_PPI: u32 = 16;

/// The GIC INTID of the `index`-th 3-cell GIC interrupt specifier of `n`'s `interrupts`,
/// whose type must be one of `allowed`: the number range-checked (PPI < 16, SPI < 988; no
/// SGIs, which are the kernel's IPIs).
fn gic_intid(
    n: &Located<'_, '_>,
    index: usize,
    what: &str,
    allowed: &[IrqKind],
) -> Result<u32, DtError> {
    let value = n
        .node
        .property("interrupts")
        .ok_or_else(|| DtError::new(n.path, "interrupts", "missing"))?
        .value;
    if !value.len().is_multiple_of(12) {
        return Err(DtError::new(
            n.path,
            "interrupts",
            format_args!(
                "{} bytes: not a whole number of 3-cell GIC specifiers",
                value.len()
            ),
        ));
    }
    let spec = value.chunks_exact(12).nth(index).ok_or_else(|| {
        DtError::new(
            n.path,
            "interrupts",
            format_args!("specifier {index} ({what}) missing"),
        )
    })?;
    let (kind, number) = (be32(spec, 0).unwrap_or(0), be32(spec, 4).unwrap_or(0));
    let (kind, intid) = match kind {
        0 if number < NR_SPI => (IrqKind::Spi, number + 32),
        1 if number < NR_PPI => (IrqKind::Ppi, number + 16),
        0 | 1 => {
            return Err(DtError::new(
                n.path,
                "interrupts",
                format_args!(
                    "{what}: {} {number} is out of range (SPI 0..{NR_SPI}, PPI 0..{NR_PPI})",
                    if kind == 0 { "SPI" } else { "PPI" },
                ),
            ))
        }
        k => {
            return Err(DtError::new(
                n.path,
                "interrupts",
                format_args!("{what}: type {k} is neither SPI (0) nor PPI (1)"),
            ))
        }
    };
    if !allowed.contains(&kind) {
        return Err(DtError::new(
            n.path,
            "interrupts",
            format_args!(
                "{what}: INTID {intid} is a {kind:?}, expected a {:?}",
                allowed[0]
            ),
        ));
    }
    Ok(intid)
}

/// How deep [`Found::scan`] looks for devices (root children are depth 1).
const SCAN_DEPTH: usize = 6;
/// Most `/memory` nodes considered.
const MAX_MEMORY_NODES: usize = 8;

/// A node found by [`Found::scan`], with its owned path.
struct FoundNode<'b, 'a> {
    node: FdtNode<'b, 'a>,
    path: NodePath,
    cells: (u32, u32),
    /// Reached only through buses whose `ranges` is empty (addresses are CPU addresses).
    untranslated: bool,
}

impl<'b, 'a> FoundNode<'b, 'a> {
    fn located(&self) -> Result<Located<'b, '_>, DtError>
    where
        'a: 'b,
    {
        if !self.untranslated {
            return Err(DtError::new(
                &self.path,
                "reg",
                "below a bus whose `ranges` translates addresses (not supported: devices \
                 must be at CPU addresses)",
            ));
        }
        Ok(Located {
            node: self.node,
            path: &self.path,
            cells: self.cells,
        })
    }
}

/// The nodes the kernel needs, found in one recursive walk (each `Fdt::find_compatible` is a
/// walk of its own; doing one walk per kind made the DT parse the largest part of boot).
struct Found<'b, 'a> {
    /// PL011s in document order (the console is the one `stdout-path` names, else the first).
    pl011s: heapless::Vec<FoundNode<'b, 'a>, 4>,
    chosen: Option<FdtNode<'b, 'a>>,
    cpus: Option<FoundNode<'b, 'a>>,
    memory: heapless::Vec<FoundNode<'b, 'a>, MAX_MEMORY_NODES>,
    reserved_memory: Option<FoundNode<'b, 'a>>,
    gic_v3: Option<FoundNode<'b, 'a>>,
    gic_v2: Option<FoundNode<'b, 'a>>,
    timer: Option<FoundNode<'b, 'a>>,
    psci: Option<FoundNode<'b, 'a>>,
}

const GIC_V2_COMPATIBLE: [&str; 5] = [
    "arm,cortex-a15-gic",
    "arm,gic-400",
    "arm,cortex-a9-gic",
    "arm,cortex-a7-gic",
    "arm,gic-v2",
];

impl<'b, 'a> Found<'b, 'a> {
    fn scan(fdt: &'b Fdt<'a>) -> Result<Self, DtError> {
        let mut f = Found {
            pl011s: heapless::Vec::new(),
            chosen: None,
            cpus: None,
            memory: heapless::Vec::new(),
            reserved_memory: None,
            gic_v3: None,
            gic_v2: None,
            timer: None,
            psci: None,
        };
        let root = fdt
            .find_node("/")
            .ok_or_else(|| DtError::new("/", "", "no root node"))?;
        let cells = child_cells(root);
        for child in root.children() {
            let path = child_path("/", child.name);
            let found = |path: NodePath| FoundNode {
                node: child,
                path,
                cells,
                untranslated: true,
            };
            let is_memory = child
                .property("device_type")
                .and_then(|p| p.as_str())
                .is_some_and(|s| s.trim_end_matches('\0') == "memory");
            match child.name {
                "chosen" => f.chosen = Some(child),
                "cpus" => f.cpus = Some(found(path.clone())),
                "reserved-memory" => f.reserved_memory = Some(found(path.clone())),
                _ if is_memory => {
                    if is_enabled(child) {
                        // More than MAX_MEMORY_NODES: the rest are reported by parse_memory.
                        let _ = f.memory.push(found(path.clone()));
                    }
                    continue;
                }
                _ => {}
            }
            f.visit(child, path, cells, true, 1);
        }
        Ok(f)
    }

    fn visit(
        &mut self,
        node: FdtNode<'b, 'a>,
        path: NodePath,
        cells: (u32, u32),
        untranslated: bool,
        depth: usize,
    ) {
        if !is_enabled(node) {
            return;
        }
        if let Some(compatible) = node.compatible() {
            for c in compatible.all() {
                let slot = match c {
                    "arm,pl011" => {
                        let _ = self.pl011s.push(FoundNode {
                            node,
                            path: path.clone(),
                            cells,
                            untranslated,
                        });
                        break;
                    }
                    "arm,gic-v3" => &mut self.gic_v3,
                    "arm,armv8-timer" | "arm,armv7-timer" => &mut self.timer,
                    "arm,psci-1.0" | "arm,psci-0.2" | "arm,psci" => &mut self.psci,
                    c if GIC_V2_COMPATIBLE.contains(&c) => &mut self.gic_v2,
                    _ => continue,
                };
                slot.get_or_insert(FoundNode {
                    node,
                    path: path.clone(),
                    cells,
                    untranslated,
                });
                break;
            }
        }
        if depth >= SCAN_DEPTH || node.name == "cpus" {
            return;
        }
        // Children's addresses are CPU addresses only below `ranges;` (empty: identity).
        let child_untranslated =
            untranslated && node.property("ranges").is_some_and(|r| r.value.is_empty());
        let cells = child_cells(node);
        for child in node.children() {
            let p = child_path(&path, child.name);
            self.visit(child, p, cells, child_untranslated, depth + 1);
        }
    }
}

fn parse_uart(fdt: &Fdt<'_>, found: &Found<'_, '_>, ram: &[MemRange]) -> Result<UartDesc, DtError> {
    // `stdout-path = "/pl011@9000000:115200n8"` or an alias (`"serial0:115200n8"`).
    let stdout = found
        .chosen
        .and_then(|c| {
            c.property("stdout-path")
                .or_else(|| c.property("linux,stdout-path"))
        })
        .and_then(|p| p.as_str())
        .map(|p| p.trim_end_matches('\0').split(':').next().unwrap_or(""));
    let path = match stdout {
        Some(p) if p.starts_with('/') => Some(p),
        Some(alias) if !alias.is_empty() => fdt
            .aliases()
            .and_then(|a| a.resolve(alias))
            .map(|p| p.trim_end_matches('\0')),
        _ => None,
    };
    let from_chosen = path.and_then(|p| {
        let leaf = p.rsplit('/').next().unwrap_or("");
        found
            .pl011s
            .iter()
            .find(|n| n.path.as_str() == p)
            .or_else(|| found.pl011s.iter().find(|n| n.node.name == leaf))
    });
    let node = from_chosen.or(found.pl011s.first()).ok_or_else(|| {
        DtError::new(
            "arm,pl011",
            "compatible",
            "no PL011 UART (neither /chosen/stdout-path nor any node)",
        )
    })?;
    let n = node.located()?;
    let regs = device_reg(&n, 0, "registers", UART_MIN, ram)?;
    let intid = gic_intid(&n, 0, "UART", &[IrqKind::Spi, IrqKind::Ppi])?;
    Ok(UartDesc {
        node: node.path.clone(),
        base: regs.base,
        size: regs.size,
        intid,
    })
}

/// The GIC's `#interrupt-cells`: the kernel reads 3-cell specifiers.
fn check_interrupt_cells(n: &Located<'_, '_>) -> Result<(), DtError> {
    match u32_prop(n.node, "#interrupt-cells") {
        None | Some(3) => Ok(()),
        Some(c) => Err(DtError::new(
            n.path,
            "#interrupt-cells",
            format_args!("{c}: only 3-cell GIC specifiers are supported"),
        )),
    }
}

fn parse_gic(found: &Found<'_, '_>, ram: &[MemRange]) -> Result<(GicDesc, NodePath), DtError> {
    if let Some(f) = &found.gic_v3 {
        let n = f.located()?;
        check_interrupt_cells(&n)?;
        let gicd = device_reg(&n, 0, "distributor", GICV3_GICD_MIN, ram)?;
        let gicr = device_reg(&n, 1, "redistributor region", GICV3_GICR_MIN, ram)?;
        let gicr_stride = match n.node.property("redistributor-stride") {
            None => None,
            Some(p) => {
                let s = p
                    .as_usize()
                    .ok_or_else(|| DtError::new(n.path, "redistributor-stride", "not a number"))?;
                // The binding: a multiple of 64 KiB; each redistributor has two frames.
                if s < GICV3_GICR_MIN || !s.is_multiple_of(0x1_0000) || s > gicr.size {
                    return Err(DtError::new(
                        n.path,
                        "redistributor-stride",
                        format_args!(
                            "{s:#x} is not a multiple of 64 KiB in {GICV3_GICR_MIN:#x}..={:#x} \
                             (two frames up to the region size)",
                            gicr.size
                        ),
                    ));
                }
                Some(s)
            }
        };
        let gic = GicDesc::V3 {
            gicd,
            gicr,
            gicr_stride,
        };
        return Ok((gic, f.path.clone()));
    }
    let f = found.gic_v2.as_ref().ok_or_else(|| {
        DtError::new(
            "interrupt-controller",
            "compatible",
            "no arm,gic-v3 nor GICv2-compatible node",
        )
    })?;
    let n = f.located()?;
    check_interrupt_cells(&n)?;
    let gicd = device_reg(&n, 0, "distributor", GICV2_GICD_MIN, ram)?;
    let gicc = device_reg(&n, 1, "CPU interface", GICV2_GICC_MIN, ram)?;
    if gicd.overlaps(&gicc) {
        return Err(DtError::new(
            n.path,
            "reg",
            format_args!("distributor {gicd} overlaps CPU interface {gicc}"),
        ));
    }
    Ok((GicDesc::V2 { gicd, gicc }, f.path.clone()))
}

fn parse_timer(f: Option<&FoundNode<'_, '_>>) -> Result<TimerDesc, DtError> {
    let f = f.ok_or_else(|| {
        DtError::new("arm,armv8-timer", "compatible", "no architected timer node")
    })?;
    let n = Located {
        node: f.node,
        path: &f.path,
        cells: f.cells,
    };
    // Order fixed by the binding: secure phys, non-secure phys, virtual, hypervisor.
    let el1_phys_intid = gic_intid(&n, 1, "non-secure physical timer", &[IrqKind::Ppi])?;
    let el1_virt_intid = gic_intid(&n, 2, "virtual timer", &[IrqKind::Ppi])?;
    let freq_hz = match f.node.property("clock-frequency") {
        None => None,
        Some(p) => match p.as_usize().map(u32::try_from) {
            Some(Ok(hz)) if hz > 0 => Some(hz),
            _ => {
                return Err(DtError::new(
                    &f.path,
                    "clock-frequency",
                    "not a number in 1..=4294967295 Hz",
                ))
            }
        },
    };
    Ok(TimerDesc {
        el1_phys_intid,
        el1_virt_intid,
        freq_hz,
    })
}

/// The UART must not share an interrupt with the tick: its handler would replace the timer's
/// (or the other way round), and a level-triggered timer PPI nobody clears is an IRQ storm.
fn check_interrupts(uart: &UartDesc, timer: &TimerDesc) -> Result<(), DtError> {
    if uart.intid == timer.el1_virt_intid || uart.intid == timer.el1_phys_intid {
        return Err(DtError::new(
            &uart.node,
            "interrupts",
            format_args!(
                "INTID {} is the architected timer's (arm,armv8-timer `interrupts`)",
                uart.intid
            ),
        ));
    }
    Ok(())
}

fn parse_psci(f: Option<&FoundNode<'_, '_>>) -> Result<PsciDesc, DtError> {
    let f = f.ok_or_else(|| DtError::new("arm,psci", "compatible", "no PSCI node"))?;
    let method = f
        .node
        .property("method")
        .and_then(|p| p.as_str())
        .ok_or_else(|| DtError::new(&f.path, "method", "missing"))?;
    let conduit = match method.trim_end_matches('\0') {
        "hvc" => Conduit::Hvc,
        "smc" => Conduit::Smc,
        _ => {
            return Err(DtError::new(
                &f.path,
                "method",
                "neither \"hvc\" nor \"smc\"",
            ))
        }
    };
    Ok(PsciDesc { conduit })
}

type CpuList = heapless::Vec<CpuNode, MAX_CPUS>;

/// The kept CPUs and their nodes (for the scheduling description), and how many were left out.
pub(crate) struct Cpus<'b, 'a> {
    pub(crate) list: CpuList,
    pub(crate) nodes: heapless::Vec<(FdtNode<'b, 'a>, NodePath), MAX_CPUS>,
    pub(crate) ignored: usize,
}

fn parse_cpus<'b, 'a>(
    f: Option<&FoundNode<'b, 'a>>,
    notes: &mut Notes,
) -> Result<Cpus<'b, 'a>, DtError> {
    let f = f.ok_or_else(|| DtError::new("/cpus", "", "missing"))?;
    let cpus_node = f.node;
    let addr_cells = match u32_prop(cpus_node, "#address-cells") {
        Some(n @ (1 | 2)) => n as usize,
        _ => {
            return Err(DtError::new(
                &f.path,
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
    let mut out = Cpus {
        list: CpuList::new(),
        nodes: heapless::Vec::new(),
        ignored: 0,
    };
    for node in cpu_nodes {
        let path = child_path(&f.path, node.name);
        let reg: heapless::Vec<u32, 2> = cells(node, "reg")
            .ok_or_else(|| DtError::new(&path, "reg", "missing"))?
            .take(addr_cells)
            .collect();
        if reg.len() != addr_cells {
            return Err(DtError::new(&path, "reg", "shorter than #address-cells"));
        }
        let mpidr = reg.iter().fold(0u64, |acc, c| (acc << 32) | u64::from(*c));
        // Linux `of_get_cpu_hwid` + `of_parse_and_init_cpus`: skip invalid and duplicate ids.
        if mpidr & !MPIDR_AFF_MASK != 0 {
            notes.push(DtError::new(
                &path,
                "reg",
                format_args!("{mpidr:#x} has bits outside MPIDR Aff3..Aff0: CPU skipped"),
            ));
            continue;
        }
        if out.list.iter().any(|c| c.mpidr == mpidr) {
            notes.push(DtError::new(
                &path,
                "reg",
                format_args!("MPIDR {mpidr:#x} is another CPU's too: CPU skipped"),
            ));
            continue;
        }
        let phandle = u32_prop(node, "phandle");
        let cluster = phandle
            .and_then(|ph| clusters.iter().find(|(p, _)| *p == ph).map(|(_, c)| *c))
            .unwrap_or(((mpidr >> 8) & 0xff) as u16);
        let capacity_dmips_mhz = u32_prop(node, "capacity-dmips-mhz");
        if capacity_dmips_mhz == Some(0) {
            return Err(DtError::new(&path, "capacity-dmips-mhz", "zero"));
        }
        let cpu = CpuNode {
            mpidr,
            cluster,
            capacity_dmips_mhz,
        };
        if out.list.push(cpu).is_err() {
            ignored += 1;
        } else {
            let _ = out.nodes.push((node, path));
        }
    }
    if out.list.is_empty() {
        return Err(DtError::new(&f.path, "device_type", "no usable cpu nodes"));
    }
    out.ignored = ignored;
    Ok(out)
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
                *next_cluster = next_cluster.saturating_add(1);
            }
            has_cores = true;
            // A core may have threads; take the core's own cpu or its threads' cpus.
            let mut phandles: heapless::Vec<u32, 8> = heapless::Vec::new();
            if let Some(ph) = u32_prop(child, "cpu") {
                let _ = phandles.push(ph);
            }
            for thread in child.children() {
                if let Some(ph) = u32_prop(thread, "cpu") {
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

/// `/chosen/bootargs`: the options that are valid UTF-8 (an option with other bytes is
/// dropped with a note naming the bytes and their offset), cut to [`BOOTARGS_MAX`] between
/// options. Returns the kept line and, if it was cut, the length before.
fn parse_bootargs(
    chosen: Option<FdtNode<'_, '_>>,
    notes: &mut Notes,
) -> (heapless::String<BOOTARGS_MAX>, Option<usize>) {
    let mut out = heapless::String::new();
    let Some(raw) = chosen.and_then(|c| c.property("bootargs")).map(|p| p.value) else {
        return (out, None);
    };
    // A C string: up to the first NUL.
    let raw = raw.split(|&b| b == 0).next().unwrap_or(&[]);
    // Valid options joined by single spaces, as `Cmdline::parse` splits them anyway.
    let mut kept: heapless::String<{ 2 * BOOTARGS_MAX }> = heapless::String::new();
    let mut dropped = 0usize;
    let mut first_bad: Option<(usize, heapless::String<24>)> = None;
    let mut offset = 0usize;
    let mut too_long = false;
    for word in raw.split(|b| b.is_ascii_whitespace()) {
        let at = offset;
        offset += word.len() + 1;
        if word.is_empty() {
            continue;
        }
        match core::str::from_utf8(word) {
            Ok(w) => {
                let sep = usize::from(!kept.is_empty());
                if kept.len() + sep + w.len() > kept.capacity() {
                    too_long = true;
                    continue;
                }
                if sep == 1 {
                    let _ = kept.push(' ');
                }
                let _ = kept.push_str(w);
            }
            Err(e) => {
                dropped += 1;
                if first_bad.is_none() {
                    let bad_at = e.valid_up_to();
                    // The offending bytes and what follows, up to 4: enough to spot them.
                    let bad_len = word.len() - bad_at;
                    let mut bytes = heapless::String::new();
                    for (k, b) in word[bad_at..].iter().take(bad_len.min(4)).enumerate() {
                        let sep = if k == 0 { "" } else { " " };
                        let _ = write!(Cut(&mut bytes), "{sep}{b:#04x}");
                    }
                    first_bad = Some((at + bad_at, bytes));
                }
            }
        }
    }
    if let Some((at, bytes)) = first_bad {
        notes.push(DtError::new(
            "/chosen",
            "bootargs",
            format_args!(
                "byte {at}: {bytes} is not UTF-8; {dropped} option(s) with such bytes ignored"
            ),
        ));
    }
    let kept_str = kept.as_str();
    let cut = truncate_bootargs(kept_str, BOOTARGS_MAX);
    // Cannot fail: `cut` is at most BOOTARGS_MAX bytes.
    let _ = out.push_str(cut);
    let truncated = (cut.len() < kept_str.len() || too_long).then_some(raw.len());
    (out, truncated)
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
mod tests;
