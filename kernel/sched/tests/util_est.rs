//! util_est against the ewma recurrence written out independently (f64 and by hand).

use asym_sched::features::{Feature, SchedFeatures};
use asym_sched::pelt::SchedAvg;
use asym_sched::types::{Capacity, Util};
use asym_sched::util_est::{
    cfs_se_util_change, task_util_est, task_util_est_raw, util_est_dequeue, util_est_enqueue,
    util_est_update, UTIL_AVG_UNCHANGED,
};

const BIG: Capacity = Capacity(1024);

/// A task whose util_avg/runnable_avg were just recomputed by PELT.
fn ran(task: &mut SchedAvg, util: u64, runnable: u64) {
    task.util_avg = util;
    task.runnable_avg = runnable;
    cfs_se_util_change(task);
}

#[test]
fn ewma_decays_with_weight_one_quarter_from_800_to_200() {
    let f = SchedFeatures::default();
    let mut task = SchedAvg::default();
    ran(&mut task, 800, 800);
    util_est_update(&mut task, true, BIG, f);
    assert_eq!(task_util_est_raw(&task), Util(800));

    // Oracle: ewma' = 3/4 ewma + 1/4 sample, in reals; the kernel truncates each step.
    let mut real = 800.0f64;
    let mut steps = 0;
    loop {
        let before = task_util_est_raw(&task).0;
        ran(&mut task, 200, 200);
        util_est_update(&mut task, true, BIG, f);
        let after = task_util_est_raw(&task).0;
        if before - 200 < 10 {
            // Within UTIL_EST_MARGIN of the sample: no more decay.
            assert_eq!(after, before);
            break;
        }
        real = 0.75 * real + 0.25 * 200.0;
        steps += 1;
        assert!(
            (after as f64 - real).abs() <= steps as f64,
            "step {steps}: {after} vs {real:.2}"
        );
        assert!(after < before);
    }
    // 600 × (3/4)^n < 10 → n ≥ 15; truncation makes it a step or so faster.
    assert!((13..=15).contains(&steps), "{steps} steps");
    // First step by hand: 800 - (800 - 200) / 4 = 650.
    let mut t = SchedAvg::default();
    ran(&mut t, 800, 800);
    util_est_update(&mut t, true, BIG, f);
    ran(&mut t, 200, 200);
    util_est_update(&mut t, true, BIG, f);
    assert_eq!(task_util_est_raw(&t), Util(650));
}

#[test]
fn fast_ramp_up_and_margin() {
    let f = SchedFeatures::default();
    let mut task = SchedAvg::default();
    ran(&mut task, 200, 200);
    util_est_update(&mut task, true, BIG, f);
    ran(&mut task, 700, 700);
    util_est_update(&mut task, true, BIG, f);
    assert_eq!(
        task_util_est_raw(&task),
        Util(700),
        "increase is taken at once"
    );
    // Within 1 % (10) below: unchanged.
    ran(&mut task, 691, 691);
    util_est_update(&mut task, true, BIG, f);
    assert_eq!(task_util_est_raw(&task), Util(700));
    // Exactly the margin below: decays.
    ran(&mut task, 690, 690);
    util_est_update(&mut task, true, BIG, f);
    assert_eq!(task_util_est_raw(&task), Util(697)); // (700×4 − 10) / 4 = 697.5
}

#[test]
fn unchanged_flag_blocks_a_second_update() {
    let f = SchedFeatures::default();
    let mut task = SchedAvg::default();
    ran(&mut task, 600, 600);
    util_est_update(&mut task, true, BIG, f);
    assert_ne!(task.util_est & UTIL_AVG_UNCHANGED, 0);
    // util_avg changes but PELT did not say so (no cfs_se_util_change): ignored.
    task.util_avg = 100;
    task.runnable_avg = 100;
    util_est_update(&mut task, true, BIG, f);
    assert_eq!(task_util_est_raw(&task), Util(600));
    // After a PELT update, it is taken.
    cfs_se_util_change(&mut task);
    util_est_update(&mut task, true, BIG, f);
    assert_eq!(task_util_est_raw(&task), Util(475));
}

#[test]
fn no_update_without_sleep_or_feature_and_special_cases() {
    let mut task = SchedAvg::default();
    ran(&mut task, 600, 600);
    util_est_update(&mut task, false, BIG, SchedFeatures::default());
    assert_eq!(task.util_est, 0, "only a task going to sleep updates");
    let off = SchedFeatures::default().with(Feature::UTIL_EST, false);
    util_est_update(&mut task, true, BIG, off);
    assert_eq!(task.util_est, 0);

    let f = SchedFeatures::default();
    let mut task = SchedAvg::default();
    ran(&mut task, 800, 800);
    util_est_update(&mut task, true, BIG, f);
    // Waiting a lot (runnable well above util): no decay, flag set.
    ran(&mut task, 300, 500);
    util_est_update(&mut task, true, BIG, f);
    assert_eq!(task.util_est, 800 | UTIL_AVG_UNCHANGED);
    // util above the CPU's capacity: ignored, flag left clear.
    ran(&mut task, 500, 500);
    util_est_update(&mut task, true, Capacity(383), f);
    assert_eq!(task.util_est, 800);
}

#[test]
fn cfs_rq_sum_follows_enqueue_and_dequeue() {
    let f = SchedFeatures::default();
    let mut cfs = SchedAvg::default();
    let mut a = SchedAvg::default();
    let mut b = SchedAvg::default();
    ran(&mut a, 300, 300);
    util_est_update(&mut a, true, BIG, f);
    ran(&mut b, 150, 150);
    util_est_update(&mut b, true, BIG, f);
    util_est_enqueue(&mut cfs, &a, f);
    util_est_enqueue(&mut cfs, &b, f);
    assert_eq!(cfs.util_est, 450, "the flag bit is not summed");
    util_est_dequeue(&mut cfs, &a, f);
    assert_eq!(cfs.util_est, 150);
    util_est_dequeue(&mut cfs, &a, f);
    assert_eq!(cfs.util_est, 0, "never below zero");
    // task_util_est = max(util_avg, ewma).
    ran(&mut b, 400, 400);
    assert_eq!(task_util_est(&b), Util(400));
    ran(&mut b, 100, 100);
    assert_eq!(task_util_est(&b), Util(150));
    let off = f.with(Feature::UTIL_EST, false);
    util_est_enqueue(&mut cfs, &b, off);
    assert_eq!(cfs.util_est, 0);
}
