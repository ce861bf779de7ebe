//! The Linux half of `cargo xtask bench --vs-linux`: a static aarch64 Linux program with no C
//! library, so the initramfs needs no cross compiler. Built for `aarch64-unknown-none-softfloat`
//! (the kernel's target, already installed) and linked static by `build.rs`; it talks to Linux
//! through raw `svc #0` system calls (aarch64 numbers from Linux's `include/uapi/asm-generic/
//! unistd.h`).
//!
//! Modes (each prints one line with one `write`, so lines from two processes never interleave):
//! - as `/init` (`argv[0]` ends in `init`): prints `RESULT bench=boot counter_ticks=<CNTVCT_EL0>
//!   counter_hz=<CNTFRQ_EL0> monotonic_ns=<CLOCK_MONOTONIC>` as the first thing the first user
//!   task does, then `execve`s `/bin/sh /bench.sh` with the same environment;
//! - `pingpong <name> <cpu_a> <cpu_b> <rounds>`: two processes pinned to `cpu_a` and `cpu_b`
//!   pass one byte back and forth through two pipes; after `rounds / 10` warm-up round trips,
//!   `rounds` are timed with `CLOCK_MONOTONIC` and `RESULT bench=<name> cpu_a=.. cpu_b=..
//!   rounds=.. ns=..` is printed (`perf bench sched pipe`'s loop, with each end pinned);
//! - `now`: prints `CLOCK_MONOTONIC` in ns (for the shell to time a phase).
//!
//! Errors print `probe: <what>: errno <n>` on stderr and exit with status 1.

#![no_std]
#![no_main]

use core::arch::{asm, global_asm};
use core::fmt::Write;

// Linux starts a static ELF at `_start` with `sp` pointing at argc, then argv[], NULL, envp[],
// NULL, auxv. `sp` is 16-byte aligned there (the arm64 ELF ABI).
global_asm!(
    ".globl _start",
    "_start:",
    "mov x29, #0",
    "mov x30, #0",
    "mov x0, sp",
    "bl start_rust",
    "udf #0",
);

const SYS_CLOSE: usize = 57;
const SYS_PIPE2: usize = 59;
const SYS_READ: usize = 63;
const SYS_WRITE: usize = 64;
const SYS_EXIT_GROUP: usize = 94;
const SYS_CLOCK_GETTIME: usize = 113;
const SYS_SCHED_SETAFFINITY: usize = 122;
const SYS_CLONE: usize = 220;
const SYS_EXECVE: usize = 221;
const SYS_WAIT4: usize = 260;
const SIGCHLD: usize = 17;
const CLOCK_MONOTONIC: usize = 1;

/// A raw system call with up to five arguments; returns the kernel's value (`-errno` on error).
///
/// # Safety
/// The arguments must be valid for system call `nr`: every pointer argument points to memory
/// of the size and mutability the call needs, for the duration of the call.
unsafe fn syscall(nr: usize, a: [usize; 5]) -> isize {
    let ret: isize;
    // SAFETY: `svc #0` enters the Linux kernel, which reads x8 (number) and x0–x5 and writes
    // only x0; the caller vouches for the arguments (this function's contract). No stack or
    // flags are touched on our side.
    unsafe {
        asm!(
            "svc #0",
            in("x8") nr,
            inlateout("x0") a[0] as isize => ret,
            in("x1") a[1],
            in("x2") a[2],
            in("x3") a[3],
            in("x4") a[4],
            options(nostack),
        );
    }
    ret
}

fn exit(code: usize) -> ! {
    // SAFETY: exit_group takes a plain integer and does not return.
    unsafe { syscall(SYS_EXIT_GROUP, [code, 0, 0, 0, 0]) };
    loop {
        core::hint::spin_loop();
    }
}

fn write_all(fd: usize, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        // SAFETY: the pointer and length describe `bytes`, which the kernel only reads.
        let n = unsafe { syscall(SYS_WRITE, [fd, bytes.as_ptr() as usize, bytes.len(), 0, 0]) };
        if n <= 0 {
            return;
        }
        bytes = &bytes[n as usize..];
    }
}

/// A fixed line buffer; a line longer than it is cut (never the case for our lines).
struct Line {
    buf: [u8; 512],
    len: usize,
}

impl Line {
    fn new() -> Self {
        Line {
            buf: [0; 512],
            len: 0,
        }
    }
    fn emit(&mut self, fd: usize) {
        let _ = self.write_str("\n");
        write_all(fd, &self.buf[..self.len]);
        self.len = 0;
    }
}

impl Write for Line {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

/// Prints `probe: <what>: errno <n>` and exits with status 1.
fn die(what: &str, ret: isize) -> ! {
    let mut l = Line::new();
    let _ = write!(l, "probe: {what}: errno {}", -ret);
    l.emit(2);
    exit(1)
}

fn usage() -> ! {
    let mut l = Line::new();
    let _ = write!(
        l,
        "usage: asym-linux-probe pingpong <name> <cpu_a> <cpu_b> <rounds> | now (or run as /init)"
    );
    l.emit(2);
    exit(2)
}

fn check(what: &str, ret: isize) -> usize {
    if ret < 0 {
        die(what, ret)
    }
    ret as usize
}

fn monotonic_ns() -> u64 {
    let mut ts = [0i64; 2];
    // SAFETY: `ts` is a writable `struct timespec` (two 64-bit fields on arm64).
    let r = unsafe {
        syscall(
            SYS_CLOCK_GETTIME,
            [CLOCK_MONOTONIC, ts.as_mut_ptr() as usize, 0, 0, 0],
        )
    };
    check("clock_gettime", r);
    ts[0] as u64 * 1_000_000_000 + ts[1] as u64
}

/// The virtual counter and its frequency. Linux lets EL0 read both (the vDSO does:
/// `CNTKCTL_EL1.EL0VCTEN`); under QEMU the counter starts at 0 at reset.
fn counter() -> (u64, u64) {
    let (ticks, hz): (u64, u64);
    // SAFETY: reads of two system registers that EL0 may read (see above); no memory access.
    unsafe {
        asm!(
            "isb",
            "mrs {t}, cntvct_el0",
            "mrs {f}, cntfrq_el0",
            t = out(reg) ticks,
            f = out(reg) hz,
            options(nomem, nostack),
        );
    }
    (ticks, hz)
}

fn pin(cpu: usize) {
    if cpu >= 64 {
        die("cpu number above 63", -22);
    }
    let mask: u64 = 1 << cpu;
    // SAFETY: pid 0 is this thread; the mask pointer and its 8-byte length describe `mask`.
    let r = unsafe {
        syscall(
            SYS_SCHED_SETAFFINITY,
            [0, 8, &mask as *const u64 as usize, 0, 0],
        )
    };
    check("sched_setaffinity", r);
}

fn pipe() -> [usize; 2] {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is the writable `int[2]` pipe2 fills.
    let r = unsafe { syscall(SYS_PIPE2, [fds.as_mut_ptr() as usize, 0, 0, 0, 0]) };
    check("pipe2", r);
    [fds[0] as usize, fds[1] as usize]
}

fn read_byte(fd: usize) -> bool {
    let mut b = 0u8;
    // SAFETY: one writable byte.
    let r = unsafe { syscall(SYS_READ, [fd, &mut b as *mut u8 as usize, 1, 0, 0]) };
    if r < 0 {
        die("read", r)
    }
    r == 1
}

fn write_byte(fd: usize) {
    let b = 0u8;
    // SAFETY: one readable byte.
    let r = unsafe { syscall(SYS_WRITE, [fd, &b as *const u8 as usize, 1, 0, 0]) };
    if r != 1 {
        die("write", r.min(-5))
    }
}

fn close(fd: usize) {
    // SAFETY: close takes a plain integer.
    unsafe { syscall(SYS_CLOSE, [fd, 0, 0, 0, 0]) };
}

fn pingpong(name: &str, cpu_a: usize, cpu_b: usize, rounds: u64) -> ! {
    let to_child = pipe();
    let to_parent = pipe();
    // SAFETY: clone with only SIGCHLD and no new stack is fork(): the child gets a copy of
    // this single-threaded address space, so nothing shared can be torn.
    let pid = check("clone", unsafe {
        syscall(SYS_CLONE, [SIGCHLD, 0, 0, 0, 0])
    });
    if pid == 0 {
        pin(cpu_b);
        close(to_child[1]);
        close(to_parent[0]);
        while read_byte(to_child[0]) {
            write_byte(to_parent[1]);
        }
        exit(0);
    }
    pin(cpu_a);
    close(to_child[0]);
    close(to_parent[1]);
    let round = || {
        write_byte(to_child[1]);
        if !read_byte(to_parent[0]) {
            die("the partner process ended", -32)
        }
    };
    // Warm-up: the child is pinned and both sides' caches and TLBs are warm.
    for _ in 0..rounds.div_ceil(10) {
        round();
    }
    let t0 = monotonic_ns();
    for _ in 0..rounds {
        round();
    }
    let ns = monotonic_ns() - t0;
    close(to_child[1]);
    let mut status = 0i32;
    // SAFETY: `status` is a writable int; no rusage pointer.
    let r = unsafe { syscall(SYS_WAIT4, [pid, &mut status as *mut i32 as usize, 0, 0, 0]) };
    check("wait4", r);
    let mut l = Line::new();
    let _ = write!(
        l,
        "RESULT bench={name} cpu_a={cpu_a} cpu_b={cpu_b} rounds={rounds} ns={ns}"
    );
    l.emit(1);
    exit(if status == 0 { 0 } else { 1 })
}

/// The NUL-terminated string at `p` (empty if null or not UTF-8).
///
/// # Safety
/// `p` is null or points to a NUL-terminated string that lives for the whole run (argv and
/// envp strings do).
unsafe fn cstr(p: *const u8) -> &'static str {
    if p.is_null() {
        return "";
    }
    let mut n = 0;
    // SAFETY: within the string up to and including its NUL (the caller's contract).
    while unsafe { *p.add(n) } != 0 {
        n += 1;
    }
    // SAFETY: the `n` bytes before the NUL, valid for the whole run.
    let bytes = unsafe { core::slice::from_raw_parts(p, n) };
    core::str::from_utf8(bytes).unwrap_or("")
}

fn number(s: &str) -> u64 {
    s.parse().unwrap_or_else(|_| usage())
}

fn init(envp: *const *const u8) -> ! {
    let (ticks, hz) = counter();
    let mono = monotonic_ns();
    let mut l = Line::new();
    let _ = write!(
        l,
        "RESULT bench=boot counter_ticks={ticks} counter_hz={hz} monotonic_ns={mono}"
    );
    l.emit(1);
    let sh = b"/bin/sh\0";
    let script = b"/bench.sh\0";
    let argv = [sh.as_ptr(), script.as_ptr(), core::ptr::null()];
    // SAFETY: NUL-terminated path, NULL-terminated argv of NUL-terminated strings, and the
    // kernel's own envp; execve only returns on failure.
    let r = unsafe {
        syscall(
            SYS_EXECVE,
            [
                sh.as_ptr() as usize,
                argv.as_ptr() as usize,
                envp as usize,
                0,
                0,
            ],
        )
    };
    die("execve /bin/sh /bench.sh", r)
}

/// # Safety
/// `sp` is the initial stack pointer Linux gives a new program (argc, argv, envp, auxv).
#[no_mangle]
unsafe extern "C" fn start_rust(sp: *const usize) -> ! {
    // SAFETY: the layout Linux sets up at exec (this function's contract).
    let argc = unsafe { *sp };
    // SAFETY: argv follows argc, envp follows argv's NULL.
    let argv = unsafe { sp.add(1) } as *const *const u8;
    // SAFETY: as above.
    let envp = unsafe { argv.add(argc + 1) };
    let arg = |i: usize| {
        if i < argc {
            // SAFETY: argv[i] for i < argc is a NUL-terminated string that lives for the
            // whole run.
            unsafe { cstr(*argv.add(i)) }
        } else {
            ""
        }
    };
    if arg(0).ends_with("init") {
        init(envp)
    }
    match arg(1) {
        "pingpong" if argc == 6 => {
            let (a, b) = (number(arg(3)) as usize, number(arg(4)) as usize);
            pingpong(arg(2), a, b, number(arg(5)).max(1))
        }
        "now" => {
            let mut l = Line::new();
            let _ = write!(l, "{}", monotonic_ns());
            l.emit(1);
            exit(0)
        }
        _ => usage(),
    }
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    write_all(2, b"probe: panic\n");
    exit(101)
}
