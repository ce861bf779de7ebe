//! Sleeping until something happens: wait queues and completions.
//!
//! Re-derives Linux's `kernel/sched/wait.c` (`prepare_to_wait` / `finish_wait`, `wake_up`) and
//! `kernel/sched/completion.c` (`wait_for_completion`, `complete`: a count of pending wake-ups,
//! so a `complete` before the wait is not lost). The waker holds the queue's lock while it wakes
//! (lock order: wait queue → thread → run queue, docs/kernel.md), and the sleeper re-checks its
//! condition under the same lock after setting itself asleep, so no wake-up can fall between
//! the check and the sleep.
//!
//! Deliberate differences: the list is intrusive through the thread table (a thread waits on
//! one queue at a time, so a [`WaitLink`] per thread suffices and nothing is allocated); all
//! waits are exclusive (a wake-one wakes the oldest waiter) and uninterruptible (no signals).

use core::sync::atomic::{AtomicU16, AtomicUsize, Ordering};

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
