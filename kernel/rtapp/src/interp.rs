//! The rt-app interpreter: one thread's program as a pure state machine.
//!
//! An executor (the simulator's engine, the kernel's rt-app executor, an EL0 program) owns
//! one [`Thread`] per workload thread and the workload's [`Timer`]s. Whenever the thread
//! is on a CPU and has nothing left to do — it has just started, its `run` finished, it
//! woke from a `sleep` or `timer`, it was resumed — the executor calls [`Thread::step`]
//! with the current time and carries out the [`Action`] it gets, calling again at once
//! for the actions that take no time ([`Action::Start`], [`Action::Marker`],
//! [`Action::Phase`], [`Action::Resume`], a [`Action::Timer`] already expired, a zero
//! `run`/`sleep`). Nothing here knows about CPUs, queues or the trace format; nothing
//! allocates; the same sequence of calls gives the same actions.
//!
//! rt-app's conventions (`src/rt-app.c`: `thread_body`, `run_event`, `rtapp_timer`;
//! `doc/tutorial.txt`), which every executor therefore shares:
//! - A thread's program is its phase list run `loop` times (forever for `-1`), each phase
//!   its `loop` times, each iteration its events in file order.
//! - Each phase iteration is bracketed by `rtapp_loop` markers and followed by an
//!   `rtapp_stats` marker measured as rt-app's `log_data_t` is: wall time of the
//!   iteration and of its `run`s, configured run and period, slack to the timer's next
//!   expiry, timer wake-up latency (all in whole µs, `timespec_to_usec`).
//! - A phase that sets no `nice`/`util_min`/`util_max` keeps the current ones (rt-app's
//!   `set_thread_priority`), while `cpus` falls back to the task's (`set_thread_affinity`).
//! - `run` is work in ns at the reference capacity (the biggest CPU at its top OPP,
//!   rt-app's calibration made exact): the executor scales it by the CPU's current
//!   capacity (issue 12: `work × 1024 / (capacity_orig × f / fmax)`); `runtime` is wall
//!   time.
//! - A timer starts from the start of the thread that first uses it (`t_first`: time zero
//!   plus that thread's `delay`). Reaching it sleeps to its next expiry; a thread that is
//!   late skips the wait and the timer restarts from now (`relative`, the default) or
//!   keeps its schedule (`absolute`).
//! - `resume` before the target suspends is remembered (one pending wake-up), a
//!   documented difference from rt-app's condition variable, which may lose it.
//!
//! The first thread (index 0) writes rt-app's clock reference when it starts.

use crate::marker::Marker;
use crate::workload::{Event, Workload};

/// The scheduling parameters a phase gives its thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// Nice value.
    pub nice: i32,
    /// Allowed CPUs, bit `n` for CPU `n`.
    pub allowed: u64,
    /// uclamp request `(min, max)`, if the workload set one.
    pub uclamp: Option<(u32, u32)>,
}

/// A timer reached: what happened and whether to wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimerTick {
    /// Start of the period that ends at `expiry_ns`.
    pub period_start_ns: u64,
    /// The period's end.
    pub expiry_ns: u64,
    /// The thread reached the timer after its expiry (a missed deadline).
    pub overrun: bool,
    /// Sleep until then (`None`: continue at once).
    pub wait_until_ns: Option<u64>,
}

/// What the thread does next.
///
/// `repr(C)`, as [`Marker`] is (an executor copies one per step).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub enum Action<'w> {
    /// The thread has just started: it names itself (`pthread_setname_np`).
    Start,
    /// Write this `trace_marker` line.
    Marker(Marker),
    /// A phase starts: apply these parameters (a changed nice at once, affinity and
    /// clamps from the next wake-up as the executor's policy wants).
    Phase(Params),
    /// Busy for this much work at the reference capacity (0: nothing to do).
    Run {
        /// Work in ns at the reference capacity.
        work_ns: u64,
    },
    /// Busy for this much wall time (0: nothing to do).
    Runtime {
        /// Wall time in ns.
        ns: u64,
    },
    /// Block for this long (0: nothing to do).
    Sleep {
        /// ns from now.
        ns: u64,
    },
    /// A `timer` event.
    Timer(TimerTick),
    /// Block until another thread resumes this one.
    Suspend,
    /// Wake these threads (indices into [`Workload::tasks`]); a target that is not
    /// suspended gets [`Thread::post_resume`] instead.
    Resume(&'w [usize]),
    /// `sched_yield`.
    Yield,
    /// The program is over: the thread exits (every later step says so again).
    Exit,
}

/// One timer shared by the threads that name its `ref`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timer {
    t_ref: Option<u64>,
}

impl Timer {
    /// An unused timer.
    pub const fn new() -> Self {
        Timer { t_ref: None }
    }
}

/// One thread's program state.
#[derive(Clone, Debug)]
pub struct Thread {
    index: usize,
    all_cpus: u64,
    started: bool,
    exited: bool,
    loops_done: u64,
    phase: usize,
    phase_loop: u64,
    event: usize,
    params: Params,
    pending_resume: bool,
    stats: Option<LoopStats>,
    queue: Queue,
}

impl Thread {
    /// Thread `index` of `wl` on a machine with `nr_cpus` CPUs (at most 64 are
    /// addressable in [`Params::allowed`]). An index out of range gives a thread that
    /// exits at once.
    pub fn new(wl: &Workload, index: usize, nr_cpus: usize) -> Self {
        let all_cpus = if nr_cpus >= 64 {
            u64::MAX
        } else {
            (1u64 << nr_cpus) - 1
        };
        let params = match wl.tasks.get(index) {
            Some(t) => {
                let ph = t.phases.first();
                let cpus = ph.and_then(|p| p.cpus.as_deref()).or(t.cpus.as_deref());
                let lo = ph.and_then(|p| p.util_min).or(t.util_min);
                let hi = ph.and_then(|p| p.util_max).or(t.util_max);
                Params {
                    nice: ph.and_then(|p| p.nice).unwrap_or(t.nice),
                    allowed: mask_of(cpus, all_cpus),
                    uclamp: match (lo, hi) {
                        (None, None) => None,
                        (lo, hi) => Some((lo.unwrap_or(0), hi.unwrap_or(1024))),
                    },
                }
            }
            None => Params {
                nice: 0,
                allowed: all_cpus,
                uclamp: None,
            },
        };
        Thread {
            index,
            all_cpus,
            started: false,
            exited: false,
            loops_done: 0,
            phase: 0,
            phase_loop: 0,
            event: 0,
            params,
            pending_resume: false,
            stats: None,
            queue: Queue::new(),
        }
    }

    /// The parameters in force (before the first step: those of the first phase).
    pub fn params(&self) -> Params {
        self.params
    }

    /// Whether the program has finished.
    pub fn exited(&self) -> bool {
        self.exited
    }

    /// Another thread resumed this one while it was not suspended: its next `suspend`
    /// returns at once.
    pub fn post_resume(&mut self) {
        self.pending_resume = true;
    }

    /// The next action at `now_ns`, the previous one being complete. `wl` and `timers`
    /// must be the ones the thread was made for (`timers` has [`Workload::nr_timers`]
    /// entries; a missing timer counts as unused and is not kept).
    pub fn step<'w>(&mut self, wl: &'w Workload, timers: &mut [Timer], now_ns: u64) -> Action<'w> {
        loop {
            if let Some(p) = self.queue.pop() {
                if let Some(a) = self.perform(p, wl, timers, now_ns) {
                    return a;
                }
                continue;
            }
            if self.exited {
                return Action::Exit;
            }
            if !self.started {
                self.started = true;
                self.queue.push(Pending::Start);
                if self.index == 0 {
                    self.queue.push(Pending::Marker(Marker::ClockRef {
                        data_us: now_ns / 1000,
                    }));
                }
                self.queue.push(Pending::Marker(Marker::TaskStart));
                continue;
            }
            self.advance(wl, now_ns);
        }
    }

    /// rt-app's `thread_body` loop: measure what just finished, then move the cursor to
    /// the next event, queueing the markers and phase change on the way. Kept out of
    /// [`Thread::step`], whose usual call only pops a queued item: inlined, it made every
    /// call load most of the thread's state first.
    #[inline(never)]
    fn advance(&mut self, wl: &Workload, now: u64) {
        if let Some(l) = self.stats.as_mut() {
            if let Some(since) = l.run_since.take() {
                l.run_us += ns_to_us(now.saturating_sub(since));
            }
            if let Some(expiry) = l.timer_wait.take() {
                l.wu_lat_us += ns_to_us(now.saturating_sub(expiry));
            }
        }
        let Some(spec) = wl.tasks.get(self.index) else {
            self.queue.push(Pending::Exit);
            return;
        };
        // A program without events (not something the reader builds) ends rather than
        // spinning: two passes over the phase list without finding an event.
        let mut wraps = 0;
        loop {
            if let Some(n) = spec.loops {
                if self.loops_done >= n {
                    self.queue.push(Pending::Marker(Marker::TaskEnd));
                    self.queue.push(Pending::Exit);
                    return;
                }
            }
            let Some(phase) = spec.phases.get(self.phase) else {
                self.queue.push(Pending::Exit);
                return;
            };
            if self.event == 0 && self.stats.is_none() {
                self.queue.push(Pending::Marker(Marker::Loop {
                    start: true,
                    thread_loop: self.loops_done,
                    phase: self.phase,
                    phase_loop: self.phase_loop,
                }));
                self.stats = Some(LoopStats {
                    start_ns: now,
                    ..LoopStats::default()
                });
            }
            if self.event == 0 && self.phase_loop == 0 {
                self.params.allowed = mask_of(
                    phase.cpus.as_deref().or(spec.cpus.as_deref()),
                    self.all_cpus,
                );
                if let Some(n) = phase.nice {
                    self.params.nice = n;
                }
                if phase.util_min.is_some() || phase.util_max.is_some() {
                    let (lo, hi) = self.params.uclamp.unwrap_or((0, 1024));
                    self.params.uclamp =
                        Some((phase.util_min.unwrap_or(lo), phase.util_max.unwrap_or(hi)));
                }
                self.queue.push(Pending::Phase);
            }
            if self.event < phase.events.len() {
                self.queue.push(Pending::Event {
                    phase: self.phase,
                    event: self.event,
                });
                self.event += 1;
                return;
            }
            if let Some(l) = self.stats.take() {
                self.queue.push(Pending::Marker(Marker::Loop {
                    start: false,
                    thread_loop: self.loops_done,
                    phase: self.phase,
                    phase_loop: self.phase_loop,
                }));
                self.queue.push(Pending::Marker(Marker::Stats {
                    period: ns_to_us(now.saturating_sub(l.start_ns)),
                    run: l.run_us,
                    wu_lat: l.wu_lat_us,
                    slack: l.slack_us,
                    c_period: l.c_period_us,
                    c_run: l.c_run_us,
                }));
            }
            self.event = 0;
            self.phase_loop += 1;
            if self.phase_loop < phase.loops {
                continue;
            }
            self.phase_loop = 0;
            self.phase += 1;
            if self.phase == spec.phases.len() {
                self.phase = 0;
                self.loops_done = self.loops_done.saturating_add(1);
                wraps += 1;
                if wraps > 2 {
                    self.queue.push(Pending::Exit);
                    return;
                }
            }
        }
    }

    /// Carry out a queued item; `None` when it turned out to need no action.
    fn perform<'w>(
        &mut self,
        p: Pending,
        wl: &'w Workload,
        timers: &mut [Timer],
        now: u64,
    ) -> Option<Action<'w>> {
        let ev = match p {
            Pending::Start => return Some(Action::Start),
            Pending::Marker(m) => return Some(Action::Marker(m)),
            Pending::Phase => return Some(Action::Phase(self.params)),
            Pending::Exit => {
                self.exited = true;
                self.queue.clear();
                return Some(Action::Exit);
            }
            Pending::Event { phase, event } => wl
                .tasks
                .get(self.index)
                .and_then(|t| t.phases.get(phase))
                .and_then(|p| p.events.get(event))?,
        };
        Some(match *ev {
            Event::Run { work_ns } | Event::Runtime { ns: work_ns } => {
                if let Some(l) = self.stats.as_mut() {
                    l.run_since = Some(now);
                    l.c_run_us += ns_to_us(work_ns);
                }
                if matches!(ev, Event::Run { .. }) {
                    Action::Run { work_ns }
                } else {
                    Action::Runtime { ns: work_ns }
                }
            }
            Event::Sleep { ns } => Action::Sleep { ns },
            Event::Timer {
                timer,
                period_ns,
                absolute,
            } => {
                let t_first = wl.tasks.get(self.index).map_or(0, |t| t.delay_ns);
                let mut scratch = Timer::new();
                let ts = timers.get_mut(timer).unwrap_or(&mut scratch);
                let base = *ts.t_ref.get_or_insert(t_first);
                let next = base.saturating_add(period_ns);
                if let Some(l) = self.stats.as_mut() {
                    l.c_period_us += ns_to_us(period_ns);
                    l.slack_us = signed_ns_to_us((next as i64).saturating_sub(now as i64));
                    if now < next {
                        l.timer_wait = Some(next);
                    } else {
                        l.wu_lat_us = 0;
                    }
                }
                let overrun = now > next;
                ts.t_ref = Some(if overrun && !absolute { now } else { next });
                Action::Timer(TimerTick {
                    period_start_ns: base,
                    expiry_ns: next,
                    overrun,
                    wait_until_ns: (now < next).then_some(next),
                })
            }
            Event::Suspend => {
                if core::mem::take(&mut self.pending_resume) {
                    return None;
                }
                Action::Suspend
            }
            Event::Resume { ref targets } => Action::Resume(targets),
            Event::Yield => Action::Yield,
        })
    }
}

/// `timespec_to_usec`: whole µs of a non-negative duration.
pub fn ns_to_us(ns: u64) -> i64 {
    (ns / 1000) as i64
}

/// `timespec_to_usec_long` of a signed duration: `tv_sec × 10⁶ + tv_nsec / 1000` with
/// `tv_nsec` normalised to `0..10⁹`, i.e. the floor in µs.
pub fn signed_ns_to_us(ns: i64) -> i64 {
    ns.div_euclid(1000)
}

fn mask_of(cpus: Option<&[u16]>, all: u64) -> u64 {
    cpus.map_or(all, |c| {
        c.iter()
            .fold(0, |m, &c| m | 1u64.checked_shl(u32::from(c)).unwrap_or(0))
    })
}

/// One phase iteration being measured, as rt-app's `thread_body` and `run_event` measure
/// it (`log_data_t`).
#[derive(Clone, Copy, Debug, Default)]
struct LoopStats {
    /// When the iteration started (`t_start`).
    start_ns: u64,
    /// Σ µs of the wall time of each `run`/`runtime` event (`ldata.duration`).
    run_us: i64,
    /// The running `run`/`runtime` event started here.
    run_since: Option<u64>,
    /// Σ configured run µs (`ldata.c_duration`).
    c_run_us: i64,
    /// Σ timer periods µs (`ldata.c_period`).
    c_period_us: i64,
    /// µs from the last timer use to its next expiry (`ldata.slack`).
    slack_us: i64,
    /// Σ µs of timer wake-up latency (`ldata.wu_latency`; reset by a missed period).
    wu_lat_us: i64,
    /// The thread sleeps until this timer expiry (its wake-up latency is pending).
    timer_wait: Option<u64>,
}

/// What [`Thread::advance`] queues. At most five per call (loop end, stats, loop start,
/// phase, event), three at the start.
///
/// `repr(C)`, as [`Marker`] is.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
enum Pending {
    Start,
    Marker(Marker),
    Phase,
    Event { phase: usize, event: usize },
    Exit,
}

const QUEUE_LEN: usize = 8;

/// A fixed FIFO of [`Pending`] items.
#[derive(Clone, Debug)]
struct Queue {
    items: [Pending; QUEUE_LEN],
    head: usize,
    len: usize,
}

impl Queue {
    const fn new() -> Self {
        Queue {
            items: [Pending::Exit; QUEUE_LEN],
            head: 0,
            len: 0,
        }
    }

    fn push(&mut self, p: Pending) {
        // `advance` queues at most five items into an empty queue; a full queue would
        // be a bug here, not bad input.
        debug_assert!(self.len < QUEUE_LEN, "interpreter queue overflow");
        if self.len < QUEUE_LEN {
            self.items[(self.head + self.len) % QUEUE_LEN] = p;
            self.len += 1;
        }
    }

    fn pop(&mut self) -> Option<Pending> {
        if self.len == 0 {
            return None;
        }
        let p = self.items[self.head];
        self.head = (self.head + 1) % QUEUE_LEN;
        self.len -= 1;
        Some(p)
    }

    fn clear(&mut self) {
        self.len = 0;
    }
}
