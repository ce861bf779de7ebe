//! asym's deterministic host simulator.
//!
//! Runs the policy crate (`asym-sched`) against a modelled board ([`board`]) in
//! simulated time ([`engine`]), driven by rt-app workload files ([`workload`], the
//! `asym-rtapp` crate the kernel reads workloads with too), and
//! writes a JSON report ([`report`]), a Linux ftrace text trace ([`trace`]), the board
//! as LISA's platform description ([`platinfo`]) and optionally a PNG plot ([`plot`]). Usage, the report schema and the trace format
//! are in `docs/sim.md`.
//!
//! Determinism: the same board, workload, options and seed give byte-identical
//! `report.json` and `trace.txt`. Nothing in them depends on the wall clock or on
//! hash-map iteration order.

pub mod bench;
pub mod board;
pub mod chart;
pub mod engine;
pub mod experiments;
pub mod meter;
pub mod optimal;
pub mod platinfo;
pub mod plot;
mod queue;
pub mod report;
pub mod signals;
pub mod trace;

/// rt-app workloads: the model and reader shared with the kernel (`asym-rtapp`).
pub use asym_rtapp::workload;

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use asym_sched::features::SchedFeatures;

pub use engine::{FreqLimit, Governor, Placement, SimConfig, SimResult};

/// Everything one run needs.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// Board name (`juno-r2`, `hikey960`, `hikey`).
    pub board: String,
    /// Workload file.
    pub workload: PathBuf,
    /// Duration override in ns (else the workload's `global.duration`; with `-1` or no
    /// duration, until every task has exited, at most [`DEFAULT_DURATION_NS`]).
    pub duration_ns: Option<u64>,
    /// Feature settings (`NAME=on|off`, `NAME`, `NO_NAME`), applied in order to Linux's defaults.
    pub set: Vec<String>,
    /// Governor.
    pub governor: Governor,
    /// Seed.
    pub seed: u64,
    /// Tick rate.
    pub hz: u32,
    /// Output directory; `None` runs without writing files (benchmarks).
    pub out: Option<PathBuf>,
    /// Also write `plot.png`.
    pub plot: bool,
    /// Load balancing on (`--lb on`).
    pub load_balance: bool,
    /// Wake-up placement (`--placement linux|interim`).
    pub placement: Placement,
    /// cpufreq user limits set before the workload starts (`--freq-limit`).
    pub freq_limits: Vec<FreqLimit>,
    /// Timer resolution (`--highres on|off`, default on; [`SimConfig::highres`]).
    pub highres: bool,
}

impl RunSpec {
    /// `workload` on `board` with the settings the tests and the experiments share:
    /// schedutil, seed 0, HZ=250, high-resolution timers, Linux's placement and features, no
    /// load balancing, no limits, no output files, the workload's own duration. Callers change
    /// what they need with struct update syntax.
    pub fn new(board: impl Into<String>, workload: impl Into<PathBuf>) -> Self {
        RunSpec {
            board: board.into(),
            workload: workload.into(),
            duration_ns: None,
            set: Vec::new(),
            governor: Governor::Schedutil,
            seed: 0,
            hz: 250,
            out: None,
            plot: false,
            load_balance: false,
            placement: Placement::Linux,
            freq_limits: Vec::new(),
            highres: true,
        }
    }
}

/// Longest simulated duration (about 11.6 days).
pub const MAX_DURATION_NS: u64 = 1_000_000 * 1_000_000_000;

/// Longest run when neither the workload nor the command line gives a duration
/// (rt-app's `-1`: until every task has exited).
pub const DEFAULT_DURATION_NS: u64 = 10_000_000_000;

/// What a run produced.
#[derive(Debug)]
pub struct RunOutput {
    /// The report (also written as `report.json`).
    pub report: report::Report,
    /// Raw results.
    pub result: SimResult,
    /// Trace lines written.
    pub trace_lines: u64,
}

/// Parse `--set` items into a feature set.
pub fn parse_features(set: &[String]) -> Result<SchedFeatures, String> {
    let mut f = SchedFeatures::default();
    for s in set {
        f.apply(s).map_err(|e| format!("--set {s}: {e}"))?;
    }
    Ok(f)
}

/// Parse a duration such as `5s`, `250ms`, `100us`, `1500ns` or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1_000_000)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 1_000)
    } else if let Some(n) = s.strip_suffix("ns") {
        (n, 1)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1_000_000_000)
    } else {
        (s, 1_000_000_000)
    };
    let v: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad duration \"{s}\" (use e.g. 5s, 250ms, 100us)"))?;
    match v.checked_mul(mult) {
        Some(0) => Err(format!("duration \"{s}\" must be positive")),
        Some(ns) if ns <= MAX_DURATION_NS => Ok(ns),
        _ => Err(format!("duration \"{s}\" is too long (at most 1000000s)")),
    }
}

/// Parse `--freq-limit DOMAIN=MIN:MAX` (kHz), e.g. `big=600000:1200000`. Whether the
/// domain exists and the values lie in its OPP table is checked when the run starts.
pub fn parse_freq_limit(s: &str) -> Result<FreqLimit, String> {
    let bad = |why: &str| {
        format!("--freq-limit \"{s}\": {why} (use DOMAIN=MIN:MAX in kHz, e.g. big=600000:1200000)")
    };
    let (domain, range) = s.split_once('=').ok_or_else(|| bad("no '='"))?;
    let (min, max) = range
        .split_once(':')
        .ok_or_else(|| bad("no ':' between MIN and MAX"))?;
    let domain = domain.trim();
    if domain.is_empty() {
        return Err(bad("empty domain name"));
    }
    let khz = |v: &str, what: &str| {
        v.trim()
            .parse::<u32>()
            .map_err(|_| bad(&format!("{what} \"{v}\" is not a frequency in kHz")))
    };
    let min_khz = khz(min, "MIN")?;
    let max_khz = khz(max, "MAX")?;
    if min_khz > max_khz {
        return Err(bad(&format!(
            "MIN {min_khz} kHz is above MAX {max_khz} kHz"
        )));
    }
    Ok(FreqLimit {
        domain: domain.to_string(),
        min_khz,
        max_khz,
    })
}

/// Load the board model by name.
pub fn load_board(name: &str) -> Result<board::Board, String> {
    let desc = asym_boards::by_name(name).ok_or_else(|| {
        let names: Vec<_> = asym_boards::ALL.iter().map(|b| b.name).collect();
        format!("unknown board \"{name}\" (known: {})", names.join(", "))
    })?;
    board::Board::new(desc)
}

/// Run one simulation as described by `spec`, writing outputs when `spec.out` is set.
pub fn run(spec: &RunSpec) -> Result<RunOutput, String> {
    run_with_progress(spec, false)
}

/// How a run presents itself (nothing here changes the simulation or the report).
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    /// Draw a progress bar on stderr.
    pub progress: bool,
    /// Write `trace.txt` (when `RunSpec::out` is set).
    pub trace: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            progress: false,
            trace: true,
        }
    }
}

/// [`run`], drawing a progress bar on stderr when `progress` is set.
pub fn run_with_progress(spec: &RunSpec, progress: bool) -> Result<RunOutput, String> {
    run_with_options(
        spec,
        RunOptions {
            progress,
            ..RunOptions::default()
        },
    )
}

/// [`run`] with explicit [`RunOptions`].
pub fn run_with_options(spec: &RunSpec, opts: RunOptions) -> Result<RunOutput, String> {
    // Name a bad board before a missing file: both are the user's to fix, the board first.
    load_board(&spec.board)?;
    let text = fs::read_to_string(&spec.workload)
        .map_err(|e| format!("{}: {e}", spec.workload.display()))?;
    run_source_with(spec, &text, opts)
}

/// [`run`] on workload text already in memory (`spec.workload` names it in messages).
pub fn run_source(spec: &RunSpec, text: &str, progress: bool) -> Result<RunOutput, String> {
    run_source_with(
        spec,
        text,
        RunOptions {
            progress,
            ..RunOptions::default()
        },
    )
}

/// [`run_source`] with explicit [`RunOptions`].
pub fn run_source_with(spec: &RunSpec, text: &str, opts: RunOptions) -> Result<RunOutput, String> {
    let progress = opts.progress;
    let board = load_board(&spec.board)?;
    let features = parse_features(&spec.set)?;
    let wname = spec.workload.display().to_string();
    let wl = workload::parse(text, &wname, board.nr_cpus()).map_err(|e| e.to_string())?;
    let until_all_exit = spec.duration_ns.is_none() && wl.duration_ns.is_none();
    let duration_ns = spec
        .duration_ns
        .or(wl.duration_ns)
        .unwrap_or(DEFAULT_DURATION_NS);
    if duration_ns == 0 || duration_ns > MAX_DURATION_NS {
        return Err(format!(
            "duration {duration_ns} ns is out of range (1 ns ..= 1000000 s)"
        ));
    }
    let cfg = SimConfig {
        duration_ns,
        features,
        governor: spec.governor,
        seed: spec.seed,
        hz: spec.hz,
        // The energy meter reads the running stretches and frequency changes.
        record_timeline: true,
        until_all_exit,
        load_balance: spec.load_balance,
        placement: spec.placement,
        freq_limits: spec.freq_limits.clone(),
        highres: spec.highres,
    };
    let trace_file = match &spec.out {
        Some(dir) => {
            fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            let p = dir.join("trace.txt");
            if opts.trace {
                let f = fs::File::create(&p).map_err(|e| format!("{}: {e}", p.display()))?;
                Some(BufWriter::with_capacity(1 << 20, f))
            } else {
                // A stale trace from an earlier run would not match this report.
                match fs::remove_file(&p) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(format!("{}: {e}", p.display()))
                    }
                    _ => None,
                }
            }
        }
        None => None,
    };
    let mut engine =
        engine::Engine::new(&board, &wl, cfg.clone(), trace_file).map_err(|e| e.to_string())?;
    if progress {
        let started = std::time::Instant::now();
        engine.set_progress(move |now, end| {
            // Only worth showing for runs that take a while.
            if started.elapsed().as_millis() < 300 {
                return;
            }
            let pct = now as f64 * 100.0 / end.max(1) as f64;
            let filled = (pct / 2.5) as usize;
            eprint!(
                "\r[{:<40}] {:5.1}% {:.2}/{:.2} s",
                "#".repeat(filled.min(40)),
                pct,
                now as f64 / 1e9,
                end as f64 / 1e9
            );
        });
    }
    let (result, sink) = engine.run().map_err(|e| e.to_string())?;
    if progress {
        eprint!("\r{:70}\r", "");
    }
    let trace_lines = result.trace_lines;
    if let Some(mut w) = sink {
        w.flush().map_err(|e| format!("trace.txt: {e}"))?;
    }
    let mut report = report::build(&board, &file_label(&spec.workload), &cfg, features, &result);
    if let (true, Some(tl)) = (board.has_energy_model, result.timeline.as_ref()) {
        let runs: Vec<optimal::TaskRun> = result
            .tasks
            .iter()
            .map(|t| optimal::TaskRun {
                windows: &t.timer_windows_ns,
            })
            .collect();
        let b = optimal::bound(&board, &wl, tl, &runs);
        report.energy_bound = Some(report::EnergyBound::new(b, report.energy.total_uj));
    }
    if let Some(dir) = &spec.out {
        let mut json = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        json.push('\n');
        let p = dir.join("report.json");
        fs::write(&p, json).map_err(|e| format!("{}: {e}", p.display()))?;
        let p = dir.join("platform_info.yml");
        fs::write(&p, platinfo::platform_info_yaml(&board))
            .map_err(|e| format!("{}: {e}", p.display()))?;
        if spec.plot {
            let p = dir.join("plot.png");
            plot::draw(&p, &board, &result).map_err(|e| format!("{}: {e}", p.display()))?;
        }
    }
    Ok(RunOutput {
        report,
        result,
        trace_lines,
    })
}

/// The workload's file name, so reports do not depend on the directory a run starts in.
fn file_label(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}
