//! `DELAY_DEQUEUE` / `DELAY_ZERO` against Linux v6.12's rules (`fair.c`: `dequeue_entity`,
//! `pick_next_entity`, `finish_delayed_dequeue_entity`, `requeue_delayed_entity`; `core.c`:
//! `ttwu_runnable`, `block_task` with `DEQUEUE_SPECIAL`).
//!
//! Oracles are EEVDF's definitions worked out by hand for two nice-0 tasks on one CPU, where
//! virtual time is wall time (`calc_delta_fair` is the identity at nice 0) and V is the plain
//! mean of the queued vruntimes: A runs 1 ms first, so when it blocks vA = vB + 1 ms and
//! V = vB + 0.5 ms; its lag V − vA = −0.5 ms makes it not eligible, so it is delayed. The
//! base slice on one CPU is 0.75 ms and the lag clamp `max(2·slice, TICK_NSEC)` = 4 ms, far
//! above every lag here.

use asym_sched::fair::{scale_load, vdiff};
use asym_sched::features::{Feature, SchedFeatures};
use asym_sched::rq::{Block, DequeueFlags, EnqueueFlags, Rq, RqConfig, Task};
use asym_sched::sched_core::{block_task, ttwu_runnable};
use asym_sched::types::{CpuId, CpuMask, Nanos, TaskId};
use asym_sched::uclamp::TaskUclamp;

const A: TaskId = TaskId(0);
const B: TaskId = TaskId(1);
const MS: u64 = 1_000_000;
/// `scale_load(1024)`: a nice-0 task's weight in `cfs_rq->load`.
const W0: u64 = scale_load(1024);

fn features(delay: bool, zero: bool) -> SchedFeatures {
    SchedFeatures::default()
        .with(Feature::DELAY_DEQUEUE, delay)
        .with(Feature::DELAY_ZERO, zero)
}

/// Two new nice-0 tasks on one CPU, A picked first (equal deadlines, lower id).
fn two_tasks(f: SchedFeatures) -> (Rq, u64) {
    let mut c = RqConfig::new(CpuId(0), 1);
    c.features = f;
    let now = 1_000_000_000;
    let mut rq = Rq::new(c, Nanos(now));
    for id in [A, B] {
        let t = Task::new(id, 0, TaskUclamp::new(), CpuMask::first_n(2)).unwrap();
        rq.enqueue_task(t, EnqueueFlags::NEW).unwrap();
    }
    assert_eq!(rq.pick_next_task(), Some(A));
    (rq, now)
}

fn advance(rq: &mut Rq, now: &mut u64, ns: u64) {
    *now += ns;
    rq.update_rq_clock(Nanos(*now)).unwrap();
}

fn vruntime(rq: &Rq, id: TaskId) -> u64 {
    rq.task(id).unwrap().se.vruntime
}

/// V with the running task in it (`avg_vruntime`).
fn avg_vruntime(rq: &Rq) -> u64 {
    let curr = rq.curr().and_then(|c| rq.task(c)).map(|t| &t.se);
    rq.cfs().avg_vruntime(curr)
}

/// A runs 1 ms and blocks: with `DELAY_DEQUEUE` it is delayed (see the module docs).
fn a_overruns_and_blocks(f: SchedFeatures) -> (Rq, u64, Block, Option<Task>) {
    let (mut rq, mut now) = two_tasks(f);
    advance(&mut rq, &mut now, MS);
    let mut out = None;
    let block = block_task(&mut rq, A, false, &mut out).unwrap();
    rq.check_invariants().unwrap();
    (rq, now, block, out)
}

#[test]
fn an_ineligible_sleeper_stays_queued_and_keeps_its_weight_in_the_average() {
    let (rq, _, block, out) = a_overruns_and_blocks(features(true, true));
    assert_eq!(block, Block::Delayed);
    assert!(
        out.is_none(),
        "the caller gets nothing: the task stays queued"
    );
    let a = rq.task(A).expect("A is still on the run queue");
    assert!(a.se.on_rq && a.se.sched_delayed);
    // v6.12: dequeue_entity returned before account_entity_dequeue and dequeue_entities
    // before `h_nr_running -= 1`: both tasks still count, both weights are in the load.
    assert_eq!(rq.nr_running(), 2);
    assert_eq!(rq.cfs().nr_running(), 2);
    assert_eq!(rq.cfs().load_weight(), 2 * W0);
    // V is the mean of both vruntimes, A's included: vB + 0.5 ms.
    assert_eq!(vdiff(vruntime(&rq, A), vruntime(&rq, B)), MS as i64);
    let v = avg_vruntime(&rq);
    assert_eq!(vdiff(v, vruntime(&rq, B)), (MS / 2) as i64);
    // The blocked task does not run: a reschedule is due and nothing is current.
    assert!(rq.need_resched());
    assert_eq!(rq.curr(), None);

    // Without the feature the same sleep leaves at once, as before.
    let (rq, _, block, out) = a_overruns_and_blocks(features(false, false));
    assert_eq!(block, Block::Dequeued);
    assert_eq!(out.map(|t| t.id), Some(A));
    assert_eq!((rq.nr_running(), rq.cfs().load_weight()), (1, W0));
}

#[test]
fn a_delayed_entity_picked_is_dequeued_and_the_next_one_is_picked() {
    for zero in [false, true] {
        let (mut rq, mut now, block, _) = a_overruns_and_blocks(features(true, zero));
        assert_eq!(block, Block::Delayed);
        let mut finished = Vec::new();
        // A is not eligible: B runs.
        assert_eq!(rq.pick_next_task_with(&mut |t| finished.push(t)), Some(B));
        assert!(finished.is_empty());
        // B runs 2 ms: vB = vA + 1 ms, V = vA + 0.5 ms. A is now the only eligible entity,
        // so pick_eevdf returns it; being delayed, its dequeue is finished and the pick
        // starts again, finding B alone.
        advance(&mut rq, &mut now, 2 * MS);
        rq.task_tick();
        assert_eq!(vdiff(vruntime(&rq, B), vruntime(&rq, A)), MS as i64);
        assert_eq!(rq.pick_next_task_with(&mut |t| finished.push(t)), Some(B));
        assert_eq!(finished.len(), 1, "the pick hands A back");
        let a = &finished[0];
        assert_eq!(a.id, A);
        assert!(!a.se.on_rq && !a.se.sched_delayed);
        assert!(rq.task(A).is_none());
        assert_eq!((rq.nr_running(), rq.cfs().load_weight()), (1, W0));
        // Its lag at the dequeue was V − vA = +0.5 ms; DELAY_ZERO drops a positive lag
        // (finish_delayed_dequeue_entity), otherwise it is kept for the wake-up.
        let want = if zero { 0 } else { (MS / 2) as i64 };
        assert_eq!(a.se.vlag, want, "DELAY_ZERO {zero}");
        rq.check_invariants().unwrap();
    }
}

/// The review's test (S2): a nice-0 task that overran its slice (ran 1 ms of a 0.75 ms
/// slice), slept 1.5 ms while B ran, and woke while still delayed has lag 0 at the wake-up
/// under `DELAY_ZERO`: B's 1.5 ms moved V to vA + 0.25 ms, and the positive lag earned
/// while delayed is clamped to 0 (`requeue_delayed_entity`), A re-placed at V of the others
/// (B alone: vB). Without `DELAY_ZERO` it keeps its place and its +0.25 ms.
#[test]
fn delay_zero_a_task_that_overran_its_slice_slept_and_woke_has_zero_lag_at_wakeup() {
    for zero in [false, true] {
        let (mut rq, mut now, block, _) = a_overruns_and_blocks(features(true, zero));
        assert_eq!(block, Block::Delayed);
        let va = vruntime(&rq, A);
        assert_eq!(
            rq.pick_next_task_with(&mut |_| panic!("A not eligible")),
            Some(B)
        );
        advance(&mut rq, &mut now, 3 * MS / 2);
        rq.task_tick();
        assert_eq!(
            vdiff(avg_vruntime(&rq), va),
            (MS / 4) as i64,
            "V moved 0.25 ms past A"
        );
        let woke = ttwu_runnable(&mut rq, A).unwrap();
        assert!(woke.is_some(), "A was delayed: a requeue");
        let a = rq.task(A).unwrap();
        assert!(a.se.on_rq && !a.se.sched_delayed);
        let lag = vdiff(avg_vruntime(&rq), a.se.vruntime);
        if zero {
            assert_eq!(lag, 0, "DELAY_ZERO: lag 0 at the wake-up");
            assert_eq!(a.se.vruntime, vruntime(&rq, B), "re-placed at V without A");
        } else {
            assert_eq!(a.se.vruntime, va, "kept its place");
            assert!(lag > 0);
        }
        rq.check_invariants().unwrap();
    }
}

/// `ttwu_runnable`: a delayed task wakes where it is queued. Its lag is still negative
/// (B ran 0.2 ms: V = vA − 0.4 ms), so even under `DELAY_ZERO` there is no placement: the
/// same vruntime and deadline, the same CPU, `nr_running` unchanged, and the flags a
/// placed wake-up would raise (overutilized, overloaded) untouched. A task that is not
/// delayed is not this path's (`None`: the caller selects a CPU and activates it).
#[test]
fn a_wakeup_of_a_delayed_task_is_a_requeue_on_its_cpu_without_placement() {
    let (mut rq, mut now, block, _) = a_overruns_and_blocks(features(true, true));
    assert_eq!(block, Block::Delayed);
    let before = rq.task(A).unwrap().se;
    assert_eq!(
        rq.pick_next_task_with(&mut |_| panic!("A not eligible")),
        Some(B)
    );
    advance(&mut rq, &mut now, MS / 5);
    rq.task_tick();
    let util_est_before = rq.cfs_avg().util_est;
    let out = ttwu_runnable(&mut rq, A)
        .unwrap()
        .expect("a delayed task is requeued");
    assert_eq!((out.overutilized, out.overloaded), (None, false));
    let a = rq.task(A).expect("still on this CPU's run queue");
    assert_eq!(a.cpu, Some(CpuId(0)));
    assert_eq!(
        (a.se.vruntime, a.se.deadline),
        (before.vruntime, before.deadline)
    );
    assert!(!a.se.sched_delayed);
    assert_eq!((rq.nr_running(), rq.cfs().load_weight()), (2, 2 * W0));
    // util_est_enqueue: A's estimate is back in the cfs_rq's.
    assert_eq!(
        rq.cfs_avg().util_est,
        util_est_before + a.util_est().0,
        "util_est_enqueue of the requeued task"
    );
    rq.check_invariants().unwrap();
    // B is queued and not delayed: not a ttwu_runnable wake-up.
    assert_eq!(ttwu_runnable(&mut rq, B).unwrap(), None);
}

/// A sleeper that is eligible leaves at once, delayed dequeue or not: B, placed level with
/// A, runs 0.5 ms after A ran 1 ms, so V = vB + 0.25 ms and B's lag is +0.25 ms, which it
/// keeps for its wake-up. And a task blocking in a special state (exit: `TASK_DEAD`,
/// `DEQUEUE_SPECIAL`) is never delayed, eligible or not.
#[test]
fn an_eligible_sleeper_is_dequeued_at_once_as_before() {
    let (mut rq, mut now) = two_tasks(features(true, true));
    advance(&mut rq, &mut now, MS);
    rq.put_prev_task();
    assert_eq!(rq.pick_next_task(), Some(B));
    advance(&mut rq, &mut now, MS / 2);
    let mut out = None;
    assert_eq!(
        rq.block_task_into(B, DequeueFlags::SLEEP, &mut out),
        Ok(Block::Dequeued)
    );
    let b = out.expect("B is handed to the caller");
    assert!(!b.se.on_rq && !b.se.sched_delayed);
    assert_eq!(b.se.vlag, (MS / 4) as i64);
    assert_eq!((rq.nr_running(), rq.cfs().load_weight()), (1, W0));
    rq.check_invariants().unwrap();

    // Exit: A is not eligible when it dies (as in the delayed case) but leaves at once.
    let (mut rq, mut now) = two_tasks(features(true, true));
    advance(&mut rq, &mut now, MS);
    let mut out = None;
    assert_eq!(block_task(&mut rq, A, true, &mut out), Ok(Block::Dequeued));
    assert_eq!(out.map(|t| t.id), Some(A));
    assert_eq!(rq.nr_running(), 1);
}

/// PELT of a delayed entity (v6.12 "Fixup PELT vs DELAYED_DEQUEUE", `se_runnable`): it is
/// still queued, so its load keeps accruing (`load = se->on_rq`), but it is not runnable,
/// so its runnable signal decays as a sleeper's. A (initial util and runnable 512 on an
/// empty CPU, `post_init_entity_util_avg`) stays delayed 8 ms while B runs: a sleeper's
/// signals would lose y^8 ≈ 16 % (y^32 = 1/2); its load must not, its runnable must.
#[test]
fn a_delayed_entity_keeps_its_load_but_is_not_runnable() {
    let (mut rq, mut now, block, _) = a_overruns_and_blocks(features(true, false));
    assert_eq!(block, Block::Delayed);
    let at_delay = rq.task(A).unwrap().avg;
    assert!(at_delay.runnable_avg > 400, "{}", at_delay.runnable_avg);
    assert_eq!(
        rq.pick_next_task_with(&mut |_| panic!("A not eligible")),
        Some(B)
    );
    advance(&mut rq, &mut now, 8 * MS);
    rq.task_tick();
    ttwu_runnable(&mut rq, A).unwrap().expect("delayed");
    let after = rq.task(A).unwrap().avg;
    let y8 = 0.5f64.powf(8.0 / 32.0);
    assert!(
        after.load_avg as f64 > at_delay.load_avg as f64 * (1.0 + y8) / 2.0,
        "load {} -> {}: decayed like a sleeper's",
        at_delay.load_avg,
        after.load_avg
    );
    assert!(
        (after.runnable_avg as f64) < at_delay.runnable_avg as f64 * (1.0 + y8) / 2.0,
        "runnable {} -> {}: still accrued",
        at_delay.runnable_avg,
        after.runnable_avg
    );
}
