//! The simulator benchmark: juno-r2 with 10, 100 and 1000 periodic tasks.
//!
//! Reports simulated seconds per wall second and events per second, with the trace
//! off (the trace writer's cost depends on the disk, not on the simulator).
//! Run with `cargo run --release -p asym-sim -- --bench` or
//! `cargo bench -p asym-sim` (see `docs/sim.md`).

use std::time::Instant;

use crate::board::Board;
use crate::engine::{Engine, Governor, SimConfig};
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
        until_all_exit: false,
        load_balance: false,
        placement: Default::default(),
        features: Default::default(),
        governor: Governor::Schedutil,
        seed: 0,
        hz: 250,
        record_timeline: false,
        freq_limits: Vec::new(),
    };
    let start = Instant::now();
    let eng = Engine::<std::io::Sink>::new(&board, &wl, cfg, None).map_err(|e| e.to_string())?;
    let (res, _) = eng.run().map_err(|e| e.to_string())?;
    let wall_s = start.elapsed().as_secs_f64().max(1e-9);
    Ok(BenchPoint {
        tasks: n,
        sim_s: res.end_ns as f64 / 1e9,
        wall_s,
        events: res.events,
    })
}

/// Run the 10/100/1000-task benchmark and print a table.
pub fn run_bench(duration_ns: Option<u64>, print: bool) -> Result<(), String> {
    if print {
        println!(
            "{:>6} {:>10} {:>10} {:>12} {:>14} {:>14}",
            "tasks", "sim s", "wall s", "events", "events/s", "sim s/wall s"
        );
    }
    for n in [10, 100, 1000] {
        // Keep each point to a few wall seconds on a slow machine.
        let d = duration_ns.unwrap_or(match n {
            10 => 20_000_000_000,
            100 => 10_000_000_000,
            _ => 2_000_000_000,
        });
        let p = measure(n, d)?;
        if print {
            println!(
                "{:>6} {:>10.2} {:>10.3} {:>12} {:>14.0} {:>14.2}",
                p.tasks,
                p.sim_s,
                p.wall_s,
                p.events,
                p.events as f64 / p.wall_s,
                p.sim_s / p.wall_s
            );
        }
    }
    Ok(())
}
