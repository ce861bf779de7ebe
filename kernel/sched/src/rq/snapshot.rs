//! The one per-CPU record other CPUs read: [`RqSnapshot`].
//!
//! Linux reads remote run queues locklessly where a stale value is harmless: `cpu_util`,
//! `capacity_of`, `idle_cpu`, `rq->misfit_task_load`, `uclamp_rq_get` in
//! `find_energy_efficient_cpu`, `select_idle_capacity`, `sugov_get_util` and
//! `update_sg_lb_stats` are all `READ_ONCE`s of another CPU's `struct rq`. Here the owner
//! builds a value ([`Rq::snapshot`]) under its rq lock and publishes it (the kernel: one
//! per CPU behind a seqlock or leaf lock, at the end of each rq-locked section that changed
//! it; the simulator: before each read), and every reader of another CPU — EAS
//! ([`crate::eas`]), the wake-up path ([`crate::wakeup`]), schedutil
//! ([`crate::schedutil`]) and the load balancer's statistics — takes `&[RqSnapshot]`
//! indexed by CPU, never another CPU's [`Rq`].

use crate::cpu_util::{CfsRqUtil, CpuCapacityInfo, CpuSnapshot, RqNonCfsUtil};
use crate::rq::{PeltRemote, Rq};
use crate::types::{Capacity, CpuId, Nanos};
use crate::uclamp::ClampRange;

/// What other CPUs read about one run queue without its lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RqSnapshot {
    /// `cpu_util()`'s inputs: the CPU, `capacity_orig` and the root cfs_rq's
    /// `util_avg`, `runnable_avg` and `util_est`.
    pub util: CpuSnapshot,
    /// `capacity_of`, `arch_scale_cpu_capacity` and `get_actual_cpu_capacity` (no
    /// RT/DL/irq or thermal pressure here: all three are `capacity_orig`).
    pub capacity: CpuCapacityInfo,
    /// RT/DL/irq utilisation for `effective_cpu_util()` (none here: one class).
    pub non_cfs: RqNonCfsUtil,
    /// The root cfs_rq's `avg.load_avg` (`cpu_load`, `find_busiest_queue`).
    pub load_avg: u64,
    /// The root cfs_rq's `avg.runnable_avg`, unsaturated (`group_runnable`).
    pub runnable_avg: u64,
    /// `rq->nr_running` (= `cfs.h_nr_running`: one class).
    pub nr_running: u32,
    /// `available_idle_cpu()`: nothing running, nothing queued.
    pub idle: bool,
    /// `rq->idle_stamp`: when the CPU last went idle without pulling work (`None`: 0,
    /// it has run something since; the fork path prefers the most recently idled CPU).
    pub idle_stamp: Option<Nanos>,
    /// `uclamp_rq_get(rq, UCLAMP_MIN/MAX)`.
    pub rq_clamp: ClampRange,
    /// `uclamp_rq_is_idle(rq)`: no task is contributing clamps.
    pub uclamp_rq_idle: bool,
    /// `rq->misfit_task_load`.
    pub misfit_task_load: u64,
    /// `rq->next_balance`.
    pub next_balance: Nanos,
    /// `tick_nohz_get_idle_calls_cpu()`: how often the CPU entered its idle loop.
    pub idle_calls: u64,
    /// In `cpu_online_mask`. A run queue's own snapshot says true; the kernel sets it from its
    /// online mask when it reads one (a CPU `maxcpus=` left down is not online).
    pub online: bool,
    /// The PELT clocks a remote waker reads ([`crate::rq::migrate_task_rq_fair`]).
    pub pelt: PeltRemote,
}

impl RqSnapshot {
    /// An idle, empty CPU of capacity `capacity_orig`: zero signals, no clamps, online.
    pub fn idle(cpu: CpuId, capacity_orig: Capacity) -> RqSnapshot {
        RqSnapshot {
            util: CpuSnapshot {
                cpu,
                capacity_orig,
                cfs: CfsRqUtil::default(),
            },
            capacity: CpuCapacityInfo::unpressured(capacity_orig),
            non_cfs: RqNonCfsUtil::default(),
            load_avg: 0,
            runnable_avg: 0,
            nr_running: 0,
            idle: true,
            idle_stamp: None,
            rq_clamp: ClampRange::NONE,
            uclamp_rq_idle: true,
            misfit_task_load: 0,
            next_balance: Nanos(0),
            idle_calls: 0,
            online: true,
            pelt: PeltRemote {
                cpu,
                idle: true,
                ..PeltRemote::default()
            },
        }
    }

    /// The CPU.
    pub fn cpu(&self) -> CpuId {
        self.util.cpu
    }

    /// This CPU makes the root domain overloaded: two tasks, or a misfit one (the condition
    /// v6.12's `update_sg_lb_stats` and `add_nr_running` set `rd->overloaded` on).
    pub fn overloaded(&self) -> bool {
        self.nr_running > 1 || self.misfit_task_load > 0
    }
}

impl Rq {
    /// This CPU makes the root domain overloaded as it is now: what its next snapshot's
    /// [`RqSnapshot::overloaded`] will say.
    pub fn overloaded(&self) -> bool {
        self.nr_running() > 1 || self.misfit_task_load() > 0
    }

    /// This run queue as other CPUs may see it.
    pub fn snapshot(&self) -> RqSnapshot {
        let avg = self.cfs_avg();
        RqSnapshot {
            util: self.cpu_snapshot(),
            capacity: CpuCapacityInfo::unpressured(self.capacity_orig()),
            non_cfs: RqNonCfsUtil::default(),
            load_avg: avg.load_avg,
            runnable_avg: avg.runnable_avg,
            nr_running: self.nr_running(),
            idle: self.curr().is_none() && self.nr_running() == 0,
            idle_stamp: self.idle_stamp(),
            rq_clamp: self.uclamp_range(),
            uclamp_rq_idle: self.uclamp().is_idle(),
            misfit_task_load: self.misfit_task_load(),
            next_balance: self.next_balance(),
            idle_calls: self.idle_calls(),
            online: true,
            pelt: self.pelt_remote(),
        }
    }
}
