//! The per-CPU stopper: a thread per CPU that preempts whatever runs there and does its work
//! with the previous thread off the CPU (Linux `kernel/stop_machine.c`: `cpu_stopper`,
//! `stop_one_cpu_nowait`, `cpu_stopper_thread`; the stop class, `kernel/sched/stop_task.c`).
//!
//! - Each CPU's stopper (`migration/N`) is spawned at boot in a slot of its own, on no run
//!   queue: the policy crate never sees it. Its work is queued under its CPU's rq lock
//!   ([`stop_one_cpu_nowait`] sets `CpuSched::stop_pending`) and the CPU is sent a reschedule
//!   request; `schedule()` there, seeing the flag, puts the running fair task back in its run
//!   queue (still queued, `put_prev_task`) and switches to the stopper before asking the crate
//!   for a pick, as `pick_next_task` tries the stop class first. Once the stopper runs, the
//!   preempted thread's registers are saved (`p->on_cpu` clear), so it may be detached.
//! - The stopper runs its work with preemption disabled (nothing preempts the stop class) and
//!   then calls `schedule()`, which, with nothing pending, asks the crate for a pick.
//! - The one kind of work is the active balance in flight from this CPU
//!   (`CpuSched::active_balance`, Linux's `rq->active_balance_work`):
//!   [`super::balance::active_load_balance_cpu_stop`].
//!
//! Deliberate differences: no work list (`cpu_stop_work`) and no `stop_machine`: the only
//! work is the per-run-queue active balance, of which at most one is in flight
//! (`rq->active_balance`), so a flag under the rq lock is the whole queue. While the stopper
//! runs, the crate's run queue has no current task (it counts as neither idle nor busy: the
//! tick only decays its blocked averages).

use asym_sched::types::CpuId;

use super::CpuSched;
use crate::task::{self, SpawnError, ThreadId};

/// Spawns `cpu`'s stopper thread (boot).
pub(super) fn spawn(cpu: CpuId) -> Result<ThreadId, SpawnError> {
    task::spawn_stopper(cpu, stopper_main)
}

/// `stop_one_cpu_nowait` under the target CPU's rq lock: its stopper runs at the CPU's next
/// `schedule()`; the caller then sends it a reschedule request (`super::resched_cpu`), after
/// dropping the lock. False if that CPU has no stopper.
pub(super) fn stop_one_cpu_nowait(cs: &mut CpuSched) -> bool {
    if cs.stopper.is_none() {
        return false;
    }
    cs.stop_pending = true;
    true
}

/// `cpu_stopper_thread`: take the pending work under the rq lock, do it, go back to
/// `schedule()`.
fn stopper_main(cpu: usize) {
    let cpu = CpuId(cpu as u16);
    loop {
        task::preempt_disable();
        let work = super::STATE
            .get()
            .and_then(|st| st.cpus.get(cpu.index()))
            .is_some_and(|l| {
                let mut g = l.lock();
                let pending = g.stop_pending;
                g.stop_pending = false;
                pending && g.active_balance.is_some()
            });
        if work {
            super::balance::active_load_balance_cpu_stop(cpu);
        }
        task::preempt_enable_no_resched();
        super::schedule();
    }
}
