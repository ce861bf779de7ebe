//! The boards' mainline device trees as Debian builds them: the DTBs in the arm64 kernel
//! package that `linux-image-arm64` depends on, fetched with the ordinary client (`apt-get`
//! with a private state directory under the target directory, so the host's own package
//! lists and architectures are left alone) and cached there. Never copied into the repository.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::boards::Target;
use crate::cmd::{self, KillOnDrop};

/// The DTBs checked, with the board crate each must match (Juno r2 twice: the SCPI tree for
/// old SCP firmware and the SCMI tree for current firmware).
pub const DTBS: &[(&str, Target)] = &[
    ("arm/juno-r2.dtb", Target::JunoR2),
    ("arm/juno-r2-scmi.dtb", Target::JunoR2),
    ("hisilicon/hi3660-hikey960.dtb", Target::Hikey960),
    ("hisilicon/hi6220-hikey.dtb", Target::Hikey),
];

/// The metapackage whose dependency is the current kernel.
const META: &str = "linux-image-arm64";
/// Longest any one apt step may take before it is killed (a registry that does not answer).
const STEP_TIMEOUT: Duration = Duration::from_secs(300);

/// Extracted DTBs of one kernel package.
#[derive(Debug)]
pub struct Dtbs {
    /// `linux-image-<abi>-arm64 <version>`.
    pub package: String,
    /// (path inside the package's dtb directory, file on disk, board).
    pub files: Vec<(String, PathBuf, Target)>,
}

/// Fetches (or reuses from `cache`) the DTBs of [`DTBS`].
pub fn fetch(cache: &Path) -> Result<Dtbs> {
    // A previous run's result, if its files are all there.
    let stamp = cache.join("package");
    if let Ok(package) = std::fs::read_to_string(&stamp) {
        let package = package.trim().to_string();
        if let Ok(files) = collect(cache, &package) {
            println!(
                "xtask: using the DTBs of {package} cached in {}",
                cache.display()
            );
            return Ok(Dtbs { package, files });
        }
    }
    let apt = Apt::new(&cache.join("apt"))?;
    apt.update("the mainline DTBs cannot be fetched")?;
    let package = apt.kernel_package()?;
    let debs = cache.join("debs");
    let deb = apt.download(&package, &debs)?;
    let version = deb_version(&deb);
    let members: Vec<String> = DTBS
        .iter()
        .map(|(name, _)| format!("./usr/lib/{package}/{name}"))
        .collect();
    extract(&deb, cache, &members)?;
    let files = collect(cache, &package)?;
    // Only the DTBs are kept: the package is ~60 MB.
    let _ = std::fs::remove_file(&deb);
    let package = format!("{package} {version}");
    std::fs::write(&stamp, &package)?;
    // `collect` looks up by the package name alone.
    Ok(Dtbs { package, files })
}

/// Debian's arm64 archive through `apt-get`/`apt-cache` with a private state directory (lists
/// and downloads under it; the host's status file, architectures and sources' state untouched).
#[derive(Debug)]
pub struct Apt {
    state: PathBuf,
}

impl Apt {
    /// `state` must be absolute: apt resolves a relative `Dir::` option against its own
    /// default directories, not against ours.
    pub fn new(state: &Path) -> Result<Apt> {
        let state = if state.is_absolute() {
            state.to_path_buf()
        } else {
            std::env::current_dir()?.join(state)
        };
        for d in ["lists/partial", "cache/archives/partial"] {
            std::fs::create_dir_all(state.join(d))
                .with_context(|| format!("creating {}", state.join(d).display()))?;
        }
        Ok(Apt { state })
    }

    fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.arg("-q")
            .arg(format!(
                "-oDir::State::Lists={}",
                self.state.join("lists").display()
            ))
            .arg(format!(
                "-oDir::Cache={}",
                self.state.join("cache").display()
            ))
            .arg("-oDir::State::status=/dev/null")
            .arg("-oAPT::Architecture=arm64")
            .arg("-oAPT::Architectures::=arm64")
            .arg("-oAcquire::http::Timeout=30")
            .arg("-oAcquire::https::Timeout=30")
            .arg("-oAcquire::Retries=2")
            .arg("-oAcquire::Languages=none")
            // Downloads land in our directory, which apt's `_apt` user may not write.
            .arg("-oAPT::Sandbox::User=root");
        c
    }

    /// `apt-get update` of the arm64 lists; `consequence` ends the error message (what cannot
    /// be done without the registry).
    pub fn update(&self, consequence: &str) -> Result<()> {
        let mut update = self.command("apt-get");
        update.arg("update");
        run(&mut update, "updating the arm64 package lists").with_context(|| {
            format!(
                "the Debian package registry is unreachable or refused the lists (apt-get \
                 update); {consequence}"
            )
        })?;
        // apt-get update succeeds with warnings when nothing could be fetched: look for the
        // list.
        let have_list = std::fs::read_dir(self.state.join("lists"))?
            .filter_map(|e| e.ok())
            .any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .contains("binary-arm64_Packages")
            });
        if !have_list {
            bail!(
                "the Debian package registry is unreachable: `apt-get update` fetched no arm64 \
                 package list (network down, proxy, or no deb source in \
                 /etc/apt/sources.list*); {consequence}"
            );
        }
        Ok(())
    }

    /// The current arm64 kernel package (`linux-image-<abi>-arm64`), which [`META`] depends on.
    pub fn kernel_package(&self) -> Result<String> {
        let mut depends = self.command("apt-cache");
        depends.args(["depends", META]);
        let out = output(&mut depends, "resolving the kernel package")?;
        Ok(out
            .lines()
            .filter_map(|l| l.trim().strip_prefix("Depends: "))
            .map(|p| p.split_whitespace().next().unwrap_or(""))
            .find(|p| p.starts_with("linux-image-") && p.ends_with("-arm64"))
            .with_context(|| {
                format!("`apt-cache depends {META}` names no linux-image-*-arm64:\n{out}")
            })?
            .to_string())
    }

    /// `apt-get download PACKAGE` into `dir`; returns the `.deb`.
    pub fn download(&self, package: &str, dir: &Path) -> Result<PathBuf> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut download = self.command("apt-get");
        download.args(["download", package]).current_dir(dir);
        run(&mut download, "downloading a package").with_context(|| {
            format!(
                "apt-get download {package}: the registry is unreachable or the package is not \
                 in Debian's arm64 archive (apt's message is above)"
            )
        })?;
        std::fs::read_dir(dir)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("{package}_")) && n.ends_with(".deb"))
            })
            .with_context(|| {
                format!(
                    "apt-get download left no {package}_*.deb in {}",
                    dir.display()
                )
            })
    }
}

/// The version field of a `.deb` file name (`name_version_arch.deb`; apt writes the epoch's
/// `:` as `%3a`).
pub fn deb_version(deb: &Path) -> String {
    deb.file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.split('_').nth(1))
        .map(|v| v.replace("%3a", ":"))
        .unwrap_or_else(|| "?".into())
}

/// The DTB directory of `package` (the first word of a stamp) under `cache`.
fn dtb_dir(cache: &Path, package: &str) -> PathBuf {
    let name = package.split_whitespace().next().unwrap_or(package);
    cache.join("usr/lib").join(name)
}

fn collect(cache: &Path, package: &str) -> Result<Vec<(String, PathBuf, Target)>> {
    let dir = dtb_dir(cache, package);
    DTBS.iter()
        .map(|(name, board)| {
            let p = dir.join(name);
            if p.is_file() {
                Ok((name.to_string(), p, *board))
            } else {
                bail!("{} is not in {package}", p.display())
            }
        })
        .collect()
}

/// `dpkg-deb --fsys-tarfile DEB | tar -x -C DEST MEMBERS...` (members as the tar names them,
/// `./usr/...`; shell-style wildcards allowed; none: everything).
pub fn extract(deb: &Path, dest: &Path, members: &[String]) -> Result<()> {
    std::fs::create_dir_all(dest).with_context(|| format!("creating {}", dest.display()))?;
    let mut dpkg = Command::new("dpkg-deb");
    dpkg.arg("--fsys-tarfile").arg(deb).stdout(Stdio::piped());
    cmd::echo(&dpkg);
    let mut dpkg = KillOnDrop(dpkg.spawn().context("starting dpkg-deb (Debian's dpkg)")?);
    let mut tar = Command::new("tar");
    tar.arg("-x").arg("-C").arg(dest);
    if members.iter().any(|m| m.contains('*')) {
        tar.arg("--wildcards");
    }
    tar.args(members);
    tar.stdin(dpkg.0.stdout.take().expect("piped"));
    run(&mut tar, &format!("extracting {}", deb.display()))?;
    let st = dpkg.0.wait()?;
    if !st.success() {
        bail!("dpkg-deb --fsys-tarfile {} failed: {st}", deb.display());
    }
    Ok(())
}

/// Runs `c` with [`STEP_TIMEOUT`], output inherited.
fn run(c: &mut Command, what: &str) -> Result<()> {
    cmd::echo(c);
    let mut child = KillOnDrop(
        c.spawn()
            .with_context(|| format!("{what}: starting {:?}", c.get_program()))?,
    );
    let start = Instant::now();
    loop {
        if let Some(st) = child.0.try_wait()? {
            if st.success() {
                return Ok(());
            }
            bail!("{what}: `{}` failed: {st}", cmd::render(c));
        }
        if start.elapsed() > STEP_TIMEOUT {
            bail!(
                "{what}: `{}` did not finish in {}s (registry unreachable?); killed",
                cmd::render(c),
                STEP_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Runs `c` with [`STEP_TIMEOUT`] and returns its stdout.
fn output(c: &mut Command, what: &str) -> Result<String> {
    cmd::echo(c);
    c.stdout(Stdio::piped());
    let mut child = KillOnDrop(
        c.spawn()
            .with_context(|| format!("{what}: starting {:?}", c.get_program()))?,
    );
    let mut stdout = child.0.stdout.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut s);
        s
    });
    let start = Instant::now();
    loop {
        if let Some(st) = child.0.try_wait()? {
            let out = reader.join().unwrap_or_default();
            if st.success() {
                return Ok(out);
            }
            bail!("{what}: `{}` failed: {st}", cmd::render(c));
        }
        if start.elapsed() > STEP_TIMEOUT {
            bail!(
                "{what}: `{}` did not finish in {}s; killed",
                cmd::render(c),
                STEP_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
