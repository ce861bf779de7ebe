//! asym's `UTIL_EST_DECAY_TO_RUNNABLE` against the recurrence worked out by hand.

use asym_sched::features::{Feature, SchedFeatures};
use asym_sched::pelt::SchedAvg;
use asym_sched::types::{Capacity, Util};
use asym_sched::util_est::{cfs_se_util_change, task_util_est_raw, util_est_update};

const BIG: Capacity = Capacity(1024);

fn ran(task: &mut SchedAvg, util: u64, runnable: u64) {
    task.util_avg = util;
    task.runnable_avg = runnable;
    cfs_se_util_change(task);
}

/// An estimate of 600 (a past heavy phase) for a task that now shows util 100 but
/// runnable 250 (it waits behind another task). Linux: the ewma stays 600 for ever. With
/// the switch: 600 - (600 - 250) / 4 = 512 (512.5 truncated in the << 2 domain), then
/// 512 - 262/4 = 446 (446.5), ... towards 250 and never below it; it stops within
/// UTIL_EST_MARGIN (10) of 250. Without waiting (runnable = util) both decay to util alike.
#[test]
fn inflated_estimate_decays_to_runnable_only_with_the_switch() {
    let linux = SchedFeatures::default();
    let on = linux.with(Feature::UTIL_EST_DECAY_TO_RUNNABLE, true);
    for (f, want) in [(linux, [600u32, 600, 600]), (on, [512, 446, 397])] {
        let mut t = SchedAvg::default();
        ran(&mut t, 600, 600);
        util_est_update(&mut t, true, BIG, f);
        assert_eq!(task_util_est_raw(&t), Util(600));
        for w in want {
            ran(&mut t, 100, 250);
            util_est_update(&mut t, true, BIG, f);
            assert_eq!(task_util_est_raw(&t), Util(w));
        }
    }
    let mut t = SchedAvg::default();
    ran(&mut t, 600, 600);
    util_est_update(&mut t, true, BIG, on);
    for _ in 0..100 {
        ran(&mut t, 100, 250);
        util_est_update(&mut t, true, BIG, on);
    }
    let e = task_util_est_raw(&t).0;
    assert!((250..260).contains(&e), "{e}");
    // No waiting: the switch changes nothing.
    for f in [linux, on] {
        let mut t = SchedAvg::default();
        ran(&mut t, 600, 600);
        util_est_update(&mut t, true, BIG, f);
        ran(&mut t, 200, 200);
        util_est_update(&mut t, true, BIG, f);
        assert_eq!(task_util_est_raw(&t), Util(500));
    }
}
