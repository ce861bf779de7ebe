//! Linux ftrace text output: what Linux plus LISA's `sched_tp` module write, as
//! `trace-cmd report -t` prints it.
//!
//! Each line is `comm-pid [cpu] secs.nsecs: event: fields` after the `# tracer: nop`
//! header of `/sys/kernel/tracing/trace` (the `irq-info` flags column left out), so
//! trace-cmd, LISA and Perfetto's text importer read it unchanged. The field formats are
//! the `TP_printk` strings of:
//! - `include/trace/events/sched.h`: `sched_switch`, `sched_waking`, `sched_wakeup`,
//!   `sched_wakeup_new`, `sched_migrate_task`;
//! - `include/trace/events/task.h`: `task_rename` (with the `pid=` field kernels up to
//!   v6.12 print);
//! - `include/trace/events/power.h`: `cpu_frequency`, `cpu_idle`;
//! - `include/trace/events/irq.h`: `softirq_raise`, `softirq_entry`, `softirq_exit`
//!   (`vec=7 [action=SCHED]`);
//! - `kernel/trace/trace_output.c` `trace_print_print`: a `trace_marker` write, shown as
//!   `tracing_mark_write: BUF` (the rt-app markers, [`RtApp`]);
//! - LISA 3.1's `lisa/_assets/kmodules/sched_tp/ftrace_events.h`: `sched_pelt_se`,
//!   `sched_pelt_cfs`, `sched_util_est_se`, `sched_util_est_cfs`, `sched_overutilized`,
//!   `sched_cpu_capacity`.
//!
//! util_est is written in the pre-v6.9 form (`enqueued=` and `ewma=`), the one
//! `lisa-linux` 3.1.0 (the registry's LISA) reads; `enqueued` is the task's `util_avg`
//! at its last dequeue to sleep, `ewma` the estimate (the policy's v6.9 single word,
//! flag masked), which is what pre-v6.9's `max(enqueued, ewma)` equals after each update.
//!
//! **Timestamps** are unique and increasing, at ns resolution: the trace clock is the
//! simulated time, except that a line that would share (or precede) the previous line's
//! time is written 1 ns after it. The simulator has no cost for a wake-up, a switch or a
//! PELT update, so many lines happen at one simulated instant; spreading them by 1 ns in
//! the order the engine emits them (which is causal: waking before wakeup before switch)
//! keeps that order for tools that sort by time (LISA, Perfetto) and moves each line by
//! at most the number of lines of its instant, in ns ([`TraceClock::max_skew_ns`]).
//! `report.json` keeps exact simulated times.
//!
//! Everything here uses only `core` and plain `Copy` values, so the simulator (through
//! its `std` sink) and the kernel (through [`crate::ring`] and a drain) write the same
//! text with the same code: a [`Record`]'s `Display`, [`write_header`], [`format_into`].

use core::fmt;

/// `PWR_EVENT_EXIT`: the `cpu_idle` state reported when a CPU leaves idle ((u32)-1).
pub const PWR_EVENT_EXIT: u32 = u32::MAX;

/// The name every thread has before it renames itself: rt-app's threads are created by
/// the `rt-app` process and call `pthread_setname_np` first thing.
pub const RTAPP_COMM: &str = "rt-app";

/// Softirq vector numbers (`include/linux/interrupt.h`) and their names (`softirq_to_name`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Softirq {
    /// `SCHED_SOFTIRQ` (7).
    Sched,
}

impl Softirq {
    fn vec(self) -> u32 {
        match self {
            Softirq::Sched => 7,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Softirq::Sched => "SCHED",
        }
    }
}

/// A task's name as the trace prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comm<'a> {
    /// A thread's `comm` (already truncated to `TASK_COMM_LEN - 1`).
    Task(&'a str),
    /// CPU N's idle task, `swapper/N` (`init_idle`).
    Swapper(usize),
    /// The context column of an idle CPU: `trace_find_cmdline` maps pid 0 to `<idle>`.
    Idle,
}

impl fmt::Display for Comm<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Comm::Task(s) => f.pad(s),
            Comm::Idle => f.pad("<idle>"),
            Comm::Swapper(cpu) => {
                // Through a small buffer so that `f.pad` can align it.
                let mut buf = [0u8; 32];
                let mut w = SliceWriter {
                    buf: &mut buf,
                    len: 0,
                };
                fmt::write(&mut w, format_args!("swapper/{cpu}"))?;
                let len = w.len;
                f.pad(core::str::from_utf8(&buf[..len]).map_err(|_| fmt::Error)?)
            }
        }
    }
}

/// Who a trace line is attributed to (the task running on the CPU, or idle).
#[derive(Clone, Copy, Debug)]
pub struct Ctx<'a> {
    /// Task name ([`Comm::Idle`] for the idle task).
    pub comm: Comm<'a>,
    /// pid (0 for idle).
    pub pid: u32,
    /// CPU the event happened on.
    pub cpu: usize,
    /// Simulated time in ns.
    pub ns: u64,
}

/// Task fields shared by several events.
#[derive(Clone, Copy, Debug)]
pub struct TaskRef<'a> {
    /// `comm`.
    pub comm: Comm<'a>,
    /// pid.
    pub pid: u32,
    /// Kernel priority (`120 + nice` for fair tasks).
    pub prio: i32,
}

impl TaskRef<'_> {
    /// CPU `cpu`'s idle task as `sched_switch` names it (`swapper/N`, pid 0, prio 120).
    pub fn idle(cpu: usize) -> TaskRef<'static> {
        TaskRef {
            comm: Comm::Swapper(cpu),
            pid: 0,
            prio: 120,
        }
    }
}

/// `prev_state` of `sched_switch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrevState {
    /// Still runnable and preempted: `R+`.
    Preempted,
    /// Still runnable, gave up the CPU itself (yield): `R`.
    Running,
    /// Sleeping: `S`.
    Sleeping,
    /// Exited: `X`.
    Dead,
}

impl PrevState {
    fn as_str(self) -> &'static str {
        match self {
            PrevState::Preempted => "R+",
            PrevState::Running => "R",
            PrevState::Sleeping => "S",
            PrevState::Dead => "X",
        }
    }
}

/// PELT signal values for the LISA events.
#[derive(Clone, Copy, Debug)]
pub struct PeltVals {
    /// `load_avg`.
    pub load: u64,
    /// `runnable_avg`.
    pub runnable: u64,
    /// `util_avg`.
    pub util: u64,
    /// `last_update_time` (ns of the PELT clock).
    pub update_time: u64,
}

impl From<&asym_sched::pelt::SchedAvg> for PeltVals {
    fn from(v: &asym_sched::pelt::SchedAvg) -> Self {
        PeltVals {
            load: v.load_avg,
            runnable: v.runnable_avg,
            util: v.util_avg,
            update_time: v.last_update_time,
        }
    }
}

/// A CPU mask as the kernel's `%*pb` prints it for `nr_bits` CPUs (`bitmap_string`):
/// lower-case hex, 32-bit chunks separated by `,`, most significant first, each chunk
/// zero-padded to its width (the first one to `ceil(leftover bits / 4)` digits).
/// `cpumap_print_to_pagebuf` also appends a newline, which would split the trace line;
/// it is left out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuMaskHex {
    /// The mask.
    pub mask: u64,
    /// Number of CPUs (1..=64).
    pub nr_bits: usize,
}

impl fmt::Display for CpuMaskHex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nr_bits = self.nr_bits.clamp(1, 64);
        let mut chunksz = match nr_bits % 32 {
            0 => 32,
            r => r,
        };
        let mut lo = nr_bits.div_ceil(32) * 32 - 32;
        let mut first = true;
        loop {
            let chunkmask = if chunksz == 32 {
                u32::MAX as u64
            } else {
                (1u64 << chunksz) - 1
            };
            let val = (self.mask >> lo) & chunkmask;
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{:0w$x}", val, w = chunksz.div_ceil(4))?;
            if lo == 0 {
                return Ok(());
            }
            lo -= 32;
            chunksz = 32;
        }
    }
}

/// An rt-app `trace_marker` write: the interpreter's markers (`asym_rtapp::marker`).
pub use asym_rtapp::marker::Marker as RtApp;

/// One trace event, a plain value.
#[derive(Clone, Copy, Debug)]
pub enum Event<'a> {
    /// `sched_switch`.
    SchedSwitch {
        /// Outgoing task.
        prev: TaskRef<'a>,
        /// Its state.
        prev_state: PrevState,
        /// Incoming task.
        next: TaskRef<'a>,
    },
    /// `sched_waking` (start of `try_to_wake_up`, on the waker's CPU).
    SchedWaking {
        /// The woken task.
        task: TaskRef<'a>,
        /// `task_cpu(p)` at that moment.
        target_cpu: usize,
    },
    /// `sched_wakeup` (`ttwu_do_activate`, on the CPU that enqueues the task).
    SchedWakeup {
        /// The woken task.
        task: TaskRef<'a>,
        /// Its CPU.
        target_cpu: usize,
    },
    /// `sched_wakeup_new`.
    SchedWakeupNew {
        /// The new task.
        task: TaskRef<'a>,
        /// Its CPU.
        target_cpu: usize,
    },
    /// `sched_migrate_task`.
    SchedMigrateTask {
        /// The task.
        task: TaskRef<'a>,
        /// From.
        orig_cpu: usize,
        /// To.
        dest_cpu: usize,
    },
    /// `task_rename`.
    TaskRename {
        /// pid.
        pid: u32,
        /// Old name.
        oldcomm: Comm<'a>,
        /// New name.
        newcomm: Comm<'a>,
    },
    /// `cpu_frequency` (kHz).
    CpuFrequency {
        /// kHz.
        khz: u32,
        /// CPU.
        cpu: usize,
    },
    /// `cpu_idle` (state index, or [`PWR_EVENT_EXIT`]).
    CpuIdle {
        /// State.
        state: u32,
        /// CPU.
        cpu: usize,
    },
    /// `softirq_raise`.
    SoftirqRaise(Softirq),
    /// `softirq_entry`: the handler starts.
    SoftirqEntry(Softirq),
    /// `softirq_exit`: the handler is done.
    SoftirqExit(Softirq),
    /// LISA `sched_pelt_se` for a task (path `(null)`, as LISA prints task entities).
    SchedPeltSe {
        /// CPU of the task's cfs_rq.
        cpu: usize,
        /// The task.
        task: TaskRef<'a>,
        /// Signals.
        pelt: PeltVals,
    },
    /// LISA `sched_pelt_cfs` for the root cfs_rq (path `/`, as `cgroup_path` names
    /// the root task group).
    SchedPeltCfs {
        /// CPU.
        cpu: usize,
        /// Signals.
        pelt: PeltVals,
    },
    /// LISA `sched_util_est_se` (pre-v6.9 form).
    SchedUtilEstSe {
        /// CPU.
        cpu: usize,
        /// The task.
        task: TaskRef<'a>,
        /// `util_est.enqueued` (flag masked).
        enqueued: u32,
        /// `util_est.ewma`.
        ewma: u32,
        /// `util_avg`.
        util: u64,
    },
    /// LISA `sched_util_est_cfs` (pre-v6.9 form) for the root cfs_rq.
    SchedUtilEstCfs {
        /// CPU.
        cpu: usize,
        /// `util_est.enqueued`: the sum of the queued tasks' estimates.
        enqueued: u32,
        /// `util_est.ewma` (never updated for a cfs_rq by pre-v6.9 kernels: 0).
        ewma: u32,
        /// `util_avg`.
        util: u64,
    },
    /// LISA `sched_overutilized`: `span=0x%s` with the root domain's span.
    SchedOverutilized {
        /// Flag.
        overutilized: bool,
        /// Root-domain span.
        span: CpuMaskHex,
    },
    /// LISA `sched_cpu_capacity`.
    SchedCpuCapacity {
        /// CPU.
        cpu: usize,
        /// `rq->cpu_capacity` (`capacity_of`).
        capacity: u32,
        /// `arch_scale_cpu_capacity`.
        capacity_orig: u32,
        /// `capacity_orig × arch_scale_freq_capacity >> 10`.
        capacity_curr: u32,
    },
    /// A `trace_marker` write by rt-app.
    TracingMarkWrite(RtApp),
    /// Any other `trace_marker` write, its text as written (less one trailing newline).
    TracingMarkText(&'a str),
}

impl Event<'_> {
    /// The event's name as the trace prints it.
    pub fn name(&self) -> &'static str {
        match self {
            Event::SchedSwitch { .. } => "sched_switch",
            Event::SchedWaking { .. } => "sched_waking",
            Event::SchedWakeup { .. } => "sched_wakeup",
            Event::SchedWakeupNew { .. } => "sched_wakeup_new",
            Event::SchedMigrateTask { .. } => "sched_migrate_task",
            Event::TaskRename { .. } => "task_rename",
            Event::CpuFrequency { .. } => "cpu_frequency",
            Event::CpuIdle { .. } => "cpu_idle",
            Event::SoftirqRaise(_) => "softirq_raise",
            Event::SoftirqEntry(_) => "softirq_entry",
            Event::SoftirqExit(_) => "softirq_exit",
            Event::SchedPeltSe { .. } => "sched_pelt_se",
            Event::SchedPeltCfs { .. } => "sched_pelt_cfs",
            Event::SchedUtilEstSe { .. } => "sched_util_est_se",
            Event::SchedUtilEstCfs { .. } => "sched_util_est_cfs",
            Event::SchedOverutilized { .. } => "sched_overutilized",
            Event::SchedCpuCapacity { .. } => "sched_cpu_capacity",
            // `trace_print_print` prints the caller's symbol, not an event name.
            Event::TracingMarkWrite(_) | Event::TracingMarkText(_) => "tracing_mark_write",
        }
    }
}

/// `name: fields`.
impl fmt::Display for Event<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.name())?;
        match *self {
            Event::SchedSwitch {
                prev,
                prev_state,
                next,
            } => write!(
                f,
                "prev_comm={} prev_pid={} prev_prio={} prev_state={} ==> next_comm={} next_pid={} next_prio={}",
                prev.comm,
                prev.pid,
                prev.prio,
                prev_state.as_str(),
                next.comm,
                next.pid,
                next.prio
            ),
            Event::SchedWaking { task, target_cpu }
            | Event::SchedWakeup { task, target_cpu }
            | Event::SchedWakeupNew { task, target_cpu } => write!(
                f,
                "comm={} pid={} prio={} target_cpu={:03}",
                task.comm, task.pid, task.prio, target_cpu
            ),
            Event::SchedMigrateTask {
                task,
                orig_cpu,
                dest_cpu,
            } => write!(
                f,
                "comm={} pid={} prio={} orig_cpu={orig_cpu} dest_cpu={dest_cpu}",
                task.comm, task.pid, task.prio
            ),
            Event::TaskRename {
                pid,
                oldcomm,
                newcomm,
            } => write!(
                f,
                "pid={pid} oldcomm={oldcomm} newcomm={newcomm} oom_score_adj=0"
            ),
            Event::CpuFrequency { khz, cpu } => write!(f, "state={khz} cpu_id={cpu}"),
            Event::CpuIdle { state, cpu } => write!(f, "state={state} cpu_id={cpu}"),
            Event::SoftirqRaise(irq) | Event::SoftirqEntry(irq) | Event::SoftirqExit(irq) => {
                write!(f, "vec={} [action={}]", irq.vec(), irq.name())
            }
            Event::SchedPeltSe { cpu, task, pelt } => write!(
                f,
                "cpu={cpu} path=(null) comm={} pid={} load={} runnable={} util={} update_time={}",
                task.comm, task.pid, pelt.load, pelt.runnable, pelt.util, pelt.update_time
            ),
            Event::SchedPeltCfs { cpu, pelt } => write!(
                f,
                "cpu={cpu} path=/ load={} runnable={} util={} update_time={}",
                pelt.load, pelt.runnable, pelt.util, pelt.update_time
            ),
            Event::SchedUtilEstSe {
                cpu,
                task,
                enqueued,
                ewma,
                util,
            } => write!(
                f,
                "cpu={cpu} path=(null) comm={} pid={} enqueued={enqueued} ewma={ewma} util={util}",
                task.comm, task.pid
            ),
            Event::SchedUtilEstCfs {
                cpu,
                enqueued,
                ewma,
                util,
            } => write!(
                f,
                "cpu={cpu} path=/ enqueued={enqueued} ewma={ewma} util={util}"
            ),
            Event::SchedOverutilized { overutilized, span } => {
                write!(f, "overutilized={} span=0x{span}", overutilized as u8)
            }
            Event::SchedCpuCapacity {
                cpu,
                capacity,
                capacity_orig,
                capacity_curr,
            } => write!(
                f,
                "cpu={cpu} capacity={capacity} capacity_orig={capacity_orig} capacity_curr={capacity_curr}"
            ),
            Event::TracingMarkWrite(m) => write!(f, "{m}"),
            Event::TracingMarkText(t) => f.write_str(t),
        }
    }
}

/// One trace line: the context prefix, the timestamp the line is written at, the event.
#[derive(Clone, Copy, Debug)]
pub struct Record<'a> {
    /// Who and where.
    pub ctx: Ctx<'a>,
    /// Trace-clock time (ns); see the module docs for how it relates to `ctx.ns`.
    pub ts_ns: u64,
    /// What.
    pub event: Event<'a>,
}

/// `"%16s-%-7d [%03d] %5llu.%09llu: "` then the event, without the newline.
impl fmt::Display for Record<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:>16}-{:<7} [{:03}] {:>5}.{:09}: {}",
            self.ctx.comm,
            self.ctx.pid,
            self.ctx.cpu,
            self.ts_ns / 1_000_000_000,
            self.ts_ns % 1_000_000_000,
            self.event
        )
    }
}

/// The trace clock: simulated time, kept strictly increasing by 1 ns steps.
#[derive(Clone, Copy, Debug, Default)]
pub struct TraceClock {
    last: Option<u64>,
    max_skew: u64,
}

impl TraceClock {
    /// The timestamp for a line emitted at simulated time `ns`.
    pub fn stamp(&mut self, ns: u64) -> u64 {
        let ts = match self.last {
            Some(last) if ns <= last => last + 1,
            _ => ns,
        };
        self.max_skew = self.max_skew.max(ts - ns);
        self.last = Some(ts);
        ts
    }

    /// The largest `timestamp - simulated time` so far (ns).
    pub fn max_skew_ns(&self) -> u64 {
        self.max_skew
    }
}

/// The `# tracer: nop` header of `/sys/kernel/tracing/trace` for `nr_cpus` CPUs, each
/// line ending in a newline.
pub fn write_header(w: &mut impl fmt::Write, nr_cpus: usize) -> fmt::Result {
    w.write_str("# tracer: nop\n#\n")?;
    writeln!(w, "# entries-in-buffer/entries-written: 0/0   #P:{nr_cpus}")?;
    w.write_str("#\n")?;
    w.write_str("#           TASK-PID     CPU#     TIMESTAMP  FUNCTION\n")?;
    w.write_str("#              | |         |         |         |\n")
}

/// One trace line with its newline into `buf`; the length written, or `None` when the
/// line does not fit (nothing is then valid in `buf`).
pub fn format_into(record: &Record<'_>, buf: &mut [u8]) -> Option<usize> {
    let mut w = SliceWriter::new(buf);
    fmt::write(&mut w, format_args!("{record}\n")).ok()?;
    Some(w.len)
}

/// A `core::fmt::Write` into a fixed buffer; a write that does not fit fails (and
/// leaves what fitted before it).
#[derive(Debug)]
pub struct SliceWriter<'b> {
    buf: &'b mut [u8],
    len: usize,
}

impl<'b> SliceWriter<'b> {
    /// An empty writer over `buf`.
    pub fn new(buf: &'b mut [u8]) -> Self {
        SliceWriter { buf, len: 0 }
    }

    /// What has been written.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl fmt::Write for SliceWriter<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        if end > self.buf.len() {
            return Err(fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::{String, ToString};
    use alloc::vec::Vec;

    fn ctx(comm: Comm<'static>, pid: u32, cpu: usize, ns: u64) -> Ctx<'static> {
        Ctx { comm, pid, cpu, ns }
    }

    fn small() -> TaskRef<'static> {
        TaskRef {
            comm: Comm::Task("small"),
            pid: 1001,
            prio: 120,
        }
    }

    #[test]
    fn same_instant_lines_get_unique_increasing_timestamps() {
        let mut c = TraceClock::default();
        assert_eq!(c.stamp(0), 0);
        assert_eq!(c.stamp(0), 1);
        assert_eq!(c.stamp(0), 2);
        assert_eq!(c.stamp(1), 3);
        assert_eq!(c.max_skew_ns(), 2);
        // Simulated time past the spread: back to exact.
        assert_eq!(c.stamp(10), 10);
        assert_eq!(c.stamp(10), 11);
        assert_eq!(c.stamp(1000), 1000);
        assert_eq!(c.max_skew_ns(), 2);
    }

    #[test]
    fn lisa_events_match_sched_tp_formats() {
        // Formats from LISA 3.1's sched_tp `ftrace_events.h` (TP_printk strings).
        let v = PeltVals {
            load: 300,
            runnable: 301,
            util: 302,
            update_time: 2_001_048_576,
        };
        let t = small();
        let evs = [
            Event::SchedPeltSe {
                cpu: 1,
                task: t,
                pelt: v,
            },
            Event::SchedPeltCfs { cpu: 1, pelt: v },
            Event::SchedUtilEstSe {
                cpu: 1,
                task: t,
                enqueued: 290,
                ewma: 280,
                util: 302,
            },
            Event::SchedUtilEstCfs {
                cpu: 1,
                enqueued: 580,
                ewma: 0,
                util: 302,
            },
            Event::SchedOverutilized {
                overutilized: true,
                span: CpuMaskHex {
                    mask: 0x3f,
                    nr_bits: 6,
                },
            },
            Event::SchedCpuCapacity {
                cpu: 2,
                capacity: 383,
                capacity_orig: 383,
                capacity_curr: 181,
            },
            Event::CpuFrequency {
                khz: 950_000,
                cpu: 1,
            },
            Event::CpuIdle {
                state: PWR_EVENT_EXIT,
                cpu: 1,
            },
            Event::TaskRename {
                pid: 1001,
                oldcomm: Comm::Task(RTAPP_COMM),
                newcomm: Comm::Task("small"),
            },
            Event::SchedWaking {
                task: t,
                target_cpu: 4,
            },
        ];
        let text: Vec<String> = evs.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            text,
            [
                "sched_pelt_se: cpu=1 path=(null) comm=small pid=1001 load=300 runnable=301 util=302 update_time=2001048576",
                "sched_pelt_cfs: cpu=1 path=/ load=300 runnable=301 util=302 update_time=2001048576",
                "sched_util_est_se: cpu=1 path=(null) comm=small pid=1001 enqueued=290 ewma=280 util=302",
                "sched_util_est_cfs: cpu=1 path=/ enqueued=580 ewma=0 util=302",
                "sched_overutilized: overutilized=1 span=0x3f",
                "sched_cpu_capacity: cpu=2 capacity=383 capacity_orig=383 capacity_curr=181",
                "cpu_frequency: state=950000 cpu_id=1",
                "cpu_idle: state=4294967295 cpu_id=1",
                "task_rename: pid=1001 oldcomm=rt-app newcomm=small oom_score_adj=0",
                "sched_waking: comm=small pid=1001 prio=120 target_cpu=004",
            ]
        );
    }

    #[test]
    fn rtapp_markers_are_written_as_rtapp_prints_them() {
        // rt-app src/rt-app.c: the log_ftrace format strings.
        let m = [
            RtApp::ClockRef { data_us: 1234 },
            RtApp::TaskStart,
            RtApp::Loop {
                start: true,
                thread_loop: 2,
                phase: 1,
                phase_loop: 0,
            },
            RtApp::Loop {
                start: false,
                thread_loop: 2,
                phase: 1,
                phase_loop: 0,
            },
            RtApp::Stats {
                period: 16000,
                run: 1650,
                wu_lat: 0,
                slack: -12,
                c_period: 16000,
                c_run: 1600,
            },
            RtApp::TaskEnd,
        ];
        let text: Vec<String> = m
            .iter()
            .map(|&m| Event::TracingMarkWrite(m).to_string())
            .collect();
        assert_eq!(
            text,
            [
                "tracing_mark_write: rtapp_main: event=clock_ref data=1234",
                "tracing_mark_write: rtapp_task: event=start",
                "tracing_mark_write: rtapp_loop: event=start thread_loop=2 phase=1 phase_loop=0",
                "tracing_mark_write: rtapp_loop: event=end thread_loop=2 phase=1 phase_loop=0",
                "tracing_mark_write: rtapp_stats: period=16000 run=1650 wu_lat=0 slack=-12 c_period=16000 c_run=1600",
                "tracing_mark_write: rtapp_task: event=end",
            ]
        );
    }

    #[test]
    fn other_marker_text_is_written_as_is() {
        assert_eq!(
            Event::TracingMarkText("hello: 1 2").to_string(),
            "tracing_mark_write: hello: 1 2"
        );
    }

    #[test]
    fn cpumask_prints_like_bitmap_string() {
        // lib/vsprintf.c bitmap_string: zero-padded chunks of 32 bits, first chunk
        // ceil(leftover/4) digits wide.
        let h = |mask, nr_bits| CpuMaskHex { mask, nr_bits }.to_string();
        assert_eq!(h(0x3f, 6), "3f");
        assert_eq!(h(0x0f, 6), "0f");
        assert_eq!(h(0xff, 8), "ff");
        assert_eq!(h(0x1, 12), "001");
        assert_eq!(h(0x0f_0000_0001, 40), "0f,00000001");
        assert_eq!(h(u64::MAX, 64), "ffffffff,ffffffff");
    }

    #[test]
    fn records_have_linux_layout_in_a_byte_buffer() {
        // kernel/trace/trace_output.c: "%16s-%-7d [%03d] %5lu.%09lu: " then the event.
        let rec = Record {
            ctx: ctx(Comm::Idle, 0, 2, 1_234_567_891),
            ts_ns: 1_234_567_891,
            event: Event::SchedSwitch {
                prev: TaskRef::idle(2),
                prev_state: PrevState::Running,
                next: small(),
            },
        };
        let mut buf = [0u8; 256];
        let n = format_into(&rec, &mut buf).unwrap();
        assert_eq!(
            core::str::from_utf8(&buf[..n]).unwrap(),
            "          <idle>-0       [002]     1.234567891: sched_switch: prev_comm=swapper/2 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=small next_pid=1001 next_prio=120\n"
        );
        // Too small a buffer: None, not a truncated line.
        assert_eq!(format_into(&rec, &mut buf[..40]), None);
        let mut h = String::new();
        write_header(&mut h, 6).unwrap();
        assert_eq!(
            h.lines().nth(2),
            Some("# entries-in-buffer/entries-written: 0/0   #P:6")
        );
        assert_eq!(h.lines().count(), 6);
    }
}
