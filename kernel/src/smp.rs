//! Secondary CPU bring-up with PSCI `CPU_ON`, the online mask, and cross-CPU function calls.
//!
//! Linux: `arch/arm64/kernel/smp.c` (`smp_prepare_cpus`, `__cpu_up` waiting on
//! `cpu_running` with a timeout, `secondary_start_kernel`, `smp_cross_call`), `kernel/smp.c`
//! (`smp_call_function_single`, `on_each_cpu`) and `arch/arm64/kernel/psci.c`
//! (`cpu_psci_cpu_boot`).
//!
//! Deliberate differences: all secondaries are started at once and then waited for (Linux
//! brings them up one by one); a CPU that fails to start is reported and left out, never waited
//! for forever. A cross call has one slot per target CPU (no call-single queue), runs in the
//! target's IRQ handler, and its caller spins with a timeout instead of sleeping. Do not call
//! [`run_on`]/[`run_on_all_cpus`] with IRQs masked while another CPU may be calling this CPU:
//! the two would wait for each other until the timeout.

use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use asym_sched::types::CpuId;

use crate::arch::aarch64::cpu_regs;
use crate::dt::Platform;
use crate::gic::GicError;
use crate::ipi::{self, IpiKind};
use crate::percpu::{current_cpu, PerCpu, MAX_CPUS};
use crate::sync::IrqSpinLock;
use crate::{psci, timer};

/// How long [`start_secondaries`] waits for each CPU, in guest microseconds.
const CPU_UP_TIMEOUT_US: u64 = 1_000_000;
/// How long a cross call waits for the target, in guest microseconds.
const CALL_TIMEOUT_US: u64 = 1_000_000;

/// What went wrong in a cross-CPU call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SmpError {
    /// The target CPU is not online (or does not exist).
    Offline { cpu: u16 },
    /// The target's call slot stayed occupied by an earlier call.
    Busy { cpu: u16 },
    /// The target did not finish the function in time.
    Timeout { cpu: u16 },
    /// The call-function IPI could not be sent.
    Ipi(GicError),
}

impl fmt::Display for SmpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SmpError::Offline { cpu } => write!(f, "smp: cpu {cpu} is not online"),
            SmpError::Busy { cpu } => write!(f, "smp: cpu {cpu} still runs an earlier cross call"),
            SmpError::Timeout { cpu } => {
                write!(
                    f,
                    "smp: cpu {cpu} did not run the cross call within {CALL_TIMEOUT_US} us"
                )
            }
            SmpError::Ipi(e) => write!(f, "smp: {e}"),
        }
    }
}

/// CPUs the kernel brings up: the device tree's count, capped by [`set_maxcpus`].
static NR_CPUS: AtomicUsize = AtomicUsize::new(1);
static MAXCPUS: AtomicUsize = AtomicUsize::new(MAX_CPUS);
static ONLINE: PerCpu<AtomicBool> = PerCpu::new([const { AtomicBool::new(false) }; MAX_CPUS]);
static ONLINE_MASK: AtomicU64 = AtomicU64::new(0);
/// Counter value when the CPU came online.
static ONLINE_AT: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
/// Set by a secondary that started but gave up (no GIC interface, no tick) after printing why,
/// so [`start_secondaries`] stops waiting for it at once: waiting out the timeout would spin the
/// boot CPU for a second of guest time, which costs seconds of real time under `-icount`.
static GAVE_UP: PerCpu<AtomicBool> = PerCpu::new([const { AtomicBool::new(false) }; MAX_CPUS]);
/// `MPIDR_EL1` affinity as the CPU itself read it.
static HW_MPIDR: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(u64::MAX) }; MAX_CPUS]);

/// A queued cross call: the function and its sequence number.
type Call = (fn(CpuId), u64);
static CALL_SLOT: PerCpu<IrqSpinLock<Option<Call>>> =
    PerCpu::new([const { IrqSpinLock::new(None) }; MAX_CPUS]);
/// Highest sequence number each CPU has completed.
static CALL_DONE: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
static CALL_SEQ: AtomicU64 = AtomicU64::new(0);

/// Limits bring-up to `n` CPUs (the `maxcpus=` option; the boot CPU always counts). Call
/// before [`start_secondaries`].
pub fn set_maxcpus(n: usize) {
    MAXCPUS.store(n.clamp(1, MAX_CPUS), Ordering::Relaxed);
}

/// Marks the boot CPU online, installs the IPI handlers and starts every other device-tree CPU
/// (up to `maxcpus`) with PSCI `CPU_ON`, then waits for each to report online, at most
/// [`CPU_UP_TIMEOUT_US`] of guest time. Failures are printed per CPU. Returns the number of CPUs
/// online. Call after [`crate::gic::init`] and [`crate::timer::init`].
pub fn start_secondaries(plat: &'static Platform) -> usize {
    let boot = current_cpu();
    let nr = plat.cpus.len().min(MAXCPUS.load(Ordering::Relaxed)).max(1);
    NR_CPUS.store(nr, Ordering::Relaxed);
    mark_online(boot);
    if let Err(e) = ipi::init() {
        crate::println!("smp: IPIs unavailable, secondaries not started: {}", e);
        return online_count();
    }

    let entry = crate::boot::secondary_entry_pa() as u64;
    let mut started = [false; MAX_CPUS];
    // The boot CPU and the first `nr - 1` other device-tree CPUs.
    let others = plat
        .cpus
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != boot.index());
    for (i, node) in others.take(nr - 1) {
        match psci::cpu_on(plat.psci.conduit, node.mpidr, entry, i as u64) {
            Ok(()) => started[i] = true,
            Err(e) => crate::println!(
                "smp: cpu {} (MPIDR {:#x}): PSCI CPU_ON failed: {}",
                i,
                node.mpidr,
                e
            ),
        }
    }

    let deadline = timer::counter().saturating_add(timer::us_to_counter(CPU_UP_TIMEOUT_US));
    for (i, node) in plat.cpus.iter().enumerate() {
        if !started[i] {
            continue;
        }
        let cpu = CpuId(i as u16);
        while !is_online(cpu) && !gave_up(cpu) && timer::counter() < deadline {
            cpu_regs::cpu_yield();
        }
        if gave_up(cpu) {
            // It printed why before giving up.
        } else if !is_online(cpu) {
            crate::println!(
                "smp: cpu {} (MPIDR {:#x}) did not come online within {} us",
                i,
                node.mpidr,
                CPU_UP_TIMEOUT_US
            );
        } else if hw_mpidr(cpu) != Some(node.mpidr) {
            crate::println!(
                "smp: cpu {} came online with MPIDR {:#x}, the device tree says {:#x}",
                i,
                hw_mpidr(cpu).unwrap_or(u64::MAX),
                node.mpidr
            );
        }
    }
    online_count()
}

/// A secondary CPU's Rust entry (Linux `secondary_start_kernel`), called by the boot code's
/// `secondary_main` on the new CPU: GIC interface, tick, online, then its idle thread
/// (`sched::start_cpu`, Linux `cpu_startup_entry`).
pub fn secondary_init(cpu: CpuId) -> ! {
    let me = current_cpu();
    if me != cpu {
        crate::println!(
            "smp: cpu {} started with context id {} but TPIDR_EL1 says cpu {}",
            cpu.0,
            cpu.0,
            me.0
        );
        // Not `park_this_cpu`: `me` may be another CPU's index.
        crate::arch::park();
    }
    if let Err(e) = crate::gic::init_cpu() {
        crate::println!("smp: cpu {}: {}; left offline", cpu.0, e);
        give_up(cpu);
    }
    if let Err(e) = timer::init_cpu() {
        crate::println!("smp: cpu {}: {}; left offline", cpu.0, e);
        give_up(cpu);
    }
    mark_online(cpu);
    // Off the boot stack for good: this CPU's idle thread takes over (IRQs on from there).
    crate::sched::start_cpu(cpu)
}

/// CPUs online now.
pub fn online_count() -> usize {
    ONLINE
        .iter()
        .filter(|(_, o)| o.load(Ordering::Acquire))
        .count()
}

/// CPUs the kernel brings up (device tree count capped by `maxcpus`).
pub fn possible_count() -> usize {
    NR_CPUS.load(Ordering::Relaxed)
}

/// Whether `cpu` is online.
pub fn is_online(cpu: CpuId) -> bool {
    ONLINE.get(cpu).is_some_and(|o| o.load(Ordering::Acquire))
}

/// The online CPUs, in id order.
pub fn online_cpus() -> impl Iterator<Item = CpuId> {
    ONLINE
        .iter()
        .filter(|(_, o)| o.load(Ordering::Acquire))
        .map(|(cpu, _)| cpu)
}

/// Counter value when `cpu` came online.
pub fn online_at(cpu: CpuId) -> Option<u64> {
    if is_online(cpu) {
        ONLINE_AT.get(cpu).map(|t| t.load(Ordering::Relaxed))
    } else {
        None
    }
}

/// `MPIDR_EL1` affinity that `cpu` read on itself when it came up.
pub fn hw_mpidr(cpu: CpuId) -> Option<u64> {
    match HW_MPIDR.get(cpu).map(|m| m.load(Ordering::Acquire)) {
        Some(u64::MAX) | None => None,
        m => m,
    }
}

/// Runs `f(cpu)` on `cpu` (Linux `smp_call_function_single` with `wait = 1`): directly when
/// `cpu` is the caller, else in `cpu`'s call-function IPI handler; returns once it finished.
pub fn run_on(cpu: CpuId, f: fn(CpuId)) -> Result<(), SmpError> {
    if cpu == current_cpu() {
        f(cpu);
        return Ok(());
    }
    let seq = post_call(cpu, f)?;
    wait_call(cpu, seq)
}

/// Queues `f(cpu)` to run on `cpu` (another CPU) in its call-function IPI handler and returns
/// without waiting for it (Linux `smp_call_function_single` with `wait = 0`).
pub fn run_on_nowait(cpu: CpuId, f: fn(CpuId)) -> Result<(), SmpError> {
    post_call(cpu, f).map(|_| ())
}

/// Runs `f` once on every online CPU, the caller included (Linux `on_each_cpu` with `wait = 1`):
/// the others start together, the caller runs its own while they do. Returns the first error;
/// CPUs that could be reached still ran `f`.
pub fn run_on_all_cpus(f: fn(CpuId)) -> Result<(), SmpError> {
    let me = current_cpu();
    let mut pending: [Option<u64>; MAX_CPUS] = [None; MAX_CPUS];
    let mut result = Ok(());
    for cpu in online_cpus().filter(|&c| c != me) {
        match post_call(cpu, f) {
            Ok(seq) => pending[cpu.index()] = Some(seq),
            Err(e) => {
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
    }
    f(me);
    for (i, seq) in pending.iter().enumerate() {
        if let Some(seq) = *seq {
            if let Err(e) = wait_call(CpuId(i as u16), seq) {
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
    }
    result
}

/// Stops every other online CPU with the stop IPI (Linux `smp_send_stop`, used by `panic`):
/// each masks IRQs, marks itself offline and parks. Waits up to `timeout_us` of guest time and
/// returns how many other CPUs are still online. Takes no locks, so a panic path may call it.
pub fn stop_other_cpus(timeout_us: u64) -> usize {
    let me = current_cpu();
    for cpu in online_cpus().filter(|&c| c != me) {
        let _ = ipi::send(cpu, IpiKind::Stop);
    }
    let start = timer::counter();
    let deadline = start.saturating_add(timer::us_to_counter(timeout_us));
    while online_cpus().any(|c| c != me) && timer::counter() < deadline {
        wait_step(start);
    }
    online_cpus().filter(|&c| c != me).count()
}

/// Prints the boot benchmark (kernel/CONTRACTS.md): per online CPU
/// `bench boot cpu=<n> online_us=<u64> first_tick_us=<u64|none>`, then
/// `bench boot all_online_us=<u64> init_us=<u64> all_ticked_us=<u64|none>`. Guest time counts
/// from counter reset. `init_us` is when the `init` thread first ran (`init_at`, a counter
/// value): the nearest point to Linux's first user task. A CPU whose tick is stopped because
/// nothing is due on it (NOHZ idle) has not ticked: `none`, not waited for.
pub fn print_boot_bench(init_at: u64) {
    let mut all_online = 0;
    let mut all_ticked = Some(0);
    for cpu in online_cpus() {
        let online_us = timer::counter_to_us(online_at(cpu).unwrap_or(0));
        let tick_us = timer::first_tick_at(cpu).map(timer::counter_to_us);
        all_online = all_online.max(online_us);
        all_ticked = all_ticked.zip(tick_us).map(|(a, t)| a.max(t));
        crate::println!(
            "bench boot cpu={} online_us={} first_tick_us={}",
            cpu.0,
            online_us,
            OrNone(tick_us)
        );
    }
    crate::println!(
        "bench boot all_online_us={} init_us={} all_ticked_us={}",
        all_online,
        timer::counter_to_us(init_at),
        OrNone(all_ticked)
    );
}

/// A number, or `none`.
struct OrNone(Option<u64>);

impl core::fmt::Display for OrNone {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.0 {
            Some(v) => write!(f, "{v}"),
            None => f.write_str("none"),
        }
    }
}

/// The call-function IPI's work (Linux `generic_smp_call_function_single_interrupt`).
pub(crate) fn handle_call_function(cpu: CpuId) {
    let call = CALL_SLOT.of(cpu).lock().take();
    if let Some((f, seq)) = call {
        f(cpu);
        CALL_DONE.of(cpu).fetch_max(seq, Ordering::AcqRel);
    }
}

/// Marks `cpu` online and stamps the time (Linux `set_cpu_online`).
fn mark_online(cpu: CpuId) {
    HW_MPIDR
        .of(cpu)
        .store(cpu_regs::mpidr_hwid(), Ordering::Release);
    ONLINE_AT.of(cpu).store(timer::counter(), Ordering::Relaxed);
    ONLINE.of(cpu).store(true, Ordering::Release);
    ONLINE_MASK.fetch_or(1 << cpu.index(), Ordering::AcqRel);
}

/// Marks `cpu` offline (the stop IPI, a fatal error).
pub(crate) fn mark_offline(cpu: CpuId) {
    ONLINE.of(cpu).store(false, Ordering::Release);
    ONLINE_MASK.fetch_and(!(1 << cpu.index()), Ordering::AcqRel);
}

/// The online CPUs as a bit mask (bit `n`: CPU `n`), in one load (the scheduler's wake-up path
/// reads it every time).
pub fn online_mask() -> u64 {
    ONLINE_MASK.load(Ordering::Acquire)
}

/// Takes the calling CPU `cpu` offline for good (Linux `ipi_cpu_stop`): marked offline, its
/// GIC interface masked, then parked (`arch::park`: exceptions masked, timer off, `wfi`).
pub fn park_this_cpu(cpu: CpuId) -> ! {
    mark_offline(cpu);
    crate::gic::mask_this_cpu();
    crate::arch::park()
}

/// Parks `cpu`, a secondary that could not come online, and tells [`start_secondaries`] so.
fn give_up(cpu: CpuId) -> ! {
    if let Some(g) = GAVE_UP.get(cpu) {
        g.store(true, Ordering::Release);
    }
    park_this_cpu(cpu)
}

fn gave_up(cpu: CpuId) -> bool {
    GAVE_UP.get(cpu).is_some_and(|g| g.load(Ordering::Acquire))
}

/// Queues `f` in `cpu`'s call slot and sends the call-function IPI; returns the call's sequence.
fn post_call(cpu: CpuId, f: fn(CpuId)) -> Result<u64, SmpError> {
    if !is_online(cpu) {
        return Err(SmpError::Offline { cpu: cpu.0 });
    }
    let start = timer::counter();
    let deadline = start.saturating_add(timer::us_to_counter(CALL_TIMEOUT_US));
    let seq = loop {
        {
            let mut slot = CALL_SLOT.of(cpu).lock();
            if slot.is_none() {
                // Numbered under the slot lock: calls to one CPU get increasing numbers in the
                // order they run, so `CALL_DONE >= seq` means this call (not a later one) ran.
                let seq = CALL_SEQ.fetch_add(1, Ordering::Relaxed) + 1;
                *slot = Some((f, seq));
                break seq;
            }
        }
        if timer::counter() >= deadline {
            return Err(SmpError::Busy { cpu: cpu.0 });
        }
        wait_step(start);
    };
    if let Err(e) = ipi::send(cpu, IpiKind::CallFunction) {
        let mut slot = CALL_SLOT.of(cpu).lock();
        if slot.is_some_and(|(_, s)| s == seq) {
            *slot = None;
        }
        return Err(SmpError::Ipi(e));
    }
    Ok(seq)
}

/// Waits until `cpu` completed call `seq`.
fn wait_call(cpu: CpuId, seq: u64) -> Result<(), SmpError> {
    let start = timer::counter();
    let deadline = start.saturating_add(timer::us_to_counter(CALL_TIMEOUT_US));
    while CALL_DONE.of(cpu).load(Ordering::Acquire) < seq {
        if timer::counter() >= deadline {
            return Err(SmpError::Timeout { cpu: cpu.0 });
        }
        wait_step(start);
    }
    Ok(())
}

/// How long a deadline wait spins before it sleeps, guest microseconds.
const SPIN_BEFORE_SLEEP_US: u64 = 1_000;

/// One step of a wait that started at counter value `start`: a short spin and a `yield` for
/// the first [`SPIN_BEFORE_SLEEP_US`] (answers usually come within microseconds), then, when
/// IRQs are unmasked, `wfi` until the next interrupt (the tick at the latest). A CPU that only
/// yields keeps QEMU's `-icount` clock from skipping idle time, and each `yield` costs a
/// round of QEMU's vCPU scheduler: a wait whose answer never came took about 14 s of wall time
/// per second of guest time, and a missing IPI showed up as xtask's kill instead of as the
/// timeout's message. With IRQs masked `wfi` would return at once on a pending one, so it
/// keeps spinning, yielding once per [`SPINS_PER_YIELD`] (a few µs of guest time: the CPU
/// waited for still gets to run soon, and guest time runs faster than wall time).
pub fn wait_step(start: u64) {
    let spun = timer::counter().wrapping_sub(start);
    if spun > timer::us_to_counter(SPIN_BEFORE_SLEEP_US) && crate::arch::irqs_enabled() {
        crate::arch::wfi();
    } else {
        for _ in 0..SPINS_PER_YIELD {
            core::hint::spin_loop();
        }
        cpu_regs::cpu_yield();
    }
}

/// Spin-loop hints between two `yield`s in [`wait_step`].
const SPINS_PER_YIELD: u32 = 64;
