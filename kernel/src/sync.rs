//! Spin locks that mask interrupts while held, and a write-once cell.
//!
//! Re-derives Linux's `raw_spin_lock_irqsave`/`raw_spin_unlock_irqrestore` semantics with a
//! test-and-test-and-set lock (see [`IrqSpinLock`] for why not a ticket lock). Masking IRQs
//! makes the lock usable from interrupt context: an interrupt handler on the same CPU can never
//! spin on a lock its CPU already holds, and a holder is never preempted (kernel preemption
//! happens only on return from an interrupt). Waiters sleep in `wfe` with the exclusive monitor
//! armed on the lock word (as Linux's arm64 spin loops do), so the unlocking store wakes them.
//!
//! Every lock has a [`LockRank`] in the one lock order (docs/kernel.md, "Lock order"). With the
//! checker on ([`lockdep_enable`]: the `selftest` and `lockdep` command-line options), each CPU
//! keeps the stack of locks it holds and a lock whose rank is not above every held one panics
//! on the spot, naming both (Linux's lockdep reports the same inversions, by class, from the
//! first occurrence instead of the first deadlock).
//!
//! A lock can be handed over across a context switch ([`IrqSpinLockGuard::into_handover`] and
//! [`IrqSpinLock::take_handover`]): the run-queue lock is taken by the thread that calls
//! `schedule()` and released by the thread that runs next (Linux `finish_task_switch`). The
//! IRQ state saved by the first does not belong to the second, so a taken-over lock's guard
//! unmasks IRQs when it drops instead of restoring anything.

use core::cell::UnsafeCell;
use core::fmt;
use core::ops::{Deref, DerefMut};
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::arch::{self, IrqState};

/// A lock's place in the lock order: a CPU may take a lock only while every lock it holds has
/// a lower rank. The table with the reasons is in docs/kernel.md ("Lock order").
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LockRank(pub u16);

impl LockRank {
    /// A wait queue's lock (`wq_head->lock`): wakers take thread and run-queue locks under it.
    pub const WAIT_QUEUE: LockRank = LockRank(10);
    /// A thread's scheduling lock (Linux `p->pi_lock`), held by `try_to_wake_up`.
    pub const THREAD: LockRank = LockRank(20);
    /// One cpufreq policy with its schedutil state (`sg_policy->update_lock`): taken only with
    /// no run-queue lock held, one policy at a time.
    pub const CPUFREQ_POLICY: LockRank = LockRank(25);
    /// The cpufreq driver (the firmware channel): one driver call at a time, inside a policy's
    /// lock or alone.
    pub const CPUFREQ_DRIVER: LockRank = LockRank(26);
    /// A CPU's load-balance state (its sched domains and transit lists): run-queue locks are
    /// taken under it, one at a time.
    pub const BALANCE: LockRank = LockRank(28);
    /// Run queue of CPU 0; CPU `n`'s is `RQ + n`, so two run-queue locks nest only in
    /// ascending CPU order (Linux `double_rq_lock`).
    pub const RQ: LockRank = LockRank(30);
    /// A CPU's timer queue (taken under its run-queue lock to restart the tick).
    pub const TIMERS: LockRank = LockRank(40);
    /// Everything that takes no other lock while held (the default).
    pub const LEAF: LockRank = LockRank(50);
    /// The heap (allocation may happen under any other lock but the scheduler's: heap.rs checks).
    pub const HEAP: LockRank = LockRank(75);
    /// Fatal-report serialisation, taken before the console lock.
    pub const REPORT: LockRank = LockRank(65);
    /// The console: anything may print.
    pub const CONSOLE: LockRank = LockRank(70);

    /// The run-queue rank of CPU `cpu`.
    pub const fn rq(cpu: usize) -> LockRank {
        LockRank(Self::RQ.0 + (cpu % crate::dt::MAX_CPUS) as u16)
    }
}

/// A spin lock whose guard masks IRQs on this CPU and restores the previous mask state on drop.
///
/// Test-and-test-and-set rather than a ticket lock: under QEMU TCG on a host with fewer cores
/// than the guest has CPUs, a FIFO lock stalls whenever the next ticket holder's vCPU thread is
/// descheduled (measured: heap stress on 6 vCPUs took > 10 s instead of < 1 s on a loaded
/// 2-core host); with TAS whichever CPU is running takes the lock. Linux's arm64 moved from
/// ticket locks to qspinlock (also not strictly FIFO under contention).
pub struct IrqSpinLock<T: ?Sized> {
    locked: AtomicU32,
    rank: LockRank,
    data: UnsafeCell<T>,
}

// SAFETY: the lock serialises all access to `data`, so sharing the lock between CPUs is sound
// when `T` can be sent between them.
unsafe impl<T: ?Sized + Send> Sync for IrqSpinLock<T> {}
// SAFETY: moving the lock moves the data.
unsafe impl<T: ?Sized + Send> Send for IrqSpinLock<T> {}

/// Proof that the lock is held; IRQs stay masked until it drops.
pub struct IrqSpinLockGuard<'a, T: ?Sized> {
    lock: &'a IrqSpinLock<T>,
    irq: IrqState,
}

/// A held lock without a guard, for code whose acquire and release happen in different
/// functions (the defmt logger). Must be passed back to [`IrqSpinLock::raw_unlock`].
#[must_use]
pub struct RawLockToken {
    irq: IrqState,
}

/// A lock taken over from the thread that ran before on this CPU ([`IrqSpinLock::take_handover`]);
/// dropping it releases the lock and unmasks IRQs.
pub struct HandoverGuard<'a, T: ?Sized> {
    lock: &'a IrqSpinLock<T>,
}

/// The lock word: 0 when free, else the holder's logical CPU index + 1 (so a CPU can tell that
/// it already holds a lock: a recursive `lock()` panics with its location instead of spinning
/// forever with IRQs masked, and the panic path can write to a console it interrupted itself).
const UNLOCKED: u32 = 0;
/// Set in the lock word while a held lock is being handed over by a context switch.
const HANDOVER: u32 = 1 << 31;

#[inline(always)]
fn owner_word() -> u32 {
    (arch::cpu_index() as u32).wrapping_add(1)
}

impl<T> IrqSpinLock<T> {
    /// A lock of rank [`LockRank::LEAF`].
    pub const fn new(data: T) -> Self {
        Self::with_rank(data, LockRank::LEAF)
    }

    /// A lock of rank `rank` in the lock order.
    pub const fn with_rank(data: T, rank: LockRank) -> Self {
        IrqSpinLock {
            locked: AtomicU32::new(UNLOCKED),
            rank,
            data: UnsafeCell::new(data),
        }
    }
}

impl<T: ?Sized> IrqSpinLock<T> {
    /// Masks IRQs, then spins until the lock is ours. Panics if this CPU already holds it (on
    /// the target; a self-deadlock would otherwise hang the CPU with IRQs masked).
    ///
    /// Inlined: a wake-up and sleep pair takes about ten locks, and the uncontended path is
    /// a few instructions against a call's frame and register saves (`cargo xtask bench
    /// switch`); contention goes out of line ([`acquire`](Self::acquire)).
    #[track_caller]
    #[inline(always)]
    pub fn lock(&self) -> IrqSpinLockGuard<'_, T> {
        let irq = arch::irq_save_disable();
        lockdep::acquire(diag(), self.addr(), self.rank);
        if !self.try_acquire() {
            self.acquire();
        }
        hold::acquired(self.rank);
        IrqSpinLockGuard { lock: self, irq }
    }

    /// Takes the lock with IRQs already masked, as [`lock`](Self::lock) does, its guard
    /// restoring `irq` (from [`IrqSpinLockGuard::unlock_irqs_masked`]) when it drops.
    #[track_caller]
    pub fn lock_irqs_masked(&self, irq: IrqState) -> IrqSpinLockGuard<'_, T> {
        let _ = arch::irq_save_disable();
        lockdep::acquire(diag(), self.addr(), self.rank);
        self.acquire();
        hold::acquired(self.rank);
        IrqSpinLockGuard { lock: self, irq }
    }

    /// Takes the lock if it is free (Linux `raw_spin_trylock_irqsave`); checked against the
    /// lock order like [`lock`](Self::lock) when it succeeds.
    #[track_caller]
    pub fn try_lock(&self) -> Option<IrqSpinLockGuard<'_, T>> {
        let irq = arch::irq_save_disable();
        if !self.try_acquire() {
            arch::irq_restore(irq);
            return None;
        }
        lockdep::acquire(diag(), self.addr(), self.rank);
        hold::acquired(self.rank);
        Some(IrqSpinLockGuard { lock: self, irq })
    }

    /// The lock's rank.
    pub fn rank(&self) -> LockRank {
        self.rank
    }

    /// Like [`lock`](Self::lock) but gives up after `spins` attempts (panic and fault paths
    /// use it so a CPU that died holding the lock cannot silence the others). Not checked
    /// against the lock order: the fatal paths take what they can.
    pub fn lock_timeout(&self, spins: u64) -> Option<IrqSpinLockGuard<'_, T>> {
        let irq = arch::irq_save_disable();
        for _ in 0..spins {
            if self.try_acquire() {
                hold::acquired(self.rank);
                return Some(IrqSpinLockGuard { lock: self, irq });
            }
            arch::cpu_relax();
        }
        arch::irq_restore(irq);
        None
    }

    /// Takes the lock without a guard (panics like [`lock`](Self::lock) on recursion).
    #[track_caller]
    pub fn raw_lock(&self) -> RawLockToken {
        let irq = arch::irq_save_disable();
        lockdep::acquire(diag(), self.addr(), self.rank);
        self.acquire();
        hold::acquired(self.rank);
        RawLockToken { irq }
    }

    /// Releases a lock taken with [`raw_lock`](Self::raw_lock).
    pub fn raw_unlock(&self, token: RawLockToken) {
        self.release();
        arch::irq_restore(token.irq);
    }

    /// Takes over this lock, which the thread that ran before on this CPU handed over with
    /// [`IrqSpinLockGuard::into_handover`] (called with IRQs masked, right after the context
    /// switch). Panics unless this CPU holds it in hand-over.
    #[track_caller]
    pub fn take_handover(&self) -> HandoverGuard<'_, T> {
        let me = owner_word();
        if self
            .locked
            .compare_exchange(me | HANDOVER, me, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            panic!(
                "IrqSpinLock: cpu {} takes over a lock it was not handed (word {:#x})",
                arch::cpu_index(),
                self.locked.load(Ordering::Relaxed)
            );
        }
        HandoverGuard { lock: self }
    }

    /// The data, for a holder of a [`RawLockToken`] of this lock.
    ///
    /// # Safety
    /// The caller must hold the lock through a `RawLockToken` and not create two live
    /// references with this.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn data_mut_unchecked(&self) -> &mut T {
        // SAFETY: the caller holds the lock and guarantees uniqueness.
        unsafe { &mut *self.data.get() }
    }

    /// Whether someone holds the lock (racy; for diagnostics).
    pub fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Relaxed) != UNLOCKED
    }

    /// Whether the calling CPU holds the lock (exact for the caller's own CPU: only it can
    /// set or clear its own id in the lock word).
    pub fn held_by_this_cpu(&self) -> bool {
        self.locked.load(Ordering::Relaxed) == owner_word()
    }

    #[inline(always)]
    fn try_acquire(&self) -> bool {
        self.locked
            .compare_exchange(UNLOCKED, owner_word(), Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    #[track_caller]
    #[inline(never)]
    #[cold]
    fn acquire(&self) {
        while !self.try_acquire() {
            // Host unit tests run threads that all look like CPU 0 to the stand-in `arch`.
            if cfg!(target_os = "none") && self.held_by_this_cpu() {
                panic!(
                    "IrqSpinLock: recursive lock on cpu {} (already held by this CPU)",
                    arch::cpu_index()
                );
            }
            arch::wait_until_eq(&self.locked, UNLOCKED);
        }
    }

    #[inline(always)]
    fn release(&self) {
        let diag = diag();
        if diag != 0 {
            diag_release(diag, self.addr(), self.rank);
        }
        self.locked.store(UNLOCKED, Ordering::Release);
    }

    fn addr(&self) -> usize {
        (&raw const self.locked) as usize
    }
}

impl<'a, T: ?Sized> IrqSpinLockGuard<'a, T> {
    /// Releases the lock but keeps IRQs masked (Linux `raw_spin_rq_unlock` inside `__schedule`'s
    /// IRQs-off section); returns the IRQ state the guard would have restored, for
    /// [`IrqSpinLock::lock_irqs_masked`] to take back.
    pub fn unlock_irqs_masked(self) -> IrqState {
        let irq = self.irq;
        self.lock.release();
        core::mem::forget(self);
        irq
    }

    /// Keeps the lock held, IRQs masked, past this guard, for the thread that runs next on this
    /// CPU to take over ([`IrqSpinLock::take_handover`]): the lock half of a context switch.
    /// The IRQ state this guard saved is dropped; the next holder unmasks IRQs when done.
    pub fn into_handover(self) {
        self.lock.locked.fetch_or(HANDOVER, Ordering::Relaxed);
        core::mem::forget(self);
    }
}

impl<T: ?Sized> Deref for HandoverGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard proves the lock is held (taken over from the previous thread, whose
        // guard was consumed by `into_handover`, so no other reference to the data exists).
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> DerefMut for HandoverGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as for `deref`, and `&mut self` makes the borrow unique.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T: ?Sized> Drop for HandoverGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.release();
        arch::irq_enable();
    }
}

impl<T: ?Sized> Deref for IrqSpinLockGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard proves the lock is held.
        unsafe { &*self.lock.data.get() }
    }
}

impl<T: ?Sized> DerefMut for IrqSpinLockGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard proves the lock is held, and `&mut self` makes the borrow unique.
        unsafe { &mut *self.lock.data.get() }
    }
}

impl<T: ?Sized> Drop for IrqSpinLockGuard<'_, T> {
    // Inlined as `lock` is.
    #[inline(always)]
    fn drop(&mut self) {
        self.lock.release();
        arch::irq_restore(self.irq);
    }
}

impl<T: ?Sized> fmt::Debug for IrqSpinLock<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IrqSpinLock")
            .field("locked", &self.is_locked())
            .finish_non_exhaustive()
    }
}

/// Turns the lock-order checker on (it starts off; the boot CPU turns it on for `selftest` and
/// `lockdep` before any other CPU runs).
pub fn lockdep_enable() {
    DIAG.fetch_or(DIAG_LOCKDEP, Ordering::Relaxed);
}

/// Whether the lock-order checker is on.
pub fn lockdep_enabled() -> bool {
    DIAG.load(Ordering::Relaxed) & DIAG_LOCKDEP != 0
}

/// How many checked locks the calling CPU holds (0 with the checker off). Call with IRQs
/// masked or on a CPU that cannot change under the caller.
pub fn locks_held() -> usize {
    lockdep::depth()
}

/// Whether the calling CPU holds a lock of rank `lo..hi` (false with the checker off).
pub fn holds_rank(lo: LockRank, hi: LockRank) -> bool {
    lockdep::holds(lo, hi)
}

/// The ranks of the locks the calling CPU holds, innermost last (for diagnostics).
pub fn held_ranks() -> heapless::Vec<u16, 8> {
    lockdep::held_ranks()
}

/// The lock diagnostics that are on, read by a lock before and after it takes the lock word,
/// and once by an unlock: with all off, a load and a predictable branch each (one more of
/// each per lock than the lock-order checker alone costs). [`DIAG_LOCKDEP`], [`DIAG_HOLD`].
static DIAG: AtomicU8 = AtomicU8::new(0);
/// The lock-order checker ([`lockdep_enable`]).
const DIAG_LOCKDEP: u8 = 1;
/// The run-queue lock hold timing ([`rq_hold_timing`]).
const DIAG_HOLD: u8 = 2;

#[inline(always)]
fn diag() -> u8 {
    if cfg!(target_os = "none") {
        DIAG.load(Ordering::Relaxed)
    } else {
        // Host builds (unit tests on threads that all look like CPU 0) check nothing.
        0
    }
}

/// An unlock with some diagnostic on.
#[inline(never)]
fn diag_release(diag: u8, addr: usize, rank: LockRank) {
    if diag & DIAG_LOCKDEP != 0 {
        lockdep::pop(addr);
    }
    if diag & DIAG_HOLD != 0 {
        hold::record(rank);
    }
}

/// The per-CPU held-lock stacks of the lock-order checker. Each CPU touches only its own stack,
/// with IRQs masked (every lock masks them before it is taken and unmasks them after it is
/// released), so plain atomics suffice. Host builds (unit tests on threads that all look like
/// CPU 0) do not check.
mod lockdep {
    use core::sync::atomic::{AtomicU16, AtomicU8, AtomicUsize, Ordering};

    use super::{diag, LockRank, DIAG, DIAG_LOCKDEP};
    use crate::dt::MAX_CPUS;

    /// Deepest nesting the checker follows (deeper is a bug in itself).
    const DEPTH: usize = 8;

    struct Held {
        depth: AtomicU8,
        addr: [AtomicUsize; DEPTH],
        rank: [AtomicU16; DEPTH],
    }

    static HELD: [Held; MAX_CPUS] = [const {
        Held {
            depth: AtomicU8::new(0),
            addr: [const { AtomicUsize::new(0) }; DEPTH],
            rank: [const { AtomicU16::new(0) }; DEPTH],
        }
    }; MAX_CPUS];

    #[inline(always)]
    fn on() -> bool {
        diag() & DIAG_LOCKDEP != 0
    }

    /// Turns the checker off (before a panic that prints: the console lock is checked too).
    fn off() {
        DIAG.fetch_and(!DIAG_LOCKDEP, Ordering::Relaxed);
    }

    fn mine() -> &'static Held {
        &HELD[crate::arch::cpu_index() % MAX_CPUS]
    }

    /// `diag`: [`super::diag`] read by the caller.
    #[inline(always)]
    #[track_caller]
    pub(super) fn acquire(diag: u8, addr: usize, rank: LockRank) {
        if diag & DIAG_LOCKDEP != 0 {
            check_and_push(addr, rank);
        }
    }

    /// Locks are pushed in increasing rank (anything else panics), so the top entry holds the
    /// highest rank: one comparison per lock.
    #[inline(never)]
    #[track_caller]
    fn check_and_push(addr: usize, rank: LockRank) {
        let h = mine();
        let d = usize::from(h.depth.load(Ordering::Relaxed));
        if d > 0 {
            let top = h.rank[(d - 1).min(DEPTH - 1)].load(Ordering::Relaxed);
            if top >= rank.0 {
                let held_addr = h.addr[(d - 1).min(DEPTH - 1)].load(Ordering::Relaxed);
                // Off first: the panic path prints, and the console lock is checked too.
                off();
                panic!(
                    "lock order: cpu {} takes lock {:#x} (rank {}) while holding lock {:#x} \
                     (rank {}); see docs/kernel.md \"Lock order\"",
                    crate::arch::cpu_index(),
                    addr,
                    rank.0,
                    held_addr,
                    top
                );
            }
        }
        if d >= DEPTH {
            off();
            panic!(
                "lock order: cpu {} holds more than {} locks",
                crate::arch::cpu_index(),
                DEPTH
            );
        }
        h.addr[d].store(addr, Ordering::Relaxed);
        h.rank[d].store(rank.0, Ordering::Relaxed);
        h.depth.store(d as u8 + 1, Ordering::Relaxed);
    }

    pub(super) fn pop(addr: usize) {
        let h = mine();
        let d = usize::from(h.depth.load(Ordering::Relaxed)).min(DEPTH);
        if d > 0 && h.addr[d - 1].load(Ordering::Relaxed) == addr {
            h.depth.store(d as u8 - 1, Ordering::Relaxed);
            return;
        }
        // Guards may drop out of order: remove this lock's entry wherever it is. A lock taken
        // with `lock_timeout`, or before the checker was on, has none.
        if let Some(i) = (0..d)
            .rev()
            .find(|&i| h.addr[i].load(Ordering::Relaxed) == addr)
        {
            for j in i..d - 1 {
                let a = h.addr[j + 1].load(Ordering::Relaxed);
                let r = h.rank[j + 1].load(Ordering::Relaxed);
                h.addr[j].store(a, Ordering::Relaxed);
                h.rank[j].store(r, Ordering::Relaxed);
            }
            h.depth.store(d as u8 - 1, Ordering::Relaxed);
        }
    }

    pub(super) fn depth() -> usize {
        if !on() {
            return 0;
        }
        usize::from(mine().depth.load(Ordering::Relaxed))
    }

    pub(super) fn held_ranks() -> heapless::Vec<u16, 8> {
        let h = mine();
        let d = usize::from(h.depth.load(Ordering::Relaxed)).min(DEPTH);
        (0..d).map(|i| h.rank[i].load(Ordering::Relaxed)).collect()
    }

    pub(super) fn holds(lo: LockRank, hi: LockRank) -> bool {
        if !on() {
            return false;
        }
        let h = mine();
        let d = usize::from(h.depth.load(Ordering::Relaxed)).min(DEPTH);
        (0..d).any(|i| (lo.0..hi.0).contains(&h.rank[i].load(Ordering::Relaxed)))
    }
}

/// Turns the run-queue lock hold timing on or off (`bench=sched-costs`; off at boot). Off, it
/// costs a lock one load and one predictable branch ([`DIAG`]).
pub fn rq_hold_timing(on: bool) {
    if on {
        DIAG.fetch_or(DIAG_HOLD, Ordering::Relaxed);
    } else {
        DIAG.fetch_and(!DIAG_HOLD, Ordering::Relaxed);
    }
}

/// Zeroes every CPU's run-queue lock hold histogram.
pub fn rq_hold_reset() {
    hold::reset();
}

/// Buckets of the hold-time histogram: four per power of two ([`hold_bucket`]).
pub const HOLD_BUCKETS: usize = 4 * 40;

/// The run-queue locks' hold times since [`rq_hold_reset`], every CPU together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RqHoldHistogram {
    /// Holds per bucket ([`hold_bucket_bounds`]).
    pub buckets: [u64; HOLD_BUCKETS],
    pub n: u64,
    pub sum_ns: u64,
    pub max_ns: u64,
}

/// Sums every CPU's hold-time histogram (racy against CPUs still recording: for reports).
pub fn rq_hold_histogram() -> RqHoldHistogram {
    hold::snapshot()
}

/// The histogram bucket of a hold of `ns`: exact below 8 ns, then four equal buckets per power
/// of two (each at most 25 % wide), the last one open.
pub const fn hold_bucket(ns: u64) -> usize {
    if ns < 4 {
        return ns as usize;
    }
    let msb = 63 - ns.leading_zeros() as usize;
    let sub = ((ns >> (msb - 2)) & 3) as usize;
    let b = 4 * (msb - 1) + sub;
    if b < HOLD_BUCKETS {
        b
    } else {
        HOLD_BUCKETS - 1
    }
}

/// `[lo, hi)` of bucket `b` in ns (`hi` = `u64::MAX` for the last).
pub const fn hold_bucket_bounds(b: usize) -> (u64, u64) {
    if b < 4 {
        return (b as u64, b as u64 + 1);
    }
    let msb = b / 4 + 1;
    let sub = (b % 4) as u64;
    let step = 1u64 << (msb - 2);
    let lo = (1u64 << msb) + sub * step;
    if b == HOLD_BUCKETS - 1 {
        (lo, u64::MAX)
    } else {
        (lo, lo + step)
    }
}

/// Run-queue lock hold times (`bench=sched-costs`): the holder stamps the counter when it
/// takes a run-queue lock (ranks `RQ..RQ + MAX_CPUS`) and, when it releases it, adds the hold
/// to its own CPU's histogram. A lock handed over by a context switch is one hold, from the
/// `schedule()` that took it to the `finish_task_switch` that drops it (same CPU). Each
/// CPU's stamp slot is its own run queue's lock, written only by its holder, so plain
/// atomics suffice; a lock taken while the timing was off has no stamp and is not counted.
mod hold {
    use core::sync::atomic::{AtomicU64, Ordering};

    use super::{hold_bucket, LockRank, RqHoldHistogram, DIAG_HOLD, HOLD_BUCKETS};
    use crate::dt::MAX_CPUS;

    /// Per run-queue lock: the counter when its holder took it (0: not stamped).
    static SINCE: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

    struct Hist {
        buckets: [AtomicU64; HOLD_BUCKETS],
        n: AtomicU64,
        sum_ns: AtomicU64,
        max_ns: AtomicU64,
    }

    static HIST: [Hist; MAX_CPUS] = [const {
        Hist {
            buckets: [const { AtomicU64::new(0) }; HOLD_BUCKETS],
            n: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
        }
    }; MAX_CPUS];

    /// The run-queue lock index of `rank`, if it is one.
    fn rq_index(rank: LockRank) -> Option<usize> {
        let i = rank.0.wrapping_sub(LockRank::RQ.0) as usize;
        (i < MAX_CPUS).then_some(i)
    }

    /// After a lock was taken (the diagnostics word read again: keeping it from before the
    /// acquire costs a saved register on every lock).
    #[inline(always)]
    pub(super) fn acquired(rank: LockRank) {
        if super::diag() & DIAG_HOLD != 0 {
            stamp(rank);
        }
    }

    #[inline(never)]
    fn stamp(rank: LockRank) {
        if let Some(i) = rq_index(rank) {
            SINCE[i].store(crate::arch::counter().max(1), Ordering::Relaxed);
        }
    }

    /// Before a lock is released, with the timing on.
    pub(super) fn record(rank: LockRank) {
        let Some(i) = rq_index(rank) else { return };
        let since = SINCE[i].swap(0, Ordering::Relaxed);
        if since == 0 {
            return;
        }
        let ns = cyc_to_ns(crate::arch::counter().saturating_sub(since));
        let h = &HIST[crate::arch::cpu_index() % MAX_CPUS];
        h.buckets[hold_bucket(ns)].fetch_add(1, Ordering::Relaxed);
        h.n.fetch_add(1, Ordering::Relaxed);
        h.sum_ns.fetch_add(ns, Ordering::Relaxed);
        h.max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    #[cfg(target_os = "none")]
    fn cyc_to_ns(cyc: u64) -> u64 {
        crate::time::cyc_to_ns(cyc)
    }

    /// Host builds never record (see [`on`]).
    #[cfg(not(target_os = "none"))]
    fn cyc_to_ns(cyc: u64) -> u64 {
        cyc
    }

    pub(super) fn reset() {
        for h in &HIST {
            for b in &h.buckets {
                b.store(0, Ordering::Relaxed);
            }
            h.n.store(0, Ordering::Relaxed);
            h.sum_ns.store(0, Ordering::Relaxed);
            h.max_ns.store(0, Ordering::Relaxed);
        }
    }

    pub(super) fn snapshot() -> RqHoldHistogram {
        let mut out = RqHoldHistogram {
            buckets: [0; HOLD_BUCKETS],
            n: 0,
            sum_ns: 0,
            max_ns: 0,
        };
        for h in &HIST {
            for (o, b) in out.buckets.iter_mut().zip(&h.buckets) {
                *o += b.load(Ordering::Relaxed);
            }
            out.n += h.n.load(Ordering::Relaxed);
            out.sum_ns += h.sum_ns.load(Ordering::Relaxed);
            out.max_ns = out.max_ns.max(h.max_ns.load(Ordering::Relaxed));
        }
        out
    }
}

/// A value written once (by the boot CPU) and read by everyone afterwards.
pub struct InitOnce<T> {
    state: AtomicU8,
    value: UnsafeCell<Option<T>>,
}

const UNINIT: u8 = 0;
const WRITING: u8 = 1;
const READY: u8 = 2;

// SAFETY: the value is written once before READY is published (Release) and only read after
// READY is observed (Acquire).
unsafe impl<T: Send + Sync> Sync for InitOnce<T> {}

impl<T> InitOnce<T> {
    pub const fn new() -> Self {
        InitOnce {
            state: AtomicU8::new(UNINIT),
            value: UnsafeCell::new(None),
        }
    }

    /// Stores `value`; returns it back if the cell was already set.
    pub fn set(&self, value: T) -> Result<&T, T> {
        if self
            .state
            .compare_exchange(UNINIT, WRITING, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            return Err(value);
        }
        // SAFETY: WRITING gives this caller exclusive access; readers wait for READY.
        unsafe { *self.value.get() = Some(value) };
        self.state.store(READY, Ordering::Release);
        Ok(self.get().expect("just set"))
    }

    /// The value, once set.
    pub fn get(&self) -> Option<&T> {
        if self.state.load(Ordering::Acquire) == READY {
            // SAFETY: READY means the value is written and never written again.
            unsafe { (*self.value.get()).as_ref() }
        } else {
            None
        }
    }
}

impl<T> Default for InitOnce<T> {
    fn default() -> Self {
        Self::new()
    }
}

/// Claims the lowest clear bit of a lock-free bitmap (bit `n` in word `n / 64`) and returns
/// its index; `None` when every bit is set. Acquire on success: what the previous owner wrote
/// before [`bitmap_release`] is visible to the new one.
pub fn bitmap_claim(words: &[AtomicU64]) -> Option<usize> {
    for (w, word) in words.iter().enumerate() {
        let mut cur = word.load(Ordering::Relaxed);
        while cur != u64::MAX {
            let bit = (!cur).trailing_zeros();
            match word.compare_exchange_weak(
                cur,
                cur | (1 << bit),
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Some(w * 64 + bit as usize),
                Err(now) => cur = now,
            }
        }
    }
    None
}

/// Clears bit `n` of a bitmap [`bitmap_claim`] hands out (Release: the owner's writes come
/// first).
pub fn bitmap_release(words: &[AtomicU64], n: usize) {
    words[n / 64].fetch_and(!(1 << (n % 64)), Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn lock_serialises_increments_across_threads() {
        let lock = Arc::new(IrqSpinLock::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let l = Arc::clone(&lock);
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        *l.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(*lock.lock(), 40_000);
    }

    #[test]
    fn lock_timeout_fails_while_held_and_succeeds_after() {
        let lock = IrqSpinLock::new(());
        let g = lock.lock();
        assert!(lock.lock_timeout(100).is_none());
        drop(g);
        assert!(lock.lock_timeout(100).is_some());
    }

    #[test]
    fn hold_buckets_cover_every_value_once_and_are_at_most_a_quarter_wide() {
        let mut prev_hi = 0;
        for b in 0..HOLD_BUCKETS {
            let (lo, hi) = hold_bucket_bounds(b);
            assert_eq!(
                lo,
                prev_hi,
                "bucket {b} starts where {} ended",
                b.max(1) - 1
            );
            assert!(hi > lo);
            assert_eq!(hold_bucket(lo), b);
            if hi != u64::MAX {
                assert_eq!(hold_bucket(hi - 1), b);
                assert!(
                    (hi - lo) * 4 <= lo.max(4),
                    "bucket {b} [{lo}, {hi}) too wide"
                );
            }
            prev_hi = hi;
        }
        assert_eq!(prev_hi, u64::MAX);
        assert_eq!(hold_bucket(u64::MAX), HOLD_BUCKETS - 1);
        assert_eq!(hold_bucket(1000), hold_bucket(1023));
        assert_ne!(hold_bucket(1023), hold_bucket(1024));
    }

    #[test]
    fn init_once_sets_once() {
        let c = InitOnce::new();
        assert!(c.get().is_none());
        assert_eq!(c.set(5).ok(), Some(&5));
        assert_eq!(c.set(6).err(), Some(6));
        assert_eq!(c.get(), Some(&5));
    }

    #[test]
    fn a_bitmap_hands_out_the_lowest_free_bit_until_full() {
        let words = [AtomicU64::new(1), AtomicU64::new(0)];
        let got: std::vec::Vec<_> = core::iter::from_fn(|| bitmap_claim(&words)).collect();
        assert_eq!(got, (1..128).collect::<std::vec::Vec<_>>());
        bitmap_release(&words, 70);
        bitmap_release(&words, 5);
        assert_eq!(bitmap_claim(&words), Some(5));
        assert_eq!(bitmap_claim(&words), Some(70));
        assert_eq!(bitmap_claim(&words), None);
    }
}
