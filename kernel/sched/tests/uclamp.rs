//! uclamp aggregation against a brute-force multiset, and uclamp_rq_util_with by hand.

use asym_sched::types::Util;
use asym_sched::uclamp::{
    uclamp_eff_value, uclamp_rq_util_with, ClampRange, TaskUclamp, UclampId, UclampRq, UclampSysctl,
};
use proptest::prelude::*;

fn task(min: u32, max: u32) -> TaskUclamp {
    let mut t = TaskUclamp::new();
    t.set_request(min, max).unwrap();
    t
}

#[test]
fn rq_clamp_is_the_max_over_runnable_tasks_and_retained_when_idle() {
    let sys = UclampSysctl::default();
    let mut rq = UclampRq::new();
    assert!(rq.is_idle());
    let mut a = task(100, 300);
    let mut b = task(400, 700);
    let mut c = task(250, 500);
    for t in [&mut a, &mut b, &mut c] {
        rq.inc(t, &sys, false);
    }
    assert!(!rq.is_idle());
    assert_eq!(
        rq.range(),
        ClampRange {
            min: Util(400),
            max: Util(700)
        }
    );
    rq.dec(&mut b);
    assert_eq!(
        rq.range(),
        ClampRange {
            min: Util(250),
            max: Util(500)
        }
    );
    rq.dec(&mut c);
    assert_eq!(
        rq.range(),
        ClampRange {
            min: Util(100),
            max: Util(300)
        }
    );
    rq.dec(&mut a);
    // Idle: the max clamp of the last task stays, the min clamp drops.
    assert!(rq.is_idle());
    assert_eq!(
        rq.range(),
        ClampRange {
            min: Util(0),
            max: Util(300)
        }
    );
    // Double dec is harmless.
    rq.dec(&mut a);
    assert_eq!(rq.nr_tasks(), 0);

    // uclamp_rq_util_with: for a task landing on the idle rq the retained max is ignored.
    let t = ClampRange {
        min: Util(0),
        max: Util(1024),
    };
    assert_eq!(
        uclamp_rq_util_with(&rq, Util(800), Some(t), true),
        Util(800)
    );
    // Without a task, the retained max applies.
    assert_eq!(uclamp_rq_util_with(&rq, Util(800), None, true), Util(300));
    // The next enqueue resets the retained value, even downwards.
    let mut d = task(0, 200);
    rq.inc(&mut d, &sys, false);
    assert_eq!(rq.value(UclampId::Max), Util(200));
    assert!(!rq.is_idle());
}

#[test]
fn rq_util_with_clamps_by_rq_and_task() {
    let sys = UclampSysctl::default();
    let mut rq = UclampRq::new();
    let mut a = task(200, 600);
    rq.inc(&mut a, &sys, false);
    // rq clamps [200, 600].
    assert_eq!(uclamp_rq_util_with(&rq, Util(100), None, true), Util(200));
    assert_eq!(uclamp_rq_util_with(&rq, Util(900), None, true), Util(600));
    assert_eq!(uclamp_rq_util_with(&rq, Util(400), None, true), Util(400));
    // Task [300, 800] joining: max(min)=300, max(max)=800.
    let t = ClampRange {
        min: Util(300),
        max: Util(800),
    };
    assert_eq!(
        uclamp_rq_util_with(&rq, Util(100), Some(t), true),
        Util(300)
    );
    assert_eq!(
        uclamp_rq_util_with(&rq, Util(1000), Some(t), true),
        Util(800)
    );
    // min ≥ max: min wins.
    let t = ClampRange {
        min: Util(900),
        max: Util(100),
    };
    assert_eq!(uclamp_rq_util_with(&rq, Util(10), Some(t), true), Util(900));
    // uclamp unused: identity.
    assert_eq!(
        uclamp_rq_util_with(&rq, Util(1000), Some(t), false),
        Util(1000)
    );
    // The last task leaves: the rq is idle and retains max 600. A task about to be
    // placed there resets it, so only the task's own clamps count (sched.h: "Ignore
    // last runnable task's max clamp, as this task will reset it").
    rq.dec(&mut a);
    assert!(rq.is_idle());
    assert_eq!(rq.value(UclampId::Max), Util(600));
    let t = ClampRange {
        min: Util(0),
        max: Util(250),
    };
    assert_eq!(
        uclamp_rq_util_with(&rq, Util(800), Some(t), true),
        Util(250)
    );
    // Without a task, the retained value still applies.
    assert_eq!(uclamp_rq_util_with(&rq, Util(800), None, true), Util(600));
}

#[test]
fn accounted_value_survives_request_changes() {
    let sys = UclampSysctl::default();
    let mut rq = UclampRq::new();
    let mut a = task(500, 1024);
    rq.inc(&mut a, &sys, false);
    a.set_request(0, 1024).unwrap();
    // Runnable: the accounted (old) value is the effective one until re-enqueue.
    assert_eq!(uclamp_eff_value(&a, UclampId::Min, &sys, false), Util(500));
    rq.dec(&mut a);
    assert_eq!(rq.value(UclampId::Min), Util(0));
    assert_eq!(uclamp_eff_value(&a, UclampId::Min, &sys, false), Util(0));
}

#[derive(Clone, Debug)]
enum Op {
    Inc(usize),
    Dec(usize),
}

proptest! {
    /// Random enqueue/dequeue of up to 12 tasks: rq clamps equal the brute-force max over
    /// the runnable set; idle semantics when it empties.
    #[test]
    fn aggregation_matches_brute_force(
        clamps in prop::collection::vec((0u32..=1024, 0u32..=1024), 12),
        ops in prop::collection::vec(
            prop_oneof![(0usize..12).prop_map(Op::Inc), (0usize..12).prop_map(Op::Dec)],
            1..200,
        ),
        sys_min in 0u32..=1024,
    ) {
        let sys = UclampSysctl { util_min: Util(sys_min), ..UclampSysctl::default() };
        let mut tasks: Vec<TaskUclamp> = clamps
            .iter()
            .map(|&(a, b)| task(a.min(b), a.max(b)))
            .collect();
        let mut runnable = [false; 12];
        let mut rq = UclampRq::new();
        let mut last_max = Util(1024);
        for op in ops {
            match op {
                Op::Inc(i) => { rq.inc(&mut tasks[i], &sys, false); runnable[i] = true; }
                Op::Dec(i) => { rq.dec(&mut tasks[i]); runnable[i] = false; }
            }
            let eff = |i: usize, id: UclampId| {
                let r = clamps[i];
                let v = match id { UclampId::Min => r.0.min(r.1), UclampId::Max => r.0.max(r.1) };
                match id { UclampId::Min => v.min(sys_min), UclampId::Max => v }
            };
            let n = runnable.iter().filter(|&&r| r).count() as u32;
            prop_assert_eq!(rq.nr_tasks(), n);
            if n == 0 {
                prop_assert!(rq.is_idle());
                prop_assert_eq!(rq.value(UclampId::Min), Util(0));
                prop_assert_eq!(rq.value(UclampId::Max), last_max);
            } else {
                for id in UclampId::ALL {
                    let want = (0..12).filter(|&i| runnable[i]).map(|i| eff(i, id)).max().unwrap();
                    prop_assert_eq!(rq.value(id), Util(want), "{:?}", id);
                }
                last_max = rq.value(UclampId::Max);
            }
        }
    }
}

/// `sched_setattr(SCHED_FLAG_UTIL_CLAMP)` on a queued task (`Rq::set_uclamp`): the rq's clamp
/// is the max over its runnable tasks' new requests at once, as Linux re-accounts with
/// `DEQUEUE_SAVE` / `ENQUEUE_RESTORE`; the running task stays current.
#[test]
fn set_uclamp_on_a_queued_task_reaccounts_the_rq_at_once() {
    use asym_sched::rq::{EnqueueFlags, Rq, RqConfig, Task};
    use asym_sched::types::{CpuId, CpuMask, Nanos, TaskId};
    let mut c = RqConfig::new(CpuId(0), 1);
    c.uclamp.used = true;
    let mut rq = Rq::new(c, Nanos(1_000_000_000));
    let new = |id, u| Task::new(TaskId(id), 0, u, CpuMask::first_n(1)).unwrap();
    rq.enqueue_task(new(1, TaskUclamp::new()), EnqueueFlags::NEW)
        .unwrap();
    rq.enqueue_task(new(2, task(100, 1024)), EnqueueFlags::NEW)
        .unwrap();
    let curr = rq.pick_next_task().unwrap();
    assert_eq!(rq.uclamp_range().min, Util(100));
    rq.set_uclamp(TaskId(1), task(600, 800)).unwrap();
    assert_eq!(
        rq.uclamp_range(),
        ClampRange {
            min: Util(600),
            max: Util(1024)
        }
    );
    assert_eq!(rq.task(TaskId(1)).unwrap().uclamp.req[0].value, Util(600));
    rq.set_uclamp(TaskId(2), task(0, 700)).unwrap();
    assert_eq!(
        rq.uclamp_range(),
        ClampRange {
            min: Util(600),
            max: Util(800)
        }
    );
    assert_eq!(rq.curr(), Some(curr));
    rq.set_uclamp(TaskId(1), TaskUclamp::new()).unwrap();
    assert_eq!(rq.uclamp_range().min, Util(0));
    rq.check_invariants().unwrap();
    assert!(
        rq.set_uclamp(TaskId(9), TaskUclamp::new()).is_err(),
        "a task not queued here"
    );
}
