//! The one trace analyser (`asym_trace::analyse`) and the trace validators
//! (`asym_trace::validate`) on the simulator's own output: the analyser, reading only
//! `trace.txt`, reproduces the counters the simulator's `report.json` took from its engine
//! (the refactoring check that lets `cargo xtask compare` put a kernel trace beside a
//! simulator trace through the same code), and every bundled workload's trace passes the
//! validators `cargo xtask test` applies to the kernel's traces.

use asym_sim::{run_source, RunSpec};
use asym_trace::analyse::{analyse, DomainModel};
use asym_trace::validate::{check_analysis, check_trace};

fn workload(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../workloads/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn run(
    tag: &str,
    board: &str,
    wl: &str,
    name: &str,
    duration_ns: u64,
) -> (asym_sim::RunOutput, String) {
    let dir = std::env::temp_dir().join(format!(
        "asym-analyser-{}-{tag}-{board}-{name}",
        std::process::id()
    ));
    let spec = RunSpec {
        duration_ns: Some(duration_ns),
        out: Some(dir.clone()),
        ..RunSpec::new(board, name)
    };
    let out = run_source(&spec, wl, false).expect("simulation failed");
    let trace = std::fs::read_to_string(dir.join("trace.txt")).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    (out, trace)
}

/// Energy, per-task running time and residency, activations, migrations and frequency
/// residency from the trace equal the engine's counters, up to the trace clock's 1 ns
/// spreading of same-instant lines (a few ns per interval).
#[test]
fn analyser_reproduces_the_simulators_report_from_its_trace() {
    for (board, wl) in [
        ("juno-r2", "periodic-small.json"),
        ("juno-r2", "messaging.json"),
        ("hikey960", "jank.json"),
        ("hikey960", "ramp.json"),
    ] {
        let (out, trace) = run("report", board, &workload(wl), wl, 400_000_000);
        let desc = asym_boards::by_name(board).unwrap();
        let r = &out.report;
        let a = analyse(
            &trace,
            desc.cpus.len(),
            &DomainModel::of_board(desc),
            r.duration_ns,
        );
        let what = format!("{wl} on {board}");
        assert_eq!((a.bad_lines, a.unattributed_busy_ns), (0, 0), "{what}");
        assert_eq!(a.context_switches, r.counters.context_switches, "{what}");
        assert_eq!(a.tasks.len(), r.tasks.len(), "{what}");
        // Skew: at most the number of lines of one instant, in ns, per interval edge.
        let slack = |n: u64| 50 * n.max(1);
        for (t, rt) in a.tasks.iter().zip(&r.tasks) {
            assert_eq!((t.pid, &t.name), (rt.pid, &rt.name), "{what}");
            assert_eq!(t.activations, rt.activations, "{what}: {}", t.name);
            assert_eq!(t.migrations, rt.migrations, "{what}: {}", t.name);
            let edges = 2 * rt.activations + 2;
            assert!(
                t.runtime_ns.abs_diff(rt.runtime_ns) <= slack(edges),
                "{what}: {} ran {} ns by the trace, {} by the engine",
                t.name,
                t.runtime_ns,
                rt.runtime_ns
            );
            for (c, (&x, &y)) in t.residency_ns.iter().zip(&rt.residency_ns).enumerate() {
                assert!(
                    x.abs_diff(y) <= slack(edges),
                    "{what}: {} cpu {c}: {x} vs {y}",
                    t.name
                );
            }
        }
        let rel = (a.total_energy_uj - r.energy.total_uj).abs() / r.energy.total_uj.max(1e-9);
        assert!(
            rel < 1e-4,
            "{what}: energy {} uJ by the trace, {} by the engine",
            a.total_energy_uj,
            r.energy.total_uj
        );
        for (d, rd) in a.domains.iter().zip(&r.energy.perf_domains) {
            for (&ns, f) in d.frequency_ns.iter().zip(&rd.frequency_residency) {
                assert!(
                    ns.abs_diff(f.time_ns) <= 1_000,
                    "{what}: {} at {} kHz: {ns} vs {}",
                    rd.name,
                    f.khz,
                    f.time_ns
                );
            }
        }
    }
}

/// The validators accept every bundled workload's simulator trace on both EAS boards.
#[test]
fn every_bundled_workload_trace_passes_the_validators() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../workloads");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&p).unwrap();
        for board in ["juno-r2", "hikey960"] {
            let (out, trace) = run("validate", board, &text, &name, 150_000_000);
            let c = check_trace(&trace).unwrap_or_else(|e| panic!("{name} on {board}: {e}"));
            let desc = asym_boards::by_name(board).unwrap();
            let a = analyse(
                &trace,
                desc.cpus.len(),
                &DomainModel::of_board(desc),
                out.report.duration_ns,
            );
            check_analysis(&a, out.report.duration_ns)
                .unwrap_or_else(|e| panic!("{name} on {board}: {e}"));
            assert!(c.switches > 0, "{name} on {board}: no switches");
        }
        n += 1;
    }
    assert!(n >= 7, "expected the bundled workloads, found {n}");
}
