//! rt-app workloads on QEMU: `cargo xtask qemu --workload W.json --out DIR` and
//! `cargo xtask compare --workload W.json`.
//!
//! The kernel reads the workload over semihosting (`rtapp=`), runs it with its in-kernel
//! executor (or, with `--el0`, the EL0 executor `user/rtapp`, read over semihosting too:
//! `rtapp_el0=`) under `-icount` (repeatable guest time) and writes `DIR/trace.txt` over
//! semihosting (`rtapp_trace=`). xtask then checks the trace with the validators the
//! simulator's tests use (`asym_trace::validate`) and writes `DIR/report.json` from the trace
//! with the one analyser (`asym_trace::analyse`). `compare` runs the simulator on the same
//! workload and board, analyses its `trace.txt` with the same code, and prints both side by
//! side.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use asym_trace::analyse::{analyse, Analysis, DomainModel};
use serde_json::json;

use crate::dtb;
use crate::qemu::{self, Boot, RunOpts};
use crate::MachineArgs;

/// `on` / `off` switches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

/// One workload run's settings.
#[derive(Debug, Clone)]
pub struct Run {
    pub workload: PathBuf,
    pub out: PathBuf,
    /// Guest ns (else the workload's `global.duration`).
    pub duration_ns: Option<u64>,
    pub eas: Option<OnOff>,
    pub lb: Option<OnOff>,
    /// `FEATURE=on|off`.
    pub set: Vec<String>,
    /// More kernel command-line words (e.g. `cpufreq.big.min_khz=1200000`); the simulator
    /// side of `compare` does not get them.
    pub append: Vec<String>,
    pub board: dtb::Board,
    /// `-icount shift=` (guest ns per instruction as a power of two); `None`: real time.
    pub icount: Option<u32>,
    pub timeout: Duration,
    pub echo: bool,
    /// Run it with the EL0 executor (`user/rtapp`, `rtapp_el0=`) instead of the in-kernel one.
    pub el0: bool,
    /// With `el0`: this file as the EL0 program instead of the one built (tests of bad
    /// programs).
    pub el0_program: Option<PathBuf>,
    /// Timer resolution: the kernel's `highres=` and the simulator's `--highres` (`None`:
    /// each side's default, on).
    pub highres: Option<OnOff>,
}

/// `sched_features=` for the kernel from `--eas` and `--set`, and `sched_balance=` from `--lb`
/// (on unless `--lb off`: Linux always balances, and so do the kernel and the simulator by
/// default).
pub fn features_arg(eas: Option<OnOff>, lb: Option<OnOff>, set: &[String]) -> Result<String> {
    let mut words = Vec::new();
    if let Some(e) = eas {
        words.push(
            if e == OnOff::On {
                "ENERGY_AWARE"
            } else {
                "NO_ENERGY_AWARE"
            }
            .to_string(),
        );
    }
    // The kernel's `sched_balance=`, as the simulator gets `--lb`.
    let lb_word = format!(
        "sched_balance={}",
        if lb == Some(OnOff::Off) { "off" } else { "on" }
    );
    for s in set {
        let (name, v) = s
            .split_once('=')
            .with_context(|| format!("--set {s}: use FEATURE=on|off"))?;
        let mut f = asym_sched::features::SchedFeatures::default();
        f.apply(s).map_err(|e| anyhow::anyhow!("--set {s}: {e}"))?;
        words.push(match v {
            "on" => name.to_string(),
            "off" => format!("NO_{name}"),
            _ => bail!("--set {s}: use FEATURE=on|off"),
        });
    }
    Ok(if words.is_empty() {
        lb_word
    } else {
        format!("sched_features={} {lb_word}", words.join(","))
    })
}

/// Runs `r` on QEMU; writes `trace.txt` and `report.json` into `r.out`; returns the analysis.
pub fn run_on_qemu(machine: &MachineArgs, r: &Run) -> Result<Analysis> {
    let desc = r.board.desc().with_context(|| {
        format!(
            "--board {}: no energy model to run a workload on",
            r.board.name()
        )
    })?;
    std::fs::create_dir_all(&r.out).with_context(|| format!("{}", r.out.display()))?;
    let out = std::fs::canonicalize(&r.out)?;
    let trace_path = out.join("trace.txt");
    let _ = std::fs::remove_file(&trace_path);
    let workload =
        std::fs::canonicalize(&r.workload).with_context(|| format!("{}", r.workload.display()))?;
    let outcome = launch(machine, r, Some(&trace_path))?;
    let trace = std::fs::read_to_string(&trace_path)
        .with_context(|| format!("{}: the kernel wrote no trace", trace_path.display()))?;
    let duration_ns = match r.duration_ns {
        Some(d) => d,
        None => workload_duration(&workload, desc.cpus.len())?,
    };
    let an = analyse(
        &trace,
        desc.cpus.len(),
        &DomainModel::of_board(desc),
        duration_ns,
    );
    let report = report_json(desc, &file_label(&r.workload), duration_ns, &an, "qemu");
    std::fs::write(
        out.join("report.json"),
        serde_json::to_string_pretty(&report)? + "\n",
    )?;
    asym_trace::validate::check_trace(&trace)
        .map_err(|e| anyhow::anyhow!("{}: {e}", trace_path.display()))?;
    check_meter(&outcome.lines, an.total_energy_uj)?;
    Ok(an)
}

/// Runs workload `r` without a trace (no `rtapp_trace=`: nothing to write back, so any length
/// of run is cheap) and returns the kernel's console lines.
pub fn run_untraced(machine: &MachineArgs, r: &Run) -> Result<Vec<String>> {
    Ok(launch(machine, r, None)?.lines)
}

/// Boots the kernel on `r`'s workload (and, with `trace`, `rtapp_trace=` that host file);
/// fails unless it ends with status 0.
///
/// Every file the guest opens over semihosting is named relative to `r.out`'s parent, where
/// QEMU runs: `OUT/W.json` (a copy of the workload), `OUT/trace.txt`, `OUT/rtapp-el0`. The
/// kernel's command line is then the same on every machine and in every checkout, and so is
/// the run: a longer command line takes more guest instructions at boot, and some workloads'
/// placement is chaotic enough for that to change their result (`xtask/src/experiments_qemu.rs`,
/// seed 004). Before, the command line held absolute host paths and a run in CI's clone ended
/// differently from the same run in a developer's.
fn launch(machine: &MachineArgs, r: &Run, trace: Option<&Path>) -> Result<qemu::Outcome> {
    let features = features_arg(r.eas, r.lb, &r.set)?;
    std::fs::create_dir_all(&r.out).with_context(|| format!("{}", r.out.display()))?;
    let out = std::fs::canonicalize(&r.out).with_context(|| format!("{}", r.out.display()))?;
    let (Some(cwd), Some(out_name)) = (out.parent(), out.file_name()) else {
        bail!(
            "{}: --out must name a directory below another",
            out.display()
        );
    };
    let out_name = Path::new(out_name);
    // Copies `src` into the out directory as `name` and returns its name relative to `cwd`.
    let stage = |src: &Path, name: &std::ffi::OsStr| -> Result<PathBuf> {
        let dst = out.join(name);
        if std::fs::canonicalize(src).ok().as_deref() != Some(dst.as_path()) {
            std::fs::copy(src, &dst)
                .with_context(|| format!("copying {} to {}", src.display(), dst.display()))?;
        }
        Ok(out_name.join(name))
    };
    let workload_name = r
        .workload
        .file_name()
        .with_context(|| format!("{}: not a file", r.workload.display()))?;
    let mut paths = vec![stage(&r.workload, workload_name)?];
    if let Some(t) = trace {
        if t.parent() != Some(out.as_path()) {
            bail!(
                "{}: the trace must be written into {}",
                t.display(),
                out.display()
            );
        }
        paths.push(out_name.join(t.file_name().expect("a file in out")));
    }
    if r.el0 {
        let prog = match &r.el0_program {
            Some(p) => p.clone(),
            None => crate::kernel::build_el0_rtapp()?,
        };
        paths.push(stage(&prog, std::ffi::OsStr::new("rtapp-el0"))?);
    }
    for p in &paths {
        let s = p.display().to_string();
        if s.len() > 200 || s.contains(char::is_whitespace) {
            bail!("{s}: the kernel takes paths of at most 200 bytes without spaces");
        }
    }
    let mut append = format!("rtapp={}", paths[0].display());
    if trace.is_some() {
        append.push_str(&format!(" rtapp_trace={}", paths[1].display()));
    }
    if r.el0 {
        append.push_str(&format!(" rtapp_el0={}", paths[paths.len() - 1].display()));
    }
    if let Some(ns) = r.duration_ns {
        append.push_str(&format!(" rtapp_duration_ms={}", ns.div_ceil(1_000_000)));
    }
    if !features.is_empty() {
        append.push(' ');
        append.push_str(&features);
    }
    for w in &r.append {
        append.push(' ');
        append.push_str(w);
    }
    if let Some(h) = r.highres {
        append.push_str(if h == OnOff::On {
            " highres=on"
        } else {
            " highres=off"
        });
    }
    let a = crate::kernel::build(crate::boards::Target::QemuVirt, None)?;
    let dir = a
        .image
        .parent()
        .expect("Image has a directory")
        .to_path_buf();
    let mut m = machine.clone();
    if let Some(n) = r.board.nr_cpus() {
        m.smp = n;
    }
    let mut m = m.machine(
        Boot::Direct {
            image: a.image.clone(),
        },
        &append,
        false,
        false,
    );
    m.icount = r.icount.map(|shift| format!("shift={shift},sleep=off"));
    if let Some(path) = dtb::board_dtb(r.board, &mut m, &dir)? {
        m.extra.push("-dtb".into());
        m.extra.push(path.display().to_string());
    }
    let defmt = crate::load_defmt(&a.elf)?;
    let mut command = m.command();
    command.current_dir(cwd);
    let outcome = qemu::run(
        command,
        defmt.as_ref(),
        &RunOpts {
            timeout: Some(r.timeout),
            echo: r.echo,
            ..Default::default()
        },
    )?;
    if outcome.timed_out {
        bail!("QEMU killed after {} s", r.timeout.as_secs());
    }
    let code = outcome.status.and_then(|s| s.code());
    if code != Some(0) {
        let why: Vec<&String> = outcome
            .lines
            .iter()
            .filter(|l| {
                l.starts_with("rtapp:")
                    || l.starts_with("rtapp-el0:")
                    || l.starts_with("el0:")
                    || l.contains("panic")
            })
            .collect();
        bail!("the kernel ended with status {code:?}: {why:?}");
    }
    Ok(outcome)
}

/// Largest difference allowed between the kernel's energy meter and the analyser's energy
/// from the trace. The two sum the same `busy_ns × power(opp)`, and the meter turns its busy
/// intervals and power changes at the instants the trace's `sched_switch` and
/// `cpu_frequency` records carry (`kernel/src/sched.rs`, `cpufreq.rs`), so they agree to the
/// µJ but for rounding and the odd race of a transition completing on one CPU while another
/// switches: over the bundled workloads on qemu-juno-r2 and qemu-hikey960 (3 Dec 2026) the
/// largest difference was 0.0064 % (177 µJ of 2.77 J). Before the meter used the trace's
/// instants it read its own clock a few hundred ns earlier per switch, and the two drifted
/// apart by up to 5.5 % on `cyclictest.json` (120,000 switches a second).
const METER_TOLERANCE_PCT: f64 = 0.05;

/// The kernel's own `rtapp: energy N uJ (energy model)` line must agree with the energy the
/// analyser computed from its trace (see `kernel/src/energy.rs`).
fn check_meter(lines: &[String], analysed_uj: f64) -> Result<()> {
    let Some(meter_uj) = lines.iter().find_map(|l| {
        l.strip_prefix("rtapp: energy ")?
            .strip_suffix(" uJ (energy model)")?
            .parse::<f64>()
            .ok()
    }) else {
        if analysed_uj > 0.0 {
            bail!("the kernel printed no `rtapp: energy N uJ (energy model)` line");
        }
        return Ok(());
    };
    let diff = (meter_uj - analysed_uj).abs();
    if diff > 1.0 && diff > analysed_uj.abs() * METER_TOLERANCE_PCT / 100.0 {
        bail!(
            "the kernel's energy meter says {meter_uj:.0} uJ, the trace's analysis \
             {analysed_uj:.0} uJ: more than {METER_TOLERANCE_PCT} % apart"
        );
    }
    Ok(())
}

/// The workload's `global.duration` (or the simulator's default of 10 s).
fn workload_duration(path: &Path, nr_cpus: usize) -> Result<u64> {
    let text = std::fs::read_to_string(path)?;
    let wl = asym_rtapp::workload::parse(&text, &path.display().to_string(), nr_cpus)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(wl.duration_ns.unwrap_or(10_000_000_000))
}

fn file_label(p: &Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// `report.json` from an analysis: the simulator's schema, with the parts a trace gives
/// (`energy`, per-task running time, residency, activations and migrations, context
/// switches) and `producer` saying who ran it.
pub fn report_json(
    desc: &asym_sched::topology::BoardDesc,
    workload: &str,
    duration_ns: u64,
    a: &Analysis,
    producer: &str,
) -> serde_json::Value {
    let models = DomainModel::of_board(desc);
    let domains: Vec<_> = models
        .iter()
        .zip(&a.domains)
        .map(|(m, d)| {
            json!({
                "name": m.name,
                "cpus": m.cpus,
                "energy_uj": d.energy_uj,
                "residency": m.cpus.iter().zip(&d.busy_ns).map(|(c, busy)| json!({
                    "cpu": c,
                    "opps": m.opps.iter().zip(busy).map(|(o, ns)| json!({
                        "khz": o.0, "power_uw": o.1, "busy_ns": ns,
                    })).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
                "frequency_residency": m.opps.iter().zip(&d.frequency_ns).map(|(o, ns)| json!({
                    "khz": o.0, "time_ns": ns,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "schema": "asym-sim-report/1",
        "producer": producer,
        "board": desc.name,
        "workload": workload,
        "duration_ns": duration_ns,
        "energy": {
            "model_available": models.iter().all(|m| m.opps.iter().all(|o| o.1 > 0)),
            "total_uj": a.total_energy_uj,
            "perf_domains": domains,
        },
        "tasks": a.tasks.iter().map(|t| json!({
            "name": t.name,
            "pid": t.pid,
            "activations": t.activations,
            "runtime_ns": t.runtime_ns,
            "residency_ns": t.residency_ns,
            "migrations": t.migrations,
        })).collect::<Vec<_>>(),
        "counters": {
            "context_switches": a.context_switches,
            "sched_softirq_raises": a.sched_softirq_raises,
            "overutilized_ns": a.overutilized_ns,
            "timer_loops": a.timer_loops,
            "timer_loops_late": a.timer_late,
        },
        "trace": {
            "lines": a.lines,
            "lost_records": a.lost_records,
            "bad_lines": a.bad_lines,
        },
    })
}

/// The cluster (domain index) where a task spent most of its running time.
pub fn placement_class(models: &[DomainModel], residency: &[u64]) -> Option<usize> {
    models
        .iter()
        .enumerate()
        .map(|(d, m)| {
            (
                d,
                m.cpus
                    .iter()
                    .map(|&c| residency.get(c).copied().unwrap_or(0))
                    .sum::<u64>(),
            )
        })
        .filter(|&(_, ns)| ns > 0)
        .max_by_key(|&(_, ns)| ns)
        .map(|(d, _)| d)
}

/// Largest energy difference allowed between the EL0 and the in-kernel executor on one
/// workload (issue 13's must-show 3).
pub const EL0_ENERGY_TOLERANCE_PCT: f64 = 5.0;

/// Whether two runs of one workload on `desc` — `kernel` by the in-kernel executor, `el0` by
/// the EL0 one — give every task the same placement class ([`placement_class`]) and energies
/// within [`EL0_ENERGY_TOLERANCE_PCT`]: the summary line, or why not.
pub fn compare_executors(
    desc: &asym_sched::topology::BoardDesc,
    kernel: &Analysis,
    el0: &Analysis,
) -> Result<String> {
    let models = DomainModel::of_board(desc);
    let class = |a: &Analysis, name: &str| {
        a.tasks
            .iter()
            .find(|t| t.name == name)
            .and_then(|t| placement_class(&models, &t.residency_ns))
            .map_or("-", |d| models[d].name.as_str())
    };
    let mut classes = Vec::new();
    let mut differ = Vec::new();
    for t in &kernel.tasks {
        let (k, e) = (class(kernel, &t.name), class(el0, &t.name));
        classes.push(format!("{} {k}/{e}", t.name));
        if k != e || k == "-" {
            differ.push(format!("{}: in-kernel {k}, EL0 {e}", t.name));
        }
    }
    if el0.tasks.len() != kernel.tasks.len() {
        differ.push(format!(
            "{} tasks in-kernel, {} at EL0",
            kernel.tasks.len(),
            el0.tasks.len()
        ));
    }
    let diff = pct(kernel.total_energy_uj, el0.total_energy_uj).unwrap_or(0.0);
    let line = format!(
        "energy in-kernel {:.0} uJ, EL0 {:.0} uJ ({diff:+.1} %); classes (in-kernel/EL0): {}",
        kernel.total_energy_uj,
        el0.total_energy_uj,
        classes.join(", ")
    );
    if !differ.is_empty() {
        bail!("{line}: placement differs: {}", differ.join("; "));
    }
    if diff.abs() > EL0_ENERGY_TOLERANCE_PCT {
        bail!("{line}: energies more than {EL0_ENERGY_TOLERANCE_PCT} % apart");
    }
    Ok(line)
}

/// Relative difference of `b` from `a` in %, `None` when both are 0.
fn pct(a: f64, b: f64) -> Option<f64> {
    if a == 0.0 && b == 0.0 {
        None
    } else {
        Some((b - a) / a.abs().max(1e-12) * 100.0)
    }
}

/// One comparison's verdict on the tolerances, and the numbers it rests on.
#[derive(Debug, Default)]
pub struct Verdict {
    pub energy_ok: bool,
    pub placement_ok: bool,
    pub residency_ok: bool,
    /// Energy by the energy model, µJ: simulator, QEMU; and QEMU's difference in %.
    pub energy_uj: (f64, f64),
    pub energy_pct: f64,
    /// The largest frequency-residency difference over every domain and OPP, points of the run.
    pub max_residency_pt: f64,
    /// Threads whose placement class differs (and not only within their rt-app task's set).
    pub placement_diff: Vec<String>,
    /// Context switches: simulator, QEMU.
    pub switches: (u64, u64),
}

impl Verdict {
    /// Every tolerance holds.
    pub fn ok(&self) -> bool {
        self.energy_ok && self.placement_ok && self.residency_ok
    }
}

/// Prints the simulator's and the kernel's analyses side by side; the verdict on energy
/// within 15 %, equal placement classes (per thread, or as a set over the instances of one
/// rt-app task) and frequency residency within 15 % (of the run).
pub fn print_comparison(
    desc: &asym_sched::topology::BoardDesc,
    sim: &Analysis,
    qemu: &Analysis,
    duration_ns: u64,
) -> Verdict {
    let models = DomainModel::of_board(desc);
    let mut v = Verdict::default();
    let d = pct(sim.total_energy_uj, qemu.total_energy_uj).unwrap_or(0.0);
    v.energy_ok = d.abs() <= 15.0;
    v.energy_uj = (sim.total_energy_uj, qemu.total_energy_uj);
    v.energy_pct = d;
    v.switches = (sim.context_switches, qemu.context_switches);
    println!(
        "{:<28} {:>14} {:>14} {:>9}",
        "", "simulator", "qemu", "delta"
    );
    println!(
        "{:<28} {:>14.1} {:>14.1} {:>8.1}% {}",
        "energy (uJ)",
        sim.total_energy_uj,
        qemu.total_energy_uj,
        d,
        if v.energy_ok { "ok" } else { "OUT" }
    );
    for (dm, (ds, dq)) in models.iter().zip(sim.domains.iter().zip(&qemu.domains)) {
        println!(
            "{:<28} {:>14.1} {:>14.1} {:>8.1}%",
            format!("  {} energy (uJ)", dm.name),
            ds.energy_uj,
            dq.energy_uj,
            pct(ds.energy_uj, dq.energy_uj).unwrap_or(0.0)
        );
    }
    v.residency_ok = true;
    for (dm, (ds, dq)) in models.iter().zip(sim.domains.iter().zip(&qemu.domains)) {
        for (o, (s, q)) in dm
            .opps
            .iter()
            .zip(ds.frequency_ns.iter().zip(&dq.frequency_ns))
        {
            // Residency as a share of the run: points of the run's time.
            let (sp, qp) = (
                *s as f64 * 100.0 / duration_ns.max(1) as f64,
                *q as f64 * 100.0 / duration_ns.max(1) as f64,
            );
            let ok = (qp - sp).abs() <= 15.0;
            v.residency_ok &= ok;
            v.max_residency_pt = v.max_residency_pt.max((qp - sp).abs());
            println!(
                "{:<28} {:>13.1}% {:>13.1}% {:>7.1}pt {}",
                format!("  {} @ {} MHz", dm.name, o.0 / 1000),
                sp,
                qp,
                qp - sp,
                if ok { "ok" } else { "OUT" }
            );
        }
    }
    v.placement_ok = true;
    let class_of = |a: &Analysis, pid: u32| {
        a.tasks
            .iter()
            .find(|t| t.pid == pid)
            .and_then(|t| placement_class(&models, &t.residency_ns))
    };
    // The threads of one rt-app task (its `instance`s, named `<task>-<n>`) run the same
    // program, so which of them lands where is a tie either side may break its own way: they
    // are compared as a set of classes.
    let same_set = |task: &str| {
        let classes = |a: &Analysis| {
            let mut c: Vec<Option<usize>> = sim
                .tasks
                .iter()
                .filter(|t| instance_of(&t.name) == task)
                .map(|t| class_of(a, t.pid))
                .collect();
            c.sort();
            c
        };
        classes(sim) == classes(qemu)
    };
    for ts in &sim.tasks {
        let tq = qemu.tasks.iter().find(|t| t.pid == ts.pid);
        let cs = placement_class(&models, &ts.residency_ns);
        let cq = tq.and_then(|t| placement_class(&models, &t.residency_ns));
        let name = |c: Option<usize>| c.map_or("-", |d| models[d].name.as_str());
        let swapped = cs != cq && same_set(instance_of(&ts.name));
        let ok = cs == cq || swapped;
        v.placement_ok &= ok;
        if !ok {
            v.placement_diff
                .push(format!("{} ({} → {})", ts.name, name(cs), name(cq)));
        }
        println!(
            "{:<28} {:>14} {:>14} {:>9} {}",
            format!("  {} ({})", ts.name, ts.pid),
            format!("{} {:.0}ms", name(cs), ts.runtime_ns as f64 / 1e6),
            format!(
                "{} {:.0}ms",
                name(cq),
                tq.map_or(0.0, |t| t.runtime_ns as f64 / 1e6)
            ),
            "",
            if swapped {
                "ok (same set as its instances)"
            } else if ok {
                "ok"
            } else {
                "DIFF"
            }
        );
    }
    println!(
        "{:<28} {:>14} {:>14}",
        "context switches", sim.context_switches, qemu.context_switches
    );
    println!(
        "verdict: energy {}, placement {}, frequency residency {}",
        if v.energy_ok {
            "within 15 %"
        } else {
            "OUTSIDE 15 %"
        },
        if v.placement_ok { "same" } else { "DIFFERENT" },
        if v.residency_ok {
            "within 15 pt"
        } else {
            "OUTSIDE 15 pt"
        }
    );
    v
}

/// The rt-app task a thread named `<task>-<n>` is an instance of (rt-app's naming).
fn instance_of(thread: &str) -> &str {
    match thread.rsplit_once('-') {
        Some((task, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => task,
        _ => thread,
    }
}

/// The simulator board name of a QEMU board.
pub fn sim_board(b: dtb::Board) -> Option<&'static str> {
    b.desc().map(|d| d.name)
}

/// Runs the simulator on `r`'s workload and board into `r.out/sim`, and analyses its trace.
pub fn run_sim(r: &Run, features: &[String]) -> Result<Analysis> {
    let board = sim_board(r.board).context("--board has no simulator model")?;
    let desc = r.board.desc().context("no board")?;
    let dir = r.out.join("sim");
    let mut args: Vec<String> = vec![
        "--board".into(),
        board.into(),
        "--workload".into(),
        r.workload.display().to_string(),
        "--out".into(),
        dir.display().to_string(),
    ];
    if let Some(ns) = r.duration_ns {
        args.push("--duration".into());
        args.push(format!("{}ms", ns.div_ceil(1_000_000)));
    }
    if let Some(e) = r.eas {
        args.push("--eas".into());
        args.push(if e == OnOff::On { "on" } else { "off" }.into());
    }
    args.push("--lb".into());
    args.push(
        if r.lb == Some(OnOff::Off) {
            "off"
        } else {
            "on"
        }
        .into(),
    );
    for s in features {
        args.push("--set".into());
        args.push(s.clone());
    }
    if let Some(h) = r.highres {
        args.push("--highres".into());
        args.push(if h == OnOff::On { "on" } else { "off" }.into());
    }
    let code = crate::bench::run_sim(&[], &args)?;
    if code != std::process::ExitCode::SUCCESS {
        bail!("the simulator failed");
    }
    let trace = std::fs::read_to_string(dir.join("trace.txt"))?;
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("report.json"))?)?;
    let duration_ns = report["duration_ns"]
        .as_u64()
        .context("report.json: no duration_ns")?;
    Ok(analyse(
        &trace,
        desc.cpus.len(),
        &DomainModel::of_board(desc),
        duration_ns,
    ))
}

#[cfg(test)]
mod tests {
    use super::instance_of;

    #[test]
    fn instance_of_strips_rt_app_instance_number() {
        assert_eq!(instance_of("small-2"), "small");
        assert_eq!(instance_of("cam03-3"), "cam03");
        assert_eq!(instance_of("a-1-0"), "a-1");
        assert_eq!(instance_of("preview"), "preview");
        assert_eq!(instance_of("x-"), "x-");
        assert_eq!(instance_of("x-2a"), "x-2a");
    }
}
