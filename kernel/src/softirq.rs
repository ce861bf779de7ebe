//! Softirqs: deferred work raised from interrupt context and run on the way out of the
//! interrupt (Linux `kernel/softirq.c`: `raise_softirq`, `irq_exit` → `invoke_softirq` →
//! `__do_softirq`). One vector exists, `SCHED_SOFTIRQ` (7), whose action is the periodic load
//! balance (`sched_balance_softirq`, [`crate::sched::balance`]).
//!
//! - A per-CPU pending bitmask (an atomic, Linux `local_softirq_pending()`): the tick raises
//!   `SCHED_SOFTIRQ` on its own CPU when the policy crate's `sched_balance_trigger` says a
//!   balance is due; a NOHZ balance kick raises it on an idle CPU, then wakes that CPU with an
//!   IPI ([`raise_on`]).
//! - [`irq_exit`], called by the IRQ vector after the handler and before the preemption check
//!   (Linux `irq_exit_rcu` runs softirqs before `arm64_preempt_schedule_irq`), runs the pending
//!   actions on this CPU's IRQ stack, as arm64's `do_softirq_own_stack` does: the interrupted
//!   thread's 16 KiB stack is not charged for a balance.
//! - Every raise, entry and exit is traced (`softirq_raise` / `softirq_entry` /
//!   `softirq_exit`, `vec=7 [action=SCHED]`) and counted per CPU ([`counts`]).
//!
//! - `bench=sched-costs` ([`cost_recording`]) records each `SCHED_SOFTIRQ` run's guest time
//!   per CPU ([`cost_samples`]).
//!
//! Deliberate differences: the actions run with IRQs masked (Linux's `__do_softirq` unmasks
//! them): a balance then cannot be interrupted between the source's and the destination's
//! run-queue lock with tasks in transit, and never nests with a newidle balance, which also
//! runs with IRQs masked (as Linux's does, `raw_spin_rq_unlock` keeping them off). No
//! `ksoftirqd`, no restart loop: an action raised while the actions run waits for the next
//! interrupt exit.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use asym_sched::types::CpuId;

use crate::dt::MAX_CPUS;
use crate::percpu::{current_cpu, PerCpu};
use crate::tracing::{self, SoftirqPoint};

/// `SCHED_SOFTIRQ` (`include/linux/interrupt.h`).
pub const SCHED_SOFTIRQ: u32 = 7;

/// Per CPU: the raised vectors (bit `n`: vector `n`).
static PENDING: PerCpu<AtomicU32> = PerCpu::new([const { AtomicU32::new(0) }; MAX_CPUS]);
/// Per CPU: the actions are running (Linux `in_serving_softirq()`).
static SERVING: PerCpu<AtomicBool> = PerCpu::new([const { AtomicBool::new(false) }; MAX_CPUS]);
/// Per CPU: a raise by another CPU not traced yet.
static REMOTE: PerCpu<AtomicBool> = PerCpu::new([const { AtomicBool::new(false) }; MAX_CPUS]);
/// Per CPU: `SCHED_SOFTIRQ` raises and runs.
static RAISED: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
static RAN: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);

/// Samples [`cost_samples`] keeps per CPU (the first ones after [`cost_reset`]).
pub const COST_SAMPLES: usize = 1024;
/// `bench=sched-costs` records `SCHED_SOFTIRQ` runs.
static COST_ON: AtomicBool = AtomicBool::new(false);
/// Per CPU: the runs recorded since [`cost_reset`] (some may not have fitted).
static COST_N: PerCpu<AtomicU32> = PerCpu::new([const { AtomicU32::new(0) }; MAX_CPUS]);
/// Per CPU: [`CostSample::pack`]ed runs.
static COST: PerCpu<[AtomicU32; COST_SAMPLES]> =
    PerCpu::new([const { [const { AtomicU32::new(0) }; COST_SAMPLES] }; MAX_CPUS]);

/// One `SCHED_SOFTIRQ` run as `bench=sched-costs` records it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CostSample {
    /// Guest ns in the action (`sched_balance_softirq`), saturating at 2^24 - 1.
    pub ns: u32,
    /// It balanced this CPU's own domains (`sched_balance_softirq`'s periodic balance),
    /// rather than only other idle CPUs' for a NOHZ kick.
    pub periodic: bool,
    /// A thread ran on this CPU when the interrupt came (its run queue had one).
    pub busy: bool,
    /// This CPU's `sched_balance_rq` calls in the run (the domains whose interval was due),
    /// saturating at 15.
    pub lb_runs: u8,
}

impl CostSample {
    const NS_MASK: u32 = (1 << 24) - 1;

    fn pack(self) -> u32 {
        self.ns.min(Self::NS_MASK)
            | u32::from(self.lb_runs.min(15)) << 24
            | u32::from(self.periodic) << 28
            | u32::from(self.busy) << 29
    }

    fn unpack(w: u32) -> CostSample {
        CostSample {
            ns: w & Self::NS_MASK,
            lb_runs: ((w >> 24) & 15) as u8,
            periodic: w & (1 << 28) != 0,
            busy: w & (1 << 29) != 0,
        }
    }
}

/// Raises `nr` on the calling CPU (Linux `raise_softirq_irqoff`, from interrupt context): it
/// runs at this interrupt's exit. An unknown vector is ignored.
pub fn raise_softirq(nr: u32) {
    raise_on(current_cpu(), nr);
}

/// Raises `nr` on `cpu` (any CPU; Linux's NOHZ kick raises on the kicked CPU from its IPI):
/// it runs at the next interrupt exit there, so a remote raise is followed by an IPI; its
/// `softirq_raise` is recorded there, at that exit, as Linux records it on the kicked CPU.
pub fn raise_on(cpu: CpuId, nr: u32) {
    if nr != SCHED_SOFTIRQ {
        return;
    }
    let Some(p) = PENDING.get(cpu) else { return };
    RAISED.of(cpu).fetch_add(1, Ordering::Relaxed);
    if cpu == current_cpu() {
        p.fetch_or(1 << nr, Ordering::AcqRel);
        tracing::softirq(SoftirqPoint::Raise);
    } else {
        // Traced by `cpu` when it takes it (Linux raises it there, from the kick's IPI).
        REMOTE.of(cpu).store(true, Ordering::Release);
        p.fetch_or(1 << nr, Ordering::AcqRel);
    }
}

/// Whether something is pending on the calling CPU (IRQs masked), outside the actions.
pub fn pending_here() -> bool {
    let cpu = current_cpu();
    PENDING.of(cpu).load(Ordering::Acquire) != 0 && !SERVING.of(cpu).load(Ordering::Relaxed)
}

/// Runs the calling CPU's pending actions (Linux `__do_softirq`): from the IRQ vector on the
/// way out of an interrupt, IRQs masked, on this CPU's IRQ stack.
pub fn irq_exit() {
    let cpu = current_cpu();
    let serving = SERVING.of(cpu);
    if serving.swap(true, Ordering::Relaxed) {
        return;
    }
    if REMOTE.of(cpu).swap(false, Ordering::AcqRel) {
        tracing::softirq(SoftirqPoint::Raise);
    }
    let pending = PENDING.of(cpu).swap(0, Ordering::AcqRel);
    if pending & (1 << SCHED_SOFTIRQ) != 0 {
        tracing::softirq(SoftirqPoint::Entry);
        RAN.of(cpu).fetch_add(1, Ordering::Relaxed);
        if COST_ON.load(Ordering::Relaxed) {
            balance_recorded(cpu);
        } else {
            crate::sched::balance::sched_balance_softirq(cpu);
        }
        tracing::softirq(SoftirqPoint::Exit);
    }
    serving.store(false, Ordering::Relaxed);
}

/// `(raised, ran)` `SCHED_SOFTIRQ` counts of `cpu` so far (`/proc/softirqs`' SCHED column
/// counts the runs).
pub fn counts(cpu: CpuId) -> (u64, u64) {
    (
        RAISED.get(cpu).map_or(0, |a| a.load(Ordering::Relaxed)),
        RAN.get(cpu).map_or(0, |a| a.load(Ordering::Relaxed)),
    )
}

/// `sched_balance_softirq` on `cpu`, its guest time recorded (`bench=sched-costs`).
#[inline(never)]
fn balance_recorded(cpu: CpuId) {
    use crate::sched::balance;
    let busy = crate::sched::snapshot(cpu).is_some_and(|s| s.nr_running > 0);
    let before = balance::stats(cpu);
    let t0 = crate::arch::counter();
    balance::sched_balance_softirq(cpu);
    let t1 = crate::arch::counter();
    let after = balance::stats(cpu);
    let sample = CostSample {
        ns: crate::time::cyc_to_ns(t1 - t0).min(u64::from(u32::MAX)) as u32,
        periodic: after.periodic > before.periodic,
        busy,
        lb_runs: (after.lb_runs - before.lb_runs).min(15) as u8,
    };
    let i = COST_N.of(cpu).fetch_add(1, Ordering::Relaxed) as usize;
    if let Some(slot) = COST.of(cpu).get(i) {
        slot.store(sample.pack(), Ordering::Relaxed);
    }
}

/// Starts or stops recording each `SCHED_SOFTIRQ` run's cost ([`cost_samples`]).
pub fn cost_recording(on: bool) {
    COST_ON.store(on, Ordering::Relaxed);
}

/// Forgets every CPU's recorded runs.
pub fn cost_reset() {
    for (_, n) in COST_N.iter() {
        n.store(0, Ordering::Relaxed);
    }
}

/// `cpu`'s runs recorded since [`cost_reset`] (at most [`COST_SAMPLES`]) into `out`; returns
/// how many runs were recorded in all.
pub fn cost_samples(cpu: CpuId, out: &mut alloc::vec::Vec<CostSample>) -> u64 {
    let (Some(n), Some(buf)) = (COST_N.get(cpu), COST.get(cpu)) else {
        return 0;
    };
    let n = n.load(Ordering::Relaxed) as usize;
    out.extend(
        buf[..n.min(COST_SAMPLES)]
            .iter()
            .map(|w| CostSample::unpack(w.load(Ordering::Relaxed))),
    );
    n as u64
}
