//! `cargo xtask bench switch --profile`: where the instructions of one round trip go, by
//! function, without TCG plugins (QEMU 7.2 has none here).
//!
//! The kernel boots with `bench=switch-profile` (kernel/src/bench.rs): the round-trip rows of
//! `bench=switch` with a few hundred round trips each, each row's window between two calls of
//! `asym_bench_profile_mark`. QEMU runs under `-icount shift=0` as the switch bench does, with
//! `-singlestep` (one guest instruction per translation block) and `-d exec,nochain` (every
//! block logged as it runs), so each `Trace <cpu>: ... [<cs_base>/<pc>/...]` line is one
//! instruction of one vCPU. The log goes through a FIFO to a reader thread that counts, for
//! every window, the instructions of all CPUs by PC (the switch bench's counts are for all
//! CPUs together too); the PCs are then mapped to the kernel ELF's function symbols.
//!
//! What the counts are not: the instructions of a rewound I/O access (`cpu_io_recompile`) are
//! subtracted once, but an instruction that takes a synchronous exception (an `svc`, a fault)
//! counts once as it would on hardware; functions are symbols after inlining, so an inlined
//! helper counts in its caller.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use object::{Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind};

use crate::qemu::{self, RunOpts};

/// One window's counts: instructions by PC and by vCPU.
#[derive(Debug, Default)]
pub struct Window {
    pub by_pc: HashMap<u64, u64>,
    pub by_cpu: HashMap<u32, u64>,
    pub total: u64,
}

/// What the reader found in QEMU's log: one entry per pair of marks, in order.
#[derive(Debug, Default)]
pub struct LogCounts {
    pub windows: Vec<Window>,
    /// Instructions logged in all (inside and outside the windows).
    pub lines: u64,
}

/// Parses one `-d exec` line: `Trace <cpu>: <host ptr> [<cs_base>/<pc>/<flags>/<cflags>] ...`
/// → (cpu, pc).
pub fn parse_trace(line: &[u8]) -> Option<(u32, u64)> {
    let rest = line.strip_prefix(b"Trace ")?;
    let colon = rest.iter().position(|&b| b == b':')?;
    let cpu = std::str::from_utf8(&rest[..colon]).ok()?.parse().ok()?;
    let open = rest.iter().position(|&b| b == b'[')?;
    let fields = &rest[open + 1..];
    let slash = fields.iter().position(|&b| b == b'/')?;
    let fields = &fields[slash + 1..];
    let end = fields.iter().position(|&b| b == b'/' || b == b']')?;
    let pc = u64::from_str_radix(std::str::from_utf8(&fields[..end]).ok()?, 16).ok()?;
    Some((cpu, pc))
}

/// `cpu_io_recompile: rewound execution of TB to <pc>` → pc: that instruction runs (and is
/// logged) again.
fn parse_rewound(line: &[u8]) -> Option<u64> {
    let rest = line.strip_prefix(b"cpu_io_recompile: rewound execution of TB to ")?;
    let s = std::str::from_utf8(rest).ok()?.trim();
    u64::from_str_radix(s, 16).ok()
}

/// Counts the instructions between each pair of executions of `mark` (the first of a pair
/// opens a window, the second closes it).
pub fn count_log(log: impl BufRead, mark: u64) -> Result<LogCounts> {
    let mut out = LogCounts::default();
    let mut open = false;
    let mut log = log;
    let mut line = Vec::with_capacity(256);
    // The vCPU of the last instruction logged: the one whose access a rewind repeats.
    let mut last_cpu = 0;
    loop {
        line.clear();
        if log.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        if let Some((cpu, pc)) = parse_trace(&line) {
            out.lines += 1;
            last_cpu = cpu;
            if pc == mark {
                open = !open;
                if open {
                    out.windows.push(Window::default());
                }
                continue;
            }
            if open {
                let w = out.windows.last_mut().expect("an open window");
                *w.by_pc.entry(pc).or_default() += 1;
                *w.by_cpu.entry(cpu).or_default() += 1;
                w.total += 1;
            }
        } else if let (Some(pc), true) = (parse_rewound(&line), open) {
            let w = out.windows.last_mut().expect("an open window");
            if let Some(n) = w.by_pc.get_mut(&pc).filter(|n| **n > 0) {
                *n -= 1;
                w.total -= 1;
                if let Some(c) = w.by_cpu.get_mut(&last_cpu) {
                    *c = c.saturating_sub(1);
                }
            }
        }
    }
    Ok(out)
}

/// The kernel ELF's function symbols, sorted by address, demangled.
pub struct Symbols {
    /// (start, end, name); `end` is `start` when the symbol has no size.
    funcs: Vec<(u64, u64, String)>,
}

impl Symbols {
    pub fn load(elf: &Path) -> Result<Symbols> {
        let bytes = std::fs::read(elf).with_context(|| format!("reading {}", elf.display()))?;
        let file = object::File::parse(&*bytes).context("parsing the kernel ELF")?;
        // Functions, and the labels of assembly (untyped symbols in an executable section,
        // such as `__asym_cpu_switch_to`); not the ELF's `$x`/`$d` mapping symbols.
        let in_text = |s: &object::Symbol<'_, '_>| {
            s.section_index()
                .and_then(|i| file.section_by_index(i).ok())
                .is_some_and(|sec| sec.kind() == SectionKind::Text)
        };
        let mut funcs: Vec<(u64, u64, String)> = file
            .symbols()
            .filter(|s| {
                s.address() != 0
                    && (s.kind() == SymbolKind::Text
                        || (s.kind() == SymbolKind::Unknown && in_text(s)))
                    && !s.name().is_ok_and(|n| n.starts_with('$'))
            })
            .filter_map(|s| {
                let name = s.name().ok()?;
                Some((s.address(), s.address() + s.size(), demangle(name)))
            })
            .collect();
        funcs.sort_by_key(|f| (f.0, std::cmp::Reverse(f.1)));
        funcs.dedup_by_key(|f| f.0);
        Ok(Symbols { funcs })
    }

    /// The address of the first function whose name contains `needle`.
    pub fn find(&self, needle: &str) -> Option<u64> {
        self.funcs
            .iter()
            .find(|f| f.2.contains(needle))
            .map(|f| f.0)
    }

    /// The function holding `pc` (the nearest symbol at or below it); past the end of a
    /// sized symbol (assembly after it with no symbol of its own), that symbol's name with
    /// `+` appended.
    pub fn lookup(&self, pc: u64) -> String {
        let i = self.funcs.partition_point(|f| f.0 <= pc);
        match i.checked_sub(1).map(|i| &self.funcs[i]) {
            Some((start, end, name)) if end == start || pc < *end => name.clone(),
            Some((_, _, name)) => format!("{name}+"),
            None => "?".into(),
        }
    }
}

/// A legacy Rust symbol (`_ZN<len><ident>...17h<hash>E`) as a path without its hash; other
/// names unchanged.
pub fn demangle(name: &str) -> String {
    let Some(mut rest) = name.strip_prefix("_ZN") else {
        return name.to_string();
    };
    let mut parts: Vec<String> = Vec::new();
    while let Some(len_end) = rest.find(|c: char| !c.is_ascii_digit()) {
        if len_end == 0 {
            break;
        }
        let Ok(len) = rest[..len_end].parse::<usize>() else {
            break;
        };
        let Some(ident) = rest.get(len_end..len_end + len) else {
            break;
        };
        rest = &rest[len_end + len..];
        let is_hash = ident.len() == 17
            && ident.starts_with('h')
            && ident[1..].chars().all(|c| c.is_ascii_hexdigit());
        if !is_hash {
            parts.push(unescape(ident));
        }
    }
    if parts.is_empty() {
        return name.to_string();
    }
    parts.join("::")
}

fn unescape(ident: &str) -> String {
    let ident = ident
        .strip_prefix('_')
        .filter(|s| s.starts_with('$'))
        .unwrap_or(ident);
    let mut s = ident.replace("..", "::");
    for (from, to) in [
        ("$LT$", "<"),
        ("$GT$", ">"),
        ("$RF$", "&"),
        ("$BP$", "*"),
        ("$C$", ","),
        ("$SP$", "@"),
        ("$u20$", " "),
        ("$u27$", "'"),
        ("$u5b$", "["),
        ("$u5d$", "]"),
        ("$u7b$", "{"),
        ("$u7d$", "}"),
        ("$u7e$", "~"),
    ] {
        s = s.replace(from, to);
    }
    s
}

/// One row's profile: its name, round trips and instructions by function, most first.
pub struct RowProfile {
    pub name: String,
    pub n: u64,
    pub total: u64,
    pub by_cpu: Vec<(u32, u64)>,
    pub by_func: Vec<(String, u64)>,
}

/// The `bench profile <name> n=<n>` lines of the kernel's console, in order.
pub fn parse_rows<'a>(lines: impl IntoIterator<Item = &'a str>) -> Vec<(String, u64)> {
    lines
        .into_iter()
        .filter_map(|l| {
            let (_, rest) = l.split_once("bench profile ")?;
            let mut it = rest.split_whitespace();
            let name = it.next()?;
            let n = it.next()?.strip_prefix("n=")?.parse().ok()?;
            Some((name.to_string(), n))
        })
        .collect()
}

/// Each window's PCs by function.
pub fn profiles(rows: &[(String, u64)], counts: &LogCounts, syms: &Symbols) -> Vec<RowProfile> {
    rows.iter()
        .zip(&counts.windows)
        .map(|((name, n), w)| {
            let mut by: HashMap<String, u64> = HashMap::new();
            for (&pc, &c) in &w.by_pc {
                *by.entry(syms.lookup(pc)).or_default() += c;
            }
            let mut by_func: Vec<(String, u64)> = by.into_iter().collect();
            by_func.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let mut by_cpu: Vec<(u32, u64)> = w.by_cpu.iter().map(|(&c, &n)| (c, n)).collect();
            by_cpu.sort();
            RowProfile {
                name: name.clone(),
                n: *n,
                total: w.total,
                by_cpu,
                by_func,
            }
        })
        .collect()
}

/// Unblocks a reader still waiting in `open` for QEMU to open the FIFO (QEMU failed to
/// start): opening its write end non-blocking succeeds only while a reader waits, and closing
/// it gives that reader end of file.
fn unblock_reader(fifo: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    const O_NONBLOCK: i32 = 0o4000;
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(O_NONBLOCK)
        .open(fifo);
}

/// `cargo xtask bench switch --profile`: prints each round-trip row's instructions per round
/// trip by function (the `top` largest).
pub fn switch_profile(
    machine: &crate::MachineArgs,
    board: crate::dtb::Board,
    timeout: Duration,
    top: usize,
    pcs: Option<&Path>,
) -> Result<ExitCode> {
    let crate::bench::BenchBoot {
        machine: mut m,
        defmt,
        smp,
        elf,
    } = crate::bench::bench_boot(machine, board, "bench=switch-profile", "shift=0,sleep=off")?;
    let syms = Symbols::load(&elf)?;
    let Some(mark) = syms.find("asym_bench_profile_mark") else {
        bail!("no asym_bench_profile_mark in {}", elf.display());
    };
    let dir: PathBuf = elf
        .parent()
        .unwrap_or(Path::new("."))
        .join("switch-profile");
    std::fs::create_dir_all(&dir)?;
    let fifo = dir.join("exec.fifo");
    let _ = std::fs::remove_file(&fifo);
    let st = Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .context("running mkfifo")?;
    if !st.success() {
        bail!("mkfifo {} failed", fifo.display());
    }
    m.extra.extend(
        [
            "-singlestep",
            "-d",
            "exec,nochain",
            "-D",
            &fifo.display().to_string(),
        ]
        .map(String::from),
    );
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || -> Result<LogCounts> {
            let f = std::fs::File::open(&fifo)
                .with_context(|| format!("opening {}", fifo.display()))?;
            count_log(BufReader::with_capacity(1 << 20, f), mark)
        })
    };
    let o = qemu::run(
        m.command(),
        defmt.as_ref(),
        &RunOpts {
            timeout: Some(timeout),
            echo: true,
            ..Default::default()
        },
    );
    unblock_reader(&fifo);
    let counts = reader
        .join()
        .map_err(|_| anyhow::anyhow!("the log reader panicked"))??;
    let _ = std::fs::remove_file(&fifo);
    let o = o?;
    let rows = parse_rows(o.lines.iter().map(String::as_str));
    if o.status.and_then(|s| s.code()) != Some(0) || rows.len() != counts.windows.len() {
        bail!(
            "the profile run did not complete: {} rows, {} windows (exit {:?}, timed out: {})",
            rows.len(),
            counts.windows.len(),
            o.status,
            o.timed_out
        );
    }
    println!();
    println!(
        "switch profile: QEMU virt as {}, {} vCPUs, -icount shift=0 -singlestep, {} instructions logged; per round trip, all CPUs together",
        board.name(),
        smp,
        counts.lines
    );
    if let Some(path) = pcs {
        let mut out = String::new();
        for ((name, n), w) in rows.iter().zip(&counts.windows) {
            let mut v: Vec<(&u64, &u64)> = w.by_pc.iter().collect();
            v.sort();
            for (pc, c) in v {
                out.push_str(&format!("{name} {n} {pc:#x} {c}\n"));
            }
        }
        std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))?;
        println!("per-PC counts written to {}", path.display());
    }
    for p in profiles(&rows, &counts, &syms) {
        let n = p.n.max(1);
        println!();
        let cpus: Vec<String> = p
            .by_cpu
            .iter()
            .map(|(c, i)| format!("cpu{}={}", c, i / n))
            .collect();
        println!(
            "{}: n={} {} instructions per round trip ({})",
            p.name,
            p.n,
            p.total / n,
            cpus.join(" ")
        );
        println!("{:>8} {:>6}  function", "instr", "share");
        for (f, c) in p.by_func.iter().take(top) {
            println!(
                "{:>8} {:>5.1}%  {}",
                c / n,
                *c as f64 * 100.0 / p.total.max(1) as f64,
                f
            );
        }
        let rest: u64 = p.by_func.iter().skip(top).map(|f| f.1).sum();
        if rest > 0 {
            println!(
                "{:>8} {:>5.1}%  ({} more functions)",
                rest / n,
                rest as f64 * 100.0 / p.total.max(1) as f64,
                p.by_func.len().saturating_sub(top)
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_lines_and_rewinds_are_parsed() {
        assert_eq!(
            parse_trace(
                b"Trace 3: 0x7f9c80000280 [0000000000104004/0000000040000004/00000121/ff020201] \n"
            ),
            Some((3, 0x4000_0004))
        );
        assert_eq!(
            parse_trace(b"Stopped execution of TB chain before 0x7f9c [0040]"),
            None
        );
        assert_eq!(
            parse_rewound(b"cpu_io_recompile: rewound execution of TB to 00000000400bd0fc\n"),
            Some(0x400b_d0fc)
        );
    }

    #[test]
    fn windows_count_between_marks_and_undo_rewinds() {
        let log = "\
Trace 0: 0x1 [0/0000000000000010/0/0] \n\
Trace 0: 0x1 [0/0000000000000100/0/0] \n\
Trace 0: 0x1 [0/0000000000000020/0/0] \n\
Trace 1: 0x1 [0/0000000000000020/0/0] \n\
cpu_io_recompile: rewound execution of TB to 0000000000000020\n\
Trace 1: 0x1 [0/0000000000000024/0/0] \n\
Trace 0: 0x1 [0/0000000000000100/0/0] \n\
Trace 0: 0x1 [0/0000000000000030/0/0] \n\
Trace 0: 0x1 [0/0000000000000100/0/0] \n\
Trace 0: 0x1 [0/0000000000000040/0/0] \n\
Trace 0: 0x1 [0/0000000000000100/0/0] \n";
        let c = count_log(log.as_bytes(), 0x100).unwrap();
        assert_eq!(c.lines, 10);
        assert_eq!(c.windows.len(), 2);
        assert_eq!(c.windows[0].total, 2);
        assert_eq!(c.windows[0].by_pc.get(&0x20), Some(&1));
        assert_eq!(c.windows[0].by_pc.get(&0x24), Some(&1));
        assert_eq!(c.windows[0].by_cpu.get(&1), Some(&1));
        assert_eq!(c.windows[0].by_cpu.get(&0), Some(&1));
        assert_eq!(c.windows[1].total, 1);
        assert_eq!(c.windows[1].by_pc.get(&0x40), Some(&1));
    }

    #[test]
    fn legacy_symbols_are_demangled_without_their_hash() {
        assert_eq!(
            demangle("_ZN11asym_kernel5sched13schedule_tail17hb7debaa511dcce62E"),
            "asym_kernel::sched::schedule_tail"
        );
        assert_eq!(
            demangle("_ZN10asym_sched10sched_core13schedule_pick28_$u7b$$u7b$closure$u7d$$u7d$17h5d1c943bd036aa3dE"),
            "asym_sched::sched_core::schedule_pick::{{closure}}"
        );
        assert_eq!(demangle("__asym_vectors"), "__asym_vectors");
    }

    #[test]
    fn rows_pair_with_windows_in_order() {
        let rows = parse_rows([
            "bench profile yield_same_cpu n=500",
            "noise",
            "0.1 INFO bench profile wait_wake_same_cpu n=500",
            "bench profile done marks=6 ok=1",
        ]);
        assert_eq!(
            rows,
            vec![
                ("yield_same_cpu".to_string(), 500),
                ("wait_wake_same_cpu".to_string(), 500)
            ]
        );
        let syms = Symbols {
            funcs: vec![
                (0x10, 0x20, "a".into()),
                (0x20, 0x28, "b".into()),
                (0x40, 0x40, "c".into()),
            ],
        };
        assert_eq!(syms.lookup(0x24), "b");
        assert_eq!(syms.lookup(0x2c), "b+");
        assert_eq!(syms.lookup(0x50), "c");
        assert_eq!(syms.lookup(0x5), "?");
    }
}
