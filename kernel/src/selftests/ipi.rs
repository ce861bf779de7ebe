//! Self test of IPIs: an SGI sent from every online CPU to every other online CPU is received
//! by its target — the n × (n − 1) matrix, each pair checked on its own.
//!
//! Oracle: the receiver's own count of `Ping` IPIs (incremented in its SGI handler). Senders
//! take turns (one `run_on` per sender) and each waits for its ping's count to rise before the
//! next, so a received interrupt can only be the one just sent.

#![allow(clippy::result_large_err)] // `TestError` carries a 256-byte message by design.

use core::sync::atomic::{AtomicU64, Ordering};

use asym_sched::types::CpuId;

use crate::ipi::{self, IpiKind};
use crate::percpu::{PerCpu, MAX_CPUS};
use crate::selftest::{TestError, TestResult};
use crate::{smp, test_assert, timer};

crate::selftest!(name = "ipi_sgi_every_pair", sgi_every_pair);

/// How long a sender waits for one ping to arrive, guest microseconds.
const PING_TIMEOUT_US: u64 = 100_000;

/// Row `src`: bit `dst` set when `dst` received `src`'s ping.
static RECEIVED_FROM: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
/// Row `src`: bit `dst` set when sending to `dst` failed outright.
static SEND_FAILED: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);

fn sgi_every_pair() -> TestResult {
    let online: u64 = smp::online_cpus().fold(0, |m, c| m | (1 << c.0));
    for src in smp::online_cpus() {
        RECEIVED_FROM.of(src).store(0, Ordering::Relaxed);
        SEND_FAILED.of(src).store(0, Ordering::Relaxed);
        smp::run_on(src, ping_all_others)
            .map_err(|e| TestError::new(format_args!("sender cpu {}: {e}", src.0)))?;
    }
    let n = u64::from(online.count_ones());
    let mut pairs = 0;
    for src in smp::online_cpus() {
        let want = online & !(1 << src.0);
        let got = RECEIVED_FROM.of(src).load(Ordering::Acquire);
        let failed = SEND_FAILED.of(src).load(Ordering::Acquire);
        test_assert!(
            got == want,
            "cpu {} -> cpus {:#b}: received by {:#b}, missing {:#b} (send errors {:#b})",
            src.0,
            want,
            got,
            want & !got,
            failed
        );
        pairs += u64::from(got.count_ones());
    }
    test_assert!(
        pairs == n * (n - 1),
        "{} pairs checked, want {}",
        pairs,
        n * (n - 1)
    );
    Ok(())
}

/// Runs on `src`: pings each other online CPU in turn and waits for that CPU's ping count to
/// rise.
fn ping_all_others(src: CpuId) {
    for dst in smp::online_cpus().filter(|&d| d != src) {
        let before = ipi::received(dst, IpiKind::Ping);
        if ipi::send(dst, IpiKind::Ping).is_err() {
            SEND_FAILED.of(src).fetch_or(1 << dst.0, Ordering::Relaxed);
            continue;
        }
        let start = timer::counter();
        let deadline = start + timer::us_to_counter(PING_TIMEOUT_US);
        while ipi::received(dst, IpiKind::Ping) == before && timer::counter() < deadline {
            smp::wait_step(start);
        }
        if ipi::received(dst, IpiKind::Ping) == before + 1 {
            RECEIVED_FROM
                .of(src)
                .fetch_or(1 << dst.0, Ordering::Release);
        }
    }
}
