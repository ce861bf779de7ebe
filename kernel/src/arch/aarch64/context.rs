//! Thread contexts, kernel stacks and the context switch.
//!
//! Re-derives Linux's `arch/arm64/kernel/entry.S` `cpu_switch_to` / `ret_from_fork`,
//! `arch/arm64/kernel/process.c` `copy_thread` / `__switch_to`, and `kernel/fork.c`'s
//! `alloc_thread_stack_node` with `VMAP_STACK`:
//! - A context switch saves and restores only the callee-saved registers x19–x28, the frame
//!   pointer and the link register, SP, and the thread's `TPIDR_EL0`/`TPIDRRO_EL0` (EL0's TLS
//!   registers; the kernel itself never uses them). The caller-saved registers are dead across
//!   the call by the AAPCS64, as in Linux.
//! - FP/SIMD policy: `CPACR_EL1` traps FP/SIMD at EL1 and EL0 (entry code), the kernel is built
//!   soft-float (`aarch64-unknown-none-softfloat`), and no FP/SIMD register is saved. Any FP
//!   instruction faults loudly. (Linux saves them lazily per task; EL0 code here must be
//!   soft-float until that is added.)
//! - Kernel stacks are [`THREAD_SIZE`] bytes of heap pages mapped into the thread-stack window
//!   ([`super::mmu::STACK_WINDOW_VA`]) at `slot × 2 × THREAD_SIZE + THREAD_SIZE`: the stack
//!   is the upper half of a `2 × THREAD_SIZE`-aligned slot whose lower half is never mapped.
//!   So every valid stack address has bit [`THREAD_SHIFT`] set and everything in the guard
//!   below has it clear, which is what the exception vectors test (Linux `kernel_ventry`'s
//!   overflow check relies on the same alignment of its vmap stacks).
//!
//! Safety by state, not by trust: a [`ThreadContext`]'s state word (Linux `p->on_cpu`) says
//! whether its registers are saved, live on a CPU (and which), or the thread has exited. A
//! switch checks that the outgoing context is the one running here, on its own stack, and
//! claims the incoming one with a compare-and-swap, so no saved context is ever resumed twice
//! and no stack is unmapped while a CPU runs on it.

use alloc::boxed::Box;
use core::arch::global_asm;
use core::cell::UnsafeCell;
use core::fmt;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use super::mmu::{self, STACK_WINDOW_VA};

/// log2 of [`THREAD_SIZE`].
pub const THREAD_SHIFT: u32 = 14;
/// Bytes of every thread's kernel stack (Linux arm64's `THREAD_SIZE`, 16 KiB).
pub const THREAD_SIZE: usize = 1 << THREAD_SHIFT;
/// Bytes of address space per stack in the window: the stack and, below it, as much unmapped
/// guard space.
pub const STACK_SLOT_SIZE: usize = 2 * THREAD_SIZE;

/// What fresh stack memory is filled with, to measure how deep a thread went.
const PAINT: u64 = 0x5354_4143_4b50_4e54;

/// The registers a switch saves (offsets used by the asm below).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct CpuContext {
    /// x19–x28.
    callee: [u64; 10],
    fp: u64,
    lr: u64,
    sp: u64,
    tpidr_el0: u64,
    tpidrro_el0: u64,
}

const NONE: u32 = 0;
const SETUP: u32 = 1;
const SAVED: u32 = 2;
const EXITED: u32 = 3;
const TEARDOWN: u32 = 4;
/// `RUNNING + cpu`: the registers are live on that CPU.
const RUNNING: u32 = 0x100;

/// A thread's saved registers and its kernel stack.
pub struct ThreadContext {
    regs: UnsafeCell<CpuContext>,
    /// [`NONE`], [`SETUP`], [`SAVED`], [`EXITED`], [`TEARDOWN`] or `RUNNING + cpu`.
    state: AtomicU32,
    /// Owned while the state is not NONE; written only in the exclusive SETUP and TEARDOWN
    /// states.
    stack: UnsafeCell<Option<KernelStack>>,
    /// The stack's usable range, for the switch's "running on its own stack" check.
    stack_base: AtomicUsize,
    stack_top: AtomicUsize,
}

// SAFETY: `regs` is written by the CPU that owns the context (state RUNNING on it, or the
// exclusive SETUP state) and read by the one that claimed it with SAVED → RUNNING (acquire,
// pairing with the release store of SAVED); `stack` only in SETUP/TEARDOWN, which one caller
// at a time enters by compare-and-swap.
unsafe impl Sync for ThreadContext {}

/// Why a context could not be prepared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContextError {
    /// The context still holds a thread (state word shown).
    InUse(u32),
}

impl ThreadContext {
    /// An empty context (no thread).
    pub const fn new() -> Self {
        ThreadContext {
            regs: UnsafeCell::new(CpuContext {
                callee: [0; 10],
                fp: 0,
                lr: 0,
                sp: 0,
                tpidr_el0: 0,
                tpidrro_el0: 0,
            }),
            state: AtomicU32::new(NONE),
            stack: UnsafeCell::new(None),
            stack_base: AtomicUsize::new(0),
            stack_top: AtomicUsize::new(0),
        }
    }

    /// Gives an empty context `stack` and registers that start `entry(arg)` through
    /// `ret_from_fork` when it is first switched to; it is then resumable. Hands the stack back
    /// if the context is in use.
    pub fn prepare(
        &self,
        stack: KernelStack,
        entry: extern "C" fn(usize) -> !,
        arg: usize,
    ) -> Result<(), (ContextError, KernelStack)> {
        if let Err(s) =
            self.state
                .compare_exchange(NONE, SETUP, Ordering::Acquire, Ordering::Relaxed)
        {
            return Err((ContextError::InUse(s), stack));
        }
        let top = stack.top();
        self.stack_base.store(stack.base(), Ordering::Relaxed);
        self.stack_top.store(top, Ordering::Relaxed);
        // SAFETY: SETUP is exclusive (entered by the CAS above, left by the release store
        // below); nobody else reads `regs` or `stack` in it.
        unsafe {
            *self.stack.get() = Some(stack);
            *self.regs.get() = CpuContext {
                callee: [entry as usize as u64, arg as u64, 0, 0, 0, 0, 0, 0, 0, 0],
                fp: 0,
                lr: __asym_ret_from_fork as *const () as usize as u64,
                sp: top as u64,
                tpidr_el0: 0,
                tpidrro_el0: 0,
            };
        }
        self.state.store(SAVED, Ordering::Release);
        Ok(())
    }

    /// Whether the thread's registers are live on a CPU (Linux `task_on_cpu`, `p->on_cpu`).
    pub fn on_cpu(&self) -> bool {
        self.state.load(Ordering::Acquire) >= RUNNING
    }

    /// Waits until the thread is off every CPU (Linux `smp_cond_load_acquire(&p->on_cpu, !VAL)`
    /// in `try_to_wake_up`): its registers are saved and its stack is no longer in use, so it
    /// may be resumed anywhere.
    pub fn wait_off_cpu(&self) {
        while self.on_cpu() {
            // `yield`: under QEMU's round-robin TCG the CPU finishing the switch must get to run.
            super::cpu_regs::cpu_yield();
        }
    }

    /// The stack of an exited thread, whose context becomes empty (Linux `put_task_stack`):
    /// `None` unless the thread has exited (so never while a CPU runs on it).
    pub fn release_stack(&self) -> Option<KernelStack> {
        self.state
            .compare_exchange(EXITED, TEARDOWN, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        // SAFETY: TEARDOWN is exclusive, like SETUP.
        let stack = unsafe { (*self.stack.get()).take() };
        self.stack_base.store(0, Ordering::Relaxed);
        self.stack_top.store(0, Ordering::Relaxed);
        self.state.store(NONE, Ordering::Release);
        stack
    }

    /// Whether the context holds no thread.
    pub fn is_empty(&self) -> bool {
        self.state.load(Ordering::Acquire) == NONE
    }

    /// The thread's stack range `(base, top)` (zeros when empty).
    pub fn stack_bounds(&self) -> (usize, usize) {
        (
            self.stack_base.load(Ordering::Relaxed),
            self.stack_top.load(Ordering::Relaxed),
        )
    }

    /// Claims a resumable context for this CPU (SAVED → RUNNING); panics otherwise.
    fn claim(&self, cpu: u32) {
        if let Err(s) =
            self.state
                .compare_exchange(SAVED, RUNNING + cpu, Ordering::Acquire, Ordering::Relaxed)
        {
            panic!("context switch to a thread that is not resumable (state {s:#x})");
        }
    }

    /// Panics unless this context is the one running on this CPU, on its own stack.
    fn check_current(&self, cpu: u32, on_own_stack: bool) {
        let s = self.state.load(Ordering::Relaxed);
        if s != RUNNING + cpu {
            panic!("context switch from a thread not running on cpu {cpu} (state {s:#x})");
        }
        if on_own_stack {
            let sp = super::current_sp();
            let (base, top) = self.stack_bounds();
            if !(base..=top).contains(&sp) {
                panic!(
                    "context switch from SP {sp:#x} outside the thread's stack {base:#x}..{top:#x}"
                );
            }
        }
    }
}

impl Default for ThreadContext {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for ThreadContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadContext")
            .field("state", &self.state.load(Ordering::Relaxed))
            .field("stack", &self.stack_bounds())
            .finish()
    }
}

/// Switches from `prev`, running on this CPU on its own stack, to `next` (Linux
/// `cpu_switch_to`). Returns when some CPU switches back to `prev`, with the `token` that
/// CPU passed (the thread it switched away from). IRQs must be masked.
pub fn switch_to(prev: &ThreadContext, next: &ThreadContext, token: usize) -> usize {
    let cpu = super::cpu_index() as u32;
    prev.check_current(cpu, true);
    next.claim(cpu);
    // SAFETY: `prev` runs here on its own stack (checked), so its registers may be saved into
    // it; `next` was SAVED (now claimed for this CPU), so its registers and stack are a valid
    // thread to resume. The asm marks `prev` SAVED only after it has left prev's stack.
    unsafe { __asym_cpu_switch_to(prev.regs.get(), next.regs.get(), token, &prev.state) }
}

/// Leaves `prev` for good (it exited) and resumes `next` with `token`; `prev`'s stack is
/// abandoned (the caller may run on it, or on this CPU's overflow stack) and can be released
/// once the switch is done ([`ThreadContext::release_stack`]). IRQs must be masked.
pub fn exit_to(prev: &ThreadContext, next: &ThreadContext, token: usize) -> ! {
    let cpu = super::cpu_index() as u32;
    prev.check_current(cpu, false);
    next.claim(cpu);
    // SAFETY: as for `switch_to`; nothing of `prev` is saved, and it is marked EXITED only once
    // this CPU runs on next's stack.
    unsafe { __asym_cpu_exit_to(next.regs.get(), token, &prev.state) }
}

/// This CPU's first switch, from its boot stack (abandoned) to `next`: installs the thread
/// vectors (whose overflow check needs thread-aligned stacks) and resumes `next` with `token`.
/// IRQs must be masked.
pub fn start_first(next: &ThreadContext, token: usize) -> ! {
    next.claim(super::cpu_index() as u32);
    // SAFETY: `next` is claimed (a valid resumable thread); from now on this CPU runs only on
    // thread stacks (and, to report an overflow, its overflow stack), which the thread vectors
    // check by alignment.
    unsafe { __asym_start_first(next.regs.get(), token) }
}

/// The stack slot whose window range holds `addr` (guard half included), if any.
pub fn stack_slot_of(addr: usize) -> Option<usize> {
    let off = addr.checked_sub(STACK_WINDOW_VA)?;
    (off < mmu::STACK_WINDOW_SIZE).then_some(off / STACK_SLOT_SIZE)
}

/// The usable range `(base, top)` of slot `slot`'s stack in the window.
pub fn stack_range(slot: usize) -> (usize, usize) {
    let base = STACK_WINDOW_VA + slot * STACK_SLOT_SIZE + THREAD_SIZE;
    (base, base + THREAD_SIZE)
}

/// The thread-stack slot the calling code runs on (from SP), `None` on a boot or overflow
/// stack. Exact whatever the CPU: SP moves with the thread.
#[inline]
pub fn current_stack_slot() -> Option<usize> {
    stack_slot_of(super::current_sp())
}

/// One page-aligned block of stack memory, as atomics: the thread writes it through the window
/// mapping while the kernel holds this owner, so its contents must be interior-mutable.
#[repr(C, align(4096))]
struct StackPages([AtomicU64; THREAD_SIZE / 8]);

/// A kernel stack: heap pages mapped into the window at its slot (unmapped again on drop).
pub struct KernelStack {
    slot: usize,
    pages: Box<StackPages>,
}

/// Why a stack could not be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackError {
    /// The slot is beyond the window.
    NoSuchSlot(usize),
    /// No heap memory for the pages.
    OutOfMemory,
    /// A page of the slot is already mapped (it holds another stack).
    SlotInUse(usize),
}

impl fmt::Display for StackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            StackError::NoSuchSlot(s) => write!(f, "stack slot {s} is beyond the stack window"),
            StackError::OutOfMemory => write!(f, "no memory for a {THREAD_SIZE}-byte stack"),
            StackError::SlotInUse(s) => write!(f, "stack slot {s} is already mapped"),
        }
    }
}

impl KernelStack {
    /// Allocates, paints and maps the stack of slot `slot`.
    pub fn new(slot: usize) -> Result<KernelStack, StackError> {
        if slot >= crate::task::MAX_THREADS {
            return Err(StackError::NoSuchSlot(slot));
        }
        let layout = core::alloc::Layout::new::<StackPages>();
        // SAFETY: `layout` has non-zero size.
        let raw = unsafe { alloc::alloc::alloc_zeroed(layout) }.cast::<StackPages>();
        if raw.is_null() {
            return Err(StackError::OutOfMemory);
        }
        // SAFETY: `raw` was allocated by the global allocator with `StackPages`' layout and is
        // zeroed, which is a valid array of atomics.
        let pages = unsafe { Box::from_raw(raw) };
        for w in &pages.0 {
            w.store(PAINT, Ordering::Relaxed);
        }
        let stack = KernelStack { slot, pages };
        let (base, _) = stack_range(slot);
        for i in 0..THREAD_SIZE / 4096 {
            let pa = stack.pa() + i * 4096;
            // SAFETY: the page belongs to `stack.pages`, which this stack owns until `drop`
            // unmaps it; the kernel touches it otherwise only through the atomics.
            if unsafe { mmu::map_stack_page(base + i * 4096, pa) }.is_err() {
                for j in 0..i {
                    let _ = mmu::unmap_stack_page(base + j * 4096);
                }
                // Nothing of ours is mapped: the pages go back to the heap.
                drop(stack.mapped_none());
                return Err(StackError::SlotInUse(slot));
            }
        }
        Ok(stack)
    }

    /// The lowest usable address.
    pub fn base(&self) -> usize {
        stack_range(self.slot).0
    }

    /// One past the highest address: the initial SP.
    pub fn top(&self) -> usize {
        stack_range(self.slot).1
    }

    /// The window slot.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// The deepest the stack has been used, bytes (paint overwritten from the top down).
    pub fn used_bytes(&self) -> usize {
        let untouched = self
            .pages
            .0
            .iter()
            .take_while(|w| w.load(Ordering::Relaxed) == PAINT)
            .count();
        THREAD_SIZE - untouched * 8
    }

    fn pa(&self) -> usize {
        (&raw const *self.pages) as usize
    }

    /// Gives up the window mapping without unmapping (for a stack none of whose pages got
    /// mapped): returns the pages' owner so dropping it frees them.
    fn mapped_none(self) -> Box<StackPages> {
        let me = core::mem::ManuallyDrop::new(self);
        // SAFETY: `me` is never used or dropped again, so the box is moved out exactly once.
        unsafe { core::ptr::read(&me.pages) }
    }
}

impl Drop for KernelStack {
    fn drop(&mut self) {
        let (base, _) = stack_range(self.slot);
        for i in 0..THREAD_SIZE / 4096 {
            // Only a stack whose pages were all mapped is ever dropped.
            let _ = mmu::unmap_stack_page(base + i * 4096);
        }
        // The pages are unreachable through the window on every CPU now; `pages` frees them.
    }
}

impl fmt::Debug for KernelStack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KernelStack(slot {}, {:#x})", self.slot, self.base())
    }
}

unsafe extern "C" {
    fn __asym_cpu_switch_to(
        prev: *mut CpuContext,
        next: *const CpuContext,
        token: usize,
        prev_state: &AtomicU32,
    ) -> usize;
    fn __asym_cpu_exit_to(next: *const CpuContext, token: usize, prev_state: &AtomicU32) -> !;
    fn __asym_start_first(next: *const CpuContext, token: usize) -> !;
    fn __asym_ret_from_fork();
}

// x0 = prev regs, x1 = next regs, x2 = token, x3 = &prev.state. Saves prev's callee-saved
// registers, SP and TLS registers, loads next's, and only then (on next's stack) publishes
// prev as SAVED with a store-release; returns the token in x0 to wherever next resumes: its
// own `switch_to` call, or `ret_from_fork`.
global_asm!(
    r#"
    .text
    .global __asym_cpu_switch_to
__asym_cpu_switch_to:
    stp     x19, x20, [x0, #0]
    stp     x21, x22, [x0, #16]
    stp     x23, x24, [x0, #32]
    stp     x25, x26, [x0, #48]
    stp     x27, x28, [x0, #64]
    stp     x29, x30, [x0, #80]
    mov     x9, sp
    mrs     x10, tpidr_el0
    mrs     x11, tpidrro_el0
    stp     x9, x10, [x0, #96]
    str     x11, [x0, #112]
    mov     x0, x1
    mov     x1, x3
    mov     w4, #{saved}
    b       __asym_load_context

// x0 = next regs, x1 = token, x2 = &prev.state (EXITED once on next's stack).
    .global __asym_cpu_exit_to
__asym_cpu_exit_to:
    mov     x3, x1
    mov     x1, x2
    mov     x2, x3
    mov     w4, #{exited}
    b       __asym_load_context

// x0 = next regs, x1 = token. No previous thread: installs the thread vectors first.
    .global __asym_start_first
__asym_start_first:
    adrp    x9, __asym_thread_vectors
    add     x9, x9, :lo12:__asym_thread_vectors
    msr     vbar_el1, x9
    isb
    mov     x2, x1
    mov     x1, xzr
    b       __asym_load_context

// x0 = next regs, x1 = state word to store w4 to (release) once on next's stack (0: none),
// x2 = token returned in x0.
__asym_load_context:
    ldp     x19, x20, [x0, #0]
    ldp     x21, x22, [x0, #16]
    ldp     x23, x24, [x0, #32]
    ldp     x25, x26, [x0, #48]
    ldp     x27, x28, [x0, #64]
    ldp     x29, x30, [x0, #80]
    ldp     x9, x10, [x0, #96]
    ldr     x11, [x0, #112]
    mov     sp, x9
    msr     tpidr_el0, x10
    msr     tpidrro_el0, x11
    cbz     x1, 1f
    stlr    w4, [x1]
1:  mov     x0, x2
    ret

// A new thread's first return (x19 = entry, x20 = its argument, x0 = the token): finish the
// switch that started it, then run it. The entry never returns.
    .global __asym_ret_from_fork
__asym_ret_from_fork:
    bl      {schedule_tail}
    mov     x0, x20
    blr     x19
    brk     #0x800
"#,
    saved = const SAVED,
    exited = const EXITED,
    schedule_tail = sym crate::sched::schedule_tail,
);
