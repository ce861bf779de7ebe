//! The IRQ-masking spin lock: it masks IRQs while held and restores the previous state, and it
//! serialises a read-modify-write from every CPU at once (each CPU's increments are counted
//! separately, so a lost update shows up as a total below the sum).

use core::sync::atomic::{AtomicU64, Ordering};

use asym_sched::types::CpuId;

use crate::dt::MAX_CPUS;
use crate::selftest::TestResult;
use crate::sync::IrqSpinLock;
use crate::{selftest, test_assert, test_eq};

const ROUNDS: u64 = 2000;

static COUNTER: IrqSpinLock<u64> = IrqSpinLock::new(0);
static DONE: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

fn daif() -> u64 {
    let v: u64;
    // SAFETY: reading DAIF has no side effects.
    unsafe { core::arch::asm!("mrs {}, daif", out(reg) v, options(nomem, nostack)) };
    v
}

const DAIF_I: u64 = 1 << 7;

fn lock_masks_and_restores_irqs() -> TestResult {
    let before = daif();
    test_assert!(
        before & DAIF_I == 0,
        "IRQs already masked in the runner (DAIF {:#x})",
        before
    );
    {
        let _g = COUNTER.lock();
        test_assert!(
            daif() & DAIF_I != 0,
            "IRQs not masked while the lock is held"
        );
        {
            // Nested locks of different data restore the outer (masked) state (the inner one
            // ranks after the outer in the lock order).
            let inner = IrqSpinLock::with_rank((), crate::sync::LockRank::CONSOLE);
            let _h = inner.lock();
        }
        test_assert!(
            daif() & DAIF_I != 0,
            "inner guard unmasked IRQs under the outer lock"
        );
    }
    test_eq!(daif(), before);
    Ok(())
}
selftest!(name = "sync_lock_masks_irqs", lock_masks_and_restores_irqs);

fn hammer(cpu: CpuId) {
    for _ in 0..ROUNDS {
        let mut g = COUNTER.lock();
        // A non-atomic read-modify-write: only mutual exclusion keeps it exact.
        let v = core::hint::black_box(*g);
        *g = v + 1;
    }
    DONE[cpu.index()].fetch_add(ROUNDS, Ordering::Relaxed);
}

fn lock_is_exclusive_across_cpus() -> TestResult {
    *COUNTER.lock() = 0;
    for d in &DONE {
        d.store(0, Ordering::Relaxed);
    }
    let res = crate::smp::run_on_all_cpus(hammer);
    test_assert!(res.is_ok(), "run_on_all_cpus: {:?}", res);
    let expected: u64 = DONE.iter().map(|d| d.load(Ordering::Relaxed)).sum();
    let n = crate::smp::online_count() as u64;
    test_eq!(expected, n * ROUNDS);
    test_eq!(*COUNTER.lock(), expected);
    Ok(())
}
selftest!(
    name = "sync_lock_exclusive_all_cpus",
    lock_is_exclusive_across_cpus
);
