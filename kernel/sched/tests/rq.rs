//! Run-queue properties over random operation sequences on several CPUs, and the
//! "rq util = Σ task util" property around migrations.
//!
//! Oracles: set bookkeeping of task ids (every task is on exactly one rq or in the
//! caller's sleeping set), the PELT geometric-series bounds (`LOAD_AVG_MAX`), the
//! definitions of the EEVDF sums (checked inside `Rq::check_invariants`, recomputed
//! from the entities), util_est's "Σ of queued tasks' estimates", and the tasks'
//! own PELT signals advanced to the rq's time with the PELT recurrence.

use asym_sched::cpu_util::cpu_util_cfs;
use asym_sched::features::{Feature, SchedFeatures};
use asym_sched::pelt::{EntityState, PeltScale, SchedAvg, LOAD_AVG_MAX};
use asym_sched::rq::{
    migrate_task_rq_fair, sync_entity_load_avg, DequeueFlags, EnqueueFlags, Rq, RqConfig, RqError,
    RqSnapshot, Task,
};
use asym_sched::types::{Capacity, CpuId, CpuMask, Nanos, TaskId};
use asym_sched::uclamp::TaskUclamp;
use asym_sched::util_est::task_util_est_raw;
use proptest::prelude::*;
use std::collections::BTreeSet;

const TICK_NS: u64 = 4_000_000;
const CAPS: [u32; 3] = [1024, 512, 446];

struct System {
    rqs: Vec<Rq>,
    sleeping: Vec<Task>,
    all: BTreeSet<TaskId>,
    now: u64,
    next_tick: u64,
    next_id: u32,
}

impl System {
    fn new(features: SchedFeatures) -> System {
        let now = 1_000_000_000;
        let rqs = CAPS
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                let mut cfg = RqConfig::new(CpuId(i as u16), CAPS.len() as u32);
                cfg.capacity_orig = Capacity(c);
                cfg.features = features;
                let mut rq = Rq::new(cfg, Nanos(now));
                // The little CPUs run below fmax.
                rq.set_freq_scale(Capacity(if i == 0 { 1024 } else { 700 }));
                rq
            })
            .collect();
        System {
            rqs,
            sleeping: Vec::new(),
            all: BTreeSet::new(),
            now,
            next_tick: now + TICK_NS,
            next_id: 1,
        }
    }

    /// (cpu, id) of the k-th queued task, counting over all rqs.
    fn queued(&self, k: usize) -> Option<(usize, TaskId)> {
        let all: Vec<(usize, TaskId)> = self
            .rqs
            .iter()
            .enumerate()
            .flat_map(|(c, rq)| rq.tasks().map(move |t| (c, t.id)))
            .collect();
        (!all.is_empty()).then(|| all[k % all.len()])
    }

    fn allowed_cpu(mask: CpuMask, want: usize) -> usize {
        let want = want % CAPS.len();
        if mask.contains(CpuId(want as u16)) {
            want
        } else {
            mask.first().unwrap().index()
        }
    }

    /// What the harness does after every operation, like `schedule()` on each CPU.
    fn reschedule(&mut self) {
        for rq in &mut self.rqs {
            if rq.need_resched() || (rq.curr().is_none() && rq.nr_running() > 0) {
                rq.pick_next_task();
            }
            let _ = rq.take_cpufreq_update();
        }
    }

    fn apply(&mut self, op: &Op) {
        match *op {
            Op::Advance(us) => {
                let end = self.now + us * 1000;
                while self.next_tick <= end {
                    self.now = self.next_tick;
                    self.next_tick += TICK_NS;
                    for rq in &mut self.rqs {
                        rq.update_rq_clock(Nanos(self.now)).unwrap();
                        if rq.curr().is_some() {
                            rq.task_tick();
                        } else {
                            rq.update_blocked_averages();
                        }
                    }
                    self.reschedule();
                }
                self.now = end;
                for rq in &mut self.rqs {
                    rq.update_rq_clock(Nanos(self.now)).unwrap();
                }
            }
            Op::Spawn(cpu, nice, mask) => {
                let id = TaskId(self.next_id);
                self.next_id += 1;
                let mask = CpuMask(mask as u64 & 0b111).or(CpuMask::of(CpuId((cpu % 3) as u16)));
                let t = Task::new(id, nice, TaskUclamp::new(), mask).unwrap();
                let c = Self::allowed_cpu(mask, cpu);
                self.rqs[c].enqueue_task(t, EnqueueFlags::NEW).unwrap();
                self.rqs[c].check_preempt_wakeup(id).unwrap();
                self.all.insert(id);
            }
            Op::Sleep(k) => {
                if let Some((c, id)) = self.queued(k) {
                    let t = self.rqs[c].dequeue_task(id, DequeueFlags::SLEEP).unwrap();
                    self.sleeping.push(t);
                }
            }
            Op::Wake(k, cpu) => {
                if self.sleeping.is_empty() {
                    return;
                }
                let mut t = self.sleeping.swap_remove(k % self.sleeping.len());
                let c = Self::allowed_cpu(t.cpus_allowed, cpu);
                let prev = t.cpu.unwrap().index();
                let mut flags = EnqueueFlags::WAKEUP;
                if prev != c {
                    // Wrong order is refused and the task handed back.
                    let e = self.rqs[c].enqueue_task(t, flags).unwrap_err();
                    t = e.task;
                    let old = &mut self.rqs[prev];
                    let r = migrate_task_rq_fair(&old.pelt_remote(), &mut t, old.clock_task());
                    old.apply_removed(r.unwrap());
                    flags = flags | EnqueueFlags::MIGRATED;
                }
                let id = t.id;
                self.rqs[c].enqueue_task(t, flags).unwrap();
                self.rqs[c].check_preempt_wakeup(id).unwrap();
            }
            Op::Migrate(k, cpu) => {
                if let Some((c, id)) = self.queued(k) {
                    let mask = self.rqs[c].task(id).unwrap().cpus_allowed;
                    let d = Self::allowed_cpu(mask, cpu);
                    if d != c {
                        let t = self.rqs[c].detach_task(id).unwrap();
                        self.rqs[d].attach_task(t).unwrap();
                        self.rqs[d].check_preempt_wakeup(id).unwrap();
                    }
                }
            }
            Op::SetNice(k, nice) => {
                if k % 2 == 0 && !self.sleeping.is_empty() {
                    let i = k % self.sleeping.len();
                    let c = self.sleeping[i].cpu.unwrap().index();
                    self.rqs[c]
                        .set_nice_blocked(&mut self.sleeping[i], nice)
                        .unwrap();
                } else if let Some((c, id)) = self.queued(k) {
                    self.rqs[c].set_nice(id, nice).unwrap();
                }
            }
            Op::Yield(cpu) => self.rqs[cpu % CAPS.len()].yield_task(),
            Op::Toggle(f, on) => {
                for rq in &mut self.rqs {
                    rq.set_features(rq.features().with(f, on));
                }
            }
        }
        self.reschedule();
    }

    fn check(&self) -> Result<(), String> {
        // No task lost or duplicated.
        let mut seen = BTreeSet::new();
        for t in self
            .rqs
            .iter()
            .flat_map(|rq| rq.tasks())
            .chain(self.sleeping.iter())
        {
            if !seen.insert(t.id) {
                return Err(format!("task {:?} appears twice", t.id));
            }
        }
        if seen != self.all {
            return Err(format!("tasks {:?} vs created {:?}", seen, self.all));
        }
        let n_total = self.all.len().max(1) as u64;
        // A geometric sum of per-period contributions ≤ 1024 units: at a period
        // boundary at most LOAD_AVG_MAX (the recurrence's fixed point), plus the
        // current, incomplete period (< 1024 units). Running/runnable sums count
        // units << 10.
        let max_units = LOAD_AVG_MAX as u64 + 1024;
        let max_sum = max_units * 1024;
        for rq in &self.rqs {
            rq.check_invariants()
                .map_err(|e| format!("cpu {}: {e}", rq.cpu().0))?;
            if (rq.nr_running() > 0) != rq.curr().is_some() {
                return Err(format!(
                    "cpu {}: runnable tasks but idle (or the reverse)",
                    rq.cpu().0
                ));
            }
            let cap = rq.capacity_orig().0;
            let snap = rq.cpu_snapshot();
            if cpu_util_cfs(&snap, rq.features()).0 > cap || rq.cpu_util_avg().0 > cap {
                return Err(format!(
                    "cpu {}: util above capacity_orig {cap}",
                    rq.cpu().0
                ));
            }
            let a = rq.cfs_avg();
            if a.util_sum as u64 > max_sum * n_total
                || a.runnable_sum > max_sum * n_total
                || a.util_avg > 1024 * n_total
                || a.period_contrib >= 1024
                || a.load_sum > max_units * 88761 * n_total
            {
                return Err(format!(
                    "cpu {}: cfs PELT sums out of bounds: {a:?}",
                    rq.cpu().0
                ));
            }
            if rq.features().enabled(Feature::UTIL_EST) {
                let sum: u32 = rq.tasks().map(|t| task_util_est_raw(&t.avg).0).sum();
                if sum != a.util_est {
                    return Err(format!(
                        "cpu {}: util_est {} != Σ tasks {sum}",
                        rq.cpu().0,
                        a.util_est
                    ));
                }
            }
        }
        for t in self
            .rqs
            .iter()
            .flat_map(|rq| rq.tasks())
            .chain(self.sleeping.iter())
        {
            let a = &t.avg;
            if a.util_avg > 1024
                || a.util_sum as u64 > max_sum
                || a.runnable_sum > max_sum
                || a.load_sum > max_units
                || a.load_avg > t.se.weight()
            {
                return Err(format!("task {:?}: PELT out of bounds {a:?}", t.id));
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug)]
enum Op {
    Advance(u64),
    Spawn(usize, i32, u8),
    Sleep(usize),
    Wake(usize, usize),
    Migrate(usize, usize),
    SetNice(usize, i32),
    Yield(usize),
    Toggle(Feature, bool),
}

fn op() -> impl Strategy<Value = Op> {
    let feature = prop_oneof![
        Just(Feature::PLACE_LAG),
        Just(Feature::RUN_TO_PARITY),
        Just(Feature::PREEMPT_SHORT),
        Just(Feature::PLACE_REL_DEADLINE),
        Just(Feature::PLACE_DEADLINE_INITIAL),
        Just(Feature::WAKEUP_PREEMPTION),
        Just(Feature::PELT_CLOCK),
        Just(Feature::UTIL_EST),
    ];
    prop_oneof![
        6 => (1u64..20_000).prop_map(Op::Advance),
        1 => (100_000u64..1_000_000).prop_map(Op::Advance),
        3 => (0usize..3, -20i32..=19, any::<u8>()).prop_map(|(c, n, m)| Op::Spawn(c, n, m)),
        3 => any::<usize>().prop_map(Op::Sleep),
        3 => (any::<usize>(), 0usize..3).prop_map(|(k, c)| Op::Wake(k, c)),
        3 => (any::<usize>(), 0usize..3).prop_map(|(k, c)| Op::Migrate(k, c)),
        2 => (any::<usize>(), -20i32..=19).prop_map(|(k, n)| Op::SetNice(k, n)),
        1 => (0usize..3).prop_map(Op::Yield),
        1 => (feature, any::<bool>()).prop_map(|(f, on)| Op::Toggle(f, on)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold_after_every_step(ops in proptest::collection::vec(op(), 1..120)) {
        let mut sys = System::new(SchedFeatures::default());
        let mut min_vr: Vec<u64> = sys.rqs.iter().map(|rq| rq.cfs().min_vruntime()).collect();
        for (i, op) in ops.iter().enumerate() {
            sys.apply(op);
            if let Err(e) = sys.check() {
                prop_assert!(false, "after step {i} ({op:?}): {e}");
            }
            // `min_vruntime` never goes backwards (Linux: "ensure we never gain time
            // by being placed backwards"), compared the wrapping way.
            for (rq, last) in sys.rqs.iter().zip(min_vr.iter_mut()) {
                let m = rq.cfs().min_vruntime();
                prop_assert!(m.wrapping_sub(*last) as i64 >= 0, "step {i}: min_vruntime retreated");
                *last = m;
            }
        }
    }

    #[test]
    fn tree_pick_is_the_earliest_eligible_deadline(ops in proptest::collection::vec(op(), 1..80)) {
        // Oracle: a linear scan over all queued entities, eligibility from V computed
        // in i128 from the definition.
        let mut sys = System::new(SchedFeatures::default().with(Feature::RUN_TO_PARITY, false));
        for op in &ops {
            sys.apply(op);
            for rq in &sys.rqs {
                let curr = rq.curr().and_then(|c| rq.task(c)).map(|t| t.se);
                let got = rq.cfs().pick_eevdf(curr.as_ref(), rq.features());
                let ents: Vec<_> = rq.tasks().map(|t| t.se).collect();
                if ents.is_empty() {
                    prop_assert_eq!(got, None);
                    continue;
                }
                let base = ents[0].vruntime;
                let (num, den) = ents.iter().fold((0i128, 0i128), |(n, d), e| {
                    let w = e.weight() as i128;
                    (n + w * (e.vruntime.wrapping_sub(base) as i64 as i128), d + w)
                });
                let eligible = |e: &asym_sched::fair::SchedEntity| {
                    num >= (e.vruntime.wrapping_sub(base) as i64 as i128) * den
                };
                // Ties on deadline go to the queued entity, not curr (`entity_before`
                // is strict), then to the lower id (our tree's tie-break).
                let mut best = ents
                    .iter()
                    .filter(|e| eligible(e))
                    .min_by_key(|e| (e.deadline.wrapping_sub(base) as i64, Some(e.id) == rq.curr(), e.id))
                    .map(|e| e.id);
                if let Some(c) = curr {
                    if rq.features().enabled(Feature::RUN_TO_PARITY)
                        && eligible(&c)
                        && c.picked_deadline == Some(c.deadline)
                    {
                        best = Some(c.id);
                    }
                }
                if ents.len() == 1 {
                    prop_assert_eq!(got, Some(ents[0].id));
                } else {
                    prop_assert_eq!(got, best);
                }
            }
        }
    }
}

/// A task's signals advanced from its last update to `now` in the state it has been
/// in since (queued tasks are updated whenever they start or stop running).
fn synced(avg: &SchedAvg, now: u64, weight: u64, running: bool) -> SchedAvg {
    let mut a = *avg;
    let st = EntityState {
        weight,
        on_rq: true,
        running,
        sched_delayed: false,
    };
    a.update_se(now, st, PeltScale::NONE);
    a
}

/// Σ of the queued tasks' util_avg, each synced to the rq's PELT time.
fn sum_task_util(rq: &Rq) -> u64 {
    let now = rq.cfs_avg().last_update_time;
    rq.tasks()
        .map(|t| synced(&t.avg, now, t.se.weight(), rq.curr() == Some(t.id)).util_avg)
        .sum()
}

fn run(rqs: &mut [Rq], now: &mut u64, ms: u64) {
    for _ in 0..ms * 1_000_000 / TICK_NS {
        *now += TICK_NS;
        for rq in rqs.iter_mut() {
            rq.update_rq_clock(Nanos(*now)).unwrap();
            if rq.curr().is_some() {
                if rq.task_tick().is_yes() {
                    rq.pick_next_task();
                }
            } else {
                rq.update_blocked_averages();
                rq.pick_next_task();
            }
        }
    }
}

fn assert_rq_util_is_task_sum(rq: &Rq, what: &str) {
    let rq_util = rq.cfs_avg().util_avg as f64;
    let sum = sum_task_util(rq) as f64;
    assert!(
        (rq_util - sum).abs() <= 0.03 * sum.max(rq_util) + 2.0,
        "{what}: cpu {} util {rq_util} vs Σ tasks {sum}",
        rq.cpu().0
    );
}

#[test]
fn rq_util_equals_sum_of_task_util_across_migrations() {
    let mut now = 1_000_000_000u64;
    let mut rqs: Vec<Rq> = (0..2)
        .map(|i| Rq::new(RqConfig::new(CpuId(i), 2), Nanos(now)))
        .collect();
    let all = CpuMask::first_n(2);
    let t = |id: u32, nice: i32| Task::new(TaskId(id), nice, TaskUclamp::new(), all).unwrap();
    rqs[0].enqueue_task(t(1, 0), EnqueueFlags::NEW).unwrap();
    rqs[0].enqueue_task(t(2, 2), EnqueueFlags::NEW).unwrap();
    rqs[1].enqueue_task(t(3, 0), EnqueueFlags::NEW).unwrap();
    for rq in rqs.iter_mut() {
        rq.pick_next_task();
    }
    run(&mut rqs, &mut now, 600);
    for rq in &rqs {
        assert_rq_util_is_task_sum(rq, "settled");
    }
    // On-rq migration (load balancing): detach from cpu 0, attach to cpu 1.
    let a = rqs[0].detach_task(TaskId(1)).unwrap();
    rqs[1].attach_task(a).unwrap();
    for rq in rqs.iter_mut() {
        if rq.need_resched() || rq.curr().is_none() {
            rq.pick_next_task();
        }
    }
    for rq in &rqs {
        assert_rq_util_is_task_sum(rq, "right after detach/attach");
    }
    run(&mut rqs, &mut now, 300);
    for rq in &rqs {
        assert_rq_util_is_task_sum(rq, "300 ms after detach/attach");
    }
    // Wake-up migration: task 2 sleeps on cpu 0, wakes on cpu 1; cpu 0 loses its
    // blocked contribution at its next update, cpu 1 gains it.
    let mut b = rqs[0].dequeue_task(TaskId(2), DequeueFlags::SLEEP).unwrap();
    rqs[0].pick_next_task();
    let util_b = b.avg.util_avg;
    assert!(util_b > 100, "task 2 has a real util to move ({util_b})");
    let r = migrate_task_rq_fair(&rqs[0].pelt_remote(), &mut b, rqs[0].clock_task()).unwrap();
    rqs[0].apply_removed(r);
    rqs[1]
        .enqueue_task(b, EnqueueFlags::WAKEUP | EnqueueFlags::MIGRATED)
        .unwrap();
    rqs[1].check_preempt_wakeup(TaskId(2)).unwrap();
    rqs[0].update_blocked_averages();
    assert!(
        rqs[0].cfs_avg().util_avg <= 2,
        "cpu 0 kept {} of the moved util",
        rqs[0].cfs_avg().util_avg
    );
    assert_rq_util_is_task_sum(&rqs[1], "after wake-up migration");
    run(&mut rqs, &mut now, 200);
    assert_rq_util_is_task_sum(&rqs[1], "200 ms after wake-up migration");
}

#[test]
fn errors_name_the_problem_and_hand_the_task_back() {
    let now = 1_000_000_000u64;
    let mut rq0 = Rq::new(RqConfig::new(CpuId(0), 2), Nanos(now));
    let mut rq1 = Rq::new(RqConfig::new(CpuId(1), 2), Nanos(now));
    let only1 = CpuMask::of(CpuId(1));
    let t = Task::new(TaskId(7), 0, TaskUclamp::new(), only1).unwrap();
    let e = rq0.enqueue_task(t, EnqueueFlags::NEW).unwrap_err();
    assert_eq!(e.task.id, TaskId(7), "the refused task comes back");
    assert!(e.reason.to_string().contains("may not run"), "{}", e.reason);
    rq1.enqueue_task(e.task, EnqueueFlags::NEW).unwrap();
    assert!(rq1.dequeue_task(TaskId(8), DequeueFlags::SLEEP).is_err());
    assert!(rq1.update_rq_clock(Nanos(now - 1)).is_err());
    assert!(Task::new(TaskId(9), -21, TaskUclamp::new(), only1).is_err());
    assert!(Task::new(TaskId(9), 0, TaskUclamp::new(), CpuMask::EMPTY).is_err());
}

#[test]
fn a_full_run_queue_refuses_and_hands_the_task_back() {
    let now = 1_000_000_000u64;
    let mut cfg = RqConfig::new(CpuId(0), 1);
    cfg.max_tasks = 2;
    let mut rq = Rq::new(cfg, Nanos(now));
    let all = CpuMask::of(CpuId(0));
    for id in 1..=2 {
        let t = Task::new(TaskId(id), 0, TaskUclamp::new(), all).unwrap();
        rq.enqueue_task(t, EnqueueFlags::NEW).unwrap();
    }
    let t = Task::new(TaskId(3), 3, TaskUclamp::new(), all).unwrap();
    let e = rq.enqueue_task(t.clone(), EnqueueFlags::NEW).unwrap_err();
    assert_eq!(e.task, t, "the refused task comes back unchanged");
    assert!(
        e.reason.to_string().contains("full (2 tasks)"),
        "{}",
        e.reason
    );
    let e = rq.attach_task(e.task).unwrap_err();
    assert!(matches!(e.reason, RqError::Full { max_tasks: 2, .. }));
    // Room again after a dequeue, and the queue still checks out.
    rq.dequeue_task(TaskId(1), DequeueFlags::SLEEP).unwrap();
    rq.enqueue_task(e.task, EnqueueFlags::NEW).unwrap();
    assert_eq!(rq.nr_running(), 2);
    rq.check_invariants().unwrap();
}

#[test]
fn the_in_place_enqueue_and_dequeue_keep_a_refused_task_where_it_was() {
    let now = 1_000_000_000u64;
    let mut rq = Rq::new(RqConfig::new(CpuId(0), 2), Nanos(now));
    let only1 = CpuMask::of(CpuId(1));
    let t = Task::new(TaskId(7), 0, TaskUclamp::new(), only1).unwrap();
    let mut slot = Some(t.clone());
    let e = rq
        .enqueue_task_from(&mut slot, EnqueueFlags::NEW)
        .unwrap_err();
    assert!(matches!(e, RqError::NotAllowed { .. }), "{e}");
    assert_eq!(slot.as_ref(), Some(&t), "the refused task stays, unchanged");
    let mut empty = None;
    let e = rq
        .enqueue_task_from(&mut empty, EnqueueFlags::NEW)
        .unwrap_err();
    assert!(e.to_string().contains("no task"), "{e}");
    assert_eq!(rq.nr_running(), 0);

    let here = CpuMask::of(CpuId(0));
    let mut slot = Some(Task::new(TaskId(8), 0, TaskUclamp::new(), here).unwrap());
    rq.enqueue_task_from(&mut slot, EnqueueFlags::NEW).unwrap();
    assert!(slot.is_none(), "the run queue took the task");
    assert!(rq.task(TaskId(8)).is_some());
    let mut out = Some(t.clone());
    assert!(rq
        .dequeue_task_into(TaskId(9), DequeueFlags::SLEEP, &mut out)
        .is_err());
    assert_eq!(
        out.as_ref(),
        Some(&t),
        "a failed dequeue leaves `out` alone"
    );
    rq.update_rq_clock(Nanos(now + 1_000_000)).unwrap();
    rq.dequeue_task_into(TaskId(8), DequeueFlags::SLEEP, &mut out)
        .unwrap();
    assert_eq!(out.as_ref().map(|t| t.id), Some(TaskId(8)));
    assert_eq!(rq.nr_running(), 0);
    rq.check_invariants().unwrap();
}

#[derive(Clone, Debug)]
enum ListOp {
    Enqueue(u8),
    Dequeue(u8),
    Pick,
    MoveToHead(u8),
}

fn list_op() -> impl Strategy<Value = ListOp> {
    prop_oneof![
        3 => (0u8..24).prop_map(ListOp::Enqueue),
        2 => (0u8..24).prop_map(ListOp::Dequeue),
        2 => Just(ListOp::Pick),
        2 => (0u8..24).prop_map(ListOp::MoveToHead),
    ]
}

proptest! {
    /// `rq->cfs_tasks` (head = most recently run or enqueued) against a `VecDeque`
    /// model: `list_add` at enqueue, `list_del` at dequeue, `list_move` to the head when
    /// a task starts running and by [`Rq::cfs_tasks_move_to_head`].
    #[test]
    fn cfs_tasks_order_matches_a_list_model(ops in proptest::collection::vec(list_op(), 1..200)) {
        let mut now = 1_000_000_000u64;
        let mut cfg = RqConfig::new(CpuId(0), 1);
        cfg.max_tasks = 16;
        let mut rq = Rq::new(cfg, Nanos(now));
        let mut model: std::collections::VecDeque<TaskId> = Default::default();
        let mut parked: std::collections::BTreeMap<TaskId, Task> = Default::default();
        for op in &ops {
            now += 100_000;
            rq.update_rq_clock(Nanos(now)).unwrap();
            match *op {
                ListOp::Enqueue(k) => {
                    let id = TaskId(k as u32);
                    if model.contains(&id) {
                        continue;
                    }
                    let t = parked.remove(&id).unwrap_or_else(|| {
                        Task::new(id, 0, TaskUclamp::new(), CpuMask::of(CpuId(0))).unwrap()
                    });
                    let flags = if t.cpu.is_none() { EnqueueFlags::NEW } else { EnqueueFlags::WAKEUP };
                    match rq.enqueue_task(t, flags) {
                        Ok(()) => model.push_front(id),
                        Err(e) => {
                            let full = matches!(e.reason, RqError::Full { .. });
                            prop_assert!(full, "{}", e.reason);
                            prop_assert_eq!(model.len(), 16);
                            parked.insert(id, e.task);
                        }
                    }
                }
                ListOp::Dequeue(k) => {
                    let id = TaskId(k as u32);
                    let r = rq.dequeue_task(id, DequeueFlags::SLEEP);
                    prop_assert_eq!(r.is_ok(), model.contains(&id));
                    if let Ok(t) = r {
                        model.retain(|&x| x != id);
                        parked.insert(id, t);
                    }
                }
                ListOp::Pick => {
                    // A task that keeps running is not set_next'ed again.
                    let prev = rq.curr();
                    match rq.pick_next_task() {
                        Some(id) if Some(id) != prev => {
                            model.retain(|&x| x != id);
                            model.push_front(id);
                        }
                        _ => {}
                    }
                }
                ListOp::MoveToHead(k) => {
                    let id = TaskId(k as u32);
                    prop_assert_eq!(rq.cfs_tasks_move_to_head(id), model.contains(&id));
                    if model.contains(&id) {
                        model.retain(|&x| x != id);
                        model.push_front(id);
                    }
                }
            }
            let ours: Vec<TaskId> = rq.cfs_tasks().collect();
            let theirs: Vec<TaskId> = model.iter().copied().collect();
            prop_assert_eq!(&ours, &theirs);
            let back: Vec<TaskId> = rq.cfs_tasks().rev().collect();
            prop_assert_eq!(back, theirs.into_iter().rev().collect::<Vec<_>>());
            prop_assert!(rq.check_invariants().is_ok());
        }
    }
}

#[test]
fn the_snapshot_is_what_the_rq_reports() {
    let mut now = 1_000_000_000u64;
    let mut cfg = RqConfig::new(CpuId(2), 4);
    cfg.capacity_orig = Capacity(446);
    let mut rq = Rq::new(cfg, Nanos(now));
    let idle = rq.snapshot();
    assert!(idle.idle && idle.pelt.idle && idle.nr_running == 0);
    assert_eq!(
        idle,
        RqSnapshot {
            pelt: idle.pelt,
            next_balance: idle.next_balance,
            // A CPU starts in its idle loop, stamped at creation.
            idle_stamp: Some(Nanos(now)),
            ..RqSnapshot::idle(CpuId(2), Capacity(446))
        }
    );
    let mut lo = TaskUclamp::new();
    lo.set_request(300, 800).unwrap();
    for (id, uc) in [(1, lo), (2, TaskUclamp::new())] {
        let t = Task::new(TaskId(id), 0, uc, CpuMask::of(CpuId(2))).unwrap();
        rq.enqueue_task(t, EnqueueFlags::NEW).unwrap();
    }
    rq.pick_next_task();
    for _ in 0..10 {
        now += TICK_NS;
        rq.update_rq_clock(Nanos(now)).unwrap();
        rq.task_tick();
    }
    rq.set_misfit_task_load(77);
    rq.note_idle_entry();
    let s = rq.snapshot();
    assert_eq!(s.cpu(), CpuId(2));
    assert_eq!(s.util, rq.cpu_snapshot());
    assert_eq!(s.capacity.capacity_orig, Capacity(446));
    assert_eq!(
        (s.load_avg, s.runnable_avg),
        (rq.cfs_avg().load_avg, rq.cfs_avg().runnable_avg)
    );
    assert!(s.load_avg > 0 && s.util.cfs.util_avg.0 > 0);
    assert_eq!(s.nr_running, 2);
    assert!(!s.idle && !s.pelt.idle);
    assert_eq!(s.rq_clamp, rq.uclamp_range());
    assert_eq!(s.rq_clamp.min.0, 300);
    assert!(!s.uclamp_rq_idle);
    assert_eq!((s.misfit_task_load, s.idle_calls), (77, 1));
    assert_eq!(s.pelt, rq.pelt_remote());
    assert_eq!(
        s.pelt.last_update_time,
        rq.cfs_rq_avg().avg.last_update_time
    );
}

/// A run queue whose clock starts at 0 (the simulator's do): a task attached while the
/// cfs_rq's `last_update_time` is still 0 is attached all the same (Linux's encoding,
/// `last_update_time != 0`, would call it detached), stays in phase with its cfs_rq, and
/// its signals leave the CPU when it migrates. Oracle: a task that was the only one on
/// the CPU takes all of the CPU's utilisation with it (up to rounding).
#[test]
fn pelt_time_zero_keeps_an_attached_task_attached() {
    let mut rqs: Vec<Rq> = (0..2)
        .map(|c| Rq::new(RqConfig::new(CpuId(c), 2), Nanos(0)))
        .collect();
    let t = Task::new(TaskId(1), 0, TaskUclamp::new(), CpuMask(0b11)).unwrap();
    rqs[0].enqueue_task(t, EnqueueFlags::NEW).unwrap();
    rqs[0].pick_next_task();
    rqs[0].update_rq_clock(Nanos(0)).unwrap();
    rqs[0].task_tick();
    assert!(rqs[0].task(TaskId(1)).unwrap().avg.attached);
    let mut now = 0;
    for _ in 0..10 {
        now += TICK_NS;
        rqs[0].update_rq_clock(Nanos(now)).unwrap();
        rqs[0].task_tick();
        let se = rqs[0].task(TaskId(1)).unwrap().avg;
        assert_eq!(
            se.last_update_time,
            rqs[0].cfs_avg().last_update_time,
            "in phase with its cfs_rq"
        );
    }
    let mut t = rqs[0].dequeue_task(TaskId(1), DequeueFlags::SLEEP).unwrap();
    rqs[0].pick_next_task();
    let r = migrate_task_rq_fair(&rqs[0].pelt_remote(), &mut t, rqs[0].clock_task()).unwrap();
    assert_eq!(r.nr, 1, "the task's signals leave its old CPU");
    assert!(!t.avg.attached);
    rqs[0].apply_removed(r);
    rqs[0].update_blocked_averages();
    assert!(rqs[0].cfs_avg().util_avg <= 1, "{:?}", rqs[0].cfs_avg());
}

#[test]
fn blocked_load_halves_every_32_periods_while_idle() {
    // Oracle: PELT's y^32 = 1/2; a period is 1024 × 1024 ns of (idle = wall) time.
    let mut now = 1_000_000_000u64;
    let mut rqs = vec![Rq::new(RqConfig::new(CpuId(0), 1), Nanos(now))];
    let t = Task::new(TaskId(1), 0, TaskUclamp::new(), CpuMask::first_n(1)).unwrap();
    rqs[0].enqueue_task(t, EnqueueFlags::NEW).unwrap();
    rqs[0].pick_next_task();
    run(&mut rqs, &mut now, 300);
    let rq = &mut rqs[0];
    let task = rq.dequeue_task(TaskId(1), DequeueFlags::SLEEP).unwrap();
    assert_eq!(rq.pick_next_task(), None);
    let before = rq.cfs_avg().util_avg as f64;
    assert!(before > 900.0, "task ran 300 ms: util {before}");
    let period_ns = 1024 * 1024;
    for k in 1..=3u32 {
        now += 32 * period_ns;
        rq.update_rq_clock(Nanos(now)).unwrap();
        assert!(rq.update_blocked_averages());
        let want = before / 2f64.powi(k as i32);
        let got = rq.cfs_avg().util_avg as f64;
        assert!(
            (got - want).abs() <= 0.02 * want + 1.0,
            "after {k}×32 periods: {got} vs {want}"
        );
        // The sleeping task's own signal decays alike when synced to the rq.
        let mut a = task.clone();
        sync_entity_load_avg(&rq.pelt_remote(), &mut a).unwrap();
        assert_eq!(a.avg.last_update_time, rq.cfs_avg().last_update_time);
        assert!((a.avg.util_avg as f64 - got).abs() <= 2.0);
    }
}

/// A task that slept on a CPU which then stayed idle, woken on another CPU later:
/// its util must arrive decayed by the whole sleep (Linux's `migrate_se_pelt_lag`,
/// v6.2), not frozen at the old cfs_rq's last update. Oracle: y^32 = 1/2 per 32
/// PELT periods of idle (= wall) time, in f64.
#[test]
fn wake_up_migration_from_an_idle_cpu_decays_the_whole_sleep() {
    let mut now = 1_000_000_000u64;
    let mut rqs: Vec<Rq> = (0..2)
        .map(|i| Rq::new(RqConfig::new(CpuId(i), 2), Nanos(now)))
        .collect();
    let t = Task::new(TaskId(1), 0, TaskUclamp::new(), CpuMask::first_n(2)).unwrap();
    rqs[0].enqueue_task(t, EnqueueFlags::NEW).unwrap();
    rqs[0].pick_next_task();
    run(&mut rqs, &mut now, 200);
    let mut task = rqs[0].dequeue_task(TaskId(1), DequeueFlags::SLEEP).unwrap();
    assert_eq!(rqs[0].pick_next_task(), None);
    let at_sleep = task.avg.util_avg as f64;
    assert!(at_sleep > 900.0, "ran 200 ms: util {at_sleep}");
    // 64 periods of sleep; nothing updates cpu 0's cfs_rq meanwhile (no tick, no
    // blocked-load update: an idle NOHZ CPU).
    let period_ns = 1024 * 1024;
    now += 64 * period_ns;
    for rq in rqs.iter_mut() {
        rq.update_rq_clock(Nanos(now)).unwrap();
    }
    let r = migrate_task_rq_fair(&rqs[0].pelt_remote(), &mut task, rqs[0].clock_task());
    rqs[0].apply_removed(r.unwrap());
    rqs[1]
        .enqueue_task(task, EnqueueFlags::WAKEUP | EnqueueFlags::MIGRATED)
        .unwrap();
    let want = at_sleep / 4.0;
    let got = rqs[1].cfs_avg().util_avg as f64;
    assert!(
        (got - want).abs() <= 0.02 * want + 2.0,
        "util arriving on cpu 1: {got}, want {want} (at sleep {at_sleep})"
    );
    // Cpu 0 removes what its sums held of the task: nothing is left behind, now or
    // at later period boundaries (where the averages are recomputed from the sums).
    for _ in 0..3 {
        rqs[0].update_blocked_averages();
        assert!(
            rqs[0].cfs_avg().util_avg <= 2,
            "cpu 0 kept {}",
            rqs[0].cfs_avg().util_avg
        );
        now += 5 * period_ns;
        rqs[0].update_rq_clock(Nanos(now)).unwrap();
    }
}

/// A saturated little CPU whose task goes to sleep: the time `clock_pelt` lags behind
/// `clock_task` is lost idle time (`update_idle_rq_clock_pelt`), however the caller
/// interleaves clock updates between the dequeue and the pick. Oracle: the PELT
/// clock's own definition — a CPU of capacity 512 at fmax busy for `T` advances
/// `clock_pelt` by `T/2`, and a saturated rq must not get the other half back.
#[test]
fn saturated_rq_keeps_lost_idle_time_across_a_clock_update_before_pick() {
    let mut now = 1_000_000_000u64;
    let mut cfg = RqConfig::new(CpuId(0), 1);
    cfg.capacity_orig = Capacity(512);
    let mut rq = Rq::new(cfg, Nanos(now));
    let t = Task::new(TaskId(1), 0, TaskUclamp::new(), CpuMask::first_n(1)).unwrap();
    rq.enqueue_task(t, EnqueueFlags::NEW).unwrap();
    rq.update_rq_clock(Nanos(now)).unwrap();
    rq.pick_next_task();
    let pelt_start = rq.clock_pelt().0;
    let mut rqs = vec![rq];
    run(&mut rqs, &mut now, 1000);
    let mut rq = rqs.pop().unwrap();
    let busy_pelt = rq.clock_pelt().0 - pelt_start;
    assert!(busy_pelt.abs_diff(500_000_000) <= 1_000, "{busy_pelt}");
    rq.dequeue_task(TaskId(1), DequeueFlags::SLEEP).unwrap();
    // The caller refreshes the clock (same instant) before scheduling.
    rq.update_rq_clock(Nanos(now)).unwrap();
    assert_eq!(rq.pick_next_task(), None);
    let lost = rq.pelt_clock().lost_idle_time;
    assert!(lost.abs_diff(500_000_000) <= 1_000, "lost idle time {lost}");
    assert_eq!(rq.clock_pelt().0, pelt_start + busy_pelt);
}

/// util_est learns only from a task going to sleep (`util_est_update(.., task_sleep)`):
/// moving a runnable task between CPUs, or a nice change, is not the end of an
/// activation and must leave its estimate alone.
#[test]
fn util_est_learns_only_at_sleep() {
    let mut now = 1_000_000_000u64;
    let mut rqs: Vec<Rq> = (0..2)
        .map(|i| Rq::new(RqConfig::new(CpuId(i), 2), Nanos(now)))
        .collect();
    let t = Task::new(TaskId(1), 0, TaskUclamp::new(), CpuMask::first_n(2)).unwrap();
    rqs[0].enqueue_task(t, EnqueueFlags::NEW).unwrap();
    rqs[0].pick_next_task();
    run(&mut rqs, &mut now, 100);
    assert_eq!(rqs[0].task(TaskId(1)).unwrap().util_est().0, 0);
    rqs[0].set_nice(TaskId(1), 3).unwrap();
    let t = rqs[0].detach_task(TaskId(1)).unwrap();
    assert!(t.avg.util_avg > 500);
    assert_eq!(t.util_est().0, 0, "a migration is not a sleep");
    rqs[1].attach_task(t).unwrap();
    rqs[1].pick_next_task();
    run(&mut rqs, &mut now, 20);
    let t = rqs[1].dequeue_task(TaskId(1), DequeueFlags::SLEEP).unwrap();
    // Fast ramp-up: the first sleep takes util_avg as is.
    assert_eq!(t.util_est().0 as u64, t.avg.util_avg);
}

/// The tick ages the running task and its rq (`entity_tick` → `update_load_avg`) and,
/// when that changes the rq's signals, asks for a cpufreq update
/// (`cfs_rq_util_change`): with no other scheduling event, the rq's util follows the
/// PELT ramp of an always-running task. Oracle: `1024 · (1 − y^n)` in f64, `n` the
/// PELT periods elapsed; the integer signal lags by at most one period.
#[test]
fn tick_alone_drives_the_util_ramp_and_cpufreq() {
    let mut now = 1_000_000_000u64;
    let mut rq = Rq::new(RqConfig::new(CpuId(0), 1), Nanos(now));
    let t = Task::new(TaskId(1), 0, TaskUclamp::new(), CpuMask::first_n(1)).unwrap();
    rq.enqueue_task(t, EnqueueFlags::NEW).unwrap();
    rq.pick_next_task();
    let start = now;
    let util0 = rq.task(TaskId(1)).unwrap().avg.util_avg as f64;
    rq.take_cpufreq_update();
    let period_ns = 1024.0 * 1024.0;
    let y = 0.5f64.powf(1.0 / 32.0);
    let ramp = |ns: u64| {
        let n = (ns - start) as f64 / period_ns;
        1024.0 - (1024.0 - util0) * y.powf(n)
    };
    for i in 1..=25 {
        now += TICK_NS;
        rq.update_rq_clock(Nanos(now)).unwrap();
        rq.task_tick();
        assert!(
            rq.take_cpufreq_update().is_some(),
            "tick {i} crossed a period"
        );
        let got = rq.cfs_avg().util_avg as f64;
        let (lo, hi) = (ramp(now - 1_048_576), ramp(now));
        assert!(
            got >= lo - 2.0 && got <= hi + 2.0,
            "tick {i}: util {got} outside [{lo:.1}, {hi:.1}]"
        );
    }
}
