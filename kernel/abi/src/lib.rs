//! The system-call ABI between the kernel and its EL0 programs, written down in
//! `docs/syscalls.md` (the document is the contract; a host test checks that the numbers and
//! names here are its table's). `svc #0`, number in `x8`, arguments in `x0`–`x5`, result in
//! `x0`: a value ≥ 0, or a negative Linux errno.
//!
//! One crate for both sides, so the kernel (`kernel/src/user.rs`) and the EL0 rt-app executor
//! (`user/rtapp`) cannot disagree on a number. The scheduling calls keep Linux's names and
//! layouts (`sched_setattr` with `struct sched_attr`, `sched_setaffinity`), so their constants
//! carry Linux's values (`include/uapi/linux/sched.h`, `include/uapi/linux/sched/types.h`,
//! `include/uapi/asm-generic/errno-base.h`).

#![no_std]
#![forbid(unsafe_code)]

pub const SYS_EXIT: u64 = 0;
pub const SYS_YIELD: u64 = 1;
pub const SYS_SLEEP_FOR: u64 = 2;
pub const SYS_SLEEP_UNTIL: u64 = 3;
pub const SYS_CLOCK: u64 = 4;
pub const SYS_WRITE: u64 = 5;
pub const SYS_SCHED_SETATTR: u64 = 6;
pub const SYS_SCHED_SETAFFINITY: u64 = 7;
pub const SYS_WAIT: u64 = 8;
pub const SYS_WAKE: u64 = 9;
pub const SYS_GETTID: u64 = 10;
pub const SYS_THREAD_CREATE: u64 = 11;
pub const SYS_FUTEX_WAIT: u64 = 12;
pub const SYS_FUTEX_WAKE: u64 = 13;
pub const SYS_TRACE_MARKER: u64 = 14;
pub const SYS_THREAD_CLOCK: u64 = 15;
pub const SYS_SET_NAME: u64 = 16;
pub const SYS_RUN_UNTIL: u64 = 17;
/// One past the highest call number.
pub const NR_SYSCALLS: u64 = 18;

/// Every call's number and its name in `docs/syscalls.md`, in number order.
pub const SYSCALLS: [(u64, &str); NR_SYSCALLS as usize] = [
    (SYS_EXIT, "exit"),
    (SYS_YIELD, "yield"),
    (SYS_SLEEP_FOR, "sleep_for"),
    (SYS_SLEEP_UNTIL, "sleep_until"),
    (SYS_CLOCK, "clock"),
    (SYS_WRITE, "write"),
    (SYS_SCHED_SETATTR, "sched_setattr"),
    (SYS_SCHED_SETAFFINITY, "sched_setaffinity"),
    (SYS_WAIT, "wait"),
    (SYS_WAKE, "wake"),
    (SYS_GETTID, "gettid"),
    (SYS_THREAD_CREATE, "thread_create"),
    (SYS_FUTEX_WAIT, "futex_wait"),
    (SYS_FUTEX_WAKE, "futex_wake"),
    (SYS_TRACE_MARKER, "trace_marker"),
    (SYS_THREAD_CLOCK, "thread_clock"),
    (SYS_SET_NAME, "set_name"),
    (SYS_RUN_UNTIL, "run_until"),
];

/// [`SYS_THREAD_CLOCK`]'s clocks: the caller's running time (Linux
/// `CLOCK_THREAD_CPUTIME_ID`), and its capacity-invariant work clock.
pub const THREAD_CLOCK_CPUTIME: u64 = 0;
pub const THREAD_CLOCK_WORK: u64 = 1;

/// Linux errnos the calls return (negated).
pub const EPERM: i64 = 1;
pub const ESRCH: i64 = 3;
pub const E2BIG: i64 = 7;
pub const EBADF: i64 = 9;
pub const EAGAIN: i64 = 11;
pub const ENOMEM: i64 = 12;
pub const EFAULT: i64 = 14;
pub const EINVAL: i64 = 22;
pub const ENOSYS: i64 = 38;
pub const ETIMEDOUT: i64 = 110;

/// `struct sched_attr` sizes (Linux `include/uapi/linux/sched/types.h`).
pub const SCHED_ATTR_SIZE_VER0: usize = 48;
pub const SCHED_ATTR_SIZE_VER1: usize = 56;
/// `SCHED_NORMAL` (`SCHED_OTHER`), the one policy this kernel runs.
pub const SCHED_NORMAL: u32 = 0;
/// `sched_flags` bits (Linux `include/uapi/linux/sched.h`).
pub const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;
pub const SCHED_FLAG_RECLAIM: u64 = 0x02;
pub const SCHED_FLAG_DL_OVERRUN: u64 = 0x04;
pub const SCHED_FLAG_KEEP_POLICY: u64 = 0x08;
pub const SCHED_FLAG_KEEP_PARAMS: u64 = 0x10;
pub const SCHED_FLAG_UTIL_CLAMP_MIN: u64 = 0x20;
pub const SCHED_FLAG_UTIL_CLAMP_MAX: u64 = 0x40;
/// `SCHED_FLAG_ALL`: any other bit is `-EINVAL`.
pub const SCHED_FLAG_ALL: u64 = 0x7f;

/// Most bytes one `write` or `trace_marker` takes.
pub const WRITE_MAX: usize = 1024;
