//! NOHZ idle decisions against Linux's `nohz_balancer_kick` / `_nohz_idle_balance` rules.
//!
//! Oracles: a stats kick waits for `nohz.next_blocked` and goes to a tickless idle CPU other
//! than the kicker; the next one is due `LOAD_AVG_PERIOD` (32 ms = 8 jiffies at HZ=250)
//! later; a balance kick needs two tasks or a misfit one and then waits a jiffy; a CPU's
//! blocked load ends when its signals have decayed to zero (`cfs_rq_has_blocked`);
//! `for_each_cpu_wrap` visits the kicked CPU last.

use asym_sched::nohz::{
    blocked_load_check, ilb_order, nohz_balance_due, update_blocked_load, BlockedLoad, Nohz,
    LOAD_AVG_PERIOD_MS,
};
use asym_sched::rq::{DequeueFlags, EnqueueFlags, Rq, RqConfig, RqSnapshot, Task};
use asym_sched::types::{Capacity, CpuId, CpuMask, Nanos, TaskId};
use asym_sched::uclamp::TaskUclamp;

const TICK: u64 = 4_000_000;

fn snaps(busy: &[bool]) -> Vec<RqSnapshot> {
    busy.iter()
        .enumerate()
        .map(|(i, &b)| {
            let mut s = RqSnapshot::idle(CpuId(i as u16), Capacity(1024));
            s.pelt.idle = !b;
            s.idle = !b;
            s.nr_running = b as u32;
            s
        })
        .collect()
}

/// Blocked load due after jiffy 10; CPUs 2 and 3 tickless idle.
fn blocked_with_idle_2_and_3() -> Nohz {
    let mut n = Nohz {
        has_blocked: true,
        next_blocked_j: 10,
        ..Nohz::default()
    };
    n.idle_cpus.set(CpuId(2));
    n.idle_cpus.set(CpuId(3));
    n
}

#[test]
fn a_stats_kick_waits_for_next_blocked_and_picks_a_tickless_idle_cpu() {
    let cpus = snaps(&[true, false, false, false]);
    let mut n = blocked_with_idle_2_and_3();
    assert_eq!(n.stats_kick(CpuId(0), 10, cpus.as_slice()), None, "not yet");
    assert_eq!(n.stats_kick(CpuId(0), 11, cpus.as_slice()), Some(CpuId(2)));
    // CPU 1 is idle but not tickless; CPU 2 is the kicker itself here.
    assert_eq!(n.stats_kick(CpuId(2), 11, cpus.as_slice()), Some(CpuId(3)));
    n.stats_begin();
    assert!(!n.has_blocked);
    n.stats_end(false, 11, 250);
    assert_eq!(n.next_blocked_j, 11 + LOAD_AVG_PERIOD_MS * 250 / 1000);
    assert_eq!(
        n.stats_kick(CpuId(0), 30, cpus.as_slice()),
        None,
        "nothing blocked"
    );
}

#[test]
fn a_balance_kick_needs_two_tasks_or_a_misfit_and_then_waits_a_jiffy() {
    let cpus = snaps(&[true, true, false, false]);
    let mut n = Nohz::default();
    let mut this = cpus[1];
    assert_eq!(n.balance_kick(&this, 5, cpus.as_slice()), None);
    this.misfit_task_load = 300;
    assert_eq!(n.balance_kick(&this, 5, cpus.as_slice()), Some(CpuId(2)));
    assert_eq!(n.next_balance_j, 6);
    this.misfit_task_load = 0;
    this.nr_running = 2;
    assert_eq!(
        n.balance_kick(&this, 5, cpus.as_slice()),
        None,
        "within the jiffy"
    );
    assert_eq!(n.balance_kick(&this, 6, cpus.as_slice()), Some(CpuId(2)));
}

/// A CPU that was never brought up (`maxcpus=`) publishes an idle snapshot but runs nothing:
/// it is never the idle load balancer, nor balanced on behalf of (a task pulled onto it would
/// never run). Linux keeps it out of `nohz.idle_cpus_mask`.
#[test]
fn an_offline_idle_cpu_is_never_kicked_nor_balanced_for() {
    let mut cpus = snaps(&[true, true, false, false]);
    cpus[2].online = false;
    let mut this = cpus[1];
    this.nr_running = 2;
    let mut n = Nohz::default();
    assert_eq!(n.balance_kick(&this, 5, cpus.as_slice()), Some(CpuId(3)));
    cpus[3].online = false;
    let mut n = Nohz::default();
    assert_eq!(n.balance_kick(&this, 5, cpus.as_slice()), None);

    let n = blocked_with_idle_2_and_3();
    assert_eq!(n.stats_kick(CpuId(0), 11, cpus.as_slice()), None);
    cpus[3].online = true;
    assert_eq!(n.stats_kick(CpuId(0), 11, cpus.as_slice()), Some(CpuId(3)));

    let due = Nanos(cpus[2].next_balance.0 + 1);
    assert!(!nohz_balance_due(&cpus[2], due), "offline");
    assert!(nohz_balance_due(&cpus[3], due));
}

#[test]
fn blocked_load_ends_when_the_signals_are_gone() {
    let mut now = 1u64 << 30;
    let mut rq = Rq::new(RqConfig::new(CpuId(1), 2), Nanos(now));
    let t = Task::new(TaskId(1), 0, TaskUclamp::new(), CpuMask::of(CpuId(1))).unwrap();
    rq.enqueue_task(t, EnqueueFlags::NEW).unwrap();
    rq.pick_next_task();
    for _ in 0..25 {
        now += TICK;
        rq.update_rq_clock(Nanos(now)).unwrap();
        rq.task_tick();
    }
    rq.dequeue_task(TaskId(1), DequeueFlags::SLEEP).unwrap();
    rq.pick_next_task();
    let mut n = Nohz::default();
    assert_eq!(blocked_load_check(&n, &rq, 1), BlockedLoad::Done(false));
    n.enter_idle(&mut rq);
    assert!(n.idle_cpus.contains(CpuId(1)) && n.has_blocked);
    let mut j = now / TICK;
    assert_eq!(blocked_load_check(&n, &rq, j), BlockedLoad::Update);
    let (decayed, still) = update_blocked_load(&mut rq, j);
    assert!(
        still,
        "100 ms of load does not vanish at once (decayed {decayed})"
    );
    assert_eq!(
        blocked_load_check(&n, &rq, j),
        BlockedLoad::Done(true),
        "same jiffy"
    );
    // y^n falls below one unit of load within a few hundred periods.
    for _ in 0..200 {
        now += 8 * TICK;
        j = now / TICK;
        rq.update_rq_clock(Nanos(now)).unwrap();
        if let (_, false) = update_blocked_load(&mut rq, j) {
            assert_eq!(blocked_load_check(&n, &rq, j + 1), BlockedLoad::Done(false));
            return;
        }
    }
    panic!("blocked load never decayed to zero");
}

#[test]
fn the_ilb_visits_the_others_first_and_itself_last() {
    let v: Vec<u16> = ilb_order(CpuId(2), 5).map(|c| c.0).collect();
    assert_eq!(v, vec![3, 4, 0, 1, 2]);
}
