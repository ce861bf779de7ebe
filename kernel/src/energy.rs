//! The energy the energy model sees, metered while the kernel runs: per CPU, busy time (a
//! thread other than the CPU's idle thread on it) × the busy power of the CPU's current OPP.
//! This is the sum `Σ busy_ns × power(opp)` that the trace analyser (`asym_trace::analyse`)
//! computes from `sched_switch` and `cpu_frequency` records after a run, and the simulator
//! reports as `energy` (Linux `em_cpu_energy`'s model: OPP power from the DT's
//! `dynamic-power-coefficient`, idle power 0). It is what the status line of a workload run
//! shows as "energy so far", and what xtask checks the analyser's total against. It is not a
//! board's hardware meter (no idle-state, static or transition power).
//!
//! Lock-free, and cheap where it sits: a CPU opens a busy interval when it switches from its
//! idle thread to another thread and closes it when it switches back (two atomics and a
//! multiply, only on those switches); a completed frequency transition closes the running
//! interval of each CPU of its domain at the old power before storing the new one. The
//! interval start is taken with an atomic swap or compare-exchange by whichever side closes
//! it, so every nanosecond is charged once.

use core::sync::atomic::{AtomicU64, Ordering};

use asym_sched::em::dt_opp_power;
use asym_sched::topology::BoardDesc;
use asym_sched::types::{CpuId, Khz};

use crate::percpu::{PerCpu, MAX_CPUS};

/// Busy power at the CPU's current OPP, µW (0: no energy model for it).
static POWER_UW: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
/// Start of the CPU's open busy interval, ns of `sched::now`'s clock; 0 while idle.
static BUSY_SINCE: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
/// Energy of the CPU's closed busy intervals, pJ.
static ENERGY_PJ: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
/// The meter stops at this instant ([`stop_at`]); `u64::MAX`: runs on.
static STOP_AT: AtomicU64 = AtomicU64::new(u64::MAX);

/// Stops the meter at guest time `at_ns` (ns of `sched::now`'s clock): busy time after it is
/// not charged, so [`total_pj`] read at any time later is the energy up to `at_ns` — the end
/// of a workload run, which the trace analyser cuts its intervals at too, whenever the thread
/// reading the meter gets to run after it.
pub fn stop_at(at_ns: u64) {
    STOP_AT.store(at_ns, Ordering::Relaxed);
}

/// The busy power of performance domain `pd` of `board` at `khz`, µW, as the analyser's
/// `DomainModel::of_board` gives it: the DT formula with the domain's first CPU's
/// `dynamic-power-coefficient` and the OPP's voltage; 0 without a coefficient or for a
/// frequency not in the table.
pub fn opp_power_uw(board: &BoardDesc, pd: usize, khz: Khz) -> u64 {
    let coeff = board
        .cpus
        .iter()
        .find(|c| usize::from(c.perf_domain) == pd)
        .and_then(|c| c.dynamic_power_coefficient);
    let opp = board
        .perf_domains
        .get(pd)
        .and_then(|d| d.opps.iter().find(|o| o.freq == khz));
    match (coeff, opp) {
        (Some(c), Some(o)) => dt_opp_power(c, o.freq, o.voltage.0).0,
        _ => 0,
    }
}

fn charge(cpu: CpuId, from: u64, to: u64) {
    let stop = STOP_AT.load(Ordering::Relaxed);
    let pj = u128::from(to.min(stop).saturating_sub(from.min(stop)))
        * u128::from(POWER_UW.of(cpu).load(Ordering::Relaxed))
        / 1000;
    ENERGY_PJ
        .of(cpu)
        .fetch_add(u64::try_from(pj).unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// `cpu` (the calling CPU) leaves its idle thread for another thread at `now_ns`.
pub fn busy_start(cpu: CpuId, now_ns: u64) {
    BUSY_SINCE.of(cpu).store(now_ns.max(1), Ordering::Relaxed);
}

/// `cpu` (the calling CPU) switches to its idle thread at `now_ns`.
pub fn busy_end(cpu: CpuId, now_ns: u64) {
    let since = BUSY_SINCE.of(cpu).swap(0, Ordering::Relaxed);
    if since != 0 {
        charge(cpu, since, now_ns);
    }
}

/// `cpu` runs at an OPP of busy power `uw` from `now_ns` on (cpufreq init and each completed
/// transition, from any CPU): the open busy interval up to now is charged at the old power.
pub fn set_power(cpu: CpuId, uw: u64, now_ns: u64) {
    let b = BUSY_SINCE.of(cpu);
    let since = b.load(Ordering::Relaxed);
    // An interval `cpu` opened after `now_ns` (it switched between this change's trace record
    // and this call) runs at the new power from its start: nothing to charge at the old one.
    if since != 0
        && since < now_ns
        && b.compare_exchange(since, now_ns, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        charge(cpu, since, now_ns);
    }
    POWER_UW.of(cpu).store(uw, Ordering::Relaxed);
}

/// Energy of every CPU up to `now_ns`, pJ: the closed intervals and the open ones so far.
pub fn total_pj(now_ns: u64) -> u64 {
    let mut pj: u64 = 0;
    for c in 0..MAX_CPUS {
        let cpu = CpuId(c as u16);
        let since = BUSY_SINCE.of(cpu).load(Ordering::Relaxed);
        let stop = STOP_AT.load(Ordering::Relaxed);
        let open = if since != 0 {
            u128::from(now_ns.min(stop).saturating_sub(since.min(stop)))
                * u128::from(POWER_UW.of(cpu).load(Ordering::Relaxed))
                / 1000
        } else {
            0
        };
        pj = pj
            .saturating_add(ENERGY_PJ.of(cpu).load(Ordering::Relaxed))
            .saturating_add(u64::try_from(open).unwrap_or(u64::MAX));
    }
    pj
}
