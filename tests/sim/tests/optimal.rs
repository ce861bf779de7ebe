//! The energy lower bound on whole runs: never above asym's energy where it applies, and
//! equal to the hand-computed value on a workload simple enough to work out.

use std::path::PathBuf;

use asym_sim::{run, RunOutput, RunSpec};

fn go(board: &str, wl: &str, eas: bool) -> RunOutput {
    let spec = RunSpec {
        set: vec![format!("ENERGY_AWARE={}", if eas { "on" } else { "off" })],
        ..RunSpec::new(
            board,
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../workloads")
                .join(wl),
        )
    };
    run(&spec).unwrap_or_else(|e| panic!("{board} {wl}: {e}"))
}

const WORKLOADS: &[&str] = &[
    "periodic-small.json",
    "periodic-big.json",
    "ramp.json",
    "jank.json",
    "messaging.json",
    "camera.json",
    "camera-lb.json",
    "cyclictest.json",
    "uclamp-topapp.json",
];

/// Soundness on every bundled workload, both boards, EAS off and on: asym's energy is at
/// least every bound (work ≤ per-task ≤ the cluster bound), misses or not.
#[test]
fn asym_is_never_below_the_bound() {
    for board in ["juno-r2", "hikey960"] {
        for wl in WORKLOADS {
            for eas in [false, true] {
                let r = go(board, wl, eas).report;
                let b = r.energy_bound.as_ref().expect("bound");
                let e = r.energy.total_uj;
                assert!(b.work_uj <= b.deadline_uj, "{board} {wl}");
                assert!(
                    e >= b.work_uj,
                    "{board} {wl} eas={eas}: {e} < {}",
                    b.work_uj
                );
                assert!(b.work_uj <= b.per_task_uj + 1.0, "{board} {wl}");
                assert!(b.per_task_uj <= b.deadline_uj, "{board} {wl}");
                // With or without misses: the bound is for the job set the run met.
                assert!(
                    e >= b.deadline_uj,
                    "{board} {wl} eas={eas}: {e} < {}",
                    b.deadline_uj
                );
            }
        }
    }
}

/// `periodic-small` on juno-r2: four tasks of 1.6 ms of work every 16 ms, 2 s. Every
/// activation fits the most efficient point (a LITTLE at 450 MHz, 43 296 µW for 181
/// capacity units), so both bounds are the work at that efficiency: 4 × 125 × 1.6 ms ×
/// 1024 × 43 296 / 181 fJ = 195.96 mJ, less the part of the last periods the run cut off.
#[test]
fn periodic_small_bound_by_hand() {
    let r = go("juno-r2", "periodic-small.json", true).report;
    let b = r.energy_bound.unwrap();
    let want = 4.0 * 125.0 * 1.6e6 * 1024.0 * 43_296.0 / 181.0 / 1e9;
    assert_eq!(b.work_uj, b.deadline_uj);
    assert!(
        b.work_uj <= want && b.work_uj > 0.99 * want,
        "{} vs {want}",
        b.work_uj
    );
}

/// The cluster bound by hand: eight tasks of 1.6 ms of work every 16 ms, all allowed only
/// on juno-r2's four LITTLEs, 2 s. Each alone fits the most efficient point (450 MHz,
/// capacity 181, 43 296 µW), so the per-task bound is the work at that efficiency:
/// 8 × 125 × 1.6 ms × 1024 × 43 296 / 181 fJ = 391.9 mJ. Together they need an average
/// speed of 8 × 1.6 × 1024 / (4 × 16) = 204.8 per LITTLE in every period, past 181: on
/// the LITTLEs' hull, between 450 MHz and 800 MHz (322, 92 543 µW), P(204.8) =
/// 43 296 + 23.8 × 49 247 / 141 µW, so each period costs at least 4 × 16 ms × P(204.8)
/// and the run 125 × that = 412.9 mJ (less what the run cut off of its last periods).
#[test]
fn cluster_bound_by_hand() {
    let spec = RunSpec {
        set: vec!["ENERGY_AWARE=on".into()],
        load_balance: true,
        ..RunSpec::new("juno-r2", "eight-on-littles.json")
    };
    let wl = r#"{ "global": { "duration": 2 }, "tasks": { "t": { "instance": 8, "loop": -1,
        "cpus": [2, 3, 4, 5],
        "phases": { "p": { "run": 1600, "timer": { "ref": "unique", "period": 16000 } } } } } }"#;
    let r = asym_sim::run_source(&spec, wl, false).unwrap().report;
    let b = r.energy_bound.unwrap();
    let per_task = 8.0 * 125.0 * 1.6e6 * 1024.0 * 43_296.0 / 181.0 / 1e9;
    let p = 43_296.0 + 23.8 * 49_247.0 / 141.0;
    let cluster = 125.0 * 4.0 * 16e6 * p / 1e9;
    assert!(
        b.per_task_uj <= per_task && b.per_task_uj > 0.99 * per_task,
        "per-task {} vs {per_task}",
        b.per_task_uj
    );
    assert!(
        b.deadline_uj <= cluster && b.deadline_uj > 0.99 * cluster,
        "cluster {} vs {cluster}",
        b.deadline_uj
    );
    let misses: u64 = r.tasks.iter().map(|t| t.deadline_misses).sum();
    assert_eq!(misses, 0);
    assert!(r.energy.total_uj >= b.deadline_uj);
}
