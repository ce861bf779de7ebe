//! Self tests of the board's DVFS firmware driver (on the emulated boards: the real driver
//! against the firmware stand-in, `crate::drivers::fw_standin`; on a board: its firmware).
//!
//! Oracles: every OPP of every domain, requested through cpufreq, completes with the firmware
//! reporting that frequency (SCMI `LEVEL_GET`, the stub clocks' read-back words), no sooner than
//! the board's transition latency (the DT's `clock-latency-ns`: Juno r2 1450 µs, HiKey960
//! 300 µs, HiKey 500 µs — the firmware cannot show a level it has not reached) and within it
//! plus 2 ms of message round trips and polling; and a frequency that is not an OPP is refused by
//! the driver with its typed error. A DT that describes DVFS firmware the kernel does not drive
//! is a failure, not a skip.

#![allow(clippy::result_large_err)] // `TestError` carries its message by design.

use asym_sched::cpufreq::driver::CpufreqDriver;
use asym_sched::cpufreq::Governor;
use asym_sched::types::Khz;

use crate::selftest::{TestError, TestResult};
use crate::{cpufreq, sched, test_assert};

crate::selftest!(name = "dvfs_every_opp_through_the_firmware", every_opp);
crate::selftest!(name = "dvfs_non_opp_refused_by_the_driver", non_opp_refused);

/// Slack above the board's latency: message round trips, the firmware vCPU's wake-up and
/// this test's polling (measured under `-icount`: 40–230 µs). A driver that only noticed
/// completions at the 4 ms tick would exceed it.
const SLACK_NS: u64 = 2_000_000;

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
    let driven = cpufreq::with_core(|c| c.driver.firmware().is_some()).unwrap_or(false);
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
    let nr = cpufreq::with_core(|c| c.nr_policies()).unwrap_or(0);
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
    cpufreq::with_core(|c| {
        for r in c.driver.requests().filter(|r| r.pd == pd) {
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

/// Pins domain `pd` to each of its OPPs in turn and checks each transition.
fn every_opp_of(pd: usize) -> TestResult {
    let p = cpufreq::policy(pd).ok_or(err("no policy"))?;
    let latency = p.transition_latency_ns;
    // Every OPP, starting with the one furthest from the current frequency, so each request
    // changes the frequency.
    let mut opps: heapless::Vec<Khz, 16> = p.table().iter().map(|e| e.frequency).collect();
    if opps.first() == Some(&p.cur()) {
        opps.reverse();
    }
    let (mut min_lat, mut max_lat) = (u64::MAX, 0u64);
    for &f in opps.iter().filter(|&&f| f != p.cur()) {
        let t0 = sched::now().0;
        cpufreq::set_limits(pd, f, f).map_err(err)?;
        let end = t0 + latency + 50 * SLACK_NS;
        while cpufreq::policy(pd).is_some_and(|p| p.cur() != f) && sched::now().0 < end {
            cpufreq::poll(sched::now());
            // `yield`, not a spin: under QEMU it hands the time slice on, so the firmware
            // vCPU runs (a spinning vCPU delays it to the next timer deadline).
            crate::arch::aarch64::cpu_regs::cpu_yield();
        }
        // This test's own request (other CPUs' schedutil may repeat it, or ask it again
        // later with an older clock): the first request for `f` made since `t0`.
        let mine = cpufreq::with_core(|c| {
            c.driver
                .requests()
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
                cpufreq::with_core(|c| c.last_completion(pd).copied()).flatten()
            )));
        };
        let hw = cpufreq::with_core(|c| c.driver.get(pd)).unwrap_or(Khz(0));
        test_assert!(
            hw == f,
            "domain {} at {} kHz, the firmware reports {} kHz",
            pd,
            f.0,
            hw.0
        );
        // The transition started with the request it served first: this one, or one for the
        // same frequency already in progress that this one joined.
        let started = cpufreq::with_core(|c| {
            c.driver
                .requests()
                .filter(|r| r.pd == pd && r.freq == f && r.effective == Some(effective))
                .map(|r| r.at.0)
                .min()
        })
        .flatten()
        .unwrap_or(t0);
        let lat = effective.0.saturating_sub(started);
        if !(latency..=latency + SLACK_NS).contains(&lat) {
            show_requests(pd, t0);
        }
        test_assert!(
            (latency..=latency + SLACK_NS).contains(&lat),
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
    crate::println!(
        "dvfs: domain {} ({}): {} OPPs set and read back through {}, latency {}..{} us (board {} us)",
        pd,
        crate::sched::board().map_or("?", |b| b.perf_domains[pd].name),
        opps.len(),
        cpufreq::with_core(|c| c.driver.name()).unwrap_or("?"),
        min_lat / 1000,
        max_lat / 1000,
        latency / 1000
    );
    Ok(())
}

fn non_opp_refused() -> TestResult {
    if !firmware_present()? {
        return Ok(());
    }
    let p = cpufreq::policy(0).ok_or(err("no policy 0"))?;
    let bad = Khz(p.max().0 + 1);
    let r =
        cpufreq::with_core(|c| c.driver.target(&p, bad, sched::now())).ok_or(err("no cpufreq"))?;
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
