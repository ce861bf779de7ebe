//! EAS placement tests.
//!
//! Oracles: (1) a brute-force search over every allowed CPU that fits the task, computing
//! the whole system's energy from the energy model with the task placed there (each
//! domain's OPP from its busiest CPU with 25 % headroom, times the domain's summed
//! utilisation) — `find_energy_efficient_cpu` must pick a CPU of minimum energy, or
//! `prev_cpu` when nothing fits; (2) hand-derived expectations from the capacity and
//! energy tables of the boards (mainline `juno-r2.dts` / `hi3660.dtsi` OPPs and
//! `dynamic-power-coefficient` through the EM's power formula), including the cases where Linux's
//! heuristic (only the most-spare CPU of each domain is tried) intentionally differs from
//! brute force.

// The real boards, as the kernel and the simulator see them: Juno r2's A72s are CPUs 0-1 in
// perf domain 0; HiKey960's A53s are CPUs 0-3 in perf domain 0.
use asym_boards::{HIKEY960, JUNO_R2 as JUNO};
use asym_sched::cpu_util::{CfsRqUtil, CpuCapacityInfo, CpuSnapshot, RqNonCfsUtil, TaskUtil};
use asym_sched::eas::{
    cpu_overutilized, find_energy_efficient_cpu, task_max_allowed_capacity, update_misfit_status,
    EasTask, EasView, MisfitTask,
};
use asym_sched::em::EnergyModel;
use asym_sched::features::{Feature, SchedFeatures};
use asym_sched::rq::RqSnapshot;
use asym_sched::topology::{BoardDesc, Topology};
use asym_sched::types::{Capacity, CpuId, CpuMask, Util};
use asym_sched::uclamp::ClampRange;

struct System {
    topo: Topology,
    em: EnergyModel,
}

impl System {
    fn new(board: &BoardDesc) -> System {
        let topo = Topology::from_board(board).unwrap();
        let em = EnergyModel::from_topology(board, &topo).unwrap();
        System { topo, em }
    }

    fn cap(&self, c: usize) -> u32 {
        self.topo.capacity_orig(CpuId(c as u16)).0
    }
}

/// One CPU's state: the util_avg / runnable_avg of its (other) tasks, the util_est of the
/// queued ones, and the rq clamps.
#[derive(Clone, Copy, Debug)]
struct CpuState {
    util_avg: u32,
    runnable: u32,
    util_est: u32,
    clamp: ClampRange,
    clamp_idle: bool,
}

impl CpuState {
    fn idle() -> CpuState {
        CpuState::busy(0)
    }
    fn busy(u: u32) -> CpuState {
        CpuState {
            util_avg: u,
            runnable: u,
            util_est: u,
            clamp: ClampRange::NONE,
            clamp_idle: true,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct TaskState {
    util_avg: u32,
    util_est: u32,
    prev: usize,
    clamp: ClampRange,
    allowed: u64,
}

impl TaskState {
    fn new(util: u32, prev: usize) -> TaskState {
        TaskState {
            util_avg: util,
            util_est: util,
            prev,
            clamp: ClampRange::NONE,
            allowed: u64::MAX,
        }
    }
}

/// Build the view: the sleeping task's util_avg is still in its previous CPU's cfs_rq
/// util_avg (and runnable_avg's blocked part), its estimate is not in util_est.
fn build(sys: &System, cpus: &[CpuState], p: &TaskState) -> (Vec<RqSnapshot>, EasTask) {
    let v = cpus
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let extra = if i == p.prev { p.util_avg } else { 0 };
            RqSnapshot {
                util: CpuSnapshot {
                    cpu: CpuId(i as u16),
                    capacity_orig: Capacity(sys.cap(i)),
                    cfs: CfsRqUtil {
                        util_avg: Util(s.util_avg + extra),
                        runnable_avg: Util(s.runnable + extra),
                        util_est: Util(s.util_est),
                    },
                },
                non_cfs: RqNonCfsUtil::default(),
                capacity: CpuCapacityInfo::unpressured(Capacity(sys.cap(i))),
                rq_clamp: s.clamp,
                uclamp_rq_idle: s.clamp_idle,
                ..RqSnapshot::idle(CpuId(i as u16), Capacity(sys.cap(i)))
            }
        })
        .collect();
    let t = EasTask {
        util: TaskUtil {
            util_avg: Util(p.util_avg),
            util_est: Util(p.util_est),
            cpu: CpuId(p.prev as u16),
            queued_or_current: false,
        },
        clamp: p.clamp,
        allowed: CpuMask(p.allowed),
        load_avg: 0,
    };
    (v, t)
}

fn feec(sys: &System, cpus: &[CpuState], p: &TaskState, uclamp_used: bool) -> usize {
    feec_with(sys, cpus, p, uclamp_used, SchedFeatures::default())
}

fn feec_with(
    sys: &System,
    cpus: &[CpuState],
    p: &TaskState,
    uclamp_used: bool,
    features: SchedFeatures,
) -> usize {
    let (v, t) = build(sys, cpus, p);
    let view = EasView {
        cpus: &v,
        topology: &sys.topo,
        em: &sys.em,
        features,
        uclamp_used,
    };
    find_energy_efficient_cpu(&t, CpuId(p.prev as u16), &view).index()
}

// ---- the brute-force oracle (no uclamp, runnable_avg == util_avg, UTIL_EST on) ------

/// CPU `c`'s utilisation without `p` (Linux's `cpu_util(c, p, -1)`).
fn util_without(sys: &System, s: &CpuState) -> u64 {
    let _ = sys;
    s.util_avg.max(s.util_est) as u64
}

/// CPU `c`'s utilisation with `p` placed on it.
fn util_with(sys: &System, c: usize, s: &CpuState, p: &TaskState) -> u64 {
    ((s.util_avg + p.util_avg).max(s.util_est + p.util_est) as u64).min(sys.cap(c) as u64)
}

fn fits(sys: &System, c: usize, s: &CpuState, p: &TaskState) -> bool {
    util_with(sys, c, s, p) * 1280 < sys.cap(c) as u64 * 1024
}

/// Whole-system energy with `p` on `dst`.
fn system_energy(sys: &System, cpus: &[CpuState], p: &TaskState, dst: usize) -> u64 {
    let mut total = 0;
    for pd in 0..sys.em.nr_perf_domains() {
        let em = sys.em.pd(pd).unwrap();
        let mut max_perf = 0u64;
        let mut sum = 0u64;
        let mut cap = 0u64;
        let mut pd_cap = 0u64;
        for c in em.cpus.iter().map(|c| c.index()) {
            cap = sys.cap(c) as u64;
            pd_cap += cap;
            let u = if c == dst {
                util_with(sys, c, &cpus[c], p)
            } else {
                util_without(sys, &cpus[c]).min(cap)
            };
            max_perf = max_perf.max((u + u / 4).min(cap));
            sum += util_without(sys, &cpus[c]).min(cap);
            if c == dst {
                sum += p.util_avg.max(p.util_est) as u64;
            }
        }
        let max_perf = max_perf.min(cap);
        let sum = sum.min(pd_cap);
        // The EM's own lookup is tested in tests/em.rs against hand-computed tables; here it is the
        // oracle's price list.
        total += em.em_cpu_energy(
            Util(max_perf as u32),
            Util(sum as u32),
            Capacity(cap as u32),
        );
    }
    total
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn brute_force_agrees(board: &BoardDesc, seed: u64, cases: usize) {
    let sys = System::new(board);
    let n = board.cpus.len();
    let mut rng = Rng(seed);
    let mut moved = 0;
    for case in 0..cases {
        let cpus: Vec<CpuState> = (0..n)
            .map(|c| {
                let cap = sys.cap(c) as u64;
                // Mostly light, sometimes heavy enough not to fit.
                let u = match rng.below(4) {
                    0 => 0,
                    1 | 2 => rng.below(cap / 2 + 1),
                    _ => rng.below(cap + 1),
                } as u32;
                let mut s = CpuState::busy(u);
                s.util_est = (u as u64 * rng.below(3) / 2).min(cap) as u32;
                s
            })
            .collect();
        let pu = 1 + rng.below(600) as u32;
        let mut p = TaskState::new(pu, rng.below(n as u64) as usize);
        p.util_est = (pu as u64 * rng.below(4) / 2) as u32;
        p.allowed = match rng.below(3) {
            0 => u64::MAX,
            _ => (rng.next() & ((1 << n) - 1)).max(1),
        };
        let got = feec(&sys, &cpus, &p, false);
        let candidates: Vec<usize> = (0..n)
            .filter(|&c| p.allowed & (1 << c) != 0 && fits(&sys, c, &cpus[c], &p))
            .collect();
        if candidates.is_empty() {
            assert_eq!(
                got, p.prev,
                "case {case}: nothing fits, keep prev; {cpus:?} {p:?}"
            );
            continue;
        }
        let energies: Vec<(usize, u64)> = candidates
            .iter()
            .map(|&c| (c, system_energy(&sys, &cpus, &p, c)))
            .collect();
        let min = energies.iter().map(|e| e.1).min().unwrap();
        let mine = energies.iter().find(|e| e.0 == got);
        assert!(
            mine.is_some(),
            "case {case}: feec chose cpu{got}, not a fitting allowed CPU {candidates:?}; {cpus:?} {p:?}"
        );
        assert_eq!(
            mine.unwrap().1,
            min,
            "case {case}: cpu{got} is not energy-optimal among {energies:?}; {cpus:?} {p:?}"
        );
        if got != p.prev {
            moved += 1;
        }
    }
    // The generator must exercise real moves, not only "stay on prev".
    assert!(
        moved > cases / 10,
        "only {moved} of {cases} cases moved the task"
    );
}

#[test]
fn juno_r2_matches_brute_force() {
    brute_force_agrees(&JUNO, 0x5eed_1234, 3000);
}

#[test]
fn hikey960_matches_brute_force() {
    brute_force_agrees(&HIKEY960, 0xdead_beef_cafe, 3000);
}

// ---- hand cases (Juno r2: big = CPUs 0-1, capacity 1024; LITTLE = 2-5, capacity 383) --

#[test]
fn capacities_are_the_reference_values() {
    let sys = System::new(&JUNO);
    assert_eq!((sys.cap(0), sys.cap(2)), (1024, 383));
    let sys = System::new(&HIKEY960);
    assert_eq!((sys.cap(0), sys.cap(4)), (462, 1024));
}

#[test]
fn small_task_goes_to_a_little() {
    // Idle system, util 100 on big cpu0. big: 125 → 600 MHz (cost 3624) × 100;
    // LITTLE: 125 → 450 MHz (cost 2392) × 100: the LITTLE is cheaper.
    let sys = System::new(&JUNO);
    let cpus = [CpuState::idle(); 6];
    let got = feec(&sys, &cpus, &TaskState::new(100, 0), false);
    assert!(
        (2..6).contains(&got),
        "util 100 should go to a LITTLE, got cpu{got}"
    );
}

#[test]
fn task_of_400_does_not_fit_a_little() {
    // 400 × 1280 = 512000 ≥ 383 × 1024 = 392192: no LITTLE fits.
    let sys = System::new(&JUNO);
    let cpus = [CpuState::idle(); 6];
    let got = feec(&sys, &cpus, &TaskState::new(400, 3), false);
    assert!(got < 2, "util 400 should go to a big, got cpu{got}");
    // 300 × 1280 = 384000 < 392192 fits, and the LITTLE is cheaper.
    let got = feec(&sys, &cpus, &TaskState::new(300, 0), false);
    assert!(
        (2..6).contains(&got),
        "util 300 fits a LITTLE, got cpu{got}"
    );
}

#[test]
fn zero_util_task_stays_on_prev() {
    let sys = System::new(&JUNO);
    let mut cpus = [CpuState::idle(); 6];
    cpus[0] = CpuState::busy(700);
    let mut p = TaskState::new(0, 0);
    p.util_est = 0;
    assert_eq!(feec(&sys, &cpus, &p, false), 0);
}

#[test]
fn uclamp_min_1024_prefers_the_cpu_that_fits_it() {
    // Seed 003: util 100 with uclamp_min 1024 fits a LITTLE by util but not by
    // uclamp_min (Fit::UclampMinOnly); a big fits fully, so the big wins even though it
    // costs more energy.
    let sys = System::new(&JUNO);
    let cpus = [CpuState::idle(); 6];
    let mut p = TaskState::new(100, 2);
    p.clamp = ClampRange {
        min: Util(1024),
        max: Util(1024),
    };
    let got = feec(&sys, &cpus, &p, true);
    assert!(got < 2, "uclamp_min 1024 should go to a big, got cpu{got}");
    // Pinned to the LITTLEs, every candidate is a uclamp_min-only misfit of the same
    // capacity: keep prev (no bigger actual capacity to prefer).
    p.allowed = 0b11_1100;
    assert_eq!(feec(&sys, &cpus, &p, true), 2);
    // Without uclamp in use the clamp is ignored: plain energy → LITTLE.
    p.allowed = u64::MAX;
    p.prev = 0;
    let got = feec(&sys, &cpus, &p, false);
    assert!((2..6).contains(&got), "uclamp unused: LITTLE, got cpu{got}");
}

#[test]
fn uclamp_min_only_misfit_prefers_bigger_actual_capacity() {
    // HiKey960 with big CPU 4 pressured to actual capacity 700: uclamp_min 1024 fits no
    // CPU fully; among uclamp_min-only misfits the bigger actual capacity wins over prev.
    let sys = System::new(&HIKEY960);
    let cpus = [CpuState::idle(); 8];
    let mut p = TaskState::new(50, 0);
    p.clamp = ClampRange {
        min: Util(1024),
        max: Util(1024),
    };
    let (mut v, t) = build(&sys, &cpus, &p);
    for c in v.iter_mut().skip(4) {
        c.capacity.actual = Capacity(700);
    }
    let view = EasView {
        cpus: &v,
        topology: &sys.topo,
        em: &sys.em,
        features: SchedFeatures::default(),
        uclamp_used: true,
    };
    let got = find_energy_efficient_cpu(&t, CpuId(0), &view).index();
    assert!(
        (4..8).contains(&got),
        "bigger actual capacity should win, got cpu{got}"
    );
}

#[test]
fn heuristic_tries_only_the_most_spare_cpu_per_domain() {
    // Intentional difference from brute force. Pinned to the LITTLEs (prev cpu0 not
    // allowed), p util 40. cpu2: util 100 but runnable 240 (contention); cpu3-5: 110.
    // Spare capacity: cpu2 383-140 = 243 > cpu3 383-150 = 233, so feec tries only cpu2.
    // With p on cpu2 the boosted OPP estimate is (240+40)×1.25 = 350 → 950 MHz (perf 383);
    // on cpu3 it would be max(240, 150)×1.25 = 300 → 800 MHz (perf 322): brute force
    // prefers cpu3 (same summed util, cheaper OPP), Linux picks cpu2.
    let sys = System::new(&JUNO);
    let mut cpus = [CpuState::busy(110); 6];
    cpus[0] = CpuState::idle();
    cpus[1] = CpuState::idle();
    cpus[2] = CpuState {
        runnable: 240,
        ..CpuState::busy(100)
    };
    let mut p = TaskState::new(40, 0);
    p.allowed = 0b11_1100;
    assert_eq!(feec(&sys, &cpus, &p, false), 2);
    // Without runnable boosting, the OPP estimate follows util and cpu2 is also optimal.
    let f = SchedFeatures::default().with(Feature::RUNNABLE_BOOST, false);
    assert_eq!(feec_with(&sys, &cpus, &p, false, f), 2);
    // With the bigs allowed and prev = cpu0 idle: prev's delta is 40 × 3624 (600 MHz)
    // = 144960; the LITTLE domain's candidate cpu2 costs 470 × 3542 − 430 × 2874 =
    // 428920 (its OPP jumps), so p stays on cpu0 although cpu3 would add only
    // 40 × 2874 = 114960.
    p.allowed = u64::MAX;
    assert_eq!(feec(&sys, &cpus, &p, false), 0);
}

// ---- overutilized and misfit ------------------------------------------------------

fn eas_cpu(sys: &System, c: usize, util: u32, clamp: ClampRange) -> RqSnapshot {
    let cap = Capacity(sys.cap(c));
    RqSnapshot {
        util: CpuSnapshot {
            cpu: CpuId(c as u16),
            capacity_orig: cap,
            cfs: CfsRqUtil {
                util_avg: Util(util),
                runnable_avg: Util(util),
                util_est: Util(util),
            },
        },
        non_cfs: RqNonCfsUtil::default(),
        capacity: CpuCapacityInfo::unpressured(cap),
        rq_clamp: clamp,
        uclamp_rq_idle: false,
        ..RqSnapshot::idle(CpuId(c as u16), cap)
    }
}

#[test]
fn overutilized_follows_the_fit_margin() {
    let sys = System::new(&JUNO);
    let f = SchedFeatures::default();
    // 306 × 1280 = 391680 < 392192 fits; 307 × 1280 = 392960 does not.
    assert!(!cpu_overutilized(
        &eas_cpu(&sys, 2, 306, ClampRange::NONE),
        f,
        false
    ));
    assert!(cpu_overutilized(
        &eas_cpu(&sys, 2, 307, ClampRange::NONE),
        f,
        false
    ));
    assert!(!cpu_overutilized(
        &eas_cpu(&sys, 0, 400, ClampRange::NONE),
        f,
        false
    ));
    assert!(cpu_overutilized(
        &eas_cpu(&sys, 0, 820, ClampRange::NONE),
        f,
        false
    ));
}

#[test]
fn uclamp_min_only_misfit_is_not_overutilized() {
    // Seed 003: a LITTLE running util 100 with rq uclamp_min 1024 is not overutilized
    // (v6.2 three-way fit); with the v6.1 two-way fit it was.
    let sys = System::new(&JUNO);
    let boosted = ClampRange {
        min: Util(1024),
        max: Util(1024),
    };
    let c = eas_cpu(&sys, 2, 100, boosted);
    assert!(!cpu_overutilized(&c, SchedFeatures::default(), true));
    let v61 = SchedFeatures::default().with(Feature::UCLAMP_FIT_TRISTATE, false);
    assert!(cpu_overutilized(&c, v61, true));
    // A uclamp_max of 300 makes even util 380 fit a LITTLE (capped task).
    let capped = ClampRange {
        min: Util(0),
        max: Util(300),
    };
    assert!(!cpu_overutilized(
        &eas_cpu(&sys, 2, 380, capped),
        SchedFeatures::default(),
        true
    ));
}

#[test]
fn misfit_status() {
    let sys = System::new(&JUNO);
    let f = SchedFeatures::default();
    let little = CpuCapacityInfo::unpressured(Capacity(383));
    let big = CpuCapacityInfo::unpressured(Capacity(1024));
    let all = sys.topo.cpu_mask();
    let p = MisfitTask {
        util_est: Util(400),
        clamp: ClampRange::NONE,
        nr_cpus_allowed: 6,
        max_allowed_capacity: task_max_allowed_capacity(all, &sys.topo),
        h_load: 420,
    };
    assert_eq!(p.max_allowed_capacity, Capacity(1024));
    assert_eq!(
        update_misfit_status(Some(&p), little, true, false, f),
        Some(420)
    );
    assert_eq!(update_misfit_status(Some(&p), big, true, false, f), Some(0));
    assert_eq!(update_misfit_status(None, little, true, false, f), Some(0));
    assert_eq!(
        update_misfit_status(Some(&p), little, false, false, f),
        None
    );
    let zero_load = MisfitTask { h_load: 0, ..p };
    assert_eq!(
        update_misfit_status(Some(&zero_load), little, true, false, f),
        Some(1)
    );
    let pinned = MisfitTask {
        nr_cpus_allowed: 1,
        ..p
    };
    assert_eq!(
        update_misfit_status(Some(&pinned), little, true, false, f),
        Some(0)
    );
    let littles_only = MisfitTask {
        max_allowed_capacity: task_max_allowed_capacity(CpuMask(0b11_1100), &sys.topo),
        nr_cpus_allowed: 4,
        ..p
    };
    assert_eq!(littles_only.max_allowed_capacity, Capacity(383));
    assert_eq!(
        update_misfit_status(Some(&littles_only), little, true, false, f),
        Some(0)
    );
    let small = MisfitTask {
        util_est: Util(200),
        ..p
    };
    assert_eq!(
        update_misfit_status(Some(&small), little, true, false, f),
        Some(0)
    );
    // A uclamp_min-only misfit is still misfit (task_fits_cpu needs a full fit).
    let boosted = MisfitTask {
        util_est: Util(100),
        clamp: ClampRange {
            min: Util(1024),
            max: Util(1024),
        },
        ..p
    };
    assert_eq!(
        update_misfit_status(Some(&boosted), little, true, true, f),
        Some(420)
    );
}
