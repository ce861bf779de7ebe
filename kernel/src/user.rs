//! EL0 tasks: a thread that runs code at EL0 in its own address space
//! ([`crate::arch::uspace`]), talks to the kernel only through `SVC` (the ABI below), and is
//! killed with a report when it faults.
//!
//! # System call ABI
//! `SVC #0` with the call number in `x8`, arguments in `x0`–`x5`; the result comes back in
//! `x0`: a value ≥ 0, or a negative Linux errno. Every other register is preserved. The table
//! of calls, arguments and errors is `docs/syscalls.md` (the one place it is written down);
//! the constants below are its numbers.
//!
//! User pointers are checked against the task's own page list (present, EL0-accessible with
//! the access asked for) before the kernel touches anything, and then accessed through the
//! kernel's identity alias of those same pages: a bad pointer is an error return, never a
//! kernel fault. An address space's pages are all mapped before it is first loaded and none
//! is unmapped while it lives, and the calling thread's reference keeps it alive, so nothing
//! unmaps a page between the check and the access.
//!
//! # Threads
//! Several EL0 threads may share one address space ([`SYS_THREAD_CREATE`], Linux `clone` with
//! `CLONE_VM | CLONE_THREAD | CLONE_CHILD_CLEARTID`): a [`UserSpace`] is reference-counted
//! (Linux `mm_users`), each thread slot holds one reference from its start until it is
//! reaped, and the tables, pages and ASID go with the last reference. Created threads are
//! detached (reaped at exit, as Linux reaps a non-leader thread); a thread is joined from EL0
//! through its clear-tid word, which the kernel zeroes and futex-wakes once the thread is
//! reaped. Threads of a space synchronise with [`SYS_FUTEX_WAIT`] / [`SYS_FUTEX_WAKE`] on a
//! shared word (Linux's private futexes), keyed by the word's physical address.
//!
//! # Faults
//! Any synchronous exception from EL0 other than `SVC` (data or instruction abort, alignment,
//! undefined instruction, a stack overflow into the guard page, …) kills the task: one line
//! names the task, the exception class, the fault address and the PC; the thread exits with
//! [`ExitStatus::Fault`] and its address space is freed when its last switch is done.

use alloc::boxed::Box;
use alloc::sync::Arc;
use core::fmt;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use asym_rtapp::marker::Marker;
use asym_sched::types::{CpuMask, Nanos};
use asym_sched::uclamp::TaskUclamp;

use crate::arch::exceptions::TrapFrame;
use crate::arch::uspace::{self, AddressSpace, Perm, SpaceError, USER_BASE};
use crate::sync::IrqSpinLock;
use crate::task::{self, ExitStatus, ThreadId, ThreadParams, MAX_THREADS};
use crate::wait::{Completion, KeyedWait, KeyedWaitQueue};

// The ABI's numbers, errnos and sizes: one crate shared with the EL0 programs
// (`docs/syscalls.md`).
pub use asym_abi::*;

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
/// Most threads one address space runs at once ([`SYS_THREAD_CREATE`] beyond it: `-EAGAIN`,
/// as Linux's `RLIMIT_NPROC`).
pub const MAX_SPACE_THREADS: u32 = 48;

/// `fn $name() -> &'static [u8]`: the bytes between two labels of a position-independent EL0
/// program assembled into the kernel's `.rodata` (never executable there), for [`spawn`].
macro_rules! el0_program {
    ($name:ident, $start:ident, $end:ident) => {
        fn $name() -> &'static [u8] {
            unsafe extern "C" {
                static $start: u8;
                static $end: u8;
            }
            let (a, b) = (&raw const $start, &raw const $end);
            // SAFETY: the two labels bracket one program in `.rodata`, `a <= b`.
            unsafe { core::slice::from_raw_parts(a, b as usize - a as usize) }
        }
    };
}
pub(crate) use el0_program;

/// An address space and the count of EL0 threads running in it (Linux `mm_struct`; the
/// `Arc`'s count is `mm_users`, [`UserSpace::threads`] the live threads the limit counts).
pub struct UserSpace {
    space: AddressSpace,
    threads: AtomicU32,
}

impl UserSpace {
    fn new(space: AddressSpace) -> UserSpace {
        LIVE_SPACES.fetch_add(1, Ordering::Relaxed);
        UserSpace {
            space,
            threads: AtomicU32::new(1),
        }
    }
}

impl Drop for UserSpace {
    fn drop(&mut self) {
        LIVE_SPACES.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Each thread slot's address space (one reference), while it runs an EL0 task.
static SPACES: [IrqSpinLock<Option<Arc<UserSpace>>>; MAX_THREADS] =
    [const { IrqSpinLock::new(None) }; MAX_THREADS];
/// Each slot's clear-tid word (a user address, 0: none), zeroed when the thread is reaped.
static CLEAR_TID: [AtomicU64; MAX_THREADS] = [const { AtomicU64::new(0) }; MAX_THREADS];
/// [`UserSpace`]s alive (the leak checks' count).
static LIVE_SPACES: AtomicU32 = AtomicU32::new(0);
/// Each slot's TTBR1 value (0: a kernel thread, which runs on the empty table). Read by the
/// context switch, which may take no lock.
static TTBR: [AtomicU64; MAX_THREADS] = [const { AtomicU64::new(0) }; MAX_THREADS];
/// Each slot's EL0 task's id (`ThreadId` raw), written at spawn and again when it starts: what
/// a `tid` argument is checked against. A stale value names a dead generation, which
/// `task::get` refuses first.
static USER_ID: [AtomicU32; MAX_THREADS] = [const { AtomicU32::new(0) }; MAX_THREADS];
/// Each slot's wake-ups not yet consumed by [`SYS_WAIT`], and the id of its latest waker.
static EVENTS: [Completion; MAX_THREADS] = [const { Completion::new() }; MAX_THREADS];
static LAST_WAKER: [AtomicU64; MAX_THREADS] = [const { AtomicU64::new(0) }; MAX_THREADS];
/// The futex hash buckets (Linux `futex_queues`), keyed by the word's physical address: unique
/// among live address spaces, as Linux's key for a private futex (`mm`, address) is.
static FUTEX: [KeyedWaitQueue; FUTEX_BUCKETS] = [const { KeyedWaitQueue::new() }; FUTEX_BUCKETS];
const FUTEX_BUCKETS: usize = 16;
/// System calls made, and those that returned an error (the fuzzer's counts).
static CALLS: AtomicU64 = AtomicU64::new(0);
static CALL_ERRORS: AtomicU64 = AtomicU64::new(0);
/// EL0 threads killed by a fault, and threads `thread_create` started (the fuzzer's counts).
static FAULTS: AtomicU64 = AtomicU64::new(0);
static CREATED: AtomicU64 = AtomicU64::new(0);

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
    let space = build_space(text).map_err(UserError::Space)?;
    spawn_space(name, params, space, TEXT_VA as u64, STACK_TOP as u64, arg).map(|(id, _)| id)
}

/// Starts an EL0 task named `name` in the address space `space` (built by the caller, e.g.
/// from an ELF: `crate::rtapp_el0`), entering at `pc` with `SP_EL0 = sp` and `x0 = arg`.
/// Returns its id and a reference to the space, which keeps its pages readable for the
/// kernel ([`read_u32`]) after the task is gone.
pub fn spawn_space(
    name: &str,
    params: ThreadParams,
    space: AddressSpace,
    pc: u64,
    sp: u64,
    arg: u64,
) -> Result<(ThreadId, Arc<UserSpace>), UserError> {
    let space = Arc::new(UserSpace::new(space));
    let start = Box::new(Start {
        space: space.clone(),
        pc,
        sp,
        arg,
        clear_tid: 0,
    });
    let raw = Box::into_raw(start) as usize;
    let id = task::spawn(name, params, user_start, raw).map_err(|e| {
        // SAFETY: the thread was not created, so `raw` is still ours, from `Box::into_raw`.
        drop(unsafe { Box::from_raw(raw as *mut Start) });
        UserError::Spawn(e)
    })?;
    // Before the caller can pass the id on: a task woken by id before it first ran is an EL0
    // task all the same (`user_start` writes it too, whichever comes first).
    USER_ID[id.slot()].store(id.task_id().0, Ordering::Release);
    Ok((id, space))
}

/// The 32-bit word at user address `va` of `space` (4-aligned and mapped, else `None`).
pub fn read_u32(space: &UserSpace, va: usize) -> Option<u32> {
    user_word(&space.space, va, false).map(|w| w.load(Ordering::Acquire))
}

impl UserSpace {
    /// Stores `v` at user address `va` (8-aligned, mapped) through the kernel's alias; false
    /// if `va` is not such an address. For words EL0 only reads (a read-only page of
    /// inputs), so the store races with no EL0 store.
    pub fn store_u64(&self, va: usize, v: u64) -> bool {
        if !va.is_multiple_of(8) {
            return false;
        }
        let Some((_, pa)) = self.space.lookup(va) else {
            return false;
        };
        // SAFETY: `pa` is 8-aligned inside a page this space owns (a page of `AtomicU64`s,
        // alive while `self` is), identity-mapped read/write for the kernel; EL0 may read the
        // word concurrently, hence the atomic.
        unsafe { AtomicU64::from_ptr(pa as *mut u64) }.store(v, Ordering::Release);
        true
    }

    /// Stores `v` in the 32-bit word at `va` and wakes every `futex_wait`er of it (what a
    /// `futex_wake` after a store does from EL0); false if `va` is not a mapped, 4-aligned
    /// word.
    pub fn store_u32_and_wake(&self, va: usize, v: u32) -> bool {
        let Some(w) = user_word(&self.space, va, false) else {
            return false;
        };
        w.store(v, Ordering::Release);
        let pa = w.as_ptr() as usize;
        futex_bucket(pa).wake(pa, u32::MAX);
        true
    }
}

/// What a new EL0 thread starts with.
struct Start {
    space: Arc<UserSpace>,
    pc: u64,
    sp: u64,
    arg: u64,
    clear_tid: u64,
}

/// The TTBR1 value of slot `s`'s thread ([`uspace::empty_ttbr`] for a kernel thread).
pub fn ttbr_of(s: usize) -> u64 {
    match TTBR.get(s).map(|t| t.load(Ordering::Acquire)) {
        Some(v) if v != 0 => v,
        _ => uspace::empty_ttbr(),
    }
}

/// Drops slot `s`'s reference to its address space once its thread is off every CPU for good
/// (`task::reap`), after zeroing its clear-tid word and waking one futex waiter of it; the
/// last reference frees the space.
pub fn release(s: usize) {
    let Some(t) = TTBR.get(s) else { return };
    t.store(0, Ordering::Release);
    let space = SPACES[s].lock().take();
    let clear_tid = CLEAR_TID[s].swap(0, Ordering::Relaxed) as usize;
    if let Some(sp) = &space {
        if clear_tid != 0 {
            if let Some(w) = user_word(&sp.space, clear_tid, true) {
                w.store(0, Ordering::Release);
                // Linux `mm_release`: `put_user(0, tidptr)`, then `futex_wake(tidptr, 1)`.
                let pa = w.as_ptr() as usize;
                futex_bucket(pa).wake(pa, 1);
            }
        }
        sp.threads.fetch_sub(1, Ordering::Relaxed);
    }
    drop(space);
    // Wake-ups nobody consumed die with the task, not with the slot's next thread.
    while EVENTS[s].try_wait() {}
    LAST_WAKER[s].store(0, Ordering::Relaxed);
}

/// Whether EL0 task `id` sleeps in [`SYS_WAIT`].
pub fn waits(id: ThreadId) -> bool {
    task::get(id).is_some() && EVENTS[id.slot()].has_waiters()
}

/// A wake-up of EL0 task `id` from the kernel (waker id 0).
pub fn wake_from_kernel(id: ThreadId) {
    if task::get(id).is_some() {
        LAST_WAKER[id.slot()].store(0, Ordering::Relaxed);
        EVENTS[id.slot()].complete();
    }
}

/// System calls made so far and how many of them returned an error.
pub fn call_counts() -> (u64, u64) {
    (
        CALLS.load(Ordering::Relaxed),
        CALL_ERRORS.load(Ordering::Relaxed),
    )
}

/// EL0 threads killed by a fault so far, and threads started by `thread_create`.
pub fn thread_counts() -> (u64, u64) {
    (
        FAULTS.load(Ordering::Relaxed),
        CREATED.load(Ordering::Relaxed),
    )
}

/// Address spaces alive: each holds page-table pages, user pages and an ASID until its last
/// thread is reaped.
pub fn live_spaces() -> u32 {
    LIVE_SPACES.load(Ordering::Relaxed)
}

/// Thread slots holding an address space (live EL0 threads and those not yet reaped).
pub fn tasks_with_space() -> usize {
    TTBR.iter()
        .filter(|t| t.load(Ordering::Relaxed) != 0)
        .count()
}

fn user_start(raw: usize) {
    // Unboxed in a block of its own: this function never returns, so a box still alive at its
    // end would never be freed.
    let Start {
        space,
        pc,
        sp,
        arg,
        clear_tid,
    } = {
        // SAFETY: `spawn` passed a pointer from `Box::into_raw`, handed to this thread only.
        let start = unsafe { Box::from_raw(raw as *mut Start) };
        *start
    };
    let Some(s) = task::current_slot() else {
        return;
    };
    let ttbr = space.space.ttbr();
    CLEAR_TID[s].store(clear_tid, Ordering::Relaxed);
    *SPACES[s].lock() = Some(space);
    if let Some(id) = task::current() {
        USER_ID[s].store(id.task_id().0, Ordering::Release);
    }
    crate::arch::irq_save_disable();
    TTBR[s].store(ttbr, Ordering::Release);
    // SAFETY: the space is owned by SPACES[s] until `release`, which runs only after this
    // thread's last switch, which loads another TTBR1 first.
    unsafe { uspace::switch_ttbr1(ttbr) };
    let (_, top) = task::slot(s).ctx.stack_bounds();
    // SAFETY: IRQs are masked and the kernel stack is abandoned from its top (nothing on it is
    // used again: this function never returns); `pc` is EL0-executable in the address space
    // just loaded (`spawn` maps TEXT_VA, `sys_thread_create` checked it); a bad `sp` is EL0's
    // own fault, taken at EL0.
    unsafe { crate::arch::exceptions::enter_el0(pc, sp, arg, top) }
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
    FAULTS.fetch_add(1, Ordering::Relaxed);
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
    let r = match frame.x[8] {
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
            crate::sched::sleep_until(Nanos(a[0]));
            0
        }
        SYS_CLOCK => crate::sched::now().0 as i64,
        SYS_WRITE => sys_write(a[0] as usize, a[1] as usize),
        SYS_SCHED_SETATTR => sys_sched_setattr(a[0], a[1] as usize, a[2]),
        SYS_SCHED_SETAFFINITY => sys_sched_setaffinity(a[0], a[1] as usize, a[2] as usize),
        SYS_WAIT => sys_wait(a[0]),
        SYS_WAKE => sys_wake(a[0]),
        SYS_GETTID => task::current().map_or(-ESRCH, |id| i64::from(id.task_id().0)),
        SYS_THREAD_CREATE => sys_thread_create(a[0], a[1], a[2], a[3]),
        SYS_FUTEX_WAIT => sys_futex_wait(a[0] as usize, a[1] as u32, a[2]),
        SYS_FUTEX_WAKE => sys_futex_wake(a[0] as usize, a[1] as u32),
        SYS_TRACE_MARKER => sys_trace_marker(a[0] as usize, a[1] as usize),
        SYS_THREAD_CLOCK => sys_thread_clock(a[0]),
        SYS_SET_NAME => sys_set_name(a[0] as usize, a[1] as usize),
        SYS_RUN_UNTIL => sys_run_until(a[0], a[1]),
        _ => -ENOSYS,
    };
    CALLS.fetch_add(1, Ordering::Relaxed);
    if r < 0 {
        CALL_ERRORS.fetch_add(1, Ordering::Relaxed);
    }
    r
}

/// The EL0 task a system call's `tid` argument names: 0 is the caller. A kernel thread is not
/// the user's to change (`-EPERM`); an id of no live thread is `-ESRCH`.
fn user_target(tid: u64) -> Result<ThreadId, i64> {
    if tid == 0 {
        return task::current().ok_or(-ESRCH);
    }
    let raw = u32::try_from(tid).map_err(|_| -ESRCH)?;
    let id = ThreadId::from_task_id(asym_sched::types::TaskId(raw));
    task::get(id).ok_or(-ESRCH)?;
    match USER_ID.get(id.slot()) {
        Some(u) if u.load(Ordering::Acquire) == raw => Ok(id),
        _ => Err(-EPERM),
    }
}

/// `sched_setattr(tid, attr, flags)` with Linux's checks (`sys_sched_setattr`,
/// `sched_copy_attr`, `__sched_setscheduler`, `uclamp_validate`): `flags` must be 0; `size` 0
/// means [`SCHED_ATTR_SIZE_VER0`], below it or above a page is `-E2BIG`, and bytes past the
/// known struct must be zero (`-E2BIG`); the clamps need a VER1 struct; the policy must be
/// `SCHED_NORMAL` (unless `SCHED_FLAG_KEEP_POLICY`) with priority 0; nice is clamped to
/// −20..=19 as Linux does; a clamp is ≤ 1024 or −1 (back to the default), min ≤ max counting
/// the task's other current clamp. No privilege check (one user): lowering nice is allowed.
fn sys_sched_setattr(tid: u64, uattr: usize, flags: u64) -> i64 {
    if uattr == 0 || (tid as i64) < 0 || flags != 0 {
        return -EINVAL;
    }
    let mut head = [0u8; 4];
    if let Err(e) = copy_from_user(uattr, &mut head) {
        return e;
    }
    let size = match u32::from_le_bytes(head) as usize {
        0 => SCHED_ATTR_SIZE_VER0,
        n if !(SCHED_ATTR_SIZE_VER0..=4096).contains(&n) => return -E2BIG,
        n => n,
    };
    let mut raw = [0u8; SCHED_ATTR_SIZE_VER1];
    let known = size.min(SCHED_ATTR_SIZE_VER1);
    if let Err(e) = copy_from_user(uattr, &mut raw[..known]) {
        return e;
    }
    // Linux `copy_struct_from_user`: a larger struct than ours is fine if the rest is zero.
    let mut at = known;
    while at < size {
        let mut chunk = [0u8; 64];
        let n = (size - at).min(chunk.len());
        if let Err(e) = copy_from_user(uattr + at, &mut chunk[..n]) {
            return e;
        }
        if chunk[..n].iter().any(|&b| b != 0) {
            return -E2BIG;
        }
        at += n;
    }
    let u32_at = |o: usize| u32::from_le_bytes([raw[o], raw[o + 1], raw[o + 2], raw[o + 3]]);
    let policy = u32_at(4);
    let sched_flags = u64::from(u32_at(8)) | (u64::from(u32_at(12)) << 32);
    let nice = (u32_at(16) as i32).clamp(-20, 19);
    let priority = u32_at(20);
    let (util_min, util_max) = (u32_at(48), u32_at(52));
    const CLAMP: u64 = SCHED_FLAG_UTIL_CLAMP_MIN | SCHED_FLAG_UTIL_CLAMP_MAX;
    if sched_flags & CLAMP != 0 && size < SCHED_ATTR_SIZE_VER1 {
        return -EINVAL;
    }
    if (policy as i32) < 0 || sched_flags & !SCHED_FLAG_ALL != 0 {
        return -EINVAL;
    }
    let keep_policy = sched_flags & SCHED_FLAG_KEEP_POLICY != 0;
    if (!keep_policy && policy != SCHED_NORMAL) || priority != 0 {
        return -EINVAL;
    }
    let id = match user_target(tid) {
        Ok(id) => id,
        Err(e) => return e,
    };
    let Some(t) = task::get(id) else {
        return -ESRCH;
    };
    if sched_flags & CLAMP != 0 {
        let (cur_min, cur_max) = t.sched.lock().params.uclamp;
        // −1 (`u32::MAX`) resets a clamp to its default; anything else above 1024 is refused
        // (Linux's `value + 1 > SCHED_CAPACITY_SCALE + 1`).
        let pick = |flag: u64, v: u32, cur: u32, default: u32| -> Result<u32, i64> {
            if sched_flags & flag == 0 {
                Ok(cur)
            } else if v == u32::MAX {
                Ok(default)
            } else if v > 1024 {
                Err(-EINVAL)
            } else {
                Ok(v)
            }
        };
        let min = match pick(SCHED_FLAG_UTIL_CLAMP_MIN, util_min, cur_min, 0) {
            Ok(v) => v,
            Err(e) => return e,
        };
        let max = match pick(SCHED_FLAG_UTIL_CLAMP_MAX, util_max, cur_max, 1024) {
            Ok(v) => v,
            Err(e) => return e,
        };
        let mut req = TaskUclamp::new();
        if req.set_request(min, max).is_err() {
            return -EINVAL;
        }
        if crate::sched::set_uclamp(id, req).is_err() {
            return -ESRCH;
        }
    }
    if sched_flags & SCHED_FLAG_KEEP_PARAMS == 0 && crate::sched::set_nice(id, nice).is_err() {
        return -ESRCH;
    }
    0
}

/// `sched_setaffinity(tid, len, mask)`: `len` bytes of CPU bitmap at `mask` (bit n = CPU n;
/// bits past the 64 CPUs this kernel can have must be read but are ignored, as Linux ignores
/// CPUs past `nr_cpu_ids`). `len` not a multiple of 8 is `-EINVAL` (Linux: of
/// `sizeof(unsigned long)`), a mask with no online CPU `-EINVAL`. Takes effect at the task's
/// next wake-up (the caller's own: at once, it moves itself).
fn sys_sched_setaffinity(tid: u64, len: usize, umask: usize) -> i64 {
    if !len.is_multiple_of(8) || len == 0 {
        return -EINVAL;
    }
    let mut first = [0u8; 8];
    if let Err(e) = copy_from_user(umask, &mut first) {
        return e;
    }
    // The rest must be readable too (a bad pointer is an error even where the bits are unused).
    if len > 8 {
        let Some(end) = umask.checked_add(len - 1) else {
            return -EFAULT;
        };
        let mut last = [0u8; 1];
        let mut page = (umask & !4095) + 4096;
        while page <= end {
            if let Err(e) = copy_from_user(page, &mut last) {
                return e;
            }
            page += 4096;
        }
    }
    let id = match user_target(tid) {
        Ok(id) => id,
        Err(e) => return e,
    };
    if crate::sched::set_affinity(id, CpuMask(u64::from_le_bytes(first))).is_err() {
        return -EINVAL;
    }
    if task::current() == Some(id) {
        crate::sched::migrate_self();
    }
    0
}

/// `wait(timeout_ns)`: consumes one pending wake-up of the caller, sleeping for one if none is
/// pending, at most `timeout_ns` (`u64::MAX`: no limit; 0: only a check). Returns the id of
/// the latest waker, or `-ETIMEDOUT`.
fn sys_wait(timeout_ns: u64) -> i64 {
    let Some(s) = task::current_slot() else {
        return -ESRCH;
    };
    let ok = if timeout_ns == u64::MAX {
        EVENTS[s].wait();
        true
    } else {
        EVENTS[s].wait_deadline(Nanos(crate::sched::now().0.saturating_add(timeout_ns)))
    };
    if ok {
        LAST_WAKER[s].load(Ordering::Relaxed) as i64
    } else {
        -ETIMEDOUT
    }
}

/// `wake(tid)`: records a wake-up for EL0 task `tid` (0: the caller) and wakes it if it waits.
fn sys_wake(tid: u64) -> i64 {
    let id = match user_target(tid) {
        Ok(id) => id,
        Err(e) => return e,
    };
    let me = task::current().map_or(0, |m| u64::from(m.task_id().0));
    LAST_WAKER[id.slot()].store(me, Ordering::Relaxed);
    EVENTS[id.slot()].complete();
    0
}

/// `thread_create(pc, sp, arg, clear_tid)`: a new EL0 thread in the caller's address space,
/// entering at `pc` with SP_EL0 = `sp` and `x0 = arg`, with the caller's nice, clamps and
/// affinity; returns its id. `pc` must be 4-aligned in an executable page, `sp` 16-aligned
/// with the byte below it in a writable page, `clear_tid` 0 or a 4-aligned word in a writable
/// page (`-EINVAL` misaligned, `-EFAULT` not mapped so). The thread is detached; when it is
/// reaped the kernel stores 0 at `clear_tid` (Linux `CLONE_CHILD_CLEARTID`). `-EAGAIN` when
/// the space runs [`MAX_SPACE_THREADS`] or the thread table is full, `-ENOMEM` when no
/// kernel stack can be had.
fn sys_thread_create(pc: u64, sp: u64, arg: u64, clear_tid: u64) -> i64 {
    if !pc.is_multiple_of(4) || !sp.is_multiple_of(16) || !clear_tid.is_multiple_of(4) {
        return -EINVAL;
    }
    let Some(me) = task::current() else {
        return -ESRCH;
    };
    let Some(space) = SPACES[me.slot()].lock().clone() else {
        return -EFAULT;
    };
    let perm = |va: u64| space.space.lookup(va as usize).map(|(p, _)| p);
    if perm(pc) != Some(Perm::Text)
        || sp == 0
        || perm(sp - 1) != Some(Perm::Data)
        || (clear_tid != 0 && perm(clear_tid) != Some(Perm::Data))
    {
        return -EFAULT;
    }
    if space
        .threads
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
            (n < MAX_SPACE_THREADS).then_some(n + 1)
        })
        .is_err()
    {
        return -EAGAIN;
    }
    let Some(t) = task::get(me) else {
        space.threads.fetch_sub(1, Ordering::Relaxed);
        return -ESRCH;
    };
    let (name, mut params) = {
        let g = t.sched.lock();
        (g.name.clone(), g.params)
    };
    params.detached = true;
    let start = Box::new(Start {
        space,
        pc,
        sp,
        arg,
        clear_tid,
    });
    let raw = Box::into_raw(start) as usize;
    match task::spawn(&name, params, user_start, raw) {
        Ok(id) => {
            USER_ID[id.slot()].store(id.task_id().0, Ordering::Release);
            CREATED.fetch_add(1, Ordering::Relaxed);
            i64::from(id.task_id().0)
        }
        Err(e) => {
            // SAFETY: the thread was not created, so `raw` is still ours, from `Box::into_raw`.
            let start = unsafe { Box::from_raw(raw as *mut Start) };
            start.space.threads.fetch_sub(1, Ordering::Relaxed);
            match e {
                task::SpawnError::Stack(_) => -ENOMEM,
                _ => -EAGAIN,
            }
        }
    }
}

/// `futex_wait(uaddr, val, timeout_ns)` (Linux `FUTEX_WAIT`): sleeps if the 32-bit word at
/// `uaddr` still holds `val` — read under the bucket's lock, the one `futex_wake` takes — until
/// a `futex_wake` of the word, or `timeout_ns` (`u64::MAX`: none). 0 when woken (a waker
/// need not have changed the word: the caller re-checks it), `-EAGAIN` if the word differs,
/// `-ETIMEDOUT`; `-EINVAL` for a misaligned `uaddr`, `-EFAULT` for an unmapped one.
fn sys_futex_wait(uaddr: usize, val: u32, timeout_ns: u64) -> i64 {
    let pa = match futex_key(uaddr) {
        Ok(pa) => pa,
        Err(e) => return e,
    };
    let deadline =
        (timeout_ns != u64::MAX).then(|| Nanos(crate::sched::now().0.saturating_add(timeout_ns)));
    // SAFETY: `pa` is the kernel alias of a 4-aligned word in a page of the caller's space,
    // which lives (with the page) at least as long as the caller; EL0 accesses it
    // concurrently, so it is accessed only as an atomic.
    let word = unsafe { AtomicU32::from_ptr(pa as *mut u32) };
    match futex_bucket(pa).wait(pa, deadline, || word.load(Ordering::Acquire) == val) {
        KeyedWait::Woken => 0,
        KeyedWait::Mismatch => -EAGAIN,
        KeyedWait::TimedOut => -ETIMEDOUT,
    }
}

/// `futex_wake(uaddr, n)` (Linux `FUTEX_WAKE`): wakes up to `n` threads waiting on the word at
/// `uaddr`, oldest first; returns how many. `-EINVAL`, `-EFAULT` as for `futex_wait`.
fn sys_futex_wake(uaddr: usize, n: u32) -> i64 {
    match futex_key(uaddr) {
        Ok(pa) => i64::from(futex_bucket(pa).wake(pa, n)),
        Err(e) => e,
    }
}

/// The futex key of the caller's word at `uaddr`: its physical address, after the checks
/// (Linux `get_futex_key`: 4-aligned or `-EINVAL`, mapped for EL0 reads or `-EFAULT`).
fn futex_key(uaddr: usize) -> Result<usize, i64> {
    if !uaddr.is_multiple_of(4) {
        return Err(-EINVAL);
    }
    let s = task::current_slot().ok_or(-EFAULT)?;
    let g = SPACES[s].lock();
    let space = &g.as_ref().ok_or(-EFAULT)?.space;
    user_word(space, uaddr, false)
        .map(|w| w.as_ptr() as usize)
        .ok_or(-EFAULT)
}

fn futex_bucket(pa: usize) -> &'static KeyedWaitQueue {
    // Words of one cache line share a bucket; consecutive lines spread.
    &FUTEX[(pa >> 6) % FUTEX_BUCKETS]
}

/// Threads waiting in `futex_wait` on EL0 task `id`'s word at `uaddr` (tests).
pub fn futex_waiters(id: ThreadId, uaddr: usize) -> usize {
    if task::get(id).is_none() {
        return 0;
    }
    let g = SPACES[id.slot()].lock();
    let Some(pa) = g
        .as_ref()
        .and_then(|sp| user_word(&sp.space, uaddr, false))
        .map(|w| w.as_ptr() as usize)
    else {
        return 0;
    };
    drop(g);
    futex_bucket(pa).waiters(pa)
}

/// The 32-bit user word at `va` in `space`, through the kernel's alias of its page: `None`
/// unless `va` is 4-aligned and mapped for EL0 (writable, if `write`).
fn user_word(space: &AddressSpace, va: usize, write: bool) -> Option<&AtomicU32> {
    if !va.is_multiple_of(4) {
        return None;
    }
    let (perm, pa) = space.lookup(va)?;
    if write && perm != Perm::Data {
        return None;
    }
    // SAFETY: `pa` is 4-aligned inside a page `space` owns (a `UserPage` of atomics, which
    // the caller's borrow of `space` keeps alive), identity-mapped read/write for the kernel;
    // EL0 threads may access the word concurrently, which is why it is only ever accessed as
    // an atomic here.
    Some(unsafe { AtomicU32::from_ptr(pa as *mut u32) })
}

/// Reads `[ptr, ptr + len)` of the calling task's memory into `buf`, page by page through the
/// kernel's alias of its own pages, after checking that each page is mapped for EL0 reads.
fn copy_from_user(ptr: usize, buf: &mut [u8]) -> Result<(), i64> {
    let s = task::current_slot().ok_or(-EFAULT)?;
    ptr.checked_add(buf.len()).ok_or(-EFAULT)?;
    let g = SPACES[s].lock();
    let space = &g.as_ref().ok_or(-EFAULT)?.space;
    let mut done = 0;
    while done < buf.len() {
        let va = ptr + done;
        let (_perm, pa) = space.lookup(va).ok_or(-EFAULT)?;
        let n = (4096 - (va & 4095)).min(buf.len() - done);
        let dst = &mut buf[done..done + n];
        let mut i = 0;
        // Eight bytes at a time from an aligned address (a marker's text is ~80 bytes: a
        // byte loop was most of `trace_marker`'s cost), the rest byte by byte.
        while i < n {
            if (pa + i).is_multiple_of(8) && n - i >= 8 {
                // SAFETY: as below, for the 8-aligned word at `pa + i`, inside the same page.
                let w = unsafe { core::ptr::read_volatile((pa + i) as *const u64) };
                dst[i..i + 8].copy_from_slice(&w.to_le_bytes());
                i += 8;
                continue;
            }
            // SAFETY: `pa + i` lies in a page this address space owns (found by `lookup`, kept
            // alive by the lock on the caller's reference), identity-mapped read/write for the
            // kernel. Another EL0 thread of the space may write it meanwhile (a torn read, as
            // Linux's `copy_from_user` may see; never a fault), hence the volatile read.
            dst[i] = unsafe { core::ptr::read_volatile((pa + i) as *const u8) };
            i += 1;
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

/// `trace_marker(ptr, len)` (Linux's `trace_marker` file, `tracing_mark_write`): the text
/// goes into the kernel's trace as a `tracing_mark_write` event of the caller. One of rt-app's
/// markers (`rtapp_main`, `rtapp_task`, `rtapp_loop`, `rtapp_stats`, exactly as rt-app writes
/// them) is recorded as that marker, as the in-kernel executor records it; any other text as
/// written. Checked like `write` (`-EINVAL` above [`WRITE_MAX`], `-EFAULT`); `-EBADF` while
/// the trace is not recording (Linux's answer when its ring buffer is off).
fn sys_trace_marker(ptr: usize, len: usize) -> i64 {
    const _: () = assert!(WRITE_MAX <= crate::tracing::TEXT_MAX);
    if len > WRITE_MAX {
        return -EINVAL;
    }
    // Only `len` bytes cleared (a zeroed 1024-byte array was most of the call's cost for a
    // marker of ~80 bytes, which an EL0 rt-app thread writes three times a loop).
    let mut buf: heapless::Vec<u8, WRITE_MAX> = heapless::Vec::new();
    if buf.resize(len, 0).is_err() {
        return -EINVAL;
    }
    if let Err(e) = copy_from_user(ptr, &mut buf) {
        return e;
    }
    if !crate::tracing::recording() {
        return -EBADF;
    }
    let text = &buf[..];
    match core::str::from_utf8(text).ok().and_then(Marker::parse) {
        Some(m) => crate::tracing::marker(m),
        None => crate::tracing::marker_text(text),
    }
    len as i64
}

/// `thread_clock(which)`: the caller's own clock, ns. [`THREAD_CLOCK_CPUTIME`]: its running
/// time (Linux `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`). [`THREAD_CLOCK_WORK`]: the work it
/// has done, in ns of a biggest CPU at its top OPP — each ns of running counts
/// `capacity_orig × f / fmax / 1024` ns — the account the in-kernel executor's `run` waits on
/// (`sched::work`). An EL0 program emulates `work` ns of work by running until this clock
/// has advanced by `work` ([`SYS_RUN_UNTIL`]). Any other `which`: `-EINVAL`.
fn sys_thread_clock(which: u64) -> i64 {
    let (running, work) = crate::sched::thread_clocks();
    let v = match which {
        THREAD_CLOCK_CPUTIME => running,
        THREAD_CLOCK_WORK => work,
        _ => return -EINVAL,
    };
    v.min(i64::MAX as u64) as i64
}

/// `run_until(clock, target)`: keeps the caller running (it does not sleep) until `clock`
/// reads `target` or an interrupt comes first; returns the clock's value then, so the caller
/// loops until it is at `target`. `clock` 0: guest time (`clock`'s time base; rt-app's
/// `runtime`); 1: the caller's work clock ([`THREAD_CLOCK_WORK`]; rt-app's `run`). The kernel
/// waits in `wfi` meanwhile, as the in-kernel executor's `run` does, so the thread's emulated
/// work costs no instructions (under `-icount` a spinning vCPU would advance the one guest
/// clock every vCPU shares). Any other `clock`: `-EINVAL`.
fn sys_run_until(clock: u64, target: u64) -> i64 {
    let c = match clock {
        0 => crate::sched::RunClock::Monotonic,
        THREAD_CLOCK_WORK => crate::sched::RunClock::Work,
        _ => return -EINVAL,
    };
    crate::sched::run_until_once(c, target).min(i64::MAX as u64) as i64
}

/// Longest name [`SYS_SET_NAME`] reads (Linux's `TASK_COMM_LEN`, 16).
pub const SET_NAME_MAX: usize = 16;

/// `set_name(ptr, len)` (Linux `prctl(PR_SET_NAME)`): renames the caller to the UTF-8 text at
/// `[ptr, ptr + len)`, cut to [`task::NAME_LEN`] bytes as Linux cuts at `TASK_COMM_LEN - 1`,
/// and records a `task_rename` event while the trace records (rt-app's first act in a new
/// thread). `len` 0 or above [`SET_NAME_MAX`], or text that is not UTF-8: `-EINVAL`; an
/// unreadable byte: `-EFAULT`.
fn sys_set_name(ptr: usize, len: usize) -> i64 {
    if len == 0 || len > SET_NAME_MAX {
        return -EINVAL;
    }
    let mut buf = [0u8; SET_NAME_MAX];
    if let Err(e) = copy_from_user(ptr, &mut buf[..len]) {
        return e;
    }
    let Ok(name) = core::str::from_utf8(&buf[..len]) else {
        return -EINVAL;
    };
    let Some(id) = task::current() else {
        return -ESRCH;
    };
    task::set_name(id, name);
    crate::tracing::rename_self();
    0
}
