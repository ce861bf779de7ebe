//! The discrete-event engine: simulated time, the workload program, work and energy
//! accounting, and the trace. Every scheduling decision is the policy crate's.
//!
//! Time is kept in ns. Events (ticks at `HZ`, timer and sleep expiries, the end of
//! the running task's current piece of work, a frequency change taking effect,
//! deferred reschedules) sit in a priority queue ordered by `(time, sequence)`, so
//! two runs with the same inputs process the same events in the same order and
//! write the same bytes.
//!
//! Each CPU owns an [`asym_sched::rq::Rq`]; the engine calls the policy's steps where
//! Linux's core runs them, as the kernel does, and acts on the decisions they return:
//! - wake-up: [`ttwu_select`] over the CPUs' snapshots, the pure `migrate_task_rq_fair`
//!   when the CPU changes, [`ttwu_activate_from`] on the target (reschedule, overutilized);
//! - `schedule()`: [`schedule_pick`], newidle balance on [`Pick::Newidle`],
//!   [`schedule_finish`], [`sched_core::idle_enter`] and [`Nohz::enter_idle`] when the
//!   CPU goes idle; exit through [`task_dead_fair`];
//! - the tick: [`sched_tick`], whose steps the engine carries out in Linux's order — the
//!   root domain's overutilized flag, `sched_balance_softirq` (without load balancing, the
//!   root level's overutilized statistics, [`RootDomain::update_root_stats`], when they are
//!   due), the NOHZ kick ([`Nohz::nohz_balancer_kick`], then the crate's
//!   [`nohz_idle_balance`] walk on the kicked CPU through [`NohzWalk`], as
//!   `nohz_newidle_balance` when a CPU goes idle), then `schedule()`; an idle CPU ticks only
//!   when [`idle_tick_kept`] says so;
//! - the flag a balance's statistics set ([`BalanceReport::overutilized`]) is stored
//!   through [`RootDomain::set_rd_overutilized`];
//! - load balancing through [`RqAccess`] (`SimRqs`), whose reports of moved tasks the
//!   engine turns into `sched_migrate_task` lines and reschedules
//!   ([`attach_preempt`]); an active balance preempts the source and calls
//!   `active_load_balance_cpu_stop`.
//!
//! What the engine models itself (mechanism, not policy):
//! - work: a task progresses at `capacity_orig × f / fmax / 1024` of a big CPU at fmax
//!   (`runtime` events at 1); frequencies change after the domain's transition latency
//!   (the emulated cpufreq driver); energy comes from the busy time at each OPP;
//! - the cost of a newidle balance, `NEWIDLE_LB_COST_NS` (5 µs) per domain, on the clock
//!   `sched_balance_newidle` measures;
//! - which CPU runs `try_to_wake_up` and the activation (`ttwu_queue`), for the trace's
//!   context column only;
//! - timer wake-ups due at a tick run before it when load balancing is on or timers are in
//!   low-resolution mode (`highres: false`), as Linux's `update_process_times` runs the
//!   expired hrtimers before `sched_tick`, so a cyclictest-like load sees the ticks seed 002
//!   measured; in low-resolution mode a sleep or timer wake-up is also moved onto the first
//!   tick at or after its expiry (the kernel's `highres=off`);
//! - idle CPUs do not tick (`CONFIG_NO_HZ_IDLE`) and have no idle states deeper than
//!   WFI; when every CPU is idle nothing ticks and blocked load stays as it is, as on
//!   Linux. At time 0 every CPU is idle and registered as NOHZ idle with blocked load, as
//!   Linux's CPUs are once their idle threads have run (`nohz_balance_enter_idle`).
//!
//! The policy's documented differences from Linux (the overutilized lifecycle, the
//! simplified fork path, no `wake_affine`, ...) are listed in its module docs.

use std::io::Write;

use asym_sched::balance::{
    active_load_balance_cpu_stop, sched_balance_domains, sched_balance_newidle,
    sched_balance_softirq, BalanceReport, CpuIdleType, LbContext, MigrationType, Moved, RqAccess,
    SchedDomains, Snapshots,
};
use asym_sched::cpufreq::driver::EmulatedDriver;
use asym_sched::cpufreq::policies::CpufreqCore;
use asym_sched::cpufreq::Governor as CpufreqGovernor;
use asym_sched::em::EnergyModel;
use asym_sched::features::{Feature, SchedFeatures};
use asym_sched::nohz::{
    blocked_load_check, blocked_load_cpufreq, idle_tick_kept, nohz_idle_balance, nohz_parts,
    update_blocked_load, BlockedLoad, Nohz, NohzKickFlags, NohzWalk,
};
use asym_sched::pelt::SchedAvg;
use asym_sched::root_domain::RootDomain;
use asym_sched::rq::{
    migrate_task_rq_fair, Block, CpufreqUpdate, Rq, RqConfig, RqError, RqSnapshot, Task,
};
use asym_sched::sched_core::{
    self, attach_preempt, block_task, sched_tick, schedule_finish, schedule_pick_with,
    schedule_repick_with, select_task_rq_wanted, task_dead_fair, ttwu_activate_from, ttwu_runnable,
    ttwu_select, CoreCtx, Pick, TickCtx, TickCurr, WakeCtx,
};
use asym_sched::schedutil::UpdateFlags;
use asym_sched::topology::arch_scale_freq_capacity;
use asym_sched::types::{Capacity, CpuId, CpuMask, Khz, Nanos, TaskId};
use asym_sched::uclamp::TaskUclamp;
use asym_sched::util_est;
use asym_sched::wakeup::{wake_wide, WakeKind, WakeeFlips, WakerInfo};

use crate::board::Board;
use crate::queue::{Entry, EventQueue};
use crate::signals::{RtAppTotals, StepSignal};
use crate::trace::{
    self, Comm, CpuMaskHex, Ctx, Event as TraceEvent, PeltVals, PrevState, RtApp, TaskRef,
    TraceWriter,
};
use crate::workload::Workload;
use asym_rtapp::interp::{self, Action, Thread};

/// The frequency governor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Governor {
    /// Every domain at its highest OPP.
    Performance,
    /// Every domain at its lowest OPP.
    Powersave,
    /// Frequency follows utilisation.
    Schedutil,
}

impl Governor {
    /// The name as cpufreq spells it.
    pub fn name(self) -> &'static str {
        match self {
            Governor::Performance => "performance",
            Governor::Powersave => "powersave",
            Governor::Schedutil => "schedutil",
        }
    }
}

/// Run parameters.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Simulated duration.
    pub duration_ns: u64,
    /// Scheduler features.
    pub features: SchedFeatures,
    /// Frequency governor.
    pub governor: Governor,
    /// Seed for every pseudo-random choice (none are made yet; recorded in the report).
    pub seed: u64,
    /// Tick rate.
    pub hz: u32,
    /// Keep the placement/frequency/util timeline for plotting.
    pub record_timeline: bool,
    /// rt-app's `duration: -1`: end as soon as every task has exited (at the latest
    /// at `duration_ns`).
    pub until_all_exit: bool,
    /// Load balancing (`--lb on`): periodic balance through SCHED_SOFTIRQ, newidle
    /// balance, misfit migration. On by default, as in Linux.
    pub load_balance: bool,
    /// Wake-up and fork placement: Linux's `select_task_rq_fair` (default) or the old
    /// interim rule, kept for comparison (`--placement interim`).
    pub placement: Placement,
    /// cpufreq user limits applied before the workload starts (`--freq-limit`), like
    /// writing `scaling_min_freq`/`scaling_max_freq` at boot.
    pub freq_limits: Vec<FreqLimit>,
    /// Timer resolution (`--highres on|off`, default on): `false` is Linux's hrtimers in
    /// low-resolution mode, run from the tick (`hrtimer_run_queues`): a sleep or timer
    /// wake-up happens on the first tick at or after its expiry, before that tick's work.
    pub highres: bool,
}

/// The simulator's defaults (the CLI's without options): 10 s, the default features,
/// schedutil, HZ=250, load balancing on, Linux's placement, high-resolution timers, no
/// timeline, no limits.
impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            duration_ns: 10_000_000_000,
            features: SchedFeatures::default(),
            governor: Governor::Schedutil,
            seed: 0,
            hz: 250,
            record_timeline: false,
            until_all_exit: false,
            load_balance: true,
            placement: Placement::default(),
            freq_limits: Vec::new(),
            highres: true,
        }
    }
}

/// One `--freq-limit DOMAIN=MIN:MAX` (kHz): `scaling_min_freq`/`scaling_max_freq` of
/// the cpufreq policy of the performance domain named `domain` in the board table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FreqLimit {
    /// Performance-domain name from the board table ("big", "little").
    pub domain: String,
    /// `scaling_min_freq` in kHz.
    pub min_khz: u32,
    /// `scaling_max_freq` in kHz.
    pub max_khz: u32,
}

/// How waking and new tasks are placed: the policy's [`Placement`]
/// (`asym_sched::sched_core::Placement`).
pub use asym_sched::sched_core::Placement;

/// Per-task results.
#[derive(Clone, Debug, Default)]
pub struct TaskStats {
    /// Wake-ups, including the first (`sched_wakeup_new`).
    pub activations: u64,
    /// Time on a CPU.
    pub runtime_ns: u64,
    /// Time on each CPU.
    pub residency_ns: Vec<u64>,
    /// Migrations (all at wake-up until load balancing exists).
    pub migrations: u64,
    /// Of those, by load balancing (`detach_tasks`, not misfit active balance).
    pub lb_migrations: u64,
    /// Timer periods whose work had not finished when the next period began.
    pub deadline_misses: u64,
    /// Timer activations (periods started).
    pub timer_activations: u64,
    /// Per timer activation, the window its work had — from the task's release after its
    /// previous `timer` event (or its period's start, for the first) to the period's
    /// expiry — and whether it overran ([`crate::optimal`] reads them).
    pub timer_windows_ns: Vec<(u64, u64, bool)>,
    /// When the task was last released by a `timer` event.
    pub timer_release_ns: Option<u64>,
    /// Wake-up → running latencies.
    pub wakeup_latency_ns: Vec<u64>,
    /// For each completed timer period: time from the period's start to the task
    /// reaching its next `timer` event (a frame's duration, for jank statistics).
    pub period_completion_ns: Vec<u64>,
    /// Whether the task finished its loops.
    pub exited: bool,
    /// Its rt-app `rtapp_stats` lines, summed.
    pub rtapp: RtAppTotals,
    /// Its traced signals ([`TaskSignal`]).
    pub signals: [StepSignal; TaskSignal::COUNT],
}

/// The per-task signals of [`TaskStats::signals`], as LISA's `df_task_signal` names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskSignal {
    /// `sched_pelt_se` `util`.
    Util,
    /// `sched_pelt_se` `load`.
    Load,
    /// `sched_util_est_se` `ewma`.
    Ewma,
    /// `sched_util_est_se` `enqueued`.
    Enqueued,
}

impl TaskSignal {
    /// Number of signals.
    pub const COUNT: usize = 4;
}

/// The per-CPU signals of [`SimResult::cpu_signals`], as LISA's `df_cpus_signal` names
/// them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuSignal {
    /// `sched_pelt_cfs` `util` (root cfs_rq).
    Util,
    /// `sched_pelt_cfs` `load`.
    Load,
    /// `sched_util_est_cfs` `enqueued`.
    Enqueued,
    /// `sched_cpu_capacity` `capacity_curr`.
    CapacityCurr,
}

impl CpuSignal {
    /// Number of signals.
    pub const COUNT: usize = 4;
}

/// Counters for the report.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    /// `SCHED_SOFTIRQ` raises.
    pub sched_softirq_raises: u64,
    /// Periodic load-balance runs.
    pub lb_periodic: u64,
    /// Newidle balance runs.
    pub lb_newidle: u64,
    /// NOHZ idle balance runs.
    pub lb_nohz: u64,
    /// Migrations at wake-up.
    pub migrations_wakeup: u64,
    /// Migrations by load balancing.
    pub migrations_load_balance: u64,
    /// Sum of the migrated tasks' `load_avg` at their load-balance migrations (with
    /// `migrations_load_balance`, the mean size of what the balancer moved).
    pub lb_migrated_load_sum: u64,
    /// Misfit migrations.
    pub migrations_misfit: u64,
    /// Frequency changes applied, per domain.
    pub freq_changes: Vec<u64>,
    /// Time the system was overutilized.
    pub overutilized_ns: u64,
    /// Context switches.
    pub context_switches: u64,
    /// Wake-ups of a task whose dequeue was delayed (`DELAY_DEQUEUE`): requeued where it
    /// was queued (`ttwu_runnable`), with no CPU selection.
    pub wakeups_delayed: u64,
}

/// Everything a run produces besides the trace.
#[derive(Clone, Debug)]
pub struct SimResult {
    /// Simulated time actually covered.
    pub end_ns: u64,
    /// Per task (same order as the workload).
    pub tasks: Vec<TaskStats>,
    /// Busy ns per CPU per OPP index.
    pub busy_ns: Vec<Vec<u64>>,
    /// Counters.
    pub counters: Counters,
    /// Events processed (for the speed summary).
    pub events: u64,
    /// Plot data, when requested.
    pub timeline: Option<Timeline>,
    /// The task names and pids as traced.
    pub names: Vec<(String, u32)>,
    /// Lines written to the trace.
    pub trace_lines: u64,
    /// Per CPU, its traced signals ([`CpuSignal`]).
    pub cpu_signals: Vec<[StepSignal; CpuSignal::COUNT]>,
    /// Per domain, ns spent at each OPP (busy or idle).
    pub freq_time_ns: Vec<Vec<u64>>,
    /// The largest shift of a trace line's timestamp from its simulated time (ns).
    pub trace_max_skew_ns: u64,
    /// EAS placed wake-ups (`ENERGY_AWARE` and `sched_is_eas_possible()`), not only asked.
    pub eas_active: bool,
}

/// Plot data.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    /// `(cpu, start_ns, end_ns, task)` running intervals.
    pub runs: Vec<(usize, u64, u64, usize)>,
    /// `(domain, time_ns, khz)` frequency changes.
    pub freqs: Vec<(usize, u64, u32)>,
    /// `(task, time_ns, util_avg)` samples.
    pub utils: Vec<(usize, u64, u32)>,
}

/// Why a run stopped early.
#[derive(Debug)]
pub enum SimError {
    /// Writing the trace failed.
    Io(std::io::Error),
    /// The workload cannot be simulated.
    Workload(String),
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimError::Io(e) => write!(f, "writing the trace: {e}"),
            SimError::Workload(m) => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for SimError {}

impl From<std::io::Error> for SimError {
    fn from(e: std::io::Error) -> Self {
        SimError::Io(e)
    }
}

impl From<RqError> for SimError {
    fn from(e: RqError) -> Self {
        SimError::Workload(format!("run queue refused an operation: {e}"))
    }
}

/// A pending event (8 bytes: the queue moves many). Task and CPU indices fit `u32`
/// (`Engine::new` checks both counts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ev {
    Tick,
    Start(u32),
    Wake(u32),
    /// The running task's piece of work on this CPU ends. Never in the queue: each CPU
    /// holds its one live end in [`CpuState::seg`], and [`Engine::next_event`] merges
    /// them with the queue in `(time, sequence)` order.
    SegDone(u32),
    FreqPoll,
    Resched(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TState {
    NotStarted,
    Runnable,
    Running,
    Sleeping,
    Suspended,
    Dead,
}

/// The simulator's side of a task; the policy side ([`Task`]) lives in its CPU's
/// [`Rq`] while queued and in `parked` while it sleeps — except a sleeper whose dequeue was
/// delayed (`DELAY_DEQUEUE`), which stays in the [`Rq`] of `cpu` until a pick there hands it
/// back (then `parked`) or it wakes (`ttwu_runnable`).
struct SimTask {
    comm: String,
    pid: u32,
    nice: i32,
    allowed: u64,
    uclamp: Option<(u32, u32)>,
    state: TState,
    /// `task_cpu(p)`.
    cpu: usize,
    parked: Option<Task>,
    remaining_fp: u64,
    invariant: bool,
    wake_ts: Option<u64>,
    /// Its rt-app program ([`asym_rtapp::interp`]).
    prog: Thread,
    stats: TaskStats,
    /// Has called `pthread_setname_np` (before that the trace names it `rt-app`).
    renamed: bool,
    /// Pre-v6.9 `util_est.enqueued`: util_avg at the last dequeue to sleep.
    ue_enqueued: u32,
    /// `wakee_flips` and friends (`record_wakee`, `wake_wide`).
    wakee: WakeeFlips,
}

use simcpu::SimCpu;

/// A simulated CPU, whose run queue is reached only through [`SimCpu::rq`] and
/// [`SimCpu::rq_mut`]: [`SimCpu::version`] changes with every mutable access, so the
/// engine's copy of the CPU's snapshot ([`Rq::snapshot`], a function of the run queue
/// alone) is rebuilt only when the run queue may have changed.
mod simcpu {
    use asym_sched::rq::Rq;

    pub(super) struct SimCpu {
        rq: Rq,
        /// Bumped by every [`SimCpu::rq_mut`].
        version: u64,
        /// The simulator's side of the CPU.
        pub state: super::CpuState,
    }

    impl SimCpu {
        pub fn new(rq: Rq, state: super::CpuState) -> Self {
            SimCpu {
                rq,
                version: 0,
                state,
            }
        }

        /// The run queue, read-only.
        #[inline]
        pub fn rq(&self) -> &Rq {
            &self.rq
        }

        /// The run queue, to change it.
        #[inline]
        pub fn rq_mut(&mut self) -> &mut Rq {
            self.version = self.version.wrapping_add(1);
            &mut self.rq
        }

        /// Changes with every [`SimCpu::rq_mut`].
        #[inline]
        pub fn version(&self) -> u64 {
            self.version
        }

        /// [`Rq::take_cpufreq_update`] without a new [`SimCpu::version`]: the pending
        /// request is no part of [`Rq::snapshot`], and the engine takes it after nearly
        /// every run-queue operation, so bumping the version here made the next wake-up
        /// rebuild snapshots that had not changed.
        #[inline]
        pub fn take_cpufreq_update(&mut self) -> Option<asym_sched::rq::CpufreqUpdate> {
            self.rq.take_cpufreq_update()
        }
    }

    impl std::ops::Deref for SimCpu {
        type Target = super::CpuState;
        fn deref(&self) -> &super::CpuState {
            &self.state
        }
    }

    impl std::ops::DerefMut for SimCpu {
        fn deref_mut(&mut self) -> &mut super::CpuState {
            &mut self.state
        }
    }
}

/// The simulator's per-CPU state beside the run queue.
struct CpuState {
    /// The task on the CPU as the trace sees it (`rq->curr`, kept across a
    /// dequeue of the running task until the next pick).
    running: Option<usize>,
    last_acct: u64,
    run_start: u64,
    /// The last `cpu_idle` event of this CPU entered idle (CPUs start idle): keeps
    /// `cpu_idle` enter/exit alternating however the CPU is woken.
    in_idle_state: bool,
    /// The idle task's `wakee_flips` (it is `current` for wake-ups from an idle CPU).
    idle_wakee: WakeeFlips,
    /// [`Board::rate_fp`] at the domain's current frequency, set with it in
    /// [`Engine::set_freq_now`]: every accounting step needs it, and it is a 128-bit division.
    rate_fp: u64,
    /// CPUs sharing this CPU's last-level cache (its cluster): `wake_wide`'s `sd_llc_size`,
    /// built once instead of at every wake-up.
    llc_size: u32,
}

/// The `(time, sequence number)` of each CPU's live [`Ev::SegDone`], if any, and the
/// earliest of them. Re-arming replaces a CPU's, so superseded ends never reach the event
/// queue (they used to stay there until popped and dropped: most of its entries on busy
/// runs). The earliest is kept so that [`Engine::next_event`] does not scan every CPU for
/// every event; it is found again by a scan only after the one it was has gone or moved
/// later.
struct SegEnds {
    by_cpu: Vec<Option<(u64, u64)>>,
    /// The earliest of `by_cpu` with its CPU (`Some(None)`: there is none); `None` when it
    /// must be found again.
    earliest: Option<Option<(u64, u64, usize)>>,
}

impl SegEnds {
    fn new(nr_cpus: usize) -> Self {
        SegEnds {
            by_cpu: vec![None; nr_cpus],
            earliest: Some(None),
        }
    }

    /// CPU `cpu`'s segment end becomes `end`.
    fn set(&mut self, cpu: usize, end: Option<(u64, u64)>) {
        self.by_cpu[cpu] = end;
        self.earliest = match (self.earliest, end) {
            (Some(Some((t, seq, c))), end) if c == cpu => match end {
                Some(e) if e <= (t, seq) => Some(Some((e.0, e.1, cpu))),
                _ => None,
            },
            (Some(Some((t, seq, c))), Some(e)) => Some(Some(if e < (t, seq) {
                (e.0, e.1, cpu)
            } else {
                (t, seq, c)
            })),
            (Some(None), Some(e)) => Some(Some((e.0, e.1, cpu))),
            (keep, _) => keep,
        };
    }

    /// The earliest segment end and its CPU.
    fn earliest(&mut self) -> Option<(u64, u64, usize)> {
        if let Some(e) = self.earliest {
            return e;
        }
        let mut best: Option<(u64, u64, usize)> = None;
        for (c, end) in self.by_cpu.iter().enumerate() {
            if let Some((t, seq)) = *end {
                if best.is_none_or(|(bt, bs, _)| (t, seq) < (bt, bs)) {
                    best = Some((t, seq, c));
                }
            }
        }
        self.earliest = Some(best);
        best
    }
}

struct Domain {
    cur_khz: u32,
    cur_opp: usize,
    /// Since when `cur_opp` holds (frequency residency).
    since: u64,
}

/// `TASK_COMM_LEN - 1`.
const COMM_MAX: usize = 15;
/// First pid given to workload threads (also their [`TaskId`]).
const FIRST_PID: u32 = 1001;
/// A task that runs this many zero-time events in a row makes no progress.
const MAX_ZERO_TIME_STEPS: u32 = 100_000;

fn tid(t: usize) -> TaskId {
    TaskId(FIRST_PID + t as u32)
}

fn tidx(id: TaskId) -> usize {
    (id.0 - FIRST_PID) as usize
}

/// The simulator state for one run.
pub struct Engine<'a, W: Write> {
    board: &'a Board,
    wl: &'a Workload,
    cfg: SimConfig,
    now: u64,
    seq: u64,
    heap: EventQueue<Ev>,
    tasks: Vec<SimTask>,
    cpus: Vec<SimCpu>,
    /// Each CPU's live segment end.
    segs: SegEnds,
    domains: Vec<Domain>,
    timers: Vec<interp::Timer>,
    busy_ns: Vec<Vec<u64>>,
    counters: Counters,
    /// The root domain's flags (overutilized, EAS).
    rd: RootDomain,
    overutilized_since: u64,
    /// When the root level's overutilized statistics are next due without load balancing
    /// ([`sched_core::TickCtx::root_stats_next`]).
    root_stats_next: Nanos,
    nohz: Nohz,
    uclamp_used: bool,
    trace: Option<TraceWriter<W>>,
    timeline: Option<Timeline>,
    events: u64,
    tick_ns: u64,
    progress: Option<Box<dyn FnMut(u64, u64) + 'a>>,
    cpufreq: CpufreqCore<EmulatedDriver>,
    nr_exited: usize,
    /// The energy model when EAS placement is on (`sched_energy_enabled()`).
    eas_em: Option<EnergyModel>,
    /// The sched domains when load balancing is on.
    lb: Option<SchedDomains>,
    /// Per CPU, the traced signals ([`CpuSignal`]).
    cpu_signals: Vec<[StepSignal; CpuSignal::COUNT]>,
    /// Per domain, ns at each OPP.
    freq_time_ns: Vec<Vec<u64>>,
    /// Every CPU's snapshot, refreshed before a policy step reads them.
    snaps: Vec<RqSnapshot>,
    /// The [`SimCpu::version`] each of `snaps` was taken at.
    snaps_version: Vec<u64>,
    /// The balancer's moves not yet synced.
    moved: MovedTasks,
    /// Scratch for [`Self::sync_migrations`].
    sync_buf: Vec<(usize, usize, usize, u64)>,
    /// Scratch for [`Self::run_same_time_wakeups`].
    later_buf: Vec<Entry<Ev>>,
}

/// The simulated CPUs' run queues as the balancer's [`RqAccess`]: snapshots are built
/// from the live run queues when read (so they are always fresh), and each task the
/// balancer reports moved is noted as `(from, to)` in `moved` (first `from`, last `to`),
/// for [`Engine::sync_migrations`].
struct SimRqs<'c> {
    cpus: &'c mut [SimCpu],
    moved: &'c mut MovedTasks,
    /// The root domain's `rd->overloaded`.
    overloaded: &'c mut bool,
}

/// Per task, the `(from, to)` of its moves by the balancer not yet synced, and how many
/// tasks have one.
#[derive(Default)]
struct MovedTasks {
    by_task: Vec<Option<(usize, usize)>>,
    nr: usize,
}

impl Snapshots for SimRqs<'_> {
    fn nr_cpus(&self) -> usize {
        self.cpus.len()
    }

    fn snapshot(&self, cpu: CpuId) -> RqSnapshot {
        self.cpus[cpu.index()].rq().snapshot()
    }
}

impl RqAccess for SimRqs<'_> {
    fn with_rq<R>(&mut self, cpu: CpuId, f: impl FnOnce(&mut Rq) -> R) -> R {
        f(self.cpus[cpu.index()].rq_mut())
    }

    fn moved(&mut self, m: &Moved) {
        if let Some(e) = self.moved.by_task.get_mut(tidx(m.task)) {
            if e.is_none() {
                self.moved.nr += 1;
            }
            e.get_or_insert((m.from.index(), m.to.index())).1 = m.to.index();
        }
    }

    fn rd_overloaded(&self) -> bool {
        *self.overloaded
    }

    fn set_rd_overloaded(&mut self, v: bool) {
        *self.overloaded = v;
    }
}

/// The simulated CPUs' snapshots, read-only (built from the live run queues when read).
struct SimSnaps<'c>(&'c [SimCpu]);

impl Snapshots for SimSnaps<'_> {
    fn nr_cpus(&self) -> usize {
        self.0.len()
    }

    fn snapshot(&self, cpu: CpuId) -> RqSnapshot {
        self.0[cpu.index()].rq().snapshot()
    }
}

/// The idle load balancer's steps on the engine ([`NohzWalk`]): one CPU at a time, in
/// zero simulated time (nothing wakes on the idle load balancer while it walks).
struct SimNohzWalk<'e, 'a, W: Write> {
    eng: &'e mut Engine<'a, W>,
    /// The idle load balancer (the trace's context for the blocked-load updates).
    ilb: usize,
}

impl<W: Write> NohzWalk for SimNohzWalk<'_, '_, W> {
    type Error = SimError;

    fn idle_cpus(&self) -> CpuMask {
        self.eng.nohz.idle_cpus
    }

    fn idle_cpu(&self, cpu: CpuId) -> bool {
        self.eng.cpus[cpu.index()].rq().curr_is_idle()
    }

    fn need_resched(&self) -> bool {
        false
    }

    fn update_nohz_stats(&mut self, cpu: CpuId, _j: u64) -> Result<bool, SimError> {
        self.eng.update_nohz_stats(self.ilb, cpu.index())
    }

    fn next_balance(&self, cpu: CpuId) -> Nanos {
        self.eng.cpus[cpu.index()].rq().next_balance()
    }

    fn sched_balance_domains(&mut self, cpu: CpuId) -> Result<(), SimError> {
        let e = &mut *self.eng;
        // Each balance may have changed the overutilized flag.
        let ctx = e.lb_context();
        let Some(sds) = e.lb.as_mut() else {
            return Ok(());
        };
        let report = sched_balance_domains(
            sds,
            cpu,
            &mut SimRqs {
                cpus: &mut e.cpus,
                moved: &mut e.moved,
                overloaded: &mut e.rd.overloaded,
            },
            CpuIdleType::Idle,
            Nanos(e.now),
            &ctx,
        )
        .map_err(|e| SimError::Workload(e.to_string()))?;
        e.counters.lb_nohz += report.lb_runs as u64;
        e.after_balance(cpu.index(), &report, None)
    }

    fn set_has_blocked(&mut self, v: bool) {
        self.eng.nohz.has_blocked = v;
    }

    fn set_next_balance(&mut self, j: u64) {
        self.eng.nohz.next_balance_j = j;
    }

    fn set_next_blocked(&mut self, j: u64) {
        self.eng.nohz.next_blocked_j = j;
    }
}

/// The modelled cost of one newidle `sched_balance_rq` (`sched_clock_cpu` advances
/// this much per domain balanced): a few microseconds, as measured on small arm64
/// systems.
const NEWIDLE_LB_COST_NS: u64 = 5_000;

impl<'a, W: Write> Engine<'a, W> {
    /// Prepare a run. `trace` receives the ftrace text when given.
    pub fn new(
        board: &'a Board,
        wl: &'a Workload,
        cfg: SimConfig,
        trace: Option<W>,
    ) -> Result<Self, SimError> {
        let nr = board.nr_cpus();
        if nr > 64 {
            return Err(SimError::Workload(format!(
                "{nr} CPUs: the simulator supports at most 64"
            )));
        }
        if wl.tasks.len() > (u32::MAX - FIRST_PID) as usize {
            return Err(SimError::Workload(format!(
                "{} tasks: the simulator supports at most {}",
                wl.tasks.len(),
                u32::MAX - FIRST_PID
            )));
        }
        if cfg.hz == 0 || cfg.hz > 10_000 {
            return Err(SimError::Workload(format!(
                "HZ must be in 1..=10000 (got {})",
                cfg.hz
            )));
        }
        let tick_ns = 1_000_000_000 / cfg.hz as u64;
        let mut tasks = Vec::with_capacity(wl.tasks.len());
        for (i, t) in wl.tasks.iter().enumerate() {
            let prog = Thread::new(wl, i, nr);
            let interp::Params {
                nice,
                allowed,
                uclamp,
            } = prog.params();
            let mut uc = TaskUclamp::new();
            if let Some((lo, hi)) = uclamp {
                uc.set_request(lo, hi)
                    .map_err(|e| SimError::Workload(format!("task {}: uclamp: {e:?}", t.name)))?;
            }
            let task = Task::new(tid(i), nice, uc, CpuMask(allowed))?;
            tasks.push(SimTask {
                comm: t.name.chars().take(COMM_MAX).collect(),
                pid: FIRST_PID + i as u32,
                nice,
                allowed,
                uclamp,
                state: TState::NotStarted,
                cpu: allowed.trailing_zeros() as usize,
                parked: Some(task),
                remaining_fp: 0,
                invariant: false,
                wake_ts: None,
                prog,
                stats: TaskStats {
                    residency_ns: vec![0; nr],
                    ..TaskStats::default()
                },
                renamed: false,
                ue_enqueued: 0,
                wakee: WakeeFlips::default(),
            });
        }
        let uclamp_used = tasks.iter().any(|t| t.uclamp.is_some());
        let cpus: Vec<SimCpu> = (0..nr)
            .map(|c| {
                let mut rc = RqConfig::new(CpuId(c as u16), nr as u32);
                rc.capacity_orig = Capacity(board.cpus[c].capacity_orig);
                rc.tick_nsec = tick_ns;
                rc.features = cfg.features;
                rc.max_tasks = wl.tasks.len().max(1);
                SimCpu::new(
                    Rq::new(rc, Nanos(0)),
                    CpuState {
                        running: None,
                        last_acct: 0,
                        run_start: 0,
                        in_idle_state: true,
                        idle_wakee: WakeeFlips::default(),
                        rate_fp: board.rate_fp(c, board.domains[board.cpus[c].domain].fmax_khz),
                        llc_size: board.topology.llc_size(CpuId(c as u16)),
                    },
                )
            })
            .collect();
        let domains = board
            .domains
            .iter()
            .map(|d| Domain {
                cur_khz: d.fmax_khz,
                cur_opp: d.opps.len() - 1,
                since: 0,
            })
            .collect();
        let caps: Vec<Capacity> = board
            .cpus
            .iter()
            .map(|c| Capacity(c.capacity_orig))
            .collect();
        let gov = match cfg.governor {
            Governor::Performance => CpufreqGovernor::Performance,
            Governor::Powersave => CpufreqGovernor::Powersave,
            Governor::Schedutil => CpufreqGovernor::Schedutil,
        };
        let cpufreq = CpufreqCore::new(board.desc, &caps, gov, Nanos(0), |p| {
            EmulatedDriver::new(p, true)
        })
        .map_err(|e| SimError::Workload(format!("cpufreq: {e}")))?;
        let mut cpufreq = cpufreq;
        cpufreq.apply_seed_era(cfg.features);
        for l in &cfg.freq_limits {
            let Some(pd) = board.domains.iter().position(|d| d.name == l.domain) else {
                let names: Vec<_> = board.domains.iter().map(|d| d.name).collect();
                return Err(SimError::Workload(format!(
                    "--freq-limit {}: no performance domain \"{}\" on {} (known: {})",
                    l.domain,
                    l.domain,
                    board.desc.name,
                    names.join(", ")
                )));
            };
            let d = &board.domains[pd];
            let lo = d.opps.first().map_or(0, |o| o.khz);
            let hi = d.opps.last().map_or(0, |o| o.khz);
            for (what, f) in [("min", l.min_khz), ("max", l.max_khz)] {
                if f < lo || f > hi {
                    return Err(SimError::Workload(format!(
                        "--freq-limit {}: {what} {f} kHz is outside {}'s OPP table ({lo}..={hi} kHz)",
                        l.domain, l.domain
                    )));
                }
            }
            cpufreq
                .set_limits(pd, Khz(l.min_khz), Khz(l.max_khz), Nanos(0))
                .map_err(|e| SimError::Workload(format!("--freq-limit {}: {e}", l.domain)))?;
        }
        let trace = match trace {
            Some(w) => Some(TraceWriter::new(w, nr)?),
            None => None,
        };
        // `sched_is_eas_possible`: asymmetric capacities, an EM for every domain,
        // schedutil; plus the `sched_energy_aware` switch.
        let eas_em = if cfg.features.enabled(Feature::ENERGY_AWARE)
            && cfg.governor == Governor::Schedutil
            && board.has_energy_model
            && board.topology.eas_possible()
        {
            let em = EnergyModel::from_topology(board.desc, &board.topology)
                .map_err(|e| SimError::Workload(format!("energy model: {e}")))?;
            em.complete().then_some(em)
        } else {
            None
        };
        let lb = if cfg.load_balance {
            Some(
                SchedDomains::build(&board.topology, cfg.hz, Nanos(0))
                    .map_err(|e| SimError::Workload(e.to_string()))?,
            )
        } else {
            None
        };
        let snaps = cpus.iter().map(|c| c.rq().snapshot()).collect();
        Ok(Engine {
            lb,
            cpu_signals: vec![Default::default(); nr],
            freq_time_ns: board
                .domains
                .iter()
                .map(|d| vec![0; d.opps.len()])
                .collect(),
            board,
            wl,
            now: 0,
            seq: 0,
            // Pending events: a wake-up per task, segment ends (stale ones until they
            // expire), ticks, frequency polls and reschedules.
            heap: EventQueue::with_capacity(16 * (wl.tasks.len() + nr) + 64),
            tasks,
            segs: SegEnds::new(cpus.len()),
            cpus,
            domains,
            timers: vec![interp::Timer::new(); wl.nr_timers],
            busy_ns: board
                .cpus
                .iter()
                .map(|c| vec![0; board.domains[c.domain].opps.len()])
                .collect(),
            counters: Counters {
                freq_changes: vec![0; board.domains.len()],
                ..Counters::default()
            },
            rd: RootDomain {
                overutilized: false,
                overloaded: false,
                tracked: overutilized_tracked(board),
                eas: eas_em.is_some(),
            },
            snaps,
            snaps_version: vec![0; nr],
            moved: MovedTasks {
                by_task: vec![None; wl.tasks.len()],
                nr: 0,
            },
            sync_buf: Vec::with_capacity(wl.tasks.len()),
            later_buf: Vec::with_capacity(2 * (wl.tasks.len() + nr) + 8),
            overutilized_since: 0,
            root_stats_next: Nanos(0),
            nohz: Nohz::default(),
            uclamp_used,
            trace,
            timeline: cfg.record_timeline.then(Timeline::default),
            events: 0,
            tick_ns,
            progress: None,
            cpufreq,
            nr_exited: 0,
            eas_em,
            cfg,
        })
    }

    /// Reserve room for `per_task` wake-up latency, frame-time and timer-window samples per
    /// task now, so that a run producing no more does not allocate while it runs.
    pub fn reserve_samples(&mut self, per_task: usize) {
        for t in &mut self.tasks {
            t.stats.wakeup_latency_ns.reserve(per_task);
            t.stats.period_completion_ns.reserve(per_task);
            t.stats.timer_windows_ns.reserve(per_task);
        }
    }

    /// Call `f(now_ns, end_ns)` every so often during the run (progress bar).
    pub fn set_progress(&mut self, f: impl FnMut(u64, u64) + 'a) {
        self.progress = Some(Box::new(f));
    }

    /// Run to the end and return the results and the trace sink.
    pub fn run(mut self) -> Result<(SimResult, Option<W>), SimError> {
        self.start()?;
        let end = self.run_events()?;
        self.finish(end)
    }

    /// The first stage of [`Engine::run`]: the starting frequencies and trace lines and the
    /// first events.
    pub fn start(&mut self) -> Result<(), SimError> {
        // The governor was set before the workload starts: its starting frequency is in
        // place at time 0 (the transition it requested has completed).
        let mut initial: Vec<u32> = self.domains.iter().map(|d| d.cur_khz).collect();
        let settle = self
            .board
            .domains
            .iter()
            .map(|d| d.latency_ns)
            .max()
            .unwrap_or(0);
        while let Some((pd, khz)) = self.cpufreq.poll(Nanos(settle)) {
            initial[pd] = khz.0;
        }
        self.trace_initial_idle_and_pelt()?;
        // Every CPU starts idle with its tick stopped, as each of Linux's did when its idle
        // thread first ran (`do_idle` → `nohz_balance_enter_idle`, which assumes blocked
        // load whether or not the CPU ever ran a task): the first NOHZ stats update runs
        // schedutil for a cluster nothing runs on, as for any other idle CPU.
        for c in self.cpus.iter_mut() {
            self.nohz.enter_idle(c.rq_mut());
        }
        for (d, khz) in initial.into_iter().enumerate() {
            self.set_freq_now(d, khz)?;
        }
        self.trace_initial_overutilized()?;
        for i in 0..self.tasks.len() {
            self.push(self.wl.tasks[i].delay_ns, Ev::Start(i as u32));
        }
        self.push(self.tick_ns, Ev::Tick);
        Ok(())
    }

    /// The second stage of [`Engine::run`]: every event up to the end of the run (the
    /// configured duration, or when every task has exited with `until_all_exit`), which
    /// it returns.
    pub fn run_events(&mut self) -> Result<u64, SimError> {
        let mut end = self.cfg.duration_ns;
        while let Some(Entry { t, ev, .. }) = self.next_event() {
            if t > end {
                break;
            }
            self.now = t;
            self.events += 1;
            if self.events.is_multiple_of(65_536) {
                if let Some(p) = self.progress.as_mut() {
                    p(t, end);
                }
            }
            match ev {
                Ev::Tick => {
                    if self.lb.is_some() || !self.cfg.highres {
                        self.run_same_time_wakeups(t)?;
                    }
                    self.tick()?
                }
                Ev::Start(i) => self.wake(i as usize, None, true)?,
                Ev::Wake(i) => self.wake(i as usize, None, false)?,
                Ev::SegDone(cpu) => {
                    let cpu = cpu as usize;
                    self.account(cpu)?;
                    if let Some(t) = self.cpus[cpu].running {
                        self.tasks[t].remaining_fp = 0;
                    }
                    self.run_program(cpu)?;
                }
                Ev::FreqPoll => {
                    while let Some((pd, khz)) = self.cpufreq.poll(Nanos(self.now)) {
                        self.set_freq_now(pd, khz.0)?;
                    }
                }
                Ev::Resched(cpu) => {
                    let cpu = cpu as usize;
                    self.account(cpu)?;
                    self.schedule(cpu, PrevState::Preempted)?;
                }
            }
            if self.cfg.until_all_exit && self.nr_exited == self.tasks.len() {
                end = self.now;
                break;
            }
        }
        Ok(end)
    }

    /// The last stage of [`Engine::run`]: account up to `end` and build the results.
    pub fn finish(mut self, end: u64) -> Result<(SimResult, Option<W>), SimError> {
        self.now = end;
        for c in 0..self.cpus.len() {
            self.account(c)?;
            if let (Some(tl), Some(t)) = (self.timeline.as_mut(), self.cpus[c].running) {
                tl.runs.push((c, self.cpus[c].run_start, end, t));
            }
        }
        if self.rd.overutilized {
            self.counters.overutilized_ns += end - self.overutilized_since;
        }
        for (d, dom) in self.domains.iter().enumerate() {
            self.freq_time_ns[d][dom.cur_opp] += end - dom.since;
        }
        let (sink, trace_lines, trace_max_skew_ns) = match self.trace.take() {
            Some(t) => {
                let (lines, skew) = (t.lines, t.max_skew_ns());
                (Some(t.finish()?), lines, skew)
            }
            None => (None, 0, 0),
        };
        let names = self.tasks.iter().map(|t| (t.comm.clone(), t.pid)).collect();
        Ok((
            SimResult {
                end_ns: end,
                tasks: self.tasks.into_iter().map(|t| t.stats).collect(),
                busy_ns: self.busy_ns,
                counters: self.counters,
                events: self.events,
                timeline: self.timeline,
                names,
                trace_lines,
                cpu_signals: self.cpu_signals,
                freq_time_ns: self.freq_time_ns,
                trace_max_skew_ns,
                eas_active: self.eas_em.is_some(),
            },
            sink,
        ))
    }

    /// When a sleep or timer due at `at` wakes its task: at `at` with high-resolution timers,
    /// else on the first tick at or after it (ticks are at multiples of the tick period:
    /// Linux runs low-resolution hrtimers from the tick, `hrtimer_run_queues`).
    fn timer_expiry(&self, at: u64) -> u64 {
        if self.cfg.highres {
            at
        } else {
            at.div_ceil(self.tick_ns).saturating_mul(self.tick_ns)
        }
    }

    /// With load balancing on or low-resolution timers, timer wake-ups due at a tick run
    /// before `sched_tick`, as in Linux's low-resolution mode (`update_process_times` runs
    /// the hrtimer queues before `sched_tick`): the tick then sees the woken task, not an
    /// idle CPU.
    fn run_same_time_wakeups(&mut self, t: u64) -> Result<(), SimError> {
        let mut later = std::mem::take(&mut self.later_buf);
        while let Some(&e) = self.heap.peek() {
            if e.t != t {
                break;
            }
            self.heap.pop();
            match e.ev {
                Ev::Wake(i) => {
                    self.events += 1;
                    self.wake(i as usize, None, false)?;
                }
                _ => later.push(e),
            }
        }
        for e in later.drain(..) {
            self.heap.push(e);
        }
        self.later_buf = later;
        Ok(())
    }

    /// Remove and return the earliest pending event by `(time, sequence)`: the queue's
    /// head or a CPU's live segment end, whichever is earlier (sequence numbers are
    /// unique, so this is the order one queue holding both would pop).
    fn next_event(&mut self) -> Option<Entry<Ev>> {
        if let Some((t, seq, c)) = self.segs.earliest() {
            if self.heap.peek().is_none_or(|h| (t, seq) < (h.t, h.seq)) {
                self.segs.set(c, None);
                self.heap.advance_to(t);
                return Some(Entry {
                    t,
                    seq,
                    ev: Ev::SegDone(c as u32),
                });
            }
        }
        self.heap.pop()
    }

    /// Queue `ev` at `t`; returns its sequence number.
    fn push(&mut self, t: u64, ev: Ev) -> u64 {
        self.seq += 1;
        self.heap.push_parts(t, self.seq, ev);
        self.seq
    }

    fn rate_fp(&self, cpu: usize, task: usize) -> u64 {
        if self.tasks[task].invariant {
            1 << 20
        } else {
            self.cpus[cpu].rate_fp
        }
    }

    /// Bring CPU `cpu` up to `now`: the running task's work, its statistics, busy
    /// residency, then `update_rq_clock` (clock_task, clock_pelt).
    fn account(&mut self, cpu: usize) -> Result<(), SimError> {
        let dt = self.now - self.cpus[cpu].last_acct;
        if dt == 0 {
            return Ok(());
        }
        if let Some(t) = self.cpus[cpu].running {
            let d = self.board.cpus[cpu].domain;
            let rate = self.rate_fp(cpu, t);
            let task = &mut self.tasks[t];
            task.remaining_fp = task.remaining_fp.saturating_sub(dt.saturating_mul(rate));
            task.stats.runtime_ns += dt;
            task.stats.residency_ns[cpu] += dt;
            self.busy_ns[cpu][self.domains[d].cur_opp] += dt;
        }
        let c = &mut self.cpus[cpu];
        c.rq_mut().update_rq_clock(Nanos(self.now))?;
        c.last_acct = self.now;
        Ok(())
    }

    /// The policy-side task, queued or parked.
    fn task_avg(&self, t: usize) -> SchedAvg {
        let st = &self.tasks[t];
        match &st.parked {
            Some(p) => p.avg,
            None => self.cpus[st.cpu]
                .rq()
                .task(tid(t))
                .map_or_else(SchedAvg::default, |p| p.avg),
        }
    }

    /// LISA's `sched_pelt_se` for `t` and `sched_pelt_cfs` for `cpu`, after a PELT update.
    fn trace_pelt(&mut self, cpu: usize, t: Option<usize>) -> Result<(), SimError> {
        self.trace_pelt_on(cpu, cpu, t)
    }

    /// [`Self::trace_pelt`] written on `ctx_cpu` (the CPU doing the update).
    fn trace_pelt_on(
        &mut self,
        ctx_cpu: usize,
        cpu: usize,
        t: Option<usize>,
    ) -> Result<(), SimError> {
        if let Some(t) = t {
            let v = self.task_avg(t);
            self.trace_pelt_se(ctx_cpu, cpu, t, &v)?;
        }
        self.trace_pelt_cfs(ctx_cpu, cpu)
    }

    /// [`Self::trace_pelt_on`] and then the util_est lines for `t`, which has just
    /// been enqueued on `cpu`: both read the task's signals, found here once (a search of
    /// the run queue's task index when it is queued).
    fn trace_pelt_util_est_on(
        &mut self,
        ctx_cpu: usize,
        cpu: usize,
        t: usize,
    ) -> Result<(), SimError> {
        let v = self.task_avg(t);
        self.trace_pelt_se(ctx_cpu, cpu, t, &v)?;
        self.trace_pelt_cfs(ctx_cpu, cpu)?;
        self.trace_util_est_se(ctx_cpu, cpu, t, &v)?;
        self.trace_util_est_cfs(ctx_cpu, cpu)
    }

    /// LISA's `sched_pelt_se` for `t`, whose signals are `v`.
    fn trace_pelt_se(
        &mut self,
        ctx_cpu: usize,
        cpu: usize,
        t: usize,
        v: &SchedAvg,
    ) -> Result<(), SimError> {
        if let Some(tl) = self.timeline.as_mut() {
            tl.utils.push((t, self.now, v.util_avg as u32));
        }
        let sig = &mut self.tasks[t].stats.signals;
        sig[TaskSignal::Util as usize].update(self.now, v.util_avg);
        sig[TaskSignal::Load as usize].update(self.now, v.load_avg);
        if let Some(w) = self.trace.as_mut() {
            let ctx = ctx_of(&self.tasks, &self.cpus, ctx_cpu, self.now);
            let task = tref_of(&self.tasks, t);
            let pelt = PeltVals::from(v);
            w.emit(ctx, TraceEvent::SchedPeltSe { cpu, task, pelt })?;
        }
        Ok(())
    }

    /// LISA's `sched_pelt_cfs` for `cpu`'s root cfs_rq, written on `ctx_cpu`.
    fn trace_pelt_cfs(&mut self, ctx_cpu: usize, cpu: usize) -> Result<(), SimError> {
        let v = *self.cpus[cpu].rq().cfs_avg();
        let sig = &mut self.cpu_signals[cpu];
        sig[CpuSignal::Util as usize].update(self.now, v.util_avg);
        sig[CpuSignal::Load as usize].update(self.now, v.load_avg);
        if let Some(w) = self.trace.as_mut() {
            let ctx = ctx_of(&self.tasks, &self.cpus, ctx_cpu, self.now);
            let pelt = PeltVals::from(&v);
            w.emit(ctx, TraceEvent::SchedPeltCfs { cpu, pelt })?;
        }
        Ok(())
    }

    /// LISA's `sched_util_est_se` for `t` (whose signals are `avg`) after it was enqueued on
    /// or dequeued from `cpu`, written on `ctx_cpu`; `sched_util_est_cfs` follows
    /// ([`Self::trace_util_est_cfs`]).
    fn trace_util_est_se(
        &mut self,
        ctx_cpu: usize,
        cpu: usize,
        t: usize,
        avg: &SchedAvg,
    ) -> Result<(), SimError> {
        let ewma = util_est::task_util_est_raw(avg).0;
        let enqueued = self.tasks[t].ue_enqueued;
        let sig = &mut self.tasks[t].stats.signals;
        sig[TaskSignal::Ewma as usize].update(self.now, ewma as u64);
        sig[TaskSignal::Enqueued as usize].update(self.now, enqueued as u64);
        if let Some(w) = self.trace.as_mut() {
            let ctx = ctx_of(&self.tasks, &self.cpus, ctx_cpu, self.now);
            let task = tref_of(&self.tasks, t);
            w.emit(
                ctx,
                TraceEvent::SchedUtilEstSe {
                    cpu,
                    task,
                    enqueued,
                    ewma,
                    util: avg.util_avg,
                },
            )?;
        }
        Ok(())
    }

    /// LISA's `sched_util_est_cfs` for `cpu`'s root cfs_rq, written on `ctx_cpu`.
    fn trace_util_est_cfs(&mut self, ctx_cpu: usize, cpu: usize) -> Result<(), SimError> {
        let v = *self.cpus[cpu].rq().cfs_avg();
        self.cpu_signals[cpu][CpuSignal::Enqueued as usize].update(self.now, v.util_est as u64);
        if let Some(w) = self.trace.as_mut() {
            let ctx = ctx_of(&self.tasks, &self.cpus, ctx_cpu, self.now);
            w.emit(
                ctx,
                TraceEvent::SchedUtilEstCfs {
                    cpu,
                    enqueued: v.util_est,
                    ewma: 0,
                    util: v.util_avg,
                },
            )?;
        }
        Ok(())
    }

    /// The state every CPU starts in, written at time 0 so that trace analyses know it
    /// from the start (idle, and empty root cfs_rq signals). Linux has no such lines:
    /// its traces begin wherever recording began.
    fn trace_initial_idle_and_pelt(&mut self) -> Result<(), SimError> {
        for cpu in 0..self.cpus.len() {
            if let Some(w) = self.trace.as_mut() {
                let ctx = ctx_of(&self.tasks, &self.cpus, cpu, self.now);
                w.emit(ctx, TraceEvent::CpuIdle { state: 0, cpu })?;
            }
            self.trace_pelt_cfs(cpu, cpu)?;
            self.trace_util_est_cfs(cpu, cpu)?;
        }
        Ok(())
    }

    /// The initial `sched_overutilized: overutilized=0` where the flag exists.
    fn trace_initial_overutilized(&mut self) -> Result<(), SimError> {
        if !self.rd.tracked {
            return Ok(());
        }
        let span = self.rd_span();
        if let Some(w) = self.trace.as_mut() {
            let ctx = ctx_of(&self.tasks, &self.cpus, 0, self.now);
            w.emit(
                ctx,
                TraceEvent::SchedOverutilized {
                    overutilized: false,
                    span,
                },
            )?;
        }
        Ok(())
    }

    /// The root domain's span, as `sched_overutilized` prints it.
    fn rd_span(&self) -> CpuMaskHex {
        let nr = self.cpus.len();
        CpuMaskHex {
            mask: if nr == 64 { u64::MAX } else { (1u64 << nr) - 1 },
            nr_bits: nr,
        }
    }

    /// Whether two CPUs share their last-level cache (on the modelled boards, each
    /// cluster has its own L2).
    fn shares_cache(&self, a: usize, b: usize) -> bool {
        let cpus = self.board.topology.cpus();
        cpus[a].cluster == cpus[b].cluster
    }

    /// `try_to_wake_up` / `wake_up_new_task`: the policy's [`ttwu_select`] over the
    /// CPUs' snapshots, the pure `migrate_task_rq_fair` when the CPU changes, then
    /// [`ttwu_activate_from`] on the target; the engine traces and queues the reschedule.
    fn wake(&mut self, t: usize, waker: Option<usize>, new: bool) -> Result<(), SimError> {
        match self.tasks[t].state {
            TState::Sleeping | TState::Suspended | TState::NotStarted => {}
            _ => return Ok(()),
        }
        // try_to_wake_up: `if (p->on_rq && ttwu_runnable(p, wake_flags))` — a sleeper whose
        // dequeue was delayed is still queued and wakes there, before any select_task_rq.
        if self.tasks[t].parked.is_none() && self.wake_delayed(t, waker)? {
            return Ok(());
        }
        let prev = self.tasks[t].cpu;
        let ctx_cpu = waker.unwrap_or(prev);
        // The policy-side task stays in `parked` until `ttwu_activate_from` moves it into the
        // run queue: taken out here, it was copied (a few hundred bytes) on every step.
        let (allowed, uclamp) = (CpuMask(self.tasks[t].allowed), self.tasks[t].uclamp);
        let Some(task) = self.tasks[t].parked.as_mut() else {
            return Err(SimError::Workload(format!(
                "task {} woken while queued",
                self.tasks[t].comm
            )));
        };
        // The workload program's affinity and clamps for this activation: phase-level
        // clamps take effect at the next enqueue; the first clamp request enables
        // `sched_uclamp_used`.
        task.cpus_allowed = allowed;
        if let Some((lo, hi)) = uclamp {
            let _ = task.uclamp.set_request(lo, hi);
            self.uclamp_used = true;
        }
        let task_id = task.id;
        let kind = if new {
            WakeKind::Fork
        } else {
            WakeKind::Wakeup
        };
        // record_wakee on `current` of the waking CPU (its idle task when idle), then
        // wake_wide over both tasks' flips with that CPU's LLC (cluster) size — in
        // select_task_rq_fair, which Linux calls only for a task allowed on more than one
        // CPU. rt-app's wake-ups (futexes) are not WF_SYNC.
        let mut waker = WakerInfo::default();
        if !new && select_task_rq_wanted(allowed) {
            let jiffies = self.now / self.tick_ns;
            let hz = 1_000_000_000 / self.tick_ns;
            let flips = match self.cpus[ctx_cpu].running {
                Some(w) => &mut self.tasks[w].wakee,
                None => &mut self.cpus[ctx_cpu].idle_wakee,
            };
            flips.record_wakee(task_id, jiffies, hz);
            let flips = *flips;
            let llc_size = self.cpus[ctx_cpu].llc_size;
            waker.wake_wide = wake_wide(&flips, &self.tasks[t].wakee, llc_size);
        }
        self.refresh_snaps();
        let wctx = WakeCtx {
            core: core_ctx(self.board, &self.cfg, self.uclamp_used, self.lb.is_some()),
            cpus: &self.snaps,
            em: self.eas_em.as_ref(),
            rd: self.rd,
            uclamp_sysctl: self.cpus[prev].rq().uclamp_sysctl(),
            placement: self.cfg.placement,
            waker,
        };
        let Some(task) = self.tasks[t].parked.as_ref() else {
            unreachable!("task {t} left `parked` during its wake-up");
        };
        let cpu = ttwu_select(task, CpuId(prev as u16), CpuId(ctx_cpu as u16), kind, &wctx);
        let cpu = cpu.index();
        self.account(prev)?;
        self.account(cpu)?;
        self.account(ctx_cpu)?;
        // The CPU running try_to_wake_up: the waker's, or for a timer the CPU the task
        // slept on (where its hrtimer fires). A new task has no parent task here, so
        // its wake-up is written on its own CPU.
        let waker_cpu = if new { cpu } else { ctx_cpu };
        // An idle CPU handling the wake-up (its timer interrupt) leaves idle first.
        let waker_left_idle =
            self.cpus[waker_cpu].running.is_none() && self.idle_exit(waker_cpu)?;
        if !new {
            if let Some(w) = self.trace.as_mut() {
                let task = tref_of(&self.tasks, t);
                let ctx = ctx_of(&self.tasks, &self.cpus, waker_cpu, self.now);
                w.emit(
                    ctx,
                    TraceEvent::SchedWaking {
                        task,
                        target_cpu: prev,
                    },
                )?;
            }
        }
        // ttwu_queue: the target CPU activates the task itself (IPI, ttwu_queue_wakelist)
        // when it does not share the waker's cache or is idle; else the waker does.
        let act_cpu = if cpu != waker_cpu
            && (!self.shares_cache(waker_cpu, cpu) || self.cpus[cpu].running.is_none())
        {
            cpu
        } else {
            waker_cpu
        };
        let act_left_idle = act_cpu != waker_cpu
            && self.cpus[act_cpu].running.is_none()
            && self.idle_exit(act_cpu)?;
        let st = &mut self.tasks[t];
        st.stats.activations += 1;
        st.state = TState::Runnable;
        st.wake_ts = Some(self.now);
        let migrated = !new && cpu != prev;
        if migrated {
            let old = self.cpus[prev].rq_mut();
            let Some(task) = self.tasks[t].parked.as_mut() else {
                unreachable!("task {t} left `parked` during its wake-up");
            };
            let removed = migrate_task_rq_fair(&old.pelt_remote(), task, old.clock_task())?;
            old.apply_removed(removed);
            if let Some(w) = self.trace.as_mut() {
                let ctx = ctx_of(&self.tasks, &self.cpus, waker_cpu, self.now);
                let task = tref_of(&self.tasks, t);
                w.emit(
                    ctx,
                    TraceEvent::SchedMigrateTask {
                        task,
                        orig_cpu: prev,
                        dest_cpu: cpu,
                    },
                )?;
            }
            self.tasks[t].stats.migrations += 1;
            self.counters.migrations_wakeup += 1;
        }
        self.tasks[t].cpu = cpu;
        let cctx = core_ctx(self.board, &self.cfg, self.uclamp_used, self.lb.is_some());
        let outcome = ttwu_activate_from(
            self.cpus[cpu].rq_mut(),
            &mut self.tasks[t].parked,
            kind,
            migrated,
            &self.rd,
            &cctx,
        )?;
        self.cpufreq_update(cpu);
        self.trace_pelt_util_est_on(act_cpu, cpu, t)?;
        // ttwu_do_activate → ttwu_do_wakeup: after the enqueue and wakeup_preempt.
        if let Some(w) = self.trace.as_mut() {
            let ctx = ctx_of(&self.tasks, &self.cpus, act_cpu, self.now);
            let task = tref_of(&self.tasks, t);
            let target_cpu = cpu;
            w.emit(
                ctx,
                if new {
                    TraceEvent::SchedWakeupNew { task, target_cpu }
                } else {
                    TraceEvent::SchedWakeup { task, target_cpu }
                },
            )?;
        }
        if outcome.resched.is_yes() {
            self.push(self.now, Ev::Resched(cpu as u32));
        }
        for (left, c) in [(waker_left_idle, waker_cpu), (act_left_idle, act_cpu)] {
            if left && c != cpu {
                self.idle_enter(c)?;
            }
        }
        if outcome.overloaded {
            self.rd.overloaded = true;
        }
        match outcome.overutilized {
            Some(v) => self.set_overutilized(v),
            None => Ok(()),
        }
    }

    /// The wake-up of `t` while its dequeue is delayed on `task_cpu` (`ttwu_runnable`, on the
    /// waker's CPU under that rq's lock): no CPU selection, no migration, no `record_wakee`
    /// (that is `select_task_rq_fair`'s), no IPI. Returns false, having finished the delayed
    /// dequeue (`t` is then parked, for the usual path), when the program's affinity for
    /// this activation excludes that CPU: v6.12's `__set_cpus_allowed_ptr` would move the
    /// queued task (still delayed) to an allowed CPU at the affinity change; the simulator
    /// applies a program's affinity at wake-ups, so it lets the wake-up choose instead.
    fn wake_delayed(&mut self, t: usize, waker: Option<usize>) -> Result<bool, SimError> {
        let cpu = self.tasks[t].cpu;
        let id = tid(t);
        let ctx_cpu = waker.unwrap_or(cpu);
        self.account(cpu)?;
        self.account(ctx_cpu)?;
        let mask = CpuMask(self.tasks[t].allowed);
        if !mask.contains(CpuId(cpu as u16)) {
            let mut slot = None;
            self.cpus[cpu]
                .rq_mut()
                .dequeue_delayed_task_into(id, &mut slot)?;
            self.cpufreq_update(cpu);
            self.tasks[t].parked = slot;
            return Ok(false);
        }
        let Some(queued) = self.cpus[cpu].rq().task(id) else {
            return Err(SimError::Workload(format!(
                "task {} sleeps neither parked nor queued on cpu {cpu}",
                self.tasks[t].comm
            )));
        };
        // The program's affinity and clamps for this activation, as a parked task gets them
        // at its wake-up: on the queued task (`__do_set_cpus_allowed`, `__setscheduler_uclamp`).
        let mut uclamp = queued.uclamp;
        let uclamp_changed = match self.tasks[t].uclamp {
            Some((lo, hi)) => {
                let _ = uclamp.set_request(lo, hi);
                self.uclamp_used = true;
                uclamp.req != queued.uclamp.req
            }
            None => false,
        };
        let rq = self.cpus[cpu].rq_mut();
        rq.set_cpus_allowed(id, mask)?;
        if uclamp_changed {
            rq.set_uclamp(id, uclamp)?;
        }
        let waker_left_idle = self.cpus[ctx_cpu].running.is_none() && self.idle_exit(ctx_cpu)?;
        if let Some(w) = self.trace.as_mut() {
            let task = tref_of(&self.tasks, t);
            let ctx = ctx_of(&self.tasks, &self.cpus, ctx_cpu, self.now);
            w.emit(
                ctx,
                TraceEvent::SchedWaking {
                    task,
                    target_cpu: cpu,
                },
            )?;
        }
        let st = &mut self.tasks[t];
        st.stats.activations += 1;
        st.state = TState::Runnable;
        st.wake_ts = Some(self.now);
        let Some(outcome) = ttwu_runnable(self.cpus[cpu].rq_mut(), id)? else {
            return Err(SimError::Workload(format!(
                "task {} queued while asleep but not delayed",
                self.tasks[t].comm
            )));
        };
        self.counters.wakeups_delayed += 1;
        self.cpufreq_update(cpu);
        self.trace_pelt_util_est_on(ctx_cpu, cpu, t)?;
        if let Some(w) = self.trace.as_mut() {
            let ctx = ctx_of(&self.tasks, &self.cpus, ctx_cpu, self.now);
            let task = tref_of(&self.tasks, t);
            w.emit(
                ctx,
                TraceEvent::SchedWakeup {
                    task,
                    target_cpu: cpu,
                },
            )?;
        }
        if outcome.resched.is_yes() {
            self.push(self.now, Ev::Resched(cpu as u32));
        }
        if waker_left_idle && ctx_cpu != cpu {
            self.idle_enter(ctx_cpu)?;
        }
        Ok(true)
    }

    /// Every CPU's [`RqSnapshot`] as of now, into `self.snaps` (what other CPUs would
    /// read).
    fn refresh_snaps(&mut self) {
        for (c, cpu) in self.cpus.iter().enumerate() {
            if self.snaps_version[c] != cpu.version() {
                self.snaps[c] = cpu.rq().snapshot();
                self.snaps_version[c] = cpu.version();
            }
        }
    }

    /// Store a new root-domain overutilized flag: account the time and trace the change.
    fn set_overutilized(&mut self, over: bool) -> Result<(), SimError> {
        if self.rd.overutilized {
            self.counters.overutilized_ns += self.now - self.overutilized_since;
        }
        self.rd.overutilized = over;
        self.overutilized_since = self.now;
        let span = self.rd_span();
        if let Some(w) = self.trace.as_mut() {
            let ctx = ctx_of(&self.tasks, &self.cpus, 0, self.now);
            let overutilized = over;
            w.emit(ctx, TraceEvent::SchedOverutilized { overutilized, span })?;
        }
        Ok(())
    }

    /// `cpu_idle: state=4294967295` unless the CPU is already out of idle.
    fn idle_exit(&mut self, cpu: usize) -> Result<bool, SimError> {
        if !self.cpus[cpu].in_idle_state {
            return Ok(false);
        }
        self.cpus[cpu].in_idle_state = false;
        if let Some(w) = self.trace.as_mut() {
            let ctx = ctx_of(&self.tasks, &self.cpus, cpu, self.now);
            let state = trace::PWR_EVENT_EXIT;
            w.emit(ctx, TraceEvent::CpuIdle { state, cpu })?;
        }
        Ok(true)
    }

    /// `cpu_idle: state=0` (WFI) unless the CPU is already in idle.
    fn idle_enter(&mut self, cpu: usize) -> Result<(), SimError> {
        if self.cpus[cpu].in_idle_state {
            return Ok(());
        }
        self.cpus[cpu].in_idle_state = true;
        if let Some(w) = self.trace.as_mut() {
            let ctx = ctx_of(&self.tasks, &self.cpus, cpu, self.now);
            w.emit(ctx, TraceEvent::CpuIdle { state: 0, cpu })?;
        }
        Ok(())
    }

    /// `__schedule` on `cpu`: pick the next task and switch to it. The caller has
    /// accounted the CPU up to now.
    fn schedule(&mut self, cpu: usize, prev_state: PrevState) -> Result<(), SimError> {
        let prev = self.cpus[cpu].running;
        let cctx = core_ctx(self.board, &self.cfg, self.uclamp_used, self.lb.is_some());
        // A delayed task the pick finds has its dequeue finished and comes back to sleep
        // here (`__block_task`).
        let tasks = &mut self.tasks;
        let mut park = |task: Task| {
            let t = tidx(task.id);
            tasks[t].parked = Some(task);
        };
        let mut pick = schedule_pick_with(self.cpus[cpu].rq_mut(), &cctx, &mut park);
        if pick == Pick::Newidle {
            // pick_next_task_fair's newidle balance (Linux drops the rq lock here), then
            // the repick, which goes idle (clock_pelt resync) when nothing arrived.
            self.sched_balance_newidle(cpu)?;
            let tasks = &mut self.tasks;
            let mut park = |task: Task| {
                let t = tidx(task.id);
                tasks[t].parked = Some(task);
            };
            pick = schedule_repick_with(self.cpus[cpu].rq_mut(), &mut park);
        }
        let next = match pick {
            Pick::Next(id) => Some(tidx(id)),
            Pick::Idle | Pick::Newidle => None,
        };
        schedule_finish(self.cpus[cpu].rq_mut(), &cctx);
        self.cpufreq_update(cpu);
        if let Some(p) = prev {
            if self.tasks[p].parked.is_none() {
                self.trace_pelt(cpu, Some(p))?;
            }
        }
        if prev == next {
            if prev.is_none() {
                // Left idle to activate a task that is gone again (pulled away).
                self.idle_enter(cpu)?;
            }
            return Ok(());
        }
        self.counters.context_switches += 1;
        if let Some(p) = prev {
            if self.tasks[p].state == TState::Running {
                self.tasks[p].state = TState::Runnable;
            }
            if let Some(tl) = self.timeline.as_mut() {
                tl.runs.push((cpu, self.cpus[cpu].run_start, self.now, p));
            }
        }
        if prev.is_none() {
            self.idle_exit(cpu)?;
        }
        if let Some(w) = self.trace.as_mut() {
            let ctx = ctx_of(&self.tasks, &self.cpus, cpu, self.now);
            let idle = TaskRef::idle(cpu);
            let prev_task = prev.map_or(idle, |p| tref_of(&self.tasks, p));
            let next_task = next.map_or(idle, |n| tref_of(&self.tasks, n));
            let prev_state = match prev.map(|p| self.tasks[p].state) {
                None => PrevState::Running,
                Some(TState::Dead) => PrevState::Dead,
                Some(TState::Sleeping | TState::Suspended) => PrevState::Sleeping,
                Some(_) => prev_state,
            };
            w.emit(
                ctx,
                TraceEvent::SchedSwitch {
                    prev: prev_task,
                    prev_state,
                    next: next_task,
                },
            )?;
        }
        let c = &mut self.cpus[cpu];
        c.running = next;
        c.run_start = self.now;
        self.segs.set(cpu, None);
        match next {
            None => {
                sched_core::idle_enter(self.cpus[cpu].rq_mut());
                self.trace_pelt(cpu, None)?;
                self.enter_idle(cpu)?;
                self.idle_enter(cpu)?;
            }
            Some(n) => {
                let task = &mut self.tasks[n];
                task.state = TState::Running;
                if let Some(w) = task.wake_ts.take() {
                    task.stats.wakeup_latency_ns.push(self.now - w);
                }
                self.trace_pelt(cpu, Some(n))?;
                if self.tasks[n].remaining_fp == 0 {
                    self.run_program(cpu)?;
                } else {
                    self.arm_segment(cpu);
                }
            }
        }
        Ok(())
    }

    /// Schedule the end of the running task's current piece of work on `cpu`.
    fn arm_segment(&mut self, cpu: usize) {
        let Some(t) = self.cpus[cpu].running else {
            return;
        };
        let rate = self.rate_fp(cpu, t).max(1);
        let dt = self.tasks[t].remaining_fp.div_ceil(rate);
        self.seq += 1;
        self.segs.set(cpu, Some((self.now + dt, self.seq)));
    }

    /// The running task of `cpu` blocks (`block_task`: `DEQUEUE_SLEEP`, `DEQUEUE_SPECIAL`
    /// for exit), then `__schedule`. Under `DELAY_DEQUEUE` it may stay queued (delayed).
    fn block(&mut self, cpu: usize, t: usize, state: TState) -> Result<(), SimError> {
        let dead = state == TState::Dead;
        // A dequeued task goes straight to `parked` (empty while it ran), where it sleeps.
        let block = block_task(
            self.cpus[cpu].rq_mut(),
            tid(t),
            dead,
            &mut self.tasks[t].parked,
        )?;
        self.cpufreq_update(cpu);
        // The task's signals, searched for in the run queue at most once: for the util_est
        // sample and for the trace (which reads them where `task_avg` finds them).
        let slot = &self.tasks[t].parked;
        let dequeued = matches!((slot, block), (Some(_), Block::Dequeued));
        let queued = if dequeued && self.tasks[t].cpu == cpu {
            None
        } else {
            self.cpus[cpu].rq().task(tid(t)).map(|task| task.avg)
        };
        let util_avg = match (slot, block) {
            (Some(task), Block::Dequeued) => task.avg.util_avg,
            _ => queued.map_or(0, |avg| avg.util_avg),
        };
        if self.cfg.features.enabled(Feature::UTIL_EST) {
            // Pre-v6.9 util_est_update: `enqueued` takes the util at each sleep.
            self.tasks[t].ue_enqueued = util_avg as u32;
        }
        self.tasks[t].state = state;
        let avg = match &self.tasks[t].parked {
            Some(p) => p.avg,
            None if self.tasks[t].cpu == cpu => queued.unwrap_or_default(),
            None => self.task_avg(t),
        };
        self.trace_util_est_se(cpu, cpu, t, &avg)?;
        self.trace_util_est_cfs(cpu, cpu)?;
        self.schedule(cpu, PrevState::Sleeping)
    }

    /// Run the current task's rt-app program ([`Thread::step`]) until it has work to do
    /// or blocks.
    fn run_program(&mut self, cpu: usize) -> Result<(), SimError> {
        let Some(t) = self.cpus[cpu].running else {
            return Ok(());
        };
        let mut steps = 0u32;
        loop {
            let action = self.tasks[t].prog.step(self.wl, &mut self.timers, self.now);
            match action {
                Action::Start => {
                    self.rtapp_thread_start(cpu, t)?;
                    continue;
                }
                Action::Marker(m) => {
                    if let RtApp::Stats {
                        slack,
                        c_period,
                        c_run,
                        ..
                    } = m
                    {
                        self.tasks[t].stats.rtapp.add(slack, c_period, c_run);
                    }
                    self.trace_marker(cpu, m)?;
                    continue;
                }
                Action::Phase(p) => {
                    let task = &mut self.tasks[t];
                    task.allowed = p.allowed;
                    task.uclamp = p.uclamp;
                    if task.nice != p.nice {
                        // A phase with its own `nice`: set_user_nice on the queued task.
                        task.nice = p.nice;
                        self.cpus[cpu].rq_mut().set_nice(tid(t), p.nice)?;
                    }
                    continue;
                }
                _ => {}
            }
            steps += 1;
            if steps > MAX_ZERO_TIME_STEPS {
                return Err(SimError::Workload(format!(
                    "task {} loops without ever running or sleeping (no time passes)",
                    self.tasks[t].comm
                )));
            }
            match action {
                Action::Start | Action::Marker(_) | Action::Phase(_) => {}
                Action::Exit => {
                    self.tasks[t].stats.exited = true;
                    self.nr_exited += 1;
                    self.block(cpu, t, TState::Dead)?;
                    // finish_task_switch → task_dead_fair → remove_entity_load_avg, after
                    // the switch: a dead task's signals leave its CPU's cfs_rq at the next
                    // update instead of decaying there as blocked load.
                    if let Some(mut task) = self.tasks[t].parked.take() {
                        let rq = self.cpus[cpu].rq_mut();
                        let removed = task_dead_fair(&rq.pelt_remote(), &mut task)?;
                        rq.apply_removed(removed);
                        self.tasks[t].parked = Some(task);
                    }
                    return Ok(());
                }
                Action::Run { work_ns } | Action::Runtime { ns: work_ns } => {
                    if work_ns == 0 {
                        continue;
                    }
                    let task = &mut self.tasks[t];
                    task.invariant = matches!(action, Action::Runtime { .. });
                    task.remaining_fp = work_ns << 20;
                    self.arm_segment(cpu);
                    return Ok(());
                }
                Action::Sleep { ns } => {
                    if ns == 0 {
                        continue;
                    }
                    let at = self.timer_expiry(self.now + ns);
                    self.push(at, Ev::Wake(t as u32));
                    return self.block(cpu, t, TState::Sleeping);
                }
                Action::Timer(tick) => {
                    let stats = &mut self.tasks[t].stats;
                    stats.timer_activations += 1;
                    stats
                        .period_completion_ns
                        .push(self.now.saturating_sub(tick.period_start_ns));
                    let from = stats.timer_release_ns.unwrap_or(tick.period_start_ns);
                    stats
                        .timer_windows_ns
                        .push((from, tick.expiry_ns, tick.overrun));
                    stats.timer_release_ns = Some(tick.wait_until_ns.unwrap_or(self.now));
                    if tick.overrun {
                        // The work of this period overran into the next one.
                        stats.deadline_misses += 1;
                    }
                    let Some(at) = tick.wait_until_ns else {
                        continue;
                    };
                    let at = self.timer_expiry(at);
                    self.push(at, Ev::Wake(t as u32));
                    return self.block(cpu, t, TState::Sleeping);
                }
                Action::Suspend => return self.block(cpu, t, TState::Suspended),
                Action::Resume(targets) => {
                    for &r in targets {
                        match self.tasks[r].state {
                            TState::Suspended => self.wake(r, Some(cpu), false)?,
                            TState::Dead => {}
                            _ => self.tasks[r].prog.post_resume(),
                        }
                    }
                }
                Action::Yield => {
                    self.cpus[cpu].rq_mut().yield_task();
                    if self.cpus[cpu].rq().need_resched() {
                        self.schedule(cpu, PrevState::Running)?;
                        if self.cpus[cpu].running != Some(t) {
                            return Ok(());
                        }
                    }
                }
            }
        }
    }

    /// What an rt-app thread does first when it runs (rt-app's `thread_body`): it renames
    /// itself (`task_rename`); the interpreter then has it write rt-app's start markers.
    fn rtapp_thread_start(&mut self, cpu: usize, t: usize) -> Result<(), SimError> {
        if let Some(w) = self.trace.as_mut() {
            let ctx = ctx_of(&self.tasks, &self.cpus, cpu, self.now);
            w.emit(
                ctx,
                TraceEvent::TaskRename {
                    pid: self.tasks[t].pid,
                    oldcomm: Comm::Task(trace::RTAPP_COMM),
                    newcomm: Comm::Task(&self.tasks[t].comm),
                },
            )?;
        }
        self.tasks[t].renamed = true;
        Ok(())
    }

    /// A `trace_marker` write by the task running on `cpu`.
    fn trace_marker(&mut self, cpu: usize, m: RtApp) -> Result<(), SimError> {
        if let Some(w) = self.trace.as_mut() {
            let ctx = ctx_of(&self.tasks, &self.cpus, cpu, self.now);
            w.emit(ctx, TraceEvent::TracingMarkWrite(m))?;
        }
        Ok(())
    }

    /// The tick on every CPU that ticks: busy CPUs (idle CPUs are NOHZ-idle and do not
    /// tick) and, with load balancing on, an idle CPU whose last idle period was shorter
    /// than a tick ([`idle_tick_kept`]: `tick_nohz_idle_stop_tick` keeps the tick when the
    /// next timer is less than a tick away, which we approximate by the last idle period; a
    /// cyclictest CPU keeps ticking, an idle system does not). Each runs the crate's
    /// [`sched_tick`] and carries out its [`sched_core::TickSteps`].
    fn tick(&mut self) -> Result<(), SimError> {
        for cpu in 0..self.cpus.len() {
            let running = self.cpus[cpu].running;
            let curr = if running.is_some() {
                TickCurr::Fair
            } else {
                TickCurr::Idle
            };
            if running.is_none()
                && !idle_tick_kept(self.cpus[cpu].rq(), self.tick_ns, self.lb.is_some())
            {
                continue;
            }
            self.account(cpu)?;
            let cctx = core_ctx(self.board, &self.cfg, self.uclamp_used, self.lb.is_some());
            let tick = TickCtx {
                now: Nanos(self.now),
                tick_ns: self.tick_ns,
                curr,
                root_stats_next: self.root_stats_next,
            };
            let steps = sched_tick(self.cpus[cpu].rq_mut(), &self.rd, &tick, &cctx);
            if let Some(t) = running {
                self.cpufreq_update(cpu);
                if let Some(v) = steps.overutilized {
                    self.set_overutilized(v)?;
                }
                self.trace_pelt(cpu, Some(t))?;
            }
            if let Some(next) = steps.root_stats {
                self.root_stats_next = next;
                self.update_root_stats()?;
            }
            // SCHED_SOFTIRQ at irq_exit and the NOHZ kick, then `__schedule` at the
            // interrupt's return (TIF_NEED_RESCHED is the ticked task's: a switch since, such
            // as an active balance's stopper, consumed it).
            if steps.softirq {
                self.raise_sched_softirq(cpu)?;
            }
            if steps.nohz_kick {
                self.nohz_balancer_kick(cpu)?;
            }
            if steps.softirq {
                self.sched_balance_softirq(cpu)?;
            }
            if steps.resched.is_yes() && self.cpus[cpu].running == running {
                self.schedule(cpu, PrevState::Preempted)?;
            }
        }
        let next = self.now + self.tick_ns;
        if next <= self.cfg.duration_ns {
            self.push(next, Ev::Tick);
        }
        Ok(())
    }

    /// Without load balancing, the root level's overutilized statistics a tick found due
    /// ([`sched_core::TickSteps::root_stats`]): [`RootDomain::update_root_stats`] over every
    /// CPU's snapshot as it stands.
    fn update_root_stats(&mut self) -> Result<(), SimError> {
        self.refresh_snaps();
        let (f, u) = (self.cfg.features, self.uclamp_used);
        match self.rd.update_root_stats(&self.snaps, f, u) {
            Some(v) => self.set_overutilized(v),
            None => Ok(()),
        }
    }

    /// `jiffies` at the current time.
    fn jiffies(&self) -> u64 {
        self.now / self.tick_ns
    }

    /// `cpu` has just switched to idle: `sched_balance_newidle` found nothing to pull
    /// (`idle_stamp`, then `nohz_newidle_balance` → `nohz_run_idle_balance`), then the
    /// tick stops (`nohz_balance_enter_idle`), with load balancing on or off
    /// ([`nohz_parts`]).
    fn enter_idle(&mut self, cpu: usize) -> Result<(), SimError> {
        let j = self.jiffies();
        let avg_idle = self.cpus[cpu].rq().avg_idle();
        if !nohz_parts(self.lb.is_some()).stats {
            return Ok(());
        }
        if self.nohz.newidle_stats_due(avg_idle, j) {
            self.nohz_idle_balance(cpu, NohzKickFlags::STATS)?;
        }
        self.nohz.enter_idle(self.cpus[cpu].rq_mut());
        Ok(())
    }

    /// `nohz_balancer_kick` from the tick of busy `cpu` ([`Nohz::nohz_balancer_kick`]): the
    /// kicked CPU leaves WFI, raises `SCHED_SOFTIRQ` once and runs [`Self::nohz_idle_balance`]
    /// with the kick's flags.
    fn nohz_balancer_kick(&mut self, cpu: usize) -> Result<(), SimError> {
        let j = self.jiffies();
        let this = self.cpus[cpu].rq().snapshot();
        let parts = nohz_parts(self.lb.is_some());
        let Some((ilb, flags)) =
            self.nohz
                .nohz_balancer_kick(&this, j, &SimSnaps(&self.cpus), parts)
        else {
            return Ok(());
        };
        let ilb = ilb.index();
        self.counters.sched_softirq_raises += 1;
        let left_idle = self.idle_exit(ilb)?;
        if let Some(w) = self.trace.as_mut() {
            let ctx = ctx_of(&self.tasks, &self.cpus, ilb, self.now);
            w.emit(ctx, TraceEvent::SoftirqRaise(trace::Softirq::Sched))?;
        }
        self.nohz_idle_balance(ilb, flags)?;
        if left_idle {
            self.idle_enter(ilb)?;
        }
        Ok(())
    }

    /// `_nohz_idle_balance(this_cpu, flags)` through the crate's [`nohz_idle_balance`] walk
    /// ([`SimNohzWalk`]): a stats kick counts one NOHZ pass, a balance kick brings every CPU's
    /// account up to now first.
    fn nohz_idle_balance(&mut self, this_cpu: usize, flags: NohzKickFlags) -> Result<(), SimError> {
        if flags.contains(NohzKickFlags::STATS) {
            self.counters.lb_nohz += 1;
        }
        if flags.contains(NohzKickFlags::BALANCE) {
            for c in 0..self.cpus.len() {
                self.account(c)?;
            }
        }
        let (now, tick_ns, hz, nr) = (Nanos(self.now), self.tick_ns, self.cfg.hz, self.cpus.len());
        let mut w = SimNohzWalk {
            eng: self,
            ilb: this_cpu,
        };
        nohz_idle_balance(CpuId(this_cpu as u16), flags, now, tick_ns, hz, nr, &mut w)?;
        Ok(())
    }

    /// `update_nohz_stats` for idle `cpu`, run on `this_cpu`
    /// ([`blocked_load_check`], [`update_blocked_load`]). Returns whether `cpu` still has
    /// blocked load.
    fn update_nohz_stats(&mut self, this_cpu: usize, cpu: usize) -> Result<bool, SimError> {
        let j = self.jiffies();
        match blocked_load_check(&self.nohz, self.cpus[cpu].rq(), j) {
            BlockedLoad::Done(still) => return Ok(still),
            BlockedLoad::Update => {}
        }
        self.account(cpu)?;
        let (decayed, still) = update_blocked_load(self.cpus[cpu].rq_mut(), j);
        if let Some(req) = blocked_load_cpufreq(self.cpus[cpu].rq_mut(), decayed) {
            self.cpufreq_answer(cpu, req);
        }
        if decayed {
            self.trace_pelt_cfs(this_cpu, cpu)?;
        }
        Ok(still)
    }

    /// Apply a frequency to a domain now (the transition latency has passed).
    fn set_freq_now(&mut self, d: usize, khz: u32) -> Result<(), SimError> {
        let board: &'a Board = self.board;
        let cpus = &board.domains[d].cpus;
        for &c in cpus {
            self.account(c)?;
        }
        let changed = self.domains[d].cur_khz != khz || self.now == 0;
        let dom = &mut self.domains[d];
        self.freq_time_ns[d][dom.cur_opp] += self.now - dom.since;
        dom.since = self.now;
        self.domains[d].cur_khz = khz;
        self.domains[d].cur_opp = self.board.opp_index(d, khz);
        for &c in cpus {
            self.cpus[c].rate_fp = board.rate_fp(c, khz);
        }
        let scale = arch_scale_freq_capacity(Khz(khz), Khz(self.board.domains[d].fmax_khz));
        for &c in cpus {
            self.cpus[c].rq_mut().set_freq_scale(Capacity(scale));
        }
        if !changed {
            return Ok(());
        }
        if self.now > 0 {
            self.counters.freq_changes[d] += 1;
        }
        if let Some(tl) = self.timeline.as_mut() {
            tl.freqs.push((d, self.now, khz));
        }
        for &c in cpus {
            // LISA's sched_cpu_capacity: Linux fires it from update_cpu_capacity (load
            // balance statistics); written here at each frequency change so that
            // capacity_curr is exact at every instant.
            let orig = self.board.cpus[c].capacity_orig;
            let curr = ((orig as u64 * scale as u64) >> 10) as u32;
            self.cpu_signals[c][CpuSignal::CapacityCurr as usize].update(self.now, curr as u64);
            if let Some(w) = self.trace.as_mut() {
                let ctx = ctx_of(&self.tasks, &self.cpus, c, self.now);
                w.emit(ctx, TraceEvent::CpuFrequency { khz, cpu: c })?;
                w.emit(
                    ctx,
                    TraceEvent::SchedCpuCapacity {
                        cpu: c,
                        capacity: orig,
                        capacity_orig: orig,
                        capacity_curr: curr,
                    },
                )?;
            }
            if self.cpus[c].running.is_some() && self.now > 0 {
                self.arm_segment(c);
            }
        }
        Ok(())
    }

    /// The load-balancer context: root-domain flags and features.
    fn lb_context(&self) -> LbContext {
        LbContext {
            overutilized: self.rd.overutilized,
            eas_active: self.eas_em.is_some(),
            uclamp_used: self.uclamp_used,
            ..LbContext::new(self.cfg.features)
        }
    }

    /// `sched_balance_trigger`'s `raise_softirq(SCHED_SOFTIRQ)` in the tick of `cpu`
    /// ([`sched_core::TickSteps::softirq`]); the softirq itself runs after the tick's NOHZ
    /// kick ([`Self::sched_balance_softirq`]).
    fn raise_sched_softirq(&mut self, cpu: usize) -> Result<(), SimError> {
        self.counters.sched_softirq_raises += 1;
        if let Some(w) = self.trace.as_mut() {
            let ctx = ctx_of(&self.tasks, &self.cpus, cpu, self.now);
            w.emit(ctx, TraceEvent::SoftirqRaise(trace::Softirq::Sched))?;
        }
        Ok(())
    }

    /// The SCHED_SOFTIRQ the tick of `cpu` raised ([`Self::raise_sched_softirq`]), run at
    /// `irq_exit` — after the tick's NOHZ kick, before the reschedule at the interrupt's
    /// return: `sched_balance_softirq`.
    fn sched_balance_softirq(&mut self, cpu: usize) -> Result<(), SimError> {
        let now = Nanos(self.now);
        let ctx = self.lb_context();
        for c in 0..self.cpus.len() {
            self.account(c)?;
        }
        let Some(sds) = self.lb.as_mut() else {
            return Ok(());
        };
        let report = sched_balance_softirq(
            sds,
            CpuId(cpu as u16),
            &mut SimRqs {
                cpus: &mut self.cpus,
                moved: &mut self.moved,
                overloaded: &mut self.rd.overloaded,
            },
            now,
            &ctx,
        )
        .map_err(|e| SimError::Workload(e.to_string()))?;
        self.counters.lb_periodic += report.lb_runs as u64;
        self.after_balance(cpu, &report, None)
    }

    /// `sched_balance_newidle` for `cpu`, which found nothing to run. Returns whether
    /// it now has a task.
    fn sched_balance_newidle(&mut self, cpu: usize) -> Result<bool, SimError> {
        let ctx = self.lb_context();
        for c in 0..self.cpus.len() {
            self.account(c)?;
        }
        let now = Nanos(self.now);
        let Some(sds) = self.lb.as_mut() else {
            return Ok(false);
        };
        let mut t = 0u64;
        let mut clock = || {
            t += NEWIDLE_LB_COST_NS;
            t
        };
        let report = sched_balance_newidle(
            sds,
            CpuId(cpu as u16),
            &mut SimRqs {
                cpus: &mut self.cpus,
                moved: &mut self.moved,
                overloaded: &mut self.rd.overloaded,
            },
            now,
            &ctx,
            &mut clock,
        )
        .map_err(|e| SimError::Workload(e.to_string()))?;
        self.counters.lb_newidle += report.lb_runs as u64;
        self.after_balance(cpu, &report, Some(cpu))?;
        Ok(self.cpus[cpu].rq().nr_running() > 0)
    }

    /// After a balance on `this_cpu`: record and trace the tasks that changed CPU,
    /// kick the CPUs that received work, and carry out an active balance (the
    /// stopper on the source CPU preempts its task and pushes one).
    /// `caller_picks`: a CPU whose caller schedules next anyway (newidle), not kicked.
    fn after_balance(
        &mut self,
        this_cpu: usize,
        report: &BalanceReport,
        caller_picks: Option<usize>,
    ) -> Result<(), SimError> {
        if let Some(v) = report
            .overutilized
            .and_then(|v| self.rd.set_rd_overutilized(v))
        {
            self.set_overutilized(v)?;
        }
        let misfit = report.moved[MigrationType::Misfit as usize] > 0;
        self.sync_migrations(this_cpu, misfit, caller_picks)?;
        let Some(req) = report.active_balance else {
            return Ok(());
        };
        let (src, dst) = (req.src.index(), req.dst.index());
        // The stopper finds nothing to push when the source went idle meanwhile.
        if self.cpus[src].rq().curr_is_idle() {
            return Ok(());
        }
        self.account(src)?;
        self.account(dst)?;
        self.cpus[src].rq_mut().put_prev_task();
        let moved = match self.lb.as_mut() {
            Some(sds) => active_load_balance_cpu_stop(
                sds,
                &mut SimRqs {
                    cpus: &mut self.cpus,
                    moved: &mut self.moved,
                    overloaded: &mut self.rd.overloaded,
                },
                &req,
            )
            .map_err(|e| SimError::Workload(e.to_string()))?,
            None => None,
        };
        if moved.is_some() {
            self.sync_migrations(
                src,
                req.migration_type == MigrationType::Misfit,
                caller_picks,
            )?;
        }
        self.schedule(src, PrevState::Preempted)
    }

    /// Find queued tasks whose run queue is not `task_cpu` any more (moved by the
    /// balancer), update them and wake or preempt their new CPU.
    fn sync_migrations(
        &mut self,
        ctx_cpu: usize,
        misfit: bool,
        caller_picks: Option<usize>,
    ) -> Result<(), SimError> {
        // The balancer's reports, by destination CPU then task id.
        if self.moved.nr == 0 {
            return Ok(());
        }
        let mut moved = std::mem::take(&mut self.sync_buf);
        moved.clear();
        for c in 0..self.cpus.len() {
            for t in 0..self.moved.by_task.len() {
                let Some((from, to)) = self.moved.by_task[t] else {
                    continue;
                };
                if to == c && from != to {
                    let load = self.cpus[c].rq().task(tid(t)).map_or(0, |p| p.avg.load_avg);
                    moved.push((t, from, to, load));
                }
            }
        }
        self.moved.by_task.iter_mut().for_each(|m| *m = None);
        self.moved.nr = 0;
        for &(t, from, to, load) in &moved {
            if let Some(w) = self.trace.as_mut() {
                let ctx = ctx_of(&self.tasks, &self.cpus, ctx_cpu, self.now);
                let task = tref_of(&self.tasks, t);
                w.emit(
                    ctx,
                    TraceEvent::SchedMigrateTask {
                        task,
                        orig_cpu: from,
                        dest_cpu: to,
                    },
                )?;
            }
            self.tasks[t].cpu = to;
            self.tasks[t].stats.migrations += 1;
            if misfit {
                self.counters.migrations_misfit += 1;
            } else {
                self.counters.migrations_load_balance += 1;
                self.counters.lb_migrated_load_sum += load;
                self.tasks[t].stats.lb_migrations += 1;
            }
            self.cpufreq_update(from);
            self.cpufreq_update(to);
            if Some(to) != caller_picks && attach_preempt(self.cpus[to].rq_mut(), tid(t))?.is_yes()
            {
                self.push(self.now, Ev::Resched(to as u32));
            }
        }
        self.sync_buf = moved;
        Ok(())
    }

    /// `cpufreq_update_util` when the rq asked for it (root cfs_rq utilisation changed,
    /// iowait enqueue): run schedutil; a new frequency takes effect after the domain's
    /// transition latency (emulated driver), when a [`Ev::FreqPoll`] applies it.
    fn cpufreq_update(&mut self, cpu: usize) {
        if let Some(req) = self.cpus[cpu].take_cpufreq_update() {
            self.cpufreq_answer(cpu, req);
        }
    }

    /// [`Self::cpufreq_update`] of a request already taken from `cpu`'s rq.
    fn cpufreq_answer(&mut self, cpu: usize, req: CpufreqUpdate) {
        if self.cfg.governor != Governor::Schedutil {
            return;
        }
        let flags = if req.iowait {
            UpdateFlags::IOWAIT
        } else {
            UpdateFlags::NONE
        };
        let cpus = &self.cpus;
        let at = self.cpufreq.update_util(
            Nanos(self.now),
            CpuId(cpu as u16),
            flags,
            self.cfg.features,
            self.uclamp_used,
            |c: CpuId| cpus[c.index()].rq().snapshot(),
        );
        if let Some(at) = at {
            self.push(at.0.max(self.now), Ev::FreqPoll);
        }
    }
}

/// Whether the root domain's overutilized flag is maintained: an energy model on
/// asymmetric CPUs (EAS possible, whether or not it is on).
fn overutilized_tracked(board: &Board) -> bool {
    let topo = &board.topology;
    board.has_energy_model && topo.eas_possible() && topo.asym_cpucapacity()
}

/// The inputs every policy step reads.
fn core_ctx<'b>(board: &'b Board, cfg: &SimConfig, uclamp_used: bool, lb: bool) -> CoreCtx<'b> {
    CoreCtx {
        topology: &board.topology,
        features: cfg.features,
        uclamp_used,
        load_balance: lb,
    }
}

/// The context column of a line written on `cpu`. As in `trace-cmd report`, it names a
/// task by its last name (from the saved cmdlines), also before it renamed itself.
fn ctx_of<'t>(tasks: &'t [SimTask], cpus: &[SimCpu], cpu: usize, ns: u64) -> Ctx<'t> {
    match cpus[cpu].running {
        Some(t) => Ctx {
            comm: Comm::Task(&tasks[t].comm),
            pid: tasks[t].pid,
            cpu,
            ns,
        },
        None => Ctx {
            comm: Comm::Idle,
            pid: 0,
            cpu,
            ns,
        },
    }
}

/// Task `t` as an event's fields name it at the time: `rt-app` until it renames itself.
fn tref_of(tasks: &[SimTask], t: usize) -> TaskRef<'_> {
    TaskRef {
        comm: Comm::Task(if tasks[t].renamed {
            &tasks[t].comm
        } else {
            trace::RTAPP_COMM
        }),
        pid: tasks[t].pid,
        prio: 120 + tasks[t].nice,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A waker that wakes two tasks in turn, each pinned to a CPU of its own.
    const PINNED_WAKEES: &str = r#"{
  "global": { "duration": 1, "calibration": "CPU0", "default_policy": "SCHED_OTHER" },
  "tasks": {
    "waker": { "loop": -1, "run0": 100, "resume0": "a", "run1": 100, "resume1": "b", "sleep": 1000 },
    "a": { "loop": -1, "cpus": [2], "suspend": "a", "run": 50 },
    "b": { "loop": -1, "cpus": [3], "suspend": "b", "run": 50 }
  }
}"#;

    /// Linux's `select_task_rq` calls `select_task_rq_fair`, where the waker's `record_wakee`
    /// is, only for a task allowed on more than one CPU (`p->nr_cpus_allowed > 1`): a waker
    /// that wakes only pinned tasks, each in turn, never counts a wakee flip (and so never
    /// makes a later wake-up of an unpinned task `wake_wide`).
    #[test]
    fn waking_pinned_tasks_records_no_wakee_flip() {
        let board = crate::load_board("juno-r2").unwrap();
        let wl = crate::workload::parse(PINNED_WAKEES, "pinned-wakees", board.nr_cpus()).unwrap();
        let cfg = SimConfig {
            duration_ns: 500_000_000,
            ..SimConfig::default()
        };
        let mut e = Engine::<std::io::Sink>::new(&board, &wl, cfg, None).unwrap();
        e.start().unwrap();
        e.run_events().unwrap();
        // rt-app names each thread `<task>-<index>`.
        let task = |name: &str| {
            let prefix = format!("{name}-");
            e.tasks
                .iter()
                .find(|t| t.comm.starts_with(&prefix))
                .unwrap()
        };
        for name in ["a", "b"] {
            let t = task(name);
            assert!(
                t.stats.activations > 100,
                "{name} woke only {} times",
                t.stats.activations
            );
        }
        assert_eq!(task("waker").wakee.flips, 0);
    }
}
