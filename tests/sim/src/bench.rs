//! The simulator benchmark: juno-r2 with 10, 100 and 1000 periodic tasks.
//!
//! Reports simulated seconds per wall second and events per second, with the trace
//! off (the trace writer's cost depends on the disk, not on the simulator), and the
//! same per second of CPU time the run's thread got (on Linux, from
//! `/proc/thread-self/schedstat`): on a shared machine the wall-clock figure depends on
//! how many other processes compete for the cores, the CPU-time one much less.
//! Run with `cargo xtask bench sim` (the `sim` profile: release with LTO), `cargo run
//! --profile sim -p asym-sim -- --bench` or `cargo bench -p asym-sim` (see `docs/sim.md`).

use std::time::Instant;

use crate::board::Board;
use crate::engine::{Engine, SimConfig};
use crate::workload;

/// A workload of `n` periodic tasks whose total demand stays near two big CPUs
/// whatever `n`: task i runs `max(30 ms / n, 20 µs) × (1 + i mod 3)` of work every
/// `16 ms × (1 + i mod 3)`, each on its own timer, all CPUs allowed.
pub fn periodic_workload(n: usize) -> String {
    let mut s = String::from("{\"global\": {\"duration\": -1}, \"tasks\": {\n");
    let base = (30_000 / n.max(1)).max(20);
    for i in 0..n {
        let run = base * (1 + i % 3);
        let period = 16_000 * (1 + i % 3);
        s.push_str(&format!(
            "  \"p{i}\": {{\"loop\": -1, \"run\": {run}, \"timer\": {{\"ref\": \"unique\", \"period\": {period}}}}}{}\n",
            if i + 1 < n { "," } else { "" }
        ));
    }
    s.push_str("}}\n");
    s
}

/// One benchmark measurement.
#[derive(Clone, Copy, Debug)]
pub struct BenchPoint {
    /// Number of tasks.
    pub tasks: usize,
    /// Simulated seconds.
    pub sim_s: f64,
    /// Wall seconds.
    pub wall_s: f64,
    /// CPU seconds of the simulating thread (`None` where the OS does not say).
    pub cpu_s: Option<f64>,
    /// Events processed.
    pub events: u64,
}

/// Simulate `n` tasks for `duration_ns` on juno-r2 under schedutil and time it.
pub fn measure(n: usize, duration_ns: u64) -> Result<BenchPoint, String> {
    let desc = asym_boards::by_name("juno-r2").ok_or("juno-r2 board missing")?;
    let board = Board::new(desc)?;
    let wl = workload::parse(&periodic_workload(n), "bench", board.nr_cpus())
        .map_err(|e| e.to_string())?;
    let cfg = SimConfig {
        duration_ns,
        load_balance: false,
        ..SimConfig::default()
    };
    let start = Instant::now();
    let cpu0 = thread_cpu_ns();
    let eng = Engine::<std::io::Sink>::new(&board, &wl, cfg, None).map_err(|e| e.to_string())?;
    let (res, _) = eng.run().map_err(|e| e.to_string())?;
    let cpu1 = thread_cpu_ns();
    let wall_s = start.elapsed().as_secs_f64().max(1e-9);
    Ok(BenchPoint {
        tasks: n,
        sim_s: res.end_ns as f64 / 1e9,
        wall_s,
        cpu_s: cpu0
            .zip(cpu1)
            .map(|(a, b)| (b.saturating_sub(a) as f64 / 1e9).max(1e-9)),
        events: res.events,
    })
}

/// CPU time this thread has run, in ns: the first field of Linux's
/// `/proc/thread-self/schedstat` (`se.sum_exec_runtime`). `None` elsewhere.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// The task counts of the default benchmark.
pub const DEFAULT_TASKS: [usize; 3] = [10, 100, 1000];

/// The default simulated duration for `n` tasks: a few wall seconds at most on a slow
/// machine.
pub fn default_duration_ns(n: usize) -> u64 {
    match n {
        0..=10 => 20_000_000_000,
        11..=100 => 10_000_000_000,
        _ => 2_000_000_000,
    }
}

/// Run the benchmark for each task count of `tasks` (`repeat` times each, one row per
/// run) and print a table.
pub fn run_bench(
    duration_ns: Option<u64>,
    tasks: &[usize],
    repeat: usize,
    print: bool,
) -> Result<(), String> {
    if print {
        println!(
            "{:>6} {:>8} {:>8} {:>8} {:>10} {:>11} {:>11} {:>13} {:>12}",
            "tasks",
            "sim s",
            "wall s",
            "cpu s",
            "events",
            "events/s",
            "events/cpus",
            "sim s/wall s",
            "sim s/cpu s"
        );
    }
    for &n in tasks {
        if n == 0 {
            return Err("--bench-tasks: a task count must be at least 1".into());
        }
        let d = duration_ns.unwrap_or_else(|| default_duration_ns(n));
        for _ in 0..repeat.max(1) {
            let p = measure(n, d)?;
            if print {
                let cpu = |f: &dyn Fn(f64) -> f64, w: usize, prec: usize| {
                    p.cpu_s
                        .map_or_else(|| format!("{:>w$}", "-"), |c| format!("{:>w$.prec$}", f(c)))
                };
                println!(
                    "{:>6} {:>8.2} {:>8.3} {} {:>10} {:>11.0} {} {:>13.2} {}",
                    p.tasks,
                    p.sim_s,
                    p.wall_s,
                    cpu(&|c| c, 8, 3),
                    p.events,
                    p.events as f64 / p.wall_s,
                    cpu(&|c| p.events as f64 / c, 11, 0),
                    p.sim_s / p.wall_s,
                    cpu(&|c| p.sim_s / c, 12, 2),
                );
            }
        }
    }
    Ok(())
}
