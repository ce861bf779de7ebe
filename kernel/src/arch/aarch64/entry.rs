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

/// Bytes of boot stack per CPU.
pub const STACK_SIZE: usize = 64 * 1024;

/// Boot stacks: slot `i < MAX_CPUS` for secondary CPU `i`, slot `MAX_CPUS` for the boot CPU
/// (whose logical index is known only after the DT is parsed).
#[repr(C, align(16))]
pub struct BootStacks(UnsafeCell<[[u8; STACK_SIZE]; MAX_CPUS + 1]>);

// SAFETY: each stack slot is used by exactly one CPU; Rust code never accesses the array.
unsafe impl Sync for BootStacks {}

/// The boot stacks, in their own NOLOAD section (linker/kernel.ld `.stacks`) after BSS: not
/// zeroed at boot (zeroing 576 KiB took 2.3 ms of guest time), not in the Image file.
#[unsafe(no_mangle)]
#[unsafe(link_section = ".stacks")]
pub static BOOT_STACKS: BootStacks = BootStacks(UnsafeCell::new([[0; STACK_SIZE]; MAX_CPUS + 1]));

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
// Drops from EL2 to EL1 if entered at EL2; returns at EL1 with DAIF masked. Clobbers x9, x10.
// EL1 gets: AArch64 (HCR_EL2.RW), the physical counter and timer without traps
// (CNTHCTL_EL2.EL1PCTEN|EL1PCEN), CNTVOFF = 0 (virtual = physical count), no FP/SIMD traps,
// and, when a GICv3 CPU interface exists, the ICC_* system registers (ICC_SRE_EL2.Enable|SRE).
    .global __asym_el2_to_el1
__asym_el2_to_el1:
    mrs     x9, CurrentEL
    lsr     x9, x9, #2
    cmp     x9, #2
    b.ne    1f
    mov     x9, #(1 << 31)
    msr     hcr_el2, x9
    mov     x9, #3
    msr     cnthctl_el2, x9
    msr     cntvoff_el2, xzr
    mov     x9, #0x33ff
    msr     cptr_el2, x9
    msr     hstr_el2, xzr
    mrs     x9, id_aa64pfr0_el1
    ubfx    x9, x9, #24, #4
    cbz     x9, 2f
    mrs     x9, S3_4_C12_C9_5           // ICC_SRE_EL2
    mov     x10, #0x9                   // Enable | SRE
    orr     x9, x9, x10
    msr     S3_4_C12_C9_5, x9
    isb
2:
    ldr     x9, ={sctlr}
    msr     sctlr_el1, x9
    mov     x9, #0x3c5                  // EL1h, DAIF masked
    msr     spsr_el2, x9
    msr     elr_el2, x30
    isb
    eret
1:
    msr     daifset, #0xf
    ret

__asym_primary_entry:
    mov     x19, x0                     // DTB physical address
    bl      __asym_el2_to_el1
    ldr     x9, ={sctlr}
    msr     sctlr_el1, x9               // MMU/caches off whatever the loader left
    isb
    adrp    x9, BOOT_STACKS
    add     x9, x9, :lo12:BOOT_STACKS
    mov     x10, #{stack_size}
    mov     x11, #({max_cpus} + 1)
    mul     x10, x10, x11
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
    bl      {kernel_main}
5:  wfe
    b       5b

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
    mov     x0, x19
    bl      {secondary_main}
    b       5b
"#,
    kernel_main = sym crate::boot::kernel_main,
    secondary_main = sym crate::boot::secondary_main,
    mmu_cfg = sym super::mmu::MMU_CONFIG,
    sctlr = const SCTLR_EL1_MMU_OFF,
    stack_size = const STACK_SIZE,
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
