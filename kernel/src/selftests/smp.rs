//! Self tests of SMP bring-up and cross calls: every device-tree CPU (up to `maxcpus`) is
//! online with the MPIDR the device tree gives it, and `run_on_all_cpus` runs a function on each
//! online CPU exactly once.
//!
//! Oracles: the device tree's CPU list (parsed by `dt`, not by `smp`) capped by the command
//! line's `maxcpus`, and `MPIDR_EL1` read on each CPU by a function running there; per-CPU execution counters written by the called
//! function itself.

#![allow(clippy::result_large_err)] // `TestError` carries a 256-byte message by design.

use core::sync::atomic::{AtomicU64, Ordering};

use asym_sched::types::CpuId;

use crate::arch::aarch64::cpu_regs;
use crate::percpu::{current_cpu, PerCpu, MAX_CPUS};
use crate::selftest::{TestError, TestResult};
use crate::{smp, test_assert, test_eq};

crate::selftest!(name = "smp_all_cpus_online", all_cpus_online);
crate::selftest!(name = "smp_run_on_all_cpus_once", run_on_all_cpus_once);
crate::selftest!(
    name = "smp_concurrent_calls_to_one_cpu",
    concurrent_calls_to_one_cpu
);

/// `MPIDR_EL1` as read on each CPU by [`record_mpidr`]; `u64::MAX` = not run there.
static SEEN_MPIDR: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(u64::MAX) }; MAX_CPUS]);
/// `TPIDR_EL1`-derived id each CPU reported, to check `run_on` ran `f` where it was asked to.
static SEEN_SELF: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(u64::MAX) }; MAX_CPUS]);
/// Times [`count_run`] ran on each CPU.
static RUNS: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
/// Calls [`bump_target`] ran, per CPU it ran on.
static TARGET_RUNS: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
/// Callers that finished [`call_target`].
static CALLERS_DONE: AtomicU64 = AtomicU64::new(0);
/// Set by the target when it ran the call of the caller with this index.
static CALL_RAN_FOR: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
/// Cross-call errors (or early returns) seen by [`call_target`] callers.
static CALL_ERRORS: AtomicU64 = AtomicU64::new(0);
/// Times [`count_run`] ran with an argument different from the CPU it ran on.
static WRONG_CPU: AtomicU64 = AtomicU64::new(0);

fn all_cpus_online() -> TestResult {
    let plat = crate::boot::platform()
        .ok_or_else(|| TestError::new(format_args!("no platform: boot has not parsed the DT")))?;
    let maxcpus = crate::boot::cmdline()
        .and_then(|c| c.maxcpus)
        .map_or(MAX_CPUS, usize::from);
    let expected = plat.cpus.len().min(maxcpus).max(1);
    test_eq!(smp::online_count(), expected);
    test_eq!(smp::possible_count(), expected);

    for cpu in smp::online_cpus() {
        let i = cpu.index();
        let node = plat.cpus.get(i).ok_or_else(|| {
            TestError::new(format_args!("cpu {i} is online but not in the device tree"))
        })?;
        SEEN_MPIDR.of(cpu).store(u64::MAX, Ordering::Relaxed);
        SEEN_SELF.of(cpu).store(u64::MAX, Ordering::Relaxed);
        smp::run_on(cpu, record_mpidr).map_err(|e| TestError::new(format_args!("cpu {i}: {e}")))?;
        let seen = SEEN_MPIDR.of(cpu).load(Ordering::Acquire);
        test_assert!(
            seen == node.mpidr,
            "cpu {}: MPIDR_EL1 reads {:#x} on the CPU, the device tree says {:#x}",
            i,
            seen,
            node.mpidr
        );
        test_eq!(SEEN_SELF.of(cpu).load(Ordering::Acquire), i as u64);
    }
    Ok(())
}

fn record_mpidr(cpu: CpuId) {
    let me = current_cpu();
    SEEN_SELF.of(cpu).store(u64::from(me.0), Ordering::Relaxed);
    SEEN_MPIDR
        .of(cpu)
        .store(cpu_regs::mpidr_hwid(), Ordering::Release);
}

fn run_on_all_cpus_once() -> TestResult {
    const ROUNDS: u64 = 10;
    for (_, r) in RUNS.iter() {
        r.store(0, Ordering::Relaxed);
    }
    WRONG_CPU.store(0, Ordering::Relaxed);
    for round in 1..=ROUNDS {
        smp::run_on_all_cpus(count_run)
            .map_err(|e| TestError::new(format_args!("round {round}: {e}")))?;
        // Exactly once per round: after each call every online CPU has run `round` times.
        for (cpu, runs) in RUNS.iter() {
            let want = if smp::is_online(cpu) { round } else { 0 };
            let got = runs.load(Ordering::Acquire);
            test_assert!(
                got == want,
                "round {}: cpu {} ran {} times, want {}",
                round,
                cpu.0,
                got,
                want
            );
        }
    }
    test_eq!(WRONG_CPU.load(Ordering::Relaxed), 0);
    test_assert!(smp::online_count() >= 1);
    Ok(())
}

fn count_run(cpu: CpuId) {
    if current_cpu() != cpu {
        WRONG_CPU.fetch_add(1, Ordering::Relaxed);
    }
    RUNS.of(current_cpu()).fetch_add(1, Ordering::Release);
}

/// Every online CPU at once asks the highest online CPU to run a function (from the
/// call-function IPI handler, so the callers race for the target's single call slot); the
/// target must run it exactly once per caller and every caller must see its own call complete.
fn concurrent_calls_to_one_cpu() -> TestResult {
    const ROUNDS: u64 = 5;
    let target = smp::online_cpus().last().unwrap_or(CpuId(0));
    for (_, r) in TARGET_RUNS.iter() {
        r.store(0, Ordering::Relaxed);
    }
    CALL_ERRORS.store(0, Ordering::Relaxed);
    CALLERS_DONE.store(0, Ordering::Relaxed);
    let callers = smp::online_count() as u64;
    for round in 1..=ROUNDS {
        smp::run_on_all_cpus(call_target)
            .map_err(|e| TestError::new(format_args!("round {round}: {e}")))?;
        test_eq!(CALLERS_DONE.load(Ordering::Acquire), callers * round);
        test_eq!(CALL_ERRORS.load(Ordering::Acquire), 0);
        test_eq!(
            TARGET_RUNS.of(target).load(Ordering::Acquire),
            callers * round
        );
    }
    for (cpu, runs) in TARGET_RUNS.iter().filter(|&(c, _)| c != target) {
        test_assert!(
            runs.load(Ordering::Relaxed) == 0,
            "cpu {} ran a call meant for cpu {}",
            cpu.0,
            target.0
        );
    }
    Ok(())
}

fn call_target(_cpu: CpuId) {
    let me = current_cpu();
    let target = smp::online_cpus().last().unwrap_or(CpuId(0));
    let mark = &CALL_RAN_FOR.of(me);
    mark.store(0, Ordering::Relaxed);
    if smp::run_on(target, BUMP_FOR_CALLER[me.index()]).is_err() {
        CALL_ERRORS.fetch_add(1, Ordering::Relaxed);
    } else if mark.load(Ordering::Acquire) == 0 {
        // `run_on` returned before the target ran this caller's function.
        CALL_ERRORS.fetch_add(1, Ordering::Relaxed);
    }
    CALLERS_DONE.fetch_add(1, Ordering::Release);
}

/// One function per caller, so the target's run says whose call it was.
const BUMP_FOR_CALLER: [fn(CpuId); MAX_CPUS] = {
    fn bump<const C: usize>(_cpu: CpuId) {
        TARGET_RUNS
            .of(current_cpu())
            .fetch_add(1, Ordering::Relaxed);
        CALL_RAN_FOR.of(CpuId(C as u16)).store(1, Ordering::Release);
    }
    [
        bump::<0>, bump::<1>, bump::<2>, bump::<3>, bump::<4>, bump::<5>, bump::<6>, bump::<7>,
    ]
};
