//! Self tests of load balancing with real threads (`crate::sched::balance`).
//!
//! Oracle: Linux's balancer spreads always-running tasks over idle CPUs. Six (one per CPU)
//! always-running threads all start on one CPU's run queue (spawned pinned there, then their
//! affinity widened to every CPU, from freshly built sched domains): the periodic balance,
//! the NOHZ balance kick and the idle CPUs' balance must leave one thread on each CPU. Within 200 ms of guest time: the domains'
//! intervals are a few ms (`sd->balance_interval` starts at the span's weight in ms), the
//! kick is once per jiffy, so a working balancer needs a few tens of ms; one that never runs
//! (no `SCHED_SOFTIRQ`) never spreads them.

//!
//! Oracle for the active balance (Linux `need_active_balance` → `stop_one_cpu_nowait` of
//! `active_load_balance_cpu_stop`): an always-running thread on a LITTLE CPU whose
//! utilisation does not fit it is a misfit task once its affinity allows a big CPU; no
//! wake-up ever places it (it never sleeps) and the passive balance cannot detach a running
//! task, so only the stopper on the LITTLE CPU can push it. Linux moves it within a few
//! balance intervals of an idle big CPU; the bound here is issue 12's (a task that grew runs
//! on a big CPU within 100 ms), with the thread's utilisation already above the LITTLE CPU's
//! fit margin when its affinity widens.
//!
//! Oracle for newidle balance (Linux `sched_balance_newidle`, from `__schedule` when a CPU
//! finds nothing to run): a CPU that goes idle while a CPU of its lowest domain has tasks
//! waiting pulls one before it idles, with no tick in between. Three always-running threads
//! share one CPU; a thread on a CPU of the same capacity sleeps; that CPU's own newidle
//! balance must pull one of them (its counter says so: nothing else balances in that instant,
//! the sleeping CPU was busy until then and the crowded one has nothing to pull). Three, not
//! two: one of the waiting threads then last ran at least a slice ago, so `task_hot` (ran less
//! than `sysctl_sched_migration_cost` ago) cannot refuse every candidate.

//!
//! Oracle for the NOHZ blocked-load update (Linux `nohz_balance_enter_idle`,
//! `nohz_balancer_kick`'s `NOHZ_STATS_KICK`, `_nohz_idle_balance`): a CPU that goes idle with
//! blocked load stops its tick at once, and while another CPU ticks busy the idle load
//! balancer decays that blocked load every `LOAD_AVG_PERIOD` (32 ms) without the idle CPU
//! taking a tick: PELT halves a signal every 32 ms, so 200 ms leave well under half of it.
//! Checked with `sched_balance=on` and `off` (Linux has no such switch; asym's takes the
//! balancing away and nothing else, the crate's `nohz_parts`).

#![allow(clippy::result_large_err)] // `TestError` carries its message by design.

use core::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};

use asym_sched::types::{CpuId, CpuMask};

use super::threads::spawn_with;
use crate::dt::MAX_CPUS;
use crate::percpu::current_cpu;
use crate::selftest::{TestError, TestResult};
use crate::task::{self, ThreadParams};
use crate::{sched, test_assert};

crate::selftest!(
    name = "sched_balance_spreads_busy_threads_within_200ms",
    spreads_busy_threads
);

crate::selftest!(
    name = "sched_active_balance_moves_misfit_to_big_within_100ms",
    moves_misfit_to_big
);

crate::selftest!(
    name = "sched_newidle_balance_pulls_when_a_cpu_goes_idle",
    newidle_pulls
);

crate::selftest!(
    name = "sched_nohz_idle_balancer_decays_blocked_load",
    nohz_decays_blocked_load
);

/// Waits (up to 2 s) until no CPU has more than one task queued: earlier tests' threads gone.
fn wait_quiet() -> TestResult {
    let quiet = super::sched::wait_until(2_000_000_000, || {
        crate::smp::online_cpus().all(|c| sched::snapshot(c).is_none_or(|s| s.nr_running <= 1))
    });
    test_assert!(quiet, "system not quiet before the test");
    Ok(())
}

/// Spawns `n` threads running `f(0..n)` with `params` into `ids`; stops at the first that
/// cannot be spawned (the caller stops and joins those in `ids`).
fn spawn_each<const N: usize>(
    name: &str,
    params: ThreadParams,
    f: fn(usize),
    n: usize,
    ids: &mut heapless::Vec<task::ThreadId, N>,
) -> TestResult {
    for i in 0..n {
        let id = spawn_with(name, params, f, i)?;
        if ids.push(id).is_err() {
            return Err(TestError::new(format_args!("more than {N} {name} threads")));
        }
    }
    Ok(())
}

fn err(e: impl core::fmt::Display) -> TestError {
    TestError::new(format_args!("{e}"))
}

/// The deadline for the spread, guest ns.
const SPREAD_WITHIN_NS: u64 = 200_000_000;
/// How long the spread must then hold (no ping-pong), guest ns.
const HOLD_NS: u64 = 20_000_000;
/// After a transient break of the spread: one per CPU again within this, guest ns.
const RESPREAD_NS: u64 = 100_000_000;
/// After a transient break of the spread: at most this many tasks moved (the push, the pull
/// back, and one of each more).
const MAX_TRANSIENT_MOVES: u64 = 4;

static STOP: AtomicBool = AtomicBool::new(false);
/// Per thread: the CPU it last ran on.
static CPU_OF: [AtomicU16; MAX_CPUS] = [const { AtomicU16::new(u16::MAX) }; MAX_CPUS];

fn busy(i: usize) {
    while !STOP.load(Ordering::Relaxed) {
        CPU_OF[i].store(current_cpu().0, Ordering::Relaxed);
        sched::spin_hint();
    }
}

/// The CPUs the threads are on now, and whether each is on its own CPU.
fn placement(n: usize) -> (CpuMask, bool) {
    let mut m = CpuMask::EMPTY;
    for c in CPU_OF.iter().take(n) {
        let c = c.load(Ordering::Relaxed);
        if usize::from(c) >= MAX_CPUS {
            return (m, false);
        }
        m.set(CpuId(c));
    }
    (m, m.weight() as usize == n)
}

fn spreads_busy_threads() -> TestResult {
    let online = crate::smp::online_cpus().fold(CpuMask::EMPTY, |mut m, c| {
        m.set(c);
        m
    });
    let n = online.weight() as usize;
    if n < 2 {
        crate::println!("selftest sched_balance_spreads_busy_threads_within_200ms: skipped: 1 CPU");
        return Ok(());
    }
    let was_on = sched::balance::enabled();
    let r = run(n, online);
    sched::balance::set_enabled(was_on);
    r
}

fn run(n: usize, online: CpuMask) -> TestResult {
    // Start from a quiet system: the CPUs idle, so their ticks stop and only balancing can
    // bring the threads to them.
    wait_quiet()?;
    // The threads' first CPU: not the runner's, so that it keeps a CPU to watch from.
    let home = online
        .iter()
        .find(|&c| c != current_cpu())
        .unwrap_or(current_cpu());
    // The forced placement runs without balancing (its pinned threads would only back the
    // balancer's intervals off).
    sched::balance::set_enabled(false);
    STOP.store(false, Ordering::Relaxed);
    for c in CPU_OF.iter() {
        c.store(u16::MAX, Ordering::Relaxed);
    }
    let params = ThreadParams {
        affinity: CpuMask::of(home),
        ..ThreadParams::default()
    };
    let mut ids: heapless::Vec<task::ThreadId, MAX_CPUS> = heapless::Vec::new();
    if let Err(e) = spawn_each("lb-busy", params, busy, n, &mut ids) {
        STOP.store(true, Ordering::Relaxed);
        for id in ids {
            let _ = task::join(id);
        }
        return Err(e);
    }
    let result = check(n, online, home, &ids);
    STOP.store(true, Ordering::Relaxed);
    for id in ids {
        task::join(id).map_err(err)?;
    }
    result
}

fn check(n: usize, online: CpuMask, home: CpuId, ids: &[task::ThreadId]) -> TestResult {
    // All queued on `home` and each has run there.
    let started = super::sched::wait_until(500_000_000, || {
        placement(n).0 == CpuMask::of(home)
            && CPU_OF
                .iter()
                .take(n)
                .all(|c| c.load(Ordering::Relaxed) != u16::MAX)
    });
    test_assert!(
        started,
        "the {} threads did not all start on cpu {} (on {:?})",
        n,
        home.0,
        placement(n).0
    );
    // From fresh domains: the pinned placement above ran with balancing off, and earlier
    // tests' pinned threads may have backed the intervals off to `MAX_PINNED_INTERVAL`
    // (512 ms), which Linux also keeps until a balance succeeds or the domains are rebuilt.
    test_assert!(
        sched::balance::rebuild_sched_domains() && sched::balance::set_enabled(true),
        "load balancing cannot be turned on (no sched domains)"
    );
    let t0 = sched::now().0;
    for &id in ids {
        sched::set_affinity(id, online).map_err(err)?;
    }
    let spread = super::sched::wait_until(SPREAD_WITHIN_NS, || placement(n).1);
    let dt = sched::now().0 - t0;
    let (m, _) = placement(n);
    let (mut raised, mut moved) = (0, 0);
    for c in online.iter() {
        raised += crate::softirq::counts(c).0;
        moved += sched::balance::stats(c).moved;
    }
    crate::println!(
        "sched: {} busy threads from cpu {}: on {:?} after {} us (SCHED_SOFTIRQ raised {} \
         times so far, {} tasks pulled)",
        n,
        home.0,
        m,
        dt / 1000,
        raised,
        moved
    );
    if !spread {
        for c in online.iter() {
            crate::println!(
                "sched: cpu {}: {:?}, domains {:?}, nr_running {:?}, softirq {:?}",
                c.0,
                sched::balance::stats(c),
                sched::balance::domain_state(c),
                sched::snapshot(c).map(|s| s.nr_running),
                crate::softirq::counts(c)
            );
        }
    }
    test_assert!(
        spread,
        "{} always-running threads not one per CPU {} ms after their affinity widened \
         (on {:?})",
        n,
        SPREAD_WITHIN_NS / 1_000_000,
        m
    );
    // And they stay so — or, after a transient, are one per CPU again soon, with few moves.
    // The transient is Linux's rule: right after the spread a big CPU's newly arrived thread
    // still has the LITTLE CPU's util, so the big group may look as if it had spare capacity
    // (`group_has_capacity`: util under capacity / imbalance_pct) and pull a misfit LITTLE
    // thread through an active balance; the two on one big CPU are then an overload the next
    // balance undoes. Seen in 2 of 13 suite configurations (a push onto CPU 0, CPU 2 left
    // idle). A ping-pong would keep moving threads: the moves are bounded.
    let moved_total = || {
        online
            .iter()
            .map(|c| sched::balance::stats(c).moved)
            .sum::<u64>()
    };
    let moves_before = moved_total();
    let moved_away = super::sched::wait_until(HOLD_NS, || !placement(n).1);
    if moved_away {
        let away = placement(n).0;
        for c in online.iter() {
            crate::println!(
                "sched: cpu {}: {:?}, nr_running {:?}, misfit {:?}",
                c.0,
                sched::balance::stats(c),
                sched::snapshot(c).map(|s| s.nr_running),
                sched::snapshot(c).map(|s| s.misfit_task_load)
            );
        }
        let back = super::sched::wait_until(RESPREAD_NS, || placement(n).1);
        let moves = moved_total() - moves_before;
        crate::println!(
            "sched: the spread broke (on {:?}) and was {} after {} moves",
            away,
            if back { "restored" } else { "not restored" },
            moves
        );
        test_assert!(
            back && moves <= MAX_TRANSIENT_MOVES,
            "the spread broke (on {:?}) and was not one per CPU again within {} ms with at \
             most {} moves ({} moves, on {:?})",
            away,
            RESPREAD_NS / 1_000_000,
            MAX_TRANSIENT_MOVES,
            moves,
            placement(n).0
        );
    }
    Ok(())
}

/// The deadline for the misfit thread to run on a big CPU after its affinity widened, guest ns
/// (issue 12: within 100 ms of growing).
const MISFIT_WITHIN_NS: u64 = 100_000_000;

static MISFIT_STOP: AtomicBool = AtomicBool::new(false);
/// The CPU the misfit thread last ran on.
static MISFIT_CPU: AtomicU16 = AtomicU16::new(u16::MAX);

fn misfit_busy(_: usize) {
    while !MISFIT_STOP.load(Ordering::Relaxed) {
        MISFIT_CPU.store(current_cpu().0, Ordering::Relaxed);
        sched::spin_hint();
    }
}

fn moves_misfit_to_big() -> TestResult {
    let cap = |c: CpuId| sched::capacity_orig(c).0;
    let max = crate::smp::online_cpus().map(cap).max().unwrap_or(0);
    let (mut big, mut little) = (CpuMask::EMPTY, CpuMask::EMPTY);
    for c in crate::smp::online_cpus() {
        if cap(c) == max {
            big.set(c);
        } else {
            little.set(c);
        }
    }
    // A LITTLE CPU other than the runner's, which it keeps for watching.
    let Some(home) = little.iter().find(|&c| c != current_cpu()) else {
        crate::println!(
            "selftest sched_active_balance_moves_misfit_to_big_within_100ms: skipped: no \
             asymmetric CPUs"
        );
        return Ok(());
    };
    let was_on = sched::balance::enabled();
    let r = run_misfit(home, big.or(little));
    sched::balance::set_enabled(was_on);
    r
}

fn run_misfit(home: CpuId, online: CpuMask) -> TestResult {
    wait_quiet()?;
    // Its utilisation grows pinned, without balancing (which a pinned task only backs off).
    sched::balance::set_enabled(false);
    MISFIT_STOP.store(false, Ordering::Relaxed);
    MISFIT_CPU.store(u16::MAX, Ordering::Relaxed);
    let params = ThreadParams {
        affinity: CpuMask::of(home),
        ..ThreadParams::default()
    };
    let id = spawn_with("misfit", params, misfit_busy, 0)?;
    let result = check_misfit(home, online, id);
    MISFIT_STOP.store(true, Ordering::Relaxed);
    task::join(id).map_err(err)?;
    result
}

fn check_misfit(home: CpuId, online: CpuMask, id: task::ThreadId) -> TestResult {
    let cap = u64::from(sched::capacity_orig(home).0);
    // `util_fits_cpu`'s margin is 80 %: above 85 % of the LITTLE CPU's capacity the thread
    // does not fit it.
    let util = || sched::snapshot(home).map_or(0, |s| u64::from(s.util.cfs.util_avg.0));
    let grown = super::sched::wait_until(1_000_000_000, || {
        MISFIT_CPU.load(Ordering::Relaxed) == home.0 && util() * 100 >= cap * 85
    });
    test_assert!(
        grown,
        "the thread pinned to cpu {} did not reach 85 % of its capacity {} in 1 s (util {})",
        home.0,
        cap,
        util()
    );
    test_assert!(
        sched::balance::rebuild_sched_domains() && sched::balance::set_enabled(true),
        "load balancing cannot be turned on (no sched domains)"
    );
    let before: u64 = online
        .iter()
        .map(|c| sched::balance::stats(c).active_pushed)
        .sum();
    let u0 = util();
    let t0 = sched::now().0;
    sched::set_affinity(id, online).map_err(err)?;
    let on_big = |c: u16| {
        usize::from(c) < MAX_CPUS && sched::capacity_orig(CpuId(c)).0 > sched::capacity_orig(home).0
    };
    let moved = super::sched::wait_until(MISFIT_WITHIN_NS, || {
        on_big(MISFIT_CPU.load(Ordering::Relaxed))
    });
    let dt = sched::now().0 - t0;
    let now_on = MISFIT_CPU.load(Ordering::Relaxed);
    let pushed: u64 = online
        .iter()
        .map(|c| sched::balance::stats(c).active_pushed)
        .sum::<u64>()
        - before;
    crate::println!(
        "sched: misfit thread (util {} of cpu {}'s {}) on cpu {} {} us after its affinity \
         widened ({} active balances pushed)",
        u0,
        home.0,
        cap,
        now_on,
        dt / 1000,
        pushed
    );
    if !moved {
        for c in online.iter() {
            crate::println!(
                "sched: cpu {}: {:?}, domains {:?}, misfit load {:?}",
                c.0,
                sched::balance::stats(c),
                sched::balance::domain_state(c),
                sched::snapshot(c).map(|s| s.misfit_task_load),
            );
        }
    }
    test_assert!(
        moved,
        "the misfit thread still runs on cpu {} {} ms after its affinity allowed a big CPU",
        now_on,
        MISFIT_WITHIN_NS / 1_000_000
    );
    test_assert!(pushed > 0, "it moved without an active balance");
    // And it stays on a big CPU.
    let left = super::sched::wait_until(HOLD_NS, || !on_big(MISFIT_CPU.load(Ordering::Relaxed)));
    test_assert!(
        !left,
        "the misfit thread left the big CPUs within {} ms (cpu {})",
        HOLD_NS / 1_000_000,
        MISFIT_CPU.load(Ordering::Relaxed)
    );
    Ok(())
}

/// The crowded CPU's always-running threads.
const NEWIDLE_BUSY: usize = 3;
static NB_STOP: AtomicBool = AtomicBool::new(false);
/// Set by the runner once balancing is on: the sleeper sleeps.
static NB_GO: AtomicBool = AtomicBool::new(false);
/// The sleeper runs and waits for [`NB_GO`].
static NB_READY: AtomicBool = AtomicBool::new(false);
/// Guest ns when the sleeper went to sleep.
static NB_SLEPT_AT: AtomicU64 = AtomicU64::new(0);
/// Per busy thread: the CPU it last ran on.
static NB_CPU: [AtomicU16; NEWIDLE_BUSY] = [const { AtomicU16::new(u16::MAX) }; NEWIDLE_BUSY];
/// Guest ns when a busy thread first ran on the idle CPU (0: not yet).
static NB_ARRIVED_AT: AtomicU64 = AtomicU64::new(0);
/// The CPU that goes idle.
static NB_IDLE_CPU: AtomicU16 = AtomicU16::new(u16::MAX);

fn newidle_busy(i: usize) {
    while !NB_STOP.load(Ordering::Relaxed) {
        let c = current_cpu().0;
        NB_CPU[i].store(c, Ordering::Relaxed);
        if c == NB_IDLE_CPU.load(Ordering::Relaxed) && NB_ARRIVED_AT.load(Ordering::Relaxed) == 0 {
            let _ = NB_ARRIVED_AT.compare_exchange(
                0,
                sched::now().0.max(1),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
        sched::spin_hint();
    }
}

fn newidle_sleeper(_: usize) {
    NB_READY.store(true, Ordering::Release);
    while !NB_GO.load(Ordering::Acquire) {
        sched::spin_hint();
    }
    let t = sched::now().0;
    NB_SLEPT_AT.store(t, Ordering::Relaxed);
    sched::sleep_until(asym_sched::types::Nanos(t + 50_000_000));
}

fn newidle_pulls() -> TestResult {
    const NAME: &str = "sched_newidle_balance_pulls_when_a_cpu_goes_idle";
    // Two CPUs of one capacity, neither the runner's (which watches): the crowded one and the
    // one that goes idle, in one lowest domain on every emulated board.
    let mut others = CpuMask::EMPTY;
    for c in crate::smp::online_cpus().filter(|&c| c != current_cpu()) {
        others.set(c);
    }
    let cap = |c: CpuId| sched::capacity_orig(c).0;
    let pair = others.iter().find_map(|a| {
        others
            .iter()
            .find(|&b| b != a && cap(b) == cap(a))
            .map(|b| (a, b))
    });
    let Some((crowded, idle)) = pair else {
        crate::println!("selftest {NAME}: skipped: no two CPUs of one capacity besides this one");
        return Ok(());
    };
    let was_on = sched::balance::enabled();
    let r = run_newidle(crowded, idle);
    sched::balance::set_enabled(was_on);
    r
}

fn run_newidle(crowded: CpuId, idle: CpuId) -> TestResult {
    wait_quiet()?;
    // The placement is forced with balancing off.
    sched::balance::set_enabled(false);
    for f in [&NB_STOP, &NB_GO, &NB_READY] {
        f.store(false, Ordering::Relaxed);
    }
    NB_ARRIVED_AT.store(0, Ordering::Relaxed);
    NB_IDLE_CPU.store(idle.0, Ordering::Relaxed);
    for c in &NB_CPU {
        c.store(u16::MAX, Ordering::Relaxed);
    }
    let mut ids: heapless::Vec<task::ThreadId, { NEWIDLE_BUSY + 1 }> = heapless::Vec::new();
    let on = |c: CpuId| ThreadParams {
        affinity: CpuMask::of(c),
        ..ThreadParams::default()
    };
    let spawned = spawn_each("nb-busy", on(crowded), newidle_busy, NEWIDLE_BUSY, &mut ids);
    let result = match spawned.and_then(|()| spawn_with("nb-sleep", on(idle), newidle_sleeper, 0)) {
        Ok(sleeper) => {
            let r = check_newidle(crowded, idle, &ids);
            // The sleeper leaves (after its sleep) whatever the check found.
            NB_GO.store(true, Ordering::Release);
            r.and(task::join(sleeper).map(|_| ()).map_err(err))
        }
        Err(e) => Err(e),
    };
    NB_STOP.store(true, Ordering::Relaxed);
    for id in ids {
        task::join(id).map_err(err)?;
    }
    result
}

fn check_newidle(crowded: CpuId, idle: CpuId, ids: &[task::ThreadId]) -> TestResult {
    let started = super::sched::wait_until(500_000_000, || {
        NB_READY.load(Ordering::Acquire)
            && NB_CPU
                .iter()
                .all(|c| c.load(Ordering::Relaxed) == crowded.0)
    });
    test_assert!(
        started,
        "the {} busy threads did not all run on cpu {} with the sleeper on cpu {}",
        NEWIDLE_BUSY,
        crowded.0,
        idle.0
    );
    // Let each busy thread run a slice and wait one, so at least one of them is cache-cold.
    let _ = super::sched::wait_until(20_000_000, || false);
    let both = CpuMask::of(crowded).or(CpuMask::of(idle));
    for &id in ids {
        sched::set_affinity(id, both).map_err(err)?;
    }
    test_assert!(
        sched::balance::rebuild_sched_domains() && sched::balance::set_enabled(true),
        "load balancing cannot be turned on (no sched domains)"
    );
    let before = sched::balance::stats(idle);
    NB_GO.store(true, Ordering::Release);
    let arrived =
        super::sched::wait_until(20_000_000, || NB_ARRIVED_AT.load(Ordering::Relaxed) != 0);
    let after = sched::balance::stats(idle);
    let (slept, came) = (
        NB_SLEPT_AT.load(Ordering::Relaxed),
        NB_ARRIVED_AT.load(Ordering::Relaxed),
    );
    crate::println!(
        "sched: cpu {} went idle; a busy thread of cpu {} ran there {} us later ({} newidle \
         balances, {} tasks pulled by them, {} by any balance)",
        idle.0,
        crowded.0,
        came.saturating_sub(slept) / 1000,
        after.newidle - before.newidle,
        after.newidle_moved - before.newidle_moved,
        after.moved - before.moved
    );
    test_assert!(
        arrived,
        "no busy thread of cpu {} ran on cpu {} within 20 ms of it going idle",
        crowded.0,
        idle.0
    );
    test_assert!(
        after.newidle_moved > before.newidle_moved,
        "cpu {} went idle with {} threads waiting on cpu {} and its newidle balance pulled none \
         ({} newidle balances; {} tasks arrived by other balances)",
        idle.0,
        NEWIDLE_BUSY - 1,
        crowded.0,
        after.newidle - before.newidle,
        after.moved - before.moved
    );
    Ok(())
}

/// How long the idle CPU may take to stop its tick after its thread ended, guest ns (the
/// thread's exit, a switch to idle and the idle loop: well under a tick).
const NOHZ_STOP_WITHIN_NS: u64 = 8_000_000;
/// How long the blocked load is watched decaying, guest ns.
const NOHZ_DECAY_NS: u64 = 200_000_000;

fn nohz_decays_blocked_load() -> TestResult {
    const NAME: &str = "sched_nohz_idle_balancer_decays_blocked_load";
    let me = current_cpu();
    let Some(cpu) = crate::smp::online_cpus().filter(|&c| c != me).last() else {
        crate::println!("selftest {NAME}: skipped: one CPU");
        return Ok(());
    };
    if !sched::balance::has_domains() {
        crate::println!("selftest {NAME}: skipped: no sched domains");
        return Ok(());
    }
    // With load balancing on and off alike (the crate's `nohz_parts`): the switch takes
    // balancing away, not the blocked-load decay.
    let was_on = sched::balance::enabled();
    let mut r = Ok(());
    for lb in [true, false] {
        sched::balance::set_enabled(lb);
        r = nohz_decays_with(cpu);
        if r.is_err() {
            crate::println!(
                "selftest {NAME}: failed with sched_balance={}",
                if lb { "on" } else { "off" }
            );
            break;
        }
    }
    sched::balance::set_enabled(was_on);
    r
}

fn nohz_decays_with(cpu: CpuId) -> TestResult {
    wait_quiet()?;
    let util = |c: CpuId| sched::snapshot(c).map_or(0, |s| s.util.cfs.util_avg.0);
    // A thread that works on `cpu`, then sleeps there: its utilisation stays in the CPU's
    // averages as blocked load (a thread that exited would be removed from them instead).
    NOHZ_WORKED.store(false, Ordering::Relaxed);
    let params = ThreadParams {
        affinity: CpuMask::of(cpu),
        ..ThreadParams::default()
    };
    let id = spawn_with("nohz-sleeper", params, nohz_sleeper, 0)?;
    let r = nohz_check(cpu, util);
    task::join(id).map_err(err)?;
    r
}

/// The sleeper of [`nohz_decays_blocked_load`] has done its work and gone to sleep.
static NOHZ_WORKED: AtomicBool = AtomicBool::new(false);

fn nohz_sleeper(_: usize) {
    sched::work(30_000_000);
    NOHZ_WORKED.store(true, Ordering::Release);
    sched::sleep_ns(NOHZ_STOP_WITHIN_NS + NOHZ_DECAY_NS + 100_000_000);
}

fn nohz_check(cpu: CpuId, util: impl Fn(CpuId) -> u32) -> TestResult {
    let worked = super::sched::wait_until(2_000_000_000, || NOHZ_WORKED.load(Ordering::Acquire));
    test_assert!(
        worked,
        "the sleeper on cpu {} did not finish its work",
        cpu.0
    );
    let ended = sched::now().0;
    // This thread stays on its CPU from here on, so this CPU's ticks are busy ones and kick
    // the idle load balancer.
    let stopped = spin_until(ended + NOHZ_STOP_WITHIN_NS, || {
        crate::timer::tick_stopped(cpu)
    });
    let u0 = util(cpu);
    test_assert!(
        stopped,
        "cpu {} did not stop its tick within {} ms of going idle (blocked util {})",
        cpu.0,
        NOHZ_STOP_WITHIN_NS / 1_000_000,
        u0
    );
    test_assert!(
        u0 > 0,
        "cpu {} had no blocked utilisation left to decay",
        cpu.0
    );
    let nohz_stats = || -> u64 {
        crate::smp::online_cpus()
            .map(|c| sched::balance::stats(c).nohz_stats)
            .sum()
    };
    let (stats0, ticks0) = (nohz_stats(), crate::timer::ticks(cpu));
    spin_until(sched::now().0 + NOHZ_DECAY_NS, || false);
    let (u1, ticks1, stats1) = (util(cpu), crate::timer::ticks(cpu), nohz_stats());
    crate::println!(
        "balance: idle cpu {}: blocked util {} -> {} over {} ms with {} ticks of its own, {} NOHZ blocked-load updates",
        cpu.0,
        u0,
        u1,
        NOHZ_DECAY_NS / 1_000_000,
        ticks1 - ticks0,
        stats1 - stats0
    );
    test_assert!(
        u1 * 2 < u0,
        "cpu {}'s blocked util went only from {} to {} in {} ms",
        cpu.0,
        u0,
        u1,
        NOHZ_DECAY_NS / 1_000_000
    );
    test_assert!(
        ticks1 - ticks0 <= 1,
        "idle cpu {} took {} ticks while its blocked load decayed",
        cpu.0,
        ticks1 - ticks0
    );
    test_assert!(stats1 > stats0, "no NOHZ blocked-load update ran");
    Ok(())
}

/// Spins (this thread stays on its CPU, so its ticks are busy ones) until guest time
/// `deadline` or until `done()`; whether `done()` held.
fn spin_until(deadline: u64, mut done: impl FnMut() -> bool) -> bool {
    while sched::now().0 < deadline {
        if done() {
            return true;
        }
        sched::spin_hint();
    }
    false
}
