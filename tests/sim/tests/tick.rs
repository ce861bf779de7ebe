//! The tick's sequence in the simulator, against Linux v6.12's.
//!
//! Oracle: `sched_tick` raises SCHED_SOFTIRQ (`sched_balance_trigger`) from the timer
//! interrupt, the softirq runs at `irq_exit`, and the reschedule the tick asked for
//! (`resched_curr` from `task_tick_fair`) happens at the interrupt's return, after it — so on
//! a CPU whose tick both preempts its task and raises the softirq, the raise comes first and
//! the periodic balance sees the preempted task still running.

use asym_sim::{run_source_with, RunOptions, RunSpec};

/// Three CPU hogs pinned to CPU 0: its ticks preempt (EEVDF slices) and, with load balancing
/// on, raise SCHED_SOFTIRQ whenever `rq->next_balance` has passed.
const HOGS: &str = r#"{
  "global": { "duration": 2, "calibration": "CPU0", "default_policy": "SCHED_OTHER" },
  "tasks": {
    "hog": { "instance": 3, "loop": 1, "cpus": [0], "run": 2000000 }
  }
}"#;

#[test]
fn the_tick_raises_the_balance_softirq_before_it_reschedules() {
    let tick_ns = 4_000_000; // HZ=250
    let dir = std::env::temp_dir().join(format!("asym-tick-order-{}", std::process::id()));
    let spec = RunSpec {
        load_balance: true,
        out: Some(dir.clone()),
        ..RunSpec::new("juno-r2", "hogs.json")
    };
    let out = run_source_with(&spec, HOGS, RunOptions::default()).expect("simulation failed");
    let trace = std::fs::read_to_string(dir.join("trace.txt")).expect("trace.txt");
    let _ = std::fs::remove_dir_all(&dir);
    // The trace spreads the lines of one instant by 1 ns each.
    let skew = out.result.trace_max_skew_ns;
    // Per tick instant on CPU 0: whether a preemption (`prev_state=R`), or SCHED_SOFTIRQ,
    // was seen yet.
    let mut instant = u64::MAX;
    let (mut switched, mut raised) = (false, false);
    let (mut both, mut raised_first, mut then_switched) = (0u32, 0u32, 0u32);
    for l in trace.lines().filter(|l| !l.starts_with('#')) {
        let Some((ts, cpu, event, fields)) = asym_trace::analyse::parse_line(l) else {
            continue;
        };
        if cpu != 0 || ts % tick_ns > skew {
            continue;
        }
        if ts - ts % tick_ns != instant {
            instant = ts - ts % tick_ns;
            (switched, raised) = (false, false);
        }
        match event {
            "sched_switch" if fields.contains("prev_state=R") => {
                switched = true;
                then_switched += u32::from(raised);
            }
            "softirq_raise" if fields.starts_with("vec=7") => {
                raised = true;
                if switched {
                    both += 1;
                } else {
                    raised_first += 1;
                }
            }
            _ => {}
        }
    }
    assert_eq!(
        both, 0,
        "{both} ticks of CPU 0 switched tasks before raising SCHED_SOFTIRQ ({raised_first} raised first)"
    );
    // The case the order matters for: the same tick raised the softirq, then preempted.
    assert!(
        then_switched > 0,
        "no tick of CPU 0 both raised SCHED_SOFTIRQ and preempted ({raised_first} raises)"
    );
}

/// With load balancing off (an experiment switch Linux does not have) the flag follows Linux's
/// rule too: a wake-up or a tick sets it from its own CPU only, and only the root level's
/// statistics clear it, run from a tick once per root interval (`sd_init`'s root
/// `max_interval`: 2 ms per CPU, 12 ms on Juno r2) as the top-level balance would have run
/// them. With EAS off the flag is still kept (for the report), and no wake-up clears it: every
/// clear falls on a tick, at least an interval after the one before.
#[test]
fn without_balancing_only_the_root_statistics_clear_overutilized_on_a_tick() {
    let tick_ns = 4_000_000; // HZ=250
    let interval_ns = 12_000_000;
    let dir = std::env::temp_dir().join(format!("asym-tick-rootstats-{}", std::process::id()));
    let spec = RunSpec {
        set: vec!["ENERGY_AWARE=off".into(), "UCLAMP_FIT_TRISTATE=off".into()],
        out: Some(dir.clone()),
        ..RunSpec::new(
            "juno-r2",
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../workloads/uclamp-topapp.json"),
        )
    };
    let out = asym_sim::run_with_options(&spec, RunOptions::default()).expect("simulation failed");
    let trace = std::fs::read_to_string(dir.join("trace.txt")).expect("trace.txt");
    let _ = std::fs::remove_dir_all(&dir);
    let skew = out.result.trace_max_skew_ns;
    let (mut sets, mut clears) = (0u32, 0u32);
    let mut last_clear: Option<u64> = None;
    for l in trace.lines().filter(|l| !l.starts_with('#')) {
        let Some((ts, _cpu, "sched_overutilized", fields)) = asym_trace::analyse::parse_line(l)
        else {
            continue;
        };
        if ts == 0 {
            continue; // the initial state
        }
        if fields.starts_with("overutilized=1") {
            sets += 1;
            continue;
        }
        clears += 1;
        assert!(
            ts % tick_ns <= skew,
            "the flag was cleared at {ts} ns, not on a tick"
        );
        let at = ts - ts % tick_ns;
        if let Some(prev) = last_clear {
            assert!(
                at >= prev + interval_ns,
                "cleared at {at} ns, {} ns after the clear at {prev} ns",
                at - prev
            );
        }
        last_clear = Some(at);
    }
    assert!(sets > 0 && clears > 0, "{sets} sets, {clears} clears");
}
