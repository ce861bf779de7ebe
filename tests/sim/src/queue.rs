//! The engine's pending events: a 4-ary min-heap ordered by `(time, sequence)`, and beside
//! it a FIFO of the events due at the current time.
//!
//! The sequence number is unique (the engine numbers every push), so the order of two
//! events never depends on their payloads, and equal times come out in push order: the
//! same inputs process the same events in the same order. This is the order of
//! `BinaryHeap<Reverse<(time, seq, payload)>>`, which it replaced (profiled at ~11 % of
//! the simulator's instructions: 40-byte entries compared as 3-tuples); a 4-ary heap of
//! 24-byte entries compares two integers per child and is half as deep.
//!
//! Many events are due at once: a wake-up that preempts queues a reschedule at the current
//! time, about one event in four on a periodic load. Those go to the FIFO (`now`) instead
//! of through the heap: an event pushed at the time of the last pop, with a sequence number
//! above every one already in the FIFO, keeps the FIFO sorted, and a pop takes the earlier
//! of its head and the heap's top — the same order as one heap holding both.

use std::collections::VecDeque;

/// One pending event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Entry<E> {
    /// When it is due (ns).
    pub t: u64,
    /// Its push number (unique; ties on `t` go to the lower).
    pub seq: u64,
    /// What happens.
    pub ev: E,
}

impl<E> Entry<E> {
    /// `(t, seq)` as one 128-bit number: compared without a branch, where the tuple's
    /// comparison branched on `t == other.t` before comparing the sequence numbers.
    #[inline(always)]
    fn key(&self) -> u128 {
        (self.t as u128) << 64 | self.seq as u128
    }

    #[inline(always)]
    fn before(&self, other: &Self) -> bool {
        self.key() < other.key()
    }
}

/// A min-heap of [`Entry`]s, four children per node, and the FIFO of those due at `now_t`.
#[derive(Debug)]
pub(crate) struct EventQueue<E> {
    v: Vec<Entry<E>>,
    /// Entries due at `now_t`, in sequence order.
    now: VecDeque<Entry<E>>,
    /// The time of the last entry taken ([`EventQueue::pop`], [`EventQueue::advance_to`]).
    now_t: u64,
}

const ARITY: usize = 4;
// `pop_heap`'s tournament compares exactly four children.
const _: () = assert!(ARITY == 4);

impl<E: Copy> EventQueue<E> {
    /// An empty queue with room for `cap` entries.
    pub fn with_capacity(cap: usize) -> Self {
        EventQueue {
            v: Vec::with_capacity(cap),
            now: VecDeque::with_capacity(cap),
            now_t: 0,
        }
    }

    /// Number of pending entries.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.v.len() + self.now.len()
    }

    /// The earliest entry.
    #[inline]
    pub fn peek(&self) -> Option<&Entry<E>> {
        match (self.now.front(), self.v.first()) {
            (Some(a), Some(b)) => Some(if a.before(b) { a } else { b }),
            (a, b) => a.or(b),
        }
    }

    /// The caller took an event due at `t` from elsewhere (the engine's segment ends, which
    /// it merges with this queue by `(time, sequence)`): later pushes at `t` may use the
    /// FIFO. Every entry here is due at or after `t`, so the FIFO is empty if `t` is past
    /// its time.
    #[inline]
    pub fn advance_to(&mut self, t: u64) {
        if self.now.is_empty() {
            self.now_t = t;
        }
    }

    /// Add an entry.
    #[inline]
    pub fn push(&mut self, e: Entry<E>) {
        self.push_parts(e.t, e.seq, e.ev);
    }

    /// [`EventQueue::push`] of `Entry { t, seq, ev }`, its fields passed in registers: an
    /// entry built in memory by the caller and read back here as one 16-byte load was a
    /// load spanning two just-written 8-byte stores, which the CPU cannot forward.
    #[inline]
    pub fn push_parts(&mut self, t: u64, seq: u64, ev: E) {
        if t == self.now_t && self.now.back().is_none_or(|b| b.seq < seq) {
            self.now.push_back(Entry { t, seq, ev });
            return;
        }
        let key = (t as u128) << 64 | seq as u128;
        // Sift up: find the entry's place first, moving parents down into the hole, then
        // write it once.
        let mut i = self.v.len();
        self.v.push(Entry { t, seq, ev });
        while i > 0 {
            let parent = (i - 1) / ARITY;
            if key >= self.v[parent].key() {
                break;
            }
            self.v[i] = self.v[parent];
            i = parent;
        }
        let slot = &mut self.v[i];
        slot.t = t;
        slot.seq = seq;
        slot.ev = ev;
    }

    /// Remove and return the earliest entry.
    #[inline]
    pub fn pop(&mut self) -> Option<Entry<E>> {
        let from_fifo = match (self.now.front(), self.v.first()) {
            (Some(a), Some(b)) => a.before(b),
            (a, _) => a.is_some(),
        };
        let e = if from_fifo {
            self.now.pop_front()
        } else {
            self.pop_heap()
        };
        if let Some(e) = e {
            self.now_t = e.t;
        }
        e
    }

    /// Remove and return the heap's top.
    #[inline]
    fn pop_heap(&mut self) -> Option<Entry<E>> {
        let last = self.v.pop()?;
        let Some(&top) = self.v.first() else {
            return Some(last);
        };
        // Sift `last` down from the root.
        let n = self.v.len();
        let last_key = last.key();
        let mut i = 0;
        loop {
            let first = i * ARITY + 1;
            let m = if first + ARITY <= n {
                // All four children: the earliest by a tournament of selects, which compile
                // without branches (a loop over the children mispredicted at every level).
                let k = |c: usize| self.v[c].key();
                let (k0, k1, k2, k3) = (k(first), k(first + 1), k(first + 2), k(first + 3));
                let (a, ka) = if k1 < k0 {
                    (first + 1, k1)
                } else {
                    (first, k0)
                };
                let (b, kb) = if k3 < k2 {
                    (first + 3, k3)
                } else {
                    (first + 2, k2)
                };
                let (m, km) = if kb < ka { (b, kb) } else { (a, ka) };
                if km >= last_key {
                    break;
                }
                m
            } else {
                if first >= n {
                    break;
                }
                let mut m = first;
                for c in first + 1..n {
                    if self.v[c].before(&self.v[m]) {
                        m = c;
                    }
                }
                if !self.v[m].before(&last) {
                    break;
                }
                m
            };
            self.v[i] = self.v[m];
            i = m;
        }
        self.v[i] = last;
        Some(top)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    /// The queue pops exactly what `BinaryHeap<Reverse<(t, seq, ev)>>` pops, on random
    /// pushes (many equal times, many at the time of the last pop: the FIFO) and pops, and
    /// when entries taken at the current time are pushed back behind a newer one.
    #[test]
    fn pops_in_binary_heap_order() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for round in 0..50 {
            let mut q = EventQueue::with_capacity(4);
            let mut oracle = BinaryHeap::new();
            let mut seq = 0u64;
            let mut now = 0u64;
            for _ in 0..2000 {
                let r = rnd();
                if r % 5 < 3 {
                    seq += 1;
                    // Times cluster on a few values so that ties are common.
                    let t = now + (rnd() % (3 + round as u64));
                    let ev = (rnd() % 1000) as u32;
                    q.push(Entry { t, seq, ev });
                    oracle.push(Reverse((t, seq, ev)));
                } else {
                    let got = q.pop().map(|e| (e.t, e.seq, e.ev));
                    let want = oracle.pop().map(|Reverse(e)| e);
                    assert_eq!(got, want);
                    if let Some((t, _, _)) = got {
                        now = t;
                    }
                }
                assert_eq!(q.len(), oracle.len());
                assert_eq!(
                    q.peek().map(|e| (e.t, e.seq, e.ev)),
                    oracle.peek().map(|Reverse(e)| *e)
                );
            }
            // The engine's `run_same_time_wakeups`: take every entry due now, push a new one
            // due now, then put the taken ones back (older sequence numbers than the new one).
            let mut taken = std::vec::Vec::new();
            while q.peek().is_some_and(|e| e.t == now) {
                let got = q.pop().map(|e| (e.t, e.seq, e.ev));
                let want = oracle.pop().map(|Reverse(e)| e);
                assert_eq!(got, want);
                taken.extend(got);
            }
            seq += 1;
            q.push(Entry { t: now, seq, ev: 7 });
            oracle.push(Reverse((now, seq, 7)));
            for (t, s, ev) in taken {
                q.push(Entry { t, seq: s, ev });
                oracle.push(Reverse((t, s, ev)));
            }
            while let Some(Reverse(want)) = oracle.pop() {
                assert_eq!(q.pop().map(|e| (e.t, e.seq, e.ev)), Some(want));
            }
            assert_eq!(q.pop(), None);
        }
    }
}
