//! Inter-processor interrupts on GIC SGIs.
//!
//! Linux: `arch/arm64/kernel/smp.c` (`enum ipi_msg_type`, `smp_cross_call`, `do_handle_IPI`,
//! `ipi_cpu_stop`, `smp_send_reschedule`). SGI numbers follow Linux's order (0 reschedule,
//! 1 call-function, 2 stop). Deliberate differences: one target per send (no cpumask fan-out),
//! no crash-stop/timer/irq-work IPIs yet, and a `Ping` kind that does nothing but count, for the
//! self tests and for waking a CPU out of `wfi`.

use core::sync::atomic::{AtomicU64, Ordering};

use asym_sched::types::CpuId;

use crate::gic::{self, GicError, IntId};
use crate::percpu::{current_cpu, PerCpu, MAX_CPUS};

/// The IPI kinds; the discriminant is the SGI number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum IpiKind {
    /// Ask the target to re-run its scheduler (Linux `IPI_RESCHEDULE`).
    Reschedule = 0,
    /// Run the function queued by [`crate::smp::run_on`] (Linux `IPI_CALL_FUNC`).
    CallFunction = 1,
    /// Take the target offline: IRQs masked, parked in `wfe` (Linux `IPI_CPU_STOP`).
    Stop = 2,
    /// Counted and otherwise ignored.
    Ping = 3,
    /// A frequency transition of the target's cpufreq domain completed: the thread running
    /// there takes the new frequency into its work account from the transition's instant
    /// ([`crate::sched::freq_rerate`]).
    FreqChange = 4,
}

/// How many IPI kinds exist (SGIs 0..NR_IPI are ours).
pub const NR_IPI: usize = 5;

impl IpiKind {
    /// All kinds, in SGI order.
    pub const ALL: [IpiKind; NR_IPI] = [
        IpiKind::Reschedule,
        IpiKind::CallFunction,
        IpiKind::Stop,
        IpiKind::Ping,
        IpiKind::FreqChange,
    ];

    fn from_sgi(sgi: u32) -> Option<IpiKind> {
        IpiKind::ALL.get(sgi as usize).copied()
    }
}

/// IPIs received, per CPU and kind.
static RECEIVED: PerCpu<[AtomicU64; NR_IPI]> =
    PerCpu::new([const { [const { AtomicU64::new(0) }; NR_IPI] }; MAX_CPUS]);

/// Installs the SGI handlers. Run once on the boot CPU after [`gic::init`]; each CPU's
/// `gic::init_cpu` enables SGIs on that CPU.
pub fn init() -> Result<(), GicError> {
    for kind in IpiKind::ALL {
        gic::register_handler(IntId::sgi(kind as u8), handle_ipi)?;
    }
    Ok(())
}

/// Sends `kind` to `target` (Linux `smp_cross_call` for one CPU). Memory written before the call
/// is visible to the target's handler.
///
/// Then a `yield`: a hint on hardware, but under QEMU's round-robin TCG (`-icount`) an SGI to
/// another vCPU only marks it pending (every vCPU runs on the sender's host thread, so QEMU
/// does not kick it) and the target runs when the sender's time slice ends, up to a tick of
/// guest time later if the sender stays busy. `yield` ends the slice. Seen without it: a
/// thread forked onto an idle CPU by a spawner that went on spawning waited up to 1.6 ms of
/// guest time to run; the runnable_avg that wait added (2 % above util_avg) kept util_est's
/// ewma at the fork-time 512 (`util_est_update` keeps the ewma while runnable exceeds util by
/// more than the margin), and the task stayed misfit for the LITTLE CPUs for tens of periods.
pub fn send(target: CpuId, kind: IpiKind) -> Result<(), GicError> {
    send_no_yield(target, kind)?;
    crate::arch::aarch64::cpu_regs::cpu_yield();
    Ok(())
}

/// [`send`] without the `yield`, for a sender in an interrupt handler: the tick's NOHZ kick.
/// Under QEMU's round-robin TCG with `-icount`, a vCPU that yields runs again only after the
/// others have used their slices; when they are busy that is more than a tick of guest time,
/// so the yielding CPU resumes with its next tick already due, kicks and yields again, and
/// never gets back to its thread (seen: a CPU whose `NEED_RESCHED` stayed set for 40 s of guest
/// time while its tick kicked on every pass). The kicked CPU balances a slice later instead.
pub fn send_no_yield(target: CpuId, kind: IpiKind) -> Result<(), GicError> {
    gic::send_sgi(kind as u8, target)
}

/// How many IPIs of `kind` `cpu` has received.
pub fn received(cpu: CpuId, kind: IpiKind) -> u64 {
    RECEIVED
        .get(cpu)
        .map_or(0, |r| r[kind as usize].load(Ordering::Acquire))
}

/// The SGI handler (Linux `do_handle_IPI`).
fn handle_ipi(intid: IntId) {
    let cpu = current_cpu();
    let Some(kind) = IpiKind::from_sgi(intid.0) else {
        return;
    };
    match kind {
        // The scheduler's need-resched flag; preemption happens on the way out of this IRQ.
        IpiKind::Reschedule => crate::sched::on_resched_ipi(cpu),
        IpiKind::CallFunction => crate::smp::handle_call_function(cpu),
        IpiKind::Stop => {
            RECEIVED.of(cpu)[kind as usize].fetch_add(1, Ordering::AcqRel);
            crate::smp::park_this_cpu(cpu);
        }
        IpiKind::Ping => {}
        IpiKind::FreqChange => crate::sched::freq_rerate(cpu),
    }
    RECEIVED.of(cpu)[kind as usize].fetch_add(1, Ordering::AcqRel);
}
