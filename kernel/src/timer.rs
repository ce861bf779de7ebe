//! The per-CPU periodic tick on the architected generic timer.
//!
//! Linux: `drivers/clocksource/arm_arch_timer.c` (`arch_timer_set_next_event_virt`,
//! `arch_timer_handler_virt`, `arch_timer_select_ppi`) with `kernel/time/tick-common.c`
//! (`tick_periodic`, `tick_handle_periodic`: the next event is the previous one plus a period,
//! so the tick does not drift with interrupt latency).
//!
//! Which timer: the EL1 *virtual* timer (`CNTV_*`, PPI 27 on QEMU virt), as Linux uses when it
//! runs at EL1 (`ARCH_TIMER_VIRT_PPI`). It needs no `CNTHCTL_EL2` permission (the EL1 physical
//! timer does under an EL2 entry), and the virtual count equals the physical count because
//! `CNTVOFF_EL2` is 0 (QEMU's reset value; the EL2→EL1 drop writes 0), so tick times and the
//! counter timestamps of the console agree.
//!
//! Deliberate differences: no clockevents layer and no oneshot/NOHZ mode (yet); deadlines are
//! `base + n × freq / HZ` exactly (integer, no accumulated rounding), and when interrupts were
//! held off past whole periods those periods are skipped and counted in [`missed`] rather than
//! replayed, so [`ticks`] counts tick interrupts actually taken.

use core::fmt;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use asym_sched::types::CpuId;

use crate::arch::aarch64::cpu_regs;
use crate::dt::Platform;
use crate::gic::{self, GicError, IntId};
use crate::percpu::{current_cpu, PerCpu, MAX_CPUS};

/// What went wrong setting up the tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerError {
    /// Neither `CNTFRQ_EL0` nor the device tree's `clock-frequency` gives a frequency.
    NoFrequency,
    /// `hz` is 0 or above the counter frequency.
    BadHz { hz: u32, freq_hz: u64 },
    /// The GIC refused the timer PPI.
    Gic(GicError),
}

impl fmt::Display for TimerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TimerError::NoFrequency => write!(
                f,
                "timer: CNTFRQ_EL0 is 0 and the timer node has no clock-frequency"
            ),
            TimerError::BadHz { hz, freq_hz } => {
                write!(
                    f,
                    "timer: hz={hz} is not in 1..={freq_hz} (the counter frequency)"
                )
            }
            TimerError::Gic(e) => write!(f, "timer: {e}"),
        }
    }
}

impl From<GicError> for TimerError {
    fn from(e: GicError) -> Self {
        TimerError::Gic(e)
    }
}

/// One CPU's tick state at an instant, see [`this_cpu_tick_snapshot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct TickSnapshot {
    /// Tick interrupts taken.
    pub ticks: u64,
    /// Counter value at the latest of them.
    pub last_tick_at: u64,
    /// Periods skipped because the interrupt was held off.
    pub missed: u64,
}

static FREQ_HZ: AtomicU64 = AtomicU64::new(0);
static HZ: AtomicU32 = AtomicU32::new(0);
static INTID: AtomicU32 = AtomicU32::new(0);

/// Counter value the CPU's tick sequence counts from.
static BASE: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
/// Index of the next deadline: it is at `BASE + NEXT × freq / HZ`.
static NEXT: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
static TICKS: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
static MISSED: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
/// Counter value when the CPU took its latest tick.
static LAST_TICK_AT: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
/// Counter value when the CPU took its first tick; 0 = not yet.
static FIRST_TICK_AT: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);

/// Sets the tick rate and starts the boot CPU's tick (Linux `arch_timer_of_init` +
/// `arch_timer_starting_cpu` on the boot CPU). Call after [`gic::init`], with IRQs masked.
pub fn init(plat: &'static Platform, hz: u32) -> Result<(), TimerError> {
    let freq_hz = match cpu_regs::cntfrq() {
        0 => u64::from(plat.timer.freq_hz.unwrap_or(0)),
        f => f,
    };
    if freq_hz == 0 {
        return Err(TimerError::NoFrequency);
    }
    if hz == 0 || u64::from(hz) > freq_hz {
        return Err(TimerError::BadHz { hz, freq_hz });
    }
    FREQ_HZ.store(freq_hz, Ordering::Relaxed);
    HZ.store(hz, Ordering::Relaxed);
    INTID.store(plat.timer.el1_virt_intid, Ordering::Relaxed);
    gic::register_handler(IntId(plat.timer.el1_virt_intid), handle_tick)?;
    init_cpu()
}

/// Starts the calling CPU's tick: first deadline one period from now, PPI enabled.
pub fn init_cpu() -> Result<(), TimerError> {
    let cpu = current_cpu();
    let base = cpu_regs::cntvct();
    BASE.of(cpu).store(base, Ordering::Relaxed);
    NEXT.of(cpu).store(1, Ordering::Relaxed);
    cpu_regs::cntv_arm(deadline(base, 1));
    gic::enable_irq(IntId(INTID.load(Ordering::Relaxed)))?;
    Ok(())
}

/// The scheduler tick hook (Linux `scheduler_tick` is called from `update_process_times` here).
/// Runs on `cpu` in interrupt context, once per tick taken.
pub fn on_tick(cpu: CpuId) {
    crate::sched::tick(cpu);
}

/// Tick interrupts `cpu` has taken.
pub fn ticks(cpu: CpuId) -> u64 {
    TICKS.get(cpu).map_or(0, |t| t.load(Ordering::Relaxed))
}

/// The calling CPU's tick count, the counter value at its latest tick and its missed periods,
/// read together with IRQs masked so the tick handler cannot run in between.
pub fn this_cpu_tick_snapshot() -> TickSnapshot {
    let irq = crate::arch::irq_save_disable();
    let cpu = current_cpu();
    let snap = TickSnapshot {
        ticks: TICKS.of(cpu).load(Ordering::Relaxed),
        last_tick_at: LAST_TICK_AT.of(cpu).load(Ordering::Relaxed),
        missed: MISSED.of(cpu).load(Ordering::Relaxed),
    };
    crate::arch::irq_restore(irq);
    snap
}

/// Whole tick periods `cpu` skipped because its tick interrupt was held off longer than a period.
pub fn missed(cpu: CpuId) -> u64 {
    MISSED.get(cpu).map_or(0, |t| t.load(Ordering::Relaxed))
}

/// Counter value at `cpu`'s first tick, if it has ticked.
pub fn first_tick_at(cpu: CpuId) -> Option<u64> {
    match FIRST_TICK_AT
        .get(cpu)
        .map_or(0, |t| t.load(Ordering::Acquire))
    {
        0 => None,
        c => Some(c),
    }
}

/// The system counter frequency (0 before [`init`]).
pub fn counter_freq_hz() -> u64 {
    FREQ_HZ.load(Ordering::Relaxed)
}

/// The tick rate (0 before [`init`]).
pub fn hz() -> u32 {
    HZ.load(Ordering::Relaxed)
}

/// The system counter now (`CNTVCT_EL0`, equal to `CNTPCT_EL0` with `CNTVOFF_EL2` = 0).
pub fn counter() -> u64 {
    cpu_regs::cntvct()
}

/// Counter ticks converted to microseconds (0 before [`init`]).
pub fn counter_to_us(count: u64) -> u64 {
    crate::clock::counter_to_us(count, counter_freq_hz())
}

/// Microseconds converted to counter ticks.
pub fn us_to_counter(us: u64) -> u64 {
    crate::clock::us_to_counter(us, counter_freq_hz())
}

/// Busy-waits until the counter has advanced by `us` microseconds.
pub fn udelay(us: u64) {
    let end = counter().saturating_add(us_to_counter(us));
    while counter() < end {
        cpu_regs::cpu_yield();
    }
}

/// Deadline number `n` of a sequence starting at `base`: exact, no accumulated rounding.
fn deadline(base: u64, n: u64) -> u64 {
    crate::clock::tick_deadline(
        base,
        n,
        FREQ_HZ.load(Ordering::Relaxed),
        HZ.load(Ordering::Relaxed),
    )
}

/// The timer PPI handler (Linux `arch_timer_handler_virt` → `tick_handle_periodic`).
fn handle_tick(_intid: IntId) {
    let cpu = current_cpu();
    let now = cpu_regs::cntvct();
    let base = BASE.of(cpu).load(Ordering::Relaxed);
    let due = NEXT.of(cpu).load(Ordering::Relaxed);
    if now < deadline(base, due) {
        // Not our deadline yet (a stale level from before the last re-arm): re-arm, no tick.
        cpu_regs::cntv_arm(deadline(base, due));
        return;
    }
    let mut n = due + 1;
    if deadline(base, n) <= now {
        // Held off past whole periods: jump near the first future deadline, then step onto it.
        let freq = u128::from(FREQ_HZ.load(Ordering::Relaxed));
        let hz = u128::from(HZ.load(Ordering::Relaxed).max(1));
        let elapsed = u128::from(now.wrapping_sub(base));
        n = n.max((elapsed * hz / freq.max(1)) as u64);
        while deadline(base, n) <= now {
            n += 1;
        }
        MISSED.of(cpu).fetch_add(n - due - 1, Ordering::Relaxed);
    }
    NEXT.of(cpu).store(n, Ordering::Relaxed);
    cpu_regs::cntv_arm(deadline(base, n));
    LAST_TICK_AT.of(cpu).store(now, Ordering::Relaxed);
    if TICKS.of(cpu).fetch_add(1, Ordering::Relaxed) == 0 {
        FIRST_TICK_AT.of(cpu).store(now.max(1), Ordering::Release);
    }
    on_tick(cpu);
}
