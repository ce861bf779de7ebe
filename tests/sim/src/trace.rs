//! Linux ftrace text output.
//!
//! Each line is `comm-pid [cpu] secs.usecs: event: fields`, after the `# tracer: nop`
//! header that `/sys/kernel/tracing/trace` prints with the `irq-info` option off, so
//! trace-cmd, LISA and Perfetto's text importer read it unchanged. The field formats
//! are the `TP_printk` strings of:
//! - `include/trace/events/sched.h`: `sched_switch`, `sched_wakeup`,
//!   `sched_wakeup_new`, `sched_migrate_task`;
//! - `include/trace/events/power.h`: `cpu_frequency`, `cpu_idle`;
//! - `include/trace/events/irq.h`: `softirq_raise` (`vec=7 [action=SCHED]`);
//! - LISA's `lisa/_assets/kmodules/sched_tp/ftrace_events.h`: `sched_pelt_se`,
//!   `sched_pelt_cfs`, `sched_util_est_se`, `sched_overutilized`.
//!
//! Differences: `sched_util_est_se` prints the v6.9+ single util_est word (flag
//! masked) as both `enqueued` and `ewma`, since the two fields were merged upstream.

use std::io::{self, Write};

/// `PWR_EVENT_EXIT`: the `cpu_idle` state reported when a CPU leaves idle ((u32)-1).
pub const PWR_EVENT_EXIT: u32 = u32::MAX;

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

/// Who a trace line is attributed to (the task running on the CPU, or idle).
#[derive(Clone, Copy, Debug)]
pub struct Ctx<'a> {
    /// Task name (`<idle>` for the idle task).
    pub comm: &'a str,
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
    /// `comm` (already truncated to `TASK_COMM_LEN - 1`).
    pub comm: &'a str,
    /// pid.
    pub pid: u32,
    /// Kernel priority (`120 + nice` for fair tasks).
    pub prio: i32,
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

/// Buffered writer of ftrace text.
pub struct TraceWriter<W: Write> {
    out: W,
    /// Number of lines written.
    pub lines: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Start a trace; writes the header.
    pub fn new(mut out: W, nr_cpus: usize) -> io::Result<Self> {
        writeln!(out, "# tracer: nop")?;
        writeln!(out, "#")?;
        writeln!(
            out,
            "# entries-in-buffer/entries-written: 0/0   #P:{nr_cpus}"
        )?;
        writeln!(out, "#")?;
        writeln!(out, "#           TASK-PID     CPU#     TIMESTAMP  FUNCTION")?;
        writeln!(out, "#              | |         |         |         |")?;
        Ok(TraceWriter { out, lines: 0 })
    }

    /// Finish and return the underlying writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }

    fn line(&mut self, c: Ctx<'_>, event: &str, fields: std::fmt::Arguments<'_>) -> io::Result<()> {
        // ftrace prints timestamps as "%5lu.%06lu" seconds.microseconds.
        let us = c.ns / 1000;
        self.lines += 1;
        writeln!(
            self.out,
            "{:>16}-{:<7} [{:03}] {:>5}.{:06}: {}: {}",
            c.comm,
            c.pid,
            c.cpu,
            us / 1_000_000,
            us % 1_000_000,
            event,
            fields
        )
    }

    /// `sched_switch`.
    pub fn sched_switch(
        &mut self,
        c: Ctx<'_>,
        prev: TaskRef<'_>,
        state: PrevState,
        next: TaskRef<'_>,
    ) -> io::Result<()> {
        let st = match state {
            PrevState::Preempted => "R+",
            PrevState::Running => "R",
            PrevState::Sleeping => "S",
            PrevState::Dead => "X",
        };
        self.line(
            c,
            "sched_switch",
            format_args!(
                "prev_comm={} prev_pid={} prev_prio={} prev_state={} ==> next_comm={} next_pid={} next_prio={}",
                prev.comm, prev.pid, prev.prio, st, next.comm, next.pid, next.prio
            ),
        )
    }

    /// `sched_wakeup` / `sched_wakeup_new`.
    pub fn sched_wakeup(
        &mut self,
        c: Ctx<'_>,
        t: TaskRef<'_>,
        target_cpu: usize,
        new: bool,
    ) -> io::Result<()> {
        self.line(
            c,
            if new {
                "sched_wakeup_new"
            } else {
                "sched_wakeup"
            },
            format_args!(
                "comm={} pid={} prio={} target_cpu={:03}",
                t.comm, t.pid, t.prio, target_cpu
            ),
        )
    }

    /// `sched_migrate_task`.
    pub fn sched_migrate_task(
        &mut self,
        c: Ctx<'_>,
        t: TaskRef<'_>,
        orig: usize,
        dest: usize,
    ) -> io::Result<()> {
        self.line(
            c,
            "sched_migrate_task",
            format_args!(
                "comm={} pid={} prio={} orig_cpu={} dest_cpu={}",
                t.comm, t.pid, t.prio, orig, dest
            ),
        )
    }

    /// `cpu_frequency` (state in kHz).
    pub fn cpu_frequency(&mut self, c: Ctx<'_>, khz: u32, cpu_id: usize) -> io::Result<()> {
        self.line(
            c,
            "cpu_frequency",
            format_args!("state={khz} cpu_id={cpu_id}"),
        )
    }

    /// `cpu_idle` (state index, or [`PWR_EVENT_EXIT`]).
    pub fn cpu_idle(&mut self, c: Ctx<'_>, state: u32, cpu_id: usize) -> io::Result<()> {
        self.line(c, "cpu_idle", format_args!("state={state} cpu_id={cpu_id}"))
    }

    /// `softirq_raise`.
    pub fn softirq_raise(&mut self, c: Ctx<'_>, irq: Softirq) -> io::Result<()> {
        self.line(
            c,
            "softirq_raise",
            format_args!("vec={} [action={}]", irq.vec(), irq.name()),
        )
    }

    /// LISA `sched_pelt_se` (for a task: path is `(null)`, as LISA prints for task entities).
    pub fn sched_pelt_se(
        &mut self,
        c: Ctx<'_>,
        cpu: usize,
        t: TaskRef<'_>,
        v: PeltVals,
    ) -> io::Result<()> {
        self.line(
            c,
            "sched_pelt_se",
            format_args!(
                "cpu={} path=(null) comm={} pid={} load={} runnable={} util={} update_time={}",
                cpu, t.comm, t.pid, v.load, v.runnable, v.util, v.update_time
            ),
        )
    }

    /// LISA `sched_pelt_cfs` for the root cfs_rq (path `/`).
    pub fn sched_pelt_cfs(&mut self, c: Ctx<'_>, cpu: usize, v: PeltVals) -> io::Result<()> {
        self.line(
            c,
            "sched_pelt_cfs",
            format_args!(
                "cpu={} path=/ load={} runnable={} util={}",
                cpu, v.load, v.runnable, v.util
            ),
        )
    }

    /// LISA `sched_util_est_se`.
    pub fn sched_util_est_se(
        &mut self,
        c: Ctx<'_>,
        cpu: usize,
        t: TaskRef<'_>,
        util_est: u32,
        util: u64,
    ) -> io::Result<()> {
        self.line(
            c,
            "sched_util_est_se",
            format_args!(
                "cpu={} path=(null) comm={} pid={} enqueued={} ewma={} util={}",
                cpu, t.comm, t.pid, util_est, util_est, util
            ),
        )
    }

    /// LISA `sched_overutilized` (span as a hex CPU mask).
    pub fn sched_overutilized(
        &mut self,
        c: Ctx<'_>,
        overutilized: bool,
        span: u64,
    ) -> io::Result<()> {
        self.line(
            c,
            "sched_overutilized",
            format_args!("overutilized={} span=0x{:x}", overutilized as u8, span),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_have_linux_layout() {
        let mut w = TraceWriter::new(Vec::new(), 6).unwrap();
        let c = Ctx {
            comm: "<idle>",
            pid: 0,
            cpu: 2,
            ns: 1_234_567_891,
        };
        let a = TaskRef {
            comm: "small",
            pid: 1001,
            prio: 120,
        };
        w.sched_wakeup(c, a, 2, false).unwrap();
        w.softirq_raise(c, Softirq::Sched).unwrap();
        let idle = TaskRef {
            comm: "<idle>",
            pid: 0,
            prio: 120,
        };
        w.sched_switch(c, idle, PrevState::Running, a).unwrap();
        let out = String::from_utf8(w.finish().unwrap()).unwrap();
        let lines: Vec<_> = out.lines().collect();
        assert_eq!(lines[0], "# tracer: nop");
        assert_eq!(
            lines[6],
            "          <idle>-0       [002]     1.234567: sched_wakeup: comm=small pid=1001 prio=120 target_cpu=002"
        );
        assert!(lines[7].ends_with("softirq_raise: vec=7 [action=SCHED]"));
        assert!(lines[8].ends_with(
            "sched_switch: prev_comm=<idle> prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=small next_pid=1001 next_prio=120"
        ));
    }
}
