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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cap_scale_halves_at_512() {
        assert_eq!(cap_scale(1_000_000, 512), 500_000);
        assert_eq!(cap_scale(1_000_000, SCHED_CAPACITY_SCALE), 1_000_000);
    }
}
