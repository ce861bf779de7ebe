//! Exception vectors (all 16 entries), the trap frame, fault reports, and `expect_fault`.
//!
//! Re-derives Linux's `arch/arm64/kernel/entry.S` (`kernel_ventry`, `kernel_entry`/
//! `kernel_exit`) and the reporting of `arch/arm64/mm/fault.c` (`die_kernel_fault`,
//! `esr_get_class_string`). Deliberate differences: a synchronous fault in the kernel halts only
//! the faulting CPU (no oops/reboot); under `selftest` a fault outside a test ends the run with a
//! failure; [`expect_fault`] lets a self test provoke a fault, get the report, and resume after
//! the faulting instruction (Linux's exception tables play this role for uaccess).
//!
//! Interrupts do not nest: the IRQ vector runs its handler with IRQs masked (as Linux arm64
//! does). A synchronous fault inside an IRQ handler is reported and halts the CPU like any
//! other; the trap frame holds the faulting context, the interrupted one stays on the stack
//! below. [`expect_fault`] only catches a fault at the interrupt depth it was called at, so an
//! IRQ handler's bug taken while a test waits for its own fault is still reported as fatal.
//!
//! Two vector tables, one check each (Linux has one, because its boot task runs on an aligned
//! `THREAD_SIZE` stack from the start; ours boots on larger stacks):
//! - `__asym_vectors`, while a CPU runs on its boot stack: the frame is checked against the
//!   boot-stack slots and overflow stacks by address, with `SP_EL0`/`TPIDRRO_EL0` as scratch.
//!   No thread, so no EL0 state, exists on a CPU before it leaves its boot stack.
//! - `__asym_thread_vectors`, from a CPU's first thread on (`context::start_first`): every
//!   stack (thread stacks and overflow stacks) is the upper half of a `2 × THREAD_SIZE`-aligned
//!   slot whose lower half is unmapped, so the frame is in bounds exactly when bit
//!   `THREAD_SHIFT` of its address is set (Linux `kernel_ventry` tests the same bit, with its
//!   stacks in the lower half of their alignment). The test needs no scratch register; only the overflow path, which
//!   is fatal or kills the thread, parks x0/x1 in `TPIDRRO_EL0` and `SP_EL0` (the kernel runs
//!   on SP_EL1, and EL0's SP is saved in the frame of any exception from EL0). `TPIDR_EL0`
//!   belongs to EL0: the vectors never write it; the context switch saves and restores it.
//!
//! Softirqs: after an IRQ handler, still with IRQs masked, the pending softirqs run on the IRQ
//! stack (`crate::softirq::irq_exit`, Linux `irq_exit_rcu` → `do_softirq_own_stack`), before
//! the preemption check.
//!
//! Kernel preemption: after an IRQ handler, if the CPU's need-resched flag is set and the
//! interrupted thread allows it, the thread is preempted on its way out
//! (`crate::sched::preempt_schedule_irq`, Linux `arm64_preempt_schedule_irq`). A thread whose
//! stack overflowed with IRQs unmasked (so holding no spin lock) is reported and killed; the
//! rest of the system goes on.

use core::arch::{asm, global_asm};
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use super::context::{THREAD_SHIFT, THREAD_SIZE};
use super::entry::{
    BOOT_STACK_SIZE, OVERFLOW_GUARD_SIZE, OVERFLOW_STACK_SIZE, STACK_GUARD_SIZE, STACK_SIZE,
};
use crate::dt::MAX_CPUS;

/// Registers saved on exception entry.
#[repr(C)]
#[derive(Debug)]
pub struct TrapFrame {
    pub x: [u64; 31],
    pub elr: u64,
    pub spsr: u64,
    /// SP_EL0: EL0's stack pointer for an exception from EL0 (the kernel runs on SP_EL1).
    pub sp_el0: u64,
}

/// What a synchronous exception looked like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultReport {
    pub cpu: usize,
    /// The exception level the fault was taken from (SPSR.M[3:2]).
    pub el: u8,
    pub esr: u64,
    pub far: u64,
    pub elr: u64,
    pub spsr: u64,
    /// `Some(sp)` when the exception frame would have landed in a stack guard page at `sp`
    /// (a stack overflow), whatever the exception itself was.
    pub overflow_sp: Option<u64>,
}

impl FaultReport {
    /// ESR_EL1.EC, the exception class.
    pub fn ec(&self) -> u8 {
        ((self.esr >> 26) & 0x3f) as u8
    }

    /// ESR_EL1.ISS.
    pub fn iss(&self) -> u32 {
        (self.esr & 0x1ff_ffff) as u32
    }

    /// The exception class by name (names as in the Arm ARM / Linux `esr_class_str`).
    pub fn class_name(&self) -> &'static str {
        ec_name(self.ec())
    }
}

impl fmt::Display for FaultReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "synchronous exception on cpu {} at EL{}: {} (EC {:#04x}), ESR {:#010x}, ISS {:#09x}, FAR {:#018x}, ELR {:#018x}, SPSR {:#010x}",
            self.cpu,
            self.el,
            self.class_name(),
            self.ec(),
            self.esr,
            self.iss(),
            self.far,
            self.elr,
            self.spsr
        )
    }
}

/// Exception class names for ESR_ELx.EC.
pub fn ec_name(ec: u8) -> &'static str {
    match ec {
        0x00 => "Unknown reason",
        0x01 => "WFI/WFE",
        0x07 => "SIMD/FP access",
        0x0e => "Illegal Execution state",
        0x15 => "SVC (AArch64)",
        0x16 => "HVC (AArch64)",
        0x17 => "SMC (AArch64)",
        0x18 => "MSR/MRS (AArch64)",
        0x20 => "Instruction Abort (lower EL)",
        0x21 => "Instruction Abort (current EL)",
        0x22 => "PC Alignment",
        0x24 => "Data Abort (lower EL)",
        0x25 => "Data Abort (current EL)",
        0x26 => "SP Alignment",
        0x2f => "SError",
        0x30 => "Breakpoint (lower EL)",
        0x31 => "Breakpoint (current EL)",
        0x32 => "Software Step (lower EL)",
        0x33 => "Software Step (current EL)",
        0x34 => "Watchpoint (lower EL)",
        0x35 => "Watchpoint (current EL)",
        0x3c => "BRK (AArch64)",
        _ => "Unrecognized EC",
    }
}

/// Per-CPU IRQ handler nesting depth (0 or 1: IRQs do not nest).
static IRQ_DEPTH: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];
/// Per CPU: the IRQ depth `expect_fault` was called at.
static EXPECT_DEPTH: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];

/// Whether the calling CPU is running an interrupt handler (Linux `in_hardirq()`).
pub fn in_irq() -> bool {
    let cpu = super::cpu_index();
    cpu < MAX_CPUS && IRQ_DEPTH[cpu].load(Ordering::Relaxed) != 0
}

/// Per-CPU "a fault is expected" flags and the recorded report (one slot each).
static EXPECTING: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
static CAUGHT: [[AtomicU64; 5]; MAX_CPUS] = [const { [const { AtomicU64::new(0) }; 5] }; MAX_CPUS];
static CAUGHT_VALID: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// Runs `f` with this CPU marked as expecting a synchronous fault. If `f` faults, the fault is
/// recorded and printed, execution resumes after the faulting instruction (after an
/// instruction abort on a branch target: at the link register, i.e. the `blr` returns), and the
/// report is returned; `None` if `f` ran without faulting. Only the first fault is caught; a second one
/// inside `f` is a real fault.
///
/// What a test reading an unmapped address inside `f` relies on: for Rust such a read is
/// undefined behaviour whatever the hardware does (the address is no allocation). It holds in
/// practice only because `read_volatile` becomes exactly one load the compiler cannot reason
/// about, the load faults before producing a value, and execution resumes after it. Tests
/// only, and only that way.
pub fn expect_fault(f: impl FnOnce()) -> Option<FaultReport> {
    let cpu = super::cpu_index();
    if cpu >= MAX_CPUS {
        f();
        return None;
    }
    CAUGHT_VALID[cpu].store(false, Ordering::SeqCst);
    EXPECT_DEPTH[cpu].store(IRQ_DEPTH[cpu].load(Ordering::Relaxed), Ordering::Relaxed);
    EXPECTING[cpu].store(true, Ordering::SeqCst);
    f();
    EXPECTING[cpu].store(false, Ordering::SeqCst);
    if !CAUGHT_VALID[cpu].swap(false, Ordering::SeqCst) {
        return None;
    }
    let c = &CAUGHT[cpu];
    Some(FaultReport {
        cpu,
        el: ((c[3].load(Ordering::Relaxed) >> 2) & 3) as u8,
        esr: c[0].load(Ordering::Relaxed),
        far: c[1].load(Ordering::Relaxed),
        elr: c[2].load(Ordering::Relaxed),
        spsr: c[3].load(Ordering::Relaxed),
        overflow_sp: match c[4].load(Ordering::Relaxed) {
            0 => None,
            sp => Some(sp),
        },
    })
}

/// Which of the 16 vector entries was taken (group × type).
const KIND_NAMES: [&str; 16] = [
    "sync (current EL, SP0)",
    "IRQ (current EL, SP0)",
    "FIQ (current EL, SP0)",
    "SError (current EL, SP0)",
    "sync (current EL, SPx)",
    "IRQ (current EL, SPx)",
    "FIQ (current EL, SPx)",
    "SError (current EL, SPx)",
    "sync (lower EL, AArch64)",
    "IRQ (lower EL, AArch64)",
    "FIQ (lower EL, AArch64)",
    "SError (lower EL, AArch64)",
    "sync (lower EL, AArch32)",
    "IRQ (lower EL, AArch32)",
    "FIQ (lower EL, AArch32)",
    "SError (lower EL, AArch32)",
];

/// The `kind` the vectors pass when the exception frame would have overflowed the stack.
const KIND_STACK_OVERFLOW: u64 = 16;
/// The `kind` the vectors pass when a fatal report ran out of its overflow stack.
const KIND_OVERFLOW_STACK_OVERFLOW: u64 = 17;

/// Rust side of every vector: `kind` is the entry index 0..16, or [`KIND_STACK_OVERFLOW`].
/// `above` is the address just above the frame: the SP the exception was taken with, except
/// for a stack overflow, where that SP is stored at `above` (on the overflow stack).
extern "C" fn handle_exception(frame: &mut TrapFrame, kind: u64, above: *const u64) {
    match kind {
        1 | 5 | 9 | 13 => {
            let cpu = super::cpu_index() % MAX_CPUS;
            IRQ_DEPTH[cpu].fetch_add(1, Ordering::Relaxed);
            // SAFETY: IRQs do not nest, so this CPU's IRQ stack is unused; the handler returns
            // before this frame goes on.
            unsafe { __asym_call_on_irq_stack(irq_entry_c, super::entry::irq_stack_top(cpu)) };
            IRQ_DEPTH[cpu].fetch_sub(1, Ordering::Relaxed);
            if crate::softirq::pending_here() {
                // SAFETY: IRQs are still masked and the handler has returned, so this CPU's
                // IRQ stack is unused again (Linux arm64 `do_softirq_own_stack`); the
                // softirqs return before this frame goes on.
                unsafe {
                    __asym_call_on_irq_stack(softirq_entry_c, super::entry::irq_stack_top(cpu))
                };
            }
            // Back on the interrupted thread's stack, which preemption switches away from.
            crate::sched::preempt_schedule_irq(frame.spsr);
        }
        8 => {
            let r = current_report(frame);
            crate::user::el0_sync(frame, r.esr, r.far);
        }
        0 | 4 | 12 => handle_sync(frame, kind as usize, above as u64),
        KIND_STACK_OVERFLOW => {
            // SAFETY: `__asym_stack_overflow` stored the interrupted SP in the word above the
            // frame, inside this CPU's overflow stack.
            let sp = unsafe { above.read() };
            let mut report = current_report(frame);
            report.overflow_sp = Some(sp);
            // A self test may provoke this with IRQs masked and its own SP moved into the
            // guard page; it resumes (on its real stack, which it restores itself).
            if !catch_expected(frame, &report) {
                stack_overflow(frame, report)
            }
        }
        KIND_OVERFLOW_STACK_OVERFLOW => {
            // SAFETY: as for KIND_STACK_OVERFLOW.
            let sp = unsafe { above.read() };
            let mut report = current_report(frame);
            report.overflow_sp = Some(sp);
            // Only a self test provokes this outside a fatal report (see KIND_STACK_OVERFLOW).
            if !catch_expected(frame, &report) {
                fatal(frame, kind as usize, sp, Some(report))
            }
        }
        _ => fatal(frame, kind as usize, above as u64, None),
    }
}

extern "C" fn irq_entry_c() {
    crate::boot::irq_entry();
}

extern "C" fn softirq_entry_c() {
    crate::softirq::irq_exit();
}

unsafe extern "C" {
    /// Calls `f` with SP at `stack_top`, then restores SP (Linux `call_on_irq_stack`).
    fn __asym_call_on_irq_stack(f: extern "C" fn(), stack_top: usize);
}

global_asm!(
    r#"
    .text
    .global __asym_call_on_irq_stack
__asym_call_on_irq_stack:
    stp     x29, x30, [sp, #-16]!
    mov     x29, sp
    mov     sp, x1
    blr     x0
    mov     sp, x29
    ldp     x29, x30, [sp], #16
    ret
"#
);

unsafe extern "C" {
    fn __asym_enter_el0(pc: u64, sp_el0: u64, arg: u64, kstack_top: usize) -> !;
}

/// Leaves the kernel for EL0 at `pc` with SP_EL0 = `sp_el0`, `x0 = arg`, every other general
/// register zero (no kernel value leaks), all exceptions unmasked at EL0 (SPSR = EL0t). The
/// next exception from EL0 lands on SP_EL1 = `kstack_top`.
///
/// # Safety
/// IRQs masked; the calling thread's kernel stack ends at `kstack_top` and nothing on it is
/// needed again; TTBR1 holds an address space where `pc` is EL0-executable.
pub unsafe fn enter_el0(pc: u64, sp_el0: u64, arg: u64, kstack_top: usize) -> ! {
    // SAFETY: guaranteed by the caller.
    unsafe { __asym_enter_el0(pc, sp_el0, arg, kstack_top) }
}

global_asm!(
    r#"
    .text
    .global __asym_enter_el0
__asym_enter_el0:
    mov     sp, x3
    msr     elr_el1, x0
    msr     sp_el0, x1
    msr     spsr_el1, xzr
    mov     x0, x2
    mov     x1, xzr
    mov     x2, xzr
    mov     x3, xzr
    mov     x4, xzr
    mov     x5, xzr
    mov     x6, xzr
    mov     x7, xzr
    mov     x8, xzr
    mov     x9, xzr
    mov     x10, xzr
    mov     x11, xzr
    mov     x12, xzr
    mov     x13, xzr
    mov     x14, xzr
    mov     x15, xzr
    mov     x16, xzr
    mov     x17, xzr
    mov     x18, xzr
    mov     x19, xzr
    mov     x20, xzr
    mov     x21, xzr
    mov     x22, xzr
    mov     x23, xzr
    mov     x24, xzr
    mov     x25, xzr
    mov     x26, xzr
    mov     x27, xzr
    mov     x28, xzr
    mov     x29, xzr
    mov     x30, xzr
    eret
"#
);

/// A CPU ran off the bottom of its stack: report where; a thread that may be killed is
/// killed, anything else halts the system like any fatal fault.
fn stack_overflow(frame: &TrapFrame, report: FaultReport) -> ! {
    let sp = report.overflow_sp.unwrap_or(0);
    if let Some(slot) = super::context::stack_slot_of(sp as usize) {
        let killable = crate::sched::overflow_killable(slot, frame.spsr);
        crate::console::write_fmt_force(format_args!(
            "kernel stack overflow on cpu {}: SP {:#x} is in the guard below thread stack {} \
             ({} KiB){}\n",
            super::cpu_index(),
            sp,
            slot,
            THREAD_SIZE / 1024,
            if killable {
                "; the thread is killed"
            } else {
                ""
            }
        ));
        if killable {
            crate::console::write_fmt_force(format_args!("{}\n", report));
            print_registers(frame, sp);
            // The exception is abandoned: back to the interrupted context's SError/debug
            // masks, IRQs still masked, then off this (overflow) stack for good.
            super::daif_from_spsr_irq_masked(frame.spsr);
            crate::sched::kill_overflowed(slot);
        }
        fatal(frame, KIND_STACK_OVERFLOW as usize, sp, Some(report))
    }
    if let Some(c) = super::entry::irq_stack_cpu_of(sp as usize) {
        crate::console::write_fmt_force(format_args!(
            "kernel stack overflow on cpu {}: SP {:#x} is in the guard below cpu {}'s IRQ stack \
             ({} KiB)\n",
            super::cpu_index(),
            sp,
            c,
            THREAD_SIZE / 1024
        ));
        fatal(frame, KIND_STACK_OVERFLOW as usize, sp, Some(report))
    }
    let slot = super::entry::stack_slot_of(sp as usize).unwrap_or(usize::MAX);
    let usable = if slot == MAX_CPUS {
        BOOT_STACK_SIZE
    } else {
        STACK_SIZE
    } - STACK_GUARD_SIZE;
    crate::console::write_fmt_force(format_args!(
        "kernel stack overflow on cpu {}: SP {:#x} is in the guard page of stack slot {} \
         ({} KiB usable)\n",
        super::cpu_index(),
        sp,
        slot,
        usable / 1024
    ));
    fatal(frame, KIND_STACK_OVERFLOW as usize, sp, Some(report))
}

/// The synchronous exception being handled, as a report.
fn current_report(frame: &TrapFrame) -> FaultReport {
    let (esr, far): (u64, u64);
    // SAFETY: ESR_EL1/FAR_EL1 are readable at EL1 and describe the exception being handled.
    unsafe {
        asm!("mrs {}, esr_el1", "mrs {}, far_el1", out(reg) esr, out(reg) far, options(nomem, nostack))
    };
    FaultReport {
        cpu: super::cpu_index(),
        // SPSR.M[3:2]: the exception level the fault was taken from.
        el: ((frame.spsr >> 2) & 3) as u8,
        esr,
        far,
        elr: frame.elr,
        spsr: frame.spsr,
        overflow_sp: None,
    }
}

fn handle_sync(frame: &mut TrapFrame, kind: usize, sp: u64) {
    let report = current_report(frame);
    if report.ec() == 0 && crate::semihosting::catch_undefined(frame.elr) {
        // The semihosting `HLT` with no host: the call returns and reports it.
        frame.elr += 4;
        return;
    }
    if !catch_expected(frame, &report) {
        fatal(frame, kind, sp, Some(report));
    }
}

/// If this CPU is inside [`expect_fault`], records `report`, prints it, sets the frame up to
/// resume after the faulting instruction and returns true.
fn catch_expected(frame: &mut TrapFrame, report: &FaultReport) -> bool {
    let cpu = report.cpu;
    if cpu >= MAX_CPUS
        || IRQ_DEPTH[cpu].load(Ordering::Relaxed) != EXPECT_DEPTH[cpu].load(Ordering::Relaxed)
        || !EXPECTING[cpu].swap(false, Ordering::SeqCst)
    {
        return false;
    }
    let c = &CAUGHT[cpu];
    c[0].store(report.esr, Ordering::Relaxed);
    c[1].store(report.far, Ordering::Relaxed);
    c[2].store(frame.elr, Ordering::Relaxed);
    c[3].store(frame.spsr, Ordering::Relaxed);
    c[4].store(report.overflow_sp.unwrap_or(0), Ordering::Relaxed);
    CAUGHT_VALID[cpu].store(true, Ordering::SeqCst);
    crate::println!("expected fault: {}", report);
    if report.ec() == 0x21 && frame.elr == report.far {
        // The branch target itself did not fetch (an expected test jumped with `blr` into
        // non-executable memory): return to the caller.
        frame.elr = frame.x[30];
    } else {
        // Resume after the faulting instruction (A64 instructions are 4 bytes).
        frame.elr += 4;
    }
    true
}

/// Set by `crash=nested` (a test of the fatal path itself): every fatal report faults after its
/// first line, as a reporter with a bug would.
static FAULT_IN_REPORT: AtomicBool = AtomicBool::new(false);

/// Makes every later fatal report fault after its first line (`crash=nested`).
pub fn inject_fault_in_reports() {
    FAULT_IN_REPORT.store(true, Ordering::SeqCst);
}

/// Reports a fatal exception and ends the run ([`crate::panic::end_fatal`]). Re-entrancy safe:
/// a fault while reporting (this function faulting, or anything it calls) lands here again
/// nested, prints one line and ends; deeper nesting stops the CPU without printing.
fn fatal(frame: &TrapFrame, kind: usize, sp: u64, report: Option<FaultReport>) -> ! {
    use crate::console::write_fmt_force as out;
    use crate::panic::Nesting;
    let cpu = super::cpu_index();
    let esr: u64;
    // SAFETY: ESR_EL1 is readable at EL1 (also valid for an SError: its ISS says what kind).
    unsafe { asm!("mrs {}, esr_el1", out(reg) esr, options(nomem, nostack)) };
    match crate::panic::enter_fatal() {
        Nesting::First => {}
        Nesting::Nested => {
            // Integers only: whatever broke the full report is not used again.
            out(format_args!(
                "cpu {} faulted while handling a fatal error: {}, ESR {:#010x}, FAR {:#018x}, \
                 ELR {:#018x}; report abandoned\n",
                cpu,
                KIND_NAMES.get(kind).copied().unwrap_or("stack overflow"),
                esr,
                report.map_or(0, |r| r.far),
                frame.elr
            ));
            crate::panic::end_fatal(1)
        }
        Nesting::Deep => crate::panic::stop_this_cpu(),
    }
    let report_lock = crate::console::lock_report();
    // The fault may have hit while this CPU held the console lock: print with the forcing
    // writer, which gives up on the lock after a bounded wait.
    match report {
        Some(r) => out(format_args!("{}\n", r)),
        None => out(format_args!(
            "unexpected exception on cpu {}: {}, ESR {:#010x}, ELR {:#018x}, SPSR {:#010x}\n",
            cpu,
            KIND_NAMES[kind & 15],
            esr,
            frame.elr,
            frame.spsr
        )),
    }
    let dt_device = report.and_then(|r| {
        let plat = crate::boot::platform()?;
        plat.device_at(r.far as usize)
    });
    if let Some((node, what)) = dt_device {
        out(format_args!(
            "  FAR is in the {} the device tree gives at {} property `reg`\n",
            what, node
        ));
    }
    if FAULT_IN_REPORT.load(Ordering::Relaxed) {
        // SAFETY: none needed for soundness: the load faults (unmapped, see crash=fault) and
        // the nested fault ends the run; it never returns here.
        let _ = unsafe { core::ptr::read_volatile(0x40_0000_0000 as *const u64) };
    }
    print_registers(frame, sp);
    out(format_args!("cpu {} halted\n", cpu));
    drop(report_lock);
    crate::panic::end_fatal(1)
}

/// Prints SP and x0–x30 of a trap frame.
fn print_registers(frame: &TrapFrame, sp: u64) {
    use crate::console::write_fmt_force as out;
    out(format_args!("  sp  {:#018x}\n", sp));
    for (i, pair) in frame.x.chunks(2).enumerate() {
        match pair {
            [a, b] => out(format_args!(
                "  x{:<2} {:#018x}  x{:<2} {:#018x}\n",
                2 * i,
                a,
                2 * i + 1,
                b
            )),
            [a] => out(format_args!("  x{:<2} {:#018x}\n", 2 * i, a)),
            _ => {}
        }
    }
}

// The boot vectors (`__asym_vectors`, see the module docs).
// 16 entries of 0x80 bytes; each reserves the frame, checks that it does not lie in a stack
// guard page, saves x0/x1, puts its index in x0 and joins the common path, which saves the
// rest, calls `handle_exception(frame, kind, above)`, restores and returns with eret.
//
// The guard check (Linux `kernel_ventry`'s overflow check, done differently: our stacks are
// slots of two arrays, not THREAD_SIZE-aligned vmap areas): x0/x1 are parked in TPIDRRO_EL0 and
// SP_EL0. Neither is EL0's to lose here: no thread (so no EL0 state) exists on a boot stack, and
// the kernel runs on SP_EL1 (SPSel = 1), so SP_EL0 is only ever EL0's stack pointer, which an
// exception from EL0 saves in its frame. TPIDR_EL0, EL0's writable TLS register, is never
// touched by the vectors. If the new SP is less than
// STACK_GUARD_SIZE above the start of a secondary's slot or of the boot CPU's stack, the frame
// would be written to an unmapped guard page (faulting again, forever): `__asym_stack_overflow`
// switches to the CPU's overflow stack instead. If it is in the guard page of an overflow stack
// (a fatal report ran out of its overflow stack), `__asym_overflow_stack_overflow` starts that
// stack afresh and reports the nested failure. Offsets are unsigned, so an SP below an array
// wraps to a huge offset and fails every "inside" test.
// The scratch registers are live only between instructions that cannot fault.
global_asm!(
    r#"
    .macro ASYM_VENTRY kind
    .balign 0x80
9:
    sub     sp, sp, #(34 * 8)
    msr     tpidrro_el0, x0
    msr     sp_el0, x1
    mov     x1, sp
    adrp    x0, {boot_stacks}
    add     x0, x0, :lo12:{boot_stacks}
    subs    x0, x1, x0
    b.lo    4f
    movz    x1, #({secondary_len} >> 16), lsl #16
    cmp     x0, x1
    b.hs    2f
    and     x0, x0, #({stack_size} - 1)
    b       3f
2:
    sub     x0, x0, x1                  // from the boot CPU's stack (its guard page first)
3:
    cmp     x0, #{guard_size}
    b.lo    __asym_stack_overflow
    b       1f
4:
    adrp    x0, {overflow_stacks}       // below the boot stacks: an overflow stack?
    add     x0, x0, :lo12:{overflow_stacks}
    sub     x0, x1, x0
    cmp     x0, #{overflow_len}
    b.hs    1f
    and     x0, x0, #({overflow_size} - 1)
    cmp     x0, #{overflow_guard}
    b.lo    __asym_overflow_stack_overflow
1:
    mrs     x0, tpidrro_el0
    mrs     x1, sp_el0
    stp     x0, x1, [sp, #(0 * 8)]
    mov     x0, #\kind
    b       __asym_exception_common
    .org    9b + 0x80                   // the assembler refuses to move backwards: an
                                        // entry longer than 0x80 bytes fails the build
    .endm

// Switches to the top of this CPU's overflow stack (TPIDR_EL1 is the logical index, 0 on the
// boot CPU before the DT is parsed, when no other CPU runs), pushes the SP the exception was
// taken with just above a fresh frame, and reports with `kind`.
    .macro ASYM_OVERFLOW_SWITCH kind
    mrs     x0, tpidr_el1
    and     x0, x0, #({max_cpus} - 1)
    add     x0, x0, #1
    lsl     x0, x0, #{overflow_shift}
    adrp    x1, {overflow_stacks}
    add     x1, x1, :lo12:{overflow_stacks}
    add     x1, x1, x0
    mov     x0, sp
    add     x0, x0, #(34 * 8)
    mov     sp, x1
    sub     sp, sp, #(34 * 8 + 16)
    str     x0, [sp, #(34 * 8)]
    mrs     x0, tpidrro_el0
    mrs     x1, sp_el0
    stp     x0, x1, [sp, #(0 * 8)]
    mov     x0, #\kind
    b       __asym_exception_common
    .endm

    .section .text.vectors, "ax"
    .balign 0x800
    .global __asym_vectors
__asym_vectors:
    ASYM_VENTRY 0
    ASYM_VENTRY 1
    ASYM_VENTRY 2
    ASYM_VENTRY 3
    ASYM_VENTRY 4
    ASYM_VENTRY 5
    ASYM_VENTRY 6
    ASYM_VENTRY 7
    ASYM_VENTRY 8
    ASYM_VENTRY 9
    ASYM_VENTRY 10
    ASYM_VENTRY 11
    ASYM_VENTRY 12
    ASYM_VENTRY 13
    ASYM_VENTRY 14
    ASYM_VENTRY 15

// The thread vectors (see the module docs): the frame's address must have bit THREAD_SHIFT
// set (every stack is the upper half of its 2 × THREAD_SIZE-aligned slot). The check swaps x0 and SP by arithmetic (Linux `kernel_ventry`), so it needs no
// scratch register: sp' = sp + x0, x0' = sp' - x0 = sp, then back.
    .macro ASYM_THREAD_VENTRY kind
    .balign 0x80
9:
    sub     sp, sp, #(34 * 8)
    add     sp, sp, x0
    sub     x0, sp, x0
    tbz     x0, #{thread_shift}, 8f
    sub     x0, sp, x0
    sub     sp, sp, x0
    stp     x0, x1, [sp, #(0 * 8)]
    mov     x0, #\kind
    b       __asym_exception_common
8:
    sub     x0, sp, x0
    sub     sp, sp, x0
    b       __asym_thread_bad_stack
    .org    9b + 0x80
    .endm

    .balign 0x800
    .global __asym_thread_vectors
__asym_thread_vectors:
    ASYM_THREAD_VENTRY 0
    ASYM_THREAD_VENTRY 1
    ASYM_THREAD_VENTRY 2
    ASYM_THREAD_VENTRY 3
    ASYM_THREAD_VENTRY 4
    ASYM_THREAD_VENTRY 5
    ASYM_THREAD_VENTRY 6
    ASYM_THREAD_VENTRY 7
    ASYM_THREAD_VENTRY 8
    ASYM_THREAD_VENTRY 9
    ASYM_THREAD_VENTRY 10
    ASYM_THREAD_VENTRY 11
    ASYM_THREAD_VENTRY 12
    ASYM_THREAD_VENTRY 13
    ASYM_THREAD_VENTRY 14
    ASYM_THREAD_VENTRY 15

// The frame would land below a stack (SP = frame, x0/x1 as interrupted). In the guard half of
// this CPU's own overflow stack slot: a report used up the overflow stack (nested, fatal).
// Anywhere else: a thread stack overflowed. Either way, report on a fresh overflow stack.
__asym_thread_bad_stack:
    msr     tpidrro_el0, x0
    msr     sp_el0, x1
    mrs     x0, tpidr_el1
    and     x0, x0, #({max_cpus} - 1)
    lsl     x0, x0, #{overflow_shift}
    adrp    x1, {overflow_stacks}
    add     x1, x1, :lo12:{overflow_stacks}
    add     x0, x1, x0
    mov     x1, sp
    sub     x0, x1, x0
    cmp     x0, #{overflow_size}
    b.lo    __asym_overflow_stack_overflow
    b       __asym_stack_overflow

// The frame would land in a boot stack's guard page: report on the overflow stack (kind
// {overflow_kind}, fatal).
__asym_stack_overflow:
    ASYM_OVERFLOW_SWITCH {overflow_kind}

// The frame would land in the guard page of this CPU's overflow stack: a report running there
// used it up. Start it afresh (what was on it is abandoned with the report) and end (kind
// {overflow_overflow_kind}, which the fatal path sees as nested).
__asym_overflow_stack_overflow:
    ASYM_OVERFLOW_SWITCH {overflow_overflow_kind}

__asym_exception_common:
    stp     x2, x3, [sp, #(2 * 8)]
    stp     x4, x5, [sp, #(4 * 8)]
    stp     x6, x7, [sp, #(6 * 8)]
    stp     x8, x9, [sp, #(8 * 8)]
    stp     x10, x11, [sp, #(10 * 8)]
    stp     x12, x13, [sp, #(12 * 8)]
    stp     x14, x15, [sp, #(14 * 8)]
    stp     x16, x17, [sp, #(16 * 8)]
    stp     x18, x19, [sp, #(18 * 8)]
    stp     x20, x21, [sp, #(20 * 8)]
    stp     x22, x23, [sp, #(22 * 8)]
    stp     x24, x25, [sp, #(24 * 8)]
    stp     x26, x27, [sp, #(26 * 8)]
    stp     x28, x29, [sp, #(28 * 8)]
    mrs     x2, elr_el1
    mrs     x3, spsr_el1
    mrs     x4, sp_el0
    stp     x30, x2, [sp, #(30 * 8)]
    stp     x3, x4, [sp, #(32 * 8)]
    mov     x1, x0
    mov     x0, sp
    add     x2, sp, #(34 * 8)
    bl      {handler}
    ldp     x30, x2, [sp, #(30 * 8)]
    ldp     x3, x4, [sp, #(32 * 8)]
    msr     elr_el1, x2
    msr     spsr_el1, x3
    msr     sp_el0, x4
    ldp     x2, x3, [sp, #(2 * 8)]
    ldp     x4, x5, [sp, #(4 * 8)]
    ldp     x6, x7, [sp, #(6 * 8)]
    ldp     x8, x9, [sp, #(8 * 8)]
    ldp     x10, x11, [sp, #(10 * 8)]
    ldp     x12, x13, [sp, #(12 * 8)]
    ldp     x14, x15, [sp, #(14 * 8)]
    ldp     x16, x17, [sp, #(16 * 8)]
    ldp     x18, x19, [sp, #(18 * 8)]
    ldp     x20, x21, [sp, #(20 * 8)]
    ldp     x22, x23, [sp, #(22 * 8)]
    ldp     x24, x25, [sp, #(24 * 8)]
    ldp     x26, x27, [sp, #(26 * 8)]
    ldp     x28, x29, [sp, #(28 * 8)]
    ldp     x0, x1, [sp, #(0 * 8)]
    add     sp, sp, #(34 * 8)
    eret
"#,
    handler = sym handle_exception,
    boot_stacks = sym super::entry::BOOT_STACKS,
    overflow_stacks = sym super::entry::OVERFLOW_STACKS,
    secondary_len = const STACK_SIZE * MAX_CPUS,
    stack_size = const STACK_SIZE,
    guard_size = const STACK_GUARD_SIZE,
    max_cpus = const MAX_CPUS,
    overflow_shift = const OVERFLOW_STACK_SIZE.trailing_zeros(),
    overflow_size = const OVERFLOW_STACK_SIZE,
    overflow_len = const OVERFLOW_STACK_SIZE * MAX_CPUS,
    overflow_kind = const KIND_STACK_OVERFLOW,
    overflow_overflow_kind = const KIND_OVERFLOW_STACK_OVERFLOW,
    overflow_guard = const OVERFLOW_GUARD_SIZE,
    thread_shift = const THREAD_SHIFT,
);

const _: () = assert!((STACK_SIZE * MAX_CPUS).is_multiple_of(1 << 16) && STACK_SIZE >= 1 << 16);
// `cmp x0, #imm` takes a 12-bit immediate shifted left by 12: a multiple of 4 KiB below 16 MiB.
const _: () = assert!((OVERFLOW_STACK_SIZE * MAX_CPUS).is_multiple_of(1 << 12));
const _: () = assert!(STACK_GUARD_SIZE.is_multiple_of(1 << 12));
const _: () = assert!(OVERFLOW_STACK_SIZE * MAX_CPUS < 1 << 24 && STACK_GUARD_SIZE < 1 << 24);
const _: () = assert!(OVERFLOW_GUARD_SIZE.is_multiple_of(1 << 12) && OVERFLOW_STACK_SIZE < 1 << 24);
