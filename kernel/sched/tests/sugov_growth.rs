//! asym's `SUGOV_GROWTH_HEADROOM` (not in Linux) against values worked out by hand.
//!
//! HiKey960's little cluster (hi3660.dtsi: 533/999/1402/1709/1844 MHz, `capacity_orig` 462,
//! 300 µs latency → 450 µs rate limit, so the horizon is the 4 ms tick at HZ=250). OPP
//! capacities `462 × f / 1844 MHz`: 133, 250, 351, 428, 462.
//!
//! One PELT period is 1024 µs and `y = 2^(-1/32)` (`runnable_avg_yN_inv[1] / 2^32` =
//! 0.978572). At 533 MHz, 4 ms of running is `4e6 × 133 / 1024` = 519 531 ns of PELT time,
//! 0.495 46 periods, so the gap to 1024 shrinks by `0.495 46 × (1 − y)` = 1.0617 %.

use asym_sched::cpufreq::CpufreqPolicy;
use asym_sched::features::{Feature, SchedFeatures};
use asym_sched::rq::RqSnapshot;
use asym_sched::schedutil::{
    map_util_perf, sugov_growth_perf, util_after_running, SugovPolicy, UpdateFlags,
};
use asym_sched::types::{Capacity, CpuId, Khz, Nanos, Util};

const TICK: u64 = 4_000_000;
const PERIOD_NS: u64 = 1 << 20;
/// The little cluster's OPP capacities.
const LITTLE_CAPS: [u32; 5] = [133, 250, 351, 428, 462];

fn caps() -> impl Iterator<Item = Capacity> {
    LITTLE_CAPS.iter().map(|&c| Capacity(c))
}

#[test]
fn util_after_running_halves_the_gap_per_32_periods_and_interpolates_a_fraction() {
    // 32 full periods at capacity 1024: y^32 = 1/2 of the gap to 1024 is left — a hair
    // under, as `decay_load` multiplies by `runnable_avg_yN_inv[0]` = (2^32 − 1) / 2^32 —
    // so ⌊512 − ε⌋ = 511 left and the signal is at 513.
    assert_eq!(util_after_running(0, Capacity(1024), 32 * PERIOD_NS), 513);
    // The same PELT time at half the capacity takes twice as long.
    assert_eq!(util_after_running(0, Capacity(512), 64 * PERIOD_NS), 513);
    assert_eq!(
        util_after_running(0, Capacity(512), 32 * PERIOD_NS),
        1024 - 724
    );
    // 119 at 533 MHz for a tick: gap 905 × (1 − 0.010617) = 895.39 left → 1024 − 895 = 129.
    assert_eq!(util_after_running(119, Capacity(133), TICK), 129);
    // A saturated signal does not grow; nothing grows in no time.
    assert_eq!(util_after_running(1024, Capacity(1024), TICK), 1024);
    assert_eq!(util_after_running(300, Capacity(1024), 0), 300);
}

#[test]
fn growth_perf_keeps_a_util_just_under_an_opp_on_it_and_never_exceeds_linux() {
    // util 115: Linux asks 115 + 28 = 143 > 133, so 999 MHz. Grown for a tick at 533 MHz:
    // gap 909 × (1 − 0.010617) = 899.35 → 1024 − 899 = 125 ≤ 133: stays at 533 MHz.
    assert_eq!(map_util_perf(115), 143);
    assert_eq!(sugov_growth_perf(115, caps(), TICK), 125);
    // util 130: grows to 1024 − ⌊894 × 0.989383⌋ = 1024 − 884 = 140 > 133 at 533 MHz; at
    // 999 MHz (capacity 250, 0.931 31 periods, 1.9957 %) 1024 − ⌊894 × 0.980043⌋ = 148.
    // Linux's 162 resolves to the same OPP.
    assert_eq!(sugov_growth_perf(130, caps(), TICK), 148);
    // Above the top OPP: Linux's request (the top OPP).
    assert_eq!(sugov_growth_perf(460, caps(), TICK), map_util_perf(460));
    for util in 0..=1024 {
        assert!(
            sugov_growth_perf(util, caps(), TICK) <= map_util_perf(util),
            "util {util}: above Linux's request"
        );
    }
}

/// One update of CPU 0 on HiKey960's little policy, with `util_avg = runnable_avg` and the
/// queued tasks' `util_est` as given, every other CPU idle.
fn little_freq(util_avg: u32, util_est: u32, features: SchedFeatures) -> Option<Khz> {
    let board = asym_boards::HIKEY960;
    let mut p = CpufreqPolicy::new(&board, 0, Nanos(0)).unwrap();
    let mut s = SugovPolicy::new(&p);
    assert_eq!(s.growth_horizon_ns(), TICK);
    let cap = Capacity(462);
    s.update(
        &mut p,
        Nanos(10_000_000),
        CpuId(0),
        UpdateFlags::NONE,
        features,
        false,
        |c| {
            let mut i = RqSnapshot::idle(c, cap);
            if c == CpuId(0) {
                i.util.cfs.util_avg = Util(util_avg);
                i.util.cfs.runnable_avg = Util(util_avg);
                i.util.cfs.util_est = Util(util_est);
            }
            i
        },
    )
}

#[test]
fn little_policy_stays_at_533_mhz_for_a_periodic_task_within_its_estimate() {
    let linux = SchedFeatures::default();
    let on = linux.with(Feature::SUGOV_GROWTH_HEADROOM, true);
    // util_est 115 covers util_avg 100. Linux: 143 → 1844 MHz × 143 / 462 = 570 771 kHz →
    // 999 MHz. Growth headroom: 125 → 498 917 kHz → 533 MHz.
    assert_eq!(little_freq(100, 115, linux), Some(Khz(999_000)));
    assert_eq!(little_freq(100, 115, on), Some(Khz(533_000)));
    // Running past its estimate (util_avg 116 > util_est 115): Linux's 25 % (145 → 999 MHz).
    assert_eq!(little_freq(116, 115, on), Some(Khz(999_000)));
    // Without util_est there is no estimate to be within.
    let no_est = on.with(Feature::UTIL_EST, false);
    assert_eq!(little_freq(115, 115, no_est), Some(Khz(999_000)));
}
