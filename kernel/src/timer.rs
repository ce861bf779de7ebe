//! The per-CPU one-shot timers on the architected generic timer, the periodic tick as one of
//! them, and stopping the tick on an idle CPU (NOHZ idle).
//!
//! Linux: `drivers/clocksource/arm_arch_timer.c` (`arch_timer_set_next_event_virt`,
//! `arch_timer_handler_virt`, `arch_timer_select_ppi`), `kernel/time/hrtimer.c` (a per-CPU
//! queue of one-shot timers; the hardware is programmed with the earliest:
//! `hrtimer_interrupt` → `__hrtimer_run_queues` → `tick_program_event`), `tick-sched.c` (the
//! tick is an hrtimer, `tick_sched_timer`; `tick_nohz_idle_stop_tick` /
//! `tick_nohz_idle_restart_tick`) and `tick-common.c` (the next tick is the previous one plus a
//! period, so the tick does not drift with interrupt latency).
//!
//! Which timer: the EL1 *virtual* timer (`CNTV_*`, PPI 27 on QEMU virt), as Linux uses when it
//! runs at EL1 (`ARCH_TIMER_VIRT_PPI`). It needs no `CNTHCTL_EL2` permission (the EL1 physical
//! timer does under an EL2 entry), and the virtual count equals the physical count because
//! `CNTVOFF_EL2` is 0 (QEMU's reset value; the EL2→EL1 drop writes 0), so tick times and the
//! counter timestamps of the console agree.
//!
//! Each CPU's queue ([`TimerQueue`]) holds one sleep timer per thread (key = thread slot), the
//! tick (key [`TICK_KEY`]), one wake-up timer (key [`WAKE_KEY`], [`arm_wakeup`]) and one cpufreq
//! timer (key [`CPUFREQ_KEY`], [`arm_cpufreq`]); `CNTV_CVAL` always holds the earliest. Tick deadlines are
//! `base + n × freq / HZ` exactly (integer, no accumulated rounding); when interrupts were held
//! off past whole periods those periods are skipped and counted in [`missed`] rather than
//! replayed, so [`ticks`] counts tick interrupts actually taken. An idle CPU with nothing due
//! before its next tick (and nothing for the tick to do: `sched::cpu_quiet`) takes the tick out
//! of its queue ([`nohz_stop_tick`]); leaving idle puts it back on the next deadline of the same
//! grid ([`nohz_restart_tick`]), without counting the periods it slept through as missed.
//!
//! **Timer resolution** (`highres=on|off`, [`set_highres`]). By default a thread's sleep timer
//! expires at its deadline, as Linux's hrtimers do in high-resolution mode (the clock event
//! device is programmed for the earliest hrtimer, `hrtimer_interrupt`). With `highres=off` the
//! kernel behaves as Linux does when hrtimers are *not* in high-resolution mode (no
//! `CONFIG_HIGH_RES_TIMERS`, `highres=off`, or a clock event device without one-shot mode):
//! hrtimers are then run from the tick (`update_process_times` → `run_local_timers` →
//! `hrtimer_run_queues`), and a NOHZ-idle CPU programs its next event rounded up to a jiffy
//! (`cmp_next_hrtimer_event`), so a timer expires on the first tick at or after its deadline.
//! [`arm_sleep`] rounds the deadline up onto the tick grid
//! (`time::clock::tick_deadline_at_or_after`); the periodic tick itself is unchanged. Why the
//! mode exists here: it is the condition of seed 002 (the "sched/fair:
//! AGGRESSIVE_NEXT_BALANCE" thread measured cyclictest with hrtimers in low-resolution mode),
//! where every wake-up lands right after a tick, so the tick of a CPU that was idle a moment
//! before finds `next_balance` in the past and raises SCHED_SOFTIRQ on nearly every tick.
//! Wake-ups due with the tick run before the tick's scheduler work ([`handle_timer`]), as Linux
//! runs the expired hrtimers in `update_process_times` before `sched_tick`.

use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use asym_sched::types::CpuId;

use crate::arch::aarch64::cpu_regs;
use crate::dt::Platform;
use crate::gic::{self, GicError, IntId};
use crate::percpu::{current_cpu, PerCpu, MAX_CPUS};
use crate::sync::{InitOnce, IrqSpinLock, LockRank};
use crate::task::MAX_THREADS;
use crate::time::timerqueue::TimerQueue;

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
/// Timers expire at their deadline (`highres=on`, the default) or on the tick (`off`).
static HIGHRES: AtomicBool = AtomicBool::new(true);
static HZ: AtomicU32 = AtomicU32::new(0);
static INTID: AtomicU32 = AtomicU32::new(0);

/// Counter value every CPU's tick sequence counts from: the boot CPU's counter when it set up
/// the tick. All CPUs tick on one grid, as Linux's do by default (`tick_init_jiffy_update`:
/// every CPU's tick hrtimer expires on the same jiffies boundary unless `skew_tick=1`).
static BASE: AtomicU64 = AtomicU64::new(0);
/// Index of the CPU's next deadline: it is at `BASE + NEXT × freq / HZ`.
static NEXT: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
static TICKS: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
static MISSED: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
/// Counter value when the CPU took its latest tick.
static LAST_TICK_AT: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
/// Counter value when the CPU took its first tick; 0 = not yet.
static FIRST_TICK_AT: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
/// Times the CPU stopped its tick going idle.
static NOHZ_STOPS: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);

/// The tick's key in a CPU's timer queue (thread sleep timers use their slot).
pub const TICK_KEY: usize = MAX_THREADS;
/// The key of a CPU's wake-up timer ([`arm_wakeup`]): an interrupt at an instant and nothing
/// else, for a thread that waits in `wfi` while it stands for a running workload.
pub const WAKE_KEY: usize = MAX_THREADS + 1;

/// The key of a CPU's cpufreq timer ([`arm_cpufreq`]): the driver's next poll, for a request
/// this CPU made.
pub const CPUFREQ_KEY: usize = MAX_THREADS + 2;

/// One CPU's timers.
struct CpuTimers {
    queue: TimerQueue<{ MAX_THREADS + 3 }>,
    /// The tick is out of the queue (NOHZ idle).
    tick_stopped: bool,
}

/// Every CPU's timers, on the heap (a queue is 4.6 KiB; as a static with its lock's rank it
/// would be initialised data in the Image). Built by [`init`] before any CPU's tick starts.
static TIMERS: InitOnce<&'static [IrqSpinLock<CpuTimers>]> = InitOnce::new();

/// CPU `cpu`'s timers.
fn timers(cpu: CpuId) -> &'static IrqSpinLock<CpuTimers> {
    let all = TIMERS.get().copied().unwrap_or(&[]);
    &all[cpu.index() % all.len().max(1)]
}

/// Fixes guest time's counter frequency (`CNTFRQ_EL0`, else the DT's `clock-frequency`) as
/// early as possible, so `time::now()` counts from boot; [`init`] does it too if this found none.
pub fn init_clock(plat: &Platform) {
    let freq_hz = match cpu_regs::cntfrq() {
        0 => u64::from(plat.timer.freq_hz.unwrap_or(0)),
        f => f,
    };
    if let Ok(f) = u32::try_from(freq_hz) {
        let _ = crate::time::init(f);
    }
}

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
    if crate::time::init(u32::try_from(freq_hz).unwrap_or(u32::MAX)).is_err() {
        return Err(TimerError::NoFrequency);
    }
    FREQ_HZ.store(freq_hz, Ordering::Relaxed);
    HZ.store(hz, Ordering::Relaxed);
    INTID.store(plat.timer.el1_virt_intid, Ordering::Relaxed);
    let mut v = alloc::vec::Vec::with_capacity(MAX_CPUS);
    for _ in 0..MAX_CPUS {
        v.push(IrqSpinLock::with_rank(
            CpuTimers {
                queue: TimerQueue::new(),
                tick_stopped: false,
            },
            LockRank::TIMERS,
        ));
    }
    let _ = TIMERS.set(alloc::vec::Vec::leak(v));
    gic::register_handler(IntId(plat.timer.el1_virt_intid), handle_timer)?;
    init_cpu()
}

/// Starts the calling CPU's tick: first deadline one period from now, PPI enabled. Call with
/// IRQs masked (boot).
pub fn init_cpu() -> Result<(), TimerError> {
    let cpu = current_cpu();
    let now = cpu_regs::cntvct();
    // The first CPU here (the boot CPU) starts the grid; the others join it at its next
    // deadline after now.
    let base = match BASE.compare_exchange(0, now.max(1), Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => now.max(1),
        Err(b) => b,
    };
    let n = next_after(base, now);
    NEXT.of(cpu).store(n, Ordering::Relaxed);
    {
        let mut t = timers(cpu).lock();
        t.tick_stopped = false;
        t.queue.insert(TICK_KEY, deadline(base, n));
        program(&t);
    }
    gic::enable_irq(IntId(INTID.load(Ordering::Relaxed)))?;
    Ok(())
}

/// Sets the timer resolution (`highres=`, see the module docs): `false` makes every sleep
/// timer armed from now on expire on the first tick at or after its deadline. Call at boot,
/// before threads sleep.
pub fn set_highres(on: bool) {
    HIGHRES.store(on, Ordering::Relaxed);
}

/// Whether sleep timers expire at their deadline (`highres=on`) rather than on the tick.
pub fn highres() -> bool {
    HIGHRES.load(Ordering::Relaxed)
}

/// Where a sleep timer due at counter value `at_cyc` expires: there in high-resolution mode,
/// else on the first tick deadline at or after it (before [`init`] there is no grid yet, and
/// the deadline stays).
fn sleep_expiry(at_cyc: u64) -> u64 {
    if highres() {
        return at_cyc;
    }
    let base = BASE.load(Ordering::Relaxed);
    let hz = HZ.load(Ordering::Relaxed);
    if base == 0 || hz == 0 {
        return at_cyc;
    }
    crate::time::clock::tick_deadline_at_or_after(at_cyc, base, FREQ_HZ.load(Ordering::Relaxed), hz)
}

/// The counter value the tick grid counts from (every CPU's ticks are at
/// `tick_base() + ⌊n·freq/HZ⌋`); 0 before [`init`].
pub fn tick_base() -> u64 {
    BASE.load(Ordering::Relaxed)
}

/// Arms thread slot `slot`'s sleep timer on the calling CPU at counter value `at_cyc` (re-arms
/// it if armed here; cancels it elsewhere first), or, with `highres=off`, on the first tick at
/// or after it. The thread is woken through `sched::wake_timer` when it expires.
pub fn arm_sleep(slot: usize, at_cyc: u64) {
    let at_cyc = sleep_expiry(at_cyc);
    cancel_sleep(slot);
    let irq = crate::arch::irq_save_disable();
    let cpu = current_cpu();
    {
        let mut t = timers(cpu).lock();
        t.queue.insert(slot, at_cyc);
        crate::task::slot(slot)
            .timer_cpu
            .store(cpu.0 + 1, Ordering::Release);
        program(&t);
    }
    crate::arch::irq_restore(irq);
}

/// Cancels thread slot `slot`'s sleep timer wherever it is armed (a CPU whose hardware timer is
/// left programmed for it takes one interrupt with nothing due).
pub fn cancel_sleep(slot: usize) {
    let th = crate::task::slot(slot);
    let c = th.timer_cpu.swap(0, Ordering::AcqRel);
    if c != 0 {
        timers(CpuId(c - 1)).lock().queue.remove(slot);
    }
}

/// Arms the calling CPU's wake-up timer at counter value `at_cyc` (re-arms it if armed): its
/// interrupt does nothing but end a `wfi` (`sched::work` waits in one for the instant its
/// emulated work completes). IRQs masked by the caller, so the CPU cannot change under it.
pub fn arm_wakeup(at_cyc: u64) {
    let mut t = timers(current_cpu()).lock();
    t.queue.insert(WAKE_KEY, at_cyc);
    program(&t);
}

/// Arms the calling CPU's cpufreq timer at counter value `at_cyc` (re-arms it if armed): its
/// expiry runs `cpufreq::poll`, which applies the transitions the driver completed. Before
/// [`init`] there are no timers and this does nothing (`cpufreq::start_timer` arms it then).
pub fn arm_cpufreq(at_cyc: u64) {
    if TIMERS.get().is_none() {
        return;
    }
    let irq = crate::arch::irq_save_disable();
    {
        let mut t = timers(current_cpu()).lock();
        t.queue.insert(CPUFREQ_KEY, at_cyc);
        program(&t);
    }
    crate::arch::irq_restore(irq);
}

/// Cancels the calling CPU's wake-up timer, if armed.
pub fn cancel_wakeup() {
    let mut t = timers(current_cpu()).lock();
    if t.queue.remove(WAKE_KEY).is_some() {
        program(&t);
    }
}

/// Going idle on `cpu` (the calling CPU, IRQs masked) with nothing for the tick to do: takes
/// the tick out of the queue unless another timer is due before it anyway (Linux
/// `tick_nohz_idle_stop_tick`). Whether the tick stopped now (Linux then calls
/// `nohz_balance_enter_idle`).
pub fn nohz_stop_tick(cpu: CpuId) -> bool {
    let mut t = timers(cpu).lock();
    if !tick_may_stop(&t) {
        return false;
    }
    t.queue.remove(TICK_KEY);
    t.tick_stopped = true;
    NOHZ_STOPS.of(cpu).fetch_add(1, Ordering::Relaxed);
    program(&t);
    true
}

/// Whether [`nohz_stop_tick`] on `cpu` would stop its tick now: the tick runs and no other
/// timer is due before its next expiry.
pub fn tick_would_stop(cpu: CpuId) -> bool {
    tick_may_stop(&timers(cpu).lock())
}

/// The tick runs and no other timer is due at or before its next expiry (`nohz_stop_tick`'s
/// and `tick_would_stop`'s one test).
fn tick_may_stop(t: &CpuTimers) -> bool {
    let Some(next_tick) = t.queue.expires(TICK_KEY).filter(|_| !t.tick_stopped) else {
        return false;
    };
    t.queue
        .earliest_other(TICK_KEY)
        .is_none_or(|at| at > next_tick)
}

/// Leaving idle on `cpu` (the calling CPU, IRQs masked): puts a stopped tick back, on the first
/// deadline of its grid after now (Linux `tick_nohz_restart_sched_tick`).
pub fn nohz_restart_tick(cpu: CpuId) {
    let mut t = timers(cpu).lock();
    if !t.tick_stopped {
        return;
    }
    let now = cpu_regs::cntvct();
    let base = BASE.load(Ordering::Relaxed);
    let n = next_after(base, now);
    NEXT.of(cpu).store(n, Ordering::Relaxed);
    t.tick_stopped = false;
    t.queue.insert(TICK_KEY, deadline(base, n));
    program(&t);
}

/// Whether `cpu`'s tick is stopped (NOHZ idle).
pub fn tick_stopped(cpu: CpuId) -> bool {
    timers(cpu).lock().tick_stopped
}

/// Times `cpu` stopped its tick going idle.
pub fn nohz_stops(cpu: CpuId) -> u64 {
    NOHZ_STOPS.of(cpu).load(Ordering::Relaxed)
}

/// Programs the calling CPU's timer for the queue's earliest expiry, or stops it.
fn program(t: &CpuTimers) {
    match t.queue.peek() {
        Some((at, _)) => cpu_regs::cntv_arm(at),
        None => cpu_regs::cntv_disable(),
    }
}

/// The first tick number whose deadline lies after `now`.
fn next_after(base: u64, now: u64) -> u64 {
    let freq = FREQ_HZ.load(Ordering::Relaxed).max(1);
    let hz = u64::from(HZ.load(Ordering::Relaxed).max(1));
    let elapsed = now.wrapping_sub(base);
    // elapsed × hz / freq, without 128-bit division while it fits.
    let n0 = match elapsed.checked_mul(hz) {
        Some(x) => x / freq,
        None => (u128::from(elapsed) * u128::from(hz) / u128::from(freq)) as u64,
    };
    let mut n = n0.max(1);
    while deadline(base, n) <= now {
        n += 1;
    }
    n
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

/// Counter value at `cpu`'s latest tick (0 before its first).
pub fn last_tick_at(cpu: CpuId) -> u64 {
    LAST_TICK_AT
        .get(cpu)
        .map_or(0, |t| t.load(Ordering::Relaxed))
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
    crate::time::clock::counter_to_us(count, counter_freq_hz())
}

/// Microseconds converted to counter ticks.
pub fn us_to_counter(us: u64) -> u64 {
    crate::time::clock::us_to_counter(us, counter_freq_hz())
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
    crate::time::clock::tick_deadline(
        base,
        n,
        FREQ_HZ.load(Ordering::Relaxed),
        HZ.load(Ordering::Relaxed),
    )
}

/// The timer PPI handler (Linux `arch_timer_handler_virt` → `hrtimer_interrupt`): runs every
/// expired timer of this CPU's queue — the tick (re-armed a period on, Linux
/// `tick_handle_periodic`), sleeping threads (woken) — and programs the next.
fn handle_timer(_intid: IntId) {
    let cpu = current_cpu();
    let now = cpu_regs::cntvct();
    let mut woken: heapless::Vec<u16, 16> = heapless::Vec::new();
    let mut tick = false;
    let mut cpufreq = false;
    {
        let mut t = timers(cpu).lock();
        while let Some((at, key)) = t.queue.peek() {
            if at > now {
                break;
            }
            if key == TICK_KEY {
                t.queue.remove(key);
                tick = true;
                let base = BASE.load(Ordering::Relaxed);
                let due = NEXT.of(cpu).load(Ordering::Relaxed);
                let mut n = due + 1;
                if deadline(base, n) <= now {
                    // Held off past whole periods: skip to the first future deadline.
                    n = next_after(base, now).max(n);
                    MISSED.of(cpu).fetch_add(n - due - 1, Ordering::Relaxed);
                }
                NEXT.of(cpu).store(n, Ordering::Relaxed);
                t.queue.insert(TICK_KEY, deadline(base, n));
            } else if key == WAKE_KEY {
                // Its interrupt was the point: the `wfi` waiting for it has ended.
                t.queue.remove(key);
            } else if key == CPUFREQ_KEY {
                t.queue.remove(key);
                cpufreq = true;
            } else if woken.push(key as u16).is_ok() {
                t.queue.remove(key);
                let _ = crate::task::slot(key).timer_cpu.compare_exchange(
                    cpu.0 + 1,
                    0,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                );
            } else {
                // More expired than one pass wakes: the timer fires again at once for the rest.
                break;
            }
        }
        program(&t);
    }
    // Sleepers first: a wake-up due with the tick does not wait for the tick's work (the
    // tick's deadlines stay on their grid; its work runs a wake-up later).
    for s in woken {
        crate::sched::wake_timer(usize::from(s));
    }
    // A completed frequency transition before the tick, whose clock update then reads the new
    // `arch_freq_scale`.
    if cpufreq {
        crate::cpufreq::poll();
    }
    if tick {
        LAST_TICK_AT.of(cpu).store(now, Ordering::Relaxed);
        if TICKS.of(cpu).fetch_add(1, Ordering::Relaxed) == 0 {
            FIRST_TICK_AT.of(cpu).store(now.max(1), Ordering::Release);
        }
        on_tick(cpu);
    }
}
