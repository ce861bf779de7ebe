//! Exception vectors (all 16 entries), the trap frame, fault reports, and `expect_fault`.
//!
//! Re-derives Linux's `arch/arm64/kernel/entry.S` (`kernel_ventry`, `kernel_entry`/
//! `kernel_exit`) and the reporting of `arch/arm64/mm/fault.c` (`die_kernel_fault`,
//! `esr_get_class_string`). Deliberate differences: a synchronous fault in the kernel halts only
//! the faulting CPU (no oops/reboot); under `selftest` a fault outside a test ends the run with a
//! failure; [`expect_fault`] lets a self test provoke a fault, get the report, and resume after
//! the faulting instruction (Linux's exception tables play this role for uaccess).

use core::arch::{asm, global_asm};
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::dt::MAX_CPUS;

/// Registers saved on exception entry.
#[repr(C)]
#[derive(Debug)]
pub struct TrapFrame {
    pub x: [u64; 31],
    pub elr: u64,
    pub spsr: u64,
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

/// Per-CPU "a fault is expected" flags and the recorded report (one slot each).
static EXPECTING: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
static CAUGHT: [[AtomicU64; 4]; MAX_CPUS] = [const { [const { AtomicU64::new(0) }; 4] }; MAX_CPUS];
static CAUGHT_VALID: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// Runs `f` with this CPU marked as expecting a synchronous fault. If `f` faults, the fault is
/// recorded and printed, execution resumes after the faulting instruction (after an
/// instruction abort on a branch target: at the link register, i.e. the `blr` returns), and the
/// report is returned; `None` if `f` ran without faulting. Only the first fault is caught; a second one
/// inside `f` is a real fault.
pub fn expect_fault(f: impl FnOnce()) -> Option<FaultReport> {
    let cpu = super::cpu_index();
    if cpu >= MAX_CPUS {
        f();
        return None;
    }
    CAUGHT_VALID[cpu].store(false, Ordering::SeqCst);
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

/// Rust side of every vector: `kind` is the entry index 0..16.
extern "C" fn handle_exception(frame: &mut TrapFrame, kind: u64) {
    match kind {
        1 | 5 | 9 | 13 => crate::boot::irq_entry(),
        0 | 4 | 8 | 12 => handle_sync(frame, kind as usize),
        _ => fatal(frame, kind as usize, None),
    }
}

fn handle_sync(frame: &mut TrapFrame, kind: usize) {
    let (esr, far): (u64, u64);
    // SAFETY: ESR_EL1/FAR_EL1 are readable at EL1 and describe the exception being handled.
    unsafe {
        asm!("mrs {}, esr_el1", "mrs {}, far_el1", out(reg) esr, out(reg) far, options(nomem, nostack))
    };
    let cpu = super::cpu_index();
    let report = FaultReport {
        cpu,
        // SPSR.M[3:2]: the exception level the fault was taken from.
        el: ((frame.spsr >> 2) & 3) as u8,
        esr,
        far,
        elr: frame.elr,
        spsr: frame.spsr,
    };
    if cpu < MAX_CPUS && EXPECTING[cpu].swap(false, Ordering::SeqCst) {
        let c = &CAUGHT[cpu];
        c[0].store(esr, Ordering::Relaxed);
        c[1].store(far, Ordering::Relaxed);
        c[2].store(frame.elr, Ordering::Relaxed);
        c[3].store(frame.spsr, Ordering::Relaxed);
        CAUGHT_VALID[cpu].store(true, Ordering::SeqCst);
        crate::println!("expected fault: {}", report);
        if report.ec() == 0x21 && frame.elr == far {
            // The branch target itself did not fetch (an expected test jumped with `blr` into
            // non-executable memory): return to the caller.
            frame.elr = frame.x[30];
        } else {
            // Resume after the faulting instruction (A64 instructions are 4 bytes).
            frame.elr += 4;
        }
        return;
    }
    fatal(frame, kind, Some(report));
}

fn fatal(frame: &TrapFrame, kind: usize, report: Option<FaultReport>) -> ! {
    use crate::console::write_fmt_force as out;
    let cpu = super::cpu_index();
    // The fault may have hit while this CPU held the console lock: print with the forcing
    // writer, which gives up on the lock after a bounded wait.
    match report {
        Some(r) => out(format_args!("{}\n", r)),
        None => out(format_args!(
            "unexpected exception on cpu {}: {}, ELR {:#018x}, SPSR {:#010x}\n",
            cpu,
            KIND_NAMES[kind & 15],
            frame.elr,
            frame.spsr
        )),
    }
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
    out(format_args!("cpu {} halted\n", cpu));
    crate::boot::fatal_error_exit();
    super::park()
}

// 16 entries of 0x80 bytes; each saves x0/x1, puts its index in x0 and joins the common path,
// which saves the rest, calls `handle_exception(frame, kind)`, restores and returns with eret.
global_asm!(
    r#"
    .macro ASYM_VENTRY kind
    .balign 0x80
    sub     sp, sp, #(34 * 8)
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
    stp     x30, x2, [sp, #(30 * 8)]
    str     x3, [sp, #(32 * 8)]
    mov     x1, x0
    mov     x0, sp
    bl      {handler}
    ldp     x30, x2, [sp, #(30 * 8)]
    ldr     x3, [sp, #(32 * 8)]
    msr     elr_el1, x2
    msr     spsr_el1, x3
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
);
