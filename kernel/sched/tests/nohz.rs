//! NOHZ idle decisions against Linux's `nohz_balancer_kick` / `_nohz_idle_balance` rules.
//!
//! Oracles: a stats kick waits for `nohz.next_blocked` and goes to a tickless idle CPU other
//! than the kicker; the next one is due `LOAD_AVG_PERIOD` (32 ms = 8 jiffies at HZ=250)
//! later; a balance kick needs two tasks or a misfit one, carries the stats kick with it (one
//! `kick_ilb(flags)`) and then waits a jiffy; one `_nohz_idle_balance` walk updates and
//! balances each idle CPU in turn, the kicked CPU last (`for_each_cpu_wrap`), and stops when
//! the kicked CPU gets work; a CPU's blocked load ends when its signals have decayed to zero
//! (`cfs_rq_has_blocked`).

use asym_sched::nohz::{
    blocked_load_check, ilb_candidate, ilb_order, nohz_idle_balance, nohz_parts,
    update_blocked_load, BlockedLoad, Nohz, NohzKickFlags, NohzParts, NohzWalk, LOAD_AVG_PERIOD_MS,
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

const ON: NohzParts = nohz_parts(true);
const OFF: NohzParts = nohz_parts(false);
const BOTH: NohzKickFlags = NohzKickFlags(NohzKickFlags::STATS.0 | NohzKickFlags::BALANCE.0);

#[test]
fn a_stats_kick_waits_for_next_blocked_and_picks_a_tickless_idle_cpu() {
    let cpus = snaps(&[true, false, false, false]);
    let mut n = blocked_with_idle_2_and_3();
    let stats = Some(NohzKickFlags::STATS);
    let kick =
        |n: &mut Nohz, this: usize, j| n.nohz_balancer_kick(&cpus[this], j, cpus.as_slice(), ON);
    assert_eq!(kick(&mut n, 0, 10), None, "not yet");
    assert_eq!(kick(&mut n, 0, 11).map(|k| k.0), Some(CpuId(2)));
    assert_eq!(kick(&mut n, 0, 11).map(|k| k.1), stats);
    // CPU 1 is idle but not tickless; a busy CPU 2 leaves the idle mask and kicks CPU 3.
    let mut busy2 = cpus[2];
    busy2.pelt.idle = false;
    assert_eq!(
        n.nohz_balancer_kick(&busy2, 11, cpus.as_slice(), ON),
        Some((CpuId(3), NohzKickFlags::STATS))
    );
    assert!(!n.idle_cpus.contains(CpuId(2)), "nohz_balance_exit_idle");
    n.has_blocked = false;
    assert_eq!(kick(&mut n, 0, 30), None, "nothing blocked");
}

/// `nohz_balancer_kick`: from `nohz.next_balance` on, two tasks or a misfit one ask for
/// `NOHZ_STATS_KICK | NOHZ_BALANCE_KICK` in one kick, whatever `nohz.next_blocked` says;
/// `kick_ilb` then moves `nohz.next_balance` a jiffy on.
#[test]
fn a_balance_kick_carries_the_stats_kick_needs_two_tasks_or_a_misfit_and_waits_a_jiffy() {
    let cpus = snaps(&[true, true, false, false]);
    let mut n = Nohz::default();
    n.idle_cpus.set(CpuId(2));
    n.idle_cpus.set(CpuId(3));
    let mut this = cpus[1];
    assert_eq!(n.nohz_balancer_kick(&this, 5, cpus.as_slice(), ON), None);
    this.misfit_task_load = 300;
    assert_eq!(
        n.nohz_balancer_kick(&this, 5, cpus.as_slice(), ON),
        Some((CpuId(2), BOTH))
    );
    assert_eq!(n.next_balance_j, 6);
    this.misfit_task_load = 0;
    this.nr_running = 2;
    assert_eq!(
        n.nohz_balancer_kick(&this, 5, cpus.as_slice(), ON),
        None,
        "within the jiffy"
    );
    assert_eq!(
        n.nohz_balancer_kick(&this, 6, cpus.as_slice(), ON),
        Some((CpuId(2), BOTH))
    );
    // With nothing tickless there is nobody to kick.
    let mut none = Nohz::default();
    assert_eq!(none.nohz_balancer_kick(&this, 6, cpus.as_slice(), ON), None);
}

/// asym's switch: with load balancing off a kick never balances, and the blocked-load kick
/// is the same as with it on.
#[test]
fn with_load_balancing_off_only_the_stats_kick_is_left() {
    let cpus = snaps(&[true, false, false, false]);
    let mut this = cpus[0];
    this.nr_running = 2;
    let mut n = blocked_with_idle_2_and_3();
    assert_eq!(n.nohz_balancer_kick(&this, 10, cpus.as_slice(), OFF), None);
    assert_eq!(
        n.nohz_balancer_kick(&this, 11, cpus.as_slice(), OFF),
        Some((CpuId(2), NohzKickFlags::STATS))
    );
    assert_eq!(n.next_balance_j, 0, "no balance kick, no next_balance move");
    assert_eq!(
        n.nohz_balancer_kick(&this, 11, cpus.as_slice(), ON),
        Some((CpuId(2), BOTH))
    );
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
    let mut n = blocked_with_idle_2_and_3();
    assert_eq!(
        n.nohz_balancer_kick(&this, 11, cpus.as_slice(), ON),
        Some((CpuId(3), BOTH))
    );
    cpus[3].online = false;
    let mut n = blocked_with_idle_2_and_3();
    assert_eq!(n.nohz_balancer_kick(&this, 11, cpus.as_slice(), ON), None);

    // CPU 3 back up and kicked: the walk passes CPU 2 by although it is in the idle mask.
    cpus[3].online = true;
    for s in cpus.iter_mut() {
        s.next_balance = Nanos(0);
    }
    let mut w = Walk::new(&cpus, n);
    assert!(nohz_idle_balance(CpuId(3), BOTH, Nanos(11 * TICK), TICK, 250, 4, &mut w).unwrap());
    assert_eq!(w.log, vec![Step::Stats(3), Step::Balance(3)]);
}

/// A driver that records the walk's steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Stats(u16),
    Balance(u16),
}

struct Walk {
    cpus: Vec<RqSnapshot>,
    nohz: Nohz,
    log: Vec<Step>,
    /// CPUs that still have blocked load after their update.
    blocked: CpuMask,
    /// `need_resched()` on the idle load balancer after this many steps.
    resched_after: usize,
}

impl Walk {
    fn new(cpus: &[RqSnapshot], nohz: Nohz) -> Walk {
        Walk {
            cpus: cpus.to_vec(),
            nohz,
            log: Vec::new(),
            blocked: CpuMask::EMPTY,
            resched_after: usize::MAX,
        }
    }
}

impl NohzWalk for Walk {
    type Error = ();

    fn idle_cpus(&self) -> CpuMask {
        self.nohz.idle_cpus
    }

    fn idle_cpu(&self, cpu: CpuId) -> bool {
        ilb_candidate(&self.cpus[cpu.index()])
    }

    fn need_resched(&self) -> bool {
        self.log.len() >= self.resched_after
    }

    fn update_nohz_stats(&mut self, cpu: CpuId, _j: u64) -> Result<bool, ()> {
        self.log.push(Step::Stats(cpu.0));
        Ok(self.blocked.contains(cpu))
    }

    fn next_balance(&self, cpu: CpuId) -> Nanos {
        self.cpus[cpu.index()].next_balance
    }

    fn sched_balance_domains(&mut self, cpu: CpuId) -> Result<(), ()> {
        self.log.push(Step::Balance(cpu.0));
        let s = &mut self.cpus[cpu.index()];
        s.next_balance = Nanos(s.next_balance.0 + 3 * TICK);
        Ok(())
    }

    fn set_has_blocked(&mut self, v: bool) {
        self.nohz.has_blocked = v;
    }

    fn set_next_balance(&mut self, j: u64) {
        self.nohz.next_balance_j = j;
    }

    fn set_next_blocked(&mut self, j: u64) {
        self.nohz.next_blocked_j = j;
    }
}

/// `_nohz_idle_balance` (v6.12): one walk over the idle mask from the CPU after the idle load
/// balancer, itself last; for each idle CPU `update_nohz_stats` then, when due,
/// `sched_balance_domains(CPU_IDLE)`; a busy CPU is skipped; then `nohz.next_balance` is the
/// earliest `next_balance` seen, `nohz.next_blocked` `LOAD_AVG_PERIOD` on, and
/// `nohz.has_blocked` set again when some CPU kept blocked load.
#[test]
fn one_walk_updates_and_balances_each_idle_cpu_in_turn_the_ilb_last() {
    let mut cpus = snaps(&[false, true, false, false, false]);
    for (i, s) in cpus.iter_mut().enumerate() {
        s.next_balance = Nanos((10 + i as u64) * TICK);
    }
    cpus[4].next_balance = Nanos(30 * TICK); // not due
    let mut n = Nohz {
        has_blocked: true,
        next_blocked_j: 3,
        next_balance_j: 10,
        ..Nohz::default()
    };
    for c in [0, 1, 2, 3, 4] {
        n.idle_cpus.set(CpuId(c));
    }
    let mut w = Walk::new(&cpus, n);
    w.blocked.set(CpuId(3));
    let now = Nanos(20 * TICK);
    assert!(nohz_idle_balance(CpuId(2), BOTH, now, TICK, 250, 5, &mut w).unwrap());
    use Step::*;
    assert_eq!(
        w.log,
        vec![
            Stats(3),
            Balance(3),
            Stats(4),
            Stats(0),
            Balance(0),
            Stats(2),
            Balance(2)
        ],
        "CPU 1 is busy, CPU 4 not due"
    );
    assert_eq!(w.nohz.next_balance_j, 13, "CPU 0 balanced: 10 + 3");
    assert_eq!(w.nohz.next_blocked_j, 20 + LOAD_AVG_PERIOD_MS * 250 / 1000);
    assert!(w.nohz.has_blocked, "CPU 3 kept blocked load");

    // A stats kick alone balances nobody but still notes the next balance.
    let mut w = Walk::new(&cpus, n);
    w.nohz.next_balance_j = 0;
    assert!(nohz_idle_balance(CpuId(2), NohzKickFlags::STATS, now, TICK, 250, 5, &mut w).unwrap());
    assert_eq!(w.log, vec![Stats(3), Stats(4), Stats(0), Stats(2)]);
    assert!(!w.nohz.has_blocked);
    assert_eq!(w.nohz.next_balance_j, 10);
}

/// `nohz_csd_func` / `nohz_idle_balance`: a kicked CPU that is no longer idle drops the kick
/// (the softirq balances it for itself as usual); `_nohz_idle_balance` stops when the idle
/// load balancer gets work, leaving `nohz.has_blocked` set and the deadlines as they were.
#[test]
fn a_kick_is_dropped_by_a_busy_ilb_and_the_walk_stops_when_it_gets_work() {
    let cpus = snaps(&[false, false, true, false]);
    let mut n = blocked_with_idle_2_and_3();
    n.idle_cpus.set(CpuId(0));
    let mut w = Walk::new(&cpus, n);
    assert!(!nohz_idle_balance(CpuId(2), BOTH, Nanos(20 * TICK), TICK, 250, 4, &mut w).unwrap());
    assert!(w.log.is_empty());
    assert!(!nohz_idle_balance(
        CpuId(0),
        NohzKickFlags::NONE,
        Nanos(20 * TICK),
        TICK,
        250,
        4,
        &mut w
    )
    .unwrap());

    let mut w = Walk::new(&cpus, n);
    w.resched_after = 1;
    assert!(nohz_idle_balance(
        CpuId(0),
        NohzKickFlags::STATS,
        Nanos(20 * TICK),
        TICK,
        250,
        4,
        &mut w
    )
    .unwrap());
    assert_eq!(w.log, vec![Step::Stats(3)], "CPU 3, then the ILB has work");
    assert!(w.nohz.has_blocked);
    assert_eq!(w.nohz.next_blocked_j, n.next_blocked_j);
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
