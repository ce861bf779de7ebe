//! Boot entry: the arm64 Linux `Image` header, the EL2→EL1 drop, stacks, BSS, VBAR, MMU, and
//! the jump into Rust, for the boot CPU (`_start`) and for secondaries (`_secondary_entry`,
//! the PSCI `CPU_ON` target).
//!
//! Re-derives Linux's `arch/arm64/kernel/head.S` (`primary_entry`, `init_kernel_el`,
//! `secondary_entry`) and the header layout of `Documentation/arch/arm64/booting.rst`.
//! Deliberate differences: the kernel runs identity-mapped at its link address (no KASLR, no
//! relocation); the boot CPU enables the MMU from Rust after parsing the DT (so the map covers
//! exactly the RAM the DT names), secondaries enable it here from the boot CPU's saved
//! configuration before any Rust code (and so any atomic) runs on them.

use core::arch::global_asm;
use core::cell::UnsafeCell;

use crate::dt::MAX_CPUS;

/// Bytes of stack per secondary CPU, guard page included (a power of two: the exception
/// vectors find the offset inside a slot with a mask).
pub const STACK_SIZE: usize = 64 * 1024;

/// Bytes of the boot CPU's stack, guard page included. The boot CPU runs all initialisation;
/// its deepest chains (`sched::init` → `Topology::from_board` / `cpufreq::init`, and
/// `Platform::from_fdt` → `dt::parse_cpus`) need about 16 KiB, measured from the disassembly's
/// stack adjustments; the self tests pass with 64 KiB. 128 KiB leaves room to grow, and the
/// guard page below catches the day it does not.
pub const BOOT_STACK_SIZE: usize = 128 * 1024;

/// The lowest page of every stack is left unmapped (`mmu::init_boot_cpu`), so a CPU that runs
/// off the bottom of its stack faults instead of silently overwriting the stack below it
/// (another CPU's). The exception vectors detect an exception frame that would land in a guard
/// page and switch to [`OVERFLOW_STACKS`] to report it (Linux: `VMAP_STACK`'s guard pages and
/// the overflow check in `kernel_ventry`). The compiler's stack probes touch every page of a
/// large frame, so a frame cannot jump over the guard.
pub const STACK_GUARD_SIZE: usize = 4096;

/// All boot stacks, in one page-aligned block: slot `i < MAX_CPUS` (STACK_SIZE bytes each) for
/// secondary CPU `i`, then the boot CPU's (BOOT_STACK_SIZE bytes; its logical index is known
/// only after the DT is parsed).
pub const STACKS_LEN: usize = MAX_CPUS * STACK_SIZE + BOOT_STACK_SIZE;

/// The boot stacks' storage, see [`STACKS_LEN`].
#[repr(C, align(4096))]
pub struct BootStacks(UnsafeCell<[u8; STACKS_LEN]>);

// SAFETY: each stack slot is used by exactly one CPU; Rust code never accesses the array.
unsafe impl Sync for BootStacks {}

/// The boot stacks, in their own NOLOAD section (linker/kernel.ld `.stacks`) after BSS: not
/// zeroed at boot (zeroing 576 KiB took 2.3 ms of guest time), not in the Image file.
#[unsafe(no_mangle)]
#[unsafe(link_section = ".stacks.boot")]
pub static BOOT_STACKS: BootStacks = BootStacks(UnsafeCell::new([0; STACKS_LEN]));

/// Bytes of each per-CPU overflow stack slot: the stack the exception vectors switch to when a
/// CPU's stack overflowed (enough for the fatal report's formatting, which [`crate::panic`]
/// bounds: a fault while reporting prints one line and stops). Laid out like a thread stack
/// slot (`context::STACK_SLOT_SIZE`): the stack is the upper `THREAD_SIZE`, the lower half
/// ([`OVERFLOW_GUARD_SIZE`]) is unmapped, so the thread vectors' alignment check covers it too.
pub const OVERFLOW_STACK_SIZE: usize = super::context::STACK_SLOT_SIZE;

/// The unmapped lower part of each overflow stack slot.
pub const OVERFLOW_GUARD_SIZE: usize = super::context::THREAD_SIZE;

/// Per-CPU emergency stacks for reporting a stack overflow (Linux `overflow_stack`). Slot `i`
/// (indexed by TPIDR_EL1) starts with its unmapped guard half; the vectors treat a frame that
/// would land there as the end of the line (`__asym_overflow_stack_overflow`). They lie right
/// after BSS (linker/kernel.ld), so slot 0's guard also separates BSS, which holds the page
/// tables, from every stack.
#[repr(C, align(32768))]
pub struct OverflowStacks(UnsafeCell<[[u8; OVERFLOW_STACK_SIZE]; MAX_CPUS]>);

// SAFETY: slot `i` is used only by CPU `i` (indexed by TPIDR_EL1), and only on its way to halt.
unsafe impl Sync for OverflowStacks {}

/// The overflow stacks (NOLOAD, like the boot stacks; placed first in `.stacks`).
#[unsafe(no_mangle)]
#[unsafe(link_section = ".stacks.overflow")]
pub static OVERFLOW_STACKS: OverflowStacks =
    OverflowStacks(UnsafeCell::new([[0; OVERFLOW_STACK_SIZE]; MAX_CPUS]));

const _: () = assert!(STACK_SIZE.is_power_of_two() && STACK_GUARD_SIZE < STACK_SIZE);
const _: () = assert!(BOOT_STACK_SIZE.is_multiple_of(1 << 16) && STACKS_LEN >> 16 <= 0xffff);
const _: () = assert!(MAX_CPUS.is_power_of_two() && OVERFLOW_STACK_SIZE.is_power_of_two());
const _: () = assert!(OVERFLOW_STACK_SIZE == 2 * OVERFLOW_GUARD_SIZE);
const _: () = assert!(core::mem::align_of::<OverflowStacks>() == OVERFLOW_STACK_SIZE);

/// Per-CPU stacks that IRQ handlers run on (Linux `irq_stack`), so an interrupt arriving when
/// a thread's stack is nearly full does not overflow it. Laid out like the overflow stacks: a
/// `THREAD_SIZE` stack in the upper half of each `2 × THREAD_SIZE` slot, the lower half
/// unmapped (so the thread vectors' alignment check covers them).
#[repr(C, align(32768))]
pub struct IrqStacks(UnsafeCell<[[u8; OVERFLOW_STACK_SIZE]; MAX_CPUS]>);

// SAFETY: slot `i` is used only by CPU `i` (indexed by TPIDR_EL1), while it runs an IRQ
// handler (IRQs do not nest).
unsafe impl Sync for IrqStacks {}

/// The IRQ stacks (NOLOAD, after the boot stacks).
#[unsafe(no_mangle)]
#[unsafe(link_section = ".stacks.irq")]
pub static IRQ_STACKS: IrqStacks = IrqStacks(UnsafeCell::new([[0; OVERFLOW_STACK_SIZE]; MAX_CPUS]));

/// The base of CPU `cpu`'s IRQ stack guard (its slot's unmapped lower half).
pub fn irq_guard_page(cpu: usize) -> usize {
    IRQ_STACKS.0.get() as usize + (cpu % MAX_CPUS) * OVERFLOW_STACK_SIZE
}

/// One past the top of CPU `cpu`'s IRQ stack: its initial SP.
pub fn irq_stack_top(cpu: usize) -> usize {
    irq_guard_page(cpu) + OVERFLOW_STACK_SIZE
}

/// The CPU whose IRQ stack slot (guard included) holds `addr`.
pub fn irq_stack_cpu_of(addr: usize) -> Option<usize> {
    let off = addr.checked_sub(IRQ_STACKS.0.get() as usize)?;
    (off < OVERFLOW_STACK_SIZE * MAX_CPUS).then_some(off / OVERFLOW_STACK_SIZE)
}

/// The base of CPU `cpu`'s overflow stack guard (its slot's unmapped lower half).
pub fn overflow_guard_page(cpu: usize) -> usize {
    OVERFLOW_STACKS.0.get() as usize + (cpu % MAX_CPUS) * OVERFLOW_STACK_SIZE
}

/// The lowest usable address of CPU `cpu`'s overflow stack.
pub fn overflow_stack_base(cpu: usize) -> usize {
    overflow_guard_page(cpu) + OVERFLOW_GUARD_SIZE
}

/// The base of stack slot `slot`'s guard page (slot `MAX_CPUS` is the boot CPU's).
pub fn stack_guard_page(slot: usize) -> usize {
    BOOT_STACKS.0.get() as usize + slot.min(MAX_CPUS) * STACK_SIZE
}

/// The stack slot (`MAX_CPUS` for the boot CPU's) that `sp` lies in, if any.
pub fn stack_slot_of(sp: usize) -> Option<usize> {
    let off = sp.checked_sub(BOOT_STACKS.0.get() as usize)?;
    (off < STACKS_LEN).then_some((off / STACK_SIZE).min(MAX_CPUS))
}

/// SCTLR_EL1 with the MMU and caches off and all RES1 bits set (EL1 little-endian).
pub const SCTLR_EL1_MMU_OFF: u64 = 0x30d0_0800;

// The header fields: code0 branches over the header; text_offset 0x80000 and flags 0b0010
// (little-endian, 4 KiB pages, bit 3 clear = "place 2 MiB-aligned as close to the start of DRAM
// as possible") make QEMU (`load_aarch64_image`) and u-boot (`booti_setup`) both load the image
// at DRAM base + 0x80000, which is the link address on QEMU virt. image_size covers BSS and the
// stacks so loaders keep that memory free.
global_asm!(
    r#"
    .section .text.head, "ax"
    .global _start
_start:
    b       __asym_primary_entry                   // code0
    .word   0                           // code1
    .quad   0x80000                     // text_offset
    .quad   __image_size                // image_size
    .quad   0x2                         // flags
    .quad   0, 0, 0                     // res2..res4
    .ascii  "ARM\x64"                   // magic
    .word   0                           // res5 (no PE header)

    .text
// Drops from EL2 to EL1 if entered at EL2; returns at EL1 with DAIF masked and FP/SIMD
// trapped (CPACR_EL1 = 0: the kernel is soft-float and the vectors do not save FP registers, so
// any FP use must fault loudly). Clobbers x9, x10. Re-derives Linux's `init_el2` (nVHE):
// EL1 gets AArch64 (HCR_EL2.RW, no other traps or stage 2), the physical counter and timer
// without traps (CNTHCTL_EL2.EL1PCTEN|EL1PCEN), CNTVOFF = 0 (virtual = physical count), no
// FP/SIMD or system-register traps to EL2 (CPTR_EL2, HSTR_EL2), all PMU counters and no debug
// traps (MDCR_EL2.HPMN = PMCR_EL0.N), its own MIDR/MPIDR (VPIDR_EL2/VMPIDR_EL2 reset to
// UNKNOWN values, and EL1 reads of MIDR_EL1/MPIDR_EL1 return them), and, when a GICv3 CPU
// interface exists, the ICC_* system registers (ICC_SRE_EL2.Enable|SRE) with the virtual CPU
// interface off (ICH_HCR_EL2 = 0).
    .global __asym_el2_to_el1
__asym_el2_to_el1:
    mrs     x9, CurrentEL
    lsr     x9, x9, #2
    cmp     x9, #2
    b.ne    1f
    adrp    x9, __asym_el2_vectors       // before anything here can trap to EL2
    add     x9, x9, :lo12:__asym_el2_vectors
    msr     vbar_el2, x9
    isb
    mov     x9, #(1 << 31)
    msr     hcr_el2, x9
    isb                                 // E2H = 0 before the EL2 registers below are written
    mov     x9, #3
    msr     cnthctl_el2, x9
    msr     cntvoff_el2, xzr
    mov     x9, #0x33ff
    msr     cptr_el2, x9
    msr     hstr_el2, xzr
    mrs     x9, midr_el1
    msr     vpidr_el2, x9
    mrs     x9, mpidr_el1
    msr     vmpidr_el2, x9
    mov     x10, xzr
    mrs     x9, id_aa64dfr0_el1
    ubfx    x9, x9, #8, #4              // PMUVer: 0 none, 0xf IMPLEMENTATION DEFINED
    cbz     x9, 3f
    cmp     x9, #0xf
    b.eq    3f
    mrs     x9, pmcr_el0
    ubfx    x10, x9, #11, #5            // PMCR_EL0.N
3:
    msr     mdcr_el2, x10
    mrs     x9, id_aa64pfr0_el1
    ubfx    x9, x9, #24, #4
    cbz     x9, 2f
    mrs     x9, S3_4_C12_C9_5           // ICC_SRE_EL2
    mov     x10, #0x9                   // Enable | SRE
    orr     x9, x9, x10
    msr     S3_4_C12_C9_5, x9
    isb
    msr     S3_4_C12_C11_0, xzr         // ICH_HCR_EL2
2:
    msr     cpacr_el1, xzr              // after HCR_EL2.E2H is 0: not redirected to CPTR_EL2
    ldr     x9, ={sctlr}
    msr     sctlr_el1, x9
    mov     x9, #0x3c5                  // EL1h, DAIF masked
    msr     spsr_el2, x9
    msr     elr_el2, x30
    isb
    eret
1:
    msr     daifset, #0xf
    msr     cpacr_el1, xzr
    isb
    ret

__asym_primary_entry:
    mov     x19, x0                     // DTB physical address
    mrs     x20, CurrentEL              // the EL the loader entered us at (bits 3:2)
    bl      __asym_el2_to_el1
    ldr     x9, ={sctlr}
    msr     sctlr_el1, x9               // MMU/caches off whatever the loader left
    isb
    adrp    x9, BOOT_STACKS
    add     x9, x9, :lo12:BOOT_STACKS
    movz    x10, #({stacks_len} >> 16), lsl #16
    add     sp, x9, x10
    adrp    x9, __bss_start
    add     x9, x9, :lo12:__bss_start
    adrp    x10, __bss_end
    add     x10, x10, :lo12:__bss_end
3:  cmp     x9, x10
    b.hs    4f
    stp     xzr, xzr, [x9], #16
    b       3b
4:
    adrp    x9, __asym_vectors
    add     x9, x9, :lo12:__asym_vectors
    msr     vbar_el1, x9
    msr     tpidr_el1, xzr
    isb
    mov     x0, x19
    ubfx    x1, x20, #2, #2
    bl      {kernel_main}
5:  wfi                         // DAIF masked, no timer armed: halts
    b       5b

// Minimal EL2 vectors for after the drop (Linux's `__hyp_stub_vectors`): the kernel runs at
// EL1 and nothing else is at EL2, so without them an HVC (a PSCI call through a DT saying
// `method = "hvc"`) or any other trap to EL2 jumped to VBAR_EL2's reset value and looped there
// silently. An HVC from EL1 returns SMCCC NOT_SUPPORTED (-1) in x0, as a hypervisor without the
// call would; any other exception from EL1 is handed to EL1's vectors as a synchronous
// exception carrying EL2's syndrome (ESR/FAR/ELR/SPSR copied), so the kernel reports it.
// An exception taken at EL2 itself can only come from `__asym_el2_to_el1`, before any
// console: the CPU halts. No stack is used: TPIDR_EL2 is the one scratch register.
    .section .text.vectors_el2, "ax"
    .balign 0x800
__asym_el2_vectors:
    .rept   8                           // current EL, SP0 and SPx
    .balign 0x80
    b       __asym_el2_halt
    .endr
    .balign 0x80                        // lower EL, AArch64: synchronous
    b       __asym_el2_lower_sync
    .rept   7                           // lower EL: IRQ, FIQ, SError; AArch32
    .balign 0x80
    b       __asym_el2_to_el1_vectors
    .endr

__asym_el2_halt:
    wfi
    b       __asym_el2_halt

__asym_el2_lower_sync:
    msr     tpidr_el2, x9
    mrs     x9, esr_el2
    lsr     x9, x9, #26
    cmp     x9, #0x16                   // EC: HVC from AArch64
    mrs     x9, tpidr_el2               // (flags kept: MRS does not set them)
    b.ne    __asym_el2_to_el1_vectors
    mov     x0, #-1                     // SMCCC_RET_NOT_SUPPORTED; ELR is past the HVC
    eret

__asym_el2_to_el1_vectors:
    msr     tpidr_el2, x9
    mrs     x9, esr_el2
    msr     esr_el1, x9
    mrs     x9, far_el2
    msr     far_el1, x9
    mrs     x9, elr_el2
    msr     elr_el1, x9
    mrs     x9, spsr_el2
    msr     spsr_el1, x9
    mrs     x9, vbar_el1
    add     x9, x9, #0x200              // current EL with SPx, synchronous: the kernel runs EL1h
    msr     elr_el2, x9
    mov     x9, #0x3c5                  // EL1h, DAIF masked, as exception entry leaves it
    msr     spsr_el2, x9
    mrs     x9, tpidr_el2
    eret

    .text
    .global _secondary_entry
_secondary_entry:
    mov     x19, x0                     // context_id = logical CPU index
    bl      __asym_el2_to_el1
    cmp     x19, #{max_cpus}
    b.hs    5b
    adrp    x9, BOOT_STACKS
    add     x9, x9, :lo12:BOOT_STACKS
    mov     x10, #{stack_size}
    add     x11, x19, #1
    mul     x10, x10, x11
    add     sp, x9, x10
    adrp    x9, __asym_vectors
    add     x9, x9, :lo12:__asym_vectors
    msr     vbar_el1, x9
    msr     tpidr_el1, x19
    isb
    // MMU on with the boot CPU's configuration (cleaned to PoC by the boot CPU).
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
    msr     daifclr, #4                 // SErrors reported, as on the boot CPU
    mov     x0, x19
    bl      {secondary_main}
    b       5b
"#,
    kernel_main = sym crate::boot::kernel_main,
    secondary_main = sym crate::boot::secondary_main,
    mmu_cfg = sym super::mmu::MMU_CONFIG,
    sctlr = const SCTLR_EL1_MMU_OFF,
    stack_size = const STACK_SIZE,
    stacks_len = const STACKS_LEN,
    max_cpus = const MAX_CPUS,
);

unsafe extern "C" {
    /// The secondary CPU entry point in the asm above (PSCI `CPU_ON` target).
    fn _secondary_entry();
}

/// Physical address of `_secondary_entry` (identity-mapped, so also its virtual address).
pub fn secondary_entry_pa() -> usize {
    _secondary_entry as *const () as usize
}
