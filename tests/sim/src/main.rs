//! `asym-sim`: the command-line front end of the simulator. See `docs/sim.md`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};

use asym_sim::{parse_duration, parse_freq_limit, FreqLimit, Governor, RunSpec};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum OnOff {
    On,
    Off,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum PlacementArg {
    Linux,
    Interim,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Gov {
    Schedutil,
    Performance,
    Powersave,
}

/// Deterministic big.LITTLE scheduling simulator running asym's policy code on rt-app workloads.
#[derive(Parser, Debug)]
#[command(name = "asym-sim", version, about, long_about = None)]
struct Cli {
    /// Board to model: juno-r2, hikey960 or hikey.
    #[arg(long, default_value = "juno-r2")]
    board: String,
    /// rt-app JSON workload file.
    #[arg(long, required_unless_present = "bench")]
    workload: Option<PathBuf>,
    /// Simulated duration (5s, 250ms, 100us); default: the workload's global.duration; with
    /// -1 or none, until every task has exited (at most 10s).
    #[arg(long, value_parser = parse_duration)]
    duration: Option<u64>,
    /// Scheduler feature setting, FEATURE=on|off (repeatable), e.g. --set UTIL_EST=off.
    #[arg(long = "set", value_name = "FEATURE=on|off")]
    set: Vec<String>,
    /// Energy-aware wake-up placement (find_energy_efficient_cpu while not overutilized);
    /// same as --set ENERGY_AWARE=on|off. As in Linux it is active only where
    /// sched_is_eas_possible() holds — asymmetric CPU capacities, an energy model for
    /// every domain, schedutil — and report.json's `eas_active` says whether it was.
    #[arg(long, value_enum, default_value = "on")]
    eas: OnOff,
    /// Load balancing: periodic balance via SCHED_SOFTIRQ from the tick, newidle
    /// balance, NOHZ idle balance and misfit migration, as Linux always does (off, an
    /// experiment switch: tasks move only at wake-up).
    #[arg(long, value_enum, default_value = "on")]
    lb: OnOff,
    /// Wake-up placement: linux (select_task_rq_fair: EAS, else the capacity-aware
    /// select_idle_sibling; forks by the slow path) or interim (the old rule: previous
    /// CPU if idle, else the first idle allowed CPU; for comparison only).
    #[arg(long, value_enum, default_value = "linux")]
    placement: PlacementArg,
    /// cpufreq governor.
    #[arg(long, value_enum, default_value = "schedutil")]
    governor: Gov,
    /// cpufreq user limits of a performance domain, set before the workload starts, like
    /// writing scaling_min_freq/scaling_max_freq: DOMAIN=MIN:MAX in kHz, domain names from
    /// the board table (juno-r2: big, little), both inside the domain's OPP table
    /// (repeatable), e.g. --freq-limit big=600000:1200000.
    #[arg(long = "freq-limit", value_name = "DOMAIN=MIN:MAX", value_parser = parse_freq_limit)]
    freq_limit: Vec<FreqLimit>,
    /// Seed for pseudo-random choices (recorded in the report).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Scheduler tick rate (CONFIG_HZ).
    #[arg(long, default_value_t = 250)]
    hz: u32,
    /// Timer resolution: on (hrtimers expire at their deadline) or off (Linux's hrtimers in
    /// low-resolution mode, run from the tick: sleep and timer wake-ups happen on the first
    /// tick at or after their expiry, before the tick's work; the kernel's highres=off).
    #[arg(long, value_enum, default_value = "on")]
    highres: OnOff,
    /// Output directory for report.json, trace.txt (and plot.png).
    #[arg(long, required_unless_present = "bench")]
    out: Option<PathBuf>,
    /// Also draw plot.png.
    #[arg(long)]
    plot: bool,
    /// Print nothing but errors.
    #[arg(long)]
    quiet: bool,
    /// Do not write trace.txt (long or large runs).
    #[arg(long)]
    no_trace: bool,
    /// Benchmark mode: juno-r2 with 10, 100 and 1000 periodic tasks, no output files;
    /// prints simulated seconds per wall second and per CPU second, and events per second.
    #[arg(long)]
    bench: bool,
    /// With --bench: the task counts to run (comma-separated), e.g. --bench-tasks 100.
    #[arg(long, value_delimiter = ',', default_values_t = asym_sim::bench::DEFAULT_TASKS, requires = "bench")]
    bench_tasks: Vec<usize>,
    /// With --bench: runs per task count (one row each).
    #[arg(long, default_value_t = 1, requires = "bench")]
    bench_repeat: usize,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.bench {
        return match asym_sim::bench::run_bench(
            cli.duration,
            &cli.bench_tasks,
            cli.bench_repeat,
            !cli.quiet,
        ) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("asym-sim: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let mut set = vec![match cli.eas {
        OnOff::On => "ENERGY_AWARE=on".to_string(),
        OnOff::Off => "ENERGY_AWARE=off".to_string(),
    }];
    // An explicit --set ENERGY_AWARE=... comes later and wins.
    set.extend(cli.set);
    let spec = RunSpec {
        board: cli.board,
        workload: cli.workload.unwrap_or_default(),
        duration_ns: cli.duration,
        set,
        governor: match cli.governor {
            Gov::Schedutil => Governor::Schedutil,
            Gov::Performance => Governor::Performance,
            Gov::Powersave => Governor::Powersave,
        },
        seed: cli.seed,
        hz: cli.hz,
        out: cli.out,
        plot: cli.plot,
        load_balance: cli.lb == OnOff::On,
        placement: match cli.placement {
            PlacementArg::Linux => asym_sim::Placement::Linux,
            PlacementArg::Interim => asym_sim::Placement::Interim,
        },
        freq_limits: cli.freq_limit,
        highres: cli.highres == OnOff::On,
    };
    let progress = !cli.quiet && std::io::stderr().is_terminal();
    let start = Instant::now();
    let opts = asym_sim::RunOptions {
        progress,
        trace: !cli.no_trace,
    };
    let out = match asym_sim::run_with_options(&spec, opts) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("asym-sim: {e}");
            return ExitCode::FAILURE;
        }
    };
    let wall = start.elapsed().as_secs_f64().max(1e-9);
    if !cli.quiet {
        // A closed pipe (`| head`) is not an error worth a panic.
        let _ = print_summary(&mut std::io::stdout().lock(), &spec, &out, wall);
    }
    ExitCode::SUCCESS
}

fn print_summary(
    o: &mut impl Write,
    spec: &RunSpec,
    out: &asym_sim::RunOutput,
    wall: f64,
) -> std::io::Result<()> {
    let r = &out.report;
    let dir = spec
        .out
        .as_ref()
        .map_or(String::new(), |d| d.display().to_string());
    writeln!(
        o,
        "asym-sim: {} on {} ({} governor), {:.3} s simulated",
        r.workload,
        r.board,
        r.governor,
        r.duration_ns as f64 / 1e9
    )?;
    writeln!(o, "  energy: {:.3} mJ total", r.energy.total_uj / 1000.0)?;
    for d in &r.energy.perf_domains {
        writeln!(o, "    {:<8} {:>12.3} mJ", d.name, d.energy_uj / 1000.0)?;
    }
    if let Some(m) = &r.meter {
        let m = &m.reading;
        writeln!(
            o,
            "  meter:  {:.3} mJ (dynamic {:.3}, CPU static {:.3}, clusters {:.3}, transitions {:.3})",
            m.total_uj / 1000.0,
            m.cpu_dynamic_uj / 1000.0,
            m.cpu_static_uj / 1000.0,
            m.cluster_uj / 1000.0,
            m.transition_uj / 1000.0
        )?;
    }
    if let Some(b) = &r.energy_bound {
        writeln!(
            o,
            "  optimal (lower bound): {:.3} mJ for the same job set ({:.3} mJ per task alone), {:.3} mJ work only; energy / bound = {:.4}",
            b.deadline_uj / 1000.0,
            b.per_task_uj / 1000.0,
            b.work_uj / 1000.0,
            b.ratio_to_deadline_bound
        )?;
    }
    let misses: u64 = r.tasks.iter().map(|t| t.deadline_misses).sum();
    let periods: u64 = r.tasks.iter().map(|t| t.timer_activations).sum();
    writeln!(
        o,
        "  tasks: {}, deadline misses: {misses} of {periods} timer periods",
        r.tasks.len()
    )?;
    let plot = if spec.plot {
        format!(", {dir}/plot.png")
    } else {
        String::new()
    };
    // A written trace always has lines (the initial cpu_frequency events).
    let trace = if out.trace_lines == 0 {
        "no trace".to_string()
    } else {
        format!("{dir}/trace.txt ({} lines)", out.trace_lines)
    };
    writeln!(o, "  outputs: {dir}/report.json, {trace}{plot}")?;
    writeln!(
        o,
        "  speed: {} events in {:.3} s wall = {:.0} events/s, {:.1} simulated s per wall s",
        out.result.events,
        wall,
        out.result.events as f64 / wall,
        r.duration_ns as f64 / 1e9 / wall
    )
}
