//! The DT fuzz stage of `cargo xtask test`: the kernel booted on QEMU with device trees that are
//! wrong the ways firmware, boot loaders and hand-edited DTS files get them wrong — addresses
//! outside the map or wrapping, overlapping regions, interrupt numbers out of range or shared
//! with the tick, missing nodes, odd memory banks, a corrupt header, a bad DTB address — and
//! with seeded random value mutations. Each must either boot (and end its `ticks=` run with
//! status 0) or stop with a message that says where in the device tree the problem is (a line
//! with "device tree", a non-zero status); a hang fails the stage.
//!
//! Two ways in: `-dtb` (QEMU's loader, as when QEMU is the firmware; it rewrites `/memory`,
//! `/psci` and `/chosen` and refuses corrupt blobs), and raw (the blob loaded untouched next to
//! an Image whose trampoline passes its address in x0, `dtb::raw_dtb_image`), for the memory,
//! PSCI, header and x0 cases the loader would hide.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::batch::Case;
use crate::dtb::{self, Edit, RAW_DTB_ADDR};
use crate::qemu::{Boot, Machine, Outcome};

/// Wall-clock limit per boot (a boot that ends takes well under a second under `-icount`).
const TIMEOUT: Duration = Duration::from_secs(20);
/// The command line every case boots with (in the blob: neither path passes `-append`).
const BOOTARGS: &str = "semihosting ticks=10";
/// Seeded random mutations per run (the seed is fixed: the same blobs every run).
const RANDOM_CASES: usize = 40;
const SEED: u64 = 0x00a5_7e11_0dd5_eed5;

/// What a case must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// Boot, end the `ticks=` run with status 0, and print these lines (substrings).
    Boots(Vec<&'static str>),
    /// Stop (non-zero status) with an `asym: cannot boot:` line containing this.
    Stops(&'static str),
    /// Either boot or stop with a line saying where in the device tree (random mutations).
    Either,
}

/// How a run ended, for the stage's counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ended {
    Booted,
    StoppedLocated,
}

/// How the DT reaches the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Via {
    /// `-dtb`, QEMU's loader.
    Qemu,
    /// Loaded raw; x0 set by the trampoline to this address.
    Raw { x0: u64 },
}

/// One device tree to boot.
struct DtCase {
    name: String,
    blob: Vec<u8>,
    via: Via,
    el2: bool,
    expect: Expect,
}

const UART: &str = "/pl011@9000000";
const GIC: &str = "/intc@8000000";
const MEM: &str = "/memory@40000000";

/// The stage's runs on `base` (the self-test machine: board DTB, `-icount`, GICv3).
pub fn cases(board: dtb::Board, base: &Machine, dir: &Path) -> Result<Vec<Case>> {
    let mut el1 = Machine {
        append: String::new(),
        ..base.clone()
    };
    let mut el2 = Machine {
        el2: true,
        ..el1.clone()
    };
    // The board's DTB (and its firmware stand-in's vCPU, added to the machine).
    let dtb_of = |m: &mut Machine| -> Result<Vec<u8>> {
        let path = dtb::board_dtb(board, m, dir)?
            .context("the DT fuzz stage needs an emulated board's DTB (not --board virt)")?;
        let blob = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        dtb::edit(&blob, &[Edit::string("/chosen", "bootargs", BOOTARGS)])
    };
    let base1 = dtb_of(&mut el1)?;
    let base2 = dtb_of(&mut el2)?;
    let Boot::Direct { image } = &base.boot else {
        anyhow::bail!("the DT fuzz stage boots with -kernel");
    };
    let img = std::fs::read(image).with_context(|| format!("reading {}", image.display()))?;
    let fuzz_dir = dir.join("dt-fuzz");
    std::fs::create_dir_all(&fuzz_dir)?;

    let mut all = semantic_cases(&base1, &base2)?;
    all.extend(random_cases(&base1, RANDOM_CASES, SEED)?);

    let mut out = Vec::new();
    let mut raw_images: Vec<(u64, std::path::PathBuf)> = Vec::new();
    for (i, c) in all.into_iter().enumerate() {
        let file = fuzz_dir.join(format!("{i:03}.dtb"));
        std::fs::write(&file, &c.blob)?;
        let mut m = if c.el2 { el2.clone() } else { el1.clone() };
        match c.via {
            Via::Qemu => {
                m.extra.push("-dtb".into());
                m.extra.push(file.display().to_string());
            }
            Via::Raw { x0 } => {
                let raw = match raw_images.iter().find(|(a, _)| *a == x0) {
                    Some((_, p)) => p.clone(),
                    None => {
                        let p = fuzz_dir.join(format!("Image-x0-{x0:x}"));
                        std::fs::write(&p, dtb::raw_dtb_image(&img, x0)?)?;
                        raw_images.push((x0, p.clone()));
                        p
                    }
                };
                m.boot = Boot::Direct { image: raw };
                m.extra.push("-device".into());
                m.extra.push(format!(
                    "loader,file={},addr={RAW_DTB_ADDR:#x},force-raw=on",
                    file.display()
                ));
            }
        }
        let expect = c.expect;
        out.push(Case {
            name: format!("dt fuzz: {}", c.name),
            command: m.command(),
            timeout: TIMEOUT,
            check: Box::new(move |o| verdict(&expect, o).map(|(e, d)| format!("{e:?}: {d}"))),
        });
    }
    Ok(out)
}

/// Whether a run did what `expect` says; on success, how it ended and a detail.
pub fn verdict(expect: &Expect, o: &Outcome) -> Result<(Ended, String), String> {
    let code = o.status.and_then(|s| s.code());
    let booted = code == Some(0)
        && o.lines.iter().any(|l| l.starts_with("ticks:"))
        && o.lines.iter().any(|l| l.contains("CPUs online"));
    // A stop is located when the kernel said where: the boot refused the DT, or a fault
    // report names the DT property its address came from.
    let located = o.lines.iter().find(|l| {
        (l.starts_with("asym: cannot boot: ") && l.contains("device tree"))
            || l.contains("the device tree gives at")
    });
    let cannot = o
        .lines
        .iter()
        .find(|l| l.starts_with("asym: cannot boot: "));
    let stopped = matches!(code, Some(c) if c != 0);
    match expect {
        Expect::Boots(lines) => {
            if !booted {
                return Err(format!(
                    "did not boot (QEMU exit {code:?}; last line {:?})",
                    o.lines.last().map(String::as_str).unwrap_or("")
                ));
            }
            if let Some(missing) = lines
                .iter()
                .find(|want| !o.lines.iter().any(|l| l.contains(*want)))
            {
                return Err(format!("booted, but no line {missing:?}"));
            }
            Ok((Ended::Booted, format!("{} CPUs line seen", online(o))))
        }
        Expect::Stops(want) => match cannot {
            Some(l) if stopped && l.contains(want) && l.contains("device tree") => {
                Ok((Ended::StoppedLocated, l.clone()))
            }
            Some(l) => Err(format!(
                "stopped (exit {code:?}) with {l:?}, expected {want:?}"
            )),
            None => Err(format!(
                "no `asym: cannot boot` line (exit {code:?}; last line {:?})",
                o.lines.last().map(String::as_str).unwrap_or("")
            )),
        },
        Expect::Either => {
            if booted {
                return Ok((Ended::Booted, format!("{} CPUs line seen", online(o))));
            }
            match located {
                Some(l) if stopped => Ok((Ended::StoppedLocated, l.clone())),
                _ => Err(format!(
                    "neither booted nor stopped with a located message (exit {code:?}; last \
                     line {:?})",
                    o.lines.last().map(String::as_str).unwrap_or("")
                )),
            }
        }
    }
}

fn online(o: &Outcome) -> String {
    o.lines
        .iter()
        .find(|l| l.contains("CPUs online"))
        .cloned()
        .unwrap_or_default()
}

fn case(name: &str, blob: Vec<u8>, via: Via, el2: bool, expect: Expect) -> DtCase {
    DtCase {
        name: name.into(),
        blob,
        via,
        el2,
        expect,
    }
}

/// The hand-made cases: each the shape of a real mistake, with what the kernel must say.
fn semantic_cases(base: &[u8], base_el2: &[u8]) -> Result<Vec<DtCase>> {
    use Expect::{Boots, Stops};
    const RAW: Via = Via::Raw { x0: RAW_DTB_ADDR };
    let q = Via::Qemu;
    let ed = |edits: &[Edit]| dtb::edit(base, edits);
    let set = |path: &str, prop: &str, cells: &[u32]| ed(&[Edit::cells(path, prop, cells)]);
    let del_node = |path: &str| ed(&[Edit::DeleteNode { path: path.into() }]);
    let timer = |virt: [u32; 3]| {
        let mut c = vec![1, 0xd, 4, 1, 0xe, 4];
        c.extend(virt);
        c.extend([1, 0xa, 4]);
        set("/timer", "interrupts", &c)
    };
    // With the firmware stand-in: a redistributor region holding only the kernel's CPUs'
    // frames (QEMU numbers them in vCPU order, the stand-in's vCPU last) leaves the firmware
    // vCPU without a GIC interface. It must stop and the boot must say so, not hang.
    let standin_no_gic = {
        let fdt = flat_device_tree::Fdt::new(base).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        let root = fdt.find_node("/").context("no root node")?;
        let standin = root.children().any(|c| c.name == "asym-fw-standin");
        let cpus = root.children().find(|c| c.name == "cpus").map_or(0, |c| {
            c.children()
                .filter(|n| {
                    n.property("device_type")
                        .and_then(|p| p.as_str())
                        .is_some_and(|t| t.trim_end_matches('\0') == "cpu")
                })
                .count()
        });
        standin.then_some(cpus as u32)
    };
    let mut v = vec![
        // --- addresses (finding 3) --------------------------------------------------------
        case(
            "UART at 0xffff_ffff_ffff_f000",
            set(UART, "reg", &[0xffff_ffff, 0xffff_f000, 0, 0x1000])?,
            q,
            false,
            Stops("pl011@9000000 property `reg`"),
        ),
        case(
            "UART with bit 39 set",
            set(UART, "reg", &[0x80, 0x0900_0000, 0, 0x1000])?,
            q,
            false,
            Stops("39-bit"),
        ),
        case(
            "UART overlapping RAM",
            set(UART, "reg", &[0, 0x4100_0000, 0, 0x1000])?,
            q,
            false,
            Stops("overlaps RAM"),
        ),
        case(
            "UART where no PL011 is",
            set(UART, "reg", &[0, 0x0a00_0000, 0, 0x1000])?,
            q,
            false,
            Boots(vec!["no PL011 answers at 0xa000000"]),
        ),
        case(
            "GIC distributor size wraps",
            set(
                GIC,
                "reg",
                &[
                    0,
                    0x0800_0000,
                    0xffff_ffff,
                    0xffff_0000,
                    0,
                    0x080a_0000,
                    0,
                    0xf6_0000,
                ],
            )?,
            q,
            false,
            Stops("distributor"),
        ),
        case(
            "GIC redistributors 256 GiB",
            set(
                GIC,
                "reg",
                &[0, 0x0800_0000, 0, 0x1_0000, 0, 0x080a_0000, 0x40, 0],
            )?,
            q,
            false,
            Stops("redistributor region"),
        ),
        case(
            "GIC distributor where nothing is",
            set(
                GIC,
                "reg",
                &[0, 0x0c00_0000, 0, 0x1_0000, 0, 0x080a_0000, 0, 0xf6_0000],
            )?,
            q,
            false,
            Expect::Either,
        ),
        case(
            "redistributor-stride 1",
            set(GIC, "redistributor-stride", &[0, 1])?,
            q,
            false,
            Stops("redistributor-stride"),
        ),
        case(
            "redistributor-stride 4 GiB",
            set(GIC, "redistributor-stride", &[1, 0])?,
            q,
            false,
            Stops("redistributor-stride"),
        ),
        case(
            "redistributor-stride 256 KiB (valid, wrong)",
            set(GIC, "redistributor-stride", &[0, 0x4_0000])?,
            q,
            false,
            Expect::Either,
        ),
        // --- interrupts (finding 6) -------------------------------------------------------
        case(
            "UART on the virtual timer's PPI",
            set(UART, "interrupts", &[1, 0xb, 4])?,
            q,
            false,
            Stops("architected timer's"),
        ),
        case(
            "UART SPI 0xffffffe1 (wraps to SGI 1)",
            set(UART, "interrupts", &[0, 0xffff_ffe1, 4])?,
            q,
            false,
            Stops("out of range"),
        ),
        case(
            "UART SPI 988",
            set(UART, "interrupts", &[0, 988, 4])?,
            q,
            false,
            Stops("out of range"),
        ),
        case(
            "timer PPI 0xfffffffb (wraps to SGI 11)",
            timer([1, 0xffff_fffb, 4])?,
            q,
            false,
            Stops("out of range"),
        ),
        case(
            "virtual timer on the UART's SPI",
            timer([0, 1, 4])?,
            q,
            false,
            Stops("expected a Ppi"),
        ),
        case(
            "virtual timer on a PPI nothing raises",
            timer([1, 0x9, 4])?,
            q,
            false,
            Stops("no tick interrupt"),
        ),
        case(
            "GIC with 4-cell specifiers",
            set(GIC, "#interrupt-cells", &[4])?,
            q,
            false,
            Stops("#interrupt-cells"),
        ),
        case(
            "timer clock-frequency 2^32",
            set("/timer", "clock-frequency", &[1, 0])?,
            q,
            false,
            Stops("clock-frequency"),
        ),
        // --- missing nodes ----------------------------------------------------------------
        case("no /cpus", del_node("/cpus")?, q, false, Stops("/cpus")),
        case(
            "no interrupt controller",
            del_node(GIC)?,
            q,
            false,
            Stops("interrupt-controller"),
        ),
        case("no UART", del_node(UART)?, q, false, Stops("arm,pl011")),
        case(
            "no timer",
            del_node("/timer")?,
            q,
            false,
            Stops("arm,armv8-timer"),
        ),
        case(
            "no /psci",
            del_node("/psci")?,
            RAW,
            false,
            Stops("arm,psci"),
        ),
        case(
            "no memory node",
            del_node(MEM)?,
            RAW,
            false,
            Stops("no memory node"),
        ),
        // --- CPUs -----------------------------------------------------------------------
        case(
            "cpu capacity-dmips-mhz 0",
            set("/cpus/cpu@1", "capacity-dmips-mhz", &[0])?,
            q,
            false,
            Stops("capacity-dmips-mhz"),
        ),
        case(
            "cpu capacity-dmips-mhz 0xffffffff",
            set("/cpus/cpu@1", "capacity-dmips-mhz", &[0xffff_ffff])?,
            q,
            false,
            Expect::Either,
        ),
        case(
            "two CPUs with one MPIDR",
            set("/cpus/cpu@1", "reg", &[0])?,
            q,
            false,
            Boots(vec![
                "is another CPU's too: CPU skipped",
                "5 of 5 CPUs online",
            ]),
        ),
        case(
            "cpu reg 0xffffffff",
            set("/cpus/cpu@3", "reg", &[0xffff_ffff])?,
            q,
            false,
            Boots(vec!["outside MPIDR", "5 of 5 CPUs online"]),
        ),
        case(
            "/cpus #address-cells 3",
            set("/cpus", "#address-cells", &[3])?,
            q,
            false,
            Stops("#address-cells"),
        ),
        case(
            "OPP at 0 Hz",
            set("/opp-table-big/opp-600000000", "opp-hz", &[0, 0])?,
            q,
            false,
            Boots(vec!["opp-hz", "falling back to symmetric"]),
        ),
        case(
            "operating-points-v2 names no node",
            set("/cpus/cpu@0", "operating-points-v2", &[0xdead])?,
            q,
            false,
            Boots(vec!["names no node", "falling back to symmetric"]),
        ),
        case(
            "bogus stdout-path",
            ed(&[Edit::string(
                "/chosen",
                "stdout-path",
                "/nothing@0:115200n8",
            )])?,
            q,
            false,
            Boots(vec![]),
        ),
        // --- /chosen/bootargs (finding 10) --------------------------------------------------
        case(
            "non-UTF-8 bootargs",
            ed(&[Edit::Set {
                path: "/chosen".into(),
                prop: "bootargs".into(),
                value: b"semihosting selftest=cmd\xff\xfe ticks=10\0".to_vec(),
            }])?,
            q,
            false,
            Boots(vec!["bootargs`: byte 24: 0xff 0xfe is not UTF-8"]),
        ),
        // --- memory (findings 4, 11), raw: QEMU's loader would rewrite /memory --------------
        case(
            "memory of size 0",
            set(MEM, "reg", &[0, 0x4000_0000, 0, 0])?,
            RAW,
            false,
            Stops("no usable RAM bank"),
        ),
        case(
            "64 MiB of RAM, the DTB outside it",
            set(MEM, "reg", &[0, 0x4000_0000, 0, 0x400_0000])?,
            RAW,
            false,
            Boots(vec!["memory 0x40000000..0x44000000"]),
        ),
        case(
            "RAM at 0x8000_0000 (not the kernel's)",
            set(MEM, "reg", &[0, 0x8000_0000, 0, 0x2000_0000])?,
            RAW,
            false,
            Stops("no RAM bank holds the running kernel"),
        ),
        case(
            "RAM base + size wraps",
            set(MEM, "reg", &[0xffff_ffff, 0xffe0_0000, 0, 0x4000_0000])?,
            RAW,
            false,
            Stops("wraps"),
        ),
        case(
            "1 TiB of RAM",
            set(MEM, "reg", &[0, 0x4000_0000, 0x100, 0])?,
            RAW,
            false,
            Boots(vec!["clipped"]),
        ),
        case(
            "145 MiB of RAM (not 2 MiB aligned)",
            set(MEM, "reg", &[0, 0x4000_0000, 0, 0x910_0000])?,
            RAW,
            false,
            Boots(vec![]),
        ),
        case(
            "two RAM banks",
            set(
                MEM,
                "reg",
                &[
                    0,
                    0x4000_0000,
                    0,
                    0x1000_0000,
                    0,
                    0x5000_0000,
                    0,
                    0x1000_0000,
                ],
            )?,
            RAW,
            false,
            Boots(vec![
                "memory 0x40000000..0x50000000 + 0x50000000..0x60000000",
            ]),
        ),
        case(
            "overlapping RAM banks",
            set(
                MEM,
                "reg",
                &[
                    0,
                    0x4000_0000,
                    0,
                    0x1000_0000,
                    0,
                    0x4800_0000,
                    0,
                    0x1000_0000,
                ],
            )?,
            RAW,
            false,
            Boots(vec!["overlaps bank"]),
        ),
        case(
            "reserved-memory over the heap",
            ed(&[Edit::AddNode {
                parent: "/".into(),
                name: "reserved-memory".into(),
                props: vec![
                    ("#address-cells".into(), 2u32.to_be_bytes().to_vec()),
                    ("#size-cells".into(), 2u32.to_be_bytes().to_vec()),
                    ("ranges".into(), vec![]),
                ],
            }])
            .and_then(|b| {
                dtb::edit(
                    &b,
                    &[Edit::AddNode {
                        parent: "/reserved-memory".into(),
                        name: "carveout@40400000".into(),
                        props: vec![
                            (
                                "reg".into(),
                                [0u32, 0x4040_0000, 0, 0x10_0000]
                                    .iter()
                                    .flat_map(|c| c.to_be_bytes())
                                    .collect(),
                            ),
                            ("no-map".into(), vec![]),
                        ],
                    }],
                )
            })?,
            RAW,
            false,
            Boots(vec![]),
        ),
        // --- PSCI (finding 7), raw: QEMU's loader would rewrite /psci -------------------------
        case(
            "EL2 entry, PSCI method hvc",
            dtb::edit(base_el2, &[Edit::string("/psci", "method", "hvc")])?,
            RAW,
            true,
            Boots(vec![
                "reaches nothing from a kernel entered at EL2",
                "6 of 6 CPUs online",
            ]),
        ),
        case(
            "PSCI without a method",
            ed(&[Edit::Delete {
                path: "/psci".into(),
                prop: "method".into(),
            }])?,
            RAW,
            false,
            Stops("method"),
        ),
        case(
            "UART without interrupts",
            ed(&[Edit::Delete {
                path: UART.into(),
                prop: "interrupts".into(),
            }])?,
            q,
            false,
            Stops("interrupts"),
        ),
        case(
            "PSCI method neither hvc nor smc",
            ed(&[Edit::string("/psci", "method", "svc")])?,
            RAW,
            false,
            Stops("method"),
        ),
    ];
    if let Some(cpus) = standin_no_gic {
        v.push(case(
            "redistributor region without the firmware stand-in's frame",
            set(
                GIC,
                "reg",
                &[
                    0,
                    0x0800_0000,
                    0,
                    0x1_0000,
                    0,
                    0x080a_0000,
                    0,
                    cpus * 0x2_0000,
                ],
            )?,
            q,
            false,
            Boots(vec![
                "has no GIC interface in the regions the device tree's GIC node gives",
            ]),
        ));
    }
    // --- the blob and x0 (raw only) ----------------------------------------------------------
    let mut truncated = base.to_vec();
    truncated.truncate(200);
    v.push(case(
        "DTB cut to 200 bytes",
        truncated,
        RAW,
        false,
        Stops("FDT"),
    ));
    let mut bad_magic = base.to_vec();
    bad_magic[0] = 0;
    v.push(case(
        "bad FDT magic",
        bad_magic,
        RAW,
        false,
        Stops("no FDT magic"),
    ));
    let mut huge = base.to_vec();
    huge[4..8].copy_from_slice(&0xffff_ffffu32.to_be_bytes());
    v.push(case(
        "totalsize 4 GiB",
        huge,
        RAW,
        false,
        Stops("totalsize"),
    ));
    for (name, x0, why) in [
        ("x0 = 0", 0, "no (or a misaligned) DTB address"),
        (
            "x0 misaligned",
            RAW_DTB_ADDR + 4,
            "no (or a misaligned) DTB address",
        ),
        ("x0 beyond the map", 0x80_4900_0000, "39-bit range"),
    ] {
        v.push(case(
            name,
            base.to_vec(),
            Via::Raw { x0 },
            false,
            Stops(why),
        ));
    }
    Ok(v)
}

/// Properties a random mutation may hit (the ones the kernel reads), by name.
const TARGET_PROPS: &[&str] = &[
    "reg",
    "interrupts",
    "#address-cells",
    "#size-cells",
    "#interrupt-cells",
    "redistributor-stride",
    "capacity-dmips-mhz",
    "dynamic-power-coefficient",
    "operating-points-v2",
    "opp-hz",
    "opp-microvolt",
    "clock-latency-ns",
    "phandle",
    "cpu",
    "clock-frequency",
];

/// xorshift64*: a fixed seed gives the same mutations on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// `n` random mutations of `base`: one 32-bit cell of a property the kernel reads set to a
/// boundary value (0, 1, 2^31, 2^32 - 1), a neighbour of its value, a flipped bit or a random
/// word; booted raw, so /memory and /psci mutations reach the kernel too.
fn random_cases(base: &[u8], n: usize, seed: u64) -> Result<Vec<DtCase>> {
    let fdt = flat_device_tree::Fdt::new(base).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let mut targets: Vec<(String, String, Vec<u8>)> = Vec::new();
    collect(fdt.find_node("/").context("no root")?, "/", &mut targets);
    targets.retain(|(_, p, v)| TARGET_PROPS.contains(&p.as_str()) && v.len() >= 4);
    let mut rng = Rng(seed);
    let mut out = Vec::new();
    for i in 0..n {
        let (path, prop, value) = &targets[rng.below(targets.len())];
        let cell = rng.below(value.len() / 4);
        let old = u32::from_be_bytes(value[cell * 4..cell * 4 + 4].try_into().expect("4"));
        let new = match rng.below(8) {
            0 => 0,
            1 => 1,
            2 => 0x8000_0000,
            3 => u32::MAX,
            4 => old.wrapping_add(1),
            5 => old.wrapping_sub(1),
            6 => old ^ (1 << rng.below(32)),
            _ => rng.next() as u32,
        };
        let mut v = value.clone();
        v[cell * 4..cell * 4 + 4].copy_from_slice(&new.to_be_bytes());
        let blob = dtb::edit(
            base,
            &[Edit::Set {
                path: path.clone(),
                prop: prop.clone(),
                value: v,
            }],
        )?;
        out.push(case(
            &format!("random {i:02}: {path} {prop}[{cell}] {old:#x} -> {new:#x}"),
            blob,
            Via::Raw { x0: RAW_DTB_ADDR },
            false,
            Expect::Either,
        ));
    }
    Ok(out)
}

fn collect(
    n: flat_device_tree::node::FdtNode<'_, '_>,
    path: &str,
    out: &mut Vec<(String, String, Vec<u8>)>,
) {
    for p in n.properties() {
        out.push((path.to_string(), p.name.to_string(), p.value.to_vec()));
    }
    for c in n.children() {
        let cp = if path == "/" {
            format!("/{}", c.name)
        } else {
            format!("{path}/{}", c.name)
        };
        collect(c, &cp, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    fn outcome(lines: &[&str], code: i32) -> Outcome {
        Outcome {
            status: Some(ExitStatus::from_raw(code << 8)),
            timed_out: false,
            stopped: false,
            lines: lines.iter().map(|l| l.to_string()).collect(),
            elapsed: Duration::ZERO,
        }
    }

    const BOOTED: [&str; 3] = [
        "device tree: /cpus/cpu@1 property `reg`: MPIDR 0x0 is another CPU's too: CPU skipped",
        "5 of 5 CPUs online",
        "ticks: cpu0=10 at 74000 us",
    ];
    const STOPPED: [&str; 2] = [
        "asym: cannot boot: device tree: /pl011@9000000 property `reg`: registers 0x8009000000 \
         size 0x1000: beyond the 39-bit (512 GiB) physical range the kernel maps",
        "asym: system halted at 31000 us",
    ];

    #[test]
    fn a_boot_needs_status_0_ticks_and_its_lines() {
        let want = Expect::Boots(vec!["another CPU's too"]);
        assert_eq!(
            verdict(&want, &outcome(&BOOTED, 0)).unwrap().0,
            Ended::Booted
        );
        assert!(verdict(&want, &outcome(&BOOTED, 1)).is_err(), "status 1");
        assert!(
            verdict(&want, &outcome(&BOOTED[..2], 0)).is_err(),
            "no ticks"
        );
        let other = Expect::Boots(vec!["clipped"]);
        assert!(
            verdict(&other, &outcome(&BOOTED, 0)).is_err(),
            "missing line"
        );
    }

    #[test]
    fn a_stop_needs_a_located_cannot_boot_line_and_a_failing_status() {
        let want = Expect::Stops("pl011@9000000 property `reg`");
        let got = verdict(&want, &outcome(&STOPPED, 1)).unwrap();
        assert_eq!(got.0, Ended::StoppedLocated);
        assert!(verdict(&want, &outcome(&STOPPED, 0)).is_err(), "status 0");
        assert!(verdict(&Expect::Stops("timer"), &outcome(&STOPPED, 1)).is_err());
        let unlocated = [
            "asym: cannot boot: something",
            "asym: system halted at 1 us",
        ];
        assert!(verdict(&Expect::Stops("something"), &outcome(&unlocated, 1)).is_err());
    }

    #[test]
    fn either_accepts_a_boot_or_a_located_stop_only() {
        assert!(verdict(&Expect::Either, &outcome(&BOOTED, 0)).is_ok());
        assert!(verdict(&Expect::Either, &outcome(&STOPPED, 1)).is_ok());
        let fault = [
            "synchronous exception on cpu 0 at EL1: Data Abort (current EL)",
            "  FAR is in the distributor the device tree gives at /intc@8000000 property `reg`",
            "cpu 0 halted",
        ];
        assert!(verdict(&Expect::Either, &outcome(&fault, 1)).is_ok());
        let silent = ["asym: booting on qemu-virt", "cpu 0 halted"];
        assert!(verdict(&Expect::Either, &outcome(&silent, 1)).is_err());
        assert!(verdict(&Expect::Either, &outcome(&BOOTED[..2], 0)).is_err());
    }

    #[test]
    fn random_cases_are_reproducible_and_change_one_cell() {
        let base = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../kernel/tests/dtb/qemu-juno-r2-gicv3-smp6.dtb"
        ))
        .unwrap();
        let a = random_cases(&base, 5, SEED).unwrap();
        let b = random_cases(&base, 5, SEED).unwrap();
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((&x.name, &x.blob), (&y.name, &y.blob));
        }
        assert!(a.iter().all(|c| c.blob != base));
        let names: std::collections::HashSet<_> = a.iter().map(|c| &c.name).collect();
        assert!(names.len() > 1, "{names:?}");
    }
}
