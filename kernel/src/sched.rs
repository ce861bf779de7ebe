//! Per-CPU run queues driven by the tick: PELT, the fair class's tick, and the schedutil
//! trigger; plus kernel pseudo-tasks whose work is emulated in capacity-invariant units.
//!
//! Re-derives the mechanism of Linux's `kernel/sched/core.c`: `struct rq` per CPU under
//! `rq->__lock` (here an [`IrqSpinLock`] per CPU, owned, no `static mut`), `double_rq_lock`
//! (lower CPU id first — *the* lock order between run queues), `sched_tick` (`update_rq_clock`,
//! `task_tick`, `cpufreq_update_util` via the PELT update, then `need_resched`), and the
//! boot-time and run-time `sched_features` switch (`/sys/kernel/debug/sched/features`).
//!
//! Deliberate differences, and the seam for real threads (a later issue): there is no context
//! switch yet. A "task" here is a pseudo-task ([`start_busy`]): it is enqueued and made `curr`
//! on its CPU while that CPU sits in its idle loop; each tick charges it the elapsed time and
//! completes its work at the rate `capacity_orig × f / fmax / 1024` of a big CPU at its top
//! OPP (boards.md, the rt-app calibration convention), computing the exact completion instant
//! between two ticks, at which it is dequeued with `SLEEP`. `need_resched` is honoured by
//! calling `pick_next_task` at the tick; with real threads that is where `schedule()` and the
//! context switch go. Blocked averages of an idle rq are decayed at each tick (Linux does it
//! from the balance softirq), which also triggers schedutil as in Linux.
//!
//! Lock order: rq locks in ascending CPU id ([`double_rq_lock`]); then (never while holding
//! an rq lock) the cpufreq core's lock; per-CPU schedutil snapshots are leaves (see
//! `crate::cpufreq`).

use core::fmt;
use core::sync::atomic::{AtomicU32, Ordering};

use asym_sched::features::SchedFeatures;
use asym_sched::rq::{DequeueFlags, EnqueueFlags, Rq, RqConfig, Task};
use asym_sched::topology::{BoardDesc, Topology};
use asym_sched::types::{Capacity, CpuId, CpuMask, Nanos, TaskId, SCHED_CAPACITY_SCALE};
use asym_sched::uclamp::TaskUclamp;

use crate::cmdline::Cmdline;
use crate::dt::{Platform, MAX_CPUS};
use crate::sync::{InitOnce, IrqSpinLock, IrqSpinLockGuard};
use alloc::boxed::Box;
use alloc::vec::Vec;

/// One CPU's scheduler state: its run queue and the pseudo-task running on it.
#[derive(Debug)]
pub struct CpuSched {
    /// The run queue.
    pub rq: Rq,
    /// The pseudo-task this CPU runs, if any.
    busy: Option<Busy>,
    /// The last pseudo-task that finished here.
    last_done: Option<Done>,
    /// Pseudo-tasks started / finished here (for the "no task lost" check).
    started: u64,
    finished: u64,
}

#[derive(Clone, Copy, Debug)]
struct Busy {
    id: TaskId,
    /// Work left, in ns of a big CPU at its top OPP × 2^20 (capacity × freq scale).
    remaining: u128,
    /// Runs until [`stop_busy`] (never completes).
    forever: bool,
    started_ns: u64,
}

/// A finished pseudo-task: when it started and completed (guest ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    pub id: TaskId,
    pub started_ns: u64,
    pub done_ns: u64,
}

struct State {
    /// One locked run queue per CPU, indexed by [`CpuId`]. On the heap: an `Rq` is ~9 KiB and
    /// the boot stacks are 60 KiB, so they are built one at a time (hence not a `PerCpu`,
    /// whose array would be built on the stack).
    cpus: &'static [IrqSpinLock<CpuSched>],
    topology: Option<Topology>,
    capacity: [Capacity; MAX_CPUS],
    board: Option<&'static BoardDesc>,
    features: IrqSpinLock<SchedFeatures>,
}

static STATE: InitOnce<&'static State> = InitOnce::new();
static NEXT_TASK_ID: AtomicU32 = AtomicU32::new(1);

/// Why a scheduler call was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedError {
    /// [`init`] has not run.
    NotInitialised,
    /// The CPU id is not one of this board's.
    NoSuchCpu(CpuId),
    /// The CPU already runs a pseudo-task.
    Busy(CpuId),
    /// The CPU runs no pseudo-task.
    Idle(CpuId),
    /// The policy crate refused (message from its error).
    Rq(asym_sched::rq::RqError),
}

impl fmt::Display for SchedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchedError::NotInitialised => write!(f, "sched: not initialised"),
            SchedError::NoSuchCpu(c) => write!(f, "sched: no cpu {}", c.0),
            SchedError::Busy(c) => write!(f, "sched: cpu {} already runs a pseudo-task", c.0),
            SchedError::Idle(c) => write!(f, "sched: cpu {} runs no pseudo-task", c.0),
            SchedError::Rq(e) => write!(f, "sched: {e}"),
        }
    }
}

/// Guest time in ns from the generic counter (CNTVCT, = CNTPCT: CNTVOFF is 0).
pub fn now() -> Nanos {
    Nanos(crate::clock::counter_to_ns(
        crate::arch::counter(),
        crate::arch::counter_freq_hz().max(1),
    ))
}

/// Builds the topology, energy-model check and cpufreq from the DT's scheduling description
/// (falling back to symmetric without cpufreq, with a message, when it is missing or bad),
/// one run queue per CPU, and applies the command line's `sched_features=` and `cpufreq.*`.
/// Call once on the boot CPU after the heap and before the tick starts.
pub fn init(plat: &'static Platform, cmd: &Cmdline) {
    let nr = plat.cpus.len().min(MAX_CPUS);
    // Parsed with the rest of the DT at boot; the blob is not read again.
    let board = match crate::board_dt::board_desc(plat) {
        Ok(Some(b)) => Some(&*Box::leak(Box::new(b))),
        Ok(None) => {
            crate::println!(
                "sched: no operating-points-v2 in the DT: no cpufreq; capacities from \
                 capacity-dmips-mhz only"
            );
            None
        }
        Err(e) => {
            crate::println!("{}; falling back to symmetric CPUs without cpufreq", e);
            None
        }
    };
    let topology = board.and_then(|b| match Topology::from_board(b) {
        Ok(t) => Some(t),
        Err(e) => {
            crate::println!("sched: DT topology refused: {}; symmetric, no cpufreq", e);
            None
        }
    });
    let board = topology.and(board);
    let mut capacity = [Capacity(SCHED_CAPACITY_SCALE); MAX_CPUS];
    for (i, cap) in capacity.iter_mut().enumerate().take(nr) {
        *cap = match &topology {
            Some(t) => t.capacity_orig(CpuId(i as u16)),
            None => plat
                .capacity_of(CpuId(i as u16))
                .unwrap_or(Capacity(SCHED_CAPACITY_SCALE)),
        };
    }
    let mut features = SchedFeatures::default();
    let mut cpufreq_opts: heapless::Vec<(&str, &str), 8> = heapless::Vec::new();
    for word in cmd.sched_args.split_ascii_whitespace() {
        let Some((k, v)) = word.split_once('=') else {
            continue;
        };
        if k == "sched_features" {
            if let Err(e) = features.apply_list(v) {
                crate::println!("cmdline: sched_features={}: {} (rest ignored)", v, e);
            }
        } else if cpufreq_opts.push((k, v)).is_err() {
            crate::println!("cmdline: {}: more than 8 cpufreq options (ignored)", k);
        }
    }
    let start = now();
    let tick_nsec = 1_000_000_000 / u64::from(cmd.hz.max(1));
    let mut cpus: Vec<IrqSpinLock<CpuSched>> = Vec::with_capacity(nr);
    for (i, cap) in capacity.iter().enumerate().take(nr) {
        let mut cfg = RqConfig::new(CpuId(i as u16), nr as u32);
        cfg.capacity_orig = *cap;
        cfg.tick_nsec = tick_nsec;
        cfg.features = features;
        cpus.push(IrqSpinLock::new(CpuSched {
            rq: Rq::new(cfg, start),
            busy: None,
            last_done: None,
            started: 0,
            finished: 0,
        }));
    }
    let cpus: &'static [IrqSpinLock<CpuSched>] = Vec::leak(cpus);
    if let (Some(b), Some(t)) = (board, &topology) {
        if let Err(e) = asym_sched::em::EnergyModel::from_topology(b, t) {
            crate::println!("sched: energy model refused: {} (EAS off)", e);
        }
        if let Err(e) = crate::cpufreq::init(plat, b, t, start) {
            crate::println!("cpufreq: {}; cpufreq off", e);
        }
    }
    let _ = STATE.set(Box::leak(Box::new(State {
        cpus,
        topology,
        capacity,
        board,
        features: IrqSpinLock::new(features),
    })));
    for (k, v) in cpufreq_opts {
        if let Err(e) = crate::cpufreq::apply_option(k, v) {
            crate::println!("cmdline: {}={}: {} (ignored)", k, v, e);
        }
    }
}

/// `arch_scale_cpu_capacity(cpu)`: 1024 before [`init`] or for an unknown CPU.
pub fn capacity_orig(cpu: CpuId) -> Capacity {
    STATE
        .get()
        .and_then(|s| s.capacity.get(cpu.index()).copied())
        .unwrap_or(Capacity(SCHED_CAPACITY_SCALE))
}

/// The topology built from the DT (`None`: symmetric fallback).
pub fn topology() -> Option<&'static Topology> {
    STATE.get()?.topology.as_ref()
}

/// The board description parsed from the DT (`None`: no OPP tables).
pub fn board() -> Option<&'static BoardDesc> {
    STATE.get()?.board
}

/// Prints the scheduler's part of the boot banner: features, and cpufreq domains.
pub fn print_banner() {
    let Some(st) = STATE.get() else { return };
    crate::println!(
        "sched: {} (topology {}), features {}",
        st.board.map_or("symmetric fallback", |_| "from the DT"),
        if st.topology.is_some_and(|t| t.asym_cpucapacity()) {
            "asymmetric"
        } else {
            "symmetric"
        },
        *st.features.lock()
    );
    crate::cpufreq::print_domains();
}

/// Locks `cpu`'s run queue (`rq_lock_irqsave`).
pub fn rq_lock(cpu: CpuId) -> Result<IrqSpinLockGuard<'static, CpuSched>, SchedError> {
    let st = STATE.get().ok_or(SchedError::NotInitialised)?;
    st.cpus
        .get(cpu.index())
        .map(IrqSpinLock::lock)
        .ok_or(SchedError::NoSuchCpu(cpu))
}

/// Locks two run queues in the one lock order, lower CPU id first (Linux `double_rq_lock`).
/// `a == b` is refused: a lock is not re-entrant.
#[allow(clippy::type_complexity)]
pub fn double_rq_lock(
    a: CpuId,
    b: CpuId,
) -> Result<
    (
        IrqSpinLockGuard<'static, CpuSched>,
        IrqSpinLockGuard<'static, CpuSched>,
    ),
    SchedError,
> {
    if a == b {
        return Err(SchedError::Busy(a));
    }
    if a < b {
        let ga = rq_lock(a)?;
        let gb = rq_lock(b)?;
        Ok((ga, gb))
    } else {
        let gb = rq_lock(b)?;
        let ga = rq_lock(a)?;
        Ok((ga, gb))
    }
}

/// The feature set in force.
pub fn features() -> SchedFeatures {
    STATE
        .get()
        .map_or(SchedFeatures::default(), |s| *s.features.lock())
}

/// Changes the feature set at run time on every run queue (Linux writing
/// `/sys/kernel/debug/sched/features`).
pub fn set_features(f: SchedFeatures) -> Result<(), SchedError> {
    let st = STATE.get().ok_or(SchedError::NotInitialised)?;
    *st.features.lock() = f;
    for cpu in st.cpus {
        let mut g = cpu.lock();
        let t = now();
        let _ = g.rq.update_rq_clock(t);
        g.rq.set_features(f);
    }
    Ok(())
}

/// Starts a pseudo-task on `cpu` needing `work_ns` of work (ns of a big CPU at its top OPP;
/// `None`: runs until [`stop_busy`]). It is enqueued (a fresh task: util 0) and becomes `curr`.
pub fn start_busy(cpu: CpuId, work_ns: Option<u64>) -> Result<TaskId, SchedError> {
    let id = TaskId(NEXT_TASK_ID.fetch_add(1, Ordering::Relaxed));
    let task = Task::new(id, 0, TaskUclamp::default(), CpuMask::of(cpu)).map_err(SchedError::Rq)?;
    let update = {
        let mut g = rq_lock(cpu)?;
        if g.busy.is_some() {
            return Err(SchedError::Busy(cpu));
        }
        let t = now();
        g.rq.update_rq_clock(t).map_err(SchedError::Rq)?;
        g.rq.enqueue_task(task, EnqueueFlags::WAKEUP)
            .map_err(|e| SchedError::Rq(e.reason))?;
        g.rq.pick_next_task();
        g.busy = Some(Busy {
            id,
            remaining: u128::from(work_ns.unwrap_or(0)) << 20,
            forever: work_ns.is_none(),
            started_ns: t.0,
        });
        g.started += 1;
        (g.rq.take_cpufreq_update(), g.rq.features(), t)
    };
    crate::cpufreq::tick(cpu, update.2, update.0, update.1);
    Ok(id)
}

/// Stops `cpu`'s pseudo-task now (dequeued with `SLEEP`); returns its record.
pub fn stop_busy(cpu: CpuId) -> Result<Done, SchedError> {
    let (done, upd, feat, t) = {
        let mut g = rq_lock(cpu)?;
        let t = now();
        if g.busy.is_none() {
            return Err(SchedError::Idle(cpu));
        }
        charge(&mut g, t.0);
        let cs = &mut *g;
        let Some(b) = cs.busy else {
            // Its work completed between the last tick and now.
            return cs.last_done.ok_or(SchedError::Idle(cpu));
        };
        cs.rq.update_rq_clock(t).map_err(SchedError::Rq)?;
        let done = finish(cs, b, t.0)?;
        (done, cs.rq.take_cpufreq_update(), cs.rq.features(), t)
    };
    crate::cpufreq::tick(cpu, t, upd, feat);
    Ok(done)
}

/// The last pseudo-task that finished on `cpu`, and whether one is running now.
pub fn busy_status(cpu: CpuId) -> Result<(Option<Done>, bool), SchedError> {
    let g = rq_lock(cpu)?;
    Ok((g.last_done, g.busy.is_some()))
}

/// Pseudo-tasks started and finished on `cpu`.
pub fn task_counts(cpu: CpuId) -> Result<(u64, u64), SchedError> {
    let g = rq_lock(cpu)?;
    Ok((g.started, g.finished))
}

/// The scheduler tick on `cpu` (Linux `sched_tick`), from the timer interrupt.
pub fn tick(cpu: CpuId) {
    let Some(st) = STATE.get() else { return };
    let Some(slot) = st.cpus.get(cpu.index()) else {
        return;
    };
    let t = now();
    let (upd, feat) = {
        let mut g = slot.lock();
        charge(&mut g, t.0);
        let cs = &mut *g;
        if cs.rq.update_rq_clock(t).is_err() {
            return;
        }
        // arch_freq_scale as the cpufreq side last wrote it holds from now on; the
        // interval just accounted ran at the previous value.
        cs.rq
            .set_freq_scale(Capacity(crate::cpufreq::arch_freq_scale(cpu)));
        if cs.rq.curr().is_some() {
            cs.rq.task_tick();
        } else {
            cs.rq.update_blocked_averages();
            // Every tick of an idle rq is a fresh entry into the idle loop
            // (`tick_nohz_get_idle_calls_cpu`).
            cs.rq.note_idle_entry();
        }
        if cs.rq.need_resched() {
            // The seam for real threads: schedule() and the context switch go here.
            cs.rq.pick_next_task();
        }
        crate::cpufreq::publish_input(cpu, cs.rq.snapshot());
        (cs.rq.take_cpufreq_update(), cs.rq.features())
    };
    crate::cpufreq::tick(cpu, t, upd, feat);
}

/// Charges the running pseudo-task the time since the rq clock's last update at the rq's
/// current frequency scale; if its work completes before `now_ns`, it is dequeued at the
/// exact completion instant.
fn charge(cs: &mut CpuSched, now_ns: u64) {
    let Some(mut b) = cs.busy else { return };
    if cs.rq.curr() != Some(b.id) {
        return;
    }
    let last = cs.rq.clock().0;
    let dt = u128::from(now_ns.saturating_sub(last));
    let rate = u128::from(cs.rq.capacity_orig().0) * u128::from(cs.rq.freq_scale().0);
    if b.forever || rate == 0 {
        return;
    }
    if b.remaining > dt * rate {
        b.remaining -= dt * rate;
        cs.busy = Some(b);
        return;
    }
    let need = b.remaining.div_ceil(rate) as u64;
    let at = last + need;
    if cs.rq.update_rq_clock(Nanos(at)).is_ok() {
        let _ = finish(cs, b, at);
    }
}

fn finish(cs: &mut CpuSched, b: Busy, at: u64) -> Result<Done, SchedError> {
    cs.rq
        .dequeue_task(b.id, DequeueFlags::SLEEP)
        .map_err(SchedError::Rq)?;
    cs.rq.pick_next_task();
    cs.busy = None;
    cs.finished += 1;
    let done = Done {
        id: b.id,
        started_ns: b.started_ns,
        done_ns: at,
    };
    cs.last_done = Some(done);
    Ok(done)
}
