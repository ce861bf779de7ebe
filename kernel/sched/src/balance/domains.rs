//! Sched domains: Linux's `kernel/sched/topology.c` for arm64's default levels.
//!
//! `sd_init`, `build_sched_domains` with MC (per cluster) and PKG (all CPUs),
//! `asym_cpu_capacity_classify` (`SD_ASYM_CPUCAPACITY[_FULL]`), `sd_degenerate` /
//! `sd_parent_degenerate`, `update_max_interval` (`max_load_balance_interval`), and from
//! `fair.c` the interval arithmetic the drivers use (`get_sd_balance_interval`,
//! `update_next_balance`, `update_newidle_cost`). Built once at set-up; the per-CPU state
//! ([`CpuBalance`]) is written only by balancing on that CPU's behalf.

use alloc::vec::Vec;

use crate::flags::sched_flags;

use super::{BalanceError, SYSCTL_SCHED_MIGRATION_COST_NS};
use crate::topology::Topology;
use crate::types::{Capacity, CpuId, CpuMask, Nanos};

sched_flags! {
    /// `sd->flags` (`include/linux/sched/sd_flags.h`; the ones we use).
    pub struct SdFlags(u32) {
        /// Balance when about to become idle.
        const BALANCE_NEWIDLE = 1 << 0;
        /// Balance on exec.
        const BALANCE_EXEC = 1 << 1;
        /// Balance on fork/clone.
        const BALANCE_FORK = 1 << 2;
        /// Balance on wake-up (off by default).
        const BALANCE_WAKE = 1 << 3;
        /// Consider waking the task on the waking CPU.
        const WAKE_AFFINE = 1 << 4;
        /// The domain spans CPUs of different capacities.
        const ASYM_CPUCAPACITY = 1 << 5;
        /// ... and it sees every capacity of the system.
        const ASYM_CPUCAPACITY_FULL = 1 << 6;
        /// The CPUs share the last-level cache (MC).
        const SHARE_LLC = 1 << 9;
        /// Spread tasks to sibling domains first.
        const PREFER_SIBLING = 1 << 12;
    }
}

/// The topology level of a domain (`sched_domain_topology_level`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SdLevel {
    /// One cluster (`cpu_coregroup_mask`, `SD_SHARE_LLC`).
    Mc,
    /// Every CPU (`cpu_cpu_mask`).
    Pkg,
}

/// `struct sched_group` with its `sched_group_capacity`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedGroup {
    /// The group's CPUs.
    pub span: CpuMask,
    /// `sgc->capacity`: sum of `capacity_of` over the span.
    pub capacity: u64,
    /// `sgc->min_capacity`.
    pub min_capacity: Capacity,
    /// `sgc->max_capacity`.
    pub max_capacity: Capacity,
}

/// One CPU's `struct sched_domain` at one level. Intervals are in ms (as Linux
/// stores them), deadlines in jiffies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedDomain {
    /// The level.
    pub level: SdLevel,
    /// `sched_domain_span(sd)`.
    pub span: CpuMask,
    /// `sd->groups`: the child domains' spans (single CPUs at the lowest level).
    pub groups: Vec<SchedGroup>,
    /// `sd->flags`.
    pub flags: SdFlags,
    /// `sd->min_interval` (ms): the span's weight.
    pub min_interval: u32,
    /// `sd->max_interval` (ms): twice the weight.
    pub max_interval: u32,
    /// `sd->busy_factor`: 16.
    pub busy_factor: u32,
    /// `sd->imbalance_pct`: 117.
    pub imbalance_pct: u32,
    /// `sd->cache_nice_tries`.
    pub cache_nice_tries: u32,
    /// `sd->balance_interval` (ms), doubled on each balanced attempt up to
    /// `max_interval`.
    pub balance_interval: u32,
    /// `sd->last_balance` (jiffies).
    pub last_balance: u64,
    /// `sd->nr_balance_failed`.
    pub nr_balance_failed: u32,
    /// `sd->max_newidle_lb_cost` (ns).
    pub max_newidle_lb_cost: u64,
    /// `sd->last_decay_max_lb_cost` (jiffies).
    pub last_decay_max_lb_cost: u64,
}

/// One CPU's balancing state: its domains (bottom-up) and the `struct rq` fields
/// load balancing owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuBalance {
    /// This CPU.
    pub cpu: CpuId,
    /// `for_each_domain(cpu, sd)`, lowest level first; empty on a one-CPU system.
    pub sd: Vec<SchedDomain>,
    /// `rq->max_idle_balance_cost` (ns).
    pub max_idle_balance_cost: u64,
}

/// Every CPU's domains and the global balance parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedDomains {
    /// Per CPU, indexed by `CpuId::index`.
    pub cpus: Vec<CpuBalance>,
    /// `HZ`.
    pub hz: u32,
    /// `TICK_NSEC` = `(NSEC_PER_SEC + HZ/2) / HZ`.
    pub tick_nsec: u64,
    /// `max_load_balance_interval` (jiffies): `HZ * nr_cpus / 10`.
    pub max_load_balance_interval: u64,
    /// `sched_asym_cpucap_active()`.
    pub asym_cpucapacity: bool,
}

impl SchedDomains {
    /// `build_sched_domains` for arm64's default levels over every CPU of `topo`: MC per
    /// cluster, PKG over all CPUs, `SD_ASYM_CPUCAPACITY` on levels spanning several
    /// capacities, degenerate levels removed. `now` initialises `last_balance`.
    pub fn build(topo: &Topology, hz: u32, now: Nanos) -> Result<SchedDomains, BalanceError> {
        Self::build_for(topo, topo.cpu_mask(), hz, now)
    }

    /// `build_sched_domains(cpu_map)` over the active CPUs `active` (Linux builds over
    /// `cpu_active_mask`): every span and group is cut to them, the capacity classification
    /// counts only their capacities, `max_load_balance_interval` their number
    /// (`update_max_interval`), and a CPU outside `active` gets no domain (Linux attaches it to
    /// the NULL domain), so no balance pulls onto it and no group counts its capacity. CPUs of
    /// `active` beyond the topology are ignored; an empty set is refused.
    pub fn build_for(
        topo: &Topology,
        active: CpuMask,
        hz: u32,
        now: Nanos,
    ) -> Result<SchedDomains, BalanceError> {
        if hz == 0 || hz > 10_000 {
            return Err(BalanceError::BadHz { hz });
        }
        let all = topo.cpu_mask().and(active);
        if all.is_empty() {
            return Err(BalanceError::NoActiveCpu);
        }
        let tick_nsec = (1_000_000_000 + hz as u64 / 2) / hz as u64;
        let jiffies = now.0 / tick_nsec;
        let cpu_group = |span: CpuMask| group_of(topo, span);
        let mut cpus = Vec::with_capacity(topo.nr_cpus());
        for c in topo.cpus() {
            let mut levels: Vec<SchedDomain> = Vec::with_capacity(2);
            if !all.contains(c.id) {
                cpus.push(CpuBalance {
                    cpu: c.id,
                    sd: levels,
                    max_idle_balance_cost: SYSCTL_SCHED_MIGRATION_COST_NS,
                });
                continue;
            }
            let mc_span = topo.cluster_mask(c.cluster).and(all);
            // MC: groups are single CPUs. Degenerate with one CPU.
            if mc_span.weight() > 1 {
                let groups = mc_span.iter().map(|i| cpu_group(CpuMask::of(i))).collect();
                levels.push(sd_init(topo, all, SdLevel::Mc, mc_span, groups, jiffies));
            }
            // PKG: groups are the clusters. Degenerate if it spans what MC spans.
            if all.weight() > 1 && all != mc_span {
                let mut groups: Vec<SchedGroup> = Vec::new();
                for i in all.iter() {
                    let span = topo.cluster_mask(topo.cpus()[i.index()].cluster).and(all);
                    if !groups.iter().any(|g| g.span == span) {
                        groups.push(cpu_group(span));
                    }
                }
                levels.push(sd_init(topo, all, SdLevel::Pkg, all, groups, jiffies));
            }
            // sd_init: an asymmetric parent clears its child's SD_PREFER_SIBLING.
            for i in 1..levels.len() {
                if levels[i].flags.contains(SdFlags::ASYM_CPUCAPACITY) {
                    levels[i - 1].flags.remove(SdFlags::PREFER_SIBLING);
                }
            }
            cpus.push(CpuBalance {
                cpu: c.id,
                sd: levels,
                max_idle_balance_cost: SYSCTL_SCHED_MIGRATION_COST_NS,
            });
        }
        Ok(SchedDomains {
            cpus,
            hz,
            tick_nsec,
            max_load_balance_interval: (hz as u64 * all.weight() as u64 / 10).max(1),
            asym_cpucapacity: topo.nr_capacities(all) > 1,
        })
    }

    /// `jiffies` at `now`.
    pub fn jiffies(&self, now: Nanos) -> u64 {
        now.0 / self.tick_nsec
    }

    /// The start of jiffy `j`, as stored in `rq->next_balance`.
    pub fn jiffies_to_nanos(&self, j: u64) -> Nanos {
        Nanos(j.saturating_mul(self.tick_nsec))
    }

    /// `msecs_to_jiffies(ms)`: rounded up.
    pub fn msecs_to_jiffies(&self, ms: u64) -> u64 {
        (ms * self.hz as u64).div_ceil(1000)
    }

    /// `get_sd_balance_interval(sd, cpu_busy)` in jiffies.
    pub fn get_sd_balance_interval(&self, sd: &SchedDomain, cpu_busy: bool) -> u64 {
        let mut interval = sd.balance_interval as u64;
        if cpu_busy {
            interval *= sd.busy_factor as u64;
        }
        let mut interval = self.msecs_to_jiffies(interval);
        // Busy: just below a multiple of the tick, so CPUs don't balance in lock-step.
        if cpu_busy {
            interval = interval.saturating_sub(1);
        }
        interval.clamp(1, self.max_load_balance_interval)
    }

    /// `update_next_balance(sd, &next_balance)`: pull `next_balance` (jiffies) down to
    /// `sd->last_balance` + the idle interval.
    pub fn update_next_balance(&self, sd: &SchedDomain, next_balance: &mut u64) {
        let next = self.sd_next_balance(sd);
        if *next_balance > next {
            *next_balance = next;
        }
    }

    /// `sd->last_balance + get_sd_balance_interval(sd, 0)`: when `sd` is next due on a busy CPU
    /// (jiffies), as [`update_next_balance`](Self::update_next_balance) reads it.
    pub fn sd_next_balance(&self, sd: &SchedDomain) -> u64 {
        sd.last_balance + self.get_sd_balance_interval(sd, false)
    }

    /// `update_newidle_cost(sd, cost)`: raise `max_newidle_lb_cost` to `cost_ns`, or
    /// decay it by 253/256 once per second. Returns whether it decayed.
    pub fn update_newidle_cost(&self, sd: &mut SchedDomain, cost_ns: u64, jiffies: u64) -> bool {
        if cost_ns > sd.max_newidle_lb_cost {
            sd.max_newidle_lb_cost = cost_ns;
            sd.last_decay_max_lb_cost = jiffies;
        } else if jiffies > sd.last_decay_max_lb_cost + self.hz as u64 {
            sd.max_newidle_lb_cost = sd.max_newidle_lb_cost * 253 / 256;
            sd.last_decay_max_lb_cost = jiffies;
            return true;
        }
        false
    }

    /// The balancing state of `cpu`.
    pub fn cpu(&self, cpu: CpuId) -> Option<&CpuBalance> {
        self.cpus.get(cpu.index())
    }
}

fn group_of(topo: &Topology, span: CpuMask) -> SchedGroup {
    let caps = || span.iter().map(|c| topo.capacity_orig(c).0);
    SchedGroup {
        span,
        capacity: caps().map(u64::from).sum(),
        min_capacity: Capacity(caps().min().unwrap_or(0)),
        max_capacity: Capacity(caps().max().unwrap_or(0)),
    }
}

/// `sd_init` for one level, with `asym_cpu_capacity_classify(span, cpu_map)`: `cpu_map` the
/// CPUs the domains are built over.
fn sd_init(
    topo: &Topology,
    cpu_map: CpuMask,
    level: SdLevel,
    span: CpuMask,
    groups: Vec<SchedGroup>,
    jiffies: u64,
) -> SchedDomain {
    let weight = span.weight();
    let mut flags = SdFlags::BALANCE_NEWIDLE
        | SdFlags::BALANCE_EXEC
        | SdFlags::BALANCE_FORK
        | SdFlags::WAKE_AFFINE
        | SdFlags::PREFER_SIBLING;
    if level == SdLevel::Mc {
        flags.insert(SdFlags::SHARE_LLC);
    }
    let here = topo.nr_capacities(span);
    if here > 1 {
        flags.insert(SdFlags::ASYM_CPUCAPACITY);
        if here == topo.nr_capacities(cpu_map) {
            flags.insert(SdFlags::ASYM_CPUCAPACITY_FULL);
        }
    }
    SchedDomain {
        level,
        span,
        groups,
        flags,
        min_interval: weight,
        max_interval: 2 * weight,
        busy_factor: 16,
        imbalance_pct: 117,
        // MC (SD_SHARE_LLC) and PKG both get 1.
        cache_nice_tries: 1,
        balance_interval: weight,
        last_balance: jiffies,
        nr_balance_failed: 0,
        max_newidle_lb_cost: 0,
        last_decay_max_lb_cost: jiffies,
    }
}
