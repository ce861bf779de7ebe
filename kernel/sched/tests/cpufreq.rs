//! cpufreq policy and emulated-driver tests. Oracles: the boards' OPP tables (mainline
//! `juno-r2.dts`, `hi3660.dtsi`, `hi6220.dtsi`) and Linux v6.12's rules
//! (`cpufreq_driver_resolve_freq` in `drivers/cpufreq/cpufreq.c`, the `rate_limit_us`
//! default of `cpufreq_schedutil.c`), computed by hand in the comments.

use asym_sched::cpufreq::driver::{CpufreqDriver, EmulatedDriver};
use asym_sched::cpufreq::{CpufreqError, CpufreqPolicy, Governor, Relation};
use asym_sched::em::{EmError, EmPerfDomain};
use asym_sched::topology::{BoardDesc, CpuDesc, OppDesc, PerfDomainDesc};
use asym_sched::types::{Capacity, CpuMask, Khz, MicroVolt, Nanos};
use proptest::prelude::*;

/// For the bad tables below only.
const fn opp(mhz: u32, mv: u32) -> OppDesc {
    OppDesc {
        freq: Khz(mhz * 1000),
        voltage: MicroVolt(mv * 1000),
    }
}

const fn cpu(mpidr: u64, pd: u16, c: Option<u32>) -> CpuDesc {
    CpuDesc {
        mpidr,
        cluster: pd,
        perf_domain: pd,
        capacity_dmips_mhz: None,
        dynamic_power_coefficient: c,
        core: "test",
    }
}

// The boards' tables are `asym_boards`' (one set of fixtures for every test).
const JUNO_BIG_OPPS: &[OppDesc] = asym_boards::JUNO_R2.perf_domains[0].opps;
const JUNO_LITTLE_OPPS: &[OppDesc] = asym_boards::JUNO_R2.perf_domains[1].opps;
const HIKEY_OPPS: &[OppDesc] = asym_boards::HIKEY.perf_domains[0].opps;
use asym_boards::HIKEY;
/// Juno r2's OPPs and coefficients with the perf domains listed LITTLE first (the real table,
/// `asym_boards::JUNO_R2`, lists big first): policies and the EM must follow the table's order.
const JUNO: BoardDesc = BoardDesc {
    name: "juno-r2",
    cpus: &[
        cpu(0x0, 1, Some(450)),
        cpu(0x1, 1, Some(450)),
        cpu(0x100, 0, Some(140)),
        cpu(0x101, 0, Some(140)),
        cpu(0x102, 0, Some(140)),
        cpu(0x103, 0, Some(140)),
    ],
    perf_domains: &[
        PerfDomainDesc {
            name: "little",
            opps: JUNO_LITTLE_OPPS,
            transition_latency_ns: 1_450_000,
        },
        PerfDomainDesc {
            name: "big",
            opps: JUNO_BIG_OPPS,
            transition_latency_ns: 1_450_000,
        },
    ],
};
const fn mhz(m: u32) -> Khz {
    Khz(m * 1000)
}

fn hikey_policy_with_efficiencies() -> CpufreqPolicy {
    let mut p = CpufreqPolicy::new(&HIKEY, 0, Nanos(0)).unwrap();
    let em = EmPerfDomain::new(&HIKEY, 0, &[Capacity(1024); 8]).unwrap();
    // Only 208 MHz is inefficient (cost 3952 ≥ 3948 at 432 MHz).
    assert_eq!(p.set_efficiencies(&em), 1);
    assert!(p.efficiencies_available());
    p
}

#[test]
fn policy_shape_and_rate_limit_default() {
    let little = CpufreqPolicy::new(&JUNO, 0, Nanos(0)).unwrap();
    let big = CpufreqPolicy::new(&JUNO, 1, Nanos(0)).unwrap();
    assert_eq!(big.cpus, CpuMask(0b11));
    assert_eq!(little.cpus, CpuMask(0b111100));
    assert_eq!(
        (big.cpuinfo_min_freq, big.cpuinfo_max_freq),
        (mhz(600), mhz(1200))
    );
    assert_eq!(
        (big.min(), big.max(), big.cur()),
        (mhz(600), mhz(1200), mhz(1200))
    );
    assert_eq!(big.governor(), Governor::Schedutil);
    // v6.12: lat = 1450 µs → 1450 + 725 = 2175 µs.
    assert_eq!(big.transition_delay_us(), 2175);
    let hikey = CpufreqPolicy::new(&HIKEY, 0, Nanos(0)).unwrap();
    assert_eq!(hikey.cpus.weight(), 8, "HiKey: one policy for 8 CPUs");
    // 500 µs → 500 + 250 = 750 µs (`cpufreq_policy_transition_delay_us`: lat + lat / 2).
    assert_eq!(hikey.transition_delay_us(), 750);
    let mut p = hikey;
    p.transition_latency_ns = 0;
    assert_eq!(p.transition_delay_us(), 1000, "unknown latency → 1 ms");
    p.transition_latency_ns = 999; // below 1 µs truncates to 0 → 1 ms
    assert_eq!(p.transition_delay_us(), 1000);
    p.transition_delay_us = Some(123);
    assert_eq!(p.transition_delay_us(), 123);
}

#[test]
fn resolve_freq_is_lowest_opp_at_or_above_target_within_limits() {
    let mut big = CpufreqPolicy::new(&JUNO, 1, Nanos(0)).unwrap();
    assert_eq!(big.resolve_freq(Khz(0)), mhz(600));
    assert_eq!(big.resolve_freq(mhz(600)), mhz(600));
    assert_eq!(big.resolve_freq(Khz(600_001)), mhz(1000));
    assert_eq!(big.resolve_freq(mhz(1000)), mhz(1000));
    assert_eq!(big.resolve_freq(mhz(1001)), mhz(1200));
    // Outside the table: clamped (documented), not an error.
    assert_eq!(big.resolve_freq(mhz(5000)), mhz(1200));
    assert_eq!(big.resolve_freq(Khz(u32::MAX)), mhz(1200));

    // scaling_min_freq = 1000 MHz (seed 004's experiment on the big cluster).
    assert_eq!(big.set_limits(mhz(1000), mhz(1200)), Ok(None));
    assert_eq!(big.resolve_freq(Khz(0)), mhz(1000));
    assert_eq!(big.resolve_freq(mhz(700)), mhz(1000));
    assert_eq!(big.resolve_freq(mhz(1100)), mhz(1200));
    // scaling_max_freq = 1000 MHz.
    assert_eq!(big.set_limits(mhz(600), mhz(1000)), Ok(Some(mhz(1000))));
    assert_eq!(big.resolve_freq(mhz(1100)), mhz(1000));
    assert_eq!(big.resolve_freq(mhz(5000)), mhz(1000));
}

#[test]
fn limits_resolve_to_table_frequencies() {
    let mut big = CpufreqPolicy::new(&JUNO, 1, Nanos(0)).unwrap();
    // min resolves up, max resolves down.
    big.set_limits(mhz(650), mhz(1100)).unwrap();
    assert_eq!((big.min(), big.max()), (mhz(1000), mhz(1000)));
    // Out of the hardware range: clamped to cpuinfo.
    big.set_limits(Khz(0), mhz(9000)).unwrap();
    assert_eq!((big.min(), big.max()), (mhz(600), mhz(1200)));
    // No OPP inside [500, 560] MHz on HiKey... [433, 700]: max is raised to the next OPP
    // above (cpufreq_frequency_table_verify), 729 MHz, and min resolves up to 729.
    let mut h = CpufreqPolicy::new(&HIKEY, 0, Nanos(0)).unwrap();
    h.set_limits(mhz(433), mhz(700)).unwrap();
    assert_eq!((h.min(), h.max()), (mhz(729), mhz(729)));
}

#[test]
fn min_above_max_is_an_error_and_changes_nothing() {
    let mut big = CpufreqPolicy::new(&JUNO, 1, Nanos(0)).unwrap();
    let e = big.set_limits(mhz(1200), mhz(600)).unwrap_err();
    assert_eq!(
        e,
        CpufreqError::MinAboveMax {
            pd: 1,
            min: mhz(1200),
            max: mhz(600)
        }
    );
    assert!(e.to_string().contains("scaling_min_freq"), "{e}");
    assert_eq!((big.min(), big.max()), (mhz(600), mhz(1200)));
    assert!(!big.take_limits_changed());
}

#[test]
fn non_monotonic_or_empty_opp_tables_are_errors() {
    const BAD: BoardDesc = BoardDesc {
        name: "bad",
        cpus: &[cpu(0, 0, Some(100))],
        perf_domains: &[PerfDomainDesc {
            name: "x",
            opps: &[opp(600, 800), opp(1200, 1000), opp(1000, 900)],
            transition_latency_ns: 0,
        }],
    };
    assert_eq!(
        CpufreqPolicy::new(&BAD, 0, Nanos(0)).unwrap_err(),
        CpufreqError::Table(EmError::NonIncreasingFrequency {
            pd: 0,
            index: 2,
            freq: mhz(1000)
        })
    );
    const EMPTY: BoardDesc = BoardDesc {
        name: "empty",
        cpus: &[cpu(0, 0, Some(100))],
        perf_domains: &[PerfDomainDesc {
            name: "x",
            opps: &[],
            transition_latency_ns: 0,
        }],
    };
    assert_eq!(
        CpufreqPolicy::new(&EMPTY, 0, Nanos(0)).unwrap_err(),
        CpufreqError::Table(EmError::EmptyTable { pd: 0 })
    );
    assert_eq!(
        CpufreqPolicy::new(&EMPTY, 3, Nanos(0)).unwrap_err(),
        CpufreqError::NoSuchDomain { pd: 3 }
    );
}

#[test]
fn efficient_resolution_skips_hikey_208mhz_unless_limits_force_it() {
    let mut p = hikey_policy_with_efficiencies();
    // RELATION_LE: 100 MHz would be 208, which is inefficient → 432.
    assert_eq!(p.resolve_freq(mhz(100)), mhz(432));
    assert_eq!(p.resolve_freq(mhz(208)), mhz(432));
    // Plain RELATION_L does not skip.
    assert_eq!(p.resolve_freq_relation(mhz(100), Relation::L), mhz(208));
    // scaling_max_freq = 208 MHz: 432 is outside the limits → retry without
    // efficiencies → 208.
    p.set_limits(mhz(208), mhz(208)).unwrap();
    assert_eq!(p.resolve_freq(mhz(100)), mhz(208));
    // Without EM efficiencies installed, 208 is used.
    let mut q = hikey_policy_with_efficiencies();
    q.set_efficiencies_available(false);
    assert_eq!(q.resolve_freq(mhz(100)), mhz(208));
}

#[test]
fn relations_h_and_c() {
    let p = CpufreqPolicy::new(&HIKEY, 0, Nanos(0)).unwrap();
    assert_eq!(p.resolve_freq_relation(mhz(700), Relation::H), mhz(432));
    assert_eq!(p.resolve_freq_relation(mhz(729), Relation::H), mhz(729));
    assert_eq!(p.resolve_freq_relation(mhz(100), Relation::H), mhz(208));
    // 600: 168 from 432, 129 from 729 → 729. 580: 148 vs 149 → 432.
    assert_eq!(p.resolve_freq_relation(mhz(600), Relation::C), mhz(729));
    assert_eq!(p.resolve_freq_relation(mhz(580), Relation::C), mhz(432));
}

#[test]
fn governors_performance_and_powersave() {
    let mut p = CpufreqPolicy::new(&JUNO, 0, Nanos(0)).unwrap();
    // Starts at cpuinfo.max_freq: performance has nothing to do.
    assert_eq!(p.set_governor(Governor::Performance), None);
    assert_eq!(p.set_governor(Governor::Powersave), Some(mhz(450)));
    p.freq_transition(mhz(450), Nanos(1));
    // Raising the minimum moves a powersave policy with it.
    assert_eq!(p.set_limits(mhz(800), mhz(950)), Ok(Some(mhz(800))));
    p.freq_transition(mhz(800), Nanos(2));
    assert_eq!(p.set_governor(Governor::Performance), Some(mhz(950)));
    // Schedutil: cur is pulled into new limits at once.
    p.freq_transition(mhz(950), Nanos(3));
    p.set_governor(Governor::Schedutil);
    assert_eq!(p.set_limits(mhz(450), mhz(800)), Ok(Some(mhz(800))));
    assert!(p.take_limits_changed());
    assert!(!p.take_limits_changed());
}

#[test]
fn statistics_count_time_in_state_and_transitions() {
    let mut p = CpufreqPolicy::new(&JUNO, 1, Nanos(1_000)).unwrap();
    // 1200 MHz from t=1000 to 5000, 600 MHz to 12000, 1000 MHz until 20000.
    p.freq_transition(mhz(600), Nanos(5_000));
    p.freq_transition(mhz(600), Nanos(6_000)); // no change: not a transition
    p.freq_transition(mhz(1000), Nanos(12_000));
    let s = p.stats(Nanos(20_000));
    assert_eq!(s.time_in_state_ns(2), 4_000);
    assert_eq!(s.time_in_state_ns(0), 7_000);
    assert_eq!(s.time_in_state_ns(1), 8_000);
    assert_eq!(s.total_trans, 2);
    assert_eq!(s.trans_table(2, 0), 1);
    assert_eq!(s.trans_table(0, 1), 1);
    assert_eq!(p.cur(), mhz(1000));
    // Frequency invariance: 1000/1200 × 1024 = 853.3 → 853.
    assert_eq!(p.arch_scale_freq_capacity(), 853);
}

#[test]
fn emulated_driver_applies_after_the_latency_and_fails_on_request() {
    let mut policies = [
        CpufreqPolicy::new(&JUNO, 0, Nanos(0)).unwrap(),
        CpufreqPolicy::new(&JUNO, 1, Nanos(0)).unwrap(),
    ];
    let mut drv = EmulatedDriver::new(&policies, true);
    assert_eq!(drv.get(1), mhz(1200));
    assert_eq!(drv.transition_latency_ns(1), 1_450_000);
    let t = drv.target(&policies[1], mhz(600), Nanos(10_000)).unwrap();
    assert_eq!(t, Nanos(10_000 + 1_450_000));
    assert_eq!(drv.poll(Nanos(1_459_999)), None, "not before the latency");
    assert_eq!(drv.get(1), mhz(1200));
    assert_eq!(drv.next_event(), Some(t));
    assert_eq!(drv.next_poll(), Some(t));
    let c = drv.poll(t).unwrap();
    assert_eq!((c.pd, c.result, c.at), (1, Ok(mhz(600)), t));
    assert_eq!((c.requested, c.requested_at), (mhz(600), Nanos(10_000)));
    assert_eq!(c.latency_ns(), 1_450_000);
    let (f, at) = (c.result.unwrap(), c.at);
    policies[1].freq_transition(f, at);
    assert_eq!(policies[1].cur(), mhz(600));
    assert_eq!(drv.get(1), mhz(600));
    assert_eq!(drv.poll(Nanos(u64::MAX)), None);
    assert_eq!(drv.next_poll(), None, "nothing outstanding");

    // Fault injection: the next request fails, with an error naming domain and freq.
    drv.fail_next(1, 1);
    let e = drv
        .target(&policies[1], mhz(1200), Nanos(2_000_000))
        .unwrap_err();
    assert_eq!(
        e,
        CpufreqError::DriverFailed {
            pd: 1,
            freq: mhz(1200)
        }
    );
    assert_eq!(drv.pending(1), None);
    // A slow domain.
    drv.set_extra_delay(1, 5_000_000);
    let t = drv
        .target(&policies[1], mhz(1200), Nanos(3_000_000))
        .unwrap();
    assert_eq!(t, Nanos(3_000_000 + 1_450_000 + 5_000_000));
    // The same frequency again while it is on its way joins the transition in flight.
    let again = drv
        .target(&policies[1], mhz(1200), Nanos(4_000_000))
        .unwrap();
    assert_eq!(again, t, "a repeated request restarted the transition");
    assert_eq!(drv.pending(1), Some((mhz(1200), t)));
    let log: Vec<_> = drv
        .requests()
        .map(|r| (r.freq, r.effective.is_some()))
        .collect();
    assert_eq!(
        log,
        [
            (mhz(600), true),
            (mhz(1200), false),
            (mhz(1200), true),
            (mhz(1200), true)
        ]
    );
    assert_eq!(drv.nr_requests(), 4);
    let c = drv.poll(t).unwrap();
    assert_eq!((c.requested_at, c.at), (Nanos(3_000_000), t));
    // Another frequency replaces it, its latency counted from the new request.
    drv.set_extra_delay(1, 0);
    let t = drv
        .target(&policies[1], mhz(600), Nanos(9_000_000))
        .unwrap();
    drv.target(&policies[1], mhz(1000), Nanos(9_500_000))
        .unwrap();
    assert_eq!(
        drv.pending(1),
        Some((mhz(1000), Nanos(9_500_000 + 1_450_000)))
    );
    assert!(t < Nanos(9_500_000 + 1_450_000));
}

proptest! {
    /// `resolve_freq` without efficiencies equals the brute-force "lowest table frequency
    /// ≥ clamp(target, min, max)" for any limits and target.
    #[test]
    fn resolve_matches_brute_force(a in 0u32..1_500_000, b in 0u32..1_500_000, t in 0u32..2_000_000) {
        let mut p = CpufreqPolicy::new(&HIKEY, 0, Nanos(0)).unwrap();
        let (lo, hi) = (a.min(b), a.max(b));
        p.set_limits(Khz(lo), Khz(hi)).unwrap();
        let (min, max) = (p.min(), p.max());
        prop_assert!(min <= max);
        prop_assert!(HIKEY_OPPS.iter().any(|o| o.freq == min));
        prop_assert!(HIKEY_OPPS.iter().any(|o| o.freq == max));
        let target = t.clamp(min.0, max.0);
        let want = HIKEY_OPPS.iter().map(|o| o.freq).find(|f| f.0 >= target).unwrap();
        prop_assert_eq!(p.resolve_freq(Khz(t)), want);
    }
}

#[test]
fn cpufreq_core_runs_schedutil_through_the_driver() {
    use asym_sched::cpufreq::policies::CpufreqCore;
    use asym_sched::features::SchedFeatures;
    use asym_sched::rq::RqSnapshot;
    use asym_sched::schedutil::UpdateFlags;
    use asym_sched::types::{CpuId, Util};

    let caps = [
        Capacity(1024),
        Capacity(1024),
        Capacity(383),
        Capacity(383),
        Capacity(383),
        Capacity(383),
    ];
    // JUNO here: pd 0 = LITTLE (CPUs 2–5), pd 1 = big (CPUs 0–1).
    let mut core = CpufreqCore::new(&JUNO, &caps, Governor::Schedutil, Nanos(0), |p| {
        EmulatedDriver::new(p, true)
    })
    .unwrap();
    assert_eq!(core.nr_policies(), 2);
    assert_eq!(core.policy_of(CpuId(1)), Some(1));
    assert_eq!(core.policy_of(CpuId(4)), Some(0));
    assert_eq!(core.arch_scale_freq_capacity(CpuId(0)), 1024);
    let f = SchedFeatures::default();
    let input = |util: u32| {
        move |c: CpuId| {
            let mut i = RqSnapshot::idle(c, Capacity(1024));
            if c == CpuId(0) {
                i.util.cfs.util_avg = Util(util);
                i.util.cfs.runnable_avg = Util(util);
            }
            i
        }
    };
    // Big CPU 0 at util 300 → 375 → 439_453 kHz → 600 MHz, effective after 1.45 ms.
    let t = core.update_util(
        Nanos(5_000_000),
        CpuId(0),
        UpdateFlags::NONE,
        f,
        false,
        input(300),
    );
    assert_eq!(t, Some(Nanos(6_450_000)));
    assert_eq!(core.poll(Nanos(6_449_999)), None);
    assert_eq!(core.poll(Nanos(6_450_000)), Some((1, mhz(600))));
    assert_eq!(core.policy(1).unwrap().cur(), mhz(600));
    let last = core.last_completion(1).unwrap();
    assert_eq!((last.requested, last.latency_ns()), (mhz(600), 1_450_000));
    assert!(core.last_completion(0).is_none());
    // 600/1200 × 1024.
    assert_eq!(core.arch_scale_freq_capacity(CpuId(1)), 512);
    assert_eq!(
        core.arch_scale_freq_capacity(CpuId(2)),
        1024,
        "LITTLE untouched"
    );
    // Within the 2175 µs rate limit: nothing.
    let t = core.update_util(
        Nanos(6_000_000),
        CpuId(0),
        UpdateFlags::NONE,
        f,
        false,
        input(900),
    );
    assert_eq!(t, None);
    // A failing driver: counted, policy unchanged.
    core.driver.fail_next(1, 1);
    let t = core.update_util(
        Nanos(8_000_000),
        CpuId(1),
        UpdateFlags::NONE,
        f,
        false,
        input(900),
    );
    assert_eq!(t, None);
    assert_eq!(core.failed_requests(), 1);
    assert_eq!(
        core.last_error(),
        Some((
            1,
            CpufreqError::DriverFailed {
                pd: 1,
                freq: mhz(1200)
            }
        ))
    );
    assert_eq!(core.policy(1).unwrap().cur(), mhz(600));
    // scaling_min_freq on big = 1000 MHz (seed 004): applied at once.
    core.set_limits(1, mhz(1000), mhz(1200), Nanos(9_000_000))
        .unwrap();
    assert_eq!(core.poll(Nanos(10_450_000)), Some((1, mhz(1000))));
    // Performance governor: the policy goes to max and schedutil updates do nothing.
    core.set_governor(0, Governor::Performance, Nanos(11_000_000))
        .unwrap();
    let t = core.update_util(
        Nanos(20_000_000),
        CpuId(3),
        UpdateFlags::NONE,
        f,
        false,
        input(0),
    );
    assert_eq!(t, None);
    assert_eq!(core.policy(0).unwrap().cur(), mhz(950));
}

/// The cpufreq state is built at boot on a small kernel stack (it once took ~180 KiB of
/// the boot CPU's stack in fixed `MAX_PERF_DOMAINS`/`MAX_PERF_STATES` arrays): every
/// table must be sized from the board and live on the heap, so the by-value structs stay
/// a few machine words. The bounds are far below one fixed-size table (16 OPPs × 8 bytes).
#[test]
fn cpufreq_state_is_sized_from_the_board_not_on_the_stack() {
    use asym_sched::cpufreq::policies::CpufreqCore;
    use asym_sched::cpufreq::CpufreqStats;
    use asym_sched::em::EnergyModel;
    use asym_sched::schedutil::SugovPolicy;
    use core::mem::size_of;

    assert!(size_of::<CpufreqCore<EmulatedDriver>>() <= 256);
    assert!(size_of::<CpufreqPolicy>() <= 192);
    assert!(size_of::<CpufreqStats>() <= 96);
    assert!(size_of::<SugovPolicy>() <= 96);
    assert!(size_of::<EmulatedDriver>() <= 96);
    assert!(size_of::<EmPerfDomain>() <= 96);
    assert!(size_of::<EnergyModel>() <= 64);

    let caps = [Capacity(1024); 6];
    let core = CpufreqCore::new(&JUNO, &caps, Governor::Schedutil, Nanos(0), |p| {
        EmulatedDriver::new(p, true)
    })
    .unwrap();
    assert_eq!(core.policies().len(), JUNO.perf_domains.len());
    for (pd, p) in core.policies().iter().map(|s| s.policy()).enumerate() {
        assert_eq!(p.table().len(), JUNO.perf_domains[pd].opps.len());
        assert_eq!(core.sugov(pd).unwrap().cpus(), p.cpus);
    }
    let em = EnergyModel::from_board(&JUNO, &caps).unwrap();
    assert_eq!(em.nr_perf_domains(), 2);
    assert_eq!(em.pd(1).unwrap().nr_perf_states(), JUNO_BIG_OPPS.len());
}

/// `trans_table` is `max_state × max_state` of the policy's own table; indices outside
/// it read as zero transitions rather than panicking.
#[test]
fn stats_trans_table_outside_the_table_is_zero() {
    let mut p = CpufreqPolicy::new(&JUNO, 1, Nanos(0)).unwrap();
    p.freq_transition(mhz(600), Nanos(10));
    let s = p.stats(Nanos(20));
    assert_eq!(s.trans_table(2, 0), 1);
    assert_eq!(s.trans_table(3, 0), 0);
    assert_eq!(s.trans_table(0, 3), 0);
    assert_eq!(s.time_in_state_ns(3), 0);
}

/// Switching back to schedutil restarts the governor (`sugov_start`): the state equals a
/// freshly created one, whatever ran before (tuned rate limit, a past update).
#[test]
fn schedutil_restart_equals_a_fresh_governor() {
    use asym_sched::cpufreq::policies::CpufreqCore;
    use asym_sched::features::SchedFeatures;
    use asym_sched::rq::RqSnapshot;
    use asym_sched::schedutil::{SugovPolicy, UpdateFlags};
    use asym_sched::types::{CpuId, Util};

    let caps = [Capacity(1024); 6];
    let mut core = CpufreqCore::new(&JUNO, &caps, Governor::Schedutil, Nanos(0), |p| {
        EmulatedDriver::new(p, true)
    })
    .unwrap();
    core.sugov_mut(1).unwrap().set_rate_limit_us(7);
    let input = |c: CpuId| {
        let mut i = RqSnapshot::idle(c, Capacity(1024));
        i.util.cfs.util_avg = Util(700);
        i
    };
    let t = core.update_util(
        Nanos(5_000_000),
        CpuId(0),
        UpdateFlags::IOWAIT,
        SchedFeatures::default(),
        false,
        input,
    );
    assert!(t.is_some());
    assert_ne!(
        core.sugov(1),
        Some(&SugovPolicy::new(core.policy(1).unwrap()))
    );
    core.set_governor(1, Governor::Performance, Nanos(6_000_000))
        .unwrap();
    core.set_governor(1, Governor::Schedutil, Nanos(7_000_000))
        .unwrap();
    let fresh = SugovPolicy::new(core.policy(1).unwrap());
    assert_eq!(core.sugov(1), Some(&fresh));
    assert_eq!(fresh.rate_limit_us(), 2175);
}

/// A driver whose requests complete, or fail, only when the test says so: the shape of the
/// firmware drivers (request now, outcome later).
struct ScriptedDriver {
    cur: Vec<Khz>,
    outstanding: Vec<(usize, Khz, Nanos)>,
    /// Outcomes to hand out at the next poll, in order: `(pd, result, hw frequency after)`.
    script: Vec<(usize, Result<Khz, &'static str>, Khz)>,
}

impl CpufreqDriver for ScriptedDriver {
    type Error = &'static str;
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn target(&mut self, p: &CpufreqPolicy, f: Khz, now: Nanos) -> Result<Nanos, &'static str> {
        self.outstanding.push((p.pd, f, now));
        Ok(Nanos(now.0 + 1000))
    }
    fn get(&self, pd: usize) -> Khz {
        self.cur[pd]
    }
    fn fast_switch_possible(&self) -> bool {
        true
    }
    fn transition_latency_ns(&self, _pd: usize) -> u64 {
        1000
    }
    fn poll(
        &mut self,
        now: Nanos,
    ) -> Option<asym_sched::cpufreq::driver::Completion<&'static str>> {
        if self.script.is_empty() {
            return None;
        }
        let (pd, result, hw) = self.script.remove(0);
        let i = self.outstanding.iter().position(|o| o.0 == pd)?;
        let (_, requested, requested_at) = self.outstanding.remove(i);
        self.cur[pd] = hw;
        Some(asym_sched::cpufreq::driver::Completion {
            pd,
            requested,
            requested_at,
            result,
            at: now,
        })
    }
    fn next_poll(&self) -> Option<Nanos> {
        self.outstanding.iter().map(|o| Nanos(o.2 .0 + 1000)).min()
    }
}

/// A request that fails after it was started is counted, kept as `last_error`, and the policy
/// follows what the driver says the hardware runs at (it may have moved anyway); a failure that
/// left the hardware alone changes nothing.
#[test]
fn cpufreq_core_counts_late_failures_and_resyncs_cur() {
    use asym_sched::cpufreq::policies::CpufreqCore;
    let caps = [Capacity(1024); 6];
    let mut core = CpufreqCore::new(&JUNO, &caps, Governor::Performance, Nanos(0), |p| {
        ScriptedDriver {
            cur: p.iter().map(|p| p.cur()).collect(),
            outstanding: Vec::new(),
            script: Vec::new(),
        }
    })
    .unwrap();
    // Powersave on big (pd 1): request 600 MHz, which then fails with the hardware unmoved.
    core.set_governor(1, Governor::Powersave, Nanos(10))
        .unwrap();
    assert_eq!(core.next_poll(), Some(Nanos(1010)));
    core.driver.script.push((1, Err("timeout"), mhz(1200)));
    assert_eq!(core.poll(Nanos(2000)), None);
    assert_eq!(core.failed_requests(), 1);
    assert_eq!(core.last_error(), Some((1, "timeout")));
    assert_eq!(core.policy(1).unwrap().cur(), mhz(1200));
    assert_eq!(core.last_completion(1).unwrap().result, Err("timeout"));
    // Again, and this time the firmware reports an error but did move to 1000 MHz.
    core.set_governor(1, Governor::Performance, Nanos(3000))
        .unwrap();
    core.set_governor(1, Governor::Powersave, Nanos(4000))
        .unwrap();
    core.driver
        .script
        .push((1, Err("read back 1000 MHz"), mhz(1000)));
    assert_eq!(core.poll(Nanos(5000)), Some((1, mhz(1000))));
    assert_eq!(core.failed_requests(), 2);
    assert_eq!(core.policy(1).unwrap().cur(), mhz(1000));
    // A success applies the reported frequency.
    core.set_governor(1, Governor::Performance, Nanos(5500))
        .unwrap();
    core.driver.script.push((1, Ok(mhz(1200)), mhz(1200)));
    assert_eq!(core.poll(Nanos(6000)), Some((1, mhz(1200))));
    assert_eq!(core.policy(1).unwrap().cur(), mhz(1200));
    assert_eq!(core.failed_requests(), 2);
    assert_eq!(core.poll(Nanos(7000)), None);
}

/// A policy starts where the driver found the hardware (Linux `cpufreq_online`: `policy->cur =
/// cpufreq_driver->get()`), with no transition counted and time accounted to that state.
#[test]
fn cpufreq_core_starts_at_the_frequency_the_driver_reports() {
    use asym_sched::cpufreq::policies::CpufreqCore;
    let caps = [Capacity(1024); 6];
    let core = CpufreqCore::new(&JUNO, &caps, Governor::Schedutil, Nanos(100), |p| {
        ScriptedDriver {
            cur: p.iter().map(|_| mhz(1000)).collect(),
            outstanding: Vec::new(),
            script: Vec::new(),
        }
    })
    .unwrap();
    let big = core.policy(1).unwrap();
    assert_eq!(big.cur(), mhz(1000));
    let s = big.stats(Nanos(1100));
    assert_eq!(s.total_trans, 0);
    assert_eq!(s.time_in_state_ns(1), 1000, "1000 MHz is big's index 1");
    assert_eq!(s.time_in_state_ns(2), 0);
    // LITTLE (450/800/950) has no 1000 MHz: schedutil pulls it into the limits at once.
    let asked: Vec<_> = core.driver.outstanding.iter().map(|o| (o.0, o.1)).collect();
    assert_eq!(
        asked,
        [(0, mhz(950))],
        "big is inside its limits: nothing asked"
    );
}

/// A governor change that wants the frequency the policy is at must still be requested when
/// another request is on its way: the performance governor set while schedutil's request for
/// 600 MHz is pending must not end at 600 MHz.
#[test]
fn governor_change_overrides_a_pending_request_even_for_the_current_frequency() {
    use asym_sched::cpufreq::policies::CpufreqCore;
    let caps = [Capacity(1024); 6];
    let mut core = CpufreqCore::new(&JUNO, &caps, Governor::Schedutil, Nanos(0), |p| {
        EmulatedDriver::new(p, true)
    })
    .unwrap();
    core.set_governor(1, Governor::Powersave, Nanos(1_000))
        .unwrap();
    assert_eq!(core.driver.pending(1).map(|p| p.0), Some(mhz(600)));
    // Still at 1200 MHz: performance wants what `cur` says, but 600 MHz is on its way.
    core.set_governor(1, Governor::Performance, Nanos(2_000))
        .unwrap();
    assert_eq!(core.driver.pending(1).map(|p| p.0), Some(mhz(1200)));
    while core.poll(Nanos(10_000_000)).is_some() {}
    assert_eq!(core.policy(1).unwrap().cur(), mhz(1200));
    // Nothing pending: a governor that keeps `cur` asks nothing.
    let n = core.driver.nr_requests();
    core.set_governor(1, Governor::Performance, Nanos(20_000_000))
        .unwrap();
    assert_eq!(core.driver.nr_requests(), n);
}

/// The kernel keeps each policy under its own lock and the driver under another, so two CPUs
/// can each take a completion from the driver in order and reach the policy's lock in the other
/// order: the older completion, applied second, must not undo the newer.
#[test]
fn policy_state_ignores_a_completion_older_than_the_one_applied() {
    use asym_sched::cpufreq::policies::{CpufreqCore, PolicyState};
    let caps = [Capacity(1024); 6];
    let (policies, mut driver) =
        CpufreqCore::<EmulatedDriver>::build(&JUNO, &caps, Nanos(0), |p| {
            EmulatedDriver::new(p, true)
        })
        .unwrap();
    let mut big = PolicyState::new(policies[0].clone());
    big.set_governor(&mut driver, Governor::Schedutil, Nanos(0));
    let lat = big.policy().transition_latency_ns;
    let (lo, hi) = (
        big.policy().table().first().unwrap().frequency,
        big.policy().table().last().unwrap().frequency,
    );
    // Request lo, let it complete (CPU A polls it), then request hi and let that complete (CPU
    // B polls it); B reaches the policy first.
    big.set_limits(&mut driver, lo, lo, Nanos(1_000)).unwrap();
    let a = driver.poll(Nanos(1_000 + lat)).unwrap();
    big.set_limits(&mut driver, hi, hi, Nanos(2_000 + lat))
        .unwrap();
    let b = driver.poll(Nanos(2_000 + 2 * lat)).unwrap();
    assert_eq!((a.result, b.result), (Ok(lo), Ok(hi)));
    assert_eq!(big.complete(b, Khz(0)), Some(hi));
    assert_eq!(
        big.complete(a, Khz(0)),
        None,
        "the stale completion moved the policy"
    );
    assert_eq!(big.policy().cur(), hi);
    assert_eq!(big.last_completion().unwrap().requested, hi);
    // In order, both apply.
    big.set_limits(&mut driver, lo, lo, Nanos(3_000 + 2 * lat))
        .unwrap();
    let c = driver.poll(Nanos(3_000 + 3 * lat)).unwrap();
    assert_eq!(big.complete(c, Khz(0)), Some(lo));
    assert_eq!(big.policy().cur(), lo);
}
