//! The run queue's vocabulary: [`Task`], the enqueue/dequeue flags, [`Resched`], the
//! cpufreq request and the errors (Linux's `task_struct` fair-class fields and the
//! `ENQUEUE_*`/`DEQUEUE_*` flags of `sched.h`).

use core::fmt;

use crate::fair::{FairError, Nice, SchedEntity};
use crate::flags::sched_flags;
use crate::pelt::{init_entity_runnable_average, SchedAvg};
use crate::types::{CpuId, CpuMask, Nanos, TaskId, Util};
use crate::uclamp::TaskUclamp;
use crate::util_est::task_util_est_raw;

/// A task of the fair class: its EEVDF entity, PELT signals and clamps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Task {
    /// The task's id.
    pub id: TaskId,
    /// Its nice value.
    pub nice: Nice,
    /// `p->se` (EEVDF part).
    pub se: SchedEntity,
    /// `p->se.avg` (PELT signals and util_est).
    pub avg: SchedAvg,
    /// `p->uclamp_req` / `p->uclamp`.
    pub uclamp: TaskUclamp,
    /// `p->cpus_mask`.
    pub cpus_allowed: CpuMask,
    /// `task_cpu(p)`: the CPU whose cfs_rq holds (or last held) its signals; `None`
    /// for a task never enqueued.
    pub cpu: Option<CpuId>,
    /// `p->in_iowait`: it slept on I/O; its wake-up enqueue kicks cpufreq with IOWAIT.
    pub in_iowait: bool,
}

impl Task {
    /// `sched_fork` for a fair task: zero lag, `init_entity_runnable_average` (a new
    /// task starts with `load_avg = weight`, util 0).
    pub fn new(
        id: TaskId,
        nice: i32,
        uclamp: TaskUclamp,
        cpus_allowed: CpuMask,
    ) -> Result<Task, RqError> {
        let nice = Nice::new(nice).map_err(|e| RqError::Fair { task: id, err: e })?;
        if cpus_allowed.is_empty() {
            return Err(RqError::EmptyAffinity { task: id });
        }
        let se = SchedEntity::new(id, nice);
        Ok(Task {
            id,
            nice,
            avg: init_entity_runnable_average(se.weight()),
            se,
            uclamp,
            cpus_allowed,
            cpu: None,
            in_iowait: false,
        })
    }

    /// `task_util(p)`.
    pub fn util_avg(&self) -> Util {
        Util(self.avg.util_avg as u32)
    }

    /// `_task_util_est(p)`.
    pub fn util_est(&self) -> Util {
        task_util_est_raw(&self.avg)
    }
}

sched_flags! {
    /// Enqueue flags (`ENQUEUE_*`); [`EnqueueFlags::NONE`]: e.g. `attach_task` after load
    /// balancing.
    pub struct EnqueueFlags(u8) {
        /// `ENQUEUE_WAKEUP`: the task wakes up.
        const WAKEUP = 1;
        /// `ENQUEUE_INITIAL` via `wake_up_new_task`: a new task (initial util, half slice).
        const NEW = 2;
        /// `ENQUEUE_MIGRATED`: it woke up on a different CPU than it slept on.
        const MIGRATED = 4;
        /// `ENQUEUE_RESTORE`: re-enqueue after a `DEQUEUE_SAVE` (attribute change).
        const RESTORE = 8;
    }
}

sched_flags! {
    /// Dequeue flags (`DEQUEUE_*`).
    pub struct DequeueFlags(u8) {
        /// `DEQUEUE_SLEEP`: the task blocks (its signals stay on this CPU as blocked load).
        const SLEEP = 1;
        /// `task_on_rq_migrating`: it moves to another rq while runnable (`DO_DETACH`).
        const MIGRATING = 2;
        /// `DEQUEUE_SAVE` (without `DEQUEUE_MOVE`): it comes straight back.
        const SAVE = 4;
        /// `DEQUEUE_SPECIAL`: the task blocks in a special state (`TASK_DEAD`, stopped,
        /// traced, parked, frozen), which must not suffer the spurious wake-up a delayed
        /// dequeue relies on: it is never delayed.
        const SPECIAL = 8;
    }
}

/// What [`Rq::block_task_into`](crate::rq::Rq::block_task_into) did with a task that blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Block {
    /// Dequeued: the task is in the caller's slot, owned by the caller while it sleeps.
    Dequeued,
    /// `DELAY_DEQUEUE`: not eligible, so it stays queued here (`se->sched_delayed`); its
    /// dequeue is finished by a later pick (which hands it to the caller then) unless a
    /// wake-up requeues it first ([`Rq::requeue_delayed_task`](crate::rq::Rq::requeue_delayed_task)).
    Delayed,
}

/// Whether the running task should be preempted (`resched_curr`): the answer of
/// [`Rq::task_tick`](crate::rq::Rq::task_tick) and of the wake-up steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Resched {
    /// Let it run.
    #[default]
    No,
    /// `TIF_NEED_RESCHED`: call `schedule()` (on another CPU: send it a reschedule IPI).
    Yes,
}

impl Resched {
    /// `Yes` when `b`.
    pub const fn from_bool(b: bool) -> Resched {
        if b {
            Resched::Yes
        } else {
            Resched::No
        }
    }

    /// Whether a reschedule is needed.
    pub const fn is_yes(self) -> bool {
        matches!(self, Resched::Yes)
    }
}

/// A request to run the cpufreq governor (`cpufreq_update_util(rq, flags)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpufreqUpdate {
    /// `SCHED_CPUFREQ_IOWAIT`: an iowait task was enqueued.
    pub iowait: bool,
}

/// Bad input to a run-queue operation; each variant names the task and CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RqError {
    /// A fair-class parameter was invalid (e.g. nice out of range).
    Fair {
        /// The task.
        task: TaskId,
        /// What was wrong.
        err: FairError,
    },
    /// A task with no allowed CPU.
    EmptyAffinity {
        /// The task.
        task: TaskId,
    },
    /// The task is already queued on this CPU.
    AlreadyQueued {
        /// The task.
        task: TaskId,
        /// This CPU.
        cpu: CpuId,
    },
    /// The task is not queued on this CPU.
    NotQueued {
        /// The task.
        task: TaskId,
        /// This CPU.
        cpu: CpuId,
    },
    /// The task may not run on this CPU (`cpus_allowed`).
    NotAllowed {
        /// The task.
        task: TaskId,
        /// This CPU.
        cpu: CpuId,
    },
    /// The task's signals are still attached to another CPU's cfs_rq: call
    /// [`migrate_task_rq_fair`](crate::rq::migrate_task_rq_fair) for `attached_to` first (or detach it).
    StillAttached {
        /// The task.
        task: TaskId,
        /// This CPU.
        cpu: CpuId,
        /// The CPU whose cfs_rq still holds its signals.
        attached_to: CpuId,
    },
    /// [`migrate_task_rq_fair`](crate::rq::migrate_task_rq_fair) or a blocked-task operation on the wrong CPU.
    WrongCpu {
        /// The task.
        task: TaskId,
        /// This CPU.
        cpu: CpuId,
        /// `task_cpu(p)`.
        task_cpu: Option<CpuId>,
    },
    /// The run queue already holds [`RqConfig::max_tasks`](crate::rq::RqConfig::max_tasks) tasks.
    Full {
        /// The task refused.
        task: TaskId,
        /// This CPU.
        cpu: CpuId,
        /// The capacity.
        max_tasks: usize,
    },
    /// [`Rq::enqueue_task_from`](crate::rq::Rq::enqueue_task_from) was handed an empty slot.
    NoTask {
        /// This CPU.
        cpu: CpuId,
    },
    /// The task is queued here but not delayed (a requeue of a task that is not
    /// `sched_delayed`).
    NotDelayed {
        /// The task.
        task: TaskId,
        /// This CPU.
        cpu: CpuId,
    },
    /// The clock went backwards.
    ClockWentBackwards {
        /// This CPU.
        cpu: CpuId,
        /// The current `rq->clock`.
        clock: Nanos,
        /// The earlier time given.
        now: Nanos,
    },
}

impl fmt::Display for RqError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RqError::Fair { task, err } => write!(f, "task {}: {err}", task.0),
            RqError::EmptyAffinity { task } => write!(f, "task {}: empty cpus_allowed", task.0),
            RqError::AlreadyQueued { task, cpu } => {
                write!(f, "rq {}: task {} is already queued here", cpu.0, task.0)
            }
            RqError::NotQueued { task, cpu } => {
                write!(f, "rq {}: task {} is not queued here", cpu.0, task.0)
            }
            RqError::NotAllowed { task, cpu } => {
                write!(
                    f,
                    "rq {}: task {} may not run here (cpus_allowed)",
                    cpu.0, task.0
                )
            }
            RqError::StillAttached {
                task,
                cpu,
                attached_to,
            } => write!(
                f,
                "rq {}: task {} is still attached to cpu {}; migrate_task_rq_fair there first",
                cpu.0, task.0, attached_to.0
            ),
            RqError::WrongCpu {
                task,
                cpu,
                task_cpu,
            } => write!(
                f,
                "rq {}: task {} belongs to cpu {:?}, not this one",
                cpu.0, task.0, task_cpu
            ),
            RqError::Full {
                task,
                cpu,
                max_tasks,
            } => write!(
                f,
                "rq {}: task {} refused: the run queue is full ({max_tasks} tasks)",
                cpu.0, task.0
            ),
            RqError::NoTask { cpu } => write!(f, "rq {}: no task to enqueue", cpu.0),
            RqError::NotDelayed { task, cpu } => {
                write!(f, "rq {}: task {} is queued but not delayed", cpu.0, task.0)
            }
            RqError::ClockWentBackwards { cpu, clock, now } => write!(
                f,
                "rq {}: clock went backwards from {} ns to {} ns",
                cpu.0, clock.0, now.0
            ),
        }
    }
}

/// A refused enqueue: why, and the task handed back so it is not lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnqueueError {
    /// Why.
    pub reason: RqError,
    /// The task, unchanged.
    pub task: Task,
}
