//! An arena-backed, augmented AVL tree: the run queue's timeline and its task index.
//!
//! Re-derives the role of Linux's augmented red-black tree (`lib/rbtree.c`,
//! `include/linux/rbtree_augmented.h`, used by `fair.c` through
//! `rb_add_augmented_cached()` with `min_vruntime_cb`). Deliberate differences:
//! - AVL instead of red-black balancing: both are O(log n) worst case; AVL needs no
//!   colour fix-up cases and recomputes the augmented value on the same path it
//!   rebalances, which keeps the code short and obviously correct.
//! - Nodes live in an arena addressed by `u32` indices (no pointers, no `unsafe`),
//!   allocated once with a fixed capacity ([`AugTree::with_capacity`]); freed slots form
//!   an intrusive free list and a full tree refuses an insert ([`InsertError::Full`])
//!   instead of growing, so inserts and removals never allocate (callable with a run
//!   queue lock held in interrupt context). A node keeps its slot while it is in the
//!   tree ([`AugTree::slot_of`]), so callers may thread their own intrusive lists
//!   through the values (the run queue's `cfs_tasks`).
//! - The augmented value is generic ([`Augment`]): the fair class keeps the subtree
//!   minimum vruntime (Linux's `se->min_vruntime`), the task index keeps nothing.
//! - No leftmost cache: `first()` walks the left spine, O(log n).

use alloc::vec::Vec;
use core::cmp::Ordering;

/// "No node" (Linux's `NULL` child).
const NIL: u32 = u32::MAX;

/// How a subtree's summary is derived from a node and its children's summaries
/// (Linux's `RB_DECLARE_CALLBACKS` compute function).
pub trait Augment<K, V> {
    /// The per-subtree value.
    type Summary: Copy + PartialEq + core::fmt::Debug;
    /// The summary of a subtree rooted at a node with `key`/`value` and the given
    /// children summaries.
    fn summarize(
        key: &K,
        value: &V,
        left: Option<&Self::Summary>,
        right: Option<&Self::Summary>,
    ) -> Self::Summary;
}

/// No augmentation (a plain ordered map).
#[derive(Debug)]
pub struct NoAugment;

impl<K, V> Augment<K, V> for NoAugment {
    type Summary = ();
    fn summarize(_: &K, _: &V, _: Option<&()>, _: Option<&()>) {}
}

/// An opaque handle on a node, valid until the next mutation of the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeRef(u32);

#[derive(Debug)]
struct Node<K, V, S> {
    key: K,
    value: V,
    summary: S,
    left: u32,
    right: u32,
    height: u8,
}

#[derive(Debug)]
enum SlotState<K, V, S> {
    Used(Node<K, V, S>),
    Free { next: u32 },
}

/// An ordered map from `K` to `V` with a per-subtree summary `A::Summary`.
#[derive(Debug)]
pub struct AugTree<K, V, A: Augment<K, V>> {
    /// Never longer than `capacity` (its buffer is reserved at construction).
    slots: Vec<SlotState<K, V, A::Summary>>,
    capacity: usize,
    root: u32,
    free: u32,
    len: usize,
}

/// Why [`AugTree::insert`] refused; the value is handed back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InsertError<V> {
    /// The key is already present.
    Duplicate(V),
    /// The tree holds [`AugTree::capacity`] entries.
    Full(V),
}

impl<V> InsertError<V> {
    /// The refused value.
    pub fn into_value(self) -> V {
        match self {
            InsertError::Duplicate(v) | InsertError::Full(v) => v,
        }
    }
}

/// A node's arena index: stable from its insertion to its removal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Slot(u32);

impl Slot {
    /// "No slot", for the ends of intrusive lists.
    pub const NONE: Slot = Slot(NIL);

    /// Whether this is [`Slot::NONE`].
    pub const fn is_none(self) -> bool {
        self.0 == NIL
    }

    /// Slot number `n`, for tests of structures that hold slots.
    #[cfg(test)]
    pub(crate) const fn from_raw(n: u32) -> Slot {
        Slot(n)
    }
}

/// A violated tree invariant, found by [`AugTree::check`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TreeError {
    /// In-order keys are not strictly increasing.
    Order,
    /// A node's stored height is wrong or its children differ in height by more than 1.
    Balance,
    /// A node's stored summary differs from the one recomputed from its subtree.
    Summary,
    /// The number of reachable nodes differs from `len()`.
    Count,
}

impl<K: Ord, V, A: Augment<K, V>> AugTree<K, V, A> {
    /// An empty tree holding at most `n` entries (at most `u32::MAX - 1`), its arena
    /// allocated now, once.
    pub fn with_capacity(n: usize) -> Self {
        let n = n.min(NIL as usize - 1);
        AugTree {
            slots: Vec::with_capacity(n),
            capacity: n,
            root: NIL,
            free: NIL,
            len: 0,
        }
    }

    /// The most entries the tree can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the tree is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Insert `key → value` and return its slot. If `key` is already present, or the
    /// tree is full, nothing changes and the value is handed back.
    pub fn insert(&mut self, key: K, value: V) -> Result<Slot, InsertError<V>> {
        if self.find(&key).is_some() {
            return Err(InsertError::Duplicate(value));
        }
        if self.len >= self.capacity {
            return Err(InsertError::Full(value));
        }
        let idx = self.alloc(key, value);
        self.root = self.insert_at(self.root, idx);
        self.len += 1;
        Ok(Slot(idx))
    }

    /// The slot of `key`'s node, O(log n).
    pub fn slot_of(&self, key: &K) -> Option<Slot> {
        self.find(key).map(Slot)
    }

    /// The value in `slot`, `None` for a free or out-of-range slot.
    pub fn at(&self, slot: Slot) -> Option<&V> {
        match self.slots.get(slot.0 as usize) {
            Some(SlotState::Used(n)) => Some(&n.value),
            _ => None,
        }
    }

    /// The value in `slot`, mutably (see [`AugTree::get_mut`] for what must not change).
    pub fn at_mut(&mut self, slot: Slot) -> Option<&mut V> {
        match self.slots.get_mut(slot.0 as usize) {
            Some(SlotState::Used(n)) => Some(&mut n.value),
            _ => None,
        }
    }

    /// Remove `key`, returning its value.
    pub fn remove(&mut self, key: &K) -> Option<V> {
        let idx = self.find(key)?;
        self.root = self.remove_at(self.root, key);
        self.len -= 1;
        Some(self.release(idx))
    }

    /// Remove `key`, first handing its value to `f` where it lies, and return what `f`
    /// returns. For a large value [`remove`](Self::remove) moves twice (the slot out of
    /// the arena, then the value out of the slot); `f` can copy it once, to where it goes.
    pub fn remove_with<R>(&mut self, key: &K, f: impl FnOnce(&V) -> R) -> Option<R> {
        let idx = self.find(key)?;
        // The AVL removal relinks nodes and never moves a value, so `idx` still holds it.
        let r = f(&self.node(idx).value);
        self.root = self.remove_at(self.root, key);
        self.len -= 1;
        self.slots[idx as usize] = SlotState::Free { next: self.free };
        self.free = idx;
        Some(r)
    }

    /// The value stored under `key`.
    pub fn get(&self, key: &K) -> Option<&V> {
        self.find(key).map(|i| &self.node(i).value)
    }

    /// The value stored under `key`, mutably. The caller must not change anything
    /// the summary is computed from (the fair class never calls this on the
    /// timeline; Linux likewise never edits a queued entity's key in place).
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let i = self.find(key)?;
        Some(&mut self.node_mut(i).value)
    }

    /// The smallest entry (Linux's `rb_first_cached`), O(log n).
    pub fn first(&self) -> Option<(&K, &V)> {
        let mut i = self.root;
        if i == NIL {
            return None;
        }
        while self.node(i).left != NIL {
            i = self.node(i).left;
        }
        let n = self.node(i);
        Some((&n.key, &n.value))
    }

    /// The root node, for searches guided by summaries (`pick_eevdf`).
    pub fn root(&self) -> Option<NodeRef> {
        opt(self.root)
    }

    /// Left child of `n`.
    pub fn left(&self, n: NodeRef) -> Option<NodeRef> {
        opt(self.node(n.0).left)
    }

    /// Right child of `n`.
    pub fn right(&self, n: NodeRef) -> Option<NodeRef> {
        opt(self.node(n.0).right)
    }

    /// Key of `n`.
    pub fn key(&self, n: NodeRef) -> &K {
        &self.node(n.0).key
    }

    /// Value of `n`.
    pub fn value(&self, n: NodeRef) -> &V {
        &self.node(n.0).value
    }

    /// Summary of the subtree rooted at `n`.
    pub fn summary(&self, n: NodeRef) -> &A::Summary {
        &self.node(n.0).summary
    }

    /// In-order iteration.
    pub fn iter(&self) -> Iter<'_, K, V, A> {
        let mut it = Iter {
            tree: self,
            stack: [NIL; MAX_HEIGHT],
            depth: 0,
        };
        it.push_left(self.root);
        it
    }

    /// Check every invariant: strict key order, AVL balance and heights, summaries
    /// and the entry count. O(n); for tests.
    pub fn check(&self) -> Result<(), TreeError> {
        let mut count = 0;
        self.check_at(self.root, &mut count)?;
        if count != self.len {
            return Err(TreeError::Count);
        }
        let mut prev: Option<&K> = None;
        for (k, _) in self.iter() {
            if let Some(p) = prev {
                if p >= k {
                    return Err(TreeError::Order);
                }
            }
            prev = Some(k);
        }
        Ok(())
    }

    fn check_at(&self, i: u32, count: &mut usize) -> Result<u8, TreeError> {
        if i == NIL {
            return Ok(0);
        }
        *count += 1;
        let n = self.node(i);
        let hl = self.check_at(n.left, count)?;
        let hr = self.check_at(n.right, count)?;
        if hl.abs_diff(hr) > 1 || n.height != 1 + hl.max(hr) {
            return Err(TreeError::Balance);
        }
        if n.summary != self.compute(i) {
            return Err(TreeError::Summary);
        }
        Ok(n.height)
    }

    fn find(&self, key: &K) -> Option<u32> {
        let mut i = self.root;
        while i != NIL {
            let n = self.node(i);
            i = match key.cmp(&n.key) {
                Ordering::Less => n.left,
                Ordering::Greater => n.right,
                Ordering::Equal => return Some(i),
            };
        }
        None
    }

    fn alloc(&mut self, key: K, value: V) -> u32 {
        let summary = A::summarize(&key, &value, None, None);
        let node = Node {
            key,
            value,
            summary,
            left: NIL,
            right: NIL,
            height: 1,
        };
        if self.free != NIL {
            let i = self.free;
            if let SlotState::Free { next } = self.slots[i as usize] {
                self.free = next;
            }
            self.slots[i as usize] = SlotState::Used(node);
            i
        } else {
            // `insert` checked `len < capacity`, and with no free slot every slot is
            // used, so `slots.len() < capacity`: the reserved buffer takes the push.
            debug_assert!(self.slots.len() < self.slots.capacity());
            self.slots.push(SlotState::Used(node));
            (self.slots.len() - 1) as u32
        }
    }

    fn release(&mut self, i: u32) -> V {
        let slot = core::mem::replace(
            &mut self.slots[i as usize],
            SlotState::Free { next: self.free },
        );
        self.free = i;
        match slot {
            SlotState::Used(n) => n.value,
            // `release` is only called on indices `find` returned.
            SlotState::Free { .. } => unreachable!("released a free slot"),
        }
    }

    fn node(&self, i: u32) -> &Node<K, V, A::Summary> {
        match &self.slots[i as usize] {
            SlotState::Used(n) => n,
            SlotState::Free { .. } => unreachable!("tree link to a free slot"),
        }
    }

    fn node_mut(&mut self, i: u32) -> &mut Node<K, V, A::Summary> {
        match &mut self.slots[i as usize] {
            SlotState::Used(n) => n,
            SlotState::Free { .. } => unreachable!("tree link to a free slot"),
        }
    }

    fn height(&self, i: u32) -> u8 {
        if i == NIL {
            0
        } else {
            self.node(i).height
        }
    }

    fn compute(&self, i: u32) -> A::Summary {
        let n = self.node(i);
        let l = (n.left != NIL).then(|| &self.node(n.left).summary);
        let r = (n.right != NIL).then(|| &self.node(n.right).summary);
        A::summarize(&n.key, &n.value, l, r)
    }

    /// Recompute height and summary of `i` from its children; returns the children's
    /// heights (left, right), which [`AugTree::rebalance`] needs next. Each node is looked
    /// up once: on the small trees of a run queue the lookups are most of the cost.
    #[inline]
    fn update(&mut self, i: u32) -> (u8, u8) {
        let (h, s, hl, hr) = {
            let n = self.node(i);
            let l = (n.left != NIL).then(|| self.node(n.left));
            let r = (n.right != NIL).then(|| self.node(n.right));
            let hl = l.map_or(0, |c| c.height);
            let hr = r.map_or(0, |c| c.height);
            let s = A::summarize(
                &n.key,
                &n.value,
                l.map(|c| &c.summary),
                r.map(|c| &c.summary),
            );
            (1 + hl.max(hr), s, hl, hr)
        };
        let n = self.node_mut(i);
        n.height = h;
        n.summary = s;
        (hl, hr)
    }

    fn rotate_right(&mut self, i: u32) -> u32 {
        let l = self.node(i).left;
        self.node_mut(i).left = self.node(l).right;
        self.node_mut(l).right = i;
        self.update(i);
        self.update(l);
        l
    }

    fn rotate_left(&mut self, i: u32) -> u32 {
        let r = self.node(i).right;
        self.node_mut(i).right = self.node(r).left;
        self.node_mut(r).left = i;
        self.update(i);
        self.update(r);
        r
    }

    /// Restore the AVL property at `i` (children already balanced) and return the
    /// new subtree root.
    fn rebalance(&mut self, i: u32) -> u32 {
        let (hl, hr) = self.update(i);
        if hl > hr + 1 {
            let l = self.node(i).left;
            let (ll, lr) = (self.node(l).left, self.node(l).right);
            if self.height(ll) < self.height(lr) {
                let nl = self.rotate_left(l);
                self.node_mut(i).left = nl;
            }
            self.rotate_right(i)
        } else if hr > hl + 1 {
            let r = self.node(i).right;
            let (rl, rr) = (self.node(r).left, self.node(r).right);
            if self.height(rr) < self.height(rl) {
                let nr = self.rotate_right(r);
                self.node_mut(i).right = nr;
            }
            self.rotate_left(i)
        } else {
            i
        }
    }

    fn insert_at(&mut self, at: u32, new: u32) -> u32 {
        if at == NIL {
            return new;
        }
        if self.node(new).key < self.node(at).key {
            let l = self.node(at).left;
            let nl = self.insert_at(l, new);
            self.node_mut(at).left = nl;
        } else {
            let r = self.node(at).right;
            let nr = self.insert_at(r, new);
            self.node_mut(at).right = nr;
        }
        self.rebalance(at)
    }

    /// Remove the node with `key` from the subtree at `at` (it is known to be
    /// there); the node itself is unlinked, not freed.
    fn remove_at(&mut self, at: u32, key: &K) -> u32 {
        match key.cmp(&self.node(at).key) {
            Ordering::Less => {
                let l = self.node(at).left;
                let nl = self.remove_at(l, key);
                self.node_mut(at).left = nl;
                self.rebalance(at)
            }
            Ordering::Greater => {
                let r = self.node(at).right;
                let nr = self.remove_at(r, key);
                self.node_mut(at).right = nr;
                self.rebalance(at)
            }
            Ordering::Equal => {
                let (l, r) = {
                    let n = self.node(at);
                    (n.left, n.right)
                };
                if l == NIL {
                    return r;
                }
                if r == NIL {
                    return l;
                }
                let (nr, succ) = self.unlink_min(r);
                let s = self.node_mut(succ);
                s.left = l;
                s.right = nr;
                self.rebalance(succ)
            }
        }
    }

    /// Unlink the minimum of the subtree at `at`; returns (new subtree root, the
    /// unlinked node).
    fn unlink_min(&mut self, at: u32) -> (u32, u32) {
        let l = self.node(at).left;
        if l == NIL {
            return (self.node(at).right, at);
        }
        let (nl, min) = self.unlink_min(l);
        self.node_mut(at).left = nl;
        (self.rebalance(at), min)
    }
}

/// An AVL tree of height h holds at least fib(h+2)-1 nodes; 2^32 nodes (our index
/// space) need h < 47.
const MAX_HEIGHT: usize = 48;

/// In-order iterator over an [`AugTree`]; uses a fixed stack, never allocates.
#[derive(Debug)]
pub struct Iter<'a, K, V, A: Augment<K, V>> {
    tree: &'a AugTree<K, V, A>,
    stack: [u32; MAX_HEIGHT],
    depth: usize,
}

impl<K: Ord, V, A: Augment<K, V>> Iter<'_, K, V, A> {
    fn push_left(&mut self, mut i: u32) {
        while i != NIL {
            self.stack[self.depth] = i;
            self.depth += 1;
            i = self.tree.node(i).left;
        }
    }
}

impl<'a, K: Ord, V, A: Augment<K, V>> Iterator for Iter<'a, K, V, A> {
    type Item = (&'a K, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        if self.depth == 0 {
            return None;
        }
        self.depth -= 1;
        let i = self.stack[self.depth];
        let tree = self.tree;
        let n = tree.node(i);
        self.push_left(n.right);
        Some((&n.key, &n.value))
    }
}

fn opt(i: u32) -> Option<NodeRef> {
    (i != NIL).then_some(NodeRef(i))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Subtree minimum of the values, the shape the fair class uses.
    struct MinVal;
    impl Augment<u32, u64> for MinVal {
        type Summary = u64;
        fn summarize(_: &u32, v: &u64, l: Option<&u64>, r: Option<&u64>) -> u64 {
            let mut m = *v;
            for c in [l, r].into_iter().flatten() {
                m = m.min(*c);
            }
            m
        }
    }

    #[test]
    fn matches_btreemap_oracle_under_random_ops() {
        let mut t: AugTree<u32, u64, MinVal> = AugTree::with_capacity(512);
        let mut oracle = BTreeMap::new();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for step in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = (x % 512) as u32;
            let val = x >> 40;
            if x & (1 << 20) != 0 {
                match oracle.entry(key) {
                    std::collections::btree_map::Entry::Occupied(_) => {
                        assert_eq!(t.insert(key, val), Err(InsertError::Duplicate(val)));
                    }
                    std::collections::btree_map::Entry::Vacant(e) => {
                        assert!(t.insert(key, val).is_ok());
                        e.insert(val);
                    }
                }
            } else if x & (1 << 21) != 0 {
                assert_eq!(t.remove(&key), oracle.remove(&key));
            } else {
                assert_eq!(t.remove_with(&key, |v| *v), oracle.remove(&key));
            }
            if step % 97 == 0 {
                t.check().unwrap();
                let min = oracle.values().min().copied();
                assert_eq!(t.root().map(|r| *t.summary(r)), min);
                assert_eq!(t.first().map(|(k, _)| *k), oracle.keys().next().copied());
            }
            assert_eq!(t.len(), oracle.len());
        }
        let ours: std::vec::Vec<_> = t.iter().map(|(k, v)| (*k, *v)).collect();
        let theirs: std::vec::Vec<_> = oracle.into_iter().collect();
        assert_eq!(ours, theirs);
    }

    #[test]
    fn height_is_logarithmic_and_slots_are_reused() {
        let mut t: AugTree<u32, u64, MinVal> = AugTree::with_capacity(4096);
        for k in 0..4096 {
            t.insert(k, 0).unwrap();
        }
        // AVL bound: h < 1.45 log2(n + 2).
        let h = t.root().map(|r| t.node(r.0).height).unwrap();
        assert!(h <= 17, "height {h} for 4096 sequential inserts");
        let cap = t.slots.len();
        for k in 0..4096 {
            assert_eq!(t.remove(&k), Some(0));
            t.insert(k + 10_000, 1).unwrap();
        }
        assert_eq!(t.slots.len(), cap, "arena grew although slots were free");
        t.check().unwrap();
    }

    #[test]
    fn a_full_tree_refuses_and_never_reallocates() {
        let mut t: AugTree<u32, u64, MinVal> = AugTree::with_capacity(8);
        let buf = t.slots.as_ptr();
        for k in 0..8 {
            t.insert(k, k as u64).unwrap();
        }
        assert_eq!(t.insert(100, 7), Err(InsertError::Full(7)));
        assert_eq!(t.insert(3, 7), Err(InsertError::Duplicate(7)));
        assert_eq!(t.remove(&2), Some(2));
        t.insert(100, 7).unwrap();
        assert_eq!(t.slots.as_ptr(), buf, "the arena moved: it was reallocated");
        t.check().unwrap();
    }

    #[test]
    fn slots_are_stable_while_the_entry_lives() {
        let mut t: AugTree<u32, u64, MinVal> = AugTree::with_capacity(256);
        let mut slots = std::vec::Vec::new();
        for k in 0..200u32 {
            let s = t.insert(k * 7 % 200, k as u64).unwrap();
            slots.push((k * 7 % 200, s));
        }
        // Rotations of removals and inserts elsewhere must not move a node.
        for k in (0..200u32).step_by(3) {
            t.remove(&k);
        }
        for k in 300..350u32 {
            t.insert(k, 0).unwrap();
        }
        for (k, s) in slots {
            if k % 3 == 0 {
                continue;
            }
            assert_eq!(t.slot_of(&k), Some(s));
            assert_eq!(t.at(s), t.get(&k));
        }
    }
}
