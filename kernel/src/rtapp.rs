//! The in-kernel rt-app executor: one kernel thread per workload thread, each driven by the
//! interpreter the simulator uses (`asym_rtapp::interp`), so both run the same program —
//! phases, loops, markers, timers and rt-app's statistics come from the same code. This file
//! only carries the interpreter's actions out against guest time:
//! - `run` → [`sched::work`]: the thread stays running (in `wfi` between interrupts, so that
//!   under `-icount` it costs no guest instructions) until its own running time, charged
//!   `capacity_orig × freq_scale` per ns at every switch and tick, covers the work — exactly
//!   `work × 1024 / (capacity_orig × f / fmax)` ns of running (rt-app's calibration convention
//!   made exact, as in the simulator); `runtime` → [`sched::busy_until`], wall time;
//! - `sleep`/`timer` → [`sched::sleep_until`]; `suspend`/`resume` → a [`Completion`] per
//!   thread plus the interpreter's one remembered wake-up; `yield` → [`sched::yield_now`];
//! - a phase's `nice` → [`sched::set_nice`], its `util_min`/`util_max` → [`sched::set_uclamp`]
//!   when they change, its `cpus` → [`sched::set_affinity`] and a move if the thread runs
//!   outside them.
//!
//! With `rtapp_el0=` the same workload runs through the EL0 executor instead
//! ([`crate::rtapp_el0`], `user/rtapp`: the same reader and interpreter, driven through system
//! calls); the run's set-up, time zero, end, energy line and trace are this file's for both.
//!
//! Where the workload comes from (`rtapp=` on the command line): a host file read over
//! semihosting (QEMU, `-semihosting-config enable=on,target=native`), or `demo`, the bundled
//! `tests/workloads/periodic-big.json` built into the image — which is also how a board
//! without semihosting gets one today (a DTB `/chosen` property is not read yet).
//!
//! The run starts the threads at their `delay` after time zero (the trace's zero), ends at
//! `rtapp_duration_ms` or the workload's `duration`, and writes the trace ([`tracing`]) to the
//! host file `rtapp_trace=`. Bad JSON ends the run with the reader's message — the problem,
//! the JSON path, line and column — and status 2; nothing here panics on input.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use asym_rtapp::interp::{Action, Params, Thread, Timer};
use asym_rtapp::workload::{self, Workload};
use asym_sched::types::{CpuId, CpuMask, Nanos};

use crate::cmdline::Cmdline;
use crate::sched;
use crate::sync::{InitOnce, IrqSpinLock, LockRank};
use crate::task::{self, ThreadId, ThreadParams};
use crate::tracing;
use crate::wait::Completion;

/// The bundled workload `rtapp=demo` runs.
const DEMO: &str = include_str!("../../tests/workloads/periodic-big.json");
/// Largest workload file read.
const MAX_JSON: usize = 1 << 20;
/// Run length when neither the command line nor the workload gives one (the simulator's).
const DEFAULT_DURATION_NS: u64 = 10_000_000_000;
/// First pid of the workload's threads, as the simulator numbers them.
const FIRST_PID: u32 = 1001;
/// Trace records per CPU at most (40 bytes each).
const MAX_RECORDS_PER_CPU: usize = 1024 * 1024;

/// One workload thread's state shared with the others (for `resume`).
struct Slot {
    prog: IrqSpinLock<Prog>,
    wake: Completion,
    /// `ThreadId::task_id().0` once spawned.
    id: AtomicU32,
}

struct Prog {
    thread: Thread,
    suspended: bool,
}

struct Exec {
    wl: Workload,
    timers: IrqSpinLock<Vec<Timer>>,
    slots: Vec<Slot>,
}

static EXEC: InitOnce<&'static Exec> = InitOnce::new();

/// Runs the workload `cmd.rtapp` names and ends the run (from the init thread).
pub fn run(cmd: &Cmdline) -> ! {
    let status = match run_inner(cmd) {
        Ok(()) => 0,
        Err(e) => {
            crate::println!("rtapp: {}", e);
            2
        }
    };
    crate::panic::end_run(status)
}

fn run_inner(cmd: &Cmdline) -> Result<(), String> {
    let Some(src) = cmd.rtapp.as_deref() else {
        return Err("no workload (rtapp=)".into());
    };
    let nr_cpus = sched::nr_cpus();
    let (name, bytes): (&str, Vec<u8>) = if src == "demo" {
        ("periodic-big.json (built in)", DEMO.as_bytes().to_vec())
    } else {
        let bytes = crate::semihosting::read_file(src, MAX_JSON)
            .map_err(|e| alloc::format!("{src}: cannot read the workload: {e}"))?;
        (src, bytes)
    };
    if let Some(path) = cmd.rtapp_el0.as_deref() {
        // The EL0 program reads the workload itself, with the same reader.
        return run_el0(cmd, path, name, bytes, nr_cpus);
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        alloc::format!("{name}: not UTF-8 at byte {}", e.utf8_error().valid_up_to())
    })?;
    let wl = workload::parse(&text, name, nr_cpus).map_err(|e| alloc::format!("{e}"))?;
    if wl.tasks.len() + nr_cpus + 4 > task::MAX_THREADS {
        return Err(alloc::format!(
            "{name}: {} threads; the kernel has room for {}",
            wl.tasks.len(),
            task::MAX_THREADS - nr_cpus - 4
        ));
    }
    let duration_ns = cmd
        .rtapp_duration_ms
        .map(|ms| ms * 1_000_000)
        .or(wl.duration_ns)
        .unwrap_or(DEFAULT_DURATION_NS);
    let exec = run_in_kernel(cmd, name, wl, nr_cpus, duration_ns)?;
    let ids: Vec<Option<u32>> = exec
        .slots
        .iter()
        .map(|s| {
            let id = s.id.load(Ordering::Relaxed);
            (id != u32::MAX).then_some(id)
        })
        .collect();
    if let Some(path) = cmd.rtapp_trace.as_deref() {
        let names: Vec<String> = exec.wl.tasks.iter().map(|t| t.name.clone()).collect();
        write_trace(nr_cpus, &names, &ids, path)?;
    }
    Ok(())
}

/// Trace records per CPU: half the free heap, at most [`MAX_RECORDS_PER_CPU`].
fn trace_records(nr_cpus: usize) -> usize {
    (crate::heap::stats().free / 2 / (40 * nr_cpus.max(1))).min(MAX_RECORDS_PER_CPU)
}

fn banner(cmd: &Cmdline, name: &str, threads: usize, duration_ns: u64, how: &str, records: usize) {
    crate::println!(
        "rtapp: {}: {} threads, {} ms{}{}",
        name,
        threads,
        duration_ns / 1_000_000,
        how,
        if cmd.rtapp_trace.is_some() {
            alloc::format!(", tracing ({records} records per CPU)")
        } else {
            String::new()
        }
    );
}

/// Runs the workload `bytes` with the EL0 executor at host path `path`
/// ([`crate::rtapp_el0`]): the program reads it before time zero and reports what the run
/// needs (its length, the threads' names); from time zero on, the run is this file's, as for
/// the in-kernel executor.
fn run_el0(
    cmd: &Cmdline,
    path: &str,
    name: &str,
    bytes: Vec<u8>,
    nr_cpus: usize,
) -> Result<(), String> {
    // The space is built before the trace takes half the free heap.
    let prog = crate::rtapp_el0::prepare(
        path,
        &bytes,
        name,
        nr_cpus,
        crate::smp::online_mask(),
        cmd.rtapp_duration_ms.map_or(0, |ms| ms * 1_000_000),
        DEFAULT_DURATION_NS,
    )?;
    drop(bytes);
    let records = trace_records(nr_cpus);
    if cmd.rtapp_trace.is_some() && !tracing::init(nr_cpus, records) {
        return Err(alloc::format!(
            "no memory for {records} trace records per CPU"
        ));
    }
    let run = crate::rtapp_el0::start(prog)?;
    let ready = run.wait_ready()?;
    banner(
        cmd,
        name,
        ready.names.len(),
        ready.duration_ns,
        ", EL0 executor",
        records,
    );
    tracing::enable();
    let t0 = tracing::t0();
    let end = t0.saturating_add(ready.duration_ns);
    // The meter's reading after the run is the energy over [t0, end] however late this
    // thread wakes for it.
    crate::energy::stop_at(end);
    mark_t0(t0);
    run.go(t0)?;
    // The main thread ends once it has started every thread (at their delays, before `end`);
    // the threads run on until the run ends, as the in-kernel executor's do.
    run.join()?;
    let mut next_status = t0 + 1_000_000_000;
    wait_until(end, &mut next_status, cmd.rtapp_trace.is_none());
    tracing::disable();
    print_totals(end);
    if let Some(trace) = cmd.rtapp_trace.as_deref() {
        write_trace(nr_cpus, &ready.names, &run.tids(ready.names.len()), trace)?;
    }
    Ok(())
}

/// Runs `wl` with the in-kernel executor until its end (the trace on, from time zero).
fn run_in_kernel(
    cmd: &Cmdline,
    name: &str,
    wl: Workload,
    nr_cpus: usize,
    duration_ns: u64,
) -> Result<&'static Exec, String> {
    let slots = (0..wl.tasks.len())
        .map(|i| Slot {
            prog: IrqSpinLock::with_rank(
                Prog {
                    thread: Thread::new(&wl, i, nr_cpus),
                    suspended: false,
                },
                LockRank(LockRank::LEAF.0 - 1),
            ),
            wake: Completion::new(),
            id: AtomicU32::new(u32::MAX),
        })
        .collect();
    let exec: &'static Exec = Box::leak(Box::new(Exec {
        timers: IrqSpinLock::new(alloc::vec![Timer::new(); wl.nr_timers]),
        wl,
        slots,
    }));
    if EXEC.set(exec).is_err() {
        return Err("the executor already ran".into());
    }
    let records = trace_records(nr_cpus);
    if cmd.rtapp_trace.is_some() && !tracing::init(nr_cpus, records) {
        return Err(alloc::format!(
            "no memory for {records} trace records per CPU"
        ));
    }
    banner(cmd, name, exec.wl.tasks.len(), duration_ns, "", records);
    let status = cmd.rtapp_trace.is_none();
    tracing::enable();
    let t0 = tracing::t0();
    let end = t0.saturating_add(duration_ns);
    // The meter's reading after the run is the energy over [t0, end] however late this
    // thread wakes for it.
    crate::energy::stop_at(end);
    mark_t0(t0);
    let mut order: Vec<usize> = (0..exec.wl.tasks.len()).collect();
    order.sort_by_key(|&i| exec.wl.tasks[i].delay_ns);
    let mut next_status = t0 + 1_000_000_000;
    for i in order {
        let at = t0.saturating_add(exec.wl.tasks[i].delay_ns);
        if at >= end {
            break;
        }
        wait_until(at, &mut next_status, status);
        spawn(exec, i)?;
    }
    wait_until(end, &mut next_status, status);
    tracing::disable();
    print_totals(end);
    Ok(exec)
}

/// What a run ends with: the energy model's energy over [t0, end], which xtask checks the
/// trace analyser's total against, and SCHED_SOFTIRQ raises per CPU over the run (for runs
/// without a trace: `cargo xtask bench --vs-linux` counts them under a cyclictest-like load
/// this way).
fn print_totals(end: u64) {
    if crate::cpufreq::available() {
        crate::println!(
            "rtapp: energy {} uJ (energy model)",
            energy_since_t0(end) / 1_000_000
        );
    }
    let mut line = String::from("rtapp: SCHED_SOFTIRQ raised per CPU:");
    for (c, at_t0) in RAISED_AT_T0.iter().enumerate().take(sched::nr_cpus()) {
        let now = crate::softirq::counts(CpuId(c as u16)).0;
        let _ = core::fmt::Write::write_fmt(
            &mut line,
            format_args!(" {}", now.saturating_sub(at_t0.load(Ordering::Relaxed))),
        );
    }
    let ms = end.saturating_sub(T0.load(Ordering::Relaxed)) / 1_000_000;
    crate::println!("{} over {} ms", line, ms);
}

/// The workload's time zero: the energy meter's and every CPU's SCHED_SOFTIRQ count then.
fn mark_t0(t0: u64) {
    T0.store(t0, Ordering::Relaxed);
    ENERGY_AT_T0.store(crate::energy::total_pj(t0), Ordering::Relaxed);
    for (c, a) in RAISED_AT_T0.iter().enumerate().take(sched::nr_cpus()) {
        a.store(crate::softirq::counts(CpuId(c as u16)).0, Ordering::Relaxed);
    }
}

/// Time zero of the run ([`mark_t0`]).
static T0: AtomicU64 = AtomicU64::new(0);
/// Every CPU's SCHED_SOFTIRQ raises at time zero.
static RAISED_AT_T0: [AtomicU64; crate::percpu::MAX_CPUS] =
    [const { AtomicU64::new(0) }; crate::percpu::MAX_CPUS];

/// Sleeps until `at` (guest ns), printing the status line every guest second if `status`.
fn wait_until(at: u64, next_status: &mut u64, status: bool) {
    loop {
        let now = sched::now().0;
        if now >= at {
            return;
        }
        if status && *next_status <= at {
            sched::sleep_until(Nanos(*next_status));
            print_status();
            *next_status += 1_000_000_000;
        } else {
            sched::sleep_until(Nanos(at));
        }
    }
}

/// `energy::total_pj` when the workload's time started.
static ENERGY_AT_T0: AtomicU64 = AtomicU64::new(0);

/// The energy model's energy since the workload's zero up to `now_ns`, pJ.
fn energy_since_t0(now_ns: u64) -> u64 {
    crate::energy::total_pj(now_ns).saturating_sub(ENERGY_AT_T0.load(Ordering::Relaxed))
}

/// One line per guest second: per CPU the running thread, its root cfs_rq util and its
/// frequency; then the energy so far (the energy model's, see [`crate::energy`]).
fn print_status() {
    let mut line = String::new();
    let t = sched::now().0.saturating_sub(tracing::t0());
    let _ = core::fmt::write(
        &mut line,
        format_args!("rtapp: {:>3} s:", t / 1_000_000_000),
    );
    for c in 0..sched::nr_cpus() {
        let cpu = CpuId(c as u16);
        let Some(s) = sched::snapshot(cpu) else {
            continue;
        };
        let curr = sched::rq_lock(cpu).map(|g| g.curr_slot()).unwrap_or(c);
        let name = if curr < sched::nr_cpus() {
            heapless::String::try_from("idle").unwrap_or_default()
        } else {
            task::name(task::slot(curr).id(curr))
        };
        let khz = crate::cpufreq::domain_of(cpu)
            .and_then(crate::cpufreq::policy)
            .map_or(0, |p| p.cur().0);
        let _ = core::fmt::write(
            &mut line,
            format_args!(
                " cpu{}={}/u{}/{}MHz",
                c,
                name,
                s.util.cfs.util_avg.0,
                khz / 1000
            ),
        );
    }
    if crate::cpufreq::available() {
        let mj = energy_since_t0(sched::now().0) / 1_000_000_000;
        let _ = core::fmt::write(&mut line, format_args!(" energy={mj}mJ"));
    }
    crate::println!("{}", line);
}

fn spawn(exec: &'static Exec, i: usize) -> Result<(), String> {
    let spec = &exec.wl.tasks[i];
    let p: Params = exec.slots[i].prog.lock().thread.params();
    let online = CpuMask(crate::smp::online_mask());
    let affinity = CpuMask(p.allowed).and(online);
    let params = ThreadParams {
        nice: p.nice,
        affinity: if affinity.is_empty() {
            online
        } else {
            affinity
        },
        uclamp: p.uclamp.unwrap_or((0, 1024)),
        detached: true,
    };
    let name: String = spec.name.chars().take(task::NAME_LEN).collect();
    let id = task::spawn(&name, params, thread_main, i)
        .map_err(|e| alloc::format!("cannot start thread {}: {e}", spec.name))?;
    exec.slots[i].id.store(id.task_id().0, Ordering::Relaxed);
    Ok(())
}

/// Time since the workload's zero.
fn rel_now() -> u64 {
    sched::now().0.saturating_sub(tracing::t0())
}

/// A workload thread: step the interpreter, do what it says, until it says exit.
fn thread_main(i: usize) {
    let Some(exec) = EXEC.get() else { return };
    let me = task::current().map(ThreadId::task_id);
    let slot = &exec.slots[i];
    let t0 = tracing::t0();
    // The clamps in force (the thread was spawned with its first phase's).
    let mut uclamp = slot.prog.lock().thread.params().uclamp.unwrap_or((0, 1024));
    loop {
        let now = rel_now();
        let action = {
            let mut prog = slot.prog.lock();
            let mut timers = exec.timers.lock();
            prog.thread.step(&exec.wl, &mut timers, now)
        };
        match action {
            Action::Start => tracing::rename_self(),
            Action::Marker(m) => tracing::marker(m),
            Action::Phase(p) => {
                if let Some(id) = me.map(ThreadId::from_task_id) {
                    apply_phase(id, p, &mut uclamp);
                }
            }
            Action::Run { work_ns } => {
                if work_ns > 0 {
                    sched::work(work_ns);
                }
            }
            Action::Runtime { ns } => {
                sched::busy_until(Nanos(sched::now().0.saturating_add(ns)));
            }
            Action::Sleep { ns } => {
                if ns > 0 {
                    sched::sleep_until(Nanos(sched::now().0.saturating_add(ns)));
                }
            }
            Action::Timer(t) => {
                if let Some(at) = t.wait_until_ns {
                    sched::sleep_until(Nanos(t0.saturating_add(at)));
                }
            }
            Action::Suspend => {
                slot.prog.lock().suspended = true;
                slot.wake.wait();
            }
            Action::Resume(targets) => {
                for &t in targets {
                    let Some(target) = exec.slots.get(t) else {
                        continue;
                    };
                    let mut g = target.prog.lock();
                    if g.suspended {
                        g.suspended = false;
                        drop(g);
                        target.wake.complete();
                    } else {
                        g.thread.post_resume();
                    }
                }
            }
            Action::Yield => sched::yield_now(),
            Action::Exit => return,
        }
    }
}

/// A phase's nice, its clamps when they differ from those in force (`uclamp`), and its CPUs
/// (with a move if the thread runs outside them). The EL0 executor does the same through
/// `sched_setattr` and `sched_setaffinity`.
fn apply_phase(id: ThreadId, p: Params, uclamp: &mut (u32, u32)) {
    let _ = sched::set_nice(id, p.nice);
    if let Some(c) = p.uclamp.filter(|&c| c != *uclamp) {
        let mut req = asym_sched::uclamp::TaskUclamp::new();
        if req.set_request(c.0, c.1).is_ok() && sched::set_uclamp(id, req).is_ok() {
            *uclamp = c;
        }
    }
    let online = CpuMask(crate::smp::online_mask());
    let mask = CpuMask(p.allowed).and(online);
    if !mask.is_empty() && sched::set_affinity(id, mask).is_ok() {
        sched::migrate_self();
    }
}

fn write_trace(
    nr_cpus: usize,
    names: &[String],
    ids: &[Option<u32>],
    path: &str,
) -> Result<(), String> {
    let names: Vec<tracing::Named<'_>> = names
        .iter()
        .zip(ids)
        .enumerate()
        .filter_map(|(i, (n, id))| {
            id.map(|id| tracing::Named {
                id,
                pid: FIRST_PID + i as u32,
                name: truncate(n),
            })
        })
        .collect();
    let lost = tracing::lost();
    let mut f = crate::semihosting::File::open(path, true)
        .map_err(|e| alloc::format!("{path}: cannot write the trace: {e}"))?;
    let lines = tracing::drain(nr_cpus, &names, |b| f.write_all(b))
        .map_err(|e| alloc::format!("{path}: {e}"))?;
    crate::println!("rtapp: trace: {} lines, {} records lost", lines, lost);
    Ok(())
}

/// `TASK_COMM_LEN - 1` characters, as the simulator names threads.
fn truncate(s: &str) -> &str {
    match s.char_indices().nth(task::NAME_LEN) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
