//! The program's heap: `linked_list_allocator` (the kernel's allocator too) behind a
//! [`SpinLock`], over the data pages the kernel mapped for it (`BootInfo::heap`). The
//! workload and the interpreter's state are allocated once at set-up; nothing allocates after.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::NonNull;

use linked_list_allocator::Heap;

use crate::lock::SpinLock;

pub struct UserHeap(SpinLock<Heap>);

#[global_allocator]
static HEAP: UserHeap = UserHeap(SpinLock::new(Heap::empty()));

/// Gives the heap `[start, start + len)`, once, before the first allocation.
///
/// # Safety
/// The range is mapped read/write for this program for its whole life and used for nothing
/// else.
pub unsafe fn init(start: usize, len: usize) {
    // SAFETY: the caller's promise; `init` runs once, before any allocation.
    unsafe { HEAP.0.lock().init(start as *mut u8, len) };
}

// SAFETY: `linked_list_allocator::Heap` hands out disjoint blocks of the requested layout; the
// lock serialises every use of it.
unsafe impl GlobalAlloc for UserHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.0
            .lock()
            .allocate_first_fit(layout)
            .map_or(core::ptr::null_mut(), NonNull::as_ptr)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if let Some(p) = NonNull::new(ptr) {
            // SAFETY: `ptr` came from `alloc` with this `layout` (GlobalAlloc's contract).
            unsafe { self.0.lock().deallocate(p, layout) };
        }
    }
}
