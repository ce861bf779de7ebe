//! Fixed-point newtypes with units in their names, shared by every policy module.
//!
//! Linux keeps these as bare `unsigned long`s; we wrap them so a utilisation cannot
//! be passed where a capacity or a frequency is expected. All of them are on the
//! `SCHED_CAPACITY_SCALE` (1024) scale unless the name says otherwise.

/// `SCHED_CAPACITY_SHIFT`.
pub const SCHED_CAPACITY_SHIFT: u32 = 10;
/// `SCHED_CAPACITY_SCALE`: the capacity of the biggest CPU at its highest frequency.
pub const SCHED_CAPACITY_SCALE: u32 = 1 << SCHED_CAPACITY_SHIFT;

/// A logical CPU number (index into per-CPU arrays), as Linux's `cpu` int.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct CpuId(pub u16);

impl CpuId {
    /// The index into per-CPU arrays.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// A task identifier, unique for the task's lifetime (Linux's `pid`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct TaskId(pub u32);

/// A utilisation on the 1024 scale (`util_avg`, `runnable_avg`, `util_est`, ...).
/// May exceed 1024 for run-queue `runnable_avg` (it counts runnable tasks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Util(pub u32);

/// A compute capacity on the 1024 scale (`capacity_orig`, `arch_scale_cpu_capacity`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Capacity(pub u32);

/// A frequency in kHz, as cpufreq counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Khz(pub u32);

/// Power in µW, as the energy model counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MicroWatt(pub u64);

/// A voltage in µV, as operating-points-v2 `opp-microvolt`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct MicroVolt(pub u32);

/// Time in nanoseconds. Every clock the policy sees (`rq_clock`, `clock_task`,
/// `clock_pelt`) is one of these; callers own the time source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Nanos(pub u64);

/// Scale `v` by `s` on the 1024 scale: Linux's `cap_scale(v, s) = v * s >> 10`.
pub const fn cap_scale(v: u64, s: u32) -> u64 {
    (v * s as u64) >> SCHED_CAPACITY_SHIFT
}

/// The most CPUs a [`CpuMask`] (and so a [`crate::topology::Topology`]) can hold.
pub const MAX_CPUS: usize = 64;

/// A set of CPUs, Linux's `struct cpumask` for at most [`MAX_CPUS`] CPUs.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CpuMask(pub u64);

impl CpuMask {
    /// The empty set (`cpumask_clear`).
    pub const EMPTY: CpuMask = CpuMask(0);

    /// The first `n` CPUs, `0..n` (saturating at [`MAX_CPUS`]).
    pub const fn first_n(n: usize) -> CpuMask {
        if n >= MAX_CPUS {
            CpuMask(u64::MAX)
        } else {
            CpuMask((1u64 << n) - 1)
        }
    }

    /// The set holding only `cpu` (`cpumask_of`). Empty if `cpu` is out of range.
    pub const fn of(cpu: CpuId) -> CpuMask {
        if cpu.index() < MAX_CPUS {
            CpuMask(1u64 << cpu.0)
        } else {
            CpuMask(0)
        }
    }

    /// `cpumask_set_cpu`; CPUs beyond [`MAX_CPUS`] are ignored.
    pub fn set(&mut self, cpu: CpuId) {
        self.0 |= CpuMask::of(cpu).0;
    }

    /// `cpumask_clear_cpu`.
    pub fn clear(&mut self, cpu: CpuId) {
        self.0 &= !CpuMask::of(cpu).0;
    }

    /// `cpumask_test_cpu`.
    pub const fn contains(self, cpu: CpuId) -> bool {
        self.0 & CpuMask::of(cpu).0 != 0
    }

    /// `cpumask_weight`.
    pub const fn weight(self) -> u32 {
        self.0.count_ones()
    }

    /// `cpumask_empty`.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// `cpumask_first`, `None` when empty.
    pub const fn first(self) -> Option<CpuId> {
        if self.0 == 0 {
            None
        } else {
            Some(CpuId(self.0.trailing_zeros() as u16))
        }
    }

    /// `cpumask_and`.
    pub const fn and(self, other: CpuMask) -> CpuMask {
        CpuMask(self.0 & other.0)
    }

    /// `cpumask_or`.
    pub const fn or(self, other: CpuMask) -> CpuMask {
        CpuMask(self.0 | other.0)
    }

    /// `cpumask_andnot`: CPUs in `self` but not in `other`.
    pub const fn and_not(self, other: CpuMask) -> CpuMask {
        CpuMask(self.0 & !other.0)
    }

    /// `for_each_cpu`: the CPUs in ascending order.
    pub fn iter(self) -> CpuMaskIter {
        CpuMaskIter(self.0)
    }
}

impl core::fmt::Debug for CpuMask {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_set().entries(self.iter().map(|c| c.0)).finish()
    }
}

impl IntoIterator for CpuMask {
    type Item = CpuId;
    type IntoIter = CpuMaskIter;
    fn into_iter(self) -> CpuMaskIter {
        self.iter()
    }
}

impl FromIterator<CpuId> for CpuMask {
    fn from_iter<I: IntoIterator<Item = CpuId>>(iter: I) -> CpuMask {
        let mut m = CpuMask::EMPTY;
        for cpu in iter {
            m.set(cpu);
        }
        m
    }
}

/// Iterator over the CPUs of a [`CpuMask`], ascending.
#[derive(Clone, Debug)]
pub struct CpuMaskIter(u64);

impl Iterator for CpuMaskIter {
    type Item = CpuId;
    fn next(&mut self) -> Option<CpuId> {
        if self.0 == 0 {
            return None;
        }
        let cpu = self.0.trailing_zeros();
        self.0 &= self.0 - 1;
        Some(CpuId(cpu as u16))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_scale_halves_at_512() {
        assert_eq!(cap_scale(1_000_000, 512), 500_000);
        assert_eq!(cap_scale(1_000_000, SCHED_CAPACITY_SCALE), 1_000_000);
    }

    #[test]
    fn cpumask_set_iterate_and_bounds() {
        let mut m = CpuMask::EMPTY;
        m.set(CpuId(5));
        m.set(CpuId(0));
        m.set(CpuId(63));
        m.set(CpuId(64)); // out of range: ignored, not a panic
        assert_eq!(m.weight(), 3);
        let v: std::vec::Vec<u16> = m.iter().map(|c| c.0).collect();
        assert_eq!(v, [0, 5, 63]);
        assert_eq!(m.first(), Some(CpuId(0)));
        m.clear(CpuId(0));
        assert!(!m.contains(CpuId(0)));
        assert_eq!(CpuMask::first_n(6).weight(), 6);
        assert_eq!(CpuMask::first_n(64).weight(), 64);
    }
}
