//! `cargo xtask sim-equiv --base REV`: proof that a refactoring of the scheduling core changed
//! nothing the simulator can observe.
//!
//! Builds the simulator twice — at `REV` (in a temporary `git worktree` under
//! `target/sim-equiv/`, removed afterwards) and from the working tree — then runs both on every
//! workload of the working tree's `tests/workloads` × `--eas on|off` × `--lb on|off` × juno-r2
//! and hikey960, and compares what each run writes (`report.json`, `trace.txt`,
//! `platform_info.yml`) byte for byte. A difference prints the first line that differs. The
//! base build keeps its own target directory (`target/sim-equiv/base-target`) so a second
//! invocation rebuilds only the workspace crates.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};

use crate::cmd;

/// The boards of the equivalence matrix.
pub const BOARDS: [&str; 2] = ["juno-r2", "hikey960"];
/// The files a run writes that must agree.
const OUTPUTS: [&str; 3] = ["report.json", "trace.txt", "platform_info.yml"];

/// Options of `cargo xtask sim-equiv`.
#[derive(Debug, Clone)]
pub struct EquivArgs {
    /// The git revision to compare against.
    pub base: String,
    /// Which runs, how long, how many at once.
    pub matrix: Matrix,
}

/// The options `sim-equiv` and `sim-ab` share: which workloads, how long, how many at once.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Matrix {
    /// Simulated duration of every run (e.g. 10s); default: each workload's own.
    #[arg(long)]
    pub duration: Option<String>,
    /// Runs at once.
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Only the workloads whose file name contains this.
    #[arg(long)]
    pub only: Option<String>,
}

/// One run of the matrix.
#[derive(Debug, Clone)]
struct Combo {
    board: &'static str,
    workload: PathBuf,
    eas: bool,
    lb: bool,
}

impl Combo {
    fn name(&self) -> String {
        let stem = self
            .workload
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        format!(
            "{}-{stem}-eas_{}-lb_{}",
            self.board,
            on_off(self.eas),
            on_off(self.lb)
        )
    }
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

/// Removes the base worktree when dropped, also on an error or a panic.
struct Worktree(PathBuf);

impl Drop for Worktree {
    fn drop(&mut self) {
        remove_worktree(&self.0);
    }
}

fn remove_worktree(path: &Path) {
    let _ = Command::new("git")
        .current_dir(cmd::workspace_root())
        .args(["worktree", "remove", "--force"])
        .arg(path)
        .stderr(std::process::Stdio::null())
        .status();
    let _ = std::fs::remove_dir_all(path);
    let _ = Command::new("git")
        .current_dir(cmd::workspace_root())
        .args(["worktree", "prune"])
        .status();
}

pub fn run(args: &EquivArgs) -> Result<ExitCode> {
    let root = cmd::workspace_root();
    let work = cmd::target_dir().join("sim-equiv");
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let rev = resolve(&args.base)?;

    let base_bin = build_at(&work, &rev)?;

    let new_bin = build_working_tree()?;

    let combos = matrix(&root.join("tests/workloads"), args.matrix.only.as_deref())?;
    if combos.is_empty() {
        bail!("no workload in tests/workloads matches");
    }
    let runs = work.join("runs");
    let _ = std::fs::remove_dir_all(&runs);
    println!(
        "xtask: sim-equiv: {} runs × 2 builds (base {} = {}), outputs under {}",
        combos.len(),
        args.base,
        &rev[..rev.len().min(12)],
        runs.display()
    );
    let queue = Mutex::new(combos.into_iter().rev().collect::<Vec<_>>());
    let results = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..args.matrix.jobs.max(1) {
            s.spawn(|| loop {
                let next = queue.lock().map(|mut q| q.pop()).unwrap_or(None);
                let Some(c) = next else { break };
                let r = check_one(
                    &c,
                    &base_bin,
                    &new_bin,
                    &runs,
                    args.matrix.duration.as_deref(),
                );
                let line = match &r {
                    Ok(Verdict::Same { bytes }) => format!("same  {} ({bytes} bytes)", c.name()),
                    Ok(Verdict::Differ(why)) => format!("DIFF  {}: {why}", c.name()),
                    Err(e) => format!("ERROR {}: {e:#}", c.name()),
                };
                println!("{line}");
                if let Ok(mut v) = results.lock() {
                    v.push((c.name(), r.map(|v| matches!(v, Verdict::Same { .. }))));
                }
            });
        }
    });
    let results = results.into_inner().unwrap_or_default();
    let same = results
        .iter()
        .filter(|(_, r)| matches!(r, Ok(true)))
        .count();
    let differ = results
        .iter()
        .filter(|(_, r)| matches!(r, Ok(false)))
        .count();
    let errors = results.len() - same - differ;
    println!(
        "xtask: sim-equiv against {}: {} combinations, {same} identical, {differ} differ, \
         {errors} failed to run",
        args.base,
        results.len()
    );
    if same == results.len() {
        let _ = std::fs::remove_dir_all(&runs);
        Ok(ExitCode::SUCCESS)
    } else {
        println!(
            "xtask: the outputs that differ are kept under {}",
            runs.display()
        );
        Ok(ExitCode::FAILURE)
    }
}

/// Builds the simulator at `rev` in a throw-away worktree under `work` (its own target
/// directory, kept for the next call) and returns the binary.
pub(crate) fn build_at(work: &Path, rev: &str) -> Result<PathBuf> {
    let tree = work.join("base");
    if tree.exists() {
        remove_worktree(&tree);
    }
    cmd::run(
        Command::new("git")
            .current_dir(cmd::workspace_root())
            .args(["worktree", "add", "--detach"])
            .arg(&tree)
            .arg(rev),
    )?;
    let guard = Worktree(tree.clone());
    let base_target = work.join("base-target");
    cmd::run(
        cmd::cargo()
            .current_dir(&tree)
            .env("CARGO_TARGET_DIR", &base_target)
            .args(["build", "--release", "-p", "asym-sim", "--bin", "asym-sim"]),
    )?;
    drop(guard);
    Ok(base_target.join("release/asym-sim"))
}

/// Builds the working tree's simulator and returns the binary.
pub(crate) fn build_working_tree() -> Result<PathBuf> {
    cmd::run(cmd::cargo().args(["build", "--release", "-p", "asym-sim", "--bin", "asym-sim"]))?;
    Ok(cmd::target_dir().join("release/asym-sim"))
}

pub(crate) fn resolve(rev: &str) -> Result<String> {
    let out = Command::new("git")
        .current_dir(cmd::workspace_root())
        .args(["rev-parse", "--verify", &format!("{rev}^{{commit}}")])
        .output()
        .context("running git rev-parse")?;
    if !out.status.success() {
        bail!("--base {rev}: not a commit of this repository");
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The bundled workloads (`tests/workloads/*.json`) whose file name contains `only`, sorted.
pub(crate) fn workloads(dir: &Path, only: Option<&str>) -> Result<Vec<PathBuf>> {
    let mut workloads: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter(|p| {
            only.is_none_or(|o| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().contains(o))
            })
        })
        .collect();
    workloads.sort();
    Ok(workloads)
}

fn matrix(dir: &Path, only: Option<&str>) -> Result<Vec<Combo>> {
    let workloads = workloads(dir, only)?;
    let mut v = Vec::new();
    for board in BOARDS {
        for w in &workloads {
            for eas in [false, true] {
                for lb in [false, true] {
                    v.push(Combo {
                        board,
                        workload: w.clone(),
                        eas,
                        lb,
                    });
                }
            }
        }
    }
    Ok(v)
}

enum Verdict {
    Same { bytes: u64 },
    Differ(String),
}

fn check_one(
    c: &Combo,
    base: &Path,
    new: &Path,
    runs: &Path,
    duration: Option<&str>,
) -> Result<Verdict> {
    let dir = runs.join(c.name());
    let (a, b) = (dir.join("base"), dir.join("new"));
    sim(base, c, &a, duration)?;
    sim(new, c, &b, duration)?;
    let mut bytes = 0;
    for f in OUTPUTS {
        let (fa, fb) = (a.join(f), b.join(f));
        match (fa.exists(), fb.exists()) {
            (false, false) => continue,
            (true, false) | (false, true) => {
                return Ok(Verdict::Differ(format!(
                    "{f} written by only one build ({})",
                    if fa.exists() { "base" } else { "new" }
                )))
            }
            (true, true) => {}
        }
        if let Some(why) = first_difference(&fa, &fb)? {
            return Ok(Verdict::Differ(format!("{f}: {why}")));
        }
        bytes += std::fs::metadata(&fa).map_or(0, |m| m.len());
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(Verdict::Same { bytes })
}

fn sim(bin: &Path, c: &Combo, out: &Path, duration: Option<&str>) -> Result<()> {
    run_sim(bin, c.board, &c.workload, c.eas, c.lb, &[], out, duration)
}

/// One simulator run writing into `out`; `extra` goes on the command line (e.g. `--set`s).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_sim(
    bin: &Path,
    board: &str,
    workload: &Path,
    eas: bool,
    lb: bool,
    extra: &[String],
    out: &Path,
    duration: Option<&str>,
) -> Result<()> {
    let mut cmd = Command::new(bin);
    cmd.current_dir(cmd::workspace_root())
        .args(["--board", board, "--workload"])
        .arg(workload)
        .args(["--eas", on_off(eas), "--lb", on_off(lb), "--quiet"])
        .args(extra)
        .arg("--out")
        .arg(out);
    if let Some(d) = duration {
        cmd.args(["--duration", d]);
    }
    cmd::echo(&cmd);
    let o = cmd
        .output()
        .with_context(|| format!("starting {}", bin.display()))?;
    if !o.status.success() {
        bail!(
            "{} exited with {}: {}",
            bin.display(),
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    Ok(())
}

/// `None` when the files are byte-identical, else where they first differ.
fn first_difference(a: &Path, b: &Path) -> Result<Option<String>> {
    if same_bytes(a, b)? {
        return Ok(None);
    }
    let open = |p: &Path| -> Result<BufReader<File>> {
        Ok(BufReader::new(
            File::open(p).with_context(|| format!("opening {}", p.display()))?,
        ))
    };
    let (mut ra, mut rb) = (open(a)?, open(b)?);
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    let mut n = 0u64;
    loop {
        n += 1;
        la.clear();
        lb.clear();
        let ea = ra.read_until(b'\n', &mut la)?;
        let eb = rb.read_until(b'\n', &mut lb)?;
        if la != lb {
            let show = |l: &[u8], eof: usize| {
                if eof == 0 {
                    "<end of file>".to_string()
                } else {
                    let s = String::from_utf8_lossy(l);
                    let s = s.trim_end_matches('\n');
                    s.chars().take(240).collect()
                }
            };
            return Ok(Some(format!(
                "line {n}\n      base: {}\n      new:  {}",
                show(&la, ea),
                show(&lb, eb)
            )));
        }
        if ea == 0 {
            // Equal lines to the end but different bytes cannot happen; be explicit anyway.
            return Ok(Some("files differ (no differing line found)".into()));
        }
    }
}

fn same_bytes(a: &Path, b: &Path) -> Result<bool> {
    let (ma, mb) = (std::fs::metadata(a)?, std::fs::metadata(b)?);
    if ma.len() != mb.len() {
        return Ok(false);
    }
    let (mut fa, mut fb) = (File::open(a)?, File::open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let na = read_full(&mut fa, &mut ba)?;
        let nb = read_full(&mut fb, &mut bb)?;
        if na != nb || ba[..na] != bb[..nb] {
            return Ok(false);
        }
        if na == 0 {
            return Ok(true);
        }
    }
}

fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, s: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, s).unwrap();
        p
    }

    #[test]
    fn first_difference_names_the_line() {
        let dir = std::env::temp_dir().join(format!("sim-equiv-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = write(&dir, "a", "one\ntwo\nthree\n");
        let b = write(&dir, "b", "one\ntwo\nthree\n");
        let c = write(&dir, "c", "one\nTWO\nthree\n");
        let d = write(&dir, "d", "one\ntwo\n");
        assert_eq!(first_difference(&a, &b).unwrap(), None);
        let why = first_difference(&a, &c).unwrap().unwrap();
        assert!(why.starts_with("line 2\n"), "{why}");
        assert!(
            why.contains("base: two") && why.contains("new:  TWO"),
            "{why}"
        );
        let why = first_difference(&a, &d).unwrap().unwrap();
        assert!(
            why.starts_with("line 3\n") && why.contains("<end of file>"),
            "{why}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_matrix_covers_boards_eas_and_lb() {
        let dir = cmd::workspace_root().join("tests/workloads");
        let m = matrix(&dir, None).unwrap();
        let nr = std::fs::read_dir(&dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "json"))
            })
            .count();
        assert_eq!(m.len(), nr * 2 * 2 * BOARDS.len());
        let names: std::collections::HashSet<_> = m.iter().map(Combo::name).collect();
        assert_eq!(names.len(), m.len(), "combination names must be unique");
    }
}
