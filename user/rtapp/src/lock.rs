//! A spin lock for the executor's threads (they share the interpreter state of `resume`
//! targets and the workload's timers, as the in-kernel executor's `IrqSpinLock`s do). A waiter
//! yields its CPU after a few spins: the holder may be preempted on the same CPU.

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicBool, Ordering};

pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is reached only through a guard, and one guard exists at a time (the
// `locked` flag, taken with acquire and released with release ordering).
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    pub const fn new(value: T) -> Self {
        SpinLock {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    pub fn lock(&self) -> Guard<'_, T> {
        let mut spins = 0u32;
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                crate::sys::sched_yield();
            } else {
                // `yield`, not `core::hint::spin_loop()` (an `isb` on aarch64): under QEMU's
                // round-robin `-icount` only a `yield` ends a vCPU's slice, and a vCPU spinning
                // here without one kept other vCPUs' expired timers from waking them for
                // milliseconds (a `run_until` wait woke up to 7 ms late).
                // SAFETY: `yield` is a hint with no architectural effect.
                unsafe { core::arch::asm!("yield", options(nomem, nostack, preserves_flags)) };
            }
        }
        Guard { lock: self }
    }
}

pub struct Guard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for Guard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: this guard holds the lock, so no other reference to the value exists.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for Guard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard holds the lock, so no other reference to the value exists.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for Guard<'_, T> {
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}
