//! Load balancing: sched-domain parameters, balance intervals, the seed-002
//! `next_balance` behaviour, imbalance and misfit migration, `detach_tasks` order and
//! rotation, and a property test that balancing conserves tasks and affinity.
//!
//! Oracles: interval values worked out by hand from `sd_init` and
//! `get_sd_balance_interval` (reference §4.1/§4.2); jiffy deadlines derived by hand
//! from `update_next_balance`; task placements reasoned from `calculate_imbalance`.

use asym_sched::balance::sched_balance_newidle_skipped;
use asym_sched::balance::{
    active_load_balance_cpu_stop, detach_tasks, sched_balance_domains, sched_balance_newidle,
    sched_balance_rq, sched_balance_trigger, ActiveBalance, CpuIdleType, LbContext, MigrationType,
    RqAccess, SchedDomains, SdFlags, SdLevel, Snapshots, TaskOnCpu,
};
use asym_sched::features::{Feature, SchedFeatures};
use asym_sched::rq::{EnqueueFlags, Rq, RqConfig, RqSnapshot, Task};
use asym_sched::topology::{BoardDesc, CpuDesc, OppDesc, PerfDomainDesc, Topology};
use asym_sched::types::{CpuId, CpuMask, Khz, MicroVolt, Nanos, TaskId};
use asym_sched::uclamp::TaskUclamp;
use proptest::prelude::*;

const fn opp(mhz: u32, mv: u32) -> OppDesc {
    OppDesc {
        freq: Khz(mhz * 1000),
        voltage: MicroVolt(mv * 1000),
    }
}

const fn cpu(mpidr: u64, cluster: u16, dmips: u32) -> CpuDesc {
    CpuDesc {
        mpidr,
        cluster,
        perf_domain: cluster,
        capacity_dmips_mhz: Some(dmips),
        dynamic_power_coefficient: None,
        core: "test",
    }
}

const OPPS: &[OppDesc] = &[opp(1000, 900)];

const fn pd(name: &'static str) -> PerfDomainDesc {
    PerfDomainDesc {
        name,
        opps: OPPS,
        transition_latency_ns: 1_000_000,
    }
}

/// Juno r2's shape, not its tables (those are `asym_boards::JUNO_R2`): 2 big (cluster 0), 4 LITTLE
/// (cluster 1), every CPU at one 1000 MHz OPP so capacities are the `capacity-dmips-mhz`
/// ratios (1024 / 485) and the hand-computed imbalances below stay simple.
const JUNO: BoardDesc = BoardDesc {
    name: "juno-r2",
    cpus: &[
        cpu(0x0, 0, 1024),
        cpu(0x1, 0, 1024),
        cpu(0x100, 1, 485),
        cpu(0x101, 1, 485),
        cpu(0x102, 1, 485),
        cpu(0x103, 1, 485),
    ],
    perf_domains: &[pd("big"), pd("little")],
};

/// HiKey960 shape: 4 LITTLE (cluster 0), 4 big (cluster 1).
const HIKEY960: BoardDesc = BoardDesc {
    name: "hikey960",
    cpus: &[
        cpu(0x0, 0, 592),
        cpu(0x1, 0, 592),
        cpu(0x2, 0, 592),
        cpu(0x3, 0, 592),
        cpu(0x100, 1, 1024),
        cpu(0x101, 1, 1024),
        cpu(0x102, 1, 1024),
        cpu(0x103, 1, 1024),
    ],
    perf_domains: &[pd("little"), pd("big")],
};

/// Symmetric, one cluster of 4.
const QUAD: BoardDesc = BoardDesc {
    name: "quad",
    cpus: &[
        cpu(0x0, 0, 1024),
        cpu(0x1, 0, 1024),
        cpu(0x2, 0, 1024),
        cpu(0x3, 0, 1024),
    ],
    perf_domains: &[pd("all")],
};

const MS: u64 = 1_000_000;
/// TICK_NSEC at HZ=250.
const TICK: u64 = 4 * MS;

fn topo(b: &BoardDesc) -> Topology {
    Topology::from_board(b).unwrap()
}

fn rqs_for(t: &Topology, now: Nanos) -> Vec<Rq> {
    t.cpus()
        .iter()
        .map(|c| {
            let mut cfg = RqConfig::new(c.id, t.nr_cpus() as u32);
            cfg.capacity_orig = c.capacity_orig;
            cfg.tick_nsec = TICK;
            Rq::new(cfg, now)
        })
        .collect()
}

fn spawn(rq: &mut Rq, id: u32, nice: i32, allowed: CpuMask) {
    let t = Task::new(TaskId(id), nice, TaskUclamp::new(), allowed).unwrap();
    rq.enqueue_task(t, EnqueueFlags::NEW).unwrap();
}

fn ids(rq: &Rq) -> Vec<u32> {
    let mut v: Vec<u32> = rq.tasks().map(|t| t.id.0).collect();
    v.sort();
    v
}

fn ctx() -> LbContext {
    LbContext::new(SchedFeatures::default())
}

#[test]
fn juno_r2_domains_and_intervals_at_hz_250_and_1000() {
    let t = topo(&JUNO);
    let sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
    // max_load_balance_interval = HZ * nr_cpus / 10 = 250 * 6 / 10.
    assert_eq!(sds.max_load_balance_interval, 150);
    let big = &sds.cpus[0].sd;
    let little = &sds.cpus[2].sd;
    assert_eq!(big.len(), 2);
    assert_eq!(little.len(), 2);
    assert_eq!(big[0].level, SdLevel::Mc);
    assert_eq!(big[0].span, CpuMask(0b11));
    assert_eq!(little[0].span, CpuMask(0b11_1100));
    assert_eq!(big[1].level, SdLevel::Pkg);
    assert_eq!(big[1].span, CpuMask(0b11_1111));
    assert_eq!(big[1].groups.len(), 2);
    // sd_init: min = weight ms, max = 2 * weight, balance_interval = weight.
    assert_eq!((big[0].min_interval, big[0].max_interval), (2, 4));
    assert_eq!((little[0].min_interval, little[0].max_interval), (4, 8));
    assert_eq!((big[1].min_interval, big[1].max_interval), (6, 12));
    assert_eq!(big[0].imbalance_pct, 117);
    assert_eq!(big[0].busy_factor, 16);
    // Asymmetry only at PKG; it strips the child's SD_PREFER_SIBLING.
    assert!(big[1].flags.contains(SdFlags::ASYM_CPUCAPACITY));
    assert!(big[1].flags.contains(SdFlags::ASYM_CPUCAPACITY_FULL));
    assert!(!big[0].flags.contains(SdFlags::ASYM_CPUCAPACITY));
    assert!(!big[0].flags.contains(SdFlags::PREFER_SIBLING));
    assert!(big[0].flags.contains(SdFlags::SHARE_LLC));
    assert!(!big[1].flags.contains(SdFlags::SHARE_LLC));
    // HZ=250: msecs_to_jiffies rounds up to 4 ms jiffies.
    // big MC idle: 2 ms -> 1; busy: 32 ms -> 8, minus 1 -> 7.
    assert_eq!(sds.get_sd_balance_interval(&big[0], false), 1);
    assert_eq!(sds.get_sd_balance_interval(&big[0], true), 7);
    // LITTLE MC idle: 4 ms -> 1; busy 64 ms -> 16 - 1 = 15.
    assert_eq!(sds.get_sd_balance_interval(&little[0], false), 1);
    assert_eq!(sds.get_sd_balance_interval(&little[0], true), 15);
    // PKG idle: 6 ms -> 2 (1.5 rounded up); busy 96 ms -> 24 - 1 = 23.
    assert_eq!(sds.get_sd_balance_interval(&big[1], false), 2);
    assert_eq!(sds.get_sd_balance_interval(&big[1], true), 23);

    let sds = SchedDomains::build(&t, 1000, Nanos(0)).unwrap();
    assert_eq!(sds.max_load_balance_interval, 600);
    assert_eq!(sds.get_sd_balance_interval(&sds.cpus[0].sd[0], false), 2);
    assert_eq!(sds.get_sd_balance_interval(&sds.cpus[0].sd[0], true), 31);
    assert_eq!(sds.get_sd_balance_interval(&sds.cpus[0].sd[1], true), 95);
}

/// Juno r2 with `maxcpus=4` (CPUs 4 and 5 never brought up): Linux builds the domains over
/// `cpu_active_mask`, so the LITTLE MC spans CPUs 2-3, the PKG groups are {0,1} and {2,3}
/// with two LITTLE capacities, `max_load_balance_interval` counts 4 CPUs, and CPUs 4 and 5 have
/// no domain (the NULL domain): nothing balances on their behalf.
#[test]
fn domains_are_built_over_the_active_cpus_only() {
    let t = topo(&JUNO);
    let sds = SchedDomains::build_for(&t, CpuMask(0b1111), 250, Nanos(0)).unwrap();
    assert_eq!(sds.max_load_balance_interval, 100);
    assert!(sds.asym_cpucapacity);
    let little = &sds.cpus[2].sd;
    assert_eq!(little.len(), 2);
    assert_eq!(little[0].span, CpuMask(0b1100));
    assert_eq!((little[0].min_interval, little[0].max_interval), (2, 4));
    let pkg = &little[1];
    assert_eq!(pkg.span, CpuMask(0b1111));
    let spans: Vec<CpuMask> = pkg.groups.iter().map(|g| g.span).collect();
    assert_eq!(spans, [CpuMask(0b11), CpuMask(0b1100)]);
    let little_cap = t.capacity_orig(CpuId(2)).0 as u64;
    assert_eq!(pkg.groups[1].capacity, 2 * little_cap);
    assert!(pkg.flags.contains(SdFlags::ASYM_CPUCAPACITY_FULL));
    assert!(sds.cpus[4].sd.is_empty() && sds.cpus[5].sd.is_empty());
    assert_eq!(
        sds.cpus.len(),
        6,
        "indexed by CPU id, inactive ones included"
    );
    // Only the big CPUs: one symmetric cluster, PKG degenerates, no asymmetry.
    let sds = SchedDomains::build_for(&t, CpuMask(0b11), 250, Nanos(0)).unwrap();
    assert_eq!(sds.cpus[0].sd.len(), 1);
    assert!(!sds.asym_cpucapacity);
    assert!(sds.cpus[2].sd.is_empty());
    // One big and one LITTLE: no MC, a PKG of two single-CPU groups, asymmetric.
    let sds = SchedDomains::build_for(&t, CpuMask(0b101), 250, Nanos(0)).unwrap();
    assert_eq!(sds.cpus[0].sd.len(), 1);
    assert_eq!(sds.cpus[0].sd[0].level, SdLevel::Pkg);
    assert!(sds.cpus[0].sd[0].flags.contains(SdFlags::ASYM_CPUCAPACITY));
    assert!(SchedDomains::build_for(&t, CpuMask(0b11 << 8), 250, Nanos(0)).is_err());
    // Every CPU active: what `build` gives.
    assert_eq!(
        SchedDomains::build_for(&t, CpuMask(0b11_1111), 250, Nanos(0)).unwrap(),
        SchedDomains::build(&t, 250, Nanos(0)).unwrap()
    );
}

#[test]
fn hikey960_and_symmetric_domains() {
    let t = topo(&HIKEY960);
    let sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
    assert_eq!(sds.max_load_balance_interval, 200);
    let sd = &sds.cpus[5].sd;
    assert_eq!((sd[0].min_interval, sd[0].max_interval), (4, 8));
    assert_eq!((sd[1].min_interval, sd[1].max_interval), (8, 16));
    // MC 4 ms -> 1 jiffy, busy 64 ms -> 15; PKG 8 ms -> 2, busy 128 ms -> 31.
    assert_eq!(sds.get_sd_balance_interval(&sd[0], false), 1);
    assert_eq!(sds.get_sd_balance_interval(&sd[0], true), 15);
    assert_eq!(sds.get_sd_balance_interval(&sd[1], false), 2);
    assert_eq!(sds.get_sd_balance_interval(&sd[1], true), 31);
    // One symmetric cluster: PKG spans what MC spans and degenerates; no asymmetry.
    let sds = SchedDomains::build(&topo(&QUAD), 250, Nanos(0)).unwrap();
    assert_eq!(sds.cpus[0].sd.len(), 1);
    assert_eq!(sds.cpus[0].sd[0].level, SdLevel::Mc);
    assert!(sds.cpus[0].sd[0].flags.contains(SdFlags::PREFER_SIBLING));
    assert!(!sds.asym_cpucapacity);
    assert!(SchedDomains::build(&topo(&QUAD), 0, Nanos(0)).is_err());
}

#[test]
fn balanced_attempts_back_off_to_max_interval_and_set_next_balance() {
    let t = topo(&JUNO);
    let mut sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
    let mut rqs = rqs_for(&t, Nanos(0));
    // CPU 2 busy with one task, the rest idle: nothing to balance anywhere.
    spawn(&mut rqs[2], 1, 0, CpuMask::first_n(6));
    let now = Nanos(100 * TICK);
    for rq in rqs.iter_mut() {
        rq.update_rq_clock(now).unwrap();
    }
    rqs[2].pick_next_task();
    let r = sched_balance_domains(
        &mut sds,
        CpuId(2),
        &mut rqs,
        CpuIdleType::NotIdle,
        now,
        &ctx(),
    )
    .unwrap();
    assert_eq!(r.total_moved(), 0);
    let sd = &sds.cpus[2].sd;
    // MC was balanced (CPU 2 is its group's only CPU): interval doubled 4 -> 8 ms.
    assert_eq!(sd[0].balance_interval, 8);
    assert_eq!(sd[0].last_balance, 100);
    // PKG: CPU 3 is the LITTLE group's first idle CPU, so CPU 2 stops there, yet stamps it.
    assert_eq!(sd[1].last_balance, 100);
    assert_eq!(sd[1].balance_interval, 12);
    // next_balance = min(100 + busy MC (8*16=128 ms -> 32 - 1 = 31), 100 + busy PKG
    // (12*16=192 ms -> 48 - 1 = 47)) = 131 jiffies.
    assert_eq!(rqs[2].next_balance(), Nanos(131 * TICK));
    assert!(!sched_balance_trigger(Nanos(130 * TICK + 3 * MS), &rqs[2]));
    assert!(sched_balance_trigger(Nanos(131 * TICK), &rqs[2]));
    // Backoff stops at max_interval.
    for j in [200u64, 300, 400] {
        let now = Nanos(j * TICK);
        rqs[2].update_rq_clock(now).unwrap();
        sched_balance_domains(
            &mut sds,
            CpuId(2),
            &mut rqs,
            CpuIdleType::NotIdle,
            now,
            &ctx(),
        )
        .unwrap();
    }
    assert_eq!(sds.cpus[2].sd[0].balance_interval, 8);
}

/// Seed 002: newidle with a short `avg_idle` skips balancing but, in Linux, still pulls
/// `rq->next_balance` to `sd->last_balance + idle interval` with a stale last_balance.
#[test]
fn seed_002_newidle_pulls_next_balance_backwards_only_without_the_fix() {
    for aggressive in [true, false] {
        let t = topo(&JUNO);
        let mut sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
        let mut rqs = rqs_for(&t, Nanos(0));
        // A periodic balance from a busy CPU left next_balance at jiffy 100.
        rqs[2].set_next_balance(Nanos(100 * TICK));
        // Balancing costs more than the CPU expects to stay idle.
        sds.cpus[2].sd[0].max_newidle_lb_cost = 600_000;
        rqs[2].set_avg_idle(100_000);
        let c = LbContext::new(
            SchedFeatures::default().with(Feature::AGGRESSIVE_NEXT_BALANCE, aggressive),
        );
        let mut raised = 0;
        let mut seen = Vec::new();
        for j in 50..60u64 {
            let now = Nanos(j * TICK + MS);
            let mut clock = || 0u64;
            sched_balance_newidle(&mut sds, CpuId(2), &mut rqs, now, &c, &mut clock).unwrap();
            seen.push(rqs[2].next_balance());
            // The next tick.
            if sched_balance_trigger(Nanos((j + 1) * TICK), &rqs[2]) {
                raised += 1;
            }
        }
        if aggressive {
            // last_balance (0) + LITTLE MC idle interval (1 jiffy) = jiffy 1: in the past.
            assert!(seen.iter().all(|&nb| nb == Nanos(TICK)), "{seen:?}");
            assert_eq!(raised, 10);
        } else {
            assert!(seen.iter().all(|&nb| nb == Nanos(100 * TICK)), "{seen:?}");
            assert_eq!(raised, 0);
        }
    }
}

/// The kernel's closed-gate newidle under `this_rq`'s lock
/// (`sched_balance_newidle_skipped` with the domains' `newidle_skip_info`) leaves the run
/// queue as the whole `sched_balance_newidle` does when no CPU is overloaded: the same
/// `next_balance` and misfit, with and without `AGGRESSIVE_NEXT_BALANCE`, for a stale and a
/// recent `last_balance`, and a misfit load left from the last pick.
#[test]
fn newidle_skipped_under_the_rq_lock_matches_the_whole_newidle() {
    for aggressive in [true, false] {
        for last_balance in [0u64, 49, 60] {
            let t = topo(&JUNO);
            let mut sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
            for sd in sds.cpus[2].sd.iter_mut() {
                sd.last_balance = last_balance;
            }
            let mut whole = rqs_for(&t, Nanos(0));
            // One task on CPU 0: nothing is overloaded.
            spawn(&mut whole[0], 1, 0, CpuMask::first_n(6));
            whole[2].set_next_balance(Nanos(100 * TICK));
            whole[2].set_misfit_task_load(7);
            let now = Nanos(50 * TICK + MS);
            for rq in whole.iter_mut() {
                rq.update_rq_clock(now).unwrap();
            }
            let mut fast = rqs_for(&t, Nanos(0));
            spawn(&mut fast[0], 1, 0, CpuMask::first_n(6));
            fast[2].set_next_balance(Nanos(100 * TICK));
            fast[2].set_misfit_task_load(7);
            for rq in fast.iter_mut() {
                rq.update_rq_clock(now).unwrap();
            }
            let f = SchedFeatures::default().with(Feature::AGGRESSIVE_NEXT_BALANCE, aggressive);
            let info = sds.newidle_skip_info(CpuId(2));
            let before = sds.cpus[2].sd.clone();
            let mut clock = || 0u64;
            let r = sched_balance_newidle(
                &mut sds,
                CpuId(2),
                &mut whole,
                now,
                &LbContext::new(f),
                &mut clock,
            )
            .unwrap();
            assert_eq!(r.lb_runs, 0, "the gate is closed");
            assert_eq!(sds.cpus[2].sd, before, "a closed gate leaves the domains");
            sched_balance_newidle_skipped(&mut fast[2], &info, now, f);
            assert_eq!(
                (fast[2].next_balance(), fast[2].misfit_task_load()),
                (whole[2].next_balance(), whole[2].misfit_task_load()),
                "aggressive {aggressive} last_balance {last_balance}"
            );
        }
    }
}

/// With the fix, a newidle balance that runs stamps `sd->last_balance`.
#[test]
fn seed_002_fix_stamps_last_balance_when_newidle_balances() {
    for aggressive in [true, false] {
        let t = topo(&JUNO);
        let mut sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
        let mut rqs = rqs_for(&t, Nanos(0));
        // CPU 0's only task is pinned to it: the root domain is overloaded, but
        // nothing can be pulled.
        spawn(&mut rqs[0], 1, 0, CpuMask::of(CpuId(0)));
        spawn(&mut rqs[0], 2, 0, CpuMask::of(CpuId(0)));
        rqs[2].set_next_balance(Nanos(100 * TICK));
        let now = Nanos(50 * TICK);
        for rq in rqs.iter_mut() {
            rq.update_rq_clock(now).unwrap();
        }
        let c = LbContext::new(
            SchedFeatures::default().with(Feature::AGGRESSIVE_NEXT_BALANCE, aggressive),
        );
        let mut t_ns = 0u64;
        let mut clock = || {
            t_ns += 10_000;
            t_ns
        };
        let r = sched_balance_newidle(&mut sds, CpuId(2), &mut rqs, now, &c, &mut clock).unwrap();
        assert_eq!(r.total_moved(), 0);
        assert_eq!(r.lb_runs, 2, "both levels tried");
        let sd = &sds.cpus[2].sd;
        // Each level cost one clock step of 10 us.
        assert_eq!(sd[0].max_newidle_lb_cost, 10_000);
        if aggressive {
            assert_eq!(sd[0].last_balance, 0);
            assert_eq!(rqs[2].next_balance(), Nanos(TICK));
        } else {
            assert_eq!(sd[0].last_balance, 50);
            assert_eq!(sd[1].last_balance, 50);
            // min(100, 50 + 1 (MC idle), 50 + 2 (PKG idle)) = 51.
            assert_eq!(rqs[2].next_balance(), Nanos(51 * TICK));
        }
    }
}

#[test]
fn two_tasks_on_one_little_cpu_spread_to_an_idle_sibling() {
    let t = topo(&JUNO);
    let mut sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
    let mut rqs = rqs_for(&t, Nanos(0));
    let all = CpuMask::first_n(6);
    spawn(&mut rqs[3], 1, 0, all);
    spawn(&mut rqs[3], 2, 0, all);
    let now = Nanos(10 * TICK);
    for rq in rqs.iter_mut() {
        rq.update_rq_clock(now).unwrap();
    }
    rqs[3].pick_next_task();
    let running = rqs[3].curr().unwrap();
    let r = sched_balance_domains(&mut sds, CpuId(2), &mut rqs, CpuIdleType::Idle, now, &ctx())
        .unwrap();
    assert_eq!(r.moved[MigrationType::Task as usize], 1, "{r:?}");
    assert_eq!(rqs[2].nr_running(), 1);
    assert_eq!(rqs[3].nr_running(), 1);
    // The running task stays.
    assert_eq!(ids(&rqs[3]), vec![running.0]);
}

/// Task 2 has its registers live on a CPU (`p->on_cpu`) though it is not `curr`.
fn task2_on_cpu(id: TaskId) -> bool {
    id == TaskId(2)
}

#[test]
fn a_task_still_on_a_cpu_is_never_detached() {
    let t = topo(&JUNO);
    let mut sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
    let mut rqs = rqs_for(&t, Nanos(0));
    let all = CpuMask::first_n(6);
    spawn(&mut rqs[3], 1, 0, all);
    spawn(&mut rqs[3], 2, 0, all);
    let now = Nanos(10 * TICK);
    for rq in rqs.iter_mut() {
        rq.update_rq_clock(now).unwrap();
    }
    // Task 1 runs; task 2, the only one the balancer could take, is still on a CPU.
    while rqs[3].pick_next_task() != Some(TaskId(1)) {
        rqs[3].put_prev_task();
    }
    let c = LbContext {
        task_on_cpu: Some(TaskOnCpu(task2_on_cpu)),
        ..ctx()
    };
    let r =
        sched_balance_domains(&mut sds, CpuId(2), &mut rqs, CpuIdleType::Idle, now, &c).unwrap();
    assert_eq!(r.total_moved(), 0, "{r:?}");
    assert_eq!(ids(&rqs[3]), vec![1, 2]);
}

#[test]
fn set_cpus_allowed_changes_a_queued_tasks_mask_within_its_cpu() {
    let t = topo(&JUNO);
    let mut rqs = rqs_for(&t, Nanos(0));
    spawn(&mut rqs[3], 1, 0, CpuMask::of(CpuId(3)));
    let all = CpuMask::first_n(6);
    assert!(rqs[3]
        .set_cpus_allowed(TaskId(1), CpuMask::of(CpuId(2)))
        .is_err());
    assert!(rqs[3].set_cpus_allowed(TaskId(9), all).is_err());
    rqs[3].set_cpus_allowed(TaskId(1), all).unwrap();
    assert_eq!(rqs[3].task(TaskId(1)).unwrap().cpus_allowed, all);
}

#[test]
fn pinned_tasks_stay() {
    let t = topo(&JUNO);
    let mut sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
    let mut rqs = rqs_for(&t, Nanos(0));
    let only3 = CpuMask::of(CpuId(3));
    for id in 1..=3 {
        spawn(&mut rqs[3], id, 0, only3);
    }
    let now = Nanos(10 * TICK);
    for rq in rqs.iter_mut() {
        rq.update_rq_clock(now).unwrap();
    }
    rqs[3].pick_next_task();
    for cpu in [2u16, 0] {
        let r = sched_balance_domains(
            &mut sds,
            CpuId(cpu),
            &mut rqs,
            CpuIdleType::Idle,
            now,
            &ctx(),
        )
        .unwrap();
        assert_eq!(r.total_moved(), 0);
        assert_eq!(r.active_balance, None);
    }
    assert_eq!(ids(&rqs[3]), vec![1, 2, 3]);
    // Pinned to CPU 3 or 4: CPU 2 may not take them; at MC its group is {2} alone, so
    // no other destination exists there (LBF_DST_PINNED needs one in the group).
    let mut rqs = rqs_for(&t, Nanos(0));
    let mut sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
    let m = CpuMask::of(CpuId(3)).or(CpuMask::of(CpuId(4)));
    for id in 1..=3 {
        spawn(&mut rqs[3], id, 0, m);
    }
    for rq in rqs.iter_mut() {
        rq.update_rq_clock(now).unwrap();
    }
    rqs[3].pick_next_task();
    let r = sched_balance_domains(&mut sds, CpuId(2), &mut rqs, CpuIdleType::Idle, now, &ctx())
        .unwrap();
    assert_eq!(rqs[2].nr_running(), 0, "{r:?}");
    for rq in &rqs {
        for task in rq.tasks() {
            assert!(task.cpus_allowed.contains(rq.cpu()));
        }
    }
}

fn misfit_setup(allowed: CpuMask, busy_big0: bool) -> (SchedDomains, Vec<Rq>, Nanos) {
    let t = topo(&JUNO);
    let sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
    let mut rqs = rqs_for(&t, Nanos(0));
    spawn(&mut rqs[2], 7, 0, allowed);
    if busy_big0 {
        spawn(&mut rqs[0], 8, 0, CpuMask::of(CpuId(0)));
    }
    let now = Nanos(10 * TICK);
    for rq in rqs.iter_mut() {
        rq.update_rq_clock(now).unwrap();
        rq.pick_next_task();
    }
    // update_misfit_status found the running task too big for the LITTLE CPU.
    rqs[2].set_misfit_task_load(1024);
    (sds, rqs, now)
}

#[test]
fn misfit_task_on_little_moves_to_idle_big_by_active_balance() {
    let (mut sds, mut rqs, now) = misfit_setup(CpuMask::first_n(6), false);
    // EAS active and not overutilized: misfit balancing still runs.
    let c = LbContext {
        eas_active: true,
        ..ctx()
    };
    let r =
        sched_balance_domains(&mut sds, CpuId(0), &mut rqs, CpuIdleType::Idle, now, &c).unwrap();
    let req = r.active_balance.expect("active balance requested");
    assert_eq!((req.src, req.dst), (CpuId(2), CpuId(0)));
    assert_eq!(req.migration_type, MigrationType::Misfit);
    assert_eq!(req.level, SdLevel::Pkg);
    // Misfit does not count as a failure nor back off.
    assert_eq!(sds.cpus[0].sd[1].nr_balance_failed, 0);
    assert_eq!(sds.cpus[0].sd[1].balance_interval, 6);
    // The stopper: preempt, then push.
    rqs[2].put_prev_task();
    let moved = active_load_balance_cpu_stop(&mut sds, &mut rqs, &req).unwrap();
    assert_eq!(moved, Some(TaskId(7)));
    assert_eq!(ids(&rqs[0]), vec![7]);
    assert_eq!(rqs[2].nr_running(), 0);
}

#[test]
fn misfit_respects_affinity() {
    // Allowed on LITTLEs and big CPU 1 only; CPU 0 busy so CPU 1 is the big group's
    // balancing CPU.
    let m = CpuMask(0b11_1110);
    let (mut sds, mut rqs, now) = misfit_setup(m, true);
    let r = sched_balance_domains(&mut sds, CpuId(1), &mut rqs, CpuIdleType::Idle, now, &ctx())
        .unwrap();
    let req = r.active_balance.expect("CPU 1 may take it");
    assert_eq!((req.src, req.dst), (CpuId(2), CpuId(1)));
    // Not allowed on big CPUs at all: no request from CPU 0 (idle, first of its group).
    let (mut sds, mut rqs, now) = misfit_setup(CpuMask(0b11_1100), false);
    let r = sched_balance_domains(&mut sds, CpuId(0), &mut rqs, CpuIdleType::Idle, now, &ctx())
        .unwrap();
    assert_eq!(r.active_balance, None);
    assert_eq!(ids(&rqs[2]), vec![7]);
}

#[test]
fn balanced_system_does_not_ping_pong() {
    let t = topo(&JUNO);
    let mut sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
    let mut rqs = rqs_for(&t, Nanos(0));
    let all = CpuMask::first_n(6);
    // One task on each big CPU and on LITTLE CPUs 2 and 3; 4 and 5 idle.
    for (cpu, id) in [(0usize, 1u32), (1, 2), (2, 3), (3, 4)] {
        spawn(&mut rqs[cpu], id, 0, all);
    }
    let before: Vec<Vec<u32>> = rqs.iter().map(ids).collect();
    let mut total = 0;
    for j in 1..200u64 {
        let now = Nanos(j * TICK);
        for rq in rqs.iter_mut() {
            rq.update_rq_clock(now).unwrap();
            if rq.curr().is_none() {
                rq.pick_next_task();
            }
            rq.task_tick();
        }
        for cpu in 0..6u16 {
            if sched_balance_trigger(now, &rqs[cpu as usize]) {
                let idle = if rqs[cpu as usize].nr_running() == 0 {
                    CpuIdleType::Idle
                } else {
                    CpuIdleType::NotIdle
                };
                let r = sched_balance_domains(&mut sds, CpuId(cpu), &mut rqs, idle, now, &ctx())
                    .unwrap();
                total += r.total_moved();
                assert_eq!(r.active_balance, None);
            }
        }
    }
    assert_eq!(total, 0);
    let after: Vec<Vec<u32>> = rqs.iter().map(ids).collect();
    assert_eq!(before, after);
}

/// A source rq with tasks queued (none running) in a known order.
fn detach_setup(nices: &[i32]) -> (SchedDomains, Vec<Rq>) {
    let t = topo(&QUAD);
    let sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
    let mut rqs = rqs_for(&t, Nanos(0));
    for (i, &n) in nices.iter().enumerate() {
        spawn(&mut rqs[1], i as u32 + 1, n, CpuMask::first_n(4));
    }
    (sds, rqs)
}

#[allow(clippy::too_many_arguments)] // one knob per detach_tasks input
fn detach_ids(
    sds: &SchedDomains,
    rqs: &mut [Rq],
    f: SchedFeatures,
    idle: CpuIdleType,
    ty: MigrationType,
    imbalance: i64,
    nr_migrate: u32,
    failed: u32,
) -> Vec<u32> {
    let mut sd = sds.cpus[0].sd[0].clone();
    sd.nr_balance_failed = failed;
    let c = LbContext {
        nr_migrate,
        ..LbContext::new(f)
    };
    let out = detach_tasks(&mut rqs[1], &sd, CpuId(0), idle, ty, imbalance, &c);
    let v = out.iter().map(|t| t.id.0).collect();
    for t in out {
        rqs[0].attach_task(t).unwrap();
    }
    v
}

#[test]
fn detach_tasks_takes_least_recently_run_first() {
    // load_avg of a new task = its weight: nice 0 -> 1024, nice 5 -> 335, -5 -> 3121.
    let (sds, mut rqs) = detach_setup(&[0, 5, -5, 0]);
    // Tail = first enqueued (1). Imbalance 1024 + 335: tasks 1 then 2.
    let got = detach_ids(
        &sds,
        &mut rqs,
        SchedFeatures::default(),
        CpuIdleType::NotIdle,
        MigrationType::Load,
        1024 + 335,
        32,
        0,
    );
    assert_eq!(got, vec![1, 2]);
}

#[test]
fn detach_tasks_biggest_first_under_lb_biggest_task() {
    let (sds, mut rqs) = detach_setup(&[0, 5, -5, 0]);
    let f = SchedFeatures::default().with(Feature::LB_BIGGEST_TASK, true);
    let got = detach_ids(
        &sds,
        &mut rqs,
        f,
        CpuIdleType::NotIdle,
        MigrationType::Load,
        10_000,
        32,
        0,
    );
    // 3121 first, then the two 1024s least recently run first (1 before 4), then 335.
    // A busy dst may take them all: the imbalance exceeds their sum.
    assert_eq!(got, vec![3, 1, 4, 2]);
}

#[test]
fn lb_min_skips_tiny_tasks_until_balancing_failed() {
    // nice 19: weight 15 < 16.
    let f = SchedFeatures::default().with(Feature::LB_MIN, true);
    // Failed once: the tiny task goes first, and shr_bound halves the next one's load
    // (512 <= 1024 - 15), so it follows.
    for (failed, want) in [(0u32, vec![2u32]), (1, vec![1, 2])] {
        let (sds, mut rqs) = detach_setup(&[19, 0, 0]);
        let got = detach_ids(
            &sds,
            &mut rqs,
            f,
            CpuIdleType::NotIdle,
            MigrationType::Load,
            // Exactly one nice-0 task's load.
            1024,
            32,
            failed,
        );
        assert_eq!(got, want, "nr_balance_failed {failed}");
    }
    // Without LB_MIN the tiny task at the tail goes first.
    let (sds, mut rqs) = detach_setup(&[19, 0, 0]);
    let got = detach_ids(
        &sds,
        &mut rqs,
        SchedFeatures::default(),
        CpuIdleType::NotIdle,
        MigrationType::Load,
        15,
        32,
        0,
    );
    assert_eq!(got, vec![1]);
}

#[test]
fn rotation_lets_repeated_attempts_reach_every_task() {
    for biggest in [false, true] {
        // Five big tasks, then a small one (most recently enqueued: the head).
        let (sds, mut rqs) = detach_setup(&[0, 0, 0, 0, 0, 19]);
        let f = SchedFeatures::default().with(Feature::LB_BIGGEST_TASK, biggest);
        let mut found = None;
        for attempt in 1..=4 {
            // Only the small task (load 15) fits an imbalance of 100; examine two
            // tasks per attempt.
            let got = detach_ids(
                &sds,
                &mut rqs,
                f,
                CpuIdleType::NotIdle,
                MigrationType::Load,
                100,
                2,
                0,
            );
            if !got.is_empty() {
                assert_eq!(got, vec![6]);
                found = Some(attempt);
                break;
            }
        }
        // Windows (tail first): {1,2}, {3,4}, {5,6}.
        assert_eq!(found, Some(3), "LB_BIGGEST_TASK={biggest}");
    }
}

#[test]
fn newly_idle_detaches_one_task_and_leaves_one() {
    let (sds, mut rqs) = detach_setup(&[0, 0, 0]);
    let got = detach_ids(
        &sds,
        &mut rqs,
        SchedFeatures::default(),
        CpuIdleType::NewlyIdle,
        MigrationType::Task,
        3,
        32,
        0,
    );
    assert_eq!(got, vec![1]);
    let got = detach_ids(
        &sds,
        &mut rqs,
        SchedFeatures::default(),
        CpuIdleType::Idle,
        MigrationType::Task,
        5,
        32,
        0,
    );
    // An idle dst never empties the source.
    assert_eq!(got.len(), 1);
    assert_eq!(rqs[1].nr_running(), 1);
}

#[derive(Clone, Debug)]
enum Op {
    Periodic { cpu: u16, idle: bool },
    Newidle { cpu: u16 },
    Tick,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u16..6, any::<bool>()).prop_map(|(cpu, idle)| Op::Periodic { cpu, idle }),
        (0u16..6).prop_map(|cpu| Op::Newidle { cpu }),
        Just(Op::Tick),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn balancing_conserves_tasks_and_affinity(
        tasks in prop::collection::vec((1u64..64, -5i32..20, 0usize..6), 1..14),
        ops in prop::collection::vec(op(), 1..60),
        biggest in any::<bool>(),
        lb_min in any::<bool>(),
    ) {
        let t = topo(&JUNO);
        let mut sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
        let mut rqs = rqs_for(&t, Nanos(0));
        let mut expected = Vec::new();
        for (i, &(mask, nice, start)) in tasks.iter().enumerate() {
            let mask = CpuMask(mask);
            let start = if mask.contains(CpuId(start as u16)) {
                CpuId(start as u16)
            } else {
                mask.first().unwrap()
            };
            spawn(&mut rqs[start.index()], i as u32 + 1, nice, mask);
            expected.push(i as u32 + 1);
        }
        let f = SchedFeatures::default()
            .with(Feature::LB_BIGGEST_TASK, biggest)
            .with(Feature::LB_MIN, lb_min);
        let c = LbContext { overutilized: true, ..LbContext::new(f) };
        let mut now = 0u64;
        for o in ops {
            now += TICK;
            let n = Nanos(now);
            for rq in rqs.iter_mut() {
                rq.update_rq_clock(n).unwrap();
                if rq.curr().is_none() || rq.need_resched() {
                    rq.pick_next_task();
                }
                rq.task_tick();
            }
            let report = match o {
                Op::Periodic { cpu, idle } => {
                    let idle = if idle { CpuIdleType::Idle } else { CpuIdleType::NotIdle };
                    sched_balance_domains(&mut sds, CpuId(cpu), &mut rqs, idle, n, &c).unwrap()
                }
                Op::Newidle { cpu } => {
                    let mut clk = || 1_000u64;
                    sched_balance_newidle(&mut sds, CpuId(cpu), &mut rqs, n, &c, &mut clk).unwrap()
                }
                Op::Tick => Default::default(),
            };
            if let Some(req) = report.active_balance {
                rqs[req.src.index()].put_prev_task();
                active_load_balance_cpu_stop(&mut sds, &mut rqs, &req).unwrap();
            }
            let mut seen: Vec<u32> = Vec::new();
            for rq in &rqs {
                prop_assert!(rq.check_invariants().is_ok(), "{:?}", rq.check_invariants());
                for task in rq.tasks() {
                    prop_assert!(task.cpus_allowed.contains(rq.cpu()),
                        "task {} on CPU {} outside {:?}", task.id.0, rq.cpu().0, task.cpus_allowed);
                    seen.push(task.id.0);
                }
            }
            seen.sort();
            prop_assert_eq!(&seen, &expected);
        }
    }
}

// ---- Linux v6.12 rules the balancer used to miss (fidelity review F2-F7, M1) ----------

/// Run every CPU's current task for `ticks` ticks from `*now`.
fn run_all(rqs: &mut [Rq], now: &mut u64, ticks: u64) {
    for _ in 0..ticks {
        *now += TICK;
        for rq in rqs.iter_mut() {
            rq.update_rq_clock(Nanos(*now)).unwrap();
            if rq.curr().is_some() {
                rq.task_tick();
            } else {
                rq.update_blocked_averages();
            }
        }
    }
}

/// v6.12 `active_load_balance_cpu_stop`: when `detach_one_task` found a task, "Active
/// balancing done, reset the failure counter": `sd->nr_balance_failed = 0` on the
/// destination's lowest domain spanning the source.
#[test]
fn a_successful_active_balance_resets_nr_balance_failed() {
    let (mut sds, mut rqs, now) = misfit_setup(CpuMask::first_n(6), false);
    let r = sched_balance_domains(&mut sds, CpuId(0), &mut rqs, CpuIdleType::Idle, now, &ctx())
        .unwrap();
    let req = r.active_balance.expect("active balance requested");
    sds.cpus[0].sd[1].nr_balance_failed = 5;
    rqs[2].put_prev_task();
    let moved = active_load_balance_cpu_stop(&mut sds, &mut rqs, &req).unwrap();
    assert_eq!(moved, Some(TaskId(7)));
    assert_eq!(sds.cpus[0].sd[1].nr_balance_failed, 0);
}

/// v6.12 `sched_balance_rq`: active balance is needed but the source's running task may
/// not run on this CPU → `goto out_one_pinned`, which skips `out_all_pinned`'s
/// `nr_balance_failed = 0` (and a misfit attempt neither counts a failure nor backs off).
#[test]
fn a_pinned_running_task_keeps_nr_balance_failed() {
    let (mut sds, mut rqs, now) = misfit_setup(CpuMask(0b11_1100), false);
    sds.cpus[0].sd[1].nr_balance_failed = 3;
    let r = sched_balance_domains(&mut sds, CpuId(0), &mut rqs, CpuIdleType::Idle, now, &ctx())
        .unwrap();
    assert_eq!(r.active_balance, None);
    assert_eq!(sds.cpus[0].sd[1].nr_balance_failed, 3);
    assert_eq!(sds.cpus[0].sd[1].balance_interval, 6);
}

/// v6.12: `detach_task` → `set_task_cpu` → `migrate_task_rq_fair` sets `se->exec_start = 0`
/// ("We have migrated, no longer consider this task hot") and `attach_task`'s
/// `activate_task` enqueues with `ENQUEUE_MIGRATED`: a moved task is not cache hot on its
/// new CPU. A task put back where it was detached keeps its `exec_start`.
#[test]
fn a_task_the_balancer_moved_is_not_cache_hot() {
    let t = topo(&JUNO);
    let mut rqs = rqs_for(&t, Nanos(0));
    spawn(&mut rqs[0], 1, 0, CpuMask::first_n(6));
    rqs[0].update_rq_clock(Nanos(TICK)).unwrap();
    rqs[0].pick_next_task();
    rqs[0].update_rq_clock(Nanos(2 * TICK)).unwrap();
    rqs[0].put_prev_task();
    let ran = rqs[0].task(TaskId(1)).unwrap().se.exec_start;
    assert_ne!(ran, 0);
    let p = rqs[0].detach_task(TaskId(1)).unwrap();
    rqs[0].attach_task(p).unwrap();
    assert_eq!(
        rqs[0].task(TaskId(1)).unwrap().se.exec_start,
        ran,
        "put back"
    );
    let p = rqs[0].detach_task(TaskId(1)).unwrap();
    rqs[1].update_rq_clock(Nanos(2 * TICK)).unwrap();
    rqs[1].attach_task(p).unwrap();
    assert_eq!(rqs[1].task(TaskId(1)).unwrap().se.exec_start, 0);
}

/// v6.12 `sched_balance_domains`: `need_decay = update_newidle_cost(sd, 0)` is overwritten
/// at each level, so only the last level's decay decides whether
/// `rq->max_idle_balance_cost` is refreshed to `max(sysctl_sched_migration_cost, Σ costs)`.
#[test]
fn only_the_last_levels_decay_refreshes_max_idle_balance_cost() {
    let t = topo(&JUNO);
    let mut rqs = rqs_for(&t, Nanos(0));
    let j = 3 * 250;
    let now = Nanos(j * TICK);
    for rq in rqs.iter_mut() {
        rq.update_rq_clock(now).unwrap();
    }
    for (mc_decays, want) in [(true, 2_000_000), (false, 500_000)] {
        let mut sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
        sds.cpus[0].max_idle_balance_cost = 2_000_000;
        // A level decays when jiffies > last_decay_max_lb_cost + HZ.
        sds.cpus[0].sd[0].last_decay_max_lb_cost = if mc_decays { 0 } else { j };
        sds.cpus[0].sd[1].last_decay_max_lb_cost = if mc_decays { j } else { 0 };
        sched_balance_domains(&mut sds, CpuId(0), &mut rqs, CpuIdleType::Idle, now, &ctx())
            .unwrap();
        assert_eq!(
            sds.cpus[0].max_idle_balance_cost, want,
            "MC decays: {mc_decays}"
        );
    }
}

/// v6.12: `sd->groups` is a circular list starting at the local group, so CPU 2's MC level
/// visits groups 2, 3, 0, 1; among has-spare groups with equal idle CPUs and task counts
/// `update_sd_pick_busiest` keeps the first one seen — CPU 3, not CPU 0.
#[test]
fn groups_are_visited_from_the_local_group() {
    let t = topo(&QUAD);
    let mut sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
    let mut rqs = rqs_for(&t, Nanos(0));
    let all = CpuMask::first_n(4);
    for (cpu, a, b) in [(0usize, 1u32, 2u32), (3, 3, 4)] {
        spawn(&mut rqs[cpu], a, 0, all);
        spawn(&mut rqs[cpu], b, 0, all);
    }
    let now = Nanos(10 * TICK);
    for rq in rqs.iter_mut() {
        rq.update_rq_clock(now).unwrap();
    }
    let r = sched_balance_domains(&mut sds, CpuId(2), &mut rqs, CpuIdleType::Idle, now, &ctx())
        .unwrap();
    assert_eq!(r.total_moved(), 1);
    assert_eq!((rqs[0].nr_running(), rqs[3].nr_running()), (2, 1));
}

/// Three symmetric 2-CPU clusters (PKG has three groups).
const TRIPLE: BoardDesc = BoardDesc {
    name: "triple",
    cpus: &[
        cpu(0x0, 0, 1024),
        cpu(0x1, 0, 1024),
        cpu(0x100, 1, 1024),
        cpu(0x101, 1, 1024),
        cpu(0x200, 2, 1024),
        cpu(0x201, 2, 1024),
    ],
    perf_domains: &[pd("c0"), pd("c1"), pd("c2")],
};

/// v6.12 `update_sg_lb_stats` computes `avg_load` only for overloaded groups, so fully
/// busy groups all have `avg_load == 0` and `update_sd_pick_busiest` keeps replacing the
/// busiest with each next fully busy group ("XXX for now avg_load is not computed and
/// always 0"): from CPU 0, cluster 2 is visited last and is the busiest although
/// cluster 1's load is higher. Fully busy CPUs have nothing queued, so what shows it is
/// the active balance a fourth failure asks for (`imbalanced_active_balance`): from CPU 4.
#[test]
fn fully_busy_groups_have_no_avg_load() {
    let t = topo(&TRIPLE);
    let mut rqs = rqs_for(&t, Nanos(0));
    let all = CpuMask::first_n(6);
    // One always-running task per CPU of clusters 1 and 2; cluster 1's are nice -5.
    for (cpu, id, nice) in [(2usize, 1u32, -5), (3, 2, -5), (4, 3, 0), (5, 4, 0)] {
        spawn(&mut rqs[cpu], id, nice, all);
    }
    let mut now = 0;
    for rq in rqs.iter_mut() {
        rq.pick_next_task();
    }
    run_all(&mut rqs, &mut now, 100);
    assert!(rqs[2].cfs_avg().util_avg * 117 > 1024 * 100, "fully busy");
    assert!(rqs[2].cfs_avg().load_avg > rqs[4].cfs_avg().load_avg);
    let mut sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
    sds.cpus[0].sd[0].last_balance = now / TICK;
    sds.cpus[0].sd[1].nr_balance_failed = 3;
    let r = sched_balance_domains(
        &mut sds,
        CpuId(0),
        &mut rqs,
        CpuIdleType::Idle,
        Nanos(now),
        &ctx(),
    )
    .unwrap();
    assert_eq!(r.lb_runs, 1, "PKG only");
    let req = r
        .active_balance
        .expect("a fourth failure asks for an active balance");
    assert_eq!(
        (req.src, req.migration_type),
        (CpuId(4), MigrationType::Task)
    );
}

/// v6.12 `sched_balance_newidle`: before walking the domains it calls
/// `sched_balance_update_blocked_averages(this_cpu)`, so this CPU's blocked load is
/// decayed to now (the local group's statistics are not stale).
#[test]
fn newidle_updates_this_cpus_blocked_averages_first() {
    let t = topo(&JUNO);
    let mut sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
    let mut rqs = rqs_for(&t, Nanos(0));
    let all = CpuMask::first_n(6);
    // CPU 0 ran a task for 100 ms that then slept: blocked utilisation.
    spawn(&mut rqs[0], 1, 0, all);
    let mut now = 0;
    rqs[0].pick_next_task();
    run_all(&mut rqs, &mut now, 25);
    rqs[0]
        .dequeue_task(TaskId(1), asym_sched::rq::DequeueFlags::SLEEP)
        .unwrap();
    rqs[0].pick_next_task();
    // Overloaded elsewhere so newidle is not skipped: CPU 1 holds two tasks, pinned
    // there so that nothing is pulled into CPU 0's averages.
    spawn(&mut rqs[1], 2, 0, CpuMask::of(CpuId(1)));
    spawn(&mut rqs[1], 3, 0, CpuMask::of(CpuId(1)));
    let before = rqs[0].cfs_avg().util_avg;
    // 32 ms later (one PELT half-life), with CPU 0's clock updated but not its averages.
    now += 8 * TICK;
    for rq in rqs.iter_mut() {
        rq.update_rq_clock(Nanos(now)).unwrap();
    }
    rqs[0].set_avg_idle(u64::MAX / 4);
    let mut t0 = 0;
    let mut clock = || {
        t0 += 1000;
        t0
    };
    sched_balance_newidle(&mut sds, CpuId(0), &mut rqs, Nanos(now), &ctx(), &mut clock).unwrap();
    let after = rqs[0].cfs_avg().util_avg;
    assert!(
        after * 10 < before * 6,
        "blocked util {before} → {after}: not decayed by half"
    );
}

/// Run queues with a root domain that keeps `rd->overloaded` as Linux does, recording
/// every store to it.
struct StickyRd {
    rqs: Vec<Rq>,
    overloaded: bool,
    stores: Vec<bool>,
}

impl Snapshots for StickyRd {
    fn nr_cpus(&self) -> usize {
        self.rqs.len()
    }

    fn snapshot(&self, cpu: CpuId) -> RqSnapshot {
        self.rqs[cpu.index()].snapshot()
    }
}

impl RqAccess for StickyRd {
    fn with_rq<R>(&mut self, cpu: CpuId, f: impl FnOnce(&mut Rq) -> R) -> R {
        f(&mut self.rqs[cpu.index()])
    }

    fn rd_overloaded(&self) -> bool {
        self.overloaded
    }

    fn set_rd_overloaded(&mut self, v: bool) {
        self.overloaded = v;
        self.stores.push(v);
    }
}

/// v6.12: `rd->overloaded` is set when a CPU gets its second task and rewritten only by
/// `update_sd_lb_stats` at the root level (`!env->sd->parent`); newidle's gate reads the
/// flag, stale or not. So under `STICKY_OVERLOADED` an idle system whose flag is still set
/// runs newidle balance until a root-level balance clears it, while the recomputed flag
/// (the switch off) skips it at once.
#[test]
fn sticky_overloaded_gates_newidle_and_only_the_root_statistics_clear_it() {
    let t = topo(&JUNO);
    let now = Nanos(50 * TICK);
    let fresh = || {
        let mut rqs = rqs_for(&t, Nanos(0));
        for rq in rqs.iter_mut() {
            rq.update_rq_clock(now).unwrap();
        }
        StickyRd {
            rqs,
            overloaded: true,
            stores: Vec::new(),
        }
    };
    let mut clock = || 0u64;
    let sticky = LbContext::new(SchedFeatures::default().with(Feature::STICKY_OVERLOADED, true));

    // The switch off: nothing is overloaded now, newidle is skipped whatever the flag says.
    let mut sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
    let mut acc = fresh();
    let r = sched_balance_newidle(&mut sds, CpuId(2), &mut acc, now, &ctx(), &mut clock).unwrap();
    assert_eq!(r.lb_runs, 0);

    // On: the stale flag lets newidle run both levels; the root level clears it.
    let mut sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
    let mut acc = fresh();
    let r = sched_balance_newidle(&mut sds, CpuId(2), &mut acc, now, &sticky, &mut clock).unwrap();
    assert_eq!(r.lb_runs, 2, "{r:?}");
    assert_eq!(acc.stores, vec![false]);
    // Cleared, the next newidle is skipped.
    let r = sched_balance_newidle(&mut sds, CpuId(2), &mut acc, now, &sticky, &mut clock).unwrap();
    assert_eq!(r.lb_runs, 0);

    // A balance of the MC level leaves the flag alone; the root level (PKG) writes it,
    // set again when some CPU has two tasks.
    let mut sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
    let mut acc = fresh();
    spawn(&mut acc.rqs[0], 1, 0, CpuMask::of(CpuId(0)));
    spawn(&mut acc.rqs[0], 2, 0, CpuMask::of(CpuId(0)));
    acc.overloaded = false;
    let mut list = std::mem::take(&mut sds.cpus[2].sd);
    for (level, want) in [(0, vec![]), (1, vec![true])] {
        let (lower, upper) = list.split_at_mut(level);
        let child = lower.last().map(|c| c.flags);
        let mut cont = true;
        sched_balance_rq(
            &sds,
            CpuId(2),
            &mut acc,
            &mut upper[0],
            child,
            CpuIdleType::Idle,
            &mut cont,
            &sticky,
        )
        .unwrap();
        assert_eq!(acc.stores, want, "level {level}");
    }
    sds.cpus[2].sd = list;
    assert!(acc.overloaded);
}

/// `add_nr_running`: an attach that gives a CPU its second task sets the flag (here an
/// active balance's push onto a CPU already running one).
#[test]
fn an_attach_that_makes_two_tasks_sets_overloaded() {
    let t = topo(&JUNO);
    let mut sds = SchedDomains::build(&t, 250, Nanos(0)).unwrap();
    let mut rqs = rqs_for(&t, Nanos(0));
    let all = CpuMask::first_n(6);
    spawn(&mut rqs[3], 1, 0, all);
    spawn(&mut rqs[2], 2, 0, all);
    spawn(&mut rqs[4], 3, 0, all);
    let now = Nanos(10 * TICK);
    for rq in rqs.iter_mut() {
        rq.update_rq_clock(now).unwrap();
    }
    for c in [2, 4] {
        rqs[c].pick_next_task();
    }
    let mut acc = StickyRd {
        rqs,
        overloaded: false,
        stores: Vec::new(),
    };
    let push = |src: u16, dst: u16| ActiveBalance {
        src: CpuId(src),
        dst: CpuId(dst),
        level: SdLevel::Mc,
        migration_type: MigrationType::Task,
    };
    // CPU 3 (not running its task) to idle CPU 5: one task there, no store.
    let moved = active_load_balance_cpu_stop(&mut sds, &mut acc, &push(3, 5)).unwrap();
    assert_eq!(moved, Some(TaskId(1)));
    assert!(acc.stores.is_empty());
    // CPU 4's preempted task to CPU 2, which runs one: two tasks, the flag is set.
    acc.rqs[4].put_prev_task();
    let moved = active_load_balance_cpu_stop(&mut sds, &mut acc, &push(4, 2)).unwrap();
    assert_eq!(moved, Some(TaskId(3)));
    assert_eq!(acc.rqs[2].nr_running(), 2);
    assert_eq!(acc.stores, vec![true]);
}
