//! The run queue's task arena: the queued [`Task`]s by id, with `rq->cfs_tasks` threaded
//! through them as an intrusive doubly linked list.
//!
//! Linux links `p->se.group_node` into `rq->cfs_tasks`; here each arena node carries the
//! `prev`/`next` slots of that list, so adding at the head, unlinking and `list_move` to the
//! head are O(1) once the node is found. The arena is allocated once with a fixed capacity;
//! a full arena refuses an insert and hands the task back.
//!
//! A node is found by id through [`SlotIndex`], a hash table from id to slot beside the
//! tree (which keeps the id order [`TaskArena::iter`] gives): the run queue looks its tasks
//! up by id many times per operation (`curr` at every enqueue, pick and tick), and each
//! search of the tree was a chain of unpredictable left/right branches — in the simulator's
//! profile, about a fifth of all mispredicted branches.

use alloc::vec;
use alloc::vec::Vec;

use crate::fair::tree::{AugTree, InsertError, NoAugment, Slot};
use crate::rq::Task;
use crate::types::TaskId;

/// Task id → arena slot: open addressing with linear probing in a table of at least twice
/// the arena's capacity (so probes stay short and there is always an empty entry to end
/// one), allocated once; removal shifts the following entries back instead of leaving
/// tombstones, so the table never needs rebuilding.
#[derive(Debug)]
struct SlotIndex {
    /// `(id, slot)`; [`Slot::NONE`] marks an empty entry.
    entries: Vec<(TaskId, Slot)>,
    /// `entries.len() - 1` (a power of two minus one).
    mask: usize,
    /// `32 - log2(entries.len())`: the hash keeps the product's top bits.
    shift: u32,
}

impl SlotIndex {
    fn with_capacity(capacity: usize) -> SlotIndex {
        let len = capacity.saturating_mul(2).next_power_of_two().max(2);
        SlotIndex {
            entries: vec![(TaskId(0), Slot::NONE); len],
            mask: len - 1,
            shift: 32 - len.trailing_zeros(),
        }
    }

    /// Where `id`'s probe starts: Fibonacci hashing (ids are often consecutive pids).
    #[inline]
    fn home(&self, id: TaskId) -> usize {
        (id.0.wrapping_mul(0x9e37_79b9) >> self.shift) as usize & self.mask
    }

    /// The entry holding `id`.
    #[inline]
    fn position(&self, id: TaskId) -> Option<usize> {
        let mut i = self.home(id);
        loop {
            let (k, s) = self.entries[i];
            if s.is_none() {
                return None;
            }
            if k == id {
                return Some(i);
            }
            i = (i + 1) & self.mask;
        }
    }

    #[inline]
    fn get(&self, id: TaskId) -> Option<Slot> {
        self.position(id).map(|i| self.entries[i].1)
    }

    /// Add `id` (not present; the arena holds fewer ids than the table has entries).
    fn insert(&mut self, id: TaskId, slot: Slot) {
        let mut i = self.home(id);
        while !self.entries[i].1.is_none() {
            i = (i + 1) & self.mask;
        }
        self.entries[i] = (id, slot);
    }

    /// Remove `id` if present: each later entry of the probe run moves back into the hole
    /// when the hole lies between its home and where it is.
    fn remove(&mut self, id: TaskId) {
        let Some(mut hole) = self.position(id) else {
            return;
        };
        let mut j = hole;
        loop {
            j = (j + 1) & self.mask;
            let (k, s) = self.entries[j];
            if s.is_none() {
                break;
            }
            let home = self.home(k);
            if (j.wrapping_sub(home) & self.mask) >= (j.wrapping_sub(hole) & self.mask) {
                self.entries[hole] = (k, s);
                hole = j;
            }
        }
        self.entries[hole] = (TaskId(0), Slot::NONE);
    }

    /// Number of ids held.
    fn len(&self) -> usize {
        self.entries.iter().filter(|e| !e.1.is_none()).count()
    }
}

/// A queued task and its `cfs_tasks` links.
#[derive(Debug)]
struct Node {
    task: Task,
    /// Towards the head (more recently run).
    prev: Slot,
    /// Towards the tail (less recently run).
    next: Slot,
}

/// The queued tasks (running one included) and the `cfs_tasks` order.
#[derive(Debug)]
pub(crate) struct TaskArena {
    nodes: AugTree<TaskId, Node, NoAugment>,
    /// Each node's slot by id.
    index: SlotIndex,
    head: Slot,
    tail: Slot,
}

impl TaskArena {
    /// An empty arena for at most `capacity` tasks, allocated now.
    pub(crate) fn with_capacity(capacity: usize) -> TaskArena {
        TaskArena {
            nodes: AugTree::with_capacity(capacity),
            index: SlotIndex::with_capacity(capacity),
            head: Slot::NONE,
            tail: Slot::NONE,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    pub(crate) fn capacity(&self) -> usize {
        self.nodes.capacity()
    }

    #[inline]
    pub(crate) fn get(&self, id: TaskId) -> Option<&Task> {
        let slot = self.index.get(id)?;
        self.nodes.at(slot).map(|n| &n.task)
    }

    /// The task, mutably. Its id must not change.
    #[inline]
    pub(crate) fn get_mut(&mut self, id: TaskId) -> Option<&mut Task> {
        let slot = self.index.get(id)?;
        self.nodes.at_mut(slot).map(|n| &mut n.task)
    }

    /// The tasks in id order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Task> + '_ {
        self.nodes.iter().map(|(_, n)| &n.task)
    }

    /// Add `task` and link it at the head of `cfs_tasks` (`list_add`).
    #[allow(clippy::result_large_err)] // the refused task is handed back, not lost
    pub(crate) fn insert_head(&mut self, task: Task) -> Result<(), InsertError<Task>> {
        let id = task.id;
        let node = Node {
            task,
            prev: Slot::NONE,
            next: Slot::NONE,
        };
        let slot = self.nodes.insert(id, node).map_err(|e| match e {
            InsertError::Duplicate(n) => InsertError::Duplicate(n.task),
            InsertError::Full(n) => InsertError::Full(n.task),
        })?;
        self.index.insert(id, slot);
        self.link_head(slot);
        Ok(())
    }

    /// [`TaskArena::insert_head`] of the task in `slot`; false (the task left in `slot`)
    /// where that refuses, or if `slot` is empty.
    pub(crate) fn insert_head_from(&mut self, slot: &mut Option<Task>) -> bool {
        let Some(task) = slot.take() else {
            return false;
        };
        match self.insert_head(task) {
            Ok(()) => true,
            Err(e) => {
                *slot = Some(e.into_value());
                false
            }
        }
    }

    /// Unlink and remove `id`, copying it into `out` (where the caller keeps it next): the
    /// task there, or `None` if `id` is not here. One copy, where a removal that returned
    /// the task moved it three times on its way out (tree slot, node, return value).
    pub(crate) fn remove_into<'a>(
        &mut self,
        id: TaskId,
        out: &'a mut Option<Task>,
    ) -> Option<&'a mut Task> {
        let slot = self.index.get(id)?;
        self.unlink(slot);
        self.index.remove(id);
        self.nodes
            .remove_with(&id, move |n| out.insert(n.task.clone()))
    }

    /// `list_move(&p->se.group_node, &rq->cfs_tasks)`. False if `id` is not here.
    pub(crate) fn move_to_head(&mut self, id: TaskId) -> bool {
        let Some(slot) = self.index.get(id) else {
            return false;
        };
        if self.head != slot {
            self.unlink(slot);
            self.link_head(slot);
        }
        true
    }

    /// `cfs_tasks` from head to tail (`.rev()`: from the tail).
    pub(crate) fn list(&self) -> ListIter<'_> {
        ListIter {
            arena: self,
            front: self.head,
            back: self.tail,
            left: self.len(),
        }
    }

    /// The list holds every task exactly once, with consistent links.
    pub(crate) fn check(&self) -> Result<(), &'static str> {
        let mut n = 0usize;
        let mut prev = Slot::NONE;
        let mut s = self.head;
        while !s.is_none() {
            let node = self.nodes.at(s).ok_or("cfs_tasks links a free slot")?;
            if node.prev != prev {
                return Err("cfs_tasks prev link broken");
            }
            n += 1;
            if n > self.len() {
                return Err("cfs_tasks has a cycle");
            }
            prev = s;
            s = node.next;
        }
        if prev != self.tail {
            return Err("cfs_tasks tail is not the last node");
        }
        if n != self.len() {
            return Err("cfs_tasks list differs from the queued tasks");
        }
        if self.index.len() != self.len() {
            return Err("task index holds a different number of tasks");
        }
        for t in self.iter() {
            if self.index.get(t.id) != self.nodes.slot_of(&t.id) {
                return Err("task index gives the wrong slot");
            }
        }
        Ok(())
    }

    fn link_head(&mut self, slot: Slot) {
        let old = self.head;
        if let Some(n) = self.nodes.at_mut(slot) {
            n.prev = Slot::NONE;
            n.next = old;
        }
        match self.nodes.at_mut(old) {
            Some(o) => o.prev = slot,
            None => self.tail = slot,
        }
        self.head = slot;
    }

    fn unlink(&mut self, slot: Slot) {
        let Some(n) = self.nodes.at(slot) else {
            return;
        };
        let (prev, next) = (n.prev, n.next);
        match self.nodes.at_mut(prev) {
            Some(p) => p.next = next,
            None => self.head = next,
        }
        match self.nodes.at_mut(next) {
            Some(q) => q.prev = prev,
            None => self.tail = prev,
        }
        if let Some(n) = self.nodes.at_mut(slot) {
            n.prev = Slot::NONE;
            n.next = Slot::NONE;
        }
    }
}

/// Iterator over `cfs_tasks`, both ends.
#[derive(Debug)]
pub struct ListIter<'a> {
    arena: &'a TaskArena,
    front: Slot,
    back: Slot,
    left: usize,
}

impl Iterator for ListIter<'_> {
    type Item = TaskId;
    fn next(&mut self) -> Option<TaskId> {
        if self.left == 0 {
            return None;
        }
        let n = self.arena.nodes.at(self.front)?;
        self.left -= 1;
        self.front = n.next;
        Some(n.task.id)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl DoubleEndedIterator for ListIter<'_> {
    fn next_back(&mut self) -> Option<TaskId> {
        if self.left == 0 {
            return None;
        }
        let n = self.arena.nodes.at(self.back)?;
        self.left -= 1;
        self.back = n.prev;
        Some(n.task.id)
    }
}

impl ExactSizeIterator for ListIter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;

    /// The index agrees with a plain list of `(id, slot)` through random inserts and removals
    /// of ids that collide often (a small table, ids clustered and spread), and is empty at
    /// the end.
    #[test]
    fn slot_index_matches_a_model() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for capacity in [1usize, 3, 8, 50] {
            let mut index = SlotIndex::with_capacity(capacity);
            let mut model: Vec<(TaskId, Slot)> = Vec::new();
            let mut next_slot = 0u32;
            for round in 0..4000 {
                let id = if round % 2 == 0 {
                    TaskId(1000 + (rnd() % 64) as u32)
                } else {
                    TaskId(rnd() as u32)
                };
                let at = model.iter().position(|e| e.0 == id);
                match at {
                    Some(i) if rnd() % 3 != 0 => {
                        index.remove(id);
                        model.swap_remove(i);
                    }
                    None if model.len() < capacity => {
                        let slot = Slot::from_raw(next_slot);
                        next_slot += 1;
                        index.insert(id, slot);
                        model.push((id, slot));
                    }
                    _ => {}
                }
                assert_eq!(index.len(), model.len());
                for &(id, slot) in &model {
                    assert_eq!(index.get(id), Some(slot));
                }
                assert_eq!(index.get(TaskId(7)), None);
            }
            for (id, _) in model.drain(..) {
                index.remove(id);
            }
            assert_eq!(index.len(), 0);
        }
    }
}
