//! AArch64: boot entry, EL2→EL1 drop, exception vectors, MMU, context switch and small register
//! helpers.

pub mod context;
pub mod cpu_regs;
pub mod entry;
pub mod exceptions;
pub mod fw_cpu;
pub mod gicv3_icc;
mod mem;
pub mod mmu;
pub mod uspace;

use core::arch::asm;

pub use exceptions::{expect_fault, in_irq, FaultReport};

/// DAIF as it was before [`irq_save_disable`].
#[derive(Clone, Copy, Debug)]
pub struct IrqState(u64);

/// Masks IRQs (DAIF.I) and returns the previous DAIF so [`irq_restore`] can put it back.
#[inline]
pub fn irq_save_disable() -> IrqState {
    let daif: u64;
    // SAFETY: reading DAIF and setting the I bit only affects interrupt delivery on this CPU.
    unsafe {
        // Not `nomem`: the asm must also be a compiler barrier, or the lock's memory accesses
        // could move outside the IRQ-masked window.
        asm!("mrs {}, daif", "msr daifset, #2", out(reg) daif, options(nostack, preserves_flags));
    }
    IrqState(daif)
}

/// Restores DAIF saved by [`irq_save_disable`].
#[inline]
pub fn irq_restore(state: IrqState) {
    // SAFETY: writes back a DAIF value previously read on this CPU.
    unsafe { asm!("msr daif, {}", in(reg) state.0, options(nostack, preserves_flags)) };
}

/// Masks every exception that can be masked (DAIF: debug, SError, IRQ, FIQ) on this CPU, for
/// good: the fatal paths call it first.
#[inline]
pub fn mask_all_exceptions() {
    // SAFETY: masking exceptions only delays their delivery on this CPU. Not `nomem`: a
    // compiler barrier, so no memory access moves before it.
    unsafe { asm!("msr daifset, #0xf", options(nostack, preserves_flags)) };
}

/// Whether IRQs are masked on this CPU (DAIF.I).
#[inline]
pub fn irqs_masked() -> bool {
    let daif: u64;
    // SAFETY: reading DAIF has no side effects.
    unsafe { asm!("mrs {}, daif", out(reg) daif, options(nomem, nostack, preserves_flags)) };
    daif & (1 << 7) != 0
}

/// Unmasks IRQs on this CPU.
#[inline]
pub fn irq_enable() {
    // SAFETY: unmasking IRQs is sound once VBAR_EL1 is set, which entry code does first.
    unsafe { asm!("msr daifclr, #2", options(nostack, preserves_flags)) };
}

/// Unmasks SErrors (DAIF.A) on this CPU, so asynchronous external aborts get reported by the
/// vectors instead of staying pending forever (Linux unmasks them early in boot too).
#[inline]
pub fn serror_enable() {
    // SAFETY: VBAR_EL1 is set (entry code) and the SError vectors report and halt.
    unsafe { asm!("msr daifclr, #4", "isb", options(nostack, preserves_flags)) };
}

/// Busy-wait hint.
#[inline]
pub fn cpu_relax() {
    core::hint::spin_loop();
}

/// Waits until `word` holds `value` (Acquire), sleeping in `wfe` between checks: `ldaxr` arms
/// the exclusive monitor on `word`, so another CPU's store to it generates the wake-up event.
pub fn wait_until_eq(word: &core::sync::atomic::AtomicU32, value: u32) {
    let ptr = word.as_ptr();
    // SAFETY: `ptr` points to a live AtomicU32; the loop only reads it (exclusive load, which
    // is an atomic acquire read) and executes event hints.
    unsafe {
        asm!(
            "sevl",
            "2: wfe",
            "ldaxr {cur:w}, [{ptr}]",
            "cmp {cur:w}, {val:w}",
            "b.ne 2b",
            ptr = in(reg) ptr,
            val = in(reg) value,
            cur = out(reg) _,
            options(nostack),
        );
    }
}

/// Waits for an interrupt (or returns spuriously).
#[inline]
pub fn wfi() {
    // SAFETY: wfi has no memory effects.
    unsafe { asm!("wfi", options(nomem, nostack, preserves_flags)) };
}

/// The stack pointer now.
#[inline]
pub fn current_sp() -> usize {
    let sp: usize;
    // SAFETY: reading SP has no effect.
    unsafe { asm!("mov {}, sp", out(reg) sp, options(nomem, nostack, preserves_flags)) };
    sp
}

/// Puts DAIF back to the interrupted context's `spsr` mask bits with IRQs masked (the state to
/// run kernel code in after leaving an exception other than by `eret`: SErrors and debug as
/// the interrupted code had them). For an exception from EL0, whose SPSR has every mask clear,
/// the kernel's own masks instead (debug and FIQ masked, SErrors reported, as every CPU runs
/// from boot, `entry.rs`): EL0's must not become the kernel's, because a context switch from
/// here carries D, A and F over to the next thread (it restores only I).
#[inline]
pub fn daif_from_spsr_irq_masked(spsr: u64) {
    /// DAIF.D and DAIF.F: the kernel's process-context masks besides I.
    const KERNEL_DF: u64 = (1 << 9) | (1 << 6);
    let from_el0 = (spsr >> 2) & 3 == 0;
    let daif = (if from_el0 { KERNEL_DF } else { spsr & 0x3c0 }) | (1 << 7);
    // SAFETY: writes an exception-mask state with IRQs masked; it only affects delivery.
    unsafe { asm!("msr daif, {}", in(reg) daif, options(nostack, preserves_flags)) };
}

/// This CPU's logical index, written to TPIDR_EL1 by the entry code before Rust runs.
#[inline]
pub fn cpu_index() -> usize {
    let v: u64;
    // SAFETY: TPIDR_EL1 is readable at EL1 and holds the logical CPU index.
    unsafe { asm!("mrs {}, tpidr_el1", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v as usize
}

/// Writes this CPU's logical index to TPIDR_EL1. Boot code only (the boot CPU learns its
/// index from the DT): per-CPU data, lock ownership and fault bookkeeping all key on it, so it
/// must never change while this CPU holds a lock or another CPU uses the same index.
pub(crate) fn set_cpu_index(idx: usize) {
    // SAFETY: TPIDR_EL1 is a software thread-ID register with no hardware effect.
    unsafe {
        asm!("msr tpidr_el1, {}", in(reg) idx as u64, options(nomem, nostack, preserves_flags))
    };
}

/// MPIDR_EL1.
#[inline]
pub fn mpidr() -> u64 {
    let v: u64;
    // SAFETY: MPIDR_EL1 is a read-only identification register.
    unsafe { asm!("mrs {}, mpidr_el1", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// The generic counter as EL1 sees it (CNTVCT_EL0, the count the tick's virtual timer compares
/// against, so log timestamps and tick times share one clock even under a hypervisor that sets
/// CNTVOFF_EL2), read after an ISB so it is not speculated early.
#[inline]
pub fn counter() -> u64 {
    let v: u64;
    // SAFETY: CNTVCT_EL0 is always readable at EL1.
    unsafe {
        asm!("isb", "mrs {}, cntvct_el0", out(reg) v, options(nomem, nostack, preserves_flags))
    };
    v
}

/// CNTFRQ_EL0 in Hz as the firmware programmed it.
#[inline]
pub fn counter_freq_hz() -> u64 {
    let v: u64;
    // SAFETY: CNTFRQ_EL0 is readable at EL1.
    unsafe { asm!("mrs {}, cntfrq_el0", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// Microseconds since the counter started (≈ reset under QEMU).
pub fn uptime_us() -> u64 {
    let f = counter_freq_hz();
    if f == 0 {
        return 0;
    }
    ((u128::from(counter()) * 1_000_000) / u128::from(f)) as u64
}

/// The exception level the CPU runs at (1 after the entry code).
pub fn current_el() -> u8 {
    let v: u64;
    // SAFETY: CurrentEL is readable at EL1 and above.
    unsafe { asm!("mrs {}, CurrentEL", out(reg) v, options(nomem, nostack, preserves_flags)) };
    ((v >> 2) & 3) as u8
}

/// Whether IRQs are unmasked on this CPU (DAIF.I clear).
#[inline]
pub fn irqs_enabled() -> bool {
    let daif: u64;
    // SAFETY: reading DAIF has no side effects.
    unsafe { asm!("mrs {}, daif", out(reg) daif, options(nomem, nostack, preserves_flags)) };
    daif & (1 << 7) == 0
}

/// Wake-ups of each CPU's [`park`] loop (written only by that CPU, plain stores).
static PARK_WAKES: [core::sync::atomic::AtomicU64; crate::dt::MAX_CPUS] =
    [const { core::sync::atomic::AtomicU64::new(0) }; crate::dt::MAX_CPUS];

/// How often CPU `cpu` woke up in [`park`] (a parked CPU should not: it has nothing to do).
pub fn park_wakes(cpu: usize) -> u64 {
    PARK_WAKES
        .get(cpu)
        .map_or(0, |w| w.load(core::sync::atomic::Ordering::Relaxed))
}

/// Stops this CPU for good (Linux `cpu_park_loop`): every exception masked, its tick timer
/// off, then `wfi` forever. Not `wfe`: QEMU's TCG implements WFE as a yield, so a CPU parked
/// in it never idles, and under `-icount` guest time then crawled (1 s of it took 25 s).
/// A pending interrupt ends WFI even while masked, so a CPU whose GIC interface is up should
/// be parked through [`crate::smp::park_this_cpu`], which also masks it there. Each wake-up is
/// counted ([`park_wakes`]).
pub fn park() -> ! {
    mask_all_exceptions();
    cpu_regs::cntv_disable();
    let wakes = &PARK_WAKES[cpu_index() % crate::dt::MAX_CPUS];
    loop {
        wfi();
        // A plain load and store: this may run with the MMU off, where exclusives may not work.
        wakes.store(
            wakes.load(core::sync::atomic::Ordering::Relaxed) + 1,
            core::sync::atomic::Ordering::Relaxed,
        );
    }
}
