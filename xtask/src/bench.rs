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

use anyhow::{bail, Context, Result};

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
pub(crate) struct BenchBoot {
    pub machine: qemu::Machine,
    pub defmt: Option<crate::console::Defmt>,
    pub smp: u32,
    /// The kernel ELF (its symbols, for `--profile`).
    pub elf: std::path::PathBuf,
}

pub(crate) fn bench_boot(
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
        elf: a.elf.clone(),
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
        ..
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
    /// Context switches of the row's CPUs in its window (round-trip rows only).
    pub switches: Option<u64>,
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
                switches: fields.get("switches").copied(),
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
    // EAS placement (`find_energy_efficient_cpu`): `bench sched-costs` checks the path.
    ("wakeup_6cpu", "EAS wake-up, 6 CPUs (try_to_wake_up)", None),
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

/// Boots the kernel with `cmdline` under `-icount shift=0` (one instruction per guest ns) on
/// `board` and runs it to its end; returns the outcome and the CPU count.
fn run_shift0(
    machine: &MachineArgs,
    board: Board,
    cmdline: &str,
    timeout: Duration,
    echo: bool,
) -> Result<(qemu::Outcome, u32)> {
    let BenchBoot {
        machine: m,
        defmt,
        smp,
        ..
    } = bench_boot(machine, board, cmdline, "shift=0,sleep=off")?;
    let o = qemu::run(
        m.command(),
        defmt.as_ref(),
        &RunOpts {
            timeout: Some(timeout),
            echo,
            ..Default::default()
        },
    )?;
    Ok((o, smp))
}

/// Boots the kernel with `bench=switch` under `-icount shift=0` on `board` and returns its
/// `bench switch` lines (`echo`: show the console as it runs).
pub fn switch_measure(
    machine: &MachineArgs,
    board: Board,
    timeout: Duration,
    echo: bool,
) -> Result<SwitchRun> {
    let (o, smp) = run_shift0(machine, board, "bench=switch", timeout, echo)?;
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
        "{:<42} {:>8} {:>14} {:>8} {:>13}",
        "operation", "n", "instructions", "goal", "switches/op"
    );
    let mut complete = true;
    for (key, what, goal) in SWITCH_ROWS {
        match got.iter().find(|l| l.name == *key) {
            Some(l) => println!(
                "{:<42} {:>8} {:>14} {:>8} {:>13}",
                what,
                l.n,
                l.per_op_ns,
                goal.map_or("-".to_string(), |g| format!("<= {g}")),
                l.switches.map_or("-".to_string(), |s| format!(
                    "{}.{:02}",
                    s / l.n.max(1),
                    s * 100 / l.n.max(1) % 100
                ))
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

/// The `bench costs` lines of a `bench=sched-costs` run (kernel/src/bench.rs): every line's
/// `key=value` fields by its name, and the run-queue lock hold histogram's buckets.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CostsRun {
    pub lines: BTreeMap<String, BTreeMap<String, u64>>,
    /// `(lo_ns, hi_ns, holds)` per non-empty bucket, `[lo, hi)`, ascending.
    pub hold_buckets: Vec<(u64, u64, u64)>,
}

impl CostsRun {
    /// Field `key` of line `name`.
    pub fn get(&self, name: &str, key: &str) -> Option<u64> {
        self.lines.get(name)?.get(key).copied()
    }

    /// Field `key` of line `name`, or an error naming both.
    pub fn need(&self, name: &str, key: &str) -> Result<u64> {
        self.get(name, key)
            .ok_or_else(|| anyhow::anyhow!("`bench costs {name}` has no `{key}=`"))
    }

    /// The value under which `per_mille`/1000 of the holds fall: the `[lo, hi)` of the bucket
    /// that holds that rank (`None` without holds).
    pub fn hold_percentile(&self, per_mille: u64) -> Option<(u64, u64)> {
        let total: u64 = self.hold_buckets.iter().map(|b| b.2).sum();
        if total == 0 {
            return None;
        }
        // The rank (1-based) of the percentile's hold.
        let rank = (total * per_mille).div_ceil(1000).max(1);
        let mut cum = 0;
        for &(lo, hi, n) in &self.hold_buckets {
            cum += n;
            if cum >= rank {
                return Some((lo, hi));
            }
        }
        self.hold_buckets.last().map(|b| (b.0, b.1))
    }

    /// The hold histogram folded into powers of two: `(octave lo, holds)`, `[lo, 2 lo)` (`lo`
    /// 0 is the bucket `[0, 1)`).
    pub fn hold_log2(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        for &(lo, _, n) in &self.hold_buckets {
            let oct = if lo == 0 { 0 } else { 1u64 << lo.ilog2() };
            match out.last_mut() {
                Some(last) if last.0 == oct => last.1 += n,
                _ => out.push((oct, n)),
            }
        }
        out
    }
}

/// Parses `bench costs <name> key=value ...` lines anywhere in a line (a defmt timestamp may
/// precede them); `rq_hold_bucket` lines go to the histogram. A field that is not an integer
/// is dropped (the line's other fields stay).
pub fn parse_costs<'a>(lines: impl IntoIterator<Item = &'a str>) -> CostsRun {
    let mut run = CostsRun::default();
    for line in lines {
        let Some((_, rest)) = line.split_once("bench costs ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let Some(name) = words.next() else { continue };
        let fields: BTreeMap<String, u64> = words
            .filter_map(|f| f.split_once('='))
            .filter_map(|(k, v)| Some((k.to_string(), v.parse().ok()?)))
            .collect();
        if name == "rq_hold_bucket" {
            if let (Some(&lo), Some(&hi), Some(&n)) =
                (fields.get("lo"), fields.get("hi"), fields.get("n"))
            {
                run.hold_buckets.push((lo, hi, n));
            }
            continue;
        }
        run.lines.insert(name.to_string(), fields);
    }
    run.hold_buckets.sort_unstable();
    run
}

/// Lines a complete `bench=sched-costs` run prints, with one field each must have.
const COSTS_REQUIRED: &[(&str, &str)] = &[
    ("header", "hz"),
    ("rt_yield_same_cpu", "per_op_ns"),
    ("rt_wait_wake_same_cpu", "per_op_ns"),
    ("rt_wait_wake_cross_cpu", "per_op_ns"),
    ("wakeup_6cpu", "per_op_ns"),
    ("placement_eas", "n"),
    ("placement_eas_no_util", "n"),
    ("placement_capacity", "n"),
    ("rd", "overutilized"),
    ("tick", "per_op_ns"),
    ("rate_tick", "raised_per_s_max"),
    ("irq_share", "share_ppm"),
    ("softirq_tick_busy", "median_ns"),
    ("rate_busy", "raised_per_s_max"),
    ("balance_busy", "lb_runs"),
    ("softirq_busy_busy", "median_ns"),
    ("softirq_busy_idle", "n"),
    ("softirq_busy_other", "n"),
    ("rate_cyclic_aggr", "raised_per_s_max"),
    ("rate_cyclic_noaggr", "raised_per_s_max"),
    ("rq_hold", "n"),
    ("done", "ok"),
];

/// What is missing or wrong in a `bench=sched-costs` run; empty when it is complete and its
/// placements went through EAS.
pub fn costs_problems(run: &CostsRun) -> Vec<String> {
    let mut out: Vec<String> = COSTS_REQUIRED
        .iter()
        .filter(|(name, key)| run.get(name, key).is_none())
        .map(|(name, key)| format!("no `bench costs {name} ... {key}=` line"))
        .collect();
    if run.get("header", "eas") == Some(0) {
        out.push("EAS was not active (header eas=0): no EAS placement to measure".into());
    }
    if run.get("placement_eas", "n") == Some(0) {
        out.push("no wake-up went through find_energy_efficient_cpu (placement_eas n=0)".into());
    }
    if run.get("softirq_busy_busy", "n") == Some(0) {
        out.push("no periodic balance softirq on a busy CPU was recorded".into());
    }
    if run.hold_buckets.is_empty() {
        out.push("no run-queue lock hold was recorded (no rq_hold_bucket line)".into());
    }
    if run.get("done", "ok") == Some(0) {
        out.push("the kernel reported a phase that could not run (done ok=0)".into());
    }
    out
}

/// The goal: the busy CPU's tick and its balance softirqs as a share of one CPU, in
/// millionths: `(tick_ns × HZ + softirq_ns × raises_per_s) / 1e9`.
pub fn cpu_share_ppm(tick_ns: u64, hz: u64, softirq_ns: u64, raises_per_s: u64) -> u64 {
    (tick_ns * hz + softirq_ns * raises_per_s) / 1_000
}

fn ppm_pct(ppm: u64) -> String {
    format!("{}.{:04} %", ppm / 10_000, ppm % 10_000)
}

/// `cargo xtask bench sched-costs`: the kernel's `bench=sched-costs` under `-icount shift=0`,
/// printed as tables, the hold histogram and the 1 % goal line.
pub fn sched_costs(machine: &MachineArgs, board: Board, timeout: Duration) -> Result<ExitCode> {
    let (o, smp) = run_shift0(machine, board, "bench=sched-costs", timeout, true)?;
    let run = parse_costs(o.lines.iter().map(String::as_str));
    let ok = o.status.and_then(|s| s.code()) == Some(0);
    let problems = costs_problems(&run);
    if !problems.is_empty() || !ok {
        for p in &problems {
            println!("xtask: {p}");
        }
        println!(
            "xtask: incomplete sched-costs run (kernel status {}{})",
            if ok { "0" } else { "not 0" },
            if o.timed_out { ", timed out" } else { "" }
        );
        return Ok(ExitCode::FAILURE);
    }
    print_costs(&run, board, smp, machine.gic)?;
    Ok(ExitCode::SUCCESS)
}

fn print_costs(run: &CostsRun, board: Board, smp: u32, gic: u8) -> Result<()> {
    let hz = run.need("header", "hz")?;
    println!();
    println!(
        "sched-costs bench: QEMU virt as {}, {} vCPUs, GICv{}, HZ={}, -icount shift=0 (1 instruction = 1 ns; all CPUs together), sched_balance={}, AGGRESSIVE_NEXT_BALANCE={}, {} sched domain levels",
        board.name(),
        smp,
        gic,
        hz,
        run.need("header", "sched_balance")?,
        run.need("header", "aggressive_next_balance")?,
        run.need("header", "domains")?,
    );
    println!("{:<58} {:>8} {:>12}", "operation", "n", "instructions");
    let row = |what: &str, n: u64, v: u64| println!("{what:<58} {n:>8} {v:>12}");
    let eas = run.need("placement_eas", "n")?;
    let eas0 = run.need("placement_eas_no_util", "n")?;
    let cap = run.need("placement_capacity", "n")?;
    row(
        "EAS wake-up placement, 6 CPUs (snapshots + feec)",
        eas,
        run.need("placement_eas", "per_place_ns")?,
    );
    row(
        "  the whole try_to_wake_up of those wake-ups",
        eas,
        run.need("placement_eas", "per_wakeup_ns")?,
    );
    if eas0 > 0 {
        row(
            "EAS placement, task util 0 (feec returns prev_cpu)",
            eas0,
            run.need("placement_eas_no_util", "per_place_ns")?,
        );
    }
    if cap > 0 {
        row(
            "non-EAS placement (overutilized)",
            cap,
            run.need("placement_capacity", "per_place_ns")?,
        );
    }
    row(
        "bench switch's wakeup_6cpu (every wake-up on the waker)",
        run.need("wakeup_6cpu", "n")?,
        run.need("wakeup_6cpu", "per_op_ns")?,
    );
    row(
        "tick on a busy CPU (sched::tick + cpufreq)",
        run.need("tick", "n")?,
        run.need("tick", "per_op_ns")?,
    );
    for (line, what) in [
        (
            "softirq_tick_busy",
            "balance softirq, one busy CPU, others idle",
        ),
        (
            "softirq_busy_busy",
            "balance softirq, busy CPU, 4 busy threads",
        ),
        (
            "softirq_busy_idle",
            "balance softirq, idle CPU, 4 busy threads",
        ),
        ("softirq_busy_other", "NOHZ-kick softirq, 4 busy threads"),
    ] {
        let n = run.need(line, "n")?;
        if n == 0 {
            continue;
        }
        println!(
            "{what:<58} {n:>8} median {:>7} mean {:>7} p99 {:>7} max {:>8}; sched_balance_rq calls per run: 0: {}, 1: {}, 2: {}, 3+: {}",
            run.need(line, "median_ns")?,
            run.need(line, "mean_ns")?,
            run.need(line, "p99_ns")?,
            run.need(line, "max_ns")?,
            run.need(line, "lb_runs_0")?,
            run.need(line, "lb_runs_1")?,
            run.need(line, "lb_runs_2")?,
            run.need(line, "lb_runs_3plus")?,
        );
    }
    println!(
        "balancing phase: {} sched_balance_rq calls, {} tasks moved, {} NOHZ kicks, overutilized at its end: {}",
        run.need("balance_busy", "lb_runs")?,
        run.need("balance_busy", "moved")?,
        run.need("balance_busy", "nohz_kicks")?,
        run.need("balance_busy", "overutilized")?,
    );
    println!("SCHED_SOFTIRQ raises per second per CPU (mean / max over the CPUs):");
    for (line, what) in [
        ("rate_tick", "one busy CPU, others idle"),
        ("rate_busy", "busy CPUs, 4 busy threads"),
        (
            "rate_cyclic_aggr",
            "6 threads busy 200 us / asleep 800 us, AGGRESSIVE_NEXT_BALANCE on",
        ),
        (
            "rate_cyclic_noaggr",
            "the same, AGGRESSIVE_NEXT_BALANCE off",
        ),
    ] {
        println!(
            "  {what:<70} {:>5} / {:>5}",
            run.need(line, "raised_per_s_mean")?,
            run.need(line, "raised_per_s_max")?
        );
    }
    let n = run.need("rq_hold", "n")?;
    println!(
        "run-queue lock hold times (round trips, wake/sleep phases): {} holds, mean {} ns, max {} ns",
        n,
        run.need("rq_hold", "sum_ns")? / n.max(1),
        run.need("rq_hold", "max_ns")?
    );
    for (oct, c) in run.hold_log2() {
        let pct = c * 1000 / n.max(1);
        let hi = if oct == 0 { 1 } else { oct * 2 };
        println!(
            "  [{oct:>7}, {hi:>7}) ns {c:>9} {:>3}.{} % {}",
            pct / 10,
            pct % 10,
            "#".repeat((c * 50).div_ceil(n.max(1)) as usize)
        );
    }
    for (name, pm) in [("p50", 500), ("p99", 990)] {
        if let Some((lo, hi)) = run.hold_percentile(pm) {
            println!("  {name}: in [{lo}, {hi}) ns");
        }
    }
    let tick = run.need("tick", "per_op_ns")?;
    let sirq = run.need("softirq_busy_busy", "mean_ns")?;
    let rate = run.need("rate_busy", "raised_per_s_max")?;
    let share = cpu_share_ppm(tick, hz, sirq, rate);
    println!(
        "goal (asym issue 12): tick + its softirq <= 1 % of a CPU at HZ=250: ({tick} x {hz} + {sirq} x {rate}) / 1e9 = {} of one CPU: {}",
        ppm_pct(share),
        if share <= 10_000 { "met" } else { "NOT met" }
    );
    println!(
        "  (tick: per tick on the busy CPU; softirq: mean periodic balance softirq on a busy CPU with 4 busy threads; rate: the busiest of those CPUs' SCHED_SOFTIRQ raises per second, same run)"
    );
    let measured = run.need("irq_share", "share_ppm")?;
    println!(
        "  measured end to end: a thread alone on its CPU lost {} ns in {} ns ({} ticks, {} ns per tick) to every interrupt and what it started on any vCPU: {}",
        run.need("irq_share", "stolen_ns")?,
        run.need("irq_share", "run_ns")?,
        run.need("irq_share", "ticks")?,
        run.need("irq_share", "stolen_per_tick_ns")?,
        ppm_pct(measured)
    );
    let worst_rate = [
        "rate_busy",
        "rate_tick",
        "rate_cyclic_aggr",
        "rate_cyclic_noaggr",
    ]
    .iter()
    .filter_map(|l| run.get(l, "raised_per_s_max"))
    .max()
    .unwrap_or(rate);
    let worst = cpu_share_ppm(
        tick,
        hz,
        run.need("softirq_busy_busy", "max_ns")?,
        worst_rate,
    );
    println!(
        "  bound: the largest softirq ({} ns) at the highest rate seen ({worst_rate}/s): {}",
        run.need("softirq_busy_busy", "max_ns")?,
        ppm_pct(worst)
    );
    Ok(())
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
    // At `shift=0` the soak's guest time runs about three times slower than the host's on two
    // host cores (the kernel's own watchdog catches a lock-up in guest time): allow ten times
    // as much, plus boot.
    let timeout = Duration::from_secs(u64::from(seconds) * 10 + 300);
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

/// Runs the simulator binary (the `sim` profile: release with LTO, see the workspace
/// Cargo.toml) with `fixed` then `args`; `cargo xtask sim` forwards everything here.
pub fn run_sim(fixed: &[&str], args: &[String]) -> Result<ExitCode> {
    let st = cmd::status(
        cmd::cargo()
            .args([
                "run",
                "--profile",
                "sim",
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
pub fn experiments(quick: bool, seed: Option<&str>, sim: bool, on_qemu: bool) -> Result<ExitCode> {
    let doc = cmd::workspace_root().join("docs/experiments.md");
    let write = !quick && seed.is_none();
    if sim {
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
        if write {
            c.arg("--write").arg(&doc);
        }
        let st = cmd::status(&mut c)?;
        if st.code() != Some(0) {
            return Ok(crate::exit_code(st.code()));
        }
    }
    if !on_qemu {
        return Ok(ExitCode::SUCCESS);
    }
    let seed = match seed {
        None => None,
        Some("energy") => return Ok(ExitCode::SUCCESS),
        Some(s) => Some(
            s.parse::<u32>()
                .ok()
                .filter(|&n| n <= 4)
                .with_context(|| format!("--seed {s}: use 000 to 004, or energy"))?,
        ),
    };
    let o = crate::experiments_qemu::Opts { quick, seed };
    let sections = crate::experiments_qemu::run_all(o)?;
    let block = crate::experiments_qemu::render(o, &sections);
    let (checks, failed) = crate::experiments_qemu::failed_checks(&sections);
    if write {
        let text = std::fs::read_to_string(&doc).with_context(|| format!("{}", doc.display()))?;
        std::fs::write(&doc, crate::experiments_qemu::splice(&text, &block)?)
            .with_context(|| format!("{}", doc.display()))?;
        println!("experiments: wrote the QEMU block of {}", doc.display());
    } else {
        print!("{block}");
    }
    println!(
        "experiments on QEMU: {} of {checks} checks hold",
        checks - failed.len()
    );
    for f in &failed {
        println!("FAILS: {f}");
    }
    Ok(if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
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
    fn costs_lines_are_parsed_with_their_histogram() {
        let lines = [
            "bench costs header cpus=6 hz=250 eas=1",
            "0.5 INFO bench costs tick n=250 total_ns=750000 per_op_ns=3000",
            "bench costs rq_hold_bucket lo=256 hi=320 n=5",
            "bench costs rq_hold_bucket lo=64 hi=80 n=10",
            "bench costs rq_hold_bucket lo=1024 hi=1280 n=1",
            "bench costs rq_hold n=16 sum_ns=2000 max_ns=1100",
            "bench costs placement_eas n=x place_ns=5",
        ];
        let run = parse_costs(lines);
        assert_eq!(run.get("header", "hz"), Some(250));
        assert_eq!(run.get("tick", "per_op_ns"), Some(3000));
        // A field that is not a number is dropped, its neighbours kept.
        assert_eq!(run.get("placement_eas", "n"), None);
        assert_eq!(run.get("placement_eas", "place_ns"), Some(5));
        assert_eq!(
            run.hold_buckets,
            vec![(64, 80, 10), (256, 320, 5), (1024, 1280, 1)]
        );
        // 10 of 16 holds are below 80 ns: the median's bucket is the first; rank 16 of 16
        // (p99) is the 1024 one.
        assert_eq!(run.hold_percentile(500), Some((64, 80)));
        assert_eq!(run.hold_percentile(625), Some((64, 80)));
        assert_eq!(run.hold_percentile(626), Some((256, 320)));
        assert_eq!(run.hold_percentile(990), Some((1024, 1280)));
        assert_eq!(run.hold_log2(), vec![(64, 10), (256, 5), (1024, 1)]);
        assert_eq!(parse_costs([]).hold_percentile(500), None);
    }

    #[test]
    fn a_costs_run_missing_a_line_or_eas_is_refused() {
        let mut lines: Vec<String> = COSTS_REQUIRED
            .iter()
            .map(|(name, key)| format!("bench costs {name} {key}=1"))
            .collect();
        lines.push("bench costs rq_hold_bucket lo=64 hi=80 n=1".into());
        let run = parse_costs(lines.iter().map(String::as_str));
        assert_eq!(costs_problems(&run), Vec::<String>::new());
        let without_tick: Vec<&str> = lines
            .iter()
            .map(String::as_str)
            .filter(|l| !l.contains(" tick per_op_ns"))
            .collect();
        let p = costs_problems(&parse_costs(without_tick));
        assert_eq!(p.len(), 1);
        assert!(p[0].contains("bench costs tick"), "{p:?}");
        lines.push("bench costs placement_eas n=0".into());
        let p = costs_problems(&parse_costs(lines.iter().map(String::as_str)));
        assert!(p[0].contains("find_energy_efficient_cpu"), "{p:?}");
    }

    #[test]
    fn the_cpu_share_is_tick_and_softirq_time_per_second() {
        // 3,000 ns per tick at 250 Hz is 750 us/s; 10,000 ns softirqs 25 times a second
        // 250 us/s: 1,000 us/s is 0.1 % = 1,000 ppm.
        assert_eq!(cpu_share_ppm(3_000, 250, 10_000, 25), 1_000);
        assert_eq!(ppm_pct(1_000), "0.1000 %");
        assert_eq!(ppm_pct(10_000), "1.0000 %");
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
