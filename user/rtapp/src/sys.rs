//! The kernel's system calls (`docs/syscalls.md`, the one place the ABI is written down; the
//! numbers come from the `asym-abi` crate the kernel uses too): `svc #0`, number in `x8`,
//! arguments in `x0`–`x5`, result in `x0` (≥ 0, or a negative Linux errno).

use core::arch::asm;

use asym_abi::{SCHED_ATTR_SIZE_VER1, SCHED_FLAG_UTIL_CLAMP_MAX, SCHED_FLAG_UTIL_CLAMP_MIN};
pub use asym_abi::{
    SYS_CLOCK, SYS_EXIT, SYS_FUTEX_WAIT, SYS_FUTEX_WAKE, SYS_RUN_UNTIL, SYS_SCHED_SETAFFINITY,
    SYS_SCHED_SETATTR, SYS_SET_NAME, SYS_SLEEP_UNTIL, SYS_THREAD_CLOCK, SYS_THREAD_CREATE,
    SYS_TRACE_MARKER, SYS_WRITE, SYS_YIELD, THREAD_CLOCK_WORK,
};

/// A system call with up to four arguments.
///
/// # Safety
/// Every pointer argument must be valid for the call (the memory it names readable, or
/// writable where the call writes, for the call's duration).
unsafe fn call(nr: u64, a0: u64, a1: u64, a2: u64, a3: u64) -> i64 {
    let r: i64;
    // SAFETY: `svc #0` enters the kernel, which reads x8 and x0–x5 and writes only x0 (every
    // other register is preserved, `docs/syscalls.md`); the caller vouches for the pointers.
    unsafe {
        asm!(
            "svc #0",
            in("x8") nr,
            inlateout("x0") a0 as i64 => r,
            in("x1") a1,
            in("x2") a2,
            in("x3") a3,
            options(nostack),
        );
    }
    r
}

/// A call that takes no pointer.
fn call_plain(nr: u64, a0: u64, a1: u64) -> i64 {
    // SAFETY: `nr` takes no pointer argument (callers below), so nothing is read or written
    // on our side.
    unsafe { call(nr, a0, a1, 0, 0) }
}

pub fn exit(status: i32) -> ! {
    call_plain(SYS_EXIT, status as u64, 0);
    // `exit` does not return; should it, stop here rather than run on.
    loop {
        core::hint::spin_loop();
    }
}

pub fn sched_yield() {
    call_plain(SYS_YIELD, 0, 0);
}

pub fn sleep_until(deadline_ns: u64) {
    call_plain(SYS_SLEEP_UNTIL, deadline_ns, 0);
}

/// ns since boot (the kernel's guest clock).
pub fn clock() -> u64 {
    call_plain(SYS_CLOCK, 0, 0) as u64
}

/// Keeps running until `clock` (0: guest time, 1: the work clock) reads `target` or an
/// interrupt comes; returns the clock then.
pub fn run_until(clock: u64, target: u64) -> u64 {
    call_plain(SYS_RUN_UNTIL, clock, target) as u64
}

/// The caller's work clock: ns of a biggest CPU at its top OPP done so far.
pub fn work_clock() -> u64 {
    call_plain(SYS_THREAD_CLOCK, THREAD_CLOCK_WORK, 0) as u64
}

/// Writes `bytes` to the console (in pieces of at most the call's 1024 bytes).
pub fn write(bytes: &[u8]) {
    for chunk in bytes.chunks(1024) {
        // SAFETY: `chunk` is readable for its length.
        unsafe { call(SYS_WRITE, chunk.as_ptr() as u64, chunk.len() as u64, 0, 0) };
    }
}

/// `trace_marker`: the text goes into the kernel's trace (nothing while it is off).
pub fn trace_marker(text: &[u8]) -> i64 {
    // SAFETY: `text` is readable for its length.
    unsafe {
        call(
            SYS_TRACE_MARKER,
            text.as_ptr() as u64,
            text.len() as u64,
            0,
            0,
        )
    }
}

/// `set_name` (Linux `prctl(PR_SET_NAME)`): renames the caller, recording `task_rename`.
pub fn set_name(name: &str) -> i64 {
    // SAFETY: `name` is readable for its length.
    unsafe { call(SYS_SET_NAME, name.as_ptr() as u64, name.len() as u64, 0, 0) }
}

/// The caller's nice and, if `uclamp` is given, its clamps (`sched_setattr(0, …)`).
pub fn set_sched(nice: i32, uclamp: Option<(u32, u32)>) -> i64 {
    let mut attr = [0u8; SCHED_ATTR_SIZE_VER1];
    let mut put = |at: usize, v: u32| attr[at..at + 4].copy_from_slice(&v.to_le_bytes());
    put(0, SCHED_ATTR_SIZE_VER1 as u32);
    let mut flags = 0;
    if let Some((lo, hi)) = uclamp {
        flags = SCHED_FLAG_UTIL_CLAMP_MIN | SCHED_FLAG_UTIL_CLAMP_MAX;
        put(48, lo);
        put(52, hi);
    }
    put(8, flags as u32);
    put(16, nice as u32);
    // SAFETY: `attr` is a readable `struct sched_attr` of the size its first word gives.
    unsafe { call(SYS_SCHED_SETATTR, 0, attr.as_ptr() as u64, 0, 0) }
}

/// The caller's CPUs (`sched_setaffinity(0, 8, &mask)`); it moves at once if it must.
pub fn set_affinity(mask: u64) -> i64 {
    let m = mask.to_le_bytes();
    // SAFETY: `m` is 8 readable bytes.
    unsafe { call(SYS_SCHED_SETAFFINITY, 0, 8, m.as_ptr() as u64, 0) }
}

/// A new thread in this address space entering `entry(arg)` on the stack whose top is `sp`.
pub fn thread_create(entry: extern "C" fn(u64) -> !, sp: u64, arg: u64) -> i64 {
    // SAFETY: `entry` is a function of this program (in its text), `sp` the top of a stack
    // the kernel mapped for it (the caller's choice), no clear-tid word.
    unsafe { call(SYS_THREAD_CREATE, entry as usize as u64, sp, arg, 0) }
}

/// `futex_wait(word, val, forever)`.
pub fn futex_wait(word: &core::sync::atomic::AtomicU32, val: u32) -> i64 {
    // SAFETY: `word` is a live, aligned 32-bit word of this address space.
    unsafe {
        call(
            SYS_FUTEX_WAIT,
            word.as_ptr() as u64,
            u64::from(val),
            u64::MAX,
            0,
        )
    }
}

/// `futex_wake(word, n)`.
pub fn futex_wake(word: &core::sync::atomic::AtomicU32, n: u32) -> i64 {
    // SAFETY: `word` is a live, aligned 32-bit word of this address space.
    unsafe { call(SYS_FUTEX_WAKE, word.as_ptr() as u64, u64::from(n), 0, 0) }
}
