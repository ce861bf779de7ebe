//! `DELAY_DEQUEUE` / `DELAY_ZERO` in the simulator: a sleeper that is not eligible stays
//! queued, and its wake-up takes `ttwu_runnable` (no CPU selection, no migration).
//!
//! Oracles: Linux's rules, not earlier output. A task pinned with a CPU hog to one CPU can
//! only sleep behind it; whenever it blocks having run ahead of the hog (negative lag), it
//! is delayed, and the CPU never goes idle to finish the dequeue, so some wake-ups find it
//! still queued. Those wake-ups are as many trace wake-ups as ever (the analyser counts
//! them from `sched_wakeup`), and the validators accept the trace. With the features off
//! nothing delayed exists, and the report does not even name them.

use asym_sim::{run_source, RunOutput, RunSpec};
use asym_trace::analyse::{analyse, DomainModel};
use asym_trace::validate::check_trace;

const PINNED: &str = r#"{
  "global": { "duration": 1, "calibration": "CPU0", "default_policy": "SCHED_OTHER" },
  "tasks": {
    "hog": { "loop": -1, "cpus": [0], "phases": { "p0": { "run": 100000 } } },
    "periodic": { "loop": -1, "cpus": [0], "phases": { "p0": { "run": 3000, "sleep": 1000 } } }
  }
}"#;

fn run(tag: &str, set: &[&str]) -> (RunOutput, String, String) {
    let dir = std::env::temp_dir().join(format!("asym-dd-{}-{tag}", std::process::id()));
    // Load balancing off (`RunSpec::new`), as the analyser's tests: the validators do not
    // accept the NOHZ kicks' softirq raises on idle CPUs that load balancing writes (with or
    // without delayed dequeue).
    let spec = RunSpec {
        duration_ns: Some(500_000_000),
        set: set.iter().map(|s| s.to_string()).collect(),
        out: Some(dir.clone()),
        ..RunSpec::new("juno-r2", "pinned.json")
    };
    let out = run_source(&spec, PINNED, false).expect("simulation failed");
    let trace = std::fs::read_to_string(dir.join("trace.txt")).unwrap();
    let report = std::fs::read_to_string(dir.join("report.json")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (out, trace, report)
}

#[test]
fn a_delayed_sleeper_wakes_where_it_is_queued() {
    let (on, trace, report) = run("on", &["DELAY_DEQUEUE=on", "DELAY_ZERO=on"]);
    let c = &on.result.counters;
    assert!(c.wakeups_delayed > 0, "no wake-up found its task delayed");
    assert_eq!(c.migrations_wakeup, 0);
    assert!(report.contains("\"DELAY_DEQUEUE\": true"));
    assert!(report.contains("\"wakeups_delayed\""));
    check_trace(&trace).unwrap_or_else(|e| panic!("trace: {e}"));
    let desc = asym_boards::by_name("juno-r2").unwrap();
    let a = analyse(
        &trace,
        desc.cpus.len(),
        &DomainModel::of_board(desc),
        on.report.duration_ns,
    );
    assert_eq!(a.bad_lines, 0);
    assert_eq!(a.context_switches, on.report.counters.context_switches);
    for (t, rt) in a.tasks.iter().zip(&on.report.tasks) {
        assert_eq!(t.activations, rt.activations, "{}", rt.name);
        assert_eq!(t.migrations, 0, "{}", rt.name);
    }

    let (off, _, report) = run("off", &[]);
    assert_eq!(off.result.counters.wakeups_delayed, 0);
    assert!(
        !report.contains("DELAY_"),
        "the report names the switches while off"
    );
    assert!(!report.contains("wakeups_delayed"));
}
