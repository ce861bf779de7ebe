//! Kernel threads: a fixed-capacity table of thread slots, ids with generations, spawn, exit
//! and join.
//!
//! Re-derives Linux's `kernel/fork.c` (`kernel_clone` → `copy_process` → `wake_up_new_task`),
//! `kernel/exit.c` (`do_exit` → `do_task_dead`; the zombie kept for `wait` unless the thread is
//! detached, as `kthread`s' are reaped by their parent) and `kernel/sched/core.c`'s
//! `finish_task_switch` release of a dead task's stack and `task_struct`.
//!
//! - The table has [`MAX_THREADS`] slots, allocated once at boot; slot `n < MAX_CPUS` is CPU
//!   `n`'s idle thread (`swapper/n`). A [`ThreadId`] is a slot plus the slot's generation,
//!   which is bumped every time the slot is freed, so a stale id never reaches a reused slot.
//! - A thread's kernel stack (`arch::aarch64::context`) is mapped at spawn and unmapped and
//!   freed after the thread's last context switch, by the thread that runs next on that CPU
//!   (never while a CPU runs on it: the stack is released only from the `EXITED` context state).
//!   The slot becomes a zombie holding the exit status until [`join`], or is freed at once for
//!   a detached thread.
//! - While a thread sleeps, its policy [`Task`] (signals, EEVDF entity, clamps) is parked in
//!   the thread; while it is runnable, the CPU's `Rq` owns it. Exactly one of the two holds it.
//!   A dead thread's stays parked from its last `schedule()` until the next thread's
//!   `finish_task_switch` hands it to `task_dead_fair`, just before [`reap`].
//!
//! Deliberate differences from Linux: threads run kernel functions `fn(usize)` with one
//! argument; no signals, no credentials, no `task_struct` refcount (the slot is the only
//! owner, and the state machine says who may touch what).

use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering};

use asym_sched::rq::Task;
use asym_sched::types::{CpuId, CpuMask, TaskId};
use asym_sched::wakeup::WakeeFlips;

use crate::arch::aarch64::context::{self, KernelStack, StackError, ThreadContext};
use crate::dt::MAX_CPUS;
use crate::sync::{InitOnce, IrqSpinLock, LockRank};
use crate::wait::{WaitLink, WaitQueue};

/// Threads that can exist at once, idle threads included.
pub const MAX_THREADS: usize = 256;

/// Longest thread name kept (Linux `TASK_COMM_LEN` − 1).
pub const NAME_LEN: usize = 15;

/// A thread: its slot and the slot's generation when it was spawned.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ThreadId(u32);

impl ThreadId {
    fn new(slot: usize, gen: u16) -> ThreadId {
        ThreadId((u32::from(gen) << 16) | slot as u32)
    }

    /// The table slot.
    pub fn slot(self) -> usize {
        (self.0 & 0xffff) as usize
    }

    /// The slot's generation.
    pub fn generation(self) -> u16 {
        (self.0 >> 16) as u16
    }

    /// The policy crate's id for this thread (unique among live threads).
    pub fn task_id(self) -> TaskId {
        TaskId(self.0)
    }

    /// The thread a policy task id names.
    pub fn from_task_id(id: TaskId) -> ThreadId {
        ThreadId(id.0)
    }
}

impl fmt::Debug for ThreadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "T{}.{}", self.slot(), self.generation())
    }
}

/// What a thread is doing (Linux `__state` plus the exit states).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ThreadState {
    /// The slot is free.
    Free = 0,
    /// Runnable: running or queued on a run queue (`TASK_RUNNING`).
    Running = 1,
    /// Asleep until woken (`TASK_INTERRUPTIBLE`; there are no signals).
    Sleeping = 2,
    /// Being woken (`TASK_WAKING`): off every run queue, a waker places it.
    Waking = 3,
    /// Exiting (`TASK_DEAD`): its last `schedule()` is in progress.
    Dead = 4,
    /// Exited, stack released, status kept for [`join`] (`EXIT_ZOMBIE`).
    Zombie = 5,
}

impl ThreadState {
    fn from_u8(v: u8) -> ThreadState {
        match v {
            1 => ThreadState::Running,
            2 => ThreadState::Sleeping,
            3 => ThreadState::Waking,
            4 => ThreadState::Dead,
            5 => ThreadState::Zombie,
            _ => ThreadState::Free,
        }
    }
}

/// How a thread ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// It called [`exit`] (or returned: 0).
    Exited(i32),
    /// It overflowed its stack and was killed.
    StackOverflow,
    /// An EL0 task killed by a synchronous exception: ESR class, FAR, PC (`crate::user`).
    Fault { ec: u8, far: u64, pc: u64 },
}

/// A thread's parameters, set at spawn.
#[derive(Clone, Copy, Debug)]
pub struct ThreadParams {
    /// `nice`, −20..=19.
    pub nice: i32,
    /// Requested `(uclamp_min, uclamp_max)` on the 1024 scale.
    pub uclamp: (u32, u32),
    /// CPUs it may run on (`p->cpus_mask`).
    pub affinity: CpuMask,
    /// Freed at exit without a [`join`].
    pub detached: bool,
}

impl Default for ThreadParams {
    fn default() -> Self {
        ThreadParams {
            nice: 0,
            uclamp: (0, 1024),
            affinity: CpuMask(u64::MAX),
            detached: false,
        }
    }
}

/// The parts of a thread behind its lock (Linux `p->pi_lock`).
#[derive(Debug)]
pub struct ThreadSched {
    /// `comm`.
    pub name: heapless::String<NAME_LEN>,
    pub params: ThreadParams,
    entry: Option<fn(usize)>,
    arg: usize,
    exit: Option<ExitStatus>,
    /// Deepest stack use, bytes, measured when the stack was released.
    pub stack_used: usize,
}

/// Counters kept per thread (atomics: the scheduler updates them under the rq lock, tests read
/// them whenever).
#[derive(Debug, Default)]
pub struct ThreadStats {
    /// Guest ns spent running (Linux `se.sum_exec_runtime`, measured by the kernel at each
    /// switch and tick).
    pub runtime_ns: AtomicU64,
    /// When it last started running, guest ns.
    pub exec_start: AtomicU64,
    /// Times it was switched in.
    pub nr_switches: AtomicU64,
    /// Wake-ups that placed it on another CPU.
    pub nr_migrations: AtomicU64,
    /// Wake-ups.
    pub nr_wakeups: AtomicU64,
    /// Every CPU it was ever switched in on (bit per CPU).
    pub cpus_seen: AtomicU64,
}

/// Emulated work done (see [`crate::sched::work`]): work is ns of a biggest CPU at its top
/// OPP, accounted × 2^20 (capacity × frequency scale per ns of running).
#[derive(Debug, Default)]
pub struct WorkAccount {
    /// Work done up to `since`, ns × 2^20.
    pub done: AtomicU64,
    /// Guest ns the account was last brought up to date at (while running).
    pub since: AtomicU64,
    /// Work per ns of running now: `capacity_orig × freq_scale` (0 while not running).
    pub rate: AtomicU64,
    /// The `done` value a [`crate::sched::work`] call waits for (0 or `u64::MAX`: none).
    pub target: AtomicU64,
    /// When an update saw `done` cross `target`: the exact instant, ns (0: not yet).
    pub completed_at: AtomicU64,
}

/// One slot of the thread table.
pub struct Thread {
    /// Registers and stack (`p->thread`, `p->stack`; its state word is `p->on_cpu`).
    pub ctx: ThreadContext,
    gen: AtomicU16,
    state: AtomicU8,
    /// `p->on_rq`: the policy task is on a run queue (not parked). Written under that rq lock.
    pub on_rq: AtomicBool,
    /// `task_cpu(p)`: the CPU whose run queue holds it, or held it last.
    pub cpu: AtomicU16,
    /// The CPUs the scheduler holds the thread to now (its policy task's `cpus_allowed`): set at
    /// spawn and at each wake-up from [`ThreadParams::affinity`] (where a change waits until
    /// then), read by `schedule()`, which may not take the thread's lock.
    pub affinity: AtomicU64,
    /// Preemption is off while non-zero (Linux `preempt_count`, per thread as on arm64).
    pub preempt_count: AtomicU32,
    /// `p->pi_lock` and what it guards.
    pub sched: IrqSpinLock<ThreadSched>,
    /// The policy task while the thread is not on a run queue.
    pub parked: IrqSpinLock<Option<Task>>,
    /// Membership of one wait queue at a time.
    pub wait: WaitLink,
    /// Joiners wait here for the zombie.
    exit_wq: WaitQueue,
    /// The CPU whose timer queue holds this thread's sleep timer (+1; 0: none).
    pub timer_cpu: AtomicU16,
    pub stats: ThreadStats,
    pub work: WorkAccount,
    /// `p->wakee_flips`, `p->last_wakee`, `p->wakee_flip_decay_ts` ([`WakeeAtomics`]).
    pub wakee: WakeeAtomics,
}

/// A thread's wakee flips (`record_wakee`, read by `wake_wide`), as Linux keeps them in
/// `task_struct`: written only by the thread as a waker (in its own context, or by an
/// interrupt on the CPU it runs on, IRQs masked either way), read by any CPU waking it.
/// A reader may see the fields of two different updates; Linux reads `p->wakee_flips`
/// without a lock too, and the value is a heuristic's input.
#[derive(Debug)]
pub struct WakeeAtomics {
    flips: AtomicU32,
    /// `last_wakee`'s [`TaskId`]; [`Self::NONE`] for none.
    last_wakee: AtomicU32,
    decay_ts_j: AtomicU64,
}

impl WakeeAtomics {
    const NONE: u32 = u32::MAX;

    /// The flips as they are now.
    pub fn load(&self) -> WakeeFlips {
        let last = self.last_wakee.load(Ordering::Relaxed);
        WakeeFlips::from_parts(
            self.flips.load(Ordering::Relaxed),
            (last != Self::NONE).then_some(TaskId(last)),
            self.decay_ts_j.load(Ordering::Relaxed),
        )
    }

    /// Stores `f` (its owner only).
    pub fn store(&self, f: WakeeFlips) {
        self.flips.store(f.flips, Ordering::Relaxed);
        self.last_wakee.store(
            f.last_wakee().map_or(Self::NONE, |t| t.0),
            Ordering::Relaxed,
        );
        self.decay_ts_j.store(f.decay_ts_j(), Ordering::Relaxed);
    }
}

impl Thread {
    fn new() -> Thread {
        Thread {
            ctx: ThreadContext::new(),
            gen: AtomicU16::new(1),
            state: AtomicU8::new(ThreadState::Free as u8),
            on_rq: AtomicBool::new(false),
            cpu: AtomicU16::new(0),
            affinity: AtomicU64::new(0),
            preempt_count: AtomicU32::new(0),
            sched: IrqSpinLock::with_rank(
                ThreadSched {
                    name: heapless::String::new(),
                    params: ThreadParams::default(),
                    entry: None,
                    arg: 0,
                    exit: None,
                    stack_used: 0,
                },
                LockRank::THREAD,
            ),
            parked: IrqSpinLock::new(None),
            wait: WaitLink::new(),
            exit_wq: WaitQueue::new(),
            timer_cpu: AtomicU16::new(0),
            stats: ThreadStats::default(),
            work: WorkAccount::default(),
            wakee: WakeeAtomics {
                flips: AtomicU32::new(0),
                last_wakee: AtomicU32::new(WakeeAtomics::NONE),
                decay_ts_j: AtomicU64::new(0),
            },
        }
    }

    /// The thread's state.
    pub fn state(&self) -> ThreadState {
        ThreadState::from_u8(self.state.load(Ordering::SeqCst))
    }

    /// Sets the state (a full barrier, as `set_current_state`'s `smp_store_mb`).
    pub fn set_state(&self, s: ThreadState) {
        self.state.store(s as u8, Ordering::SeqCst);
    }

    /// Moves the state from `from` to `to`; false if it was not `from`.
    pub fn change_state(&self, from: ThreadState, to: ThreadState) -> bool {
        self.state
            .compare_exchange(from as u8, to as u8, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
    }

    /// The id of the thread in this slot now.
    pub fn id(&self, slot: usize) -> ThreadId {
        ThreadId::new(slot, self.gen.load(Ordering::Acquire))
    }
}

impl fmt::Debug for Thread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Thread")
            .field("state", &self.state())
            .field("cpu", &self.cpu.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Why a spawn failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpawnError {
    /// The thread table is not set up yet.
    NotInitialised,
    /// All [`MAX_THREADS`] slots are in use.
    TableFull,
    /// The stack could not be made.
    Stack(StackError),
    /// The parameters were refused (the message names the problem).
    BadParams(&'static str),
    /// The scheduler refused the new thread (its run queue full, say); nothing of it is left.
    Sched(crate::sched::SchedError),
}

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpawnError::NotInitialised => write!(f, "spawn: threads are not initialised"),
            SpawnError::TableFull => write!(f, "spawn: all {MAX_THREADS} thread slots in use"),
            SpawnError::Stack(e) => write!(f, "spawn: {e}"),
            SpawnError::BadParams(why) => write!(f, "spawn: {why}"),
            SpawnError::Sched(e) => write!(f, "spawn: {e}"),
        }
    }
}

/// Why a join failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JoinError {
    /// No such thread (it was joined already, or the id is stale).
    NoSuchThread(ThreadId),
    /// A thread cannot join itself.
    SelfJoin,
    /// A detached thread cannot be joined.
    Detached(ThreadId),
    /// Not called from a thread.
    NotAThread,
}

impl fmt::Display for JoinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JoinError::NoSuchThread(t) => write!(f, "join: no thread {t:?}"),
            JoinError::SelfJoin => write!(f, "join: a thread cannot join itself"),
            JoinError::Detached(t) => write!(f, "join: thread {t:?} is detached"),
            JoinError::NotAThread => write!(f, "join: not called from a thread"),
        }
    }
}

static TABLE: InitOnce<&'static [Thread]> = InitOnce::new();
/// Bit `n` set: slot `n` is taken.
static USED: [AtomicU64; MAX_THREADS / 64] = [const { AtomicU64::new(0) }; MAX_THREADS / 64];

const _: () = assert!(MAX_THREADS.is_multiple_of(64) && MAX_THREADS <= 1 << 15);
const _: () = assert!(MAX_CPUS <= MAX_THREADS);

/// Builds the thread table (on the heap, once; slot `n < MAX_CPUS` reserved for CPU `n`'s idle
/// thread). Boot CPU, before any thread exists.
pub fn init() {
    let mut v = alloc::vec::Vec::with_capacity(MAX_THREADS);
    for _ in 0..MAX_THREADS {
        v.push(Thread::new());
    }
    let _ = TABLE.set(alloc::vec::Vec::leak(v));
    USED[0].fetch_or((1u64 << MAX_CPUS) - 1, Ordering::Relaxed);
}

/// The thread table.
pub fn table() -> &'static [Thread] {
    TABLE.get().copied().unwrap_or(&[])
}

/// Slot `slot` of the table.
pub fn slot(slot: usize) -> &'static Thread {
    &table()[slot % MAX_THREADS]
}

/// The thread `id` names, if it is still that thread (same generation) and not free.
pub fn get(id: ThreadId) -> Option<&'static Thread> {
    let t = table().get(id.slot())?;
    (t.gen.load(Ordering::Acquire) == id.generation() && t.state() != ThreadState::Free)
        .then_some(t)
}

/// The calling thread's slot (from its stack pointer; `None` on a boot or overflow stack).
#[inline]
pub fn current_slot() -> Option<usize> {
    context::current_stack_slot()
}

/// The calling thread.
pub fn current() -> Option<ThreadId> {
    let s = current_slot()?;
    Some(slot(s).id(s))
}

/// Disables preemption of the calling thread (nests).
#[inline]
pub fn preempt_disable() {
    if let Some(s) = current_slot() {
        let c = &slot(s).preempt_count;
        // Only this thread changes its count; an interrupt handler's changes are balanced
        // before it returns, so a plain load and store cannot lose one.
        c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }
}

/// Re-enables preemption; returns whether it is now enabled (count back to 0).
#[inline]
pub fn preempt_enable_no_resched() -> bool {
    match current_slot() {
        Some(s) => {
            let c = &slot(s).preempt_count;
            let v = c.load(Ordering::Relaxed).saturating_sub(1);
            c.store(v, Ordering::Relaxed);
            v == 0
        }
        None => false,
    }
}

/// Spawns a thread named `name` running `f(arg)` with `params`, placed by the scheduler's fork
/// path. Not for interrupt context (it allocates the stack).
pub fn spawn(
    name: &str,
    params: ThreadParams,
    f: fn(usize),
    arg: usize,
) -> Result<ThreadId, SpawnError> {
    if TABLE.get().is_none() {
        return Err(SpawnError::NotInitialised);
    }
    if !(-20..=19).contains(&params.nice) {
        return Err(SpawnError::BadParams("nice must be in -20..=19"));
    }
    if params.uclamp.0 > params.uclamp.1 || params.uclamp.1 > 1024 {
        return Err(SpawnError::BadParams("uclamp must be min <= max <= 1024"));
    }
    let online = crate::smp::online_cpus().fold(CpuMask::EMPTY, |mut m, c| {
        m.set(c);
        m
    });
    if params.affinity.and(online).is_empty() {
        return Err(SpawnError::BadParams("the affinity names no online CPU"));
    }
    let s = claim_slot().ok_or(SpawnError::TableFull)?;
    let id = match prepare(s, name, params, f, arg) {
        Ok(id) => id,
        Err(e) => {
            release_slot(s);
            return Err(e);
        }
    };
    if let Err(e) = crate::sched::wake_up_new_thread(id) {
        // It never ran and is on no run queue: its stack and slot go back (the generation
        // moves on, so `id` is stale).
        drop(slot(s).ctx.release_stack());
        free_slot(s);
        return Err(SpawnError::Sched(e));
    }
    Ok(id)
}

/// Sets up the idle thread of `cpu` in its reserved slot (boot CPU, at init).
pub fn spawn_idle(cpu: CpuId, f: fn(usize)) -> Result<ThreadId, SpawnError> {
    let mut name: heapless::String<NAME_LEN> = heapless::String::new();
    let _ = fmt::Write::write_fmt(&mut name, format_args!("swapper/{}", cpu.0));
    let params = ThreadParams {
        affinity: CpuMask::of(cpu),
        detached: true,
        ..ThreadParams::default()
    };
    let id = prepare(cpu.index(), &name, params, f, cpu.index())?;
    slot(cpu.index()).cpu.store(cpu.0, Ordering::Relaxed);
    Ok(id)
}

/// Sets up the stopper thread of `cpu` (`migration/N`, Linux `cpu_stop_threads`) in a free
/// slot (boot CPU, at init): on no run queue, the scheduler picks it itself when it has work
/// (`crate::sched::stop`).
pub fn spawn_stopper(cpu: CpuId, f: fn(usize)) -> Result<ThreadId, SpawnError> {
    let mut name: heapless::String<NAME_LEN> = heapless::String::new();
    let _ = fmt::Write::write_fmt(&mut name, format_args!("migration/{}", cpu.0));
    let params = ThreadParams {
        affinity: CpuMask::of(cpu),
        detached: true,
        ..ThreadParams::default()
    };
    let s = claim_slot().ok_or(SpawnError::TableFull)?;
    let id = match prepare(s, &name, params, f, cpu.index()) {
        Ok(id) => id,
        Err(e) => {
            release_slot(s);
            return Err(e);
        }
    };
    slot(s).cpu.store(cpu.0, Ordering::Relaxed);
    Ok(id)
}

fn prepare(
    s: usize,
    name: &str,
    params: ThreadParams,
    f: fn(usize),
    arg: usize,
) -> Result<ThreadId, SpawnError> {
    let t = slot(s);
    let stack = KernelStack::new(s).map_err(SpawnError::Stack)?;
    {
        let mut g = t.sched.lock();
        g.name.clear();
        for c in name.chars() {
            if g.name.push(c).is_err() {
                break;
            }
        }
        g.params = params;
        t.affinity.store(params.affinity.0, Ordering::Relaxed);
        g.entry = Some(f);
        g.arg = arg;
        g.exit = None;
        g.stack_used = 0;
    }
    for c in [
        &t.stats.runtime_ns,
        &t.stats.exec_start,
        &t.stats.nr_switches,
        &t.stats.nr_migrations,
        &t.stats.nr_wakeups,
        &t.stats.cpus_seen,
        &t.work.done,
        &t.work.since,
        &t.work.rate,
        &t.work.target,
        &t.work.completed_at,
    ] {
        c.store(0, Ordering::Relaxed);
    }
    // A new thread has woken no one yet (as the simulator's tasks start).
    t.wakee.store(WakeeFlips::default());
    // It starts inside its first switch: `schedule_tail` re-enables preemption.
    t.preempt_count.store(1, Ordering::Relaxed);
    t.on_rq.store(false, Ordering::Relaxed);
    t.timer_cpu.store(0, Ordering::Relaxed);
    if let Err((_, stack)) = t.ctx.prepare(stack, thread_start, s) {
        drop(stack);
        return Err(SpawnError::BadParams("thread slot still holds a context"));
    }
    t.set_state(ThreadState::Running);
    Ok(t.id(s))
}

/// Every thread's first Rust frame: runs its function, then exits with status 0.
extern "C" fn thread_start(s: usize) -> ! {
    let (f, arg) = {
        let g = slot(s).sched.lock();
        (g.entry, g.arg)
    };
    if let Some(f) = f {
        f(arg);
    }
    exit(0)
}

/// Ends the calling thread with `status` (Linux `do_exit`). Its stack is released after its
/// last context switch.
pub fn exit(status: i32) -> ! {
    let Some(s) = current_slot() else {
        panic!("task::exit outside a thread");
    };
    exit_slot(s, ExitStatus::Exited(status))
}

/// Ends the thread in slot `s` — the calling one, possibly running on this CPU's overflow
/// stack — with `status`.
pub(crate) fn exit_slot(s: usize, status: ExitStatus) -> ! {
    let t = slot(s);
    crate::timer::cancel_sleep(s);
    t.sched.lock().exit = Some(status);
    t.set_state(ThreadState::Dead);
    crate::sched::schedule_dead()
}

/// After a dead thread's last switch (on the next thread, no lock held): releases its stack
/// and makes it a zombie for [`join`], or frees the slot of a detached thread.
pub(crate) fn reap(s: usize) {
    let t = slot(s);
    let Some(stack) = t.ctx.release_stack() else {
        return;
    };
    let used = stack.used_bytes();
    drop(stack);
    // An EL0 task's address space: no CPU has it loaded any more (its last switch loaded the
    // next thread's TTBR1 first).
    crate::user::release(s);
    let detached = {
        let mut g = t.sched.lock();
        g.stack_used = used;
        g.params.detached
    };
    if detached {
        free_slot(s);
    } else {
        t.set_state(ThreadState::Zombie);
        t.exit_wq.wake_all();
    }
}

/// Waits for `id` to exit and frees it; returns how it ended.
pub fn join(id: ThreadId) -> Result<ExitStatus, JoinError> {
    let me = current().ok_or(JoinError::NotAThread)?;
    if me == id {
        return Err(JoinError::SelfJoin);
    }
    let t = get(id).ok_or(JoinError::NoSuchThread(id))?;
    if t.sched.lock().params.detached {
        return Err(JoinError::Detached(id));
    }
    t.exit_wq.wait_until(|| {
        t.state() == ThreadState::Zombie || t.gen.load(Ordering::Acquire) != id.generation()
    });
    if t.gen.load(Ordering::Acquire) != id.generation() {
        return Err(JoinError::NoSuchThread(id));
    }
    let status = t.sched.lock().exit.unwrap_or(ExitStatus::Exited(0));
    free_slot(id.slot());
    Ok(status)
}

/// The name of thread `id` (empty if none).
pub fn name(id: ThreadId) -> heapless::String<NAME_LEN> {
    get(id).map_or_else(heapless::String::new, |t| t.sched.lock().name.clone())
}

/// Renames thread `id` to `name`, cut to [`NAME_LEN`] bytes at a character boundary (Linux
/// `__set_task_comm`, which cuts at `TASK_COMM_LEN - 1`); false if there is no such thread.
pub fn set_name(id: ThreadId, name: &str) -> bool {
    let Some(t) = get(id) else { return false };
    let mut cut = name.len().min(NAME_LEN);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut n = heapless::String::new();
    let _ = n.push_str(&name[..cut]);
    t.sched.lock().name = n;
    true
}

/// `(slots in use, live threads not yet zombies)`, idle threads included.
pub fn counts() -> (usize, usize) {
    let used = USED
        .iter()
        .map(|w| w.load(Ordering::Relaxed).count_ones() as usize)
        .sum();
    let live = table()
        .iter()
        .filter(|t| {
            matches!(
                t.state(),
                ThreadState::Running
                    | ThreadState::Sleeping
                    | ThreadState::Waking
                    | ThreadState::Dead
            )
        })
        .count();
    (used, live)
}

fn claim_slot() -> Option<usize> {
    crate::sync::bitmap_claim(&USED)
}

fn release_slot(s: usize) {
    crate::sync::bitmap_release(&USED, s);
}

/// Frees slot `s`: the generation moves on (stale ids stop matching), then the slot is free.
fn free_slot(s: usize) {
    let t = slot(s);
    let g = t.gen.load(Ordering::Relaxed);
    t.gen
        .store(if g == u16::MAX { 1 } else { g + 1 }, Ordering::Release);
    t.set_state(ThreadState::Free);
    release_slot(s);
}
