//! Scenario tests of EAS wake-up placement (`--eas on`, the `ENERGY_AWARE` feature).
//!
//! Oracles: the energy model's ordering of the clusters (a LITTLE OPP is cheaper per unit
//! of work than the big OPP the same small task needs, by the energy model of the DT values), so small periodic
//! tasks placed by `find_energy_efficient_cpu` must run mostly on LITTLEs and use less
//! energy than placement without EAS (the capacity-aware `select_idle_sibling`); the rules of `sched_is_eas_possible`
//! (no EAS on a symmetric board: identical results); affinity; and that EAS is off unless
//! asked for.

use std::path::PathBuf;

use asym_sim::{run_with_options, Governor, RunOptions, RunOutput, RunSpec};

fn workload(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../workloads")
        .join(format!("{name}.json"))
}

fn spec(board: &str, wl: &str, set: &[&str]) -> RunSpec {
    RunSpec {
        set: set.iter().map(|s| s.to_string()).collect(),
        ..RunSpec::new(board, workload(wl))
    }
}

fn run(board: &str, wl: &str, eas: bool) -> RunOutput {
    let set = if eas {
        ["ENERGY_AWARE=on"]
    } else {
        ["ENERGY_AWARE=off"]
    };
    run_with_options(&spec(board, wl, &set), RunOptions::default()).expect("simulation failed")
}

fn energy_uj(o: &RunOutput) -> f64 {
    o.report.energy.total_uj
}

fn misses(o: &RunOutput) -> u64 {
    o.report.tasks.iter().map(|t| t.deadline_misses).sum()
}

/// Fraction of all task runtime spent on CPUs `cpus`.
fn residency_share(o: &RunOutput, cpus: std::ops::Range<usize>) -> f64 {
    let (mut on, mut all) = (0u64, 0u64);
    for t in &o.result.tasks {
        for (c, ns) in t.residency_ns.iter().enumerate() {
            all += ns;
            if cpus.contains(&c) {
                on += ns;
            }
        }
    }
    on as f64 / all.max(1) as f64
}

#[test]
fn eas_saves_energy_on_juno_periodic_small() {
    let off = run("juno-r2", "periodic-small", false);
    let on = run("juno-r2", "periodic-small", true);
    // Four 10 % tasks: each fits a LITTLE (capacity 383) with room to spare, where the
    // 450 MHz LITTLE OPP costs 2392 per unit against the big's 3624 at 600 MHz.
    assert!(
        residency_share(&on, 2..6) > 0.9,
        "EAS should run small tasks on LITTLEs: {}",
        residency_share(&on, 2..6)
    );
    assert!(residency_share(&on, 2..6) > residency_share(&off, 2..6));
    assert!(
        energy_uj(&on) < 0.95 * energy_uj(&off),
        "EAS on {} uJ vs off {} uJ",
        energy_uj(&on),
        energy_uj(&off)
    );
    assert_eq!(misses(&on), 0);
}

#[test]
fn eas_saves_energy_on_juno_camera() {
    let off = run("juno-r2", "camera", false);
    let on = run("juno-r2", "camera", true);
    assert!(
        energy_uj(&on) < energy_uj(&off),
        "EAS on {} uJ vs off {} uJ",
        energy_uj(&on),
        energy_uj(&off)
    );
    assert!(misses(&on) <= misses(&off));
}

#[test]
fn periodic_big_on_hikey960_is_overutilized_so_eas_does_not_act() {
    // The two 75 % tasks never sleep once they start missing their periods on the
    // LITTLEs they were forked onto, and their CPUs stay overutilized: there is no
    // wake-up for EAS to place and the overutilized flag gates it off. Moving them needs
    // misfit load balancing, which the simulator does not have yet.
    let off = run("hikey960", "periodic-big", false);
    let on = run("hikey960", "periodic-big", true);
    let dur = on.report.duration_ns as f64;
    assert!(on.report.counters.overutilized_ns as f64 > 0.9 * dur);
    assert!(misses(&on) <= misses(&off));
}

#[test]
fn eas_is_off_by_default() {
    let default = run_with_options(
        &spec("juno-r2", "periodic-small", &[]),
        RunOptions::default(),
    )
    .expect("simulation failed");
    let off = run("juno-r2", "periodic-small", false);
    let on = run("juno-r2", "periodic-small", true);
    assert_eq!(energy_uj(&default), energy_uj(&off));
    assert_ne!(energy_uj(&default), energy_uj(&on));
}

#[test]
fn no_eas_on_a_symmetric_board() {
    // HiKey (hi6220): eight CPUs of capacity 1024, `sched_is_eas_possible` is false.
    let off = run("hikey", "periodic-small", false);
    let on = run("hikey", "periodic-small", true);
    assert_eq!(energy_uj(&on), energy_uj(&off));
    for (a, b) in on.result.tasks.iter().zip(&off.result.tasks) {
        assert_eq!(a.residency_ns, b.residency_ns);
    }
}

#[test]
fn no_eas_without_schedutil() {
    // `sched_is_eas_possible` wants schedutil on every policy.
    let mut s = spec("juno-r2", "periodic-small", &["ENERGY_AWARE=on"]);
    s.governor = Governor::Performance;
    let on = run_with_options(&s, RunOptions::default()).expect("simulation failed");
    s.set = vec!["ENERGY_AWARE=off".into()];
    let off = run_with_options(&s, RunOptions::default()).expect("simulation failed");
    assert_eq!(energy_uj(&on), energy_uj(&off));
}
