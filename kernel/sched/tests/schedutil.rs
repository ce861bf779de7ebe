//! schedutil tests. Every expected frequency is worked out by hand from the formulas of
//! Linux v6.12 `kernel/sched/cpufreq_schedutil.c` (`map_util_perf`, `get_next_freq`) in the
//! comment next to it:
//! `perf = max(min, min(max, util + util/4))`, `raw = 1_200_000 kHz × perf / 1024`,
//! then the lowest Juno r2 big OPP (600 / 1000 / 1200 MHz) at or above `raw`.

use asym_sched::cpu_util::RqNonCfsUtil;
use asym_sched::cpufreq::{CpufreqPolicy, Governor};
use asym_sched::features::{Feature, SchedFeatures};
use asym_sched::rq::RqSnapshot;
use asym_sched::schedutil::{SugovPolicy, UpdateFlags, IOWAIT_BOOST_MIN};
use asym_sched::topology::{BoardDesc, CpuDesc, OppDesc, PerfDomainDesc};
use asym_sched::types::{Capacity, CpuId, Khz, Nanos, Util};
use asym_sched::uclamp::ClampRange;

const fn cpu(mpidr: u64, pd: u16) -> CpuDesc {
    CpuDesc {
        mpidr,
        cluster: pd,
        perf_domain: pd,
        capacity_dmips_mhz: None,
        dynamic_power_coefficient: Some(450),
        core: "test",
    }
}

/// Juno r2's OPP tables (`asym_boards` lists the big cluster first).
const BIG_OPPS: &[OppDesc] = asym_boards::JUNO_R2.perf_domains[0].opps;
const LITTLE_OPPS: &[OppDesc] = asym_boards::JUNO_R2.perf_domains[1].opps;

/// Juno r2's big cluster: two CPUs sharing one policy, 1450 µs latency → 2175 µs rate limit.
const JUNO_BIG: BoardDesc = BoardDesc {
    name: "juno-big",
    cpus: &[cpu(0, 0), cpu(1, 0)],
    perf_domains: &[PerfDomainDesc {
        name: "big",
        opps: BIG_OPPS,
        transition_latency_ns: 1_450_000,
    }],
};

/// One CPU alone in its policy (the `sugov_update_single_freq` path).
const SINGLE: BoardDesc = BoardDesc {
    name: "single",
    cpus: &[cpu(0, 0)],
    perf_domains: &[PerfDomainDesc {
        name: "one",
        opps: BIG_OPPS,
        transition_latency_ns: 1_450_000,
    }],
};

const fn mhz(m: u32) -> Khz {
    Khz(m * 1000)
}

const MS: u64 = 1_000_000;

/// A CPU of capacity 1024 whose root cfs_rq has `util_avg = runnable_avg = util`.
fn inp(util: u32) -> RqSnapshot {
    cap_inp(util, 1024)
}

fn cap_inp(util: u32, cap: u32) -> RqSnapshot {
    let mut i = RqSnapshot::idle(CpuId(0), Capacity(cap));
    i.util.cfs.util_avg = Util(util);
    i.util.cfs.runnable_avg = Util(util);
    i
}

fn with_runnable(mut i: RqSnapshot, runnable: u32) -> RqSnapshot {
    i.util.cfs.runnable_avg = Util(runnable);
    i
}

fn with_other(mut i: RqSnapshot, other: RqNonCfsUtil) -> RqSnapshot {
    i.non_cfs = other;
    i
}

fn setup(board: &BoardDesc) -> (CpufreqPolicy, SugovPolicy) {
    let p = CpufreqPolicy::new(board, 0, Nanos(0)).unwrap();
    let s = SugovPolicy::new(&p);
    (p, s)
}

/// One update of CPU 0 at 10 ms with `cpu0` as its input and CPU 1 idle.
fn freq_for(cpu0: RqSnapshot, features: SchedFeatures, uclamp_used: bool) -> Option<Khz> {
    let (mut p, mut s) = setup(&JUNO_BIG);
    s.update(
        &mut p,
        Nanos(10 * MS),
        CpuId(0),
        UpdateFlags::NONE,
        features,
        uclamp_used,
        |c| {
            if c == CpuId(0) {
                cpu0
            } else {
                inp(0)
            }
        },
    )
}

#[test]
fn picks_the_opp_linux_would_for_a_table_of_cases() {
    let on = SchedFeatures::default();
    let off = SchedFeatures::default().with(Feature::RUNNABLE_BOOST, false);
    let uclamp = |util, min, max| RqSnapshot {
        rq_clamp: ClampRange {
            min: Util(min),
            max: Util(max),
        },
        ..inp(util)
    };
    let cases: &[(&str, RqSnapshot, SchedFeatures, Khz)] = &[
        // 300 → 375 → 1.2e6 × 375 / 1024 = 439_453 kHz → 600 MHz.
        ("util 300", inp(300), on, mhz(600)),
        // 409 → 511 → 598_828 → 600 MHz (just below the first OPP).
        ("util 409", inp(409), on, mhz(600)),
        // 410 → 512 → 600_000 → exactly 600 MHz.
        ("util 410", inp(410), on, mhz(600)),
        // 411 → 513 → 601_171 → 1000 MHz.
        ("util 411", inp(411), on, mhz(1000)),
        // 500 → 625 → 732_421 → 1000 MHz.
        ("util 500", inp(500), on, mhz(1000)),
        // 682 → 852 → 998_437 → 1000 MHz.
        ("util 682", inp(682), on, mhz(1000)),
        // 700 → 875 → 1_025_390 → 1200 MHz.
        ("util 700", inp(700), on, mhz(1200)),
        // 1024 → 1280, capped at max = 1024 → 1_200_000 → 1200 MHz.
        ("util 1024", inp(1024), on, mhz(1200)),
        // uclamp min 900: max(900, min(1024, 500)) = 900 → 1_054_687 → 1200 MHz.
        ("uclamp_min 900", uclamp(400, 900, 1024), on, mhz(1200)),
        // uclamp max 400: 800 → 1000 capped to 400 → 468_750 → 600 MHz.
        ("uclamp_max 400", uclamp(800, 0, 400), on, mhz(600)),
        // uclamp max 700 with util 700: 875 capped to 700 → 820_312 → 1000 MHz.
        ("uclamp_max 700", uclamp(700, 0, 700), on, mhz(1000)),
        // min 600 > max 300: max(600, min(300, 125)) = 600 → 703_125 → 1000 MHz.
        ("uclamp min>max", uclamp(100, 600, 300), on, mhz(1000)),
        // Runnable boost on: cpu_util_cfs_boost 600 → 750 → 878_906 → 1000 MHz.
        (
            "runnable boost on",
            with_runnable(inp(300), 600),
            on,
            mhz(1000),
        ),
        // Runnable boost off: cpu_util_cfs 300 → 600 MHz.
        (
            "runnable boost off",
            with_runnable(inp(300), 600),
            off,
            mhz(600),
        ),
        // irq 256: 512 × (1024 − 256) / 1024 + 256 = 640 → 800, min 256 → 937_500 → 1000.
        (
            "irq",
            with_other(
                inp(512),
                RqNonCfsUtil {
                    irq: Util(256),
                    ..Default::default()
                },
            ),
            on,
            mhz(1000),
        ),
        // irq ≥ capacity: everything is 1024 → 1200 MHz.
        (
            "irq saturated",
            with_other(
                inp(0),
                RqNonCfsUtil {
                    irq: Util(1024),
                    ..Default::default()
                },
            ),
            on,
            mhz(1200),
        ),
        // RT runnable without uclamp: min = capacity → 1200 MHz at zero util.
        (
            "rt runnable",
            with_other(
                inp(0),
                RqNonCfsUtil {
                    rt_runnable: true,
                    ..Default::default()
                },
            ),
            on,
            mhz(1200),
        ),
        // RT runnable with uclamp in use: only RT util counts: 100 + 300 = 400 → 500
        // → 585_937 → 600 MHz.
        (
            "rt with uclamp",
            with_other(
                uclamp(100, 0, 1024),
                RqNonCfsUtil {
                    rt_runnable: true,
                    rt: Util(300),
                    ..Default::default()
                },
            ),
            on,
            mhz(600),
        ),
        // DL: util 100 + dl 200 = 300 → 375; min = bw 200 → 375 → 600 MHz.
        (
            "dl",
            with_other(
                inp(100),
                RqNonCfsUtil {
                    dl: Util(200),
                    dl_bw: Util(200),
                    ..Default::default()
                },
            ),
            on,
            mhz(600),
        ),
        // DL bandwidth 700 as the floor: max(700, (100 + 50) × 1.25 = 187) = 700 →
        // 820_312 → 1000 MHz.
        (
            "dl bandwidth floor",
            with_other(
                inp(100),
                RqNonCfsUtil {
                    dl: Util(50),
                    dl_bw: Util(700),
                    ..Default::default()
                },
            ),
            on,
            mhz(1000),
        ),
    ];
    for (name, input, features, want) in cases {
        // `uclamp_is_used()` in the cases that name uclamp.
        let uclamp_used = name.contains("uclamp");
        assert_eq!(
            freq_for(*input, *features, uclamp_used),
            Some(*want),
            "case {name}"
        );
    }
}

#[test]
fn the_domain_follows_its_busiest_cpu() {
    let (mut p, mut s) = setup(&JUNO_BIG);
    let f = SchedFeatures::default();
    // CPU 0 at util 100 triggers, CPU 1 is at 700: 700 → 1200 MHz.
    let utils = [100, 700];
    let got = s.update(
        &mut p,
        Nanos(10 * MS),
        CpuId(0),
        UpdateFlags::NONE,
        f,
        false,
        |c| inp(utils[c.index()]),
    );
    assert_eq!(got, Some(mhz(1200)));
    assert_eq!(s.cpu(CpuId(0)).unwrap().util, Util(125));
    assert_eq!(s.cpu(CpuId(1)).unwrap().util, Util(875));
    // CPU 1 drops to 400 (→ 500 → 585_937 → 600 MHz) after the rate limit; CPU 0 at 450
    // (→ 562 → 658_593 → 1000 MHz) now dominates.
    let utils = [450, 400];
    let got = s.update(
        &mut p,
        Nanos(20 * MS),
        CpuId(1),
        UpdateFlags::NONE,
        f,
        false,
        |c| inp(utils[c.index()]),
    );
    assert_eq!(got, Some(mhz(1000)));
}

#[test]
fn rate_limit_holds_back_changes_and_limit_changes_bypass_it() {
    let (mut p, mut s) = setup(&JUNO_BIG);
    let f = SchedFeatures::default();
    assert_eq!(s.rate_limit_us(), 2175);
    let t0 = 10 * MS;
    let up = |s: &mut SugovPolicy, p: &mut CpufreqPolicy, t: u64, util: u32| {
        s.update(p, Nanos(t), CpuId(0), UpdateFlags::NONE, f, false, |_| {
            inp(util)
        })
    };
    assert_eq!(up(&mut s, &mut p, t0, 700), Some(mhz(1200)));
    // Within 2175 µs nothing changes, however low util goes.
    assert_eq!(up(&mut s, &mut p, t0 + 1_000_000, 100), None);
    assert_eq!(up(&mut s, &mut p, t0 + 2_174_999, 100), None);
    // At exactly rate_limit_us the change goes through.
    assert_eq!(up(&mut s, &mut p, t0 + 2_175_000, 100), Some(mhz(600)));
    let t1 = t0 + 2_175_000;
    // Same frequency again after the limit: no request (next_freq unchanged).
    assert_eq!(up(&mut s, &mut p, t1 + 3 * MS, 100), None);
    // A limit change 100 µs after the last update bypasses the rate limit.
    let t2 = t1 + 3 * MS;
    assert_eq!(up(&mut s, &mut p, t2, 700), Some(mhz(1200)));
    assert_eq!(p.set_limits(mhz(600), mhz(1000)), Ok(Some(mhz(1000))));
    assert_eq!(up(&mut s, &mut p, t2 + 100_000, 700), Some(mhz(1000)));
    // And only once: the next update within the window is rate limited again.
    assert_eq!(up(&mut s, &mut p, t2 + 200_000, 100), None);
    // need_freq_update: a limits change that leaves the frequency as it is still
    // produces a request (the driver is told about new limits).
    p.set_limits(mhz(600), mhz(1000)).unwrap();
    assert_eq!(up(&mut s, &mut p, t2 + 300_000, 700), Some(mhz(1000)));
}

#[test]
fn rising_dl_bandwidth_bypasses_the_rate_limit() {
    let (mut p, mut s) = setup(&JUNO_BIG);
    let f = SchedFeatures::default();
    let t0 = 10 * MS;
    let got = s.update(
        &mut p,
        Nanos(t0),
        CpuId(0),
        UpdateFlags::NONE,
        f,
        false,
        |_| inp(100),
    );
    assert_eq!(got, Some(mhz(600)));
    // 1 ms later a DL task adds 800 of bandwidth: bw 800 > bw_min 0 → bypass;
    // max(800, …) → 937_500 → 1000 MHz.
    let dl = with_other(
        inp(100),
        RqNonCfsUtil {
            dl_bw: Util(800),
            dl: Util(100),
            ..Default::default()
        },
    );
    let got = s.update(
        &mut p,
        Nanos(t0 + MS),
        CpuId(0),
        UpdateFlags::NONE,
        f,
        false,
        |_| dl,
    );
    assert_eq!(got, Some(mhz(1000)));
}

#[test]
fn iowait_boost_ramps_128_256_512_1024_and_decays() {
    let (mut p, mut s) = setup(&JUNO_BIG);
    s.set_rate_limit_us(0);
    let f = SchedFeatures::default();
    let mut t = 10 * MS;
    let step = |s: &mut SugovPolicy, p: &mut CpufreqPolicy, t: u64, flags| {
        let r = s.update(p, Nanos(t), CpuId(0), flags, f, false, |_| inp(0));
        (s.cpu(CpuId(0)).unwrap().iowait_boost, r)
    };
    // Zero util, so the frequency is the boost's: B × 1.25 capped at 1024.
    // 128 → 160 → 187_500 → 600; 256 → 320 → 600; 512 → 640 → 750_000 → 1000;
    // 1024 → 1280 capped 1024 → 1200.
    let want = [
        (IOWAIT_BOOST_MIN, Some(mhz(600))),
        (256, None),
        (512, Some(mhz(1000))),
        (1024, Some(mhz(1200))),
        (1024, None),
    ];
    for (i, w) in want.iter().enumerate() {
        assert_eq!(
            step(&mut s, &mut p, t, UpdateFlags::IOWAIT),
            *w,
            "iowait step {i}"
        );
        t += MS;
    }
    // No more iowait wake-ups, updates within a tick: halve at each evaluation.
    let want = [
        (512, Some(mhz(1000))),
        (256, Some(mhz(600))),
        (128, None),
        (0, None),
    ];
    for (i, w) in want.iter().enumerate() {
        assert_eq!(
            step(&mut s, &mut p, t, UpdateFlags::NONE),
            *w,
            "decay step {i}"
        );
        t += MS;
    }
    // Ramp again, then a gap longer than a tick (4 ms) resets the boost outright.
    for _ in 0..4 {
        step(&mut s, &mut p, t, UpdateFlags::IOWAIT);
        t += MS;
    }
    assert_eq!(s.cpu(CpuId(0)).unwrap().iowait_boost, 1024);
    t += 4 * MS + 1;
    assert_eq!(step(&mut s, &mut p, t, UpdateFlags::NONE).0, 0);
    // After a gap, an iowait wake-up restarts from IOWAIT_BOOST_MIN.
    for _ in 0..3 {
        step(&mut s, &mut p, t, UpdateFlags::IOWAIT);
        t += MS;
    }
    t += 5 * MS;
    assert_eq!(
        step(&mut s, &mut p, t, UpdateFlags::IOWAIT).0,
        IOWAIT_BOOST_MIN
    );
}

#[test]
fn iowait_boost_is_scaled_by_the_cpu_capacity() {
    // A LITTLE CPU of capacity 383 with a full boost: 1024 × 383 >> 10 = 383, and the
    // ceiling is 383 too → raw = 950_000 × 383 / 383 = 950 MHz (top of Juno LITTLE).
    const LITTLE: BoardDesc = BoardDesc {
        name: "little",
        cpus: &[cpu(0, 0), cpu(1, 0)],
        perf_domains: &[PerfDomainDesc {
            name: "little",
            opps: LITTLE_OPPS,
            transition_latency_ns: 0,
        }],
    };
    let (mut p, mut s) = setup(&LITTLE);
    s.set_rate_limit_us(0);
    let f = SchedFeatures::default();
    let little = |_| cap_inp(0, 383);
    let mut last = None;
    for i in 0..4 {
        last = s
            .update(
                &mut p,
                Nanos((10 + i) * MS),
                CpuId(0),
                UpdateFlags::IOWAIT,
                f,
                false,
                little,
            )
            .or(last);
    }
    assert_eq!(s.cpu(CpuId(0)).unwrap().iowait_boost, 1024);
    assert_eq!(last, Some(mhz(950)));
}

#[test]
fn single_cpu_policy_holds_the_frequency_of_a_busy_cpu() {
    let (mut p, mut s) = setup(&SINGLE);
    let f = SchedFeatures::default();
    let busy = |util, idle_calls| RqSnapshot {
        idle_calls,
        ..inp(util)
    };
    let t0 = 10 * MS;
    let r = s.update(
        &mut p,
        Nanos(t0),
        CpuId(0),
        UpdateFlags::NONE,
        f,
        true,
        |_| busy(700, 5),
    );
    assert_eq!(r, Some(mhz(1200)));
    // Util fell to 100 but the CPU never went idle (idle_calls unchanged): hold 1200.
    let r = s.update(
        &mut p,
        Nanos(t0 + 5 * MS),
        CpuId(0),
        UpdateFlags::NONE,
        f,
        true,
        |_| busy(100, 5),
    );
    assert_eq!(r, None);
    assert_eq!(s.next_freq, mhz(1200));
    // It has been idle since: drop to 600.
    let r = s.update(
        &mut p,
        Nanos(t0 + 10 * MS),
        CpuId(0),
        UpdateFlags::NONE,
        f,
        true,
        |_| busy(100, 6),
    );
    assert_eq!(r, Some(mhz(600)));
    // Capped by uclamp max (util 700 ≥ max 400): never held.
    let (mut p, mut s) = setup(&SINGLE);
    let capped = |util, ucmax| RqSnapshot {
        rq_clamp: ClampRange {
            min: Util(0),
            max: Util(ucmax),
        },
        ..busy(util, 5)
    };
    let r = s.update(
        &mut p,
        Nanos(t0),
        CpuId(0),
        UpdateFlags::NONE,
        f,
        true,
        |_| capped(700, 1024),
    );
    assert_eq!(r, Some(mhz(1200)));
    let r = s.update(
        &mut p,
        Nanos(t0 + 5 * MS),
        CpuId(0),
        UpdateFlags::NONE,
        f,
        true,
        |_| capped(700, 400),
    );
    assert_eq!(r, Some(mhz(600)));
}

#[test]
fn other_governors_and_foreign_cpus_are_ignored() {
    let (mut p, mut s) = setup(&JUNO_BIG);
    let f = SchedFeatures::default();
    assert_eq!(
        s.update(
            &mut p,
            Nanos(10 * MS),
            CpuId(7),
            UpdateFlags::NONE,
            f,
            false,
            |_| inp(900)
        ),
        None
    );
    p.set_governor(Governor::Powersave);
    assert_eq!(
        s.update(
            &mut p,
            Nanos(10 * MS),
            CpuId(0),
            UpdateFlags::NONE,
            f,
            false,
            |_| inp(900)
        ),
        None
    );
}

// ---------------------------------------------------------------------------------------
// Closed loop at policy level: PELT (`pelt`) → schedutil → cpufreq → emulated driver,
// one always-running task on HiKey (one 8-CPU policy, OPPs 208/432/729/960/1200 MHz, 208
// inefficient, 500 µs latency → 750 µs rate limit). Seed 001: "time to reach max OPP when
// starting from a null utilization decreases from 223 ms with [contribution scaling] down
// to 121 ms with [clock_pelt]". The simulator scenario repeats this with the full engine.
// ---------------------------------------------------------------------------------------

use asym_sched::cpu_util::{CfsRqUtil, CpuSnapshot};
use asym_sched::cpufreq::driver::{CpufreqDriver, EmulatedDriver};
use asym_sched::em::EmPerfDomain;
use asym_sched::pelt::{CfsRqAvg, CfsRqState, PeltClock, PeltInvariance};

use asym_boards::HIKEY as HIKEY_BOARD;

/// Run the loop: CPU 0 idle until `start`, then always running. Updates come at every
/// 4 ms tick (HZ=250; an always-running task's PELT update is the tick's). Returns the
/// time from `start` until the policy runs at 1200 MHz, in ns.
fn time_to_max_opp(invariance: PeltInvariance) -> u64 {
    let mut pol = CpufreqPolicy::new(&HIKEY_BOARD, 0, Nanos(0)).unwrap();
    let em = EmPerfDomain::new(&HIKEY_BOARD, 0, &[Capacity(1024); 8]).unwrap();
    pol.set_efficiencies(&em);
    let mut sg = SugovPolicy::new(&pol);
    let mut drv = EmulatedDriver::new(std::slice::from_ref(&pol), true);
    let features = SchedFeatures::default();
    let mut clock = PeltClock::new(Nanos(0), invariance);
    let mut cfs = CfsRqAvg::default();
    let (step, tick, start) = (50_000u64, 4 * MS, 20 * MS);
    let mut now = 0;
    while now < 2_000 * MS {
        now += step;
        let running = now > start;
        let fscale = Capacity(pol.arch_scale_freq_capacity());
        clock.update_rq_clock_pelt(Nanos(step), Capacity(1024), fscale, !running);
        if now % tick == 0 {
            let rq = CfsRqState {
                load_weight: if running { 1024 } else { 0 },
                h_nr_running: running as u64,
                curr: running,
            };
            cfs.update_cfs_rq(clock.rq_clock_pelt(), rq, clock.contrib_scale());
            let snap = CpuSnapshot {
                cpu: CpuId(0),
                capacity_orig: Capacity(1024),
                cfs: CfsRqUtil {
                    util_avg: Util(cfs.avg.util_avg as u32),
                    runnable_avg: Util(cfs.avg.runnable_avg as u32),
                    util_est: Util(0),
                },
            };
            let input = |c: CpuId| {
                if c == CpuId(0) {
                    RqSnapshot {
                        util: snap,
                        ..RqSnapshot::idle(c, Capacity(1024))
                    }
                } else {
                    RqSnapshot::idle(c, Capacity(1024))
                }
            };
            let r = sg.update(
                &mut pol,
                Nanos(now),
                CpuId(0),
                UpdateFlags::NONE,
                features,
                false,
                input,
            );
            if let Some(f) = r {
                drv.target(&pol, f, Nanos(now)).unwrap();
            }
        }
        while let Some(c) = drv.poll(Nanos(now)) {
            pol.freq_transition(c.result.unwrap(), c.at);
        }
        if running && pol.cur() == mhz(1200) {
            return now - start;
        }
        if !running && now > 10 * MS {
            // Idle at zero util, schedutil has settled at 432 MHz (208 is inefficient).
            assert_eq!(pol.cur(), mhz(432), "idle policy at {now} ns");
        }
    }
    panic!("never reached 1200 MHz ({invariance:?})");
}

/// Independent oracle: the continuous PELT ramp `util(n) = 1024 (1 − y^n)`, y^32 = ½, with
/// the frequency switching at the hand-computed util thresholds (util + util/4 →
/// 1.2 GHz × perf / 1024 → next OPP): util ≥ 296 leaves 432 MHz (296 + 74 = 370 → 433.6
/// MHz), ≥ 499 leaves 729 (499 + 124 = 623 → 730.1), ≥ 656 leaves 960 (656 + 164 = 820 →
/// 960.9). clock_pelt: PELT time runs at f/fmax, so each segment's PELT periods are
/// divided by that speed. Contribution scaling: util tends to 1024·f/fmax at each OPP.
fn oracle_ms(invariance: PeltInvariance) -> f64 {
    let period_ms = 1.048576;
    let steps = [
        (0.0, 296.0, 432.0),
        (296.0, 499.0, 729.0),
        (499.0, 656.0, 960.0),
    ];
    let mut periods = 0.0;
    for (u0, u1, f) in steps {
        let s: f64 = f / 1200.0;
        periods += match invariance {
            PeltInvariance::ClockPelt => {
                let n = |u: f64| 32.0 * (1024.0 / (1024.0 - u)).log2();
                (n(u1) - n(u0)) / s
            }
            PeltInvariance::Contribution => {
                let a = 1024.0 * s;
                32.0 * ((a - u0) / (a - u1)).log2()
            }
        };
    }
    periods * period_ms
}

#[test]
fn hikey_time_to_max_opp_from_zero_util_in_both_pelt_modes() {
    let cp = time_to_max_opp(PeltInvariance::ClockPelt) as f64 / 1e6;
    let contrib = time_to_max_opp(PeltInvariance::Contribution) as f64 / 1e6;
    let (o_cp, o_contrib) = (
        oracle_ms(PeltInvariance::ClockPelt),
        oracle_ms(PeltInvariance::Contribution),
    );
    println!(
        "hikey time to 1200 MHz from zero util: clock_pelt {cp:.1} ms (oracle {o_cp:.1}), \
         contribution scaling {contrib:.1} ms (oracle {o_contrib:.1})"
    );
    // Discrete effects only delay: three switches, each seen up to one tick (4 ms) late
    // plus the 0.5 ms latency, plus PELT's 1 ms period granularity.
    for (got, want) in [(cp, o_cp), (contrib, o_contrib)] {
        assert!(
            got >= want - 2.0 && got <= want + 3.0 * 4.5 + 3.0,
            "{got} vs oracle {want}"
        );
    }
    // Seed 001's direction: clock_pelt reaches the top OPP much sooner.
    assert!(
        cp < 0.75 * contrib,
        "clock_pelt {cp} ms vs contribution {contrib} ms"
    );
}

mod closed_form {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// For one update of a fresh policy, the chosen frequency equals the closed form
        /// `lowest OPP ≥ clamp(fmax × clamp(u + ⌊u/4⌋, lo, hi) / 1024, min, max)` with
        /// `lo = uclamp_min`, `hi = min(1024, uclamp_max)` (`max(lo, min(hi, …))`), where
        /// `u` is the busiest CPU's `max(util_avg, runnable_avg)` (boost on) or `util_avg`.
        #[test]
        fn one_update_matches_the_closed_form(
            utils in prop::collection::vec((0u32..1100, 0u32..2000), 2),
            ucmin in 0u32..=1024,
            ucmax in 0u32..=1024,
            boost in any::<bool>(),
            lim in (0u32..3, 0u32..3),
        ) {
            let (mut p, mut s) = setup(&JUNO_BIG);
            let opps = [600_000u32, 1_000_000, 1_200_000];
            let (lo_i, hi_i) = (lim.0.min(lim.1) as usize, lim.0.max(lim.1) as usize);
            p.set_limits(Khz(opps[lo_i]), Khz(opps[hi_i])).unwrap();
            let features = SchedFeatures::default().with(Feature::RUNNABLE_BOOST, boost);
            let clamp = ClampRange { min: Util(ucmin), max: Util(ucmax) };
            let input = |c: CpuId| {
                let (u, r) = utils[c.index()];
                RqSnapshot {
                    rq_clamp: clamp,
                                ..with_runnable(inp(u), r)
                }
            };
            let got = s.update(&mut p, Nanos(10 * MS), CpuId(0), UpdateFlags::NONE, features, true, input);
            let perf = |&(u, r): &(u32, u32)| -> f64 {
                let u = (if boost { u.max(r) } else { u }).min(1024) as f64;
                let headroom = u + (u / 4.0).floor();
                let hi = (ucmax.min(1024)) as f64;
                (ucmin as f64).max(headroom.min(hi))
            };
            let need = utils.iter().map(perf).fold(0.0, f64::max);
            let raw = (1_200_000.0 * need / 1024.0).floor();
            let raw = raw.clamp(opps[lo_i] as f64, opps[hi_i] as f64);
            let want = opps.iter().copied().find(|&f| f as f64 >= raw).unwrap();
            prop_assert_eq!(got, Some(Khz(want)));
        }
    }
}
