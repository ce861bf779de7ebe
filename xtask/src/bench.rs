//! `cargo xtask bench`: boot timing and the scheduler's switch costs in guest time, and the
//! policy/simulator benchmarks.
//!
//! Boot bench lines (kernel/CONTRACTS.md, printed when the command line has `bench`):
//! `bench boot cpu=<n> online_us=<u64> first_tick_us=<u64>` per CPU and
//! `bench boot all_online_us=<u64> init_us=<u64> all_ticked_us=<u64>` once (`none` for a tick
//! that has not run: an idle CPU's tick is stopped while nothing is due on it). `init_us` is
//! when the `init` thread first ran. Times are guest µs since reset (the counter starts at 0
//! at QEMU reset), so under `-icount` they are deterministic.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Result};

use crate::dtb::{self, Board};
use crate::qemu::{self, Boot, RunOpts};
use crate::{cmd, kernel, MachineArgs};

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct BootBench {
    /// cpu → (online_us, first_tick_us)
    pub cpus: BTreeMap<u32, (Option<u64>, Option<u64>)>,
    pub all_online_us: Option<u64>,
    /// When the `init` thread first ran (the nearest point to Linux's first user task).
    pub init_us: Option<u64>,
    /// When the last CPU first ticked; `None` while some CPU's tick never ran (NOHZ idle).
    pub all_ticked_us: Option<u64>,
}

/// Parses `key=value` fields after `bench boot` anywhere in a line (a defmt timestamp and
/// level may precede it).
pub fn parse_boot_bench<'a>(lines: impl IntoIterator<Item = &'a str>) -> BootBench {
    let mut b = BootBench::default();
    for line in lines {
        let Some((_, rest)) = line.split_once("bench boot ") else {
            continue;
        };
        let fields: BTreeMap<&str, u64> = rest
            .split_whitespace()
            .filter_map(|f| f.split_once('='))
            .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
            .collect();
        if let Some(&cpu) = fields.get("cpu") {
            let e = b.cpus.entry(cpu as u32).or_default();
            if let Some(&v) = fields.get("online_us") {
                e.0 = Some(v);
            }
            if let Some(&v) = fields.get("first_tick_us") {
                e.1 = Some(v);
            }
        }
        if let Some(&v) = fields.get("all_online_us") {
            b.all_online_us = Some(v);
        }
        if let Some(&v) = fields.get("init_us") {
            b.init_us = Some(v);
        }
        if let Some(&v) = fields.get("all_ticked_us") {
            b.all_ticked_us = Some(v);
        }
    }
    b
}

fn is_bench_end(line: &str) -> bool {
    line.contains("bench boot ") && line.contains("all_ticked_us=")
}

/// One boot-bench run: what it parsed and the machine it ran on.
#[derive(Debug)]
pub struct BootRun {
    pub bench: BootBench,
    /// vCPUs booted (the board's count when `--smp` was left at its default).
    pub smp: u32,
    pub icount: String,
    /// Every CPU, `all_online_us` and `init_us` reported.
    pub complete: bool,
    pub timed_out: bool,
    /// QEMU ran until the `all_ticked_us` line.
    pub stopped: bool,
}

/// The kernel's QEMU `virt` build booted directly on `board`'s emulated DT with `cmdline`
/// under `-icount <icount>`: the command every guest-time benchmark runs, with its defmt table
/// and the vCPU count actually used (the board's own count replaces `--smp`'s default).
struct BenchBoot {
    machine: qemu::Machine,
    defmt: Option<crate::console::Defmt>,
    smp: u32,
}

fn bench_boot(
    machine: &MachineArgs,
    board: Board,
    cmdline: &str,
    icount: &str,
) -> Result<BenchBoot> {
    let a = kernel::build(crate::boards::Target::QemuVirt, None)?;
    let defmt = crate::load_defmt(&a.elf)?;
    let mut machine = machine.clone();
    if let Some(n) = board.nr_cpus() {
        // As in `qemu`: 6 is --smp's default, so the board's own CPU count wins.
        if machine.smp == 6 || machine.smp > n {
            machine.smp = n;
        }
    }
    let mut m = machine.machine(
        Boot::Direct {
            image: a.image.clone(),
        },
        cmdline,
        false,
        false,
    );
    m.icount = Some(icount.to_string());
    let dir = a.image.parent().unwrap_or(std::path::Path::new("."));
    if let Some(path) = dtb::board_dtb(board, &mut m, dir)? {
        m.extra.push("-dtb".into());
        m.extra.push(path.display().to_string());
    }
    Ok(BenchBoot {
        machine: m,
        defmt,
        smp: machine.smp,
    })
}

/// Boots the kernel with `bench` under `-icount icount` and parses its boot-bench lines; an
/// error when none came.
pub fn boot_measure(
    machine: &MachineArgs,
    board: Board,
    timeout: Duration,
    append: &str,
    icount: &str,
) -> Result<BootRun> {
    let cmdline = format!("bench {append}").trim().to_string();
    let BenchBoot {
        machine: m,
        defmt,
        smp,
    } = bench_boot(machine, board, &cmdline, icount)?;
    let o = qemu::run(
        m.command(),
        defmt.as_ref(),
        &RunOpts {
            timeout: Some(timeout),
            echo: true,
            stop_when: Some(is_bench_end),
            ..Default::default()
        },
    )?;
    let bench = parse_boot_bench(o.lines.iter().map(String::as_str));
    if bench.cpus.is_empty() {
        bail!(
            "no `bench boot` lines in the console output{} (does the kernel support `bench`?)",
            if o.timed_out {
                " before the timeout"
            } else {
                ""
            }
        );
    }
    let complete = bench.cpus.len() == smp as usize
        && bench.all_online_us.is_some()
        && bench.init_us.is_some();
    Ok(BootRun {
        bench,
        smp,
        icount: icount.to_string(),
        complete,
        timed_out: o.timed_out,
        stopped: o.stopped,
    })
}

pub fn boot(
    machine: &MachineArgs,
    board: Board,
    timeout: Duration,
    append: &str,
) -> Result<ExitCode> {
    let r = boot_measure(machine, board, timeout, append, qemu::DEFAULT_ICOUNT)?;
    let b = &r.bench;
    let us = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
    println!();
    println!(
        "boot bench: QEMU virt as {}, {} vCPUs, GICv{}, {}, -icount {} (guest time since reset)",
        board.name(),
        r.smp,
        machine.gic,
        if machine.el2 {
            "EL2 entry"
        } else {
            "EL1 entry"
        },
        r.icount
    );
    println!("{:>4} {:>14} {:>18}", "cpu", "online_us", "first_tick_us");
    for (cpu, (online, tick)) in &b.cpus {
        println!("{cpu:>4} {:>14} {:>18}", us(*online), us(*tick));
    }
    println!(
        "{:>4} {:>14} {:>18}",
        "all",
        us(b.all_online_us),
        us(b.all_ticked_us)
    );
    println!("init thread first ran at {} us", us(b.init_us));
    if !r.stopped {
        println!("xtask: QEMU ended before the `all_ticked_us` line");
    }
    if !r.complete {
        println!(
            "xtask: incomplete: {} of {} CPUs reported{}",
            b.cpus.len(),
            r.smp,
            if r.timed_out { ", timed out" } else { "" }
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// One `bench switch <name> n=<ops> total_ns=<ns> per_op_ns=<ns>` line (kernel/src/bench.rs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SwitchLine {
    pub name: String,
    pub n: u64,
    pub total_ns: u64,
    pub per_op_ns: u64,
}

/// The `bench switch` lines of a run.
pub fn parse_switch<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<SwitchLine> {
    let mut out = Vec::new();
    for line in lines {
        let Some((_, rest)) = line.split_once("bench switch ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let Some(name) = words.next() else { continue };
        let fields: BTreeMap<&str, u64> = words
            .filter_map(|f| f.split_once('='))
            .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
            .collect();
        if let (Some(&n), Some(&total_ns), Some(&per_op_ns)) = (
            fields.get("n"),
            fields.get("total_ns"),
            fields.get("per_op_ns"),
        ) {
            out.push(SwitchLine {
                name: name.to_string(),
                n,
                total_ns,
                per_op_ns,
            });
        }
    }
    out
}

/// What each benchmark measures, its goal in instructions (from the threads issue) and, for
/// scale, Linux 6.1 on the same QEMU virt (pipe round trips).
const SWITCH_ROWS: &[(&str, &str, Option<u64>)] = &[
    ("yield_same_cpu", "same-CPU yield round trip", Some(2_000)),
    (
        "wait_wake_same_cpu",
        "same-CPU wait/wake round trip",
        Some(2_000),
    ),
    (
        "wait_wake_cross_cpu",
        "cross-CPU wait/wake round trip (IPI)",
        Some(4_000),
    ),
    ("tick", "tick handler (sched + cpufreq)", None),
    ("wakeup_6cpu", "wake-up path, 6 CPUs (try_to_wake_up)", None),
    ("el0_null_syscall", "EL0 null system call round trip", None),
    // The EL0 issue's goal: at most twice the in-kernel threads' same-CPU round trip.
    (
        "el0_wait_wake_same_cpu",
        "EL0<->EL0 wait/wake round trip, same CPU",
        Some(4_000),
    ),
    (
        "el0_futex_same_cpu",
        "EL0<->EL0 futex round trip, same CPU",
        Some(4_000),
    ),
];

/// One `bench=switch` boot and what it printed: the kernel's `bench=switch` under `-icount
/// shift=0`, where one guest instruction is one guest ns, so the per-operation times are
/// instruction counts (all CPUs together).
#[derive(Debug)]
pub struct SwitchRun {
    pub lines: Vec<SwitchLine>,
    pub smp: u32,
    /// The kernel ended with status 0.
    pub ok: bool,
    pub timed_out: bool,
}

impl SwitchRun {
    /// `per_op_ns` of the line `name` (guest instructions under `shift=0`).
    pub fn per_op(&self, name: &str) -> Option<u64> {
        self.lines
            .iter()
            .find(|l| l.name == name)
            .map(|l| l.per_op_ns)
    }
}

/// Boots the kernel with `bench=switch` under `-icount shift=0` on `board` and returns its
/// `bench switch` lines (`echo`: show the console as it runs).
pub fn switch_measure(
    machine: &MachineArgs,
    board: Board,
    timeout: Duration,
    echo: bool,
) -> Result<SwitchRun> {
    let BenchBoot {
        machine: m,
        defmt,
        smp,
    } = bench_boot(machine, board, "bench=switch", "shift=0,sleep=off")?;
    let o = qemu::run(
        m.command(),
        defmt.as_ref(),
        &RunOpts {
            timeout: Some(timeout),
            echo,
            ..Default::default()
        },
    )?;
    Ok(SwitchRun {
        lines: parse_switch(o.lines.iter().map(String::as_str)),
        smp,
        ok: o.status.and_then(|s| s.code()) == Some(0),
        timed_out: o.timed_out,
    })
}

/// `cargo xtask bench switch`: [`switch_measure`] printed as a table beside the goals.
pub fn switch(machine: &MachineArgs, board: Board, timeout: Duration) -> Result<ExitCode> {
    let run = switch_measure(machine, board, timeout, true)?;
    let got = &run.lines;
    println!();
    println!(
        "switch bench: QEMU virt as {}, {} vCPUs, GICv{}, -icount shift=0 (1 instruction = 1 ns; counts are for all CPUs together)",
        board.name(),
        run.smp,
        machine.gic
    );
    println!(
        "{:<42} {:>8} {:>14} {:>8}",
        "operation", "n", "instructions", "goal"
    );
    let mut complete = true;
    for (key, what, goal) in SWITCH_ROWS {
        match got.iter().find(|l| l.name == *key) {
            Some(l) => println!(
                "{:<42} {:>8} {:>14} {:>8}",
                what,
                l.n,
                l.per_op_ns,
                goal.map_or("-".to_string(), |g| format!("<= {g}"))
            ),
            None => {
                complete = false;
                println!("{what:<42} {:>8} {:>14}", "-", "missing");
            }
        }
    }
    println!(
        "for scale: Linux 6.1 (Debian arm64) on QEMU virt with 6 vCPUs: ~16,000 instructions per \
         same-CPU pipe round trip, ~20,000 cross-CPU"
    );
    if !complete || !run.ok {
        println!(
            "xtask: incomplete run (kernel status {}{})",
            if run.ok { "0" } else { "not 0" },
            if run.timed_out { ", timed out" } else { "" }
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// `cargo xtask soak`: the kernel's `soak=<seconds>` long run (not part of `cargo xtask test`),
/// under `-icount`; passes when the kernel prints `soak: ok` and exits 0.
pub fn soak(
    machine: &MachineArgs,
    board: Board,
    seconds: u32,
    shift: u32,
    append: &str,
) -> Result<ExitCode> {
    let cmdline = format!("soak={seconds} {append}").trim().to_string();
    let BenchBoot {
        machine: m, defmt, ..
    } = bench_boot(
        machine,
        board,
        &cmdline,
        &format!("shift={shift},sleep=off"),
    )?;
    // Guest time runs at roughly host speed under -icount: allow three times as much, plus boot.
    let timeout = Duration::from_secs(u64::from(seconds) * 3 + 120);
    let o = qemu::run(
        m.command(),
        defmt.as_ref(),
        &RunOpts {
            timeout: Some(timeout),
            echo: true,
            ..Default::default()
        },
    )?;
    let ok = o.lines.iter().any(|l| l.contains("soak: ok"));
    let code = o.status.and_then(|s| s.code());
    if ok && code == Some(0) {
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "xtask: soak failed (exit {code:?}{})",
        if o.timed_out { ", timed out" } else { "" }
    );
    Ok(ExitCode::FAILURE)
}

pub fn sched(args: &[String]) -> Result<ExitCode> {
    let dir = cmd::workspace_root().join("kernel/sched");
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
    if !manifest.contains("[[bench]]") && !dir.join("benches").is_dir() {
        println!(
            "xtask: the policy crate has no benchmark yet (no [[bench]] in kernel/sched/Cargo.toml \
             and no kernel/sched/benches/)"
        );
        return Ok(ExitCode::FAILURE);
    }
    let st = cmd::status(
        cmd::cargo()
            .args(["bench", "-p", "asym-sched", "--benches", "--"])
            .args(args),
    )?;
    Ok(crate::exit_code(st.code()))
}

/// The simulator's throughput benchmark is its `--bench` mode (juno-r2 with 10, 100 and 1000
/// tasks; simulated seconds per wall second and events per second).
pub fn sim(args: &[String]) -> Result<ExitCode> {
    run_sim(&["--bench"], args)
}

/// Runs the simulator binary (release build) with `fixed` then `args`; `cargo xtask sim`
/// forwards everything here.
pub fn run_sim(fixed: &[&str], args: &[String]) -> Result<ExitCode> {
    let st = cmd::status(
        cmd::cargo()
            .args([
                "run",
                "--release",
                "-p",
                "asym-sim",
                "--bin",
                "asym-sim",
                "--",
            ])
            .args(fixed)
            .args(args),
    )?;
    Ok(crate::exit_code(st.code()))
}

/// `cargo xtask experiments`: `asym-experiments` (release build) writing the generated block
/// of `docs/experiments.md`, or printing it with `--quick` / `--seed`.
pub fn experiments(quick: bool, seed: Option<&str>) -> Result<ExitCode> {
    let doc = cmd::workspace_root().join("docs/experiments.md");
    let mut c = cmd::cargo();
    c.args([
        "run",
        "--release",
        "-p",
        "asym-sim",
        "--bin",
        "asym-experiments",
        "--",
    ]);
    if quick {
        c.arg("--quick");
    }
    if let Some(s) = seed {
        c.args(["--seed", s]);
    }
    if !quick && seed.is_none() {
        c.arg("--write").arg(&doc);
    }
    let st = cmd::status(&mut c)?;
    Ok(crate::exit_code(st.code()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_bench_lines_are_parsed_and_bad_ones_skipped() {
        let lines = [
            "bench switch: 6 CPUs, HZ=250, lock-order checker off",
            "bench switch yield_same_cpu n=20000 total_ns=63286576 per_op_ns=3164",
            "0.1 INFO bench switch tick n=251 total_ns=424944 per_op_ns=1693",
            "bench switch wakeup_6cpu n=x total_ns=1 per_op_ns=1",
        ];
        let got = parse_switch(lines);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].name, "yield_same_cpu");
        assert_eq!((got[0].n, got[0].per_op_ns), (20000, 3164));
        assert_eq!(got[1].name, "tick");
    }

    #[test]
    fn boot_bench_lines_are_parsed_with_or_without_a_prefix() {
        let lines = [
            "asym: banner",
            "bench boot cpu=0 online_us=1200 first_tick_us=5200",
            "0.010000 INFO bench boot cpu=1 online_us=3400 first_tick_us=7400",
            "bench boot cpu=1 online_us=bad",
            "bench boot cpu=2 online_us=3500 first_tick_us=none",
            "bench boot all_online_us=3500 init_us=3900 all_ticked_us=none",
        ];
        let b = parse_boot_bench(lines);
        assert_eq!(b.cpus.len(), 3);
        assert_eq!(b.cpus[&0], (Some(1200), Some(5200)));
        assert_eq!(b.cpus[&1], (Some(3400), Some(7400)));
        // A CPU whose tick never ran (NOHZ idle) reports `none`.
        assert_eq!(b.cpus[&2], (Some(3500), None));
        assert_eq!(b.all_online_us, Some(3500));
        assert_eq!(b.init_us, Some(3900));
        assert_eq!(b.all_ticked_us, None);
        assert!(is_bench_end(lines[5]));
        assert!(!is_bench_end(lines[1]));
    }
}
