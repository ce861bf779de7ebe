//! The firmware stand-in's vCPU (emulated QEMU boards only): its PSCI `CPU_ON` entry, stack and
//! exception vectors. It is not one of the kernel's CPUs — no `TPIDR_EL1` index, no per-CPU
//! data, no kernel locks — and runs only `crate::drivers::fw_standin`'s firmware loop, the way
//! a board's SCP or MCU runs its firmware next to the application processors.
//!
//! The entry follows `_secondary_entry` (`entry.rs`): the EL2→EL1 drop, its own stack, then the
//! MMU with the boot CPU's configuration before any Rust code runs (so atomics work, and the
//! firmware sees the DVFS regions with the same Device attributes as the kernel). Any exception
//! is fatal for the firmware: the vectors record `ESR_EL1`, `ELR_EL1` and `FAR_EL1` in
//! [`FW_FAULT`] and park the vCPU, so the kernel's driver then times out and reports them.

use core::arch::global_asm;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU64, Ordering};

/// Bytes of the firmware vCPU's stack.
pub const FW_STACK_SIZE: usize = 32 * 1024;

/// The firmware vCPU's stack.
#[repr(C, align(4096))]
pub struct FwStack(UnsafeCell<[u8; FW_STACK_SIZE]>);

// SAFETY: used only by the firmware vCPU, as its stack; Rust code never accesses the array.
unsafe impl Sync for FwStack {}

/// The stack (BSS: zeroed by the boot CPU before the firmware vCPU is started).
#[unsafe(no_mangle)]
pub static ASYM_FW_STACK: FwStack = FwStack(UnsafeCell::new([0; FW_STACK_SIZE]));

/// What the firmware vCPU's vectors saw: `[ESR_EL1, ELR_EL1, FAR_EL1, taken]`; `taken` is 0
/// until an exception happened.
#[unsafe(no_mangle)]
pub static ASYM_FW_FAULT: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

/// The firmware vCPU's exception, if it took one: `(ESR_EL1, ELR_EL1, FAR_EL1)`.
pub fn fault() -> Option<(u64, u64, u64)> {
    (ASYM_FW_FAULT[3].load(Ordering::Acquire) != 0).then(|| {
        (
            ASYM_FW_FAULT[0].load(Ordering::Relaxed),
            ASYM_FW_FAULT[1].load(Ordering::Relaxed),
            ASYM_FW_FAULT[2].load(Ordering::Relaxed),
        )
    })
}

global_asm!(
    r#"
    .text
    .global _asym_fw_entry
_asym_fw_entry:
    bl      __asym_el2_to_el1
    adrp    x9, ASYM_FW_STACK
    add     x9, x9, :lo12:ASYM_FW_STACK
    mov     x10, #{stack_size}
    add     sp, x9, x10
    adrp    x9, __asym_fw_vectors
    add     x9, x9, :lo12:__asym_fw_vectors
    msr     vbar_el1, x9
    mov     x9, #0xffff                 // not a kernel CPU index
    msr     tpidr_el1, x9
    isb
    adrp    x9, {mmu_cfg}
    add     x9, x9, :lo12:{mmu_cfg}
    ldp     x10, x11, [x9]              // MAIR, TCR
    ldp     x12, x13, [x9, #16]         // TTBR0, SCTLR
    msr     mair_el1, x10
    msr     tcr_el1, x11
    msr     ttbr0_el1, x12
    isb
    tlbi    vmalle1
    dsb     nsh
    isb
    msr     sctlr_el1, x13
    isb
    bl      {fw_main}
1:  wfe
    b       1b

    .balign 0x800
__asym_fw_vectors:
    .rept 16
    .balign 0x80
    b       __asym_fw_fault
    .endr

__asym_fw_fault:
    msr     daifset, #0xf
    adrp    x3, ASYM_FW_FAULT
    add     x3, x3, :lo12:ASYM_FW_FAULT
    mrs     x0, esr_el1
    mrs     x1, elr_el1
    mrs     x2, far_el1
    stp     x0, x1, [x3]
    str     x2, [x3, #16]
    mov     x0, #1
    add     x3, x3, #24
    stlr    x0, [x3]
2:  wfi
    b       2b
"#,
    fw_main = sym crate::drivers::fw_standin::fw_main,
    mmu_cfg = sym super::mmu::MMU_CONFIG,
    stack_size = const FW_STACK_SIZE,
);

unsafe extern "C" {
    /// The firmware vCPU's entry point in the asm above (PSCI `CPU_ON` target).
    fn _asym_fw_entry();
}

/// Physical (= virtual, identity map) address of the firmware vCPU's entry.
pub fn entry_pa() -> usize {
    _asym_fw_entry as *const () as usize
}
