//! The scheduler core: per-CPU run queues running real threads — `schedule()` and the context
//! switch with the run-queue lock handed over, preemption on return from interrupt, the tick,
//! `try_to_wake_up` with placement, sleep, emulated work, and the idle threads.
//!
//! Re-derives the mechanism of Linux's `kernel/sched/core.c`:
//! - `struct rq` per CPU under `rq->__lock` (an [`IrqSpinLock`] per CPU, ranked
//!   [`LockRank::rq`] so two nest only in ascending CPU order, `double_rq_lock`);
//! - `__schedule` (`SM_NONE` / `SM_PREEMPT`: a preempted thread stays queued whatever its
//!   state) → `context_switch` → `finish_task_switch`: the run-queue lock taken by the outgoing
//!   thread is released by the incoming one (`IrqSpinLockGuard::into_handover`), which then,
//!   for a dead predecessor, runs `task_dead_fair` (its load leaves the cfs_rq only once it
//!   is off the CPU) and releases its stack;
//! - `try_to_wake_up`: under the thread's lock; `ttwu_runnable` when it has not finished going
//!   to sleep; else wait for `p->on_cpu == 0`, `select_task_rq`, `set_task_cpu` →
//!   `migrate_task_rq_fair`, `ttwu_do_activate` and `resched_curr`, with an IPI to a remote
//!   CPU (`smp_send_reschedule`);
//! - `sched_tick`, `preempt_schedule_irq`, `do_idle` (`cpuidle_idle_call` → `wfi`), and the
//!   boot-time/run-time `sched_features` switch.
//!
//! Every call into the policy crate is in [`policy`]. One per-CPU need-resched flag (Linux's
//! `TIF_NEED_RESCHED` on `rq->curr`) is set from the run queue's decisions (tick, wake-up
//! preemption, yield) and by the reschedule IPI, and checked on return from every IRQ.
//!
//! Deliberate differences:
//! - No wake list (`ttwu_queue_wakelist`): a waker enqueues on the target's run queue itself
//!   and sends the reschedule IPI when the target must preempt.
//! - The cpufreq requests a run-queue change raises outside the tick (wake-up, sleep,
//!   switch) are kept on the CPU and evaluated at its next tick, under its domain's policy
//!   lock (never taken on the switch or wake-up path), or by its idle thread just before it
//!   stops its tick; an idle CPU keeps ticking while one is pending.
//! - Blocked averages of an idle run queue: an idle CPU stops its tick with blocked load left
//!   and the NOHZ idle balancer decays it remotely (`NOHZ_STATS_KICK`, [`balance`]), as Linux
//!   does, with `sched_balance=on` or `off` (the crate's `nohz::nohz_parts`); only without
//!   sched domains does its own tick keep running and decay them until they reach 0.
//! - Load balancing ([`balance`]): the tick's `sched_balance_trigger` raises `SCHED_SOFTIRQ`
//!   (`crate::softirq`), a busy tick may kick an idle CPU to balance the idle ones, and
//!   `schedule()` about to go idle runs the newidle balance with its rq unlocked.
//! - Work emulation ([`work`]): a thread runs `W` ns of work (ns of a biggest CPU at its top
//!   OPP) by spinning until its account, charged `capacity_orig × freq_scale` per ns of running
//!   at every switch and tick and at each frequency transition of its CPU's domain (from the
//!   transition's instant: [`freq_transition`]), reaches `W`; the completion instant is
//!   computed exactly at the update that crosses it (the rt-app calibration convention).

pub mod balance;
mod policy;
pub mod snapshot;
pub mod stop;

use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use asym_sched::balance::ActiveBalance;
use asym_sched::em::EnergyModel;
use asym_sched::features::{Feature, SchedFeatures};
use asym_sched::root_domain::RootDomain;
use asym_sched::rq::{Block, CpufreqUpdate, Rq, RqConfig, RqSnapshot};
use asym_sched::sched_core::{Pick, TickCurr};
use asym_sched::topology::{BoardDesc, CpuDesc, OppDesc, PerfDomainDesc, Topology};
use asym_sched::types::{Capacity, CpuId, CpuMask, Khz, MicroVolt, Nanos, SCHED_CAPACITY_SCALE};
use asym_sched::uclamp::TaskUclamp;
use asym_sched::wakeup::{WakeKind, WakerInfo};

use crate::arch;
use crate::arch::aarch64::context;
use crate::cmdline::Cmdline;
use crate::dt::{Platform, MAX_CPUS};
use crate::percpu::{current_cpu, PerCpu};
use crate::sync::{HandoverGuard, InitOnce, IrqSpinLock, IrqSpinLockGuard, LockRank};
use crate::task::{self, ExitStatus, Thread, ThreadId, ThreadState, MAX_THREADS};
use crate::tracing;
use alloc::boxed::Box;
use alloc::vec::Vec;

/// One CPU's scheduler state, under its run-queue lock.
#[derive(Debug)]
pub struct CpuSched {
    /// The policy crate's run queue.
    pub rq: Rq,
    /// The thread slot running now (`rq->curr`; the idle thread's when nothing runs).
    curr: usize,
    /// This CPU's idle thread (`rq->idle`).
    idle: usize,
    /// Context switches (`rq->nr_switches`).
    nr_switches: u64,
    /// A cpufreq request raised outside the tick, for the next tick.
    cpufreq_pending: Option<CpufreqUpdate>,
    /// This CPU's stopper thread (`cpu_stopper.thread`, `migration/N`), once spawned.
    stopper: Option<usize>,
    /// The stopper has work: it runs at the next `schedule()` here, before any fair task
    /// (the stop class is above every other; [`stop`]).
    stop_pending: bool,
    /// `rq->active_balance` with `rq->push_cpu`: the active balance in flight from this CPU
    /// (at most one; the stopper clears it when done).
    active_balance: Option<ActiveBalance>,
}

impl CpuSched {
    /// The thread slot running now.
    pub fn curr_slot(&self) -> usize {
        self.curr
    }

    /// Context switches so far.
    pub fn nr_switches(&self) -> u64 {
        self.nr_switches
    }

    /// Fair tasks on this run queue, the running one included (`rq->cfs.h_nr_running`).
    pub fn nr_running(&self) -> u32 {
        self.rq.nr_running()
    }

    /// Times the idle thread was switched in (`tick_nohz_get_idle_calls_cpu`).
    pub fn idle_calls(&self) -> u64 {
        self.rq.idle_calls()
    }

    /// Whether slot `s` is a fair task of this run queue's (neither the idle thread nor the
    /// stopper, which the policy crate's run queue does not hold).
    fn is_fair(&self, s: usize) -> bool {
        s != self.idle && Some(s) != self.stopper
    }
}

struct State {
    /// One locked run queue per CPU. On the heap: an `Rq` sized for every thread is tens of
    /// KiB, so they are built one at a time.
    cpus: &'static [IrqSpinLock<CpuSched>],
    /// From the DT's scheduling description, or [`fallback_topology`].
    topology: Topology,
    capacity: [Capacity; MAX_CPUS],
    /// Per CPU, `sd_llc_size` (`Topology::llc_size`), for `wake_wide` on every wake-up.
    llc_size: [u32; MAX_CPUS],
    board: Option<&'static BoardDesc>,
    /// Serialises [`set_features`] (writers only).
    features: IrqSpinLock<SchedFeatures>,
    /// The feature set in force, for readers ([`SchedFeatures::bits`]): read on every switch
    /// and wake-up, so not behind a lock.
    features_bits: AtomicU64,
    /// The energy model when EAS is possible on this board (`sched_is_eas_possible` without
    /// the governor and switch conditions, which [`eas_active`] adds at each read): asymmetric
    /// CPUs and a complete model from the DT's `dynamic-power-coefficient`s.
    em: Option<EnergyModel>,
}

static STATE: InitOnce<&'static State> = InitOnce::new();

/// Per CPU: `rq->curr`'s slot, readable without the run-queue lock (a copy of
/// [`CpuSched::curr`], stored with it): `current` for a wake-up's waker, which may be an
/// interrupt handler running on its own stack on behalf of the interrupted thread, as
/// Linux's `current` is.
static CURR: PerCpu<AtomicUsize> = PerCpu::new([const { AtomicUsize::new(0) }; MAX_CPUS]);

/// Per CPU: the running thread must call `schedule()` soon (Linux `TIF_NEED_RESCHED`).
static NEED_RESCHED: PerCpu<AtomicBool> = PerCpu::new([const { AtomicBool::new(false) }; MAX_CPUS]);
/// `rd->overutilized`: the root domain's flag, read lock-free on every wake-up and tick
/// (Linux `READ_ONCE(rd->overutilized)`), stored where a policy step says it changed.
static OVERUTILIZED: AtomicBool = AtomicBool::new(false);
/// `rd->overloaded`: set by the enqueue that gives a CPU its second task
/// (`WakeOutcome::overloaded`, the balancer's attaches), rewritten by the root level's
/// load-balance statistics; newidle balance reads it under `STICKY_OVERLOADED`.
pub(crate) static OVERLOADED: AtomicBool = AtomicBool::new(false);
/// When the root level's overutilized statistics are next due ([`root_stats_due`], ns).
static ROOT_STATS_NEXT: AtomicU64 = AtomicU64::new(0);
/// Every cpufreq domain runs schedutil (Linux rebuilds the perf domains on a governor change,
/// `sched_cpufreq_governor_change`): written by `cpufreq::set_governor`, read by
/// [`eas_active`]. False until cpufreq starts: without a cpufreq driver no CPU runs
/// schedutil, so EAS is not possible (`sched_is_eas_possible`).
static SCHEDUTIL_EVERYWHERE: AtomicBool = AtomicBool::new(false);
/// Per CPU: a cpufreq request waits for the CPU's next tick or its idle entry (written under
/// its rq lock, read by its idle thread).
static CPUFREQ_PENDING: PerCpu<AtomicBool> =
    PerCpu::new([const { AtomicBool::new(false) }; MAX_CPUS]);
/// `sched_uclamp_used`: some thread was given a clamp.
static UCLAMP_USED: AtomicBool = AtomicBool::new(false);
/// Per CPU: counter cycles spent in the tick's scheduler work and how many ticks (the bench's
/// numbers).
static TICK_CYC: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
static TICK_COUNT: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
/// Per CPU: counter cycles spent in wake-ups that woke a thread, and how many (the bench's
/// numbers).
static TTWU_CYC: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
static TTWU_COUNT: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
/// `bench=sched-costs`: wake-ups that chose among CPUs are timed by placement path
/// ([`placement_cost`]).
static PLACE_ON: AtomicBool = AtomicBool::new(false);
/// Per CPU and [`PlacementPath`]: `[placements, cycles placing, cycles in the whole wake-up]`.
static PLACE: PerCpu<[[AtomicU64; 3]; 3]> =
    PerCpu::new([const { [const { [const { AtomicU64::new(0) }; 3] }; 3] }; MAX_CPUS]);

/// The token passed across a switch for "no previous thread" (a CPU's first switch).
const NO_PREV: usize = usize::MAX;
/// Set in the token when the previous thread is dead (its stack is to be released).
const PREV_DEAD: usize = 1 << 31;
/// Set in the token when the previous thread left to be placed again (a wake-up by the next
/// thread, once the previous is off the CPU).
const PREV_MIGRATE: usize = 1 << 30;

/// Why a scheduler call was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedError {
    /// [`init`] has not run.
    NotInitialised,
    /// The CPU id is not one of this board's.
    NoSuchCpu(CpuId),
    /// `double_rq_lock` of a CPU with itself.
    SameCpu(CpuId),
    /// No such thread.
    NoSuchThread(ThreadId),
    /// The policy crate refused (message from its error).
    Rq(asym_sched::rq::RqError),
    /// A scheduler feature this kernel does not support yet.
    Unsupported(Feature),
}

impl fmt::Display for SchedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchedError::NotInitialised => write!(f, "sched: not initialised"),
            SchedError::NoSuchCpu(c) => write!(f, "sched: no cpu {}", c.0),
            SchedError::SameCpu(c) => write!(f, "sched: cpu {} locked with itself", c.0),
            SchedError::NoSuchThread(t) => write!(f, "sched: no thread {t:?}"),
            SchedError::Rq(e) => write!(f, "sched: {e}"),
            SchedError::Unsupported(feat) => {
                write!(f, "sched: feature {} is not supported", feat.name())
            }
        }
    }
}

/// How `__schedule` was entered (Linux's `sched_mode` plus the exit and yield paths).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// A voluntary call: a thread not `Running` is dequeued.
    Normal,
    /// Preemption on return from interrupt: the thread stays queued whatever its state.
    Preempt,
    /// `sched_yield`.
    Yield,
    /// The thread is dead: its last switch.
    Dead,
    /// The thread leaves its run queue to be woken (and so placed) again at once, on a CPU its
    /// new affinity allows: the next thread wakes it after the switch.
    Migrate,
}

/// Guest time (ns since the counter started).
pub fn now() -> Nanos {
    crate::time::now()
}

/// Builds the topology, energy-model check and cpufreq from the DT's scheduling description
/// (falling back to symmetric without cpufreq, with a message, when it is missing or bad),
/// one run queue per CPU, and applies the command line's `sched_features=` and `cpufreq.*`.
/// Call once on the boot CPU after the heap and the thread table, before the tick starts.
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
    let Some(topology) = topology.or_else(|| fallback_topology(plat)) else {
        crate::println!("sched: no topology can be built from the DT's CPUs");
        return;
    };
    let mut capacity = [Capacity(SCHED_CAPACITY_SCALE); MAX_CPUS];
    for (i, cap) in capacity.iter_mut().enumerate().take(nr) {
        *cap = topology.capacity_orig(CpuId(i as u16));
    }
    // The kernel places wake-ups energy-aware wherever EAS is possible, as Linux's
    // `sched_energy_aware` sysctl defaults to; `sched_features=NO_ENERGY_AWARE` turns it off.
    let mut features = SchedFeatures::default().with(Feature::ENERGY_AWARE, true);
    let mut cpufreq_opts: heapless::Vec<(&str, &str), 8> = heapless::Vec::new();
    let mut lb_on = balance::DEFAULT_ON;
    for word in cmd.sched_args.split_ascii_whitespace() {
        let Some((k, v)) = word.split_once('=') else {
            continue;
        };
        if k == "sched_balance" {
            match v {
                "on" => lb_on = true,
                "off" => lb_on = false,
                _ => crate::println!("cmdline: sched_balance={}: use on or off (ignored)", v),
            }
        } else if k == "sched_features" {
            if let Err(e) = features.apply_list(v) {
                crate::println!("cmdline: sched_features={}: {} (rest ignored)", v, e);
            }
            if features.enabled(Feature::DELAY_DEQUEUE) {
                crate::println!("cmdline: sched_features: DELAY_DEQUEUE is not supported by this kernel (ignored)");
                features = features.with(Feature::DELAY_DEQUEUE, false);
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
        // Room for every thread: a full run queue can then only be a bug.
        cfg.max_tasks = MAX_THREADS;
        cpus.push(IrqSpinLock::with_rank(
            CpuSched {
                rq: Rq::new(cfg, start),
                curr: i,
                idle: i,
                nr_switches: 0,
                cpufreq_pending: None,
                stopper: None,
                stop_pending: false,
                active_balance: None,
            },
            LockRank::rq(i),
        ));
        CURR.of(CpuId(i as u16)).store(i, Ordering::Relaxed);
    }
    let cpus: &'static [IrqSpinLock<CpuSched>] = Vec::leak(cpus);
    let mut em = None;
    if let Some(b) = board {
        match EnergyModel::from_topology(b, &topology) {
            Ok(m) if m.complete() && topology.eas_possible() => em = Some(m),
            Ok(_) => {}
            Err(e) => crate::println!("sched: energy model refused: {} (EAS off)", e),
        }
        match crate::cpufreq::init(plat, b, &topology, start, features) {
            // Every domain starts under schedutil; `cpufreq::set_governor` reports changes.
            Ok(()) => governors_changed(true),
            Err(e) => crate::println!("cpufreq: {}; cpufreq off", e),
        }
    }
    balance::init(&topology, cmd.hz.max(1), start, lb_on);
    let llc_size = core::array::from_fn(|i| topology.llc_size(CpuId(i as u16)));
    let _ = STATE.set(Box::leak(Box::new(State {
        cpus,
        topology,
        capacity,
        llc_size,
        board,
        features: IrqSpinLock::new(features),
        features_bits: AtomicU64::new(features.bits()),
        em,
    })));
    for (k, v) in cpufreq_opts {
        if let Err(e) = crate::cpufreq::apply_option(k, v) {
            crate::println!("cmdline: {}={}: {} (ignored)", k, v, e);
        }
    }
    for (i, lock) in cpus.iter().enumerate() {
        let cpu = CpuId(i as u16);
        if let Err(e) = task::spawn_idle(cpu, idle_main) {
            crate::println!("sched: cpu {}: no idle thread: {}", i, e);
        }
        match stop::spawn(cpu) {
            Ok(id) => lock.lock().stopper = Some(id.slot()),
            Err(e) => crate::println!("sched: cpu {}: no stopper thread: {}", i, e),
        }
        publish(&lock.lock());
    }
}

/// The topology of a DT without a scheduling description (no OPP tables): the DT's CPUs and
/// clusters, one performance domain per cluster, capacities from `capacity-dmips-mhz` alone
/// (all 1024 without it, or when only some CPUs have it). The domains' one OPP is a
/// placeholder, the same everywhere, so the capacity normalisation (`dmips × fmax`) reduces
/// to the DMIPS ratio, as Linux's `topology_normalize_cpu_scale` does without a frequency
/// reference; no cpufreq or energy model is built from it.
fn fallback_topology(plat: &Platform) -> Option<Topology> {
    const PLACEHOLDER_OPP: &[OppDesc] = &[OppDesc {
        freq: Khz(1_000_000),
        voltage: MicroVolt(0),
    }];
    let nr = plat.cpus.len().min(MAX_CPUS);
    let mut clusters: heapless::Vec<u16, MAX_CPUS> = heapless::Vec::new();
    let mut cpus: Vec<CpuDesc> = Vec::with_capacity(nr);
    for c in plat.cpus.iter().take(nr) {
        let pd = match clusters.iter().position(|&k| k == c.cluster) {
            Some(i) => i,
            None => {
                let _ = clusters.push(c.cluster);
                clusters.len() - 1
            }
        };
        cpus.push(CpuDesc {
            mpidr: c.mpidr,
            cluster: c.cluster,
            perf_domain: pd as u16,
            capacity_dmips_mhz: c.capacity_dmips_mhz,
            dynamic_power_coefficient: None,
            core: "",
        });
    }
    let pds: Vec<PerfDomainDesc> = clusters
        .iter()
        .map(|_| PerfDomainDesc {
            name: "cluster",
            opps: PLACEHOLDER_OPP,
            transition_latency_ns: 0,
        })
        .collect();
    let perf_domains: &'static [PerfDomainDesc] = Vec::leak(pds);
    let without_dmips: Vec<CpuDesc> = cpus
        .iter()
        .map(|c| CpuDesc {
            capacity_dmips_mhz: None,
            ..*c
        })
        .collect();
    let desc = |cpus: Vec<CpuDesc>| BoardDesc {
        name: "dt-fallback",
        cpus: Vec::leak(cpus),
        perf_domains,
    };
    // Some CPUs without capacity-dmips-mhz: all get 1024.
    Topology::from_board(&desc(cpus))
        .or_else(|_| Topology::from_board(&desc(without_dmips)))
        .ok()
}

/// CPUs with a run queue.
pub fn nr_cpus() -> usize {
    STATE.get().map_or(0, |s| s.cpus.len())
}

/// `arch_scale_cpu_capacity(cpu)`: 1024 before [`init`] or for an unknown CPU.
pub fn capacity_orig(cpu: CpuId) -> Capacity {
    STATE
        .get()
        .and_then(|s| s.capacity.get(cpu.index()).copied())
        .unwrap_or(Capacity(SCHED_CAPACITY_SCALE))
}

/// The topology built from the DT (`None` before [`init`]).
pub fn topology() -> Option<&'static Topology> {
    Some(&STATE.get()?.topology)
}

/// `sched_uclamp_used`: some thread was given a clamp.
pub fn uclamp_used() -> bool {
    UCLAMP_USED.load(Ordering::Relaxed)
}

/// `sched_energy_enabled()`: the energy model exists (EAS possible), every cpufreq domain runs
/// schedutil and `ENERGY_AWARE` is on. Lock-free: read on every wake-up.
pub fn eas_active() -> bool {
    STATE.get().is_some_and(|s| s.em.is_some())
        && ASYM_ONLINE.load(Ordering::Relaxed)
        && SCHEDUTIL_EVERYWHERE.load(Ordering::Relaxed)
        && features().enabled(Feature::ENERGY_AWARE)
}

/// The energy model wake-ups place with, while [`eas_active`].
fn energy_model() -> Option<&'static EnergyModel> {
    let st = STATE.get()?;
    eas_active().then_some(st.em.as_ref()).flatten()
}

/// The root domain's flags as they are now: `overutilized` (lock-free), maintained wherever
/// an energy model exists on asymmetric CPUs (the simulator's rule), and EAS.
pub fn root_domain() -> RootDomain {
    let tracked = STATE.get().is_some_and(|s| s.em.is_some());
    RootDomain {
        overutilized: tracked && OVERUTILIZED.load(Ordering::Relaxed),
        overloaded: OVERLOADED.load(Ordering::Relaxed),
        tracked,
        eas: eas_active(),
    }
}

/// `is_rd_overutilized`.
pub fn overutilized() -> bool {
    OVERUTILIZED.load(Ordering::Relaxed)
}

/// Stores the root domain's flag a policy step decided (`set_rd_overutilized`), with Linux's
/// `sched_overutilized` tracepoint when it changes (`trace_sched_overutilized_tp`). Two CPUs
/// deciding at once both store; only the one that flips the flag records it.
fn set_overutilized(v: Option<bool>) {
    if let Some(v) = v {
        if OVERUTILIZED.swap(v, Ordering::Relaxed) != v {
            crate::tracing::overutilized(v, online_mask().0);
        }
    }
}

/// Whether the online CPUs have more than one capacity (`sched_is_eas_possible`'s
/// `sched_asym_cpucap_active` over `cpu_active_mask`): with only one kind of CPU up, EAS has
/// nothing to choose between and stays off. Until [`online_cpus_changed`], every CPU of the DT
/// counts (the boot CPU alone runs no task before the secondaries are up).
static ASYM_ONLINE: AtomicBool = AtomicBool::new(true);

/// The online CPUs are no longer every CPU of the DT (after SMP bring-up left some down,
/// `maxcpus=` or a failed `CPU_ON`): the sched domains are rebuilt over the online CPUs
/// (Linux's `sched_init_smp` / `partition_sched_domains` over `cpu_active_mask`), and EAS is
/// possible only if they still differ in capacity. Not for interrupt context (it allocates).
pub fn online_cpus_changed() {
    let Some(st) = STATE.get() else { return };
    let asym = st.topology.nr_capacities(online_mask()) > 1;
    ASYM_ONLINE.store(asym, Ordering::Relaxed);
    if !asym && st.em.is_some() {
        crate::println!("sched: the online CPUs have one capacity: EAS off");
    }
    if balance::has_domains() && !balance::rebuild_sched_domains() {
        crate::println!("sched: sched domains not rebuilt over the online CPUs");
    }
}

/// A cpufreq domain changed governor: EAS needs schedutil on every domain (Linux
/// `sched_cpufreq_governor_change` → `rebuild_sched_domains_energy`).
pub fn governors_changed(all_schedutil: bool) {
    SCHEDUTIL_EVERYWHERE.store(all_schedutil, Ordering::Relaxed);
}

/// The board description parsed from the DT (`None`: no OPP tables).
pub fn board() -> Option<&'static BoardDesc> {
    STATE.get()?.board
}

/// Prints the scheduler's part of the boot banner: features, and cpufreq domains.
pub fn print_banner() {
    let Some(st) = STATE.get() else { return };
    crate::println!(
        "sched: {} (topology {}, EAS {}, load balancing {}), features {}",
        st.board.map_or("symmetric fallback", |_| "from the DT"),
        if st.topology.asym_cpucapacity() {
            "asymmetric"
        } else {
            "symmetric"
        },
        match (st.em.is_some(), eas_active()) {
            (true, true) => "on",
            (true, false) => "off",
            (false, _) => "impossible",
        },
        if balance::enabled() { "on" } else { "off" },
        features()
    );
    crate::cpufreq::print_domains();
}

fn cpu_lock(cpu: CpuId) -> Option<&'static IrqSpinLock<CpuSched>> {
    STATE.get()?.cpus.get(cpu.index())
}

/// Locks `cpu`'s run queue (`rq_lock_irqsave`).
pub fn rq_lock(cpu: CpuId) -> Result<IrqSpinLockGuard<'static, CpuSched>, SchedError> {
    STATE.get().ok_or(SchedError::NotInitialised)?;
    cpu_lock(cpu)
        .map(IrqSpinLock::lock)
        .ok_or(SchedError::NoSuchCpu(cpu))
}

/// Locks two run queues in the one lock order, lower CPU id first (Linux `double_rq_lock`).
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
        return Err(SchedError::SameCpu(a));
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
    STATE.get().map_or(SchedFeatures::default(), |s| {
        SchedFeatures::from_bits(s.features_bits.load(Ordering::Relaxed))
    })
}

/// Changes the feature set at run time on every run queue (Linux writing
/// `/sys/kernel/debug/sched/features`).
///
/// `DELAY_DEQUEUE` is refused ([`SchedError::Unsupported`]): a thread that blocks here always
/// leaves its run queue at once (its task goes back to the thread), so no task could stay
/// queued while its thread sleeps, nor be handed back by a later pick.
pub fn set_features(f: SchedFeatures) -> Result<(), SchedError> {
    if f.enabled(Feature::DELAY_DEQUEUE) {
        return Err(SchedError::Unsupported(Feature::DELAY_DEQUEUE));
    }
    let st = STATE.get().ok_or(SchedError::NotInitialised)?;
    let mut w = st.features.lock();
    *w = f;
    st.features_bits.store(f.bits(), Ordering::Relaxed);
    drop(w);
    for cpu in st.cpus {
        let mut g = cpu.lock();
        let _ = g.rq.update_rq_clock(now());
        g.rq.set_features(f);
    }
    Ok(())
}

/// What `cpu`'s run queue looked like at the end of its last change.
pub fn snapshot(cpu: CpuId) -> Option<RqSnapshot> {
    snapshot::read(cpu)
}

/// Publishes what others read about `cs` (at the end of every section under its lock that
/// changed it).
fn publish(cs: &CpuSched) {
    snapshot::publish(&cs.rq);
    CPUFREQ_PENDING
        .of(cs.rq.cpu())
        .store(cs.cpufreq_pending.is_some(), Ordering::Relaxed);
}

/// Whether `cpu` has nothing left for its tick to do while idle: nothing runs or is queued,
/// no cpufreq request pending and, only when there is no NOHZ idle balancer (no sched
/// domains), no blocked signals to decay and no removal waiting to be taken in; with one, it
/// decays them and takes removals in whether load balancing is on or off
/// (`balance::nohz_stats_active`, the crate's `nohz_parts`; see the module docs).
pub fn cpu_quiet(cpu: CpuId) -> bool {
    cpu_quiet_but_cpufreq(cpu) && !CPUFREQ_PENDING.of(cpu).load(Ordering::Relaxed)
}

/// [`cpu_quiet`] but for a pending cpufreq request.
fn cpu_quiet_but_cpufreq(cpu: CpuId) -> bool {
    // The two fields it needs, not a copy of the whole snapshot: an idle CPU asks this on
    // every pass of its idle loop (`cargo xtask bench switch --profile`).
    let Some((idle, blocked)) = snapshot::read_with(cpu, |s| {
        (
            s.idle,
            s.load_avg != 0 || s.runnable_avg != 0 || s.util.cfs.util_avg.0 != 0,
        )
    }) else {
        return false;
    };
    // A removal waiting in `cfs_rq->removed` (a thread that exited here, or slept here and
    // woke elsewhere) is blocked load like the rest: with the NOHZ idle balancer keeping
    // blocked load up to date, the tick stops and its next stats update takes the removal
    // in (`update_nohz_stats` → `clock_only`), as Linux leaves it for `update_blocked_averages`;
    // without one, the tick stays until its clock update has taken it.
    let pending = blocked || snapshot::removed_pending(cpu);
    idle && (!pending || balance::nohz_stats_active())
}

/// `nohz_balance_enter_idle` for `cpu`, whose tick just stopped.
fn nohz_enter_idle(cpu: CpuId) {
    if let Some(lock) = cpu_lock(cpu) {
        balance::nohz_enter_idle(&mut lock.lock());
    }
}

/// Makes `cpu` evaluate cpufreq at its next tick, restarting its tick if it stopped it (a
/// governor change on a domain whose CPUs are all idle).
pub fn cpufreq_kick(cpu: CpuId) {
    let Some(lock) = cpu_lock(cpu) else { return };
    {
        let mut g = lock.lock();
        let cs = &mut *g;
        if cs.cpufreq_pending.is_none() {
            cs.cpufreq_pending = Some(CpufreqUpdate { iowait: false });
        }
        publish(cs);
    }
    resched_cpu(cpu);
}

// ---- need-resched --------------------------------------------------------------------------

/// Whether the calling CPU's running thread should reschedule.
pub fn need_resched() -> bool {
    NEED_RESCHED.of(current_cpu()).load(Ordering::Acquire)
}

/// Asks `cpu` to reschedule (Linux `resched_curr`): the flag, and a reschedule IPI if it is
/// another CPU.
pub fn resched_cpu(cpu: CpuId) {
    NEED_RESCHED.of(cpu).store(true, Ordering::Release);
    if cpu != current_cpu() {
        let _ = crate::ipi::send(cpu, crate::ipi::IpiKind::Reschedule);
    }
}

/// The reschedule IPI's work (Linux `scheduler_ipi`): the sender set the flag already; this
/// makes sure it is seen on the way out of the interrupt.
pub fn on_resched_ipi(cpu: CpuId) {
    NEED_RESCHED.of(cpu).store(true, Ordering::Release);
}

/// Preempts the calling thread now if it should reschedule and may (thread context, IRQs
/// unmasked, preemption enabled): the check Linux does in `preempt_enable`.
pub fn preempt_check() {
    if !need_resched() || arch::irqs_masked() {
        return;
    }
    match task::current_slot() {
        Some(s) if task::slot(s).preempt_count.load(Ordering::Relaxed) == 0 => schedule(),
        _ => {}
    }
}

/// Kernel preemption on the way out of an IRQ handler (Linux `arm64_preempt_schedule_irq` →
/// `preempt_schedule_irq`), called by the IRQ vector with IRQs masked and the interrupted
/// context's `spsr`. Returns with every exception masked, for the vector's `eret`.
pub fn preempt_schedule_irq(spsr: u64) {
    let cpu = current_cpu();
    if !NEED_RESCHED.of(cpu).load(Ordering::Acquire) {
        return;
    }
    let Some(s) = task::current_slot() else {
        return;
    };
    if task::slot(s).preempt_count.load(Ordering::Relaxed) != 0 {
        return;
    }
    // Kernel code runs with the interrupted context's SError/debug masks; IRQs stay masked
    // until the run-queue lock's hand-over unmasks them.
    arch::daif_from_spsr_irq_masked(spsr);
    loop {
        schedule_mode(Mode::Preempt);
        arch::irq_save_disable();
        if !need_resched() {
            break;
        }
    }
    arch::mask_all_exceptions();
}

// ---- schedule ------------------------------------------------------------------------------

/// Gives up the CPU (Linux `schedule`): a thread that set itself asleep sleeps until woken;
/// a running one may go on at once or later. Returns with IRQs unmasked. From a thread with
/// no lock held.
pub fn schedule() {
    loop {
        schedule_mode(Mode::Normal);
        if !need_resched() {
            break;
        }
    }
}

/// `sched_yield`: the caller's request moves to the back, then `schedule()`.
pub fn yield_now() {
    schedule_mode(Mode::Yield);
}

/// The dead calling thread's last switch (its state is [`ThreadState::Dead`]).
pub(crate) fn schedule_dead() -> ! {
    schedule_mode(Mode::Dead);
    unreachable!("a dead thread was resumed")
}

fn schedule_mode(mode: Mode) {
    let Some(st) = STATE.get() else {
        return;
    };
    // Preemption off: this CPU stays ours until the switch (on an overflow stack, where
    // this does nothing, IRQs are masked anyway).
    task::preempt_disable();
    let cpu = current_cpu();
    if crate::sync::locks_held() != 0 {
        panic!(
            "schedule() on cpu {} with {} locks held",
            cpu.0,
            crate::sync::locks_held()
        );
    }
    let mut g = st.cpus[cpu.index() % st.cpus.len()].lock();
    let cs = &mut *g;
    let mut t = clock_update(cs);
    NEED_RESCHED.of(cpu).store(false, Ordering::Relaxed);
    let prev = cs.curr;
    let pt = task::slot(prev);
    let mut dead = false;
    if cs.is_fair(prev) {
        let id = pt.id(prev);
        account_stop(pt, t.0);
        match (mode, pt.state()) {
            (Mode::Preempt, _) | (Mode::Normal | Mode::Yield, ThreadState::Running) => {
                if mode == Mode::Yield {
                    policy::yield_curr(cs);
                }
            }
            (_, ThreadState::Dead) => {
                // block_task with DEQUEUE_SPECIAL (TASK_DEAD): its task waits in its slot for
                // `task_dead_fair` after its last switch (finish_task_switch).
                let mut parked = pt.parked.lock();
                match policy::block_dead(cs, id.task_id(), &mut parked) {
                    Ok(Block::Dequeued) => {}
                    Ok(Block::Delayed) => panic!(
                        "sched: cpu {}: dead thread {:?} left queued (DELAY_DEQUEUE is refused)",
                        cpu.0, id
                    ),
                    Err(e) => panic!("sched: cpu {}: dead thread {:?}: {}", cpu.0, id, e),
                }
                drop(parked);
                pt.on_rq.store(false, Ordering::Release);
                dead = true;
            }
            (_, state) => {
                if mode == Mode::Migrate && state != ThreadState::Sleeping {
                    pt.set_state(ThreadState::Sleeping);
                }
                let mut parked = pt.parked.lock();
                if let Err(e) = policy::deactivate_into(cs, id.task_id(), &mut parked) {
                    panic!("sched: cpu {}: sleeping thread {:?}: {}", cpu.0, id, e);
                }
                drop(parked);
                pt.on_rq.store(false, Ordering::Release);
            }
        }
    }
    let stopper = if cs.stop_pending { cs.stopper } else { None };
    let next = if let Some(s) = stopper {
        // The stop class first (`pick_next_task` → `pick_task_stop`): a fair task that was
        // running stays queued, put back (`put_prev_task_fair`), and is off this CPU once
        // the stopper runs.
        policy::put_prev(cs);
        s
    } else {
        let pick = policy::pick_first(&st.topology, cs);
        // sched_balance_newidle: its closed gate (no CPU overloaded) is decided here under
        // this rq's lock, as Linux decides it before `raw_spin_rq_unlock`; otherwise the
        // balance runs with this rq unlocked and IRQs still masked (Linux's unlock in
        // `__schedule`'s IRQs-off section), then the repick.
        if pick == Pick::Newidle && !balance::newidle_skipped_locked(cpu, cs, t) {
            publish(cs);
            let irq = g.unlock_irqs_masked();
            balance::sched_balance_newidle(cpu);
            g = st.cpus[cpu.index() % st.cpus.len()].lock_irqs_masked(irq);
            t = clock_update(&mut g);
        }
        let cs = &mut *g;
        match policy::pick_finish(&st.topology, cs, pick) {
            Some(id) => ThreadId::from_task_id(id).slot(),
            None => cs.idle,
        }
    };
    let cs = &mut *g;
    stash_cpufreq(cs);
    if next == prev && !dead {
        if cs.is_fair(prev) {
            account_start(cs, pt, t.0);
        }
        publish(cs);
        drop(g);
        cpufreq_after_switch();
        task::preempt_enable_no_resched();
        return;
    }
    let nt = task::slot(next);
    if next != cs.idle {
        let allowed = CpuMask(nt.affinity.load(Ordering::Relaxed));
        if !allowed.contains(cpu) {
            panic!(
                "sched: thread {:?} picked on cpu {}, outside its affinity {:?}",
                nt.id(next),
                cpu.0,
                allowed
            );
        }
        nt.cpu.store(cpu.0, Ordering::Relaxed);
        if cs.is_fair(next) {
            account_start(cs, nt, t.0);
        }
    } else {
        policy::idle_enter(cs);
    }
    nt.stats.cpus_seen.fetch_or(1 << cpu.0, Ordering::Relaxed);
    nt.stats.nr_switches.fetch_add(1, Ordering::Relaxed);
    if prev == cs.idle {
        // Leaving idle (Linux `tick_nohz_idle_exit`).
        crate::timer::nohz_restart_tick(cpu);
    }
    let ps = if Some(prev) == cs.stopper {
        // Done with its work, it waits for more (`cpu_stopper_thread` sleeps).
        asym_trace::ftrace::PrevState::Sleeping
    } else {
        prev_state(mode, pt.state(), prev == cs.idle)
    };
    let traced = tracing::switch(prev, ps, next, cs.idle);
    // The meter's busy interval turns at the trace's `sched_switch` instant, the one the
    // trace analyser's energy uses (the clock update `t` came before the pick).
    if next == cs.idle {
        crate::energy::busy_end(cpu, traced.unwrap_or(t.0));
    } else if prev == cs.idle {
        crate::energy::busy_start(cpu, traced.unwrap_or(t.0));
    }
    cs.curr = next;
    CURR.of(cpu).store(next, Ordering::Relaxed);
    cs.nr_switches += 1;
    publish(cs);
    let token = if dead {
        prev | PREV_DEAD
    } else if mode == Mode::Migrate {
        prev | PREV_MIGRATE
    } else {
        prev
    };
    g.into_handover();
    let ttbr = crate::user::ttbr_of(next);
    if arch::uspace::current_ttbr1() != ttbr {
        // SAFETY: `next`'s address space (or the empty table) lives until `next` is reaped,
        // after its own last switch, which loads another TTBR1 here first.
        unsafe { arch::uspace::switch_ttbr1(ttbr) };
    }
    if dead {
        context::exit_to(&pt.ctx, &nt.ctx, token);
    }
    let from = context::switch_to(&pt.ctx, &nt.ctx, token);
    finish_task_switch(from);
    cpufreq_after_switch();
    task::preempt_enable_no_resched();
}

/// After a switch to a thread (not to idle): answers the cpufreq request the switch's dequeue
/// or put-prev left pending, with the run queue as the switch left it, as Linux's
/// `cpufreq_update_util` inside `__schedule`'s dequeue does (a thread that goes to sleep takes
/// its `util_est` and its clamp off the CPU's frequency request now, not at the next tick).
/// A CPU that went idle answers it in its idle loop ([`cpufreq_idle_entry`]) or leaves it to
/// its tick.
fn cpufreq_after_switch() {
    let cpu = current_cpu();
    if CPUFREQ_PENDING.of(cpu).load(Ordering::Relaxed) {
        answer_pending_cpufreq(cpu, |cs| cs.curr != cs.idle);
    }
}

/// Takes `cpu`'s pending cpufreq request under its rq lock if `now_ok` says this is the
/// moment (else it stays pending), and answers it once the lock is dropped (the policy lock
/// ranks below the rq locks).
fn answer_pending_cpufreq(cpu: CpuId, now_ok: impl FnOnce(&CpuSched) -> bool) {
    let Some(lock) = cpu_lock(cpu) else { return };
    let (upd, features) = {
        let mut g = lock.lock();
        let cs = &mut *g;
        if !now_ok(cs) {
            return;
        }
        let upd = take_cpufreq(cs);
        publish(cs);
        (upd, cs.rq.features())
    };
    crate::cpufreq::update_util(cpu, now(), upd, features);
}

/// `sched_switch`'s `prev_state` of a thread leaving the CPU in `mode` in `state`.
fn prev_state(mode: Mode, state: ThreadState, idle: bool) -> asym_trace::ftrace::PrevState {
    use asym_trace::ftrace::PrevState;
    if idle {
        return PrevState::Running;
    }
    match (mode, state) {
        (Mode::Dead, _) | (_, ThreadState::Dead) => PrevState::Dead,
        (Mode::Preempt, _) => PrevState::Preempted,
        (Mode::Yield, ThreadState::Running) => PrevState::Running,
        (_, ThreadState::Running) => PrevState::Preempted,
        _ => PrevState::Sleeping,
    }
}

/// The second half of a switch, on the incoming thread (Linux `finish_task_switch`): releases
/// the run-queue lock its predecessor handed over (and unmasks IRQs); then, for a dead
/// predecessor, `prev->sched_class->task_dead(prev)` ([`task_dead`]) and the release of its
/// stack, in Linux's order (`task_dead`, `put_task_stack`, `put_task_struct_rcu_user`).
fn finish_task_switch(token: usize) {
    let Some(st) = STATE.get() else { return };
    let cpu = current_cpu();
    let g: HandoverGuard<'_, CpuSched> = st.cpus[cpu.index() % st.cpus.len()].take_handover();
    drop(g);
    if token == NO_PREV {
        return;
    }
    let prev = token & !(PREV_DEAD | PREV_MIGRATE);
    if token & PREV_DEAD != 0 {
        task_dead(cpu, prev);
        task::reap(prev);
    } else if token & PREV_MIGRATE != 0 {
        wake_slot(prev);
    }
}

/// `task_dead_fair` for the thread in slot `s`, which died on `cpu` (this CPU, preemption
/// off) and has switched out for good: no run-queue lock held, as Linux calls it after
/// `finish_lock_switch`. Its policy task, parked by its last `schedule()` (`block_task` with
/// `DEQUEUE_SPECIAL`), leaves `cpu`'s cfs_rq through `cpu`'s removed load, synced to the PELT
/// clocks `cpu` published at the switch; `cpu`'s owner takes it in at its next clock update
/// (as a wake-up that moves a task away leaves it). Until then — through the pick, a newidle
/// balance and the switch — its signals stay on the cfs_rq as blocked load, as in Linux.
/// Out of line and cold: every switch passes through [`finish_task_switch`], few are exits.
#[cold]
#[inline(never)]
fn task_dead(cpu: CpuId, s: usize) {
    let t = task::slot(s);
    let Some(mut task) = t.parked.lock().take() else {
        panic!(
            "sched: cpu {}: dead thread in slot {} has no parked task",
            cpu.0, s
        );
    };
    let Some(snap) = snapshot::read(cpu) else {
        panic!(
            "sched: cpu {}: dead thread in slot {}: no run queue",
            cpu.0, s
        );
    };
    match policy::task_dead(&snap, &mut task) {
        Ok(r) => snapshot::add_removed(cpu, r),
        Err(e) => panic!("sched: cpu {}: dead thread in slot {}: {}", cpu.0, s, e),
    }
}

/// A new thread's first code (`ret_from_fork` → Linux `schedule_tail`): finish the switch and
/// enable preemption, which its first switch left disabled.
pub extern "C" fn schedule_tail(token: usize) {
    finish_task_switch(token);
    task::preempt_enable_no_resched();
}

/// Starts running threads on the calling CPU (the end of its boot): switches from the boot
/// stack to its idle thread, which picks whatever is runnable.
pub fn start_cpu(cpu: CpuId) -> ! {
    let Some(st) = STATE.get() else {
        arch::park();
    };
    arch::irq_save_disable();
    // TTBR1 walks on, on the empty user table, before any thread (and so any EL0 task) runs.
    arch::uspace::init_cpu();
    let g = st.cpus[cpu.index()].lock();
    let idle = g.idle;
    g.into_handover();
    context::start_first(&task::slot(idle).ctx, NO_PREV)
}

/// An idle thread (Linux `do_idle`): reschedules when there is work, else lets the tick stop
/// when nothing is due (NOHZ) and waits for an interrupt. `wfi` is entered with IRQs masked
/// after the last check, so an interrupt in between is not missed: it wakes `wfi` and is
/// taken right after.
fn idle_main(cpu: usize) {
    let cpu = CpuId(cpu as u16);
    loop {
        if NEED_RESCHED.of(cpu).load(Ordering::Acquire) {
            schedule();
            continue;
        }
        balance::nohz_run_idle_balance(cpu, now());
        cpufreq_idle_entry(cpu);
        root_stats_idle_entry(cpu);
        let quiet = cpu_quiet(cpu);
        let irq = arch::irq_save_disable();
        if !NEED_RESCHED.of(cpu).load(Ordering::Acquire) {
            if quiet {
                if crate::timer::nohz_stop_tick(cpu) {
                    nohz_enter_idle(cpu);
                }
            } else if crate::timer::tick_stopped(cpu) {
                // Something became due while the tick was off (a cpufreq kick).
                crate::timer::nohz_restart_tick(cpu);
            }
            tracing::cpu_idle(true);
            arch::wfi();
            tracing::cpu_idle(false);
        }
        arch::irq_restore(irq);
    }
}

/// A CPU about to idle while the root domain is overutilized runs the root level's statistics
/// when they are due, as its tick does ([`tick`]; with load balancing on). A stand-in, as the
/// tick's is, for the `CPU_IDLE` balances of the idle ticks Linux's cpuidle governor keeps
/// for short predicted idles (docs/ARCHITECTURE.md, audit item 3): without it a system that
/// went quiet kept the flag until some CPU happened to tick (a pending cpufreq request kept
/// one alive), and EAS stayed off for the next wake-ups.
fn root_stats_idle_entry(cpu: CpuId) {
    if OVERUTILIZED.load(Ordering::Relaxed) {
        root_stats_if_due(cpu, now());
    }
}

/// With load balancing on, the root level's statistics for the overutilized flag once per
/// root interval ([`root_stats_due`]), from `cpu`'s tick or idle entry (a deliberate
/// difference from Linux: on Linux the ticks the cpuidle governor keeps on idle CPUs for
/// short predicted idles run the `CPU_IDLE` balances that clear the flag; this idle loop stops
/// the tick whenever nothing is due, so a quiet system would keep the flag;
/// docs/ARCHITECTURE.md, audit item 3).
fn root_stats_if_due(cpu: CpuId, now: Nanos) {
    let Some(st) = STATE.get() else { return };
    let rd = root_domain();
    if rd.tracked && balance::enabled() && root_stats_due(now) {
        set_overutilized(policy::root_stats_overutilized(&rd, cpu, st.cpus.len()));
    }
}

/// A CPU about to stop its tick answers the cpufreq request its switch to idle left pending
/// (the sleeping task's dequeue changed the root cfs_rq's utilisation) first, with the signals
/// as the dequeue left them. Linux runs schedutil inside the dequeue (`cfs_rq_util_change` →
/// `cpufreq_update_util`), and its idle CPU then stops its tick with the blocked averages
/// untouched until the NOHZ idle balancer decays them. Left pending, the request kept the tick
/// alive just for itself, and that tick answered it up to a tick later, after decaying the
/// blocked averages (a periodic task's cluster then fell an OPP lower than Linux's between its
/// runs). A CPU that keeps its tick anyway (a timer due before it) leaves the request to the
/// tick, as every other request raised outside the tick is.
fn cpufreq_idle_entry(cpu: CpuId) {
    if !CPUFREQ_PENDING.of(cpu).load(Ordering::Relaxed)
        || !cpu_quiet_but_cpufreq(cpu)
        || !crate::timer::tick_would_stop(cpu)
    {
        return;
    }
    // Something to run after all: schedule() takes it, the request stays pending.
    answer_pending_cpufreq(cpu, |cs| cs.curr == cs.idle && cs.rq.nr_running() == 0);
}

/// `update_rq_clock` to now and the removals other CPUs queued taken in (before any PELT
/// update), then the frequency scale the cpufreq side last published (the interval just
/// accounted ran at the previous one, as at the tick).
fn clock_update(cs: &mut CpuSched) -> Nanos {
    let t = clock_only(cs);
    let cpu = cs.rq.cpu();
    cs.rq
        .set_freq_scale(Capacity(crate::cpufreq::arch_freq_scale(cpu)));
    t
}

/// The first half of [`clock_update`]: `update_rq_clock` and the removed load.
fn clock_only(cs: &mut CpuSched) -> Nanos {
    let t = now();
    let _ = cs.rq.update_rq_clock(t);
    let cpu = cs.rq.cpu();
    if snapshot::removed_pending(cpu) {
        cs.rq.apply_removed(snapshot::take_removed(cpu));
    }
    t
}

/// The cpufreq request to answer now: the run queue's own (raised since its last take) merged
/// with the one stashed for the tick ([`stash_cpufreq`]); either may be absent.
fn take_cpufreq(cs: &mut CpuSched) -> Option<CpufreqUpdate> {
    let upd = cs.rq.take_cpufreq_update();
    match cs.cpufreq_pending.take() {
        Some(p) => Some(CpufreqUpdate {
            iowait: p.iowait || upd.is_some_and(|u| u.iowait),
        }),
        None => upd,
    }
}

fn stash_cpufreq(cs: &mut CpuSched) {
    if let Some(u) = cs.rq.take_cpufreq_update() {
        let iowait = u.iowait || cs.cpufreq_pending.is_some_and(|p| p.iowait);
        cs.cpufreq_pending = Some(CpufreqUpdate { iowait });
    }
}

/// Per CPU: the instant (guest ns) of its domain's latest frequency transition that the thread
/// running there has not yet taken into its work account ([`freq_rerate`]; 0: none).
static RERATE_AT: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);

/// A frequency transition of the cpufreq domain of `cpus` completed at `at` (cpufreq, after it
/// stored the new `arch_freq_scale`): each of those CPUs running a thread re-rates its work
/// account from that instant ([`freq_rerate`]) — this CPU at once, the others through
/// [`IpiKind::FreqChange`](crate::ipi::IpiKind::FreqChange) — so emulated work speeds up or
/// slows down when the frequency changes, as on a board (and in the simulator), not at the
/// CPU's next tick or switch. Idle CPUs are left alone: the switch to a thread takes the new
/// scale.
pub(crate) fn freq_transition(cpus: CpuMask, at: Nanos) {
    let irq = arch::irq_save_disable();
    let me = current_cpu();
    let online = online_mask();
    for cpu in cpus.iter() {
        if !online.contains(cpu) || snapshot::read_with(cpu, |s| s.idle).unwrap_or(true) {
            continue;
        }
        RERATE_AT.of(cpu).fetch_max(at.0.max(1), Ordering::AcqRel);
        if cpu == me {
            freq_rerate(cpu);
        } else {
            // From interrupt context (the driver's timer): no yield, as for the NOHZ kick.
            let _ = crate::ipi::send_no_yield(cpu, crate::ipi::IpiKind::FreqChange);
        }
    }
    arch::irq_restore(irq);
}

/// On `cpu` (IRQs masked): the running thread's work account takes the frequency scale of the
/// transition [`freq_transition`] recorded, from that transition's instant — the account up to
/// it at the old rate, from it at the new — unless a switch or tick since then already started
/// it at the new scale. Its [`work`] loop, woken by the interrupt that brought it here, then
/// waits for the completion the new rate predicts.
pub(crate) fn freq_rerate(cpu: CpuId) {
    let at = RERATE_AT.of(cpu).swap(0, Ordering::AcqRel);
    if at == 0 {
        return;
    }
    let Some(lock) = cpu_lock(cpu) else { return };
    let mut g = lock.lock();
    let cs = &mut *g;
    let t = clock_update(cs);
    if !cs.is_fair(cs.curr) {
        publish(cs);
        return;
    }
    let th = task::slot(cs.curr);
    if th.work.since.load(Ordering::Relaxed) < at {
        let at = at.min(t.0);
        account_stop(th, at);
        account_start(cs, th, at);
    }
    publish(cs);
}

/// Brings a running thread's time and work account up to `now_ns` and stops them.
fn account_stop(t: &Thread, now_ns: u64) {
    let start = t.stats.exec_start.load(Ordering::Relaxed);
    t.stats
        .runtime_ns
        .fetch_add(now_ns.saturating_sub(start), Ordering::Relaxed);
    let since = t.work.since.load(Ordering::Relaxed);
    let rate = t.work.rate.load(Ordering::Relaxed);
    let dt = now_ns.saturating_sub(since);
    let done = t.work.done.load(Ordering::Relaxed);
    let target = t.work.target.load(Ordering::Relaxed);
    let after = done.saturating_add(dt.saturating_mul(rate));
    if done < target && after >= target && rate > 0 {
        // The exact instant the work completed, between two updates.
        let at = since + (target - done).div_ceil(rate);
        t.work.completed_at.store(at, Ordering::Relaxed);
    }
    t.work.done.store(after, Ordering::Relaxed);
    t.work.since.store(now_ns, Ordering::Relaxed);
    t.work.rate.store(0, Ordering::Release);
}

/// Starts a thread's time and work account at `now_ns` on `cs`'s CPU.
fn account_start(cs: &CpuSched, t: &Thread, now_ns: u64) {
    t.stats.exec_start.store(now_ns, Ordering::Relaxed);
    t.work.since.store(now_ns, Ordering::Relaxed);
    let rate = u64::from(cs.rq.capacity_orig().0) * u64::from(cs.rq.freq_scale().0);
    t.work.rate.store(rate, Ordering::Release);
}

// ---- the tick ------------------------------------------------------------------------------

/// The scheduler tick on `cpu` (Linux `sched_tick`), from the timer interrupt.
pub fn tick(cpu: CpuId) {
    let Some(st) = STATE.get() else { return };
    let Some(lock) = st.cpus.get(cpu.index()) else {
        return;
    };
    let t0 = arch::counter();
    let rd = root_domain();
    let root_stats_next = Nanos(ROOT_STATS_NEXT.load(Ordering::Relaxed));
    let (upd, feat, t, steps) = {
        let mut g = lock.lock();
        let cs = &mut *g;
        let t = clock_only(cs);
        let curr = if cs.is_fair(cs.curr) {
            TickCurr::Fair
        } else if cs.curr == cs.idle {
            TickCurr::Idle
        } else {
            TickCurr::Other
        };
        let thread = task::slot(cs.curr);
        if curr == TickCurr::Fair {
            // The interval just accounted ran at the previous frequency scale.
            account_stop(thread, t.0);
        }
        cs.rq
            .set_freq_scale(Capacity(crate::cpufreq::arch_freq_scale(cpu)));
        // `idle_cpu` for the balance trigger and the NOHZ kick is the crate's: a thread other
        // than the idle one on the CPU (the stopper too), or tasks queued (a wake-up enqueued
        // one the CPU has not switched to yet), make the CPU busy.
        let steps = policy::tick(&st.topology, cs, &rd, t, curr, root_stats_next);
        if curr == TickCurr::Fair {
            account_start(cs, thread, t.0);
        }
        if steps.resched.is_yes() {
            NEED_RESCHED.of(cpu).store(true, Ordering::Release);
        }
        let upd = take_cpufreq(cs);
        publish(cs);
        (upd, cs.rq.features(), t, steps)
    };
    set_overutilized(steps.overutilized);
    if let Some(next) = steps.root_stats {
        // Without load balancing, the root level's statistics where the softirq would run: one
        // CPU per interval, the first whose claim lands (lock-free, so none waits).
        let claimed = ROOT_STATS_NEXT
            .compare_exchange(
                root_stats_next.0,
                next.0,
                Ordering::Relaxed,
                Ordering::Relaxed,
            )
            .is_ok();
        if claimed {
            set_overutilized(policy::root_stats_overutilized(
                &root_domain(),
                cpu,
                st.cpus.len(),
            ));
        }
    }
    // sched_balance_trigger: the softirq runs on this interrupt's exit, before the reschedule
    // at its return.
    if steps.softirq && balance::has_domains() {
        crate::softirq::raise_softirq(crate::softirq::SCHED_SOFTIRQ);
    }
    if steps.nohz_kick {
        if let Some(this) = snapshot::read(cpu) {
            balance::nohz_balancer_kick(cpu, &this, t);
        }
    }
    // With load balancing on the kernel still runs the root statistics on their interval as
    // well.
    root_stats_if_due(cpu, t);
    crate::cpufreq::update_util(cpu, t, upd, feat);
    TICK_CYC
        .of(cpu)
        .fetch_add(arch::counter() - t0, Ordering::Relaxed);
    TICK_COUNT.of(cpu).fetch_add(1, Ordering::Relaxed);
}

/// Whether this tick runs the root level's statistics for the overutilized flag
/// ([`policy::root_stats_overutilized`]): once per root-domain balance interval, by whichever
/// CPU ticks first after it expired (a lock-free claim, so one CPU per interval and none
/// waits). The interval is the root level's `sd->max_interval` (`sd_init`: twice the span's
/// weight in ms), where a balanced domain's `balance_interval` settles; Linux's busy CPUs
/// wait `busy_factor` times longer.
fn root_stats_due(now: Nanos) -> bool {
    let Some(st) = STATE.get() else { return false };
    let due = ROOT_STATS_NEXT.load(Ordering::Relaxed);
    if now.0 < due {
        return false;
    }
    let interval_ns = asym_sched::root_domain::root_stats_interval_ns(st.cpus.len());
    ROOT_STATS_NEXT
        .compare_exchange(
            due,
            now.0 + interval_ns,
            Ordering::Relaxed,
            Ordering::Relaxed,
        )
        .is_ok()
}

/// `(ticks, guest ns)` spent in [`tick`] on `cpu` so far.
pub fn tick_cost(cpu: CpuId) -> (u64, u64) {
    (
        TICK_COUNT.of(cpu).load(Ordering::Relaxed),
        crate::time::cyc_to_ns(TICK_CYC.of(cpu).load(Ordering::Relaxed)),
    )
}

// ---- wake-up -------------------------------------------------------------------------------

fn online_mask() -> CpuMask {
    CpuMask(crate::smp::online_mask())
}

/// Places and enqueues a new thread (Linux `wake_up_new_task`, fork balancing included). A
/// refusal (its run queue full) is the caller's to report: the thread is then on no run queue.
pub(crate) fn wake_up_new_thread(id: ThreadId) -> Result<(), SchedError> {
    let st = STATE.get().ok_or(SchedError::NotInitialised)?;
    let t = task::slot(id.slot());
    let params = t.sched.lock().params;
    if params.uclamp != (0, 1024) {
        UCLAMP_USED.store(true, Ordering::Relaxed);
    }
    let mut task = policy::new_task(id, &params).map_err(SchedError::Rq)?;
    let online = online_mask();
    let rd = root_domain();
    let mut snaps = snapshot::Snapshots::new();
    if policy::needs_snapshots(params.affinity, online) {
        snapshot::read_all(&mut snaps, st.cpus.len());
    }
    let irq = arch::irq_save_disable();
    let this = current_cpu();
    arch::irq_restore(irq);
    let target = policy::select_cpu(
        &st.topology,
        &task,
        this,
        this,
        WakeKind::Fork,
        online,
        &snaps,
        rd,
        // A fork records no wakee (`record_wakee` is on the wake-up path only).
        WakerInfo::default(),
    );
    let mut g = st.cpus[target.index()].lock();
    let cs = &mut *g;
    clock_update(cs);
    t.cpu.store(target.0, Ordering::Relaxed);
    task.cpus_allowed = params.affinity;
    let outcome = policy::activate(&st.topology, cs, task, WakeKind::Fork, false, &rd)
        .map_err(|e| SchedError::Rq(e.reason))?;
    t.on_rq.store(true, Ordering::Release);
    tracing::set_nice(id.slot(), params.nice);
    tracing::wakeup(id.slot(), target, true);
    publish(cs);
    drop(g);
    set_overutilized(outcome.overutilized);
    if outcome.overloaded {
        OVERLOADED.store(true, Ordering::Relaxed);
    }
    if outcome.resched.is_yes() {
        resched_cpu(target);
    }
    preempt_check();
    Ok(())
}

/// Wakes thread `id` if it sleeps (Linux `wake_up_process`); false if it was not asleep.
pub fn try_to_wake_up(id: ThreadId) -> bool {
    let Some(t) = task::get(id) else {
        return false;
    };
    let woke = ttwu(id.slot(), t);
    preempt_check();
    woke
}

/// Wakes the thread in slot `s` (a wait queue's waiter, a timer's sleeper).
pub(crate) fn wake_slot(s: usize) -> bool {
    ttwu(s, task::slot(s))
}

fn ttwu(s: usize, t: &'static Thread) -> bool {
    let t0 = arch::counter();
    let mut path = None;
    let woke = ttwu_inner(s, t, &mut path);
    if let Some(p) = path {
        placement_wakeup_done(p, t0);
    }
    if woke {
        // IRQs may be on: the CPU read now is where most of the work ran, good enough for a
        // benchmark's average.
        let cpu = current_cpu();
        TTWU_CYC
            .of(cpu)
            .fetch_add(arch::counter() - t0, Ordering::Relaxed);
        TTWU_COUNT.of(cpu).fetch_add(1, Ordering::Relaxed);
    }
    woke
}

/// `(wake-ups, guest ns)` `try_to_wake_up` spent on `cpu` since [`ttwu_cost_reset`].
pub fn ttwu_cost(cpu: CpuId) -> (u64, u64) {
    (
        TTWU_COUNT.of(cpu).load(Ordering::Relaxed),
        crate::time::cyc_to_ns(TTWU_CYC.of(cpu).load(Ordering::Relaxed)),
    )
}

/// Zeroes every CPU's wake-up cost counters.
pub fn ttwu_cost_reset() {
    for (_, a) in TTWU_CYC.iter().chain(TTWU_COUNT.iter()) {
        a.store(0, Ordering::Relaxed);
    }
}

/// How `select_task_rq_fair` placed a wake-up that chose among CPUs (`bench=sched-costs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlacementPath {
    /// `find_energy_efficient_cpu` over the energy model: EAS active, the root domain not
    /// overutilized, and the task's `task_util_est` (or its `uclamp_min`) not zero, so it
    /// computed energies rather than returning `prev_cpu` at once. (The test reads the task's
    /// signals before `select_task_rq_fair` syncs them to `prev_cpu`'s clock, which can only
    /// lower `util_avg`, never its `util_est`; with uclamp in use a task of zero utilisation
    /// counts here too.)
    Eas = 0,
    /// `find_energy_efficient_cpu` entered but returned `prev_cpu` at once (the task's
    /// utilisation is zero).
    EasNoUtil = 1,
    /// Not EAS (overutilized, or EAS off): `wake_affine` and `select_idle_sibling`.
    Capacity = 2,
}

/// Starts (`on`) or stops timing the placement of wake-ups that choose among CPUs.
pub fn placement_timing(on: bool) {
    PLACE_ON.store(on, Ordering::Relaxed);
}

/// Zeroes every CPU's placement timing.
pub fn placement_cost_reset() {
    for (_, per) in PLACE.iter() {
        for a in per.iter().flatten() {
            a.store(0, Ordering::Relaxed);
        }
    }
}

/// `(placements, guest ns placing, guest ns in the whole wake-ups)` by `path`, every CPU
/// together, since [`placement_cost_reset`]: placing is reading every CPU's snapshot and
/// `select_task_rq`; the whole wake-up is [`try_to_wake_up`]'s.
pub fn placement_cost(path: PlacementPath) -> (u64, u64, u64) {
    let mut out = [0u64; 3];
    for (_, per) in PLACE.iter() {
        for (o, a) in out.iter_mut().zip(&per[path as usize]) {
            *o += a.load(Ordering::Relaxed);
        }
    }
    (
        out[0],
        crate::time::cyc_to_ns(out[1]),
        crate::time::cyc_to_ns(out[2]),
    )
}

#[inline(never)]
fn placement_done(t0: u64, rd: &RootDomain, task: &asym_sched::rq::Task) -> PlacementPath {
    let t1 = arch::counter();
    let path = if !rd.eas || rd.overutilized {
        PlacementPath::Capacity
    } else if asym_sched::util_est::task_util_est(&task.avg).0 == 0 && !uclamp_used() {
        PlacementPath::EasNoUtil
    } else {
        PlacementPath::Eas
    };
    let irq = arch::irq_save_disable();
    let p = &PLACE.of(current_cpu())[path as usize];
    p[0].fetch_add(1, Ordering::Relaxed);
    p[1].fetch_add(t1 - t0, Ordering::Relaxed);
    arch::irq_restore(irq);
    path
}

#[inline(never)]
fn placement_wakeup_done(path: PlacementPath, t0: u64) {
    let irq = arch::irq_save_disable();
    PLACE.of(current_cpu())[path as usize][2].fetch_add(arch::counter() - t0, Ordering::Relaxed);
    arch::irq_restore(irq);
}

/// `path`: set to how the wake-up was placed when it chose among CPUs with
/// [`PLACE_ON`] set.
fn ttwu_inner(s: usize, t: &'static Thread, path: &mut Option<PlacementPath>) -> bool {
    let Some(st) = STATE.get() else { return false };
    let pi = t.sched.lock();
    if t.state() != ThreadState::Sleeping {
        return false;
    }
    let id = t.id(s);
    // ttwu_runnable: it has not got round to leaving its run queue (it is about to call
    // schedule(), or was preempted on the way): it only needs to be running again.
    // The balancer may move it meanwhile: its rq is locked as `task_rq_lock` does.
    if t.on_rq.load(Ordering::Acquire) {
        let (mut g, cpu) = lock_task_rq(st, t, id);
        if t.on_rq.load(Ordering::Relaxed) {
            t.set_state(ThreadState::Running);
            tracing::waking(s, CpuId(cpu));
            tracing::wakeup(s, CpuId(cpu), false);
            let cs = &mut *g;
            let mut resched = false;
            if cs.curr != s {
                clock_update(cs);
                resched = policy::check_preempt(cs, id.task_id()).is_yes();
                publish(cs);
            }
            drop(g);
            if resched {
                resched_cpu(CpuId(cpu));
            }
            return true;
        }
        drop(g);
    }
    t.set_state(ThreadState::Waking);
    // Its registers and stack are still in use until its CPU has switched away (and that
    // CPU published its snapshot before switching: the PELT clocks read below are at least
    // as new as the task's dequeue).
    t.ctx.wait_off_cpu();
    // Moved out of the thread's slot once; the enqueue moves it into the run queue.
    let mut slot = t.parked.lock().take();
    let Some(task) = slot.as_mut() else {
        panic!("sched: sleeping thread {id:?} has no parked task");
    };
    task.cpus_allowed = pi.params.affinity;
    t.affinity.store(pi.params.affinity.0, Ordering::Relaxed);
    let prev = CpuId(t.cpu.load(Ordering::Relaxed));
    tracing::waking(s, prev);
    let this = current_cpu();
    let online = online_mask();
    let rd = root_domain();
    let mut snaps = snapshot::Snapshots::new();
    let choice = policy::needs_snapshots(pi.params.affinity, online);
    let timed = (choice && PLACE_ON.load(Ordering::Relaxed)).then(arch::counter);
    let mut waker = WakerInfo::default();
    if choice {
        snapshot::read_all(&mut snaps, st.cpus.len());
        // `current` (this CPU's running thread, also when an interrupt handler wakes on its
        // behalf) records the wakee. IRQs are masked under `pi`, so `current` cannot change
        // and its own wake-ups cannot interleave with this one.
        let cur = task::slot(CURR.of(this).load(Ordering::Relaxed));
        let mut flips = cur.wakee.load();
        let hz = u64::from(crate::timer::hz().max(1));
        waker = policy::waker_info(
            st.llc_size[this.index() % MAX_CPUS],
            &mut flips,
            id.task_id(),
            &t.wakee.load(),
            now().0 / (1_000_000_000 / hz),
            hz,
        );
        cur.wakee.store(flips);
    }
    let target = policy::select_cpu(
        &st.topology,
        task,
        prev,
        this,
        WakeKind::Wakeup,
        online,
        &snaps,
        rd,
        waker,
    );
    if let Some(t0) = timed {
        *path = Some(placement_done(t0, &rd, task));
    }
    let migrated = target != prev;
    if migrated {
        // set_task_cpu → migrate_task_rq_fair, without prev's run-queue lock: its signals
        // leave prev through prev's removed load.
        let old = snaps
            .get(prev.index())
            .copied()
            .or_else(|| snapshot::read(prev));
        let Some(old) = old else {
            panic!(
                "sched: thread {id:?} slept on cpu {} with no run queue",
                prev.0
            );
        };
        match policy::migrate(&old, task, now()) {
            Ok(r) => snapshot::add_removed(prev, r),
            Err(e) => panic!("sched: thread {id:?} leaving cpu {}: {}", prev.0, e),
        }
    }
    let mut g = st.cpus[target.index()].lock();
    let cs = &mut *g;
    let at = clock_update(cs);
    t.cpu.store(target.0, Ordering::Relaxed);
    let outcome = match policy::activate_from(&st.topology, cs, &mut slot, migrated, &rd) {
        Ok(o) => o,
        Err(e) => panic!(
            "sched: cpu {}: woken thread {:?} refused: {}",
            target.0, id, e
        ),
    };
    if migrated {
        tracing::migrate(s, prev, target);
    }
    tracing::wakeup(s, target, false);
    t.on_rq.store(true, Ordering::Release);
    t.set_state(ThreadState::Running);
    t.stats.nr_wakeups.fetch_add(1, Ordering::Relaxed);
    if migrated {
        t.stats.nr_migrations.fetch_add(1, Ordering::Relaxed);
    }
    // The enqueue's cpufreq request (`enqueue_entity` → `update_load_avg` →
    // `cfs_rq_util_change`) is answered now, with the run queue as the enqueue left it, as
    // Linux's `cpufreq_update_util` inside the enqueue is: a clamped thread that runs for a
    // few µs (a `util_min` boost) counts, where left for the target's next switch, tick or
    // idle entry the request was answered after the thread had gone back to sleep
    // (docs/experiments.md, "The wake-up's cpufreq request answered at the enqueue").
    let upd = take_cpufreq(cs);
    let features = cs.rq.features();
    publish(cs);
    drop(g);
    drop(pi);
    // No run-queue lock held (the policy lock ranks below them).
    crate::cpufreq::update_util(target, at, upd, features);
    set_overutilized(outcome.overutilized);
    if outcome.overloaded {
        OVERLOADED.store(true, Ordering::Relaxed);
    }
    if outcome.resched.is_yes() {
        resched_cpu(target);
    }
    true
}

// ---- sleep, work, parameters ---------------------------------------------------------------

/// Sleeps until guest time `deadline` (Linux `schedule_hrtimeout` with an absolute
/// `CLOCK_MONOTONIC` deadline): a one-shot timer on this CPU wakes the thread.
pub fn sleep_until(deadline: Nanos) {
    let Some(s) = task::current_slot() else {
        // Not a thread (boot): wait in wfi for the tick.
        while now() < deadline {
            arch::wfi();
        }
        return;
    };
    let t = task::slot(s);
    while now() < deadline {
        t.set_state(ThreadState::Sleeping);
        crate::timer::arm_sleep(s, crate::time::ns_to_cyc(deadline.0));
        schedule();
    }
    crate::timer::cancel_sleep(s);
}

/// Sleeps for `ns` of guest time.
pub fn sleep_ns(ns: u64) {
    sleep_until(Nanos(now().0.saturating_add(ns)));
}

/// Wakes the thread whose sleep timer in slot `s` expired (timer interrupt).
pub(crate) fn wake_timer(s: usize) {
    wake_slot(s);
}

/// When a piece of emulated work started and completed (guest time).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkSpan {
    pub started: Nanos,
    pub completed: Nanos,
}

/// Runs `w_ns` of emulated work (ns of a biggest CPU at its top OPP): the thread stays running
/// (waiting in `wfi` between interrupts) until its running time, at its CPU's capacity and
/// frequency, covers the work; returns when it started and the instant it completed, exactly
/// (see the module docs). From a thread.
pub fn work(w_ns: u64) -> WorkSpan {
    let Some(s) = task::current_slot() else {
        return WorkSpan {
            started: now(),
            completed: now(),
        };
    };
    let t = task::slot(s);
    let irq = arch::irq_save_disable();
    let start_done = t.work.done.load(Ordering::Relaxed);
    let since = t.work.since.load(Ordering::Relaxed);
    let rate = t.work.rate.load(Ordering::Relaxed);
    let now_ns = now().0;
    let start_ns = now_ns;
    // The account up to now, then the target on top of it.
    let base = start_done.saturating_add(now_ns.saturating_sub(since).saturating_mul(rate));
    t.work.done.store(base, Ordering::Relaxed);
    t.work.since.store(now_ns, Ordering::Relaxed);
    let target = base.saturating_add(w_ns.saturating_mul(1 << 20));
    t.work.completed_at.store(0, Ordering::Relaxed);
    t.work.target.store(target, Ordering::Relaxed);
    arch::irq_restore(irq);
    loop {
        let irq = arch::irq_save_disable();
        let done = t.work.done.load(Ordering::Relaxed);
        let since = t.work.since.load(Ordering::Relaxed);
        let rate = t.work.rate.load(Ordering::Relaxed);
        let at = t.work.completed_at.load(Ordering::Relaxed);
        let now_ns = now().0;
        let started = Nanos(start_ns);
        if at != 0 {
            crate::timer::cancel_wakeup();
            arch::irq_restore(irq);
            t.work.target.store(u64::MAX, Ordering::Relaxed);
            return WorkSpan {
                started,
                completed: Nanos(at),
            };
        }
        let total = done.saturating_add(now_ns.saturating_sub(since).saturating_mul(rate));
        if total >= target && rate > 0 {
            crate::timer::cancel_wakeup();
            arch::irq_restore(irq);
            t.work.target.store(u64::MAX, Ordering::Relaxed);
            return WorkSpan {
                started,
                completed: Nanos(since + (target - done).div_ceil(rate)),
            };
        }
        if rate == 0 {
            arch::irq_restore(irq);
            spin_hint();
            continue;
        }
        // Wait in `wfi` for the instant the work completes at this rate, or for any interrupt
        // before it (the tick and a switch are what change the rate). Only guest time makes
        // the work, so the CPU need not execute anything meanwhile, and under QEMU's `-icount`
        // it must not: guest time there is the sum of every vCPU's instructions, so a spinning
        // vCPU slows every other CPU's kernel code down in guest time (with n CPUs spinning,
        // a wake-up on the others costs about n times its instructions). IRQs stay masked from
        // the check to the `wfi`, which a pending interrupt ends even while masked, so an
        // interrupt between them cannot be slept through.
        let due = now_ns.saturating_add((target - total).div_ceil(rate));
        crate::timer::arm_wakeup(crate::time::ns_to_cyc(due));
        arch::wfi();
        arch::irq_restore(irq);
    }
}

/// Keeps the calling thread running until guest time `deadline` (rt-app's `runtime`: wall
/// time, whatever the CPU's capacity and frequency), waiting in `wfi` as [`work`] does.
pub fn busy_until(deadline: Nanos) {
    while run_until_once(RunClock::Monotonic, deadline.0) < deadline.0 {}
}

/// Which clock [`run_until_once`] runs the caller until.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunClock {
    /// Guest time ([`now`]), as rt-app's `runtime`.
    Monotonic,
    /// The caller's work clock ([`thread_clocks`]' second value), as rt-app's `run`.
    Work,
}

/// Keeps the calling thread running until `clock` reads `target` or an interrupt comes first,
/// whichever is sooner, waiting in `wfi` as [`work`] and [`busy_until`] do (an EL0 task's
/// `run_until` call: its emulated work costs no instructions, so under `-icount` it does not
/// slow the other CPUs down); returns the clock then. Called in a loop until it reaches the
/// target: an interrupt before it (the tick, a switch) may have changed the work clock's rate.
pub fn run_until_once(clock: RunClock, target: u64) -> u64 {
    let read = || match clock {
        RunClock::Monotonic => now().0,
        RunClock::Work => thread_clocks().1,
    };
    let irq = arch::irq_save_disable();
    let now_ns = now().0;
    let due = match clock {
        RunClock::Monotonic => (now_ns < target).then_some(target),
        RunClock::Work => {
            let Some(s) = task::current_slot() else {
                arch::irq_restore(irq);
                return read();
            };
            let t = task::slot(s);
            let done = t.work.done.load(Ordering::Relaxed);
            let since = t.work.since.load(Ordering::Relaxed);
            let rate = t.work.rate.load(Ordering::Relaxed);
            let total = done.saturating_add(now_ns.saturating_sub(since).saturating_mul(rate));
            let want = target.saturating_mul(1 << 20);
            match (total < want, rate) {
                (false, _) => None,
                // Not charged (not running here yet): one pass round the loop.
                (true, 0) => Some(now_ns),
                (true, r) => Some(now_ns.saturating_add((want - total).div_ceil(r))),
            }
        }
    };
    match due {
        Some(at) if at > now_ns => {
            crate::timer::arm_wakeup(crate::time::ns_to_cyc(at));
            arch::wfi();
        }
        Some(_) => {}
        None => crate::timer::cancel_wakeup(),
    }
    arch::irq_restore(irq);
    read()
}

/// The calling thread's own clocks now, from a thread (an EL0 task's `thread_clock` call):
/// its running time (Linux `CLOCK_THREAD_CPUTIME_ID`) and the work it has done, in ns of a
/// biggest CPU at its top OPP — the account [`work`] waits on, charged
/// `capacity_orig × freq_scale` per ns of running, brought up to now (floor, whole ns). Both
/// stop while the thread does not run. `(0, 0)` outside a thread.
pub fn thread_clocks() -> (u64, u64) {
    let Some(s) = task::current_slot() else {
        return (0, 0);
    };
    let t = task::slot(s);
    // IRQs masked: the tick's and a switch's account updates run on this CPU, so the three
    // words are read between two of them, never halfway through one.
    let irq = arch::irq_save_disable();
    let now_ns = now().0;
    let runtime = t.stats.runtime_ns.load(Ordering::Relaxed);
    let exec_start = t.stats.exec_start.load(Ordering::Relaxed);
    let done = t.work.done.load(Ordering::Relaxed);
    let since = t.work.since.load(Ordering::Relaxed);
    let rate = t.work.rate.load(Ordering::Relaxed);
    arch::irq_restore(irq);
    let running = runtime.saturating_add(now_ns.saturating_sub(exec_start));
    let work = done.saturating_add(now_ns.saturating_sub(since).saturating_mul(rate));
    (running, work >> 20)
}

/// One iteration's pause of a thread that spins on purpose (a busy loop, emulated work):
/// `spin_loop()`, and every 64th time a `yield`. On hardware both are hints; under QEMU's
/// round-robin TCG (`-icount`) only `yield` ends a vCPU's time slice, and without it a CPU
/// that spins starves the others of host time, so their timers and IPIs run late in guest
/// time (seen: a tick test with five spinning CPUs stalling for minutes; with a `yield` every
/// 1024 spins, timers on a loaded 6-CPU system still fired up to 5 ms late).
#[inline]
pub fn spin_hint() {
    use core::sync::atomic::AtomicU32;
    static SPINS: PerCpu<AtomicU32> = PerCpu::new([const { AtomicU32::new(0) }; MAX_CPUS]);
    let c = SPINS.of(current_cpu());
    let n = c.load(Ordering::Relaxed).wrapping_add(1);
    c.store(n, Ordering::Relaxed);
    if n.is_multiple_of(64) {
        crate::arch::aarch64::cpu_regs::cpu_yield();
    } else {
        core::hint::spin_loop();
    }
}

/// Sets the nice value of thread `id` (Linux `set_user_nice`).
pub fn set_nice(id: ThreadId, nice: i32) -> Result<(), SchedError> {
    let st = STATE.get().ok_or(SchedError::NotInitialised)?;
    let t = task::get(id).ok_or(SchedError::NoSuchThread(id))?;
    let mut pi = t.sched.lock();
    let (mut g, cpu) = lock_task_rq(st, t, id);
    clock_update(&mut g);
    if t.on_rq.load(Ordering::Relaxed) {
        policy::set_nice_queued(&mut g, id.task_id(), nice).map_err(SchedError::Rq)?;
        let resched = g.rq.need_resched();
        drop(g);
        if resched {
            resched_cpu(CpuId(cpu));
        }
    } else if let Some(task) = t.parked.lock().as_mut() {
        policy::set_nice_parked(&mut g, task, nice).map_err(SchedError::Rq)?;
    }
    pi.params.nice = nice;
    tracing::set_nice(id.slot(), nice);
    Ok(())
}

/// Sets the clamp request of thread `id` to `req` (Linux `__setscheduler_uclamp`, after
/// `uclamp_validate`): a queued thread's run queue re-accounts it at once, a sleeping one takes
/// it at its next wake-up.
pub fn set_uclamp(id: ThreadId, req: TaskUclamp) -> Result<(), SchedError> {
    let st = STATE.get().ok_or(SchedError::NotInitialised)?;
    let t = task::get(id).ok_or(SchedError::NoSuchThread(id))?;
    let mut pi = t.sched.lock();
    UCLAMP_USED.store(true, Ordering::Relaxed);
    let (mut g, _) = lock_task_rq(st, t, id);
    clock_update(&mut g);
    if t.on_rq.load(Ordering::Relaxed) {
        g.rq.set_uclamp(id.task_id(), req).map_err(SchedError::Rq)?;
        stash_cpufreq(&mut g);
    } else if let Some(task) = t.parked.lock().as_mut() {
        task.uclamp.req = req.req;
    }
    drop(g);
    pi.params.uclamp = (req.req[0].value.0, req.req[1].value.0);
    Ok(())
}

/// Sets the CPUs thread `id` may run on. A queued thread whose CPU the new mask still contains
/// takes it at once (Linux `__do_set_cpus_allowed` under its rq lock: the balancer and the pick
/// see it); otherwise it takes effect at its next wake-up (a running thread moves itself with
/// [`migrate_self`]).
pub fn set_affinity(id: ThreadId, mask: CpuMask) -> Result<(), SchedError> {
    let st = STATE.get().ok_or(SchedError::NotInitialised)?;
    let t = task::get(id).ok_or(SchedError::NoSuchThread(id))?;
    if mask.and(online_mask()).is_empty() {
        return Err(SchedError::NoSuchCpu(CpuId(mask.0.trailing_zeros() as u16)));
    }
    let mut pi = t.sched.lock();
    pi.params.affinity = mask;
    let (mut g, cpu) = lock_task_rq(st, t, id);
    if t.on_rq.load(Ordering::Relaxed) && mask.contains(CpuId(cpu)) {
        g.rq.set_cpus_allowed(id.task_id(), mask)
            .map_err(SchedError::Rq)?;
        t.affinity.store(mask.0, Ordering::Relaxed);
        publish(&g);
    }
    drop(g);
    drop(pi);
    Ok(())
}

/// Locks the run queue holding thread `t` (`id`), as Linux's `task_rq_lock` does (the caller
/// holds `t`'s scheduling lock): the rq of its `task_cpu`, again while the balancer moves it
/// (queued but, between the two rq locks, in neither). Returns the guard and the CPU.
fn lock_task_rq(
    st: &State,
    t: &Thread,
    id: ThreadId,
) -> (IrqSpinLockGuard<'static, CpuSched>, u16) {
    loop {
        let cpu = t.cpu.load(Ordering::Acquire);
        let g = st.cpus[usize::from(cpu) % st.cpus.len()].lock();
        if t.cpu.load(Ordering::Acquire) == cpu
            && (!t.on_rq.load(Ordering::Acquire) || g.rq.task(id.task_id()).is_some())
        {
            return (g, cpu);
        }
        drop(g);
        spin_hint();
    }
}

/// Moves the calling thread to a CPU its affinity allows, through a wake-up: it leaves its run
/// queue in `schedule()` and the thread that runs next there wakes it, which places it (Linux
/// migrates a running task with the stopper, `migration_cpu_stop`).
pub fn migrate_self() {
    if let Some(s) = task::current_slot() {
        let t = task::slot(s);
        let here = current_cpu();
        if !t.sched.lock().params.affinity.contains(here) {
            schedule_mode(Mode::Migrate);
        }
    }
}

// ---- stack overflow ------------------------------------------------------------------------

/// Whether the thread whose stack (slot `slot`) overflowed may be killed: it is the one
/// running here, not an idle thread, it overflowed with IRQs unmasked (so it held no spin
/// lock, which all mask IRQs) and with preemption enabled.
pub fn overflow_killable(slot: usize, spsr: u64) -> bool {
    let Some(st) = STATE.get() else {
        return false;
    };
    let cpu = current_cpu();
    let irqs_were_on = spsr & (1 << 7) == 0;
    let Some(lock) = st.cpus.get(cpu.index()) else {
        return false;
    };
    // The run-queue lock is never held with IRQs unmasked; a timeout guards a broken state.
    let Some(g) = lock.lock_timeout(1_000_000) else {
        return false;
    };
    let curr = g.curr;
    let fair = g.is_fair(slot);
    drop(g);
    irqs_were_on
        && slot < MAX_THREADS
        && curr == slot
        && fair
        && task::slot(slot).preempt_count.load(Ordering::Relaxed) == 0
        && !arch::in_irq()
}

/// Kills the thread of slot `slot` (the one running here, its stack overflowed) from this
/// CPU's overflow stack: it exits with [`ExitStatus::StackOverflow`].
pub fn kill_overflowed(slot: usize) -> ! {
    task::exit_slot(slot, ExitStatus::StackOverflow)
}

// ---- checks --------------------------------------------------------------------------------

/// The run queues' consistency, CPU by CPU: the policy crate's invariants, and that the
/// threads the kernel believes queued on a CPU are exactly the ones its run queue holds. A
/// thread the balancer is moving is, for a moment, queued in neither run queue or in the new
/// one before its `task_cpu` says so (see `balance`): a mismatch is looked at again, up to
/// [`INVARIANT_RETRIES`] times, before it is reported.
pub fn check_invariants() -> Result<(), InvariantError> {
    let st = STATE.get().ok_or(InvariantError::NotInitialised)?;
    for (i, lock) in st.cpus.iter().enumerate() {
        let cpu = CpuId(i as u16);
        let mut tries = 0;
        loop {
            let g = lock.lock();
            g.rq.check_invariants()
                .map_err(|e| InvariantError::Rq(cpu, e))?;
            // Under the rq lock nothing republishes this CPU's snapshot.
            if let Some(snap) = snapshot::overloaded_flag_mismatch(cpu) {
                return Err(InvariantError::OverloadedFlag(cpu, snap));
            }
            match cross_check(&g, cpu) {
                Err(e) if tries < INVARIANT_RETRIES => {
                    drop(g);
                    tries += 1;
                    let _ = e;
                    spin_hint();
                }
                r => break r?,
            }
        }
    }
    Ok(())
}

/// How often [`check_invariants`] looks again at a CPU whose queued threads do not match.
const INVARIANT_RETRIES: u32 = 1000;

fn cross_check(g: &CpuSched, cpu: CpuId) -> Result<(), InvariantError> {
    let mut queued = 0u32;
    for (s, t) in task::table().iter().enumerate() {
        if t.on_rq.load(Ordering::Relaxed) && t.cpu.load(Ordering::Relaxed) == cpu.0 {
            queued += 1;
            if g.rq.task(t.id(s).task_id()).is_none() {
                return Err(InvariantError::Missing(cpu, t.id(s)));
            }
        }
    }
    if queued != g.rq.nr_running() {
        return Err(InvariantError::Count(cpu, queued, g.rq.nr_running()));
    }
    Ok(())
}

/// A broken scheduler invariant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InvariantError {
    NotInitialised,
    /// The policy crate's check failed.
    Rq(CpuId, &'static str),
    /// A thread marked queued there is not in the run queue.
    Missing(CpuId, ThreadId),
    /// Threads marked queued vs the run queue's count.
    Count(CpuId, u32, u32),
    /// The published snapshot's [`RqSnapshot::overloaded`] vs the per-CPU bit newidle's gate reads
    /// (the snapshot's value).
    OverloadedFlag(CpuId, bool),
}

impl fmt::Display for InvariantError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvariantError::NotInitialised => write!(f, "sched: not initialised"),
            InvariantError::Rq(c, e) => write!(f, "cpu {}: run queue: {}", c.0, e),
            InvariantError::Missing(c, t) => {
                write!(
                    f,
                    "cpu {}: thread {:?} marked queued but not in the run queue",
                    c.0, t
                )
            }
            InvariantError::Count(c, k, r) => write!(
                f,
                "cpu {}: {} threads marked queued, run queue holds {}",
                c.0, k, r
            ),
            InvariantError::OverloadedFlag(c, snap) => write!(
                f,
                "cpu {}: published snapshot overloaded={}, newidle's overloaded flag {}",
                c.0, snap, !snap
            ),
        }
    }
}
