//! Stack guard pages and stack-overflow detection: thread stacks in the stack window
//! (`arch::aarch64::context`, a guard half below each), the boot stacks' guard pages
//! (`arch::aarch64::entry::STACK_GUARD_SIZE`) and the overflow stacks'.
//!
//! Oracles: the translation table walk itself (a read of a guard page must take a level-3
//! translation fault at exactly that address, the page above it must read fine), the stack
//! layout (every CPU runs on a thread stack once it is up), and the architectural exception
//! entry (the vectors reserve a 272-byte frame below SP, so an SP less than 272 bytes above a
//! guard is an overflow; one with room for the handler is not).

#![allow(clippy::result_large_err)] // `TestError` carries a heap message by design.

use core::sync::atomic::{AtomicU64, Ordering};

use asym_sched::types::CpuId;

use crate::arch::aarch64::context::{stack_range, stack_slot_of as thread_slot_of, THREAD_SIZE};
use crate::arch::aarch64::entry::{
    irq_guard_page, irq_stack_cpu_of, overflow_guard_page, overflow_stack_base, stack_guard_page,
    OVERFLOW_GUARD_SIZE,
};
use crate::arch::expect_fault;
use crate::dt::MAX_CPUS;
use crate::selftest::{TestError, TestResult};
use crate::{selftest, smp, test_assert, test_eq};

/// An address the identity map leaves unmapped (as in `selftests/fault.rs`).
const UNMAPPED: u64 = 0x40_0000_0000 + 0x5670;
/// Bytes the exception vectors reserve below SP for the trap frame (34 × 8).
const FRAME_BYTES: u64 = 34 * 8;
/// Stack the fault handler needs below the trap frame for an expected fault (it prints the
/// report), with margin.
const HANDLER_ROOM: u64 = 8 * 1024;
/// DFSC: translation fault at level 3.
const FSC_TRANSLATION_L3: u32 = 0x07;

/// Per CPU: 0 = not run, 1 = passed, else a failure code (see `GUARD_FAILURES`).
static GUARD_RESULT: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
/// Per CPU: the value that went wrong (slot, FAR or DFSC) for the failure message.
static GUARD_DETAIL: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

const GUARD_FAILURES: [&str; 9] = [
    "",
    "",
    "runs neither on a thread stack nor on its IRQ stack (detail: SP)",
    "reading its guard page did not fault",
    "the guard page fault is not a level-3 translation fault at that address (detail: FAR)",
    "the lowest usable stack page above the guard faulted (detail: FAR)",
    "reading its overflow stack's guard page did not fault (detail: the address)",
    "the lowest usable page of its overflow stack faulted (detail: FAR)",
    "reading its boot stack's guard page did not fault (detail: the address)",
];

fn sp() -> u64 {
    let sp: u64;
    // SAFETY: reading SP has no effect.
    unsafe { core::arch::asm!("mov {}, sp", out(reg) sp, options(nomem, nostack)) };
    sp
}

fn check_own_guard(cpu: CpuId) {
    let i = cpu.index() % MAX_CPUS;
    let fail = |code: u64, detail: u64| {
        GUARD_DETAIL[i].store(detail, Ordering::Relaxed);
        GUARD_RESULT[i].store(code, Ordering::Release);
    };
    // Run directly on the runner (a thread stack) or from the call-function IPI (this CPU's
    // IRQ stack): check the guard below whichever it is.
    let here = sp() as usize;
    let base = if let Some(slot) = thread_slot_of(here) {
        stack_range(slot).0
    } else if irq_stack_cpu_of(here) == Some(i) {
        irq_guard_page(i) + OVERFLOW_GUARD_SIZE
    } else {
        return fail(2, here as u64);
    };
    let probe = (base - 4096) as u64 + 0x18;
    let report = expect_fault(|| {
        // SAFETY: as `expect_fault` documents: the guard below this CPU's current stack is
        // unmapped, so the one `ldr` faults before producing a value, and execution resumes
        // after it.
        let _ = unsafe { core::ptr::read_volatile(probe as *const u64) };
    });
    let Some(r) = report else {
        return fail(3, probe);
    };
    if r.far != probe || r.ec() != 0x25 || r.iss() & 0x3f != FSC_TRANSLATION_L3 {
        return fail(4, r.far);
    }
    let above = base as u64;
    if let Some(r) = expect_fault(|| {
        // SAFETY: reads the lowest word of this stack (mapped, far below SP).
        let _ = unsafe { core::ptr::read_volatile(above as *const u64) };
    }) {
        return fail(5, r.far);
    }
    // The boot stack this CPU came up on keeps its guard page (secondary `i` in slot `i`, the
    // boot CPU in the last).
    let boot_slot = if crate::boot::is_boot_cpu(cpu) {
        MAX_CPUS
    } else {
        cpu.index()
    };
    let boot_guard = stack_guard_page(boot_slot) as u64 + 0x10;
    if expect_fault(|| {
        // SAFETY: as above: an unmapped guard page; the `ldr` faults and is skipped.
        let _ = unsafe { core::ptr::read_volatile(boot_guard as *const u64) };
    })
    .is_none()
    {
        return fail(8, boot_guard);
    }
    // The overflow stack (indexed by TPIDR_EL1, i.e. the logical CPU) has its own guard page.
    let ovf_guard = overflow_guard_page(cpu.index()) as u64 + 0x20;
    match expect_fault(|| {
        // SAFETY: as above: an unmapped guard page; the `ldr` faults and is skipped.
        let _ = unsafe { core::ptr::read_volatile(ovf_guard as *const u64) };
    }) {
        Some(r) if r.far == ovf_guard && r.iss() & 0x3f == FSC_TRANSLATION_L3 => {}
        _ => return fail(6, ovf_guard),
    }
    let ovf_usable = overflow_stack_base(cpu.index()) as u64;
    if let Some(r) = expect_fault(|| {
        // SAFETY: reads the lowest usable word of this CPU's overflow stack (mapped, unused).
        let _ = unsafe { core::ptr::read_volatile(ovf_usable as *const u64) };
    }) {
        return fail(7, r.far);
    }
    GUARD_RESULT[i].store(1, Ordering::Release);
}

fn guard_pages_all_cpus() -> TestResult {
    for r in &GUARD_RESULT {
        r.store(0, Ordering::Relaxed);
    }
    smp::run_on_all_cpus(check_own_guard).map_err(|e| TestError::new(format_args!("{e}")))?;
    let mut checked = 0;
    for cpu in smp::online_cpus() {
        let code = GUARD_RESULT[cpu.index()].load(Ordering::Acquire);
        let detail = GUARD_DETAIL[cpu.index()].load(Ordering::Relaxed);
        test_assert!(
            code == 1,
            "cpu {}: {} ({:#x})",
            cpu.0,
            GUARD_FAILURES
                .get(code as usize)
                .copied()
                .unwrap_or("did not run"),
            detail
        );
        checked += 1;
    }
    test_eq!(checked, smp::online_count());
    Ok(())
}
selftest!(name = "stack_guard_page_every_cpu", guard_pages_all_cpus);

/// Takes a data abort (a load from [`UNMAPPED`]) with SP moved to `new_sp`, IRQs masked, and
/// returns what the vectors reported; SP is restored by the instruction after the load.
/// `new_sp` must lie in the caller's own stack or this CPU's overflow stack.
fn fault_with_sp(new_sp: u64) -> Option<crate::arch::FaultReport> {
    let irq = crate::arch::irq_save_disable();
    let r = expect_fault(|| {
        // SAFETY: SP points into this CPU's own stack slot (just above the guard page, in the
        // unused bottom of the stack) only between the two `mov sp`; IRQs are masked, the load
        // faults and `expect_fault` resumes at the next instruction, which restores SP from a
        // register the exception path preserved. Only the exception path stores below that SP
        // (on the overflow stack when the frame would reach the guard, else on unused stack).
        unsafe {
            core::arch::asm!(
                "mov {save}, sp",
                "mov sp, {new_sp}",
                "ldr {tmp}, [{addr}]",
                "mov sp, {save}",
                save = out(reg) _,
                tmp = out(reg) _,
                new_sp = in(reg) new_sp,
                addr = in(reg) UNMAPPED,
            )
        };
    });
    crate::arch::irq_restore(irq);
    r
}

fn overflow_detected_at_the_boundary() -> TestResult {
    let Some(slot) = thread_slot_of(sp() as usize) else {
        return Err(TestError::new(format_args!(
            "the runner's SP {:#x} is not on a thread stack",
            sp()
        )));
    };
    let usable_start = stack_range(slot).0 as u64;

    // The frame would end 16 bytes into the guard: an overflow, reported as such.
    let low = usable_start + FRAME_BYTES - 16;
    let Some(r) = fault_with_sp(low) else {
        return Err(TestError::new(format_args!("the load did not fault")));
    };
    test_eq!(r.overflow_sp, Some(low));
    test_eq!(r.far, UNMAPPED);
    test_eq!(r.class_name(), "Data Abort (current EL)");

    // Near the guard but with room for the frame and the handler's own Rust frames (which
    // run below the trap frame): an ordinary fault, no false alarm.
    let fits = usable_start + HANDLER_ROOM;
    let Some(r) = fault_with_sp(fits) else {
        return Err(TestError::new(format_args!("the load did not fault")));
    };
    test_eq!(r.overflow_sp, None);
    test_eq!(r.far, UNMAPPED);
    Ok(())
}
selftest!(
    name = "stack_overflow_detected_at_guard",
    overflow_detected_at_the_boundary
);

/// An exception frame that would land in the guard page of the CPU's overflow stack (a fatal
/// report that used the whole overflow stack) is detected too: the vectors restart the
/// overflow stack and report it, instead of writing the frame into the guard page (faulting
/// forever) or, without a guard, into whatever lies below (BSS and its page tables).
fn overflow_stack_overflow_detected() -> TestResult {
    let me = crate::percpu::current_cpu().index();
    let usable_start = overflow_stack_base(me) as u64;
    let low = usable_start + FRAME_BYTES - 16;
    let Some(r) = fault_with_sp(low) else {
        return Err(TestError::new(format_args!("the load did not fault")));
    };
    test_eq!(r.overflow_sp, Some(low));
    test_eq!(r.far, UNMAPPED);
    // Room for the frame on the overflow stack: no alarm.
    let fits = usable_start + THREAD_SIZE as u64 / 2;
    let Some(r) = fault_with_sp(fits) else {
        return Err(TestError::new(format_args!("the load did not fault")));
    };
    test_eq!(r.overflow_sp, None);
    Ok(())
}
selftest!(
    name = "stack_overflow_stack_guard_detected",
    overflow_stack_overflow_detected
);
