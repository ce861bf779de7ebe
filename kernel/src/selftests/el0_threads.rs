//! EL0 threads sharing an address space (`thread_create`, docs/syscalls.md): the call refuses
//! a bad PC, SP or clear-tid word with an error (no fault), a space runs at most
//! `MAX_SPACE_THREADS` threads, the threads see one memory (they add into one word), each is
//! joined from EL0 through its clear-tid word, and afterwards the address space, the thread
//! slots and the heap are all back where they were. The futex calls between threads of one
//! space: refusals, the value check, timeouts, a ping-pong, wake-N counts, and the futex wake
//! of a clear-tid word.

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
pub(super) fn settled(spaces0: u32, threads0: (usize, usize)) -> bool {
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

/// Round trips of the futex ping-pong between the futex program's two threads.
const PING_ROUNDS: u32 = 200;
/// Threads of the futex program that wait on its word Q at once.
const Q_WAITERS: u32 = 3;
/// Q's offset in the data page (the kernel counts its waiters).
const Q_OFF: usize = 0x400;

// The futex program. Data page: +0x100 a word W (0), +0x200 the ping-pong word P, +0x300
// the partner's clear-tid word, +0x400 the word Q, +0x500 the waiters' clear-tid words,
// +0x600 the count of waiters woken with 0. Checks, in order: futex_wait / futex_wake refuse
// a misaligned (-EINVAL), kernel or unmapped (-EFAULT) word; futex_wait on a word that does
// not hold the value returns -EAGAIN (not a timeout: the check is made); on one that does it
// sleeps until the timeout (-ETIMEDOUT, ≥ 100 µs of clock); a wake with no waiter wakes 0;
// PING_ROUNDS round trips with a partner thread on P (each side sleeps in futex_wait for the
// other's value); the partner is joined by its clear-tid word (the kernel zeroes it at reap
// and futex-wakes it); Q_WAITERS threads wait on Q, the program waits for the kernel (which
// sees them waiting) with `wait`, then wake(Q, 2) wakes 2, the next wakes 1, the next 0; the
// waiters are joined and each saw 0 from its wait. exit(0), or the number of the failed check.
// The partner (x0 = rounds) waits for each odd value of P and answers with the next even
// one; on a surprise it stores -1 to P (the main thread fails on it) and exits 1.
core::arch::global_asm!(
    r#"
    .section .rodata.el0futex, "a"
    .macro SYS nr
    mov     x8, #\nr
    svc     #0
    .endm
    .balign 4
    .global __el0_futex_start
__el0_futex_start:
    ldr     x19, 7f
    mov     x24, sp
    // 1: futex_wait on a misaligned word.
    mov     x21, #1
    add     x0, x19, #1
    mov     x1, #0
    mov     x2, #0
    SYS     12
    cmn     x0, #22
    b.ne    8f
    // 2: futex_wait on kernel memory.
    mov     x21, #2
    mov     x0, #0x40000000
    mov     x1, #0
    mov     x2, #0
    SYS     12
    cmn     x0, #14
    b.ne    8f
    // 3: futex_wait on an unmapped user address.
    mov     x21, #3
    ldr     x0, 6f
    mov     x1, #0
    mov     x2, #0
    SYS     12
    cmn     x0, #14
    b.ne    8f
    // 4, 5: futex_wake on a misaligned word, on kernel memory.
    mov     x21, #4
    add     x0, x19, #2
    mov     x1, #1
    SYS     13
    cmn     x0, #22
    b.ne    8f
    mov     x21, #5
    mov     x0, #0x40000000
    mov     x1, #1
    SYS     13
    cmn     x0, #14
    b.ne    8f
    // 6: W is 0, 1 expected: -EAGAIN at once (1 ms timeout: a wait would time out).
    mov     x21, #6
    add     x0, x19, #0x100
    mov     x1, #1
    mov     x2, #0x4240
    movk    x2, #0xf, lsl #16
    SYS     12
    cmn     x0, #11
    b.ne    8f
    // 7: W is 0, 0 expected: sleeps until the 100 µs timeout.
    mov     x21, #7
    SYS     4
    mov     x22, x0
    add     x0, x19, #0x100
    mov     x1, #0
    mov     x2, #0x86a0
    movk    x2, #1, lsl #16
    SYS     12
    cmn     x0, #110
    b.ne    8f
    SYS     4
    sub     x9, x0, x22
    mov     x10, #0x86a0
    movk    x10, #1, lsl #16
    cmp     x9, x10
    b.lo    8f
    // 8: a wake with nobody waiting wakes 0.
    mov     x21, #8
    add     x0, x19, #0x100
    mov     x1, #5
    SYS     13
    cbnz    x0, 8f
    // 9: ping-pong with a partner thread on P.
    mov     x21, #9
    add     x23, x19, #0x300
    mov     w9, #1
    str     w9, [x23]
    adr     x0, 5f
    sub     x1, x24, #1024
    mov     x2, #{rounds}
    mov     x3, x23
    SYS     11
    cmp     x0, #0
    b.le    8f
    add     x20, x19, #0x200
    mov     w22, #1
1:  stlr    w22, [x20]
    mov     x0, x20
    mov     x1, #1
    SYS     13
    add     w25, w22, #1
2:  ldar    w9, [x20]
    cmp     w9, w25
    b.eq    3f
    cmn     w9, #1
    b.eq    8f
    mov     x0, x20
    mov     w1, w9
    mov     x2, #-1
    SYS     12
    cmn     x0, #11
    b.eq    2b
    cbnz    x0, 8f
    b       2b
3:  add     w22, w22, #2
    cmp     w22, #(2 * {rounds} + 1)
    b.ne    1b
    // 10: join the partner through its clear-tid word.
    mov     x21, #10
14: ldar    w9, [x23]
    cbz     w9, 15f
    mov     x0, x23
    mov     w1, w9
    mov     x2, #-1
    SYS     12
    cmn     x0, #11
    b.eq    14b
    cbnz    x0, 8f
    b       14b
    // 11: the waiters on Q.
15: mov     x21, #11
    add     x25, x19, #0x500
    mov     x22, #0
16: mov     w9, #1
    str     w9, [x25, x22, lsl #2]
    adr     x0, 20f
    sub     x1, x24, #2048
    sub     x1, x1, x22, lsl #8
    mov     x2, #0
    add     x3, x25, x22, lsl #2
    SYS     11
    cmp     x0, #0
    b.le    8f
    add     x22, x22, #1
    cmp     x22, #{waiters}
    b.ne    16b
    // 12: the kernel wakes this thread once it sees them all waiting on Q.
    mov     x21, #12
    mov     x0, #-1
    SYS     8
    cbnz    x0, 8f
    // 13-15: wake 2 of 3, then the last, then nobody.
    add     x20, x19, #{q}
    mov     x21, #13
    mov     x0, x20
    mov     x1, #2
    SYS     13
    cmp     x0, #2
    b.ne    8f
    mov     x21, #14
    mov     x0, x20
    mov     x1, #2
    SYS     13
    cmp     x0, #1
    b.ne    8f
    mov     x21, #15
    mov     x0, x20
    mov     x1, #2
    SYS     13
    cbnz    x0, 8f
    // 16: join the waiters.
    mov     x21, #16
    mov     x22, #0
17: add     x23, x25, x22, lsl #2
18: ldar    w9, [x23]
    cbz     w9, 19f
    mov     x0, x23
    mov     w1, w9
    mov     x2, #-1
    SYS     12
    cmn     x0, #11
    b.eq    18b
    cbnz    x0, 8f
    b       18b
19: add     x22, x22, #1
    cmp     x22, #{waiters}
    b.ne    17b
    // 17: every waiter's futex_wait returned 0.
    mov     x21, #17
    ldr     w9, [x19, #0x600]
    cmp     w9, #{waiters}
    b.ne    8f
    mov     x21, #0
8:  mov     x0, x21
    SYS     0
    .balign 8
7:  .quad   {data_va}
6:  .quad   {user_base}
    // The partner.
5:  ldr     x19, 7b
    add     x20, x19, #0x200
    mov     w22, #1
    mov     x23, x0
11: ldar    w9, [x20]
    cmp     w9, w22
    b.eq    12f
    mov     x0, x20
    mov     w1, w9
    mov     x2, #-1
    SYS     12
    cmn     x0, #11
    b.eq    11b
    cbnz    x0, 13f
    b       11b
12: add     w9, w22, #1
    stlr    w9, [x20]
    mov     x0, x20
    mov     x1, #1
    SYS     13
    add     w22, w22, #2
    subs    x23, x23, #1
    b.ne    11b
    mov     x0, #0
    SYS     0
13: mov     w9, #-1
    stlr    w9, [x20]
    mov     x0, x20
    mov     x1, #1
    SYS     13
    mov     x0, #1
    SYS     0
    // A waiter on Q: counts a 0 from its futex_wait.
20: ldr     x19, 7b
    add     x0, x19, #{q}
    mov     x1, #0
    mov     x2, #-1
    SYS     12
    cbnz    x0, 21f
    add     x10, x19, #0x600
22: ldxr    w9, [x10]
    add     w9, w9, #1
    stxr    w11, w9, [x10]
    cbnz    w11, 22b
21: mov     x0, #0
    SYS     0
    .purgem SYS
    .global __el0_futex_end
__el0_futex_end:
    .text
"#,
    data_va = const DATA_VA,
    user_base = const crate::arch::uspace::USER_BASE,
    rounds = const PING_ROUNDS,
    waiters = const Q_WAITERS,
    q = const Q_OFF,
);

blob!(futex, __el0_futex_start, __el0_futex_end);

/// One run of the futex program: the kernel wakes it (`wait`) once its Q_WAITERS threads
/// all sleep in `futex_wait` on Q.
fn run_futex() -> TestResult {
    let params = ThreadParams {
        affinity: CpuMask(u64::MAX),
        ..ThreadParams::default()
    };
    let id = user::spawn("el0-futex", params, futex(), 0).map_err(err)?;
    let waiting = super::sched::wait_until(5_000_000_000, || {
        user::futex_waiters(id, DATA_VA + Q_OFF) == Q_WAITERS as usize && user::waits(id)
    });
    user::wake_from_kernel(id);
    let st = task::join(id).map_err(|e| err(format_args!("{e:?}")))?;
    test_eq!(st, ExitStatus::Exited(0));
    test_assert!(
        waiting,
        "never saw {} threads in futex_wait on Q and the first in wait",
        Q_WAITERS
    );
    Ok(())
}

fn el0_futex_wait_wake() -> TestResult {
    let spaces0 = user::live_spaces();
    let threads0 = task::counts();
    run_futex()?;
    test_assert!(
        settled(spaces0, threads0),
        "threads or spaces left after the first run"
    );
    let heap0 = crate::heap::stats().used;
    run_futex()?;
    test_assert!(
        settled(spaces0, threads0),
        "threads or spaces left after the second run"
    );
    test_eq!(user::tasks_with_space(), 0);
    test_eq!(crate::heap::stats().used, heap0);
    Ok(())
}

selftest!(name = "el0_futex_wait_wake", el0_futex_wait_wake);
