//! The rt-app executor as an EL0 program: the same interpreter as the simulator and the
//! in-kernel executor (`asym_rtapp::interp`, kernel `src/rtapp.rs`), its actions carried out
//! through system calls only (`docs/syscalls.md`):
//! - one EL0 thread per workload thread (`thread_create`, all in this address space, each
//!   on a stack the kernel mapped with guard pages), started at its `delay` by the main
//!   thread, which first takes on the thread's initial nice, clamps and CPUs so that the new
//!   thread inherits them (the in-kernel executor spawns with them);
//! - `run` → spin at EL0 on the caller's work clock (`thread_clock(WORK)`: ns of a biggest
//!   CPU at its top OPP, charged `capacity_orig × f / fmax` per ns of running, the account
//!   the in-kernel `sched::work` waits on) until it has advanced by the work; `runtime` →
//!   spin on `clock`;
//! - `sleep`/`timer` → `sleep_until`; `suspend`/`resume` → a futex word per thread plus the
//!   interpreter's one remembered wake-up; `yield` → `yield`;
//! - a phase's nice and clamps → `sched_setattr`, its CPUs → `sched_setaffinity`;
//! - rt-app's markers → `trace_marker` in `Marker`'s `Display` text (the kernel records them
//!   as the in-kernel executor's markers); the thread's start → `set_name` (`task_rename`).
//!
//! The kernel (`kernel/src/rtapp_el0.rs`) maps the workload's JSON, a heap and the stacks, and
//! passes a [`BootInfo`] in `x0`. The main thread writes each workload thread's id into the
//! kernel's tid table (the trace names them by it), starts the threads and exits; a bad
//! workload ends it with the reader's message and status 2.

#![no_std]
#![no_main]

extern crate alloc;

mod heap;
mod lock;
mod sys;

use alloc::vec::Vec;
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};

use asym_rtapp::interp::{Action, Params, Thread, Timer};
use asym_rtapp::marker::{Marker, MarkerText};
use asym_rtapp::workload::{self, Workload};

use lock::SpinLock;

/// What the kernel passes in `x0` (a read-only page; `docs/syscalls.md`, "EL0 programs").
#[repr(C)]
struct BootInfo {
    magic: u64,
    version: u64,
    /// The workload's JSON (read-only pages) and its length.
    json: u64,
    json_len: u64,
    /// The workload's name for messages (UTF-8).
    name: u64,
    name_len: u64,
    /// The heap's data pages.
    heap: u64,
    heap_len: u64,
    /// Stack `k`'s top is `stacks + (k + 1) × stack_stride`; the main thread runs on stack 0.
    stacks: u64,
    stack_stride: u64,
    nr_stacks: u64,
    nr_cpus: u64,
    /// Online CPUs, bit n = CPU n.
    online: u64,
    /// The workload's time zero (the trace's), `clock` time: stored by the kernel before `go`.
    t0_ns: AtomicU64,
    /// The run's length from `t0_ns` (0: the workload's `duration`, else
    /// `default_duration_ns`).
    duration_ns: u64,
    /// The results page: what the kernel needs from the workload, written before waiting for
    /// `go` (the run's length as a u64 at 0, the thread count as a u32 at 8, the threads'
    /// names, 16 NUL-padded bytes each from 256) and as the threads start (their ids, a u32
    /// each from 64).
    results: u64,
    /// 0 until the kernel has stored `t0_ns`, then 1 (a futex word).
    go: AtomicU32,
    _pad: u32,
    default_duration_ns: u64,
    /// The main thread's CPUs (the kernel pins it to the CPU its init thread runs on).
    main_cpus: u64,
}

/// Offsets in the results page (`kernel/src/rtapp_el0.rs`, `docs/syscalls.md`).
const R_DURATION: usize = 0;
const R_THREADS: usize = 8;
const R_TIDS: usize = 64;
const R_NAMES: usize = 256;
const NAME_BYTES: usize = 16;

const MAGIC: u64 = u64::from_le_bytes(*b"asymrtap");
const VERSION: u64 = 1;

// The kernel enters at `_start` with x0 = &BootInfo, SP on stack 0, every other register 0.
core::arch::global_asm!(
    ".globl _start",
    "_start:",
    "mov x29, #0",
    "mov x30, #0",
    "bl main_el0",
    "udf #0",
);

/// One workload thread's state shared with the others (for `resume`).
struct Slot {
    prog: SpinLock<Prog>,
    /// Bumped by each `resume` of a suspended thread; the thread futex-waits on it.
    wake: AtomicU32,
}

struct Prog {
    thread: Thread,
    suspended: bool,
}

struct Exec {
    wl: Workload,
    timers: SpinLock<Vec<Timer>>,
    slots: Vec<Slot>,
    online: u64,
    /// Time zero (set once, before the first thread starts).
    t0: AtomicU64,
}

static EXEC: AtomicPtr<Exec> = AtomicPtr::new(core::ptr::null_mut());

/// A line of text built on the stack (no allocation: also for "out of memory").
struct Line {
    buf: [u8; 512],
    len: usize,
}

impl Line {
    const fn new() -> Self {
        Line {
            buf: [0; 512],
            len: 0,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Write for Line {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let n = s.len().min(self.buf.len() - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        Ok(())
    }
}

fn fail(args: fmt::Arguments<'_>) -> ! {
    let mut l = Line::new();
    let _ = writeln!(l, "rtapp-el0: {args}");
    sys::write(l.as_bytes());
    sys::exit(2)
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    let mut l = Line::new();
    let _ = writeln!(l, "rtapp-el0: panic: {info}");
    sys::write(l.as_bytes());
    sys::exit(3)
}

#[unsafe(no_mangle)]
extern "C" fn main_el0(info: *const BootInfo) -> ! {
    // SAFETY: the kernel passes a read-only page holding a `BootInfo`, mapped for the life of
    // this address space; the magic and version are checked before anything else is used.
    let info = unsafe { &*info };
    if info.magic != MAGIC || info.version != VERSION {
        fail(format_args!(
            "boot info: magic {:#x} version {} (want {:#x} version {VERSION})",
            info.magic, info.version, MAGIC
        ));
    }
    // SAFETY: the kernel mapped `heap_len` bytes of data pages at `heap` for this program only.
    unsafe { heap::init(info.heap as usize, info.heap_len as usize) };
    // SAFETY: the kernel mapped the JSON and the name read-only at these addresses for the
    // life of the space; nothing writes them.
    let (json, name) = unsafe {
        (
            core::slice::from_raw_parts(info.json as *const u8, info.json_len as usize),
            core::slice::from_raw_parts(info.name as *const u8, info.name_len as usize),
        )
    };
    let name = core::str::from_utf8(name).unwrap_or("workload");
    let text = match core::str::from_utf8(json) {
        Ok(t) => t,
        Err(e) => fail(format_args!(
            "{name}: not UTF-8 at byte {}",
            e.valid_up_to()
        )),
    };
    let nr_cpus = info.nr_cpus as usize;
    let wl = match workload::parse(text, name, nr_cpus) {
        Ok(wl) => wl,
        Err(e) => fail(format_args!("{e}")),
    };
    let room = info.nr_stacks.saturating_sub(1) as usize;
    if wl.tasks.len() > room {
        fail(format_args!(
            "{name}: {} threads; the EL0 executor runs at most {room} (one address space: its \
             main thread and {room} more)",
            wl.tasks.len()
        ));
    }
    let duration_ns = match info.duration_ns {
        0 => wl.duration_ns.unwrap_or(info.default_duration_ns),
        d => d,
    };
    report(info, duration_ns, &wl);
    let slots = (0..wl.tasks.len())
        .map(|i| Slot {
            prog: SpinLock::new(Prog {
                thread: Thread::new(&wl, i, nr_cpus),
                suspended: false,
            }),
            wake: AtomicU32::new(0),
        })
        .collect();
    let exec: &'static Exec = alloc::boxed::Box::leak(alloc::boxed::Box::new(Exec {
        timers: SpinLock::new(alloc::vec![Timer::new(); wl.nr_timers]),
        wl,
        slots,
        online: info.online,
        t0: AtomicU64::new(0),
    }));
    EXEC.store(exec as *const Exec as *mut Exec, Ordering::Release);
    // Ready: the kernel sees this wait, sets time zero and wakes us.
    while info.go.load(Ordering::Acquire) == 0 {
        sys::futex_wait(&info.go, 0);
    }
    let t0 = info.t0_ns.load(Ordering::Acquire);
    exec.t0.store(t0, Ordering::Release);
    let end = t0.saturating_add(duration_ns);
    let mut order: Vec<usize> = (0..exec.wl.tasks.len()).collect();
    order.sort_by_key(|&i| exec.wl.tasks[i].delay_ns);
    for i in order {
        let at = t0.saturating_add(exec.wl.tasks[i].delay_ns);
        if at >= end {
            break;
        }
        sys::sleep_until(at);
        spawn(exec, info, i);
    }
    sys::exit(0)
}

/// Starts workload thread `i` on stack `i + 1` with its initial parameters, and records its id.
fn spawn(exec: &Exec, info: &BootInfo, i: usize) {
    let p: Params = exec.slots[i].prog.lock().thread.params();
    // The new thread inherits the caller's nice, clamps and CPUs (`thread_create`): take on
    // its initial ones first, as the in-kernel executor spawns its threads with them.
    sys::set_sched(p.nice, Some(p.uclamp.unwrap_or((0, 1024))));
    let mask = p.allowed & exec.online;
    sys::set_affinity(if mask == 0 { exec.online } else { mask });
    let sp = info.stacks + (i as u64 + 2) * info.stack_stride;
    let tid = sys::thread_create(thread_main, sp, i as u64);
    // Back to the main thread's own CPU (the thread's CPUs may have moved it), so every
    // thread is forked from there, as the in-kernel executor forks all of them from its init
    // thread's CPU.
    sys::set_affinity(info.main_cpus);
    if tid < 0 {
        fail(format_args!(
            "cannot start thread {}: errno {}",
            exec.wl.tasks[i].name, -tid
        ));
    }
    put_u32(info, R_TIDS + 4 * i, tid as u32);
}

/// Stores `v` at `offset` of the results page (a data page the kernel mapped for this and
/// reads through its own alias; `offset` + 4 within the page, 4-aligned: callers below).
fn put_u32(info: &BootInfo, offset: usize, v: u32) {
    let word = info.results as usize + offset;
    // SAFETY: a 4-aligned word of the results page, mapped writable for this program for the
    // life of the space; the kernel reads it only through atomics.
    unsafe { AtomicU32::from_ptr(word as *mut u32) }.store(v, Ordering::Release);
}

/// What the kernel needs from the workload before time zero: the run's length, the thread
/// count and the threads' names (for the trace).
fn report(info: &BootInfo, duration_ns: u64, wl: &Workload) {
    put_u32(info, R_DURATION, duration_ns as u32);
    put_u32(info, R_DURATION + 4, (duration_ns >> 32) as u32);
    put_u32(info, R_THREADS, wl.tasks.len() as u32);
    for (i, t) in wl.tasks.iter().enumerate() {
        let mut b = [0u8; NAME_BYTES];
        let n = comm(&t.name);
        b[..n.len()].copy_from_slice(n.as_bytes());
        for (k, w) in b.chunks(4).enumerate() {
            put_u32(
                info,
                R_NAMES + NAME_BYTES * i + 4 * k,
                u32::from_le_bytes([w[0], w[1], w[2], w[3]]),
            );
        }
    }
}

fn exec() -> &'static Exec {
    let p = EXEC.load(Ordering::Acquire);
    // SAFETY: the main thread stores a leaked, never-freed `Exec` before it starts any thread.
    unsafe { &*p }
}

/// `TASK_COMM_LEN - 1` bytes at a character boundary, as the kernel and the simulator cut.
fn comm(s: &str) -> &str {
    let mut n = s.len().min(15);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    &s[..n]
}

/// A workload thread: step the interpreter, do what it says, until it says exit.
extern "C" fn thread_main(i: u64) -> ! {
    let exec = exec();
    let i = i as usize;
    let slot = &exec.slots[i];
    let t0 = exec.t0.load(Ordering::Acquire);
    // The clamps in force (`spawn` gave the thread its first phase's).
    let mut uclamp = slot.prog.lock().thread.params().uclamp.unwrap_or((0, 1024));
    let mut text = MarkerText::new();
    loop {
        let now = sys::clock().saturating_sub(t0);
        let action = {
            let mut prog = slot.prog.lock();
            let mut timers = exec.timers.lock();
            prog.thread.step(&exec.wl, &mut timers, now)
        };
        match action {
            Action::Start => {
                sys::set_name(comm(&exec.wl.tasks[i].name));
            }
            Action::Marker(m) => marker(m, &mut text),
            Action::Phase(p) => apply_phase(exec, p, &mut uclamp),
            Action::Run { work_ns } => {
                if work_ns > 0 {
                    work(work_ns);
                }
            }
            Action::Runtime { ns } => {
                let until = sys::clock().saturating_add(ns);
                while sys::run_until(0, until) < until {}
            }
            Action::Sleep { ns } => {
                if ns > 0 {
                    sys::sleep_until(sys::clock().saturating_add(ns));
                }
            }
            Action::Timer(t) => {
                if let Some(at) = t.wait_until_ns {
                    sys::sleep_until(t0.saturating_add(at));
                }
            }
            Action::Suspend => {
                let seen = {
                    let mut g = slot.prog.lock();
                    g.suspended = true;
                    slot.wake.load(Ordering::Acquire)
                };
                while slot.wake.load(Ordering::Acquire) == seen {
                    sys::futex_wait(&slot.wake, seen);
                }
            }
            Action::Resume(targets) => {
                for &t in targets {
                    let Some(target) = exec.slots.get(t) else {
                        continue;
                    };
                    let mut g = target.prog.lock();
                    if g.suspended {
                        g.suspended = false;
                        target.wake.fetch_add(1, Ordering::Release);
                        drop(g);
                        sys::futex_wake(&target.wake, 1);
                    } else {
                        g.thread.post_resume();
                    }
                }
            }
            Action::Yield => sys::sched_yield(),
            Action::Exit => sys::exit(0),
        }
    }
}

/// `work_ns` of work: running until the work clock has advanced by it, through `run_until`,
/// which keeps the thread running (runnable and on its CPU, so ticks, preemption and placement
/// act on it as on the in-kernel executor's thread) and waits in the kernel's `wfi` for the
/// instant the work completes or for an interrupt before it, exactly as the in-kernel `run`
/// does: under `-icount` a thread spinning at EL0 would advance the guest clock every vCPU
/// shares and slow the other CPUs' kernel code down.
fn work(work_ns: u64) {
    let target = sys::work_clock().saturating_add(work_ns);
    while sys::run_until(1, target) < target {}
}

/// rt-app's marker, in `Marker`'s `Display` text (`Marker::write_text`, the same bytes
/// without `core::fmt`), which the kernel records as the in-kernel executor's marker.
fn marker(m: Marker, text: &mut MarkerText) {
    m.write_text(text);
    sys::trace_marker(text.as_bytes());
}

/// A phase's parameters: nice, and the clamps when they differ from those in force
/// (`uclamp`), then CPUs (the thread moves if it must) — what the in-kernel executor's
/// `apply_phase` does.
fn apply_phase(exec: &Exec, p: Params, uclamp: &mut (u32, u32)) {
    let change = p.uclamp.filter(|&c| c != *uclamp);
    if sys::set_sched(p.nice, change) == 0 {
        if let Some(c) = change {
            *uclamp = c;
        }
    }
    let mask = p.allowed & exec.online;
    if mask != 0 {
        sys::set_affinity(mask);
    }
}
