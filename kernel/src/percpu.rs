//! Per-CPU data and the current CPU's logical id.
//!
//! Re-derives the idea of Linux's `include/linux/percpu-defs.h` (`DEFINE_PER_CPU`,
//! `per_cpu(var, cpu)`, `this_cpu_ptr`) and `arch/arm64/include/asm/smp.h`
//! (`raw_smp_processor_id`, which arm64 keeps in a per-CPU variable addressed through
//! `TPIDR_EL1`/`TPIDR_EL2`).
//!
//! Deliberate differences: Linux allocates a copy of the whole `.data..percpu` section per CPU
//! and adds a per-CPU offset kept in `TPIDR_EL1`. We have at most [`MAX_CPUS`] CPUs and no
//! linker tricks, so a [`PerCpu<T>`] is a plain array indexed by [`CpuId`], and `TPIDR_EL1` holds
//! the logical CPU index itself (written by the entry code before any Rust runs on the CPU).
//! `T` must be `Sync` (atomics or an `IrqSpinLock`): any CPU may read another CPU's slot, which
//! the self tests and the IPI/cross-call code rely on.
//!
//! Threads are preemptible and migrate, so "this CPU" is only stable while migration is ruled
//! out: [`PerCpu::this`] takes a [`PreemptGuard`] (Linux `get_cpu()`/`put_cpu()`); interrupt
//! handlers and code with IRQs masked cannot migrate either and use
//! [`PerCpu::of`]`(`[`current_cpu`]`())`.

use core::marker::PhantomData;

use asym_sched::types::CpuId;

pub use crate::dt::MAX_CPUS;

/// One `T` per possible CPU, indexed by the logical [`CpuId`].
#[derive(Debug)]
pub struct PerCpu<T> {
    slots: [T; MAX_CPUS],
}

impl<T> PerCpu<T> {
    /// Wraps one value per CPU; in a `static`, build the array with
    /// `[const { AtomicU64::new(0) }; MAX_CPUS]`.
    pub const fn new(slots: [T; MAX_CPUS]) -> Self {
        Self { slots }
    }

    /// The slot of `cpu` (Linux `per_cpu(var, cpu)`), or `None` for an id beyond [`MAX_CPUS`].
    pub fn get(&self, cpu: CpuId) -> Option<&T> {
        self.slots.get(cpu.index())
    }

    /// The slot of `cpu`. Ids this kernel hands out ([`current_cpu`], [`crate::smp`]) are below
    /// [`MAX_CPUS`]; a larger one wraps around rather than panicking in interrupt context.
    pub fn of(&self, cpu: CpuId) -> &T {
        &self.slots[cpu.index() % MAX_CPUS]
    }

    /// The calling CPU's slot (Linux `this_cpu_ptr`), for as long as `guard` keeps the caller
    /// on this CPU.
    pub fn this<'a>(&'a self, guard: &'a PreemptGuard) -> &'a T {
        self.of(guard.cpu())
    }

    /// All slots with their CPU ids.
    pub fn iter(&self) -> impl Iterator<Item = (CpuId, &T)> {
        self.slots
            .iter()
            .enumerate()
            .map(|(i, slot)| (CpuId(i as u16), slot))
    }
}

/// The calling CPU's logical id (Linux `raw_smp_processor_id`): the index in the device tree's
/// CPU list that the entry code stores in `TPIDR_EL1` before any Rust code runs on the CPU (see
/// docs/kernel.md). Exact in interrupt context, with IRQs masked or under a [`PreemptGuard`];
/// elsewhere a preemptible thread may have moved on by the time it uses the value.
pub fn current_cpu() -> CpuId {
    CpuId((crate::arch::cpu_index() % MAX_CPUS) as u16)
}

/// Keeps the calling thread on its CPU while it lives (Linux `preempt_disable`; dropping it is
/// `preempt_enable`, which reschedules if that was asked for meanwhile). Not `Send`: it must
/// drop on the thread, and so the CPU, that made it.
#[derive(Debug)]
pub struct PreemptGuard {
    cpu: CpuId,
    _not_send: PhantomData<*const ()>,
}

impl PreemptGuard {
    /// Disables preemption of the calling thread (nests).
    pub fn new() -> Self {
        crate::task::preempt_disable();
        PreemptGuard {
            cpu: current_cpu(),
            _not_send: PhantomData,
        }
    }

    /// The CPU the caller stays on.
    pub fn cpu(&self) -> CpuId {
        self.cpu
    }
}

impl Default for PreemptGuard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for PreemptGuard {
    fn drop(&mut self) {
        if crate::task::preempt_enable_no_resched() {
            crate::sched::preempt_check();
        }
    }
}
