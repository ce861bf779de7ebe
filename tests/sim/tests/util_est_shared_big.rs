//! Issue 14's util_est case on juno-r2 (`tests/sim/tests/energy/util-est-shared-big.json`):
//! a task that ran 5 ms every 16 ms on big CPU 0 (util_est ≈ 357) turns light (0.5 ms every
//! 16 ms, util ≈ 30) while both big CPUs hold a pinned 3 ms / 16 ms task that wakes with
//! it. It waits behind that task at every wake-up, so its runnable_avg stays above its
//! util_avg and Linux's `util_est_update` keeps the ewma (v6.3's "sched/pelt: Avoid
//! underestimation of task utilization"): 357 × 1.25 does not fit a LITTLE (383), the
//! system is not overutilized after the heavy phase, and no load balance moves it —
//! it stays on the big CPU for the 3 s of its light phase. With
//! `UTIL_EST_DECAY_TO_RUNNABLE` the ewma decays towards the (small) runnable_avg, the task
//! fits a LITTLE within a few periods and EAS moves it there.
//!
//! Oracles: where the energy model says the task belongs (a LITTLE: 450 MHz costs 239 µW
//! per capacity unit against 362 for the big CPUs' 600 MHz) and when it may go there
//! (util_est × 1.25 < 383 once the ewma has decayed), not numbers of an earlier run.

use std::path::PathBuf;

use asym_sim::{run, RunOutput, RunSpec};

fn go(decay: bool) -> RunOutput {
    let spec = RunSpec {
        set: vec![
            "ENERGY_AWARE=on".into(),
            format!(
                "UTIL_EST_DECAY_TO_RUNNABLE={}",
                if decay { "on" } else { "off" }
            ),
        ],
        load_balance: true,
        ..RunSpec::new(
            "juno-r2",
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/energy/util-est-shared-big.json"),
        )
    };
    run(&spec).expect("simulation failed")
}

/// The small task's time on the LITTLEs (CPUs 2-5).
fn small_on_littles_ns(o: &RunOutput) -> u64 {
    o.result.tasks[2].residency_ns[2..].iter().sum()
}

#[test]
fn inflated_util_est_keeps_a_light_task_on_a_big_cpu_only_under_linux_rule() {
    let linux = go(false);
    let decay = go(true);
    for o in [&linux, &decay] {
        let misses: u64 = o.report.tasks.iter().map(|t| t.deadline_misses).sum();
        assert_eq!(misses, 0);
        // Overutilized only through the heavy phase (60 × 16 ms), never in the light one.
        assert!(o.report.counters.overutilized_ns <= 1_000_000_000);
    }
    // Linux: the light phase's 190 periods stay on the bigs (a few ms elsewhere at most).
    let l = small_on_littles_ns(&linux);
    assert!(l < 10_000_000, "Linux rule: {l} ns on LITTLEs");
    // The switch: most of the light phase on LITTLEs — 190 × 0.5 ms of big-at-fmax work
    // is at least 190 × 0.5 × 1024 / 383 = 254 ms there.
    let d = small_on_littles_ns(&decay);
    assert!(d > 200_000_000, "decay: {d} ns on LITTLEs");
    // And it costs less: the energy model prefers the LITTLE for that work.
    assert!(decay.report.energy.total_uj < linux.report.energy.total_uj);
}
