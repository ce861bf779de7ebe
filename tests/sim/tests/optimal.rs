//! The energy lower bound on whole runs: never above asym's energy where it applies, and
//! equal to the hand-computed value on a workload simple enough to work out.

use std::path::PathBuf;

use asym_sim::{run, Governor, Placement, RunOutput, RunSpec};

fn go(board: &str, wl: &str, eas: bool) -> RunOutput {
    let spec = RunSpec {
        board: board.into(),
        workload: PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../workloads")
            .join(wl),
        duration_ns: None,
        set: vec![format!("ENERGY_AWARE={}", if eas { "on" } else { "off" })],
        governor: Governor::Schedutil,
        seed: 0,
        hz: 250,
        out: None,
        plot: false,
        load_balance: false,
        placement: Placement::Linux,
        freq_limits: Vec::new(),
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
/// least the work bound, and at least the deadline bound whenever it met every deadline.
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
                let misses: u64 = r.tasks.iter().map(|t| t.deadline_misses).sum();
                if misses == 0 {
                    assert!(
                        e >= b.deadline_uj,
                        "{board} {wl} eas={eas}: {e} < {}",
                        b.deadline_uj
                    );
                }
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
