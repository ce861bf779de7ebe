//! A per-CPU, single-producer trace ring: fixed capacity, no locks, no allocation, and
//! every record that does not fit counted, never silently dropped.
//!
//! The shape of Linux's per-CPU ring buffer (`kernel/trace/ring_buffer.c`: each CPU
//! writes only its own buffer, a reader drains it) and of Hubris's `ringbuf` (fixed-size
//! `Copy` records), without `unsafe`: a slot is `W` 64-bit words, each an `AtomicU64`,
//! so a record is written word by word with plain stores and published by one release
//! store of the head index; the reader's acquire load of the head makes the words
//! visible, and its release store of the tail hands the slot back. Where Linux's default
//! overwrites the oldest events, a full ring here refuses the new record and counts it
//! ([`Ring::lost`]): a trace drained at the end keeps its beginning (the initial
//! state LISA's analyses need) and says how much is missing.
//!
//! Contract: one producer per ring (the CPU it belongs to, with interrupts masked around
//! [`Ring::push`] if interrupt handlers trace too) and one consumer at a time. Two
//! producers at once cannot cause undefined behaviour — every access is atomic — but
//! may interleave the words of their records.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The ring over its slot storage `S` (an array for [`TraceRing`], a slice chosen at run
/// time for [`SliceRing`]), `W` words per record: one protocol for both.
#[derive(Debug)]
pub struct Ring<S, const W: usize> {
    slots: S,
    /// Records ever published (the next slot is `head % capacity`); written by the producer.
    head: AtomicUsize,
    /// Records ever consumed; written by the consumer.
    tail: AtomicUsize,
    /// Records refused because the ring was full.
    lost: AtomicU64,
}

/// A ring of `N` records of `W` words each, usable in a `static`.
pub type TraceRing<const N: usize, const W: usize> = Ring<[[AtomicU64; W]; N], W>;

/// The same ring over storage chosen at run time (`slots`, e.g. leaked from the heap, its
/// capacity sized to the memory there is).
pub type SliceRing<'a, const W: usize> = Ring<&'a [[AtomicU64; W]], W>;

impl<const N: usize, const W: usize> TraceRing<N, W> {
    /// An empty ring, usable in a `static`.
    pub const fn new() -> Self {
        Ring::over([const { [const { AtomicU64::new(0) }; W] }; N])
    }
}

impl<const N: usize, const W: usize> Default for TraceRing<N, W> {
    fn default() -> Self {
        Self::new()
    }
}

impl<S, const W: usize> Ring<S, W> {
    /// An empty ring over `slots` (their contents are overwritten before being read).
    pub const fn over(slots: S) -> Self {
        Ring {
            slots,
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
            lost: AtomicU64::new(0),
        }
    }
}

impl<'a, const W: usize> SliceRing<'a, W> {
    /// An empty ring over `slots` (their contents are overwritten before being read).
    pub const fn new(slots: &'a [[AtomicU64; W]]) -> Self {
        Ring::over(slots)
    }
}

impl<S: AsRef<[[AtomicU64; W]]>, const W: usize> Ring<S, W> {
    /// Capacity in records.
    pub fn capacity(&self) -> usize {
        self.slots.as_ref().len()
    }

    /// Append a record (producer side). `false` when the ring is full: the record is
    /// counted in [`Self::lost`] and not stored.
    pub fn push(&self, record: &[u64; W]) -> bool {
        let slots = self.slots.as_ref();
        let n = slots.len();
        let head = self.head.load(Ordering::Relaxed);
        // Acquire: the consumer has finished reading every slot up to `tail`.
        let tail = self.tail.load(Ordering::Acquire);
        if n == 0 || head.wrapping_sub(tail) >= n {
            self.lost.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        for (slot, &w) in slots[head % n].iter().zip(record) {
            slot.store(w, Ordering::Relaxed);
        }
        // Release: the words above are visible to whoever sees the new head.
        self.head.store(head.wrapping_add(1), Ordering::Release);
        true
    }

    /// Append `n` records, `record(i)` for `i` in `0..n`, all or none (producer side): they
    /// are published together, so a consumer sees them consecutive and whole. `false` when
    /// fewer than `n` slots are free: all `n` are counted in [`Self::lost`] and none stored.
    pub fn push_n(&self, n: usize, mut record: impl FnMut(usize) -> [u64; W]) -> bool {
        let slots = self.slots.as_ref();
        let cap = slots.len();
        let head = self.head.load(Ordering::Relaxed);
        // Acquire: the consumer has finished reading every slot up to `tail`.
        let tail = self.tail.load(Ordering::Acquire);
        if n > cap - head.wrapping_sub(tail).min(cap) {
            self.lost.fetch_add(n as u64, Ordering::Relaxed);
            return false;
        }
        for i in 0..n {
            let r = record(i);
            for (slot, &w) in slots[head.wrapping_add(i) % cap].iter().zip(&r) {
                slot.store(w, Ordering::Relaxed);
            }
        }
        // Release: every word above is visible to whoever sees the new head.
        self.head.store(head.wrapping_add(n), Ordering::Release);
        true
    }

    /// Take the oldest record (consumer side).
    pub fn pop(&self) -> Option<[u64; W]> {
        let out = self.peek()?;
        let tail = self.tail.load(Ordering::Relaxed);
        // Release: our reads of the slot are done before the producer may reuse it.
        self.tail.store(tail.wrapping_add(1), Ordering::Release);
        Some(out)
    }

    /// The oldest record, left in the ring (consumer side).
    pub fn peek(&self) -> Option<[u64; W]> {
        let slots = self.slots.as_ref();
        let n = slots.len();
        let tail = self.tail.load(Ordering::Relaxed);
        let head = self.head.load(Ordering::Acquire);
        if head == tail || n == 0 {
            return None;
        }
        let mut out = [0u64; W];
        for (o, slot) in out.iter_mut().zip(&slots[tail % n]) {
            *o = slot.load(Ordering::Relaxed);
        }
        Some(out)
    }

    /// Records waiting to be consumed.
    pub fn len(&self) -> usize {
        let tail = self.tail.load(Ordering::Relaxed);
        self.head.load(Ordering::Acquire).wrapping_sub(tail)
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records refused so far because the ring was full.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// Records ever stored (consumed or not).
    pub fn written(&self) -> usize {
        self.head.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use std::sync::Arc;
    use std::vec::Vec;

    #[test]
    fn fifo_until_full_then_counts_what_it_refuses() {
        let r: TraceRing<4, 2> = TraceRing::new();
        for i in 0..6u64 {
            let stored = r.push(&[i, 100 + i]);
            assert_eq!(stored, i < 4, "record {i}");
        }
        assert_eq!((r.len(), r.lost(), r.written()), (4, 2, 4));
        // The oldest four, in order; the two refused ones are not there.
        let got: Vec<_> = core::iter::from_fn(|| r.pop()).collect();
        assert_eq!(got, [[0, 100], [1, 101], [2, 102], [3, 103]]);
        assert!(r.is_empty());
        assert_eq!(r.pop(), None);
        // Room again after draining.
        assert!(r.push(&[7, 107]));
        assert_eq!(r.pop(), Some([7, 107]));
    }

    #[test]
    fn wraps_around_many_times_without_losing_order() {
        let r: TraceRing<3, 1> = TraceRing::new();
        let mut next_out = 0u64;
        for i in 0..1000u64 {
            assert!(r.push(&[i]));
            if i % 2 == 1 {
                while let Some([v]) = r.pop() {
                    assert_eq!(v, next_out);
                    next_out += 1;
                }
            }
        }
        assert_eq!((next_out, r.lost()), (1000, 0));
    }

    #[test]
    fn a_slice_ring_counts_what_it_refuses_and_peeks_without_taking() {
        let slots: Vec<[AtomicU64; 2]> = (0..3)
            .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
            .collect();
        let r = SliceRing::new(&slots);
        for i in 0..5u64 {
            assert_eq!(r.push(&[i, i + 10]), i < 3, "record {i}");
        }
        assert_eq!((r.len(), r.lost(), r.capacity()), (3, 2, 3));
        assert_eq!(r.peek(), Some([0, 10]));
        let got: Vec<_> = core::iter::from_fn(|| r.pop()).collect();
        assert_eq!(got, [[0, 10], [1, 11], [2, 12]]);
        assert!(r.is_empty() && r.peek().is_none());
        assert!(r.push(&[9, 19]));
        assert_eq!(r.pop(), Some([9, 19]));
    }

    #[test]
    fn push_n_stores_all_or_none() {
        let r: TraceRing<5, 1> = TraceRing::new();
        assert!(r.push(&[100]));
        assert!(r.push_n(3, |i| [i as u64]));
        // Only one slot is free: a pair is refused whole and counted as two.
        assert!(!r.push_n(2, |i| [10 + i as u64]));
        assert_eq!((r.len(), r.lost()), (4, 2));
        assert_eq!(r.pop(), Some([100]));
        // Two free now, across the wrap-around.
        assert!(r.push_n(2, |i| [20 + i as u64]));
        let got: Vec<_> = core::iter::from_fn(|| r.pop()).collect();
        assert_eq!(got, [[0], [1], [2], [20], [21]]);
        assert!(r.push_n(0, |_| [0]));
        assert!(!r.push_n(6, |_| [0]), "more than the capacity");
        assert_eq!(r.lost(), 8);
    }

    #[test]
    fn a_zero_capacity_ring_refuses_everything() {
        let r: TraceRing<0, 1> = TraceRing::new();
        assert!(!r.push(&[1]));
        assert_eq!((r.pop(), r.lost()), (None, 1));
    }

    /// A producer and a consumer on two threads: every record arrives whole (its words
    /// agree), in order, and received + lost = pushed.
    #[test]
    fn concurrent_producer_and_consumer_see_whole_records_in_order() {
        const PUSHED: u64 = 200_000;
        let r: Arc<TraceRing<64, 4>> = Arc::new(TraceRing::new());
        let prod = {
            let r = Arc::clone(&r);
            std::thread::spawn(move || {
                for i in 0..PUSHED {
                    r.push(&[i, !i, i.wrapping_mul(0x9e37_79b9_7f4a_7c15), i ^ 0x5555]);
                }
            })
        };
        let mut received = 0u64;
        let mut last: Option<u64> = None;
        loop {
            let done = prod.is_finished();
            while let Some([a, b, c, d]) = r.pop() {
                assert_eq!(
                    (b, c, d),
                    (!a, a.wrapping_mul(0x9e37_79b9_7f4a_7c15), a ^ 0x5555)
                );
                assert!(last.is_none_or(|l| a > l), "{a} after {last:?}");
                last = Some(a);
                received += 1;
            }
            if done {
                break;
            }
            std::thread::yield_now();
        }
        prod.join().unwrap();
        assert_eq!(received + r.lost(), PUSHED);
        assert!(received > 0);
    }
}
