//! Scenario tests of the simulator against independent oracles: the PELT geometric
//! series, the energy model's busy power, the work-time emulation formula, byte-for-byte
//! determinism and the workload reader's error messages.
//!
//! Oracle numbers are computed here from first principles (board table values such as
//! `capacity-dmips-mhz`, OPP voltages and the power coefficient, in f64), never from a
//! previous run's output.

use std::path::{Path, PathBuf};

use asym_sim::{run_source, Governor, RunOutput, RunSpec};

fn out_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("asym-sim-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn spec(board: &str, gov: Governor, duration_ns: u64, out: Option<PathBuf>) -> RunSpec {
    RunSpec {
        board: board.into(),
        workload: PathBuf::from("test.json"),
        duration_ns: Some(duration_ns),
        set: Vec::new(),
        governor: gov,
        seed: 0,
        hz: 250,
        out,
        plot: false,
    }
}

fn run(board: &str, gov: Governor, duration_ns: u64, out: Option<PathBuf>, wl: &str) -> RunOutput {
    run_source(&spec(board, gov, duration_ns, out), wl, false).expect("simulation failed")
}

/// `(timestamp_ns, fields)` of every `event` line of a trace for `pid`.
fn trace_events(dir: &Path, event: &str, pid: u32) -> Vec<(u64, String)> {
    let text = std::fs::read_to_string(dir.join("trace.txt")).unwrap();
    let pat = format!(" {event}: ");
    let pidpat = format!(" pid={pid} ");
    text.lines()
        .filter(|l| l.contains(&pat) && l.contains(&pidpat))
        .map(|l| {
            let (head, fields) = l.split_once(&pat).unwrap();
            let ts = head.rsplit(' ').next().unwrap().trim_end_matches(':');
            let (s, us) = ts.split_once('.').unwrap();
            let ns = s.parse::<u64>().unwrap() * 1_000_000_000 + us.parse::<u64>().unwrap() * 1000;
            (ns, fields.to_string())
        })
        .collect()
}

fn field(fields: &str, name: &str) -> u64 {
    let key = format!("{name}=");
    fields
        .split(' ')
        .find_map(|f| f.strip_prefix(&key))
        .unwrap_or_else(|| panic!("no {name} in {fields}"))
        .parse()
        .unwrap()
}

// --- Board facts from ../shared/reference/boards.md, for the oracles -------------------

/// Juno r2 LITTLE capacity_orig from `capacity-dmips-mhz` × fmax, normalised: A53 485 @ 950
/// MHz vs A72 1024 @ 1200 MHz.
fn juno_little_capacity() -> u32 {
    ((485u64 * 950_000) << 10).div_euclid(1024 * 1_200_000) as u32
}

/// `C × mV² × MHz / 10⁶` in µW.
fn dt_power_uw(c: f64, mv: f64, mhz: f64) -> f64 {
    (c * mv * mv * mhz / 1e6).floor()
}

const PELT_PERIOD_NS: f64 = 1_048_576.0;

fn y_pow(periods: f64) -> f64 {
    0.5f64.powf(periods / 32.0)
}

// --- Determinism ----------------------------------------------------------------------

#[test]
fn reruns_are_byte_identical() {
    let wl = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../workloads/jank.json"
    ))
    .unwrap();
    let (a, b) = (out_dir("det-a"), out_dir("det-b"));
    run(
        "juno-r2",
        Governor::Powersave,
        1_000_000_000,
        Some(a.clone()),
        &wl,
    );
    run(
        "juno-r2",
        Governor::Powersave,
        1_000_000_000,
        Some(b.clone()),
        &wl,
    );
    for f in ["report.json", "trace.txt"] {
        let x = std::fs::read(a.join(f)).unwrap();
        let y = std::fs::read(b.join(f)).unwrap();
        assert!(x.len() > 1000, "{f} suspiciously small");
        assert!(x == y, "{f} differs between identical runs");
    }
}

// --- PELT ------------------------------------------------------------------------------

/// An always-running task pinned to `cpu` of juno-r2 at fmax: its util_avg must follow
/// `1024 − (1024 − u0)·y^n`, n = elapsed wall time × capacity/1024 in PELT periods (the
/// clock_pelt invariance), with u0 = half the CPU's capacity (`post_init_entity_util_avg`
/// on an empty CPU).
fn check_pelt_ramp(cpu: u32, capacity: u32, name: &str) {
    let wl = format!(r#"{{"tasks": {{"hog": {{"loop": 1, "cpus": [{cpu}], "run": 100000000}}}}}}"#);
    let dir = out_dir(name);
    run(
        "juno-r2",
        Governor::Performance,
        400_000_000,
        Some(dir.clone()),
        &wl,
    );
    let samples = trace_events(&dir, "sched_pelt_se", 1001);
    assert!(
        samples.len() > 50,
        "too few PELT samples: {}",
        samples.len()
    );
    let u0 = field(&samples[0].1, "util") as f64;
    assert_eq!(
        u0,
        (capacity / 2) as f64,
        "initial util is not half the capacity"
    );
    let t0 = samples[0].0;
    let mut worst = 0.0f64;
    for (ts, f) in &samples {
        let n = (ts - t0) as f64 * capacity as f64 / 1024.0 / PELT_PERIOD_NS;
        let oracle = 1024.0 - (1024.0 - u0) * y_pow(n);
        let got = field(f, "util") as f64;
        // util_avg is only recomputed at period boundaries (up to one period stale) and
        // Linux's integer series converges to 47742, not 47788 (0.1 %).
        let stale = 1024.0 - (1024.0 - u0) * y_pow((n - 1.0).max(0.0));
        let err = if got > oracle {
            got - oracle
        } else {
            (stale - got).max(0.0)
        };
        worst = worst.max(err);
        assert!(
            err <= 6.0,
            "t={ts}: util {got}, series says {oracle:.1} (≥ {stale:.1})"
        );
    }
    // The ramp must actually have happened.
    let last = field(&samples.last().unwrap().1, "util") as f64;
    assert!(last > u0 + 200.0, "util did not ramp: {u0} → {last}");
    eprintln!("{name}: worst deviation {worst:.2}");
}

#[test]
fn always_running_util_follows_pelt_series_on_big() {
    check_pelt_ramp(0, 1024, "pelt-big");
}

#[test]
fn always_running_util_follows_pelt_series_on_little_with_clock_pelt() {
    check_pelt_ramp(2, juno_little_capacity(), "pelt-little");
}

// --- Work-time emulation ----------------------------------------------------------------

fn one_shot_runtime_ms(gov: Governor, work_us: u32) -> f64 {
    let wl = format!(r#"{{"tasks": {{"w": {{"loop": 1, "cpus": [2], "run": {work_us}}}}}}}"#);
    let out = run("juno-r2", gov, 1_000_000_000, None, &wl);
    let t = &out.report.tasks[0];
    assert!(t.exited, "the task did not finish");
    assert_eq!(t.residency_ns[2], t.runtime_ns, "ran outside CPU 2");
    t.runtime_ns as f64 / 1e6
}

#[test]
fn four_ms_of_work_takes_10_7_ms_on_juno_little_at_950_mhz() {
    let cap = juno_little_capacity() as f64;
    let oracle = 4.0 * 1024.0 / cap * 950.0 / 950.0;
    let got = one_shot_runtime_ms(Governor::Performance, 4000);
    assert!(
        (got - oracle).abs() / oracle < 0.01,
        "{got} ms vs {oracle} ms"
    );
    assert!((got - 10.7).abs() < 0.1, "{got} ms is not ~10.7 ms");
}

#[test]
fn four_ms_of_work_takes_22_6_ms_on_juno_little_at_450_mhz() {
    let cap = juno_little_capacity() as f64;
    let oracle = 4.0 * 1024.0 / cap * 950.0 / 450.0;
    let got = one_shot_runtime_ms(Governor::Powersave, 4000);
    assert!(
        (got - oracle).abs() / oracle < 0.01,
        "{got} ms vs {oracle} ms"
    );
    assert!((got - 22.6).abs() < 0.15, "{got} ms is not ~22.6 ms");
}

// --- Energy -----------------------------------------------------------------------------

/// A periodic task pinned to a LITTLE CPU at a fixed OPP: the energy must be the OPP's
/// busy power times the busy time the rt-app timer semantics imply, within 1 %.
fn check_pinned_energy(gov: Governor, mhz: f64, mv: f64) {
    let (work_us, period_us, dur_ms) = (1000.0, 16_000.0, 1600.0);
    let wl = r#"{"tasks": {"p": {"loop": -1, "cpus": [2],
        "phases": {"a": {"run": 1000, "timer": {"ref": "t", "period": 16000}}}}}}"#;
    let out = run("juno-r2", gov, (dur_ms * 1e6) as u64, None, wl);
    // Busy time of one activation: work / (capacity × f / fmax / 1024).
    let b = work_us * 1024.0 / juno_little_capacity() as f64 * 950.0 / mhz;
    // Runs start at 0, then b + k·period (relative timer armed at the end of the first run).
    let mut busy = 0.0;
    let mut start = 0.0;
    let mut k = 0.0;
    while start < dur_ms * 1000.0 {
        busy += b.min(dur_ms * 1000.0 - start);
        k += 1.0;
        start = b + k * period_us;
    }
    let oracle_uj = busy * 1e-6 * dt_power_uw(140.0, mv, mhz); // µs × µW = pJ → ×1e-6 µJ
    let got = out.report.energy.total_uj;
    let little = out
        .report
        .energy
        .perf_domains
        .iter()
        .find(|d| d.name == "little")
        .unwrap();
    assert_eq!(little.energy_uj, got, "energy outside the LITTLE domain");
    assert!(
        (got - oracle_uj).abs() / oracle_uj < 0.01,
        "energy {got} µJ vs model {oracle_uj} µJ"
    );
}

#[test]
fn pinned_periodic_energy_matches_energy_model_at_lowest_opp() {
    check_pinned_energy(Governor::Powersave, 450.0, 829.0);
}

#[test]
fn pinned_periodic_energy_matches_energy_model_at_highest_opp() {
    check_pinned_energy(Governor::Performance, 950.0, 1010.0);
}

// --- Deadlines, messaging ----------------------------------------------------------------

#[test]
fn overrunning_timer_task_misses_every_deadline_and_fitting_one_none() {
    // 20 ms of work every 16 ms cannot fit even on a big CPU at fmax.
    let wl = r#"{"tasks": {
        "over": {"loop": -1, "cpus": [0], "run": 20000, "timer": {"ref": "a", "period": 16000}},
        "fits": {"loop": -1, "cpus": [1], "run": 8000,  "timer": {"ref": "b", "period": 16000}}}}"#;
    let out = run("juno-r2", Governor::Performance, 1_000_000_000, None, wl);
    let over = &out.report.tasks[0];
    let fits = &out.report.tasks[1];
    assert!(over.timer_activations > 40);
    // rt-app arms a timer at its first use, so the first period cannot be missed.
    assert_eq!(over.deadline_misses, over.timer_activations - 1);
    assert!(fits.timer_activations > 55);
    assert_eq!(fits.deadline_misses, 0);
}

#[test]
fn suspend_resume_pair_alternates() {
    let wl = r#"{"tasks": {
        "a": {"loop": -1, "cpus": [0], "run": 100, "resume": "b", "suspend": "a"},
        "b": {"loop": -1, "cpus": [1], "suspend": "b", "run": 100, "resume": "a"}}}"#;
    let out = run("juno-r2", Governor::Performance, 100_000_000, None, wl);
    let (a, b) = (&out.report.tasks[0], &out.report.tasks[1]);
    // Strict alternation: 100 µs each, so ~500 round trips in 100 ms.
    assert!(
        a.activations > 400 && b.activations > 400,
        "{} {}",
        a.activations,
        b.activations
    );
    assert!(a.activations.abs_diff(b.activations) <= 1);
    assert!(a.runtime_ns.abs_diff(b.runtime_ns) <= 100_000);
}

#[test]
fn every_bundled_workload_runs_on_every_board() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../workloads");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        for board in ["juno-r2", "hikey960", "hikey"] {
            let out = run(board, Governor::Performance, 200_000_000, None, &text);
            let ran: u64 = out.report.tasks.iter().map(|t| t.runtime_ns).sum();
            assert!(ran > 0, "{} on {board}: nothing ran", p.display());
        }
        n += 1;
    }
    assert!(n >= 7, "expected the bundled workloads, found {n}");
}

// --- Malformed workloads ------------------------------------------------------------------

fn parse_err(wl: &str) -> String {
    match run_source(
        &spec("juno-r2", Governor::Performance, 1_000_000, None),
        wl,
        false,
    ) {
        Ok(_) => panic!("accepted a malformed workload:\n{wl}"),
        Err(e) => e,
    }
}

fn assert_err(wl: &str, line: u32, path: &str, what: &str) {
    let e = parse_err(wl);
    assert!(
        e.starts_with(&format!("test.json:{line}:")),
        "line {line} not named: {e}"
    );
    assert!(
        e.contains(&format!("`{path}`")),
        "path {path} not named: {e}"
    );
    assert!(e.contains(what), "'{what}' not explained: {e}");
    assert_eq!(e.lines().count(), 1, "more than one error line: {e}");
}

#[test]
fn bad_json_names_line_and_path() {
    assert_err(
        "{\n \"tasks\": {\n  \"a\": {\n   \"run\": 10,\n  }\n }\n}",
        5,
        "tasks.a",
        "invalid JSON",
    );
}

#[test]
fn unknown_event_names_line_and_path() {
    assert_err(
        "{\"tasks\": {\"a\": {\n \"run\": 10,\n \"spin\": 5\n}}}",
        3,
        "tasks.a.spin",
        "unknown key or event",
    );
}

#[test]
fn negative_period_names_line_and_path() {
    assert_err(
        "{\"tasks\": {\"a\": {\"phases\": {\"p\": {\n \"run\": 10,\n \"timer\": {\"ref\": \"x\",\n  \"period\": -5}}}}}}",
        4,
        "tasks.a.phases.p.timer.period",
        "period must be positive",
    );
}

#[test]
fn pinned_to_missing_cpu_names_line_and_path() {
    assert_err(
        "{\"tasks\": {\"a\": {\n \"cpus\": [0,\n  9],\n \"run\": 10}}}",
        3,
        "tasks.a.cpus[1]",
        "CPU 9 does not exist",
    );
}

#[test]
fn wrong_type_names_line_and_path() {
    assert_err(
        "{\"tasks\": {\"a\": {\n \"run\": \"ten\"}}}",
        2,
        "tasks.a.run",
        "expected an integer, found a string",
    );
}

#[test]
fn unsupported_and_negative_values_are_errors() {
    assert_err(
        "{\"tasks\": {\"a\": {\n \"sleep\": -1}}}",
        2,
        "tasks.a.sleep",
        "must not be negative",
    );
    assert_err(
        "{\"tasks\": {\"a\": {\"policy\": \"SCHED_FIFO\",\n \"run\": 1}}}",
        1,
        "tasks.a.policy",
        "not simulated yet",
    );
    assert_err(
        "{\"tasks\": {\"a\": {\"run\": 1, \"resume\": \"nobody\"}}}",
        1,
        "tasks.a.resume",
        "names no task",
    );
}

// --- Outputs and the command line -----------------------------------------------------------

#[test]
fn plot_is_a_png_of_the_run() {
    let wl =
        r#"{"tasks": {"a": {"loop": -1, "run": 1000, "timer": {"ref": "t", "period": 4000}}}}"#;
    let dir = out_dir("plot");
    let mut s = spec(
        "hikey960",
        Governor::Schedutil,
        200_000_000,
        Some(dir.clone()),
    );
    s.plot = true;
    run_source(&s, wl, false).unwrap();
    let png = std::fs::read(dir.join("plot.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    // IHDR: width and height, big-endian, right after the chunk header.
    let w = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let h = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert_eq!(w, 1600);
    assert!(h > 8 * 26, "too short for 8 CPU lanes: {h}");
}

#[test]
fn cli_reports_bad_input_in_one_line_without_panicking() {
    let dir = out_dir("cli");
    std::fs::create_dir_all(&dir).unwrap();
    let wl = dir.join("bad.json");
    std::fs::write(&wl, "{\"tasks\": {\"a\": {\n \"cpus\": [7], \"run\": 1}}}").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_asym-sim"))
        .args(["--board", "juno-r2", "--workload"])
        .arg(&wl)
        .arg("--out")
        .arg(dir.join("o"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("bad.json:2:") && err.contains("`tasks.a.cpus[0]`"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn cli_run_writes_report_and_trace() {
    let dir = out_dir("cli-ok");
    let wl = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../workloads/periodic-small.json"
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_asym-sim"))
        .args([
            "--board",
            "hikey",
            "--workload",
            wl,
            "--duration",
            "300ms",
            "--governor",
            "schedutil",
        ])
        .args(["--set", "UTIL_EST=off", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["board"], "hikey");
    assert_eq!(report["duration_ns"], 300_000_000u64);
    assert_eq!(report["features"]["UTIL_EST"], false);
    assert_eq!(report["features"]["RUNNABLE_BOOST"], true);
    assert_eq!(report["tasks"].as_array().unwrap().len(), 4);
    let trace = std::fs::read_to_string(dir.join("trace.txt")).unwrap();
    assert!(trace.starts_with("# tracer: nop\n"));
    assert!(trace.contains(" sched_switch: prev_comm="));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("events/s") && stdout.contains("simulated s per wall s"),
        "{stdout}"
    );
}

#[test]
fn always_running_tasks_share_a_cpu_by_nice_weight() {
    // sched_prio_to_weight for nice 0, 5, -3 (Linux core.c table).
    let weights = [1024.0, 335.0, 1991.0];
    let wl = r#"{"tasks": {
        "n0": {"loop": 1, "cpus": [1], "nice": 0, "run": 100000000},
        "n5": {"loop": 1, "cpus": [1], "nice": 5, "run": 100000000},
        "m3": {"loop": 1, "cpus": [1], "nice": -3, "run": 100000000}}}"#;
    let out = run("juno-r2", Governor::Performance, 10_000_000_000, None, wl);
    let total: u64 = out.report.tasks.iter().map(|t| t.runtime_ns).sum();
    assert!(total > 9_990_000_000, "CPU 1 was not kept busy: {total}");
    let wsum: f64 = weights.iter().sum();
    for (t, w) in out.report.tasks.iter().zip(weights) {
        let share = t.runtime_ns as f64 / total as f64;
        let want = w / wsum;
        assert!(
            (share - want).abs() / want < 0.01,
            "{}: share {share:.4}, weight says {want:.4}",
            t.name
        );
    }
}

#[test]
fn trace_is_time_ordered_and_switches_chain_per_cpu() {
    let wl = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../workloads/messaging.json"
    ))
    .unwrap();
    let dir = out_dir("chain");
    run(
        "hikey960",
        Governor::Schedutil,
        200_000_000,
        Some(dir.clone()),
        &wl,
    );
    let text = std::fs::read_to_string(dir.join("trace.txt")).unwrap();
    let mut last_ts = 0.0f64;
    let mut next_on: std::collections::BTreeMap<usize, String> = Default::default();
    let mut switches = 0;
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let (head, rest) = l.split_once(": ").unwrap();
        let mut it = head.split_whitespace().rev();
        let ts: f64 = it.next().unwrap().parse().unwrap();
        let cpu: usize = it.next().unwrap().trim_matches(['[', ']']).parse().unwrap();
        let who = it.next().unwrap().to_string();
        assert!(ts >= last_ts, "time went backwards at: {l}");
        last_ts = ts;
        // The line's task is the one the previous switch on that CPU put there.
        let on = next_on
            .get(&cpu)
            .cloned()
            .unwrap_or_else(|| "<idle>-0".into());
        assert_eq!(who, on, "line attributed to the wrong task: {l}");
        if let Some(f) = rest.strip_prefix("sched_switch: ") {
            let get = |k: &str| {
                f.split(' ')
                    .find_map(|x| x.strip_prefix(k))
                    .unwrap()
                    .to_string()
            };
            assert_eq!(
                format!("{}-{}", get("prev_comm="), get("prev_pid=")),
                on,
                "{l}"
            );
            next_on.insert(cpu, format!("{}-{}", get("next_comm="), get("next_pid=")));
            switches += 1;
        }
    }
    assert!(switches > 1000, "only {switches} switches");
}
