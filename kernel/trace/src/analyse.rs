//! The trace analyser: what a run did, read back from its ftrace text alone — the same code
//! for a simulator trace and a kernel trace, so the two are comparable by construction.
//!
//! From `sched_switch` (who runs where, from when), `cpu_frequency` (each CPU's OPP),
//! `sched_wakeup[_new]` and `sched_migrate_task`:
//! - per task (pids from [`FIRST_PID`], the rt-app threads): activations (wake-ups including
//!   the first), running time, running time per CPU, migrations;
//! - per CPU and OPP: busy time (a task other than idle running), and so energy as the energy
//!   model sees it, `Σ busy_ns × power(opp)` (Linux `em_cpu_energy`; the simulator's
//!   `report.json` `energy`);
//! - per performance domain: time at each OPP, busy or idle (`frequency_residency`);
//! - context switches, `SCHED_SOFTIRQ` raises, and the records a kernel trace says it lost.
//!
//! Intervals are cut at `end_ns` (the run's duration). A CPU's OPP before its first
//! `cpu_frequency` line is unknown and its busy time there is not charged to any OPP
//! ([`Analysis::unattributed_busy_ns`]); both producers write every CPU's frequency at time 0.
//! Malformed lines are counted ([`Analysis::bad_lines`]) and skipped, never a panic.

use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

/// First pid of the workload's threads (both producers number them so).
pub const FIRST_PID: u32 = 1001;

/// One performance domain of the board: its CPUs and OPPs (ascending kHz, µW while busy).
#[derive(Clone, Debug)]
pub struct DomainModel {
    /// Name (`big`, `little`).
    pub name: String,
    /// Its CPUs.
    pub cpus: Vec<usize>,
    /// `(kHz, busy power in µW)` per OPP, ascending.
    pub opps: Vec<(u32, u64)>,
}

impl DomainModel {
    /// The performance domains of `desc` as the simulator models them: CPUs by
    /// `perf_domain`, OPP power from the DT formula with the first CPU's
    /// `dynamic-power-coefficient` (0 without one), ascending frequency.
    pub fn of_board(desc: &asym_sched::topology::BoardDesc) -> Vec<DomainModel> {
        desc.perf_domains
            .iter()
            .enumerate()
            .map(|(i, pd)| {
                let cpus: Vec<usize> = (0..desc.cpus.len())
                    .filter(|&c| usize::from(desc.cpus[c].perf_domain) == i)
                    .collect();
                let coeff = cpus
                    .first()
                    .and_then(|&c| desc.cpus[c].dynamic_power_coefficient);
                let mut opps: Vec<(u32, u64)> = pd
                    .opps
                    .iter()
                    .map(|o| {
                        let p = coeff.map_or(0, |c| {
                            asym_sched::em::dt_opp_power(c, o.freq, o.voltage.0).0
                        });
                        (o.freq.0, p)
                    })
                    .collect();
                opps.sort_by_key(|o| o.0);
                DomainModel {
                    name: String::from(pd.name),
                    cpus,
                    opps,
                }
            })
            .collect()
    }
}

/// One task's numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskAnalysis {
    /// Last name seen.
    pub name: String,
    /// pid.
    pub pid: u32,
    /// `sched_wakeup` + `sched_wakeup_new`.
    pub activations: u64,
    /// Running time.
    pub runtime_ns: u64,
    /// Running time per CPU.
    pub residency_ns: Vec<u64>,
    /// `sched_migrate_task` lines.
    pub migrations: u64,
}

/// One domain's numbers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DomainAnalysis {
    /// Energy-model energy in µJ.
    pub energy_uj: f64,
    /// Per CPU of the domain (its order), busy ns per OPP.
    pub busy_ns: Vec<Vec<u64>>,
    /// Time at each OPP (the domain's first CPU's frequency).
    pub frequency_ns: Vec<u64>,
}

/// Everything [`analyse`] found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Analysis {
    /// Trace lines read (not counting `#` lines).
    pub lines: u64,
    /// Lines that did not parse.
    pub bad_lines: u64,
    /// Records the producer says it lost (`# asym: N records lost`).
    pub lost_records: u64,
    /// Tasks with pid ≥ [`FIRST_PID`], by pid.
    pub tasks: Vec<TaskAnalysis>,
    /// Per domain, in the model's order.
    pub domains: Vec<DomainAnalysis>,
    /// Σ domain energies, µJ.
    pub total_energy_uj: f64,
    /// `sched_switch` lines.
    pub context_switches: u64,
    /// `softirq_raise` lines.
    pub sched_softirq_raises: u64,
    /// `softirq_raise` lines per CPU (the CPU column).
    pub sched_softirq_raises_per_cpu: Vec<u64>,
    /// Time the root domain was overutilized (`sched_overutilized` lines; the flag is clear
    /// until the first one).
    pub overutilized_ns: u64,
    /// rt-app `rtapp_stats` markers of loops with a timer (`c_period` > 0).
    pub timer_loops: u64,
    /// Of those, the ones that reached their timer late (`slack` < 0: rt-app's missed
    /// period).
    pub timer_late: u64,
    /// Busy time on CPUs whose OPP was not known yet.
    pub unattributed_busy_ns: u64,
}

/// One parsed line: `(ts_ns, cpu, event, fields)`.
pub fn parse_line(l: &str) -> Option<(u64, usize, &str, &str)> {
    let (head, rest) = l.split_once(": ")?;
    let (event, fields) = rest
        .split_once(": ")
        .unwrap_or((rest.trim_end_matches(':'), ""));
    let mut it = head.split_whitespace().rev();
    let ts = parse_ts(it.next()?)?;
    let cpu = it
        .next()?
        .strip_prefix('[')?
        .strip_suffix(']')?
        .parse()
        .ok()?;
    Some((ts, cpu, event, fields))
}

/// `secs.nsecs` (9 digits) as ns.
fn parse_ts(ts: &str) -> Option<u64> {
    let (s, ns) = ts.split_once('.')?;
    if ns.len() != 9 {
        return None;
    }
    s.parse::<u64>()
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(ns.parse().ok()?)
}

/// The value of `key=` in `fields` (space-separated `k=v`; the first match).
pub fn field<'a>(fields: &'a str, key: &str) -> Option<&'a str> {
    fields.split(' ').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then_some(v)
    })
}

fn num<T: core::str::FromStr>(fields: &str, key: &str) -> Option<T> {
    field(fields, key)?.parse().ok()
}

#[derive(Clone, Copy, Default)]
struct CpuState {
    /// pid running (0: idle) and since when.
    pid: u32,
    since: u64,
    /// OPP index and domain.
    opp: Option<usize>,
    /// A line of this CPU has been read.
    seen: bool,
}

/// Reads `text` (a whole `trace.txt`) for a board of `nr_cpus` CPUs in `domains`, cutting
/// at `end_ns`.
pub fn analyse(text: &str, nr_cpus: usize, domains: &[DomainModel], end_ns: u64) -> Analysis {
    let mut a = Analysis {
        domains: domains
            .iter()
            .map(|d| DomainAnalysis {
                energy_uj: 0.0,
                busy_ns: vec![vec![0; d.opps.len()]; d.cpus.len()],
                frequency_ns: vec![0; d.opps.len()],
            })
            .collect(),
        sched_softirq_raises_per_cpu: vec![0; nr_cpus],
        ..Analysis::default()
    };
    let dom_of: Vec<Option<(usize, usize)>> = (0..nr_cpus)
        .map(|c| {
            domains
                .iter()
                .enumerate()
                .find_map(|(d, dm)| dm.cpus.iter().position(|&x| x == c).map(|i| (d, i)))
        })
        .collect();
    let mut cpus = vec![CpuState::default(); nr_cpus];
    // Per domain: the OPP of its first CPU and since when (frequency residency).
    let mut dom_freq: Vec<Option<(usize, u64)>> = vec![None; domains.len()];
    let mut tasks: Vec<TaskAnalysis> = Vec::new();
    let mut overutilized_since: Option<u64> = None;
    for l in text.lines() {
        if let Some(rest) = l.strip_prefix("# asym: ") {
            if let Some(n) = rest.strip_suffix(" records lost (trace rings full)") {
                a.lost_records += n.trim().parse::<u64>().unwrap_or(0);
            }
            continue;
        }
        if l.starts_with('#') || l.trim().is_empty() {
            continue;
        }
        a.lines += 1;
        let Some((ts, line_cpu, event, f)) = parse_line(l) else {
            a.bad_lines += 1;
            continue;
        };
        let ts = ts.min(end_ns);
        if let Some(st) = cpus.get_mut(line_cpu).filter(|st| !st.seen) {
            // Who ran there when the trace began: the first line's context.
            st.seen = true;
            let head = l.split_once(" [").map_or("", |h| h.0);
            if let Some(pid) = head
                .rsplit_once('-')
                .and_then(|(_, p)| p.trim().parse().ok())
            {
                st.pid = pid;
                st.since = ts;
            }
        }
        match event {
            "sched_switch" => {
                let (Some(cpu), Some(next)) = (
                    Some(line_cpu).filter(|&c| c < nr_cpus),
                    num::<u32>(f, "next_pid"),
                ) else {
                    a.bad_lines += 1;
                    continue;
                };
                a.context_switches += 1;
                close(&mut a, &mut tasks, &cpus[cpu], cpu, ts, &dom_of, nr_cpus);
                cpus[cpu].pid = next;
                cpus[cpu].since = ts;
                if next >= FIRST_PID {
                    let name = after(f, "next_comm=", " next_pid=");
                    task(&mut tasks, next, nr_cpus).name = String::from(name);
                }
            }
            "cpu_frequency" => {
                let (Some(khz), Some(cpu)) = (num::<u32>(f, "state"), num::<usize>(f, "cpu_id"))
                else {
                    a.bad_lines += 1;
                    continue;
                };
                let Some(Some((d, i))) = dom_of.get(cpu).copied() else {
                    continue;
                };
                let Some(opp) = domains[d].opps.iter().position(|o| o.0 == khz) else {
                    a.bad_lines += 1;
                    continue;
                };
                // Busy time so far ran at the old OPP.
                let st = cpus[cpu];
                close(&mut a, &mut tasks, &st, cpu, ts, &dom_of, nr_cpus);
                cpus[cpu].since = ts;
                cpus[cpu].opp = Some(opp);
                if i == 0 {
                    if let Some((o, since)) = dom_freq[d] {
                        a.domains[d].frequency_ns[o] += ts - since;
                    }
                    dom_freq[d] = Some((opp, ts));
                }
            }
            "sched_wakeup" | "sched_wakeup_new" => {
                if let Some(pid) = num::<u32>(f, "pid").filter(|&p| p >= FIRST_PID) {
                    task(&mut tasks, pid, nr_cpus).activations += 1;
                }
            }
            "sched_migrate_task" => {
                if let Some(pid) = num::<u32>(f, "pid").filter(|&p| p >= FIRST_PID) {
                    task(&mut tasks, pid, nr_cpus).migrations += 1;
                }
            }
            "sched_overutilized" => {
                let on = num::<u8>(f, "overutilized").is_some_and(|v| v != 0);
                match (overutilized_since, on) {
                    (None, true) => overutilized_since = Some(ts),
                    (Some(since), false) => {
                        a.overutilized_ns += ts.saturating_sub(since);
                        overutilized_since = None;
                    }
                    _ => {}
                }
            }
            "tracing_mark_write"
                if f.starts_with("rtapp_stats:")
                    && num::<i64>(f, "c_period").is_some_and(|p| p > 0) =>
            {
                a.timer_loops += 1;
                if num::<i64>(f, "slack").is_some_and(|s| s < 0) {
                    a.timer_late += 1;
                }
            }
            "softirq_raise" => {
                a.sched_softirq_raises += 1;
                if let Some(n) = a.sched_softirq_raises_per_cpu.get_mut(line_cpu) {
                    *n += 1;
                }
            }
            "task_rename" => {
                if let Some(pid) = num::<u32>(f, "pid").filter(|&p| p >= FIRST_PID) {
                    let name = after(f, "newcomm=", " oom_score_adj=");
                    task(&mut tasks, pid, nr_cpus).name = String::from(name);
                }
            }
            _ => {}
        }
    }
    for (cpu, st) in cpus.iter().enumerate() {
        close(&mut a, &mut tasks, st, cpu, end_ns, &dom_of, nr_cpus);
    }
    if let Some(since) = overutilized_since {
        a.overutilized_ns += end_ns.saturating_sub(since);
    }
    for (d, f) in dom_freq.iter().enumerate() {
        if let Some((o, since)) = *f {
            a.domains[d].frequency_ns[o] += end_ns.saturating_sub(since);
        }
    }
    let mut total_fj: u128 = 0;
    for (d, dm) in domains.iter().enumerate() {
        let mut fj: u128 = 0;
        for per_cpu in &a.domains[d].busy_ns {
            for (o, &ns) in per_cpu.iter().enumerate() {
                fj += u128::from(ns) * u128::from(dm.opps[o].1);
            }
        }
        a.domains[d].energy_uj = fj_to_uj(fj);
        total_fj += fj;
    }
    a.total_energy_uj = fj_to_uj(total_fj);
    tasks.sort_by_key(|t| t.pid);
    a.tasks = tasks;
    a
}

/// fJ (µW × ns) to µJ, rounded to a nJ (as the simulator's report rounds).
pub fn fj_to_uj(fj: u128) -> f64 {
    ((fj / 1_000_000) as f64) / 1000.0
}

/// The text between `start` and `end` in `f` (a comm may hold spaces or `=`).
fn after<'a>(f: &'a str, start: &str, end: &str) -> &'a str {
    let Some(i) = f.find(start) else { return "" };
    let rest = &f[i + start.len()..];
    match rest.find(end) {
        Some(j) => &rest[..j],
        None => rest,
    }
}

fn task(tasks: &mut Vec<TaskAnalysis>, pid: u32, nr_cpus: usize) -> &mut TaskAnalysis {
    let i = match tasks.iter().position(|t| t.pid == pid) {
        Some(i) => i,
        None => {
            tasks.push(TaskAnalysis {
                pid,
                residency_ns: vec![0; nr_cpus],
                ..TaskAnalysis::default()
            });
            tasks.len() - 1
        }
    };
    &mut tasks[i]
}

/// Charges CPU `cpu`'s running interval `[st.since, now)`.
fn close(
    a: &mut Analysis,
    tasks: &mut Vec<TaskAnalysis>,
    st: &CpuState,
    cpu: usize,
    now: u64,
    dom_of: &[Option<(usize, usize)>],
    nr_cpus: usize,
) {
    let dt = now.saturating_sub(st.since);
    if st.pid == 0 || dt == 0 {
        return;
    }
    match (dom_of[cpu], st.opp) {
        (Some((d, i)), Some(o)) => a.domains[d].busy_ns[i][o] += dt,
        _ => a.unattributed_busy_ns += dt,
    }
    if st.pid >= FIRST_PID {
        let t = task(tasks, st.pid, nr_cpus);
        t.runtime_ns += dt;
        t.residency_ns[cpu] += dt;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "# tracer: nop
#
          <idle>-0       [000]     0.000000000: cpu_frequency: state=500000 cpu_id=0
          <idle>-0       [001]     0.000000001: cpu_frequency: state=500000 cpu_id=1
          <idle>-0       [000]     0.001000000: sched_wakeup_new: comm=rt-app pid=1001 prio=120 target_cpu=000
          <idle>-0       [000]     0.001000001: sched_switch: prev_comm=swapper/0 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=rt-app next_pid=1001 next_prio=120
          rt-app-1001    [000]     0.001000002: task_rename: pid=1001 oldcomm=rt-app newcomm=a b oom_score_adj=0
             a b-1001    [000]     0.002000000: cpu_frequency: state=1000000 cpu_id=0
             a b-1001    [000]     0.002000001: cpu_frequency: state=1000000 cpu_id=1
             a b-1001    [000]     0.004000000: sched_switch: prev_comm=a b prev_pid=1001 prev_prio=120 prev_state=S ==> next_comm=swapper/0 next_pid=0 next_prio=120
          <idle>-0       [001]     0.005000000: sched_wakeup: comm=a b pid=1001 prio=120 target_cpu=001
          <idle>-0       [001]     0.005000000: sched_migrate_task: comm=a b pid=1001 prio=120 orig_cpu=0 dest_cpu=1
          <idle>-0       [001]     0.005000001: sched_switch: prev_comm=swapper/1 prev_pid=0 prev_prio=120 prev_state=R ==> next_comm=a b next_pid=1001 next_prio=120
garbage line
";

    fn model() -> Vec<DomainModel> {
        vec![DomainModel {
            name: "d".into(),
            cpus: vec![0, 1],
            opps: vec![(500_000, 100), (1_000_000, 400)],
        }]
    }

    /// Hand-computed: runs 1.000001..2 ms at 500 MHz and 2..4 ms at 1 GHz on CPU 0, then
    /// 5.000001..10 ms at 1 GHz on CPU 1.
    #[test]
    fn intervals_energy_and_counts_from_a_hand_made_trace() {
        let a = analyse(T, 2, &model(), 10_000_000);
        assert_eq!((a.lines, a.bad_lines, a.context_switches), (12, 1, 3));
        let t = &a.tasks[0];
        assert_eq!(
            (t.name.as_str(), t.pid, t.activations, t.migrations),
            ("a b", 1001, 2, 1)
        );
        assert_eq!(t.residency_ns, [2_999_999, 4_999_999]);
        assert_eq!(t.runtime_ns, 7_999_998);
        let d = &a.domains[0];
        assert_eq!(d.busy_ns, [vec![999_999, 2_000_000], vec![0, 4_999_999]]);
        // 999_999 × 100 + 6_999_999 × 400 fJ.
        let fj = 999_999u128 * 100 + 6_999_999 * 400;
        assert_eq!(a.total_energy_uj, fj_to_uj(fj));
        assert_eq!(d.frequency_ns, [2_000_000, 8_000_000]);
        assert_eq!(a.unattributed_busy_ns, 0);
    }

    #[test]
    fn softirq_raises_are_counted_per_cpu() {
        let t =
            "          <idle>-0       [001]     0.000100000: softirq_raise: vec=7 [action=SCHED]
          <idle>-0       [000]     0.000200000: softirq_raise: vec=7 [action=SCHED]
          <idle>-0       [001]     0.000300000: softirq_raise: vec=7 [action=SCHED]
          <idle>-0       [007]     0.000400000: softirq_raise: vec=7 [action=SCHED]
";
        let a = analyse(t, 2, &model(), 1_000_000);
        assert_eq!(a.sched_softirq_raises, 4);
        // A CPU beyond the model's counts in the total only.
        assert_eq!(a.sched_softirq_raises_per_cpu, [1, 2]);
    }

    #[test]
    fn overutilized_time_and_late_timer_loops_are_counted() {
        let t = "          <idle>-0       [000]     0.000000000: sched_overutilized: overutilized=0 span=0x3
             a-1001    [001]     0.001000000: sched_overutilized: overutilized=1 span=0x3
             a-1001    [001]     0.001500000: sched_overutilized: overutilized=1 span=0x3
             a-1001    [000]     0.004000000: sched_overutilized: overutilized=0 span=0x3
             a-1001    [000]     0.004100000: tracing_mark_write: rtapp_stats: period=16000 run=1650 wu_lat=7 slack=-12 c_period=16000 c_run=1600
             a-1001    [000]     0.004200000: tracing_mark_write: rtapp_stats: period=16000 run=1650 wu_lat=7 slack=3 c_period=16000 c_run=1600
             a-1001    [000]     0.004300000: tracing_mark_write: rtapp_stats: period=40 run=40 wu_lat=0 slack=0 c_period=0 c_run=40
             a-1001    [001]     0.009000000: sched_overutilized: overutilized=1 span=0x3
";
        let a = analyse(t, 2, &model(), 10_000_000);
        // 1..4 ms, and 9 ms to the end of the run.
        assert_eq!(a.overutilized_ns, 3_000_000 + 1_000_000);
        // The loop without a timer (c_period=0) is no timer loop.
        assert_eq!((a.timer_loops, a.timer_late), (2, 1));
    }

    #[test]
    fn lost_records_are_read_from_the_header_and_garbage_never_panics() {
        let a = analyse(
            "# asym: 17 records lost (trace rings full)\n[x] 1.2: :\n: : :\n",
            2,
            &model(),
            1,
        );
        assert_eq!((a.lost_records, a.bad_lines), (17, 2));
        for cut in 0..T.len() {
            if T.is_char_boundary(cut) {
                let _ = analyse(&T[..cut], 2, &model(), 10_000_000);
            }
        }
    }
}
