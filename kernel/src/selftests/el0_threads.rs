//! EL0 threads sharing an address space (`thread_create`, docs/syscalls.md): the call refuses
//! a bad PC, SP or clear-tid word with an error (no fault), a space runs at most
//! `MAX_SPACE_THREADS` threads, the threads see one memory (they add into one word), each is
//! joined from EL0 through its clear-tid word, and afterwards the address space, the thread
//! slots and the heap are all back where they were.

use asym_sched::types::CpuMask;

use crate::selftest::{TestError, TestResult};
use crate::task::{self, ExitStatus, ThreadParams};
use crate::user::{self, DATA_VA, MAX_SPACE_THREADS, STACK_GUARD_VA, STACK_TOP};
use crate::{selftest, test_assert, test_eq};

use crate::user::el0_program as blob;

/// Workers the threads program creates: all the space may run besides its first thread.
const WORKERS: u32 = MAX_SPACE_THREADS - 1;
/// Each worker adds its index + 1 this many times.
const ADDS: u64 = 100;

// The threads program. Data page: +0 the shared sum (u64), +8 the "go" word, +64 one
// clear-tid word per worker. First the refused calls, each checked; then WORKERS workers
// (worker i: x0 = i, SP = STACK_TOP - 256 (i + 1)), each with its clear-tid word set to 1;
// one more is refused (-EAGAIN); "go"; then it waits (yielding) until every clear-tid word is
// 0 and checks the sum. exit(0), or exit(n) at the first check n that failed.
//
// A worker checks its SP, waits for "go", then adds i + 1 to the sum ADDS times with an
// exclusive load/store pair, yielding after each, and exits 0 (exit 1: wrong SP).
core::arch::global_asm!(
    r#"
    .section .rodata.el0thr, "a"
    .balign 4
    .global __el0_thr_start
__el0_thr_start:
    ldr     x19, 7f
    adr     x20, 5f
    mov     x24, sp
    // 1: PC not 4-aligned.
    mov     x21, #1
    add     x0, x20, #2
    mov     x1, x24
    mov     x2, #0
    mov     x3, #0
    mov     x8, #11
    svc     #0
    cmn     x0, #22
    b.ne    8f
    // 2: PC in the data page (not executable).
    mov     x21, #2
    mov     x0, x19
    mov     x1, x24
    mov     x2, #0
    mov     x3, #0
    mov     x8, #11
    svc     #0
    cmn     x0, #14
    b.ne    8f
    // 3: PC in the kernel.
    mov     x21, #3
    mov     x0, #0x40000000
    mov     x1, x24
    mov     x2, #0
    mov     x3, #0
    mov     x8, #11
    svc     #0
    cmn     x0, #14
    b.ne    8f
    // 4: SP not 16-aligned.
    mov     x21, #4
    mov     x0, x20
    sub     x1, x24, #8
    mov     x2, #0
    mov     x3, #0
    mov     x8, #11
    svc     #0
    cmn     x0, #22
    b.ne    8f
    // 5: SP right above the guard page (its stack would be the guard page).
    mov     x21, #5
    mov     x0, x20
    ldr     x1, 6f
    mov     x2, #0
    mov     x3, #0
    mov     x8, #11
    svc     #0
    cmn     x0, #14
    b.ne    8f
    // 6: SP at the top of the text page (read-only).
    mov     x21, #6
    mov     x0, x20
    and     x1, x20, #~0xfff
    add     x1, x1, #0x1000
    mov     x2, #0
    mov     x3, #0
    mov     x8, #11
    svc     #0
    cmn     x0, #14
    b.ne    8f
    // 7: SP 0.
    mov     x21, #7
    mov     x0, x20
    mov     x1, #0
    mov     x2, #0
    mov     x3, #0
    mov     x8, #11
    svc     #0
    cmn     x0, #14
    b.ne    8f
    // 8: clear-tid word in the text page.
    mov     x21, #8
    mov     x0, x20
    mov     x1, x24
    mov     x2, #0
    mov     x3, x20
    mov     x8, #11
    svc     #0
    cmn     x0, #14
    b.ne    8f
    // 9: clear-tid word not 4-aligned.
    mov     x21, #9
    mov     x0, x20
    mov     x1, x24
    mov     x2, #0
    add     x3, x19, #66
    mov     x8, #11
    svc     #0
    cmn     x0, #22
    b.ne    8f
    // 10: clear-tid word in the kernel.
    mov     x21, #10
    mov     x0, x20
    mov     x1, x24
    mov     x2, #0
    mov     x3, #0x40000000
    mov     x8, #11
    svc     #0
    cmn     x0, #14
    b.ne    8f
    // 11: the workers.
    mov     x21, #11
    mov     x22, #0
    add     x23, x19, #64
1:  mov     w9, #1
    str     w9, [x23, x22, lsl #2]
    mov     x0, x20
    sub     x1, x24, x22, lsl #8
    sub     x1, x1, #256
    mov     x2, x22
    add     x3, x23, x22, lsl #2
    mov     x8, #11
    svc     #0
    cmp     x0, #0
    b.le    8f
    add     x22, x22, #1
    cmp     x22, #{workers}
    b.ne    1b
    // 12: one thread more than the space may run.
    mov     x21, #12
    mov     x0, x20
    mov     x1, x24
    mov     x2, #0
    mov     x3, #0
    mov     x8, #11
    svc     #0
    cmn     x0, #11
    b.ne    8f
    mov     w9, #1
    add     x10, x19, #8
    stlr    w9, [x10]
    // Join: every clear-tid word back to 0.
    mov     x22, #0
2:  add     x10, x23, x22, lsl #2
    ldar    w9, [x10]
    cbz     w9, 3f
    mov     x8, #1
    svc     #0
    b       2b
3:  add     x22, x22, #1
    cmp     x22, #{workers}
    b.ne    2b
    // 13: the sum of every worker's adds.
    mov     x21, #13
    ldr     x9, [x19]
    ldr     x10, 4f
    cmp     x9, x10
    b.ne    8f
    mov     x21, #0
8:  mov     x8, #0
    mov     x0, x21
    svc     #0
    .balign 8
7:  .quad   {data_va}
6:  .quad   {guard_va} + 4096
4:  .quad   {sum}
3:  .quad   {stack_top}
5:  ldr     x19, 7b
    add     x20, x0, #1
    mov     x9, sp
    ldr     x10, 3b
    sub     x10, x10, x20, lsl #8
    cmp     x9, x10
    b.ne    9f
    mov     x21, #{adds}
    add     x22, x19, #8
4:  ldar    w9, [x22]
    cbnz    w9, 6f
    mov     x8, #1
    svc     #0
    b       4b
6:  ldxr    x9, [x19]
    add     x9, x9, x20
    stxr    w10, x9, [x19]
    cbnz    w10, 6b
    mov     x8, #1
    svc     #0
    subs    x21, x21, #1
    b.ne    6b
    mov     x8, #0
    mov     x0, #0
    svc     #0
9:  mov     x8, #0
    mov     x0, #1
    svc     #0
    .global __el0_thr_end
__el0_thr_end:
    .text
"#,
    data_va = const DATA_VA,
    guard_va = const STACK_GUARD_VA,
    stack_top = const STACK_TOP,
    workers = const WORKERS,
    adds = const ADDS,
    sum = const ADDS * (WORKERS as u64) * (WORKERS as u64 + 1) / 2,
);

blob!(threads, __el0_thr_start, __el0_thr_end);

fn err(e: impl core::fmt::Display) -> TestError {
    TestError::new(format_args!("{e}"))
}

/// One run of the threads program, on every CPU (its workers inherit its affinity).
fn run(text: &[u8]) -> TestResult {
    let params = ThreadParams {
        affinity: CpuMask(u64::MAX),
        ..ThreadParams::default()
    };
    let id = user::spawn("el0-threads", params, text, 0).map_err(err)?;
    let st = task::join(id).map_err(|e| err(format_args!("{e:?}")))?;
    test_eq!(st, ExitStatus::Exited(0));
    Ok(())
}

/// Waits (at most 2 s) until the address spaces and thread slots are back to `spaces0` and
/// `threads0`: a worker's clear-tid word is zeroed at its reap, just before its slot and its
/// reference to the space go, so the joiner may be a moment ahead of both.
fn settled(spaces0: u32, threads0: (usize, usize)) -> bool {
    super::sched::wait_until(2_000_000_000, || {
        user::live_spaces() == spaces0 && task::counts() == threads0
    })
}

fn el0_threads_share_space() -> TestResult {
    let spaces0 = user::live_spaces();
    let threads0 = task::counts();
    // The first run may grow what grows once (per-CPU queues, the console).
    run(threads())?;
    test_assert!(
        settled(spaces0, threads0),
        "after the first run: {} address spaces (expected {}), thread slots {:?} (expected {:?})",
        user::live_spaces(),
        spaces0,
        task::counts(),
        threads0
    );
    let heap0 = crate::heap::stats().used;
    run(threads())?;
    test_assert!(
        settled(spaces0, threads0),
        "after the second run: {} address spaces (expected {}), thread slots {:?} (expected {:?})",
        user::live_spaces(),
        spaces0,
        task::counts(),
        threads0
    );
    test_eq!(user::tasks_with_space(), 0);
    test_eq!(crate::heap::stats().used, heap0);
    Ok(())
}

selftest!(name = "el0_threads_share_space", el0_threads_share_space);
