//! EL0 tasks: bad EL0 programs are killed with the right report (exception class, fault
//! address, PC) while good EL0 tasks keep making system calls and finish; the scheduling calls
//! refuse bad arguments with Linux's errno and apply good ones; random system calls (the
//! fuzzer, whose tasks also create threads that fuzz in their space) neither fault the kernel
//! nor leak. Afterwards no address space, ASID or heap byte is left behind. The ABI is
//! docs/syscalls.md.
//!
//! The programs are position-independent A64 blobs kept in the kernel's rodata (never
//! executable there) and copied into each task's text page.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use asym_sched::types::{CpuId, CpuMask};

use crate::arch::uspace;
use crate::selftest::{TestError, TestResult};
use crate::task::{self, ExitStatus, ThreadParams};
use crate::user::{self, DATA_VA, STACK_GUARD_VA, STACK_TOP, TEXT_VA};
use crate::{selftest, test_assert, test_eq};

use crate::user::el0_program as blob;

// x0 = iterations, also the task's tag: stored in its data page at start and checked every
// round, so a task that ran on another task's tables (a missed TTBR1 switch) fails. Each round: write a line, yield, read the clock, sleep 50 µs, check that a
// write from a kernel address and an oversized write are refused (-EFAULT, -EINVAL), touch
// the stack. exit(0) when all went as expected, exit(1 + n) at the first surprise n.
core::arch::global_asm!(
    r#"
    .section .rodata.el0, "a"
    .balign 4
    .global __el0_good_start
__el0_good_start:
    mov     x19, x0
    mov     x24, x0
    adr     x20, 9f
    ldr     x23, 7f
    str     x24, [x23]
1:  ldr     x9, [x23]
    cmp     x9, x24
    mov     x21, #8
    b.ne    8f
    mov     x8, #5
    mov     x0, x20
    mov     x1, #11
    svc     #0
    cmp     x0, #11
    mov     x21, #2
    b.ne    8f
    mov     x8, #1
    svc     #0
    mov     x8, #4
    svc     #0
    mov     x22, x0
    mov     x8, #2
    mov     x0, #50000
    svc     #0
    mov     x8, #4
    svc     #0
    cmp     x0, x22
    mov     x21, #3
    b.ls    8f
    mov     x8, #5
    mov     x0, #0x40000000
    mov     x1, #16
    svc     #0
    cmn     x0, #14
    mov     x21, #4
    b.ne    8f
    mov     x8, #5
    mov     x0, x20
    mov     x1, #-1
    svc     #0
    cmn     x0, #22
    mov     x21, #5
    b.ne    8f
    mov     x8, #999
    svc     #0
    cmn     x0, #38
    mov     x21, #6
    b.ne    8f
    stp     x19, x20, [sp, #-16]!
    ldp     x9, x10, [sp], #16
    cmp     x9, x19
    mov     x21, #7
    b.ne    8f
    subs    x19, x19, #1
    b.ne    1b
    mov     x21, #0
8:  mov     x8, #0
    mov     x0, x21
    svc     #0
9:  .ascii  "el0: hello\n\0"
    .balign 8
7:  .quad   {data_va}
    .global __el0_good_end
__el0_good_end:

// x0 = an address: load from it.
    .global __el0_load_start
__el0_load_start:
    ldr     x1, [x0]
    mov     x8, #0
    svc     #0
    .global __el0_load_end
__el0_load_end:

// x0 = an address: store to it.
    .global __el0_store_start
__el0_store_start:
    str     x0, [x0]
    mov     x8, #0
    svc     #0
    .global __el0_store_end
__el0_store_end:

// x0 = an address: jump to it.
    .global __el0_jump_start
__el0_jump_start:
    br      x0
    .global __el0_jump_end
__el0_jump_end:

// An undefined instruction.
    .global __el0_undef_start
__el0_undef_start:
    udf     #0
    .global __el0_undef_end
__el0_undef_end:

// Unbounded recursion: 512 bytes a frame until the guard page.
    .global __el0_recurse_start
__el0_recurse_start:
    sub     sp, sp, #512
    str     xzr, [sp]
    b       __el0_recurse_start
    .global __el0_recurse_end
__el0_recurse_end:

// x0 = an address: exclusive load (alignment checked whatever SCTLR_EL1.A says).
    .global __el0_excl_start
__el0_excl_start:
    ldaxr   x1, [x0]
    mov     x8, #0
    svc     #0
    .global __el0_excl_end
__el0_excl_end:

// The scheduling and wait/wake calls, x0 = the id of a kernel thread. Builds a `struct
// sched_attr` in its data page and checks each result; exits 0, or with the number of the
// first check that failed. Last, it waits (no timeout) for the kernel, which checks the
// task's nice and clamps meanwhile and then wakes it.
    .global __el0_attr_start
__el0_attr_start:
    mov     x19, x0
    ldr     x20, 7f
    mov     w9, #56
    str     w9, [x20, #0]
    str     wzr, [x20, #4]
    mov     x9, #0x20
    str     x9, [x20, #8]
    mov     w9, #5
    str     w9, [x20, #16]
    str     wzr, [x20, #20]
    mov     w9, #300
    str     w9, [x20, #48]
    mov     w9, #1024
    str     w9, [x20, #52]
    // 1: nice 5, uclamp_min 300 on itself.
    mov     x21, #1
    mov     x8, #6
    mov     x0, #0
    mov     x1, x20
    mov     x2, #0
    svc     #0
    cbnz    x0, 8f
    // 2: the syscall's own flags must be 0.
    mov     x21, #2
    mov     x8, #6
    mov     x0, #0
    mov     x1, x20
    mov     x2, #1
    svc     #0
    cmn     x0, #22
    b.ne    8f
    // 3: attr in kernel memory.
    mov     x21, #3
    mov     x8, #6
    mov     x0, #0
    mov     x1, #0x40000000
    mov     x2, #0
    svc     #0
    cmn     x0, #14
    b.ne    8f
    // 4: a kernel thread is not ours to change.
    mov     x21, #4
    mov     x8, #6
    mov     x0, x19
    mov     x1, x20
    mov     x2, #0
    svc     #0
    cmn     x0, #1
    b.ne    8f
    // 5: no such thread.
    mov     x21, #5
    mov     x8, #6
    mov     x0, #0xfffe
    mov     x1, x20
    mov     x2, #0
    svc     #0
    cmn     x0, #3
    b.ne    8f
    // 6: size 47, below SCHED_ATTR_SIZE_VER0.
    mov     x21, #6
    mov     w9, #47
    str     w9, [x20, #0]
    mov     x8, #6
    mov     x0, #0
    mov     x1, x20
    mov     x2, #0
    svc     #0
    cmn     x0, #7
    b.ne    8f
    // 7: size 64 with a non-zero byte past the known struct.
    mov     x21, #7
    mov     w9, #64
    str     w9, [x20, #0]
    mov     w9, #1
    strb    w9, [x20, #60]
    mov     x8, #6
    mov     x0, #0
    mov     x1, x20
    mov     x2, #0
    svc     #0
    cmn     x0, #7
    b.ne    8f
    strb    wzr, [x20, #60]
    mov     w9, #56
    str     w9, [x20, #0]
    // 8: uclamp_min 1025.
    mov     x21, #8
    mov     w9, #1025
    str     w9, [x20, #48]
    mov     x8, #6
    mov     x0, #0
    mov     x1, x20
    mov     x2, #0
    svc     #0
    cmn     x0, #22
    b.ne    8f
    // 9: min 800 above max 700.
    mov     x21, #9
    mov     w9, #800
    str     w9, [x20, #48]
    mov     w9, #700
    str     w9, [x20, #52]
    mov     x9, #0x60
    str     x9, [x20, #8]
    mov     x8, #6
    mov     x0, #0
    mov     x1, x20
    mov     x2, #0
    svc     #0
    cmn     x0, #22
    b.ne    8f
    // 10: SCHED_FIFO is not run here.
    mov     x21, #10
    mov     x9, #0
    str     x9, [x20, #8]
    mov     w9, #1
    str     w9, [x20, #4]
    mov     x8, #6
    mov     x0, #0
    mov     x1, x20
    mov     x2, #0
    svc     #0
    cmn     x0, #22
    b.ne    8f
    // 11: affinity: an empty mask, a length not a multiple of 8, a kernel pointer.
    mov     x21, #11
    add     x22, x20, #256
    str     xzr, [x22]
    mov     x8, #7
    mov     x0, #0
    mov     x1, #8
    mov     x2, x22
    svc     #0
    cmn     x0, #22
    b.ne    8f
    mov     x21, #12
    mov     x8, #7
    mov     x0, #0
    mov     x1, #4
    mov     x2, x22
    svc     #0
    cmn     x0, #22
    b.ne    8f
    mov     x21, #13
    mov     x8, #7
    mov     x0, #0
    mov     x1, #8
    mov     x2, #0x40000000
    svc     #0
    cmn     x0, #14
    b.ne    8f
    // 14: nothing pending: wait(0) times out.
    mov     x21, #14
    mov     x8, #8
    mov     x0, #0
    svc     #0
    cmn     x0, #110
    b.ne    8f
    // 15: a wake-up of itself is consumed by the next wait, which names it as the waker.
    mov     x21, #15
    mov     x8, #10
    svc     #0
    mov     x23, x0
    mov     x8, #9
    mov     x0, #0
    svc     #0
    cbnz    x0, 8f
    mov     x8, #8
    mov     x0, #0
    svc     #0
    cmp     x0, x23
    b.ne    8f
    // 16: wait for the kernel (waker id 0) with no time limit.
    mov     x21, #16
    mov     x8, #8
    mov     x0, #-1
    svc     #0
    cbnz    x0, 8f
    mov     x21, #0
8:  mov     x8, #0
    mov     x0, x21
    svc     #0
    .balign 8
7:  .quad   {data_va}
    .global __el0_attr_end
__el0_attr_end:

// The syscall fuzzer: x0 = seed (high 32 bits, made odd) and calls to make (low 32 bits).
// Each call: a random number (0..=16, the last call, from 5 random bits with 17..=31 folded
// onto 1..=15; exit replaced by gettid; one in 32 a random 64-bit number) and six arguments,
// each either random or from the pool of nasty values below;
// the calls that may block get at most 65 µs (sleep_for, wait, futex_wait) or a deadline in
// the past (sleep_until). Half of its thread_create calls get a good entry (this program, a
// random seed, FUZZ_CHILD_CALLS calls), SP and, half of those, a clear-tid word past the
// dots: the threads it creates fuzz the same way, in its space, and may create more. Its data
// page is filled with '.' first, so a write that is let through prints dots. exit(0) when
// done: any fault would kill it instead.
    .macro EL0_FUZZ_NEXT
    eor     x20, x20, x20, lsl #13
    eor     x20, x20, x20, lsr #7
    eor     x20, x20, x20, lsl #17
    .endm
    .macro EL0_FUZZ_ARG reg
    EL0_FUZZ_NEXT
    lsr     \reg, x20, #8
    tbz     x20, #4, 1f
    and     x9, x20, #15
    ldr     \reg, [x21, x9, lsl #3]
1:
    .endm
    .global __el0_fuzz_start
__el0_fuzz_start:
    lsr     x20, x0, #32
    orr     x20, x20, #1
    mov     w19, w0
    adr     x21, 5f
    ldr     x22, [x21, #(5 * 8)]
    mov     x9, #2048
    mov     w10, #0x2e
3:  subs    x9, x9, #1
    strb    w10, [x22, x9]
    b.ne    3b
    cbz     x19, 9f
2:  EL0_FUZZ_ARG x0
    EL0_FUZZ_ARG x1
    EL0_FUZZ_ARG x2
    EL0_FUZZ_ARG x3
    EL0_FUZZ_ARG x4
    EL0_FUZZ_ARG x5
    EL0_FUZZ_NEXT
    and     x8, x20, #31
    cmp     x8, #16
    b.ls    8f
    sub     x8, x8, #16
8:  ubfx    x9, x20, #11, #5
    cbnz    x9, 4f
    mov     x8, x20
4:  cbnz    x8, 4f
    mov     x8, #10
4:  cmp     x8, #12
    b.ne    4f
    and     x2, x2, #0xffff
4:  cmp     x8, #11
    b.ne    4f
    tbz     x20, #9, 4f
    adr     x0, __el0_fuzz_start
    ldr     x1, [x21, #(16 * 8)]
    and     x2, x20, #0xffffffff00000000
    orr     x2, x2, #{child_calls}
    mov     x3, #0
    tbz     x20, #10, 4f
    add     x3, x22, #3072
4:  cmp     x8, #2
    b.eq    6f
    cmp     x8, #3
    b.eq    6f
    cmp     x8, #8
    b.ne    7f
6:  and     x0, x0, #0xffff
7:  svc     #0
    subs    x19, x19, #1
    b.ne    2b
9:  mov     x8, #0
    mov     x0, #0
    svc     #0
    .balign 8
5:  .quad   0
    .quad   0x40000000
    .quad   {ktext}
    .quad   {kdata}
    .quad   {user_base}
    .quad   {data_va}
    .quad   {data_va} + 1
    .quad   {data_va} + 4090
    .quad   {guard_va}
    .quad   {text_va}
    .quad   0xfffffffffffffff8
    .quad   1 << 40
    .quad   0xffffffff
    .quad   56
    .quad   8
    .quad   1024
    // Not in the pool: the SP of the threads it creates.
    .quad   {stack_top}
    .global __el0_fuzz_end
__el0_fuzz_end:
    .text
"#,
    data_va = const DATA_VA,
    text_va = const TEXT_VA,
    guard_va = const STACK_GUARD_VA,
    user_base = const uspace::USER_BASE,
    stack_top = const STACK_TOP,
    child_calls = const FUZZ_CHILD_CALLS,
    ktext = sym el0_syscall_fuzz,
    kdata = sym crate::arch::aarch64::mmu::MMU_CONFIG,
);

blob!(good, __el0_good_start, __el0_good_end);
blob!(load, __el0_load_start, __el0_load_end);
blob!(store, __el0_store_start, __el0_store_end);
blob!(jump, __el0_jump_start, __el0_jump_end);
blob!(undef, __el0_undef_start, __el0_undef_end);
blob!(recurse, __el0_recurse_start, __el0_recurse_end);
blob!(excl, __el0_excl_start, __el0_excl_end);
blob!(attr, __el0_attr_start, __el0_attr_end);
blob!(fuzz, __el0_fuzz_start, __el0_fuzz_end);

fn err(e: impl core::fmt::Display) -> TestError {
    TestError::new(format_args!("{e}"))
}

/// A thread pinned to the `cpu`-th online CPU (wrapping: `maxcpus=` may leave some down).
fn params(cpu: usize) -> ThreadParams {
    let n = crate::smp::online_count().max(1);
    let cpu = crate::smp::online_cpus().nth(cpu % n).unwrap_or(CpuId(0));
    ThreadParams {
        affinity: CpuMask::of(cpu),
        ..ThreadParams::default()
    }
}

/// What a killed program must report: exception class and fault address (`None`: not
/// checked, for an instruction abort, where FAR is the PC).
struct Bad {
    name: &'static str,
    text: fn() -> &'static [u8],
    arg: u64,
    ec: u8,
    far: Option<u64>,
    pc: u64,
}

/// Set to stop [`daif_watch`].
static WATCH_STOP: AtomicBool = AtomicBool::new(false);
/// DAIF bits D and F as [`daif_watch`] found them clear (0: never), and its rounds.
static WATCH_BAD: AtomicU64 = AtomicU64::new(0);
static WATCH_ROUNDS: AtomicU64 = AtomicU64::new(0);

/// A kernel thread beside the good EL0 tasks on their CPU: every time it runs (after a switch
/// from an EL0 task's system call or preemption), the kernel's own masks must hold: debug and
/// FIQ masked. EL0 runs with all of DAIF clear; none of that may leak into kernel threads.
fn daif_watch(_: usize) {
    while !WATCH_STOP.load(Ordering::Acquire) {
        let daif: u64;
        // SAFETY: reading DAIF has no side effects.
        unsafe { core::arch::asm!("mrs {}, daif", out(reg) daif, options(nomem, nostack)) };
        let missing = !daif & ((1 << 9) | (1 << 6));
        if missing != 0 {
            WATCH_BAD.fetch_or(missing, Ordering::Relaxed);
        }
        WATCH_ROUNDS.fetch_add(1, Ordering::Relaxed);
        crate::sched::yield_now();
    }
}

/// One round: the bad programs and the good one, all joined; checks each exit.
fn round() -> TestResult {
    let asids0 = uspace::asids_in_use();
    // The kernel's own data, and a page of a live kernel-held address space (another task's
    // memory, reached through the kernel's alias of it).
    let kernel_data = (&raw const crate::arch::aarch64::mmu::MMU_CONFIG) as u64;
    let other = user::build_space(good()).map_err(err)?;
    let (_, other_pa) = other.lookup(DATA_VA).ok_or_else(|| err("no data page"))?;
    let cases = [
        Bad {
            name: "el0-kread",
            text: load,
            arg: kernel_data,
            ec: 0x24,
            far: Some(kernel_data),
            pc: TEXT_VA as u64,
        },
        Bad {
            name: "el0-kwrite",
            text: store,
            arg: kernel_data,
            ec: 0x24,
            far: Some(kernel_data),
            pc: TEXT_VA as u64,
        },
        Bad {
            name: "el0-other",
            text: store,
            arg: other_pa as u64,
            ec: 0x24,
            far: Some(other_pa as u64),
            pc: TEXT_VA as u64,
        },
        Bad {
            name: "el0-exec-data",
            text: jump,
            arg: DATA_VA as u64,
            ec: 0x20,
            far: Some(DATA_VA as u64),
            pc: DATA_VA as u64,
        },
        Bad {
            name: "el0-exec-stack",
            text: jump,
            arg: (STACK_TOP - 4096) as u64,
            ec: 0x20,
            far: Some((STACK_TOP - 4096) as u64),
            pc: (STACK_TOP - 4096) as u64,
        },
        Bad {
            name: "el0-exec-kernel",
            text: jump,
            arg: el0_faults_kill_only_the_task as *const () as u64,
            ec: 0x20,
            far: None,
            pc: el0_faults_kill_only_the_task as *const () as u64,
        },
        Bad {
            name: "el0-undef",
            text: undef,
            arg: 0,
            ec: 0x00,
            far: None,
            pc: TEXT_VA as u64,
        },
        Bad {
            name: "el0-overflow",
            text: recurse,
            arg: 0,
            ec: 0x24,
            far: Some((STACK_GUARD_VA + 4096 - 512) as u64),
            pc: (TEXT_VA + 4) as u64,
        },
        Bad {
            name: "el0-misalign",
            text: excl,
            arg: DATA_VA as u64 + 1,
            ec: 0x24,
            far: Some(DATA_VA as u64 + 1),
            pc: TEXT_VA as u64,
        },
    ];
    // Two good tasks share CPU 1 (they yield and sleep every round, so they switch between
    // each other's address spaces all the time).
    let good_ids = [
        user::spawn("el0-good-a", params(1), good(), 200).map_err(err)?,
        user::spawn("el0-good-b", params(1), good(), 201).map_err(err)?,
    ];
    WATCH_STOP.store(false, Ordering::Release);
    WATCH_BAD.store(0, Ordering::Relaxed);
    WATCH_ROUNDS.store(0, Ordering::Relaxed);
    let watch = task::spawn("el0-daif-watch", params(1), daif_watch, 0).map_err(err)?;
    let mut ids = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        ids.push(user::spawn(c.name, params(i % 2 * 2), (c.text)(), c.arg).map_err(err)?);
    }
    for (c, id) in cases.iter().zip(ids) {
        let st = task::join(id).map_err(|e| err(format_args!("{e:?}")))?;
        match st {
            ExitStatus::Fault { ec, far, pc } => {
                test_assert!(
                    ec == c.ec,
                    "{}: EC {:#04x}, expected {:#04x}",
                    c.name,
                    ec,
                    c.ec
                );
                if let Some(want) = c.far {
                    test_assert!(
                        far == want,
                        "{}: FAR {:#x}, expected {:#x}",
                        c.name,
                        far,
                        want
                    );
                }
                test_assert!(pc == c.pc, "{}: PC {:#x}, expected {:#x}", c.name, pc, c.pc);
            }
            other => return Err(err(format_args!("{}: not killed: {:?}", c.name, other))),
        }
    }
    // The good task was running alongside and finishes its 200 rounds cleanly.
    for id in good_ids {
        let st = task::join(id).map_err(|e| err(format_args!("{e:?}")))?;
        test_eq!(st, ExitStatus::Exited(0));
    }
    WATCH_STOP.store(true, Ordering::Release);
    task::join(watch).map_err(|e| err(format_args!("{e:?}")))?;
    test_assert!(
        WATCH_ROUNDS.load(Ordering::Relaxed) > 0,
        "the DAIF watcher never ran"
    );
    test_assert!(
        WATCH_BAD.load(Ordering::Relaxed) == 0,
        "a kernel thread ran with DAIF bits {:#x} clear (EL0's masks leaked into the kernel)",
        WATCH_BAD.load(Ordering::Relaxed)
    );
    // The other space's page is untouched by the write that was refused.
    // SAFETY: `other_pa` is a page `other` owns and keeps alive; nothing writes it.
    let word = unsafe { core::ptr::read_volatile(other_pa as *const u64) };
    test_eq!(word, 0);
    drop(other);
    test_eq!(user::tasks_with_space(), 0);
    test_eq!(uspace::asids_in_use(), asids0);
    test_assert!(
        crate::sched::check_invariants().is_ok(),
        "run-queue invariants"
    );
    Ok(())
}

/// The scheduling calls from EL0: `sched_setattr` / `sched_setaffinity` refuse every bad
/// argument with Linux's errno (the program checks each), the good call's nice and clamp reach
/// the kernel's thread parameters, and `wait` / `wake` work between EL0 and the kernel.
fn el0_sched_calls() -> TestResult {
    let me = task::current().ok_or_else(|| err("not a thread"))?;
    let id = user::spawn("el0-attr", params(1), attr(), u64::from(me.task_id().0)).map_err(err)?;
    let t = task::get(id).ok_or_else(|| err("el0-attr vanished"))?;
    let waiting = super::sched::wait_until(2_000_000_000, || user::waits(id));
    let p = t.sched.lock().params;
    // Wake it whatever happened, so it exits with its own verdict.
    user::wake_from_kernel(id);
    let st = task::join(id).map_err(|e| err(format_args!("{e:?}")))?;
    test_eq!(st, ExitStatus::Exited(0));
    test_assert!(waiting, "el0-attr never waited for the kernel");
    test_eq!(p.nice, 5);
    test_eq!(p.uclamp, (300, 1024));
    test_eq!(user::tasks_with_space(), 0);
    Ok(())
}

selftest!(name = "el0_sched_calls_linux_semantics", el0_sched_calls);

/// Fuzz tasks at once, one per CPU of the first four.
const FUZZ_TASKS: u64 = 4;
/// Calls in all under `cargo xtask test`; `el0_fuzz=N` on the command line asks for N.
const FUZZ_CALLS_TEST: u64 = 20_000;

/// Calls each thread created by a fuzz task makes (the same fuzzer, in its creator's space).
const FUZZ_CHILD_CALLS: u64 = 8;

/// One round of fuzzing: `calls` system calls spread over [`FUZZ_TASKS`] EL0 tasks, each
/// must exit 0 (not be killed; the kernel must not fault), and the threads they created must
/// all end and take their address spaces with them. Returns (calls, errors) made.
fn fuzz_round(calls: u64, seed: u64) -> Result<(u64, u64), TestError> {
    let spaces0 = user::live_spaces();
    let threads0 = task::counts();
    let (c0, e0) = user::call_counts();
    let per = calls.div_ceil(FUZZ_TASKS).min(u64::from(u32::MAX));
    let mut ids = Vec::new();
    for i in 0..FUZZ_TASKS {
        let s = (seed.wrapping_mul(0x9e37_79b9).wrapping_add(i * 0x1234_5677)) & 0xffff_ffff;
        let arg = (s << 32) | per;
        ids.push(user::spawn("el0-fuzz", params(i as usize), fuzz(), arg).map_err(err)?);
    }
    for id in ids {
        let st = task::join(id).map_err(|e| err(format_args!("{e:?}")))?;
        test_eq!(st, ExitStatus::Exited(0));
    }
    // The threads they created (detached) finish their few calls on their own.
    test_assert!(
        super::el0_threads::settled(spaces0, threads0),
        "fuzz: {} address spaces live (expected {}), thread slots {:?} (expected {:?})",
        user::live_spaces(),
        spaces0,
        task::counts(),
        threads0
    );
    let (c1, e1) = user::call_counts();
    // Each task's final exit is a call too; the counts include it.
    Ok((c1 - c0, e1 - e0))
}

/// Must-show 2 of the EL0 issue: random system calls from EL0 with kernel, unmapped,
/// misaligned and page-crossing pointers and huge lengths. No kernel fault, every fuzz task
/// ends by its own exit, and afterwards the heap, the thread table, the ASIDs and the page
/// tables (which live on the heap) are exactly as before.
fn el0_syscall_fuzz() -> TestResult {
    let calls = crate::boot::cmdline()
        .and_then(|c| c.el0_fuzz_calls)
        .unwrap_or(FUZZ_CALLS_TEST);
    // The trace records, so that `trace_marker` takes its recording path too (a full ring
    // only counts what it refuses); the rings are allocated once, before the heap is measured.
    let nr_cpus = crate::sched::nr_cpus();
    test_assert!(
        crate::tracing::init(nr_cpus, 1024),
        "no memory for the trace rings"
    );
    crate::tracing::enable();
    let r = fuzz_rounds(calls);
    let _ = crate::tracing::drain(nr_cpus, &[], |_: &[u8]| Ok::<(), ()>(()));
    r
}

fn fuzz_rounds(calls: u64) -> TestResult {
    // A first small round grows what grows once (per-CPU queues, the console).
    fuzz_round(400, 1)?;
    let heap0 = crate::heap::stats().used;
    let threads0 = task::counts();
    let asids0 = uspace::asids_in_use();
    let spaces0 = user::live_spaces();
    let (faults0, created0) = user::thread_counts();
    let (n, e) = fuzz_round(calls, 7)?;
    let (faults1, created1) = user::thread_counts();
    test_assert!(n >= calls, "only {} of {} calls made", n, calls);
    crate::println!(
        "\nel0: fuzz: {} system calls from {} EL0 tasks and the {} threads they created, {} \
         refused with an error, {} succeeded",
        n,
        FUZZ_TASKS,
        created1 - created0,
        e,
        n - e
    );
    test_eq!(faults1, faults0);
    test_assert!(
        created1 > created0,
        "the fuzzer created no thread: thread_create's success path went unfuzzed"
    );
    test_eq!(crate::heap::stats().used, heap0);
    test_eq!(task::counts(), threads0);
    test_eq!(uspace::asids_in_use(), asids0);
    test_eq!(user::live_spaces(), spaces0);
    test_eq!(user::tasks_with_space(), 0);
    Ok(())
}

selftest!(name = "el0_syscall_fuzz_no_panic_no_leak", el0_syscall_fuzz);

/// Two rounds; the second must end with the heap exactly where the first left it (the first
/// may grow per-CPU structures once: timer queues, wait lists, the console).
fn el0_faults_kill_only_the_task() -> TestResult {
    round()?;
    let heap1 = crate::heap::stats().used;
    round()?;
    test_eq!(crate::heap::stats().used, heap1);
    Ok(())
}

selftest!(
    name = "el0_faults_kill_only_the_task",
    el0_faults_kill_only_the_task
);
