//! Running the kernel on QEMU `virt`: the command line, the console decoding, the timeout.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{ChildStdin, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::cmd::{self, KillOnDrop};
use crate::console::{Console, Defmt, Demux, Item};

pub const QEMU: &str = "qemu-system-aarch64";
/// Debian's `u-boot-qemu` package.
pub const UBOOT_BIN: &str = "/usr/lib/u-boot/qemu_arm64/u-boot.bin";
/// Deterministic guest time: one instruction = 2^shift ns; idle periods are skipped
/// (`sleep=off`) instead of waited for in real time.
pub const DEFAULT_ICOUNT: &str = "shift=4,sleep=off";
/// `-icount shift=` of rt-app workload runs (`--workload`, `compare`): one instruction per
/// ns, about what the boards' cores retire (Cortex-A53 to A73 at 0.5–2.4 GHz). QEMU runs
/// `-icount` vCPUs round-robin in one host thread and advances one guest clock by every
/// vCPU's instructions, so the kernel's own work costs guest time in proportion to 2^shift;
/// at `shift=4` a wake-up and switch (~10,000 instructions) took 160 µs of guest time, and
/// `cyclictest.json`'s 100 µs periods never slept. Workload threads cost no instructions
/// while they "run" (`sched::work` waits in `wfi`), so the run stays cheap in host time.
pub const WORKLOAD_ICOUNT_SHIFT: u32 = 0;
/// The CPU model: Juno r2's big core, which has EL2 under TCG.
pub const DEFAULT_CPU: &str = "cortex-a72";
/// In interactive runs, an unfinished line (a prompt) is shown after this much quiet.
const PARTIAL_LINE_AFTER: Duration = Duration::from_millis(150);

/// How the kernel reaches the machine.
#[derive(Debug, Clone)]
pub enum Boot {
    /// `-kernel Image` (QEMU's own arm64 Image loader, DTB in x0).
    Direct { image: PathBuf },
    /// u-boot as firmware, finding `boot.scr` on a virtio-blk FAT disk.
    UBoot { bios: PathBuf, disk: PathBuf },
}

#[derive(Debug, Clone)]
pub struct Machine {
    pub smp: u32,
    pub gic: u8,
    pub el2: bool,
    pub memory_mib: u32,
    pub cpu: String,
    /// `-icount` argument, if guest time should be instruction-counted.
    pub icount: Option<String>,
    pub gdb: bool,
    /// Kernel command line for direct boots (u-boot boots take theirs from `boot.scr`).
    pub append: String,
    pub boot: Boot,
    pub extra: Vec<String>,
}

impl Machine {
    pub fn command(&self) -> Command {
        let mut c = Command::new(QEMU);
        let mut machine = format!("virt,gic-version={}", self.gic);
        if self.el2 {
            machine.push_str(",virtualization=on");
        }
        c.args(["-M", &machine, "-cpu", &self.cpu]);
        c.args([
            "-smp",
            &self.smp.to_string(),
            "-m",
            &format!("{}M", self.memory_mib),
        ]);
        c.args(["-display", "none", "-monitor", "none", "-serial", "stdio"]);
        c.args(["-nic", "none", "-no-reboot"]);
        c.args(["-semihosting-config", "enable=on,target=native"]);
        if let Some(icount) = &self.icount {
            c.args(["-icount", icount]);
        }
        match &self.boot {
            Boot::Direct { image } => {
                c.arg("-kernel").arg(image);
                if !self.append.is_empty() {
                    c.args(["-append", &self.append]);
                }
            }
            Boot::UBoot { bios, disk } => {
                c.arg("-bios").arg(bios);
                let mut drive = std::ffi::OsString::from("if=none,format=raw,id=boot,file=");
                drive.push(disk);
                c.arg("-drive").arg(drive);
                c.args(["-device", "virtio-blk-device,drive=boot"]);
            }
        }
        if self.gdb {
            c.args(["-s", "-S"]);
        }
        c.args(&self.extra);
        c
    }
}

/// How a run ended.
#[derive(Debug)]
pub struct Outcome {
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
    /// Ended by [`RunOpts::stop_when`].
    pub stopped: bool,
    /// Every rendered console line.
    pub lines: Vec<String>,
    pub elapsed: Duration,
}

/// The self-test summary line `N passed, N failed`.
pub fn summary(lines: &[String]) -> Option<(u32, u32)> {
    lines.iter().rev().find_map(|l| parse_summary(l.trim()))
}

fn parse_summary(line: &str) -> Option<(u32, u32)> {
    let (p, rest) = line.split_once(" passed, ")?;
    let f = rest.strip_suffix(" failed")?;
    Some((p.parse().ok()?, f.parse().ok()?))
}

/// Options for [`run`].
#[derive(Debug, Clone, Default)]
pub struct RunOpts {
    pub timeout: Option<Duration>,
    /// Prefix for each printed line (for runs printed side by side).
    pub prefix: String,
    /// Give QEMU our stdin (interactive `cargo xtask qemu`); otherwise /dev/null.
    pub interactive: bool,
    /// Answer the kernel's console requests (`selftest uart_rx: send hex ...`, see
    /// [`rx_request`]) by writing the bytes to QEMU's serial input, through a pipe; nothing is
    /// written before a request (u-boot's autoboot countdown reads serial input). With
    /// `interactive`, our stdin is copied into the same pipe, so typing still reaches the
    /// guest (line by line: the terminal stays in cooked mode).
    pub answer: bool,
    /// Print lines as they arrive.
    pub echo: bool,
    /// End the run (killing QEMU) once a line satisfies this.
    pub stop_when: Option<fn(&str) -> bool>,
}

/// Runs QEMU, decoding its console (stdout) live; QEMU is killed at the timeout or when this
/// function returns early.
pub fn run(mut command: Command, defmt: Option<&Defmt>, opts: &RunOpts) -> Result<Outcome> {
    cmd::echo(&command);
    command
        .stdout(Stdio::piped())
        .stdin(if opts.answer {
            Stdio::piped()
        } else if opts.interactive {
            Stdio::inherit()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::inherit());
    let start = Instant::now();
    let mut child =
        KillOnDrop(command.spawn().with_context(|| {
            format!("starting {QEMU}; install Debian's qemu-system-arm package")
        })?);
    let mut stdout = child.0.stdout.take().expect("stdout is piped");
    let serial_in = child.0.stdin.take().map(|s| Arc::new(Mutex::new(s)));
    if let (Some(serial_in), true) = (&serial_in, opts.interactive) {
        // Detached: it may stay blocked reading our stdin after QEMU is gone.
        let serial_in = Arc::clone(serial_in);
        std::thread::spawn(move || forward_stdin(&serial_in));
    }

    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });

    let deadline = opts.timeout.map(|t| start + t);
    let mut demux = Demux::new();
    let mut console = Console::new(defmt);
    let mut lines = Vec::new();
    let mut items = Vec::new();
    let mut timed_out = false;
    let mut stopped = false;
    let out = std::io::stdout();
    // Bytes of the current, unfinished text line already printed (interactive runs show
    // prompts such as u-boot's `=> ` that never end with a newline).
    let mut shown = 0usize;
    let mut emit = |items: &mut Vec<Item>, lines: &mut Vec<String>, shown: &mut usize| {
        let mut out = out.lock();
        for item in items.drain(..) {
            let line = console.render(&item);
            if opts.echo {
                match &item {
                    Item::Text(bytes) if *shown > 0 => {
                        let rest = &bytes[(*shown).min(bytes.len())..];
                        let _ = writeln!(out, "{}", String::from_utf8_lossy(rest));
                        *shown = 0;
                    }
                    _ => {
                        if *shown > 0 {
                            // A frame inside a partly shown line: keep the frame on its own.
                            let _ = writeln!(out);
                        }
                        let _ = writeln!(out, "{}{line}", opts.prefix);
                    }
                }
            }
            lines.push(line);
        }
        let _ = out.flush();
    };
    let show_partial = |demux: &Demux, shown: &mut usize| {
        if let Some(text) = demux.partial_text() {
            if text.len() > *shown {
                let mut out = std::io::stdout().lock();
                if *shown == 0 {
                    let _ = write!(out, "{}", opts.prefix);
                }
                let _ = write!(out, "{}", String::from_utf8_lossy(&text[*shown..]));
                let _ = out.flush();
                *shown = text.len();
            }
        }
    };

    loop {
        let mut wait = match deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(left) => left,
                None => {
                    timed_out = true;
                    break;
                }
            },
            None => Duration::from_secs(3600),
        };
        if opts.interactive && opts.echo {
            wait = wait.min(PARTIAL_LINE_AFTER);
        }
        match rx.recv_timeout(wait) {
            Ok(bytes) => {
                demux.push(&bytes, &mut items);
                let seen = lines.len();
                emit(&mut items, &mut lines, &mut shown);
                if let Some(serial_in) = &serial_in {
                    for line in &lines[seen..] {
                        answer(line, serial_in, &opts.prefix);
                    }
                }
                if let Some(stop) = opts.stop_when {
                    if lines[seen..].iter().any(|l| stop(l)) {
                        stopped = true;
                        break;
                    }
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if opts.interactive && opts.echo {
                    show_partial(&demux, &mut shown);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    demux.finish(&mut items);
    emit(&mut items, &mut lines, &mut shown);

    let status = if timed_out || stopped {
        None
    } else {
        // stdout closed: QEMU is exiting; give it a moment, bounded by the deadline.
        let until = deadline.unwrap_or_else(|| Instant::now() + Duration::from_secs(10));
        loop {
            if let Some(st) = child.0.try_wait()? {
                break Some(st);
            }
            if Instant::now() >= until {
                timed_out = true;
                break None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    drop(child);
    let _ = reader.join();
    Ok(Outcome {
        status,
        timed_out,
        stopped,
        lines,
        elapsed: start.elapsed(),
    })
}

/// The prefix of the kernel's request for serial input (kernel/src/selftests/uart.rs).
pub const RX_REQUEST: &str = "selftest uart_rx: send hex ";

/// The bytes a console line asks the host to send: `selftest uart_rx: send hex <hex>` gives
/// the decoded bytes; any other line `None`; a request with malformed hex an error naming it.
pub fn rx_request(line: &str) -> Option<Result<Vec<u8>, String>> {
    let rest = line.trim().strip_prefix(RX_REQUEST.trim_end())?;
    if !(rest.is_empty() || rest.starts_with(' ')) {
        return None;
    }
    let hex = rest.trim();
    let bad = || format!("malformed {RX_REQUEST:?} request {hex:?}: expected pairs of hex digits");
    if hex.is_empty() || hex.len() % 2 != 0 {
        return Some(Err(bad()));
    }
    Some(
        (0..hex.len())
            .step_by(2)
            .map(|i| {
                hex.get(i..i + 2)
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(bad)
            })
            .collect(),
    )
}

/// Writes what `line` requests (if anything) to QEMU's serial input.
fn answer(line: &str, serial_in: &Mutex<ChildStdin>, prefix: &str) {
    let bytes = match rx_request(line) {
        None => return,
        Some(Ok(bytes)) => bytes,
        Some(Err(e)) => {
            println!("{prefix}xtask: {e}; not answered");
            return;
        }
    };
    let mut w = serial_in.lock().unwrap_or_else(|p| p.into_inner());
    if let Err(e) = w.write_all(&bytes).and_then(|()| w.flush()) {
        println!(
            "{prefix}xtask: writing {} bytes to QEMU's serial input: {e}",
            bytes.len()
        );
    }
}

/// Copies our stdin to QEMU's serial input until either side closes.
fn forward_stdin(serial_in: &Mutex<ChildStdin>) {
    let mut buf = [0u8; 1024];
    let mut stdin = std::io::stdin();
    loop {
        let n = match stdin.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let mut w = serial_in.lock().unwrap_or_else(|p| p.into_inner());
        if w.write_all(&buf[..n]).and_then(|()| w.flush()).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_line_is_found_and_parsed() {
        let lines: Vec<String> = ["selftest a ... ok", "12 passed, 1 failed", "bye"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(summary(&lines), Some((12, 1)));
        assert_eq!(parse_summary("3 passed, 0 failed"), Some((3, 0)));
        assert_eq!(parse_summary("x passed, 0 failed"), None);
        assert_eq!(parse_summary("3 passed, 0 failed!"), None);
        assert_eq!(summary(&[]), None);
    }

    #[test]
    fn command_line_for_each_machine_shape() {
        let m = Machine {
            smp: 6,
            gic: 2,
            el2: true,
            memory_mib: 512,
            cpu: DEFAULT_CPU.into(),
            icount: Some(DEFAULT_ICOUNT.into()),
            gdb: true,
            append: "selftest hz=100".into(),
            boot: Boot::Direct {
                image: "/t/Image".into(),
            },
            extra: vec!["-d".into(), "int".into()],
        };
        let line = cmd::render(&m.command());
        for want in [
            "-M virt,gic-version=2,virtualization=on",
            "-smp 6",
            "-kernel /t/Image",
            "-append 'selftest hz=100'",
            "-icount shift=4,sleep=off",
            "-semihosting-config enable=on,target=native",
            "-s -S -d int",
        ] {
            assert!(line.contains(want), "{want:?} missing from {line}");
        }
        let m = Machine {
            el2: false,
            gic: 3,
            gdb: false,
            icount: None,
            boot: Boot::UBoot {
                bios: UBOOT_BIN.into(),
                disk: "/t/disk.img".into(),
            },
            ..m
        };
        let line = cmd::render(&m.command());
        assert!(line.contains("-M virt,gic-version=3 "), "{line}");
        assert!(
            line.contains("-bios /usr/lib/u-boot/qemu_arm64/u-boot.bin"),
            "{line}"
        );
        assert!(line.contains("file=/t/disk.img"), "{line}");
        assert!(
            !line.contains("-kernel") && !line.contains("-append") && !line.contains("-icount")
        );
    }

    #[test]
    fn rx_requests_are_decoded_and_other_lines_ignored() {
        assert_eq!(
            rx_request("selftest uart_rx: send hex 41420aff\r"),
            Some(Ok(vec![0x41, 0x42, 0x0a, 0xff]))
        );
        assert_eq!(rx_request("selftest uart_rx_interrupt ... ok"), None);
        assert_eq!(rx_request("say selftest uart_rx: send hex 41"), None);
        assert_eq!(rx_request("selftest uart_rx: send hexagon"), None);
        for bad in ["4", "4g", "", "41 42", "é1"] {
            let line = format!("{RX_REQUEST}{bad}");
            assert!(
                matches!(rx_request(&line), Some(Err(ref e)) if e.contains("malformed")),
                "{line:?}"
            );
        }
    }

    /// Against a stand-in for QEMU: nothing reaches its stdin before the request line, then
    /// exactly the requested bytes do; with `answer` off it gets /dev/null.
    #[test]
    fn requested_bytes_are_written_only_after_the_request() {
        let script = r#"
            early=$(timeout 1 head -c 1 | od -An -tx1 | tr -d ' \n')
            echo "early[$early]"
            echo "selftest uart_rx: send hex 61000a62"
            got=$(head -c 4 | od -An -tx1 | tr -d ' \n')
            echo "got[$got]"
        "#;
        let mut c = Command::new("sh");
        c.args(["-c", script]);
        let opts = RunOpts {
            timeout: Some(Duration::from_secs(20)),
            answer: true,
            ..Default::default()
        };
        let o = run(c, None, &opts).unwrap();
        assert_eq!(o.status.and_then(|s| s.code()), Some(0), "{:?}", o.lines);
        assert_eq!(o.lines[0], "early[]");
        assert_eq!(o.lines[2], "got[61000a62]");

        let mut c = Command::new("sh");
        c.args(["-c", script]);
        let o = run(
            c,
            None,
            &RunOpts {
                answer: false,
                ..opts
            },
        )
        .unwrap();
        assert_eq!(o.lines[2], "got[]", "{:?}", o.lines);
    }

    /// The run loop against a stand-in for QEMU: text and frames arrive, the child exits with
    /// a status; and a child that never exits is killed at the timeout.
    #[test]
    fn run_collects_lines_and_enforces_the_timeout() {
        let mut c = Command::new("sh");
        c.args([
            "-c",
            r"printf 'hello\r\n\036\001\000world\n2 passed, 0 failed\n'; exit 3",
        ]);
        let o = run(
            c,
            None,
            &RunOpts {
                timeout: Some(Duration::from_secs(20)),
                ..Default::default()
            },
        )
        .unwrap();
        assert!(!o.timed_out);
        assert_eq!(o.status.and_then(|s| s.code()), Some(3));
        assert_eq!(o.lines[0], "hello");
        assert!(o.lines[1].starts_with("<defmt frame"), "{:?}", o.lines);
        assert_eq!(o.lines[2], "world");
        assert_eq!(summary(&o.lines), Some((2, 0)));

        let mut c = Command::new("sh");
        c.args(["-c", "echo started; exec sleep 60"]);
        let start = Instant::now();
        let o = run(
            c,
            None,
            &RunOpts {
                timeout: Some(Duration::from_millis(500)),
                ..Default::default()
            },
        )
        .unwrap();
        assert!(o.timed_out);
        assert!(o.status.is_none());
        assert_eq!(o.lines, vec!["started".to_string()]);
        assert!(start.elapsed() < Duration::from_secs(10));
    }
}
