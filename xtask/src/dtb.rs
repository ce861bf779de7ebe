//! Device trees of the emulated heterogeneous boards (`--board qemu-juno-r2|qemu-hikey960|
//! qemu-hikey|virt`).
//!
//! QEMU's `virt` machine has identical vCPUs; the heterogeneity is described to the kernel the
//! way a real board describes it (`capacity-dmips-mhz`,
//! `dynamic-power-coefficient`, OPP tables). We ask QEMU for its own DTB (`-machine dumpdtb=FILE` with the run's `-M`/`-smp`/`-m`
//! flags), copy every node and property unchanged, and add to each CPU node
//! `capacity-dmips-mhz`, `dynamic-power-coefficient` and `operating-points-v2` (a phandle to
//! one `operating-points-v2` table per performance domain, `opp-shared`, children with
//! `opp-hz`/`opp-microvolt`/`clock-latency-ns`, as Linux's `Documentation/devicetree/bindings/
//! opp/opp-v2.yaml`), and replace `/cpus/cpu-map` with the board's clusters. Each cluster also
//! gets its shared L2 as the real boards' DTs describe it (mainline `juno-r2.dts`,
//! `hi3660.dtsi`, `hi6220.dtsi`: a `compatible = "cache"` node under `/cpus`, level 2,
//! unified, named by each of its CPUs' `next-level-cache`). Linux finds its scheduler's
//! cluster level (`MC`, over the CPUs sharing a last-level cache) only from those: without
//! them Linux 6.1 on QEMU builds a single 6-CPU domain for Juno r2, so `bench --vs-linux`
//! would compare asym's per-cluster balancing with a kernel that has none. The numbers come
//! from `asym_boards`, whose tables cite the real boards' DTs.
//!
//! CPU `reg` (MPIDR) values stay QEMU's: PSCI `CPU_ON` must find the vCPUs by them. Logical CPU
//! n of the emulated board is `board.cpus[n]` (Juno r2: CPUs 0–1 big, 2–5 LITTLE). With fewer
//! vCPUs than the board has, the first `smp` CPUs of the board are described.
//!
//! The DVFS firmware stand-in (`--board qemu-*`): QEMU gets one vCPU more than the board has
//! CPUs; its node is left out of `/cpus` and named instead by an `asym,fw-standin` node
//! (`cpu` = its MPIDR, `doorbell-sgi`), on which the kernel runs the board's firmware model
//! (`kernel/src/drivers/fw_standin.rs`). The top 2 MiB of RAM become the firmware's carve-out
//! (a `/reserved-memory` `no-map` region: QEMU's `-kernel` loader and u-boot both rewrite
//! `/memory`, so a hole there would not survive), holding the board's DVFS transport at its
//! real layout: Juno r2's MHU (`arm,mhu-doorbell`) and SRAM with the four
//! `arm,scmi-shmem` channels and `/firmware/scmi` with `protocol@13` (mainline
//! `juno-scmi.dtsi`); HiKey960's `hisilicon,hi3660-mbox` and `hi3660-stub-clk` at `+0x500` of
//! the same page (`hi3660.dtsi`); HiKey's SRAM, IPC registers, DRAM mailbox buffer and
//! `hi6220-stub-clk` (`hi6220.dtsi`). Each CPU gets `clocks = <&provider domain>`. GICv2
//! addresses at most 8 CPU interfaces, so an 8-CPU board under GICv2 gets no stand-in (and
//! runs the emulated driver).
//!
//! Reading uses `flat_device_tree` (the kernel's DT crate), writing `vm-fdt`.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use asym_sched::topology::BoardDesc;
use flat_device_tree::node::FdtNode;
use flat_device_tree::Fdt;
use vm_fdt::FdtWriter;

use crate::cmd;
use crate::qemu::{Boot, Machine};

/// The board a QEMU run emulates.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Board {
    /// Juno r2 (2× A72 + 4× A53, two cpufreq domains), 6 vCPUs. The default.
    QemuJunoR2,
    /// HiKey960 (4× A53 + 4× A73), 8 vCPUs.
    QemuHikey960,
    /// HiKey (8× A53, one domain, symmetric), 8 vCPUs.
    QemuHikey,
    /// QEMU's own DT: symmetric, no OPP tables, so no cpufreq.
    Virt,
}

impl Board {
    /// The board data the DT is built from (`None` for plain `virt`).
    pub fn desc(self) -> Option<&'static BoardDesc> {
        match self {
            Board::QemuJunoR2 => Some(&asym_boards::JUNO_R2),
            Board::QemuHikey960 => Some(&asym_boards::HIKEY960),
            Board::QemuHikey => Some(&asym_boards::HIKEY),
            Board::Virt => None,
        }
    }

    /// The number of vCPUs the board has (`None`: any).
    pub fn nr_cpus(self) -> Option<u32> {
        self.desc().map(|d| d.cpus.len() as u32)
    }

    pub fn name(self) -> &'static str {
        match self {
            Board::QemuJunoR2 => "qemu-juno-r2",
            Board::QemuHikey960 => "qemu-hikey960",
            Board::QemuHikey => "qemu-hikey",
            Board::Virt => "virt",
        }
    }

    /// The DVFS firmware the board's stand-in runs (`None` for plain `virt`).
    pub fn firmware(self) -> Option<Firmware> {
        match self {
            Board::QemuJunoR2 => Some(Firmware::JunoScmi),
            Board::QemuHikey960 => Some(Firmware::Hi3660),
            Board::QemuHikey => Some(Firmware::Hi6220),
            Board::Virt => None,
        }
    }
}

/// The DVFS firmware a stand-in runs, and the transport its DT nodes describe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Firmware {
    /// Juno r2's SCP: SCMI over the MHU and shared SRAM.
    JunoScmi,
    /// HiKey960's LPM3: the Hi3660 stub clock over the Hi3660 mailbox.
    Hi3660,
    /// HiKey's MCU: the Hi6220 stub clock over SRAM and the Hi6220 mailbox.
    Hi6220,
}

/// The SGI the stand-in's doorbell raises (SGIs 0–3 are the kernel's IPIs).
pub const STANDIN_DOORBELL_SGI: u32 = 15;
/// The firmware carve-out at the top of RAM.
pub const STANDIN_CARVE_OUT: u64 = 2 << 20;

/// Whether machine `m` has room for the stand-in's vCPU (GICv2: at most 8 CPU interfaces).
pub fn standin_fits(m: &Machine) -> bool {
    m.gic == 3 || m.smp < 8
}

/// Writes the board's DTB for machine `m` into `dir` and returns its path; `None` for `virt`
/// (QEMU's own DT is used). Passed with `-dtb`, it reaches the kernel directly (`-kernel`) or
/// through u-boot (`-bios`: u-boot's control DT, handed on by `booti ... ${fdtcontroladdr}`).
/// When the board's firmware stand-in fits ([`standin_fits`]), `m` gets its extra vCPU.
pub fn board_dtb(board: Board, m: &mut Machine, dir: &Path) -> Result<Option<PathBuf>> {
    board_dtb_of_cpus(board, m, dir, None)
}

/// As [`board_dtb`], keeping only the vCPUs whose MPIDR is in `mpidrs` (in DT order), so a
/// machine with more vCPUs than the board can present the board's CPUs at chosen MPIDRs: QEMU
/// `virt` numbers GICv3 vCPUs 16 to an Aff1 cluster, so `-smp 20` keeping 0x0, 0x1 and
/// 0x100..=0x103 gives Juno r2's MPIDRs (`juno-r2.dts`). The other vCPUs stay powered off
/// (nothing calls PSCI `CPU_ON` for them). No firmware stand-in then (its vCPU would be one of
/// those left out): the emulated driver runs.
pub fn board_dtb_of_cpus(
    board: Board,
    m: &mut Machine,
    dir: &Path,
    mpidrs: Option<&[u64]>,
) -> Result<Option<PathBuf>> {
    let Some(desc) = board.desc() else {
        return Ok(None);
    };
    let fw = board
        .firmware()
        .filter(|_| mpidrs.is_none() && standin_fits(m));
    if fw.is_some() {
        m.smp += 1;
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let tag = format!(
        "{}-gic{}{}-smp{}-{}M{}{}",
        board.name(),
        m.gic,
        if m.el2 { "-el2" } else { "" },
        m.smp,
        m.memory_mib,
        if mpidrs.is_some() { "-mpidrs" } else { "" },
        if fw.is_some() { "-fw" } else { "" }
    );
    let raw = dir.join(format!("qemu-{tag}.dtb"));
    let out = dir.join(format!("{tag}.dtb"));
    let dump = Machine {
        icount: None,
        gdb: false,
        append: String::new(),
        boot: Boot::Direct {
            image: PathBuf::new(),
        },
        extra: Vec::new(),
        ..m.clone()
    };
    let mut c = dump.command();
    // Drop `-kernel ''`: dumpdtb needs no image.
    let args: Vec<std::ffi::OsString> = c.get_args().map(|a| a.to_os_string()).collect();
    let mut c2 = std::process::Command::new(c.get_program());
    let mut skip = false;
    for a in &args {
        if skip {
            skip = false;
            continue;
        }
        if a == "-kernel" {
            skip = true;
            continue;
        }
        c2.arg(a);
    }
    c = c2;
    let mut opt = std::ffi::OsString::from("dumpdtb=");
    opt.push(&raw);
    c.arg("-machine").arg(opt);
    let st = cmd::status(&mut c)?;
    if !st.success() {
        bail!("QEMU could not dump its DTB ({st}): {}", cmd::render(&c));
    }
    let mut bytes = std::fs::read(&raw).with_context(|| format!("reading {}", raw.display()))?;
    if let Some(keep) = mpidrs {
        bytes = keep_cpus(&bytes, keep)?;
    }
    let patched = patch(&bytes, desc, fw).with_context(|| format!("patching {}", raw.display()))?;
    std::fs::write(&out, patched).with_context(|| format!("writing {}", out.display()))?;
    Ok(Some(out))
}

/// `dtb` without the CPU nodes whose MPIDR (`reg`) is not in `keep`; every MPIDR of `keep`
/// must be there.
fn keep_cpus(dtb: &[u8], keep: &[u64]) -> Result<Vec<u8>> {
    let fdt = Fdt::new(dtb).map_err(|e| anyhow::anyhow!("not a DTB: {e:?}"))?;
    let cpus = fdt.find_node("/cpus").context("no /cpus")?;
    let mut found = Vec::new();
    let mut edits = Vec::new();
    for n in cpus.children().filter(|n| is_cpu(*n)) {
        let reg = n.property("reg").context("cpu without reg")?.value;
        let mpidr = reg.chunks_exact(4).fold(0u64, |a, c| {
            (a << 32) | u64::from(u32::from_be_bytes(c.try_into().unwrap()))
        });
        if keep.contains(&mpidr) {
            found.push(mpidr);
        } else {
            edits.push(Edit::DeleteNode {
                path: format!("/cpus/{}", n.name),
            });
        }
    }
    if let Some(missing) = keep.iter().find(|m| !found.contains(m)) {
        bail!("QEMU's DTB has no vCPU with MPIDR {missing:#x} (found {found:x?})");
    }
    edit(dtb, &edits)
}

/// QEMU's DTB `dtb` with `board`'s scheduling properties added and, with `fw`, the firmware
/// stand-in on QEMU's last vCPU (see the module docs).
pub fn patch(dtb: &[u8], board: &BoardDesc, fw: Option<Firmware>) -> Result<Vec<u8>> {
    let fdt = Fdt::new(dtb).map_err(|e| anyhow::anyhow!("not a DTB: {e:?}"))?;
    let root = fdt.find_node("/").context("no root node")?;
    let mut max_phandle = 0u32;
    for n in fdt.all_nodes() {
        if let Some(p) = n.property("phandle").and_then(|p| p.as_usize()) {
            max_phandle = max_phandle.max(p as u32);
        }
    }
    let mut ctx = Ctx {
        board,
        cpus_seen: 0,
        cpu_phandles: Vec::new(),
        next_phandle: max_phandle + 1,
        opp_phandles: Vec::new(),
        l2_phandles: Vec::new(),
        standin: None,
    };
    if let Some(fw) = fw {
        ctx.standin = Some(standin_of(&fdt, fw, &mut ctx)?);
    }
    ctx.opp_phandles = (0..board.perf_domains.len())
        .map(|_| ctx.alloc_phandle())
        .collect();
    let mut clusters: Vec<u16> = board.cpus.iter().map(|c| c.cluster).collect();
    clusters.sort_unstable();
    clusters.dedup();
    ctx.l2_phandles = clusters
        .into_iter()
        .map(|cl| (cl, ctx.alloc_phandle()))
        .collect();
    let mut w = FdtWriter::new().map_err(|e| anyhow::anyhow!("{e}"))?;
    copy_node(&mut w, root, "", &mut ctx)?;
    if ctx.standin.is_some() && ctx.cpus_seen == 0 {
        bail!("QEMU has no vCPU left for the board's CPUs besides the firmware stand-in's");
    }
    if ctx.cpus_seen > board.cpus.len() {
        bail!(
            "QEMU has {} vCPUs but board {} has {} CPUs",
            ctx.cpus_seen,
            board.name,
            board.cpus.len()
        );
    }
    w.finish().map_err(|e| anyhow::anyhow!("{e}"))
}

struct Ctx<'b> {
    board: &'b BoardDesc,
    cpus_seen: usize,
    /// (logical CPU, phandle) of each CPU node, in DT order.
    cpu_phandles: Vec<u32>,
    next_phandle: u32,
    opp_phandles: Vec<u32>,
    /// Per cluster (the board's cluster ids, ascending), its L2 cache node's phandle.
    l2_phandles: Vec<(u16, u32)>,
    standin: Option<Standin>,
}

/// Where the stand-in's firmware lives in the patched DT.
#[derive(Clone, Debug)]
struct Standin {
    fw: Firmware,
    /// The QEMU `/cpus` child left out (the firmware's vCPU) and its MPIDR.
    cpu_node: String,
    mpidr: u64,
    /// The carve-out's base (the top of the first `/memory` bank).
    base: u64,
    /// The clock provider CPUs name (`protocol@13`, the stub clock).
    provider: u32,
    /// Other phandles the nodes need.
    phandles: [u32; 6],
}

/// Picks the stand-in's vCPU (QEMU's last) and carve-out (the top of the first `/memory`).
fn standin_of(fdt: &Fdt<'_>, fw: Firmware, ctx: &mut Ctx<'_>) -> Result<Standin> {
    let root = fdt.find_node("/").context("no root node")?;
    let cpus = root
        .children()
        .find(|c| c.name == "cpus")
        .context("no /cpus")?;
    let last = cpus
        .children()
        .filter(|c| is_cpu(*c))
        .last()
        .context("no CPU in /cpus")?;
    let mpidr = reg_words(last, "reg")?
        .into_iter()
        .fold(0u64, |a, w| (a << 32) | u64::from(w));
    let mem = root
        .children()
        .find(|c| c.name.starts_with("memory@"))
        .context("no /memory")?;
    let m = reg_words(mem, "reg")?;
    if m.len() < 4 {
        bail!(
            "/{}: reg is not <base-hi base-lo size-hi size-lo>",
            mem.name
        );
    }
    let base = (u64::from(m[0]) << 32) | u64::from(m[1]);
    let size = (u64::from(m[2]) << 32) | u64::from(m[3]);
    if size < 4 * STANDIN_CARVE_OUT || !size.is_multiple_of(STANDIN_CARVE_OUT) {
        bail!(
            "/{}: {size:#x} bytes of RAM leave no 2 MiB carve-out for the firmware",
            mem.name
        );
    }
    if root.children().any(|c| c.name == "reserved-memory") {
        bail!(
            "QEMU's DT already has /reserved-memory: the stand-in's carve-out would need merging"
        );
    }
    let provider = ctx.alloc_phandle();
    let phandles = [0; 6].map(|_| ctx.alloc_phandle());
    Ok(Standin {
        fw,
        cpu_node: last.name.to_string(),
        mpidr,
        base: base + size - STANDIN_CARVE_OUT,
        provider,
        phandles,
    })
}

fn reg_words(n: FdtNode<'_, '_>, prop: &str) -> Result<Vec<u32>> {
    let v = n
        .property(prop)
        .with_context(|| format!("/{}: no {prop}", n.name))?
        .value;
    Ok(v.chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

fn cells64(v: u64) -> [u32; 2] {
    [(v >> 32) as u32, v as u32]
}

/// The stand-in's nodes at the root: the board's DVFS transport in the carve-out, and the
/// `asym,fw-standin` node.
fn write_standin(w: &mut FdtWriter, s: &Standin) -> Result<()> {
    let at = |off: u64| cells64(s.base + off);
    let reg = |off: u64, size: u64| -> Vec<u32> {
        let mut v = at(off).to_vec();
        v.extend(cells64(size));
        v
    };
    let [p0, p1, p2, p3, p4, _] = s.phandles;
    match s.fw {
        Firmware::JunoScmi => {
            // source: mainline juno-base.dtsi (mhu@2b1f0000, sram@2e000000) and
            // juno-scmi.dtsi (the four arm,scmi-shmem channels, /firmware/scmi, protocol@13).
            let mhu_off = 0x1_0000;
            let n = w
                .begin_node(&format!("mhu@{:x}", s.base + mhu_off))
                .map_err(err)?;
            w.property_string_list(
                "compatible",
                vec!["arm,mhu-doorbell".into(), "arm,primecell".into()],
            )
            .map_err(err)?;
            w.property_array_u32("reg", &reg(mhu_off, 0x1000))
                .map_err(err)?;
            w.property_u32("#mbox-cells", 2).map_err(err)?;
            w.property_u32("phandle", p0).map_err(err)?;
            w.end_node(n).map_err(err)?;
            let n = w.begin_node(&format!("sram@{:x}", s.base)).map_err(err)?;
            w.property_string_list(
                "compatible",
                vec!["arm,juno-sram-ns".into(), "mmio-sram".into()],
            )
            .map_err(err)?;
            w.property_array_u32("reg", &reg(0, 0x8000)).map_err(err)?;
            w.property_u32("#address-cells", 1).map_err(err)?;
            w.property_u32("#size-cells", 1).map_err(err)?;
            let b = at(0);
            w.property_array_u32("ranges", &[0, b[0], b[1], 0x8000])
                .map_err(err)?;
            for (i, ph) in [p1, p2, p3, p4].iter().enumerate() {
                let c = w
                    .begin_node(&format!("scp-sram@{:x}", i * 0x80))
                    .map_err(err)?;
                w.property_string("compatible", "arm,scmi-shmem")
                    .map_err(err)?;
                w.property_array_u32("reg", &[(i * 0x80) as u32, 0x80])
                    .map_err(err)?;
                w.property_u32("phandle", *ph).map_err(err)?;
                w.end_node(c).map_err(err)?;
            }
            w.end_node(n).map_err(err)?;
            let f = w.begin_node("firmware").map_err(err)?;
            let sc = w.begin_node("scmi").map_err(err)?;
            w.property_string("compatible", "arm,scmi").map_err(err)?;
            w.property_string_list("mbox-names", vec!["tx".into(), "rx".into()])
                .map_err(err)?;
            w.property_array_u32("mboxes", &[p0, 0, 0, p0, 0, 1])
                .map_err(err)?;
            w.property_array_u32("shmem", &[p1, p2]).map_err(err)?;
            w.property_u32("#address-cells", 1).map_err(err)?;
            w.property_u32("#size-cells", 0).map_err(err)?;
            let pr = w.begin_node("protocol@13").map_err(err)?;
            w.property_u32("reg", 0x13).map_err(err)?;
            w.property_u32("#clock-cells", 1).map_err(err)?;
            w.property_string_list("mbox-names", vec!["tx".into(), "rx".into()])
                .map_err(err)?;
            w.property_array_u32("mboxes", &[p0, 1, 0, p0, 1, 1])
                .map_err(err)?;
            w.property_array_u32("shmem", &[p3, p4]).map_err(err)?;
            w.property_u32("phandle", s.provider).map_err(err)?;
            w.end_node(pr).map_err(err)?;
            w.end_node(sc).map_err(err)?;
            w.end_node(f).map_err(err)?;
        }
        Firmware::Hi3660 => {
            // source: mainline hi3660.dtsi (mailbox@e896b000, stub_clock@e896b500 with
            // `mboxes = <&mailbox 13 3 0>`).
            let n = w
                .begin_node(&format!("mailbox@{:x}", s.base))
                .map_err(err)?;
            w.property_string("compatible", "hisilicon,hi3660-mbox")
                .map_err(err)?;
            w.property_array_u32("reg", &reg(0, 0x1000)).map_err(err)?;
            w.property_u32("#mbox-cells", 3).map_err(err)?;
            w.property_u32("phandle", p0).map_err(err)?;
            w.end_node(n).map_err(err)?;
            let n = w
                .begin_node(&format!("stub_clock@{:x}", s.base + 0x500))
                .map_err(err)?;
            w.property_string("compatible", "hisilicon,hi3660-stub-clk")
                .map_err(err)?;
            w.property_array_u32("reg", &reg(0x500, 0x100))
                .map_err(err)?;
            w.property_u32("#clock-cells", 1).map_err(err)?;
            w.property_array_u32("mboxes", &[p0, 13, 3, 0])
                .map_err(err)?;
            w.property_u32("phandle", s.provider).map_err(err)?;
            w.end_node(n).map_err(err)?;
        }
        Firmware::Hi6220 => {
            // source: mainline hi6220.dtsi (sram@fff80000, mailbox@f7510000 with its IPC
            // registers and DRAM buffer, stub_clock with `mboxes = <&mailbox 1 0 11>`).
            let n = w.begin_node(&format!("sram@{:x}", s.base)).map_err(err)?;
            w.property_string_list(
                "compatible",
                vec!["hisilicon,hi6220-sramctrl".into(), "syscon".into()],
            )
            .map_err(err)?;
            w.property_array_u32("reg", &reg(0, 0x1_2000))
                .map_err(err)?;
            w.property_u32("phandle", p1).map_err(err)?;
            w.end_node(n).map_err(err)?;
            let n = w
                .begin_node(&format!("mailbox@{:x}", s.base + 0x2_0000))
                .map_err(err)?;
            w.property_string("compatible", "hisilicon,hi6220-mbox")
                .map_err(err)?;
            let mut r = reg(0x2_0000, 0x1000);
            r.extend(reg(0x2_1800, 0x800));
            w.property_array_u32("reg", &r).map_err(err)?;
            w.property_u32("#mbox-cells", 3).map_err(err)?;
            w.property_u32("phandle", p0).map_err(err)?;
            w.end_node(n).map_err(err)?;
            let n = w.begin_node("stub_clock").map_err(err)?;
            w.property_string("compatible", "hisilicon,hi6220-stub-clk")
                .map_err(err)?;
            w.property_u32("hisilicon,hi6220-clk-sram", p1)
                .map_err(err)?;
            w.property_u32("#clock-cells", 1).map_err(err)?;
            w.property_array_u32("mboxes", &[p0, 1, 0, 11])
                .map_err(err)?;
            w.property_u32("phandle", s.provider).map_err(err)?;
            w.end_node(n).map_err(err)?;
        }
    }
    let rm = w.begin_node("reserved-memory").map_err(err)?;
    w.property_u32("#address-cells", 2).map_err(err)?;
    w.property_u32("#size-cells", 2).map_err(err)?;
    w.property_null("ranges").map_err(err)?;
    let n = w
        .begin_node(&format!("asym-fw@{:x}", s.base))
        .map_err(err)?;
    w.property_array_u32("reg", &reg(0, STANDIN_CARVE_OUT))
        .map_err(err)?;
    w.property_null("no-map").map_err(err)?;
    w.end_node(n).map_err(err)?;
    w.end_node(rm).map_err(err)?;
    let n = w.begin_node("asym-fw-standin").map_err(err)?;
    w.property_string("compatible", "asym,fw-standin")
        .map_err(err)?;
    w.property_array_u32("cpu", &cells64(s.mpidr))
        .map_err(err)?;
    w.property_u32("doorbell-sgi", STANDIN_DOORBELL_SGI)
        .map_err(err)?;
    w.end_node(n).map_err(err)
}

impl Ctx<'_> {
    fn alloc_phandle(&mut self) -> u32 {
        let p = self.next_phandle;
        self.next_phandle += 1;
        p
    }
}

fn err(e: vm_fdt::Error) -> anyhow::Error {
    anyhow::anyhow!("writing the DTB: {e}")
}

fn is_cpu(n: FdtNode<'_, '_>) -> bool {
    n.property("device_type")
        .and_then(|p| p.as_str())
        .is_some_and(|s| s.trim_end_matches('\0') == "cpu")
}

fn copy_node(w: &mut FdtWriter, n: FdtNode<'_, '_>, name: &str, ctx: &mut Ctx<'_>) -> Result<()> {
    let node = w.begin_node(name).map_err(err)?;
    let cpu = is_cpu(n);
    let mut has_phandle = false;
    for p in n.properties() {
        if p.name == "phandle" {
            has_phandle = true;
            if cpu {
                let v = p.as_usize().context("cpu phandle")? as u32;
                ctx.cpu_phandles.push(v);
            }
        }
        if cpu
            && matches!(
                p.name,
                "capacity-dmips-mhz" | "dynamic-power-coefficient" | "operating-points-v2"
            )
        {
            continue;
        }
        if ctx.standin.is_some() && cpu && p.name == "clocks" {
            continue;
        }
        w.property(p.name, p.value).map_err(err)?;
    }
    if cpu {
        let idx = ctx.cpus_seen;
        ctx.cpus_seen += 1;
        if !has_phandle {
            let ph = ctx.alloc_phandle();
            w.property_u32("phandle", ph).map_err(err)?;
            ctx.cpu_phandles.push(ph);
        }
        if let Some(d) = ctx.board.cpus.get(idx) {
            if let Some(dmips) = d.capacity_dmips_mhz {
                w.property_u32("capacity-dmips-mhz", dmips).map_err(err)?;
            }
            if let Some(c) = d.dynamic_power_coefficient {
                w.property_u32("dynamic-power-coefficient", c)
                    .map_err(err)?;
            }
            let opp = ctx.opp_phandles[usize::from(d.perf_domain)];
            w.property_u32("operating-points-v2", opp).map_err(err)?;
            if let Some(&(_, l2)) = ctx.l2_phandles.iter().find(|(cl, _)| *cl == d.cluster) {
                w.property_u32("next-level-cache", l2).map_err(err)?;
            }
            if let Some(st) = &ctx.standin {
                // The firmware's domain ids follow the board's policies (Juno: SCMI 0 big,
                // 1 LITTLE; Hi3660: stub clocks 0/1 = clusters 0/1; Hi6220: one clock).
                w.property_array_u32("clocks", &[st.provider, u32::from(d.perf_domain)])
                    .map_err(err)?;
            }
        }
    }
    let children: Vec<FdtNode<'_, '_>> = n.children().collect();
    for c in &children {
        if name == "cpus" && c.name == "cpu-map" {
            continue;
        }
        if name == "cpus" && ctx.standin.as_ref().is_some_and(|s| s.cpu_node == c.name) {
            continue;
        }
        copy_node(w, *c, c.name, ctx)?;
    }
    if name == "cpus" {
        write_cpu_map(w, ctx)?;
        write_l2_caches(w, ctx)?;
    }
    if name.is_empty() {
        write_opp_tables(w, ctx)?;
        if let Some(st) = &ctx.standin {
            write_standin(w, st)?;
        }
    }
    w.end_node(node).map_err(err)
}

fn write_cpu_map(w: &mut FdtWriter, ctx: &Ctx<'_>) -> Result<()> {
    let n = ctx.cpu_phandles.len().min(ctx.board.cpus.len());
    let mut clusters: Vec<u16> = ctx.board.cpus[..n].iter().map(|c| c.cluster).collect();
    clusters.sort_unstable();
    clusters.dedup();
    let map = w.begin_node("cpu-map").map_err(err)?;
    for (ci, cl) in clusters.iter().enumerate() {
        let node = w.begin_node(&format!("cluster{ci}")).map_err(err)?;
        let members = (0..n).filter(|&i| ctx.board.cpus[i].cluster == *cl);
        for (k, i) in members.enumerate() {
            let core = w.begin_node(&format!("core{k}")).map_err(err)?;
            w.property_u32("cpu", ctx.cpu_phandles[i]).map_err(err)?;
            w.end_node(core).map_err(err)?;
        }
        w.end_node(node).map_err(err)?;
    }
    w.end_node(map).map_err(err)
}

/// One `l2-cacheN` node per cluster (`Documentation/devicetree/bindings/cache/cache.yaml`:
/// `compatible = "cache"`, `cache-level`, `cache-unified`); sizes are left out, as the CPUs'
/// cache ID registers give them.
fn write_l2_caches(w: &mut FdtWriter, ctx: &Ctx<'_>) -> Result<()> {
    for (i, &(_, phandle)) in ctx.l2_phandles.iter().enumerate() {
        let node = w.begin_node(&format!("l2-cache{i}")).map_err(err)?;
        w.property_string("compatible", "cache").map_err(err)?;
        w.property_u32("cache-level", 2).map_err(err)?;
        w.property_null("cache-unified").map_err(err)?;
        w.property_u32("phandle", phandle).map_err(err)?;
        w.end_node(node).map_err(err)?;
    }
    Ok(())
}

fn write_opp_tables(w: &mut FdtWriter, ctx: &Ctx<'_>) -> Result<()> {
    for (pd, desc) in ctx.board.perf_domains.iter().enumerate() {
        let t = w
            .begin_node(&format!("opp-table-{}", desc.name))
            .map_err(err)?;
        w.property_string("compatible", "operating-points-v2")
            .map_err(err)?;
        w.property_null("opp-shared").map_err(err)?;
        w.property_u32("phandle", ctx.opp_phandles[pd])
            .map_err(err)?;
        for opp in desc.opps {
            let hz = u64::from(opp.freq.0) * 1000;
            let o = w.begin_node(&format!("opp-{hz}")).map_err(err)?;
            w.property_u64("opp-hz", hz).map_err(err)?;
            w.property_u32("opp-microvolt", opp.voltage.0)
                .map_err(err)?;
            let lat = u32::try_from(desc.transition_latency_ns).unwrap_or(u32::MAX);
            w.property_u32("clock-latency-ns", lat).map_err(err)?;
            w.end_node(o).map_err(err)?;
        }
        w.end_node(t).map_err(err)?;
    }
    Ok(())
}

/// One change to a DTB for [`edit`]. Paths are full node paths (`/cpus/cpu@1`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Edit {
    /// Set (or add) a property.
    Set {
        path: String,
        prop: String,
        value: Vec<u8>,
    },
    /// Remove a property.
    Delete { path: String, prop: String },
    /// Remove a node and everything below it.
    DeleteNode { path: String },
    /// Add a child node with these properties (after the parent's existing children).
    AddNode {
        parent: String,
        name: String,
        props: Vec<(String, Vec<u8>)>,
    },
}

impl Edit {
    /// `prop` of `path` set to big-endian 32-bit `cells`.
    pub fn cells(path: &str, prop: &str, cells: &[u32]) -> Edit {
        Edit::Set {
            path: path.into(),
            prop: prop.into(),
            value: cells.iter().flat_map(|c| c.to_be_bytes()).collect(),
        }
    }

    /// `prop` of `path` set to the NUL-terminated string `s`.
    pub fn string(path: &str, prop: &str, s: &str) -> Edit {
        let mut value = s.as_bytes().to_vec();
        value.push(0);
        Edit::Set {
            path: path.into(),
            prop: prop.into(),
            value,
        }
    }
}

/// `dtb` rewritten with `edits` applied (nodes and properties otherwise copied unchanged,
/// memory reservations kept).
pub fn edit(dtb: &[u8], edits: &[Edit]) -> Result<Vec<u8>> {
    let fdt = Fdt::new(dtb).map_err(|e| anyhow::anyhow!("not a DTB: {e:?}"))?;
    let root = fdt.find_node("/").context("no root node")?;
    let rsv = fdt
        .memory_reservations()
        .map(|r| vm_fdt::FdtReserveEntry::new(r.address() as u64, r.size() as u64))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(err)?;
    let mut w = FdtWriter::new_with_mem_reserv(&rsv).map_err(err)?;
    edit_node(&mut w, root, "", "/", edits)?;
    w.finish().map_err(err)
}

fn edit_node(
    w: &mut FdtWriter,
    n: FdtNode<'_, '_>,
    name: &str,
    path: &str,
    edits: &[Edit],
) -> Result<()> {
    let node = w.begin_node(name).map_err(err)?;
    for p in n.properties() {
        let change = edits.iter().find_map(|e| match e {
            Edit::Set {
                path: ep,
                prop,
                value,
            } if ep == path && prop == p.name => Some(Some(value.as_slice())),
            Edit::Delete { path: ep, prop } if ep == path && prop == p.name => Some(None),
            _ => None,
        });
        match change {
            Some(Some(v)) => w.property(p.name, v).map_err(err)?,
            Some(None) => {}
            None => w.property(p.name, p.value).map_err(err)?,
        }
    }
    for e in edits {
        if let Edit::Set {
            path: ep,
            prop,
            value,
        } = e
        {
            if ep == path && n.property(prop).is_none() {
                w.property(prop, value).map_err(err)?;
            }
        }
    }
    for c in n.children() {
        let cp = if path == "/" {
            format!("/{}", c.name)
        } else {
            format!("{path}/{}", c.name)
        };
        let gone = edits
            .iter()
            .any(|e| matches!(e, Edit::DeleteNode { path: ep } if *ep == cp));
        if !gone {
            edit_node(w, c, c.name, &cp, edits)?;
        }
    }
    for e in edits {
        if let Edit::AddNode {
            parent,
            name,
            props,
        } = e
        {
            if parent == path {
                let added = w.begin_node(name).map_err(err)?;
                for (k, v) in props {
                    w.property(k, v).map_err(err)?;
                }
                w.end_node(added).map_err(err)?;
            }
        }
    }
    w.end_node(node).map_err(err)
}

/// Where [`raw_dtb_image`] boots expect their DTB: above QEMU's own (which `-kernel` places at
/// RAM base + 128 MiB with 512 MiB of RAM), inside the first 256 MiB.
pub const RAW_DTB_ADDR: u64 = 0x4900_0000;

/// The address QEMU (and u-boot's `booti`) load the Image at on `virt`: RAM base + text_offset.
const IMAGE_BASE: u64 = 0x4008_0000;

/// A copy of the arm64 `image` that starts with x0 = `dtb_addr` whatever the loader passed:
/// its first instruction (the header's `b` to the entry code) becomes a branch to a trampoline
/// appended to the file (`ldr x0, =dtb_addr; b entry`), which the kernel's BSS clearing later
/// overwrites. So a DTB loaded raw (`-device loader,...,force-raw=on`) reaches the kernel
/// exactly as written: QEMU's `-dtb` path rewrites `/memory`, `/psci` and `/chosen` and refuses
/// corrupt blobs, which hides the cases a firmware or boot loader can still produce.
pub fn raw_dtb_image(image: &[u8], dtb_addr: u64) -> Result<Vec<u8>> {
    let first = u32::from_le_bytes(
        image
            .get(0..4)
            .context("empty Image")?
            .try_into()
            .expect("4 bytes"),
    );
    if first >> 26 != 0b000101 {
        bail!("the Image does not start with a `b` instruction ({first:#010x})");
    }
    let imm = i64::from(((first & 0x03ff_ffff) << 6) as i32 >> 6);
    let entry = IMAGE_BASE as i64 + imm * 4;
    let mut out = image.to_vec();
    out.resize(out.len().next_multiple_of(8), 0);
    let tramp = IMAGE_BASE as i64 + out.len() as i64;
    let b = |from: i64, to: i64| 0x1400_0000 | (((to - from) / 4) as u32 & 0x03ff_ffff);
    // ldr x0, #8 (the literal after the branch); b entry; .quad dtb_addr
    out.extend(0x5800_0040u32.to_le_bytes());
    out.extend(b(tramp + 4, entry).to_le_bytes());
    out.extend(dtb_addr.to_le_bytes());
    out[0..4].copy_from_slice(&b(IMAGE_BASE as i64, tramp).to_le_bytes());
    Ok(out)
}

/// A minimal arm64 `Image` (header, then `ldr x16, =target; br x16`) that QEMU's `-kernel`
/// loads at RAM base + text_offset and enters as it enters Linux (x0 = the DTB, at EL2 with
/// `virtualization=on`), and that jumps on to `target` with those registers untouched. So a
/// board's Image linked at its own address (Juno r2: 0x8008_0000), loaded there raw with
/// `-device loader`, starts exactly as the board's `booti` starts it.
pub fn jump_image(target: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(0x50);
    // code0: b +0x40 (past the header); code1.
    out.extend(0x1400_0010u32.to_le_bytes());
    out.extend(0u32.to_le_bytes());
    // text_offset, image_size, flags (little-endian, 4 KiB pages, bit 3 clear), res2..res4.
    out.extend(0x8_0000u64.to_le_bytes());
    out.extend(0x1000u64.to_le_bytes());
    out.extend(0b010u64.to_le_bytes());
    out.extend([0u8; 24]);
    // magic "ARM\x64", res5.
    out.extend(0x644d_5241u32.to_le_bytes());
    out.extend(0u32.to_le_bytes());
    // 0x40: ldr x16, #8; br x16; .quad target
    out.extend(0x5800_0050u32.to_le_bytes());
    out.extend(0xd61f_0200u32.to_le_bytes());
    out.extend(target.to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    //! Oracle: the patched blob, read back with an independent reader (`dtc` is not assumed;
    //! we re-parse with `flat_device_tree`) has the board's numbers from `asym_boards`, and
    //! QEMU's own nodes unchanged.
    use super::*;

    /// The jump Image against the arm64 boot protocol's header (Linux
    /// `Documentation/arch/arm64/booting.rst`) and the A64 encodings it uses.
    #[test]
    fn jump_image_is_an_arm64_image_that_branches_to_its_target() {
        let img = jump_image(0x8008_0000);
        let u32_at = |o: usize| u32::from_le_bytes(img[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(img[o..o + 8].try_into().unwrap());
        assert_eq!(&img[0x38..0x3c], b"ARM\x64");
        assert_eq!(u64_at(0x08), 0x8_0000, "text_offset");
        // b: imm26 in words from code0 lands on 0x40.
        assert_eq!(u32_at(0) >> 26, 0b000101);
        assert_eq!((u32_at(0) & 0x03ff_ffff) * 4, 0x40);
        // ldr x16, literal 8 bytes on (imm19 = 2), br x16, the literal.
        assert_eq!(u32_at(0x40), 0x5800_0000 | (2 << 5) | 16);
        assert_eq!(u32_at(0x44), 0xd61f_0000 | (16 << 5));
        assert_eq!(u64_at(0x48), 0x8008_0000);
    }

    fn qemu_dtb() -> Vec<u8> {
        let p = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../kernel/tests/dtb/qemu-virt-gicv2-smp6.dtb"
        );
        std::fs::read(p).unwrap()
    }

    fn u32_of(n: FdtNode<'_, '_>, prop: &str) -> Option<u32> {
        n.property(prop)
            .and_then(|p| p.as_usize())
            .map(|v| v as u32)
    }

    #[test]
    fn juno_r2_properties_are_added_and_qemu_nodes_kept() {
        let orig = qemu_dtb();
        let out = patch(&orig, &asym_boards::JUNO_R2, None).unwrap();
        let a = Fdt::new(&orig).unwrap();
        let b = Fdt::new(&out).unwrap();
        let names = |f: &Fdt<'_>| -> Vec<String> {
            let root = f.find_node("/").unwrap();
            root.children().map(|c| c.name.to_string()).collect()
        };
        let (na, nb) = (names(&a), names(&b));
        assert!(na.iter().all(|n| nb.contains(n)), "{na:?} vs {nb:?}");
        assert_eq!(nb.len(), na.len() + 2, "two OPP tables added");
        let cpus: Vec<_> = b
            .find_node("/cpus")
            .unwrap()
            .children()
            .filter(|n| is_cpu(*n))
            .collect();
        assert_eq!(cpus.len(), 6);
        let dmips: Vec<_> = cpus
            .iter()
            .map(|c| u32_of(*c, "capacity-dmips-mhz"))
            .collect();
        assert_eq!(
            dmips,
            [1024, 1024, 485, 485, 485, 485].map(Some).to_vec(),
            "Juno r2: A72 ×2 then A53 ×4"
        );
        for (i, c) in cpus.iter().enumerate() {
            assert_eq!(u32_of(*c, "reg"), Some(i as u32), "QEMU's MPIDR kept");
            let opp = u32_of(*c, "operating-points-v2").unwrap();
            let table = b.find_phandle(opp).unwrap();
            let want = if i < 2 {
                "opp-table-big"
            } else {
                "opp-table-little"
            };
            assert_eq!(table.name, want);
            assert!(table.property("opp-shared").is_some());
            let hz: Vec<u64> = table
                .children()
                .map(|o| {
                    let v = o.property("opp-hz").unwrap().value;
                    u64::from_be_bytes(v.try_into().unwrap())
                })
                .collect();
            let expect: &[u64] = if i < 2 {
                &[600_000_000, 1_000_000_000, 1_200_000_000]
            } else {
                &[450_000_000, 800_000_000, 950_000_000]
            };
            assert_eq!(hz, expect);
        }
        // The kernel's own parser sees two clusters with the board's membership.
        let uart = a.find_node("/pl011@9000000").unwrap();
        let uart2 = b.find_node("/pl011@9000000").unwrap();
        assert_eq!(
            uart.property("reg").unwrap().value,
            uart2.property("reg").unwrap().value
        );
        let map = b.find_node("/cpus/cpu-map").unwrap();
        let sizes: Vec<usize> = map.children().map(|c| c.children().count()).collect();
        assert_eq!(sizes, vec![2, 4]);
        // One shared L2 per cluster, named by its CPUs (Linux's cluster-level domain).
        let l2: Vec<u32> = ["/cpus/l2-cache0", "/cpus/l2-cache1"]
            .iter()
            .map(|p| {
                let n = b.find_node(p).unwrap();
                assert_eq!(n.property("compatible").unwrap().value, b"cache\0");
                n.property("phandle").unwrap().as_usize().unwrap() as u32
            })
            .collect();
        let next: Vec<u32> = b
            .find_node("/cpus")
            .unwrap()
            .children()
            .filter_map(|c| c.property("next-level-cache"))
            .map(|p| p.as_usize().unwrap() as u32)
            .collect();
        assert_eq!(next, [l2[0], l2[0], l2[1], l2[1], l2[1], l2[1]]);
    }

    #[test]
    fn edits_change_only_what_they_name() {
        let orig = qemu_dtb();
        let out = edit(
            &orig,
            &[
                Edit::cells("/pl011@9000000", "reg", &[0x80, 0, 0, 0x1000]),
                Edit::Delete {
                    path: "/psci".into(),
                    prop: "method".into(),
                },
                Edit::DeleteNode {
                    path: "/cpus/cpu@5".into(),
                },
                Edit::string("/chosen", "bootargs", "ticks=10"),
                Edit::AddNode {
                    parent: "/".into(),
                    name: "reserved-memory".into(),
                    props: vec![("ranges".into(), vec![])],
                },
            ],
        )
        .unwrap();
        let f = Fdt::new(&out).unwrap();
        let reg = f
            .find_node("/pl011@9000000")
            .unwrap()
            .property("reg")
            .unwrap();
        assert_eq!(
            reg.value,
            [0, 0, 0, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0]
        );
        assert!(f.find_node("/psci").unwrap().property("method").is_none());
        let cpus = f
            .find_node("/cpus")
            .unwrap()
            .children()
            .filter(|n| is_cpu(*n))
            .count();
        assert_eq!(cpus, 5);
        let args = f
            .find_node("/chosen")
            .unwrap()
            .property("bootargs")
            .unwrap();
        assert_eq!(args.as_str(), Some("ticks=10"));
        assert!(f.find_node("/reserved-memory").is_some());
        // Everything else unchanged: the GIC node's properties byte for byte.
        let a = Fdt::new(&orig).unwrap();
        let props = |f: &Fdt<'_>| -> Vec<(String, Vec<u8>)> {
            f.find_node("/intc@8000000")
                .unwrap()
                .properties()
                .map(|p| (p.name.to_string(), p.value.to_vec()))
                .collect()
        };
        assert_eq!(props(&a), props(&f));
    }

    #[test]
    fn raw_dtb_image_sets_x0_then_jumps_to_the_entry() {
        // An Image whose first word is `b +0x40` (the header's branch over itself).
        let mut img = vec![0u8; 0x44];
        img[0..4].copy_from_slice(&(0x1400_0000u32 | 0x10).to_le_bytes());
        let out = raw_dtb_image(&img, 0x4900_0000).unwrap();
        let word = |at: usize| u32::from_le_bytes(out[at..at + 4].try_into().unwrap());
        let target = |at: usize| {
            let imm = ((word(at) & 0x03ff_ffff) << 6) as i32 >> 6;
            at as i64 + i64::from(imm) * 4
        };
        let tramp = 0x48; // 0x44 rounded up to 8
        assert_eq!(
            target(0),
            tramp as i64,
            "first instruction branches to the trampoline"
        );
        assert_eq!(word(tramp), 0x5800_0040, "ldr x0, #8");
        assert_eq!(target(tramp + 4), 0x40, "then the original entry");
        assert_eq!(
            u64::from_le_bytes(out[tramp + 8..tramp + 16].try_into().unwrap()),
            0x4900_0000
        );
        assert_eq!(&out[4..0x44], &img[4..0x44], "the rest unchanged");
        assert!(raw_dtb_image(&[0; 8], 0).is_err(), "no branch: refused");
    }

    #[test]
    fn more_vcpus_than_the_board_is_refused() {
        let orig = qemu_dtb();
        let mut small = asym_boards::JUNO_R2;
        small.cpus = &asym_boards::JUNO_R2.cpus[..4];
        let e = patch(&orig, &small, None).unwrap_err();
        assert!(format!("{e}").contains("6 vCPUs"), "{e}");
    }

    #[test]
    fn juno_r2_stand_in_takes_the_last_vcpu_and_describes_the_scmi_transport() {
        let orig = qemu_dtb();
        let out = patch(&orig, &asym_boards::JUNO_R2, Some(Firmware::JunoScmi)).unwrap();
        let b = Fdt::new(&out).unwrap();
        let root = b.find_node("/").unwrap();
        let child = |name: &str| root.children().find(|c| c.name == name).unwrap();
        let cpus: Vec<_> = child("cpus").children().filter(|n| is_cpu(*n)).collect();
        assert_eq!(cpus.len(), 5, "QEMU's sixth vCPU is the firmware's");
        let s = child("asym-fw-standin");
        assert_eq!(s.property("cpu").unwrap().value, [0, 0, 0, 0, 0, 0, 0, 5]);
        assert_eq!(u32_of(s, "doorbell-sgi"), Some(STANDIN_DOORBELL_SGI));
        // 256 MiB of RAM from 0x4000_0000: the carve-out is its top 2 MiB, reserved no-map.
        let rm = child("reserved-memory").children().next().unwrap();
        assert_eq!(rm.name, "asym-fw@4fe00000");
        assert!(rm.property("no-map").is_some());
        let sram = child("sram@4fe00000");
        assert_eq!(
            sram.property("ranges").unwrap().value,
            [0u32, 0, 0x4fe0_0000, 0x8000]
                .map(u32::to_be_bytes)
                .concat()
        );
        let shmem: Vec<_> = sram.children().map(|c| c.name.to_string()).collect();
        assert_eq!(
            shmem,
            ["scp-sram@0", "scp-sram@80", "scp-sram@100", "scp-sram@180"]
        );
        let mhu = child("mhu@4fe10000");
        assert_eq!(u32_of(mhu, "#mbox-cells"), Some(2));
        let scmi = child("firmware").children().next().unwrap();
        let perf = scmi.children().find(|c| c.name == "protocol@13").unwrap();
        let ph = u32_of(perf, "phandle").unwrap();
        // Big CPUs name SCMI domain 0, LITTLE ones domain 1 (SCP-firmware's ids).
        let clocks: Vec<Vec<u8>> = cpus
            .iter()
            .map(|c| c.property("clocks").unwrap().value.to_vec())
            .collect();
        for (i, c) in clocks.iter().enumerate() {
            let want = [ph, if i < 2 { 0 } else { 1 }]
                .map(u32::to_be_bytes)
                .concat();
            assert_eq!(c, &want, "cpu {i}");
        }
        // GICv2 with 8 CPUs has no room for the firmware's vCPU.
        let mut m = crate::qemu::Machine {
            smp: 8,
            gic: 2,
            el2: false,
            memory_mib: 512,
            cpu: String::new(),
            icount: None,
            gdb: false,
            append: String::new(),
            boot: Boot::Direct {
                image: PathBuf::new(),
            },
            extra: Vec::new(),
        };
        assert!(!standin_fits(&m));
        m.gic = 3;
        assert!(standin_fits(&m));
    }

    #[test]
    fn hikey_stand_ins_describe_their_mailboxes() {
        let orig = qemu_dtb();
        let mut six = asym_boards::HIKEY960;
        six.cpus = &asym_boards::HIKEY960.cpus[..6];
        let out = patch(&orig, &six, Some(Firmware::Hi3660)).unwrap();
        let b = Fdt::new(&out).unwrap();
        let root = b.find_node("/").unwrap();
        let stub = root
            .children()
            .find(|c| c.name == "stub_clock@4fe00500")
            .unwrap();
        let mb = stub.property("mboxes").unwrap().value;
        assert_eq!(&mb[4..], [13u32, 3, 0].map(u32::to_be_bytes).concat());
        let out = patch(&orig, &asym_boards::HIKEY, Some(Firmware::Hi6220)).unwrap();
        let b = Fdt::new(&out).unwrap();
        let root = b.find_node("/").unwrap();
        let mbox = root
            .children()
            .find(|c| c.name == "mailbox@4fe20000")
            .unwrap();
        assert_eq!(
            mbox.property("reg").unwrap().value.len(),
            32,
            "IPC and DRAM buffer"
        );
        assert!(root.children().any(|c| c.name == "stub_clock"));
    }
}
