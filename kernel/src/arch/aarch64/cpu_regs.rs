//! The EL1 system registers the timer, GIC and SMP code needs beyond the core `arch` helpers:
//! `MPIDR_EL1` affinity, the EL1 virtual timer and counter, and barriers.
//!
//! Linux keeps these in `arch/arm64/include/asm/{arch_timer.h,cputype.h,barrier.h}`.
//! Accessors come from the `aarch64-cpu` crate; only the ISB-ordered counter read is our own,
//! as Linux's `__arch_counter_get_cntvct` orders it (an `isb` first, so the read is not
//! speculated ahead of earlier instructions).

use aarch64_cpu::asm::barrier;
use aarch64_cpu::registers::{
    Readable, Writeable, CNTFRQ_EL0, CNTVCT_EL0, CNTV_CTL_EL0, CNTV_CVAL_EL0, MPIDR_EL1,
};

/// `MPIDR_EL1` affinity bits (Aff3, Aff2, Aff1, Aff0), Linux's `MPIDR_HWID_BITMASK`.
pub const MPIDR_HWID_MASK: u64 = 0xff_00ff_ffff;

/// This CPU's affinity (`MPIDR_EL1` masked with [`MPIDR_HWID_MASK`]), as the device tree's
/// `cpu@N/reg` gives it.
pub fn mpidr_hwid() -> u64 {
    MPIDR_EL1.get() & MPIDR_HWID_MASK
}

/// The system counter frequency the firmware programmed (`CNTFRQ_EL0`).
pub fn cntfrq() -> u64 {
    CNTFRQ_EL0.get() & 0xffff_ffff
}

/// The virtual count (`CNTVCT_EL0`), read after an `isb` so it is not taken early.
pub fn cntvct() -> u64 {
    barrier::isb(barrier::SY);
    CNTVCT_EL0.get()
}

/// Arms the EL1 virtual timer to fire when the virtual count reaches `deadline`, unmasked.
pub fn cntv_arm(deadline: u64) {
    CNTV_CVAL_EL0.set(deadline);
    CNTV_CTL_EL0.write(CNTV_CTL_EL0::ENABLE::SET + CNTV_CTL_EL0::IMASK::CLEAR);
    barrier::isb(barrier::SY);
}

/// Stops the EL1 virtual timer (its interrupt deasserts).
pub fn cntv_disable() {
    CNTV_CTL_EL0.write(CNTV_CTL_EL0::ENABLE::CLEAR + CNTV_CTL_EL0::IMASK::SET);
    barrier::isb(barrier::SY);
}

/// Full-system data synchronisation barrier, so that normal-memory writes are visible to
/// other CPUs before an SGI that announces them (Linux's `wmb()` in `smp_cross_call`).
pub fn dsb_ishst() {
    barrier::dsb(barrier::ISHST);
}

/// Load-load/load-store ordering barrier, inner shareable (Linux `smp_rmb`).
pub fn dmb_ishld() {
    barrier::dmb(barrier::ISHLD);
}

/// `dsb st`: earlier stores complete before later ones, to any device (Linux `wmb()`).
#[inline(always)]
pub fn dsb_st() {
    barrier::dsb(barrier::ST);
}

/// `dsb ld`: earlier loads complete before later accesses (Linux `rmb()`).
#[inline(always)]
pub fn dsb_ld() {
    barrier::dsb(barrier::LD);
}

/// Full-system data synchronisation barrier (all accesses, all observers).
pub fn dsb_sy() {
    barrier::dsb(barrier::SY);
}

/// Instruction synchronisation barrier.
pub fn isb() {
    barrier::isb(barrier::SY);
}

/// A spin-wait hint that lets other CPUs run: `yield`. On hardware it is a hint to SMT cores;
/// under QEMU's round-robin TCG (one host thread for all vCPUs, as with `-icount`) it ends the
/// vCPU's time slice, so the CPU being waited for gets to run. Rust's `spin_loop()` emits
/// `isb`, which QEMU does not treat as a yield: a vCPU spinning on it starves the others for
/// seconds of guest time there.
pub fn cpu_yield() {
    // SAFETY: `yield` is a hint with no architectural effect on memory or registers.
    unsafe { core::arch::asm!("yield", options(nomem, nostack, preserves_flags)) };
}
