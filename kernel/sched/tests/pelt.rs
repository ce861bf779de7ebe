//! PELT against independent oracles: the geometric series (f64), the truncating integer
//! recurrence, and seed 001's ramp-time table.

use asym_sched::pelt::{
    decay_load, CfsRqAvg, CfsRqState, EntityState, PeltClock, PeltInvariance, SchedAvg, DO_ATTACH,
    LOAD_AVG_MAX, LOAD_AVG_PERIOD, PELT_MIN_DIVIDER, PELT_PERIOD_NS, RUNNABLE_AVG_YN_INV,
};
use asym_sched::types::{Capacity, Nanos};
use proptest::prelude::*;

const MS: u64 = 1_000_000;
const TASK: EntityState = EntityState {
    weight: 1024,
    on_rq: true,
    running: true,
    sched_delayed: false,
};

#[test]
fn load_avg_max_is_the_fixed_point_of_the_truncating_recurrence() {
    let inv1 = RUNNABLE_AVG_YN_INV[1] as u64;
    let mut max = 0u64;
    let mut iterations = 0;
    loop {
        let next = ((max * inv1) >> 32) + 1024;
        if next == max {
            break;
        }
        max = next;
        iterations += 1;
        assert!(iterations < 10_000, "recurrence does not converge");
    }
    assert_eq!(max, LOAD_AVG_MAX as u64);
    assert_eq!(PELT_MIN_DIVIDER, LOAD_AVG_MAX - 1024);
    // The real-valued series is larger: truncation loses a little every step.
    let y = 0.5f64.powf(1.0 / 32.0);
    assert!((1024.0 / (1.0 - y)) > max as f64 + 40.0);
}

#[test]
fn decay_table_matches_the_real_y_n_within_2() {
    let y = 0.5f64.powf(1.0 / LOAD_AVG_PERIOD as f64);
    for (n, &v) in RUNNABLE_AVG_YN_INV.iter().enumerate() {
        let exact = ((u32::MAX as f64) * y.powi(n as i32)).floor();
        let diff = (exact - v as f64).abs();
        assert!(diff <= 2.0, "inv[{n}] = {v:#x}, exact {exact}");
    }
}

#[test]
fn decay_load_halves_every_32_periods_and_cuts_off() {
    let v = 1u64 << 40;
    for k in 1..10u64 {
        let got = decay_load(v, 32 * k) as f64;
        let want = v as f64 / 2f64.powi(k as i32);
        assert!((got - want).abs() / want < 1e-8, "k={k}");
    }
    let y = 0.5f64.powf(1.0 / 32.0);
    for n in [1u64, 5, 31, 33, 100, 1000] {
        let got = decay_load(v, n) as f64;
        let want = v as f64 * y.powi(n as i32);
        // Truncation: relative 1e-6 or, after the big shifts, one or two units.
        assert!(
            (got - want).abs() <= (want * 1e-6).max(2.0),
            "n={n}: {got} vs {want}"
        );
    }
    assert_eq!(decay_load(u64::MAX, 32 * 63 + 1), 0);
    assert_ne!(decay_load(u64::MAX, 32 * 62), 0);
}

/// Always-running task from util 0; returns the wall time (ns) at which util_avg first
/// reaches each target, or None. `step_ns` is the update cadence (wall time).
fn ramp(
    invariance: PeltInvariance,
    cap: u32,
    freq: u32,
    step_ns: u64,
    horizon_ns: u64,
    targets: &[u64],
) -> Vec<Option<u64>> {
    let start = 1_000 * MS;
    let mut clock = PeltClock::new(Nanos(start), invariance);
    let mut se = SchedAvg {
        last_update_time: clock.rq_clock_pelt(),
        ..SchedAvg::default()
    };
    let mut hit = vec![None; targets.len()];
    let mut t = 0;
    while t < horizon_ns {
        t += step_ns;
        clock.update_rq_clock_pelt(Nanos(step_ns), Capacity(cap), Capacity(freq), false);
        se.update_se(clock.rq_clock_pelt(), TASK, clock.contrib_scale());
        for (i, &target) in targets.iter().enumerate() {
            if hit[i].is_none() && se.util_avg >= target {
                hit[i] = Some(t);
            }
        }
        assert!(se.util_avg <= 1024);
    }
    hit
}

fn periods(ns: Option<u64>) -> f64 {
    ns.expect("target never reached") as f64 / PELT_PERIOD_NS as f64
}

fn assert_ramp(hit: &[Option<u64>], ranges: &[(f64, f64)], what: &str) {
    let got: Vec<String> = hit.iter().map(|&h| format!("{:.2}", periods(h))).collect();
    println!(
        "{what}: periods to {:?} = {}",
        &TARGETS[..hit.len()],
        got.join(" / ")
    );
    for (i, (&h, &(lo, hi))) in hit.iter().zip(ranges).enumerate() {
        let p = periods(h);
        assert!(
            (lo..=hi).contains(&p),
            "{what}: target #{i} reached after {p:.2} periods, want {lo}..={hi}"
        );
    }
}

const TARGETS: [u64; 3] = [256, 486, 972];

#[test]
fn full_capacity_ramp_matches_seed_001() {
    let ranges = [(13.0, 15.0), (29.0, 31.0), (136.0, 139.0)];
    for inv in [PeltInvariance::ClockPelt, PeltInvariance::Contribution] {
        for step in [MS, PELT_PERIOD_NS] {
            let hit = ramp(inv, 1024, 1024, step, 400 * MS, &TARGETS);
            assert_ramp(&hit, &ranges, &format!("{inv:?} step {step}"));
        }
    }
}

#[test]
fn half_capacity_clock_pelt_ramp_matches_seed_001() {
    let ranges = [(26.0, 29.0), (59.0, 62.0), (273.0, 278.0)];
    // Half capacity two ways: a half-size CPU at fmax, a full-size CPU at half fmax.
    for (cap, freq) in [(512, 1024), (1024, 512)] {
        for step in [MS, PELT_PERIOD_NS] {
            let hit = ramp(
                PeltInvariance::ClockPelt,
                cap,
                freq,
                step,
                600 * MS,
                &TARGETS,
            );
            assert_ramp(&hit, &ranges, &format!("cap {cap} freq {freq} step {step}"));
        }
    }
}

#[test]
fn half_capacity_contribution_ramp_matches_seed_001() {
    let ranges = [(31.0, 33.0), (136.0, 139.0)];
    for (cap, freq) in [(512, 1024), (1024, 512)] {
        for step in [MS, PELT_PERIOD_NS] {
            let hit = ramp(
                PeltInvariance::Contribution,
                cap,
                freq,
                step,
                2000 * PELT_PERIOD_NS,
                &TARGETS,
            );
            assert_ramp(
                &hit[..2],
                &ranges,
                &format!("cap {cap} freq {freq} step {step}"),
            );
            assert_eq!(hit[2], None, "972 must be unreachable at half capacity");
        }
    }
}

/// One CPU, one periodic task, driven as the run queue does: wake-up (idle → busy),
/// ticks while running, sleep (busy → idle with `update_idle_rq_clock_pelt`).
///
/// Returns the task's util_avg averaged over *PELT time* (sampled every 50 µs of
/// `rq_clock_pelt` on a copy of the task's state, so the real trajectory keeps Linux's
/// update cadence), and its trough (at wake-up) and peak (at sleep) in the last period.
/// PELT time is the invariant axis: on a slow CPU the idle re-sync makes clock_pelt jump at
/// sleep, so a wall-clock average would skip the high part of the decay.
fn periodic_util(duty_pct: u64, cap: u32, freq: u32) -> (f64, u64, u64) {
    let period = 16 * MS;
    let tick = 100_000; // 100 µs update cadence (wall time)
    let grid = 50_000; // PELT-time sampling step
                       // Work in big-CPU-at-fmax time; wall run time stretches by 1024² / (cap × freq).
    let work = period * duty_pct / 100;
    let run = work * 1024 * 1024 / (cap as u64 * freq as u64);
    assert!(run < period, "infeasible duty");
    let mut clock = PeltClock::new(Nanos(1_000 * MS), PeltInvariance::ClockPelt);
    let mut cfs = CfsRqAvg::default();
    let mut se = SchedAvg::default();
    let (cap, freq) = (Capacity(cap), Capacity(freq));
    let busy = CfsRqState {
        load_weight: 1024,
        h_nr_running: 1,
        curr: true,
    };
    let idle = CfsRqState::default();
    let sleeping = EntityState {
        on_rq: false,
        running: false,
        sched_delayed: false,
        ..TASK
    };
    let (mut sum, mut samples) = (0u64, 0u64);
    let (mut trough, mut peak) = (0, 0);
    let mut next_sample = 0u64;
    let warmup = 60;
    // Sample a copy of `se` on the PELT-time grid up to `to`, in state `state`.
    let mut sample = |se: &SchedAvg, state: EntityState, to: u64, on: bool| {
        if next_sample == 0 {
            next_sample = to;
        }
        let mut copy = *se;
        while next_sample <= to {
            copy.update_se(next_sample, state, asym_sched::pelt::PeltScale::NONE);
            if on {
                sum += copy.util_avg;
                samples += 1;
            }
            next_sample += grid;
        }
    };
    for p in 0..warmup + 40 {
        let on = p >= warmup;
        // Wake-up: the idle time before it is accounted with the task blocked.
        let now = clock.rq_clock_pelt();
        sample(&se, sleeping, now, on);
        cfs.update_load_avg(
            now,
            &mut se,
            sleeping,
            idle,
            DO_ATTACH,
            clock.contrib_scale(),
        );
        trough = se.util_avg;
        let mut t = 0;
        while t < period {
            let step = tick.min(if t < run { run - t } else { period - t });
            let running = t < run;
            clock.update_rq_clock_pelt(Nanos(step), cap, freq, !running);
            t += step;
            let now = clock.rq_clock_pelt();
            let state = if running { TASK } else { sleeping };
            sample(&se, state, now, on);
            let rq = if running { busy } else { idle };
            cfs.update_load_avg(now, &mut se, state, rq, 0, clock.contrib_scale());
            if t == run {
                peak = se.util_avg;
                // Dequeue: the rq goes idle and clock_pelt catches up with clock_task.
                clock.update_idle_rq_clock_pelt(cfs.avg.util_sum as u64);
            }
        }
    }
    (sum as f64 / samples as f64, trough, peak)
}

#[test]
fn periodic_task_util_is_invariant_in_clock_pelt_mode() {
    // (capacity_orig, freq scale): Juno A72 at 1200/1000/600 MHz, Juno A53 at 950 MHz,
    // Juno A53 at 450 MHz, HiKey960 A53 at 1844 and 1021 MHz, half- and
    // three-quarter-size CPUs.
    let cpus = [
        (1024, 1024),
        (1024, 853),
        (1024, 512),
        (768, 1024),
        (512, 1024),
        (383, 1024),
        (383, 485),
        (462, 1024),
        (462, 567),
    ];
    let mut checked = 0;
    for duty in [10u64, 25, 50, 80] {
        let want = duty as f64 * 1024.0 / 100.0;
        // The same task on the biggest CPU at fmax: its peak/trough are the reference shape.
        let (_, ref_trough, ref_peak) = periodic_util(duty, 1024, 1024);
        for &(cap, freq) in &cpus {
            // Keep 10 % idle so the rq is not saturated (lost_idle_time stays out of it).
            if duty * 1024 * 1024 > 90 * cap as u64 * freq as u64 {
                continue;
            }
            let (mean, trough, peak) = periodic_util(duty, cap, freq);
            let what = format!("duty {duty}% on cap {cap} freq {freq}");
            println!("{what}: mean util {mean:.1} (want {want:.1}), trough {trough}, peak {peak}");
            assert!(
                (mean - want).abs() / want <= 0.02,
                "{what}: mean util {mean:.1}, want {want:.1}"
            );
            // Invariance of the whole waveform, not only its mean.
            for (got, reference) in [(trough, ref_trough), (peak, ref_peak)] {
                assert!(
                    got.abs_diff(reference) as f64 <= 0.02 * reference as f64 + 1.0,
                    "{what}: {got} vs {reference} on the big CPU at fmax"
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 20, "only {checked} combinations checked");
}

#[test]
fn saturated_rq_records_lost_idle_time() {
    let mut clock = PeltClock::new(Nanos(MS), PeltInvariance::ClockPelt);
    let mut se = SchedAvg {
        last_update_time: clock.rq_clock_pelt(),
        ..SchedAvg::default()
    };
    // Always running on a half-speed CPU for long enough to saturate util_sum.
    for _ in 0..2000 {
        clock.update_rq_clock_pelt(Nanos(MS), Capacity(1024), Capacity(512), false);
        se.update_se(clock.rq_clock_pelt(), TASK, clock.contrib_scale());
    }
    let lag = clock.clock_task - clock.clock_pelt;
    assert!(lag > 900 * MS);
    let before = clock.rq_clock_pelt();
    clock.update_idle_rq_clock_pelt(se.util_sum as u64);
    assert_eq!(clock.lost_idle_time, lag);
    // PELT time did not jump: nothing is decayed for idle time that never existed.
    assert_eq!(clock.rq_clock_pelt(), before);
    assert_eq!(clock.clock_pelt, clock.clock_task);

    // Not saturated: the lag is given back as idle time.
    let mut c2 = PeltClock::new(Nanos(MS), PeltInvariance::ClockPelt);
    c2.update_rq_clock_pelt(Nanos(10 * MS), Capacity(1024), Capacity(512), false);
    c2.update_idle_rq_clock_pelt(0);
    assert_eq!(c2.lost_idle_time, 0);
    assert_eq!(c2.rq_clock_pelt(), 11 * MS);
}

/// attach/detach/remove arithmetic (fair.c): exact sums against hand-derived values.
#[test]
fn attach_detach_and_remove_move_exactly_the_task_signals() {
    let scale = asym_sched::pelt::PeltScale::NONE;
    let mut clock = PeltClock::new(Nanos(MS), PeltInvariance::ClockPelt);
    let mut src = CfsRqAvg::default();
    let mut dst = CfsRqAvg::default();
    let mut a = SchedAvg::default();
    let mut b = SchedAvg::default();
    let busy = CfsRqState {
        load_weight: 2048,
        h_nr_running: 2,
        curr: true,
    };
    let sleeping = EntityState {
        on_rq: false,
        running: false,
        sched_delayed: false,
        ..TASK
    };
    let queued = EntityState {
        running: false,
        sched_delayed: false,
        ..TASK
    };
    src.update_load_avg(clock.rq_clock_pelt(), &mut a, TASK, busy, DO_ATTACH, scale);
    src.update_load_avg(
        clock.rq_clock_pelt(),
        &mut b,
        queued,
        busy,
        DO_ATTACH,
        scale,
    );
    for i in 0..100 {
        clock.update_rq_clock_pelt(Nanos(MS), Capacity(1024), Capacity(1024), false);
        let now = clock.rq_clock_pelt();
        let (sa, sb) = if i % 2 == 0 {
            (TASK, queued)
        } else {
            (queued, TASK)
        };
        src.update_load_avg(now, &mut a, sa, busy, 0, scale);
        src.update_load_avg(now, &mut b, sb, busy, 0, scale);
    }
    assert!(a.util_avg > 300 && b.util_avg > 300);
    let before = src.avg;
    let sum = (a.util_avg + b.util_avg) as f64;
    assert!(
        (before.util_avg as f64 - sum).abs() <= 0.01 * sum,
        "rq util = Σ task util"
    );
    // Queued migration: detach from src (DO_DETACH), attach to dst.
    let (a_util, a_run, a_load) = (a.util_avg, a.runnable_avg, a.load_avg);
    src.detach_entity_load_avg(&a, 1024);
    assert_eq!(src.avg.util_avg, before.util_avg - a_util);
    assert_eq!(src.avg.runnable_avg, before.runnable_avg - a_run);
    assert_eq!(src.avg.load_avg, before.load_avg - a_load);
    assert!(src.avg.util_sum as u64 >= src.avg.util_avg * PELT_MIN_DIVIDER as u64);

    dst.avg.last_update_time = clock.rq_clock_pelt();
    dst.avg.period_contrib = 123;
    dst.attach_entity_load_avg(&mut a, 1024);
    let divider = (PELT_MIN_DIVIDER + 123) as u64;
    assert_eq!(a.period_contrib, 123);
    assert_eq!(a.last_update_time, dst.avg.last_update_time);
    assert_eq!(a.util_sum as u64, a_util * divider);
    assert_eq!(a.runnable_sum, a_run * divider);
    assert_eq!(a.load_sum, a_load * divider / 1024);
    assert_eq!(dst.avg.util_avg, a_util);
    assert_eq!(dst.avg.util_sum as u64, a_util * divider);
    assert_eq!(dst.avg.load_avg, a_load);
    // The attached sums reproduce the averages under the new divider.
    let mut check = a;
    check.update_load_avg(1024);
    assert_eq!(check.util_avg, a_util);
    assert_eq!(check.runnable_avg, a_run);
    assert!(check.load_avg.abs_diff(a_load) <= 1);

    // Wake-up migration of a blocked task: remove from src, applied at its next update.
    let src_before = src.avg;
    src.update_load_avg(
        clock.rq_clock_pelt(),
        &mut b,
        sleeping,
        CfsRqState::default(),
        0,
        scale,
    );
    let src_before_util = src.avg.util_avg;
    src.remove_entity_load_avg(&mut b, 1024);
    assert_eq!(
        b.last_update_time, src.avg.last_update_time,
        "synced, still attached"
    );
    assert_eq!(src.removed.nr, 1);
    assert_eq!(src.avg.util_avg, src_before_util, "removal is deferred");
    let b_util = b.util_avg;
    src.update_cfs_rq_load_avg(clock.rq_clock_pelt(), CfsRqState::default(), scale);
    assert_eq!(src.removed.nr, 0);
    assert_eq!(src.avg.util_avg, src_before_util - b_util);
    assert!(src_before.util_avg >= b_util);
    // Removing both tasks leaves (nearly) nothing: the rq util was the sum of the two,
    // up to the rounding of separately truncated averages.
    assert!(
        src.avg.util_avg as f64 <= 0.01 * before.util_avg as f64,
        "left {} of {}",
        src.avg.util_avg,
        before.util_avg
    );
}

#[test]
fn post_init_util_is_a_share_of_the_spare_capacity() {
    let mut cfs = CfsRqAvg::default();
    let mut se = SchedAvg::default();
    // Empty rq: half the CPU's capacity.
    cfs.post_init_entity_util_avg(&mut se, 1024, Capacity(383));
    assert_eq!(se.util_avg, 191);
    assert_eq!(se.runnable_avg, 191);
    assert_eq!(se.last_update_time, 0);
    // rq util 400 with load 2047: share = 400 × 1024 / 2048 = 200, cap = (1024-400)/2 = 312.
    cfs.avg.util_avg = 400;
    cfs.avg.load_avg = 2047;
    let mut se = SchedAvg::default();
    cfs.post_init_entity_util_avg(&mut se, 1024, Capacity(1024));
    assert_eq!(se.util_avg, 200);
    // The divisor is load_avg + 1: 100 × 1024 / 1025 = 99.9 → 99.
    cfs.avg.util_avg = 100;
    cfs.avg.load_avg = 1024;
    let mut se = SchedAvg::default();
    cfs.post_init_entity_util_avg(&mut se, 1024, Capacity(1024));
    assert_eq!(se.util_avg, 99);
    cfs.avg.load_avg = 2047;
    // Little spare capacity caps it: cap = (1024-1000)/2 = 12.
    cfs.avg.util_avg = 1000;
    let mut se = SchedAvg::default();
    cfs.post_init_entity_util_avg(&mut se, 1024, Capacity(1024));
    assert_eq!(se.util_avg, 12);
    // No spare capacity: stays 0.
    cfs.avg.util_avg = 1024;
    let mut se = SchedAvg::default();
    cfs.post_init_entity_util_avg(&mut se, 1024, Capacity(1024));
    assert_eq!(se.util_avg, 0);
}

#[derive(Clone, Debug)]
struct Phase {
    run_us: u64,
    sleep_us: u64,
    cap: u32,
    freq: u32,
}

fn phase() -> impl Strategy<Value = Phase> {
    (0u64..50_000, 0u64..50_000, 1u32..=1024, 1u32..=1024).prop_map(|(r, s, c, f)| Phase {
        run_us: r,
        sleep_us: s,
        cap: c,
        freq: f,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random run/sleep/frequency sequences, both invariance modes: bounded signals and
    /// monotone decay while blocked.
    #[test]
    fn pelt_signals_stay_bounded(
        phases in prop::collection::vec(phase(), 1..40),
        contribution in any::<bool>(),
        tick_us in 100u64..4000,
    ) {
        let inv = if contribution { PeltInvariance::Contribution } else { PeltInvariance::ClockPelt };
        let mut clock = PeltClock::new(Nanos(MS), inv);
        let mut cfs = CfsRqAvg::default();
        let mut se = SchedAvg::default();
        let busy = CfsRqState { load_weight: 1024, h_nr_running: 1, curr: true };
        let sleeping = EntityState { on_rq: false, running: false, ..TASK };
        let bound_sum = (LOAD_AVG_MAX as u64) << 10;
        for ph in &phases {
            let (cap, freq) = (Capacity(ph.cap), Capacity(ph.freq));
            cfs.update_load_avg(clock.rq_clock_pelt(), &mut se, sleeping, CfsRqState::default(), DO_ATTACH, clock.contrib_scale());
            let mut t = 0;
            while t < ph.run_us {
                let d = tick_us.min(ph.run_us - t);
                t += d;
                clock.update_rq_clock_pelt(Nanos(d * 1000), cap, freq, false);
                cfs.update_load_avg(clock.rq_clock_pelt(), &mut se, TASK, busy, 0, clock.contrib_scale());
                prop_assert!(se.util_avg <= 1024);
                prop_assert!(se.runnable_avg <= 1024);
                prop_assert!(se.load_avg <= 1024);
                prop_assert!(se.util_sum as u64 <= bound_sum);
                prop_assert!(se.runnable_sum <= bound_sum);
                prop_assert!(se.load_sum <= LOAD_AVG_MAX as u64);
                prop_assert!(cfs.avg.util_avg <= 1024 + 1);
                if contribution {
                    // Contribution scaling caps util at the current compute capacity
                    // (plus what was accumulated before at other scales).
                    prop_assert!(se.util_avg <= 1024);
                }
            }
            clock.update_idle_rq_clock_pelt(cfs.avg.util_sum as u64);
            // While blocked the *sums* only decay. The averages divide by
            // PELT_MIN_DIVIDER + period_contrib, which changes between updates, so Linux's
            // integer averages may tick up by at most that divider ratio.
            let slack = |v: u64| v + v * 1024 / PELT_MIN_DIVIDER as u64 + 1;
            // util_avg is only recomputed at period boundaries, so start from the average
            // the current sums stand for, not from a possibly stale util_avg.
            let div = se.pelt_divider() as u64;
            let (mut last, mut last_load) = (se.util_sum as u64 / div, 1024 * se.load_sum / div);
            last = last.max(se.util_avg);
            last_load = last_load.max(se.load_avg);
            let (mut last_usum, mut last_lsum) = (se.util_sum, se.load_sum);
            let mut t = 0;
            while t < ph.sleep_us {
                let d = tick_us.min(ph.sleep_us - t);
                t += d;
                clock.update_rq_clock_pelt(Nanos(d * 1000), cap, freq, true);
                cfs.update_load_avg(clock.rq_clock_pelt(), &mut se, sleeping, CfsRqState::default(), 0, clock.contrib_scale());
                prop_assert!(se.util_sum <= last_usum, "util_sum grew while blocked");
                prop_assert!(se.load_sum <= last_lsum, "load_sum grew while blocked");
                prop_assert!(se.util_avg <= slack(last), "util grew while blocked");
                prop_assert!(se.load_avg <= slack(last_load), "load grew while blocked");
                last_usum = se.util_sum;
                last_lsum = se.load_sum;
                prop_assert!(cfs.avg.util_avg <= 1024 + 1);
                let div = se.pelt_divider() as u64;
                last = se.util_avg.max(se.util_sum as u64 / div);
                last_load = se.load_avg.max(1024 * se.load_sum / div);
            }
        }
    }
}

#[test]
fn rt_dl_signal_ramps_and_halves_every_32_periods() {
    let scale = asym_sched::pelt::PeltScale::NONE;
    let mut rt = SchedAvg::default();
    let mut now = MS;
    rt.last_update_time = now;
    for _ in 0..400 {
        now += PELT_PERIOD_NS;
        rt.update_rt_dl(now, true, scale);
    }
    assert!(rt.util_avg >= 1020, "{}", rt.util_avg);
    let u0 = rt.util_avg as f64;
    // Not running: util decays as y^n (oracle: 2^(-n/32)).
    for n in 1..=96u32 {
        now += PELT_PERIOD_NS;
        rt.update_rt_dl(now, false, scale);
        if n % 32 == 0 {
            let want = u0 * 0.5f64.powi((n / 32) as i32);
            let got = rt.util_avg as f64;
            assert!(
                (got - want).abs() <= 0.02 * want + 1.0,
                "n={n}: {got} vs {want:.1}"
            );
        }
    }
}

#[test]
fn pelt_clock_feature_selects_the_invariance_scheme() {
    use asym_sched::features::{Feature, SchedFeatures};
    let on = SchedFeatures::default();
    assert_eq!(PeltInvariance::from_features(on), PeltInvariance::ClockPelt);
    let off = on.with(Feature::PELT_CLOCK, false);
    assert_eq!(
        PeltInvariance::from_features(off),
        PeltInvariance::Contribution
    );
    // Contribution mode: clock_pelt follows clock_task even while busy on a slow CPU.
    let mut c = PeltClock::new(Nanos(MS), PeltInvariance::Contribution);
    c.update_rq_clock_pelt(Nanos(10 * MS), Capacity(383), Capacity(512), false);
    assert_eq!(c.rq_clock_pelt(), 11 * MS);
    assert_eq!(c.contrib_scale().cpu, 383);
    assert_eq!(c.contrib_scale().freq, 512);
    // clock_pelt mode: 10 ms × 383/1024 × 512/1024, truncated at each cap_scale.
    let mut c = PeltClock::new(Nanos(MS), PeltInvariance::ClockPelt);
    c.update_rq_clock_pelt(Nanos(10 * MS), Capacity(383), Capacity(512), false);
    let want = (((10 * MS * 383) >> 10) * 512) >> 10;
    assert_eq!(c.rq_clock_pelt(), MS + want);
    assert_eq!(c.contrib_scale(), asym_sched::pelt::PeltScale::NONE);
    // Switching modes re-syncs like going idle (PELT time only moves forward).
    let before = c.rq_clock_pelt();
    c.set_invariance(PeltInvariance::Contribution);
    assert!(c.rq_clock_pelt() >= before);
    assert_eq!(c.clock_pelt, c.clock_task);
}

#[test]
fn migrate_se_pelt_lag_estimates_an_idle_rq_clock() {
    let scale = asym_sched::pelt::PeltScale::NONE;
    let mut clock = PeltClock::new(Nanos(MS), PeltInvariance::ClockPelt);
    let mut cfs = CfsRqAvg::default();
    let mut se = SchedAvg::default();
    let busy = CfsRqState {
        load_weight: 1024,
        h_nr_running: 1,
        curr: true,
    };
    let sleeping = EntityState {
        on_rq: false,
        running: false,
        sched_delayed: false,
        ..TASK
    };
    cfs.update_load_avg(clock.rq_clock_pelt(), &mut se, TASK, busy, DO_ATTACH, scale);
    for _ in 0..50 {
        clock.update_rq_clock_pelt(Nanos(MS), Capacity(1024), Capacity(512), false);
        cfs.update_load_avg(clock.rq_clock_pelt(), &mut se, TASK, busy, 0, scale);
    }
    // Sleep; the rq goes idle and its clocks are not touched for 40 ms.
    cfs.update_load_avg(
        clock.rq_clock_pelt(),
        &mut se,
        sleeping,
        CfsRqState::default(),
        0,
        scale,
    );
    clock.update_idle_rq_clock_pelt(cfs.avg.util_sum as u64);
    let now = Nanos(clock.clock_task + 40 * MS);
    let mut estimated = se;
    cfs.migrate_se_pelt_lag(&mut estimated, 1024, &clock, true, now);
    // Oracle: the same entity decayed with an up-to-date clock.
    let mut exact = se;
    let mut c2 = clock;
    c2.update_rq_clock_pelt(Nanos(40 * MS), Capacity(1024), Capacity(512), true);
    exact.update_blocked_se(c2.rq_clock_pelt(), 1024);
    assert_eq!(estimated.util_avg, exact.util_avg);
    assert!(estimated.util_avg < se.util_avg);
    // A busy rq's clock is current: nothing to estimate.
    let mut untouched = se;
    cfs.migrate_se_pelt_lag(&mut untouched, 1024, &clock, false, now);
    assert_eq!(untouched, se);
}

/// `___update_load_sum`'s "if load" guard: an entity flagged running or runnable but
/// with no load (not on the rq: a `curr` being dequeued) only decays. Oracle: the
/// sums after `p` periods are exactly `decay_load(sum, p)` (sub-period remainder
/// included in the same periods), the raw recurrence.
#[test]
fn an_entity_without_load_only_decays_even_if_flagged_running() {
    let scale = asym_sched::pelt::PeltScale::NONE;
    let mut se = SchedAvg::default();
    let mut now = MS;
    se.last_update_time = now;
    for _ in 0..100 {
        now += MS;
        se.update_load_sum(now, 1, 1, true, scale);
    }
    let before = se;
    assert!(before.util_sum > 1_000_000);
    now += 10 * 1024 * 1024;
    se.update_load_sum(now, 0, 1, true, scale);
    assert_eq!(se.util_sum as u64, decay_load(before.util_sum as u64, 10));
    assert_eq!(se.runnable_sum, decay_load(before.runnable_sum, 10));
    assert_eq!(se.load_sum, decay_load(before.load_sum, 10));
    assert_eq!(se.period_contrib, before.period_contrib);
}
