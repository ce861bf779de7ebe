//! `cargo xtask dt-check FILE.dtb [--board B] [--json]`: the platform the kernel would run on,
//! as the kernel's own DT code (`asym_kernel::dt`, `asym_kernel::board_dt`, compiled for the
//! host) reads it, and with `--board` every difference from that board's crate.
//!
//! With `--board`, the DTB is first given what the board's u-boot writes into it at `booti`
//! (`arch_fixup_fdt` → `fdt_fixup_memory_banks`: `/memory` replaced by u-boot's bank table),
//! because that is the tree the kernel receives; the DTB's own `/memory` is compared with the
//! board crate separately. Differences are printed and make the command fail, as does a tree
//! the kernel cannot run on (with the kernel's reason).

use std::fmt::Write as _;
use std::path::Path;
use std::process::ExitCode;

use anyhow::{Context, Result};
use asym_kernel::board::{BoardConfig, DtMemory, DvfsTransport, OppSource};
use asym_kernel::board_dt::{self, FirmwareDesc};
use asym_kernel::dt::{GicDesc, MemRange, Platform};
use asym_sched::em::EnergyModel;
use asym_sched::topology::{BoardDesc, Topology};
use flat_device_tree::node::FdtNode;
use flat_device_tree::Fdt;
use serde_json::{json, Value};

use crate::boards::Target;

/// What the kernel would run on.
#[derive(Debug)]
pub struct Found {
    pub plat: Platform,
    /// The DT's `operating-points-v2` description (`None`: OPPs from firmware, or none).
    pub sched: Option<BoardDesc>,
    pub fw: FirmwareDesc,
    /// The DTB's own `/memory` before u-boot's fix-up: banks, or all-zero placeholders.
    pub raw_memory: RawMemory,
    /// Whether u-boot's memory fix-up was applied (with `--board`).
    pub fixed_up: bool,
    /// `dynamic-power-coefficient` of each CPU node, as written (logical order).
    pub coefficients: Vec<Option<u32>>,
}

/// `/memory` as the DTB has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RawMemory {
    Banks(Vec<MemRange>),
    /// Every bank has size 0: for the boot loader to fill.
    Placeholder,
    Missing,
}

/// One difference between the DT and the board crate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    pub what: String,
    pub dt: String,
    pub board: String,
}

pub fn run(path: &Path, board: Option<Target>, json_out: bool) -> Result<ExitCode> {
    let dtb = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let config = match board {
        Some(t) => Some(t.config().with_context(|| {
            format!(
                "--board {}: QEMU virt has no board crate to compare with (its DT is QEMU's own)",
                t.name()
            )
        })?),
        None => None,
    };
    let found = match analyse(&dtb, config) {
        Ok(f) => f,
        Err(reason) => {
            if json_out {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&json!({
                        "file": path.display().to_string(),
                        "runnable": false,
                        "reason": reason,
                    }))?
                );
            } else {
                println!(
                    "{}: the kernel cannot run on this device tree: {reason}",
                    path.display()
                );
            }
            return Ok(ExitCode::from(2));
        }
    };
    let diffs = config.map(|c| compare(&found, c)).unwrap_or_default();
    if json_out {
        let mut v = to_json(&found);
        v["file"] = json!(path.display().to_string());
        v["runnable"] = json!(true);
        if let Some(c) = config {
            v["board"] = json!(c.name);
            v["differences"] = json!(diffs
                .iter()
                .map(|d| json!({"what": d.what, "dt": d.dt, "board": d.board}))
                .collect::<Vec<_>>());
        }
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", render(path, &found, config));
        if let Some(c) = config {
            if diffs.is_empty() {
                println!("no difference from board crate {}", c.name);
            } else {
                println!("{} differences from board crate {}:", diffs.len(), c.name);
                for d in &diffs {
                    println!("  {}: DT {} / board {}", d.what, d.dt, d.board);
                }
            }
        }
    }
    Ok(if diffs.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Parses `dtb` as the kernel does (after u-boot's memory fix-up when `board` is given).
/// `Err`: why the kernel cannot run on it.
pub fn analyse(dtb: &[u8], board: Option<&BoardConfig>) -> Result<Found, String> {
    // The kernel validates every blob first; so does everything below (Platform::from_fdt).
    asym_kernel::dt::validate_fdt(dtb).map_err(|e| e.to_string())?;
    let raw_memory = raw_memory(dtb)?;
    let (blob, fixed_up) = match board {
        Some(c) => (
            fixup_memory(dtb, c.uboot.memory_banks).map_err(|e| format!("{e:#}"))?,
            true,
        ),
        None => (dtb.to_vec(), false),
    };
    let plat = Platform::from_fdt(&blob, 0).map_err(|e| {
        if raw_memory == RawMemory::Placeholder && !fixed_up {
            format!(
                "{e} (/memory is a placeholder for the boot loader to fill: --board applies \
                 that board's u-boot banks)"
            )
        } else {
            e.to_string()
        }
    })?;
    let fw = board_dt::parse_firmware(&blob, &plat).map_err(|e| e.to_string())?;
    let sched = board_dt::board_desc(&plat).map_err(|e| e.to_string())?;
    if let Some(b) = &sched {
        Topology::from_board(b).map_err(|e| format!("the DT's scheduling description: {e:?}"))?;
    }
    let fdt = Fdt::new(&blob).map_err(|_| "not a valid FDT".to_string())?;
    let coefficients = cpu_nodes(&fdt)
        .iter()
        .take(plat.cpus.len())
        .map(|n| {
            n.property("dynamic-power-coefficient")
                .and_then(|p| p.value.get(..4))
                .map(|v| u32::from_be_bytes([v[0], v[1], v[2], v[3]]))
        })
        .collect();
    Ok(Found {
        plat,
        sched,
        fw,
        raw_memory,
        fixed_up,
        coefficients,
    })
}

fn cpu_nodes<'b, 'a>(fdt: &'b Fdt<'a>) -> Vec<FdtNode<'b, 'a>> {
    fdt.find_node("/")
        .and_then(|r| r.children().find(|c| c.name == "cpus"))
        .map(|cpus| {
            cpus.children()
                .filter(|n| {
                    n.property("device_type")
                        .and_then(|p| p.as_str())
                        .is_some_and(|s| s.trim_end_matches('\0') == "cpu")
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The DTB's `/memory` as written, telling a placeholder from real banks.
fn raw_memory(dtb: &[u8]) -> Result<RawMemory, String> {
    let fdt = Fdt::new(dtb).map_err(|_| "not a valid FDT".to_string())?;
    let Some(root) = fdt.find_node("/") else {
        return Err("no root node".into());
    };
    let mem: Vec<FdtNode<'_, '_>> = root
        .children()
        .filter(|n| {
            n.property("device_type")
                .and_then(|p| p.as_str())
                .is_some_and(|s| s.trim_end_matches('\0') == "memory")
        })
        .collect();
    if mem.is_empty() {
        return Ok(RawMemory::Missing);
    }
    let regs: Vec<(usize, Option<usize>)> = mem
        .iter()
        .flat_map(|n| n.reg().map(|r| (r.starting_address as usize, r.size)))
        .collect();
    if !regs.is_empty() && regs.iter().all(|(b, s)| *b == 0 && s.unwrap_or(0) == 0) {
        return Ok(RawMemory::Placeholder);
    }
    // Otherwise the banks as the kernel reads them.
    Platform::from_fdt(dtb, 0)
        .map(|p| RawMemory::Banks(p.memory.to_vec()))
        .map_err(|e| e.to_string())
}

/// `dtb` with `/memory`'s `reg` holding `banks`, as u-boot's `fdt_fixup_memory_banks` writes
/// it (`reg` in the root's `#address-cells`/`#size-cells`). The property is replaced in place in
/// the structure block (header sizes and offsets adjusted), so everything else stays
/// byte-identical. A DTB without a `/memory` node with a `reg` is an error (u-boot would
/// create one; the boards' DTs all have it).
pub fn fixup_memory(dtb: &[u8], banks: &[MemRange]) -> Result<Vec<u8>> {
    let fdt = Fdt::new(dtb).map_err(|e| anyhow::anyhow!("not a DTB: {e:?}"))?;
    let root = fdt.find_node("/").context("no root node")?;
    let cells = |name: &str, default: u32| {
        root.property(name)
            .and_then(|p| p.value.get(..4))
            .map(|v| u32::from_be_bytes([v[0], v[1], v[2], v[3]]))
            .unwrap_or(default)
    };
    let (ac, sc) = (cells("#address-cells", 2), cells("#size-cells", 1));
    anyhow::ensure!(
        matches!(ac, 1 | 2) && matches!(sc, 1 | 2),
        "root #address-cells/#size-cells {ac}/{sc}: u-boot writes 1 or 2"
    );
    let mut reg = Vec::new();
    for b in banks {
        for (v, n) in [(b.base as u64, ac), (b.size as u64, sc)] {
            if n == 2 {
                reg.extend_from_slice(&v.to_be_bytes());
            } else {
                reg.extend_from_slice(&(u32::try_from(v)?).to_be_bytes());
            }
        }
    }
    let be = |o: usize| u32::from_be_bytes([dtb[o], dtb[o + 1], dtb[o + 2], dtb[o + 3]]) as usize;
    let (off_struct, off_strings, size_struct) = (be(8), be(12), be(36));
    let strings = &dtb[off_strings..];
    let name_at = |off: usize| {
        let s = &strings[off..];
        &s[..s.iter().position(|&b| b == 0).unwrap_or(s.len())]
    };
    // Walk the structure block: FDT_BEGIN_NODE 1, FDT_END_NODE 2, FDT_PROP 3, FDT_NOP 4, FDT_END 9.
    let end = off_struct + size_struct;
    let (mut i, mut depth, mut in_memory) = (off_struct, 0usize, false);
    let mut memory_reg: Option<(usize, usize, usize)> = None; // (start, end, nameoff)
    let mut memory_is_memory = false;
    while i + 4 <= end {
        let tok = be(i);
        i += 4;
        match tok {
            1 => {
                let name_end = dtb[i..end]
                    .iter()
                    .position(|&b| b == 0)
                    .context("unterminated node name")?;
                let name = &dtb[i..i + name_end];
                depth += 1;
                if depth == 2 {
                    in_memory = name == b"memory" || name.starts_with(b"memory@");
                }
                i = (i + name_end + 1).next_multiple_of(4);
            }
            2 => {
                if depth == 2 && in_memory && memory_is_memory && memory_reg.is_some() {
                    break;
                }
                if depth == 2 {
                    in_memory = false;
                    memory_reg = None;
                    memory_is_memory = false;
                }
                depth = depth.saturating_sub(1);
            }
            3 => {
                let (len, nameoff) = (be(i), be(i + 4));
                let start = i - 4;
                i = (i + 8 + len).next_multiple_of(4);
                if depth == 2 && in_memory {
                    match name_at(nameoff) {
                        b"reg" => memory_reg = Some((start, i, nameoff)),
                        b"device_type" => {
                            memory_is_memory =
                                dtb[start + 12..start + 12 + len].starts_with(b"memory")
                        }
                        _ => {}
                    }
                }
            }
            4 => {}
            9 => break,
            t => anyhow::bail!("unknown structure token {t:#x} at {:#x}", i - 4),
        }
    }
    let (start, stop, nameoff) = match (memory_reg, memory_is_memory) {
        (Some(r), true) => r,
        _ => anyhow::bail!("no /memory node with a `reg` to rewrite"),
    };
    let mut prop = Vec::new();
    prop.extend_from_slice(&3u32.to_be_bytes());
    prop.extend_from_slice(&(reg.len() as u32).to_be_bytes());
    prop.extend_from_slice(&(nameoff as u32).to_be_bytes());
    prop.extend_from_slice(&reg);
    prop.resize(prop.len().next_multiple_of(4), 0);
    let delta = prop.len() as i64 - (stop - start) as i64;
    let mut out = Vec::with_capacity(dtb.len() + prop.len());
    out.extend_from_slice(&dtb[..start]);
    out.extend_from_slice(&prop);
    out.extend_from_slice(&dtb[stop..]);
    let set = |out: &mut Vec<u8>, o: usize, v: usize| {
        out[o..o + 4].copy_from_slice(&(v as u32).to_be_bytes())
    };
    let adj = |v: usize| (v as i64 + delta) as usize;
    set(&mut out, 4, adj(be(4)));
    set(&mut out, 36, adj(size_struct));
    for field in [8usize, 12, 16] {
        let v = be(field);
        if v > start {
            set(&mut out, field, adj(v));
        }
    }
    Ok(out)
}

fn range(r: &MemRange) -> String {
    format!("{:#x}..{:#x}", r.base, r.end())
}

fn mib(size: usize) -> String {
    if size >= 1 << 20 && size.is_multiple_of(1 << 20) {
        format!("{} MiB", size >> 20)
    } else {
        format!("{} KiB", size.div_ceil(1024))
    }
}

fn gic(g: &GicDesc) -> String {
    g.to_string()
}

fn dvfs(t: &DvfsTransport) -> String {
    match t {
        DvfsTransport::Scmi {
            mhu,
            base_doorbell,
            base_shmem,
            perf_doorbell,
            perf_shmem,
        } => {
            let mut s = format!(
                "SCMI: MHU {}, base protocol on channel {} doorbell {} with shmem {}",
                range(mhu),
                base_doorbell.0,
                base_doorbell.1,
                range(base_shmem)
            );
            if let (Some(d), Some(m)) = (perf_doorbell, perf_shmem) {
                let _ = write!(
                    s,
                    ", performance (0x13) on channel {} doorbell {} with shmem {}",
                    d.0,
                    d.1,
                    range(m)
                );
            }
            s
        }
        DvfsTransport::Scpi {
            mhu,
            channel,
            shmem,
        } => format!(
            "SCPI: MHU {} channel {channel}, shmem {}",
            range(mhu),
            range(shmem)
        ),
        DvfsTransport::Hi3660Stub {
            mailbox,
            channel,
            dst_irq,
            ack_irq,
            stub_clk,
        } => format!(
            "Hi3660 stub clock {}: mailbox {} channel {channel} (dst irq {dst_irq}, ack irq {ack_irq})",
            range(stub_clk),
            range(mailbox)
        ),
        DvfsTransport::Hi6220Stub {
            mailbox,
            mailbox_buffer,
            channel,
            dst_irq,
            ack_irq,
            sram,
        } => format!(
            "Hi6220 stub clock: SRAM {}, mailbox {} with buffer {}, slot {channel} (dst irq {dst_irq}, ack irq {ack_irq})",
            range(sram),
            range(mailbox),
            range(mailbox_buffer)
        ),
    }
}

/// The scheduling description to show: the DT's, or with OPPs from firmware the DT's CPUs and
/// clock domains with the board crate's (firmware) tables.
fn effective_sched(f: &Found, board: Option<&BoardConfig>) -> Option<BoardDesc> {
    if let Some(b) = f.sched {
        return Some(b);
    }
    let c = board?;
    (c.opps == OppSource::Firmware).then_some(*c.sched)
}

/// Human-readable report.
pub fn render(path: &Path, f: &Found, board: Option<&BoardConfig>) -> String {
    let mut s = String::new();
    let p = &f.plat;
    let _ = writeln!(
        s,
        "{}: the platform the kernel would run on",
        path.display()
    );
    let _ = writeln!(s, "cpus ({}):", p.cpus.len());
    let max = p.max_dmips_mhz();
    let sched = effective_sched(f, board);
    let topo = sched.as_ref().and_then(|b| Topology::from_board(b).ok());
    for (i, c) in p.cpus.iter().enumerate() {
        let cap = topo
            .as_ref()
            .map(|t| t.capacity_orig(asym_sched::types::CpuId(i as u16)).0)
            .unwrap_or_else(|| c.capacity(max).0);
        let _ = writeln!(
            s,
            "  cpu {i}: MPIDR {:#x} cluster {} capacity-dmips-mhz {} capacity {cap} coefficient {}",
            c.mpidr,
            c.cluster,
            c.capacity_dmips_mhz.map_or("-".into(), |d| d.to_string()),
            f.coefficients
                .get(i)
                .copied()
                .flatten()
                .map_or("-".into(), |d| d.to_string())
        );
    }
    match &f.sched {
        Some(b) => {
            let _ = writeln!(s, "OPPs (operating-points-v2):");
            for (i, pd) in b.perf_domains.iter().enumerate() {
                let cpus: Vec<String> = b
                    .cpus
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| usize::from(c.perf_domain) == i)
                    .map(|(n, _)| n.to_string())
                    .collect();
                let opps: Vec<String> = pd
                    .opps
                    .iter()
                    .map(|o| format!("{}/{}", o.freq.0 / 1000, o.voltage.0 / 1000))
                    .collect();
                let _ = writeln!(
                    s,
                    "  domain {i} ({}) cpus {{{}}}: MHz/mV {} latency {} us",
                    pd.name,
                    cpus.join(", "),
                    opps.join(" "),
                    pd.transition_latency_ns / 1000
                );
            }
        }
        None => {
            let _ = writeln!(
                s,
                "OPPs: from firmware (no operating-points-v2); clock domains:"
            );
            for d in &f.fw.clock_domains {
                let cpus: Vec<String> = d.cpus.iter().map(|c| c.to_string()).collect();
                let _ = writeln!(
                    s,
                    "  <&{} {}> cpus {{{}}}",
                    d.provider,
                    d.index,
                    cpus.join(", ")
                );
            }
        }
    }
    match (&sched, &topo) {
        (Some(b), Some(t)) => match EnergyModel::from_topology(b, t) {
            Ok(em) => {
                let _ = writeln!(
                    s,
                    "energy model{}:",
                    if f.sched.is_none() {
                        " (the board crate's firmware OPP tables)"
                    } else {
                        ""
                    }
                );
                for i in 0..em.nr_perf_domains() {
                    match em.pd(i) {
                        Some(pd) => {
                            let states: Vec<String> = pd
                                .states()
                                .iter()
                                .map(|st| {
                                    format!(
                                        "{}MHz {}uW perf {} cost {}{}",
                                        st.frequency.0 / 1000,
                                        st.power.0,
                                        st.performance.0,
                                        st.cost,
                                        if st.inefficient { " (inefficient)" } else { "" }
                                    )
                                })
                                .collect();
                            let _ = writeln!(s, "  domain {i}: {}", states.join(", "));
                        }
                        None => {
                            let _ =
                                writeln!(s, "  domain {i}: none (no dynamic-power-coefficient)");
                        }
                    }
                }
                let _ = writeln!(
                    s,
                    "  EAS possible: {}",
                    if t.eas_possible() {
                        "yes"
                    } else {
                        "no (symmetric)"
                    }
                );
            }
            Err(e) => {
                let _ = writeln!(s, "energy model: none ({e:?})");
            }
        },
        _ => {
            let _ = writeln!(s, "energy model: none (no OPP tables known)");
        }
    }
    let _ = writeln!(s, "gic: {}", gic(&p.gic));
    let _ = writeln!(
        s,
        "uart: PL011 at {:#x}, INTID {} (from /chosen/stdout-path)",
        p.uart.base, p.uart.intid
    );
    let _ = writeln!(
        s,
        "timer: INTIDs phys {} virt {}, frequency {}",
        p.timer.el1_phys_intid,
        p.timer.el1_virt_intid,
        match p.timer.freq_hz {
            Some(hz) => format!("{hz} Hz (clock-frequency)"),
            None => match board {
                Some(c) => format!(
                    "from CNTFRQ_EL0 (the board's firmware sets {} Hz)",
                    c.timer.cntfrq_hz
                ),
                None => "from CNTFRQ_EL0".into(),
            },
        }
    );
    let _ = writeln!(
        s,
        "memory{}: {}",
        if f.fixed_up {
            " (as u-boot writes it at booti)"
        } else {
            ""
        },
        p.memory
            .iter()
            .map(|m| format!("{} ({})", range(m), mib(m.size)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if f.fixed_up {
        let _ = writeln!(
            s,
            "memory in the DTB: {}",
            match &f.raw_memory {
                RawMemory::Banks(b) => b.iter().map(range).collect::<Vec<_>>().join(", "),
                RawMemory::Placeholder =>
                    "a placeholder (reg = <0 0 0 0>) for the boot loader".into(),
                RawMemory::Missing => "none".into(),
            }
        );
    }
    let _ = writeln!(s, "reserved (/memreserve/, /reserved-memory):");
    if p.reserved.is_empty() {
        let _ = writeln!(s, "  none in the DT");
    }
    for r in &p.reserved {
        let _ = writeln!(
            s,
            "  {} ({}){}",
            range(&r.range),
            mib(r.range.size),
            if r.no_map { " no-map" } else { "" }
        );
    }
    for n in &p.notes.list {
        let _ = writeln!(s, "note: {n}");
    }
    if p.notes.dropped > 0 {
        let _ = writeln!(s, "note: {} more", p.notes.dropped);
    }
    if let Some(c) = board {
        let _ = writeln!(s, "firmware carve-outs the DT does not list (board crate):");
        for r in c.carve_outs {
            let _ = writeln!(
                s,
                "  {} {} ({}){}",
                r.name,
                range(&r.range),
                mib(r.range.size),
                if r.no_map { " not mapped" } else { "" }
            );
        }
    }
    let _ = writeln!(s, "psci: {:?}", p.psci.conduit);
    let _ = writeln!(s, "idle states:");
    if f.fw.idle.states.is_empty() {
        let _ = writeln!(s, "  none");
    }
    for st in &f.fw.idle.states {
        let cpus: Vec<String> =
            f.fw.idle
                .per_cpu
                .iter()
                .enumerate()
                .filter(|(_, l)| {
                    l.iter()
                        .any(|&i| f.fw.idle.states[usize::from(i)].name == st.name)
                })
                .map(|(c, _)| c.to_string())
                .collect();
        let _ = writeln!(
            s,
            "  {}: psci-suspend-param {:#x}, entry/exit/min-residency {}/{}/{} us{}, cpus {{{}}}",
            st.name,
            st.psci_suspend_param,
            st.entry_latency_us,
            st.exit_latency_us,
            st.min_residency_us,
            if st.local_timer_stop {
                ", local-timer-stop"
            } else {
                ""
            },
            cpus.join(", ")
        );
    }
    let _ = writeln!(
        s,
        "dvfs transport: {}",
        f.fw.dvfs.as_ref().map_or("none found".into(), dvfs)
    );
    s
}

fn to_json(f: &Found) -> Value {
    let p = &f.plat;
    let ranges = |v: &[MemRange]| -> Vec<Value> {
        v.iter()
            .map(|r| json!({"base": r.base, "size": r.size}))
            .collect()
    };
    json!({
        "cpus": p.cpus.iter().enumerate().map(|(i, c)| json!({
            "mpidr": c.mpidr,
            "cluster": c.cluster,
            "capacity_dmips_mhz": c.capacity_dmips_mhz,
            "dynamic_power_coefficient": f.coefficients.get(i).copied().flatten(),
        })).collect::<Vec<_>>(),
        "opps": match &f.sched {
            Some(b) => json!(b.perf_domains.iter().enumerate().map(|(i, pd)| json!({
                "name": pd.name,
                "cpus": b.cpus.iter().enumerate().filter(|(_, c)| usize::from(c.perf_domain) == i).map(|(n, _)| n).collect::<Vec<_>>(),
                "opps_khz_uv": pd.opps.iter().map(|o| [o.freq.0, o.voltage.0]).collect::<Vec<_>>(),
                "latency_ns": pd.transition_latency_ns,
            })).collect::<Vec<_>>()),
            None => json!("from firmware"),
        },
        "clock_domains": f.fw.clock_domains.iter().map(|d| json!({"provider": d.provider, "index": d.index, "cpus": d.cpus})).collect::<Vec<_>>(),
        "gic": gic(&p.gic),
        "uart": {"base": p.uart.base, "intid": p.uart.intid},
        "timer": {"el1_phys_intid": p.timer.el1_phys_intid, "el1_virt_intid": p.timer.el1_virt_intid, "clock_frequency": p.timer.freq_hz},
        "memory": ranges(&p.memory),
        "memory_fixed_up_by_uboot": f.fixed_up,
        "reserved": p.reserved.iter().map(|r| json!({"base": r.range.base, "size": r.range.size, "no_map": r.no_map})).collect::<Vec<_>>(),
        "notes": p.notes.list.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
        "psci": format!("{:?}", p.psci.conduit),
        "idle_states": f.fw.idle.states.iter().map(|s| json!({
            "name": s.name, "psci_suspend_param": s.psci_suspend_param,
            "entry_latency_us": s.entry_latency_us, "exit_latency_us": s.exit_latency_us,
            "min_residency_us": s.min_residency_us, "local_timer_stop": s.local_timer_stop,
        })).collect::<Vec<_>>(),
        "cpu_idle_states": f.fw.idle.per_cpu,
        "dvfs": f.fw.dvfs.as_ref().map(dvfs),
    })
}

/// Every difference between what the kernel found and the board crate.
pub fn compare(f: &Found, c: &BoardConfig) -> Vec<Difference> {
    let mut d = Vec::new();
    let mut diff = |what: String, dt: String, board: String| {
        if dt != board {
            d.push(Difference { what, dt, board });
        }
    };
    let p = &f.plat;
    let b = c.sched;
    // CPUs.
    diff(
        "number of CPUs".into(),
        p.cpus.len().to_string(),
        b.cpus.len().to_string(),
    );
    for (i, (dc, bc)) in p.cpus.iter().zip(b.cpus).enumerate() {
        diff(
            format!("cpu {i} MPIDR"),
            format!("{:#x}", dc.mpidr),
            format!("{:#x}", bc.mpidr),
        );
        diff(
            format!("cpu {i} cluster"),
            dc.cluster.to_string(),
            bc.cluster.to_string(),
        );
        diff(
            format!("cpu {i} capacity-dmips-mhz"),
            format!("{:?}", dc.capacity_dmips_mhz),
            format!("{:?}", bc.capacity_dmips_mhz),
        );
        // A coefficient the DT writes must be the board's; one it leaves out is the domain's
        // first CPU's (checked below), as Linux's energy model takes it.
        if let Some(Some(coef)) = f.coefficients.get(i) {
            diff(
                format!("cpu {i} dynamic-power-coefficient"),
                coef.to_string(),
                format!("{}", bc.dynamic_power_coefficient.map_or(0, |v| v)),
            );
        }
    }
    // Perf domains: membership as partitions of the logical CPUs.
    let board_domains: Vec<Vec<usize>> = (0..b.perf_domains.len())
        .map(|pd| {
            b.cpus
                .iter()
                .enumerate()
                .filter(|(_, c)| usize::from(c.perf_domain) == pd)
                .map(|(i, _)| i)
                .collect()
        })
        .collect();
    let dt_domains: Vec<Vec<usize>> = match &f.sched {
        Some(s) => (0..s.perf_domains.len())
            .map(|pd| {
                s.cpus
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| usize::from(c.perf_domain) == pd)
                    .map(|(i, _)| i)
                    .collect()
            })
            .collect(),
        None => f.fw.clock_domains.iter().map(|d| d.cpus.clone()).collect(),
    };
    diff(
        "performance domains (CPUs)".into(),
        format!("{dt_domains:?}"),
        format!("{board_domains:?}"),
    );
    for (pd, cpus) in board_domains.iter().enumerate() {
        if let Some(&first) = cpus.first() {
            diff(
                format!("domain {pd} energy-model coefficient (cpu {first})"),
                format!("{:?}", f.coefficients.get(first).copied().flatten()),
                format!("{:?}", b.cpus[first].dynamic_power_coefficient),
            );
        }
    }
    match (&f.sched, c.opps) {
        (Some(s), OppSource::Dt) => {
            for (pd, (dp, bp)) in s.perf_domains.iter().zip(b.perf_domains).enumerate() {
                let fmt = |o: &[asym_sched::topology::OppDesc]| {
                    o.iter()
                        .map(|o| format!("{}kHz/{}uV", o.freq.0, o.voltage.0))
                        .collect::<Vec<_>>()
                        .join(" ")
                };
                diff(format!("domain {pd} OPPs"), fmt(dp.opps), fmt(bp.opps));
                diff(
                    format!("domain {pd} transition latency"),
                    format!("{} ns", dp.transition_latency_ns),
                    format!("{} ns", bp.transition_latency_ns),
                );
            }
        }
        (None, OppSource::Firmware) => {}
        (dt, board) => diff(
            "OPP source".into(),
            if dt.is_some() {
                "operating-points-v2".into()
            } else {
                "none (firmware)".into()
            },
            format!("{board:?}"),
        ),
    }
    // Devices and firmware interfaces.
    diff("GIC".into(), gic(&p.gic), gic(&c.gic));
    diff(
        "console UART (stdout-path)".into(),
        format!("{:#x} INTID {}", p.uart.base, p.uart.intid),
        format!("{:#x} INTID {}", c.console.uart_base, c.console.uart_intid),
    );
    diff(
        "timer PPIs (phys, virt)".into(),
        format!("{}, {}", p.timer.el1_phys_intid, p.timer.el1_virt_intid),
        format!("{}, {}", c.timer.el1_phys_intid, c.timer.el1_virt_intid),
    );
    diff(
        "timer clock-frequency".into(),
        format!("{:?}", p.timer.freq_hz),
        "None".into(),
    );
    diff(
        "PSCI conduit".into(),
        format!("{:?}", p.psci.conduit),
        format!("{:?}", c.psci),
    );
    // Memory.
    let fmt_banks = |v: &[MemRange]| v.iter().map(range).collect::<Vec<_>>().join(", ");
    diff(
        "/memory in the DTB".into(),
        match &f.raw_memory {
            RawMemory::Banks(v) => fmt_banks(v),
            RawMemory::Placeholder => "placeholder".into(),
            RawMemory::Missing => "missing".into(),
        },
        match c.dt_memory {
            DtMemory::Banks(v) => fmt_banks(v),
            DtMemory::Placeholder => "placeholder".into(),
        },
    );
    diff(
        "memory the kernel gets".into(),
        fmt_banks(&p.memory),
        fmt_banks(c.uboot.memory_banks),
    );
    let fmt_rsv = |v: Vec<(MemRange, bool)>| {
        v.iter()
            .map(|(r, nm)| format!("{}{}", range(r), if *nm { " no-map" } else { "" }))
            .collect::<Vec<_>>()
            .join(", ")
    };
    diff(
        "reserved regions".into(),
        fmt_rsv(p.reserved.iter().map(|r| (r.range, r.no_map)).collect()),
        fmt_rsv(c.dt_reserved.iter().map(|r| (r.range, r.no_map)).collect()),
    );
    // Idle states.
    let fmt_idle = |v: Vec<(String, u32, u32, u32, u32, bool)>| format!("{v:?}");
    diff(
        "idle states".into(),
        fmt_idle(
            f.fw.idle
                .states
                .iter()
                .map(|s| {
                    (
                        s.name.clone(),
                        s.psci_suspend_param,
                        s.entry_latency_us,
                        s.exit_latency_us,
                        s.min_residency_us,
                        s.local_timer_stop,
                    )
                })
                .collect(),
        ),
        fmt_idle(
            c.idle_states
                .iter()
                .map(|s| {
                    (
                        s.name.to_string(),
                        s.psci_suspend_param,
                        s.entry_latency_us,
                        s.exit_latency_us,
                        s.min_residency_us,
                        s.local_timer_stop,
                    )
                })
                .collect(),
        ),
    );
    diff(
        "cpu-idle-states per CPU".into(),
        format!("{:?}", f.fw.idle.per_cpu),
        format!(
            "{:?}",
            c.cpu_idle_states
                .iter()
                .map(|l| l.to_vec())
                .collect::<Vec<_>>()
        ),
    );
    // DVFS transport: the DT's must be one the board crate knows.
    let dt_t = f.fw.dvfs;
    if !dt_t.is_some_and(|t| c.dvfs.contains(&t)) {
        d.push(Difference {
            what: "DVFS transport".into(),
            dt: dt_t.as_ref().map_or("none".into(), dvfs),
            board: c.dvfs.iter().map(dvfs).collect::<Vec<_>>().join(" | "),
        });
    }
    d
}

#[cfg(test)]
mod tests {
    //! Oracle: the hand-written `kernel/tests/dtb/firmware-like.dts`; the board below states
    //! what that source says, so any field changed must show as a difference.
    use super::*;
    use asym_kernel::board::{
        BootLayout, Console, EndAction, EndPolicy, FdtSource, IdleState, Region, Timer, UBoot,
    };
    use asym_kernel::dt::Conduit;
    use asym_sched::topology::{CpuDesc, OppDesc, PerfDomainDesc};
    use asym_sched::types::{Khz, MicroVolt};

    fn fixture() -> Vec<u8> {
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../kernel/tests/dtb/firmware-like.dtb"
        ))
        .unwrap()
    }

    const fn r(base: usize, size: usize) -> MemRange {
        MemRange { base, size }
    }
    const fn opp(mhz: u32, mv: u32) -> OppDesc {
        OppDesc {
            freq: Khz(mhz * 1000),
            voltage: MicroVolt(mv * 1000),
        }
    }
    const fn cpu(mpidr: u64, cluster: u16, pd: u16, dmips: u32, coeff: u32) -> CpuDesc {
        CpuDesc {
            mpidr,
            cluster,
            perf_domain: pd,
            capacity_dmips_mhz: Some(dmips),
            dynamic_power_coefficient: Some(coeff),
            core: "x",
        }
    }
    const SCHED: BoardDesc = BoardDesc {
        name: "fixture",
        cpus: &[
            cpu(0, 0, 0, 500, 100),
            cpu(1, 0, 0, 500, 100),
            cpu(0x100, 1, 1, 1024, 400),
        ],
        perf_domains: &[
            PerfDomainDesc {
                name: "little",
                opps: &[opp(500, 800), opp(1000, 900)],
                transition_latency_ns: 100_000,
            },
            PerfDomainDesc {
                name: "big",
                opps: &[opp(1000, 800), opp(2000, 1000)],
                transition_latency_ns: 100_000,
            },
        ],
    };
    const BANKS: &[MemRange] = &[r(0x4000_0000, 0x2000_0000), r(0x8_8000_0000, 0x4000_0000)];
    const BOARD: BoardConfig = BoardConfig {
        name: "fixture",
        sched: &SCHED,
        opps: OppSource::Dt,
        uboot: UBoot {
            layout: BootLayout {
                dram0_start: 0x4000_0000,
                kernel_addr_r: 0x4008_0000,
                fdt_addr_r: 0x4800_0000,
                scriptaddr: None,
                ramdisk_addr_r: None,
                link_base: 0x4008_0000,
            },
            boot_targets: &[],
            fdt: FdtSource::Control,
            memory_banks: BANKS,
        },
        dt_memory: DtMemory::Banks(BANKS),
        dt_reserved: &[
            Region {
                range: r(0x40f0_0000, 0x1000),
                name: "/memreserve/",
                no_map: false,
            },
            Region {
                range: r(0x4100_0000, 0x10_0000),
                name: "trace@41000000",
                no_map: false,
            },
            Region {
                range: r(0x5f00_0000, 0x100_0000),
                name: "secure@5f000000",
                no_map: true,
            },
        ],
        carve_outs: &[],
        console: Console {
            uart_base: 0x1c09_0000,
            uart_intid: 37,
            alias: "serial0",
            clock_hz: 24_000_000,
            baud: 115_200,
        },
        gic: GicDesc::V2 {
            gicd: r(0x2f00_0000, 0x1000),
            gicc: r(0x2c00_0000, 0x2000),
        },
        timer: Timer {
            el1_phys_intid: 30,
            el1_virt_intid: 27,
            cntfrq_hz: 24_000_000,
        },
        psci: Conduit::Smc,
        idle_states: &[
            IdleState {
                name: "cpu-sleep",
                psci_suspend_param: 0x1_0000,
                entry_latency_us: 100,
                exit_latency_us: 200,
                min_residency_us: 500,
                local_timer_stop: true,
            },
            IdleState {
                name: "cluster-sleep",
                psci_suspend_param: 0x101_0000,
                entry_latency_us: 300,
                exit_latency_us: 400,
                min_residency_us: 1500,
                local_timer_stop: false,
            },
        ],
        cpu_idle_states: &[&[0, 1], &[0], &[0, 1]],
        dvfs: &[DvfsTransport::Scmi {
            mhu: r(0x2b1f_0000, 0x1000),
            base_doorbell: (0, 0),
            base_shmem: r(0x2e00_0000, 0x80),
            perf_doorbell: Some((1, 0)),
            perf_shmem: Some(r(0x2e00_0100, 0x80)),
        }],
        end: EndPolicy {
            success: EndAction::SystemOff,
            failure: EndAction::Halt,
        },
    };

    fn diffs(b: &BoardConfig) -> Vec<String> {
        let f = analyse(&fixture(), Some(b)).unwrap();
        compare(&f, b).into_iter().map(|d| d.what).collect()
    }

    #[test]
    fn the_matching_board_has_no_difference() {
        assert_eq!(diffs(&BOARD), Vec::<String>::new());
    }

    #[test]
    fn each_changed_field_is_a_difference() {
        let mut b = BOARD;
        b.gic = GicDesc::V2 {
            gicd: r(0x2f00_0000, 0x1000),
            gicc: r(0x2c01_0000, 0x2000),
        };
        assert_eq!(diffs(&b), ["GIC"]);
        let mut b = BOARD;
        b.psci = Conduit::Hvc;
        assert_eq!(diffs(&b), ["PSCI conduit"]);
        let mut b = BOARD;
        b.dt_reserved = &BOARD.dt_reserved[..2];
        assert_eq!(diffs(&b), ["reserved regions"]);
        let mut b = BOARD;
        b.cpu_idle_states = &[&[0, 1], &[0, 1], &[0, 1]];
        assert_eq!(diffs(&b), ["cpu-idle-states per CPU"]);
        let mut b = BOARD;
        b.dvfs = &[];
        assert_eq!(diffs(&b), ["DVFS transport"]);
        let mut b = BOARD;
        b.opps = OppSource::Firmware;
        assert_eq!(diffs(&b), ["OPP source"]);
        let mut b = BOARD;
        b.dt_memory = DtMemory::Placeholder;
        assert_eq!(diffs(&b), ["/memory in the DTB"]);
        let mut sched = SCHED;
        let mut cpus = SCHED.cpus.to_vec();
        cpus[2].dynamic_power_coefficient = Some(450);
        sched.cpus = Box::leak(cpus.into_boxed_slice());
        let mut b = BOARD;
        b.sched = Box::leak(Box::new(sched));
        assert_eq!(
            diffs(&b),
            [
                "cpu 2 dynamic-power-coefficient",
                "domain 1 energy-model coefficient (cpu 2)"
            ]
        );
    }

    /// u-boot's fix-up: the kernel sees u-boot's banks, the rest of the tree unchanged.
    #[test]
    fn memory_fixup_rewrites_only_memory() {
        let dtb = fixture();
        let banks = [
            r(0x4000_0000, 0x1000_0000),
            r(0x6000_0000, 0x1000),
            r(0x7000_0000, 0x2000_0000),
        ];
        let out = fixup_memory(&dtb, &banks).unwrap();
        let before = Platform::from_fdt(&dtb, 0).unwrap();
        let after = Platform::from_fdt(&out, 0).unwrap();
        let fdt = Fdt::new(&out).unwrap();
        let _ = fdt;
        assert_eq!(after.memory.as_slice(), banks);
        assert_eq!(after.reserved, before.reserved, "/memreserve/ kept");
        assert_eq!(
            Platform {
                memory: before.memory.clone(),
                dtb: before.dtb,
                ..after.clone()
            },
            before
        );
        let fw_before = board_dt::parse_firmware(&dtb, &before).unwrap();
        let fw_after = board_dt::parse_firmware(&out, &after).unwrap();
        assert_eq!(fw_after, fw_before);
    }

    #[test]
    fn a_placeholder_memory_is_a_reason_not_a_panic() {
        let mut dtb = fixture();
        let needle = [0u8, 0, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0];
        let pos = dtb.windows(16).position(|w| w == needle).unwrap();
        dtb[pos + 4] = 0;
        dtb[pos + 12] = 0;
        let n = [0u8, 0, 0, 8, 0x80, 0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0];
        let pos = dtb.windows(16).position(|w| w == n).unwrap();
        dtb[pos..pos + 16].fill(0);
        let reason = analyse(&dtb, None).unwrap_err();
        assert!(reason.contains("placeholder"), "{reason}");
        // With a board, u-boot's banks go in first and the tree runs.
        let f = analyse(&dtb, Some(&BOARD)).unwrap();
        assert_eq!(f.raw_memory, RawMemory::Placeholder);
        assert_eq!(f.plat.memory.as_slice(), BANKS);
        assert!(analyse(b"garbage", None).is_err());
    }
}
