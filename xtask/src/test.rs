//! `cargo xtask test`: every check, in stages, with a summary and one closing line.
//!
//! Stages: fmt; clippy (host crates, then kernel crates for the bare-metal target); host tests
//! (policy, board data, simulator scenarios, xtask, the kernel's host-testable parts); the
//! kernel build; the QEMU self-test matrix {GICv2, GICv3} × {EL1, EL2} with `-kernel` under
//! `-icount`, plus a second board's shape (HiKey960: 8 CPUs in two clusters) at GICv3 EL1 and
//! GICv2 EL2; the failure paths (`crash=panic|fault` must exit 101/1 with their reports); and
//! the boot through Debian's u-boot from a FAT disk, as on a board. A failing stage does not
//! stop the others (except that QEMU stages need the build).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::boards::Target;
use crate::console::{self, Defmt};
use crate::kernel::{self, TARGET};
use crate::qemu::{self, Boot, Machine, RunOpts};
use crate::{cmd, dtb, TestArgs};

#[derive(Debug)]
pub(crate) struct StageResult {
    pub(crate) name: String,
    pub(crate) ok: bool,
    pub(crate) detail: String,
    pub(crate) time: Duration,
}

/// Juno r2's CPU MPIDRs (`arch/arm64/boot/dts/arm/juno-r2.dts`: A72 0x0-0x1, A53 0x100-0x103).
const JUNO_MPIDRS: [u64; 6] = [0x0, 0x1, 0x100, 0x101, 0x102, 0x103];

/// Host crates for clippy and tests: the default members plus the kernel library, which
/// compiles on the host for its unit tests (kernel/CONTRACTS.md, "Host tests").
const HOST_CRATES: &[&str] = &[
    "asym-abi",
    "asym-sched",
    "asym-rtapp",
    "asym-trace",
    "asym-dvfs",
    "asym-boards",
    "asym-juno-r2",
    "asym-hikey960",
    "asym-hikey",
    "asym-sim",
    "xtask",
    "asym-kernel",
];

pub fn run(args: &TestArgs) -> Result<ExitCode> {
    let mut results: Vec<StageResult> = Vec::new();
    let started = Instant::now();

    if !args.no_host {
        stage_cmd(
            args,
            &mut results,
            "fmt",
            cmd::cargo().args(["fmt", "--all", "--check"]),
        );
        let mut clippy = cmd::cargo();
        clippy.arg("clippy");
        for c in HOST_CRATES {
            clippy.args(["-p", c]);
        }
        clippy.args(["--all-targets", "--", "-D", "warnings"]);
        stage_cmd(args, &mut results, "clippy (host)", &mut clippy);

        let t = Instant::now();
        let ensured = kernel::ensure_target();
        let mut clippy = cmd::cargo();
        clippy.arg("clippy");
        for c in kernel::KERNEL_CRATES {
            clippy.args(["-p", c]);
        }
        clippy.args(["--target", TARGET, "--", "-D", "warnings"]);
        match ensured {
            Ok(()) => stage_cmd(
                args,
                &mut results,
                "clippy (kernel, bare-metal)",
                &mut clippy,
            ),
            Err(e) if args.wants("clippy (kernel, bare-metal)") => results.push(StageResult {
                name: "clippy (kernel, bare-metal)".into(),
                ok: false,
                detail: format!("{e:#}"),
                time: t.elapsed(),
            }),
            Err(_) => {}
        }

        let mut test = cmd::cargo();
        // --no-fail-fast: one failing crate must not hide the results of the others.
        test.args(["test", "--no-fail-fast"]);
        for c in HOST_CRATES {
            test.args(["-p", c]);
        }
        stage_cmd(args, &mut results, "host tests", &mut test);

        // The seeds' experiments at reduced size: every must-show check must hold (the full
        // run is `cargo xtask experiments`, which regenerates docs/experiments.md).
        stage_cmd(
            args,
            &mut results,
            "experiments --quick",
            cmd::cargo().args([
                "run",
                "-p",
                "asym-sim",
                "--bin",
                "asym-experiments",
                "--",
                "--quick",
            ]),
        );

        if !args.no_lisa && args.wants("LISA") {
            lisa_stages(&mut results);
        }
    }

    if !args.no_boards {
        board_stages(args, &mut results);
    }

    if !args.no_qemu {
        qemu_stages(args, &mut results);
    }

    println!();
    println!(
        "== summary: {} stages in {:.0?}",
        results.len(),
        started.elapsed()
    );
    for r in &results {
        let line = format!(
            "{:<6} {:<46} {:>8.1?}  {}",
            if r.ok { "ok" } else { "FAILED" },
            r.name,
            r.time,
            r.detail
        );
        println!("{}", line.trim_end());
    }
    let passed = results.iter().filter(|r| r.ok).count();
    let failed = results.len() - passed;
    println!("{passed} passed, {failed} failed");
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The LISA venv (made once, reused while the pins are unchanged) and the check of every
/// bundled workload's trace with it (`crate::lisa`).
fn lisa_stages(results: &mut Vec<StageResult>) {
    println!("\n== LISA venv ({})", crate::lisa::REQUIREMENTS);
    let t = Instant::now();
    let python = match crate::lisa::ensure_venv() {
        Ok((python, reused)) => {
            results.push(StageResult {
                name: "LISA venv".into(),
                ok: true,
                detail: if reused { "reused" } else { "installed" }.into(),
                time: t.elapsed(),
            });
            python
        }
        Err(e) => {
            println!("xtask: {e:#}");
            results.push(StageResult {
                name: "LISA venv".into(),
                ok: false,
                detail: format!("{e:#}; LISA check not run"),
                time: t.elapsed(),
            });
            return;
        }
    };
    println!("\n== LISA check ({})", crate::lisa::CHECK_PY);
    let t = Instant::now();
    let (ok, detail) = match crate::lisa::check(&python, &[]) {
        Ok((p, f)) => (true, format!("{p} passed, {f} failed")),
        Err(e) => (false, format!("{e:#}")),
    };
    results.push(StageResult {
        name: "LISA check of the simulator's traces".into(),
        ok,
        detail,
        time: t.elapsed(),
    });
}

fn stage_cmd(
    args: &TestArgs,
    results: &mut Vec<StageResult>,
    name: &str,
    command: &mut std::process::Command,
) {
    if !args.wants(name) {
        return;
    }
    println!("\n== {name}");
    let t = Instant::now();
    let (ok, detail) = match cmd::status(command) {
        Ok(st) if st.success() => (true, String::new()),
        Ok(st) => (false, format!("{st}")),
        Err(e) => (false, format!("{e:#}")),
    };
    results.push(StageResult {
        name: name.into(),
        ok,
        detail,
        time: t.elapsed(),
    });
}

/// The real boards' checks: each board's Image built and its layout checked against the
/// board's u-boot (issue 11, must-show 1), then the boards' mainline DTBs as Debian's arm64
/// kernel package ships them parsed by `cargo xtask dt-check --board` with no difference
/// allowed (must-show 2).
fn board_stages(args: &TestArgs, results: &mut Vec<StageResult>) {
    for board in crate::boards::REAL {
        let name = format!("image {}: build + layout", board.name());
        if !args.wants(&name) {
            continue;
        }
        println!("\n== {name}");
        let t = Instant::now();
        let r = kernel::build(board, None).and_then(|a| {
            let dir = a
                .image
                .parent()
                .expect("Image has a directory")
                .to_path_buf();
            let scr = kernel::write_boot_script(board, &dir, "selftest")?;
            let facts = kernel::check_board_layout(&a, &scr)?;
            for f in &facts {
                println!("xtask: layout: {f}");
            }
            Ok(format!(
                "linked and placed at {:#x}, {} checks",
                a.flat.base,
                facts.len()
            ))
        });
        results.push(match r {
            Ok(detail) => StageResult {
                name,
                ok: true,
                detail,
                time: t.elapsed(),
            },
            Err(e) => {
                println!("xtask: {e:#}");
                StageResult {
                    name,
                    ok: false,
                    detail: format!("{e:#}"),
                    time: t.elapsed(),
                }
            }
        });
    }

    // The dt-check stages are named after the DTBs the package holds, known only once it is
    // fetched: `--only` picks them all by "dt-check" (or the fetch's name), then by name.
    if !(args.wants("mainline DTBs (Debian linux-image-arm64)") || args.wants("dt-check")) {
        return;
    }
    println!("\n== mainline DTBs from Debian's arm64 kernel package");
    let t = Instant::now();
    let cache = cmd::target_dir().join("debian-dtb");
    let dtbs = match crate::debian::fetch(&cache) {
        Ok(d) => d,
        Err(e) => {
            println!("xtask: {e:#}");
            results.push(StageResult {
                name: "mainline DTBs (Debian linux-image-arm64)".into(),
                ok: false,
                detail: format!("{e:#}; dt-check of the boards' DTBs not run"),
                time: t.elapsed(),
            });
            return;
        }
    };
    results.push(StageResult {
        name: "mainline DTBs (Debian linux-image-arm64)".into(),
        ok: true,
        detail: dtbs.package.clone(),
        time: t.elapsed(),
    });
    let exe = std::env::current_exe();
    for (name, path, board) in &dtbs.files {
        let file = name.rsplit('/').next().unwrap_or(name);
        let stage = format!("dt-check {file} --board {}", board.name());
        if !args.wants(&stage) {
            continue;
        }
        let t = Instant::now();
        let mut c = match &exe {
            Ok(exe) => std::process::Command::new(exe),
            Err(e) => {
                results.push(StageResult {
                    name: stage,
                    ok: false,
                    detail: format!("cannot find xtask's own binary: {e}"),
                    time: t.elapsed(),
                });
                continue;
            }
        };
        c.arg("dt-check").arg(path).args(["--board", board.name()]);
        println!("\n== {stage} ({})", dtbs.package);
        let (ok, detail) = match cmd::status(&mut c) {
            Ok(st) if st.success() => (true, format!("no difference ({})", dtbs.package)),
            Ok(st) => (
                false,
                format!("differences or not runnable ({st}); see above"),
            ),
            Err(e) => (false, format!("{e:#}")),
        };
        results.push(StageResult {
            name: stage,
            ok,
            detail,
            time: t.elapsed(),
        });
    }
}

/// One QEMU self-test run of the matrix.
#[derive(Debug, Clone)]
struct QemuRun {
    name: String,
    /// The emulated board whose device tree the run gets.
    board: crate::dtb::Board,
    machine: Machine,
    /// Lines (substrings) the console must show besides the self-test summary.
    expect: Vec<String>,
    /// `None`: a self-test run (summary `N passed, 0 failed`, exit 0). `Some(code)`: a
    /// failure-path run that must end with exactly this exit status.
    expect_exit: Option<i32>,
}

fn qemu_stages(args: &TestArgs, results: &mut Vec<StageResult>) {
    println!("\n== kernel build");
    let t = Instant::now();
    let built = kernel::build(Target::QemuVirt, None).and_then(|a| {
        let dir = a
            .image
            .parent()
            .expect("Image has a directory")
            .to_path_buf();
        kernel::write_boot_script(Target::QemuVirt, &dir, "selftest")?;
        let disk = kernel::write_boot_disk(&dir)?;
        Ok((a, disk))
    });
    let (artefacts, disk) = match built {
        Ok(b) => {
            results.push(StageResult {
                name: "kernel build + Image + boot.scr".into(),
                ok: true,
                detail: String::new(),
                time: t.elapsed(),
            });
            b
        }
        Err(e) => {
            println!("xtask: {e:#}");
            results.push(StageResult {
                name: "kernel build + Image + boot.scr".into(),
                ok: false,
                detail: format!("{e:#}; QEMU stages not run"),
                time: t.elapsed(),
            });
            return;
        }
    };
    let defmt = match crate::load_defmt(&artefacts.elf) {
        Ok(d) => d,
        Err(e) => {
            println!("xtask: {e:#}; frames will be shown as hex");
            None
        }
    };

    // As in `qemu`: 6 is --smp's default, so the board's own CPU count wins over it; the
    // first `smp` CPUs of the board are described when fewer are asked for.
    let smp = match args.board.nr_cpus() {
        Some(n) if args.smp == 6 || args.smp > n => n,
        _ => args.smp,
    };
    let base = Machine {
        smp,
        gic: 3,
        el2: false,
        memory_mib: 512,
        cpu: qemu::DEFAULT_CPU.into(),
        icount: Some(qemu::DEFAULT_ICOUNT.into()),
        gdb: false,
        append: "selftest".into(),
        boot: Boot::Direct {
            image: artefacts.image.clone(),
        },
        extra: Vec::new(),
    };
    let mut planned = Vec::new();
    for gic in [2u8, 3] {
        for el2 in [false, true] {
            planned.push(QemuRun {
                name: format!(
                    "selftest {} gicv{gic} {}",
                    args.board.name(),
                    if el2 { "el2" } else { "el1" }
                ),
                board: args.board,
                machine: Machine {
                    gic,
                    el2,
                    ..base.clone()
                },
                expect: Vec::new(),
                expect_exit: None,
            });
        }
    }
    // The failure paths (kernel/CONTRACTS.md, `crash=`): after the banner the highest CPU
    // panics (status 101, `panic on cpu N at file:line: ...`) or takes a data abort outside any
    // test (fault report, `cpu N halted`, status 1). The runner must see both as failures
    // with the report, not as a pass or a hang.
    let last = smp.saturating_sub(1);
    // A second emulated board, with eight CPUs in two clusters of four (HiKey960), so the
    // thread tests also run on a different shape: GICv3 at EL1 and GICv2 at EL2.
    let second = crate::dtb::Board::QemuHikey960;
    if args.board != second {
        let n = second.nr_cpus().unwrap_or(8);
        for (gic, el2) in [(3u8, false), (2, true)] {
            planned.push(QemuRun {
                name: format!(
                    "selftest {} gicv{gic} {}",
                    second.name(),
                    if el2 { "el2" } else { "el1" }
                ),
                board: second,
                machine: Machine {
                    smp: n,
                    gic,
                    el2,
                    ..base.clone()
                },
                expect: Vec::new(),
                expect_exit: None,
            });
        }
    }
    // `maxcpus=`: the suite with CPUs left down, which publish idle run queues but run
    // nothing. Three of six: one LITTLE CPU beside the two big ones (asymmetric, EAS on, the
    // domains cut to the online CPUs); one: the single-CPU paths (EAS off, no balancing).
    for n in [3u32, 1] {
        if smp > n {
            planned.push(QemuRun {
                name: format!("selftest {} gicv3 el1 maxcpus={n}", args.board.name()),
                board: args.board,
                machine: Machine {
                    append: format!("selftest maxcpus={n}"),
                    ..base.clone()
                },
                expect: vec![format!("{n} of {smp} CPUs online")],
                expect_exit: None,
            });
        }
    }
    // PAN (Armv8.1) exists only on a newer CPU model than the boards' Cortex-A53/A72: the
    // whole suite once more on QEMU's `max` CPU, where the kernel turns PAN on and the EL0
    // tests run with it (a kernel access to user memory through a user VA would fault).
    planned.push(QemuRun {
        name: format!("selftest {} gicv3 el1 cpu max (PAN)", args.board.name()),
        board: args.board,
        machine: Machine {
            cpu: "max".into(),
            ..base.clone()
        },
        expect: vec!["uspace_pan: PAN on on ".into()],
        expect_exit: None,
    });
    planned.push(QemuRun {
        name: format!("crash=panic reported {}", args.board.name()),
        board: args.board,
        machine: Machine {
            append: "semihosting crash=panic".into(),
            ..base.clone()
        },
        expect: vec![format!("panic on cpu {last} at ")],
        expect_exit: Some(101),
    });
    planned.push(QemuRun {
        name: format!("crash=fault reported {}", args.board.name()),
        board: args.board,
        machine: Machine {
            append: "semihosting crash=fault".into(),
            ..base.clone()
        },
        expect: vec![
            format!("synchronous exception on cpu {last}"),
            "Data Abort".into(),
            format!("cpu {last} halted"),
        ],
        expect_exit: Some(1),
    });
    // The long run's `maxcpus=` variant, short (`cargo xtask soak` is the long one): the
    // CPUs past the fourth are never brought up. They publish idle run queues but run
    // nothing, so a balancer that took them for idle CPUs would pull tasks onto them for
    // good, and the soak's watchdog would see those tasks stop. At shift=0, as `cargo xtask
    // soak` runs: at shift=4 the emulated timer can reach a halted vCPU a period late and
    // fail the tick-rate check.
    if smp > 4 {
        planned.push(QemuRun {
            name: format!(
                "soak 5 s {} maxcpus=4 ({} CPUs left down)",
                args.board.name(),
                smp - 4
            ),
            board: args.board,
            machine: Machine {
                icount: Some("shift=0,sleep=off".into()),
                append: "soak=5 maxcpus=4".into(),
                ..base.clone()
            },
            expect: vec![format!("4 of {smp} CPUs online"), "soak: ok".into()],
            expect_exit: Some(0),
        });
    }
    let uboot = Path::new(qemu::UBOOT_BIN);
    if uboot.exists() {
        planned.push(QemuRun {
            name: format!("selftest u-boot booti {} gicv3 el2", args.board.name()),
            board: args.board,
            machine: Machine {
                gic: 3,
                el2: true,
                append: String::new(),
                boot: Boot::UBoot {
                    bios: uboot.into(),
                    disk: disk.clone(),
                },
                ..base.clone()
            },
            // Proof that distro boot found our script and booti started the Image.
            expect: vec![
                "Found U-Boot script /boot.scr".into(),
                "Starting kernel ...".into(),
            ],
            expect_exit: None,
        });
    } else {
        results.push(StageResult {
            name: "selftest u-boot booti".into(),
            ok: false,
            detail: format!("{} missing: install Debian's u-boot-qemu", qemu::UBOOT_BIN),
            time: Duration::ZERO,
        });
    }

    // HiKey (the third emulated board) with its DVFS firmware stand-in, entered at EL2; HiKey960
    // runs above. GICv3 only: an 8-CPU board has no room for the firmware's vCPU under GICv2.
    if args.board == dtb::Board::QemuJunoR2 {
        let board = dtb::Board::QemuHikey;
        planned.push(QemuRun {
            name: format!("selftest {} gicv3 el2 firmware stand-in", board.name()),
            board,
            machine: Machine {
                smp: board.nr_cpus().unwrap_or(smp),
                el2: true,
                ..base.clone()
            },
            expect: vec!["dvfs: firmware stand-in running".into()],
            expect_exit: None,
        });
    }
    // With the stand-in the board's real driver must run: a stand-in that failed to start
    // (cpufreq off, or the emulated driver) is a failure, not a quieter pass.
    for run in planned.iter_mut() {
        let driver = match run.board {
            dtb::Board::QemuJunoR2 => "scmi-perf",
            dtb::Board::QemuHikey960 => "hi3660-stub-clk",
            dtb::Board::QemuHikey => "hi6220-stub-clk",
            _ => continue,
        };
        if run.expect_exit.is_none() && dtb::standin_fits(&run.machine) {
            run.expect.push(format!("cpufreq: driver {driver}"));
        }
    }

    // Every run gets the emulated board's device tree with -dtb, as `cargo xtask qemu` does:
    // QEMU hands it to the kernel (-kernel) or to u-boot, which passes it on through booti.
    let dir = artefacts
        .image
        .parent()
        .unwrap_or(Path::new("."))
        .to_path_buf();
    planned.retain(|r| args.wants(&r.name));
    let mut runs = Vec::new();
    for mut run in planned {
        match dtb::board_dtb(run.board, &mut run.machine, &dir) {
            Ok(Some(path)) => {
                run.machine.extra.push("-dtb".into());
                run.machine.extra.push(path.display().to_string());
                runs.push(run);
            }
            Ok(None) => runs.push(run),
            Err(e) => results.push(StageResult {
                name: run.name,
                ok: false,
                detail: format!("making the board DTB: {e:#}"),
                time: Duration::ZERO,
            }),
        }
    }

    // A machine whose CPUs span MPIDR clusters as Juno r2's do (0x0-0x1, 0x100-0x103):
    // every QEMU vCPU is otherwise in cluster 0, and SGI routing by Aff1, PSCI CPU_ON by a
    // cluster-1 MPIDR and the DT's cluster topology went unexercised in-kernel. QEMU numbers
    // GICv3 vCPUs 16 per Aff1, so -smp 20 and the DT keeps the six with Juno's MPIDRs.
    let name = "selftest qemu-juno-r2 gicv3 juno-mpidrs (0x0-0x1, 0x100-0x103)";
    if args.board == dtb::Board::QemuJunoR2 && args.wants(name) {
        let mut m = Machine {
            smp: 20,
            ..base.clone()
        };
        match dtb::board_dtb_of_cpus(args.board, &mut m, &dir, Some(&JUNO_MPIDRS)) {
            Ok(path) => {
                let mut machine = m;
                if let Some(p) = path {
                    machine.extra.push("-dtb".into());
                    machine.extra.push(p.display().to_string());
                }
                runs.push(QemuRun {
                    name: name.into(),
                    board: args.board,
                    machine,
                    expect: JUNO_MPIDRS
                        .iter()
                        .map(|m| format!("MPIDR {m:#x} cluster {} capacity", m >> 8))
                        .chain(["6 of 6 CPUs online".to_string()])
                        .collect(),
                    expect_exit: None,
                });
            }
            Err(e) => results.push(StageResult {
                name: name.into(),
                ok: false,
                detail: format!("making the DTB: {e:#}"),
                time: Duration::ZERO,
            }),
        }
    }

    // The Juno r2 board crate's own Image (not the qemu-virt binary): linked at 0x8008_0000
    // as Juno's booti places it, entered at EL2 with GICv2 as on the board, with the board's
    // carve-outs, DVFS transports and end policy. QEMU virt with 3 GiB has RAM there; a jump
    // Image at QEMU's load address enters it with x0 = the emulated board's DTB.
    // Once with the firmware stand-in, and once with a DT that describes no DVFS firmware: a
    // real board's kernel must then leave frequencies alone (cpufreq off, said so), never run
    // the emulated driver.
    let juno: Vec<_> = if args.board == dtb::Board::QemuJunoR2 {
        [true, false]
            .into_iter()
            .filter(|&fw| args.wants(&juno_image_run_name(fw)))
            .map(|fw| juno_image_run(&base, &dir, fw))
            .collect()
    } else {
        Vec::new()
    };

    let log_dir = artefacts
        .image
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(kernel::out_dir)
        .join("logs");
    // Logs of earlier runs would be mistaken for this run's.
    let _ = std::fs::remove_dir_all(&log_dir);
    let _ = std::fs::create_dir_all(&log_dir);
    let timeout = Duration::from_secs(args.timeout);
    let queue = Mutex::new(runs.into_iter().enumerate().rev().collect::<Vec<_>>());
    let done = Mutex::new(Vec::new());
    println!(
        "\n== QEMU self tests ({} at a time, {}s timeout each)",
        args.jobs.max(1),
        args.timeout
    );
    std::thread::scope(|s| {
        for _ in 0..args.jobs.max(1) {
            s.spawn(|| loop {
                let next = queue.lock().unwrap().pop();
                let Some((i, run)) = next else { break };
                let r = qemu_run(&run, defmt.as_ref(), timeout, &log_dir);
                done.lock().unwrap().push((i, r));
            });
        }
    });
    let mut done = done.into_inner().unwrap();
    done.sort_by_key(|(i, _)| *i);
    results.extend(done.into_iter().map(|(_, r)| r));
    for r in juno {
        match r {
            Ok((run, defmt)) => results.push(qemu_run(&run, defmt.as_ref(), timeout, &log_dir)),
            Err(e) => results.push(StageResult {
                name: JUNO_IMAGE_RUN.into(),
                ok: false,
                detail: format!("{e:#}"),
                time: Duration::ZERO,
            }),
        }
    }

    let stage = Stage {
        board: args.board,
        base: &base,
        dir: &dir,
        log_dir: &log_dir,
        jobs: args.jobs,
        defmt: defmt.as_ref(),
    };
    if args.wants("fault injection") {
        batch_stage(results, "fault injection", &stage, |s| {
            crate::faults::cases(s.board, s.base, s.dir)
        });
    }
    if args.wants("dt fuzz") {
        dt_fuzz_stage(results, &stage);
    }
    if args.wants("rt-app workloads on QEMU") {
        workload_stage(results);
    }
    if args.wants(EL0_STAGE) {
        el0_stage(results);
    }
    if args.wants(crate::seed002::STAGE) {
        crate::seed002::stage(results, crate::workload::OnOff::Off);
    }
    if args.wants(EXPERIMENTS_QEMU_STAGE) {
        experiments_qemu_stage(results);
    }
}

const EXPERIMENTS_QEMU_STAGE: &str = "experiments --quick on QEMU";

/// The QEMU half of `cargo xtask experiments --quick` (seeds 000, 001, 003 and 004 on the kernel;
/// 002 is the stage before): each must-show check must hold.
fn experiments_qemu_stage(results: &mut Vec<StageResult>) {
    println!("\n== {EXPERIMENTS_QEMU_STAGE}");
    let t = Instant::now();
    let o = crate::experiments_qemu::Opts {
        quick: true,
        seed: None,
    };
    let (ok, detail) = match crate::experiments_qemu::run_all(o) {
        Ok(sections) => {
            print!("{}", crate::experiments_qemu::render(o, &sections));
            let (checks, failed) = crate::experiments_qemu::failed_checks(&sections);
            if failed.is_empty() {
                (true, format!("{checks} checks hold"))
            } else {
                (false, failed.join("; "))
            }
        }
        Err(e) => (false, format!("{e:#}")),
    };
    println!(
        "{} {EXPERIMENTS_QEMU_STAGE}: {detail}",
        if ok { "ok    " } else { "FAILED" }
    );
    results.push(StageResult {
        name: EXPERIMENTS_QEMU_STAGE.into(),
        ok,
        detail,
        time: t.elapsed(),
    });
}

/// The DT fuzz batch, summed up in one line (and one per failing DT).
fn dt_fuzz_stage(results: &mut Vec<StageResult>, stage: &Stage<'_>) {
    let before = results.len();
    let t = Instant::now();
    batch_stage(results, "dt fuzz", stage, |s| {
        crate::dtfuzz::cases(s.board, s.base, s.dir)
    });
    // One summary line for the stage (and one per failing DT), not 90.
    let fuzz: Vec<StageResult> = results.drain(before..).collect();
    if !fuzz.iter().all(|r| r.name.starts_with("dt fuzz: ")) {
        // The stage could not even make its cases.
        results.extend(fuzz);
        return;
    }
    let count = |p: &str| {
        fuzz.iter()
            .filter(|r| r.ok && r.detail.starts_with(p))
            .count()
    };
    let hung = fuzz.iter().filter(|r| r.detail.contains("(hang)")).count();
    let failed = fuzz.iter().filter(|r| !r.ok).count();
    let detail = format!(
        "{} device trees: {} booted, {} stopped with a located message, {} hung, {} other \
         failures",
        fuzz.len(),
        count("Booted"),
        count("StoppedLocated"),
        hung,
        failed - hung
    );
    println!("== dt fuzz: {detail}");
    results.push(StageResult {
        name: "dt fuzz".into(),
        ok: failed == 0,
        detail,
        time: t.elapsed(),
    });
    results.extend(fuzz.into_iter().filter(|r| !r.ok));
}

/// What the batch stages (fault injection, DT fuzz, machine shapes) need from the QEMU stages.
struct Stage<'a> {
    board: crate::dtb::Board,
    /// The self-test machine (board DTB added by each stage as it needs).
    base: &'a Machine,
    /// Where the Image and the generated DTBs live.
    dir: &'a Path,
    log_dir: &'a Path,
    jobs: usize,
    defmt: Option<&'a Defmt>,
}

/// Runs one batch stage: each case becomes a result line, and the stage prints its counts.
fn batch_stage(
    results: &mut Vec<StageResult>,
    name: &str,
    stage: &Stage<'_>,
    cases: impl FnOnce(&Stage<'_>) -> Result<Vec<crate::batch::Case>>,
) {
    println!("\n== {name} ({} at a time)", stage.jobs.max(1));
    let t = Instant::now();
    let cases = match cases(stage) {
        Ok(c) => c,
        Err(e) => {
            results.push(StageResult {
                name: name.into(),
                ok: false,
                detail: format!("{e:#}"),
                time: t.elapsed(),
            });
            return;
        }
    };
    let n = cases.len();
    let (done, tally) = crate::batch::run(
        cases,
        stage.jobs,
        stage.defmt,
        &stage.log_dir.join(name.replace(' ', "-")),
    );
    println!(
        "== {name}: {n} runs, {} as expected, {} not ({} hung) in {:.1?}",
        tally.passed,
        tally.failed,
        tally.timed_out,
        t.elapsed()
    );
    results.extend(done);
}

const JUNO_IMAGE_RUN: &str = "selftest juno-r2 Image on QEMU virt gicv2 el2 3 GiB";

/// The name of [`juno_image_run`]'s run.
fn juno_image_run_name(firmware: bool) -> String {
    if firmware {
        JUNO_IMAGE_RUN.into()
    } else {
        format!("{JUNO_IMAGE_RUN}, no DVFS firmware in the DT")
    }
}

/// The run of the Juno r2 board binary on QEMU (see `qemu_stages`), with its own defmt table;
/// `firmware`: with the DVFS firmware stand-in, else a DT without DVFS firmware.
fn juno_image_run(base: &Machine, dir: &Path, firmware: bool) -> Result<(QemuRun, Option<Defmt>)> {
    let a = kernel::build(Target::JunoR2, None)?;
    let link = a.flat.base;
    let jump = dir.join("jump-to-juno-r2.Image");
    std::fs::write(&jump, dtb::jump_image(link))?;
    let mut m = Machine {
        gic: 2,
        el2: true,
        memory_mib: 3072,
        boot: Boot::Direct { image: jump },
        ..base.clone()
    };
    // Keeping every vCPU by MPIDR leaves none for the stand-in.
    let all: Vec<u64> = (0..u64::from(m.smp)).collect();
    let keep = (!firmware).then_some(&all[..]);
    let path = dtb::board_dtb_of_cpus(dtb::Board::QemuJunoR2, &mut m, dir, keep)?
        .ok_or_else(|| anyhow::anyhow!("no qemu-juno-r2 DTB"))?;
    m.extra.push("-dtb".into());
    m.extra.push(path.display().to_string());
    m.extra.push("-device".into());
    m.extra.push(format!(
        "loader,file={},addr={link:#x},force-raw=on",
        a.image.display()
    ));
    let defmt = crate::load_defmt(&a.elf).unwrap_or(None);
    let mut expect = vec!["asym 0.1.0 on juno-r2".to_string()];
    if firmware {
        expect.extend([
            "cpufreq: driver scmi-perf".into(),
            // The stand-in's SCMI channels are not at Juno's addresses: said, and the DT's
            // driven.
            "is not one board juno-r2 lists".into(),
            // The stand-in's carve-out and the board's secure top 16 MiB of the first 4 GiB,
            // which QEMU's 3 GiB of RAM covers.
            "mmu: 2 no-map regions".into(),
        ]);
    } else {
        expect.extend([
            "cpufreq: the device tree describes no DVFS firmware, and juno-r2 changes \
             frequencies only through its firmware"
                .into(),
            "mmu: 1 no-map regions".into(),
        ]);
    }
    Ok((
        QemuRun {
            name: juno_image_run_name(firmware),
            board: dtb::Board::QemuJunoR2,
            machine: m,
            expect,
            expect_exit: None,
        },
        defmt,
    ))
}

fn qemu_run(
    run: &QemuRun,
    defmt: Option<&Defmt>,
    timeout: Duration,
    log_dir: &Path,
) -> StageResult {
    let t = Instant::now();
    let outcome = qemu::run(
        run.machine.command(),
        defmt,
        &RunOpts {
            timeout: Some(timeout),
            prefix: format!("[{}] ", run.name),
            interactive: false,
            // The uart_rx self test asks for bytes on the serial input.
            answer: true,
            echo: true,
            stop_when: None,
        },
    );
    let elapsed = outcome.as_ref().map(|o| o.elapsed).unwrap_or_default();
    let (ok, detail) = match outcome {
        Err(e) => (false, format!("{e:#}")),
        Ok(o) => {
            let log = log_dir.join(format!("{}.log", run.name.replace(' ', "-")));
            let _ = std::fs::write(&log, o.lines.join("\n") + "\n");
            let (ok, detail) = verdict(run, &o, timeout);
            if ok {
                (ok, detail)
            } else {
                (ok, format!("{detail}; log {}", log.display()))
            }
        }
    };
    println!(
        "[{}] {} in {:.1?} (QEMU {:.1?}): {detail}",
        run.name,
        if ok { "ok" } else { "FAILED" },
        t.elapsed(),
        elapsed
    );
    StageResult {
        name: run.name.clone(),
        ok,
        detail,
        time: t.elapsed(),
    }
}

/// Whether a QEMU run did what `run` expects, and a one-line reason.
fn verdict(run: &QemuRun, o: &qemu::Outcome, timeout: Duration) -> (bool, String) {
    let code = o.status.and_then(|s| s.code());
    let sum = qemu::summary(&o.lines);
    let counts = sum
        .map(|(p, f)| format!("{p} passed, {f} failed"))
        .unwrap_or_else(|| "no summary line".into());
    if o.timed_out {
        return (
            false,
            format!("timed out after {}s ({counts})", timeout.as_secs()),
        );
    }
    if let Some(bad) = o.lines.iter().find(|l| console::is_undecodable(l)) {
        return (
            false,
            format!("{counts}, but a defmt frame did not decode: {bad}"),
        );
    }
    if let Some(missing) = run
        .expect
        .iter()
        .find(|want| !o.lines.iter().any(|l| l.contains(want.as_str())))
    {
        return (false, format!("{counts}, but no line {missing:?}"));
    }
    match (run.expect_exit, sum, code) {
        (Some(want), _, Some(got)) if got == want => {
            (true, format!("exit {want} with the expected report"))
        }
        (Some(want), _, _) => (false, format!("QEMU exit {code:?}, expected {want}")),
        (None, Some((p, 0)), Some(0)) if p > 0 => (true, counts),
        (None, _, _) => (
            false,
            format!("{counts}{}, QEMU exit {code:?}", failed_tests(&o.lines)),
        ),
    }
}

/// The self tests that failed, as `: name (message); name (message)` for the stage's summary
/// line, so the record of a CI run says which test failed and why without its log. At most
/// three are named; the message is cut at 160 characters.
fn failed_tests(lines: &[String]) -> String {
    const MARK: &str = " ... FAILED: ";
    let failed: Vec<String> = lines
        .iter()
        .filter_map(|l| {
            let at = l.find("selftest ")?;
            let (name, msg) = l[at + "selftest ".len()..].split_once(MARK)?;
            let msg: String = msg.chars().take(160).collect();
            Some(format!("{name} ({msg})"))
        })
        .collect();
    match failed.len() {
        0 => String::new(),
        n if n <= 3 => format!(": {}", failed.join("; ")),
        n => format!(": {} and {} more", failed[..3].join("; "), n - 3),
    }
}

const EL0_STAGE: &str = "rt-app EL0 executor vs in-kernel";
/// The workloads and guest time of [`el0_stage`] (docs/experiments.md, issue 13).
const EL0_WORKLOADS: &[&str] = &["periodic-small.json", "periodic-big.json"];
const EL0_RUN_NS: u64 = 1_000_000_000;

/// Issue 13's must-show 3: two bundled workloads on qemu-juno-r2 under `-icount`, each run by the
/// in-kernel executor and by the EL0 one (`user/rtapp`); both traces pass the validators
/// (`run_on_qemu`), every task gets the same placement class, and the energies are within
/// [`crate::workload::EL0_ENERGY_TOLERANCE_PCT`]. Then bad input at EL0 must end the run with
/// status 2 and a line naming the problem: bad JSON (the EL0 program's own reader), a file
/// that is not an ELF, and more threads than one EL0 address space runs.
fn el0_stage(results: &mut Vec<StageResult>) {
    println!("\n== {EL0_STAGE}");
    let t = Instant::now();
    let root = cmd::workspace_root();
    let out_root = cmd::target_dir().join("asym").join("el0");
    let machine = crate::MachineArgs::defaults();
    let board = crate::dtb::Board::QemuJunoR2;
    let run =
        |workload: PathBuf, out: &str, el0: bool, program: Option<PathBuf>| crate::workload::Run {
            workload,
            out: out_root.join(out),
            duration_ns: Some(EL0_RUN_NS),
            eas: None,
            lb: None,
            set: Vec::new(),
            append: Vec::new(),
            board,
            icount: Some(qemu::WORKLOAD_ICOUNT_SHIFT),
            timeout: Duration::from_secs(120),
            echo: false,
            el0,
            el0_program: program,
            highres: None,
        };
    let mut failed = Vec::new();
    let mut detail = String::new();
    for name in EL0_WORKLOADS {
        let wl = root.join("tests/workloads").join(name);
        let stem = name.trim_end_matches(".json");
        let both = crate::workload::run_on_qemu(
            &machine,
            &run(wl.clone(), &format!("{stem}-kernel"), false, None),
        )
        .and_then(|k| {
            let e = crate::workload::run_on_qemu(
                &machine,
                &run(wl.clone(), &format!("{stem}-el0"), true, None),
            )?;
            let desc = anyhow::Context::context(board.desc(), "qemu-juno-r2 has an energy model")?;
            crate::workload::compare_executors(desc, &k, &e)
        });
        match both {
            Ok(line) => {
                println!("ok     {name} on {}: {line}", board.name());
                detail.push_str(&format!("{name}: {line}; "));
            }
            Err(e) => {
                println!("FAILED {name} on {}: {e:#}", board.name());
                failed.push(format!("{name}: {e:#}"));
            }
        }
    }
    // Bad input: each must fail with status 2 and its message.
    let bad_dir = out_root.join("bad-input");
    let _ = std::fs::create_dir_all(&bad_dir);
    let bad_json = bad_dir.join("bad.json");
    let many = bad_dir.join("too-many-threads.json");
    let wrote = std::fs::write(
        &bad_json,
        "{\"global\": {\"duration\": 1}, \"tasks\": {\"t\": {\"run\": 100, \"sleep\": x}}}\n",
    )
    .and_then(|()| {
        std::fs::write(
            &many,
            "{\"tasks\": {\"t\": {\"instance\": 48, \"run\": 100, \"sleep\": 1000}}}\n",
        )
    });
    if let Err(e) = wrote {
        failed.push(format!("{}: {e}", bad_dir.display()));
    }
    let cases: [(&str, PathBuf, Option<PathBuf>, &[&str]); 3] = [
        (
            "bad JSON",
            bad_json.clone(),
            None,
            &[
                "rtapp-el0: ",
                "bad.json:1:",
                "invalid JSON",
                "status Some(2)",
            ],
        ),
        (
            "not an ELF",
            root.join("tests/workloads/periodic-small.json"),
            Some(bad_json.clone()),
            &["not a 64-bit little-endian ELF file", "status Some(2)"],
        ),
        (
            "48 threads",
            many.clone(),
            None,
            &[
                "48 threads; the EL0 executor runs at most 47",
                "status Some(2)",
            ],
        ),
    ];
    for (what, w, program, want) in cases {
        match crate::workload::run_on_qemu(&machine, &run(w, "bad-input", true, program)) {
            Ok(_) => failed.push(format!("{what}: the run succeeded")),
            Err(e) => {
                let msg = format!("{e:#}");
                match want.iter().find(|w| !msg.contains(*w)) {
                    None => println!("ok     {what} at EL0: reported: {msg}"),
                    Some(missing) => {
                        println!("FAILED {what} at EL0: no {missing:?} in: {msg}");
                        failed.push(format!("{what}: no {missing:?} in {msg}"));
                    }
                }
            }
        }
    }
    results.push(StageResult {
        name: EL0_STAGE.into(),
        ok: failed.is_empty(),
        detail: if failed.is_empty() {
            format!("{detail}bad JSON, not an ELF and 48 threads reported")
        } else {
            failed.join("; ")
        },
        time: t.elapsed(),
    });
}

/// Workloads each bundled workload runs on QEMU for, reduced to keep the suite short.
const WORKLOAD_RUN_NS: u64 = 300_000_000;
/// The workloads also run with the kernel's load balancing off (`--lb off`; on is the
/// default): those whose point is balancing (many threads coming and going move between run
/// queues while they sleep and wake), so both ways stay covered.
const LB_WORKLOADS: &[&str] = &["camera-lb.json", "messaging.json"];
/// The workloads also run on HiKey960: those whose point is energy-aware placement.
const EAS_WORKLOADS: &[&str] = &[
    "periodic-small.json",
    "periodic-big.json",
    "ramp.json",
    "uclamp-topapp.json",
];

/// Every bundled workload (`tests/workloads/`) with the in-kernel rt-app executor on
/// qemu-juno-r2, and the EAS ones on qemu-hikey960, for [`WORKLOAD_RUN_NS`]: the kernel's
/// `trace.txt` must pass the simulator's trace validators and its `report.json` (from the
/// one analyser) the analysis checks, and every workload thread must have run.
fn workload_stage(results: &mut Vec<StageResult>) {
    println!("\n== rt-app workloads on QEMU (in-kernel executor)");
    let t = Instant::now();
    let dir = cmd::workspace_root().join("tests/workloads");
    let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
        Ok(d) => d
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect(),
        Err(e) => {
            results.push(StageResult {
                name: "rt-app workloads on QEMU".into(),
                ok: false,
                detail: format!("{}: {e}", dir.display()),
                time: t.elapsed(),
            });
            return;
        }
    };
    files.sort();
    let machine = crate::MachineArgs::defaults();
    let out_root = cmd::target_dir().join("asym").join("workloads");
    let (mut ran, mut failed) = (0, Vec::new());
    for f in &files {
        let name = f
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let mut boards = vec![crate::dtb::Board::QemuJunoR2];
        if EAS_WORKLOADS.contains(&name.as_str()) {
            boards.push(crate::dtb::Board::QemuHikey960);
        }
        let mut runs: Vec<(crate::dtb::Board, Option<crate::workload::OnOff>)> =
            boards.iter().map(|&b| (b, None)).collect();
        if LB_WORKLOADS.contains(&name.as_str()) {
            runs.push((
                crate::dtb::Board::QemuJunoR2,
                Some(crate::workload::OnOff::Off),
            ));
        }
        for (board, lb) in runs {
            let r = crate::workload::Run {
                workload: f.clone(),
                append: Vec::new(),
                out: out_root.join(format!(
                    "{}-{}{}",
                    board.name(),
                    name.trim_end_matches(".json"),
                    if lb.is_some() { "-no-lb" } else { "" }
                )),
                duration_ns: Some(WORKLOAD_RUN_NS),
                eas: None,
                lb,
                set: Vec::new(),
                board,
                icount: Some(crate::qemu::WORKLOAD_ICOUNT_SHIFT),
                timeout: Duration::from_secs(300),
                echo: false,
                el0: false,
                el0_program: None,
                highres: None,
            };
            ran += 1;
            let res = crate::workload::run_on_qemu(&machine, &r).and_then(|a| {
                asym_trace::validate::check_analysis(&a, WORKLOAD_RUN_NS)
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
                if a.tasks.is_empty() || a.tasks.iter().any(|t| t.runtime_ns == 0) {
                    anyhow::bail!(
                        "a workload thread never ran: {:?}",
                        a.tasks
                            .iter()
                            .map(|t| (&t.name, t.runtime_ns))
                            .collect::<Vec<_>>()
                    );
                }
                Ok(a)
            });
            match res {
                Ok(a) => println!(
                    "ok     {name} on {}{}: {} lines, {} tasks, {:.0} uJ",
                    board.name(),
                    if lb.is_some() { " --lb off" } else { "" },
                    a.lines,
                    a.tasks.len(),
                    a.total_energy_uj
                ),
                Err(e) => {
                    let lb = if lb.is_some() { " --lb off" } else { "" };
                    println!("FAILED {name} on {}{lb}: {e:#}", board.name());
                    failed.push(format!("{name} on {}{lb}: {e:#}", board.name()));
                }
            }
        }
    }
    results.push(StageResult {
        name: "rt-app workloads on QEMU".into(),
        ok: failed.is_empty() && ran > 0,
        detail: if failed.is_empty() {
            format!("{ran} runs")
        } else {
            failed.join("; ")
        },
        time: t.elapsed(),
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    fn outcome(lines: &[&str], code: Option<i32>, timed_out: bool) -> qemu::Outcome {
        qemu::Outcome {
            // A wait status carries the exit code in bits 8..16.
            status: code.map(|c| ExitStatus::from_raw(c << 8)),
            timed_out,
            stopped: false,
            lines: lines.iter().map(|l| l.to_string()).collect(),
            elapsed: Duration::ZERO,
        }
    }

    fn run(expect: &[&str], expect_exit: Option<i32>) -> QemuRun {
        QemuRun {
            name: "t".into(),
            board: crate::dtb::Board::Virt,
            machine: Machine {
                smp: 1,
                gic: 3,
                el2: false,
                memory_mib: 64,
                cpu: qemu::DEFAULT_CPU.into(),
                icount: None,
                gdb: false,
                append: String::new(),
                boot: Boot::Direct {
                    image: "Image".into(),
                },
                extra: Vec::new(),
            },
            expect: expect.iter().map(|s| s.to_string()).collect(),
            expect_exit,
        }
    }

    const T: Duration = Duration::from_secs(1);

    #[test]
    fn self_test_run_passes_only_with_all_passed_and_status_0() {
        let r = run(&[], None);
        let ok = ["selftest a ... ok", "1 passed, 0 failed"];
        assert!(verdict(&r, &outcome(&ok, Some(0), false), T).0);
        // A failed test, a non-zero status, no summary, zero tests, a timeout: all failures.
        let failed = ["selftest a ... FAILED: x", "0 passed, 1 failed"];
        let (ok_, why) = verdict(&r, &outcome(&failed, Some(1), false), T);
        assert!(!ok_, "{why}");
        // The summary names the failed test and its message (a CI record has no log).
        assert_eq!(why, "0 passed, 1 failed: a (x), QEMU exit Some(1)");
        assert!(!verdict(&r, &outcome(&ok, Some(1), false), T).0);
        assert!(!verdict(&r, &outcome(&["booted"], Some(0), false), T).0);
        assert!(!verdict(&r, &outcome(&["0 passed, 0 failed"], Some(0), false), T).0);
        let (ok_, why) = verdict(&r, &outcome(&ok, None, true), T);
        assert!(!ok_ && why.contains("timed out"), "{why}");
        // A killed QEMU (signal, no exit code) is not a pass either.
        assert!(!verdict(&r, &outcome(&ok, None, false), T).0);
    }

    #[test]
    fn undecodable_frames_and_missing_lines_fail_the_run() {
        let r = run(&[], None);
        let lines = ["<malformed defmt frame: 01>", "1 passed, 0 failed"];
        let (ok, why) = verdict(&r, &outcome(&lines, Some(0), false), T);
        assert!(!ok && why.contains("did not decode"), "{why}");

        let r = run(&["Found U-Boot script /boot.scr"], None);
        let (ok, why) = verdict(&r, &outcome(&["1 passed, 0 failed"], Some(0), false), T);
        assert!(!ok && why.contains("/boot.scr"), "{why}");
    }

    #[test]
    fn failure_path_run_needs_its_exact_status_and_report() {
        let r = run(&["panic on cpu 5 at "], Some(101));
        let panic = ["panic on cpu 5 at kernel/src/boot.rs:1: boom"];
        assert!(verdict(&r, &outcome(&panic, Some(101), false), T).0);
        assert!(!verdict(&r, &outcome(&panic, Some(0), false), T).0);
        assert!(!verdict(&r, &outcome(&panic, Some(1), false), T).0);
        assert!(!verdict(&r, &outcome(&["panic on cpu 4 at x"], Some(101), false), T).0);
        assert!(!verdict(&r, &outcome(&panic, None, true), T).0);
    }

    #[test]
    fn failed_tests_named_at_most_three() {
        let l = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(failed_tests(&l(&["selftest a ... ok"])), "");
        let one = l(&["[cpu] selftest t_x ... FAILED: left 1, right 0"]);
        assert_eq!(failed_tests(&one), ": t_x (left 1, right 0)");
        let five: Vec<String> = (0..5)
            .map(|i| format!("selftest t{i} ... FAILED: m"))
            .collect();
        assert_eq!(failed_tests(&five), ": t0 (m); t1 (m); t2 (m) and 2 more");
    }
}
