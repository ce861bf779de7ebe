//! Sleeping until something happens: wait queues, completions and keyed (futex) queues.
//!
//! Re-derives Linux's `kernel/sched/wait.c` (`prepare_to_wait` / `finish_wait`, `wake_up`),
//! `kernel/sched/completion.c` (`wait_for_completion`, `complete`: a count of pending wake-ups,
//! so a `complete` before the wait is not lost) and the hash bucket of `kernel/futex/`
//! (`futex_wait_setup` / `futex_wait_queue`, `futex_wake`: [`KeyedWaitQueue`]). The waker holds the queue's lock while it wakes
//! (lock order: wait queue → thread → run queue, docs/kernel.md), and the sleeper re-checks its
//! condition under the same lock after setting itself asleep, so no wake-up can fall between
//! the check and the sleep.
//!
//! Deliberate differences: the list is intrusive through the thread table (a thread waits on
//! one queue at a time, so a [`WaitLink`] per thread suffices and nothing is allocated); all
//! waits are exclusive (a wake-one wakes the oldest waiter) and uninterruptible (no signals).

use core::sync::atomic::{AtomicU16, AtomicUsize, Ordering};

use crate::task::MAX_THREADS;

use asym_sched::types::Nanos;

use crate::sync::{IrqSpinLock, LockRank};
use crate::task::{self, ThreadState};

/// "No thread" in a link (links hold slot + 1).
const NIL: u16 = 0;

/// A thread's membership of one wait queue (its links are guarded by that queue's lock).
#[derive(Debug)]
pub struct WaitLink {
    next: AtomicU16,
    prev: AtomicU16,
    /// The queue the thread is on (its list's address), 0 if none.
    queue: AtomicUsize,
}

impl WaitLink {
    /// Not on any queue.
    pub const fn new() -> Self {
        WaitLink {
            next: AtomicU16::new(NIL),
            prev: AtomicU16::new(NIL),
            queue: AtomicUsize::new(0),
        }
    }
}

impl Default for WaitLink {
    fn default() -> Self {
        Self::new()
    }
}

/// A FIFO of waiting thread slots, threaded through their [`WaitLink`]s.
#[derive(Debug)]
struct WaitList {
    head: u16,
    tail: u16,
}

impl WaitList {
    const fn new() -> Self {
        WaitList {
            head: NIL,
            tail: NIL,
        }
    }

    fn id(&self) -> usize {
        (self as *const WaitList) as usize
    }

    fn contains(&self, slot: usize) -> bool {
        task::slot(slot).wait.queue.load(Ordering::Relaxed) == self.id()
    }

    fn push_back(&mut self, slot: usize) {
        let l = &task::slot(slot).wait;
        debug_assert_eq!(
            l.queue.load(Ordering::Relaxed),
            0,
            "thread on two wait queues"
        );
        let me = slot as u16 + 1;
        l.next.store(NIL, Ordering::Relaxed);
        l.prev.store(self.tail, Ordering::Relaxed);
        l.queue.store(self.id(), Ordering::Relaxed);
        match self.tail {
            NIL => self.head = me,
            t => task::slot(usize::from(t - 1))
                .wait
                .next
                .store(me, Ordering::Relaxed),
        }
        self.tail = me;
    }

    fn remove(&mut self, slot: usize) {
        if !self.contains(slot) {
            return;
        }
        let l = &task::slot(slot).wait;
        let (next, prev) = (
            l.next.load(Ordering::Relaxed),
            l.prev.load(Ordering::Relaxed),
        );
        match prev {
            NIL => self.head = next,
            p => task::slot(usize::from(p - 1))
                .wait
                .next
                .store(next, Ordering::Relaxed),
        }
        match next {
            NIL => self.tail = prev,
            n => task::slot(usize::from(n - 1))
                .wait
                .prev
                .store(prev, Ordering::Relaxed),
        }
        l.queue.store(0, Ordering::Relaxed);
    }

    fn pop_front(&mut self) -> Option<usize> {
        let s = usize::from(self.head.checked_sub(1)?);
        self.remove(s);
        Some(s)
    }

    fn is_empty(&self) -> bool {
        self.head == NIL
    }
}

/// Threads waiting for a condition (Linux `wait_queue_head`).
#[derive(Debug)]
pub struct WaitQueue {
    list: IrqSpinLock<WaitList>,
}

impl WaitQueue {
    /// An empty queue.
    pub const fn new() -> Self {
        WaitQueue {
            list: IrqSpinLock::with_rank(WaitList::new(), LockRank::WAIT_QUEUE),
        }
    }

    /// Sleeps until `cond()` holds (Linux `wait_event`): `cond` is evaluated with the queue's
    /// lock held, so a waker that changes what it reads and then calls [`wake_one`] or
    /// [`wake_all`] cannot be missed. Must be called from a thread with no lock held.
    ///
    /// [`wake_one`]: WaitQueue::wake_one
    /// [`wake_all`]: WaitQueue::wake_all
    pub fn wait_until(&self, mut cond: impl FnMut() -> bool) {
        let me = task::current_slot().expect("wait_until outside a thread");
        loop {
            let mut l = self.list.lock();
            if cond() {
                l.remove(me);
                return;
            }
            if !l.contains(me) {
                l.push_back(me);
            }
            task::slot(me).set_state(ThreadState::Sleeping);
            drop(l);
            crate::sched::schedule();
        }
    }

    /// Wakes the longest waiter; false if none waits.
    pub fn wake_one(&self) -> bool {
        let mut l = self.list.lock();
        match l.pop_front() {
            Some(s) => {
                crate::sched::wake_slot(s);
                true
            }
            None => false,
        }
    }

    /// Wakes every waiter; returns how many.
    pub fn wake_all(&self) -> usize {
        let mut l = self.list.lock();
        let mut n = 0;
        while let Some(s) = l.pop_front() {
            crate::sched::wake_slot(s);
            n += 1;
        }
        n
    }
}

impl Default for WaitQueue {
    fn default() -> Self {
        Self::new()
    }
}

/// How a [`KeyedWaitQueue::wait`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyedWait {
    /// The condition did not hold under the queue's lock: no sleep (Linux `-EAGAIN`).
    Mismatch,
    /// A [`KeyedWaitQueue::wake`] of the key took the thread off the queue.
    Woken,
    /// The deadline passed first.
    TimedOut,
}

/// Each thread slot's key while it waits on a [`KeyedWaitQueue`] (guarded by that queue's
/// lock: a thread waits on one queue at a time).
static WAIT_KEY: [AtomicUsize; MAX_THREADS] = [const { AtomicUsize::new(0) }; MAX_THREADS];

/// Threads waiting on keys, many keys to one queue (Linux's `futex_hash_bucket`, whose lock
/// is taken both to check the user's word and to wake): a waiter sleeps only if its
/// condition holds under the lock, and a waker of its key takes the same lock, so a change of
/// the condition made before the wake is never missed. Wakes in FIFO order per key.
#[derive(Debug)]
pub struct KeyedWaitQueue {
    list: IrqSpinLock<WaitList>,
}

impl KeyedWaitQueue {
    /// An empty queue.
    pub const fn new() -> Self {
        KeyedWaitQueue {
            list: IrqSpinLock::with_rank(WaitList::new(), LockRank::WAIT_QUEUE),
        }
    }

    /// Sleeps on `key` if `cond()` holds (evaluated under the queue's lock), until a
    /// [`wake`](Self::wake) of `key` or guest time `deadline` (`None`: no limit). A deadline
    /// already past returns [`KeyedWait::TimedOut`] after the check. From a thread with no
    /// lock held.
    pub fn wait(
        &self,
        key: usize,
        deadline: Option<Nanos>,
        cond: impl FnOnce() -> bool,
    ) -> KeyedWait {
        let me = task::current_slot().expect("KeyedWaitQueue::wait outside a thread");
        {
            let mut l = self.list.lock();
            if !cond() {
                return KeyedWait::Mismatch;
            }
            if deadline.is_some_and(|d| crate::sched::now() >= d) {
                return KeyedWait::TimedOut;
            }
            WAIT_KEY[me].store(key, Ordering::Relaxed);
            l.push_back(me);
            task::slot(me).set_state(ThreadState::Sleeping);
        }
        loop {
            if let Some(d) = deadline {
                // Armed after the lock is dropped, as `Completion::wait_deadline` does; a wake
                // in between finds the thread asleep or already woken, and the check below
                // sees it off the queue either way.
                crate::timer::arm_sleep(me, crate::time::ns_to_cyc(d.0));
            }
            crate::sched::schedule();
            let mut l = self.list.lock();
            let r = if !l.contains(me) {
                KeyedWait::Woken
            } else if deadline.is_some_and(|d| crate::sched::now() >= d) {
                l.remove(me);
                KeyedWait::TimedOut
            } else {
                // Woken by something else (a stray timer): back to sleep.
                task::slot(me).set_state(ThreadState::Sleeping);
                continue;
            };
            drop(l);
            if deadline.is_some() {
                crate::timer::cancel_sleep(me);
            }
            return r;
        }
    }

    /// Wakes up to `n` threads waiting on `key`, oldest first; returns how many.
    pub fn wake(&self, key: usize, n: u32) -> u32 {
        let mut l = self.list.lock();
        let mut woken = 0;
        let mut cur = l.head;
        while cur != NIL && woken < n {
            let s = usize::from(cur - 1);
            cur = task::slot(s).wait.next.load(Ordering::Relaxed);
            if WAIT_KEY[s].load(Ordering::Relaxed) == key {
                l.remove(s);
                crate::sched::wake_slot(s);
                woken += 1;
            }
        }
        woken
    }

    /// Threads waiting on `key`.
    pub fn waiters(&self, key: usize) -> usize {
        let l = self.list.lock();
        let mut n = 0;
        let mut cur = l.head;
        while cur != NIL {
            let s = usize::from(cur - 1);
            cur = task::slot(s).wait.next.load(Ordering::Relaxed);
            n += usize::from(WAIT_KEY[s].load(Ordering::Relaxed) == key);
        }
        n
    }
}

impl Default for KeyedWaitQueue {
    fn default() -> Self {
        Self::new()
    }
}

/// A count of events and the threads waiting for one (Linux `struct completion`).
#[derive(Debug)]
pub struct Completion {
    inner: IrqSpinLock<(WaitList, u32)>,
}

impl Completion {
    /// No event yet.
    pub const fn new() -> Self {
        Completion {
            inner: IrqSpinLock::with_rank((WaitList::new(), 0), LockRank::WAIT_QUEUE),
        }
    }

    /// Waits for an event and consumes it (Linux `wait_for_completion`). From a thread with no
    /// lock held.
    pub fn wait(&self) {
        let me = task::current_slot().expect("Completion::wait outside a thread");
        loop {
            let mut g = self.inner.lock();
            if g.1 > 0 {
                g.1 -= 1;
                g.0.remove(me);
                return;
            }
            if !g.0.contains(me) {
                g.0.push_back(me);
            }
            task::slot(me).set_state(ThreadState::Sleeping);
            drop(g);
            crate::sched::schedule();
        }
    }

    /// As [`wait`](Completion::wait), giving up at guest time `deadline`: whether an event was
    /// consumed (a timer on this CPU wakes the thread at the deadline).
    pub fn wait_deadline(&self, deadline: Nanos) -> bool {
        let me = task::current_slot().expect("Completion::wait_deadline outside a thread");
        loop {
            let mut g = self.inner.lock();
            let got = g.1 > 0;
            if got || crate::sched::now() >= deadline {
                if got {
                    g.1 -= 1;
                }
                g.0.remove(me);
                drop(g);
                crate::timer::cancel_sleep(me);
                return got;
            }
            if !g.0.contains(me) {
                g.0.push_back(me);
            }
            task::slot(me).set_state(ThreadState::Sleeping);
            drop(g);
            // Armed after the queue's lock is dropped (timer queues rank below nothing here);
            // a `complete` in between finds the thread asleep or already woken, and either
            // way the loop sees its event.
            crate::timer::arm_sleep(me, crate::time::ns_to_cyc(deadline.0));
            crate::sched::schedule();
        }
    }

    /// Consumes an event if one is pending, without sleeping.
    pub fn try_wait(&self) -> bool {
        let mut g = self.inner.lock();
        if g.1 > 0 {
            g.1 -= 1;
            true
        } else {
            false
        }
    }

    /// Records an event and wakes the longest waiter (Linux `complete`).
    pub fn complete(&self) {
        let mut g = self.inner.lock();
        g.1 = g.1.saturating_add(1);
        if let Some(s) = g.0.pop_front() {
            crate::sched::wake_slot(s);
        }
    }

    /// Events recorded and not yet consumed.
    pub fn pending(&self) -> u32 {
        self.inner.lock().1
    }

    /// Whether a thread waits.
    pub fn has_waiters(&self) -> bool {
        !self.inner.lock().0.is_empty()
    }
}

impl Default for Completion {
    fn default() -> Self {
        Self::new()
    }
}
