//! Running many short QEMU cases side by side, each with its own verdict: the engine of the
//! fault-injection, DT-fuzz and machine-shape stages of `cargo xtask test`.

use std::path::Path;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::console::Defmt;
use crate::qemu::{self, Outcome, RunOpts};
use crate::test::StageResult;

/// A verdict on a finished run: `Ok(detail)` or `Err(why it failed)`.
pub type Check = Box<dyn Fn(&Outcome) -> Result<String, String> + Send + Sync>;

/// One QEMU run of a stage.
pub struct Case {
    pub name: String,
    pub command: Command,
    pub timeout: Duration,
    pub check: Check,
}

/// How a batch went, for the summary line of its stage.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub passed: usize,
    pub failed: usize,
    pub timed_out: usize,
}

/// Runs `cases`, `jobs` at a time, printing one line per case (the console only when it
/// failed, so a batch of a hundred boots stays readable) and writing every console to
/// `log_dir/<name>.log`. Results come back in the order of `cases`.
pub fn run(
    cases: Vec<Case>,
    jobs: usize,
    defmt: Option<&Defmt>,
    log_dir: &Path,
) -> (Vec<StageResult>, Tally) {
    let _ = std::fs::create_dir_all(log_dir);
    let queue = Mutex::new(cases.into_iter().enumerate().rev().collect::<Vec<_>>());
    let done = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..jobs.max(1) {
            s.spawn(|| loop {
                let next = queue.lock().unwrap().pop();
                let Some((i, case)) = next else { break };
                let r = run_one(case, defmt, log_dir);
                done.lock().unwrap().push((i, r));
            });
        }
    });
    let mut done = done.into_inner().unwrap();
    done.sort_by_key(|(i, _)| *i);
    let mut tally = Tally::default();
    let results = done
        .into_iter()
        .map(|(_, (r, timed_out))| {
            if r.ok {
                tally.passed += 1;
            } else {
                tally.failed += 1;
            }
            tally.timed_out += usize::from(timed_out);
            r
        })
        .collect();
    (results, tally)
}

fn run_one(case: Case, defmt: Option<&Defmt>, log_dir: &Path) -> (StageResult, bool) {
    let t = Instant::now();
    let opts = RunOpts {
        timeout: Some(case.timeout),
        prefix: format!("[{}] ", case.name),
        interactive: false,
        answer: false,
        echo: false,
        stop_when: None,
    };
    let outcome = qemu::run(case.command, defmt, &opts);
    let log = log_dir.join(format!("{}.log", file_name(&case.name)));
    let (ok, detail, timed_out) = match outcome {
        Err(e) => (false, format!("{e:#}"), false),
        Ok(o) => {
            let _ = std::fs::write(&log, o.lines.join("\n") + "\n");
            let verdict = if o.timed_out {
                Err(format!(
                    "no end within {}s (hang); last line {:?}",
                    case.timeout.as_secs(),
                    o.lines.last().map(String::as_str).unwrap_or("")
                ))
            } else {
                (case.check)(&o)
            };
            match verdict {
                Ok(d) => (true, d, false),
                Err(d) => {
                    for l in o.lines.iter().rev().take(12).rev() {
                        println!("[{}] {l}", case.name);
                    }
                    (false, format!("{d}; log {}", log.display()), o.timed_out)
                }
            }
        }
    };
    println!(
        "[{}] {} in {:.1?}: {detail}",
        case.name,
        if ok { "ok" } else { "FAILED" },
        t.elapsed()
    );
    (
        StageResult {
            name: case.name,
            ok,
            detail,
            time: t.elapsed(),
        },
        timed_out,
    )
}

/// `name` as a file name: spaces and path separators become `-`.
fn file_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "._=+".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// The guest time (µs since reset) a kernel line carries as `... at <n> us`, if any.
pub fn guest_us(line: &str) -> Option<u64> {
    let (head, _) = line.rsplit_once(" us")?;
    let (_, n) = head.rsplit_once(" at ")?;
    n.trim().parse().ok()
}

/// `command` without `flag` and the value that follows it (e.g. `-semihosting-config`).
pub fn without_arg(command: &Command, flag: &str) -> Command {
    let mut c = Command::new(command.get_program());
    let mut skip = false;
    for a in command.get_args() {
        if skip {
            skip = false;
            continue;
        }
        if a == flag {
            skip = true;
            continue;
        }
        c.arg(a);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_time_is_read_from_the_line_end() {
        assert_eq!(guest_us("crash: Fault on cpu 5 at 30742 us"), Some(30742));
        assert_eq!(
            guest_us("asym: fatal error on cpu 5, ending the run at 31 us"),
            Some(31)
        );
        assert_eq!(guest_us("ticks: cpu0=1 at x us"), None);
        assert_eq!(guest_us("no time here"), None);
    }

    #[test]
    fn an_argument_and_its_value_are_dropped() {
        let mut c = Command::new("qemu");
        c.args(["-a", "1", "-semihosting-config", "enable=on", "-b"]);
        let c = without_arg(&c, "-semihosting-config");
        let args: Vec<_> = c
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(args, ["-a", "1", "-b"]);
        assert_eq!(file_name("dt fuzz/3 x"), "dt-fuzz-3-x");
    }
}
