//! Micro-benchmark of the run queue (issue 3, item 4): enqueue, dequeue,
//! put_prev + pick_next and a tick (update_curr + PELT update) with 1, 10, 100 and
//! 1000 runnable tasks, plus a bare PELT entity update. No criterion (keeps the build
//! light): `std::time::Instant`, batches of operations, median of several runs.
//!
//! Run with `cargo bench -p asym-sched` (or `cargo xtask bench sched`). Each column
//! is ns per operation; growth with the task count should be logarithmic (the
//! timeline and the task index are balanced trees).

use asym_sched::pelt::{EntityState, PeltScale, SchedAvg};
use asym_sched::rq::{DequeueFlags, EnqueueFlags, Rq, RqConfig, Task};
use asym_sched::types::{CpuId, CpuMask, Nanos, TaskId};
use asym_sched::uclamp::TaskUclamp;
use std::hint::black_box;
use std::time::Instant;

const SIZES: [u32; 5] = [1, 10, 100, 1000, 10000];
const RUNS: usize = 7;
const OPS_PER_RUN: u64 = 40_000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// A run queue with `n` queued tasks of mixed nice values, none running.
fn setup(n: u32) -> (Rq, u64) {
    let mut now = 1_000_000_000u64;
    let mut cfg = RqConfig::new(CpuId(0), 8);
    cfg.max_tasks = n as usize + 1;
    let mut rq = Rq::new(cfg, Nanos(now));
    for i in 0..n {
        let nice = (i % 11) as i32 - 5;
        let t = Task::new(TaskId(i), nice, TaskUclamp::new(), CpuMask::first_n(8)).unwrap();
        now += 1000;
        rq.update_rq_clock(Nanos(now)).unwrap();
        rq.enqueue_task(t, EnqueueFlags::NEW).unwrap();
    }
    (rq, now)
}

/// Cost of an empty timed batch, to subtract.
fn timer_overhead_ns() -> f64 {
    let v: Vec<f64> = (0..1000)
        .map(|_| {
            let t = Instant::now();
            black_box(());
            t.elapsed().as_nanos() as f64
        })
        .collect();
    median(v)
}

/// ns per enqueue and per dequeue: batches of `b` distinct tasks are dequeued
/// (sleep), then enqueued (wake-up) again, so the queue size stays within 10 % of n.
fn bench_enqueue_dequeue(n: u32, overhead: f64) -> (f64, f64) {
    let (mut rq, mut now) = setup(n);
    let b = (n / 10).max(1);
    let mut enq = Vec::new();
    let mut deq = Vec::new();
    for _ in 0..RUNS {
        let (mut te, mut td, mut ops) = (0f64, 0f64, 0u64);
        let mut start = 0u32;
        let mut held = Vec::with_capacity(b as usize);
        while ops < OPS_PER_RUN {
            now += 2_000;
            rq.update_rq_clock(Nanos(now)).unwrap();
            let t0 = Instant::now();
            for k in 0..b {
                let id = TaskId((start + k * 7) % n);
                if let Ok(t) = rq.dequeue_task(id, DequeueFlags::SLEEP) {
                    held.push(t);
                }
            }
            td += t0.elapsed().as_nanos() as f64 - overhead;
            let t1 = Instant::now();
            for t in held.drain(..) {
                rq.enqueue_task(t, EnqueueFlags::WAKEUP).unwrap();
            }
            te += t1.elapsed().as_nanos() as f64 - overhead;
            start = start.wrapping_add(13);
            ops += b as u64;
        }
        enq.push(te / ops as f64);
        deq.push(td / ops as f64);
    }
    black_box(&rq);
    (median(enq), median(deq))
}

/// ns per put_prev_task + pick_next_task with n runnable tasks, the running one
/// charged 500 µs each time (so picks really change tasks).
fn bench_pick(n: u32) -> f64 {
    let (mut rq, mut now) = setup(n);
    rq.pick_next_task();
    let mut res = Vec::new();
    for _ in 0..RUNS {
        let t0 = Instant::now();
        for _ in 0..OPS_PER_RUN {
            now += 500_000;
            rq.update_rq_clock(Nanos(now)).unwrap();
            rq.put_prev_task();
            black_box(rq.pick_next_task());
        }
        res.push(t0.elapsed().as_nanos() as f64 / OPS_PER_RUN as f64);
    }
    // Subtract the clock update, measured alone.
    let t0 = Instant::now();
    for _ in 0..OPS_PER_RUN {
        now += 500_000;
        rq.update_rq_clock(Nanos(now)).unwrap();
    }
    let clock = t0.elapsed().as_nanos() as f64 / OPS_PER_RUN as f64;
    median(res) - clock
}

/// ns per `task_tick` (update_curr + the PELT update of the running task and of
/// the cfs_rq) with the clock 1 ms further each time.
fn bench_tick(n: u32) -> f64 {
    let (mut rq, mut now) = setup(n);
    rq.pick_next_task();
    let mut res = Vec::new();
    for _ in 0..RUNS {
        let t0 = Instant::now();
        for _ in 0..OPS_PER_RUN {
            now += 1_000_000;
            rq.update_rq_clock(Nanos(now)).unwrap();
            black_box(rq.task_tick());
        }
        res.push(t0.elapsed().as_nanos() as f64 / OPS_PER_RUN as f64);
    }
    median(res)
}

/// ns per bare PELT entity update (`__update_load_avg_se`) crossing a period.
fn bench_pelt_se() -> f64 {
    let mut a = SchedAvg::default();
    let st = EntityState {
        weight: 1024,
        on_rq: true,
        running: true,
        sched_delayed: false,
    };
    let mut now = 1u64 << 20;
    let mut res = Vec::new();
    for _ in 0..RUNS {
        let t0 = Instant::now();
        for _ in 0..OPS_PER_RUN * 10 {
            now += 1_100_000;
            black_box(a.update_se(black_box(now), st, PeltScale::NONE));
        }
        res.push(t0.elapsed().as_nanos() as f64 / (OPS_PER_RUN * 10) as f64);
    }
    median(res)
}

fn main() {
    // `cargo bench` passes `--bench`; under `cargo test --benches` only check it runs.
    if !std::env::args().any(|a| a == "--bench") {
        for n in SIZES {
            let (mut rq, _) = setup(n);
            assert_eq!(rq.nr_running(), n);
            assert!(rq.pick_next_task().is_some());
        }
        println!("smoke run only; use `cargo bench -p asym-sched` for numbers");
        return;
    }
    let overhead = timer_overhead_ns();
    println!("asym-sched run-queue micro-benchmark (ns/op, median of {RUNS} runs)");
    println!("timer overhead subtracted per batch: {overhead:.0} ns");
    println!(
        "size_of::<Task>() = {} B, size_of::<Rq>() = {} B",
        std::mem::size_of::<Task>(),
        std::mem::size_of::<Rq>()
    );
    println!(
        "{:>6} | {:>9} | {:>9} | {:>19} | {:>16}",
        "tasks", "enqueue", "dequeue", "put_prev+pick_next", "tick (curr+PELT)"
    );
    println!("{}", "-".repeat(72));
    for n in SIZES {
        let (e, d) = bench_enqueue_dequeue(n, overhead);
        let p = bench_pick(n);
        let t = bench_tick(n);
        println!("{n:>6} | {e:>9.1} | {d:>9.1} | {p:>19.1} | {t:>16.1}");
    }
    println!(
        "bare PELT update_se (one period crossed): {:.1} ns",
        bench_pelt_se()
    );
}
