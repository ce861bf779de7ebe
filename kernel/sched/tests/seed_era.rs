//! The seed-era cpufreq switches (`KEEP_INEFFICIENT_OPPS`, `LEGACY_TRANSITION_DELAY`) on the
//! boards' own tables: off, everything is v6.12; on, the 2018 kernel's behaviour.

use asym_sched::cpufreq::driver::EmulatedDriver;
use asym_sched::cpufreq::policies::CpufreqCore;
use asym_sched::cpufreq::Governor;
use asym_sched::features::{Feature, SchedFeatures};
use asym_sched::topology::{BoardDesc, Topology};
use asym_sched::types::{Capacity, Khz, Nanos};

fn core(board: &BoardDesc, f: SchedFeatures) -> CpufreqCore<EmulatedDriver> {
    let topo = Topology::from_board(board).unwrap();
    let caps: Vec<Capacity> = topo.cpus().iter().map(|c| c.capacity_orig).collect();
    let mut c = CpufreqCore::new(board, &caps, Governor::Schedutil, Nanos(0), |p| {
        EmulatedDriver::new(p, true)
    })
    .unwrap();
    c.apply_seed_era(f);
    c
}

/// HiKey's 208 MHz costs more per unit of work than 432 MHz (boards.md: 3952 vs 3948), so
/// v6.12 resolves a 100 MHz request to 432 MHz; the 2018 kernel gave it 208 MHz.
#[test]
fn keep_inefficient_opps_lets_hikey_run_at_208_mhz() {
    let hikey = asym_boards::HIKEY;
    let today = core(&hikey, SchedFeatures::default());
    let p = today.policy(0).unwrap();
    assert!(p.efficiencies_available());
    assert_eq!(p.resolve_freq(Khz(100_000)), Khz(432_000));
    let era = core(
        &hikey,
        SchedFeatures::default().with(Feature::KEEP_INEFFICIENT_OPPS, true),
    );
    let p = era.policy(0).unwrap();
    assert!(!p.efficiencies_available());
    assert_eq!(p.resolve_freq(Khz(100_000)), Khz(208_000));
}

/// v6.12: 1.5 × the latency (HiKey 500 µs → 750, HiKey960 300 → 450, Juno r2 1450 → 2175).
/// v4.14–2024: min(latency × 1000, 10 ms) = 10 ms on all three.
#[test]
fn legacy_transition_delay_is_ten_ms_on_every_board() {
    for (board, today_us) in [
        (asym_boards::HIKEY, 750),
        (asym_boards::HIKEY960, 450),
        (asym_boards::JUNO_R2, 2175),
    ] {
        let c = core(&board, SchedFeatures::default());
        for pd in 0..c.nr_policies() {
            assert_eq!(
                c.sugov(pd).unwrap().rate_limit_us(),
                today_us,
                "{}",
                board.name
            );
        }
        let c = core(
            &board,
            SchedFeatures::default().with(Feature::LEGACY_TRANSITION_DELAY, true),
        );
        for pd in 0..c.nr_policies() {
            assert_eq!(
                c.sugov(pd).unwrap().rate_limit_us(),
                10_000,
                "{}",
                board.name
            );
            assert_eq!(c.policy(pd).unwrap().transition_delay_us_legacy(), 10_000);
        }
    }
}
