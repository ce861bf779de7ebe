//! Self tests of the scheduler with real busy threads: PELT ramp of a run queue, schedutil's
//! frequency ramp and fall on the big domain, a periodic thread's duty cycle, and the run
//! queues' invariants afterwards.
//!
//! Oracles: PELT's integer recurrence `u ← u·y + 1024·(1 − y)` per 1024 µs period with
//! `y = 2^(−1/32)` (the geometric series of seed 001's table: 256 / 486 / 972 at 13 / 30 /
//! 138 ms from zero at full capacity), and schedutil's thresholds from its formula
//! `f = 1.25 × util × fmax / capacity`, resolved to the lowest OPP at or above it.
//! Guest time is the architected counter; the runs are under `-icount`, so deterministic.
//! Without `-icount` the host may not run a vCPU for a while: its tick periods are then
//! skipped (`timer::missed`), which the oracles do not model, so a timed measurement that
//! fails while periods were missed is repeated ([`unless_disturbed`], at most 3 runs, said on
//! the console). Under `-icount` no period is ever missed: one run, as strict as before.

#![allow(clippy::result_large_err)] // `TestError` carries its message by design.

use core::sync::atomic::{AtomicU64, Ordering};

use asym_sched::cpufreq::Governor;
use asym_sched::features::Feature;
use asym_sched::types::{CpuId, Khz};

use super::threads::{spawn_on, Busy, Job};
use crate::selftest::{TestError, TestResult};
use crate::{cpufreq, sched, task, test_assert};

crate::selftest!(name = "sched_pelt_ramp_big_cpu", pelt_ramp);
crate::selftest!(
    name = "sched_schedutil_ramp_and_fall",
    schedutil_ramp_and_fall
);
crate::selftest!(name = "sched_rq_invariants_no_task_lost", rq_invariants);
crate::selftest!(name = "sched_features_switch_at_run_time", features_switch);
crate::selftest!(name = "sched_periodic_task_duty_cycle", periodic_duty);

fn pelt_ramp() -> TestResult {
    unless_disturbed("PELT ramp", pelt_ramp_big_cpu)
}

fn periodic_duty() -> TestResult {
    unless_disturbed("duty cycle", periodic_duty_cycle)
}

/// Tick periods missed so far by the calling CPU and the big CPU the measurements use.
fn periods_missed() -> u64 {
    let me = crate::percpu::current_cpu();
    crate::timer::missed(me) + crate::timer::missed(big_cpu())
}

/// Runs `measure` again (up to 3 runs in all) while it fails and tick periods were missed
/// during it: see the module docs.
fn unless_disturbed(what: &str, mut measure: impl FnMut() -> TestResult) -> TestResult {
    const RUNS: u32 = 3;
    let mut run = 1;
    loop {
        let before = periods_missed();
        let result = measure();
        let missed = periods_missed() - before;
        if result.is_ok() || missed == 0 || run == RUNS {
            return result;
        }
        crate::println!(
            "sched: {} disturbed by the host ({} tick periods missed during run {} of {}): \
             measuring again",
            what,
            missed,
            run,
            RUNS
        );
        run += 1;
    }
}

/// `y` on 2^32: `runnable_avg_yN_inv[1]` of Linux's `kernel/sched/sched-pelt.h`
/// (= 2^32 × 2^(−1/32), rounded down).
const Y_FP: u128 = 0xfa83_b2da;
/// How far PELT's `util_avg` may stray from the series (divider and rounding), util units.
const UTIL_TOL: u32 = 8;
/// One PELT period, ns.
const PERIOD_NS: u64 = 1_024_000;

fn err(e: impl core::fmt::Display) -> TestError {
    TestError::new(format_args!("{e}"))
}

/// Waits (sleeping a tick between checks) until `cond` holds or `timeout_ns` of guest time
/// passed; returns whether it held.
pub(super) fn wait_until(timeout_ns: u64, mut cond: impl FnMut() -> bool) -> bool {
    let end = sched::now().0 + timeout_ns;
    loop {
        if cond() {
            return true;
        }
        if sched::now().0 >= end {
            return false;
        }
        sched::sleep_ns(tick_ns());
    }
}

/// Periods of running (factor `y` per period) for util to climb from `u0` to `thr`.
fn periods_to_reach(u0: u32, thr: u32, y: u128) -> u64 {
    // `y` is a parameter so the recurrence reads as the series it is.
    let mut u = u128::from(u0) << 32;
    let mut k = 0;
    while (u >> 32) < u128::from(thr) && k < 100_000 {
        u = ((u * y) >> 32) + 1024 * ((1u128 << 32) - y);
        k += 1;
    }
    k
}

/// Periods of idle for util to decay from `u0` to at most `thr`.
fn periods_to_fall(u0: u32, thr: u32) -> u64 {
    let mut u = u128::from(u0) << 32;
    let mut k = 0;
    while (u >> 32) > u128::from(thr) && k < 100_000 {
        u = (u * Y_FP) >> 32;
        k += 1;
    }
    k
}

fn rq_util(cpu: CpuId) -> Result<u32, TestError> {
    Ok(rq_util_at(cpu)?.0)
}

/// The rq's `util_avg` and the rq clock (guest ns) it was last updated at, read together.
fn rq_util_at(cpu: CpuId) -> Result<(u32, u64), TestError> {
    let g = sched::rq_lock(cpu).map_err(err)?;
    Ok((g.rq.cpu_util_avg().0, g.rq.clock().0))
}

fn tick_ns() -> u64 {
    1_000_000_000 / u64::from(crate::timer::hz().max(1))
}

/// A CPU of the highest capacity other than the calling one (the test runs on the boot CPU,
/// whose own tick we need for waiting).
pub(super) fn big_cpu() -> CpuId {
    let me = crate::percpu::current_cpu();
    let mut best = None;
    for cpu in crate::smp::online_cpus().filter(|&c| c != me) {
        let cap = sched::capacity_orig(cpu).0;
        if best.is_none_or(|(_, c)| cap > c) {
            best = Some((cpu, cap));
        }
    }
    best.map_or(me, |(c, _)| c)
}

/// Sets domain `pd`'s governor and waits until the domain runs at `want` and the CPU's
/// `arch_freq_scale` reflects it.
pub(super) fn set_governor_and_wait(pd: usize, gov: Governor, cpu: CpuId, want: Khz) -> TestResult {
    cpufreq::set_governor(pd, gov).map_err(err)?;
    let fmax = cpufreq::policy(pd).map_or(1, |p| p.table().last().map_or(1, |e| e.frequency.0));
    let scale = want.0 * 1024 / fmax.max(1);
    // The run queue takes the new scale at its next clock update (a switch, wake-up or tick),
    // which an idle CPU with its tick stopped may not have for a while.
    let ok = wait_until(200_000_000, || {
        cpufreq::policy(pd).is_some_and(|p| p.cur() == want)
            && cpufreq::arch_freq_scale(cpu) == scale
    });
    test_assert!(
        ok,
        "domain {} did not reach {} kHz with governor {:?} (cur {:?})",
        pd,
        want.0,
        gov,
        cpufreq::policy(pd).map(|p| p.cur().0)
    );
    Ok(())
}

/// (a) An always-running thread on a big CPU at its top OPP ramps the rq's `util_avg`
/// past 256, 486 and 972 when the PELT recurrence says, within a period's rounding and the
/// tick granularity of the observation.
fn pelt_ramp_big_cpu() -> TestResult {
    let cpu = big_cpu();
    if cpu == crate::percpu::current_cpu() {
        // `maxcpus=1`: the test itself would run on the CPU it measures.
        crate::println!("selftest sched_pelt_ramp_big_cpu: skipped: no second CPU online");
        return Ok(());
    }
    if let Some(pd) = cpufreq::domain_of(cpu) {
        let fmax = cpufreq::policy(pd)
            .and_then(|p| p.table().last().map(|e| e.frequency))
            .ok_or(err("no fmax"))?;
        set_governor_and_wait(pd, Governor::Performance, cpu, fmax)?;
    }
    let cap = sched::capacity_orig(cpu).0;
    test_assert!(
        cap == 1024,
        "cpu {} capacity {} (want a biggest CPU)",
        cpu.0,
        cap
    );
    // Start from an (almost) idle rq whatever ran before: blocked util decays in ~230 ms.
    test_assert!(
        wait_until(2_000_000_000, || rq_util(cpu).is_ok_and(|u| u < 8)),
        "cpu {} util did not decay below 8",
        cpu.0
    );
    let busy = Busy::start_cold(cpu)?;
    // As it started spinning (read by the thread itself: a read here, after start_cold's
    // wait, can come a tick later, with util already grown and the oracle started late).
    let u0 = busy.start_util();
    let t0 = busy.started_ns();
    let tick = tick_ns();
    let mut result = Ok(());
    for thr in [256u32, 486, 972] {
        let n = periods_to_reach(u0, thr, Y_FP);
        let oracle = n * PERIOD_NS;
        // PELT's util_avg is util_sum over a divider that depends on the position in the
        // current period, so it follows the series within a few units: allow ±UTIL_TOL
        // (which near saturation is several ms: the slope at 972 is ~1.1 per ms), a period's
        // rounding, one tick since updates happen at the target CPU's ticks, and one more
        // because this CPU polls once per tick of its own and can read the update of the
        // tick after the crossing (seen: 6.4 ms late on the u-boot run).
        let lo = periods_to_reach(u0, thr - UTIL_TOL, Y_FP).saturating_sub(1) * PERIOD_NS;
        let hi = (periods_to_reach(u0, thr + UTIL_TOL, Y_FP) + 1) * PERIOD_NS + 2 * tick;
        // The crossing is timed by the rq clock of the update that saw it (the target CPU's
        // tick), not by when this CPU noticed.
        let mut seen = 0;
        let ok = wait_until(hi + 100_000_000, || match rq_util_at(cpu) {
            Ok((u, at)) if u >= thr => {
                seen = at.saturating_sub(t0);
                true
            }
            _ => false,
        });
        crate::println!(
            "sched: cpu {} util {} -> {}: {} us (oracle {} us from util {}, bounds {}..={} us)",
            cpu.0,
            u0,
            thr,
            seen / 1000,
            oracle / 1000,
            u0,
            lo / 1000,
            hi / 1000
        );
        if !ok || seen < lo || seen > hi {
            result = Err(TestError::new(format_args!(
                "util {} reached after {} us, expected {}..={} us",
                thr,
                seen / 1000,
                lo / 1000,
                hi / 1000
            )));
            break;
        }
    }
    busy.stop()?;
    if let Some(pd) = cpufreq::domain_of(cpu) {
        cpufreq::set_governor(pd, Governor::Schedutil).map_err(err)?;
    }
    result
}

/// (b) Schedutil on the big domain: from the lowest OPP with an idle CPU, an always-running
/// task raises it to the top OPP within the bound derived below; after the task sleeps, the
/// domain falls back to the lowest OPP within the decay bound.
fn schedutil_ramp_and_fall() -> TestResult {
    let cpu = big_cpu();
    let Some(pd) = cpufreq::domain_of(cpu) else {
        crate::println!(
            "selftest sched_schedutil_ramp_and_fall: skipped: no cpufreq on this board"
        );
        return Ok(());
    };
    let p = cpufreq::policy(pd).ok_or(err("no policy"))?;
    let table: heapless::Vec<u32, 16> = p.table().iter().map(|e| e.frequency.0).collect();
    // The lowest OPP schedutil uses: inefficient OPPs are skipped (HiKey's 208 MHz).
    let fmax = table[table.len() - 1];
    let fmin = p.resolve_freq(Khz(1)).0;
    let cap = u64::from(sched::capacity_orig(cpu).0);
    // util at which schedutil asks for more than `f`: 1.25 × u × fmax / cap > f.
    let above = |f: u32| -> u32 { ((u64::from(f) * cap * 4).div_ceil(5 * u64::from(fmax))) as u32 };
    let second_highest = table[table.len().saturating_sub(2)];
    let up_thr = above(second_highest) + 1;
    let down_thr = above(fmin);
    let latency = p.transition_latency_ns;
    let rate_limit = u64::from(p.transition_delay_us()) * 1000;
    let tick = tick_ns();
    cpufreq::set_governor(pd, Governor::Schedutil).map_err(err)?;
    let settled = wait_until(3_000_000_000, || {
        cpufreq::policy(pd).is_some_and(|p| p.cur().0 == fmin) && rq_util(cpu).is_ok_and(|u| u < 8)
    });
    test_assert!(
        settled,
        "big domain did not settle at {} kHz (cur {:?}, util {:?})",
        fmin,
        cpufreq::policy(pd).map(|p| p.cur().0),
        rq_util(cpu).ok()
    );
    let busy = Busy::start_cold(cpu)?;
    // As it started spinning (read by the thread itself: a read here, after start_cold's
    // wait, can come a tick later, with util already grown and the oracle started late).
    let u0 = busy.start_util();
    let t0 = busy.started_ns();
    // Util grows in PELT time, which runs at f/fmax of real time (frequency invariance).
    // Fastest: the whole ramp at fmax (PELT time = real time). Slowest: the whole ramp at
    // the lowest OPP, real time = PELT time × fmax / fmin; plus per OPP step one tick to
    // notice, the rate limit and the transition latency, and one tick to observe the end.
    let n_inv = periods_to_reach(u0, up_thr, Y_FP) * PERIOD_NS;
    let lo = n_inv + latency;
    let steps = table.len() as u64 - 1;
    let hi = n_inv * u64::from(fmax) / u64::from(fmin.max(1))
        + steps * (tick + rate_limit + latency)
        + 2 * tick;
    let ok = wait_until(hi + 200_000_000, || {
        cpufreq::policy(pd).is_some_and(|p| p.cur().0 == fmax)
    });
    let up_at = effective_time(pd, fmax, t0);
    let u_sleep = rq_util(cpu)?;
    let t1 = busy.stop()?;
    test_assert!(ok, "big domain never reached {} kHz", fmax);
    let up = up_at.ok_or(err("no driver request for fmax"))? - t0;
    crate::println!(
        "sched: schedutil {} -> {} MHz in {} us (bounds {}..={} us, util threshold {})",
        fmin / 1000,
        fmax / 1000,
        up / 1000,
        lo / 1000,
        hi / 1000,
        up_thr
    );
    test_assert!(
        (lo..=hi).contains(&up),
        "ramp to {} kHz took {} us, expected {}..={} us",
        fmax,
        up / 1000,
        lo / 1000,
        hi / 1000
    );
    // Fall: blocked util decays at real time while idle; the domain's lowest OPP is chosen
    // once util ≤ down_thr, noticed at a tick or a NOHZ blocked-load update, after the rate
    // limit and the latency. When the
    // rq goes idle, its PELT clock catches up with the task clock (Linux
    // `update_idle_rq_clock_pelt`: the rq was not saturated, so the lag is idle time at full
    // speed it would have had): the blocked util decays at once by the lag accumulated while
    // running below fmax, Σ (1 − f/fmax) × time, which the driver's log gives. Each change
    // reaches the rq's freq_scale at its next tick, so the lag is up to a tick × Δscale more.
    // With load balancing on the idle CPU stops its tick and its blocked util is decayed by
    // the NOHZ idle balancer every `LOAD_AVG_PERIOD` (`nohz.next_blocked`), kicked at a busy
    // tick: the crossing is noticed up to that period and a tick later than at a tick.
    let lag = running_lag(pd, fmin, fmax, t0, t1);
    let lag_extra = steps * tick / 2;
    let n = periods_to_fall(u_sleep, down_thr);
    let notice = if sched::balance::nohz_stats_active() {
        asym_sched::nohz::LOAD_AVG_PERIOD_MS * 1_000_000 + tick
    } else {
        0
    };
    let lo = (n.saturating_sub(3) * PERIOD_NS).saturating_sub(lag + lag_extra) + latency;
    let hi = ((n + 3) * PERIOD_NS).saturating_sub(lag)
        + 2 * tick
        + notice
        + steps * (rate_limit + latency + tick);
    let ok = wait_until(hi + 200_000_000, || {
        cpufreq::policy(pd).is_some_and(|p| p.cur().0 == fmin)
    });
    test_assert!(ok, "big domain never fell back to {} kHz", fmin);
    let down = effective_time(pd, fmin, t1).ok_or(err("no driver request for fmin"))? - t1;
    crate::println!(
        "sched: schedutil {} -> {} MHz {} us after sleep at util {} (PELT lag {} us, bounds {}..={} us)",
        fmax / 1000,
        fmin / 1000,
        down / 1000,
        u_sleep,
        lag / 1000,
        lo / 1000,
        hi / 1000
    );
    test_assert!(
        (lo..=hi).contains(&down),
        "fall to {} kHz took {} us, expected {}..={} us",
        fmin,
        down / 1000,
        lo / 1000,
        hi / 1000
    );
    Ok(())
}

/// Σ (1 − f/fmax) × time over `[t0, t1]` for domain `pd`, which ran at `fmin` from `t0` and
/// then at each frequency the driver's log shows taking effect (ns of PELT-clock lag).
fn running_lag(pd: usize, fmin: u32, fmax: u32, t0: u64, t1: u64) -> u64 {
    cpufreq::with_driver(|d| {
        let (mut f, mut since, mut lag) = (u64::from(fmin), t0, 0u64);
        let fmax = u64::from(fmax.max(1));
        for r in d.requests().filter(|r| r.pd == pd && r.at.0 >= t0) {
            let Some(eff) = r.effective.map(|t| t.0) else {
                continue;
            };
            let eff = eff.clamp(since, t1);
            lag += (eff - since) * (fmax - f.min(fmax)) / fmax;
            since = eff;
            f = u64::from(r.freq.0);
        }
        lag + (t1 - since.min(t1)) * (fmax - f.min(fmax)) / fmax
    })
    .unwrap_or(0)
}

/// When the emulated driver's first request for `khz` on `pd` made at or after `since`
/// took effect.
fn effective_time(pd: usize, khz: u32, since: u64) -> Option<u64> {
    cpufreq::with_driver(|d| {
        d.requests()
            .filter(|r| r.pd == pd && r.freq.0 == khz && r.at.0 >= since)
            .find_map(|r| r.effective.map(|t| t.0))
    })
    .flatten()
}

/// (e) Short work threads on every other online CPU at once (the self tests' order is the
/// linker's, so this one makes its own traffic too): once they are joined, every run queue
/// passes the policy crate's invariant check and holds no task, and every thread started here
/// has ended (none lost: each returned its own index).
fn rq_invariants() -> TestResult {
    let me = crate::percpu::current_cpu();
    let mut jobs: heapless::Vec<Job, 8> = heapless::Vec::new();
    for cpu in crate::smp::online_cpus().filter(|&c| c != me) {
        let w = 1_000_000 + u64::from(cpu.0) * 500_000;
        let _ = jobs.push(Job::work(cpu, w)?);
    }
    for j in jobs {
        j.join()?;
    }
    for cpu in crate::smp::online_cpus() {
        let g = sched::rq_lock(cpu).map_err(err)?;
        g.rq.check_invariants()
            .map_err(|e| TestError::new(format_args!("cpu {}: {}", cpu.0, e)))?;
        let want = u32::from(cpu == me);
        test_assert!(
            g.rq.nr_running() == want,
            "cpu {}: {} tasks queued, want {} (the test's own thread on its CPU)",
            cpu.0,
            g.rq.nr_running(),
            want
        );
    }
    sched::check_invariants().map_err(err)?;
    Ok(())
}

/// Switching a feature at run time reaches every run queue, and switching back restores the
/// set exactly.
fn features_switch() -> TestResult {
    let before = sched::features();
    let off = before.with(Feature::UTIL_EST, false);
    sched::set_features(off).map_err(err)?;
    for cpu in crate::smp::online_cpus() {
        let f = sched::rq_lock(cpu).map_err(err)?.rq.features();
        test_assert!(
            !f.enabled(Feature::UTIL_EST),
            "cpu {}: UTIL_EST still on after the switch",
            cpu.0
        );
    }
    sched::set_features(before).map_err(err)?;
    test_assert!(sched::features() == before, "features not restored");
    for cpu in crate::smp::online_cpus() {
        let f = sched::rq_lock(cpu).map_err(err)?.rq.features();
        test_assert!(f == before, "cpu {}: features not restored", cpu.0);
    }
    Ok(())
}

/// A periodic thread (run W of work, sleep until the next period) on a big CPU at its top
/// OPP: each job takes W of guest time (capacity 1024 at fmax: work = time) and the rq's
/// util settles at the duty cycle's steady state. Oracle: the geometric series for a 25 %
/// duty cycle of period P = 16 ms (4 ticks at HZ=250): at the end of a job
/// `u_max = 1024 (1 − y^4) / (1 − y^16) ≈ 290`, at the end of the sleep `u_max · y^12 ≈ 224`;
/// the signal is read between the two.
fn periodic_duty_cycle() -> TestResult {
    let cpu = big_cpu();
    if cpu == crate::percpu::current_cpu() {
        // `maxcpus=1`: the test itself would share the CPU it measures.
        crate::println!("selftest sched_periodic_task_duty_cycle: skipped: no second CPU online");
        return Ok(());
    }
    let pd = cpufreq::domain_of(cpu);
    if let Some(pd) = pd {
        let fmax = cpufreq::policy(pd)
            .and_then(|p| p.table().last().map(|e| e.frequency))
            .ok_or(err("no fmax"))?;
        set_governor_and_wait(pd, Governor::Performance, cpu, fmax)?;
    }
    let period = 4 * tick_ns();
    PERIODIC.period.store(period, Ordering::Relaxed);
    PERIODIC.worst.store(0, Ordering::Relaxed);
    PERIODIC.util.store(0, Ordering::Relaxed);
    let t = spawn_on(cpu, "periodic", periodic_thread, cpu.index())?;
    task::join(t).map_err(err)?;
    if let Some(pd) = pd {
        cpufreq::set_governor(pd, Governor::Schedutil).map_err(err)?;
    }
    let worst = PERIODIC.worst.load(Ordering::Relaxed);
    let util = PERIODIC.util.load(Ordering::Relaxed) as u32;
    crate::println!(
        "sched: periodic {} us every {} us on cpu {}: util {} after 20 periods, job time off by at most {} ns",
        period / 4000,
        period / 1000,
        cpu.0,
        util,
        worst
    );
    test_assert!(
        worst <= 1_000,
        "a job took {} ns more or less than its work",
        worst
    );
    // 224..=290 from the series, ± a period's rounding and the update granularity.
    test_assert!(
        (224 - 16..=290 + 16).contains(&util),
        "util {} outside the 25 % duty cycle's steady state 224..=290 (± 16)",
        util
    );
    Ok(())
}

struct Periodic {
    period: AtomicU64,
    worst: AtomicU64,
    util: AtomicU64,
}

static PERIODIC: Periodic = Periodic {
    period: AtomicU64::new(0),
    worst: AtomicU64::new(0),
    util: AtomicU64::new(0),
};

/// 20 jobs of a quarter period each, one per period.
fn periodic_thread(cpu: usize) {
    let period = PERIODIC.period.load(Ordering::Relaxed);
    let work = period / 4;
    let t0 = sched::now().0;
    // 20 periods: the distance to steady state shrinks by y^16 ≈ 0.71 per period (to 0.1 %).
    for k in 0..20u64 {
        let span = sched::work(work);
        let off = (span.completed.0 - span.started.0).abs_diff(work);
        PERIODIC.worst.fetch_max(off, Ordering::Relaxed);
        if let Ok(u) = rq_util(CpuId(cpu as u16)) {
            PERIODIC.util.store(u64::from(u), Ordering::Relaxed);
        }
        sched::sleep_until(asym_sched::types::Nanos(t0 + (k + 1) * period));
    }
}
