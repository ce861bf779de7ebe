//! EL0 isolation: bad EL0 programs are killed with the right report (exception class, fault
//! address, PC) while a good EL0 task on another CPU keeps making system calls and finishes;
//! afterwards no address space, ASID or heap byte is left behind.
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

macro_rules! blob {
    ($name:ident, $start:ident, $end:ident) => {
        fn $name() -> &'static [u8] {
            unsafe extern "C" {
                static $start: u8;
                static $end: u8;
            }
            let (a, b) = (&raw const $start, &raw const $end);
            // SAFETY: the two labels bracket one blob in `.rodata` (the asm below), `a <= b`.
            unsafe { core::slice::from_raw_parts(a, b as usize - a as usize) }
        }
    };
}

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
    .text
"#,
    data_va = const DATA_VA,
);

blob!(good, __el0_good_start, __el0_good_end);
blob!(load, __el0_load_start, __el0_load_end);
blob!(store, __el0_store_start, __el0_store_end);
blob!(jump, __el0_jump_start, __el0_jump_end);
blob!(undef, __el0_undef_start, __el0_undef_end);
blob!(recurse, __el0_recurse_start, __el0_recurse_end);
blob!(excl, __el0_excl_start, __el0_excl_end);

fn err(e: impl core::fmt::Display) -> TestError {
    TestError::new(format_args!("{e}"))
}

fn params(cpu: usize) -> ThreadParams {
    let cpu = CpuId(cpu as u16 % crate::sched::nr_cpus() as u16);
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
