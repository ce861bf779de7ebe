//! Spawning commands: every command is echoed before it runs; children are killed on drop.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};

use anyhow::{bail, Context, Result};

/// The workspace root (xtask lives in `<root>/xtask`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is inside the workspace")
        .to_path_buf()
}

/// Cargo's target directory, honouring `CARGO_TARGET_DIR` (relative to the current directory,
/// as cargo treats it).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir
            } else {
                std::env::current_dir().unwrap_or_default().join(dir)
            }
        }
        _ => workspace_root().join("target"),
    }
}

/// The cargo that runs xtask (`cargo xtask` sets `CARGO`), so the pinned toolchain is used.
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(workspace_root());
    cmd
}

/// Shell-like rendering of a command for the echo line.
pub fn render(cmd: &Command) -> String {
    let mut parts = Vec::new();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            parts.push(format!("{}={}", k.to_string_lossy(), quote(v)));
        }
    }
    // The cargo running xtask is shown as plain `cargo` (it is the pinned toolchain's).
    let program = cmd.get_program();
    if std::env::var_os("CARGO").is_some_and(|c| c == program) {
        parts.push("cargo".into());
    } else {
        parts.push(quote(program));
    }
    parts.extend(cmd.get_args().map(quote));
    parts.join(" ")
}

fn quote(s: &OsStr) -> String {
    let s = s.to_string_lossy();
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        s.into_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

pub fn echo(cmd: &Command) {
    println!("$ {}", render(cmd));
}

/// Echoes and runs `cmd`, returning its exit status (stdout/stderr inherited).
pub fn status(cmd: &mut Command) -> Result<ExitStatus> {
    echo(cmd);
    cmd.status()
        .with_context(|| format!("starting `{}`", cmd.get_program().to_string_lossy()))
}

/// Echoes and runs `cmd`; an unsuccessful exit is an error.
pub fn run(cmd: &mut Command) -> Result<()> {
    let st = status(cmd)?;
    if !st.success() {
        bail!("`{}` failed: {st}", render(cmd));
    }
    Ok(())
}

/// A child process that is killed (and reaped) when dropped, so an early return or a panic in
/// xtask never leaves a QEMU running.
#[derive(Debug)]
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            // SIGTERM first: QEMU then restores the terminal it put in raw mode for
            // `-serial stdio`. SIGKILL if it has not gone within two seconds.
            let term = Command::new("kill")
                .args(["-TERM", &self.0.id().to_string()])
                .stderr(std::process::Stdio::null())
                .status();
            if term.is_ok_and(|s| s.success()) {
                let until = std::time::Instant::now() + std::time::Duration::from_secs(2);
                while std::time::Instant::now() < until {
                    if let Ok(Some(_)) = self.0.try_wait() {
                        return;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
            let _ = self.0.kill();
        }
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn render_quotes_what_a_shell_would_split() {
        let mut c = Command::new("qemu-system-aarch64");
        c.args([
            "-append",
            "selftest hz=250",
            "-M",
            "virt,gic-version=3",
            "it's",
        ]);
        assert_eq!(
            render(&c),
            r"qemu-system-aarch64 -append 'selftest hz=250' -M virt,gic-version=3 'it'\''s'"
        );
    }

    #[test]
    fn kill_on_drop_ends_the_child() {
        let child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let start = Instant::now();
        drop(KillOnDrop(child));
        assert!(start.elapsed() < Duration::from_secs(5));
        // The reaped pid no longer exists as our child.
        let alive = Path::new(&format!("/proc/{pid}")).exists()
            && std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
                .map(|c| c.starts_with("sleep"))
                .unwrap_or(false);
        assert!(!alive, "sleep {pid} survived the drop");
    }

    #[test]
    fn kill_on_drop_escalates_when_sigterm_is_ignored() {
        // An ignored signal stays ignored across exec, so `sleep` itself ignores SIGTERM.
        let child = Command::new("sh")
            .args(["-c", "trap '' TERM; exec sleep 30"])
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let pid = child.id();
        let start = Instant::now();
        drop(KillOnDrop(child));
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(1900),
            "gave up after {took:?}"
        );
        assert!(took < Duration::from_secs(10), "took {took:?}");
        let alive = std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
            .map(|c| c.starts_with("sleep"))
            .unwrap_or(false);
        assert!(!alive, "sleep {pid} survived SIGKILL");
    }
}
