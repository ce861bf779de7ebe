//! `cargo xtask sim-ab`: what a policy change does to energy, deadlines and placement, over
//! every bundled workload, in one table.
//!
//! Side A is the simulator at `--base REV` (built in a throw-away worktree, as `sim-equiv`
//! does) or, without `--base`, the working tree's; side B is always the working tree's. Each
//! side gets its own `--set FEATURE=on|off` list (`--base-set` for A, `--set` for B), so the
//! same command measures a commit (`--base HEAD~1`) or a switch (`--set WA_BIAS=off`). Both
//! sides run every workload of `tests/workloads` × `--eas on|off` × the boards, with load
//! balancing on (Linux's default), and the table compares what their `report.json` say.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::cmd;
use crate::equiv;

/// Options of `cargo xtask sim-ab`.
#[derive(Debug, Clone)]
pub struct AbArgs {
    /// Side A's revision (`None`: the working tree, like side B).
    pub base: Option<String>,
    /// Side A's feature settings.
    pub base_set: Vec<String>,
    /// Side B's feature settings.
    pub set: Vec<String>,
    /// The boards (empty: juno-r2 and hikey960).
    pub boards: Vec<String>,
    /// Which workloads, how long, how many at once.
    pub matrix: equiv::Matrix,
}

/// What one run's `report.json` says, as the table compares it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Metrics {
    /// The energy meter's total (µJ), or the energy model's where the board has no meter.
    energy_uj: f64,
    /// Deadline misses summed over the tasks.
    misses: u64,
    /// Migrations: wake-up, load balance and misfit.
    migrations: u64,
    /// Share of all tasks' running time spent on the board's highest-capacity CPUs.
    big_share: f64,
}

fn metrics(report: &Value) -> Result<Metrics> {
    let num = |v: &Value, what: &str| {
        v.as_f64()
            .with_context(|| format!("report.json: `{what}` is missing or not a number"))
    };
    let energy_uj = match report.get("meter") {
        Some(m) if !m.is_null() => num(&m["total_uj"], "meter.total_uj")?,
        _ => num(&report["energy"]["total_uj"], "energy.total_uj")?,
    };
    let tasks = report["tasks"]
        .as_array()
        .context("report.json: `tasks` is not a list")?;
    let mut misses = 0;
    for t in tasks {
        misses += num(&t["deadline_misses"], "tasks[].deadline_misses")? as u64;
    }
    let m = &report["counters"]["migrations"];
    let mut migrations = 0;
    for k in ["wakeup", "load_balance", "misfit"] {
        migrations += num(&m[k], &format!("counters.migrations.{k}"))? as u64;
    }
    let caps: Vec<f64> = report["cpus"]
        .as_array()
        .context("report.json: `cpus` is not a list")?
        .iter()
        .map(|c| num(&c["capacity_orig"], "cpus[].capacity_orig"))
        .collect::<Result<_>>()?;
    let top = caps.iter().copied().fold(0.0, f64::max);
    let (mut big, mut all) = (0.0, 0.0);
    for t in tasks {
        let res = t["residency_ns"]
            .as_array()
            .context("report.json: `tasks[].residency_ns` is not a list")?;
        for (cpu, ns) in res.iter().enumerate() {
            let ns = num(ns, "tasks[].residency_ns[]")?;
            all += ns;
            if caps.get(cpu).is_some_and(|&c| c == top) {
                big += ns;
            }
        }
    }
    Ok(Metrics {
        energy_uj,
        misses,
        migrations,
        big_share: if all > 0.0 { big / all } else { 0.0 },
    })
}

/// One row of the matrix.
#[derive(Debug, Clone)]
struct Combo {
    board: String,
    workload: PathBuf,
    eas: bool,
}

impl Combo {
    fn stem(&self) -> String {
        self.workload
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned())
    }

    fn name(&self) -> String {
        format!(
            "{}-{}-eas_{}",
            self.board,
            self.stem(),
            if self.eas { "on" } else { "off" }
        )
    }
}

fn sets(list: &[String]) -> Vec<String> {
    list.iter()
        .flat_map(|s| ["--set".to_string(), s.clone()])
        .collect()
}

fn run_side(bin: &Path, c: &Combo, set: &[String], out: &Path, d: Option<&str>) -> Result<Metrics> {
    equiv::run_sim(bin, &c.board, &c.workload, c.eas, true, &sets(set), out, d)?;
    let path = out.join("report.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let v: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    metrics(&v).with_context(|| path.display().to_string())
}

/// The change from `a` to `b` in per cent, `None` when `a` is zero.
fn delta(a: f64, b: f64) -> Option<f64> {
    (a != 0.0).then(|| (b - a) / a * 100.0)
}

fn row(c: &Combo, a: &Metrics, b: &Metrics) -> String {
    let d = delta(a.energy_uj, b.energy_uj).map_or_else(|| "—".into(), |d| format!("{d:+.1} %"));
    format!(
        "| {} | {} | {} | {:.1} → {:.1} | {d} | {} → {} | {} → {} | {:.0} → {:.0} % |",
        c.board,
        c.stem(),
        if c.eas { "on" } else { "off" },
        a.energy_uj / 1000.0,
        b.energy_uj / 1000.0,
        a.misses,
        b.misses,
        a.migrations,
        b.migrations,
        a.big_share * 100.0,
        b.big_share * 100.0,
    )
}

pub fn run(args: &AbArgs) -> Result<ExitCode> {
    if args.base.is_none() && args.base_set == args.set {
        bail!(
            "sim-ab: both sides would be the same: give --base REV, or --set / --base-set \
             lists that differ"
        );
    }
    let work = cmd::target_dir().join("sim-ab");
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let b_bin = equiv::build_working_tree()?;
    let a_bin = match &args.base {
        Some(rev) => equiv::build_at(&work, &equiv::resolve(rev)?)?,
        None => b_bin.clone(),
    };

    let boards: Vec<String> = if args.boards.is_empty() {
        equiv::BOARDS.iter().map(|b| b.to_string()).collect()
    } else {
        args.boards.clone()
    };
    let root = cmd::workspace_root();
    let workloads = equiv::workloads(&root.join("tests/workloads"), args.matrix.only.as_deref())?;
    if workloads.is_empty() {
        bail!("no workload in tests/workloads matches");
    }
    let mut combos = Vec::new();
    for board in &boards {
        for w in &workloads {
            for eas in [false, true] {
                combos.push(Combo {
                    board: board.clone(),
                    workload: w.clone(),
                    eas,
                });
            }
        }
    }
    let runs = work.join("runs");
    let _ = std::fs::remove_dir_all(&runs);
    let describe = |rev: &Option<String>, set: &[String]| {
        let mut s = rev
            .as_ref()
            .map_or_else(|| "working tree".to_string(), |r| r.clone());
        if !set.is_empty() {
            s += &format!(" with --set {}", set.join(" --set "));
        }
        s
    };
    let a_name = describe(&args.base, &args.base_set);
    let b_name = describe(&None, &args.set);
    println!(
        "xtask: sim-ab: {} runs × 2 (A = {a_name}, B = {b_name})",
        combos.len()
    );

    let n = combos.len();
    let queue = Mutex::new(combos.into_iter().enumerate().rev().collect::<Vec<_>>());
    let results = Mutex::new(Vec::with_capacity(n));
    std::thread::scope(|s| {
        for _ in 0..args.matrix.jobs.max(1) {
            s.spawn(|| loop {
                let next = queue.lock().map(|mut q| q.pop()).unwrap_or(None);
                let Some((i, c)) = next else { break };
                let dir = runs.join(c.name());
                let d = args.matrix.duration.as_deref();
                let r = run_side(&a_bin, &c, &args.base_set, &dir.join("a"), d).and_then(|a| {
                    run_side(&b_bin, &c, &args.set, &dir.join("b"), d).map(|b| (a, b))
                });
                if r.is_ok() {
                    let _ = std::fs::remove_dir_all(&dir);
                }
                if let Ok(mut v) = results.lock() {
                    v.push((i, c, r));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_default();
    results.sort_by_key(|(i, _, _)| *i);

    println!();
    println!("A = {a_name}; B = {b_name}. Load balancing on; energy from the meter (mJ).");
    println!();
    println!(
        "| board | workload | EAS | energy A → B (mJ) | Δ energy | deadline misses | \
         migrations | running time on big CPUs |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let (mut better, mut worse, mut failed) = (0, 0, 0);
    let (mut misses_a, mut misses_b) = (0, 0);
    for (_, c, r) in &results {
        match r {
            Ok((a, b)) => {
                println!("{}", row(c, a, b));
                match delta(a.energy_uj, b.energy_uj) {
                    Some(d) if d <= -0.5 => better += 1,
                    Some(d) if d >= 0.5 => worse += 1,
                    _ => {}
                }
                misses_a += a.misses;
                misses_b += b.misses;
            }
            Err(e) => {
                failed += 1;
                println!("| {} | {} | ERROR: {e:#} |", c.board, c.stem());
            }
        }
    }
    println!();
    println!(
        "xtask: sim-ab: {} runs: B uses ≥ 0.5 % less energy in {better}, more in {worse}; \
         deadline misses {misses_a} → {misses_b}; {failed} failed to run",
        results.len()
    );
    if failed > 0 {
        println!(
            "xtask: the failed runs' outputs are under {}",
            runs.display()
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(meter: Option<f64>) -> Value {
        serde_json::json!({
            "energy": { "total_uj": 800.0 },
            "meter": meter.map(|m| serde_json::json!({ "total_uj": m })),
            "tasks": [
                { "deadline_misses": 2, "residency_ns": [30, 10, 0, 60] },
                { "deadline_misses": 1, "residency_ns": [0, 0, 100, 0] },
            ],
            "cpus": [
                { "capacity_orig": 1024 }, { "capacity_orig": 1024 },
                { "capacity_orig": 383 }, { "capacity_orig": 383 },
            ],
            "counters": { "migrations": { "wakeup": 4, "load_balance": 2, "misfit": 1 } },
        })
    }

    #[test]
    fn metrics_read_meter_misses_migrations_and_big_share() {
        let m = metrics(&report(Some(1000.0))).unwrap();
        assert_eq!(m.energy_uj, 1000.0);
        assert_eq!(m.misses, 3);
        assert_eq!(m.migrations, 7);
        assert!((m.big_share - 40.0 / 200.0).abs() < 1e-9, "{}", m.big_share);
        // No meter: the energy model's total.
        assert_eq!(metrics(&report(None)).unwrap().energy_uj, 800.0);
    }

    #[test]
    fn a_missing_field_is_named() {
        let mut r = report(Some(1.0));
        r["counters"]["migrations"]
            .as_object_mut()
            .unwrap()
            .remove("misfit");
        let e = metrics(&r).unwrap_err().to_string();
        assert!(e.contains("counters.migrations.misfit"), "{e}");
    }

    #[test]
    fn delta_is_relative_and_undefined_from_zero() {
        assert_eq!(delta(200.0, 150.0), Some(-25.0));
        assert_eq!(delta(0.0, 1.0), None);
    }
}
