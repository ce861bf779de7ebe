//! Self tests of the board's DVFS firmware driver (on the emulated boards: the real driver
//! against the firmware stand-in, `crate::drivers::fw_standin`; on a board: its firmware).
//!
//! Oracles: every OPP of every domain, requested through cpufreq, completes with the firmware
//! reporting that frequency (SCMI `LEVEL_GET`, the stub clocks' read-back words) within the
//! board's transition latency (the DT's `clock-latency-ns`, or the firmware's: Juno r2
//! 1450 µs, HiKey960 300 µs, HiKey 500 µs) plus 2 ms of message round trips and polling; and a
//! frequency that is not an OPP is refused by the driver with its typed error. A DT that
//! describes DVFS firmware the kernel does not drive is a failure, not a skip.
//!
//! `dvfs_every_opp_through_the_firmware` is also the boards' DVFS acceptance test
//! (`selftest=dvfs` on the command line, docs/boards/): for each domain and OPP it prints what
//! was asked, what the firmware reads back, how long the change took and how fast a calibrated
//! busy loop runs on a CPU of that domain. Against real firmware the loop's speed must scale
//! with the frequency (within ±15 % of the frequency ratio between the lowest and each other
//! OPP: a firmware that acknowledges a level without changing the clock fails here). Against
//! the QEMU firmware stand-in the speed is reported but not judged (a vCPU's speed does not
//! follow the emulated clock); there the change must also take no less than the board's
//! latency, which the stand-in models (real firmware may be quicker than its declared bound).

#![allow(clippy::result_large_err)] // `TestError` carries its message by design.

use asym_sched::cpufreq::driver::CpufreqDriver;
use asym_sched::cpufreq::Governor;
use asym_sched::types::Khz;

use core::sync::atomic::{AtomicU64, Ordering};

use asym_sched::types::CpuId;

use crate::selftest::{TestError, TestResult};
use crate::{cpufreq, sched, smp, test_assert, timer};

crate::selftest!(name = "dvfs_every_opp_through_the_firmware", every_opp);
crate::selftest!(name = "dvfs_non_opp_refused_by_the_driver", non_opp_refused);

/// Slack above the board's latency: message round trips, the firmware vCPU's wake-up and
/// this test's polling (measured under `-icount`: 40–230 µs). A driver that only noticed
/// completions at the 4 ms tick would exceed it.
const SLACK_NS: u64 = 2_000_000;

/// The busy loop's measuring window, µs (counter ticks at 1.2 MHz: 2400, so ±0.05 %).
const LOOP_WINDOW_US: u64 = 2000;
/// How far the busy loop's speed ratio may be from the frequency ratio, percent.
const SPEED_TOLERANCE_PCT: u64 = 15;
/// Iterations of the busy loop's inner block between counter reads.
const LOOP_BLOCK: u64 = 256;

/// [`busy_loop`]'s result: blocks per window (0: not run).
static LOOP_BLOCKS: AtomicU64 = AtomicU64::new(0);

fn err(e: impl core::fmt::Display) -> TestError {
    TestError::new(format_args!("{e}"))
}

/// `Ok(false)`: the DT describes no DVFS firmware (the emulated driver runs).
fn firmware_present() -> Result<bool, TestError> {
    let Some(plat) = crate::boot::platform() else {
        return Err(err("no platform"));
    };
    let described = match &plat.dvfs {
        Ok(Some(d)) => d.transport.name(),
        Ok(None) => return Ok(false),
        Err(e) => {
            return Err(err(format_args!(
                "the DT's DVFS description is unusable: {e}"
            )))
        }
    };
    let driven = cpufreq::with_driver(|d| d.firmware().is_some()).unwrap_or(false);
    test_assert!(
        driven,
        "the DT describes {} but cpufreq runs no firmware driver (see the boot log)",
        described
    );
    Ok(true)
}

fn every_opp() -> TestResult {
    if !firmware_present()? {
        crate::println!(
            "selftest dvfs_every_opp_through_the_firmware: skipped: no DVFS firmware in the DT"
        );
        return Ok(());
    }
    let nr = cpufreq::nr_policies();
    for pd in 0..nr {
        let p = cpufreq::policy(pd).ok_or(err("no policy"))?;
        let (lo_f, hi_f) = (p.min(), p.max());
        let r = every_opp_of(pd);
        // Whatever happened, give the domain back to schedutil with its limits.
        cpufreq::set_limits(pd, lo_f, hi_f).map_err(err)?;
        cpufreq::set_governor(pd, Governor::Schedutil).map_err(err)?;
        r?;
    }
    let s = crate::drivers::fw_standin::stats();
    if crate::drivers::fw_standin::running() {
        crate::println!(
            "dvfs: firmware stand-in took {} messages, {} doorbell SGIs, {} lock timeouts",
            s.messages,
            s.doorbells,
            s.lock_timeouts
        );
        test_assert!(
            s.lock_timeouts == 0,
            "the stand-in's hardware lock timed out"
        );
    }
    Ok(())
}

/// The driver's recent requests of domain `pd` (for a failure's report).
fn show_requests(pd: usize, since: u64) {
    cpufreq::with_driver(|d| {
        for r in d.requests().filter(|r| r.pd == pd) {
            crate::println!(
                "dvfs: domain {} request {} kHz at {} us{}, effective {:?} (test began {} us)",
                pd,
                r.freq.0,
                r.at.0 / 1000,
                if r.at.0 >= since { "" } else { " (before)" },
                r.effective.map(|t| t.0 / 1000),
                since / 1000
            );
        }
    });
}

/// Runs on the measured CPU (in its cross-call handler, IRQs masked): blocks of a dependent
/// multiply-add chain completed in [`LOOP_WINDOW_US`], which scales with the CPU's clock.
fn busy_loop(_cpu: CpuId) {
    let window = timer::us_to_counter(LOOP_WINDOW_US);
    let start = timer::counter();
    let mut x = core::hint::black_box(1u64);
    let mut blocks = 0u64;
    while timer::counter().wrapping_sub(start) < window {
        for _ in 0..LOOP_BLOCK {
            x = core::hint::black_box(x.wrapping_mul(0x9e37_79b9).wrapping_add(1));
        }
        blocks += 1;
    }
    core::hint::black_box(x);
    LOOP_BLOCKS.store(blocks, Ordering::Release);
}

/// The busy loop's speed on `cpu` (blocks per window).
fn loop_speed(cpu: CpuId) -> Result<u64, TestError> {
    LOOP_BLOCKS.store(0, Ordering::Release);
    smp::run_on(cpu, busy_loop).map_err(err)?;
    Ok(LOOP_BLOCKS.load(Ordering::Acquire))
}

/// Whether the OPP requests go to the board's real firmware (not the QEMU stand-in).
fn real_firmware() -> bool {
    !crate::drivers::fw_standin::running()
}

/// Pins domain `pd` to each of its OPPs in turn and checks each transition.
fn every_opp_of(pd: usize) -> TestResult {
    let p = cpufreq::policy(pd).ok_or(err("no policy"))?;
    let latency = p.transition_latency_ns;
    // Every OPP, starting with the one furthest from the current frequency and ending with the
    // current one, so each request changes the frequency.
    let mut opps: heapless::Vec<Khz, 16> = p.table().iter().map(|e| e.frequency).collect();
    if opps.first() == Some(&p.cur()) {
        opps.reverse();
    }
    if let Some(i) = opps.iter().position(|&f| f == p.cur()) {
        let cur = opps.remove(i);
        let _ = opps.push(cur);
    }
    let (mut min_lat, mut max_lat) = (u64::MAX, 0u64);
    let name = crate::sched::board().map_or("?", |b| b.perf_domains[pd].name);
    // A CPU of the domain to run the busy loop on: not the caller (the loop runs in a cross
    // call), online.
    let me = crate::percpu::current_cpu();
    let loop_cpu = smp::online_cpus()
        .filter(|&c| c != me)
        .find(|&c| cpufreq::domain_of(c) == Some(pd))
        .or_else(|| (cpufreq::domain_of(me) == Some(pd)).then_some(me));
    // (frequency, busy-loop speed) per OPP reached.
    let mut speeds: heapless::Vec<(Khz, u64), 16> = heapless::Vec::new();
    // Settle first: pinned where it is, with time for a change schedutil asked for to finish,
    // so each request below starts a transition of its own instead of joining (or being
    // credited with) one that began before it.
    let cur = p.cur();
    cpufreq::set_limits(pd, cur, cur).map_err(err)?;
    let settled = sched::now().0 + latency + SLACK_NS;
    while sched::now().0 < settled {
        cpufreq::poll();
        crate::arch::aarch64::cpu_regs::cpu_yield();
    }
    for &f in opps.iter() {
        let t0 = sched::now().0;
        cpufreq::set_limits(pd, f, f).map_err(err)?;
        let end = t0 + latency + 50 * SLACK_NS;
        while cpufreq::policy(pd).is_some_and(|p| p.cur() != f) && sched::now().0 < end {
            cpufreq::poll();
            // `yield`, not a spin: under QEMU it hands the time slice on, so the firmware
            // vCPU runs (a spinning vCPU delays it to the next timer deadline).
            crate::arch::aarch64::cpu_regs::cpu_yield();
        }
        // This test's own request (other CPUs' schedutil may repeat it, or ask it again
        // later with an older clock): the first request for `f` made since `t0`.
        let mine = cpufreq::with_driver(|d| {
            d.requests()
                .find(|r| r.pd == pd && r.freq == f && r.at.0 >= t0)
                .copied()
        })
        .flatten();
        let Some(effective) = mine.and_then(|r| r.effective) else {
            show_requests(pd, t0);
            return Err(err(format_args!(
                "domain {} asked {} kHz: no completion within {} us (last {:?})",
                pd,
                f.0,
                (end - t0) / 1000,
                cpufreq::with_policy(pd, |p| p.last_completion().copied()).flatten()
            )));
        };
        let hw = cpufreq::with_driver(|d| d.get(pd)).unwrap_or(Khz(0));
        test_assert!(
            hw == f,
            "domain {} at {} kHz, the firmware reports {} kHz",
            pd,
            f.0,
            hw.0
        );
        // The transition started with the request it served first: this one, or one for the
        // same frequency made since (schedutil's, pinned to it) that it joined.
        let started = cpufreq::with_driver(|d| {
            d.requests()
                .filter(|r| {
                    r.pd == pd && r.freq == f && r.effective == Some(effective) && r.at.0 >= t0
                })
                .map(|r| r.at.0)
                .min()
        })
        .flatten()
        .unwrap_or(t0);
        let lat = effective.0.saturating_sub(started);
        if !(latency..=latency + SLACK_NS).contains(&lat) {
            show_requests(pd, t0);
        }
        let lower = if real_firmware() { 0 } else { latency };
        let speed = match loop_cpu {
            Some(c) => Some(loop_speed(c)?),
            None => None,
        };
        crate::println!(
            "dvfs: domain {} ({}) OPP {} kHz: firmware reads {} kHz after {} us; busy loop {} blocks per {} us on cpu {}",
            pd,
            name,
            f.0,
            hw.0,
            lat / 1000,
            speed.unwrap_or(0),
            LOOP_WINDOW_US,
            loop_cpu.map_or(-1, |c| i32::from(c.0))
        );
        if let Some(v) = speed {
            let _ = speeds.push((f, v));
        }
        test_assert!(
            (lower..=latency + SLACK_NS).contains(&lat),
            "domain {} -> {} kHz took {} us, the board's latency is {} us (stand-in {:?}, fault {:x?})",
            pd,
            f.0,
            lat / 1000,
            latency / 1000,
            crate::drivers::fw_standin::stats(),
            crate::drivers::fw_standin::fault()
        );
        min_lat = min_lat.min(lat);
        max_lat = max_lat.max(lat);
    }
    check_speeds(pd, &speeds, real_firmware())?;
    crate::println!(
        "dvfs: domain {} ({}): {} OPPs set and read back through {}, latency {}..{} us (board {} us)",
        pd,
        name,
        opps.len(),
        cpufreq::with_driver(|d| d.name()).unwrap_or("?"),
        min_lat / 1000,
        max_lat / 1000,
        latency / 1000
    );
    Ok(())
}

/// Against real firmware: the busy loop's speed at each OPP over its speed at the lowest must
/// be the frequency ratio within [`SPEED_TOLERANCE_PCT`].
fn check_speeds(pd: usize, speeds: &[(Khz, u64)], judge: bool) -> TestResult {
    let Some(&(f0, v0)) = speeds.iter().min_by_key(|(f, _)| *f) else {
        return Ok(());
    };
    if !judge {
        crate::println!(
            "dvfs: domain {}: busy-loop speed not judged (QEMU firmware stand-in: a vCPU's speed does not follow the emulated clock)",
            pd
        );
        return Ok(());
    }
    test_assert!(v0 > 0, "domain {}: the busy loop did not run", pd);
    for &(f, v) in speeds {
        // v / v0 against f / f0, in percent: v * f0 * 100 / (v0 * f).
        let pct = u128::from(v) * u128::from(f0.0) * 100 / (u128::from(v0) * u128::from(f.0));
        test_assert!(
            pct.abs_diff(100) <= u128::from(SPEED_TOLERANCE_PCT),
            "domain {}: at {} kHz the busy loop runs {} blocks, at {} kHz {}: {} % of the speed the frequency ratio gives (firmware acknowledged a level the clock did not take?)",
            pd,
            f.0,
            v,
            f0.0,
            v0,
            pct
        );
    }
    Ok(())
}

fn non_opp_refused() -> TestResult {
    if !firmware_present()? {
        return Ok(());
    }
    let p = cpufreq::policy(0).ok_or(err("no policy 0"))?;
    let bad = Khz(p.max().0 + 1);
    let r = cpufreq::with_driver(|d| d.target(&p, bad, sched::now())).ok_or(err("no cpufreq"))?;
    test_assert!(
        r == Err(cpufreq::DriverError::Firmware(asym_dvfs::Error::NotAnOpp {
            pd: 0,
            freq: bad
        })),
        "{:?}",
        r
    );
    Ok(())
}
