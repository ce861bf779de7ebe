//! rt-app workload files, read with rt-app's semantics.
//!
//! Follows rt-app's `doc/tutorial.txt`: a `global` object (`duration`, `calibration`,
//! `default_policy`, ...), a `tasks` object whose keys name threads (`instance`,
//! `loop`, `cpus`, `nice`/`priority`, `util_min`/`util_max`, `delay`, `phases`), phases
//! with their own `loop` and properties, and events in file order matched by key
//! prefix (`run0`, `run1`, ...).
//!
//! Where the tutorial and rt-app's code (`src/rt-app.c`) differ, the code wins: threads
//! are named `<key>-<index>` (`thread_data_set_unique_name`), a timer starts from the
//! thread's start (`t_first`), a phase keeps the scheduling parameters it does not set.
//!
//! Deliberate differences from rt-app, all documented in `docs/sim.md`:
//! - `run` is work in µs *measured on the biggest CPU at its top OPP* (rt-app's
//!   calibration convention made exact); `calibration` is accepted and ignored.
//! - `resume` before the target has suspended is remembered (one pending wake-up),
//!   where rt-app's condition variable may lose it; this keeps message-passing
//!   workloads from deadlocking on an unlucky interleaving.
//! - Only `SCHED_OTHER` is supported until the RT class exists; other policies and
//!   the lock/wait/signal/barrier/mem/iorun/fork events are rejected with a clear
//!   error rather than silently ignored.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use crate::json::{self, Member, Spanned, Value};

/// A position in the source: 1-based line and column.
type Pos = (u32, u32);

fn at(v: &Spanned) -> Pos {
    (v.line, v.col)
}

fn key_at(m: &Member) -> Pos {
    (m.line, m.col)
}

/// A workload, with every task instance expanded.
#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    /// `global.duration` in ns; `None` for `-1` (run until every task exits).
    pub duration_ns: Option<u64>,
    /// One entry per thread (instances expanded), in file order.
    pub tasks: Vec<TaskSpec>,
    /// Number of distinct timers (`timer` `ref`s after `unique` expansion).
    pub nr_timers: usize,
}

/// One thread.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskSpec {
    /// Thread name as rt-app names it: `<task key>-<index>`, the index counting every
    /// thread of the file in order (the trace's comm is its first 15 bytes).
    pub name: String,
    /// The task key in the file (shared by all instances).
    pub group: String,
    /// Initial delay before the first phase.
    pub delay_ns: u64,
    /// Number of times the whole phase list runs; `None` = forever (`loop: -1`).
    pub loops: Option<u64>,
    /// Nice value (-20..=19).
    pub nice: i32,
    /// Allowed CPUs; `None` = all.
    pub cpus: Option<Vec<u16>>,
    /// uclamp minimum (0..=1024).
    pub util_min: Option<u32>,
    /// uclamp maximum (0..=1024).
    pub util_max: Option<u32>,
    /// Phases in file order.
    pub phases: Vec<PhaseSpec>,
}

/// One phase of a thread.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseSpec {
    /// Phase name (the key), for traces and errors.
    pub name: String,
    /// Number of repetitions (≥ 1).
    pub loops: u64,
    /// Affinity override for this phase.
    pub cpus: Option<Vec<u16>>,
    /// uclamp overrides for this phase.
    pub util_min: Option<u32>,
    /// uclamp overrides for this phase.
    pub util_max: Option<u32>,
    /// Nice override for this phase.
    pub nice: Option<i32>,
    /// Events in file order.
    pub events: Vec<Event>,
}

/// One rt-app event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `run`: work in ns of the biggest CPU at its top OPP (scales with capacity and frequency).
    Run {
        /// Work, in ns at the reference capacity (see the module docs).
        work_ns: u64,
    },
    /// `runtime`: busy for a fixed wall time whatever the CPU speed.
    Runtime {
        /// Wall time busy.
        ns: u64,
    },
    /// `sleep`: block for a duration from now.
    Sleep {
        /// How long.
        ns: u64,
    },
    /// `timer`: wait until the timer's next expiry.
    Timer {
        /// Which timer (index below [`Workload::nr_timers`]); threads sharing a `ref`
        /// share it.
        timer: usize,
        /// The period.
        period_ns: u64,
        /// `mode: absolute`: a late thread keeps the original schedule; relative (the
        /// default) restarts the period from the late wake-up.
        absolute: bool,
    },
    /// `suspend`: block until resumed.
    Suspend,
    /// `resume`: wake the listed threads (indices into [`Workload::tasks`]).
    Resume {
        /// The threads woken, ascending.
        targets: Vec<usize>,
    },
    /// `yield`.
    Yield,
}

/// An error in a workload file: where (JSON path and line) and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkloadError {
    /// The source name (file path) for the message.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column (characters).
    pub col: u32,
    /// Dotted JSON path of the offending value (`tasks.big.phases.p0.timer0.period`).
    pub path: String,
    /// What is wrong.
    pub msg: String,
}

impl fmt::Display for WorkloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}:{}:{}: {}", self.file, self.line, self.col, self.msg)
        } else {
            write!(
                f,
                "{}:{}:{}: at `{}`: {}",
                self.file, self.line, self.col, self.path, self.msg
            )
        }
    }
}

impl core::error::Error for WorkloadError {}

/// Parse an rt-app workload for a board with `nr_cpus` CPUs. `file` names the source in errors.
pub fn parse(text: &str, file: &str, nr_cpus: usize) -> Result<Workload, WorkloadError> {
    let root = json::parse(text).map_err(|e| WorkloadError {
        file: file.into(),
        line: e.line,
        col: e.col,
        path: e.path,
        msg: format!("invalid JSON: {}", e.msg),
    })?;
    let mut r = Reader {
        file,
        nr_cpus,
        timers: BTreeMap::new(),
        resumes: Vec::new(),
        suspends: Vec::new(),
        task_key: String::new(),
    };
    r.workload(&root)
}

struct Reader<'a> {
    file: &'a str,
    nr_cpus: usize,
    timers: BTreeMap<String, usize>,
    /// Pending `resume` targets: (task index, event index path, name, line, path).
    resumes: Vec<PendingResume>,
    /// `(thread index, resource)` of every `suspend`: rt-app suspends a thread on the
    /// condition named by the string (workgen fills an empty one with the task key).
    suspends: Vec<(usize, String)>,
    /// The key of the task being read.
    task_key: String,
}

struct PendingResume {
    task: usize,
    phase: usize,
    event: usize,
    target: String,
    pos: Pos,
    path: String,
}

/// Longest run/sleep/timer period accepted, in µs (about 2.4 hours): keeps every
/// time computation of the engine far from `u64` overflow.
pub const MAX_EVENT_US: u64 = 1 << 33;

const GLOBAL_IGNORED: &[&str] = &[
    "pi_enabled",
    "lock_pages",
    "logdir",
    "log_size",
    "log_basename",
    "ftrace",
    "gnuplot",
    "io_device",
    "mem_buffer_size",
    "cumulative_slack",
];

/// Events rt-app knows that asym does not model yet.
const UNSUPPORTED_EVENTS: &[&str] = &[
    "lock", "unlock", "wait", "signal", "broad", "sync", "barrier", "mem", "iorun", "fork",
];

impl Reader<'_> {
    fn err(&self, (line, col): Pos, path: &str, msg: impl Into<String>) -> WorkloadError {
        WorkloadError {
            file: self.file.into(),
            line,
            col,
            path: path.into(),
            msg: msg.into(),
        }
    }

    fn object<'v>(&self, v: &'v Spanned, path: &str) -> Result<&'v [Member], WorkloadError> {
        match &v.value {
            Value::Object(m) => Ok(m),
            other => Err(self.err(
                at(v),
                path,
                format!("expected an object, found {}", other.type_name()),
            )),
        }
    }

    fn int(&self, v: &Spanned, path: &str) -> Result<i64, WorkloadError> {
        match v.value {
            Value::Int(i) => Ok(i),
            ref other => Err(self.err(
                at(v),
                path,
                format!("expected an integer, found {}", other.type_name()),
            )),
        }
    }

    /// A non-negative integer number of µs, returned in ns.
    fn micros(&self, v: &Spanned, path: &str, what: &str) -> Result<u64, WorkloadError> {
        let i = self.int(v, path)?;
        if i < 0 {
            return Err(self.err(
                at(v),
                path,
                format!("{what} must not be negative (got {i})"),
            ));
        }
        if i as u64 > MAX_EVENT_US {
            return Err(self.err(
                at(v),
                path,
                format!("{what} of {i} µs is too long (at most {MAX_EVENT_US} µs)"),
            ));
        }
        Ok(i as u64 * 1000)
    }

    fn string<'v>(&self, v: &'v Spanned, path: &str) -> Result<&'v str, WorkloadError> {
        match &v.value {
            Value::Str(s) => Ok(s),
            other => Err(self.err(
                at(v),
                path,
                format!("expected a string, found {}", other.type_name()),
            )),
        }
    }

    fn workload(&mut self, root: &Spanned) -> Result<Workload, WorkloadError> {
        let top = self.object(root, "")?;
        let mut duration_ns = None;
        let mut tasks_v = None;
        for m in top {
            let (k, v) = (&m.key, &m.value);
            match k.as_str() {
                "global" => duration_ns = self.global(v)?,
                "tasks" => tasks_v = Some(v),
                "resources" => {} // kept by rt-app for backward compatibility only
                _ => {
                    return Err(self.err(
                        key_at(m),
                        k,
                        "unknown top-level key (expected `global`, `tasks` or `resources`)",
                    ))
                }
            }
        }
        let tasks_v = tasks_v.ok_or_else(|| self.err(at(root), "", "missing `tasks` object"))?;
        let tasks_obj = self.object(tasks_v, "tasks")?;
        if tasks_obj.is_empty() {
            return Err(self.err(at(tasks_v), "tasks", "no tasks defined"));
        }
        let mut tasks = Vec::new();
        for m in tasks_obj {
            self.task(&m.key, &m.value, &mut tasks)?;
        }
        self.resolve_resumes(&mut tasks)?;
        Ok(Workload {
            duration_ns,
            tasks,
            nr_timers: self.timers.len(),
        })
    }

    fn global(&mut self, v: &Spanned) -> Result<Option<u64>, WorkloadError> {
        let mut duration = None;
        for m in self.object(v, "global")? {
            let (k, gv) = (&m.key, &m.value);
            let path = format!("global.{k}");
            match k.as_str() {
                "duration" => {
                    let d = self.int(gv, &path)?;
                    duration = match d {
                        -1 => None,
                        d if (1..=1_000_000).contains(&d) => Some(d as u64 * 1_000_000_000),
                        d => {
                            return Err(self.err(
                                at(gv),
                                &path,
                                format!("duration must be -1 or 1..=1000000 seconds (got {d})"),
                            ))
                        }
                    };
                }
                "calibration" => match &gv.value {
                    Value::Str(_) | Value::Int(_) => {}
                    other => {
                        return Err(self.err(
                            at(gv),
                            &path,
                            format!(
                                "expected a string (\"CPU0\") or an integer, found {}",
                                other.type_name()
                            ),
                        ))
                    }
                },
                "default_policy" => self.policy(gv, &path)?,
                k if GLOBAL_IGNORED.contains(&k) => {}
                _ => return Err(self.err(key_at(m), &path, "unknown key in `global`")),
            }
        }
        Ok(duration)
    }

    fn policy(&self, v: &Spanned, path: &str) -> Result<(), WorkloadError> {
        match self.string(v, path)? {
            "SCHED_OTHER" => Ok(()),
            p @ ("SCHED_IDLE" | "SCHED_RR" | "SCHED_FIFO" | "SCHED_DEADLINE") => Err(self.err(
                at(v),
                path,
                format!("policy {p} is not supported yet (only SCHED_OTHER)"),
            )),
            p => Err(self.err(at(v), path, format!("unknown scheduling policy \"{p}\""))),
        }
    }

    fn cpus(&self, v: &Spanned, path: &str) -> Result<Vec<u16>, WorkloadError> {
        let Value::Array(items) = &v.value else {
            return Err(self.err(
                at(v),
                path,
                format!(
                    "expected an array of CPU numbers, found {}",
                    v.value.type_name()
                ),
            ));
        };
        if items.is_empty() {
            return Err(self.err(at(v), path, "empty CPU list: the task could never run"));
        }
        let mut out = Vec::new();
        for (i, it) in items.iter().enumerate() {
            let p = format!("{path}[{i}]");
            let c = self.int(it, &p)?;
            if c < 0 || c as usize >= self.nr_cpus {
                return Err(self.err(
                    at(it),
                    &p,
                    format!(
                        "CPU {c} does not exist on this board (CPUs 0..={})",
                        self.nr_cpus - 1
                    ),
                ));
            }
            if !out.contains(&(c as u16)) {
                out.push(c as u16);
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    fn nice(&self, v: &Spanned, path: &str) -> Result<i32, WorkloadError> {
        let n = self.int(v, path)?;
        if !(-20..=19).contains(&n) {
            return Err(self.err(at(v), path, format!("nice must be in -20..=19 (got {n})")));
        }
        Ok(n as i32)
    }

    fn uclamp(&self, v: &Spanned, path: &str) -> Result<u32, WorkloadError> {
        let u = self.int(v, path)?;
        if !(0..=1024).contains(&u) {
            return Err(self.err(
                at(v),
                path,
                format!("utilisation clamp must be in 0..=1024 (got {u})"),
            ));
        }
        Ok(u as u32)
    }

    fn task(
        &mut self,
        name: &str,
        v: &Spanned,
        out: &mut Vec<TaskSpec>,
    ) -> Result<(), WorkloadError> {
        let tpath = format!("tasks.{name}");
        self.task_key = name.to_string();
        let members = self.object(v, &tpath)?;
        let mut instances = 1i64;
        let mut loops = None;
        let mut nice = 0;
        let mut cpus = None;
        let (mut util_min, mut util_max) = (None, None);
        let mut delay_ns = 0;
        let mut phases_v = None;
        // Events placed directly in the task object form one implicit phase.
        let mut inline = Vec::new();
        for m in members {
            let (k, mv) = (&m.key, &m.value);
            let path = format!("{tpath}.{k}");
            match k.as_str() {
                "instance" => {
                    instances = self.int(mv, &path)?;
                    if !(0..=4096).contains(&instances) {
                        return Err(self.err(
                            at(mv),
                            &path,
                            format!("instance must be in 0..=4096 (got {instances})"),
                        ));
                    }
                }
                "loop" => loops = Some(self.loop_count(mv, &path, true)?),
                "nice" | "priority" => nice = self.nice(mv, &path)?,
                "policy" => self.policy(mv, &path)?,
                "cpus" => cpus = Some(self.cpus(mv, &path)?),
                "util_min" => util_min = Some(self.uclamp(mv, &path)?),
                "util_max" => util_max = Some(self.uclamp(mv, &path)?),
                "delay" => delay_ns = self.micros(mv, &path, "delay")?,
                "phases" => phases_v = Some(mv),
                _ => inline.push((k.as_str(), key_at(m), mv)),
            }
        }
        if let (Some(lo), Some(hi)) = (util_min, util_max) {
            if lo > hi {
                return Err(self.err(
                    at(v),
                    &tpath,
                    format!("util_min {lo} is above util_max {hi}"),
                ));
            }
        }
        let first_index = out.len();
        for inst in 0..instances as usize {
            let task_index = first_index + inst;
            // rt-app's thread_data_set_unique_name: "<task key>-<thread index>", the
            // index counting every thread of the file in order.
            let tname = format!("{name}-{task_index}");
            let phases = match phases_v {
                Some(pv) => {
                    if let Some((k, kpos, _)) = inline.first() {
                        return Err(self.err(
                            *kpos,
                            &format!("{tpath}.{k}"),
                            "unknown task key (events belong inside `phases` when `phases` is present)",
                        ));
                    }
                    let pm = self.object(pv, &format!("{tpath}.phases"))?;
                    if pm.is_empty() {
                        return Err(self.err(
                            at(pv),
                            &format!("{tpath}.phases"),
                            "no phases defined",
                        ));
                    }
                    let mut phases = Vec::new();
                    for (pi, pmem) in pm.iter().enumerate() {
                        let (pname, phv) = (&pmem.key, &pmem.value);
                        let ppath = format!("{tpath}.phases.{pname}");
                        let members: Vec<_> = self
                            .object(phv, &ppath)?
                            .iter()
                            .map(|m| (m.key.as_str(), key_at(m), &m.value))
                            .collect();
                        phases.push(self.phase(
                            pname,
                            &ppath,
                            at(phv),
                            &members,
                            task_index,
                            pi,
                            inst,
                        )?);
                    }
                    phases
                }
                None => {
                    if inline.is_empty() {
                        return Err(self.err(at(v), &tpath, "task has no events and no `phases`"));
                    }
                    vec![self.phase("phase0", &tpath, at(v), &inline, task_index, 0, inst)?]
                }
            };
            out.push(TaskSpec {
                name: tname,
                group: name.to_string(),
                delay_ns,
                loops: loops.unwrap_or(None),
                nice,
                cpus: cpus.clone(),
                util_min,
                util_max,
                phases,
            });
        }
        Ok(())
    }

    /// A `loop` value: ≥ 1, or -1 (forever) where allowed. `None` means forever.
    fn loop_count(
        &self,
        v: &Spanned,
        path: &str,
        allow_forever: bool,
    ) -> Result<Option<u64>, WorkloadError> {
        let n = self.int(v, path)?;
        match n {
            -1 if allow_forever => Ok(None),
            n if n >= 1 => Ok(Some(n as u64)),
            n => Err(self.err(
                at(v),
                path,
                if allow_forever {
                    format!("loop must be -1 (forever) or ≥ 1 (got {n})")
                } else {
                    format!("phase loop must be ≥ 1 (got {n})")
                },
            )),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn phase(
        &mut self,
        name: &str,
        ppath: &str,
        pos: Pos,
        members: &[(&str, Pos, &Spanned)],
        task_index: usize,
        phase_index: usize,
        instance: usize,
    ) -> Result<PhaseSpec, WorkloadError> {
        let mut ph = PhaseSpec {
            name: name.to_string(),
            loops: 1,
            cpus: None,
            util_min: None,
            util_max: None,
            nice: None,
            events: Vec::new(),
        };
        for &(k, kline, v) in members {
            let path = format!("{ppath}.{k}");
            match k {
                "loop" => ph.loops = self.loop_count(v, &path, false)?.unwrap_or(1),
                "cpus" => ph.cpus = Some(self.cpus(v, &path)?),
                "util_min" => ph.util_min = Some(self.uclamp(v, &path)?),
                "util_max" => ph.util_max = Some(self.uclamp(v, &path)?),
                "nice" | "priority" => ph.nice = Some(self.nice(v, &path)?),
                "policy" => self.policy(v, &path)?,
                _ => {
                    let ev = self.event(
                        k,
                        kline,
                        v,
                        &path,
                        task_index,
                        phase_index,
                        ph.events.len(),
                        instance,
                    )?;
                    ph.events.push(ev);
                }
            }
        }
        if ph.events.is_empty() {
            return Err(self.err(pos, ppath, "phase has no events"));
        }
        Ok(ph)
    }

    #[allow(clippy::too_many_arguments)]
    fn event(
        &mut self,
        key: &str,
        kline: Pos,
        v: &Spanned,
        path: &str,
        task: usize,
        phase: usize,
        event: usize,
        instance: usize,
    ) -> Result<Event, WorkloadError> {
        // rt-app matches event keys by prefix; longer names first so `runtime`
        // is not taken for `run`.
        const KINDS: &[&str] = &[
            "runtime", "run", "sleep", "timer", "suspend", "resume", "yield",
        ];
        if let Some(kind) = KINDS.iter().find(|k| key.starts_with(**k)) {
            return match *kind {
                "run" => Ok(Event::Run {
                    work_ns: self.micros(v, path, "run")?,
                }),
                "runtime" => Ok(Event::Runtime {
                    ns: self.micros(v, path, "runtime")?,
                }),
                "sleep" => Ok(Event::Sleep {
                    ns: self.micros(v, path, "sleep")?,
                }),
                "timer" => self.timer(v, path, task, instance),
                "suspend" => {
                    let name = match self.string(v, path)? {
                        "" => self.task_key.clone(),
                        s => s.to_string(),
                    };
                    self.suspends.push((task, name));
                    Ok(Event::Suspend)
                }
                "resume" => {
                    let target = self.string(v, path)?.to_string();
                    self.resumes.push(PendingResume {
                        task,
                        phase,
                        event,
                        target,
                        pos: at(v),
                        path: path.to_string(),
                    });
                    Ok(Event::Resume {
                        targets: Vec::new(),
                    })
                }
                _ => Ok(Event::Yield),
            };
        }
        if let Some(u) = UNSUPPORTED_EVENTS.iter().find(|u| key.starts_with(**u)) {
            return Err(self.err(
                kline,
                path,
                format!("rt-app event `{u}` is not supported yet"),
            ));
        }
        Err(self.err(
            kline,
            path,
            format!("unknown key or event `{key}` (events: run, runtime, sleep, timer, suspend, resume, yield)"),
        ))
    }

    fn timer(
        &mut self,
        v: &Spanned,
        path: &str,
        task: usize,
        instance: usize,
    ) -> Result<Event, WorkloadError> {
        let mut rf = None;
        let mut period = None;
        let mut absolute = false;
        for m in self.object(v, path)? {
            let (k, tv) = (&m.key, &m.value);
            let p = format!("{path}.{k}");
            match k.as_str() {
                "ref" => rf = Some(self.string(tv, &p)?.to_string()),
                "period" => {
                    let n = self.int(tv, &p)?;
                    if n <= 0 {
                        return Err(self.err(
                            at(tv),
                            &p,
                            format!("timer period must be positive (got {n})"),
                        ));
                    }
                    period = Some(self.micros(tv, &p, "timer period")?);
                }
                "mode" => {
                    absolute = match self.string(tv, &p)? {
                        "absolute" => true,
                        "relative" => false,
                        m => {
                            return Err(self.err(
                                at(tv),
                                &p,
                                format!(
                                    "timer mode must be \"absolute\" or \"relative\" (got \"{m}\")"
                                ),
                            ))
                        }
                    }
                }
                _ => {
                    return Err(self.err(
                        key_at(m),
                        &p,
                        "unknown timer key (expected `ref`, `period`, `mode`)",
                    ))
                }
            }
        }
        let rf = rf.ok_or_else(|| self.err(at(v), path, "timer needs a `ref`"))?;
        let period_ns = period.ok_or_else(|| self.err(at(v), path, "timer needs a `period`"))?;
        // A `unique…` timer is private to each thread instance; any other name is
        // shared by every thread that uses it, as in rt-app.
        let key = if rf.starts_with("unique") {
            format!("{rf}\u{0}{task}\u{0}{instance}")
        } else {
            rf
        };
        let next = self.timers.len();
        let timer = *self.timers.entry(key).or_insert(next);
        Ok(Event::Timer {
            timer,
            period_ns,
            absolute,
        })
    }

    fn resolve_resumes(&mut self, tasks: &mut [TaskSpec]) -> Result<(), WorkloadError> {
        for r in core::mem::take(&mut self.resumes) {
            // rt-app: `resume X` broadcasts on condition X, waking the threads that
            // suspend on X; failing that, X names a thread or a task's threads.
            let mut targets: Vec<usize> = self
                .suspends
                .iter()
                .filter(|(_, n)| *n == r.target)
                .map(|&(t, _)| t)
                .collect();
            targets.sort_unstable();
            targets.dedup();
            if targets.is_empty() {
                targets = tasks
                    .iter()
                    .enumerate()
                    .filter(|(_, t)| t.name == r.target)
                    .map(|(i, _)| i)
                    .collect();
                if targets.is_empty() {
                    targets = tasks
                        .iter()
                        .enumerate()
                        .filter(|(_, t)| t.group == r.target)
                        .map(|(i, _)| i)
                        .collect();
                }
            }
            if targets.is_empty() {
                return Err(self.err(
                    r.pos,
                    &r.path,
                    format!("resume names no task: \"{}\"", r.target),
                ));
            }
            if let Event::Resume { targets: t } = &mut tasks[r.task].phases[r.phase].events[r.event]
            {
                *t = targets;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_phases_in_order_with_prefix_keys() {
        let w = parse(
            r#"{ "global": {"duration": 2, "calibration": "CPU0", "default_policy": "SCHED_OTHER"},
                 "tasks": { "t": { "instance": 2, "cpus": [1, 0], "loop": -1,
                    "phases": { "a": { "loop": 3, "run0": 100, "sleep0": 50, "run1": 7, "runtime": 9,
                                       "timer0": {"ref": "unique", "period": 1000} } } } } }"#,
            "w.json",
            6,
        )
        .unwrap();
        assert_eq!(w.duration_ns, Some(2_000_000_000));
        assert_eq!(w.tasks.len(), 2);
        assert_eq!(w.tasks[1].name, "t-1");
        assert_eq!(w.tasks[0].cpus, Some(vec![0, 1]));
        let ev = &w.tasks[0].phases[0].events;
        assert_eq!(ev[0], Event::Run { work_ns: 100_000 });
        assert_eq!(ev[1], Event::Sleep { ns: 50_000 });
        assert_eq!(ev[2], Event::Run { work_ns: 7_000 });
        assert_eq!(ev[3], Event::Runtime { ns: 9_000 });
        // `unique` timers are per instance.
        assert_eq!(w.nr_timers, 2);
    }

    #[test]
    fn resume_targets_resolve_to_thread_indices() {
        let w = parse(
            r#"{"tasks": {"a": {"run": 10, "resume": "b", "suspend": ""},
                          "b": {"suspend": "", "run": 10, "resume": "a"}}}"#,
            "w.json",
            2,
        )
        .unwrap();
        assert_eq!(
            w.tasks[0].phases[0].events[1],
            Event::Resume { targets: vec![1] }
        );
        assert_eq!(
            w.tasks[1].phases[0].events[2],
            Event::Resume { targets: vec![0] }
        );
    }

    #[test]
    fn resume_wakes_the_threads_suspended_on_that_name() {
        // rt-app's suspend/resume are a condition named by the string; an empty
        // suspend string is the task key (workgen fills it in).
        let w = parse(
            r#"{"tasks": {"a": {"instance": 2, "suspend": "door", "run": 10},
                          "b": {"suspend": "", "run": 10},
                          "c": {"run": 10, "resume": "door", "resume1": "b", "sleep": 10}}}"#,
            "w.json",
            2,
        )
        .unwrap();
        let ev = &w.tasks[3].phases[0].events;
        assert_eq!(
            ev[1],
            Event::Resume {
                targets: vec![0, 1]
            }
        );
        assert_eq!(ev[2], Event::Resume { targets: vec![2] });
    }
}
