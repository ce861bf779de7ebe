//! A per-CPU queue of one-shot timers: a binary min-heap on expiry with a key → position index,
//! so a timer is armed, re-armed or cancelled in O(log n) and the next expiry is O(1).
//!
//! Linux keeps hrtimers in a per-CPU red-black tree per clock base (`kernel/time/hrtimer.c`,
//! `timerqueue_add`/`timerqueue_del`/`timerqueue_getnext`). Deliberate differences: a fixed
//! capacity with one slot per possible key (each thread has one sleep timer, the tick is one
//! more key), so arming never allocates; ties expire in key order, so runs are deterministic.

/// `pos` value of a key not in the queue.
const ABSENT: u16 = 0;

/// Up to `N` timers with keys `0..N`, each armed at most once.
#[derive(Debug)]
pub struct TimerQueue<const N: usize> {
    /// `(expires, key)` in heap order.
    heap: [(u64, u16); N],
    len: usize,
    /// Key → heap index + 1 ([`ABSENT`] when not armed).
    pos: [u16; N],
}

impl<const N: usize> TimerQueue<N> {
    const FITS: () = assert!(N < u16::MAX as usize);

    /// An empty queue.
    pub const fn new() -> Self {
        let () = Self::FITS;
        TimerQueue {
            heap: [(0, 0); N],
            len: 0,
            pos: [ABSENT; N],
        }
    }

    /// Timers armed.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The expiry of `key`'s timer, if armed.
    pub fn expires(&self, key: usize) -> Option<u64> {
        match *self.pos.get(key)? {
            ABSENT => None,
            p => Some(self.heap[usize::from(p) - 1].0),
        }
    }

    /// The earliest timer `(expires, key)`.
    pub fn peek(&self) -> Option<(u64, usize)> {
        (self.len > 0).then(|| (self.heap[0].0, usize::from(self.heap[0].1)))
    }

    /// The earliest expiry of a timer other than `key`'s: the root if it is not `key`, else
    /// the earlier of the root's children (the heap's second-earliest is one of them).
    pub fn earliest_other(&self, key: usize) -> Option<u64> {
        match self.peek() {
            None => None,
            Some((e, k)) if k != key => Some(e),
            Some(_) => self.heap[1..self.len.min(3)].iter().map(|&(e, _)| e).min(),
        }
    }

    /// Arms `key` at `expires` (re-arms it if armed). Keys `>= N` are refused.
    pub fn insert(&mut self, key: usize, expires: u64) -> bool {
        if key >= N {
            return false;
        }
        if self.pos[key] != ABSENT {
            self.remove(key);
        }
        let i = self.len;
        self.len += 1;
        self.heap[i] = (expires, key as u16);
        self.pos[key] = i as u16 + 1;
        self.sift_up(i);
        true
    }

    /// Cancels `key`'s timer; returns its expiry if it was armed.
    pub fn remove(&mut self, key: usize) -> Option<u64> {
        let p = usize::from(*self.pos.get(key)?);
        if p == usize::from(ABSENT) {
            return None;
        }
        let i = p - 1;
        let expires = self.heap[i].0;
        self.pos[key] = ABSENT;
        self.len -= 1;
        if i != self.len {
            self.heap[i] = self.heap[self.len];
            self.pos[usize::from(self.heap[i].1)] = i as u16 + 1;
            self.sift_down(i);
            self.sift_up(i);
        }
        Some(expires)
    }

    /// Removes and returns the earliest timer if it expires at or before `now`.
    pub fn pop_expired(&mut self, now: u64) -> Option<(u64, usize)> {
        let (expires, key) = self.peek()?;
        if expires > now {
            return None;
        }
        self.remove(key);
        Some((expires, key))
    }

    fn less(&self, a: usize, b: usize) -> bool {
        self.heap[a] < self.heap[b]
    }

    fn swap(&mut self, a: usize, b: usize) {
        self.heap.swap(a, b);
        self.pos[usize::from(self.heap[a].1)] = a as u16 + 1;
        self.pos[usize::from(self.heap[b].1)] = b as u16 + 1;
    }

    fn sift_up(&mut self, mut i: usize) {
        while i > 0 {
            let parent = (i - 1) / 2;
            if !self.less(i, parent) {
                break;
            }
            self.swap(i, parent);
            i = parent;
        }
    }

    fn sift_down(&mut self, mut i: usize) {
        loop {
            let (l, r) = (2 * i + 1, 2 * i + 2);
            let mut m = i;
            if l < self.len && self.less(l, m) {
                m = l;
            }
            if r < self.len && self.less(r, m) {
                m = r;
            }
            if m == i {
                break;
            }
            self.swap(i, m);
            i = m;
        }
    }
}

impl<const N: usize> Default for TimerQueue<N> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// The oracle: a map key → expiry; the earliest is the minimum over (expires, key).
    fn earliest(m: &BTreeMap<usize, u64>) -> Option<(u64, usize)> {
        m.iter().map(|(&k, &e)| (e, k)).min()
    }

    #[test]
    fn random_operations_match_a_sorted_oracle() {
        const N: usize = 64;
        let mut q = TimerQueue::<N>::new();
        let mut m = BTreeMap::new();
        let mut x = 0x1234_5678_9abc_def0u64;
        let mut now = 0u64;
        for step in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = (x % N as u64) as usize;
            match (x >> 32) % 4 {
                0 | 1 => {
                    let e = now + (x >> 40) % 1000;
                    assert!(q.insert(key, e));
                    m.insert(key, e);
                }
                2 => assert_eq!(q.remove(key), m.remove(&key), "step {step}"),
                _ => {
                    now += (x >> 48) % 50;
                    while let Some((e, k)) = q.pop_expired(now) {
                        let want = earliest(&m).unwrap();
                        assert_eq!((e, k), want, "step {step}");
                        m.remove(&k);
                    }
                    assert!(earliest(&m).is_none_or(|(e, _)| e > now));
                }
            }
            assert_eq!(q.len(), m.len());
            assert_eq!(q.peek(), earliest(&m), "step {step}");
            assert_eq!(q.expires(key), m.get(&key).copied());
            let other = m.iter().filter(|&(&k, _)| k != key).map(|(_, &e)| e).min();
            assert_eq!(q.earliest_other(key), other, "step {step}");
        }
    }

    #[test]
    fn rearming_moves_a_timer_and_bad_keys_are_refused() {
        let mut q = TimerQueue::<4>::new();
        assert!(q.insert(1, 100));
        assert!(q.insert(2, 50));
        assert_eq!(q.peek(), Some((50, 2)));
        assert!(q.insert(2, 150));
        assert_eq!(q.peek(), Some((100, 1)));
        assert_eq!(q.len(), 2);
        assert!(!q.insert(4, 1));
        assert_eq!(q.remove(3), None);
        assert_eq!(q.remove(9), None);
        assert_eq!(q.pop_expired(99), None);
        assert_eq!(q.pop_expired(100), Some((100, 1)));
        assert_eq!(q.pop_expired(1000), Some((150, 2)));
        assert!(q.is_empty());
    }

    #[test]
    fn ties_expire_in_key_order() {
        let mut q = TimerQueue::<8>::new();
        for k in [5, 2, 7, 0] {
            q.insert(k, 10);
        }
        let order: Vec<usize> = std::iter::from_fn(|| q.pop_expired(10).map(|(_, k)| k)).collect();
        assert_eq!(order, [0, 2, 5, 7]);
    }
}
