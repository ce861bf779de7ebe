//! The kernel heap: `linked_list_allocator` behind an [`IrqSpinLock`], as `#[global_allocator]`.
//!
//! Linux has no single equivalent (slab on top of the page allocator, `mm/slub.c`); asym needs
//! only a simple first-fit heap for now. Deliberate difference: one global lock, IRQs masked
//! while it is held, so allocation is safe from interrupt context and from every CPU.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::{self, NonNull};

use linked_list_allocator::Heap;

use crate::sync::{IrqSpinLock, LockRank};

/// Most RAM the heap takes, whatever the DT says.
pub const HEAP_MAX: usize = 128 * 1024 * 1024;

struct KernelHeap(IrqSpinLock<Heap>);

/// Heap usage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeapStats {
    pub start: usize,
    pub size: usize,
    pub used: usize,
    pub free: usize,
}

#[global_allocator]
static HEAP: KernelHeap = KernelHeap(IrqSpinLock::with_rank(Heap::empty(), LockRank::HEAP));

// SAFETY: `Heap` returns blocks that satisfy the layout, are disjoint while allocated, and lie
// inside the region given to `init`; the lock serialises all access.
unsafe impl GlobalAlloc for KernelHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // No allocation with a run-queue, thread or cpufreq driver lock held (they are taken
        // on the scheduling and interrupt paths, which must not allocate). A cpufreq policy's
        // lock may be held: `cpufreq::policy` copies one (thread context only).
        if crate::sync::holds_rank(LockRank::THREAD, LockRank::CPUFREQ_POLICY)
            || crate::sync::holds_rank(LockRank::CPUFREQ_DRIVER, LockRank::BALANCE)
            || crate::sync::holds_rank(LockRank::RQ, LockRank::LEAF)
        {
            panic!(
                "heap: allocation of {} bytes with a scheduler lock held (ranks held {:?})",
                layout.size(),
                crate::sync::held_ranks()
            );
        }
        self.0
            .lock()
            .allocate_first_fit(layout)
            .map_or(ptr::null_mut(), |p| p.as_ptr())
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(p) = NonNull::new(ptr) {
            // SAFETY: the GlobalAlloc contract: `ptr` came from `alloc` with this `layout`.
            unsafe { self.0.lock().deallocate(p, layout) };
        }
    }
}

/// Gives the heap `[start, start + size)`.
///
/// # Safety
/// The range must be RAM, mapped, unused by anything else for the kernel's lifetime, and this
/// must be called once.
pub unsafe fn init(start: usize, size: usize) {
    // SAFETY: guaranteed by the caller.
    unsafe { HEAP.0.lock().init(start as *mut u8, size) };
}

/// Current usage.
pub fn stats() -> HeapStats {
    let h = HEAP.0.lock();
    HeapStats {
        start: h.bottom() as usize,
        size: h.size(),
        used: h.used(),
        free: h.free(),
    }
}
