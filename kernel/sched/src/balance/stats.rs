//! Load-balance statistics: read-only over the CPUs' published [`RqSnapshot`]s.
//!
//! Re-derives Linux v6.12 `fair.c`'s `should_we_balance`, `update_sg_lb_stats`,
//! `group_classify` (`group_has_capacity`, `group_is_overloaded`),
//! `update_sd_pick_busiest`, `update_sd_lb_stats`, `sibling_imbalance`,
//! `calculate_imbalance`, `sched_balance_find_src_group` (`find_busiest_group`),
//! `sched_balance_find_src_rq` (`find_busiest_queue`) and `need_active_balance`. Linux
//! reads the other CPUs' `struct rq` fields here without their locks (`READ_ONCE`); we
//! read their snapshots, so nothing in this file can change a run queue.
//!
//! [`RqSnapshot`]: crate::rq::RqSnapshot

use super::{
    CpuIdleType, GroupType, LbContext, LbEnv, MigrationType, SchedDomain, SchedGroup, SdFlags,
    Snapshots,
};
use crate::cpu_util::{cpu_util_cfs, cpu_util_cfs_boost};
use crate::eas::cpu_overutilized;
use crate::types::{CpuId, SCHED_CAPACITY_SCALE};

/// `struct sg_lb_stats`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SgLbStats {
    pub(crate) avg_load: u64,
    pub(crate) group_load: u64,
    pub(crate) group_capacity: u64,
    pub(crate) group_util: u64,
    pub(crate) group_runnable: u64,
    pub(crate) sum_nr_running: u32,
    pub(crate) sum_h_nr_running: u32,
    pub(crate) idle_cpus: u32,
    pub(crate) group_weight: u32,
    pub(crate) group_type: Option<GroupType>,
    pub(crate) group_misfit_task_load: u64,
    /// Some CPU of the group is `cpu_overutilized` (Linux's `*sg_overutilized`).
    pub(crate) overutilized: bool,
    /// Some CPU of the group has more than one task, or (outside the local group) a
    /// misfit task that raised the group's misfit load (Linux's `*sg_overloaded`).
    pub(crate) overloaded: bool,
}

impl SgLbStats {
    pub(crate) fn ty(&self) -> GroupType {
        self.group_type.unwrap_or(GroupType::HasSpare)
    }
}

/// `struct sd_lb_stats`.
#[derive(Default)]
struct SdLbStats {
    busiest: Option<usize>,
    local: Option<usize>,
    total_load: u64,
    total_capacity: u64,
    avg_load: u64,
    prefer_sibling: bool,
    busiest_stat: SgLbStats,
    local_stat: SgLbStats,
    /// Some CPU of the domain is overutilized (`sg_overutilized` over all groups).
    overutilized: bool,
    /// `sg_overloaded` over all groups.
    overloaded: bool,
}

/// `should_we_balance`: newidle always may (if still idle); otherwise only the first
/// idle CPU of the local group, or its first CPU when none is idle.
pub(crate) fn should_we_balance<S: Snapshots + ?Sized>(
    env: &LbEnv,
    sd: &SchedDomain,
    snaps: &S,
) -> bool {
    let _ = sd;
    if env.idle == CpuIdleType::NewlyIdle {
        return snaps.snapshot(env.dst_cpu).nr_running == 0;
    }
    let group = env.dst_grpmask.and(env.cpus);
    let first_idle = group.iter().find(|&c| snaps.snapshot(c).nr_running == 0);
    match first_idle.or_else(|| group.first()) {
        Some(c) => c == env.dst_cpu,
        None => false,
    }
}

/// `capacity_greater(a, b)`: a is more than ~5% bigger.
pub(crate) fn capacity_greater(a: u64, b: u64) -> bool {
    a * 1024 > b * 1078
}

fn update_sg_lb_stats<S: Snapshots + ?Sized>(
    env: &LbEnv,
    sd: &SchedDomain,
    group: &SchedGroup,
    local: bool,
    snaps: &S,
    ctx: &LbContext,
) -> SgLbStats {
    let mut s = SgLbStats::default();
    for i in group.span.and(env.cpus).iter() {
        let rq = snaps.snapshot(i);
        s.group_load += rq.load_avg;
        s.group_util += cpu_util_cfs(&rq.util, ctx.features).0 as u64;
        s.group_runnable += rq.runnable_avg;
        s.sum_h_nr_running += rq.nr_running;
        s.sum_nr_running += rq.nr_running;
        if rq.nr_running > 1 {
            s.overloaded = true;
        }
        if cpu_overutilized(&rq, ctx.features, ctx.uclamp_used) {
            s.overutilized = true;
        }
        if rq.nr_running == 0 {
            s.idle_cpus += 1;
            continue;
        }
        if local {
            continue;
        }
        if sd.flags.contains(SdFlags::ASYM_CPUCAPACITY)
            && s.group_misfit_task_load < rq.misfit_task_load
        {
            s.group_misfit_task_load = rq.misfit_task_load;
            s.overloaded = true;
        }
    }
    s.group_capacity = group.capacity;
    s.group_weight = group.span.weight();
    s.group_type = Some(group_classify(sd.imbalance_pct as u64, &s));
    // v6.12 computes avg_load for overloaded groups only (fully busy ones keep 0).
    if s.ty() == GroupType::Overloaded && s.group_capacity > 0 {
        s.avg_load = s.group_load * SCHED_CAPACITY_SCALE as u64 / s.group_capacity;
    }
    s
}

fn group_has_capacity(pct: u64, s: &SgLbStats) -> bool {
    if s.sum_nr_running < s.group_weight {
        return true;
    }
    if s.group_capacity * pct < s.group_runnable * 100 {
        return false;
    }
    s.group_capacity * 100 > s.group_util * pct
}

fn group_is_overloaded(pct: u64, s: &SgLbStats) -> bool {
    if s.sum_nr_running <= s.group_weight {
        return false;
    }
    s.group_capacity * 100 < s.group_util * pct || s.group_capacity * pct < s.group_runnable * 100
}

pub(crate) fn group_classify(pct: u64, s: &SgLbStats) -> GroupType {
    if group_is_overloaded(pct, s) {
        GroupType::Overloaded
    } else if s.group_misfit_task_load > 0 {
        GroupType::MisfitTask
    } else if !group_has_capacity(pct, s) {
        GroupType::FullyBusy
    } else {
        GroupType::HasSpare
    }
}

fn update_sd_pick_busiest<S: Snapshots + ?Sized>(
    env: &LbEnv,
    sd: &SchedDomain,
    sds: &SdLbStats,
    sg: &SchedGroup,
    sgs: &SgLbStats,
    snaps: &S,
) -> bool {
    if sgs.sum_h_nr_running == 0 {
        return false;
    }
    let dst_cap = snaps.snapshot(env.dst_cpu).util.capacity_orig.0 as u64;
    if sgs.ty() == GroupType::MisfitTask
        && (!capacity_greater(dst_cap, sg.max_capacity.0 as u64)
            || sds.local_stat.ty() != GroupType::HasSpare)
    {
        return false;
    }
    if sds.busiest.is_none() {
        return !(sd.flags.contains(SdFlags::ASYM_CPUCAPACITY)
            && sgs.ty() <= GroupType::FullyBusy
            && capacity_greater(sg.min_capacity.0 as u64, dst_cap));
    }
    let busiest = &sds.busiest_stat;
    if sgs.ty() > busiest.ty() {
        return true;
    }
    if sgs.ty() < busiest.ty() {
        return false;
    }
    match sgs.ty() {
        GroupType::Overloaded => {
            if sgs.avg_load <= busiest.avg_load {
                return false;
            }
        }
        GroupType::MisfitTask => {
            if sgs.group_misfit_task_load < busiest.group_misfit_task_load {
                return false;
            }
        }
        GroupType::FullyBusy => {
            if sgs.avg_load < busiest.avg_load {
                return false;
            }
        }
        GroupType::HasSpare => {
            if sgs.idle_cpus > busiest.idle_cpus
                || (sgs.idle_cpus == busiest.idle_cpus
                    && sgs.sum_nr_running <= busiest.sum_nr_running)
            {
                return false;
            }
        }
    }
    // Don't pull from a bigger CPU group that is not overloaded.
    !(sd.flags.contains(SdFlags::ASYM_CPUCAPACITY)
        && sgs.ty() <= GroupType::FullyBusy
        && capacity_greater(sg.min_capacity.0 as u64, dst_cap))
}

fn update_sd_lb_stats<S: Snapshots + ?Sized>(
    env: &LbEnv,
    sd: &SchedDomain,
    child_flags: Option<SdFlags>,
    snaps: &S,
    ctx: &LbContext,
) -> SdLbStats {
    let mut sds = SdLbStats {
        prefer_sibling: child_flags.is_some_and(|f| f.contains(SdFlags::PREFER_SIBLING)),
        ..SdLbStats::default()
    };
    // The local group first, as Linux's sd->groups starts with it.
    if let Some(li) = sd.groups.iter().position(|g| g.span.contains(env.dst_cpu)) {
        let s = update_sg_lb_stats(env, sd, &sd.groups[li], true, snaps, ctx);
        sds.local = Some(li);
        sds.local_stat = s;
        sds.overutilized |= s.overutilized;
        sds.overloaded |= s.overloaded;
        sds.total_load += s.group_load;
        sds.total_capacity += s.group_capacity;
    }
    // Then the others in `sd->groups`' circular order, starting after the local group.
    let n = sd.groups.len();
    let start = sds.local.map_or(0, |li| li + 1);
    for gi in (0..n).map(|k| (start + k) % n) {
        let g = &sd.groups[gi];
        if Some(gi) == sds.local {
            continue;
        }
        let s = update_sg_lb_stats(env, sd, g, false, snaps, ctx);
        sds.overutilized |= s.overutilized;
        sds.overloaded |= s.overloaded;
        if update_sd_pick_busiest(env, sd, &sds, g, &s, snaps) {
            sds.busiest = Some(gi);
            sds.busiest_stat = s;
        }
        sds.total_load += s.group_load;
        sds.total_capacity += s.group_capacity;
    }
    sds
}

/// `sibling_imbalance`: tasks to move so both groups have as many per CPU.
pub(crate) fn sibling_imbalance(env: &LbEnv, local: &SgLbStats, busiest: &SgLbStats) -> i64 {
    if env.idle == CpuIdleType::NotIdle || busiest.sum_nr_running == 0 {
        return 0;
    }
    let (nl, nb) = (local.group_weight as i64, busiest.group_weight as i64);
    let (bl, ll) = (busiest.sum_nr_running as i64, local.sum_nr_running as i64);
    if nl == nb {
        return (bl - ll).max(0);
    }
    let imb = (nl * bl - nb * ll).max(0);
    let mut imb = (2 * imb + nl + nb) / (nl + nb);
    if imb <= 1 && ll == 0 && bl > 1 {
        imb = 2;
    }
    imb
}

fn calculate_imbalance(env: &mut LbEnv, sd: &SchedDomain, sds: &mut SdLbStats) {
    let local = sds.local_stat;
    let busiest = sds.busiest_stat;
    if busiest.ty() == GroupType::MisfitTask {
        // Linux's reduced-capacity variant (no SD_ASYM_CPUCAPACITY) cannot occur here:
        // misfit load is only recorded under SD_ASYM_CPUCAPACITY.
        env.migration_type = MigrationType::Misfit;
        env.imbalance = 1;
        return;
    }
    if local.ty() == GroupType::HasSpare {
        if busiest.ty() > GroupType::FullyBusy && !sd.flags.contains(SdFlags::SHARE_LLC) {
            env.migration_type = MigrationType::Util;
            env.imbalance = (local.group_capacity.max(local.group_util) - local.group_util) as i64;
            if env.idle != CpuIdleType::NotIdle && env.imbalance == 0 {
                env.migration_type = MigrationType::Task;
                env.imbalance = 1;
            }
            return;
        }
        env.migration_type = MigrationType::Task;
        env.imbalance = if busiest.group_weight == 1 || sds.prefer_sibling {
            sibling_imbalance(env, &local, &busiest)
        } else {
            (local.idle_cpus as i64 - busiest.idle_cpus as i64).max(0)
        };
        env.imbalance >>= 1;
        return;
    }
    let mut local_avg = local.avg_load;
    if local.ty() < GroupType::Overloaded {
        local_avg = local.group_load * SCHED_CAPACITY_SCALE as u64 / local.group_capacity.max(1);
        sds.local_stat.avg_load = local_avg;
        if local_avg >= busiest.avg_load {
            env.imbalance = 0;
            return;
        }
        sds.avg_load = sds.total_load * SCHED_CAPACITY_SCALE as u64 / sds.total_capacity.max(1);
        if local_avg >= sds.avg_load {
            env.imbalance = 0;
            return;
        }
    }
    env.migration_type = MigrationType::Load;
    let a = busiest.avg_load.saturating_sub(sds.avg_load) * busiest.group_capacity;
    let b = sds.avg_load.saturating_sub(local_avg) * local.group_capacity;
    env.imbalance = (a.min(b) / SCHED_CAPACITY_SCALE as u64) as i64;
}

/// `sched_balance_find_src_group` (`find_busiest_group`): the group to pull from,
/// with `env.imbalance` and `env.migration_type` set, or `None` when balanced.
///
/// Like v6.12's `update_sd_lb_stats`, the statistics also decide the root domain's
/// overutilized flag, left in `env.rd_overutilized`: at the root level (`!sd->parent`,
/// `root`) the flag becomes whether any CPU of the domain is overutilized — the only
/// place it is cleared; below the root it can only be set. The EAS gate that follows
/// reads the updated flag. At the root level they also rewrite the overloaded flag
/// (`set_rd_overloaded(rd, sg_overloaded)`), left in `env.rd_overloaded`.
pub(crate) fn sched_balance_find_src_group<S: Snapshots + ?Sized>(
    env: &mut LbEnv,
    sd: &SchedDomain,
    root: bool,
    child_flags: Option<SdFlags>,
    snaps: &S,
    ctx: &LbContext,
) -> Option<usize> {
    let mut sds = update_sd_lb_stats(env, sd, child_flags, snaps, ctx);
    if root {
        env.rd_overloaded = Some(sds.overloaded);
        env.rd_overutilized = Some(sds.overutilized);
    } else if sds.overutilized {
        env.rd_overutilized = Some(true);
    }
    let overutilized = env.rd_overutilized.unwrap_or(ctx.overutilized);
    let busiest_idx = sds.busiest?;
    let (local, busiest) = (sds.local_stat, sds.busiest_stat);
    let force = 'gates: {
        if busiest.ty() == GroupType::MisfitTask {
            break 'gates true;
        }
        if ctx.eas_active && !overutilized {
            return None;
        }
        if local.ty() > busiest.ty() {
            return None;
        }
        if local.ty() == GroupType::Overloaded {
            if local.avg_load >= busiest.avg_load {
                return None;
            }
            sds.avg_load = sds.total_load * SCHED_CAPACITY_SCALE as u64 / sds.total_capacity.max(1);
            if local.avg_load >= sds.avg_load {
                return None;
            }
            if 100 * busiest.avg_load <= sd.imbalance_pct as u64 * local.avg_load {
                return None;
            }
        }
        if sds.prefer_sibling
            && local.ty() == GroupType::HasSpare
            && sibling_imbalance(env, &local, &busiest) > 1
        {
            break 'gates true;
        }
        if busiest.ty() != GroupType::Overloaded {
            if env.idle == CpuIdleType::NotIdle {
                return None;
            }
            if busiest.group_weight > 1 && local.idle_cpus <= busiest.idle_cpus + 1 {
                return None;
            }
            if busiest.sum_h_nr_running == 1 {
                return None;
            }
        }
        true
    };
    debug_assert!(force);
    calculate_imbalance(env, sd, &mut sds);
    (env.imbalance > 0).then_some(busiest_idx)
}

/// `sched_balance_find_src_rq` (`find_busiest_queue`).
pub(crate) fn sched_balance_find_src_rq<S: Snapshots + ?Sized>(
    env: &LbEnv,
    sd: &SchedDomain,
    group: &SchedGroup,
    snaps: &S,
    ctx: &LbContext,
) -> Option<CpuId> {
    let mut busiest = None;
    let (mut busiest_load, mut busiest_capacity, mut busiest_util, mut busiest_nr) =
        (0u64, 1u64, 0u64, 0u32);
    let dst_cap = snaps.snapshot(env.dst_cpu).util.capacity_orig.0 as u64;
    for i in group.span.and(env.cpus).iter() {
        let rq = snaps.snapshot(i);
        let nr_running = rq.nr_running;
        if nr_running == 0 {
            continue;
        }
        let capacity = rq.util.capacity_orig.0 as u64;
        if sd.flags.contains(SdFlags::ASYM_CPUCAPACITY)
            && !capacity_greater(dst_cap, capacity)
            && nr_running == 1
        {
            continue;
        }
        match env.migration_type {
            MigrationType::Load => {
                let load = rq.load_avg;
                // check_cpu_capacity is always false without capacity pressure.
                if nr_running == 1 && load as i64 > env.imbalance {
                    continue;
                }
                if load * busiest_capacity > busiest_load * capacity {
                    busiest_load = load;
                    busiest_capacity = capacity;
                    busiest = Some(i);
                }
            }
            MigrationType::Util => {
                let util = cpu_util_cfs_boost(&rq.util, ctx.features).0 as u64;
                if nr_running <= 1 {
                    continue;
                }
                if busiest_util < util {
                    busiest_util = util;
                    busiest = Some(i);
                }
            }
            MigrationType::Task => {
                if busiest_nr < nr_running {
                    busiest_nr = nr_running;
                    busiest = Some(i);
                }
            }
            MigrationType::Misfit => {
                if rq.misfit_task_load > busiest_load {
                    busiest_load = rq.misfit_task_load;
                    busiest = Some(i);
                }
            }
        }
    }
    busiest
}

/// `need_active_balance`: misfit, or a migrate_task balance that failed repeatedly.
pub(crate) fn need_active_balance(env: &LbEnv, sd: &SchedDomain) -> bool {
    env.migration_type == MigrationType::Misfit
        || (env.migration_type == MigrationType::Task
            && sd.nr_balance_failed > sd.cache_nice_tries + 2)
}

/// `rd->overloaded` as the balancer would have last set it: some CPU has more than
/// one task, or a misfit task.
pub(crate) fn rd_overloaded<S: Snapshots + ?Sized>(snaps: &S) -> bool {
    snaps.any_overloaded()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::MigrationType;
    use crate::types::CpuMask;

    #[test]
    fn capacity_greater_is_about_five_percent() {
        assert!(capacity_greater(1024, 446));
        assert!(!capacity_greater(1024, 1000));
        assert!(capacity_greater(1080, 1024));
    }

    #[test]
    fn sibling_imbalance_rounds_per_core() {
        let env = LbEnv {
            dst_cpu: CpuId(0),
            dst_grpmask: CpuMask::of(CpuId(0)),
            new_dst_cpu: CpuId(0),
            src_cpu: CpuId(1),
            idle: CpuIdleType::Idle,
            imbalance: 0,
            cpus: CpuMask::first_n(6),
            flags: 0,
            loop_: 0,
            loop_max: 0,
            migration_type: MigrationType::Task,
            rd_overutilized: None,
            rd_overloaded: None,
        };
        let g = |w, n| SgLbStats {
            group_weight: w,
            sum_nr_running: n,
            ..SgLbStats::default()
        };
        // Equal sizes: the difference.
        assert_eq!(sibling_imbalance(&env, &g(2, 0), &g(2, 3)), 3);
        // 2 vs 4 cores, 0 vs 2 tasks: (2*(2*2) + 6) / 6 = 2.
        assert_eq!(sibling_imbalance(&env, &g(2, 0), &g(4, 2)), 2);
    }
}
