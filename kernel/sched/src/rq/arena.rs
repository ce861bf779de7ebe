//! The run queue's task arena: the queued [`Task`]s by id, with `rq->cfs_tasks` threaded
//! through them as an intrusive doubly linked list.
//!
//! Linux links `p->se.group_node` into `rq->cfs_tasks`; here each arena node carries the
//! `prev`/`next` slots of that list, so adding at the head, unlinking and `list_move` to the
//! head are O(1) once the node is found (O(log n) by id). The arena is allocated once with
//! a fixed capacity; a full arena refuses an insert and hands the task back.

use crate::fair::tree::{AugTree, InsertError, NoAugment, Slot};
use crate::rq::Task;
use crate::types::TaskId;

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
    head: Slot,
    tail: Slot,
}

impl TaskArena {
    /// An empty arena for at most `capacity` tasks, allocated now.
    pub(crate) fn with_capacity(capacity: usize) -> TaskArena {
        TaskArena {
            nodes: AugTree::with_capacity(capacity),
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

    pub(crate) fn get(&self, id: TaskId) -> Option<&Task> {
        self.nodes.get(&id).map(|n| &n.task)
    }

    /// The task, mutably. Its id must not change.
    pub(crate) fn get_mut(&mut self, id: TaskId) -> Option<&mut Task> {
        self.nodes.get_mut(&id).map(|n| &mut n.task)
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
        let slot = self.nodes.slot_of(&id)?;
        self.unlink(slot);
        self.nodes
            .remove_with(&id, move |n| out.insert(n.task.clone()))
    }

    /// `list_move(&p->se.group_node, &rq->cfs_tasks)`. False if `id` is not here.
    pub(crate) fn move_to_head(&mut self, id: TaskId) -> bool {
        let Some(slot) = self.nodes.slot_of(&id) else {
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
