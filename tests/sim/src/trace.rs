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

    /// LISA `sched_pelt_cfs` for the root cfs_rq (path `/`, as `cgroup_path` names the
    /// root task group).
    pub fn sched_pelt_cfs(&mut self, c: Ctx<'_>, cpu: usize, v: PeltVals) -> io::Result<()> {
        self.line(
            c,
            "sched_pelt_cfs",
            format_args!(
                "cpu={} path=/ load={} runnable={} util={} update_time={}",
                cpu, v.load, v.runnable, v.util, v.update_time
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

    /// LISA `sched_overutilized`: `span=0x%s` with the root domain's span as
    /// `cpumap_print_to_pagebuf(false, …)` prints it over `nr_cpus` bits (see
    /// [`cpumask_hex`]).
    pub fn sched_overutilized(
        &mut self,
        c: Ctx<'_>,
        overutilized: bool,
        span: u64,
        nr_cpus: usize,
    ) -> io::Result<()> {
        self.line(
            c,
            "sched_overutilized",
            format_args!(
                "overutilized={} span=0x{}",
                overutilized as u8,
                cpumask_hex(span, nr_cpus)
            ),
        )
    }
}

/// A CPU mask as the kernel's `%*pb` prints it for `nr_bits` CPUs (`bitmap_string`):
/// lower-case hex, 32-bit chunks separated by `,`, most significant first, each chunk
/// zero-padded to its width (the first one to `ceil(leftover bits / 4)` digits).
/// `cpumap_print_to_pagebuf` also appends a newline, which would split the trace line;
/// it is left out.
pub fn cpumask_hex(mask: u64, nr_bits: usize) -> String {
    let nr_bits = nr_bits.clamp(1, 64);
    let mut out = String::new();
    let mut chunksz = match nr_bits % 32 {
        0 => 32,
        r => r,
    };
    let mut lo = nr_bits.div_ceil(32) * 32 - 32;
    loop {
        let chunkmask = if chunksz == 32 {
            u32::MAX as u64
        } else {
            (1u64 << chunksz) - 1
        };
        let val = (mask >> lo) & chunkmask;
        if !out.is_empty() {
            out.push(',');
        }
        out.push_str(&format!("{:0w$x}", val, w = chunksz.div_ceil(4)));
        if lo == 0 {
            break;
        }
        lo -= 32;
        chunksz = 32;
    }
    out
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

    #[test]
    fn lisa_events_match_sched_tp_formats() {
        // Formats from LISA's sched_tp `ftrace_events.h` (TP_printk strings).
        let mut w = TraceWriter::new(Vec::new(), 6).unwrap();
        let c = Ctx {
            comm: "small",
            pid: 1001,
            cpu: 1,
            ns: 2_000_001_000,
        };
        let t = TaskRef {
            comm: "small",
            pid: 1001,
            prio: 120,
        };
        let v = PeltVals {
            load: 300,
            runnable: 301,
            util: 302,
            update_time: 2_001_048_576,
        };
        w.sched_pelt_se(c, 1, t, v).unwrap();
        w.sched_pelt_cfs(c, 1, v).unwrap();
        w.sched_util_est_se(c, 1, t, 280, 302).unwrap();
        w.sched_overutilized(c, true, 0x3f, 6).unwrap();
        w.cpu_frequency(c, 950_000, 1).unwrap();
        w.cpu_idle(c, PWR_EVENT_EXIT, 1).unwrap();
        let out = String::from_utf8(w.finish().unwrap()).unwrap();
        let ev: Vec<&str> = out
            .lines()
            .skip(6)
            .map(|l| l.split_once(": ").unwrap().1)
            .collect();
        assert_eq!(
            ev,
            [
                "sched_pelt_se: cpu=1 path=(null) comm=small pid=1001 load=300 runnable=301 util=302 update_time=2001048576",
                "sched_pelt_cfs: cpu=1 path=/ load=300 runnable=301 util=302 update_time=2001048576",
                "sched_util_est_se: cpu=1 path=(null) comm=small pid=1001 enqueued=280 ewma=280 util=302",
                "sched_overutilized: overutilized=1 span=0x3f",
                "cpu_frequency: state=950000 cpu_id=1",
                "cpu_idle: state=4294967295 cpu_id=1",
            ]
        );
    }

    #[test]
    fn cpumask_prints_like_bitmap_string() {
        // lib/vsprintf.c bitmap_string: zero-padded chunks of 32 bits, first chunk
        // ceil(leftover/4) digits wide.
        assert_eq!(cpumask_hex(0x3f, 6), "3f");
        assert_eq!(cpumask_hex(0x0f, 6), "0f");
        assert_eq!(cpumask_hex(0xff, 8), "ff");
        assert_eq!(cpumask_hex(0x1, 12), "001");
        assert_eq!(cpumask_hex(0x0f_0000_0001, 40), "0f,00000001");
        assert_eq!(cpumask_hex(u64::MAX, 64), "ffffffff,ffffffff");
    }

    #[test]
    fn prefix_matches_perfetto_systrace_regex_shape() {
        // Perfetto's SystraceLineTokenizer: `-(\d+)\s+\(?\s*(\d+|-+)?\)?\s?\[(\d+)\]\s*
        // [a-zA-Z0-9.]{0,4}\s+(\d+\.\d+):\s+(\S+):`. Check the pieces by hand (no
        // regex crate): pid after the last '-' before " [", whitespace, "[cpu]",
        // whitespace, "secs.usecs:", a space, "event:".
        let mut w = TraceWriter::new(Vec::new(), 6).unwrap();
        for ns in [0, 5_123_456_789, 12_345_678_901_000] {
            let c = Ctx {
                comm: "my-task-name-xx",
                pid: 1234,
                cpu: 5,
                ns,
            };
            w.cpu_idle(c, 0, 5).unwrap();
        }
        let out = String::from_utf8(w.finish().unwrap()).unwrap();
        for l in out.lines().skip(6) {
            let (head, rest) = l.split_once(" [").unwrap();
            let (comm, pid) = head.trim_start().rsplit_once('-').unwrap();
            assert_eq!(comm, "my-task-name-xx");
            assert_eq!(pid.trim_end(), "1234");
            let (cpu, rest) = rest.split_once(']').unwrap();
            assert_eq!(cpu, "005");
            assert!(rest.starts_with(' '), "{l}");
            let (ts, rest) = rest.trim_start().split_once(": ").unwrap();
            let (s, us) = ts.split_once('.').unwrap();
            assert!(
                s.bytes().all(|b| b.is_ascii_digit()) && us.len() == 6,
                "{l}"
            );
            assert!(rest.starts_with("cpu_idle: state=0 cpu_id=5"), "{l}");
        }
    }
}
