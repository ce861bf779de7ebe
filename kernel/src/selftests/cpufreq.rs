//! Self tests of the kernel's cpufreq on an emulated board: the work-time emulation at fixed
//! frequencies, and bad requests refused with a clear error while the kernel keeps running.
//!
//! Oracle for the work time (the rt-app calibration convention): work stated in ns of a
//! big CPU at its top OPP completes at the rate `capacity_orig × f / fmax / 1024`, so `W` of
//! work takes `W × 1024 × fmax / (capacity_orig × f)`: 4 ms on a Juno r2 A53 (capacity 383)
//! takes 10.69 ms at 950 MHz and 22.58 ms at 450 MHz.

#![allow(clippy::result_large_err)] // `TestError` carries its message by design.

use core::sync::atomic::{AtomicU64, Ordering};

use asym_sched::cpufreq::Governor;
use asym_sched::types::{CpuId, Khz};

use super::sched::set_governor_and_wait;
use super::threads::Job;
use crate::selftest::{TestError, TestResult};
use crate::{cpufreq, sched, test_assert};

crate::selftest!(name = "cpufreq_work_time_emulation", work_time_emulation);
crate::selftest!(
    name = "cpufreq_work_speeds_up_at_the_transition",
    work_across_a_transition
);
crate::selftest!(name = "cpufreq_bad_requests_refused", bad_requests_refused);
crate::selftest!(
    name = "cpufreq_limits_apply_on_idle_domain",
    limits_on_idle_domain
);
crate::selftest!(
    name = "cpufreq_transition_seen_when_it_completes",
    transition_seen_when_it_completes
);

/// Work of the test task: 4 ms at a big CPU's top OPP.
const WORK_NS: u64 = 4_000_000;

fn err(e: impl core::fmt::Display) -> TestError {
    TestError::new(format_args!("{e}"))
}

/// A CPU of the lowest capacity other than the calling one.
fn little_cpu() -> CpuId {
    let me = crate::percpu::current_cpu();
    let mut best = None;
    for cpu in crate::smp::online_cpus().filter(|&c| c != me) {
        let cap = sched::capacity_orig(cpu).0;
        if best.is_none_or(|(_, c)| cap < c) {
            best = Some((cpu, cap));
        }
    }
    best.map_or(me, |(c, _)| c)
}

/// Runs `WORK_NS` of work in a thread on `cpu` and returns how long it took (guest ns).
fn run_work(cpu: CpuId) -> Result<u64, TestError> {
    let j = Job::work(cpu, WORK_NS)?;
    let took = j.join()?;
    test_assert!(took > 0, "work on cpu {} did not complete", cpu.0);
    Ok(took)
}

/// (c) 4 ms of work on a LITTLE CPU with its domain fixed at the top OPP (performance) and
/// at the lowest (powersave) completes within 5 % of the oracle.
fn work_time_emulation() -> TestResult {
    let cpu = little_cpu();
    let Some(pd) = cpufreq::domain_of(cpu) else {
        crate::println!("selftest cpufreq_work_time_emulation: skipped: no cpufreq on this board");
        return Ok(());
    };
    let p = cpufreq::policy(pd).ok_or(err("no policy"))?;
    let fmin = p
        .table()
        .first()
        .map(|e| e.frequency)
        .ok_or(err("empty table"))?;
    let fmax = p
        .table()
        .last()
        .map(|e| e.frequency)
        .ok_or(err("empty table"))?;
    let cap = u64::from(sched::capacity_orig(cpu).0);
    // The work unit's reference is the biggest CPU at its own top OPP: capacity 1024 at
    // its fmax; `capacity_orig` already folds this domain's fmax against it.
    for (gov, f) in [(Governor::Performance, fmax), (Governor::Powersave, fmin)] {
        set_governor_and_wait(pd, gov, cpu, f)?;
        let took = run_work(cpu)?;
        let oracle = WORK_NS * 1024 * u64::from(fmax.0) / (cap * u64::from(f.0));
        crate::println!(
            "cpufreq: {} us of work on cpu {} (capacity {}) at {} MHz took {} us (oracle {} us)",
            WORK_NS / 1000,
            cpu.0,
            cap,
            f.0 / 1000,
            took / 1000,
            oracle / 1000
        );
        test_assert!(
            took * 100 >= oracle * 95 && took * 100 <= oracle * 105,
            "took {} us at {} kHz, oracle {} us ±5 %",
            took / 1000,
            f.0,
            oracle / 1000
        );
    }
    cpufreq::set_governor(pd, Governor::Schedutil).map_err(err)?;
    Ok(())
}

/// When the work of [`span_thread`] started and completed (guest ns).
static SPAN: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];

fn span_thread(_: usize) {
    let s = sched::work(WORK_NS);
    SPAN[0].store(s.started.0, Ordering::Relaxed);
    SPAN[1].store(s.completed.0, Ordering::Release);
}

/// (c') Work that begins at the lowest OPP and sees its domain move to the top one halfway
/// speeds up at the transition's instant, as on a board: it completes within 50 µs of the
/// oracle that charges the work before the completed transition at the lowest frequency and
/// after it at the top one. (Until the domain's CPUs re-rated their running threads at a
/// transition, the work kept the old rate to the CPU's next tick: up to a tick late.)
fn work_across_a_transition() -> TestResult {
    const NAME: &str = "cpufreq_work_speeds_up_at_the_transition";
    let cpu = little_cpu();
    if cpu == crate::percpu::current_cpu() {
        // The test's own thread would share the CPU and take running time from the work.
        crate::println!("selftest {NAME}: skipped: one CPU");
        return Ok(());
    }
    let Some(pd) = cpufreq::domain_of(cpu) else {
        crate::println!("selftest {NAME}: skipped: no cpufreq on this board");
        return Ok(());
    };
    let p = cpufreq::policy(pd).ok_or(err("no policy"))?;
    let (fmin, fmax) = match (p.table().first(), p.table().last()) {
        (Some(a), Some(b)) => (u64::from(a.frequency.0), u64::from(b.frequency.0)),
        _ => return Err(err("empty table")),
    };
    let cap = u64::from(sched::capacity_orig(cpu).0);
    set_governor_and_wait(pd, Governor::Powersave, cpu, Khz(fmin as u32))?;
    SPAN.iter().for_each(|a| a.store(0, Ordering::Relaxed));
    let r = (|| {
        let t = super::threads::spawn_on(cpu, "work-transition", span_thread, 0)?;
        // A third of the way in at the lowest OPP, off the tick grid.
        sched::sleep_ns(WORK_NS * 1024 * fmax / (cap * fmin) / 3 + 1_370_000);
        cpufreq::set_governor(pd, Governor::Performance).map_err(err)?;
        crate::task::join(t).map_err(err)?;
        // The transition to fmax, read before schedutil is back and makes its own.
        Ok(
            cpufreq::with_policy(pd, |p| p.last_completion().map(|c| c.at.0))
                .flatten()
                .unwrap_or(0),
        )
    })();
    cpufreq::set_governor(pd, Governor::Schedutil).map_err(err)?;
    let at = r?;
    let (start, end) = (
        SPAN[0].load(Ordering::Relaxed),
        SPAN[1].load(Ordering::Acquire),
    );
    test_assert!(
        start < at && at < end,
        "the transition at {} ns was not during the work ({}..{} ns)",
        at,
        start,
        end
    );
    // Work done by the transition at fmin, the rest at fmax (ns of work at `cap × f / fmax`).
    let done = (at - start) * cap * fmin / (1024 * fmax);
    let oracle = at + (WORK_NS - done) * 1024 / cap;
    crate::println!(
        "cpufreq: {} us of work on cpu {}, {} -> {} MHz {} us in: completed {} us after it          started (oracle {} us)",
        WORK_NS / 1000,
        cpu.0,
        fmin / 1000,
        fmax / 1000,
        (at - start) / 1000,
        (end - start) / 1000,
        (oracle - start) / 1000
    );
    test_assert!(
        end.abs_diff(oracle) <= 50_000,
        "the work completed {} ns from the oracle (limit 50 us)",
        end as i64 - oracle as i64
    );
    Ok(())
}

/// (d) Impossible requests — a frequency outside the OPP table, min above max, an unknown
/// domain, a malformed command-line value, an unknown feature — are refused with an error that
/// names the problem, the limits stay as they were, and the kernel keeps ticking.
fn bad_requests_refused() -> TestResult {
    // Feature parsing is there with or without cpufreq.
    let mut f = sched::features();
    match f.apply_list("UTIL_EST,NO_SUCH_FEATURE") {
        Err(e) => {
            let mut s: heapless::String<160> = heapless::String::new();
            let _ = core::fmt::Write::write_fmt(&mut s, format_args!("{e}"));
            // The feature as named, without its NO_ prefix.
            test_assert!(
                s.contains("`SUCH_FEATURE`"),
                "feature error `{}` does not name it",
                s
            );
        }
        Ok(()) => return Err(err("unknown sched feature accepted")),
    }
    if !cpufreq::available() {
        crate::println!("selftest cpufreq_bad_requests_refused: skipped: no cpufreq on this board");
        return Ok(());
    }
    let pd = 0;
    let before = cpufreq::policy(pd).ok_or(err("no policy 0"))?;
    let fmin = before.table().first().map_or(0, |e| e.frequency.0);
    let fmax = before.table().last().map_or(0, |e| e.frequency.0);
    let e = cpufreq::set_limits(pd, Khz(fmin), Khz(fmax + 1_000_000));
    test_assert!(
        matches!(e, Err(cpufreq::Error::OutOfRange { .. })),
        "max beyond the table accepted: {:?}",
        e
    );
    let e = cpufreq::set_limits(pd, Khz(fmax), Khz(fmin));
    test_assert!(
        matches!(e, Err(cpufreq::Error::Policy(_))),
        "min above max accepted: {:?}",
        e
    );
    let mut msg: heapless::String<200> = heapless::String::new();
    if let Err(e) = e {
        let _ = core::fmt::Write::write_fmt(&mut msg, format_args!("{e}"));
    }
    test_assert!(
        msg.contains("above"),
        "min > max message `{}` is not clear",
        msg
    );
    let e = cpufreq::apply_option("cpufreq.nosuch.max_khz", "1000");
    test_assert!(e.is_err(), "unknown domain accepted");
    let e = cpufreq::apply_option("cpufreq.0.max_khz", "fast");
    test_assert!(
        e == Err(cpufreq::OptionError::BadNumber),
        "bad number accepted: {:?}",
        e
    );
    let e = cpufreq::apply_option("cpufreq.0.max_khz", "1");
    test_assert!(
        matches!(
            e,
            Err(cpufreq::OptionError::Cpufreq(
                cpufreq::Error::OutOfRange { .. }
            ))
        ),
        "1 kHz accepted: {:?}",
        e
    );
    let after = cpufreq::policy(pd).ok_or(err("no policy 0"))?;
    test_assert!(
        after.min() == before.min() && after.max() == before.max(),
        "limits changed by refused requests: {:?}..{:?} -> {:?}..{:?}",
        before.min(),
        before.max(),
        after.min(),
        after.max()
    );
    // A valid limit works, then is undone; the kernel still ticks.
    cpufreq::apply_option("cpufreq.0.min_khz", &fmax_str(fmax)).map_err(err)?;
    test_assert!(cpufreq::policy(pd).is_some_and(|p| p.min().0 == fmax));
    cpufreq::set_limits(pd, Khz(fmin), Khz(fmax)).map_err(err)?;
    // The test's own thread stays on this CPU (pinned) and keeps it busy in `wfi`, so its
    // tick keeps coming.
    let me = crate::percpu::current_cpu();
    let t = crate::timer::ticks(me);
    let end = sched::now().0 + 100_000_000;
    while crate::timer::ticks(me) <= t + 2 && sched::now().0 < end {
        crate::arch::wfi();
    }
    test_assert!(crate::timer::ticks(me) > t + 2, "the tick stopped");
    Ok(())
}

/// A limit change on a domain whose CPUs are all idle (ticks stopped) under schedutil takes
/// effect: raising the minimum to the top OPP moves `cur` there at once (the limits clamp it),
/// and lowering it back lets schedutil, evaluated at a tick the change restarts, return to
/// the lowest OPP (an idle domain's util is 0).
fn limits_on_idle_domain() -> TestResult {
    let cpu = little_cpu();
    let Some(pd) = cpufreq::domain_of(cpu) else {
        crate::println!("selftest cpufreq_limits_apply_on_idle_domain: skipped: no cpufreq");
        return Ok(());
    };
    let p = cpufreq::policy(pd).ok_or(err("no policy"))?;
    let me = crate::percpu::current_cpu();
    if p.cpus.contains(me) {
        crate::println!("selftest cpufreq_limits_apply_on_idle_domain: skipped: no idle domain");
        return Ok(());
    }
    let fmin = p.table().first().map_or(Khz(0), |e| e.frequency);
    let fmax = p.table().last().map_or(Khz(0), |e| e.frequency);
    cpufreq::set_governor(pd, Governor::Schedutil).map_err(err)?;
    let idle = |want: Khz| {
        cpufreq::policy(pd).is_some_and(|p| p.cur() == want)
            && crate::smp::online_cpus()
                .filter(|&c| p.cpus.contains(c))
                .all(crate::timer::tick_stopped)
    };
    test_assert!(
        super::sched::wait_until(3_000_000_000, || idle(fmin)),
        "domain {} did not go idle at {} kHz (cur {:?})",
        pd,
        fmin.0,
        cpufreq::policy(pd).map(|p| p.cur().0)
    );
    cpufreq::set_limits(pd, fmax, fmax).map_err(err)?;
    test_assert!(
        super::sched::wait_until(200_000_000, || idle(fmax)),
        "idle domain {} did not go to its raised minimum {} kHz (cur {:?})",
        pd,
        fmax.0,
        cpufreq::policy(pd).map(|p| p.cur().0)
    );
    cpufreq::set_limits(pd, fmin, fmax).map_err(err)?;
    test_assert!(
        super::sched::wait_until(200_000_000, || idle(fmin)),
        "idle domain {} stayed at {:?} kHz after its minimum was lowered to {} kHz",
        pd,
        cpufreq::policy(pd).map(|p| p.cur().0),
        fmin.0
    );
    Ok(())
}

/// How late after the board's transition latency a transition may be seen: the firmware's
/// reply (the stand-in's vCPU under `-icount`: 40–230 µs), the completion timer's interrupt and
/// this test's 10 µs polling. A kernel that noticed completions only at a tick would be up to a
/// tick period (4 ms at HZ=250) late, and within this bound a quarter of the time at most.
const SEEN_SLACK_NS: u64 = 1_000_000;

/// Transitions are applied when the driver completes them, from the driver's timer, not at a
/// later tick: six changes of a domain's frequency (pinned by its limits), each seen by a thread
/// that only sleeps and reads the policy, within the board's latency plus
/// [`SEEN_SLACK_NS`] of its request.
fn transition_seen_when_it_completes() -> TestResult {
    let cpu = little_cpu();
    let Some(pd) = cpufreq::domain_of(cpu) else {
        crate::println!("selftest cpufreq_transition_seen_when_it_completes: skipped: no cpufreq");
        return Ok(());
    };
    let p = cpufreq::policy(pd).ok_or(err("no policy"))?;
    let (lo, hi) = (p.min(), p.max());
    let fmin = p.table().first().map_or(Khz(0), |e| e.frequency);
    let fmax = p.table().last().map_or(Khz(0), |e| e.frequency);
    let latency = p.transition_latency_ns;
    let r = (|| {
        let mut worst = 0u64;
        for i in 0..6 {
            let cur = cpufreq::policy(pd).map_or(Khz(0), |p| p.cur());
            let f = if cur == fmax { fmin } else { fmax };
            // Off the tick grid by a different amount each time.
            sched::sleep_ns(10_000 + 370_000 * i);
            let t0 = sched::now().0;
            cpufreq::set_limits(pd, f, f).map_err(err)?;
            let end = t0 + latency + 20 * SEEN_SLACK_NS;
            while cpufreq::policy(pd).is_some_and(|p| p.cur() != f) && sched::now().0 < end {
                sched::sleep_ns(10_000);
            }
            let seen = sched::now().0 - t0;
            test_assert!(
                cpufreq::policy(pd).is_some_and(|p| p.cur() == f),
                "domain {} never reached {} kHz ({} us after the request)",
                pd,
                f.0,
                seen / 1000
            );
            // When the driver took the completion (its poll's clock), from the request.
            let polled = cpufreq::with_policy(pd, |p| p.last_completion().map(|c| c.at.0))
                .flatten()
                .map_or(0, |at| at.saturating_sub(t0));
            test_assert!(
                seen <= latency + SEEN_SLACK_NS,
                "domain {} reached {} kHz {} us after the request (the driver took the \
                 completion after {} us), its latency is {} us (seen at a tick, not when it \
                 completed?)",
                pd,
                f.0,
                seen / 1000,
                polled / 1000,
                latency / 1000
            );
            worst = worst.max(seen);
        }
        crate::println!(
            "cpufreq: domain {} transitions seen at most {} us after their request (latency {} us)",
            pd,
            worst / 1000,
            latency / 1000
        );
        Ok(())
    })();
    // Whatever happened, the domain's limits and governor as they were.
    cpufreq::set_limits(pd, lo, hi).map_err(err)?;
    cpufreq::set_governor(pd, Governor::Schedutil).map_err(err)?;
    r
}

fn fmax_str(f: u32) -> heapless::String<16> {
    let mut s = heapless::String::new();
    let _ = core::fmt::Write::write_fmt(&mut s, format_args!("{f}"));
    s
}
