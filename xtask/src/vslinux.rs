//! `cargo xtask bench --vs-linux`: Linux and asym side by side on the same QEMU machine.
//!
//! Debian's arm64 Linux kernel package boots under exactly the machine asym's benchmarks use
//! (`-M virt`, the same CPU model, vCPU count, memory, GIC, emulated board DT) with
//! `-icount shift=0,sleep=off`, so a guest nanosecond is one guest instruction and idle time is
//! skipped. Its initramfs is made here: `busybox-static`, `rt-tests`' `cyclictest` and
//! `hackbench` with the shared libraries they need (resolved from their `DT_NEEDED` entries),
//! and our own static probe (`xtask/linux/probe`: `/init`'s boot stamp, a pinned pipe
//! ping-pong, a guest clock) which needs no cross compiler. `/bench.sh` (`xtask/linux/
//! bench.sh`) prints one `RESULT bench=<name> key=value ...` line per measurement and powers
//! off. asym's numbers come from asym's own benchmarks run in the same invocation, one
//! function per measurement (`asym_*` below); where asym has no equivalent yet the table says
//! so and why.
//!
//! Packages are fetched with `apt-get download` into `<target>/vs-linux/` (a private apt state
//! there; nothing is installed on the host) and unpacked with `dpkg-deb`; the next run reuses
//! them without the network.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::bench::{self, BootRun};
use crate::debian::{self, Apt};
use crate::dtb::{self, Board};
use crate::qemu::{self, Boot, RunOpts};
use crate::{cmd, kernel, MachineArgs};

/// One guest instruction per guest ns; idle periods skipped.
pub const ICOUNT: &str = "shift=0,sleep=off";
/// The user-space packages besides the kernel (`linux-image-*-arm64`).
pub const PACKAGES: &[&str] = &["busybox-static", "rt-tests", "libc6", "libnuma1"];
/// Linux's command line: console on the PL011, a quiet boot, reboot (QEMU exits: `-no-reboot`)
/// at once on a panic (e.g. /init dying), no address randomisation (same layout every run).
pub const LINUX_APPEND: &str = "console=ttyAMA0 quiet panic=-1 nokaslr";
const PROBE: &str = "asym-linux-probe";
/// What xtask/linux/bench.sh runs, after its parameters.
const BENCH_SH: &str = include_str!("../linux/bench.sh");
/// busybox applets the script and a person debugging it use.
const APPLETS: &[&str] = &[
    "sh", "mount", "grep", "sed", "tr", "sleep", "uname", "poweroff", "cat", "ls", "dmesg",
    "taskset", "echo",
];

#[derive(Debug, Clone)]
pub struct VsLinuxOpts {
    pub machine: MachineArgs,
    pub board: Board,
    pub quick: bool,
    /// Linux run's timeout (default from [`Params::timeout`]).
    pub timeout: Option<Duration>,
}

/// The sizes of the measurements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Guest seconds of the idle softirq count.
    pub idle_s: u32,
    /// Guest seconds of `cyclictest -t<load_threads> -i100`.
    pub load_s: u32,
    pub load_threads: u32,
    /// Timed ping-pong round trips (after a tenth as many for warm-up).
    pub rounds: u32,
    pub hb_groups: u32,
    pub hb_loops: u32,
    /// The ping-pong's CPUs: same-CPU runs both ends on `cpu_a`.
    pub cpu_a: u32,
    pub cpu_b: u32,
}

impl Params {
    pub fn new(quick: bool, smp: u32) -> Params {
        Params {
            idle_s: if quick { 2 } else { 10 },
            load_s: if quick { 2 } else { 10 },
            load_threads: smp,
            rounds: if quick { 2_000 } else { 20_000 },
            hb_groups: 4,
            hb_loops: if quick { 20 } else { 100 },
            cpu_a: 0,
            cpu_b: u32::from(smp > 1),
        }
    }

    /// Wall-time budget of the Linux run on a loaded 2-core host.
    pub fn timeout(&self) -> Duration {
        let guest_s = u64::from(self.idle_s + self.load_s);
        Duration::from_secs(180 + 20 * guest_s + u64::from(self.rounds) / 100)
    }

    /// `/bench.sh`: the parameters, then xtask/linux/bench.sh.
    pub fn script(&self) -> String {
        format!(
            "#!/bin/sh\nIDLE_S={}\nLOAD_S={}\nLOAD_THREADS={}\nROUNDS={}\nHB_GROUPS={}\n\
             HB_LOOPS={}\nCPU_A={}\nCPU_B={}\n{BENCH_SH}",
            self.idle_s,
            self.load_s,
            self.load_threads,
            self.rounds,
            self.hb_groups,
            self.hb_loops,
            self.cpu_a,
            self.cpu_b
        )
    }
}

// ---------------------------------------------------------------------------------------------
// RESULT lines

/// `key → value` of one `RESULT` line.
pub type Fields = BTreeMap<String, String>;

/// Every `RESULT bench=<name> key=value ...` line, by name (a later line of the same name
/// wins). The line may have a prefix (a console's `\r`, a timestamp); fields without `=` are
/// skipped.
pub fn parse_results<'a>(lines: impl IntoIterator<Item = &'a str>) -> BTreeMap<String, Fields> {
    let mut out = BTreeMap::new();
    for line in lines {
        let Some(at) = line.find("RESULT bench=") else {
            continue;
        };
        let fields: Fields = line[at + "RESULT ".len()..]
            .split_whitespace()
            .filter_map(|f| f.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        if let Some(name) = fields.get("bench").filter(|n| !n.is_empty()) {
            out.insert(name.clone(), fields);
        }
    }
    out
}

fn is_done(line: &str) -> bool {
    line.contains("RESULT bench=done")
}

/// The fields of measurement `name`, or why there are none.
fn result<'a>(r: &'a BTreeMap<String, Fields>, name: &str) -> Result<&'a Fields, String> {
    let f = r
        .get(name)
        .ok_or_else(|| format!("no `RESULT bench={name}` line"))?;
    if let Some(e) = f.get("error") {
        return Err(format!("`RESULT bench={name}` reports error={e}"));
    }
    Ok(f)
}

fn field<T: std::str::FromStr>(f: &Fields, name: &str, key: &str) -> Result<T, String> {
    let v = f
        .get(key)
        .ok_or_else(|| format!("`RESULT bench={name}` has no {key}="))?;
    v.parse()
        .map_err(|_| format!("`RESULT bench={name}` {key}={v:?} is not a number"))
}

fn counts(f: &Fields, name: &str, key: &str) -> Result<Vec<u64>, String> {
    let v = f
        .get(key)
        .ok_or_else(|| format!("`RESULT bench={name}` has no {key}="))?;
    v.split(',')
        .map(|c| {
            c.parse()
                .map_err(|_| format!("`RESULT bench={name}` {key}={v:?}: {c:?} is not a count"))
        })
        .collect()
}

/// Guest ns (= instructions at shift 0) per round trip of ping-pong `name`.
pub fn round_trip_ns(r: &BTreeMap<String, Fields>, name: &str) -> Result<f64, String> {
    let f = result(r, name)?;
    let ns: u64 = field(f, name, "ns")?;
    let rounds: u64 = field(f, name, "rounds")?;
    if rounds == 0 {
        return Err(format!("`RESULT bench={name}` rounds=0"));
    }
    Ok(ns as f64 / rounds as f64)
}

/// Softirqs of `row` (`sched` or `timer`) per CPU per guest second in phase `name`.
pub fn softirq_rate(r: &BTreeMap<String, Fields>, name: &str, row: &str) -> Result<f64, String> {
    let f = result(r, name)?;
    let ns: u64 = field(f, name, "ns")?;
    let before = counts(f, name, &format!("{row}_before"))?;
    let after = counts(f, name, &format!("{row}_after"))?;
    if before.len() != after.len() || before.is_empty() {
        return Err(format!(
            "`RESULT bench={name}`: {} CPUs before, {} after",
            before.len(),
            after.len()
        ));
    }
    if ns == 0 {
        return Err(format!("`RESULT bench={name}` ns=0"));
    }
    let mut total = 0u64;
    for (b, a) in before.iter().zip(&after) {
        total += a
            .checked_sub(*b)
            .ok_or_else(|| format!("`RESULT bench={name}`: a {row} count went down"))?;
    }
    Ok(total as f64 / before.len() as f64 / (ns as f64 / 1e9))
}

/// Guest ns from reset to the first instruction of /init (the virtual counter, which QEMU
/// starts at 0 at reset).
pub fn boot_ns(r: &BTreeMap<String, Fields>) -> Result<f64, String> {
    let f = result(r, "boot")?;
    let ticks: u64 = field(f, "boot", "counter_ticks")?;
    let hz: u64 = field(f, "boot", "counter_hz")?;
    if hz == 0 {
        return Err("`RESULT bench=boot` counter_hz=0".into());
    }
    Ok(ticks as f64 * 1e9 / hz as f64)
}

/// hackbench's own `Time:` in guest ns.
pub fn hackbench_ns(r: &BTreeMap<String, Fields>) -> Result<f64, String> {
    let f = result(r, "hackbench")?;
    let s: f64 = field(f, "hackbench", "seconds")?;
    Ok(s * 1e9)
}

// ---------------------------------------------------------------------------------------------
// The table

/// asym's side of one row.
#[derive(Debug, Clone, PartialEq)]
pub enum Asym {
    Value(f64),
    /// No equivalent benchmark in asym yet: why.
    NotMeasured(String),
    /// The benchmark exists but this run of it failed: how.
    Failed(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Guest instructions (guest ns at shift 0).
    Instructions,
    /// Per CPU per guest second.
    PerCpuSecond,
    /// Guest ns shown as ms.
    Millis,
}

impl Unit {
    fn show(self, v: f64) -> String {
        match self {
            Unit::Instructions => group(v.round() as u64),
            Unit::PerCpuSecond => format!("{v:.2}"),
            Unit::Millis => format!("{:.2} ms", v / 1e6),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Row {
    pub what: String,
    pub unit: Unit,
    pub linux: Result<f64, String>,
    pub asym: Asym,
}

impl Row {
    /// asym / Linux when both are measured (and Linux's is not zero).
    pub fn ratio(&self) -> Option<f64> {
        match (&self.linux, &self.asym) {
            (Ok(l), Asym::Value(a)) if *l > 0.0 => Some(a / l),
            _ => None,
        }
    }
}

/// `12345678` → `12,345,678`.
fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A Markdown table (measure | Linux | asym | asym/Linux) with numbered notes for every value
/// that is not a number.
pub fn render_table(rows: &[Row]) -> String {
    let mut notes: Vec<String> = Vec::new();
    let mut note = |text: String| {
        let n = match notes.iter().position(|t| *t == text) {
            Some(i) => i + 1,
            None => {
                notes.push(text);
                notes.len()
            }
        };
        format!("[{n}]")
    };
    let mut out = String::new();
    out.push_str("| measure | Linux 6.1 | asym | asym / Linux |\n|---|---:|---:|---:|\n");
    for row in rows {
        let linux = match &row.linux {
            Ok(v) => row.unit.show(*v),
            Err(e) => format!("missing {}", note(e.clone())),
        };
        let asym = match &row.asym {
            Asym::Value(v) => row.unit.show(*v),
            Asym::NotMeasured(why) => format!("not measured yet {}", note(why.clone())),
            Asym::Failed(why) => format!("failed {}", note(why.clone())),
        };
        let ratio = row
            .ratio()
            .map(|r| format!("{r:.3}"))
            .unwrap_or_else(|| "—".into());
        let _ = writeln!(out, "| {} | {linux} | {asym} | {ratio} |", row.what);
    }
    if !notes.is_empty() {
        out.push('\n');
        for (i, n) in notes.iter().enumerate() {
            let _ = writeln!(out, "[{}] {n}", i + 1);
        }
    }
    out
}

/// The results of asym's own benchmarks in this run.
#[derive(Debug)]
pub struct AsymRuns {
    pub boot: Result<BootRun, String>,
    /// `cargo xtask bench switch`'s run (`bench=switch` under the same `-icount shift=0`).
    pub switch: Result<bench::SwitchRun, String>,
    /// SCHED_SOFTIRQ raises per CPU per guest second, idle (one rt-app thread asleep) and
    /// under `tests/workloads/cyclictest.json` (six threads, a 100 µs timer each).
    pub softirq_idle: Result<f64, String>,
    pub softirq_load: Result<f64, String>,
}

/// The mean over CPUs of the kernel's `rtapp: SCHED_SOFTIRQ raised per CPU: N ... over M ms`
/// line, per CPU per second.
pub fn parse_softirq_line(lines: &[String]) -> Result<f64, String> {
    let l = lines
        .iter()
        .find_map(|l| l.strip_prefix("rtapp: SCHED_SOFTIRQ raised per CPU:"))
        .ok_or("no `rtapp: SCHED_SOFTIRQ raised per CPU` line")?;
    let (counts, ms) = l
        .rsplit_once(" over ")
        .and_then(|(c, m)| Some((c, m.strip_suffix(" ms")?.trim().parse::<f64>().ok()?)))
        .ok_or_else(|| format!("`{l}`: no `over N ms`"))?;
    let n: Vec<f64> = counts
        .split_whitespace()
        .map(|w| w.parse::<f64>().map_err(|_| format!("`{w}` in `{l}`")))
        .collect::<Result<_, _>>()?;
    if n.is_empty() || ms <= 0.0 {
        return Err(format!("`{l}`: no CPUs or no time"));
    }
    Ok(n.iter().sum::<f64>() / n.len() as f64 / (ms / 1000.0))
}

/// Runs `workload` for `secs` guest seconds under the in-kernel rt-app executor, untraced, with
/// load balancing on (the default), and reads its SCHED_SOFTIRQ line.
fn asym_softirq_run(o: &VsLinuxOpts, workload: &Path, secs: u32) -> Result<f64, String> {
    let r = crate::workload::Run {
        workload: workload.to_path_buf(),
        append: Vec::new(),
        out: cmd::target_dir().join("vs-linux"),
        duration_ns: Some(u64::from(secs) * 1_000_000_000),
        eas: None,
        lb: None,
        set: Vec::new(),
        board: o.board,
        icount: Some(0),
        timeout: Duration::from_secs(600),
        echo: false,
        el0: false,
        el0_program: None,
        highres: None,
    };
    let lines = crate::workload::run_untraced(&o.machine, &r).map_err(|e| format!("{e:#}"))?;
    parse_softirq_line(&lines)
}

/// An rt-app workload of one thread that sleeps through the run: asym's idle system.
const IDLE_WORKLOAD: &str = r#"{
  "global": { "duration": -1, "calibration": "CPU0", "default_policy": "SCHED_OTHER" },
  "tasks": { "sleeper": { "loop": 1, "phases": { "p0": { "sleep": 3600000000 } } } }
}
"#;

// One function per measurement: when asym gains the benchmark, its number plugs in here.
// The two round-trip rows take `bench switch`'s `wait_wake_same_cpu` and
// `wait_wake_cross_cpu` `per_op_ns`: a wait/wake round trip between two kernel threads through
// two completions is the pipe ping-pong's scheduler work (two wake-ups and two switches)
// without the pipe and system-call code. asym's pair runs on its two highest-numbered CPUs;
// under -icount the count does not depend on which CPUs (instructions, not cycles).

fn asym_round_trip(a: &AsymRuns, name: &str) -> Asym {
    match &a.switch {
        Ok(r) => match r.per_op(name) {
            Some(n) if r.ok => Asym::Value(n as f64),
            Some(_) => Asym::Failed("`bench=switch` did not end with status 0".into()),
            None => Asym::Failed(format!("`bench=switch` printed no `{name}` line")),
        },
        Err(e) => Asym::Failed(e.clone()),
    }
}

fn asym_same_cpu_round_trip(a: &AsymRuns) -> Asym {
    asym_round_trip(a, "wait_wake_same_cpu")
}

fn asym_cross_cpu_round_trip(a: &AsymRuns) -> Asym {
    asym_round_trip(a, "wait_wake_cross_cpu")
}

fn asym_rate(r: &Result<f64, String>) -> Asym {
    match r {
        Ok(v) => Asym::Value(*v),
        Err(e) => Asym::Failed(e.clone()),
    }
}

fn asym_sched_softirq_idle(a: &AsymRuns) -> Asym {
    asym_rate(&a.softirq_idle)
}

/// asym's load is `tests/workloads/cyclictest.json` (six threads pinned one per CPU, a 100 µs
/// timer and 5 µs of work each), Linux's `cyclictest -t6 -i100` (unpinned, nothing to do).
fn asym_sched_softirq_load(a: &AsymRuns) -> Asym {
    asym_rate(&a.softirq_load)
}

/// asym has no user tasks yet: its nearest point is its first thread, `init`, running with
/// every CPU online (`bench boot`'s `init_us`).
fn asym_boot(a: &AsymRuns) -> Asym {
    match &a.boot {
        Ok(b) => match (b.complete, b.bench.init_us) {
            (true, Some(us)) => Asym::Value(us as f64 * 1e3),
            _ => Asym::Failed(format!(
                "`bench boot` reported {} of {} CPUs{}",
                b.bench.cpus.len(),
                b.smp,
                if b.timed_out {
                    " before its timeout"
                } else {
                    ""
                }
            )),
        },
        Err(e) => Asym::Failed(e.clone()),
    }
}

fn asym_hackbench(_: &AsymRuns) -> Asym {
    Asym::NotMeasured(
        "no pipes or sockets in asym yet for hackbench's threads to send messages through".into(),
    )
}

/// The rows, from Linux's RESULT lines and asym's runs.
pub fn rows(linux: &BTreeMap<String, Fields>, p: &Params, a: &AsymRuns) -> Vec<Row> {
    vec![
        Row {
            what: format!(
                "same-CPU wake-up round trip (pipe ping-pong on CPU {}), guest instructions",
                p.cpu_a
            ),
            unit: Unit::Instructions,
            linux: round_trip_ns(linux, "pingpong_same"),
            asym: asym_same_cpu_round_trip(a),
        },
        Row {
            what: format!(
                "cross-CPU wake-up round trip (CPUs {} ↔ {}), guest instructions",
                p.cpu_a, p.cpu_b
            ),
            unit: Unit::Instructions,
            linux: round_trip_ns(linux, "pingpong_cross"),
            asym: asym_cross_cpu_round_trip(a),
        },
        Row {
            what: format!("SCHED softirqs per CPU per s, idle {} s", p.idle_s),
            unit: Unit::PerCpuSecond,
            linux: softirq_rate(linux, "softirq_idle", "sched"),
            asym: asym_sched_softirq_idle(a),
        },
        Row {
            what: format!(
                "SCHED softirqs per CPU per s, `cyclictest -t{} -i100` {} s",
                p.load_threads, p.load_s
            ),
            unit: Unit::PerCpuSecond,
            linux: softirq_rate(linux, "softirq_cyclictest", "sched"),
            asym: asym_sched_softirq_load(a),
        },
        Row {
            what: "boot: reset → first user task (Linux /init; asym: the init thread)".into(),
            unit: Unit::Millis,
            linux: boot_ns(linux),
            asym: asym_boot(a),
        },
        Row {
            what: format!(
                "`hackbench -T -p -g {} -l {}` ({} threads), guest time",
                p.hb_groups,
                p.hb_loops,
                p.hb_groups * 40
            ),
            unit: Unit::Millis,
            linux: hackbench_ns(linux),
            asym: asym_hackbench(a),
        },
    ]
}

// ---------------------------------------------------------------------------------------------
// The Linux guest: packages, initramfs

/// The unpacked packages.
#[derive(Debug)]
pub struct LinuxParts {
    /// The packages' files (`bin/busybox`, `usr/bin/cyclictest`, `lib/aarch64-linux-gnu/...`).
    pub root: PathBuf,
    /// The kernel's uncompressed arm64 `Image`.
    pub image: PathBuf,
    /// (package, version), the kernel first.
    pub packages: Vec<(String, String)>,
}

const NEEDED_FILES: &[&str] = &["bin/busybox", "usr/bin/cyclictest", "usr/bin/hackbench"];

/// Fetches (or reuses from `cache`) the kernel and the user-space packages.
pub fn fetch(cache: &Path) -> Result<LinuxParts> {
    let root = cache.join("root");
    let image = cache.join("Image");
    let stamp = cache.join("packages");
    if let Ok(text) = std::fs::read_to_string(&stamp) {
        let packages: Vec<(String, String)> = text
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(p, v)| (p.to_string(), v.to_string()))
            .collect();
        if packages.len() == PACKAGES.len() + 1
            && image.is_file()
            && NEEDED_FILES.iter().all(|f| root.join(f).is_file())
        {
            println!(
                "xtask: using {} cached in {}",
                packages
                    .iter()
                    .map(|(p, v)| format!("{p} {v}"))
                    .collect::<Vec<_>>()
                    .join(", "),
                cache.display()
            );
            return Ok(LinuxParts {
                root,
                image,
                packages,
            });
        }
    }
    let _ = std::fs::remove_file(&stamp);
    let apt = Apt::new(&cache.join("apt"))?;
    apt.update("Linux's packages for --vs-linux cannot be fetched")?;
    let kernel = apt.kernel_package()?;
    let debs = cache.join("debs");
    // Everything is downloaded before the old tree is removed: a failed refresh keeps it.
    let mut downloaded = Vec::new();
    for package in std::iter::once(kernel.as_str()).chain(PACKAGES.iter().copied()) {
        downloaded.push((package, apt.download(package, &debs)?));
    }
    if root.exists() {
        std::fs::remove_dir_all(&root)
            .with_context(|| format!("removing the old {}", root.display()))?;
    }
    let mut packages = Vec::new();
    for (package, deb) in downloaded {
        // The kernel package is ~60 MB with its modules: only its Image and config are needed.
        let members: Vec<String> = if package == kernel {
            vec!["./boot/vmlinuz-*".into(), "./boot/config-*".into()]
        } else {
            Vec::new()
        };
        debian::extract(&deb, &root, &members)?;
        packages.push((package.to_string(), debian::deb_version(&deb)));
        let _ = std::fs::remove_file(&deb);
    }
    let abi = kernel
        .strip_prefix("linux-image-")
        .unwrap_or(kernel.as_str());
    let vmlinuz = root.join("boot").join(format!("vmlinuz-{abi}"));
    let bytes = std::fs::read(&vmlinuz)
        .with_context(|| format!("{kernel} has no {}", vmlinuz.display()))?;
    let bytes = if bytes.starts_with(&[0x1f, 0x8b]) {
        gunzip(&vmlinuz)?
    } else {
        bytes
    };
    check_image(&bytes).with_context(|| format!("{} from {kernel}", vmlinuz.display()))?;
    std::fs::write(&image, &bytes).with_context(|| format!("writing {}", image.display()))?;
    let _ = std::fs::remove_file(&vmlinuz);
    for f in NEEDED_FILES {
        if !root.join(f).is_file() {
            bail!("{f} is not in the packages {PACKAGES:?}");
        }
    }
    let text: String = packages.iter().map(|(p, v)| format!("{p} {v}\n")).collect();
    std::fs::write(&stamp, text)?;
    Ok(LinuxParts {
        root,
        image,
        packages,
    })
}

fn gunzip(path: &Path) -> Result<Vec<u8>> {
    let mut c = Command::new("gzip");
    c.arg("-dc").arg(path);
    cmd::echo(&c);
    let out = c.output().context("starting gzip")?;
    if !out.status.success() {
        bail!(
            "gzip -dc {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out.stdout)
}

/// An arm64 Linux `Image`: `ARM\x64` at byte 56 (Linux's `Documentation/arch/arm64/booting`).
fn check_image(bytes: &[u8]) -> Result<()> {
    if bytes.get(56..60) != Some(b"ARM\x64") {
        bail!("not an arm64 Image (no ARM\\x64 magic at byte 56)");
    }
    Ok(())
}

/// A `newc` cpio archive, the initramfs format Linux unpacks (`Documentation/
/// driver-api/early-userspace/buffer-format.rst`): a 110-byte ASCII header per entry, the
/// NUL-terminated name and the data each padded to 4 bytes, a `TRAILER!!!` entry last.
#[derive(Debug, Default)]
pub struct Cpio {
    buf: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        self.ino += 1;
        let nlink = if mode & 0o170000 == 0o040000 { 2 } else { 1 };
        let fields = [
            self.ino,
            mode,
            0,
            0,
            nlink,
            0,
            data.len() as u32,
            0,
            0,
            rdev.0,
            rdev.1,
            name.len() as u32 + 1,
            0,
        ];
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    pub fn dir(&mut self, name: &str) {
        self.entry(name, 0o040755, (0, 0), &[]);
    }

    pub fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, 0o100000 | perm, (0, 0), data);
    }

    pub fn symlink(&mut self, name: &str, target: &str) {
        self.entry(name, 0o120777, (0, 0), target.as_bytes());
    }

    pub fn char_dev(&mut self, name: &str, perm: u32, major: u32, minor: u32) {
        self.entry(name, 0o020000 | perm, (major, minor), &[]);
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        self.buf
    }
}

/// The `DT_NEEDED` sonames and the `PT_INTERP` path of an ELF (both empty for a static one).
pub fn dynamic_deps(elf: &[u8]) -> Result<(Vec<String>, Option<String>)> {
    use object::read::elf::{Dyn, FileHeader, ProgramHeader};
    let h = object::elf::FileHeader64::<object::Endianness>::parse(elf)
        .map_err(|e| anyhow::anyhow!("not a 64-bit ELF: {e}"))?;
    let endian = h.endian().map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut interp = None;
    for ph in h
        .program_headers(endian, elf)
        .map_err(|e| anyhow::anyhow!("program headers: {e}"))?
    {
        if let Some(i) = ph
            .interpreter(endian, elf)
            .map_err(|e| anyhow::anyhow!("PT_INTERP: {e}"))?
        {
            interp = Some(String::from_utf8_lossy(i).into_owned());
        }
    }
    let sections = h
        .sections(endian, elf)
        .map_err(|e| anyhow::anyhow!("section headers: {e}"))?;
    let mut needed = Vec::new();
    if let Some((dyns, link)) = sections
        .dynamic(endian, elf)
        .map_err(|e| anyhow::anyhow!("dynamic section: {e}"))?
    {
        let strings = sections
            .strings(endian, elf, link)
            .map_err(|e| anyhow::anyhow!("dynamic string table: {e}"))?;
        for d in dyns {
            if d.tag32(endian) == Some(object::elf::DT_NEEDED) {
                let name = d
                    .string(endian, strings)
                    .map_err(|e| anyhow::anyhow!("DT_NEEDED name: {e}"))?;
                needed.push(String::from_utf8_lossy(name).into_owned());
            }
        }
    }
    Ok((needed, interp))
}

const LIB_DIRS: &[&str] = &["lib/aarch64-linux-gnu", "usr/lib/aarch64-linux-gnu"];
/// Where the initramfs keeps every library (the script sets `LD_LIBRARY_PATH` to it).
const LIB: &str = "lib/aarch64-linux-gnu";

/// The shared libraries `bins` need, transitively: soname → file under `root`.
fn library_closure(root: &Path, bins: &[&str]) -> Result<BTreeMap<String, PathBuf>> {
    let mut libs: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut todo: Vec<(String, String)> = Vec::new();
    for b in bins {
        let bytes = std::fs::read(root.join(b))
            .with_context(|| format!("reading {b} from the packages"))?;
        let (needed, interp) = dynamic_deps(&bytes).with_context(|| format!("reading {b}"))?;
        if let Some(i) = interp {
            if i != "/lib/ld-linux-aarch64.so.1" {
                bail!("{b} wants the dynamic linker {i}; the initramfs has /lib/ld-linux-aarch64.so.1");
            }
        }
        todo.extend(needed.into_iter().map(|n| (n, b.to_string())));
    }
    while let Some((soname, by)) = todo.pop() {
        if libs.contains_key(&soname) {
            continue;
        }
        let path = LIB_DIRS
            .iter()
            .map(|d| root.join(d).join(&soname))
            .find(|p| p.exists())
            .with_context(|| {
                format!(
                    "{by} needs {soname}, which none of the packages {PACKAGES:?} has (in {})",
                    LIB_DIRS.join(", ")
                )
            })?;
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        let (needed, _) = dynamic_deps(&bytes).with_context(|| format!("reading {soname}"))?;
        todo.extend(needed.into_iter().map(|n| (n, soname.clone())));
        libs.insert(soname, path);
    }
    Ok(libs)
}

/// The initramfs: `/init` (the probe), `/bench.sh`, busybox and its applets, cyclictest,
/// hackbench and their libraries, `/dev/console`.
pub fn initramfs(parts: &LinuxParts, probe: &[u8], script: &str) -> Result<Vec<u8>> {
    let root = &parts.root;
    let read = |rel: &str| {
        std::fs::read(root.join(rel)).with_context(|| format!("reading {rel} from the packages"))
    };
    let mut c = Cpio::default();
    for d in [
        "bin", "dev", "proc", "sys", "tmp", "root", "lib", LIB, "usr", "usr/bin",
    ] {
        c.dir(d);
    }
    c.char_dev("dev/console", 0o600, 5, 1);
    c.file("init", 0o755, probe);
    c.file(&format!("bin/{PROBE}"), 0o755, probe);
    c.file("bench.sh", 0o755, script.as_bytes());
    c.file("bin/busybox", 0o755, &read("bin/busybox")?);
    for a in APPLETS {
        c.symlink(&format!("bin/{a}"), "busybox");
    }
    let tools = ["usr/bin/cyclictest", "usr/bin/hackbench"];
    for t in tools {
        c.file(t, 0o755, &read(t)?);
    }
    for (soname, path) in library_closure(root, &tools)? {
        let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
        c.file(&format!("{LIB}/{soname}"), 0o755, &bytes);
    }
    c.symlink(
        "lib/ld-linux-aarch64.so.1",
        "aarch64-linux-gnu/ld-linux-aarch64.so.1",
    );
    Ok(c.finish())
}

/// Builds the probe for the bare-metal target (it needs no C library) and returns its bytes.
fn build_probe() -> Result<Vec<u8>> {
    kernel::ensure_target()?;
    cmd::run(cmd::cargo().args([
        "build",
        "--release",
        "-p",
        PROBE,
        "--target",
        kernel::TARGET,
    ]))?;
    let path = cmd::target_dir()
        .join(kernel::TARGET)
        .join("release")
        .join(PROBE);
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let (needed, interp) = dynamic_deps(&bytes)?;
    if !needed.is_empty() || interp.is_some() {
        bail!("{} is not a static executable", path.display());
    }
    Ok(bytes)
}

// ---------------------------------------------------------------------------------------------
// The run

pub fn run(o: &VsLinuxOpts) -> Result<ExitCode> {
    let started = Instant::now();
    let mut machine = o.machine.clone();
    if let Some(n) = o.board.nr_cpus() {
        // As `bench boot`: 6 is --smp's default, so the board's own CPU count wins.
        if machine.smp == 6 || machine.smp > n {
            machine.smp = n;
        }
    }
    let p = Params::new(o.quick, machine.smp);
    let cache = cmd::target_dir().join("vs-linux");

    println!("== Linux: packages");
    let parts = fetch(&cache)?;
    println!("== Linux: initramfs");
    let probe = build_probe()?;
    let cpio = initramfs(&parts, &probe, &p.script())?;
    let initrd = cache.join(if o.quick {
        "initramfs-quick.cpio"
    } else {
        "initramfs.cpio"
    });
    if std::fs::read(&initrd).ok().as_deref() == Some(&cpio[..]) {
        println!("xtask: {} is up to date", initrd.display());
    } else {
        std::fs::write(&initrd, &cpio).with_context(|| format!("writing {}", initrd.display()))?;
        println!(
            "xtask: {} ({} KiB)",
            initrd.display(),
            cpio.len().div_ceil(1024)
        );
    }

    let mut m = machine.machine(
        Boot::Direct {
            image: parts.image.clone(),
        },
        LINUX_APPEND,
        true,
        false,
    );
    m.icount = Some(ICOUNT.into());
    if let Some(path) = dtb::board_dtb(o.board, &mut m, &cache)? {
        m.extra.push("-dtb".into());
        m.extra.push(path.display().to_string());
    }
    m.extra.push("-initrd".into());
    m.extra.push(initrd.display().to_string());
    let timeout = o.timeout.unwrap_or_else(|| p.timeout());
    println!(
        "== Linux: {} on QEMU virt as {}, {} vCPUs, -icount {ICOUNT} (timeout {} s)",
        parts.packages[0].0,
        o.board.name(),
        machine.smp,
        timeout.as_secs()
    );
    let linux_started = Instant::now();
    let out = qemu::run(
        m.command(),
        None,
        &RunOpts {
            timeout: Some(timeout),
            prefix: "linux| ".into(),
            echo: true,
            stop_when: Some(is_done),
            ..Default::default()
        },
    )?;
    let linux_wall = linux_started.elapsed();
    let results = parse_results(out.lines.iter().map(String::as_str));
    let mut problems = Vec::new();
    if out.timed_out {
        problems.push(format!(
            "Linux did not print `RESULT bench=done` within {} s (QEMU hang, or a host too \
             loaded: --timeout); QEMU killed",
            timeout.as_secs()
        ));
    } else if !out.stopped {
        problems.push(format!(
            "QEMU ended ({}) before `RESULT bench=done`: Linux panicked or /init failed (see \
             the `linux|` lines above)",
            out.status
                .map(|s| s.to_string())
                .unwrap_or_else(|| "no status".into())
        ));
    }

    println!(
        "== asym: cargo xtask bench boot --board {} with -icount {ICOUNT}",
        o.board.name()
    );
    let asym_started = Instant::now();
    let boot = bench::boot_measure(&o.machine, o.board, Duration::from_secs(120), "", ICOUNT)
        .map_err(|e| format!("{e:#}"));
    println!(
        "== asym: cargo xtask bench switch --board {} (-icount shift=0)",
        o.board.name()
    );
    let switch = bench::switch_measure(&o.machine, o.board, Duration::from_secs(300), false)
        .map_err(|e| format!("{e:#}"));
    let idle_json = cache.join("asym-idle.json");
    std::fs::write(&idle_json, IDLE_WORKLOAD)
        .with_context(|| format!("writing {}", idle_json.display()))?;
    println!(
        "== asym: SCHED_SOFTIRQ idle {} s and under tests/workloads/cyclictest.json {} s (-icount {ICOUNT})",
        p.idle_s, p.load_s
    );
    let softirq_idle = asym_softirq_run(o, &idle_json, p.idle_s);
    let softirq_load = asym_softirq_run(
        o,
        &cmd::workspace_root().join("tests/workloads/cyclictest.json"),
        p.load_s,
    );
    let asym_wall = asym_started.elapsed();
    let asym = AsymRuns {
        boot,
        switch,
        softirq_idle,
        softirq_load,
    };

    let rows = rows(&results, &p, &asym);
    println!();
    println!(
        "Linux side by side: QEMU virt as {}, {} vCPUs ({}), GICv{}, {} MiB, -icount {ICOUNT}; \
         {}{}",
        o.board.name(),
        machine.smp,
        machine.cpu,
        machine.gic,
        machine.memory,
        parts
            .packages
            .iter()
            .map(|(p, v)| format!("{p} {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        if o.quick { "; --quick" } else { "" }
    );
    println!();
    print!("{}", render_table(&rows));
    println!();
    for (name, row) in [("softirq_idle", "timer"), ("softirq_cyclictest", "timer")] {
        if let Ok(v) = softirq_rate(&results, name, row) {
            println!("Linux {name}: TIMER softirqs {v:.2} per CPU per s");
        }
    }
    if let Some(f) = results.get("kernel") {
        let get = |k: &str| f.get(k).map_or("?", |s| s.as_str());
        println!(
            "Linux kernel {}: {} CPUs, cpu_capacity {}, cpufreq {}",
            get("release"),
            get("cpus"),
            get("capacity"),
            get("cpufreq")
        );
    }
    if let Some(f) = results.get("domains") {
        let mut cpus: Vec<(&String, &String)> = f
            .iter()
            .filter(|(k, _)| k.starts_with("cpu") || k.as_str() == "error")
            .collect();
        cpus.sort_by_key(|(k, _)| k.trim_start_matches("cpu").parse::<u32>().unwrap_or(0));
        let list: Vec<String> = cpus.iter().map(|(k, v)| format!("{k} {v}")).collect();
        println!(
            "Linux sched domains (name:min-max interval ms, lowest first): {}",
            list.join(", ")
        );
    }
    println!(
        "wall time: Linux boot {:.0} s, asym boot {:.0} s, total {:.0} s",
        linux_wall.as_secs_f64(),
        asym_wall.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    for r in &rows {
        if let Err(e) = &r.linux {
            problems.push(format!("Linux, {}: {e}", r.what));
        }
        if let Asym::Failed(e) = &r.asym {
            problems.push(format!("asym, {}: {e}", r.what));
        }
    }
    if problems.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    for p in &problems {
        println!("xtask: {p}");
    }
    Ok(ExitCode::FAILURE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines() -> Vec<&'static str> {
        vec![
            "[    0.000000] Booting Linux on physical CPU 0x0000000000 [0x410fd083]",
            "RESULT bench=boot counter_ticks=62500000 counter_hz=62500000 monotonic_ns=12",
            "\rRESULT bench=softirq_idle ns=2000000000 sched_before=1,2,3 sched_after=5,2,7 \
             timer_before=0,0,0 timer_after=3,3,0",
            "RESULT bench=pingpong_same cpu_a=0 cpu_b=0 rounds=1000 ns=16000000",
            "RESULT bench=pingpong_cross error=exit_status_1",
            "RESULT bench=hackbench groups=4 loops=20 seconds=0.250 outer_ns=300000000",
            "RESULT bench= oops",
            "RESULT bench=odd x=1 novalue y=",
            "RESULT bench=done",
        ]
    }

    #[test]
    fn result_lines_are_parsed_by_name() {
        let r = parse_results(lines());
        assert_eq!(
            r.keys().collect::<Vec<_>>(),
            [
                "boot",
                "done",
                "hackbench",
                "odd",
                "pingpong_cross",
                "pingpong_same",
                "softirq_idle"
            ]
        );
        assert_eq!(r["odd"]["x"], "1");
        assert_eq!(r["odd"]["y"], "");
        assert!(!r["odd"].contains_key("novalue"));
        assert_eq!(r["softirq_idle"]["sched_after"], "5,2,7");
        assert!(is_done(lines()[8]));
        assert!(!is_done(lines()[1]));
        // A later line of the same name wins.
        let r = parse_results(["RESULT bench=a v=1", "RESULT bench=a v=2"]);
        assert_eq!(r["a"]["v"], "2");
    }

    #[test]
    fn measurements_are_derived_from_the_fields() {
        let r = parse_results(lines());
        assert_eq!(round_trip_ns(&r, "pingpong_same"), Ok(16_000.0));
        // (4 + 0 + 4) / 3 CPUs / 2 s.
        let rate = softirq_rate(&r, "softirq_idle", "sched").unwrap();
        assert!((rate - 8.0 / 3.0 / 2.0).abs() < 1e-9, "{rate}");
        assert_eq!(softirq_rate(&r, "softirq_idle", "timer"), Ok(1.0));
        assert_eq!(boot_ns(&r), Ok(1e9));
        assert_eq!(hackbench_ns(&r), Ok(0.25e9));
        let e = round_trip_ns(&r, "pingpong_cross").unwrap_err();
        assert!(e.contains("error=exit_status_1"), "{e}");
        let e = softirq_rate(&r, "softirq_cyclictest", "sched").unwrap_err();
        assert!(
            e.contains("no `RESULT bench=softirq_cyclictest` line"),
            "{e}"
        );
    }

    #[test]
    fn malformed_fields_are_errors_naming_the_field() {
        let r = parse_results([
            "RESULT bench=s ns=10 sched_before=1,2 sched_after=1",
            "RESULT bench=t ns=10 sched_before=1,x sched_after=1,2",
            "RESULT bench=u ns=10 sched_before=5 sched_after=4",
            "RESULT bench=pingpong_same rounds=0 ns=5",
            "RESULT bench=boot counter_ticks=abc counter_hz=1",
        ]);
        assert!(softirq_rate(&r, "s", "sched")
            .unwrap_err()
            .contains("2 CPUs before, 1 after"));
        assert!(softirq_rate(&r, "t", "sched")
            .unwrap_err()
            .contains("\"x\" is not a count"));
        assert!(softirq_rate(&r, "u", "sched")
            .unwrap_err()
            .contains("went down"));
        assert!(softirq_rate(&r, "s", "timer")
            .unwrap_err()
            .contains("no timer_before="));
        assert!(round_trip_ns(&r, "pingpong_same")
            .unwrap_err()
            .contains("rounds=0"));
        assert!(boot_ns(&r).unwrap_err().contains("counter_ticks=\"abc\""));
    }

    #[test]
    fn table_shows_ratios_only_where_both_sides_measured() {
        let rows = vec![
            Row {
                what: "a".into(),
                unit: Unit::Instructions,
                linux: Ok(16_000.0),
                asym: Asym::Value(2_000.0),
            },
            Row {
                what: "b".into(),
                unit: Unit::PerCpuSecond,
                linux: Ok(1.28),
                asym: Asym::NotMeasured("no balancer".into()),
            },
            Row {
                what: "c".into(),
                unit: Unit::Millis,
                linux: Err("no `RESULT bench=boot` line".into()),
                asym: Asym::Value(10e6),
            },
            Row {
                what: "d".into(),
                unit: Unit::Millis,
                linux: Ok(0.0),
                asym: Asym::Value(1.0),
            },
            Row {
                what: "e".into(),
                unit: Unit::Millis,
                linux: Ok(2e6),
                asym: Asym::NotMeasured("no balancer".into()),
            },
        ];
        assert_eq!(rows[0].ratio(), Some(0.125));
        assert_eq!(rows[1].ratio(), None);
        assert_eq!(rows[2].ratio(), None);
        assert_eq!(rows[3].ratio(), None, "a zero Linux value gives no ratio");
        let t = render_table(&rows);
        let want = "\
| measure | Linux 6.1 | asym | asym / Linux |
|---|---:|---:|---:|
| a | 16,000 | 2,000 | 0.125 |
| b | 1.28 | not measured yet [1] | — |
| c | missing [2] | 10.00 ms | — |
| d | 0.00 ms | 0.00 ms | — |
| e | 2.00 ms | not measured yet [1] | — |

[1] no balancer
[2] no `RESULT bench=boot` line
";
        assert_eq!(t, want);
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1_000), "1,000");
        assert_eq!(group(1_234_567), "1,234,567");
    }

    #[test]
    fn asym_boot_uses_init_only_when_complete() {
        let mut b = bench::BootBench::default();
        b.cpus.insert(0, (Some(1), Some(2)));
        b.all_online_us = Some(5);
        b.init_us = Some(7);
        let run = |complete| AsymRuns {
            switch: Err("not run".into()),
            boot: Ok(BootRun {
                bench: b.clone(),
                smp: 1,
                icount: ICOUNT.into(),
                complete,
                timed_out: false,
                stopped: true,
            }),
            softirq_idle: Err("not run".into()),
            softirq_load: Err("not run".into()),
        };
        assert_eq!(asym_boot(&run(true)), Asym::Value(7_000.0));
        assert!(matches!(asym_boot(&run(false)), Asym::Failed(e) if e.contains("1 of 1 CPUs")));
        let failed = AsymRuns {
            boot: Err("no `bench boot` lines".into()),
            switch: Err("not run".into()),
            softirq_idle: Err("not run".into()),
            softirq_load: Err("not run".into()),
        };
        assert!(matches!(asym_boot(&failed), Asym::Failed(_)));
    }

    #[test]
    fn asym_round_trips_come_from_bench_switch_lines() {
        let line = |name: &str, per_op_ns| bench::SwitchLine {
            name: name.into(),
            n: 10,
            total_ns: per_op_ns * 10,
            per_op_ns,
            switches: None,
        };
        let run = |ok| AsymRuns {
            boot: Err("not run".into()),
            switch: Ok(bench::SwitchRun {
                lines: vec![
                    line("yield_same_cpu", 3_000),
                    line("wait_wake_same_cpu", 9_000),
                    line("wait_wake_cross_cpu", 11_000),
                ],
                smp: 6,
                ok,
                timed_out: false,
            }),
            softirq_idle: Ok(1.5),
            softirq_load: Err("QEMU killed".into()),
        };
        assert_eq!(asym_same_cpu_round_trip(&run(true)), Asym::Value(9_000.0));
        assert_eq!(asym_cross_cpu_round_trip(&run(true)), Asym::Value(11_000.0));
        assert!(
            matches!(asym_same_cpu_round_trip(&run(false)), Asym::Failed(e) if e.contains("status"))
        );
        let mut missing = run(true);
        if let Ok(r) = &mut missing.switch {
            r.lines.retain(|l| l.name != "wait_wake_cross_cpu");
        }
        assert!(
            matches!(asym_cross_cpu_round_trip(&missing), Asym::Failed(e) if e.contains("wait_wake_cross_cpu"))
        );
        assert!(matches!(asym_same_cpu_round_trip(&AsymRuns {
            boot: Err("not run".into()),
            switch: Err("QEMU failed".into()),
            softirq_idle: Err("not run".into()),
            softirq_load: Err("not run".into()),
        }), Asym::Failed(e) if e == "QEMU failed"));
        assert_eq!(asym_sched_softirq_idle(&run(true)), Asym::Value(1.5));
        assert!(
            matches!(asym_sched_softirq_load(&run(true)), Asym::Failed(e) if e == "QEMU killed")
        );
    }

    #[test]
    fn softirq_line_is_the_mean_per_cpu_per_second() {
        let l = |s: &str| vec!["boot".to_string(), s.to_string()];
        let v = parse_softirq_line(&l(
            "rtapp: SCHED_SOFTIRQ raised per CPU: 10 20 30 40 over 2000 ms",
        ))
        .unwrap();
        assert!((v - 12.5).abs() < 1e-9, "{v}");
        assert!(parse_softirq_line(&l("rtapp: energy 5 uJ")).is_err());
        assert!(
            parse_softirq_line(&l("rtapp: SCHED_SOFTIRQ raised per CPU: 1 x over 1 ms")).is_err()
        );
        assert!(parse_softirq_line(&l("rtapp: SCHED_SOFTIRQ raised per CPU: 1 2")).is_err());
        assert!(parse_softirq_line(&l("rtapp: SCHED_SOFTIRQ raised per CPU: over 10 ms")).is_err());
    }

    /// The archive read back by the rules of the newc format.
    #[test]
    fn cpio_entries_follow_the_newc_layout() {
        let mut c = Cpio::default();
        c.dir("bin");
        c.file("bin/x", 0o755, b"hello");
        c.symlink("bin/sh", "busybox");
        c.char_dev("dev/console", 0o600, 5, 1);
        let a = c.finish();
        assert_eq!(a.len() % 4, 0);
        let mut at = 0;
        let mut seen = Vec::new();
        loop {
            let h = &a[at..at + 110];
            assert_eq!(&h[..6], b"070701");
            let f = |i: usize| {
                u32::from_str_radix(std::str::from_utf8(&h[6 + 8 * i..14 + 8 * i]).unwrap(), 16)
                    .unwrap()
            };
            let (mode, size, rmaj, rmin, namesize) = (f(1), f(6), f(9), f(10), f(11));
            let name_end = at + 110 + namesize as usize;
            assert_eq!(a[name_end - 1], 0, "name is NUL-terminated");
            let name = std::str::from_utf8(&a[at + 110..name_end - 1])
                .unwrap()
                .to_string();
            let data_at = name_end.div_ceil(4) * 4;
            let data = a[data_at..data_at + size as usize].to_vec();
            at = (data_at + size as usize).div_ceil(4) * 4;
            seen.push((name.clone(), mode, data, rmaj, rmin));
            if name == "TRAILER!!!" {
                break;
            }
        }
        assert_eq!(at, a.len());
        assert_eq!(seen[0].0, "bin");
        assert_eq!(seen[0].1, 0o040755);
        assert_eq!(seen[1], ("bin/x".into(), 0o100755, b"hello".to_vec(), 0, 0));
        assert_eq!(
            seen[2],
            ("bin/sh".into(), 0o120777, b"busybox".to_vec(), 0, 0)
        );
        assert_eq!(seen[3], ("dev/console".into(), 0o020600, vec![], 5, 1));
        assert_eq!(seen.len(), 5);
    }

    #[test]
    fn script_starts_with_its_parameters() {
        let p = Params::new(true, 6);
        assert_eq!((p.cpu_a, p.cpu_b, p.load_threads), (0, 1, 6));
        assert_eq!(Params::new(false, 1).cpu_b, 0);
        let s = p.script();
        assert!(s.starts_with("#!/bin/sh\nIDLE_S=2\nLOAD_S=2\nLOAD_THREADS=6\nROUNDS=2000\n"));
        assert!(s.contains("RESULT bench=done"));
        assert!(Params::new(false, 6).timeout() > p.timeout());
    }

    #[test]
    fn image_magic_is_checked() {
        let mut img = vec![0u8; 64];
        assert!(check_image(&img).is_err());
        img[56..60].copy_from_slice(b"ARM\x64");
        assert!(check_image(&img).is_ok());
        assert!(check_image(&img[..40]).is_err());
    }
}
