//! A deliberate data abort in a test context is reported with the right ESR class and FAR.

use crate::arch::expect_fault;
use crate::selftest::TestResult;
use crate::{selftest, test_assert, test_eq};

/// An address no DT describes and the identity map leaves unmapped (QEMU virt has nothing at
/// 256 GiB; the map only covers RAM and the console/GIC blocks), so a load translation-faults.
const UNMAPPED: usize = 0x40_0000_0000 + 0x1238;

fn data_abort_is_reported() -> TestResult {
    let report = expect_fault(|| {
        // SAFETY: as `expect_fault` documents: the address is no Rust allocation; the
        // volatile load is one `ldr` that takes a translation fault before producing a value,
        // and execution resumes after it.
        let _ = unsafe { core::ptr::read_volatile(UNMAPPED as *const u64) };
    });
    let Some(r) = report else {
        return Err(crate::selftest::TestError::new(format_args!(
            "reading {UNMAPPED:#x} did not fault"
        )));
    };
    test_eq!(r.ec(), 0x25);
    test_eq!(r.class_name(), "Data Abort (current EL)");
    test_eq!(r.far, UNMAPPED as u64);
    test_eq!(r.el, 1);
    // DFSC (ISS[5:0]) = translation fault, level 0..3 (0b0001xx); WnR (ISS bit 6) = read.
    test_assert!(
        r.iss() & 0x3c == 0x04,
        "DFSC {:#x} is not a translation fault",
        r.iss() & 0x3f
    );
    test_assert!(r.iss() & (1 << 6) == 0, "WnR set for a load");
    test_eq!(r.cpu, crate::arch::cpu_index());
    Ok(())
}
selftest!(name = "fault_data_abort_reported", data_abort_is_reported);

fn no_fault_gives_none() -> TestResult {
    let mut x = 0u64;
    let r = expect_fault(|| {
        // SAFETY: reads a live local.
        x = unsafe { core::ptr::read_volatile(&raw const x) } + 1;
    });
    test_assert!(r.is_none(), "a clean read reported {:?}", r);
    test_eq!(x, 1);
    Ok(())
}
selftest!(name = "fault_none_when_clean", no_fault_gives_none);

fn past_end_of_ram_faults() -> TestResult {
    let Some(plat) = crate::boot::platform() else {
        return Err(crate::selftest::TestError::new(format_args!("no platform")));
    };
    // The identity map covers RAM in whole 2 MiB blocks; the first 2 MiB boundary at or past
    // the end of RAM is unmapped unless a device block happens to be there.
    let last = plat.memory.iter().max_by_key(|b| b.end()).copied();
    let ram_end = last.map_or(0, |b| b.end());
    let end = ram_end.next_multiple_of(2 << 20);
    let addr = end + 0x40;
    let report = expect_fault(|| {
        // SAFETY: as `expect_fault` documents: nothing is mapped past RAM, so the one `ldr`
        // faults before producing a value, and execution resumes after it.
        let _ = unsafe { core::ptr::read_volatile(addr as *const u32) };
    });
    let Some(r) = report else {
        return Err(crate::selftest::TestError::new(format_args!(
            "reading {addr:#x} (past RAM end {ram_end:#x}) did not fault"
        )));
    };
    test_eq!(r.class_name(), "Data Abort (current EL)");
    test_eq!(r.far, addr as u64);
    Ok(())
}
selftest!(name = "fault_past_end_of_ram", past_end_of_ram_faults);

/// Data Fault Status Code for a permission fault at level 3 (4 KiB pages).
const FSC_PERMISSION_L3: u32 = 0x0f;
/// ISS.WnR: the abort was caused by a write.
const ISS_WNR: u32 = 1 << 6;

/// A value in rodata (an immutable static) for the write test.
static RODATA_WORD: u32 = 0x1234_5678;

/// Writes `addr`'s current value back to it (so a missing fault changes nothing) and returns
/// the fault report.
fn write_back(addr: usize) -> Option<crate::arch::FaultReport> {
    expect_fault(|| {
        // SAFETY: `addr` is a readable, aligned u32 in the kernel image; writing back the value
        // just read changes nothing even if the write were (wrongly) allowed.
        unsafe {
            let p = addr as *mut u32;
            let v = core::ptr::read_volatile(p);
            core::ptr::write_volatile(p, v);
        }
    })
}

fn text_and_rodata_are_read_only() -> TestResult {
    for (what, addr) in [
        ("text", data_abort_is_reported as *const () as usize),
        ("rodata", &raw const RODATA_WORD as usize),
    ] {
        let Some(r) = write_back(addr) else {
            return Err(crate::selftest::TestError::new(format_args!(
                "writing kernel {what} at {addr:#x} did not fault"
            )));
        };
        test_eq!(r.ec(), 0x25);
        test_eq!(r.far, addr as u64);
        test_assert!(r.iss() & ISS_WNR != 0, "{}: WnR clear for a store", what);
        test_eq!(r.iss() & 0x3f, FSC_PERMISSION_L3);
    }
    Ok(())
}
selftest!(
    name = "fault_kernel_text_rodata_read_only",
    text_and_rodata_are_read_only
);

/// `ret` (A64 0xd65f03c0) in writable data: executing it must fault (W^X).
static RET_IN_DATA: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(0xd65f_03c0);

fn data_is_not_executable() -> TestResult {
    let target = RET_IN_DATA.as_ptr() as usize;
    let report = expect_fault(|| {
        // SAFETY: the branch faults on the fetch (data is mapped never-executable) and the
        // handler returns to the instruction after `blr`; were it (wrongly) executable, the
        // target is a `ret`, which returns there too. Only x30 is changed.
        unsafe { core::arch::asm!("blr {t}", t = in(reg) target, out("x30") _, options(nostack)) };
    });
    let Some(r) = report else {
        return Err(crate::selftest::TestError::new(format_args!(
            "executing data at {target:#x} did not fault"
        )));
    };
    test_eq!(r.class_name(), "Instruction Abort (current EL)");
    test_eq!(r.far, target as u64);
    test_eq!(r.iss() & 0x3f, FSC_PERMISSION_L3);
    Ok(())
}
selftest!(name = "fault_data_not_executable", data_is_not_executable);

/// What [`note_irq_context`] saw on the CPU it ran on: 1 = in IRQ context, 2 = not.
static SEEN_IN_IRQ: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

fn note_irq_context(_cpu: asym_sched::types::CpuId) {
    let v = if crate::arch::in_irq() { 1 } else { 2 };
    SEEN_IN_IRQ.store(v, core::sync::atomic::Ordering::Release);
}

/// `in_irq()` is false in the test runner and true in a cross call (which runs in the target's
/// IPI handler): `expect_fault` relies on it to leave an IRQ handler's own faults fatal.
fn irq_context_is_tracked() -> TestResult {
    use core::sync::atomic::Ordering;
    test_assert!(
        !crate::arch::in_irq(),
        "the runner thinks it is in IRQ context"
    );
    let me = crate::percpu::current_cpu();
    let Some(other) = crate::smp::online_cpus().find(|&c| c != me) else {
        return Ok(()); // uniprocessor: no cross call to run in IRQ context
    };
    SEEN_IN_IRQ.store(0, Ordering::Relaxed);
    crate::smp::run_on(other, note_irq_context)
        .map_err(|e| crate::selftest::TestError::new(format_args!("{e}")))?;
    test_eq!(SEEN_IN_IRQ.load(Ordering::Acquire), 1);
    SEEN_IN_IRQ.store(0, Ordering::Relaxed);
    crate::smp::run_on(me, note_irq_context)
        .map_err(|e| crate::selftest::TestError::new(format_args!("{e}")))?;
    test_eq!(SEEN_IN_IRQ.load(Ordering::Acquire), 2);
    Ok(())
}
selftest!(name = "fault_irq_context_tracked", irq_context_is_tracked);
