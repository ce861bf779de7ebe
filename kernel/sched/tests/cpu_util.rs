//! cpu_util / effective_cpu_util / util_fits_cpu against cases derived by hand from
//! Linux v6.12 `kernel/sched/fair.c` (`cpu_util`, `effective_cpu_util`, `util_fits_cpu`).

use asym_sched::cpu_util::{
    capacity_greater, cpu_bw_dl, cpu_util, cpu_util_cfs, cpu_util_cfs_boost, cpu_util_without,
    effective_cpu_util, fits_capacity, sched_cpu_util, task_fits_cpu, util_fits_cpu, CfsRqUtil,
    CpuCapacityInfo, CpuSnapshot, Fit, RqNonCfsUtil, TaskUtil,
};
use asym_sched::features::{Feature, SchedFeatures};
use asym_sched::types::{Capacity, CpuId, Util};
use asym_sched::uclamp::ClampRange;

fn cpu(id: u16, cap: u32, util: u32, runnable: u32, est: u32) -> CpuSnapshot {
    CpuSnapshot {
        cpu: CpuId(id),
        capacity_orig: Capacity(cap),
        cfs: CfsRqUtil {
            util_avg: Util(util),
            runnable_avg: Util(runnable),
            util_est: Util(est),
        },
    }
}

#[test]
fn cpu_util_terms() {
    let f = SchedFeatures::default();
    let no_est = f.with(Feature::UTIL_EST, false);
    let c = cpu(0, 1024, 300, 500, 0);
    assert_eq!(cpu_util_cfs(&c, f), Util(300));
    // Runnable boosting: max(util, runnable), only with the feature.
    assert_eq!(cpu_util_cfs_boost(&c, f), Util(500));
    let nb = f.with(Feature::RUNNABLE_BOOST, false);
    assert_eq!(cpu_util_cfs_boost(&c, nb), Util(300));
    assert_eq!(
        cpu_util(&c, None, None, true, nb),
        Util(500),
        "explicit boost"
    );

    // util_est dominates when larger, only under UTIL_EST.
    let c = cpu(0, 1024, 300, 300, 400);
    assert_eq!(cpu_util_cfs(&c, f), Util(400));
    assert_eq!(cpu_util_cfs(&c, no_est), Util(300));

    // Task queued here, util 100, est 150: without it, max(300-100, 400-150) = 250.
    let p = TaskUtil {
        util_avg: Util(100),
        util_est: Util(150),
        cpu: CpuId(0),
        queued_or_current: true,
    };
    assert_eq!(cpu_util_without(&c, &p, f), Util(250));
    assert_eq!(cpu_util_without(&c, &p, no_est), Util(200));
    // Moving it elsewhere is the same as without it.
    assert_eq!(cpu_util(&c, Some(&p), Some(CpuId(1)), false, f), Util(250));
    // Waking on its previous CPU (EAS): its blocked util is already in util_avg (300), its
    // estimate left util_est at dequeue, so it is added back: max(300, 400+150).
    let waking = TaskUtil {
        queued_or_current: false,
        ..p
    };
    assert_eq!(
        cpu_util(&c, Some(&waking), Some(CpuId(0)), false, f),
        Util(550)
    );
    assert_eq!(
        cpu_util(&c, Some(&waking), Some(CpuId(0)), false, no_est),
        Util(300)
    );

    // Waking task from CPU 1 landing on CPU 0: 300+100 = 400, est 400+150 = 550.
    let p1 = TaskUtil {
        cpu: CpuId(1),
        queued_or_current: false,
        ..p
    };
    assert_eq!(cpu_util(&c, Some(&p1), Some(CpuId(0)), false, f), Util(550));
    assert_eq!(
        cpu_util(&c, Some(&p1), Some(CpuId(0)), false, no_est),
        Util(400)
    );
    // ... not landing here: nothing to add or remove.
    assert_eq!(cpu_util(&c, Some(&p1), Some(CpuId(2)), false, f), Util(400));
    assert_eq!(cpu_util_without(&c, &p1, f), Util(400));

    // Subtraction never underflows.
    let big = TaskUtil {
        util_avg: Util(900),
        util_est: Util(900),
        ..p
    };
    assert_eq!(cpu_util_without(&c, &big, f), Util(0));

    // Capped at capacity_orig.
    let little = cpu(3, 383, 500, 600, 700);
    assert_eq!(cpu_util_cfs(&little, f), Util(383));
    assert_eq!(cpu_util_cfs_boost(&little, f), Util(383));
}

#[test]
fn effective_cpu_util_cases() {
    let none = RqNonCfsUtil::default();
    let r = effective_cpu_util(Capacity(1024), Util(300), &none, ClampRange::NONE, false);
    assert_eq!((r.util, r.min, r.max), (Util(300), Util(0), Util(1024)));

    // irq 100, rt 50: (300+50) × (1024−100)/1024 = 315.8 → 315, + 100 = 415.
    let o = RqNonCfsUtil {
        irq: Util(100),
        rt: Util(50),
        ..none
    };
    let r = effective_cpu_util(Capacity(1024), Util(300), &o, ClampRange::NONE, false);
    assert_eq!(r.util, Util(415));
    assert_eq!(r.min, Util(100));

    // DL bandwidth 0.25 (BW_SHIFT 20) → 256 on the floor; uclamp_min 300 above it.
    let o = RqNonCfsUtil {
        dl_bw: cpu_bw_dl(1 << 18),
        ..none
    };
    assert_eq!(o.dl_bw, Util(256));
    let clamp = ClampRange {
        min: Util(300),
        max: Util(600),
    };
    let r = effective_cpu_util(Capacity(1024), Util(100), &o, clamp, true);
    assert_eq!((r.min, r.max), (Util(300), Util(600)));
    // Without a clamp the floor is irq + DL bandwidth: 50 + 256.
    let o = RqNonCfsUtil { irq: Util(50), ..o };
    let r = effective_cpu_util(Capacity(1024), Util(100), &o, ClampRange::NONE, false);
    assert_eq!(r.min, Util(306));
    // uclamp_max above capacity: capped at capacity.
    let clamp = ClampRange {
        min: Util(0),
        max: Util(1024),
    };
    let r = effective_cpu_util(Capacity(383), Util(100), &none, clamp, true);
    assert_eq!(r.max, Util(383));

    // Saturated: cfs+rt+dl ≥ capacity → capacity.
    let o = RqNonCfsUtil {
        rt: Util(200),
        dl: Util(100),
        ..none
    };
    let r = effective_cpu_util(Capacity(383), Util(100), &o, ClampRange::NONE, false);
    assert_eq!(r.util, Util(383));
    // irq ≥ capacity: everything is capacity.
    let o = RqNonCfsUtil {
        irq: Util(400),
        ..none
    };
    let r = effective_cpu_util(Capacity(383), Util(0), &o, ClampRange::NONE, false);
    assert_eq!((r.util, r.min, r.max), (Util(383), Util(383), Util(383)));

    // Runnable RT without uclamp → floor at capacity; with uclamp → not forced.
    let o = RqNonCfsUtil {
        rt_runnable: true,
        ..none
    };
    let r = effective_cpu_util(Capacity(1024), Util(10), &o, ClampRange::NONE, false);
    assert_eq!(r.min, Util(1024));
    let r = effective_cpu_util(Capacity(1024), Util(10), &o, ClampRange::NONE, true);
    assert_eq!(r.min, Util(0));

    // sched_cpu_util = effective util of cpu_util_cfs.
    let c = cpu(0, 1024, 300, 300, 0);
    let o = RqNonCfsUtil {
        irq: Util(100),
        rt: Util(50),
        ..none
    };
    assert_eq!(sched_cpu_util(&c, &o, SchedFeatures::default()), Util(415));
}

#[test]
fn capacity_margins() {
    // 80 %: 819 × 1280 = 1048320 < 1048576, 820 × 1280 = 1049600.
    assert!(fits_capacity(819, 1024));
    assert!(!fits_capacity(820, 1024));
    // ~5 %: 1078/1024.
    assert!(capacity_greater(1024, 972));
    assert!(!capacity_greater(1024, 973));
}

const LITTLE: CpuCapacityInfo = CpuCapacityInfo::unpressured(Capacity(383));
const BIG: CpuCapacityInfo = CpuCapacityInfo::unpressured(Capacity(1024));

/// (util, uclamp_min, uclamp_max, cpu, tri-state result, two-way result), by hand from §3.1
/// (tri-state, v6.2+) and the v6.1 form.
const CASES: &[(u32, u32, u32, CpuCapacityInfo, Fit, Fit)] = &[
    // 300×1280 = 384000 < 383×1024 = 392192: fits by util.
    (300, 0, 1024, LITTLE, Fit::Yes, Fit::Yes),
    // 310×1280 = 396800 ≥ 392192, uclamp_max 1024 > 383: no.
    (310, 0, 1024, LITTLE, Fit::No, Fit::No),
    // uclamp_max 300 ≤ 383: forced to fit.
    (310, 0, 300, LITTLE, Fit::Yes, Fit::Yes),
    // Fits by util, but uclamp_min 500 > 383: min-only misfit; v6.1: no (not a 1024 CPU).
    (100, 500, 1024, LITTLE, Fit::UclampMinOnly, Fit::No),
    // Util doesn't fit at all: no in both, not "min-only".
    (400, 500, 1024, LITTLE, Fit::No, Fit::No),
    // uclamp_min below capacity: yes.
    (300, 350, 1024, LITTLE, Fit::Yes, Fit::Yes),
    // uclamp_min > uclamp_max: min is clamped to max (300 ≤ 383).
    (100, 600, 300, LITTLE, Fit::Yes, Fit::Yes),
    // Big CPU: 100 with min 500 fits.
    (100, 500, 1024, BIG, Fit::Yes, Fit::Yes),
    // Big CPU, 900 > 80 %: the unclamped max (1024 on 1024) does not rescue it.
    (900, 0, 1024, BIG, Fit::No, Fit::No),
    // ... a uclamp_max of 800 does.
    (900, 0, 800, BIG, Fit::Yes, Fit::Yes),
    // Pressured big CPU (actual 900): min 1000 cannot be met → min-only; v6.1 skipped the
    // check on 1024 CPUs → yes.
    (
        100,
        1000,
        1024,
        CpuCapacityInfo {
            capacity: Capacity(1024),
            capacity_orig: Capacity(1024),
            actual: Capacity(900),
        },
        Fit::UclampMinOnly,
        Fit::Yes,
    ),
    // capacity_of reduced by RT to 300: 250×1280 = 320000 ≥ 307200 → no.
    (
        250,
        0,
        1024,
        CpuCapacityInfo {
            capacity: Capacity(300),
            capacity_orig: Capacity(383),
            actual: Capacity(383),
        },
        Fit::No,
        Fit::No,
    ),
];

#[test]
fn util_fits_cpu_table() {
    let tri = SchedFeatures::default();
    let two = tri.with(Feature::UCLAMP_FIT_TRISTATE, false);
    for (i, &(util, min, max, cpu, want_tri, want_two)) in CASES.iter().enumerate() {
        let got = util_fits_cpu(Util(util), Util(min), Util(max), cpu, true, tri);
        assert_eq!(got, want_tri, "case {i} tri-state");
        let got = util_fits_cpu(Util(util), Util(min), Util(max), cpu, true, two);
        assert_eq!(got, want_two, "case {i} two-way");
        assert_ne!(
            got,
            Fit::UclampMinOnly,
            "two-way never returns the third state"
        );
        // task_fits_cpu is true only for a full fit.
        let clamp = ClampRange {
            min: Util(min),
            max: Util(max),
        };
        assert_eq!(
            task_fits_cpu(Util(util), clamp, cpu, true, tri),
            want_tri == Fit::Yes,
            "case {i} task_fits_cpu"
        );
    }
    // uclamp unused: util alone decides, whatever the clamps say.
    assert_eq!(
        util_fits_cpu(Util(100), Util(500), Util(1024), LITTLE, false, tri),
        Fit::Yes
    );
    assert_eq!(
        util_fits_cpu(Util(310), Util(0), Util(300), LITTLE, false, tri),
        Fit::No
    );
    assert!(Fit::UclampMinOnly.fits_ignoring_uclamp_min());
    assert!(!Fit::No.fits_ignoring_uclamp_min());
}
