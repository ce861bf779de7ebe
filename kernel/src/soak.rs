//! `soak=<seconds>`: the long stress run (`cargo xtask soak`): threads sleeping, waking each
//! other and migrating across every CPU at a high rate for that much guest time, with a
//! watchdog that fails the run if any thread stops making progress, and at the end the counts
//! and the checks.
//!
//! The load:
//! - `pingpong` pairs (unpinned): 16 round trips through two completions, then a sleep of
//!   0–500 µs, so wake-ups cross CPUs wherever placement puts them;
//! - `migrator`s: short work, then a new random affinity and [`sched::migrate_self`];
//! - `sleeper`s: random sleeps of 50 µs–5 ms, recording how late they woke;
//! - `spawner`: spawns and joins short-lived threads (the table, stacks and heap churn);
//! - two `hog`s pinned to the two highest CPUs, always running: their CPUs' tick rate is
//!   checked every second against `HZ` (within 2 %).
//!
//! Every thread bumps its progress counter each loop; the watchdog (the `init` thread) checks
//! each second that every counter moved. The closing lines: `soak: <name>=<count> ...` and
//! `soak: ok` or `soak: FAILED: <reason>`.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use asym_sched::types::{CpuId, CpuMask, Nanos};

use crate::task::{self, ThreadId, ThreadParams};
use crate::wait::Completion;
use crate::{sched, smp, timer};

const PAIRS: usize = 4;
const MIGRATORS: usize = 4;
const SLEEPERS: usize = 6;
const WORKERS: usize = 2 * PAIRS + MIGRATORS + SLEEPERS + 1;

static STOP: AtomicBool = AtomicBool::new(false);
/// Per worker: loops done.
static PROGRESS: [AtomicU64; WORKERS + 2] = [const { AtomicU64::new(0) }; WORKERS + 2];
static PINGS: [Completion; PAIRS] = [const { Completion::new() }; PAIRS];
static PONGS: [Completion; PAIRS] = [const { Completion::new() }; PAIRS];
static ROUND_TRIPS: AtomicU64 = AtomicU64::new(0);
static AFFINITY_MOVES: AtomicU64 = AtomicU64::new(0);
static SLEEPS: AtomicU64 = AtomicU64::new(0);
static LATE_MAX: AtomicU64 = AtomicU64::new(0);
static SPAWNED: AtomicU64 = AtomicU64::new(0);
static CHILD_RAN: AtomicU64 = AtomicU64::new(0);

fn rng(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

fn all_cpus() -> CpuMask {
    CpuMask(smp::online_mask())
}

fn pinger(i: usize) {
    let pair = i / 2;
    let mut r = 0x9e37_79b9 ^ i as u64;
    while !STOP.load(Ordering::Relaxed) {
        for _ in 0..16 {
            if STOP.load(Ordering::Relaxed) {
                break;
            }
            PINGS[pair].complete();
            PONGS[pair].wait();
            ROUND_TRIPS.fetch_add(1, Ordering::Relaxed);
            PROGRESS[i].fetch_add(1, Ordering::Relaxed);
        }
        sched::sleep_ns(rng(&mut r) % 500_000);
    }
    // Let the partner out of its last wait.
    PINGS[pair].complete();
}

fn ponger(i: usize) {
    let pair = i / 2;
    while !STOP.load(Ordering::Relaxed) {
        PINGS[pair].wait();
        PONGS[pair].complete();
        PROGRESS[i].fetch_add(1, Ordering::Relaxed);
    }
    PONGS[pair].complete();
}

fn migrator(i: usize) {
    let mut r = 0x1234_5678 ^ i as u64;
    let me = task::current();
    while !STOP.load(Ordering::Relaxed) {
        sched::work(20_000 + rng(&mut r) % 200_000);
        let online = all_cpus();
        let mut mask = CpuMask(rng(&mut r)).and(online);
        if mask.is_empty() {
            mask = online;
        }
        if let Some(id) = me {
            if sched::set_affinity(id, mask).is_ok() {
                sched::migrate_self();
                AFFINITY_MOVES.fetch_add(1, Ordering::Relaxed);
            }
        }
        PROGRESS[i].fetch_add(1, Ordering::Relaxed);
        sched::sleep_ns(rng(&mut r) % 300_000);
    }
}

fn sleeper(i: usize) {
    let mut r = 0xdead_beef ^ i as u64;
    while !STOP.load(Ordering::Relaxed) {
        let deadline = sched::now().0 + 50_000 + rng(&mut r) % 5_000_000;
        sched::sleep_until(Nanos(deadline));
        let late = sched::now().0.saturating_sub(deadline);
        LATE_MAX.fetch_max(late, Ordering::Relaxed);
        SLEEPS.fetch_add(1, Ordering::Relaxed);
        PROGRESS[i].fetch_add(1, Ordering::Relaxed);
    }
}

fn child(_: usize) {
    CHILD_RAN.fetch_add(1, Ordering::Relaxed);
    sched::work(10_000);
}

fn spawner(i: usize) {
    while !STOP.load(Ordering::Relaxed) {
        let mut ids: heapless::Vec<ThreadId, 16> = heapless::Vec::new();
        for _ in 0..16 {
            match task::spawn("child", ThreadParams::default(), child, 0) {
                Ok(id) => {
                    let _ = ids.push(id);
                    SPAWNED.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => crate::println!("soak: spawn failed: {}", e),
            }
        }
        for id in ids {
            let _ = task::join(id);
        }
        PROGRESS[i].fetch_add(1, Ordering::Relaxed);
        sched::sleep_ns(2_000_000);
    }
}

fn hog(i: usize) {
    while !STOP.load(Ordering::Relaxed) {
        sched::work(1_000_000);
        PROGRESS[i].fetch_add(1, Ordering::Relaxed);
    }
}

fn spawn(name: &str, affinity: CpuMask, f: fn(usize), arg: usize) -> Option<ThreadId> {
    let p = ThreadParams {
        affinity,
        ..ThreadParams::default()
    };
    match task::spawn(name, p, f, arg) {
        Ok(id) => Some(id),
        Err(e) => {
            crate::println!("soak: cannot spawn {}: {}", name, e);
            None
        }
    }
}

/// Runs the soak for `secs` seconds of guest time; true if every check passed.
pub fn run(secs: u32) -> bool {
    let online: heapless::Vec<CpuId, 8> = smp::online_cpus().collect();
    let n = online.len();
    let hogs: heapless::Vec<CpuId, 2> = online.iter().rev().take(2.min(n - 1)).copied().collect();
    crate::println!(
        "soak: {} s of guest time on {} CPUs: {} ping-pong pairs, {} migrators, {} sleepers, a spawner, hogs on {:?}",
        secs,
        n,
        PAIRS,
        MIGRATORS,
        SLEEPERS,
        hogs
    );
    let mut ids: heapless::Vec<ThreadId, { WORKERS + 2 }> = heapless::Vec::new();
    let mut names: heapless::Vec<&'static str, { WORKERS + 2 }> = heapless::Vec::new();
    let all = all_cpus();
    let mut idx = 0;
    let mut add = |name: &'static str,
                   aff: CpuMask,
                   f: fn(usize),
                   ids: &mut heapless::Vec<ThreadId, { WORKERS + 2 }>,
                   names: &mut heapless::Vec<&'static str, { WORKERS + 2 }>| {
        if let Some(id) = spawn(name, aff, f, idx) {
            let _ = ids.push(id);
            let _ = names.push(name);
        }
        idx += 1;
    };
    for _ in 0..PAIRS {
        add("pinger", all, pinger, &mut ids, &mut names);
        add("ponger", all, ponger, &mut ids, &mut names);
    }
    for _ in 0..MIGRATORS {
        add("migrator", all, migrator, &mut ids, &mut names);
    }
    for _ in 0..SLEEPERS {
        add("sleeper", all, sleeper, &mut ids, &mut names);
    }
    add("spawner", all, spawner, &mut ids, &mut names);
    for &c in &hogs {
        add("hog", CpuMask::of(c), hog, &mut ids, &mut names);
    }
    let mut ok = ids.len() == names.len() && ids.len() == idx;
    let mut failure: heapless::String<160> = heapless::String::new();
    let start = sched::now().0;
    let hz = u64::from(timer::hz());
    let mut last = [0u64; WORKERS + 2];
    let mut stalled = [false; WORKERS + 2];
    let (mut rate_min, mut rate_max) = (u64::MAX, 0u64);
    let mut ticks_before: [u64; 2] = [0; 2];
    for (k, &c) in hogs.iter().enumerate() {
        ticks_before[k] = timer::ticks(c);
    }
    let mut t_before = sched::now().0;
    for second in 1..=u64::from(secs) {
        sched::sleep_until(Nanos(start + second * 1_000_000_000));
        let now = sched::now().0;
        for (k, &c) in hogs.iter().enumerate() {
            let t = timer::ticks(c);
            // Rate in milli-hertz over the last second (counts taken at our own wake-up).
            let rate = (t - ticks_before[k]) * 1_000_000_000_000 / (now - t_before).max(1);
            ticks_before[k] = t;
            if second > 1 {
                rate_min = rate_min.min(rate);
                rate_max = rate_max.max(rate);
                if rate.abs_diff(hz * 1000) * 50 > hz * 1000 && ok {
                    ok = false;
                    let _ = core::fmt::Write::write_fmt(
                        &mut failure,
                        format_args!(
                            "cpu {} ticked at {} mHz in second {} ({} tick periods missed so far)",
                            c.0,
                            rate,
                            second,
                            timer::missed(c)
                        ),
                    );
                }
            }
        }
        t_before = now;
        for (i, name) in names.iter().enumerate() {
            let p = PROGRESS[i].load(Ordering::Relaxed);
            stalled[i] = p == last[i];
            if stalled[i] && ok {
                ok = false;
                let _ = core::fmt::Write::write_fmt(
                    &mut failure,
                    format_args!("{} #{} made no progress in second {}", name, i, second),
                );
            }
            last[i] = p;
        }
        if second % 60 == 0 || !ok {
            crate::println!(
                "soak: {} s: round trips {}, sleeps {}, affinity moves {}, spawned {}",
                second,
                ROUND_TRIPS.load(Ordering::Relaxed),
                SLEEPS.load(Ordering::Relaxed),
                AFFINITY_MOVES.load(Ordering::Relaxed),
                SPAWNED.load(Ordering::Relaxed)
            );
        }
        if !ok {
            break;
        }
    }
    if !ok {
        // Reported now, with where the stalled workers are: a thread that stopped for good
        // would hang the joins below, and the watchdog is the only one left to say why.
        crate::println!("soak: FAILED: {}", failure);
        report_stalled(&ids, &names, &stalled);
        return false;
    }
    STOP.store(true, Ordering::Release);
    let mut wakeups = 0;
    let mut migrations = 0;
    for id in &ids {
        if let Some(t) = task::get(*id) {
            wakeups += t.stats.nr_wakeups.load(Ordering::Relaxed);
            migrations += t.stats.nr_migrations.load(Ordering::Relaxed);
        }
    }
    for id in &ids {
        if task::join(*id).is_err() && ok {
            ok = false;
            let _ = core::fmt::Write::write_fmt(
                &mut failure,
                format_args!("a worker could not be joined"),
            );
        }
    }
    let switches: u64 = online
        .iter()
        .filter_map(|&c| sched::rq_lock(c).ok().map(|g| g.nr_switches()))
        .sum();
    if let Err(e) = sched::check_invariants() {
        if ok {
            ok = false;
            let _ = core::fmt::Write::write_fmt(&mut failure, format_args!("{e}"));
        }
    }
    let (slots, live) = task::counts();
    // An idle thread and a stopper per CPU of the DT, online or not (as Linux's for each
    // possible CPU), and this one.
    let want = 2 * sched::nr_cpus() + 1;
    if live != want && ok {
        ok = false;
        let _ = core::fmt::Write::write_fmt(
            &mut failure,
            format_args!(
                "{} threads left alive, want {} (idle + stoppers + init)",
                live, want
            ),
        );
    }
    crate::println!(
        "soak: guest_s={} round_trips={} wakeups={} migrations={} affinity_moves={} sleeps={} \
         sleep_late_max_ns={} spawned={} children_ran={} context_switches={} slots_in_use={} \
         hog_tick_mhz={}..{}",
        (sched::now().0 - start) / 1_000_000_000,
        ROUND_TRIPS.load(Ordering::Relaxed),
        wakeups,
        migrations,
        AFFINITY_MOVES.load(Ordering::Relaxed),
        SLEEPS.load(Ordering::Relaxed),
        LATE_MAX.load(Ordering::Relaxed),
        SPAWNED.load(Ordering::Relaxed),
        CHILD_RAN.load(Ordering::Relaxed),
        switches,
        slots,
        if rate_min == u64::MAX { 0 } else { rate_min },
        rate_max
    );
    if SPAWNED.load(Ordering::Relaxed) != CHILD_RAN.load(Ordering::Relaxed) && ok {
        ok = false;
        let _ =
            core::fmt::Write::write_fmt(&mut failure, format_args!("a spawned child never ran"));
    }
    if ok {
        crate::println!("soak: ok");
    } else {
        crate::println!("soak: FAILED: {}", failure);
    }
    ok
}

/// After a failed check: each worker whose progress counter did not move in the last second
/// (`stalled`), with its state, its CPU (`task_cpu`) and whether that CPU is online, then each
/// CPU's run-queue length.
fn report_stalled(ids: &[ThreadId], names: &[&'static str], stalled: &[bool; WORKERS + 2]) {
    for (i, (id, name)) in ids.iter().zip(names).enumerate() {
        if !stalled[i] {
            continue;
        }
        let Some(t) = task::get(*id) else {
            crate::println!("soak: {} #{}: gone from the thread table", name, i);
            continue;
        };
        let cpu = CpuId(t.cpu.load(Ordering::Relaxed));
        crate::println!(
            "soak: {} #{} stalled: {:?}, on a run queue {}, cpu {} ({})",
            name,
            i,
            t.state(),
            t.on_rq.load(Ordering::Relaxed),
            cpu.0,
            if smp::is_online(cpu) {
                "online"
            } else {
                "offline"
            }
        );
    }
    for c in 0..sched::nr_cpus() {
        let cpu = CpuId(c as u16);
        if let Ok(g) = sched::rq_lock(cpu) {
            crate::println!(
                "soak: cpu {} ({}): {} runnable",
                c,
                if smp::is_online(cpu) {
                    "online"
                } else {
                    "offline"
                },
                g.nr_running()
            );
        }
    }
}
