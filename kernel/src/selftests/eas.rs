//! Self tests of energy-aware placement with real threads: small periodic tasks, free to run
//! anywhere, are placed on the LITTLE CPUs by `find_energy_efficient_cpu` over the DT's
//! energy model.
//!
//! Oracle: the energy model itself. A task of a few percent of a big CPU fits every CPU; on
//! the boards tested (Juno r2, HiKey960) a LITTLE CPU costs less energy for the same work at
//! every OPP pair schedutil can choose here, so EAS puts it on a LITTLE CPU whenever the root
//! domain is not overutilized (Linux v6.12 `find_energy_efficient_cpu`). Running time is
//! measured by the threads themselves, job by job: a job whose start and end CPU differ counts
//! as not on a LITTLE CPU (conservative).

#![allow(clippy::result_large_err)] // `TestError` carries its message by design.

use core::sync::atomic::{AtomicU64, Ordering};

use asym_sched::rq::RqSnapshot;
use asym_sched::types::{CpuId, CpuMask, Nanos};

use super::threads::spawn_with;
use crate::percpu::current_cpu;
use crate::selftest::{TestError, TestResult};
use crate::sync::IrqSpinLock;
use crate::task::{self, ThreadParams};
use crate::{sched, test_assert};

crate::selftest!(
    name = "sched_eas_small_periodic_on_little",
    small_periodic_on_little
);

fn err(e: impl core::fmt::Display) -> TestError {
    TestError::new(format_args!("{e}"))
}

/// Periodic threads in the test.
const NR_SMALL: usize = 4;
/// Work per job: ns of a biggest CPU at its top OPP.
const SMALL_WORK_NS: u64 = 500_000;
/// The period.
const SMALL_PERIOD_NS: u64 = 8_000_000;
/// Jobs per thread; the first [`SMALL_WARMUP`] are not counted (a new task's initial
/// utilisation and the fork path's placement, which is not energy-aware in Linux either).
const SMALL_JOBS: u64 = 120;
const SMALL_WARMUP: u64 = 10;

/// Per thread: running ns on LITTLE CPUs, and in all.
static LITTLE_NS: [AtomicU64; NR_SMALL] = [const { AtomicU64::new(0) }; NR_SMALL];
static TOTAL_NS: [AtomicU64; NR_SMALL] = [const { AtomicU64::new(0) }; NR_SMALL];
static T0: AtomicU64 = AtomicU64::new(0);
/// Per thread: counted jobs that began with the root domain overutilized (placed without EAS).
static OVERUTILIZED_JOBS: [AtomicU64; NR_SMALL] = [const { AtomicU64::new(0) }; NR_SMALL];
/// The first counted job not on a LITTLE CPU: `(thread, job, CPU)` and every CPU's snapshot
/// as it ended, reported if the test fails.
static OFF_LITTLE: IrqSpinLock<Option<OffLittle>> = IrqSpinLock::new(None);

struct OffLittle {
    thread: usize,
    job: u64,
    cpu: CpuId,
    /// The thread's own `(util_avg, runnable_avg, util_est)` then.
    avg: Option<(u64, u64, u32)>,
    cpus: heapless::Vec<RqSnapshot, 8>,
}

/// The CPUs below the biggest capacity.
fn little_mask() -> CpuMask {
    let max = crate::smp::online_cpus()
        .map(|c| sched::capacity_orig(c).0)
        .max()
        .unwrap_or(0);
    let mut m = CpuMask::EMPTY;
    for c in crate::smp::online_cpus() {
        if sched::capacity_orig(c).0 < max {
            m.set(c);
        }
    }
    m
}

fn small_periodic_on_little() -> TestResult {
    let rd = sched::root_domain();
    if !rd.tracked {
        crate::println!(
            "selftest sched_eas_small_periodic_on_little: skipped: no energy model on \
             asymmetric CPUs"
        );
        return Ok(());
    }
    if !crate::cpufreq::available() {
        // sched_is_eas_possible: no cpufreq driver, so no CPU runs schedutil.
        crate::println!(
            "selftest sched_eas_small_periodic_on_little: skipped: no cpufreq driver \
             (EAS needs schedutil)"
        );
        return Ok(());
    }
    let little = little_mask();
    if little.is_empty() {
        // `maxcpus=` left only one kind of CPU up: EAS has nothing to choose between.
        test_assert!(!sched::eas_active(), "EAS active with one capacity online");
        crate::println!(
            "selftest sched_eas_small_periodic_on_little: skipped: no LITTLE CPU online"
        );
        return Ok(());
    }
    // One thread per LITTLE CPU, up to four: the claim is about tasks that fit there together.
    let n = NR_SMALL.min(little.weight() as usize);
    test_assert!(
        sched::eas_active(),
        "an energy model exists but EAS is not active (features {}, governors not all \
         schedutil?)",
        sched::features()
    );
    // The rest in a fresh thread on a biggest CPU, the runner asleep in `join` meanwhile: the
    // runner's own history must not decide the result. Seen: after the lock tests it had waited
    // runnable so long that its util_est stayed at 453 with util_avg 3 (Linux keeps the ewma
    // while runnable_avg exceeds util_avg by the margin; under `-icount` each wake-up's ~60 µs
    // path counts as runnable), so each of its polling wake-ups on its LITTLE CPU (capacity
    // 462) set the root domain overutilized again.
    let big = crate::smp::online_cpus()
        .max_by_key(|&c| sched::capacity_orig(c).0)
        .unwrap_or(current_cpu());
    *OUTCOME.lock() = None;
    let id = spawn_with(
        "eas-controller",
        ThreadParams {
            affinity: CpuMask::of(big),
            ..ThreadParams::default()
        },
        controller,
        n,
    )?;
    task::join(id).map_err(err)?;
    OUTCOME
        .lock()
        .take()
        .unwrap_or_else(|| Err(err("the controller thread left no outcome")))
}

/// [`controller`]'s result, for the runner.
static OUTCOME: IrqSpinLock<Option<TestResult>> = IrqSpinLock::new(None);

fn controller(n: usize) {
    let r = measured(n);
    *OUTCOME.lock() = Some(r);
}

/// The test proper, `n` small periodic threads, from [`controller`].
fn measured(n: usize) -> TestResult {
    let little = little_mask();
    // Start from a quiet system: what earlier tests left running would make the root domain
    // overutilized or shift the energy comparison.
    let quiet = super::sched::wait_until(2_000_000_000, || {
        !sched::overutilized()
            && crate::smp::online_cpus().all(|c| {
                sched::snapshot(c).is_none_or(|s| s.nr_running <= 1 && s.util.cfs.util_avg.0 < 64)
            })
    });
    if !quiet {
        let me = task::current().and_then(|id| {
            let g = sched::rq_lock(current_cpu()).ok()?;
            let t = g.rq.task(id.task_id())?;
            Some((t.avg.util_avg, t.avg.runnable_avg, t.avg.util_est))
        });
        crate::println!(
            "sched: not quiet: this thread on cpu {}: (util_avg, runnable_avg, util_est) {:?}",
            current_cpu().0,
            me
        );
        for c in crate::smp::online_cpus() {
            if let Some(s) = sched::snapshot(c) {
                crate::println!(
                    "sched: not quiet: cpu {} nr_running {} util {} util_est {} capacity {} \
                     idle {} tick stopped {}",
                    c.0,
                    s.nr_running,
                    s.util.cfs.util_avg.0,
                    s.util.cfs.util_est.0,
                    s.capacity.actual.0,
                    s.idle,
                    crate::timer::tick_stopped(c)
                );
            }
        }
    }
    test_assert!(
        quiet,
        "system not quiet before the test (overutilized {})",
        sched::overutilized()
    );
    for i in 0..n {
        LITTLE_NS[i].store(0, Ordering::Relaxed);
        TOTAL_NS[i].store(0, Ordering::Relaxed);
        OVERUTILIZED_JOBS[i].store(0, Ordering::Relaxed);
    }
    *OFF_LITTLE.lock() = None;
    T0.store(sched::now().0, Ordering::Relaxed);
    let mut ids: heapless::Vec<task::ThreadId, NR_SMALL> = heapless::Vec::new();
    for i in 0..n {
        let id = spawn_with("eas-small", ThreadParams::default(), small_thread, i)?;
        let _ = ids.push(id);
    }
    for id in ids {
        task::join(id).map_err(err)?;
    }
    let (mut l, mut t) = (0u64, 0u64);
    for i in 0..n {
        let (li, ti) = (
            LITTLE_NS[i].load(Ordering::Relaxed),
            TOTAL_NS[i].load(Ordering::Relaxed),
        );
        crate::println!(
            "sched: eas-small {}: {} of {} us running on LITTLE CPUs {:?}, {} jobs began \
             overutilized",
            i,
            li / 1000,
            ti / 1000,
            little,
            OVERUTILIZED_JOBS[i].load(Ordering::Relaxed)
        );
        l += li;
        t += ti;
    }
    test_assert!(t > 0, "the periodic threads never ran");
    let pct = l * 1000 / t;
    crate::println!(
        "sched: {} small periodic threads: {}.{} % of their running time on LITTLE CPUs",
        n,
        pct / 10,
        pct % 10
    );
    if pct < 950 {
        report_off_little();
    }
    test_assert!(
        pct >= 950,
        "small periodic threads ran {}.{} % of their time on LITTLE CPUs (want >= 95 %)",
        pct / 10,
        pct % 10
    );
    Ok(())
}

/// `SMALL_JOBS` jobs of `SMALL_WORK_NS`, one per period, accounting each counted job's
/// running time to LITTLE or not.
fn small_thread(i: usize) {
    let little = little_mask();
    // Each thread's phase is offset so that their wake-ups do not coincide.
    let t0 = T0.load(Ordering::Relaxed) + i as u64 * SMALL_PERIOD_NS / NR_SMALL as u64;
    for k in 0..SMALL_JOBS {
        let over = sched::overutilized();
        let c0 = current_cpu();
        let span = sched::work(SMALL_WORK_NS);
        let c1 = current_cpu();
        if k >= SMALL_WARMUP {
            // Wall time of the job: its running time plus any preemption (none expected).
            let d = span.completed.0.saturating_sub(span.started.0);
            TOTAL_NS[i].fetch_add(d, Ordering::Relaxed);
            OVERUTILIZED_JOBS[i].fetch_add(u64::from(over), Ordering::Relaxed);
            if c0 == c1 && little.contains(c0) {
                LITTLE_NS[i].fetch_add(d, Ordering::Relaxed);
            } else {
                note_off_little(i, k, c1);
            }
        }
        sched::sleep_until(Nanos(t0 + (k + 1) * SMALL_PERIOD_NS));
    }
}

/// Keeps the first job off the LITTLE CPUs with every CPU's snapshot (a diagnosis for a
/// failure, not part of the check).
fn note_off_little(thread: usize, job: u64, cpu: CpuId) {
    if OFF_LITTLE.lock().is_some() {
        return;
    }
    // Read before taking the lock: each snapshot has a leaf lock of the same rank.
    let avg = task::current().and_then(|id| {
        let g = sched::rq_lock(current_cpu()).ok()?;
        let t = g.rq.task(id.task_id())?;
        Some((t.avg.util_avg, t.avg.runnable_avg, t.avg.util_est))
    });
    let mut cpus = heapless::Vec::new();
    for c in 0..sched::nr_cpus().min(8) {
        if let Some(s) = sched::snapshot(CpuId(c as u16)) {
            let _ = cpus.push(s);
        }
    }
    let mut g = OFF_LITTLE.lock();
    if g.is_some() {
        return;
    }
    *g = Some(OffLittle {
        thread,
        job,
        cpu,
        avg,
        cpus,
    });
}

fn report_off_little() {
    let g = OFF_LITTLE.lock();
    let Some(o) = g.as_ref() else { return };
    crate::println!(
        "sched: first job off LITTLE: eas-small {} job {} on cpu {}, its (util_avg, \
         runnable_avg, util_est) {:?}; the CPUs then:",
        o.thread,
        o.job,
        o.cpu.0,
        o.avg
    );
    for s in &o.cpus {
        crate::println!(
            "sched:   cpu {}: nr_running {} util_avg {} runnable_avg {} util_est {} capacity {} of {}",
            s.cpu().0,
            s.nr_running,
            s.util.cfs.util_avg.0,
            s.util.cfs.runnable_avg.0,
            s.util.cfs.util_est.0,
            s.capacity.actual.0,
            s.capacity.capacity_orig.0
        );
    }
}
