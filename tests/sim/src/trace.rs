//! The simulator's trace sink: Linux ftrace text as `asym_trace::ftrace` formats it (the
//! formatter the kernel uses too; its module docs describe the format and the trace
//! clock), written through a `std::io::Write`.

use std::io::{self, Write};

pub use asym_trace::ftrace::*;

/// Buffered writer of ftrace text.
pub struct TraceWriter<W: Write> {
    out: W,
    clock: TraceClock,
    /// Number of lines written.
    pub lines: u64,
}

impl<W: Write> TraceWriter<W> {
    /// Start a trace; writes the header.
    pub fn new(mut out: W, nr_cpus: usize) -> io::Result<Self> {
        let mut header = String::new();
        write_header(&mut header, nr_cpus).map_err(io::Error::other)?;
        out.write_all(header.as_bytes())?;
        Ok(TraceWriter {
            out,
            clock: TraceClock::default(),
            lines: 0,
        })
    }

    /// Finish and return the underlying writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }

    /// Write one event in context `ctx`.
    pub fn emit(&mut self, ctx: Ctx<'_>, event: Event<'_>) -> io::Result<()> {
        let ts_ns = self.clock.stamp(ctx.ns);
        self.lines += 1;
        writeln!(self.out, "{}", Record { ctx, ts_ns, event })
    }

    /// The largest distance (ns) between a line's timestamp and its simulated time.
    pub fn max_skew_ns(&self) -> u64 {
        self.clock.max_skew_ns()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    fn lines(f: impl FnOnce(&mut TraceWriter<Vec<u8>>)) -> Vec<String> {
        let mut w = TraceWriter::new(Vec::new(), 6).unwrap();
        f(&mut w);
        let out = String::from_utf8(w.finish().unwrap()).unwrap();
        out.lines().map(str::to_string).collect()
    }

    #[test]
    fn lines_have_linux_layout() {
        let l = lines(|w| {
            let c = ctx(Comm::Idle, 0, 2, 1_234_567_891);
            w.emit(
                c,
                Event::SchedWakeup {
                    task: small(),
                    target_cpu: 2,
                },
            )
            .unwrap();
            w.emit(c, Event::SoftirqRaise(Softirq::Sched)).unwrap();
            w.emit(
                c,
                Event::SchedSwitch {
                    prev: TaskRef::idle(2),
                    prev_state: PrevState::Running,
                    next: small(),
                },
            )
            .unwrap();
        });
        assert_eq!(l[0], "# tracer: nop");
        assert_eq!(
            l[6],
            "          <idle>-0       [002]     1.234567891: sched_wakeup: comm=small pid=1001 prio=120 target_cpu=002"
        );
        assert!(l[7].contains(" 1.234567892: softirq_raise: vec=7 [action=SCHED]"));
        assert!(l[8].ends_with(
            " 1.234567893: sched_switch: prev_comm=swapper/2 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=small next_pid=1001 next_prio=120"
        ));
    }

    #[test]
    fn prefix_matches_perfetto_systrace_regex_shape() {
        // Perfetto's SystraceLineTokenizer: `-(\d+)\s+\(?\s*(\d+|-+)?\)?\s?\[(\d+)\]\s*
        // [a-zA-Z0-9.]{0,4}\s+(\d+\.\d+):\s+(\S+):`. Check the pieces by hand (no
        // regex crate): pid after the last '-' before " [", whitespace, "[cpu]",
        // whitespace, "secs.nsecs:", a space, "event:".
        let l = lines(|w| {
            for ns in [0, 5_123_456_789, 12_345_678_901_000] {
                w.emit(
                    ctx(Comm::Task("my-task-name-xx"), 1234, 5, ns),
                    Event::CpuIdle { state: 0, cpu: 5 },
                )
                .unwrap();
            }
            w.emit(
                ctx(Comm::Swapper(11), 0, 11, 1),
                Event::CpuIdle { state: 0, cpu: 11 },
            )
            .unwrap();
        });
        for l in &l[6..9] {
            let (head, rest) = l.split_once(" [").unwrap();
            let (comm, pid) = head.trim_start().rsplit_once('-').unwrap();
            assert_eq!(comm, "my-task-name-xx");
            assert_eq!(pid.trim_end(), "1234");
            let (cpu, rest) = rest.split_once(']').unwrap();
            assert_eq!(cpu, "005");
            assert!(rest.starts_with(' '), "{l}");
            let (ts, rest) = rest.trim_start().split_once(": ").unwrap();
            let (s, ns) = ts.split_once('.').unwrap();
            assert!(
                s.bytes().all(|b| b.is_ascii_digit()) && ns.len() == 9,
                "{l}"
            );
            assert!(rest.starts_with("cpu_idle: state=0 cpu_id=5"), "{l}");
        }
        assert!(
            l[9].starts_with("      swapper/11-0       [011]"),
            "{}",
            l[9]
        );
    }
}
