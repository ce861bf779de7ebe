//! Cross-CPU wake-up without the old CPU's run-queue lock.
//!
//! Re-derives what Linux's `try_to_wake_up` does to the *previous* CPU of a sleeping task
//! it wakes elsewhere, none of which takes that CPU's rq lock:
//! - `sync_entity_load_avg` reads `cfs_rq_last_update_time(cfs_rq)` (lockless);
//! - `migrate_task_rq_fair` → `remove_entity_load_avg` adds the task's signals to
//!   `cfs_rq->removed` under its own leaf lock (`cfs_rq->removed.lock`), and
//!   `migrate_se_pelt_lag` reads `rq->clock_pelt_idle`, `rq->clock_idle` and whether
//!   `rq->curr` is the idle task (lockless);
//! - the owner applies the removals at its next `update_cfs_rq_load_avg`.
//!
//! Here the lockless reads are a [`PeltRemote`] value the owner publishes
//! ([`Rq::pelt_remote`], also part of [`crate::rq::RqSnapshot`]), the removal is a
//! [`RemovedLoad`] value the caller keeps beside the run queue under its own lock, and the
//! owner hands it in with [`Rq::apply_removed`] before its next PELT update (the kernel: right
//! after `update_rq_clock`; the simulator: at once). Exit uses its first half
//! ([`remove_entity_load_avg`], from `task_dead_fair` after the dead task's last switch).
//!
//! Deliberate difference: Linux's `migrate_se_pelt_lag` reads `sched_clock_cpu(cpu)` itself;
//! [`migrate_task_rq_fair`] takes that time as `now`.

use crate::pelt::{RemovedLoad, SchedAvg};
use crate::rq::{Rq, RqError, Task};
use crate::types::{CpuId, Nanos};

/// The PELT state of a CPU that another CPU may read without its rq lock (Linux:
/// `cfs_rq_last_update_time`, `rq->clock_pelt_idle`, `rq->clock_idle`,
/// `is_idle_task(rq->curr)`). The owner writes it under its rq lock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeltRemote {
    /// The CPU.
    pub cpu: CpuId,
    /// The root cfs_rq's `avg.last_update_time` (PELT-clock ns).
    pub last_update_time: u64,
    /// `rq->clock_pelt_idle`: `rq_clock_pelt()` when the CPU last went idle.
    pub clock_pelt_idle: u64,
    /// `rq->clock_idle`: `rq_clock_task()` when the CPU last went idle.
    pub clock_idle: u64,
    /// The CPU runs its idle task.
    pub idle: bool,
}

impl Rq {
    /// What a remote waker reads about this CPU's PELT clocks.
    pub fn pelt_remote(&self) -> PeltRemote {
        let clock = self.pelt_clock();
        PeltRemote {
            cpu: self.cpu(),
            last_update_time: self.cfs_rq_avg().avg.last_update_time,
            clock_pelt_idle: clock.clock_pelt_idle,
            clock_idle: clock.clock_idle,
            idle: self.curr_is_idle(),
        }
    }

    /// Take in removals that remote wakers and exits queued for this CPU
    /// ([`migrate_task_rq_fair`]); they are subtracted at the next PELT update of the root
    /// cfs_rq, as Linux's `cfs_rq->removed`. Call before any PELT update after
    /// [`Rq::update_rq_clock`].
    pub fn apply_removed(&mut self, removed: RemovedLoad) {
        self.cfs_avg_mut().removed.add(removed);
    }
}

/// `sync_entity_load_avg` for a task sleeping with its signals on `prev.cpu`: decay them
/// to that cfs_rq's last update, as `select_task_rq_fair` does before reading a waking
/// task's util. Pure: reads only the published [`PeltRemote`]. A task whose signals belong
/// to another CPU is refused.
pub fn sync_entity_load_avg(prev: &PeltRemote, task: &mut Task) -> Result<(), RqError> {
    task.avg = synced_avg(prev, task)?;
    Ok(())
}

/// [`sync_entity_load_avg`] on a copy: the task's signals decayed to `prev`'s last
/// update, the task itself untouched (the wake-up selection reads them without copying
/// the whole [`Task`]).
pub fn synced_avg(prev: &PeltRemote, task: &Task) -> Result<SchedAvg, RqError> {
    check_cpu(prev, task)?;
    let mut avg = task.avg;
    if avg.attached {
        avg.update_blocked_se(prev.last_update_time, task.se.weight());
    }
    Ok(avg)
}

/// `migrate_task_rq_fair` for a *sleeping* task about to be enqueued on another CPU (or
/// dead: `task_dead_fair`): `remove_entity_load_avg` — sync to `prev`'s last update and
/// return exactly those signals as a [`RemovedLoad`] for `prev` — then, if `prev` is idle,
/// `migrate_se_pelt_lag`: decay the task further to an estimate of `prev`'s PELT time at
/// `now` (`prev`'s `sched_clock_cpu`: `clock_pelt_idle + now - clock_idle`, never before
/// the cfs_rq's last update), since an idle cfs_rq is not updated. The task ends
/// unattached (`last_update_time = 0`), to be attached by its next enqueue. Pure: the
/// caller adds the result to `prev`'s removed load, which `prev`'s owner hands to
/// [`Rq::apply_removed`].
pub fn migrate_task_rq_fair(
    prev: &PeltRemote,
    task: &mut Task,
    now: Nanos,
) -> Result<RemovedLoad, RqError> {
    check_cpu(prev, task)?;
    let mut removed = RemovedLoad::default();
    if task.avg.attached {
        let w = task.se.weight();
        let lut = prev.last_update_time;
        removed = sync_and_remove(prev, task);
        if prev.idle {
            let est = prev.clock_pelt_idle;
            let pelt_now = if est < lut {
                lut
            } else {
                est + now.0.saturating_sub(prev.clock_idle)
            };
            task.avg.update_blocked_se(pelt_now, w);
        }
    }
    task.avg.last_update_time = 0;
    task.avg.attached = false;
    Ok(removed)
}

/// `remove_entity_load_avg` for a task off `prev`'s run queue whose signals are still on
/// `prev`'s cfs_rq: `sync_entity_load_avg` to that cfs_rq's last update, then exactly those
/// signals as a [`RemovedLoad`] for `prev` (Linux adds them to `cfs_rq->removed` under
/// `removed.lock`; the owner subtracts them at its next `update_cfs_rq_load_avg`). Pure: the
/// caller adds the result to `prev`'s removed load. An unattached task removes nothing.
pub fn remove_entity_load_avg(prev: &PeltRemote, task: &mut Task) -> Result<RemovedLoad, RqError> {
    check_cpu(prev, task)?;
    if !task.avg.attached {
        return Ok(RemovedLoad::default());
    }
    Ok(sync_and_remove(prev, task))
}

/// The body of [`remove_entity_load_avg`] for an attached task of `prev` (checked by the
/// caller); inlined into [`migrate_task_rq_fair`], which every migrating wake-up runs.
#[inline(always)]
fn sync_and_remove(prev: &PeltRemote, task: &mut Task) -> RemovedLoad {
    task.avg
        .update_blocked_se(prev.last_update_time, task.se.weight());
    RemovedLoad {
        nr: 1,
        load_avg: task.avg.load_avg,
        util_avg: task.avg.util_avg,
        runnable_avg: task.avg.runnable_avg,
    }
}

fn check_cpu(prev: &PeltRemote, task: &Task) -> Result<(), RqError> {
    if task.cpu != Some(prev.cpu) || task.se.on_rq {
        return Err(RqError::WrongCpu {
            task: task.id,
            cpu: prev.cpu,
            task_cpu: task.cpu,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rq::{DequeueFlags, EnqueueFlags, RqConfig};
    use crate::types::{Capacity, CpuMask, TaskId};
    use crate::uclamp::TaskUclamp;
    use proptest::prelude::*;
    use std::vec::Vec;

    impl Rq {
        /// The `&mut Rq` version this module replaces, kept as the oracle of the pure one:
        /// called on the CPU the task slept on, after its clock update.
        fn migrate_task_rq_fair_oracle(&mut self, task: &mut Task) -> Result<(), RqError> {
            if task.cpu != Some(self.cpu()) || self.task(task.id).is_some() {
                return Err(RqError::WrongCpu {
                    task: task.id,
                    cpu: self.cpu(),
                    task_cpu: task.cpu,
                });
            }
            if task.avg.attached {
                let weight = task.se.weight();
                let idle = self.curr_is_idle();
                let now = self.clock_task();
                let pelt = *self.pelt_clock();
                let cfs = self.cfs_avg_mut();
                cfs.remove_entity_load_avg(&mut task.avg, weight);
                cfs.migrate_se_pelt_lag(&mut task.avg, weight, &pelt, idle, now);
            }
            task.avg.last_update_time = 0;
            task.avg.attached = false;
            Ok(())
        }
    }

    /// One step of a random history on one CPU with a few tasks; task 1 is the one that
    /// will sleep and be migrated.
    #[derive(Clone, Debug)]
    enum Step {
        Advance(u64),
        Wake(u8),
        Sleep(u8),
        Pick,
        Freq(u32),
        Blocked,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            4 => (1u64..12_000_000).prop_map(Step::Advance),
            2 => (1u8..4).prop_map(Step::Wake),
            2 => (1u8..4).prop_map(Step::Sleep),
            2 => Just(Step::Pick),
            1 => (200u32..=1024).prop_map(Step::Freq),
            1 => Just(Step::Blocked),
        ]
    }

    /// Replays `steps` on a fresh rq; returns it, the parked tasks and the time.
    fn replay(steps: &[Step], cap: u32, pelt_clock: bool) -> (Rq, Vec<Task>, u64) {
        let mut now = 1_000_000_000u64;
        let mut cfg = RqConfig::new(CpuId(0), 2);
        cfg.capacity_orig = Capacity(cap);
        cfg.features = cfg
            .features
            .with(crate::features::Feature::PELT_CLOCK, pelt_clock);
        let mut rq = Rq::new(cfg, Nanos(now));
        let mut parked: Vec<Task> = (1..4)
            .map(|i| Task::new(TaskId(i), 0, TaskUclamp::new(), CpuMask(0b11)).unwrap())
            .collect();
        for s in steps {
            match *s {
                Step::Advance(d) => {
                    now += d;
                    rq.update_rq_clock(Nanos(now)).unwrap();
                    if rq.curr().is_some() {
                        rq.task_tick();
                    }
                }
                Step::Wake(id) => {
                    if let Some(i) = parked.iter().position(|t| t.id == TaskId(id as u32)) {
                        let t = parked.swap_remove(i);
                        let f = if t.cpu.is_none() {
                            EnqueueFlags::NEW
                        } else {
                            EnqueueFlags::WAKEUP
                        };
                        rq.enqueue_task(t, f).unwrap();
                    }
                }
                Step::Sleep(id) => {
                    if let Ok(t) = rq.dequeue_task(TaskId(id as u32), DequeueFlags::SLEEP) {
                        parked.push(t);
                    }
                }
                Step::Pick => {
                    rq.pick_next_task();
                }
                Step::Freq(f) => rq.set_freq_scale(Capacity(f)),
                Step::Blocked => {
                    rq.update_blocked_averages();
                }
            }
            if rq.need_resched() {
                rq.pick_next_task();
            }
        }
        (rq, parked, now)
    }

    proptest! {
        /// The pure `migrate_task_rq_fair` over the published `PeltRemote`, with the
        /// removal handed back through `apply_removed`, leaves the task and the old CPU's
        /// signals exactly as the `&mut Rq` version did, at once and after the old CPU's
        /// later updates.
        #[test]
        fn pure_migrate_equals_the_rq_version(
            steps in proptest::collection::vec(step(), 1..60),
            cap in prop_oneof![Just(1024u32), Just(446u32)],
            pelt_clock in any::<bool>(),
            later in proptest::collection::vec(step(), 0..20),
            skew in 0u64..3_000_000,
        ) {
            let (mut a, pa, now) = replay(&steps, cap, pelt_clock);
            let (mut b, pb, _) = replay(&steps, cap, pelt_clock);
            // Migrate at a clock update some time after the history (the CPU may be idle).
            a.update_rq_clock(Nanos(now + skew)).unwrap();
            b.update_rq_clock(Nanos(now + skew)).unwrap();
            for (mut ta, mut tb) in pa.into_iter().zip(pb) {
                if ta.cpu.is_none() {
                    continue;
                }
                a.migrate_task_rq_fair_oracle(&mut ta).unwrap();
                let r = migrate_task_rq_fair(&b.pelt_remote(), &mut tb, b.clock_task()).unwrap();
                b.apply_removed(r);
                prop_assert_eq!(&ta, &tb);
                prop_assert_eq!(a.cfs_rq_avg(), b.cfs_rq_avg());
            }
            // The removals land at the same later update.
            let mut t = now + skew;
            for s in &later {
                if let Step::Advance(d) = *s {
                    t += d;
                    a.update_rq_clock(Nanos(t)).unwrap();
                    b.update_rq_clock(Nanos(t)).unwrap();
                    a.update_blocked_averages();
                    b.update_blocked_averages();
                    prop_assert_eq!(a.cfs_rq_avg(), b.cfs_rq_avg());
                }
            }
        }

        /// The pure `sync_entity_load_avg` equals the `&Rq` one (the cfs_rq's last update
        /// time is all it reads).
        #[test]
        fn pure_sync_equals_the_rq_version(
            steps in proptest::collection::vec(step(), 1..60),
            pelt_clock in any::<bool>(),
        ) {
            let (rq, parked, _) = replay(&steps, 1024, pelt_clock);
            for t in parked.into_iter().filter(|t| t.cpu.is_some()) {
                let mut ta = t.clone();
                let mut tb = t;
                if ta.avg.attached {
                    let w = ta.se.weight();
                    rq.cfs_rq_avg().sync_entity_load_avg(&mut ta.avg, w);
                }
                sync_entity_load_avg(&rq.pelt_remote(), &mut tb).unwrap();
                prop_assert_eq!(ta, tb);
            }
        }
    }

    #[test]
    fn a_task_of_another_cpu_is_refused() {
        let mut t = Task::new(TaskId(1), 0, TaskUclamp::new(), CpuMask(1)).unwrap();
        t.cpu = Some(CpuId(1));
        let p = PeltRemote::default();
        assert!(matches!(
            migrate_task_rq_fair(&p, &mut t, Nanos(0)),
            Err(RqError::WrongCpu { .. })
        ));
        assert!(sync_entity_load_avg(&p, &mut t).is_err());
    }
}
