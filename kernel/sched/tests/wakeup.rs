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
use asym_sched::types::{Capacity, CpuId, CpuMask, Nanos, TaskId, Util};
use asym_sched::uclamp::ClampRange;
use asym_sched::wakeup::{
    sched_balance_find_dst_cpu, select_idle_capacity, select_task_rq_fair, select_task_rq_interim,
    wake_wide, WakeKind, WakeeFlips, WakerInfo, WakeupView,
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
        load_avg: 0,
    }
}

/// The view with CPUs `idle` (a bit mask) idle.
fn view<'a>(
    topo: &'a Topology,
    cpus: &'a mut [RqSnapshot],
    idle: u64,
    uclamp: bool,
) -> WakeupView<'a> {
    set_idle(cpus, idle);
    view_of(topo, cpus, uclamp)
}

/// CPUs `idle` (a bit mask) idle, the others running one task; every idle CPU went idle
/// at the same time.
fn set_idle(cpus: &mut [RqSnapshot], idle: u64) {
    for (i, c) in cpus.iter_mut().enumerate() {
        c.idle = idle & (1 << i) != 0;
        c.nr_running = u32::from(!c.idle);
        c.idle_stamp = c.idle.then_some(Nanos(1));
    }
}

/// The view of `cpus` as they are.
fn view_of<'a>(topo: &'a Topology, cpus: &'a [RqSnapshot], uclamp: bool) -> WakeupView<'a> {
    WakeupView {
        cpus,
        topology: topo,
        em: None,
        overutilized: true,
        features: SchedFeatures::default(),
        uclamp_used: uclamp,
        waker: WakerInfo::default(),
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

fn fork(p: &EasTask, this_cpu: usize, v: &WakeupView<'_>) -> usize {
    let cpu = CpuId(this_cpu as u16);
    select_task_rq_fair(p, cpu, cpu, WakeKind::Fork, v).index()
}

#[test]
fn fork_stays_in_the_forking_cluster_on_equal_idle_counts() {
    // find_idlest_group, group_has_spare: `local_sgs.idle_cpus >= idlest_sgs.idle_cpus`
    // keeps the task in the local group. HiKey960, every CPU idle, forked on the A73 CPU 5:
    // both clusters have 4 idle CPUs, so it stays in the A73 cluster; inside it, the MC
    // level's local group {5} is idle, so on CPU 5 itself.
    let topo = Topology::from_board(&HIKEY960).unwrap();
    let mut c = cpus(&topo, &[0; 8]);
    let v = view(&topo, &mut c, 0xff, false);
    let p = task(0, 5, 0xff, 0);
    assert_eq!(fork(&p, 5, &v), 5);
    assert_eq!(fork(&p, 2, &v), 2);
    // The forking CPU busy: its cluster has 3 idle CPUs against 4, so the task leaves for
    // the cluster with the most idle CPUs.
    let v = view(&topo, &mut c, 0xdf, false);
    let got = fork(&p, 5, &v);
    assert!((0..4).contains(&got), "got {got}");
    // Two busy CPUs in each cluster: equal idle counts keep the local cluster, and the MC
    // level moves off the busy forking CPU to the first idle one after it.
    let v = view(&topo, &mut c, 0b1100_1100, false);
    assert_eq!(fork(&p, 0, &v), 2);
    assert_eq!(fork(&p, 4, &v), 6);
}

#[test]
fn fork_prefers_the_most_recently_idled_cpu() {
    // find_idlest_group_cpu without cpuidle states: the idle CPU with the latest
    // `rq->idle_stamp`. Juno r2, forked on A72 CPU 0: the A53 cluster has more idle CPUs
    // (4 vs 2); of its CPUs, CPU 4 went idle last.
    let topo = Topology::from_board(&JUNO).unwrap();
    let mut c = cpus(&topo, &[0; 6]);
    set_idle(&mut c, 0b111111);
    c[4].idle_stamp = Some(Nanos(9));
    c[3].idle_stamp = Some(Nanos(5));
    let p = task(0, 0, 0b111111, 0);
    assert_eq!(fork(&p, 0, &view_of(&topo, &c, false)), 4);
    // No idle CPU of the group has an idle_stamp: no candidate, so find_idlest_cpu goes
    // down to the forking CPU's own MC level, where CPU 0 is idle and stays.
    for s in &mut c[2..6] {
        s.idle_stamp = None;
    }
    assert_eq!(fork(&p, 0, &view_of(&topo, &c, false)), 0);
}

#[test]
fn fork_stays_local_when_fully_busy_loads_are_within_imbalance_pct() {
    // HiKey960 with every CPU running one heavy task: both clusters fully busy. The local
    // A53 cluster's avg_load (load × 1024 / capacity) is within imbalance_pct (117 %) of
    // the A73 cluster's, so Linux keeps the fork local; with a clearly lower A73 load it
    // goes there.
    let topo = Topology::from_board(&HIKEY960).unwrap();
    let mut c = cpus(&topo, &[440, 440, 440, 440, 1000, 1000, 1000, 1000]);
    set_idle(&mut c, 0);
    for (i, s) in c.iter_mut().enumerate() {
        s.load_avg = if i < 4 { 500 } else { 1000 };
    }
    // avg_load: A53 4 × 500 × 1024 / 1848 = 1108; A73 4 × 1000 × 1024 / 4096 = 1000.
    let p = task(0, 0, 0xff, 0);
    let got = fork(&p, 0, &view_of(&topo, &c, false));
    assert!(got < 4, "got {got}");
    // A73 load halved: avg_load 500 < 1108 - 174 and 100 × 1108 > 117 × 500.
    for s in &mut c[4..8] {
        s.load_avg = 500;
    }
    let got = fork(&p, 0, &view_of(&topo, &c, false));
    assert!((4..8).contains(&got), "got {got}");
}

/// A wake-up from `this_cpu` (EAS off) of a task with `load` that last ran on `prev`.
fn wake_from(p: &EasTask, prev: usize, this_cpu: usize, v: &WakeupView<'_>) -> usize {
    select_task_rq_fair(
        p,
        CpuId(prev as u16),
        CpuId(this_cpu as u16),
        WakeKind::Wakeup,
        v,
    )
    .index()
}

#[test]
fn wake_affine_idle_pulls_to_an_idle_waking_cpu_sharing_the_cache() {
    // wake_affine_idle: the waking A53 CPU 2 is idle (a timer or IRQ wake-up) and shares its
    // cluster with the busy prev CPU 3, so the target becomes CPU 2 and, idle and fitting,
    // select_idle_sibling returns it. Without wake_affine the target stays prev (busy)
    // and the capacity scan from 3 finds CPU 4 first.
    let topo = Topology::from_board(&JUNO).unwrap();
    let mut c = cpus(&topo, &[0; 6]);
    let v = view(&topo, &mut c, 0b110100, false);
    let p = task(50, 3, 0b111111, 0);
    assert_eq!(wake_from(&p, 3, 2, &v), 2);
    let mut off = v;
    off.features = off
        .features
        .with(Feature::WA_IDLE, false)
        .with(Feature::WA_WEIGHT, false);
    assert_eq!(wake_from(&p, 3, 2, &off), 4);
    // wake_wide: a 1:N waker keeps the wakee on prev's side.
    let mut wide = v;
    wide.waker.wake_wide = true;
    assert_eq!(wake_from(&p, 3, 2, &wide), 4);
}

#[test]
fn record_wakee_counts_changes_of_wakee_and_halves_after_more_than_a_second() {
    // fair.c record_wakee: `if (time_after(jiffies, wakee_flip_decay_ts + HZ))` halve and
    // restamp; then count the wake-up only if `p` is not `last_wakee`. HZ = 250.
    let hz = 250;
    let mut f = WakeeFlips::default();
    for (j, w) in [(1, 7), (2, 8), (3, 8), (4, 7), (5, 9)] {
        f.record_wakee(TaskId(w), j, hz);
    }
    // 7, 8, (8 again: no flip), 7, 9.
    assert_eq!(f.flips, 4);
    assert_eq!(f.last_wakee(), Some(TaskId(9)));
    assert_eq!(f.decay_ts_j(), 0);
    // Exactly HZ jiffies after the stamp is not after it: no halving.
    f.record_wakee(TaskId(9), 250, hz);
    assert_eq!((f.flips, f.decay_ts_j()), (4, 0));
    // One jiffy later it is: 4 >> 1, restamped, then the same wakee adds nothing.
    f.record_wakee(TaskId(9), 251, hz);
    assert_eq!((f.flips, f.decay_ts_j()), (2, 251));
    // A kernel keeps the three fields apart and puts them back together.
    let back = WakeeFlips::from_parts(f.flips, f.last_wakee(), f.decay_ts_j());
    assert_eq!(back, f);
}

#[test]
fn wake_wide_needs_both_flips_at_least_llc_and_a_factor_apart() {
    // fair.c wake_wide: master/slave the larger/smaller flips, factor `sd_llc_size`;
    // `if (slave < factor || master < slave * factor) return 0;`.
    let flips = |n| WakeeFlips::from_parts(n, None, 0);
    let llc = 4;
    assert!(wake_wide(&flips(16), &flips(4), llc));
    assert!(
        wake_wide(&flips(4), &flips(16), llc),
        "symmetric in waker and wakee"
    );
    assert!(
        !wake_wide(&flips(15), &flips(4), llc),
        "master < slave × factor"
    );
    assert!(!wake_wide(&flips(100), &flips(3), llc), "slave < factor");
    assert!(!wake_wide(&flips(0), &flips(0), llc));
    // Juno r2's A72 pair: factor 2.
    assert!(wake_wide(&flips(4), &flips(2), 2));
}

#[test]
fn wake_affine_weight_compares_capacity_scaled_loads_with_wa_bias() {
    // Both CPUs busy, no idle opinion: wake_affine_weight. Waking A53 CPU 4 with load L,
    // prev A53 CPU 2 with load 1000 of which the task's own 300: this_cpu wins when
    // (L + 300) × 100 < (1000 − 300) × 108 (WA_BIAS), i.e. L < 456, or without the bias
    // when L + 300 < 700. The target then scans from CPU 4 (idle 5 first) rather than
    // from prev (idle 3 first).
    let topo = Topology::from_board(&JUNO).unwrap();
    let mut c = cpus(&topo, &[0; 6]);
    set_idle(&mut c, 0b101000);
    c[2].load_avg = 1000;
    let mut p = task(50, 2, 0b111111, 0);
    p.load_avg = 300;
    for (l, bias, want) in [
        (100, true, 5),
        (420, true, 5),
        (420, false, 3),
        (460, true, 3),
    ] {
        c[4].load_avg = l;
        let mut v = view_of(&topo, &c, false);
        v.features = v.features.with(Feature::WA_BIAS, bias);
        assert_eq!(wake_from(&p, 2, 4, &v), want, "load {l}, WA_BIAS {bias}");
    }
    // WA_WEIGHT off: no opinion, the wakee stays on prev's side.
    c[4].load_avg = 100;
    let mut v = view_of(&topo, &c, false);
    v.features = v.features.with(Feature::WA_WEIGHT, false);
    assert_eq!(wake_from(&p, 2, 4, &v), 3);
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
