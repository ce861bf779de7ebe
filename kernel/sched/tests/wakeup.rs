//! Wake-up and fork placement tests (`select_idle_capacity`, `select_idle_sibling`,
//! `sched_balance_find_dst_cpu`, `select_task_rq_fair`).
//!
//! Oracles: hand cases derived from the boards' capacities (`capacity-dmips-mhz` × fmax of
//! the mainline DTs, normalised; Juno r2: A72 1024, A53 383; HiKey960: A73 1024, A53 462) and the 1280/1024 fit margin,
//! and a brute-force property whose fit test is recomputed here in floating point
//! (`util × 1.25 < capacity`): the chosen CPU is idle and fits whenever an allowed idle
//! CPU fits, otherwise the biggest allowed idle CPU, and always an allowed CPU.

// The real boards, as the kernel and the simulator see them: Juno r2's A72s are CPUs 0-1 in
// perf domain 0; HiKey960's A53s are CPUs 0-3 in perf domain 0.
use asym_boards::{HIKEY960, JUNO_R2 as JUNO};
use asym_sched::cpu_util::{CfsRqUtil, CpuCapacityInfo, CpuSnapshot, RqNonCfsUtil, TaskUtil};
use asym_sched::eas::EasTask;
use asym_sched::features::{Feature, SchedFeatures};
use asym_sched::rq::RqSnapshot;
use asym_sched::topology::Topology;
use asym_sched::types::{Capacity, CpuId, CpuMask, Util};
use asym_sched::uclamp::ClampRange;
use asym_sched::wakeup::{
    sched_balance_find_dst_cpu, select_idle_capacity, select_task_rq_fair, select_task_rq_interim,
    WakeKind, WakeupView,
};
use proptest::prelude::*;

fn cpus(topo: &Topology, util: &[u32]) -> Vec<RqSnapshot> {
    topo.cpus()
        .iter()
        .map(|c| {
            let u = Util(util[c.id.index()]);
            RqSnapshot {
                util: CpuSnapshot {
                    cpu: c.id,
                    capacity_orig: c.capacity_orig,
                    cfs: CfsRqUtil {
                        util_avg: u,
                        runnable_avg: u,
                        util_est: u,
                    },
                },
                non_cfs: RqNonCfsUtil::default(),
                capacity: CpuCapacityInfo::unpressured(c.capacity_orig),
                rq_clamp: ClampRange {
                    min: Util(0),
                    max: Util(1024),
                },
                uclamp_rq_idle: true,
                ..RqSnapshot::idle(c.id, c.capacity_orig)
            }
        })
        .collect()
}

fn task(util: u32, prev: usize, allowed: u64, min: u32) -> EasTask {
    EasTask {
        util: TaskUtil {
            util_avg: Util(util),
            util_est: Util(util),
            cpu: CpuId(prev as u16),
            queued_or_current: false,
        },
        clamp: ClampRange {
            min: Util(min),
            max: Util(1024),
        },
        allowed: CpuMask(allowed),
    }
}

/// The view with CPUs `idle` (a bit mask) idle.
fn view<'a>(
    topo: &'a Topology,
    cpus: &'a mut [RqSnapshot],
    idle: u64,
    uclamp: bool,
) -> WakeupView<'a> {
    for (i, c) in cpus.iter_mut().enumerate() {
        c.idle = idle & (1 << i) != 0;
    }
    WakeupView {
        cpus,
        topology: topo,
        em: None,
        overutilized: true,
        features: SchedFeatures::default(),
        uclamp_used: uclamp,
    }
}

fn wake(p: &EasTask, prev: usize, v: &WakeupView<'_>) -> usize {
    let prev = CpuId(prev as u16);
    select_task_rq_fair(p, prev, prev, WakeKind::Wakeup, v).index()
}

#[test]
fn capacities_are_the_boards() {
    let j = Topology::from_board(&JUNO).unwrap();
    assert_eq!(j.capacity_orig(CpuId(2)), Capacity(383));
    let h = Topology::from_board(&HIKEY960).unwrap();
    assert_eq!(h.capacity_orig(CpuId(0)), Capacity(462));
}

#[test]
fn juno_big_task_woken_on_idle_big_not_on_idle_little_prev() {
    let topo = Topology::from_board(&JUNO).unwrap();
    let mut c = cpus(&topo, &[600, 0, 0, 0, 0, 0]);
    // 350 × 1.25 = 437.5 > 383: fits only an A72. prev is an idle A53; CPU 0 is busy.
    let v = view(&topo, &mut c, 0b111110, false);
    assert_eq!(wake(&task(350, 2, 0b111111, 0), 2, &v), 1);
    // A small task stays on its idle previous LITTLE CPU.
    assert_eq!(wake(&task(50, 3, 0b111111, 0), 3, &v), 3);
    // 300 × 1.25 = 375 < 383 fits the A53: also stays.
    assert_eq!(wake(&task(300, 3, 0b111111, 0), 3, &v), 3);
}

#[test]
fn no_idle_fit_falls_back_to_biggest_then_scan_order() {
    let topo = Topology::from_board(&JUNO).unwrap();
    let mut c = cpus(&topo, &[600, 600, 0, 0, 500, 0]);
    // Bigs and CPU 4 busy; the scan starts at prev = 4 and wraps: 5 is the first idle
    // A53 and all A53s have the same capacity.
    let v = view(&topo, &mut c, 0b101100, false);
    assert_eq!(wake(&task(350, 4, 0b111111, 0), 4, &v), 5);
    // Nothing idle at all: the target (prev) stays.
    let v = view(&topo, &mut c, 0, false);
    assert_eq!(wake(&task(350, 4, 0b111111, 0), 4, &v), 4);
}

#[test]
fn uclamp_min_prefers_full_fit_then_biggest_actual_capacity() {
    let topo = Topology::from_board(&JUNO).unwrap();
    let mut c = cpus(&topo, &[0; 6]);
    let p = task(50, 2, 0b111111, 800);
    // Tristate on (default): an A53 is a uclamp_min-only misfit, the idle A72 fits.
    let v = view(&topo, &mut c, 0b111110, true);
    assert_eq!(wake(&p, 2, &v), 1);
    // With only pressured A72s idle (actual 700 < 800), every idle CPU is a uclamp_min-only
    // misfit: the one with the biggest actual capacity wins.
    c[1].capacity.actual = Capacity(700);
    let v = view(&topo, &mut c, 0b111110, true);
    assert_eq!(wake(&p, 2, &v), 1);
    assert_eq!(select_idle_capacity(&p, CpuId(2), &v), Some(CpuId(1)));
}

#[test]
fn affinity_is_respected() {
    let topo = Topology::from_board(&JUNO).unwrap();
    let mut c = cpus(&topo, &[0, 0, 200, 200, 200, 200]);
    // A big task pinned to LITTLEs 2-3, bigs idle, LITTLEs busy, prev a big CPU.
    let v = view(&topo, &mut c, 0b000011, false);
    let got = wake(&task(350, 0, 0b001100, 0), 0, &v);
    assert!(got == 2 || got == 3, "got {got}");
}

#[test]
fn hikey960_big_task_fork_and_wake() {
    let topo = Topology::from_board(&HIKEY960).unwrap();
    let mut c = cpus(&topo, &[0; 8]);
    let v = view(&topo, &mut c, 0xff, false);
    // 400 × 1.25 = 500 > 462: an A53 never fits.
    assert!(wake(&task(400, 1, 0xff, 0), 1, &v) >= 4);
    // Fork of a task with no utilisation yet: all clusters have spare, equal idle
    // counts: the lower cluster, its first idle CPU.
    let p = task(0, 0, 0xff, 0);
    assert_eq!(
        sched_balance_find_dst_cpu(&p, CpuId(0), CpuId(0), &v).index(),
        0
    );
    // A busy LITTLE cluster: fork goes to the idle big one.
    let mut c = cpus(&topo, &[300, 300, 300, 300, 0, 0, 0, 0]);
    let v = view(&topo, &mut c, 0xf0, false);
    assert_eq!(
        select_task_rq_fair(&p, CpuId(0), CpuId(0), WakeKind::Fork, &v).index(),
        4
    );
}

#[test]
fn fork_of_boosted_task_avoids_misfit_cluster() {
    let topo = Topology::from_board(&JUNO).unwrap();
    let mut c = cpus(&topo, &[200, 0, 0, 0, 0, 0]);
    // The A53 cluster has 4 idle CPUs vs 1, but uclamp_min 900 fits no A53: Linux's
    // group_misfit_task ranks below has_spare.
    let v = view(&topo, &mut c, 0b111110, true);
    let p = task(0, 0, 0b111111, 900);
    assert_eq!(
        select_task_rq_fair(&p, CpuId(0), CpuId(0), WakeKind::Fork, &v).index(),
        1
    );
    // Without the boost, the cluster with the most idle CPUs wins.
    let p = task(0, 0, 0b111111, 0);
    let got = select_task_rq_fair(&p, CpuId(0), CpuId(0), WakeKind::Fork, &v).index();
    assert!((2..6).contains(&got), "got {got}");
}

#[test]
fn interim_rule_prefers_idle_prev_then_first_idle() {
    let idle = [false, true, true, false];
    let cpus: Vec<RqSnapshot> = (0..4)
        .map(|i| RqSnapshot {
            idle: idle[i],
            ..RqSnapshot::idle(CpuId(i as u16), Capacity(1024))
        })
        .collect();
    let pick =
        |prev: u16, allowed: u64| select_task_rq_interim(CpuId(prev), CpuMask(allowed), &cpus).0;
    assert_eq!(pick(2, 0b1111), 2);
    assert_eq!(pick(0, 0b1111), 1);
    assert_eq!(pick(0, 0b1001), 0);
    assert_eq!(pick(0, 0b1000), 3);
}

#[test]
fn tristate_off_makes_uclamp_min_a_plain_misfit() {
    let topo = Topology::from_board(&JUNO).unwrap();
    let mut c = cpus(&topo, &[0; 6]);
    c[1].capacity.actual = Capacity(700);
    let mut v = view(&topo, &mut c, 0b111110, true);
    v.features = v.features.with(Feature::UCLAMP_FIT_TRISTATE, false);
    // v6.1 semantics: a big (1024) CPU fits regardless of uclamp_min; CPU 1 is idle.
    assert_eq!(wake(&task(50, 2, 0b111111, 800), 2, &v), 1);
}

proptest! {
    #[test]
    fn wakeup_picks_idle_fitting_cpu_and_respects_affinity(
        utils in proptest::collection::vec(0u32..1024, 8),
        idle in 0u64..256,
        allowed in 1u64..256,
        prev in 0usize..8,
        task_util in 0u32..1024,
        hikey in any::<bool>(),
    ) {
        let (board, n) = if hikey { (&HIKEY960, 8) } else { (&JUNO, 6) };
        let mask = (1u64 << n) - 1;
        let allowed = allowed & mask;
        prop_assume!(allowed != 0);
        let idle = idle & mask;
        let prev = prev % n;
        let topo = Topology::from_board(board).unwrap();
        let mut c = cpus(&topo, &utils[..n]);
        let v = view(&topo, &mut c, idle, false);
        let got = wake(&task(task_util, prev, allowed, 0), prev, &v);
        prop_assert!(allowed & (1 << got) != 0, "CPU {} not allowed", got);
        let cap = |i: usize| f64::from(topo.capacity_orig(CpuId(i as u16)).0);
        let fits = |i: usize| f64::from(task_util) * 1.25 < cap(i);
        let cand: Vec<usize> = (0..n).filter(|&i| idle & allowed & (1 << i) != 0).collect();
        if cand.iter().any(|&i| fits(i)) {
            prop_assert!(idle & (1 << got) != 0 && fits(got), "CPU {} idle/fit", got);
        } else if !cand.is_empty() {
            let best = cand.iter().map(|&i| cap(i)).fold(0.0, f64::max);
            prop_assert!(idle & (1 << got) != 0 && cap(got) == best, "CPU {}", got);
        } else if allowed & (1 << prev) != 0 {
            prop_assert_eq!(got, prev);
        }
    }
}
