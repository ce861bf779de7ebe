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
        duration_ns: Some(duration_ns),
        governor: gov,
        out,
        ..RunSpec::new(board, "test.json")
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
            (parse_ts(ts), fields.to_string())
        })
        .collect()
}

/// A trace timestamp, `secs.nsecs`, in ns.
fn parse_ts(ts: &str) -> u64 {
    let (s, ns) = ts.split_once('.').unwrap();
    assert_eq!(ns.len(), 9, "not a ns timestamp: {ts}");
    s.parse::<u64>().unwrap() * 1_000_000_000 + ns.parse::<u64>().unwrap()
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

// --- Board facts from the mainline DTs (juno-r2.dts, hi3660.dtsi), for the oracles -----

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
    // rt-app starts a timer from the thread's start (`t_first`), so even the first
    // period (20 ms of work, wake-up due at 16 ms) is missed.
    assert_eq!(over.deadline_misses, over.timer_activations);
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
        "not supported yet",
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
    // Linux's defaults: load balancing on; EAS asked for, but HiKey's CPUs are symmetric,
    // so sched_is_eas_possible() fails and EAS is not active.
    assert_eq!(report["load_balance"], true);
    assert_eq!(report["features"]["ENERGY_AWARE"], true);
    assert_eq!(report["eas_active"], false);
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
    let mut last_ts = 0u64;
    let mut next_on: std::collections::BTreeMap<usize, String> = Default::default();
    let mut switches = 0;
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        let (head, rest) = l.split_once(": ").unwrap();
        let mut it = head.split_whitespace().rev();
        let ts = parse_ts(it.next().unwrap());
        let cpu: usize = it.next().unwrap().trim_matches(['[', ']']).parse().unwrap();
        let who = it.next().unwrap().to_string();
        // Unique, increasing timestamps: tools that sort by time keep the causal order.
        assert!(ts > last_ts || last_ts == 0, "time did not advance at: {l}");
        last_ts = ts;
        // The line's task is the one the previous switch on that CPU put there (the
        // context column shows a task's last name, `<idle>` for the idle task).
        let (_, pid) = who.rsplit_once('-').unwrap();
        let on = next_on.get(&cpu).cloned().unwrap_or_else(|| "0".into());
        assert_eq!(pid, on, "line attributed to the wrong task: {l}");
        if pid == "0" {
            assert_eq!(who, "<idle>-0", "{l}");
        }
        if let Some(f) = rest.strip_prefix("sched_switch: ") {
            let get = |k: &str| {
                f.split(' ')
                    .find_map(|x| x.strip_prefix(k))
                    .unwrap()
                    .to_string()
            };
            assert_eq!(get("prev_pid="), on, "{l}");
            for (c, p) in [("prev_comm=", "prev_pid="), ("next_comm=", "next_pid=")] {
                if get(p) == "0" {
                    assert_eq!(get(c), format!("swapper/{cpu}"), "{l}");
                }
            }
            next_on.insert(cpu, get("next_pid="));
            switches += 1;
        }
    }
    assert!(switches > 1000, "only {switches} switches");
}

// --- NOHZ blocked-load decay of idle CPUs ------------------------------------------------

/// `(ts_ns, cpu, comm-pid, event, fields)` of every trace line.
fn trace_lines(dir: &Path) -> Vec<(u64, usize, String, String, String)> {
    let text = std::fs::read_to_string(dir.join("trace.txt")).unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (head, rest) = l.split_once(": ").unwrap();
            let (event, fields) = rest.split_once(": ").unwrap();
            let mut it = head.split_whitespace().rev();
            let ns = parse_ts(it.next().unwrap());
            let cpu = it.next().unwrap().trim_matches(['[', ']']).parse().unwrap();
            let who = it.next().unwrap().to_string();
            (ns, cpu, who, event.to_string(), fields.to_string())
        })
        .collect()
}

/// A task runs 20 ms on LITTLE CPU 2 and then sleeps for a second while CPU 0 stays
/// busy: CPU 2's root cfs_rq util must keep decaying as y^n (Linux updates the
/// blocked averages of idle CPUs through NOHZ stats kicks from the busy CPU's tick,
/// every LOAD_AVG_PERIOD = 32 ms), instead of staying at its value at sleep time.
#[test]
fn idle_cpu_blocked_util_decays_through_nohz_stats_updates() {
    let wl = r#"{"tasks": {
        "burst": {"cpus": [2], "runtime": 20000, "sleep": 1000000},
        "hog": {"cpus": [0], "runtime": 1000000}}}"#;
    let dir = out_dir("nohz-decay");
    run(
        "juno-r2",
        Governor::Performance,
        300_000_000,
        Some(dir.clone()),
        wl,
    );
    let lines = trace_lines(&dir);
    let sleep_at = lines
        .iter()
        .find(|l| l.3 == "sched_switch" && l.4.starts_with("prev_comm=burst-0 "))
        .expect("burst never slept")
        .0
        // The lines of that instant (spread by a few ns) belong to it.
        + 999;
    let cfs2: Vec<(u64, u64, u64)> = lines
        .iter()
        .filter(|l| l.3 == "sched_pelt_cfs" && l.4.starts_with("cpu=2 "))
        .map(|l| (l.0, field(&l.4, "util"), field(&l.4, "update_time")))
        .collect();
    let &(_, u0, pelt0) = cfs2.iter().rev().find(|c| c.0 <= sleep_at).unwrap();
    let u0 = u0 as f64;
    assert!(u0 > 100.0, "CPU 2 util only {u0} after 20 ms of running");
    let later: Vec<_> = cfs2.iter().filter(|c| c.0 > sleep_at).collect();
    assert!(
        later.len() >= 6,
        "idle CPU 2's blocked load was updated only {} times in 280 ms",
        later.len()
    );
    for &&(t, u, pelt) in &later {
        // An idle CPU's PELT clock is its task clock (`_update_idle_rq_clock_pelt`): each
        // update is stamped with the time it ran, to the PELT unit.
        assert!(t - pelt < 1024, "update at {t} ns stamped {pelt}");
        // Decay over whole PELT periods of PELT time since the last update before sleeping
        // (± one period); the LITTLE CPU's PELT clock ran behind while busy, and that lag
        // decays too once it catches up.
        let n = (pelt - pelt0) as f64 / PELT_PERIOD_NS;
        let hi = u0 * y_pow((n - 1.0).max(0.0)) * 1.03 + 2.0;
        let lo = u0 * y_pow(n + 1.0) * 0.97 - 2.0;
        assert!(
            (u as f64) <= hi && (u as f64) >= lo,
            "util {u} at {t} ns, expected {lo:.0}..={hi:.0}"
        );
    }
    let last = later.last().unwrap();
    assert!(last.0 > 240_000_000 && last.1 < 10, "last update {last:?}");
    // The updates come from SCHED_SOFTIRQ on an idle CPU, at least 32 ms apart.
    let raises: Vec<_> = lines
        .iter()
        .filter(|l| l.3 == "softirq_raise")
        .map(|l| (l.0, l.1))
        .collect();
    assert!(raises.len() >= 6, "{raises:?}");
    for w in raises.windows(2) {
        assert!(w[1].0 - w[0].0 >= 32_000_000, "{raises:?}");
        assert_ne!(w[0].1, 0, "the busy CPU kicked itself");
    }
}

/// Per CPU, `cpu_idle` alternates between entering (state 0) and leaving
/// (4294967295), starting with an enter at time 0 (CPUs start idle), and a CPU runs a
/// task only between a leave and the next enter.
#[test]
fn cpu_idle_events_alternate_and_match_switches() {
    let wl = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../workloads/camera.json"
    ))
    .unwrap();
    let dir = out_dir("idle-alt");
    run(
        "juno-r2",
        Governor::Schedutil,
        300_000_000,
        Some(dir.clone()),
        &wl,
    );
    let mut idle: std::collections::BTreeMap<usize, bool> = Default::default();
    let mut kicks = 0;
    for (ts, cpu, who, ev, f) in trace_lines(&dir) {
        // Each CPU's first line is its initial state at time 0: idle.
        let is_idle = *idle.entry(cpu).or_insert_with(|| {
            assert_eq!(ev, "cpu_idle", "CPU {cpu}'s first line at {ts}");
            assert_eq!((field(&f, "state"), ts < 1000), (0, true), "{f} at {ts}");
            false
        });
        match ev.as_str() {
            "cpu_idle" => {
                let state = field(&f, "state");
                assert_eq!(field(&f, "cpu_id"), cpu as u64);
                if state == 4_294_967_295 {
                    assert!(is_idle, "CPU {cpu} left idle twice at {ts}");
                    idle.insert(cpu, false);
                } else {
                    assert_eq!(state, 0);
                    assert!(!is_idle, "CPU {cpu} entered idle twice at {ts}");
                    assert_eq!(who, "<idle>-0", "CPU {cpu} idle while running {who}");
                    idle.insert(cpu, true);
                }
            }
            "softirq_raise" => {
                assert!(!is_idle, "softirq on idle CPU {cpu} at {ts}");
                kicks += 1;
            }
            "sched_switch" => assert!(!is_idle, "switch on idle CPU {cpu} at {ts}: {f}"),
            // A timer wake-up is handled by a CPU that has left idle for the interrupt.
            "sched_waking" | "sched_wakeup" | "sched_wakeup_new" | "sched_migrate_task" => {
                assert!(!is_idle, "{ev} on idle CPU {cpu} at {ts}: {f}")
            }
            _ => {}
        }
    }
    assert!(kicks > 0, "no NOHZ stats kicks in 300 ms of camera");
}

/// A task that exits takes its util with it (`task_dead_fair` →
/// `remove_entity_load_avg`): the next update of its idle CPU's cfs_rq drops to about
/// zero, where decay alone would still leave more than a third of it.
#[test]
fn exited_task_util_is_removed_from_its_cpu() {
    let wl = r#"{"tasks": {
        "once": {"cpus": [2], "loop": 1, "runtime": 20000},
        "hog": {"cpus": [0], "runtime": 1000000}}}"#;
    let dir = out_dir("exit-removal");
    run(
        "juno-r2",
        Governor::Performance,
        200_000_000,
        Some(dir.clone()),
        wl,
    );
    let lines = trace_lines(&dir);
    let exit_idx = lines
        .iter()
        .position(|l| {
            l.3 == "sched_switch"
                && l.4.contains("prev_comm=once-0 ")
                && l.4.contains("prev_state=X")
        })
        .expect("task never exited");
    let cfs2 = |range: &[(u64, usize, String, String, String)]| -> Vec<(u64, u64, u64)> {
        range
            .iter()
            .filter(|l| l.3 == "sched_pelt_cfs" && l.4.starts_with("cpu=2 "))
            .map(|l| (l.0, field(&l.4, "util"), field(&l.4, "update_time")))
            .collect()
    };
    // CPU 2's cfs_rq as it goes idle (the dead task's signals still in it), then its
    // first update at a later PELT time.
    let after = cfs2(&lines[exit_idx..]);
    let (t0, u0, lut0) = after[0];
    let (t1, u1, _) = *after
        .iter()
        .find(|c| c.2 > lut0)
        .expect("CPU 2 never updated again");
    assert!(u0 > 100, "util {u0} at exit");
    assert!(t1 < t0 + 40_000_000, "first update only at {t1}");
    assert!(u1 * 20 < u0, "util {u1} after exit (was {u0})");
}

/// A cluster whose CPUs never run a task still gets schedutil's answer for no utilisation,
/// the lowest OPP, at the first NOHZ blocked-load update. On Linux every online CPU's idle
/// thread stopped its tick through `nohz_balance_enter_idle` when the CPU came up, which
/// sets `rq->has_blocked_load` whether or not the CPU ever ran anything ("each time a cpu
/// enter idle, we assume that it has blocked load"); the first `NOHZ_STATS_KICK` from a busy
/// CPU's tick (`nohz.next_blocked` has passed) then updates the idle CPU's blocked averages,
/// which report a decay once a PELT period has passed, so `cpufreq_update_util(rq, 0)` runs
/// schedutil for the cluster, whose first update after `cpufreq_start_governor`
/// (`limits_changed`, set by `sugov_limits`) resolves utilisation 0 to the lowest frequency.
/// Before: the juno-r2 big cluster stayed at 1200 MHz, where the board boots, for the run.
#[test]
fn never_busy_cluster_falls_to_lowest_opp_at_first_nohz_update() {
    // A hog on LITTLE CPU 2; big CPUs 0 and 1 run nothing.
    let wl = r#"{"tasks": {"hog": {"cpus": [2], "runtime": 1000000}}}"#;
    let dir = out_dir("never-busy-cluster");
    let out = run(
        "juno-r2",
        Governor::Schedutil,
        200_000_000,
        Some(dir.clone()),
        wl,
    );
    let big: Vec<(u64, u64)> = trace_lines(&dir)
        .into_iter()
        .filter(|l| l.3 == "cpu_frequency" && l.4.ends_with(" cpu_id=0"))
        .map(|l| (l.0, field(&l.4, "state")))
        .collect();
    // The boot frequency at time 0, then the lowest OPP (juno-r2.dts: A72 600 MHz) by the
    // first update: jiffy 1's tick kicks it (HZ 250), plus the transition latency; one
    // LOAD_AVG_PERIOD (32 ms) is the latest any update of Linux's could come.
    assert_eq!(big.first().map(|f| f.1), Some(1_200_000), "{big:?}");
    let (t, khz) = *big.get(1).expect("the big cluster never changed frequency");
    assert_eq!(khz, 600_000, "{big:?}");
    assert!(t <= 36_000_000, "the big cluster fell only at {t} ns");
    assert_eq!(big.len(), 2, "{big:?}");
    assert_eq!(out.result.busy_ns[0].iter().sum::<u64>(), 0);
}

/// rt-app's timer reference starts at the thread's start time (`t_first` = time zero +
/// `delay`), not at the first `timer` event: with a 3 ms delay and 1 ms of work, the
/// wake-ups come at 3 ms (start), then 13, 23, 33 ms — not 14, 24, 34 ms.
#[test]
fn timer_periods_start_at_thread_start_after_delay() {
    let wl = r#"{"tasks": {"p": {"delay": 3000, "cpus": [0], "run": 1000,
        "timer": {"ref": "t", "period": 10000}}}}"#;
    let dir = out_dir("timer-anchor");
    run(
        "juno-r2",
        Governor::Performance,
        40_000_000,
        Some(dir.clone()),
        wl,
    );
    // The first wake-up (fork) names the thread `rt-app`; match the pid. Lines of one
    // instant are spread by a few ns (trace.rs): compare whole µs.
    let wakes: Vec<u64> = trace_lines(&dir)
        .into_iter()
        .filter(|l| l.3.starts_with("sched_wakeup") && l.4.contains(" pid=1001 "))
        .map(|l| l.0 / 1000 * 1000)
        .collect();
    assert_eq!(wakes, [3_000_000, 13_000_000, 23_000_000, 33_000_000]);
}

/// rt-app's `duration: -1` (and no duration): the run ends when every thread has
/// exited — here three 1 ms runs each followed by 1 ms of sleep on a big CPU at fmax,
/// so 6 ms — instead of running idle to a default length.
#[test]
fn duration_minus_one_ends_when_all_threads_exit() {
    let wl = r#"{"global": {"duration": -1},
        "tasks": {"t": {"loop": 3, "cpus": [0], "run": 1000, "sleep": 1000}}}"#;
    let mut s = spec("juno-r2", Governor::Performance, 0, None);
    s.duration_ns = None;
    let out = run_source(&s, wl, false).unwrap();
    assert!(out.report.tasks[0].exited);
    assert_eq!(out.report.duration_ns, 6_000_000);
    // With a duration the run lasts that long, as rt-app's main thread sleeps it out.
    let wl = wl.replace("-1", "1");
    let out = run_source(&s, &wl, false).unwrap();
    assert_eq!(out.report.duration_ns, 1_000_000_000);
}

/// rt-app's set_thread_priority: a phase that sets no `nice` keeps the one set by an
/// earlier phase (rt-app only changes scheduling parameters a phase names). Two
/// always-running tasks share CPU 0; `a` drops to nice 10 in its second phase and its
/// later phases say nothing, so from then on it gets the nice-10 share (110/1134 of the
/// CPU) until the end, not the nice-0 half.
#[test]
fn phase_nice_persists_into_phases_that_do_not_set_it() {
    let wl = r#"{"tasks": {
        "a": {"loop": 1, "cpus": [0], "phases": {
            "p0": {"runtime": 10000},
            "p1": {"nice": 10, "runtime": 10000},
            "p2": {"runtime": 2000000}}},
        "b": {"loop": 1, "cpus": [0], "runtime": 4000000}}}"#;
    let out = run("juno-r2", Governor::Performance, 1_010_000_000, None, wl);
    let (a, b) = (&out.report.tasks[0], &out.report.tasks[1]);
    // a's first two phases need 20 ms of CPU (taking ~40 ms shared); afterwards about
    // 1 s of sharing at weights 110 : 1024.
    let share = a.runtime_ns as f64 / (a.runtime_ns + b.runtime_ns) as f64;
    let want = (20e6 + (1.01e9 - 40e6) * 110.0 / 1134.0) / 1.01e9;
    assert!(
        (share - want).abs() < 0.01,
        "a's share {share:.3}, want {want:.3}"
    );
}

// --- Robustness: fuzzed workloads, bad flags ----------------------------------------------

/// xorshift64*: a tiny deterministic generator for the mutation fuzzer.
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

/// Random byte mutations of the bundled workloads (flip, delete, insert, duplicate a
/// span, JSON-significant bytes and digits): parsing never panics and either succeeds
/// or fails with one located message (`file:line: …` with a line inside the text);
/// workloads that still parse also simulate 20 ms without panicking.
#[test]
fn mutated_workloads_never_panic_and_errors_are_located() {
    const SPECIALS: &[u8] = b"{}[]:,\"-0123456789eE.+ \n\\/*truefalsnul";
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../workloads");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut ok, mut err, mut simulated) = (0, 0, 0);
    for round in 0..2500 {
        let base = std::fs::read(&files[round % files.len()]).unwrap();
        let mut b = base.clone();
        for _ in 0..1 + rng.below(4) {
            let i = rng.below(b.len());
            match rng.below(5) {
                0 => b[i] ^= 1 << rng.below(8),
                1 => {
                    b.remove(i);
                }
                2 => b.insert(i, SPECIALS[rng.below(SPECIALS.len())]),
                3 => b[i] = SPECIALS[rng.below(SPECIALS.len())],
                _ => {
                    let j = (i + rng.below(40)).min(b.len());
                    let span = b[i..j].to_vec();
                    b.splice(i..i, span);
                }
            }
        }
        let text = String::from_utf8_lossy(&b).into_owned();
        let lines = text.lines().count() as u32 + 1;
        let res = std::panic::catch_unwind(|| asym_sim::workload::parse(&text, "fuzz.json", 6));
        let parsed = res.unwrap_or_else(|_| panic!("parser panicked on:\n{text}"));
        match parsed {
            Ok(_) => {
                ok += 1;
                if simulated < 200 {
                    simulated += 1;
                    let r = std::panic::catch_unwind(|| {
                        run_source(
                            &spec("juno-r2", Governor::Schedutil, 20_000_000, None),
                            &text,
                            false,
                        )
                    });
                    match r {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => assert!(!e.is_empty() && !e.contains('\n'), "{e}"),
                        Err(_) => panic!("simulation panicked on:\n{text}"),
                    }
                }
            }
            Err(e) => {
                err += 1;
                let msg = e.to_string();
                assert!(msg.starts_with("fuzz.json:"), "{msg}");
                assert!(!msg.contains('\n'), "multi-line error: {msg}");
                assert!(
                    e.line >= 1 && e.line <= lines,
                    "line {} of {lines}: {msg}",
                    e.line
                );
            }
        }
    }
    // The mutations must exercise both outcomes.
    assert!(ok > 100 && err > 500, "ok {ok}, err {err}");
}

/// Bad command-line flags and values: a non-zero exit, a message naming the problem,
/// no panic.
#[test]
fn cli_bad_flags_are_clear_errors() {
    let dir = out_dir("cli-flags");
    let wl = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../workloads/periodic-small.json"
    );
    let cases: &[(&[&str], &str)] = &[
        (&["--frobnicate"], "--frobnicate"),
        (&["--hz", "0"], "HZ"),
        (&["--hz", "lots"], "lots"),
        (&["--set", "NO_SUCH_FEATURE=on"], "NO_SUCH_FEATURE"),
        // The unknown name itself, not the whole `NAME=value`.
        (
            &["--set", "FOO=on"],
            "unknown scheduler feature: `FOO` at byte 0",
        ),
        (&["--set", "UTIL_EST=maybe"], "UTIL_EST=maybe"),
        (&["--duration", "5x"], "5x"),
        (&["--duration", "0s"], "0s"),
        (&["--board", "rpi4"], "rpi4"),
        (&["--governor", "turbo"], "turbo"),
        (&["--seed", "-1"], "-1"),
    ];
    for (args, needle) in cases {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_asym-sim"))
            .args(["--workload", wl, "--out"])
            .arg(dir.join("o"))
            .args(*args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

/// Linux enables EAS wherever `sched_is_eas_possible()` holds: asymmetric capacities, an
/// energy model for every domain and schedutil. With the CLI's defaults juno-r2 has it;
/// the same run under the `performance` governor asks for it but cannot have it, and
/// `report.json` says so.
#[test]
fn cli_defaults_enable_eas_where_linux_would_and_the_report_says_so() {
    let wl = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../workloads/periodic-small.json"
    );
    for (gov, want) in [("schedutil", true), ("performance", false)] {
        let dir = out_dir(&format!("cli-eas-{gov}"));
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_asym-sim"))
            .args(["--workload", wl, "--duration", "100ms", "--no-trace"])
            .args(["--governor", gov, "--out"])
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
        assert_eq!(report["board"], "juno-r2");
        assert_eq!(report["load_balance"], true);
        assert_eq!(report["features"]["ENERGY_AWARE"], true, "{gov}");
        assert_eq!(report["eas_active"], want, "{gov}");
    }
}
