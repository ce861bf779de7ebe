//! EL0 address spaces, checked by the MMU itself: with a user address space loaded in TTBR1,
//! `AT S1E0R/W` / `AT S1E1R/W` say what an EL0 (or EL1) access would do, so the oracle is the
//! hardware's table walk, not our own bookkeeping.
//! - text is readable (not writable) at EL0, data and stack read/write; the guard pages below
//!   and above the stack, and everything unmapped, fault;
//! - the kernel (TTBR0, identity map) is not accessible at EL0, at any of its addresses tried;
//! - two address spaces map the same user VA to different pages (their own);
//! - after switching TTBR1 back to the empty table, the user VA faults again (no stale TLB
//!   entry: the switch relies on unique ASIDs);
//! - building and dropping many address spaces leaves the heap and the ASID pool as they were;
//! - where the CPU has PAN: it is on on every CPU, exceptions set it (SPAN clear), and an EL1
//!   load from a mapped user page faults with a permission fault — and reads the page once
//!   PAN is lowered, so the fault is PAN's.

use alloc::vec::Vec;

use crate::arch::uspace::{self, Access, AddressSpace, Perm, USER_BASE};
use crate::selftest::{TestError, TestResult};
use crate::{selftest, test_assert, test_eq};

const TEXT: usize = USER_BASE + 0x10_0000;
const DATA: usize = USER_BASE + 0x20_0000;
/// Stack: guard page, 4 pages, guard page.
const STACK_GUARD_LO: usize = USER_BASE + 0x30_0000;
const STACK_PAGES: usize = 4;
const STACK_GUARD_HI: usize = STACK_GUARD_LO + (STACK_PAGES + 1) * 4096;

fn err(e: impl core::fmt::Display) -> TestError {
    TestError::new(format_args!("{e}"))
}

fn build(fill: u8) -> Result<AddressSpace, TestError> {
    let mut a = AddressSpace::new().map_err(err)?;
    // `ret` as the text; the data page starts with `fill`.
    a.map_page(TEXT, Perm::Text, &0xd65f_03c0u32.to_le_bytes())
        .map_err(err)?;
    a.map_page(DATA, Perm::Data, &[fill; 16]).map_err(err)?;
    for i in 0..STACK_PAGES {
        a.map_page(STACK_GUARD_LO + (i + 1) * 4096, Perm::Data, &[])
            .map_err(err)?;
    }
    Ok(a)
}

/// Runs `f` with `a` loaded in TTBR1 on this CPU (IRQs masked, so no switch intervenes), then
/// loads the empty table again.
fn with_loaded<R>(a: &AddressSpace, f: impl FnOnce() -> R) -> R {
    let irq = crate::arch::irq_save_disable();
    // SAFETY: `a` outlives the closure, and TTBR1 is back on the empty table before `a` can
    // be dropped; IRQs are masked, so nothing else runs on this CPU meanwhile.
    unsafe { uspace::switch_ttbr1(a.ttbr()) };
    let r = f();
    // SAFETY: the empty table is always valid.
    unsafe { uspace::switch_ttbr1(uspace::empty_ttbr()) };
    crate::arch::irq_restore(irq);
    r
}

fn uspace_permissions() -> TestResult {
    let a = build(0xa5)?;
    let b = build(0x5a)?;
    let kernel_text = uspace_permissions as *const () as usize;
    let kernel_data = (&raw const crate::arch::aarch64::mmu::MMU_CONFIG) as usize;
    let res = with_loaded(&a, || {
        [
            uspace::translate(TEXT, Access::El0Read),
            uspace::translate(TEXT, Access::El0Write),
            uspace::translate(DATA, Access::El0Write),
            uspace::translate(STACK_GUARD_LO + 4096, Access::El0Write),
            uspace::translate(STACK_GUARD_HI - 8, Access::El0Write),
            uspace::translate(STACK_GUARD_LO, Access::El0Read),
            uspace::translate(STACK_GUARD_HI, Access::El0Read),
            uspace::translate(USER_BASE, Access::El0Read),
            uspace::translate(kernel_text, Access::El0Read),
            uspace::translate(kernel_data, Access::El0Read),
            uspace::translate(kernel_data, Access::El0Write),
            uspace::translate(TEXT, Access::El1Write),
        ]
    });
    let ok = |i: usize| res[i].is_ok();
    test_assert!(ok(0), "user text not readable at EL0: {:?}", res[0]);
    test_assert!(!ok(1), "user text writable at EL0 (W^X)");
    test_assert!(ok(2), "user data not writable at EL0: {:?}", res[2]);
    test_assert!(ok(3) && ok(4), "user stack not writable: {:?}", &res[3..5]);
    test_assert!(!ok(5), "guard page below the user stack is mapped");
    test_assert!(!ok(6), "guard page above the user stack is mapped");
    test_assert!(!ok(7), "an unmapped user address translates");
    test_assert!(!ok(8), "kernel text {kernel_text:#x} readable at EL0");
    test_assert!(
        !ok(9) && !ok(10),
        "kernel data {kernel_data:#x} accessible at EL0"
    );
    test_assert!(!ok(11), "user text writable at EL1");
    // Each space maps DATA to its own page, the one it owns.
    let pa_a = with_loaded(&a, || uspace::translate(DATA, Access::El0Read));
    let pa_b = with_loaded(&b, || uspace::translate(DATA, Access::El0Read));
    test_eq!(pa_a.ok(), a.lookup(DATA).map(|(_, pa)| pa));
    test_eq!(pa_b.ok(), b.lookup(DATA).map(|(_, pa)| pa));
    test_assert!(
        pa_a != pa_b,
        "two address spaces share the data page {pa_a:?}"
    );
    // Back on the empty table: nothing of either space is reachable (no stale entry).
    test_assert!(
        uspace::translate(DATA, Access::El0Read).is_err()
            && uspace::translate(TEXT, Access::El1Read).is_err(),
        "a user page translates with TTBR1 on the empty table"
    );
    test_assert!(
        a.asid() != b.asid(),
        "two live address spaces share ASID {}",
        a.asid()
    );
    Ok(())
}

fn uspace_no_leak() -> TestResult {
    // Warm up the allocator's free list shape, then measure.
    drop(build(0)?);
    let heap0 = crate::heap::stats().used;
    let asids0 = uspace::asids_in_use();
    for _ in 0..4 {
        let spaces: Vec<AddressSpace> =
            (0..60).map(|i| build(i as u8)).collect::<Result<_, _>>()?;
        test_eq!(uspace::asids_in_use(), asids0 + 60);
        for s in &spaces {
            test_eq!(s.nr_pages(), 2 + STACK_PAGES);
        }
    }
    test_eq!(uspace::asids_in_use(), asids0);
    test_eq!(crate::heap::stats().used, heap0);
    // All 255 ASIDs can be taken; the 256th address space is refused, not wrapped.
    let mut all = Vec::new();
    while let Ok(s) = AddressSpace::new() {
        all.push(s);
        test_assert!(all.len() <= 255, "more than 255 ASIDs handed out");
    }
    test_eq!(all.len() as u32, 256 - asids0);
    drop(all);
    test_eq!(uspace::asids_in_use(), asids0);
    Ok(())
}

selftest!(name = "uspace_permissions", uspace_permissions);
selftest!(name = "uspace_no_leak", uspace_no_leak);

fn uspace_pan() -> TestResult {
    if !uspace::has_pan() {
        crate::println!("uspace_pan: this CPU has no FEAT_PAN (Armv8.0): nothing to check");
        return Ok(());
    }
    let online = crate::smp::online_count() as u32;
    test_eq!(uspace::pan_cpus(), online);
    test_assert!(uspace::pan_on(), "PSTATE.PAN is clear in a kernel thread");
    test_assert!(
        uspace::span_clear(),
        "SCTLR_EL1.SPAN set: exceptions leave PAN as it was"
    );
    // After a sleep (timer interrupt, a switch away and back) PAN is still on.
    crate::sched::sleep_ns(200_000);
    test_assert!(uspace::pan_on(), "PSTATE.PAN clear after a sleep");
    let a = build(0xc3)?;
    let (fault, read) = with_loaded(&a, || {
        let fault = crate::arch::expect_fault(|| {
            // SAFETY: as `expect_fault` documents: DATA is a user page of `a`, loaded in
            // TTBR1, no Rust allocation; with PAN on the one volatile load takes a
            // permission fault before producing a value and execution resumes after it.
            let _ = unsafe { core::ptr::read_volatile(DATA as *const u8) };
        });
        let was = uspace::set_pan(false);
        // SAFETY: DATA is mapped read/write in `a` (loaded, IRQs masked) and PAN is off, so
        // this load reads the page's first byte; nothing else writes the page meanwhile.
        let read = unsafe { core::ptr::read_volatile(DATA as *const u8) };
        uspace::set_pan(was);
        (fault, read)
    });
    test_assert!(uspace::pan_on(), "PSTATE.PAN not restored");
    let Some(r) = fault else {
        return Err(TestError::new(format_args!(
            "an EL1 load from the user page {DATA:#x} did not fault with PAN on"
        )));
    };
    test_eq!(r.ec(), 0x25);
    test_eq!(r.far, DATA as u64);
    // DFSC (ISS[5:0]) = permission fault, level 1..3 (0b0011xx).
    test_assert!(
        r.iss() & 0x3c == 0x0c,
        "DFSC {:#x} is not a permission fault",
        r.iss() & 0x3f
    );
    test_eq!(read, 0xc3);
    crate::println!("uspace_pan: PAN on on {online} of {online} CPUs");
    Ok(())
}
selftest!(name = "uspace_pan", uspace_pan);
