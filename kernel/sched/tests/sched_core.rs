//! The core's steps against Linux's rules, on Juno r2 (from `asym-boards`).
//!
//! Oracles: `wakeup_preempt` always reschedules an idle CPU; `wake_up_new_task` does not
//! set the overutilized flag under EAS (`check_update_overutilized_status` is skipped for
//! a new task) while a wake-up does; `pick_next_task_fair` asks for newidle balance only
//! when it found nothing and balancing is on; `update_misfit_status` marks a task that
//! does not fit a LITTLE with `max(load_avg, 1)`; a refused enqueue hands the task back.

use asym_boards::JUNO_R2;
use asym_sched::balance::{sched_balance_domains, CpuIdleType, LbContext, SchedDomains};
use asym_sched::root_domain::{root_stats_interval_ns, RootDomain};
use asym_sched::rq::{EnqueueFlags, Resched, Rq, RqConfig, RqError, RqSnapshot, Task};
use asym_sched::sched_core::{
    sched_tick, schedule_finish, schedule_pick, schedule_repick, tick_overutilized, ttwu_activate,
    ttwu_select, CoreCtx, Pick, Placement, TickCtx, TickCurr, WakeCtx,
};
use asym_sched::topology::Topology;
use asym_sched::types::{CpuId, CpuMask, Nanos, TaskId};
use asym_sched::uclamp::{TaskUclamp, UclampSysctl};
use asym_sched::wakeup::WakeKind;

const TICK: u64 = 4_000_000;

fn rqs(topo: &Topology, max_tasks: usize) -> Vec<Rq> {
    topo.cpus()
        .iter()
        .map(|c| {
            let mut cfg = RqConfig::new(c.id, topo.nr_cpus() as u32);
            cfg.capacity_orig = c.capacity_orig;
            cfg.max_tasks = max_tasks;
            Rq::new(cfg, Nanos(1 << 20))
        })
        .collect()
}

fn ctx(topo: &Topology, lb: bool) -> CoreCtx<'_> {
    CoreCtx {
        topology: topo,
        features: Default::default(),
        uclamp_used: false,
        load_balance: lb,
    }
}

fn task(id: u32, allowed: u64) -> Task {
    Task::new(TaskId(id), 0, TaskUclamp::new(), CpuMask(allowed)).unwrap()
}

/// Run `rq`'s current task for `ms` milliseconds of ticks.
fn run(rq: &mut Rq, now: &mut u64, ms: u64) {
    for _ in 0..ms * 1_000_000 / TICK {
        *now += TICK;
        rq.update_rq_clock(Nanos(*now)).unwrap();
        rq.task_tick();
    }
}

#[test]
fn a_wake_up_on_an_idle_cpu_reschedules_it() {
    let topo = Topology::from_board(&JUNO_R2).unwrap();
    let mut rqs = rqs(&topo, 4);
    let rd = RootDomain::default();
    let out = ttwu_activate(
        &mut rqs[2],
        task(1, 0b111111),
        WakeKind::Fork,
        false,
        &rd,
        &ctx(&topo, false),
    )
    .unwrap();
    assert_eq!(out.resched, Resched::Yes);
    assert_eq!(out.overutilized, None, "not tracked: never changes");
    assert_eq!(rqs[2].nr_running(), 1);
}

/// `add_nr_running`: the enqueue that gives a CPU its second task sets the root domain's
/// overloaded flag; the first and the third do not.
#[test]
fn the_enqueue_that_makes_two_tasks_sets_overloaded() {
    let topo = Topology::from_board(&JUNO_R2).unwrap();
    let mut rqs = rqs(&topo, 4);
    let rd = RootDomain::default();
    let c = ctx(&topo, true);
    let seen: Vec<bool> = (1..=3)
        .map(|id| {
            let kind = if id == 1 {
                WakeKind::Fork
            } else {
                WakeKind::Wakeup
            };
            ttwu_activate(&mut rqs[3], task(id, 0b111111), kind, false, &rd, &c)
                .unwrap()
                .overloaded
        })
        .collect();
    assert_eq!(seen, [false, true, false]);
}

#[test]
fn a_full_target_hands_the_woken_task_back() {
    let topo = Topology::from_board(&JUNO_R2).unwrap();
    let mut rqs = rqs(&topo, 1);
    let rd = RootDomain::default();
    let c = ctx(&topo, false);
    ttwu_activate(&mut rqs[0], task(1, 1), WakeKind::Fork, false, &rd, &c).unwrap();
    let e = ttwu_activate(&mut rqs[0], task(2, 1), WakeKind::Fork, false, &rd, &c).unwrap_err();
    assert_eq!(e.task.id, TaskId(2));
    assert!(matches!(e.reason, RqError::Full { .. }));
}

/// A LITTLE CPU (capacity 383) running a task at util ≈ 1000 is overutilized. Under EAS a
/// new task's enqueue there leaves the flag alone; a wake-up sets it.
#[test]
fn overutilized_is_set_by_a_wake_up_but_not_by_a_new_task_under_eas() {
    let topo = Topology::from_board(&JUNO_R2).unwrap();
    let mut rqs = rqs(&topo, 4);
    let mut now = 1u64 << 20;
    let little = CpuId(2);
    rqs[2]
        .enqueue_task(task(1, 0b111111), EnqueueFlags::NEW)
        .unwrap();
    rqs[2].pick_next_task();
    run(&mut rqs[2], &mut now, 400);
    assert!(rqs[2].cfs_avg().util_avg > 383);
    let rd = RootDomain {
        overutilized: false,
        overloaded: false,
        tracked: true,
        eas: true,
    };
    let c = ctx(&topo, false);
    let target = &mut rqs[little.index()];
    let out = ttwu_activate(target, task(2, 0b111111), WakeKind::Fork, false, &rd, &c).unwrap();
    assert_eq!(out.overutilized, None, "wake_up_new_task skips the check");
    let mut t3 = task(3, 0b111111);
    t3.cpu = Some(little);
    let out = ttwu_activate(target, t3, WakeKind::Wakeup, false, &rd, &c).unwrap();
    assert_eq!(out.overutilized, Some(true));
}

#[test]
fn newidle_is_asked_for_only_when_nothing_runs_and_balancing_is_on() {
    let topo = Topology::from_board(&JUNO_R2).unwrap();
    let mut rqs = rqs(&topo, 4);
    assert_eq!(schedule_pick(&mut rqs[0], &ctx(&topo, true)), Pick::Newidle);
    assert_eq!(schedule_pick(&mut rqs[0], &ctx(&topo, false)), Pick::Idle);
    rqs[0].enqueue_task(task(1, 1), EnqueueFlags::NEW).unwrap();
    assert_eq!(
        schedule_pick(&mut rqs[0], &ctx(&topo, true)),
        Pick::Next(TaskId(1))
    );
}

#[test]
fn a_task_too_big_for_a_little_is_misfit_while_balancing() {
    let topo = Topology::from_board(&JUNO_R2).unwrap();
    for lb in [false, true] {
        let mut rqs = rqs(&topo, 4);
        let mut now = 1u64 << 20;
        rqs[3]
            .enqueue_task(task(1, 0b111111), EnqueueFlags::NEW)
            .unwrap();
        rqs[3].pick_next_task();
        schedule_finish(&mut rqs[3], &ctx(&topo, lb));
        run(&mut rqs[3], &mut now, 400);
        now += TICK;
        rqs[3].update_rq_clock(Nanos(now)).unwrap();
        let tick = TickCtx {
            now: Nanos(now),
            tick_ns: TICK,
            curr: TickCurr::Fair,
            root_stats_next: Nanos(0),
        };
        sched_tick(&mut rqs[3], &RD_EAS, &tick, &ctx(&topo, lb));
        let load = rqs[3].task(TaskId(1)).unwrap().avg.load_avg;
        let want = if lb { load.max(1) } else { 0 };
        assert_eq!(rqs[3].misfit_task_load(), want, "lb {lb}");
    }
}

#[test]
fn the_interim_rule_places_while_overutilized() {
    let topo = Topology::from_board(&JUNO_R2).unwrap();
    let mut snaps: Vec<RqSnapshot> = topo
        .cpus()
        .iter()
        .map(|c| RqSnapshot::idle(c.id, c.capacity_orig))
        .collect();
    snaps[3].idle = false;
    let em = asym_sched::em::EnergyModel::from_topology(&JUNO_R2, &topo).unwrap();
    let mut t = task(1, 0b111000);
    t.cpu = Some(CpuId(3));
    let wake = |placement, overutilized| {
        let w = WakeCtx {
            core: ctx(&topo, false),
            cpus: &snaps,
            em: Some(&em),
            rd: RootDomain {
                overutilized,
                overloaded: false,
                tracked: true,
                eas: true,
            },
            uclamp_sysctl: UclampSysctl::default(),
            waker: Default::default(),
            placement,
        };
        ttwu_select(&t, CpuId(3), CpuId(0), WakeKind::Wakeup, &w)
    };
    // prev (3) is busy: the interim rule takes the first idle allowed CPU.
    assert_eq!(wake(Placement::Interim, true), CpuId(4));
    // Linux's select_idle_capacity scans from prev and takes the first idle one that
    // fits: 4 as well for an empty task; an allowed CPU in any case.
    let cpu = wake(Placement::Linux, true);
    assert!(
        CpuMask(0b111000).contains(cpu) && cpu != CpuId(3),
        "{cpu:?}"
    );
}

/// Juno r2 with a LITTLE (CPU 2, capacity 383) made overutilized by a task that ran on
/// it for 400 ms (util ≈ 1000); every other CPU idle.
fn juno_with_an_overutilized_little(topo: &Topology) -> (Vec<Rq>, u64) {
    let mut rqs = rqs(topo, 4);
    let mut now = 1u64 << 20;
    rqs[2]
        .enqueue_task(task(1, 0b111111), EnqueueFlags::NEW)
        .unwrap();
    rqs[2].pick_next_task();
    run(&mut rqs[2], &mut now, 400);
    assert!(rqs[2].cfs_avg().util_avg > 383);
    (rqs, now)
}

const RD_EAS: RootDomain = RootDomain {
    overutilized: false,
    overloaded: false,
    tracked: true,
    eas: true,
};

/// Linux v6.12: `check_update_overutilized_status` only sets the flag, for the enqueuing
/// (waking) or ticking CPU; nothing but `update_sd_lb_stats` clears it. So with balancing
/// on, a wake-up or a tick on a quiet CPU leaves a set flag set, and a tick on the
/// overutilized CPU sets a clear one. (Without balancing, the approximation clears it.)
#[test]
fn with_balancing_wake_ups_and_ticks_set_overutilized_but_never_clear_it() {
    let topo = Topology::from_board(&JUNO_R2).unwrap();
    let (mut busy, _) = juno_with_an_overutilized_little(&topo);
    let set = RootDomain {
        overutilized: true,
        ..RD_EAS
    };
    // A quiet system: CPU 2's task is gone.
    let mut quiet = rqs(&topo, 4);
    let mut t = task(7, 0b111111);
    t.cpu = Some(CpuId(0));
    let out = ttwu_activate(
        &mut quiet[0],
        t,
        WakeKind::Wakeup,
        false,
        &set,
        &ctx(&topo, true),
    )
    .unwrap();
    assert_eq!(out.overutilized, None, "an enqueue never clears");
    // Nor with EAS off (the flag is then kept only for the report).
    let mut t = task(8, 0b111111);
    t.cpu = Some(CpuId(1));
    let no_eas = RootDomain { eas: false, ..set };
    let out = ttwu_activate(
        &mut quiet[1],
        t,
        WakeKind::Wakeup,
        false,
        &no_eas,
        &ctx(&topo, true),
    )
    .unwrap();
    assert_eq!(
        out.overutilized, None,
        "an enqueue never clears, EAS or not"
    );
    assert_eq!(tick_overutilized(&quiet[0], &set, &ctx(&topo, true)), None);
    // The tick of the overutilized LITTLE sets a clear flag; a quiet CPU's tick does not.
    assert_eq!(
        tick_overutilized(&busy[2], &RD_EAS, &ctx(&topo, true)),
        Some(true)
    );
    assert_eq!(
        tick_overutilized(&busy[0], &RD_EAS, &ctx(&topo, true)),
        None
    );
    busy.clear();
}

/// Without a balancer the rule is Linux's too: a wake-up and a tick read only their own CPU
/// and only set the flag; the root-level statistics (`update_root_stats`, every CPU) clear it.
#[test]
fn linux_rule_without_balancing_sets_from_the_own_cpu_and_clears_only_at_the_root() {
    let topo = Topology::from_board(&JUNO_R2).unwrap();
    let linux = ctx(&topo, false);
    let (mut busy, _) = juno_with_an_overutilized_little(&topo);
    let set = RootDomain {
        overutilized: true,
        ..RD_EAS
    };
    let mut quiet = rqs(&topo, 4);
    let mut t = task(7, 0b111111);
    t.cpu = Some(CpuId(0));
    let out = ttwu_activate(&mut quiet[0], t, WakeKind::Wakeup, false, &set, &linux);
    assert_eq!(out.unwrap().overutilized, None, "a wake-up never clears");
    // Waking onto the overutilized LITTLE sets a clear flag.
    let mut t = task(8, 0b111111);
    t.cpu = Some(CpuId(2));
    let out = ttwu_activate(&mut busy[2], t, WakeKind::Wakeup, false, &RD_EAS, &linux);
    assert_eq!(out.unwrap().overutilized, Some(true));
    assert_eq!(tick_overutilized(&busy[2], &RD_EAS, &linux), Some(true));
    assert_eq!(tick_overutilized(&quiet[0], &set, &linux), None);
    let quiet_snaps: Vec<RqSnapshot> = quiet.iter().map(Rq::snapshot).collect();
    let busy_snaps: Vec<RqSnapshot> = busy.iter().map(Rq::snapshot).collect();
    assert_eq!(
        set.update_root_stats(&quiet_snaps, Default::default(), false),
        Some(false)
    );
    assert_eq!(
        RD_EAS.update_root_stats(&busy_snaps, Default::default(), false),
        Some(true)
    );
    assert_eq!(
        set.update_root_stats(&busy_snaps, Default::default(), false),
        None
    );
    let untracked = RootDomain {
        tracked: false,
        ..RD_EAS
    };
    assert_eq!(
        untracked.update_root_stats(&busy_snaps, Default::default(), false),
        None
    );
}

/// Linux v6.12 `update_sd_lb_stats`: at the root domain's level (`!sd->parent`, PKG on
/// Juno) `set_rd_overutilized(rd, sg_overutilized)` — cleared when no CPU of the system
/// is overutilized, set when one is; at a lower level (MC) only set. The EAS gate of
/// `find_busiest_group` then reads the flag just computed: a LITTLE running two tasks and
/// overutilized is balanced even though the flag was clear before the statistics ran.
#[test]
fn the_root_level_balance_statistics_clear_and_set_overutilized() {
    let topo = Topology::from_board(&JUNO_R2).unwrap();
    let lb = |over: bool| LbContext {
        overutilized: over,
        eas_active: true,
        ..LbContext::new(Default::default())
    };
    // Quiet system, flag set: CPU 0's periodic balance (MC then PKG) clears it.
    let mut quiet = rqs(&topo, 4);
    let mut sds = SchedDomains::build(&topo, 250, Nanos(0)).unwrap();
    let now = Nanos(40 * TICK);
    let r = sched_balance_domains(
        &mut sds,
        CpuId(0),
        &mut quiet,
        CpuIdleType::Idle,
        now,
        &lb(true),
    )
    .unwrap();
    assert_eq!(r.overutilized, Some(false));
    // Only the MC level due (PKG balanced recently): MC statistics cannot clear.
    let mut sds = SchedDomains::build(&topo, 250, Nanos(0)).unwrap();
    sds.cpus[0].sd[1].last_balance = 40;
    let r = sched_balance_domains(
        &mut sds,
        CpuId(0),
        &mut quiet,
        CpuIdleType::Idle,
        now,
        &lb(true),
    )
    .unwrap();
    assert_eq!(r.lb_runs, 1);
    assert_eq!(r.overutilized, None);

    // The LITTLE overutilized with a second task queued; the flag clear beforehand.
    // CPU 3 (the other LITTLEs' first idle CPU) balances: its MC statistics (below the
    // root) set the flag, which opens the EAS gate, and the queued task moves to it.
    let (mut rqs, t) = juno_with_an_overutilized_little(&topo);
    rqs[2]
        .enqueue_task(task(2, 0b111111), EnqueueFlags::NEW)
        .unwrap();
    let mut sds = SchedDomains::build(&topo, 250, Nanos(0)).unwrap();
    let now = Nanos(t + TICK);
    for rq in &mut rqs {
        rq.update_rq_clock(now).unwrap();
    }
    sds.cpus[3].sd[1].last_balance = now.0 / TICK;
    let r = sched_balance_domains(
        &mut sds,
        CpuId(3),
        &mut rqs,
        CpuIdleType::Idle,
        now,
        &lb(false),
    )
    .unwrap();
    assert_eq!(r.lb_runs, 1, "MC only");
    assert_eq!(r.overutilized, Some(true));
    assert_eq!(
        r.total_moved(),
        1,
        "the fresh flag opens the EAS gate: {r:?}"
    );
    assert_eq!(rqs[3].nr_running(), 1);
}

/// v6.12 `pick_next_task_fair`: with nothing to run it calls `sched_balance_newidle`
/// first and `update_idle_rq_clock_pelt` only when nothing was pulled. A CPU at half
/// capacity and half frequency that ran 10 ms has `clock_pelt` 7.5 ms behind
/// `clock_task`; if newidle pulls a task, that lag must survive (it is given back — or
/// declared lost — only when the CPU really goes idle).
#[test]
fn newidle_runs_before_the_idle_clock_pelt_resync() {
    let topo = Topology::from_board(&JUNO_R2).unwrap();
    let mut rqs = rqs(&topo, 4);
    let rq = &mut rqs[2];
    rq.set_freq_scale(asym_sched::types::Capacity(512));
    let mut now = 1u64 << 20;
    rq.update_rq_clock(Nanos(now)).unwrap();
    rq.enqueue_task(task(1, 0b111111), EnqueueFlags::NEW)
        .unwrap();
    rq.pick_next_task();
    now += 10_000_000;
    rq.update_rq_clock(Nanos(now)).unwrap();
    rq.dequeue_task(TaskId(1), asym_sched::rq::DequeueFlags::SLEEP)
        .unwrap();
    let lag = |rq: &Rq| rq.clock_task().0 - rq.clock_pelt().0;
    assert!(lag(rq) > 5_000_000, "lag {}", lag(rq));
    assert_eq!(schedule_pick(rq, &ctx(&topo, true)), Pick::Newidle);
    assert!(
        lag(rq) > 5_000_000,
        "resynced before newidle: lag {}",
        lag(rq)
    );
    // Newidle pulls a task from CPU 3.
    let mut t2 = task(2, 0b111111);
    t2.cpu = Some(CpuId(3));
    rq.attach_task(t2).unwrap();
    assert_eq!(schedule_repick(rq), Pick::Next(TaskId(2)));
    assert!(lag(rq) > 5_000_000, "lag {}", lag(rq));
    // Without a pull the repick goes idle and resyncs.
    rq.dequeue_task(TaskId(2), asym_sched::rq::DequeueFlags::SLEEP)
        .unwrap();
    assert_eq!(schedule_pick(rq, &ctx(&topo, true)), Pick::Newidle);
    assert_eq!(schedule_repick(rq), Pick::Idle);
    assert_eq!(lag(rq), 0);
}

/// Linux v6.12 `sched_tick`: `rq->idle_balance = idle_cpu(cpu)` — the idle task runs and
/// nothing is queued — then `sched_balance_trigger`: SCHED_SOFTIRQ once `rq->next_balance`
/// has passed, whatever runs, and `nohz_balancer_kick`, which returns at once on an
/// `idle_balance` CPU. A CPU whose idle task runs with a wake-up queued, or which runs another
/// class's task, is busy; an idle CPU raises the softirq only from a tick Linux would have
/// kept (its last idle period shorter than a tick). No softirq without load balancing.
#[test]
fn the_tick_triggers_the_balance_and_the_nohz_kick_with_idle_cpu() {
    let topo = Topology::from_board(&JUNO_R2).unwrap();
    let now = Nanos((1 << 20) + TICK);
    let tick = |curr| TickCtx {
        now,
        tick_ns: TICK,
        curr,
        root_stats_next: Nanos(0),
    };
    let steps = |rq: &mut Rq, curr, lb| sched_tick(rq, &RD_EAS, &tick(curr), &ctx(&topo, lb));
    let mut rqs = rqs(&topo, 4);
    for rq in rqs.iter_mut() {
        rq.update_rq_clock(now).unwrap();
        rq.set_next_balance(now);
    }
    // A fair task runs: busy, the balance is due.
    rqs[0].enqueue_task(task(1, 1), EnqueueFlags::NEW).unwrap();
    rqs[0].pick_next_task();
    let s = steps(&mut rqs[0], TickCurr::Fair, true);
    assert!(!s.idle_balance && s.softirq && s.nohz_kick, "{s:?}");
    let s = steps(&mut rqs[0], TickCurr::Fair, false);
    assert!(!s.softirq && s.nohz_kick, "no balancer: {s:?}");
    // Not due yet.
    rqs[0].set_next_balance(Nanos(now.0 + 1));
    assert!(!steps(&mut rqs[0], TickCurr::Fair, true).softirq);
    // Idle, nothing queued, a long idle period: a tick Linux would have stopped.
    let s = steps(&mut rqs[1], TickCurr::Idle, true);
    assert!(s.idle_balance && !s.softirq && !s.nohz_kick, "{s:?}");
    // The stopper runs: not idle.
    let s = steps(&mut rqs[1], TickCurr::Other, true);
    assert!(
        !s.idle_balance && s.softirq && s.nohz_kick,
        "stopper: {s:?}"
    );
    // The idle task still runs but a wake-up queued a task: `idle_cpu` is false.
    rqs[2]
        .enqueue_task(task(2, 0b100), EnqueueFlags::NEW)
        .unwrap();
    let s = steps(&mut rqs[2], TickCurr::Idle, true);
    assert!(
        !s.idle_balance && s.softirq && s.nohz_kick,
        "wake-up queued: {s:?}"
    );
    assert_eq!(
        s.resched,
        Resched::No,
        "only a fair task's tick reschedules"
    );
    // Idle after a short idle period: the tick is kept, so it balances (as idle).
    rqs[3].idle_enter();
    rqs[3].update_rq_clock(Nanos(now.0 + TICK / 2)).unwrap();
    rqs[3].update_avg_idle(1 << 30);
    let s = steps(&mut rqs[3], TickCurr::Idle, true);
    assert!(
        s.idle_balance && s.softirq && !s.nohz_kick,
        "kept idle tick: {s:?}"
    );
}

/// When the root level's overutilized statistics run from the tick: with load balancing on,
/// never (Linux clears the flag only from the root level's `update_sd_lb_stats` in a
/// balance); with it off, once per root interval (`sd_init`'s root `max_interval`, 2 ms per
/// CPU), from the first tick at or after the due time, and only where the flag is kept.
#[test]
fn the_root_statistics_run_from_the_tick_only_without_balancing() {
    let topo = Topology::from_board(&JUNO_R2).unwrap();
    let interval = root_stats_interval_ns(6);
    assert_eq!(interval, 12_000_000);
    let set = RootDomain {
        overutilized: true,
        ..RD_EAS
    };
    let mut rqs = rqs(&topo, 4);
    let mut due = Nanos(0);
    let mut runs = Vec::new();
    for k in 1..=10u64 {
        let now = Nanos(k * TICK);
        rqs[0].update_rq_clock(now).unwrap();
        let tick = TickCtx {
            now,
            tick_ns: TICK,
            curr: TickCurr::Idle,
            root_stats_next: due,
        };
        for lb in [true, false] {
            let s = sched_tick(&mut rqs[0], &set, &tick, &ctx(&topo, lb));
            if lb {
                assert_eq!(s.root_stats, None, "with balancing, at {now:?}");
            } else if let Some(next) = s.root_stats {
                assert_eq!(next, Nanos(now.0 + interval));
                due = next;
                runs.push(k);
            }
        }
    }
    // Ticks 1, 4, 7 and 10 (4 ms ticks, 12 ms apart).
    assert_eq!(runs, [1, 4, 7, 10]);
    let untracked = RootDomain {
        tracked: false,
        ..set
    };
    assert_eq!(
        untracked.root_stats_due(false, Nanos(0), Nanos(TICK), 6),
        None
    );
}
