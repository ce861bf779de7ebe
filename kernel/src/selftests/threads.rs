//! Helpers for self tests that run threads: pinned spawns, a busy spinner, a work job; and the
//! thread tests themselves (see [`super::threads_tests`]).

#![allow(clippy::result_large_err)] // `TestError` carries its message by design.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use asym_sched::types::{CpuId, CpuMask};

use crate::selftest::TestError;
use crate::task::{self, ThreadId, ThreadParams};
use crate::{sched, test_assert};

fn err(e: impl core::fmt::Display) -> TestError {
    TestError::new(format_args!("{e}"))
}

/// Spawns `f(arg)` named `name`, pinned to `cpu`.
pub(super) fn spawn_on(
    cpu: CpuId,
    name: &str,
    f: fn(usize),
    arg: usize,
) -> Result<ThreadId, TestError> {
    spawn_with(
        name,
        ThreadParams {
            affinity: CpuMask::of(cpu),
            ..ThreadParams::default()
        },
        f,
        arg,
    )
}

/// Spawns `f(arg)` named `name` with `params`.
pub(super) fn spawn_with(
    name: &str,
    params: ThreadParams,
    f: fn(usize),
    arg: usize,
) -> Result<ThreadId, TestError> {
    task::spawn(name, params, f, arg).map_err(err)
}

/// Per-helper slots: a stop flag, a start time and a result, indexed by a slot number.
const SLOTS: usize = 32;
static USED: AtomicU32 = AtomicU32::new(0);
static STOP: [AtomicBool; SLOTS] = [const { AtomicBool::new(false) }; SLOTS];
static STARTED: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static VALUE: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
/// A cold busy thread's CPU's `util_avg` when it started (read with [`STARTED`]).
static START_UTIL: [AtomicU32; SLOTS] = [const { AtomicU32::new(0) }; SLOTS];

fn claim() -> Result<usize, TestError> {
    let mut cur = USED.load(Ordering::Relaxed);
    loop {
        if cur == u32::MAX {
            return Err(TestError::new(format_args!("no free helper slot")));
        }
        let bit = (!cur).trailing_zeros() as usize;
        match USED.compare_exchange(cur, cur | (1 << bit), Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => {
                STOP[bit].store(false, Ordering::Relaxed);
                STARTED[bit].store(0, Ordering::Relaxed);
                VALUE[bit].store(0, Ordering::Relaxed);
                return Ok(bit);
            }
            Err(now) => cur = now,
        }
    }
}

fn release(i: usize) {
    USED.fetch_and(!(1 << i), Ordering::AcqRel);
}

/// `VALUE` of a busy thread that starts cold.
const COLD: u64 = 1;

/// A thread spinning on one CPU until stopped (the busy task of the PELT and schedutil tests).
pub(super) struct Busy {
    id: ThreadId,
    slot: usize,
}

fn busy_thread(i: usize) {
    if VALUE[i].load(Ordering::Acquire) == COLD {
        // A new thread starts with half the CPU's spare capacity as its util (Linux
        // `post_init_entity_util_avg`): sleep until that has decayed to 0 (600 ms ≈ 19
        // half-lives), then a few short sleeps bring util_est's samples down too.
        sched::sleep_ns(600_000_000);
        for _ in 0..40 {
            sched::sleep_ns(1_000_000);
        }
    }
    let mut started = sched::now().0;
    if VALUE[i].load(Ordering::Acquire) == COLD {
        // The run queue as it switched this thread in (its clock and util_avg were updated
        // then): the start of the ramp, read before any tick adds to it.
        let cpu = crate::percpu::current_cpu();
        if let Ok(g) = sched::rq_lock(cpu) {
            started = g.rq.clock().0;
            START_UTIL[i].store(g.rq.cpu_util_avg().0, Ordering::Relaxed);
        }
    }
    STARTED[i].store(started.max(1), Ordering::Release);
    while !STOP[i].load(Ordering::Acquire) {
        sched::spin_hint();
    }
}

impl Busy {
    /// Starts it on `cpu` and waits until it runs.
    pub(super) fn start(cpu: CpuId) -> Result<Busy, TestError> {
        Self::start_with(cpu, 0)
    }

    /// Starts it on `cpu` like a task that has been asleep for long (util 0, no util_est), and
    /// waits until it spins.
    pub(super) fn start_cold(cpu: CpuId) -> Result<Busy, TestError> {
        Self::start_inner(cpu, 0, true)
    }

    /// Starts it on `cpu` at `nice` and waits until it runs.
    pub(super) fn start_with(cpu: CpuId, nice: i32) -> Result<Busy, TestError> {
        Self::start_inner(cpu, nice, false)
    }

    fn start_inner(cpu: CpuId, nice: i32, cold: bool) -> Result<Busy, TestError> {
        let slot = claim()?;
        if cold {
            VALUE[slot].store(COLD, Ordering::Release);
        }
        let params = ThreadParams {
            nice,
            affinity: CpuMask::of(cpu),
            ..ThreadParams::default()
        };
        let id = match spawn_with("busy", params, busy_thread, slot) {
            Ok(id) => id,
            Err(e) => {
                release(slot);
                return Err(e);
            }
        };
        let b = Busy { id, slot };
        let ok =
            super::sched::wait_until(1_000_000_000, || STARTED[slot].load(Ordering::Acquire) != 0);
        test_assert!(ok, "the busy thread on cpu {} did not start", cpu.0);
        Ok(b)
    }

    /// When it started running, guest ns (for a cold one, the rq clock at its switch-in).
    pub(super) fn started_ns(&self) -> u64 {
        STARTED[self.slot].load(Ordering::Acquire)
    }

    /// A cold one's CPU's `util_avg` at [`Self::started_ns`].
    pub(super) fn start_util(&self) -> u32 {
        START_UTIL[self.slot].load(Ordering::Relaxed)
    }

    /// The thread.
    pub(super) fn id(&self) -> ThreadId {
        self.id
    }

    /// Stops it and joins it; returns when it was told to stop, guest ns.
    pub(super) fn stop(self) -> Result<u64, TestError> {
        let t = sched::now().0;
        STOP[self.slot].store(true, Ordering::Release);
        let r = task::join(self.id).map_err(err);
        release(self.slot);
        r.map(|_| t)
    }
}

/// A thread that runs an amount of emulated work on one CPU once.
pub(super) struct Job {
    id: ThreadId,
    slot: usize,
}

fn work_thread(i: usize) {
    let w = VALUE[i].load(Ordering::Acquire);
    let span = sched::work(w);
    VALUE[i].store(span.completed.0 - span.started.0, Ordering::Release);
}

impl Job {
    /// Starts `w_ns` of work on `cpu`.
    pub(super) fn work(cpu: CpuId, w_ns: u64) -> Result<Job, TestError> {
        let slot = claim()?;
        VALUE[slot].store(w_ns, Ordering::Release);
        match spawn_on(cpu, "work", work_thread, slot) {
            Ok(id) => Ok(Job { id, slot }),
            Err(e) => {
                release(slot);
                Err(e)
            }
        }
    }

    /// Waits for it; returns how long the work took, guest ns.
    pub(super) fn join(self) -> Result<u64, TestError> {
        let r = task::join(self.id).map_err(err);
        let took = VALUE[self.slot].load(Ordering::Acquire);
        release(self.slot);
        r.map(|_| took)
    }
}
