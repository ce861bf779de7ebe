//! `bench=switch`: the scheduler's cost in guest time, run by `cargo xtask bench switch` under
//! `-icount shift=0`, where one guest instruction takes one guest nanosecond, so every time
//! printed is a count of instructions executed (by all CPUs together: QEMU's icount clock
//! advances with the instructions of whichever vCPU runs, and an idle CPU in `wfi` executes
//! none).
//!
//! Lines: `bench switch <name> n=<ops> total_ns=<ns> per_op_ns=<ns>` for
//! - `yield_same_cpu`: two threads on one CPU yielding to each other (a round trip is a yield
//!   of each), timed from the moment both are on the CPU; EEVDF lets a yield return to the
//!   yielder when its partner is not eligible, so `switches=` says how many round trips
//!   switched;
//! - `wait_wake_same_cpu`, `wait_wake_cross_cpu`: two threads completing each other's
//!   completion (a round trip is two wake-ups and two switches; across CPUs each wake-up is a
//!   remote enqueue and a reschedule IPI);
//! - `tick`: the scheduler tick's work (`sched::tick`, cpufreq included) on a CPU running a
//!   thread, per tick (the vector entry and exit around it are not counted);
//! - `wakeup_6cpu`: one `try_to_wake_up` of an unpinned thread (placement over every CPU's
//!   view, remote enqueue), measured in the waker; on juno-r2 every such placement goes
//!   through `find_energy_efficient_cpu` (`bench=sched-costs` counts them by path);
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
//!
//! `bench=switch-profile` ([`run_switch_profile`], `cargo xtask bench switch --profile`): the
//! round-trip rows again with [`PROFILE_ROUND_TRIPS`] each, their window (the pinger's loop,
//! the second yielder's loop) between two calls of [`asym_bench_profile_mark`], whose address
//! xtask finds in the ELF: QEMU logs every instruction (`-singlestep -d exec,nochain`) and
//! xtask counts those of all CPUs between the marks by function. Each row's line `bench
//! profile <name> n=<ops>` comes before its marks, in the order of the windows.
//!
//! `bench=sched-costs` ([`run_sched_costs`], `cargo xtask bench sched-costs`): the scheduler's
//! costs the asym issue 12 asks for, as `bench costs <name> key=value ...` lines, with the
//! run-queue lock hold timing (`sync::rq_hold_timing`), the wake-up placement timing
//! (`sched::placement_timing`) and the balance softirq recording (`softirq::cost_recording`)
//! on. A separate mode, not part of `bench=switch`: the hold timing costs instructions on every
//! lock, so the switch numbers stay comparable with their history. Phases, in order:
//! - `rt_*`: the round trips of `bench=switch` (fewer), for the lock hold times (the hold
//!   timing is on in these and in the `rate_cyclic_*` phases only: it costs each run-queue
//!   lock ~50 instructions, which the other phases' numbers should not include);
//! - `placement_*` and `wakeup_6cpu`: the 6-CPU wake-up of `bench=switch` (a thread pinned to
//!   this CPU waking an unpinned one), every placement that chose among CPUs timed and sorted
//!   by path (`sched::PlacementPath`);
//! - `tick`, `softirq_tick_*`, `irq_share`: one thread spinning on a CPU for about 1 s, the
//!   others idle: the scheduler tick there (as `bench=switch` measures it), its balance
//!   softirqs, and what all interrupts took from the thread end to end (`share_thread`);
//! - `softirq_busy_*`, `rate_busy`: [`BUSY_THREADS`] unpinned threads busy for 2 s (each
//!   waits in `wfi` while it stands for running work, `sched::busy_until`, so no vCPU's
//!   instructions slow another's down in guest time): every balance softirq recorded, and the
//!   `SCHED_SOFTIRQ` raises per second of the CPUs that ran a thread;
//! - `rate_cyclic_aggr`, `rate_cyclic_noaggr`: [`CYCLIC_THREADS`] unpinned threads each busy
//!   200 us then asleep 800 us for 1 s, with `AGGRESSIVE_NEXT_BALANCE` as booted and off;
//! - `rq_hold`, `rq_hold_bucket`: the hold-time histogram of the `rt_*` and `rate_cyclic_*`
//!   phases.
//!
//! Guest time under `-icount shift=0` is the instructions of all vCPUs together: a sample
//! whose CPU was switched out by QEMU's round-robin in the middle counts the others'
//! instructions meanwhile (the spinning thread's, in the tick phase); medians are robust to
//! that, maxima are not.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use asym_sched::features::Feature;
use asym_sched::types::{CpuId, CpuMask, Nanos};

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
/// The yielders' start gate: the first to start waits on it for its partner. A yield with no
/// one else on the CPU switches to no one, and how many of those the first thread made while
/// the second was still being spawned varied from run to run (from a few to all 20,000: the
/// row read 1,571 to 3,286 instructions for one kernel).
static YIELD_GATE: Completion = Completion::new();
/// Yielders that have started ([`yielder`]); reset before each pair.
static YIELD_READY: AtomicU32 = AtomicU32::new(0);
/// When the second yielder started: the yield row's window opens there.
static YIELD_T0: AtomicU64 = AtomicU64::new(0);
static STOP: AtomicBool = AtomicBool::new(false);
/// `bench=switch-profile`: the round-trip threads call [`asym_bench_profile_mark`] around
/// their loops.
static PROFILING: AtomicBool = AtomicBool::new(false);
/// Yielders that have finished their loop ([`yielder`]), for the profile's end mark.
static YIELD_DONE: AtomicU32 = AtomicU32::new(0);
/// Profile marks made: the atomic add is the mark's side effect, so the call is never
/// optimised away.
static PROFILE_MARKS: AtomicU32 = AtomicU32::new(0);
/// Round trips per row of `bench=switch-profile`: enough to average out the first round
/// trip's cold paths, few enough that QEMU's instruction log stays short.
const PROFILE_ROUND_TRIPS: u64 = 500;

/// Opens or closes a profile window: xtask finds this function's address in the kernel ELF
/// (by the name in its mangled symbol) and splits QEMU's instruction log at each time it runs (module docs).
#[inline(never)]
pub fn asym_bench_profile_mark() {
    PROFILE_MARKS.fetch_add(1, Ordering::Relaxed);
}

fn profile_mark() {
    if PROFILING.load(Ordering::Relaxed) {
        asym_bench_profile_mark();
    }
}

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

/// A round-trip line with the context switches its CPUs made in the window: a yield that
/// finds its partner not eligible (EEVDF) or not yet spawned switches to no one and is much
/// cheaper, so the instructions per round trip only compare at the same switches per round
/// trip (two for every row here when each operation switches).
fn report_round_trips(name: &str, n: u64, total_ns: u64, switches: u64) {
    crate::println!(
        "bench switch {} n={} total_ns={} per_op_ns={} switches={}",
        name,
        n,
        total_ns,
        total_ns / n.max(1),
        switches
    );
}

/// Context switches made so far by `cpus` together (`rq->nr_switches`).
fn nr_switches(cpus: &[CpuId]) -> u64 {
    cpus.iter()
        .filter_map(|&c| sched::rq_lock(c).ok().map(|g| g.nr_switches()))
        .sum()
}

fn yielder(_: usize) {
    if YIELD_READY.fetch_add(1, Ordering::AcqRel) == 0 {
        YIELD_GATE.wait();
    } else {
        YIELD_T0.store(sched::now().0, Ordering::Relaxed);
        profile_mark();
        YIELD_GATE.complete();
    }
    for _ in 0..N.load(Ordering::Relaxed) {
        sched::yield_now();
    }
    if YIELD_DONE.fetch_add(1, Ordering::AcqRel) == 1 {
        profile_mark();
    }
}

/// Two yielders on `cpu`: guest ns from the moment both are there to the second join.
fn yield_pair(cpu: CpuId) -> Option<u64> {
    YIELD_READY.store(0, Ordering::Relaxed);
    YIELD_DONE.store(0, Ordering::Relaxed);
    pair(yielder, Some(cpu), yielder, Some(cpu))?;
    Some(
        sched::now()
            .0
            .saturating_sub(YIELD_T0.load(Ordering::Relaxed)),
    )
}

fn pinger(_: usize) {
    profile_mark();
    for _ in 0..N.load(Ordering::Relaxed) {
        A.complete();
        B.wait();
    }
    profile_mark();
}

fn ponger(_: usize) {
    for _ in 0..N.load(Ordering::Relaxed) {
        A.wait();
        B.complete();
    }
}

/// Sleeps 50 us [`N`] times on its CPU, otherwise idle: one round trip is the block, the
/// switch to the idle thread and its tick-stop decision, the one-shot timer's interrupt, the
/// wake-up and the switch back (the path of selftest `threads_sleep_wakes_within_100us`).
fn sleeper(_: usize) {
    profile_mark();
    for _ in 0..N.load(Ordering::Relaxed) {
        sched::sleep_ns(50_000);
    }
    profile_mark();
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
    for (name, cb) in [
        ("yield_same_cpu", x),
        ("wait_wake_same_cpu", x),
        ("wait_wake_cross_cpu", y),
    ] {
        let s0 = nr_switches(&[x, y]);
        let t = if name == "yield_same_cpu" {
            yield_pair(x)
        } else {
            pair(pinger, Some(x), ponger, Some(cb))
        };
        match t {
            Some(t) => report_round_trips(name, ROUND_TRIPS, t, nr_switches(&[x, y]) - s0),
            None => ok = false,
        }
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

/// `bench=switch-profile` (module docs): the round trips of [`run_switch`] between profile
/// marks; false if one could not run.
pub fn run_switch_profile() -> bool {
    let me = crate::percpu::current_cpu();
    let others: heapless::Vec<CpuId, 8> = smp::online_cpus().filter(|&c| c != me).collect();
    let (Some(&x), Some(&y)) = (others.last(), others.get(others.len().wrapping_sub(2))) else {
        crate::println!("bench profile: needs 3 online CPUs");
        return false;
    };
    // As in `run_switch`: the same state of signals and ticks when the rows start.
    sched::sleep_ns(500_000_000);
    N.store(PROFILE_ROUND_TRIPS, Ordering::Relaxed);
    PROFILING.store(true, Ordering::Relaxed);
    let mut ok = true;
    for (name, cb) in [
        ("yield_same_cpu", x),
        ("wait_wake_same_cpu", x),
        ("wait_wake_cross_cpu", y),
        ("timer_sleep_wake", x),
    ] {
        crate::println!("bench profile {} n={}", name, PROFILE_ROUND_TRIPS);
        let t = match name {
            "yield_same_cpu" => yield_pair(x),
            "timer_sleep_wake" => spawn_pinned("bench-sleeper", Some(x), sleeper)
                .and_then(|t| task::join(t).ok())
                .map(|_| 0),
            _ => pair(pinger, Some(x), ponger, Some(cb)),
        };
        ok &= t.is_some();
    }
    PROFILING.store(false, Ordering::Relaxed);
    crate::println!(
        "bench profile done marks={} ok={}",
        PROFILE_MARKS.load(Ordering::Relaxed),
        u8::from(ok)
    );
    ok
}

// ---- bench=sched-costs ---------------------------------------------------------------------

/// Busy threads of the balancing phase (juno-r2: 6 CPUs, so some CPUs idle, some busy).
const BUSY_THREADS: usize = 4;
/// Threads of the wake/sleep phases.
const CYCLIC_THREADS: usize = 6;
const COST_ROUND_TRIPS: u64 = 5_000;

/// `[calibration iterations, their guest ns, iterations, their guest ns]` of [`share_thread`].
static SHARE: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];
const CAL_ITERATIONS: u64 = 100_000;
const CAL_RUNS: u32 = 32;

/// `n` iterations of a loop whose instructions do not depend on anything but `n`.
#[inline(never)]
fn spin_iterations(n: u64) {
    let mut i = 0u64;
    while i < n {
        i = core::hint::black_box(i) + 1;
    }
}

/// What the interrupts take from a thread spinning alone on its CPU: calibration runs of the
/// loop with IRQs masked, the fastest kept (its guest ns are the loop's own instructions: the
/// other vCPUs' ticks, which count in guest time too, miss some of the short runs), then
/// about 1 s of the same loop with IRQs on; the difference is everything else the vCPUs
/// executed meanwhile: vector entry and exit, the GIC, the timer, the tick, its softirqs, and
/// whatever ran on the idle CPUs (the NOHZ kicks the tick sends, their own ticks).
fn share_thread(_: usize) {
    let mut cal_ns = u64::MAX;
    for _ in 0..CAL_RUNS {
        let irq = crate::arch::irq_save_disable();
        let t0 = sched::now().0;
        spin_iterations(CAL_ITERATIONS);
        cal_ns = cal_ns.min(sched::now().0 - t0);
        crate::arch::irq_restore(irq);
    }
    let n = (u128::from(CAL_ITERATIONS) * 1_000_000_000 / u128::from(cal_ns.max(1))) as u64;
    let t1 = sched::now().0;
    spin_iterations(n);
    let run_ns = sched::now().0 - t1;
    for (a, v) in SHARE.iter().zip([CAL_ITERATIONS, cal_ns, n, run_ns]) {
        a.store(v, Ordering::Relaxed);
    }
}

fn busy_thread(deadline: usize) {
    sched::busy_until(Nanos(deadline as u64));
}

fn cyclic_thread(deadline: usize) {
    while sched::now().0 < deadline as u64 {
        let t = sched::now().0;
        sched::busy_until(Nanos(t + 200_000));
        sched::sleep_ns(800_000);
    }
}

/// Spawns `n` unpinned threads running `f(deadline)`, waits until then and joins them; `mid`
/// runs halfway. False if one could not be spawned.
fn run_threads(name: &str, n: usize, f: fn(usize), ns: u64, mid: &mut dyn FnMut()) -> bool {
    let deadline = sched::now().0 + ns;
    let mut ids: heapless::Vec<ThreadId, 8> = heapless::Vec::new();
    let mut ok = true;
    for _ in 0..n {
        match task::spawn(name, ThreadParams::default(), f, deadline as usize) {
            Ok(id) => {
                let _ = ids.push(id);
            }
            Err(e) => {
                crate::println!("bench costs: {}", e);
                ok = false;
            }
        }
    }
    sched::sleep_ns(ns / 2);
    mid();
    sched::sleep_until(Nanos(deadline));
    for id in ids {
        ok &= task::join(id).is_ok();
    }
    ok
}

fn raised_all() -> heapless::Vec<(CpuId, u64), { crate::dt::MAX_CPUS }> {
    smp::online_cpus()
        .map(|c| (c, crate::softirq::counts(c).0))
        .collect()
}

/// `SCHED_SOFTIRQ` raises per second between `before` and now over `ms`: `(mean over
/// the CPUs in `cpus`, max over them, how many)`.
fn raise_rate(before: &[(CpuId, u64)], cpus: CpuMask, ms: u64) -> (u64, u64, u64) {
    let mut sum = 0;
    let mut max = 0;
    let mut n = 0;
    for &(c, b) in before {
        if !cpus.contains(c) {
            continue;
        }
        let a = crate::softirq::counts(c).0;
        let per_s = (a - b) * 1000 / ms.max(1);
        sum += per_s;
        max = max.max(per_s);
        n += 1;
    }
    (sum / n.max(1), max, n)
}

fn percentile(sorted: &[u32], per_mille: usize) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    sorted[((sorted.len() - 1) * per_mille).div_ceil(1000)]
}

/// Prints the recorded balance softirqs of every CPU since the last reset, by class:
/// `<phase>_busy` (its own periodic balance, a thread running), `<phase>_idle` (its own
/// periodic balance, idle) and `<phase>_other` (a NOHZ kick's balance of other CPUs, or none).
fn report_softirqs(phase: &str) {
    let mut all = Vec::new();
    let mut dropped = 0;
    for c in smp::online_cpus() {
        let before = all.len() as u64;
        let n = crate::softirq::cost_samples(c, &mut all);
        dropped += n - (all.len() as u64 - before);
    }
    type Class = fn(&crate::softirq::CostSample) -> bool;
    let classes: [(&str, Class); 3] = [
        ("busy", |s| s.periodic && s.busy),
        ("idle", |s| s.periodic && !s.busy),
        ("other", |s| !s.periodic),
    ];
    for (class, f) in classes {
        let picked: Vec<_> = all.iter().filter(|s| f(s)).collect();
        let mut ns: Vec<u32> = picked.iter().map(|s| s.ns).collect();
        ns.sort_unstable();
        let sum: u64 = ns.iter().map(|&v| u64::from(v)).sum();
        let mut lb = [0u64; 4];
        for s in &picked {
            lb[usize::from(s.lb_runs).min(3)] += 1;
        }
        crate::println!(
            "bench costs softirq_{}_{} n={} mean_ns={} median_ns={} p99_ns={} max_ns={} \
             lb_runs_0={} lb_runs_1={} lb_runs_2={} lb_runs_3plus={} dropped={}",
            phase,
            class,
            ns.len(),
            sum / (ns.len() as u64).max(1),
            percentile(&ns, 500),
            percentile(&ns, 990),
            ns.last().copied().unwrap_or(0),
            lb[0],
            lb[1],
            lb[2],
            lb[3],
            dropped
        );
    }
}

fn costs_line(name: &str, n: u64, total_ns: u64) {
    crate::println!(
        "bench costs {} n={} total_ns={} per_op_ns={}",
        name,
        n,
        total_ns,
        total_ns / n.max(1)
    );
}

/// Runs the `bench=sched-costs` phases (module docs) and prints their lines; false if one could
/// not run.
pub fn run_sched_costs() -> bool {
    use crate::sched::PlacementPath;
    let me = crate::percpu::current_cpu();
    let others: heapless::Vec<CpuId, 8> = smp::online_cpus().filter(|&c| c != me).collect();
    let (Some(&x), Some(&y)) = (others.last(), others.get(others.len().wrapping_sub(2))) else {
        crate::println!("bench costs: needs 3 online CPUs");
        return false;
    };
    let feats = sched::features();
    let domains = sched::balance::domain_state(x).map_or(0, |d| d.len());
    crate::println!(
        "bench costs header cpus={} hz={} lockdep={} sched_balance={} eas={} \
         aggressive_next_balance={} domains={}",
        smp::online_count(),
        crate::timer::hz(),
        u8::from(crate::sync::lockdep_enabled()),
        u8::from(sched::balance::enabled()),
        u8::from(sched::eas_active()),
        u8::from(feats.enabled(Feature::AGGRESSIVE_NEXT_BALANCE)),
        domains
    );
    sched::sleep_ns(500_000_000);
    let mut ok = true;
    crate::sync::rq_hold_reset();
    crate::sync::rq_hold_timing(true);

    // Round trips: the lock traffic of switches and wake-ups.
    N.store(COST_ROUND_TRIPS, Ordering::Relaxed);
    match yield_pair(x) {
        Some(t) => costs_line("rt_yield_same_cpu", COST_ROUND_TRIPS, t),
        None => ok = false,
    }
    for (name, fa, ca, fb, cb) in [
        (
            "rt_wait_wake_same_cpu",
            pinger as fn(usize),
            x,
            ponger as fn(usize),
            x,
        ),
        ("rt_wait_wake_cross_cpu", pinger, x, ponger, y),
    ] {
        match pair(fa, Some(ca), fb, Some(cb)) {
            Some(t) => costs_line(name, COST_ROUND_TRIPS, t),
            None => ok = false,
        }
    }

    // The phases timed from here on run without the hold timing (it costs every run-queue
    // lock ~50 instructions), until the wake/sleep phases.
    crate::sync::rq_hold_timing(false);

    // The 6-CPU wake-up of `bench=switch`, its placements timed by path.
    sched::placement_cost_reset();
    sched::ttwu_cost_reset();
    sched::placement_timing(true);
    match pair(pinger, Some(me), ponger, None) {
        Some(_) => {
            let (n, ns) = sched::ttwu_cost(me);
            costs_line("wakeup_6cpu", n, ns);
        }
        None => ok = false,
    }
    sched::placement_timing(false);
    for (name, path) in [
        ("placement_eas", PlacementPath::Eas),
        ("placement_eas_no_util", PlacementPath::EasNoUtil),
        ("placement_capacity", PlacementPath::Capacity),
    ] {
        let (n, place, whole) = sched::placement_cost(path);
        crate::println!(
            "bench costs {} n={} place_ns={} wakeup_ns={} per_place_ns={} per_wakeup_ns={}",
            name,
            n,
            place,
            whole,
            place / n.max(1),
            whole / n.max(1)
        );
    }
    crate::println!(
        "bench costs rd overutilized={}",
        u8::from(sched::overutilized())
    );

    // The tick of a CPU running one thread (the others idle) and its softirqs; the thread
    // counts what the interrupts took from it.
    crate::softirq::cost_reset();
    crate::softirq::cost_recording(true);
    let (n0, ns0) = sched::tick_cost(x);
    let t0 = crate::timer::ticks(x);
    let r0 = raised_all();
    match spawn_pinned("bench-spin", Some(x), share_thread) {
        Some(id) => {
            let _ = task::join(id);
            let (n1, ns1) = sched::tick_cost(x);
            costs_line("tick", n1 - n0, ns1 - ns0);
            let (cal, cal_ns, run, run_ns) = (
                SHARE[0].load(Ordering::Relaxed),
                SHARE[1].load(Ordering::Relaxed),
                SHARE[2].load(Ordering::Relaxed),
                SHARE[3].load(Ordering::Relaxed),
            );
            let own_ns = (u128::from(cal_ns) * u128::from(run) / u128::from(cal.max(1))) as u64;
            let stolen = run_ns.saturating_sub(own_ns);
            let ticks = crate::timer::ticks(x) - t0;
            crate::println!(
                "bench costs irq_share cal_iterations={} cal_ns={} iterations={} run_ns={} \
                 stolen_ns={} ticks={} stolen_per_tick_ns={} share_ppm={}",
                cal,
                cal_ns,
                run,
                run_ns,
                stolen,
                ticks,
                stolen / ticks.max(1),
                (u128::from(stolen) * 1_000_000 / u128::from(run_ns.max(1))) as u64
            );
            let (mean, max, n) = raise_rate(&r0, CpuMask::of(x), 1000);
            crate::println!(
                "bench costs rate_tick raised_per_s_mean={} raised_per_s_max={} cpus={}",
                mean,
                max,
                n
            );
        }
        None => ok = false,
    }
    crate::softirq::cost_recording(false);
    report_softirqs("tick");

    // Balancing with busy threads on some CPUs.
    crate::softirq::cost_reset();
    crate::softirq::cost_recording(true);
    let lb0: heapless::Vec<_, 8> = smp::online_cpus().map(sched::balance::stats).collect();
    let r0 = raised_all();
    let mut busy = CpuMask::EMPTY;
    ok &= run_threads(
        "bench-busy",
        BUSY_THREADS,
        busy_thread,
        2_000_000_000,
        &mut || {
            for c in smp::online_cpus() {
                if sched::snapshot(c).is_some_and(|s| s.nr_running > 0 && c != me) {
                    busy.set(c);
                }
            }
        },
    );
    crate::softirq::cost_recording(false);
    let (mean, max, n) = raise_rate(&r0, busy, 2000);
    crate::println!(
        "bench costs rate_busy raised_per_s_mean={} raised_per_s_max={} cpus={}",
        mean,
        max,
        n
    );
    let (mut runs, mut moved, mut kicks) = (0, 0, 0);
    for (c, b) in smp::online_cpus().zip(lb0.iter()) {
        let a = sched::balance::stats(c);
        runs += a.lb_runs - b.lb_runs;
        moved += a.moved - b.moved;
        kicks += a.kicks_sent - b.kicks_sent;
    }
    crate::println!(
        "bench costs balance_busy lb_runs={} moved={} nohz_kicks={} overutilized={}",
        runs,
        moved,
        kicks,
        u8::from(sched::overutilized())
    );
    report_softirqs("busy");

    // Wake/sleep threads, with AGGRESSIVE_NEXT_BALANCE as booted and off: wake-ups, ticks,
    // newidle and periodic balances for the hold times.
    crate::sync::rq_hold_timing(true);
    for (name, aggressive) in [("rate_cyclic_aggr", true), ("rate_cyclic_noaggr", false)] {
        if sched::set_features(feats.with(Feature::AGGRESSIVE_NEXT_BALANCE, aggressive)).is_err() {
            ok = false;
        }
        let r0 = raised_all();
        ok &= run_threads(
            "bench-cyclic",
            CYCLIC_THREADS,
            cyclic_thread,
            1_000_000_000,
            &mut || {},
        );
        let all = CpuMask(crate::smp::online_mask());
        let (mean, max, n) = raise_rate(&r0, all, 1000);
        crate::println!(
            "bench costs {} raised_per_s_mean={} raised_per_s_max={} cpus={}",
            name,
            mean,
            max,
            n
        );
    }
    let _ = sched::set_features(feats);

    crate::sync::rq_hold_timing(false);
    let h = crate::sync::rq_hold_histogram();
    crate::println!(
        "bench costs rq_hold n={} sum_ns={} max_ns={}",
        h.n,
        h.sum_ns,
        h.max_ns
    );
    for (b, &n) in h.buckets.iter().enumerate() {
        if n != 0 {
            let (lo, hi) = crate::sync::hold_bucket_bounds(b);
            crate::println!("bench costs rq_hold_bucket lo={} hi={} n={}", lo, hi, n);
        }
    }
    crate::println!("bench costs done ok={}", u8::from(ok));
    ok
}
