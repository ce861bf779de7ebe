//! The NOHZ kick in the simulator against Linux v6.12's `nohz_balancer_kick` / `kick_ilb` /
//! `_nohz_idle_balance`.
//!
//! Oracles (Linux's rules, not earlier output): a busy tick computes one `flags` value and
//! calls `kick_ilb(flags)` once, so a kick that both balances and updates blocked load is one
//! `SCHED_SOFTIRQ` raise on the idle load balancer, not two.

use asym_sim::{run_source, RunOutput, RunSpec};

/// Two CPU hogs pinned to CPU 0 (two tasks there: a balance kick every jiffy), a small
/// periodic task pinned to CPU 3 (blocked load to decay on an idle CPU), every other CPU idle.
const TWO_ON_ONE: &str = r#"{
  "global": { "duration": 1, "calibration": "CPU0", "default_policy": "SCHED_OTHER" },
  "tasks": {
    "hog": { "instance": 2, "loop": -1, "cpus": [0], "phases": { "p0": { "run": 100000 } } },
    "small": { "loop": -1, "cpus": [3], "phases": { "p0": { "run": 2000, "sleep": 40000 } } }
  }
}"#;

fn run(tag: &str) -> (RunOutput, String) {
    let dir = std::env::temp_dir().join(format!("asym-nohz-kick-{}-{tag}", std::process::id()));
    let spec = RunSpec {
        duration_ns: Some(500_000_000),
        load_balance: true,
        out: Some(dir.clone()),
        ..RunSpec::new("juno-r2", "two-on-one.json")
    };
    let out = run_source(&spec, TWO_ON_ONE, false).expect("simulation failed");
    let trace = std::fs::read_to_string(dir.join("trace.txt")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (out, trace)
}

#[test]
fn one_kick_is_one_sched_softirq_raise_on_the_idle_load_balancer() {
    let (out, trace) = run("one-raise");
    // The trace spreads the lines of one instant 1 ns apart.
    let skew = out.result.trace_max_skew_ns;
    let mut last: Vec<Option<u64>> = vec![None; 6];
    let mut raises = 0u64;
    for l in trace.lines().filter(|l| !l.starts_with('#')) {
        let Some((ts, cpu, event, fields)) = asym_trace::analyse::parse_line(l) else {
            continue;
        };
        if event != "softirq_raise" || !fields.contains("SCHED") {
            continue;
        }
        raises += 1;
        if let Some(prev) = last[cpu] {
            assert!(
                ts - prev > skew,
                "two SCHED_SOFTIRQ raises on CPU {cpu} at one instant ({prev}, {ts}): {l}"
            );
        }
        last[cpu] = Some(ts);
    }
    // CPU 0 ticks busy with two tasks 125 times in 0.5 s and kicks an idle CPU at each.
    assert!(raises >= 100, "only {raises} raises");
}
