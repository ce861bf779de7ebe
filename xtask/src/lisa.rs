//! The LISA stage of `cargo xtask test` and `cargo xtask lisa`: ARM's LISA (`lisa-linux`
//! from the package registry, in a venv of its own under the target directory) reads the
//! simulator's traces and `tests/lisa/check.py` compares its analyses with `report.json`.
//! See `tests/lisa/README.md`.
//!
//! The venv is `<target>/asym/lisa-venv`. It is reused while its stamp (the requirements
//! file's text and the interpreter's version) matches; otherwise it is made again from
//! scratch with `python3 -m venv` and `pip install -r tests/lisa/requirements.txt` (exact
//! pins). pip gets a short network timeout, few retries and a wall-clock limit, so an
//! unreachable registry fails the stage with a message instead of hanging it.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::cmd::{self, KillOnDrop};

/// The pinned requirements, relative to the workspace root.
pub const REQUIREMENTS: &str = "tests/lisa/requirements.txt";
/// The checker, relative to the workspace root.
pub const CHECK_PY: &str = "tests/lisa/check.py";
/// The stamp inside the venv saying what it was made from.
const STAMP: &str = "asym-requirements.stamp";
/// Longest a venv install may take (100 packages took 3 to 6 minutes on 2 shared cores).
const INSTALL_LIMIT: Duration = Duration::from_secs(20 * 60);
/// Longest the check may take (see tests/lisa/README.md for measured times).
const CHECK_LIMIT: Duration = Duration::from_secs(30 * 60);

/// The interpreter the venv is made from: `ASYM_PYTHON`, else `python3` on `PATH`.
fn base_python() -> String {
    std::env::var("ASYM_PYTHON")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "python3".into())
}

/// `<target>/asym/lisa-venv`.
pub fn venv_dir() -> PathBuf {
    cmd::target_dir().join("asym").join("lisa-venv")
}

/// What the venv must have been made from: the requirements text and the interpreter.
fn wanted_stamp(python: &str) -> Result<String> {
    let req_path = cmd::workspace_root().join(REQUIREMENTS);
    let req = std::fs::read_to_string(&req_path)
        .with_context(|| format!("reading {}", req_path.display()))?;
    let out = Command::new(python)
        .args(["-c", "import sys; print(sys.version)"])
        .output()
        .with_context(|| format!("running `{python}` (set ASYM_PYTHON to another interpreter)"))?;
    if !out.status.success() {
        bail!("`{python} -c 'import sys'` failed: {}", out.status);
    }
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Ok(format!("python {version}\n{req}"))
}

/// Whether an existing venv can be reused as it is.
pub fn venv_is_current(venv: &Path, stamp: &str) -> bool {
    venv.join("bin").join("python").exists()
        && std::fs::read_to_string(venv.join(STAMP)).is_ok_and(|s| s == stamp)
}

/// Make (or reuse) the venv; returns its interpreter and whether it was reused.
pub fn ensure_venv() -> Result<(PathBuf, bool)> {
    let python = base_python();
    let venv = venv_dir();
    let stamp = wanted_stamp(&python)?;
    let venv_python = venv.join("bin").join("python");
    if venv_is_current(&venv, &stamp) {
        println!("lisa: reusing {} (requirements unchanged)", venv.display());
        return Ok((venv_python, true));
    }
    if venv.exists() {
        std::fs::remove_dir_all(&venv)
            .with_context(|| format!("removing the stale venv {}", venv.display()))?;
    }
    let st = cmd::status(Command::new(&python).args(["-m", "venv"]).arg(&venv))?;
    if !st.success() {
        bail!(
            "`{python} -m venv {}` failed ({st}); on Debian install python3-venv",
            venv.display()
        );
    }
    let log = venv.with_extension("install.log");
    let mut pip = Command::new(&venv_python);
    pip.current_dir(cmd::workspace_root()).args([
        "-m",
        "pip",
        "install",
        "--no-input",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        // A registry that does not answer fails in about a minute, not after pip's
        // default 15 s × 5 retries per file (or the 180 s some machines configure).
        "--timeout",
        "20",
        "--retries",
        "2",
        "-r",
        REQUIREMENTS,
    ]);
    let t = Instant::now();
    let (st, tail) = run_logged(&mut pip, &log, INSTALL_LIMIT, false)
        .with_context(|| format!("installing LISA into {}", venv.display()))?;
    match st {
        Some(st) if st.success() => {}
        _ => {
            // A half-made venv must not be reused.
            let _ = std::fs::remove_file(venv.join(STAMP));
            let why = match st {
                None => format!("did not finish within {INSTALL_LIMIT:?}"),
                Some(st) => format!("failed ({st})"),
            };
            bail!(
                "pip install -r {REQUIREMENTS} {why}: is the package registry reachable? \
                 Full log: {}. Last lines:\n{}",
                log.display(),
                tail.join("\n")
            );
        }
    }
    std::fs::write(venv.join(STAMP), &stamp)
        .with_context(|| format!("writing {}", venv.join(STAMP).display()))?;
    println!(
        "lisa: installed {REQUIREMENTS} into {} in {:.0?}",
        venv.display(),
        t.elapsed()
    );
    Ok((venv_python, false))
}

/// The counts of check.py's closing line `lisa: N passed, M failed`.
pub fn parse_summary(line: &str) -> Option<(u64, u64)> {
    let rest = line.trim().strip_prefix("lisa: ")?;
    let (p, f) = rest.split_once(" passed, ")?;
    let f = f.strip_suffix(" failed")?;
    Some((p.parse().ok()?, f.parse().ok()?))
}

/// Build the simulator and run check.py with `args`; returns (passed, failed).
pub fn check(python: &Path, args: &[String]) -> Result<(u64, u64)> {
    cmd::run(cmd::cargo().args(["build", "--release", "-p", "asym-sim"]))?;
    let root = cmd::workspace_root();
    let sim = cmd::target_dir().join("release").join("asym-sim");
    let out = cmd::target_dir().join("asym").join("lisa");
    let mut c = Command::new(python);
    c.current_dir(&root)
        .arg(CHECK_PY)
        .arg("--sim")
        .arg(&sim)
        .arg("--workloads")
        .arg(root.join("tests").join("workloads"))
        .arg("--out")
        .arg(&out)
        .args(args);
    let log = out.with_extension("log");
    let (st, tail) = run_logged(&mut c, &log, CHECK_LIMIT, true)?;
    let summary = tail.iter().rev().find_map(|l| parse_summary(l));
    match (st, summary) {
        (None, _) => bail!(
            "check.py did not finish within {CHECK_LIMIT:?}; log {}",
            log.display()
        ),
        (Some(st), Some((p, f))) if st.success() && f == 0 && p > 0 => Ok((p, f)),
        (Some(st), Some((p, f))) => {
            bail!(
                "{p} passed, {f} failed (check.py {st}); log {}",
                log.display()
            )
        }
        (Some(st), None) => bail!(
            "check.py ended ({st}) without its summary line; log {}",
            log.display()
        ),
    }
}

/// Run `c` with stdout and stderr into `log` (and echoed when `echo`), killing it after
/// `limit`. Returns its status (`None` if it was killed) and the last lines.
fn run_logged(
    c: &mut Command,
    log: &Path,
    limit: Duration,
    echo: bool,
) -> Result<(Option<ExitStatus>, Vec<String>)> {
    cmd::echo(c);
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut file =
        std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = KillOnDrop(
        c.spawn()
            .with_context(|| format!("starting `{}`", c.get_program().to_string_lossy()))?,
    );
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let readers: Vec<_> = [
        child
            .0
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .0
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|s| {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(s).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        })
    })
    .collect();
    drop(tx);
    let deadline = Instant::now() + limit;
    let mut tail: Vec<String> = Vec::new();
    let mut status = None;
    loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                use std::io::Write;
                let _ = writeln!(file, "{line}");
                if echo {
                    println!("{line}");
                }
                tail.push(line);
                if tail.len() > 40 {
                    tail.remove(0);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                status = Some(child.0.wait().context("waiting for the child")?);
                break;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        if Instant::now() > deadline {
            break;
        }
    }
    // On a timeout, dropping the guard kills the child, which closes the pipes.
    drop(child);
    for r in readers {
        let _ = r.join();
    }
    Ok((status, tail))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_line_is_parsed_only_in_its_exact_form() {
        assert_eq!(parse_summary("lisa: 312 passed, 0 failed"), Some((312, 0)));
        assert_eq!(parse_summary("lisa: 3 passed, 2 failed\n"), Some((3, 2)));
        assert_eq!(
            parse_summary("lisa: juno-r2/jank: 3 passed, 2 failed"),
            None
        );
        assert_eq!(parse_summary("3 passed, 0 failed"), None);
        assert_eq!(parse_summary("lisa: x passed, 0 failed"), None);
    }

    #[test]
    fn venv_is_reused_only_with_the_same_stamp() {
        let dir = std::env::temp_dir().join(format!("asym-lisa-venv-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        assert!(!venv_is_current(&dir, "a"));
        std::fs::write(dir.join("bin").join("python"), "").unwrap();
        assert!(!venv_is_current(&dir, "a"), "no stamp yet");
        std::fs::write(dir.join(STAMP), "a").unwrap();
        assert!(venv_is_current(&dir, "a"));
        assert!(!venv_is_current(&dir, "b"), "requirements changed");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_command_past_its_limit_is_killed() {
        let log = std::env::temp_dir().join(format!("asym-lisa-limit-{}.log", std::process::id()));
        let t = Instant::now();
        let (st, tail) = run_logged(
            Command::new("sh").args(["-c", "echo started; exec sleep 30"]),
            &log,
            Duration::from_millis(500),
            false,
        )
        .unwrap();
        assert!(st.is_none());
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        assert_eq!(tail, ["started"]);
        let _ = std::fs::remove_file(&log);
    }
}
