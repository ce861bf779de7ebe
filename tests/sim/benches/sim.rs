//! `cargo bench -p asym-sim` (also `cargo xtask bench sim`): simulated seconds per wall
//! second and events per second for juno-r2 with 10, 100 and 1000 periodic tasks.
//! A plain `main` (harness = false): the numbers are throughput, not a statistical
//! micro-benchmark. Pass a duration to shorten it: `cargo bench -p asym-sim -- 1s`.

fn main() {
    // cargo passes `--bench`; any other argument is a duration.
    let duration = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .map(|a| asym_sim::parse_duration(&a))
        .transpose();
    let result = duration
        .and_then(|d| asym_sim::bench::run_bench(d, &asym_sim::bench::DEFAULT_TASKS, 1, true));
    if let Err(e) = result {
        eprintln!("asym-sim bench: {e}");
        std::process::exit(1);
    }
}
