//! `bench=switch`: the scheduler's cost in guest time, run by `cargo xtask bench switch` under
//! `-icount shift=0`, where one guest instruction takes one guest nanosecond, so every time
//! printed is a count of instructions executed (by all CPUs together: QEMU's icount clock
//! advances with the instructions of whichever vCPU runs, and an idle CPU in `wfi` executes
//! none).
//!
//! Lines: `bench switch <name> n=<ops> total_ns=<ns> per_op_ns=<ns>` for
//! - `yield_same_cpu`: two threads on one CPU yielding to each other (a round trip is two
//!   switches);
//! - `wait_wake_same_cpu`, `wait_wake_cross_cpu`: two threads completing each other's
//!   completion (a round trip is two wake-ups and two switches; across CPUs each wake-up is a
//!   remote enqueue and a reschedule IPI);
//! - `tick`: the scheduler tick's work (`sched::tick`, cpufreq included) on a CPU running a
//!   thread, per tick (the vector entry and exit around it are not counted);
//! - `wakeup_6cpu`: one `try_to_wake_up` of an unpinned thread (placement over every CPU's
//!   view, remote enqueue), measured in the waker;
//! - `el0_null_syscall`: an EL0 task's `gettid` round trip (SVC, the kernel's entry and exit,
//!   `eret`), from the task's spawn to its join over all its calls;
//! - `el0_wait_wake_same_cpu`: two EL0 tasks in their own address spaces on one CPU waking
//!   each other with `wake` / `wait` (docs/syscalls.md): a round trip is two system calls
//!   each, two wake-ups and two switches with a TTBR1 change each.
//! - `el0_futex_same_cpu`: two EL0 threads of one address space on one CPU passing a turn
//!   through a shared word with `futex_wait` / `futex_wake` (Linux's futex protocol: store,
//!   wake; load, wait while unchanged): a round trip is two stores and wakes, two waits (plus
//!   any that find the word changed already), two wake-ups and two switches with no TTBR1
//!   change (one space).

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use asym_sched::types::{CpuId, CpuMask};

use crate::task::{self, ExitStatus, ThreadId, ThreadParams};
use crate::user::{self, el0_program};
use crate::wait::Completion;
use crate::{sched, smp};

const ROUND_TRIPS: u64 = 20_000;

// EL0 programs. `null`: x0 = calls: `gettid` that many times, exit(0). `ping`: x0 = calls << 32
// | the partner's id: wake it, wait for its answer, that many times. `pong`: x0 = calls: wait,
// wake whoever woke it, that many times.
core::arch::global_asm!(
    r#"
    .section .rodata.el0bench, "a"
    .balign 4
    .global __el0_null_start
__el0_null_start:
    mov     x19, x0
    cbz     x19, 2f
1:  mov     x8, #10
    svc     #0
    subs    x19, x19, #1
    b.ne    1b
2:  mov     x8, #0
    mov     x0, #0
    svc     #0
    .global __el0_null_end
__el0_null_end:

    .global __el0_ping_start
__el0_ping_start:
    lsr     x19, x0, #32
    mov     w20, w0
1:  mov     x8, #9
    mov     x0, x20
    svc     #0
    mov     x8, #8
    mov     x0, #-1
    svc     #0
    subs    x19, x19, #1
    b.ne    1b
    mov     x8, #0
    mov     x0, #0
    svc     #0
    .global __el0_ping_end
__el0_ping_end:

    .global __el0_pong_start
__el0_pong_start:
    mov     x19, x0
1:  mov     x8, #8
    mov     x0, #-1
    svc     #0
    mov     x8, #9
    svc     #0
    subs    x19, x19, #1
    b.ne    1b
    mov     x8, #0
    mov     x0, #0
    svc     #0
    .global __el0_pong_end
__el0_pong_end:
    .text
"#
);

// `futex`: x0 = round trips. Creates a partner thread in its space (clear-tid word at DATA
// + 0x300), then for each round trip stores the next odd value to the word P (DATA + 0x200)
// and futex-wakes it, and futex-waits until P holds the even one after it; the partner
// answers each odd value with the next even one. Joins the partner through its clear-tid
// word; exit(0) (exit(1): the partner could not be created).
core::arch::global_asm!(
    r#"
    .section .rodata.el0bench, "a"
    .balign 4
    .global __el0_futex_pp_start
__el0_futex_pp_start:
    mov     x19, x0
    ldr     x20, 7f
    add     x23, x20, #0x300
    mov     w9, #1
    str     w9, [x23]
    adr     x0, 5f
    mov     x1, sp
    sub     x1, x1, #1024
    mov     x2, x19
    mov     x3, x23
    mov     x8, #11
    svc     #0
    cmp     x0, #0
    b.le    9f
    add     x20, x20, #0x200
    mov     w22, #1
1:  stlr    w22, [x20]
    mov     x0, x20
    mov     x1, #1
    mov     x8, #13
    svc     #0
    add     w25, w22, #1
2:  ldar    w9, [x20]
    cmp     w9, w25
    b.eq    3f
    mov     x0, x20
    mov     w1, w9
    mov     x2, #-1
    mov     x8, #12
    svc     #0
    b       2b
3:  add     w22, w22, #2
    subs    x19, x19, #1
    b.ne    1b
4:  ldar    w9, [x23]
    cbz     w9, 6f
    mov     x0, x23
    mov     w1, w9
    mov     x2, #-1
    mov     x8, #12
    svc     #0
    b       4b
6:  mov     x0, #0
    mov     x8, #0
    svc     #0
9:  mov     x0, #1
    mov     x8, #0
    svc     #0
    .balign 8
7:  .quad   {data_va}
5:  ldr     x20, 7b
    add     x20, x20, #0x200
    mov     w22, #1
    mov     x19, x0
11: ldar    w9, [x20]
    cmp     w9, w22
    b.eq    12f
    mov     x0, x20
    mov     w1, w9
    mov     x2, #-1
    mov     x8, #12
    svc     #0
    b       11b
12: add     w9, w22, #1
    stlr    w9, [x20]
    mov     x0, x20
    mov     x1, #1
    mov     x8, #13
    svc     #0
    add     w22, w22, #2
    subs    x19, x19, #1
    b.ne    11b
    mov     x0, #0
    mov     x8, #0
    svc     #0
    .global __el0_futex_pp_end
__el0_futex_pp_end:
    .text
"#,
    data_va = const user::DATA_VA,
);

el0_program!(null_program, __el0_null_start, __el0_null_end);
el0_program!(ping_program, __el0_ping_start, __el0_ping_end);
el0_program!(pong_program, __el0_pong_start, __el0_pong_end);
el0_program!(futex_program, __el0_futex_pp_start, __el0_futex_pp_end);

static A: Completion = Completion::new();
static B: Completion = Completion::new();
static N: AtomicU64 = AtomicU64::new(0);
static STOP: AtomicBool = AtomicBool::new(false);

fn spawn_pinned(name: &str, cpu: Option<CpuId>, f: fn(usize)) -> Option<ThreadId> {
    let params = ThreadParams {
        affinity: cpu.map_or(CpuMask(u64::MAX), CpuMask::of),
        ..ThreadParams::default()
    };
    match task::spawn(name, params, f, 0) {
        Ok(id) => Some(id),
        Err(e) => {
            crate::println!("bench switch: {}", e);
            None
        }
    }
}

fn spawn_el0(name: &str, cpu: CpuId, text: &[u8], arg: u64) -> Option<ThreadId> {
    let params = ThreadParams {
        affinity: CpuMask::of(cpu),
        ..ThreadParams::default()
    };
    match user::spawn(name, params, text, arg) {
        Ok(id) => Some(id),
        Err(e) => {
            crate::println!("bench switch: {}", e);
            None
        }
    }
}

/// Joins EL0 task `id`; whether it exited 0.
fn join_el0(id: ThreadId) -> bool {
    matches!(task::join(id), Ok(ExitStatus::Exited(0)))
}

/// Guest ns of `n` futex round trips between two threads of one space on `cpu` (the partner
/// inherits the first thread's affinity).
fn el0_futex_row(cpu: CpuId, n: u64) -> Option<u64> {
    let t0 = sched::now().0;
    let id = spawn_el0("bench-el0-futex", cpu, futex_program(), n)?;
    let ok = join_el0(id);
    let t1 = sched::now().0;
    // The partner is reaped just after it zeroes its clear-tid word: let it go before the
    // next row measures anything.
    sched::sleep_ns(1_000_000);
    ok.then_some(t1 - t0)
}

/// The two EL0 rows (module docs): guest ns of `n` null calls, and of `n` round trips.
fn el0_rows(cpu: CpuId, n: u64) -> Option<(u64, u64)> {
    let t0 = sched::now().0;
    let id = spawn_el0("bench-el0-null", cpu, null_program(), n)?;
    let null_ok = join_el0(id);
    let t1 = sched::now().0;
    let pong = spawn_el0("bench-el0-pong", cpu, pong_program(), n)?;
    let arg = (n << 32) | u64::from(pong.task_id().0);
    let ping = spawn_el0("bench-el0-ping", cpu, ping_program(), arg)?;
    let ok = join_el0(ping) & join_el0(pong) & null_ok;
    let t2 = sched::now().0;
    ok.then_some((t1 - t0, t2 - t1))
}

fn report(name: &str, n: u64, total_ns: u64) {
    crate::println!(
        "bench switch {} n={} total_ns={} per_op_ns={}",
        name,
        n,
        total_ns,
        total_ns / n.max(1)
    );
}

fn yielder(_: usize) {
    for _ in 0..N.load(Ordering::Relaxed) {
        sched::yield_now();
    }
}

fn pinger(_: usize) {
    for _ in 0..N.load(Ordering::Relaxed) {
        A.complete();
        B.wait();
    }
}

fn ponger(_: usize) {
    for _ in 0..N.load(Ordering::Relaxed) {
        A.wait();
        B.complete();
    }
}

fn spinner(_: usize) {
    while !STOP.load(Ordering::Acquire) {
        core::hint::spin_loop();
    }
}

/// Runs `a` and `b` (pinned as given) to completion; returns the guest ns from the first
/// spawn to the second join.
fn pair(fa: fn(usize), ca: Option<CpuId>, fb: fn(usize), cb: Option<CpuId>) -> Option<u64> {
    let t0 = sched::now().0;
    let b = spawn_pinned("bench-b", cb, fb)?;
    let a = spawn_pinned("bench-a", ca, fa)?;
    task::join(a).ok()?;
    task::join(b).ok()?;
    Some(sched::now().0 - t0)
}

/// Runs every benchmark and prints its line; false if one could not run.
pub fn run_switch() -> bool {
    let me = crate::percpu::current_cpu();
    let others: heapless::Vec<CpuId, 8> = smp::online_cpus().filter(|&c| c != me).collect();
    let (Some(&x), Some(&y)) = (others.last(), others.get(others.len().wrapping_sub(2))) else {
        crate::println!("bench switch: needs 3 online CPUs");
        return false;
    };
    crate::println!(
        "bench switch: {} CPUs, HZ={}, lock-order checker {}",
        smp::online_count(),
        crate::timer::hz(),
        if crate::sync::lockdep_enabled() {
            "on"
        } else {
            "off"
        }
    );
    // Let the boot's blocked signals decay and the idle CPUs stop their ticks.
    sched::sleep_ns(500_000_000);
    let mut ok = true;

    N.store(ROUND_TRIPS, Ordering::Relaxed);
    match pair(yielder, Some(x), yielder, Some(x)) {
        Some(t) => report("yield_same_cpu", ROUND_TRIPS, t),
        None => ok = false,
    }
    match pair(pinger, Some(x), ponger, Some(x)) {
        Some(t) => report("wait_wake_same_cpu", ROUND_TRIPS, t),
        None => ok = false,
    }
    match pair(pinger, Some(x), ponger, Some(y)) {
        Some(t) => report("wait_wake_cross_cpu", ROUND_TRIPS, t),
        None => ok = false,
    }

    // The tick on a CPU running one thread, over 1 s.
    STOP.store(false, Ordering::Relaxed);
    let (n0, ns0) = sched::tick_cost(x);
    match spawn_pinned("bench-spin", Some(x), spinner) {
        Some(id) => {
            sched::sleep_ns(1_000_000_000);
            STOP.store(true, Ordering::Release);
            let _ = task::join(id);
            let (n1, ns1) = sched::tick_cost(x);
            report("tick", n1 - n0, ns1 - ns0);
        }
        None => ok = false,
    }

    match el0_rows(x, ROUND_TRIPS) {
        Some((null, pp)) => {
            report("el0_null_syscall", ROUND_TRIPS, null);
            report("el0_wait_wake_same_cpu", ROUND_TRIPS, pp);
        }
        None => {
            crate::println!("bench switch: an EL0 benchmark task failed");
            ok = false;
        }
    }
    match el0_futex_row(x, ROUND_TRIPS) {
        Some(t) => report("el0_futex_same_cpu", ROUND_TRIPS, t),
        None => {
            crate::println!("bench switch: the EL0 futex benchmark failed");
            ok = false;
        }
    }

    // try_to_wake_up of a thread that may go to any CPU, from this one.
    sched::ttwu_cost_reset();
    N.store(ROUND_TRIPS / 4, Ordering::Relaxed);
    match pair(pinger, Some(me), ponger, None) {
        Some(_) => {
            let (n, ns) = sched::ttwu_cost(me);
            report("wakeup_6cpu", n, ns);
        }
        None => ok = false,
    }
    ok
}
