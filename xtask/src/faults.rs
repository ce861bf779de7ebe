//! The fault-injection stage of `cargo xtask test`: the kernel's fatal paths under deliberate
//! failures (`crash=` on the kernel command line, kernel/src/boot.rs) and on machines without
//! semihosting. Each run must end — never hang — with the report on the console, within 2 s of
//! guest time of the failure, and with the expected exit: a non-zero semihosting status, or
//! QEMU's own exit after a PSCI `SYSTEM_OFF`/`SYSTEM_RESET` (what a board does).

use std::path::Path;
use std::time::Duration;

use anyhow::Result;

use crate::batch::{self, Case};
use crate::dtb;
use crate::qemu::{Machine, Outcome};

/// Longest a failure may take to end the run, in guest microseconds.
pub const END_WITHIN_US: u64 = 2_000_000;

/// Wall-clock limit per run: far above what a run that ends needs (well under a second under
/// `-icount`), so a timeout means a hang.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Wall-clock limit of a run whose guest mostly waits (a 1 s timeout): QEMU's `-icount` skips
/// idle guest time, so such a run takes well under a second (0.3 s measured); a wait that
/// spins instead of idling took 13.7 s.
const IDLE_WAIT_TIMEOUT: Duration = Duration::from_secs(8);

/// How a run must end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// A semihosting exit with this status.
    Status(i32),
    /// QEMU exits by itself with status 0: the guest called PSCI `SYSTEM_OFF` or
    /// `SYSTEM_RESET` (`-no-reboot`), as it would power off or reset a board.
    Psci,
}

/// A check of a run's console lines: `Err(why)` when they are wrong.
pub type LineCheck = fn(&[String]) -> Result<(), String>;

/// One deliberate failure.
#[derive(Clone, Debug)]
pub struct Injection {
    pub name: &'static str,
    /// Kernel command line.
    pub append: &'static str,
    /// Whether QEMU offers semihosting (`-semihosting-config`), as a debugger would.
    pub semihosting: bool,
    /// Lines (substrings) the console must show, each with how many times (`None`: at least
    /// once).
    pub expect: Vec<(String, Option<usize>)>,
    pub end: End,
    /// A further check of the console lines.
    pub check: Option<LineCheck>,
    /// Wall-clock limit of the run.
    pub timeout: Duration,
}

/// The injections, for a machine whose highest CPU is `last`.
pub fn injections(last: u32) -> Vec<Injection> {
    let once = |s: &str| (s.to_string(), Some(1));
    vec![
        // Finding 1 of the robustness review: a fault inside the fault reporter.
        Injection {
            name: "fault in the fault reporter",
            append: "semihosting crash=nested",
            semihosting: true,
            expect: vec![
                once(&format!("synchronous exception on cpu {last}")),
                once(&format!("cpu {last} faulted while handling a fatal error")),
            ],
            end: End::Status(1),
            check: None,
            timeout: TIMEOUT,
        },
        // Every stack has a guard page; a frame that would land in one is reported from the
        // CPU's overflow stack.
        Injection {
            name: "kernel stack overflow",
            append: "semihosting crash=stack",
            semihosting: true,
            expect: vec![
                once(&format!("kernel stack overflow on cpu {last}")),
                once(&format!("cpu {last} halted")),
            ],
            end: End::Status(1),
            check: None,
            timeout: TIMEOUT,
        },
        // Finding 5: a CPU that faults holding a lock (the console's). The report still
        // reaches the console (emergency path), every other CPU is stopped, the run ends.
        Injection {
            name: "fault with the console lock held",
            append: "semihosting crash=locked",
            semihosting: true,
            expect: vec![
                once(&format!("synchronous exception on cpu {last}")),
                once(&format!(
                    "asym: fatal error on cpu {last}: all other CPUs stopped"
                )),
            ],
            end: End::Status(1),
            check: None,
            timeout: TIMEOUT,
        },
        // Findings 5 and 9 without semihosting: before, CPU 5 halted holding the lock while
        // the others hung on it (or ran on with CPU 5 still counted online). Now the whole
        // system stops as after a panic, and `panic=-1` resets it (PSCI SYSTEM_RESET, which
        // QEMU's -no-reboot turns into an exit).
        Injection {
            name: "fault with the console lock held, panic=-1",
            append: "crash=locked panic=-1",
            semihosting: true,
            expect: vec![
                once(&format!("synchronous exception on cpu {last}")),
                once(&format!(
                    "asym: fatal error on cpu {last}: all other CPUs stopped"
                )),
                once("asym: rebooting (PSCI SYSTEM_RESET, panic=-1)"),
            ],
            end: End::Psci,
            check: None,
            timeout: TIMEOUT,
        },
        // Finding 5, the other way round: the console lock's holder is a CPU that hung (it
        // stopped with the lock held), and another CPU's panic report must still get out.
        Injection {
            name: "panic while a hung CPU holds the console lock",
            append: "semihosting crash=held",
            semihosting: true,
            expect: vec![
                once("panic on cpu 0 at kernel/src/boot.rs"),
                once(&format!("cpu {last} holds the console lock")),
            ],
            end: End::Status(101),
            check: None,
            timeout: TIMEOUT,
        },
        // The lock-order checker: an inversion panics on the spot, naming both locks.
        Injection {
            name: "a lock taken against the lock order",
            append: "semihosting lockdep crash=lockorder",
            semihosting: true,
            expect: vec![
                once(&format!("panic on cpu {last}")),
                once(&format!("lock order: cpu {last} takes lock")),
                once("(rank 10) while holding lock"),
            ],
            end: End::Status(101),
            check: None,
            timeout: TIMEOUT,
        },
        Injection {
            name: "panic on a secondary, panic=-1",
            append: "crash=panic panic=-1",
            semihosting: true,
            expect: vec![
                once(&format!("panic on cpu {last} at ")),
                once(&format!(
                    "asym: fatal error on cpu {last}: all other CPUs stopped"
                )),
                once("asym: rebooting (PSCI SYSTEM_RESET, panic=-1)"),
            ],
            end: End::Psci,
            check: None,
            timeout: TIMEOUT,
        },
        // Finding 8: a parked CPU spun in `wfe`, which QEMU runs as a yield: it never idled,
        // and under -icount guest time crawled. It must not wake at all once parked.
        Injection {
            name: "a parked CPU stays idle",
            append: "semihosting crash=park ticks=20",
            semihosting: true,
            expect: vec![once(&format!("crash: parked cpu {last} woke "))],
            end: End::Status(0),
            check: Some(parked_cpu_idle),
            timeout: TIMEOUT,
        },
        // Finding 8 too: a cross call to a CPU that never answers waited in a `yield` spin,
        // which under -icount keeps the clock from skipping idle time: the 1 s timeout took
        // many seconds of wall time (and a broken IPI showed up as xtask's kill).
        Injection {
            name: "a cross call to a deaf CPU times out",
            append: "semihosting crash=deaf ticks=20",
            semihosting: true,
            expect: vec![once(&format!(
                "crash: cpu {last} did not answer: smp: cpu {last} did not run the cross call \
                 within 1000000 us"
            ))],
            end: End::Status(0),
            check: None,
            timeout: IDLE_WAIT_TIMEOUT,
        },
        // Finding 2: no semihosting host (a board on its own). The `HLT` that would end the
        // run is undefined there: caught once, said on the console, then PSCI SYSTEM_OFF.
        Injection {
            name: "selftest without semihosting",
            append: "selftest=cmdline",
            semihosting: false,
            expect: vec![
                ("passed, 0 failed".into(), Some(1)),
                once("asym: no semihosting host to take exit status 0"),
                once("asym: powering off (PSCI SYSTEM_OFF)"),
            ],
            end: End::Psci,
            check: None,
            timeout: TIMEOUT,
        },
        Injection {
            name: "fault without semihosting",
            append: "semihosting crash=fault",
            semihosting: false,
            expect: vec![
                once(&format!("synchronous exception on cpu {last}")),
                once("asym: no semihosting host to take exit status 1"),
                once("asym: powering off (PSCI SYSTEM_OFF)"),
            ],
            end: End::Psci,
            check: None,
            timeout: TIMEOUT,
        },
    ]
}

/// Most wake-ups a parked CPU may have in the kernel's 100 ms window (none are expected).
const PARK_WAKES_MAX: u64 = 2;

/// `crash: parked cpu N woke K times in T us` with K at most [`PARK_WAKES_MAX`].
fn parked_cpu_idle(lines: &[String]) -> Result<(), String> {
    let line = lines
        .iter()
        .find(|l| l.starts_with("crash: parked cpu "))
        .ok_or("no `crash: parked cpu` line")?;
    let wakes: u64 = line
        .split_once(" woke ")
        .and_then(|(_, r)| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("no wake-up count in {line:?}"))?;
    if wakes > PARK_WAKES_MAX {
        return Err(format!(
            "the parked CPU woke {wakes} times (at most {PARK_WAKES_MAX}): {line:?}"
        ));
    }
    Ok(())
}

/// The stage's runs on `base` (the self-test machine: board DTB, `-icount`).
pub fn cases(board: dtb::Board, base: &Machine, dir: &Path) -> Result<Vec<Case>> {
    let mut machine = base.clone();
    // The kernel's highest CPU (a firmware stand-in's vCPU, added below, is not one).
    let last = machine.smp.saturating_sub(1);
    if let Some(path) = dtb::board_dtb(board, &mut machine, dir)? {
        machine.extra.push("-dtb".into());
        machine.extra.push(path.display().to_string());
    }
    Ok(injections(last)
        .into_iter()
        .map(|inj| {
            let m = Machine {
                append: inj.append.to_string(),
                ..machine.clone()
            };
            let mut command = m.command();
            if !inj.semihosting {
                command = batch::without_arg(&command, "-semihosting-config");
            }
            let name = format!("fault injection: {}", inj.name);
            Case {
                name,
                command,
                timeout: inj.timeout,
                check: Box::new(move |o| verdict(&inj, o)),
            }
        })
        .collect())
}

/// Whether a run did what `inj` expects.
pub fn verdict(inj: &Injection, o: &Outcome) -> Result<String, String> {
    let code = o.status.and_then(|s| s.code());
    match (inj.end, code) {
        (End::Status(want), Some(got)) if got == want => {}
        (End::Psci, Some(0)) => {}
        (want, got) => return Err(format!("QEMU exit {got:?}, expected {want:?}")),
    }
    for (want, count) in &inj.expect {
        let n = o.lines.iter().filter(|l| l.contains(want.as_str())).count();
        match count {
            Some(c) if n != *c => {
                return Err(format!("{n} lines {want:?}, expected exactly {c}"));
            }
            None if n == 0 => return Err(format!("no line {want:?}")),
            _ => {}
        }
    }
    let start = o
        .lines
        .iter()
        .find(|l| l.starts_with("crash: "))
        .and_then(|l| batch::guest_us(l))
        .unwrap_or(0);
    let Some(end) = o
        .lines
        .iter()
        .rev()
        .filter(|l| l.starts_with("asym: "))
        .find_map(|l| batch::guest_us(l))
    else {
        return Err("no closing `asym: ... at <t> us` line".into());
    };
    if let Some(check) = inj.check {
        check(&o.lines)?;
    }
    let took = end.saturating_sub(start);
    if took > END_WITHIN_US {
        return Err(format!(
            "ended {took} us of guest time after the failure (limit {END_WITHIN_US})"
        ));
    }
    Ok(format!(
        "ended {took} us (guest) after the failure, {:?}",
        inj.end
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    fn outcome(lines: &[&str], code: i32) -> Outcome {
        Outcome {
            status: Some(ExitStatus::from_raw(code << 8)),
            timed_out: false,
            stopped: false,
            lines: lines.iter().map(|l| l.to_string()).collect(),
            elapsed: Duration::ZERO,
        }
    }

    #[test]
    fn a_run_must_end_as_told_with_its_lines_in_time() {
        let inj = &injections(5)[0];
        let good = [
            "crash: Nested on cpu 5 at 1000 us",
            "synchronous exception on cpu 5 at EL1: ...",
            "cpu 5 faulted while handling a fatal error: ...",
            "asym: fatal error on cpu 5, ending the run at 2000 us",
        ];
        assert!(verdict(inj, &outcome(&good, 1)).is_ok());
        assert!(verdict(inj, &outcome(&good, 0)).is_err(), "wrong status");
        let mut twice = good.to_vec();
        twice.insert(2, "synchronous exception on cpu 5 at EL1: again");
        assert!(verdict(inj, &outcome(&twice, 1)).is_err(), "printed twice");
        let mut late = good.to_vec();
        late[3] = "asym: fatal error on cpu 5, ending the run at 3000000 us";
        assert!(verdict(inj, &outcome(&late, 1)).is_err(), "too late");
        assert!(
            verdict(inj, &outcome(&good[..3], 1)).is_err(),
            "no end line"
        );
    }

    #[test]
    fn a_parked_cpu_must_not_wake() {
        let lines = |s: &str| vec![s.to_string()];
        assert!(parked_cpu_idle(&lines("crash: parked cpu 5 woke 0 times in 100000 us")).is_ok());
        let busy = parked_cpu_idle(&lines(
            "crash: parked cpu 5 woke 3127455 times in 100000 us",
        ));
        assert!(busy.unwrap_err().contains("3127455"));
        assert!(parked_cpu_idle(&lines("crash: parked cpu 5 woke many times")).is_err());
        assert!(parked_cpu_idle(&[]).is_err());
    }
}
