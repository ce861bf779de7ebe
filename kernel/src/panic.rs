//! Fatal errors: the panic handler, the common end of every fatal path (a panic, a fatal
//! exception, a failed boot step), and how a run ends.
//!
//! Re-derives Linux's `kernel/panic.c` (`panic()`: one report, then the other CPUs are stopped,
//! then `panic_timeout` decides between halting and rebooting), arm64's `die()`
//! (`arch/arm64/kernel/traps.c`) and `kernel/reboot.c`'s `kernel_power_off`. Deliberate
//! differences: a run that asked to end (`semihosting`, implied by `selftest`) ends through
//! semihosting with a status (101 for a panic, 1 for a fatal exception) so test runners see a
//! failure instead of a hang; where no semihosting host answers (every board on its own), it
//! says so on the console and powers off with PSCI `SYSTEM_OFF`, as a board's firmware would.
//!
//! Every fatal path first calls [`enter_fatal`], which counts how deeply the calling CPU is
//! nested inside fatal paths. Only the outermost one prints a full report; a fault (or panic)
//! while reporting prints one line and goes straight to the end; anything deeper stops the CPU
//! without printing. So a reporter that faults can never recurse, whatever it faults on.

use core::panic::PanicInfo;
use core::sync::atomic::{AtomicI32, AtomicU8, Ordering};

use crate::board::EndAction;
use crate::dt::MAX_CPUS;
use crate::{arch, console, semihosting};

/// How deeply the calling CPU is nested in fatal paths, from [`enter_fatal`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nesting {
    /// The first fatal error on this CPU: print the full report.
    First,
    /// A fatal error while handling one: print one line, then end.
    Nested,
    /// Deeper still (printing the one line failed too): stop without printing.
    Deep,
}

/// Per CPU: how many fatal paths the CPU is inside. Written only by its own CPU, with a plain
/// load and store: a fatal path may run before the MMU is on, where load/store-exclusive is not
/// guaranteed to work.
static DEPTH: [AtomicU8; MAX_CPUS] = [const { AtomicU8::new(0) }; MAX_CPUS];

/// Whether the run ends (semihosting exit, else power-off) rather than halting: unknown
/// until the command line is parsed; `semihosting`, implied by `selftest`, says yes.
static END_POLICY: AtomicU8 = AtomicU8::new(POLICY_UNKNOWN);
/// Before the command line is known: try semihosting, then halt.
const POLICY_UNKNOWN: u8 = 0;
/// `semihosting`: exit through semihosting, else PSCI `SYSTEM_OFF`.
const POLICY_END: u8 = 1;
/// No `semihosting`: after a fatal error, what `panic=` says (Linux's `panic_timeout`).
const POLICY_PANIC_TIMEOUT: u8 = 2;

/// `panic=`: seconds until a reset after a fatal error; 0 halts for good, negative resets at
/// once (Linux `panic_timeout`).
static PANIC_TIMEOUT_S: AtomicI32 = AtomicI32::new(0);

/// Records how the run ends (boot, after the command line): through semihosting (`semihosting`
/// or `selftest`), or after a fatal error as `panic=` says.
pub fn set_policy(semihosting: bool, panic_timeout_s: i32) {
    PANIC_TIMEOUT_S.store(panic_timeout_s, Ordering::Relaxed);
    let policy = if semihosting {
        POLICY_END
    } else {
        POLICY_PANIC_TIMEOUT
    };
    END_POLICY.store(policy, Ordering::Relaxed);
}

/// Marks the calling CPU as inside one more fatal path (interrupts masked) and says how deep
/// it now is. Call first thing in every fatal path.
pub fn enter_fatal() -> Nesting {
    arch::mask_all_exceptions();
    let slot = &DEPTH[arch::cpu_index() % MAX_CPUS];
    let depth = slot.load(Ordering::Relaxed);
    slot.store(depth.saturating_add(1), Ordering::Relaxed);
    match depth {
        0 => Nesting::First,
        1 => Nesting::Nested,
        _ => Nesting::Deep,
    }
}

/// Ends the run after a fatal error whose report is on the console (Linux `panic()` after the
/// message): this CPU goes offline, the other CPUs are stopped (`smp_send_stop`, bounded, as
/// a CPU stuck with interrupts masked cannot take the stop IPI), then: with `semihosting` the
/// run exits with `status` (or, without a semihosting host, powers off); otherwise `panic=`
/// decides between halting and a reset. Before the command line is known, semihosting is
/// tried, then the system halts.
pub fn end_fatal(status: u32) -> ! {
    let me = crate::percpu::current_cpu();
    crate::smp::mark_offline(me);
    if crate::gic::version().is_some() {
        match crate::smp::stop_other_cpus(STOP_TIMEOUT_US) {
            0 => console::write_fmt_force(format_args!(
                "asym: fatal error on cpu {}: all other CPUs stopped\n",
                me.0
            )),
            left => console::write_fmt_force(format_args!(
                "asym: fatal error on cpu {}: {} other CPUs did not stop (interrupts masked?)\n",
                me.0, left
            )),
        }
    }
    match END_POLICY.load(Ordering::Relaxed) {
        POLICY_END => end_run(status),
        POLICY_UNKNOWN => {
            semihosting::try_exit(status);
            halt()
        }
        _ => match PANIC_TIMEOUT_S.load(Ordering::Relaxed) {
            0 => halt(),
            t => reset_after(t),
        },
    }
}

/// Ends a run that is meant to end (self tests done, `ticks=` reached, or a fatal error under
/// `semihosting`): a semihosting exit with `status` when `semihosting` is on and a host
/// answers; else what the board's [`EndPolicy`](crate::board::EndPolicy) says for `status`
/// (on the boards: PSCI `SYSTEM_OFF` after a pass, a halt after a failure), said on the
/// console first. A PSCI call the firmware refuses ends in a halt.
pub fn end_run(status: u32) -> ! {
    console::write_fmt_force(format_args!(
        "asym: ending the run with status {} at {} us\n",
        status,
        arch::uptime_us()
    ));
    if END_POLICY.load(Ordering::Relaxed) != POLICY_PANIC_TIMEOUT {
        semihosting::try_exit(status);
        console::write_fmt_force(format_args!(
            "asym: no semihosting host to take exit status {}\n",
            status
        ));
    }
    let board = crate::boot::board();
    let action = board.end.action(status);
    console::write_fmt_force(format_args!(
        "asym: {} policy for status {}: {}\n",
        board.name,
        status,
        match action {
            EndAction::SystemOff => "power off",
            EndAction::SystemReset => "reset",
            EndAction::Halt => "halt",
        }
    ));
    match action {
        EndAction::SystemOff => power_off(),
        EndAction::SystemReset => reset_now(),
        EndAction::Halt => halt(),
    }
}

/// How long a fatal error waits for the other CPUs to stop, guest microseconds.
const STOP_TIMEOUT_US: u64 = 100_000;

/// PSCI `SYSTEM_OFF` through the DT's conduit (after the DT is parsed), else halt.
fn power_off() -> ! {
    let Some(plat) = crate::boot::platform() else {
        halt()
    };
    console::write_fmt_force(format_args!(
        "asym: powering off (PSCI SYSTEM_OFF) at {} us\n",
        arch::uptime_us()
    ));
    let e = crate::psci::system_off(plat.psci.conduit);
    console::write_fmt_force(format_args!("asym: PSCI SYSTEM_OFF failed: {:?}\n", e));
    halt()
}

/// `panic=` with a non-zero value: PSCI `SYSTEM_RESET` after `timeout_s` seconds of guest time
/// (at once when negative), else halt.
fn reset_after(timeout_s: i32) -> ! {
    let Some(plat) = crate::boot::platform() else {
        halt()
    };
    if timeout_s > 0 {
        console::write_fmt_force(format_args!(
            "asym: rebooting in {} s (panic={})\n",
            timeout_s, timeout_s
        ));
        let f = arch::counter_freq_hz();
        let until = arch::counter().saturating_add(f.saturating_mul(timeout_s as u64));
        while arch::counter() < until {
            arch::wfi();
        }
    }
    console::write_fmt_force(format_args!(
        "asym: rebooting (PSCI SYSTEM_RESET, panic={}) at {} us\n",
        timeout_s,
        arch::uptime_us()
    ));
    system_reset(plat)
}

/// PSCI `SYSTEM_RESET` now, said on the console first (the board's end policy).
fn reset_now() -> ! {
    let Some(plat) = crate::boot::platform() else {
        halt()
    };
    console::write_fmt_force(format_args!(
        "asym: rebooting (PSCI SYSTEM_RESET) at {} us\n",
        arch::uptime_us()
    ));
    system_reset(plat)
}

fn system_reset(plat: &crate::dt::Platform) -> ! {
    let e = crate::psci::system_reset(plat.psci.conduit);
    console::write_fmt_force(format_args!("asym: PSCI SYSTEM_RESET failed: {:?}\n", e));
    halt()
}

/// Stops the system for good: says so and parks this CPU.
fn halt() -> ! {
    console::write_fmt_force(format_args!(
        "asym: system halted at {} us\n",
        arch::uptime_us()
    ));
    stop_this_cpu()
}

/// Stops the calling CPU for good, printing nothing; it is offline from here.
pub fn stop_this_cpu() -> ! {
    crate::smp::park_this_cpu(crate::percpu::current_cpu())
}

/// Linux `panic()`: interrupts off, the message and location on the console (without waiting
/// for a console lock a dead CPU may hold), then [`end_fatal`] with status 101. A panic while
/// handling a fatal error prints one line and ends.
#[panic_handler]
fn panic(info: &PanicInfo<'_>) -> ! {
    let cpu = arch::cpu_index();
    match enter_fatal() {
        Nesting::First => {}
        Nesting::Nested => {
            console::write_fmt_force(format_args!(
                "panic on cpu {} while handling a fatal error: {}\n",
                cpu,
                info.message()
            ));
            end_fatal(101)
        }
        Nesting::Deep => stop_this_cpu(),
    }
    let report_lock = console::lock_report();
    match info.location() {
        Some(l) => console::write_fmt_force(format_args!(
            "panic on cpu {} at {}:{}: {}\n",
            cpu,
            l.file(),
            l.line(),
            info.message()
        )),
        None => {
            console::write_fmt_force(format_args!("panic on cpu {}: {}\n", cpu, info.message()))
        }
    }
    drop(report_lock);
    end_fatal(101)
}
