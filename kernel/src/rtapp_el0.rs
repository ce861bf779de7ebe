//! The rt-app executor at EL0 (`rtapp_el0=<host path>` beside `rtapp=`): the kernel loads the
//! static ELF `user/rtapp` builds (read over semihosting, planned by [`crate::elf`]) into a
//! fresh address space with the workload's JSON, a heap and one guarded stack per thread, and
//! starts its main thread; the program parses the workload with the same reader and steps its
//! threads with the same interpreter as the in-kernel executor ([`crate::rtapp`]), through
//! system calls only (`docs/syscalls.md`). [`crate::rtapp`] keeps the rest of the run the
//! same for both: the trace, time zero, the run's end, the energy line.
//!
//! Layout of the space (offsets from `USER_BASE`), written down in `docs/syscalls.md`
//! ("EL0 programs"), which the program's `BootInfo` mirrors:
//! - `1 MiB..16 MiB`: the program's `PT_LOAD` segments, W^X;
//! - `16 MiB`: the boot info page (read-only; its address is the main thread's `x0`), then
//!   one data page of results the program fills once it has read the workload (the run's
//!   length, the threads' names) and as it starts the threads (their ids), which the kernel
//!   reads to time the run and to name the threads in the trace;
//! - `17 MiB..`: the JSON (read-only);
//! - `48 MiB..`: [`NR_STACKS`] stacks of [`STACK_PAGES`] pages, each above an unmapped guard
//!   page (the next stack's guard is the one above); the main thread runs on stack 0;
//! - `64 MiB..`: the heap's data pages.
//!
//! Linux counterpart: `fs/binfmt_elf.c` (`load_elf_binary`) and the `argv`/`auxv` a process
//! starts with; here the boot info page plays `auxv`'s part.

use alloc::format;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use crate::arch::uspace::{AddressSpace, Perm, USER_BASE};
use crate::elf::{self, SegPerm};
use crate::task::{self, ExitStatus, ThreadId, ThreadParams};
use crate::user::{self, UserSpace, MAX_SPACE_THREADS};

const PAGE: usize = 4096;
/// Where a program's segments must lie.
pub const ELF_LO: usize = USER_BASE + 0x10_0000;
pub const ELF_HI: usize = USER_BASE + 0x100_0000;
const INFO_VA: usize = USER_BASE + 0x100_0000;
/// The page the program writes what the kernel needs from the workload: the run's length
/// (u64 at 0), the thread count (u32 at 8), the threads' ids (u32 each from [`R_TIDS`]) and
/// names ([`NAME_BYTES`] each from [`R_NAMES`], NUL-padded).
const RESULT_VA: usize = INFO_VA + PAGE;
const R_THREADS: usize = 8;
const R_TIDS: usize = 64;
const R_NAMES: usize = 256;
const NAME_BYTES: usize = 16;
/// The workload's name in the boot info page.
const NAME_OFFSET: usize = 1024;
const JSON_VA: usize = USER_BASE + 0x110_0000;
const STACKS_VA: usize = USER_BASE + 0x300_0000;
/// Pages of each stack (64 KiB: the reader recurses up to 32 deep on nested JSON).
pub const STACK_PAGES: usize = 16;
/// One stack per thread the space may run.
pub const NR_STACKS: usize = MAX_SPACE_THREADS as usize;
const HEAP_VA: usize = USER_BASE + 0x400_0000;
/// Largest program file read.
pub const MAX_ELF: usize = 4 << 20;
/// Most pages of segments a program may have.
const MAX_PROGRAM_PAGES: usize = 1024;
/// The heap: this much, plus [`HEAP_PER_JSON_BYTE`] per byte of JSON, at most [`MAX_HEAP`].
const HEAP_BASE: usize = 512 << 10;
const HEAP_PER_JSON_BYTE: usize = 8;
const MAX_HEAP: usize = 8 << 20;
/// The boot info's first word, `b"asymrtap"`, and its layout's version.
const MAGIC: u64 = u64::from_le_bytes(*b"asymrtap");
const VERSION: u64 = 1;
/// Word indices of the boot info (`BootInfo` in `user/rtapp/src/main.rs`): time zero, and
/// the 32-bit "go" word the main thread futex-waits on until the kernel has set time zero.
const W_T0: usize = 13;
const W_GO: usize = 16;

/// A program loaded into its space, not started yet.
pub struct Prepared {
    space: AddressSpace,
    entry: u64,
    /// The CPU the main thread is pinned to (the boot info says so too).
    main_cpu: asym_sched::types::CpuId,
}

/// What the program reported once it had read the workload.
pub struct Ready {
    /// The run's length from time zero.
    pub duration_ns: u64,
    /// The workload's threads' names (`TASK_COMM_LEN - 1` bytes at most).
    pub names: Vec<String>,
}

/// The running program's main thread and its space.
pub struct Running {
    main: ThreadId,
    space: Arc<UserSpace>,
}

/// Reads the program at host path `path` and builds its address space for the workload
/// `json` (named `name`) on `nr_cpus` CPUs (`online`); the run lasts `duration_ns` from time
/// zero (0: the workload's `duration`, else `default_ns`). Every problem is an error naming
/// it.
pub fn prepare(
    path: &str,
    json: &[u8],
    name: &str,
    nr_cpus: usize,
    online: u64,
    duration_ns: u64,
    default_ns: u64,
) -> Result<Prepared, String> {
    let bytes = crate::semihosting::read_file(path, MAX_ELF)
        .map_err(|e| format!("{path}: cannot read the EL0 program: {e}"))?;
    let plan = elf::plan(&bytes, ELF_LO as u64, ELF_HI as u64, MAX_PROGRAM_PAGES)
        .map_err(|e| format!("{path}: {e}"))?;
    let json_pages = json.len().div_ceil(PAGE).max(1);
    let heap = (HEAP_BASE + HEAP_PER_JSON_BYTE * json.len())
        .min(MAX_HEAP)
        .div_ceil(PAGE)
        * PAGE;
    let pages = plan.pages() + 2 + json_pages + NR_STACKS * STACK_PAGES + heap / PAGE;
    // Each page is a kernel heap block: refuse here rather than fail an allocation (a panic)
    // halfway through. An eighth more covers the page tables and the heap's own overhead.
    let need = pages * PAGE + pages * PAGE / 8;
    let free = crate::heap::stats().free;
    if need > free / 2 {
        return Err(format!(
            "{path}: the EL0 executor needs {} KiB of kernel heap for its pages; {} KiB free \
             (half is kept for the trace)",
            need / 1024,
            free / 1024
        ));
    }
    let err = |e: crate::arch::uspace::SpaceError| format!("{path}: {e}");
    let mut a = AddressSpace::new().map_err(err)?;
    let mut buf = vec![0u8; PAGE];
    for seg in &plan.segments {
        let perm = match seg.perm {
            SegPerm::Text => Perm::Text,
            SegPerm::ReadOnly => Perm::ReadOnly,
            SegPerm::Data => Perm::Data,
        };
        for k in 0..seg.pages() {
            let va = seg.start + (k * PAGE) as u64;
            seg.fill_page(&bytes, va, &mut buf);
            a.map_page(va as usize, perm, &buf).map_err(err)?;
        }
    }
    drop(bytes);
    let main_cpu = crate::percpu::current_cpu();
    let mut info = vec![0u8; PAGE];
    let name = truncate_bytes(name, PAGE - NAME_OFFSET);
    let words: [u64; 19] = [
        MAGIC,
        VERSION,
        JSON_VA as u64,
        json.len() as u64,
        (INFO_VA + NAME_OFFSET) as u64,
        name.len() as u64,
        HEAP_VA as u64,
        heap as u64,
        STACKS_VA as u64,
        ((STACK_PAGES + 1) * PAGE) as u64,
        NR_STACKS as u64,
        nr_cpus as u64,
        online,
        0, // t0, stored by `start`
        duration_ns,
        RESULT_VA as u64,
        0, // go, stored by `Running::go`
        default_ns,
        // The main thread's CPUs: the one `start` pins it to.
        1u64 << main_cpu.0,
    ];
    for (i, w) in words.iter().enumerate() {
        info[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
    }
    info[NAME_OFFSET..NAME_OFFSET + name.len()].copy_from_slice(name.as_bytes());
    // The boot info stays read-only until `start` writes t0 through the kernel's alias.
    a.map_page(INFO_VA, Perm::ReadOnly, &info).map_err(err)?;
    a.map_page(RESULT_VA, Perm::Data, &[]).map_err(err)?;
    for (k, chunk) in json.chunks(PAGE).enumerate() {
        a.map_page(JSON_VA + k * PAGE, Perm::ReadOnly, chunk)
            .map_err(err)?;
    }
    if json.is_empty() {
        a.map_page(JSON_VA, Perm::ReadOnly, &[]).map_err(err)?;
    }
    for s in 0..NR_STACKS {
        let base = STACKS_VA + s * (STACK_PAGES + 1) * PAGE;
        for k in 0..STACK_PAGES {
            a.map_page(base + (k + 1) * PAGE, Perm::Data, &[])
                .map_err(err)?;
        }
    }
    for k in 0..heap / PAGE {
        a.map_page(HEAP_VA + k * PAGE, Perm::Data, &[])
            .map_err(err)?;
    }
    crate::println!(
        "rtapp: EL0 executor {path}: {} pages of program, {} KiB heap, entry {:#x}",
        plan.pages(),
        heap / 1024,
        plan.entry
    );
    Ok(Prepared {
        space: a,
        entry: plan.entry,
        main_cpu,
    })
}

/// Starts the program's main thread, pinned to the CPU [`prepare`] ran on, as the in-kernel executor's
/// threads are all started from the init thread's: it reads the workload, then waits for
/// [`Running::go`].
pub fn start(p: Prepared) -> Result<Running, String> {
    let sp = (STACKS_VA + (STACK_PAGES + 1) * PAGE) as u64;
    let here = asym_sched::types::CpuMask::of(p.main_cpu);
    let params = ThreadParams {
        affinity: here,
        ..ThreadParams::default()
    };
    let (main, space) = user::spawn_space("rt-app", params, p.space, p.entry, sp, INFO_VA as u64)
        .map_err(|e| format!("{e}"))?;
    Ok(Running { main, space })
}

impl Running {
    /// Waits (before time zero, so untraced) until the main thread has read the workload and
    /// waits for [`Running::go`]; an error if it ended instead (a bad workload: it printed
    /// the reader's message).
    pub fn wait_ready(&self) -> Result<Ready, String> {
        loop {
            if user::futex_waiters(self.main, INFO_VA + 8 * W_GO) > 0 {
                return self.ready();
            }
            let gone = task::get(self.main).is_none_or(|t| t.state() == task::ThreadState::Zombie);
            if gone {
                self.join()?;
                return Err("the EL0 executor ended before the run started".into());
            }
            crate::sched::sleep_ns(100_000);
        }
    }

    /// What the program wrote before it waited for `go`.
    fn ready(&self) -> Result<Ready, String> {
        let word = |off: usize| user::read_u32(&self.space, RESULT_VA + off).unwrap_or(0);
        let duration_ns = u64::from(word(0)) | (u64::from(word(4)) << 32);
        let threads = word(R_THREADS) as usize;
        if threads >= NR_STACKS || duration_ns == 0 {
            return Err(format!(
                "the EL0 executor reported {threads} threads and a run of {duration_ns} ns"
            ));
        }
        let names = (0..threads)
            .map(|i| {
                let mut b = [0u8; NAME_BYTES];
                for (k, chunk) in b.chunks_mut(4).enumerate() {
                    chunk.copy_from_slice(&word(R_NAMES + NAME_BYTES * i + 4 * k).to_le_bytes());
                }
                let n = b.iter().position(|&c| c == 0).unwrap_or(NAME_BYTES);
                String::from_utf8_lossy(&b[..n]).into_owned()
            })
            .collect();
        Ok(Ready { duration_ns, names })
    }

    /// Time zero is `t0_ns`: the main thread starts the workload's threads.
    pub fn go(&self, t0_ns: u64) -> Result<(), String> {
        if !self.space.store_u64(INFO_VA + 8 * W_T0, t0_ns)
            || !self.space.store_u32_and_wake(INFO_VA + 8 * W_GO, 1)
        {
            return Err("el0: the boot info page is not mapped".into());
        }
        Ok(())
    }

    /// Waits for the main thread, which ends once it has started every thread (or at a bad
    /// workload, with the reader's message on the console and status 2).
    pub fn join(&self) -> Result<(), String> {
        match task::join(self.main) {
            Ok(ExitStatus::Exited(0)) => Ok(()),
            Ok(ExitStatus::Exited(n)) => Err(format!("the EL0 executor exited with status {n}")),
            Ok(ExitStatus::Fault { ec, far, pc }) => Err(format!(
                "the EL0 executor was killed: EC {ec:#04x}, FAR {far:#x}, PC {pc:#x}"
            )),
            Ok(s) => Err(format!("the EL0 executor ended: {s:?}")),
            Err(e) => Err(format!("the EL0 executor: {e:?}")),
        }
    }

    /// The ids the program recorded for its first `n` workload threads (`None`: not started).
    pub fn tids(&self, n: usize) -> Vec<Option<u32>> {
        (0..n)
            .map(|i| user::read_u32(&self.space, RESULT_VA + R_TIDS + 4 * i).filter(|&t| t != 0))
            .collect()
    }
}

fn truncate_bytes(s: &str, max: usize) -> &str {
    let mut n = s.len().min(max);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    &s[..n]
}
