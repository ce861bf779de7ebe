//! `cargo xtask`: the single entry point for building, running, testing and benchmarking asym.
//!
//! Modelled on Hubris' `build/xtask`: every command it spawns is echoed, QEMU is killed on drop
//! and each QEMU run has a timeout. See `cargo xtask --help` and README.md.

mod ab;
mod batch;
mod bench;
mod boards;
mod cmd;
mod console;
mod debian;
mod dtb;
mod dtcheck;
mod dtfuzz;
mod equiv;
mod experiments_qemu;
mod faults;
mod image;
mod kernel;
mod lisa;
mod profile;
mod qemu;
mod seed002;
mod test;
mod uboot;
mod vslinux;
mod workload;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};

use crate::console::Defmt;
use crate::qemu::{Boot, Machine, RunOpts};

#[derive(Parser, Debug)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Build, run, test and benchmark asym."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Build the kernel ELF (release, bare-metal target) and the flat arm64 Image.
    Build {
        /// The board binary to build.
        #[arg(long, value_enum, default_value = "qemu-virt")]
        board: boards::Target,
        /// Directory for the Image [default: <target dir>/asym, or <target dir>/asym/<board>].
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Build a board's Image and u-boot boot.scr, check the Image's layout against the board's
    /// u-boot (and, with --disk, make a FAT boot disk).
    Image {
        /// The board: qemu-virt, juno-r2, hikey960 or hikey (see docs/boards/).
        #[arg(long, value_enum, default_value = "qemu-virt")]
        board: boards::Target,
        /// Directory for Image, boot.cmd, boot.scr [default: <target dir>/asym, or
        /// <target dir>/asym/<board> for a real board].
        #[arg(long)]
        out: Option<PathBuf>,
        /// Kernel command line that boot.scr sets as `bootargs`.
        #[arg(long, default_value = "")]
        append: String,
        /// Also write boot-disk.img: an MBR disk with one FAT partition holding both files.
        #[arg(long)]
        disk: bool,
    },
    /// Boot the kernel on QEMU virt and show its console with defmt frames decoded.
    Qemu(QemuArgs),
    /// Run everything: fmt, clippy, host tests, the QEMU self-test matrix and the u-boot boot.
    Test(TestArgs),
    /// Run an rt-app workload in the simulator and on QEMU (the in-kernel executor) and print
    /// both side by side: energy, placement class per task, frequency residency per domain.
    Compare(CompareArgs),
    /// Benchmarks: one of the subcommands, or --vs-linux.
    #[command(args_conflicts_with_subcommands = true)]
    Bench {
        #[command(flatten)]
        vs: VsLinuxArgs,
        #[command(subcommand)]
        what: Option<BenchCmd>,
    },
    /// Parse a device tree as the kernel does and print the platform it would run on; with
    /// --board, every difference from that board's crate.
    DtCheck {
        /// The .dtb file.
        dtb: PathBuf,
        /// Compare with this board crate (u-boot's memory fix-up is applied first, as at booti).
        #[arg(long, value_enum)]
        board: Option<boards::Target>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Refactoring check: build the simulator at --base and from the working tree, run both on
    /// every bundled workload × --eas on|off × --lb on|off × juno-r2, hikey960 and compare
    /// report.json, trace.txt and platform_info.yml byte for byte.
    SimEquiv {
        /// Git revision to compare against (e.g. main, HEAD~1, a commit id).
        #[arg(long)]
        base: String,
        #[command(flatten)]
        matrix: equiv::Matrix,
    },
    /// A/B of a policy change: run every bundled workload × --eas on|off × the boards with
    /// side A (the simulator at --base, or the working tree with --base-set) and side B (the
    /// working tree with --set), and print one table of energy, deadline misses, migrations
    /// and running time on big CPUs.
    SimAb {
        /// Side A from this git revision (default: the working tree).
        #[arg(long)]
        base: Option<String>,
        /// Side A's scheduler feature settings, FEATURE=on|off (repeatable).
        #[arg(long = "base-set", value_name = "FEATURE=on|off")]
        base_set: Vec<String>,
        /// Side B's scheduler feature settings, FEATURE=on|off (repeatable).
        #[arg(long = "set", value_name = "FEATURE=on|off")]
        set: Vec<String>,
        /// Board (repeatable; default: juno-r2 and hikey960).
        #[arg(long = "board")]
        boards: Vec<String>,
        #[command(flatten)]
        matrix: equiv::Matrix,
    },
    /// The long stress run: threads sleeping, waking and migrating on every CPU for SECONDS of
    /// guest time (not part of `test`).
    Soak(SoakArgs),
    /// Check the simulator's traces with ARM's LISA (venv under the target directory; the
    /// arguments go to tests/lisa/check.py, e.g. `--only jank --boards juno-r2`).
    #[command(disable_help_flag = true)]
    Lisa {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Run every seed's experiment in the simulator (`asym-experiments`) and regenerate the
    /// generated block of docs/experiments.md (full size, all seeds); with --quick or --seed,
    /// print the block instead of writing it. Fails when a must-show check fails.
    Experiments {
        /// Reduced sizes (what `cargo xtask test` runs); prints, does not write.
        #[arg(long)]
        quick: bool,
        /// Only one seed: 000, 001, 002, 003, 004, or `energy` (the lower-bound table);
        /// prints, does not write.
        #[arg(long)]
        seed: Option<String>,
        /// Only the simulator's half (no QEMU runs).
        #[arg(long)]
        sim_only: bool,
        /// Only the QEMU half (no simulator runs).
        #[arg(long, conflicts_with = "sim_only")]
        qemu_only: bool,
    },
    /// Run the simulator: all arguments go to `asym-sim` (try `cargo xtask sim --help`).
    #[command(disable_help_flag = true)]
    Sim {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

#[derive(Args, Debug, Clone)]
pub struct MachineArgs {
    /// Number of vCPUs.
    #[arg(long, default_value_t = 6)]
    smp: u32,
    /// GIC version of the virt machine.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u8).range(2..=3))]
    gic: u8,
    /// Enter the kernel at EL2 (`-M virt,virtualization=on`); default EL1.
    #[arg(long)]
    el2: bool,
    /// QEMU CPU model.
    #[arg(long, default_value = qemu::DEFAULT_CPU)]
    cpu: String,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 512)]
    memory: u32,
}

#[derive(Args, Debug)]
struct QemuArgs {
    #[command(flatten)]
    machine: MachineArgs,
    /// Emulated board: its DT (capacities, clusters, OPP tables) is passed with `-dtb`; its
    /// CPU count replaces the default --smp. `virt` keeps QEMU's own DT (no cpufreq).
    #[arg(long, value_enum, default_value = "qemu-juno-r2")]
    board: dtb::Board,
    /// Wait for gdb on :1234 (`-s -S`) and print the gdb-multiarch command to attach.
    #[arg(long)]
    gdb: bool,
    /// Instruction-counted, deterministic guest time (`-icount shift=4,sleep=off`).
    #[arg(long)]
    icount: bool,
    /// Kill QEMU after this many seconds (0: never).
    #[arg(long, default_value_t = 0)]
    timeout: u64,
    /// Kernel command line (e.g. "selftest", "hz=1000 maxcpus=2", "bench"); with
    /// --workload, added to the workload run's (e.g. "cpufreq.big.min_khz=1200000").
    #[arg(long, default_value = "")]
    append: String,
    /// Boot through Debian's u-boot from a FAT disk, as on a board (the command line goes
    /// into boot.scr).
    #[arg(long)]
    uboot: bool,
    /// Exit with a failure unless the run ends with "N passed, 0 failed" and status 0. Also
    /// answers the uart_rx self test's request for serial input (as a run whose stdin is not a
    /// terminal always does); typed input still reaches the guest, a line at a time.
    #[arg(long)]
    expect_pass: bool,
    /// Show the source location of each defmt message.
    #[arg(long)]
    locations: bool,
    /// Run this rt-app workload with the in-kernel executor (under -icount unless
    /// --no-icount) and write --out/trace.txt and --out/report.json. Without --workload and
    /// --append, the bundled demo workload runs with a status line every guest second.
    #[arg(long)]
    workload: Option<PathBuf>,
    /// With --workload: the output directory.
    #[arg(long, requires = "workload", default_value = "out/qemu")]
    out: PathBuf,
    /// With --workload: guest duration (e.g. 2s, 500ms); default the workload's own.
    #[arg(long, requires = "workload", value_parser = parse_duration)]
    duration: Option<u64>,
    /// With --workload: energy-aware scheduling on or off (sched_features ENERGY_AWARE).
    #[arg(long, value_enum, requires = "workload")]
    eas: Option<workload::OnOff>,
    /// With --workload: load balancing (the kernel's `sched_balance=`, the simulator's `--lb`;
    /// default on, as Linux).
    #[arg(long, value_enum, requires = "workload")]
    lb: Option<workload::OnOff>,
    /// With --workload: a scheduler feature, FEATURE=on|off (repeatable).
    #[arg(long = "set", value_name = "FEATURE=on|off", requires = "workload")]
    set: Vec<String>,
    /// With --workload: real-time guest clock instead of -icount.
    #[arg(long, requires = "workload")]
    no_icount: bool,
    /// With --workload: run it with the EL0 rt-app executor (`user/rtapp`, loaded by the
    /// kernel over semihosting) instead of the in-kernel one; same trace.txt and report.json.
    #[arg(long, requires = "workload")]
    el0: bool,
    /// With --workload: `-icount shift=N`, guest ns per instruction as a power of two.
    #[arg(long, requires = "workload", default_value_t = qemu::WORKLOAD_ICOUNT_SHIFT)]
    icount_shift: u32,
    /// With --workload: timer resolution (the kernel's `highres=`; default on). `off`: sleep
    /// timers expire on the first tick at or after their deadline, as Linux's hrtimers in
    /// low-resolution mode (seed 002's condition).
    #[arg(long, value_enum, requires = "workload")]
    highres: Option<workload::OnOff>,
    /// Extra QEMU arguments, after `--`.
    #[arg(last = true)]
    qemu_args: Vec<String>,
}

#[derive(Args, Debug)]
struct CompareArgs {
    #[command(flatten)]
    machine: MachineArgs,
    /// The rt-app workload.
    #[arg(long, required_unless_present = "all", conflicts_with = "all")]
    workload: Option<PathBuf>,
    /// Every bundled workload (`tests/workloads/*.json`) in turn, each into `--out/<name>/`,
    /// then one summary table (Markdown).
    #[arg(long)]
    all: bool,
    /// Emulated board (and the simulator's model of it).
    #[arg(long, value_enum, default_value = "qemu-juno-r2")]
    board: dtb::Board,
    /// Output directory (sim/ and qemu/ below it).
    #[arg(long, default_value = "out/compare")]
    out: PathBuf,
    /// Guest and simulated duration (e.g. 2s); default the workload's own.
    #[arg(long, value_parser = parse_duration)]
    duration: Option<u64>,
    /// Energy-aware scheduling on or off on both sides (default: each side's default).
    #[arg(long, value_enum)]
    eas: Option<workload::OnOff>,
    /// Load balancing on or off on both sides (the kernel's `sched_balance=`, the simulator's
    /// `--lb`; default on, as Linux).
    #[arg(long, value_enum)]
    lb: Option<workload::OnOff>,
    /// A scheduler feature, FEATURE=on|off, on both sides (repeatable).
    #[arg(long = "set", value_name = "FEATURE=on|off")]
    set: Vec<String>,
    /// Timer resolution on both sides (the kernel's `highres=`, the simulator's `--highres`;
    /// default on). `off`: timers expire on the tick (Linux's low-resolution hrtimers).
    #[arg(long, value_enum)]
    highres: Option<workload::OnOff>,
    /// Kill QEMU after this many seconds.
    #[arg(long, default_value_t = 900)]
    timeout: u64,
    /// `-icount shift=N` for the QEMU side, guest ns per instruction as a power of two.
    #[arg(long, default_value_t = qemu::WORKLOAD_ICOUNT_SHIFT)]
    icount_shift: u32,
    /// Exit with a failure unless the tolerances hold.
    #[arg(long)]
    strict: bool,
}

/// `5s`, `250ms`, `100us` or plain seconds, as ns.
fn parse_duration(s: &str) -> std::result::Result<u64, String> {
    let (num, mult) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1_000_000)
    } else if let Some(n) = s.strip_suffix("us") {
        (n, 1_000)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1_000_000_000)
    } else {
        (s, 1_000_000_000)
    };
    match num
        .trim()
        .parse::<u64>()
        .ok()
        .and_then(|v| v.checked_mul(mult))
    {
        Some(ns) if ns > 0 && ns <= 3_600_000_000_000 => Ok(ns),
        _ => Err(format!(
            "bad duration \"{s}\" (use e.g. 2s, 500ms; at most 3600s)"
        )),
    }
}

#[derive(Args, Debug)]
pub struct TestArgs {
    /// Skip fmt, clippy and the host tests.
    #[arg(long)]
    pub no_host: bool,
    /// Skip the QEMU runs (self-test matrix and u-boot).
    #[arg(long)]
    pub no_qemu: bool,
    /// Skip the real boards' checks (images and layout, dt-check of Debian's DTBs).
    #[arg(long)]
    pub no_boards: bool,
    /// Skip the LISA check of the simulator's traces (its venv install needs the package
    /// registry).
    #[arg(long)]
    pub no_lisa: bool,
    /// Timeout for each QEMU run, seconds.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
    /// QEMU runs at once (each icount QEMU uses one host core).
    #[arg(long, default_value_t = 2)]
    pub jobs: usize,
    /// vCPUs for the self-test runs.
    #[arg(long, default_value_t = 6)]
    pub smp: u32,
    /// Emulated board whose device tree the direct-boot self-test runs get (see `qemu`).
    #[arg(long, value_enum, default_value = "qemu-juno-r2")]
    pub board: dtb::Board,
    /// Only the stages and QEMU runs whose name (as the summary prints it) contains this
    /// substring, e.g. `--only "no DVFS firmware"` or `--only clippy`.
    #[arg(long, value_name = "SUBSTRING")]
    pub only: Option<String>,
}

impl TestArgs {
    /// Whether the stage or run called `name` is selected by `--only`.
    pub fn wants(&self, name: &str) -> bool {
        self.only.as_deref().is_none_or(|s| name.contains(s))
    }
}

#[derive(Args, Debug)]
struct SoakArgs {
    #[command(flatten)]
    machine: MachineArgs,
    /// Guest seconds to run.
    #[arg(long, default_value_t = 600)]
    seconds: u32,
    /// `-icount shift`: guest ns per instruction as a power of two.
    #[arg(long, default_value_t = 0)]
    shift: u32,
    /// Extra kernel command-line options (e.g. "maxcpus=4").
    #[arg(long, default_value = "")]
    append: String,
    /// Emulated board whose device tree the kernel gets (see `qemu`).
    #[arg(long, value_enum, default_value = "qemu-juno-r2")]
    board: dtb::Board,
}

/// `cargo xtask bench --vs-linux`: Debian's arm64 Linux on the same QEMU machine as asym, one
/// table of ratios (docs/experiments.md, "Linux side by side").
#[derive(Args, Debug)]
struct VsLinuxArgs {
    /// Boot Debian's arm64 Linux kernel with a busybox/rt-tests initramfs on the same QEMU
    /// machine, CPU count and -icount (shift=0) as asym's benchmarks; print asym/Linux ratios.
    #[arg(long)]
    vs_linux: bool,
    /// With --vs-linux: shorter phases (2 s instead of 10 s, a tenth of the round trips).
    #[arg(long, requires = "vs_linux")]
    quick: bool,
    /// With --vs-linux: timeout of the Linux run in seconds [default: from the phase lengths].
    #[arg(long, requires = "vs_linux")]
    timeout: Option<u64>,
    /// With --vs-linux: the emulated board both kernels get (see `qemu`).
    #[arg(long, value_enum, default_value = "qemu-juno-r2")]
    board: dtb::Board,
    #[command(flatten)]
    machine: MachineArgs,
}

#[derive(Subcommand, Debug)]
enum BenchCmd {
    /// Reset → CPU online and reset → first tick, per CPU, in guest µs (under -icount).
    Boot {
        #[command(flatten)]
        machine: MachineArgs,
        /// Timeout in seconds.
        #[arg(long, default_value_t = 120)]
        timeout: u64,
        /// Extra kernel command-line options besides `bench`.
        #[arg(long, default_value = "")]
        append: String,
        /// Emulated board whose device tree the kernel gets (see `qemu`).
        #[arg(long, value_enum, default_value = "qemu-juno-r2")]
        board: dtb::Board,
    },
    /// Guest instructions per context switch, wait/wake round trip, tick and wake-up, under
    /// `-icount shift=0`.
    Switch {
        #[command(flatten)]
        machine: MachineArgs,
        /// Timeout in seconds.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// Emulated board whose device tree the kernel gets (see `qemu`).
        #[arg(long, value_enum, default_value = "qemu-juno-r2")]
        board: dtb::Board,
        /// Instead of the table: the round-trip rows' instructions by function, from QEMU's
        /// instruction log (`-singlestep -d exec`; xtask/src/profile.rs).
        #[arg(long)]
        profile: bool,
        /// With --profile: how many functions to print per row.
        #[arg(long, default_value_t = 25)]
        top: usize,
        /// With --profile: also write every PC's count, one `<row> <n> <pc> <count>` line
        /// each, to this file (for `addr2line -i -f -e <kernel ELF>`: source lines).
        #[arg(long)]
        pcs: Option<PathBuf>,
    },
    /// The scheduler's costs (asym issue 12): EAS wake-up placement, balance softirq, busy
    /// tick and run-queue lock hold times in guest instructions under `-icount shift=0`, and
    /// the tick-plus-softirq share of a CPU.
    SchedCosts {
        #[command(flatten)]
        machine: MachineArgs,
        /// Timeout in seconds.
        #[arg(long, default_value_t = 900)]
        timeout: u64,
        /// Emulated board whose device tree the kernel gets (see `qemu`).
        #[arg(long, value_enum, default_value = "qemu-juno-r2")]
        board: dtb::Board,
    },
    /// The policy crate's micro-benchmarks (`cargo bench -p asym-sched --benches`).
    #[command(disable_help_flag = true)]
    Sched {
        /// Arguments for the bench binary.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The simulator's throughput benchmark (`asym-sim --bench`).
    #[command(disable_help_flag = true)]
    Sim {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(cli: Cli) -> Result<ExitCode> {
    match cli.cmd {
        Cmd::Build { board, out } => {
            let a = kernel::build(board, out.as_deref())?;
            println!("xtask: ELF {}", a.elf.display());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Image {
            board,
            out,
            append,
            disk,
        } => {
            let a = kernel::build(board, out.as_deref())?;
            let dir = a
                .image
                .parent()
                .expect("Image has a directory")
                .to_path_buf();
            let scr = kernel::write_boot_script(board, &dir, &append)?;
            for fact in kernel::check_board_layout(&a, &scr)? {
                println!("xtask: layout: {fact}");
            }
            if disk {
                kernel::write_boot_disk(&dir)?;
            }
            if board != boards::Target::QemuVirt {
                println!(
                    "xtask: {} boot files in {}: copy Image and boot.scr{} to the boot medium \
                     (docs/boards/{}.md)",
                    board.name(),
                    dir.display(),
                    match board.fdt() {
                        asym_kernel::board::FdtSource::File(f) =>
                            format!(" (and the mainline {f})"),
                        asym_kernel::board::FdtSource::Control => String::new(),
                    },
                    board.name()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::DtCheck { dtb, board, json } => dtcheck::run(&dtb, board, json),
        Cmd::Qemu(args) => run_qemu(args),
        Cmd::Test(args) => test::run(&args),
        Cmd::Compare(args) => run_compare(args),
        Cmd::Bench { vs, what } => match what {
            None if vs.vs_linux => vslinux::run(&vslinux::VsLinuxOpts {
                machine: vs.machine,
                board: vs.board,
                quick: vs.quick,
                timeout: vs.timeout.map(Duration::from_secs),
            }),
            None => bail!(
                "`cargo xtask bench` needs a benchmark: --vs-linux, or one of boot, switch, \
                 sched-costs, sched, sim (see --help)"
            ),
            Some(BenchCmd::Boot {
                machine,
                timeout,
                append,
                board,
            }) => bench::boot(&machine, board, Duration::from_secs(timeout), &append),
            Some(BenchCmd::Switch {
                machine,
                timeout,
                board,
                profile: false,
                ..
            }) => bench::switch(&machine, board, Duration::from_secs(timeout)),
            Some(BenchCmd::Switch {
                machine,
                timeout,
                board,
                profile: true,
                top,
                pcs,
            }) => profile::switch_profile(
                &machine,
                board,
                Duration::from_secs(timeout),
                top,
                pcs.as_deref(),
            ),
            Some(BenchCmd::SchedCosts {
                machine,
                timeout,
                board,
            }) => bench::sched_costs(&machine, board, Duration::from_secs(timeout)),
            Some(BenchCmd::Sched { args }) => bench::sched(&args),
            Some(BenchCmd::Sim { args }) => bench::sim(&args),
        },
        Cmd::SimEquiv { base, matrix } => equiv::run(&equiv::EquivArgs { base, matrix }),
        Cmd::SimAb {
            base,
            base_set,
            set,
            boards,
            matrix,
        } => ab::run(&ab::AbArgs {
            base,
            base_set,
            set,
            boards,
            matrix,
        }),
        Cmd::Soak(a) => bench::soak(&a.machine, a.board, a.seconds, a.shift, &a.append),
        Cmd::Sim { args } => bench::run_sim(&[], &args),
        Cmd::Experiments {
            quick,
            seed,
            sim_only,
            qemu_only,
        } => bench::experiments(quick, seed.as_deref(), !qemu_only, !sim_only),
        Cmd::Lisa { args } => {
            let (python, _) = lisa::ensure_venv()?;
            let (passed, failed) = lisa::check(&python, &args)?;
            println!("{passed} passed, {failed} failed");
            Ok(ExitCode::SUCCESS)
        }
    }
}

pub fn exit_code(code: Option<i32>) -> ExitCode {
    match code {
        Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1).max(1)),
        None => ExitCode::FAILURE,
    }
}

/// Reads the defmt table of the kernel ELF (`None` when it has none).
pub fn load_defmt(elf: &std::path::Path) -> Result<Option<Defmt>> {
    let bytes = std::fs::read(elf).with_context(|| format!("reading {}", elf.display()))?;
    let defmt = Defmt::from_elf(&bytes)?;
    if defmt.is_none() {
        println!(
            "xtask: {} has no .defmt section; defmt frames will be shown as hex",
            elf.display()
        );
    }
    Ok(defmt)
}

impl MachineArgs {
    /// The command line's defaults (`--smp 6 --gic 3`, EL1, the default CPU, 512 MiB): the
    /// machine the test stages run workloads on.
    pub fn defaults() -> Self {
        MachineArgs {
            smp: 6,
            gic: 3,
            el2: false,
            cpu: qemu::DEFAULT_CPU.into(),
            memory: 512,
        }
    }

    pub fn machine(&self, boot: Boot, append: &str, icount: bool, gdb: bool) -> Machine {
        Machine {
            smp: self.smp,
            gic: self.gic,
            el2: self.el2,
            memory_mib: self.memory,
            cpu: self.cpu.clone(),
            icount: icount.then(|| qemu::DEFAULT_ICOUNT.to_string()),
            gdb,
            append: append.to_string(),
            boot,
            extra: Vec::new(),
        }
    }
}

fn run_compare(args: CompareArgs) -> Result<ExitCode> {
    let desc = args
        .board
        .desc()
        .with_context(|| format!("--board {}: no simulator model", args.board.name()))?;
    let Some(workload) = args.workload.clone() else {
        return run_compare_all(&args, desc);
    };
    let v = compare_one(&args, desc, &workload, &args.out)?;
    Ok(if args.strict && !v.ok() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `compare` of one workload into `out` (the simulator's side in `out/sim`, QEMU's in
/// `out/qemu`): runs both, prints them side by side, returns the verdict.
fn compare_one(
    args: &CompareArgs,
    desc: &asym_sched::topology::BoardDesc,
    workload: &Path,
    out: &Path,
) -> Result<workload::Verdict> {
    let r = workload::Run {
        workload: workload.to_path_buf(),
        out: out.join("qemu"),
        duration_ns: args.duration,
        eas: args.eas,
        lb: args.lb,
        set: args.set.clone(),
        append: Vec::new(),
        board: args.board,
        icount: Some(args.icount_shift),
        timeout: Duration::from_secs(args.timeout),
        echo: false,
        el0: false,
        el0_program: None,
        highres: args.highres,
    };
    let sim_r = workload::Run {
        out: out.to_path_buf(),
        ..r.clone()
    };
    let sim = workload::run_sim(&sim_r, &args.set)?;
    let qemu = workload::run_on_qemu(&args.machine, &r)?;
    let duration = match args.duration {
        Some(d) => d,
        None => {
            let rep: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(out.join("qemu/report.json"))?)?;
            rep["duration_ns"].as_u64().unwrap_or(1)
        }
    };
    println!(
        "xtask: compare {} on {} ({} ms)",
        workload.display(),
        args.board.name(),
        duration / 1_000_000
    );
    Ok(workload::print_comparison(desc, &sim, &qemu, duration))
}

/// `compare --all`: every bundled workload, then the summary table.
fn run_compare_all(args: &CompareArgs, desc: &asym_sched::topology::BoardDesc) -> Result<ExitCode> {
    let dir = cmd::workspace_root().join("tests/workloads");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let mut rows = Vec::new();
    for f in &files {
        let name = f
            .file_stem()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        println!();
        let v = compare_one(args, desc, f, &args.out.join(&name));
        rows.push((name, v));
    }
    println!(
        "\n`cargo xtask compare --all --board {}{}`:\n",
        args.board.name(),
        match args.lb {
            Some(workload::OnOff::On) => " --lb on",
            Some(workload::OnOff::Off) => " --lb off",
            None => "",
        }
    );
    println!(
        "| workload | energy sim / QEMU (mJ) | Δ | placement | residency, largest Δ | switches sim / QEMU |"
    );
    println!("|---|---:|---:|---|---:|---:|");
    let mut all_ok = true;
    for (name, v) in &rows {
        match v {
            Ok(v) => {
                all_ok &= v.ok();
                println!(
                    "| {name} | {:.1} / {:.1} | {:+.1} %{} | {} | {:.1} pt{} | {} / {} |",
                    v.energy_uj.0 / 1000.0,
                    v.energy_uj.1 / 1000.0,
                    v.energy_pct,
                    if v.energy_ok { "" } else { " **out**" },
                    if v.placement_ok {
                        "same".to_string()
                    } else {
                        format!("**differs**: {}", v.placement_diff.join(", "))
                    },
                    v.max_residency_pt,
                    if v.residency_ok { "" } else { " **out**" },
                    v.switches.0,
                    v.switches.1
                );
            }
            Err(e) => {
                all_ok = false;
                println!("| {name} | failed: {e:#} | | | | |");
            }
        }
    }
    Ok(if args.strict && !all_ok {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn run_qemu(args: QemuArgs) -> Result<ExitCode> {
    if let Some(w) = &args.workload {
        let r = workload::Run {
            workload: w.clone(),
            out: args.out.clone(),
            duration_ns: args.duration,
            eas: args.eas,
            lb: args.lb,
            set: args.set.clone(),
            append: args.append.split_whitespace().map(String::from).collect(),
            board: args.board,
            icount: (!args.no_icount).then_some(args.icount_shift),
            timeout: Duration::from_secs(if args.timeout == 0 {
                3600
            } else {
                args.timeout
            }),
            echo: true,
            el0: args.el0,
            el0_program: None,
            highres: args.highres,
        };
        let a = workload::run_on_qemu(&args.machine, &r)?;
        println!(
            "xtask: {}: {} trace lines, energy {:.1} uJ; wrote {}/trace.txt and report.json",
            w.display(),
            a.lines,
            a.total_energy_uj,
            args.out.display()
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut args = args;
    if args.append.is_empty() && !args.uboot {
        // A new user's first run: the bundled demo workload, a status line per guest second.
        args.append = "rtapp=demo".into();
    }
    if args.machine.smp == 0 || args.machine.smp > 8 {
        bail!(
            "--smp {}: the kernel supports 1 to 8 CPUs",
            args.machine.smp
        );
    }
    let a = kernel::build(boards::Target::QemuVirt, None)?;
    let dir = a
        .image
        .parent()
        .expect("Image has a directory")
        .to_path_buf();
    let boot = if args.uboot {
        kernel::write_boot_script(boards::Target::QemuVirt, &dir, &args.append)?;
        Boot::UBoot {
            bios: qemu::UBOOT_BIN.into(),
            disk: kernel::write_boot_disk(&dir)?,
        }
    } else {
        Boot::Direct {
            image: a.image.clone(),
        }
    };
    let mut machine = args.machine.clone();
    if let Some(n) = args.board.nr_cpus() {
        if machine.smp == 6 {
            // 6 is --smp's default: the board's own CPU count wins.
            machine.smp = n;
        } else if machine.smp > n {
            bail!(
                "--board {} has {n} CPUs; --smp {} is more",
                args.board.name(),
                machine.smp
            );
        }
    }
    let mut m = machine.machine(boot, &args.append, args.icount, args.gdb);
    // With -kernel QEMU hands this DT to the kernel; with -bios it hands it to u-boot, which
    // uses it as its control DT and passes it on through booti (`${fdtcontroladdr}`), as a
    // board's firmware does.
    if let Some(path) = dtb::board_dtb(args.board, &mut m, &dir)? {
        m.extra.push("-dtb".into());
        m.extra.push(path.display().to_string());
    }
    m.extra.extend(args.qemu_args.iter().cloned());
    let mut defmt = load_defmt(&a.elf)?;
    if let Some(d) = defmt.as_mut() {
        d.show_locations = args.locations;
    }
    if args.gdb {
        println!(
            "xtask: QEMU waits for gdb; attach from another terminal with:\n  \
             gdb-multiarch {} -ex 'target remote :1234'",
            a.elf.display()
        );
    }
    let timeout = (args.timeout > 0).then(|| Duration::from_secs(args.timeout));
    let outcome = qemu::run(
        m.command(),
        defmt.as_ref(),
        &RunOpts {
            timeout,
            interactive: true,
            // The uart_rx self test's requests are answered when the run is scripted; in a
            // terminal the user's typing goes to QEMU untouched (raw) unless --expect-pass.
            answer: args.expect_pass || !std::io::stdin().is_terminal(),
            echo: true,
            ..Default::default()
        },
    )?;
    if outcome.timed_out {
        println!("xtask: QEMU killed after the {}s timeout", args.timeout);
        return Ok(ExitCode::FAILURE);
    }
    let code = outcome.status.and_then(|s| s.code());
    if args.expect_pass {
        return Ok(match (qemu::summary(&outcome.lines), code) {
            (Some((p, 0)), Some(0)) if p > 0 => ExitCode::SUCCESS,
            _ => {
                println!("xtask: self tests did not pass (exit status {code:?})");
                ExitCode::FAILURE
            }
        });
    }
    Ok(exit_code(code))
}
