//! EL0 tasks: a thread that runs code at EL0 in its own address space
//! ([`crate::arch::uspace`]), talks to the kernel only through `SVC` (the ABI below), and is
//! killed with a report when it faults.
//!
//! # System call ABI
//! `SVC #0` with the call number in `x8`, arguments in `x0`–`x5`; the result comes back in `x0`:
//! a value ≥ 0, or a negative Linux errno. Every other register is preserved (the kernel saves
//! and restores the full EL0 state: x0–x30, SP_EL0, ELR, SPSR; TPIDR_EL0 and TPIDRRO_EL0 follow
//! the thread through the context switch).
//!
//! | nr | name | arguments | result | errors |
//! |---|---|---|---|---|
//! | 0 | `exit` | `status` (i32) | does not return | — |
//! | 1 | `yield` | — | 0 | — |
//! | 2 | `sleep_for` | `ns` (u64) | 0 | — |
//! | 3 | `sleep_until` | `deadline_ns` (u64, [`clock`](SYS_CLOCK)'s time base) | 0 | — |
//! | 4 | `clock` | — | ns since boot (monotonic) | — |
//! | 5 | `write` | `ptr`, `len` | bytes written (`len`) | `EINVAL`: `len` > [`WRITE_MAX`]; `EFAULT`: any byte of `[ptr, ptr + len)` not readable in the task's own mapping (or the range wraps) |
//! | 6 | `set_nice` | `nice` (i64) | 0 | `EINVAL`: outside −20..=19 |
//! | 7 | `set_affinity` | `mask` (u64, bit n = CPU n) | 0 | `EINVAL`: no online CPU in `mask` |
//! | other | — | — | — | `ENOSYS` |
//!
//! User pointers are checked against the task's own page list (present, EL0-readable) before
//! the kernel reads anything, and then read through the kernel's identity alias of those same
//! pages: a bad pointer is an error return, never a kernel fault. One address space holds one
//! thread, so nothing unmaps a page between the check and the read.
//!
//! # Faults
//! Any synchronous exception from EL0 other than `SVC` (data or instruction abort, alignment,
//! undefined instruction, a stack overflow into the guard page, …) kills the task: one line
//! names the task, the exception class, the fault address and the PC; the thread exits with
//! [`ExitStatus::Fault`] and its address space is freed when its last switch is done.

use alloc::boxed::Box;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

use asym_sched::types::CpuMask;

use crate::arch::exceptions::TrapFrame;
use crate::arch::uspace::{self, AddressSpace, Perm, SpaceError, USER_BASE};
use crate::sync::IrqSpinLock;
use crate::task::{self, ExitStatus, ThreadId, ThreadParams, MAX_THREADS};

pub const SYS_EXIT: u64 = 0;
pub const SYS_YIELD: u64 = 1;
pub const SYS_SLEEP_FOR: u64 = 2;
pub const SYS_SLEEP_UNTIL: u64 = 3;
pub const SYS_CLOCK: u64 = 4;
pub const SYS_WRITE: u64 = 5;
pub const SYS_SET_NICE: u64 = 6;
pub const SYS_SET_AFFINITY: u64 = 7;

pub const EFAULT: i64 = 14;
pub const EINVAL: i64 = 22;
pub const ENOSYS: i64 = 38;

/// Most bytes one `write` takes.
pub const WRITE_MAX: usize = 1024;

/// Where an EL0 program's text starts (one page).
pub const TEXT_VA: usize = USER_BASE + 0x10_0000;
/// Its data page (read/write, zeroed).
pub const DATA_VA: usize = USER_BASE + 0x20_0000;
/// The unmapped guard page below the user stack.
pub const STACK_GUARD_VA: usize = USER_BASE + 0x30_0000;
/// Pages of user stack, above [`STACK_GUARD_VA`]; another unmapped guard page follows.
pub const STACK_PAGES: usize = 4;
/// The initial SP_EL0.
pub const STACK_TOP: usize = STACK_GUARD_VA + (1 + STACK_PAGES) * 4096;

/// Each thread slot's address space, while it runs an EL0 task.
static SPACES: [IrqSpinLock<Option<Box<AddressSpace>>>; MAX_THREADS] =
    [const { IrqSpinLock::new(None) }; MAX_THREADS];
/// Each slot's TTBR1 value (0: a kernel thread, which runs on the empty table). Read by the
/// context switch, which may take no lock.
static TTBR: [AtomicU64; MAX_THREADS] = [const { AtomicU64::new(0) }; MAX_THREADS];

/// Why an EL0 task could not be started.
#[derive(Debug)]
pub enum UserError {
    Space(SpaceError),
    Spawn(task::SpawnError),
}

impl fmt::Display for UserError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UserError::Space(e) => write!(f, "el0: {e}"),
            UserError::Spawn(e) => write!(f, "el0: {e:?}"),
        }
    }
}

/// Builds the address space of program `text` (position-independent code, at most a page):
/// text, a zeroed data page, and a guarded stack.
pub fn build_space(text: &[u8]) -> Result<AddressSpace, SpaceError> {
    let mut a = AddressSpace::new()?;
    a.map_page(TEXT_VA, Perm::Text, text)?;
    a.map_page(DATA_VA, Perm::Data, &[])?;
    for i in 0..STACK_PAGES {
        a.map_page(STACK_GUARD_VA + (i + 1) * 4096, Perm::Data, &[])?;
    }
    Ok(a)
}

/// Starts an EL0 task named `name` running `text` at [`TEXT_VA`] with `x0 = arg`.
pub fn spawn(
    name: &str,
    params: ThreadParams,
    text: &[u8],
    arg: u64,
) -> Result<ThreadId, UserError> {
    let space = Box::new(build_space(text).map_err(UserError::Space)?);
    let start = Box::new(Start { space, arg });
    let raw = Box::into_raw(start) as usize;
    task::spawn(name, params, user_start, raw).map_err(|e| {
        // SAFETY: the thread was not created, so `raw` is still ours, from `Box::into_raw`.
        drop(unsafe { Box::from_raw(raw as *mut Start) });
        UserError::Spawn(e)
    })
}

struct Start {
    space: Box<AddressSpace>,
    arg: u64,
}

/// The TTBR1 value of slot `s`'s thread ([`uspace::empty_ttbr`] for a kernel thread).
pub fn ttbr_of(s: usize) -> u64 {
    match TTBR.get(s).map(|t| t.load(Ordering::Acquire)) {
        Some(v) if v != 0 => v,
        _ => uspace::empty_ttbr(),
    }
}

/// Frees slot `s`'s address space once its thread is off every CPU for good (`task::reap`).
pub fn release(s: usize) {
    let Some(t) = TTBR.get(s) else { return };
    t.store(0, Ordering::Release);
    let space = SPACES[s].lock().take();
    drop(space);
}

/// The page-table pages and ASIDs of live EL0 tasks (the leak checks' count).
pub fn tasks_with_space() -> usize {
    TTBR.iter()
        .filter(|t| t.load(Ordering::Relaxed) != 0)
        .count()
}

fn user_start(raw: usize) {
    // Unboxed in a block of its own: this function never returns, so a box still alive at its
    // end would never be freed.
    let Start { space, arg } = {
        // SAFETY: `spawn` passed a pointer from `Box::into_raw`, handed to this thread only.
        let start = unsafe { Box::from_raw(raw as *mut Start) };
        *start
    };
    let Some(s) = task::current_slot() else {
        return;
    };
    let ttbr = space.ttbr();
    *SPACES[s].lock() = Some(space);
    crate::arch::irq_save_disable();
    TTBR[s].store(ttbr, Ordering::Release);
    // SAFETY: the space is owned by SPACES[s] until `release`, which runs only after this
    // thread's last switch, which loads another TTBR1 first.
    unsafe { uspace::switch_ttbr1(ttbr) };
    let (_, top) = task::slot(s).ctx.stack_bounds();
    // SAFETY: IRQs are masked and the kernel stack is abandoned from its top (nothing on it is
    // used again: this function never returns); TEXT_VA and STACK_TOP are mapped for EL0 in
    // the address space just loaded.
    unsafe { crate::arch::exceptions::enter_el0(TEXT_VA as u64, STACK_TOP as u64, arg, top) }
}

/// The Rust side of a synchronous exception from EL0 (IRQs masked; returns with them masked).
pub fn el0_sync(frame: &mut TrapFrame, esr: u64, far: u64) {
    // Exception entry masked D, A, I and F; kernel code runs with EL0's SError/debug/FIQ
    // masks (all clear), IRQs still masked until the system call unmasks them. Without this a
    // thread switched to from here would inherit the masks (the switch restores only I).
    crate::arch::daif_from_spsr_irq_masked(frame.spsr);
    let ec = ((esr >> 26) & 0x3f) as u8;
    if ec == 0x15 {
        crate::arch::irq_enable();
        let r = syscall(frame);
        frame.x[0] = r as u64;
        crate::sched::preempt_check();
        crate::arch::irq_save_disable();
        return;
    }
    let Some(s) = task::current_slot() else {
        return;
    };
    let id = task::slot(s).id(s);
    let overflow = (STACK_GUARD_VA..STACK_GUARD_VA + 4096).contains(&(far as usize));
    crate::console::write_fmt_force(format_args!(
        "el0: task {} '{}' killed: {} (EC {:#04x}), ESR {:#010x}, FAR {:#018x}, PC {:#018x}{}\n",
        id.slot(),
        task::name(id),
        crate::arch::exceptions::ec_name(ec),
        ec,
        esr,
        far,
        frame.elr,
        if overflow {
            " (user stack overflow into its guard page)"
        } else {
            ""
        },
    ));
    task::exit_slot(
        s,
        ExitStatus::Fault {
            ec,
            far,
            pc: frame.elr,
        },
    )
}

fn syscall(frame: &TrapFrame) -> i64 {
    let a = &frame.x;
    match frame.x[8] {
        SYS_EXIT => task::exit(a[0] as i32),
        SYS_YIELD => {
            crate::sched::yield_now();
            0
        }
        SYS_SLEEP_FOR => {
            crate::sched::sleep_ns(a[0]);
            0
        }
        SYS_SLEEP_UNTIL => {
            crate::sched::sleep_until(asym_sched::types::Nanos(a[0]));
            0
        }
        SYS_CLOCK => crate::sched::now().0 as i64,
        SYS_WRITE => sys_write(a[0] as usize, a[1] as usize),
        SYS_SET_NICE => {
            let Ok(nice) = i32::try_from(a[0] as i64) else {
                return -EINVAL;
            };
            match task::current().map(|id| crate::sched::set_nice(id, nice)) {
                Some(Ok(())) => 0,
                _ => -EINVAL,
            }
        }
        SYS_SET_AFFINITY => {
            match task::current().map(|id| crate::sched::set_affinity(id, CpuMask(a[0]))) {
                Some(Ok(())) => 0,
                _ => -EINVAL,
            }
        }
        _ => -ENOSYS,
    }
}

/// Reads `[ptr, ptr + len)` of the calling task's memory into `buf`, page by page through the
/// kernel's alias of its own pages, after checking that each page is mapped for EL0 reads.
fn copy_from_user(ptr: usize, buf: &mut [u8]) -> Result<(), i64> {
    let s = task::current_slot().ok_or(-EFAULT)?;
    ptr.checked_add(buf.len()).ok_or(-EFAULT)?;
    let g = SPACES[s].lock();
    let space = g.as_ref().ok_or(-EFAULT)?;
    let mut done = 0;
    while done < buf.len() {
        let va = ptr + done;
        let (_perm, pa) = space.lookup(va).ok_or(-EFAULT)?;
        let n = (4096 - (va & 4095)).min(buf.len() - done);
        for (i, b) in buf[done..done + n].iter_mut().enumerate() {
            // SAFETY: `pa + i` lies in a page this address space owns (found by `lookup`),
            // identity-mapped read/write for the kernel; EL0 may write it concurrently only
            // from this very thread, which is in this system call, so the read races nothing.
            *b = unsafe { core::ptr::read_volatile((pa + i) as *const u8) };
        }
        done += n;
    }
    Ok(())
}

fn sys_write(ptr: usize, len: usize) -> i64 {
    if len > WRITE_MAX {
        return -EINVAL;
    }
    let mut buf = [0u8; WRITE_MAX];
    if let Err(e) = copy_from_user(ptr, &mut buf[..len]) {
        return e;
    }
    let text = core::str::from_utf8(&buf[..len]).unwrap_or("<not UTF-8>");
    crate::print!("{}", text);
    len as i64
}
