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

    /// The calling CPU's slot (Linux `this_cpu_ptr`); kernel contexts never migrate between
    /// CPUs, so the reference stays this CPU's.
    pub fn this(&self) -> &T {
        self.of(current_cpu())
    }

    /// All slots with their CPU ids.
    pub fn iter(&self) -> impl Iterator<Item = (CpuId, &T)> {
        self.slots
            .iter()
            .enumerate()
            .map(|(i, slot)| (CpuId(i as u16), slot))
    }
}

/// The calling CPU's logical id (Linux `smp_processor_id`): the index in the device tree's CPU
/// list that the entry code stores in `TPIDR_EL1` before any Rust code runs on the CPU (see
/// `kernel/CONTRACTS.md`).
pub fn current_cpu() -> CpuId {
    CpuId((crate::arch::cpu_index() % MAX_CPUS) as u16)
}
