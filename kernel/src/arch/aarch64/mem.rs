//! `memcpy` for the kernel: 64 bytes per iteration with `ldp`/`stp` when both pointers are
//! 8-byte aligned (Linux has its own too, `arch/arm64/lib/memcpy.S`).
//!
//! Why: the scheduler moves its 224-byte policy tasks by value (into and out of run queues and
//! the threads that park them), and the generic `memcpy` of `compiler_builtins` copies 8 bytes
//! per four instructions; under QEMU's instruction counting that was a quarter of a context
//! switch. Misaligned copies keep a byte loop: they are rare, and with the MMU off (Device
//! memory) an unaligned access would fault. Ours is a strong definition, so it replaces the
//! weak one `compiler_builtins` provides.

use core::arch::global_asm;

// x0 = dst, x1 = src, x2 = n; returns dst. Clobbers x3-x11 (caller-saved) only.
global_asm!(
    r#"
    .text
    .global memcpy
    .type memcpy, %function
memcpy:
    mov     x3, x0
    orr     x4, x0, x1
    tst     x4, #7
    b.ne    5f
1:  cmp     x2, #64
    b.lo    2f
    ldp     x4, x5, [x1]
    ldp     x6, x7, [x1, #16]
    ldp     x8, x9, [x1, #32]
    ldp     x10, x11, [x1, #48]
    add     x1, x1, #64
    sub     x2, x2, #64
    stp     x4, x5, [x3]
    stp     x6, x7, [x3, #16]
    stp     x8, x9, [x3, #32]
    stp     x10, x11, [x3, #48]
    add     x3, x3, #64
    b       1b
2:  tbz     x2, #5, 3f
    ldp     x4, x5, [x1]
    ldp     x6, x7, [x1, #16]
    add     x1, x1, #32
    stp     x4, x5, [x3]
    stp     x6, x7, [x3, #16]
    add     x3, x3, #32
3:  tbz     x2, #4, 4f
    ldp     x4, x5, [x1], #16
    stp     x4, x5, [x3], #16
4:  tbz     x2, #3, 6f
    ldr     x4, [x1], #8
    str     x4, [x3], #8
6:  and     x2, x2, #7
5:  cbz     x2, 7f
8:  ldrb    w4, [x1], #1
    subs    x2, x2, #1
    strb    w4, [x3], #1
    b.ne    8b
7:  ret
    .size memcpy, . - memcpy
"#
);
