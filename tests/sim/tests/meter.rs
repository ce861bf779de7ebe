//! The energy meter on whole runs: its dynamic part is exactly the energy model's energy,
//! and what it adds grows with idle time, not with work.

use std::path::PathBuf;

use asym_sim::{run, RunSpec};

fn spec(board: &str, wl: &str) -> RunSpec {
    RunSpec {
        set: vec!["ENERGY_AWARE=on".into()],
        ..RunSpec::new(
            board,
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../workloads")
                .join(wl),
        )
    }
}

/// The meter's CPU dynamic energy is the energy model's total to the nanojoule on every
/// board (the same busy stretches at the same OPPs, counted two ways), and the meter
/// reads more: static, cluster and transition energy are all positive.
#[test]
fn dynamic_part_is_the_energy_model() {
    for board in ["juno-r2", "hikey960", "hikey"] {
        let out = run(&spec(board, "periodic-small.json")).unwrap();
        let r = &out.report;
        let m = r.meter.as_ref().expect("meter");
        let em = r.energy.total_uj;
        assert!(
            (m.reading.cpu_dynamic_uj - em).abs() <= 0.001 * 6.0,
            "{board}: meter dynamic {} vs EM {em}",
            m.reading.cpu_dynamic_uj
        );
        assert!(m.reading.cpu_static_uj > 0.0 && m.reading.cluster_uj > 0.0);
        assert!(m.reading.transition_uj > 0.0, "{board}: no transitions?");
        let sum = m.reading.cpu_dynamic_uj
            + m.reading.cpu_static_uj
            + m.reading.cluster_uj
            + m.reading.transition_uj;
        assert!((m.reading.total_uj - sum).abs() < 0.01);
        // Every CPU-ns is accounted once: busy + WFI + asleep = CPUs × duration.
        let ns: u64 = m
            .reading
            .clusters
            .iter()
            .map(|c| c.cpu_busy_ns + c.cpu_wfi_ns + c.cpu_sleep_ns)
            .sum();
        assert_eq!(ns, r.cpus.len() as u64 * r.duration_ns, "{board}");
    }
}

/// Idle power is what packing saves: on juno-r2 `periodic-small` with EAS the LITTLE
/// cluster does the work and the big cluster sleeps; the big cluster's off time is most
/// of the run.
#[test]
fn eas_lets_the_big_cluster_sleep() {
    let out = run(&spec("juno-r2", "periodic-small.json")).unwrap();
    let m = out.report.meter.unwrap();
    let big = &m.reading.clusters[0];
    assert!(
        big.cluster_off_ns * 2 > out.report.duration_ns,
        "big cluster off only {} of {} ns",
        big.cluster_off_ns,
        out.report.duration_ns
    );
}
