//! The trace validators: invariants every asym trace must hold, whoever wrote it (the
//! simulator's scenario tests and `cargo xtask test`'s QEMU workload runs both call them).
//!
//! - Timestamps are unique and increasing (the trace clock, [`crate::ftrace::TraceClock`]).
//! - Each line's context is the task the previous `sched_switch` on that CPU put there (before
//!   the CPU's first switch: the context of its first line)
//!   (`<idle>-0` for the idle task), and a switch's `prev_pid` is that task; idle is named
//!   `swapper/N` in switches.
//! - Per CPU, `cpu_idle` alternates between entering (state 0) and leaving
//!   ([`crate::ftrace::PWR_EVENT_EXIT`]); it enters only from the idle task, and no switch,
//!   wake-up, migration or softirq is recorded on a CPU while it is in an idle state. A CPU's
//!   first `cpu_idle` line tells its state before it (an enter: it was running; a leave: it was
//!   idle).
//! - No line is malformed and the producer lost no records.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::string::{String, ToString};

use crate::analyse::{field, parse_line};

/// What [`check_trace`] counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceCounts {
    /// Event lines.
    pub lines: u64,
    /// `sched_switch` lines.
    pub switches: u64,
    /// `cpu_idle` lines.
    pub idle_events: u64,
}

/// Checks `text` (a whole `trace.txt`) against the invariants above; the first violation is
/// the error, with its line number and text.
pub fn check_trace(text: &str) -> Result<TraceCounts, String> {
    let mut counts = TraceCounts::default();
    let mut last_ts: Option<u64> = None;
    // Per CPU: the pid running (by the last switch) and whether it is in an idle state
    // (`None`: not known yet).
    let mut on: BTreeMap<usize, String> = BTreeMap::new();
    let mut idle: BTreeMap<usize, Option<bool>> = BTreeMap::new();
    for (n, l) in text.lines().enumerate() {
        let at = |why: String| format!("trace line {}: {why}: {l}", n + 1);
        if let Some(rest) = l.strip_prefix("# asym: ") {
            return Err(at(format!("the producer says: {rest}")));
        }
        if l.starts_with('#') || l.trim().is_empty() {
            continue;
        }
        counts.lines += 1;
        let (ts, cpu, event, f) = parse_line(l).ok_or_else(|| at("malformed".into()))?;
        if last_ts.is_some_and(|t| ts <= t) {
            return Err(at("time did not advance".into()));
        }
        last_ts = Some(ts);
        let head = l.split_once(" [").map_or("", |h| h.0).trim_start();
        let (who, pid) = head
            .rsplit_once('-')
            .ok_or_else(|| at("no comm-pid".into()))?;
        let pid = pid.trim_end();
        // A CPU's first line tells who ran there when the trace began (a kernel trace starts
        // with the executor running on its CPU; the simulator's CPUs start idle).
        let running = on.entry(cpu).or_insert_with(|| pid.to_string()).as_str();
        if pid != running && event != "task_rename" {
            return Err(at(format!(
                "attributed to pid {pid}, but {running} runs there"
            )));
        }
        if pid == "0" && who != "<idle>" {
            return Err(at("pid 0 not shown as <idle>".into()));
        }
        let in_idle = idle.get(&cpu).copied().flatten();
        match event {
            "sched_switch" => {
                counts.switches += 1;
                let get = |k: &str| field(f, k).map(ToString::to_string);
                let prev = get("prev_pid").ok_or_else(|| at("no prev_pid".into()))?;
                let next = get("next_pid").ok_or_else(|| at("no next_pid".into()))?;
                if prev != *running {
                    return Err(at(format!("prev_pid {prev}, but {running} ran there")));
                }
                for (c, p) in [("prev_comm", &prev), ("next_comm", &next)] {
                    if p == "0" && get(c).as_deref() != Some(format!("swapper/{cpu}").as_str()) {
                        return Err(at(format!("{c} of pid 0 is not swapper/{cpu}")));
                    }
                }
                if in_idle == Some(true) {
                    return Err(at("switch on a CPU in an idle state".into()));
                }
                on.insert(cpu, next);
            }
            "cpu_idle" => {
                counts.idle_events += 1;
                let state: u64 = field(f, "state")
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| at("no state".into()))?;
                let enter = state != u64::from(crate::ftrace::PWR_EVENT_EXIT);
                if field(f, "cpu_id") != Some(cpu.to_string().as_str()) {
                    return Err(at("cpu_id is not the line's CPU".into()));
                }
                if enter {
                    if in_idle == Some(true) {
                        return Err(at("entered idle twice".into()));
                    }
                    if pid != "0" {
                        return Err(at("entered idle while a task runs".into()));
                    }
                } else if in_idle == Some(false) {
                    return Err(at("left idle twice".into()));
                }
                idle.insert(cpu, Some(enter));
            }
            "softirq_raise" | "sched_waking" | "sched_wakeup" | "sched_wakeup_new"
            | "sched_migrate_task"
                if in_idle == Some(true) =>
            {
                return Err(at(format!("{event} on a CPU in an idle state")));
            }
            _ => {}
        }
    }
    Ok(counts)
}

/// Checks an analysis of a run of `duration_ns` for what any run's must hold: every line
/// parsed, nothing lost, every busy interval at a known OPP, each task's per-CPU residency
/// summing to its running time within the run, no CPU busy longer than the run, and each
/// domain's frequency residency covering the run (when the trace has frequencies).
pub fn check_analysis(a: &crate::analyse::Analysis, duration_ns: u64) -> Result<(), String> {
    if a.bad_lines != 0 || a.lost_records != 0 {
        return Err(format!(
            "{} malformed lines, {} records lost",
            a.bad_lines, a.lost_records
        ));
    }
    if a.unattributed_busy_ns != 0 {
        return Err(format!(
            "{} ns busy before any cpu_frequency line",
            a.unattributed_busy_ns
        ));
    }
    for t in &a.tasks {
        let sum: u64 = t.residency_ns.iter().sum();
        if sum != t.runtime_ns || t.runtime_ns > duration_ns {
            return Err(format!(
                "task {} ({}): runtime {} ns, residency sum {} ns, run {} ns",
                t.name, t.pid, t.runtime_ns, sum, duration_ns
            ));
        }
    }
    for (d, dom) in a.domains.iter().enumerate() {
        for (i, busy) in dom.busy_ns.iter().enumerate() {
            let b: u64 = busy.iter().sum();
            if b > duration_ns {
                return Err(format!(
                    "domain {d} cpu #{i}: busy {b} ns in a {duration_ns} ns run"
                ));
            }
        }
        let f: u64 = dom.frequency_ns.iter().sum();
        if f != 0 && f.abs_diff(duration_ns) > 1_000 {
            return Err(format!(
                "domain {d}: frequency residency covers {f} ns of a {duration_ns} ns run"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = "# tracer: nop
          <idle>-0       [001]     0.000000001: cpu_idle: state=0 cpu_id=1
          <idle>-0       [001]     0.000000100: cpu_idle: state=4294967295 cpu_id=1
          <idle>-0       [001]     0.000000101: sched_wakeup: comm=a pid=1001 prio=120 target_cpu=001
          <idle>-0       [001]     0.000000102: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=a next_pid=1001 next_prio=120
               a-1001    [001]     0.000000103: sched_switch: prev_comm=a prev_pid=1001 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120
          <idle>-0       [001]     0.000000104: cpu_idle: state=0 cpu_id=1
";

    #[test]
    fn a_consistent_trace_passes() {
        let c = check_trace(OK).unwrap();
        assert_eq!((c.lines, c.switches, c.idle_events), (6, 2, 3));
    }

    /// Each broken invariant is caught, naming the line.
    #[test]
    fn each_broken_invariant_is_named() {
        let lines: alloc::vec::Vec<&str> = OK.lines().collect();
        let with = |i: usize, new: &str| {
            let mut v = lines.clone();
            v[i] = new;
            v.join("\n")
        };
        let cases = [
            // Time going back.
            (3, "          <idle>-0       [001]     0.000000050: sched_wakeup: comm=a pid=1001 prio=120 target_cpu=001", "time did not advance"),
            // A wake-up while idle (the leave line replaced by another enter... use a wake-up).
            (2, "          <idle>-0       [001]     0.000000100: sched_wakeup: comm=a pid=1001 prio=120 target_cpu=001", "idle state"),
            // The wrong context.
            (5, "               b-1002    [001]     0.000000103: sched_switch: prev_comm=b prev_pid=1002 prev_prio=120 prev_state=S ==> next_comm=swapper/1 next_pid=0 next_prio=120", "attributed to pid 1002"),
            // Entering idle while a task runs.
            (5, "               a-1001    [001]     0.000000103: cpu_idle: state=0 cpu_id=1", "while a task runs"),
            // Malformed.
            (3, "nonsense", "malformed"),
        ];
        for (i, line, why) in cases {
            let e = check_trace(&with(i, line)).unwrap_err();
            assert!(e.contains(why), "{why}: {e}");
            assert!(e.contains(&format!("trace line {}", i + 1)), "{e}");
        }
        let lost = alloc::format!("{OK}# asym: 3 records lost (trace rings full)\n");
        assert!(check_trace(&lost).unwrap_err().contains("records lost"));
    }
}
