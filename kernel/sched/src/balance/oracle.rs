//! The load balancer as it was before it borrowed one run queue at a time: every
//! function takes `&mut` of all run queues. Kept, unchanged but for the state that moved
//! (`avg_idle` now lives in the run queue), as the oracle of the property test that the
//! one-rq-at-a-time version makes the same moves.
#![allow(dead_code, clippy::all)]

use alloc::vec::Vec;
use core::ops::IndexMut;

use super::{
    ActiveBalance, BalanceError, BalanceReport, CpuIdleType, Detached, GroupType, LbContext,
    LbResult, MigrationType, SchedDomain, SchedDomains, SchedGroup, SdFlags, MAX_NR_MIGRATE,
    MAX_PINNED_INTERVAL_MS,
};
use crate::cpu_util::{cpu_util_cfs, cpu_util_cfs_boost, task_fits_cpu, CpuCapacityInfo, TaskUtil};
use crate::eas::{cpu_overutilized, task_util_est};
use crate::features::{Feature, SchedFeatures};
use crate::rq::{Rq, Task};
use crate::types::{CpuId, CpuMask, Nanos, TaskId, Util, SCHED_CAPACITY_SCALE};
use crate::uclamp::uclamp_eff_range;

/// The run queues a balance may touch, indexed by `CpuId::index`: a slice in tests,
/// the simulator's CPUs, or the kernel's locked per-CPU run queues (the kernel takes
/// `double_rq_lock(dst, src)` before handing them over).
pub trait RqSet: IndexMut<usize, Output = Rq> {
    /// How many CPUs (`rqs[0..nr_cpus()]` are valid).
    fn nr_cpus(&self) -> usize;
}

impl RqSet for [Rq] {
    fn nr_cpus(&self) -> usize {
        self.len()
    }
}

impl RqSet for Vec<Rq> {
    fn nr_cpus(&self) -> usize {
        self.len()
    }
}

// ---- tick, softirq, periodic and newidle balance ------------------------------------

/// `sched_balance_trigger` (`trigger_load_balance`), called from the tick: should
/// SCHED_SOFTIRQ be raised on this CPU? (`time_after_eq(jiffies, rq->next_balance)`.)
/// The NOHZ kick is not modelled.
pub(super) fn sched_balance_trigger(now: Nanos, rq: &Rq) -> bool {
    now >= rq.next_balance()
}

/// `sched_balance_softirq` (`run_rebalance_domains`) on `cpu`: update blocked
/// averages, then [`sched_balance_domains`] with the idle state the tick saw
/// (`rq->idle_balance`).
pub(super) fn sched_balance_softirq<R: RqSet + ?Sized>(
    sds: &mut SchedDomains,
    cpu: CpuId,
    rqs: &mut R,
    now: Nanos,
    ctx: &LbContext,
) -> Result<BalanceReport, BalanceError> {
    check_rqs(sds, rqs)?;
    let rq = &mut rqs[cpu.index()];
    rq.update_blocked_averages();
    let idle = if idle_cpu(rq) {
        CpuIdleType::Idle
    } else {
        CpuIdleType::NotIdle
    };
    sched_balance_domains(sds, cpu, rqs, idle, now, ctx)
}

/// `sched_balance_domains` (`rebalance_domains`): walk `cpu`'s domains bottom-up,
/// balance those whose interval has elapsed, back off or reset their intervals, and
/// set `rq->next_balance` to the earliest next deadline.
pub(super) fn sched_balance_domains<R: RqSet + ?Sized>(
    sds: &mut SchedDomains,
    cpu: CpuId,
    rqs: &mut R,
    mut idle: CpuIdleType,
    now: Nanos,
    ctx: &LbContext,
) -> Result<BalanceReport, BalanceError> {
    check_rqs(sds, rqs)?;
    let mut ctx = *ctx;
    if cpu.index() >= sds.cpus.len() {
        return Err(BalanceError::UnknownCpu { cpu });
    }
    let jiffies = sds.jiffies(now);
    let mut report = BalanceReport::default();
    let mut busy = idle != CpuIdleType::Idle;
    let mut next_balance = jiffies + 60 * sds.hz as u64;
    let mut update_next_balance = false;
    let mut continue_balancing = true;
    let mut max_cost = 0u64;
    let mut need_decay = false;
    let mut sd_list = core::mem::take(&mut sds.cpus[cpu.index()].sd);
    for level in 0..sd_list.len() {
        let (lower, upper) = sd_list.split_at_mut(level);
        let sd = &mut upper[0];
        let child_flags = lower.last().map(|c| c.flags);
        // v6.12 overwrites it at each level: the last level's decay decides.
        need_decay = sds.update_newidle_cost(sd, 0, jiffies);
        max_cost += sd.max_newidle_lb_cost;
        if !continue_balancing {
            if need_decay {
                continue;
            }
            break;
        }
        let mut interval = sds.get_sd_balance_interval(sd, busy);
        if jiffies >= sd.last_balance + interval {
            let r = sched_balance_rq(
                sds,
                cpu,
                rqs,
                sd,
                child_flags,
                idle,
                &mut continue_balancing,
                &ctx,
            )?;
            report.add(&r);
            if let Some(v) = r.overutilized {
                ctx.overutilized = v;
            }
            if r.ld_moved > 0 {
                idle = if idle_cpu(&rqs[cpu.index()]) {
                    CpuIdleType::Idle
                } else {
                    CpuIdleType::NotIdle
                };
                busy = idle != CpuIdleType::Idle;
            }
            sd.last_balance = jiffies;
            interval = sds.get_sd_balance_interval(sd, busy);
        }
        if next_balance > sd.last_balance + interval {
            next_balance = sd.last_balance + interval;
            update_next_balance = true;
        }
    }
    let b = &mut sds.cpus[cpu.index()];
    b.sd = sd_list;
    if need_decay {
        b.max_idle_balance_cost = max_cost.max(ctx.migration_cost_ns);
    }
    if update_next_balance {
        let t = sds.jiffies_to_nanos(next_balance);
        rqs[cpu.index()].set_next_balance(t);
    }
    Ok(report)
}

/// `sched_balance_newidle` (`newidle_balance`): `cpu` is about to go idle; try to
/// pull work from its domains, bottom-up, while the expected idle time (`avg_idle`)
/// exceeds the cost of balancing. `sched_clock` reads `sched_clock_cpu` (ns) to
/// measure that cost. Pulls `rq->next_balance` earlier, never later: under
/// `AGGRESSIVE_NEXT_BALANCE` (Linux) from every domain visited, even unbalanced ones
/// with a stale `last_balance`; without it (seed 002) only from domains balanced
/// here, which stamp `last_balance`.
pub(super) fn sched_balance_newidle<R: RqSet + ?Sized>(
    sds: &mut SchedDomains,
    cpu: CpuId,
    rqs: &mut R,
    now: Nanos,
    ctx: &LbContext,
    sched_clock: &mut dyn FnMut() -> u64,
) -> Result<BalanceReport, BalanceError> {
    check_rqs(sds, rqs)?;
    let mut ctx = *ctx;
    if cpu.index() >= sds.cpus.len() {
        return Err(BalanceError::UnknownCpu { cpu });
    }
    let aggressive = ctx.features.enabled(Feature::AGGRESSIVE_NEXT_BALANCE);
    let jiffies = sds.jiffies(now);
    let mut next_balance = jiffies + sds.hz as u64;
    let mut report = BalanceReport::default();
    let mut pulled = false;
    // update_misfit_status(NULL, rq): nothing runs, nothing misfits.
    if sds.asym_cpucapacity {
        rqs[cpu.index()].set_misfit_task_load(0);
    }
    let overloaded = rd_overloaded(rqs);
    let avg_idle = rqs[cpu.index()].avg_idle();
    let mut sd_list = core::mem::take(&mut sds.cpus[cpu.index()].sd);
    let skip = match sd_list.first() {
        Some(sd) => !overloaded || avg_idle < sd.max_newidle_lb_cost,
        None => !overloaded,
    };
    let mut curr_cost = 0u64;
    if skip {
        if let (true, Some(sd)) = (aggressive, sd_list.first()) {
            sds.update_next_balance(sd, &mut next_balance);
        }
    } else {
        let mut t0 = sched_clock();
        rqs[cpu.index()].update_blocked_averages();
        for level in 0..sd_list.len() {
            let (lower, upper) = sd_list.split_at_mut(level);
            let sd = &mut upper[0];
            let child_flags = lower.last().map(|c| c.flags);
            let mut continue_balancing = true;
            if aggressive {
                sds.update_next_balance(sd, &mut next_balance);
            }
            if avg_idle < curr_cost + sd.max_newidle_lb_cost {
                break;
            }
            if sd.flags.contains(SdFlags::BALANCE_NEWIDLE) {
                let r = sched_balance_rq(
                    sds,
                    cpu,
                    rqs,
                    sd,
                    child_flags,
                    CpuIdleType::NewlyIdle,
                    &mut continue_balancing,
                    &ctx,
                )?;
                report.add(&r);
                if let Some(v) = r.overutilized {
                    ctx.overutilized = v;
                }
                pulled = r.ld_moved > 0;
                let t1 = sched_clock();
                let domain_cost = t1.saturating_sub(t0);
                sds.update_newidle_cost(sd, domain_cost, jiffies);
                curr_cost += domain_cost;
                t0 = t1;
                if !aggressive {
                    sd.last_balance = jiffies;
                    sds.update_next_balance(sd, &mut next_balance);
                }
            }
            if pulled || !continue_balancing {
                break;
            }
        }
    }
    let b = &mut sds.cpus[cpu.index()];
    b.sd = sd_list;
    if curr_cost > b.max_idle_balance_cost {
        b.max_idle_balance_cost = curr_cost;
    }
    let rq = &mut rqs[cpu.index()];
    if rq.h_nr_running() > 0 {
        pulled = true;
    }
    let nb = next_balance.saturating_mul(sds.tick_nsec);
    if rq.next_balance().0 > nb {
        rq.set_next_balance(Nanos(nb));
    }
    report.pulled = pulled;
    Ok(report)
}

/// `rd->overloaded` as the balancer would have last set it: some CPU has more than
/// one task, or a misfit task.
fn rd_overloaded<R: RqSet + ?Sized>(rqs: &R) -> bool {
    (0..rqs.nr_cpus()).any(|i| rqs[i].nr_running() > 1 || rqs[i].misfit_task_load() > 0)
}

fn idle_cpu(rq: &Rq) -> bool {
    rq.nr_running() == 0
}

// ---- sched_balance_rq ----------------------------------------------------------------

const LBF_ALL_PINNED: u32 = 0x01;
const LBF_DST_PINNED: u32 = 0x04;
const LBF_SOME_PINNED: u32 = 0x08;
const LBF_ACTIVE_LB: u32 = 0x10;

/// `struct lb_env`.
struct LbEnv {
    dst_cpu: CpuId,
    dst_grpmask: CpuMask,
    new_dst_cpu: CpuId,
    src_cpu: CpuId,
    idle: CpuIdleType,
    imbalance: i64,
    cpus: CpuMask,
    flags: u32,
    loop_: u32,
    loop_max: u32,
    migration_type: MigrationType,
    rd_overutilized: Option<bool>,
}

/// `struct sg_lb_stats`.
#[derive(Clone, Copy, Debug, Default)]
struct SgLbStats {
    avg_load: u64,
    group_load: u64,
    group_capacity: u64,
    group_util: u64,
    group_runnable: u64,
    sum_nr_running: u32,
    sum_h_nr_running: u32,
    idle_cpus: u32,
    group_weight: u32,
    group_type: Option<GroupType>,
    group_misfit_task_load: u64,
    overutilized: bool,
}

impl SgLbStats {
    fn ty(&self) -> GroupType {
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
    overutilized: bool,
}

/// `sched_balance_rq` (`load_balance`): balance `sd` of `this_cpu` by pulling tasks
/// to it (or to another CPU of its group when affinity pins them). `child_flags`
/// are the flags of the domain below `sd` (`sd->child`), if any. Clears
/// `continue_balancing` when another CPU of the group is the one that should balance.
#[allow(clippy::too_many_arguments)]
pub(super) fn sched_balance_rq<R: RqSet + ?Sized>(
    sds: &SchedDomains,
    this_cpu: CpuId,
    rqs: &mut R,
    sd: &mut SchedDomain,
    child_flags: Option<SdFlags>,
    idle: CpuIdleType,
    continue_balancing: &mut bool,
    ctx: &LbContext,
) -> Result<LbResult, BalanceError> {
    check_rqs(sds, rqs)?;
    let local_span = sd
        .groups
        .iter()
        .find(|g| g.span.contains(this_cpu))
        .map(|g| g.span)
        .ok_or(BalanceError::UnknownCpu { cpu: this_cpu })?;
    let mut env = LbEnv {
        dst_cpu: this_cpu,
        dst_grpmask: local_span,
        new_dst_cpu: this_cpu,
        src_cpu: this_cpu,
        idle,
        imbalance: 0,
        cpus: sd.span,
        flags: 0,
        loop_: 0,
        loop_max: 0,
        migration_type: MigrationType::Load,
        rd_overutilized: None,
    };
    let root = sd.span.weight() as usize == sds.cpus.len();
    let mut result = LbResult::default();
    let mut ld_moved = 0u32;
    let balanced = 'redo: loop {
        if !should_we_balance(&env, sd, rqs) {
            *continue_balancing = false;
            break 'redo true;
        }
        let found = sched_balance_find_src_group(&mut env, sd, root, child_flags, rqs, ctx);
        result.overutilized = env.rd_overutilized;
        let Some(group) = found else {
            break 'redo true;
        };
        result.migration_type = Some(env.migration_type);
        let Some(busiest) = sched_balance_find_src_rq(&env, sd, &sd.groups[group], rqs, ctx) else {
            break 'redo true;
        };
        env.src_cpu = busiest;
        env.flags |= LBF_ALL_PINNED;
        let src_nr = rqs[busiest.index()].nr_running();
        if src_nr > 1 {
            env.loop_max = nr_migrate(ctx).min(src_nr);
            loop {
                let moved = move_tasks(&mut env, sd, rqs, ctx)?;
                ld_moved += moved;
                if env.flags & LBF_DST_PINNED != 0 && env.imbalance > 0 {
                    // Some task could not go to dst_cpu but may go to another CPU of
                    // its group: retry there.
                    env.cpus.clear(env.dst_cpu);
                    env.dst_cpu = env.new_dst_cpu;
                    env.flags &= !LBF_DST_PINNED;
                    env.loop_ = 0;
                    continue;
                }
                break;
            }
            if env.flags & LBF_ALL_PINNED != 0 {
                env.cpus.clear(busiest);
                if env.cpus.and_not(env.dst_grpmask) != CpuMask::EMPTY {
                    env.loop_ = 0;
                    env.dst_cpu = this_cpu;
                    continue 'redo;
                }
                // out_all_pinned
                sd.nr_balance_failed = 0;
                backoff(sd, &env);
                result.ld_moved = 0;
                return Ok(result);
            }
        }
        break 'redo false;
    };
    if balanced {
        sd.nr_balance_failed = 0;
        backoff(sd, &env);
        result.ld_moved = 0;
        return Ok(result);
    }
    let mut active = false;
    if ld_moved == 0 {
        if env.idle != CpuIdleType::NewlyIdle && env.migration_type != MigrationType::Misfit {
            sd.nr_balance_failed += 1;
        }
        if need_active_balance(&env, sd) {
            let src = &rqs[env.src_cpu.index()];
            let curr_allowed = src
                .curr()
                .and_then(|c| src.task(c))
                .map(|t| t.cpus_allowed.contains(this_cpu));
            if curr_allowed == Some(true) {
                active = true;
                result.active_balance = Some(ActiveBalance {
                    src: env.src_cpu,
                    dst: this_cpu,
                    level: sd.level,
                    migration_type: env.migration_type,
                });
            } else if curr_allowed == Some(false) {
                // out_one_pinned: the running task cannot come here. Unlike
                // out_all_pinned, nr_balance_failed keeps counting.
                backoff(sd, &env);
                return Ok(result);
            }
        }
    } else {
        sd.nr_balance_failed = 0;
    }
    if !active || need_active_balance(&env, sd) {
        sd.balance_interval = sd.min_interval;
    }
    result.ld_moved = ld_moved;
    Ok(result)
}

/// `out_one_pinned`: double the interval, unless newidle or misfit.
fn backoff(sd: &mut SchedDomain, env: &LbEnv) {
    if env.idle == CpuIdleType::NewlyIdle || env.migration_type == MigrationType::Misfit {
        return;
    }
    if (env.flags & LBF_ALL_PINNED != 0 && sd.balance_interval < MAX_PINNED_INTERVAL_MS)
        || sd.balance_interval < sd.max_interval
    {
        sd.balance_interval *= 2;
    }
}

/// `should_we_balance`: newidle always may (if still idle); otherwise only the first
/// idle CPU of the local group, or its first CPU when none is idle.
fn should_we_balance<R: RqSet + ?Sized>(env: &LbEnv, sd: &SchedDomain, rqs: &R) -> bool {
    let _ = sd;
    if env.idle == CpuIdleType::NewlyIdle {
        return rqs[env.dst_cpu.index()].nr_running() == 0;
    }
    let group = env.dst_grpmask.and(env.cpus);
    let first_idle = group.iter().find(|c| idle_cpu(&rqs[c.index()]));
    match first_idle.or_else(|| group.first()) {
        Some(c) => c == env.dst_cpu,
        None => false,
    }
}

/// `capacity_greater(a, b)`: a is more than ~5% bigger.
fn capacity_greater(a: u64, b: u64) -> bool {
    a * 1024 > b * 1078
}

fn update_sg_lb_stats<R: RqSet + ?Sized>(
    env: &LbEnv,
    sd: &SchedDomain,
    group: &SchedGroup,
    local: bool,
    rqs: &R,
    ctx: &LbContext,
) -> SgLbStats {
    let mut s = SgLbStats::default();
    for i in group.span.and(env.cpus).iter() {
        let rq = &rqs[i.index()];
        s.group_load += rq.cfs_avg().load_avg;
        s.group_util += cpu_util_cfs(&rq.cpu_snapshot(), ctx.features).0 as u64;
        s.group_runnable += rq.cfs_avg().runnable_avg;
        s.sum_h_nr_running += rq.h_nr_running();
        s.sum_nr_running += rq.nr_running();
        if cpu_overutilized(&rq.snapshot(), ctx.features, ctx.uclamp_used) {
            s.overutilized = true;
        }
        if rq.nr_running() == 0 {
            s.idle_cpus += 1;
            continue;
        }
        if local {
            continue;
        }
        if sd.flags.contains(SdFlags::ASYM_CPUCAPACITY)
            && s.group_misfit_task_load < rq.misfit_task_load()
        {
            s.group_misfit_task_load = rq.misfit_task_load();
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

fn group_classify(pct: u64, s: &SgLbStats) -> GroupType {
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

fn update_sd_pick_busiest<R: RqSet + ?Sized>(
    env: &LbEnv,
    sd: &SchedDomain,
    sds: &SdLbStats,
    sg: &SchedGroup,
    sgs: &SgLbStats,
    rqs: &R,
) -> bool {
    if sgs.sum_h_nr_running == 0 {
        return false;
    }
    let dst_cap = rqs[env.dst_cpu.index()].capacity_orig().0 as u64;
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

fn update_sd_lb_stats<R: RqSet + ?Sized>(
    env: &LbEnv,
    sd: &SchedDomain,
    child_flags: Option<SdFlags>,
    rqs: &R,
    ctx: &LbContext,
) -> SdLbStats {
    let mut sds = SdLbStats {
        prefer_sibling: child_flags.is_some_and(|f| f.contains(SdFlags::PREFER_SIBLING)),
        ..SdLbStats::default()
    };
    // The local group first, as Linux's sd->groups starts with it.
    if let Some(li) = sd.groups.iter().position(|g| g.span.contains(env.dst_cpu)) {
        let s = update_sg_lb_stats(env, sd, &sd.groups[li], true, rqs, ctx);
        sds.local = Some(li);
        sds.local_stat = s;
        sds.overutilized |= s.overutilized;
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
        let s = update_sg_lb_stats(env, sd, g, false, rqs, ctx);
        sds.overutilized |= s.overutilized;
        if update_sd_pick_busiest(env, sd, &sds, g, &s, rqs) {
            sds.busiest = Some(gi);
            sds.busiest_stat = s;
        }
        sds.total_load += s.group_load;
        sds.total_capacity += s.group_capacity;
    }
    sds
}

/// `sibling_imbalance`: tasks to move so both groups have as many per CPU.
fn sibling_imbalance(env: &LbEnv, local: &SgLbStats, busiest: &SgLbStats) -> i64 {
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
fn sched_balance_find_src_group<R: RqSet + ?Sized>(
    env: &mut LbEnv,
    sd: &SchedDomain,
    root: bool,
    child_flags: Option<SdFlags>,
    rqs: &R,
    ctx: &LbContext,
) -> Option<usize> {
    let mut sds = update_sd_lb_stats(env, sd, child_flags, rqs, ctx);
    if root {
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
fn sched_balance_find_src_rq<R: RqSet + ?Sized>(
    env: &LbEnv,
    sd: &SchedDomain,
    group: &SchedGroup,
    rqs: &R,
    ctx: &LbContext,
) -> Option<CpuId> {
    let mut busiest = None;
    let (mut busiest_load, mut busiest_capacity, mut busiest_util, mut busiest_nr) =
        (0u64, 1u64, 0u64, 0u32);
    let dst_cap = rqs[env.dst_cpu.index()].capacity_orig().0 as u64;
    for i in group.span.and(env.cpus).iter() {
        let rq = &rqs[i.index()];
        let nr_running = rq.h_nr_running();
        if nr_running == 0 {
            continue;
        }
        let capacity = rq.capacity_orig().0 as u64;
        if sd.flags.contains(SdFlags::ASYM_CPUCAPACITY)
            && !capacity_greater(dst_cap, capacity)
            && nr_running == 1
        {
            continue;
        }
        match env.migration_type {
            MigrationType::Load => {
                let load = rq.cfs_avg().load_avg;
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
                let util = cpu_util_cfs_boost(&rq.cpu_snapshot(), ctx.features).0 as u64;
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
                if rq.misfit_task_load() > busiest_load {
                    busiest_load = rq.misfit_task_load();
                    busiest = Some(i);
                }
            }
        }
    }
    busiest
}

/// `need_active_balance`: misfit, or a migrate_task balance that failed repeatedly.
fn need_active_balance(env: &LbEnv, sd: &SchedDomain) -> bool {
    env.migration_type == MigrationType::Misfit
        || (env.migration_type == MigrationType::Task
            && sd.nr_balance_failed > sd.cache_nice_tries + 2)
}

/// `detach_tasks` + `attach_tasks` from `env.src_cpu` to `env.dst_cpu`.
fn move_tasks<R: RqSet + ?Sized>(
    env: &mut LbEnv,
    sd: &SchedDomain,
    rqs: &mut R,
    ctx: &LbContext,
) -> Result<u32, BalanceError> {
    let mut detached = Detached::new();
    detach_tasks_env(env, sd, rqs, ctx, &mut detached);
    let n = detached.len() as u32;
    for t in detached {
        attach_one(rqs, env.dst_cpu, env.src_cpu, t)?;
    }
    Ok(n)
}

fn attach_one<R: RqSet + ?Sized>(
    rqs: &mut R,
    dst: CpuId,
    src: CpuId,
    t: Task,
) -> Result<(), BalanceError> {
    let id = t.id;
    if let Err(e) = rqs[dst.index()].attach_task(t) {
        rqs[src.index()]
            .attach_task(e.task)
            .map_err(|_| BalanceError::AttachFailed { task: id, dst })?;
    }
    Ok(())
}

/// `sysctl_sched_nr_migrate` as used: at most [`MAX_NR_MIGRATE`].
fn nr_migrate(ctx: &LbContext) -> u32 {
    ctx.nr_migrate.min(MAX_NR_MIGRATE as u32)
}

/// One `detach_tasks` attempt from `src` for an imbalance of `imbalance` of kind
/// `migration_type`, as a balance from `dst` at domain `sd` would do it; returns the
/// detached tasks (the caller attaches them). Exposed for tests of the ordering:
/// least recently run first (the `cfs_tasks` tail), or, under `LB_BIGGEST_TASK`,
/// biggest first within the window of the `loop_max` least recently run tasks;
/// skipped tasks rotate to the head so that repeated attempts look at others.
#[allow(clippy::too_many_arguments)]
pub(super) fn detach_tasks<R: RqSet + ?Sized>(
    rqs: &mut R,
    sd: &SchedDomain,
    src: CpuId,
    dst: CpuId,
    idle: CpuIdleType,
    migration_type: MigrationType,
    imbalance: i64,
    ctx: &LbContext,
) -> Detached {
    let mut env = LbEnv {
        dst_cpu: dst,
        dst_grpmask: CpuMask::of(dst),
        new_dst_cpu: dst,
        src_cpu: src,
        idle,
        imbalance,
        cpus: sd.span,
        flags: LBF_ALL_PINNED,
        loop_: 0,
        loop_max: nr_migrate(ctx).min(rqs[src.index()].nr_running()),
        migration_type,
        rd_overutilized: None,
    };
    let mut out = Detached::new();
    detach_tasks_env(&mut env, sd, rqs, ctx, &mut out);
    out
}

fn task_load(p: &Task) -> u64 {
    p.avg.load_avg
}

fn task_util(p: &Task, ctx: &LbContext) -> u64 {
    let cpu = p.cpu.unwrap_or(CpuId(0));
    task_util_est(&TaskUtil::from_avg(&p.avg, cpu, true), ctx.features).0 as u64
}

fn detach_tasks_env<R: RqSet + ?Sized>(
    env: &mut LbEnv,
    sd: &SchedDomain,
    rqs: &mut R,
    ctx: &LbContext,
    out: &mut Detached,
) {
    let src = env.src_cpu.index();
    if rqs[src].nr_running() <= 1 {
        env.flags &= !LBF_ALL_PINNED;
        return;
    }
    if env.imbalance <= 0 {
        return;
    }
    let biggest = ctx.features.enabled(Feature::LB_BIGGEST_TASK);
    // The window this attempt may examine: the loop_max least recently run tasks.
    let mut window: heapless::Vec<(TaskId, u64), MAX_NR_MIGRATE> = rqs[src]
        .cfs_tasks()
        .rev()
        .take(env.loop_max.saturating_sub(env.loop_) as usize)
        .take(MAX_NR_MIGRATE)
        .map(|id| (id, 0))
        .collect();
    if biggest {
        for (id, key) in window.iter_mut() {
            *key = rqs[src].task(*id).map_or(0, |p| match env.migration_type {
                MigrationType::Util => task_util(p, ctx),
                _ => task_load(p),
            });
        }
        // Stable: equal sizes keep least-recently-run first.
        insertion_sort_desc(&mut window);
    }
    for (id, _) in window {
        if env.idle != CpuIdleType::NotIdle && rqs[src].nr_running() <= 1 {
            break;
        }
        env.loop_ += 1;
        if env.loop_ > env.loop_max {
            break;
        }
        let Some(p) = rqs[src].task(id) else {
            continue;
        };
        let ok = can_migrate_task(p, env, sd, rqs, ctx) && {
            match env.migration_type {
                MigrationType::Load => {
                    let load = task_load(p).max(1);
                    let lb_min_skip = ctx.features.enabled(Feature::LB_MIN)
                        && load < 16
                        && sd.nr_balance_failed == 0;
                    if lb_min_skip || shr_bound(load, sd.nr_balance_failed) as i64 > env.imbalance {
                        false
                    } else {
                        env.imbalance -= load as i64;
                        true
                    }
                }
                MigrationType::Util => {
                    let util = task_util(p, ctx);
                    if shr_bound(util, sd.nr_balance_failed) as i64 > env.imbalance {
                        false
                    } else {
                        env.imbalance -= util as i64;
                        true
                    }
                }
                MigrationType::Task => {
                    env.imbalance -= 1;
                    true
                }
                MigrationType::Misfit => {
                    let cap = rqs[src].capacity_orig();
                    let clamp = uclamp_eff_range(&p.uclamp, &rqs[src].uclamp_sysctl(), false);
                    let fits = task_fits_cpu(
                        Util(task_util(p, ctx) as u32),
                        clamp,
                        CpuCapacityInfo::unpressured(cap),
                        ctx.uclamp_used,
                        ctx.features,
                    );
                    if fits {
                        false
                    } else {
                        env.imbalance = 0;
                        true
                    }
                }
            }
        };
        if !ok {
            // list_move to the head: the next attempt starts with other tasks.
            rqs[src].cfs_tasks_move_to_head(id);
            continue;
        }
        match rqs[src].detach_task(id) {
            // At most loop_max ≤ MAX_NR_MIGRATE tasks are detached: it always fits.
            Ok(t) => {
                if let Err(t) = out.push(t) {
                    let _ = rqs[src].attach_task(t);
                    break;
                }
            }
            Err(_) => continue,
        }
        // CONFIG_PREEMPTION: one task is enough to end newidle.
        if env.idle == CpuIdleType::NewlyIdle {
            break;
        }
        if env.imbalance <= 0 {
            break;
        }
    }
}

/// Stable insertion sort by key, largest first (no allocation; at most
/// [`MAX_NR_MIGRATE`] elements).
fn insertion_sort_desc(v: &mut [(TaskId, u64)]) {
    for i in 1..v.len() {
        let mut j = i;
        while j > 0 && v[j - 1].1 < v[j].1 {
            v.swap(j - 1, j);
            j -= 1;
        }
    }
}

fn shr_bound(v: u64, s: u32) -> u64 {
    v >> s.min(63)
}

/// `can_migrate_task`: allowed on dst (else note a pinned task and maybe another
/// dst of the group), not running, and not cache hot unless balancing kept failing.
fn can_migrate_task<R: RqSet + ?Sized>(
    p: &Task,
    env: &mut LbEnv,
    sd: &SchedDomain,
    rqs: &R,
    ctx: &LbContext,
) -> bool {
    if !p.cpus_allowed.contains(env.dst_cpu) {
        env.flags |= LBF_SOME_PINNED;
        if env.idle == CpuIdleType::NewlyIdle || env.flags & (LBF_DST_PINNED | LBF_ACTIVE_LB) != 0 {
            return false;
        }
        if let Some(c) = env
            .dst_grpmask
            .and(env.cpus)
            .iter()
            .find(|&c| c != env.dst_cpu && p.cpus_allowed.contains(c))
        {
            env.flags |= LBF_DST_PINNED;
            env.new_dst_cpu = c;
        }
        return false;
    }
    env.flags &= !LBF_ALL_PINNED;
    let src = &rqs[env.src_cpu.index()];
    if src.curr() == Some(p.id) {
        return false;
    }
    if env.flags & LBF_ACTIVE_LB != 0 {
        return true;
    }
    !task_hot(p, src, ctx) || sd.nr_balance_failed > sd.cache_nice_tries
}

/// `task_hot`: ran less than `sysctl_sched_migration_cost` ago.
fn task_hot(p: &Task, src: &Rq, ctx: &LbContext) -> bool {
    if ctx.migration_cost_ns == 0 || p.se.exec_start == 0 {
        return false;
    }
    let delta = src.clock_task().0.saturating_sub(p.se.exec_start);
    delta < ctx.migration_cost_ns
}

/// `active_load_balance_cpu_stop` on `src` (after the caller preempted its running
/// task): move one task that may run on `dst`, least recently run first, ignoring
/// cache hotness (`LBF_ACTIVE_LB`). Returns the moved task's id.
pub(super) fn active_load_balance_cpu_stop<R: RqSet + ?Sized>(
    sds: &mut SchedDomains,
    rqs: &mut R,
    req: &ActiveBalance,
) -> Result<Option<TaskId>, BalanceError> {
    check_rqs(sds, rqs)?;
    if rqs[req.src.index()].nr_running() == 0 || req.src == req.dst {
        return Ok(None);
    }
    let Some(sd) = sds.cpus[req.dst.index()]
        .sd
        .iter()
        .find(|sd| sd.span.contains(req.src))
    else {
        return Ok(None);
    };
    let mut env = LbEnv {
        dst_cpu: req.dst,
        dst_grpmask: CpuMask::of(req.dst),
        new_dst_cpu: req.dst,
        src_cpu: req.src,
        idle: CpuIdleType::Idle,
        imbalance: 1,
        cpus: sd.span,
        flags: LBF_ACTIVE_LB,
        loop_: 0,
        loop_max: 0,
        migration_type: MigrationType::Load,
        rd_overutilized: None,
    };
    // detach_one_task: the first movable task from the tail. The first one
    // can_migrate_task accepts is detached; the walk ends there.
    let ctx = LbContext::new(SchedFeatures::none());
    let src = &rqs[req.src.index()];
    let found = src.cfs_tasks().rev().find(|&id| {
        src.task(id)
            .is_some_and(|p| can_migrate_task(p, &mut env, sd, rqs, &ctx))
    });
    let Some(id) = found else {
        return Ok(None);
    };
    match rqs[req.src.index()].detach_task(id) {
        Ok(t) => {
            if let Some(sd) = sds.cpus[req.dst.index()]
                .sd
                .iter_mut()
                .find(|sd| sd.span.contains(req.src))
            {
                sd.nr_balance_failed = 0;
            }
            attach_one(rqs, req.dst, req.src, t)?;
            Ok(Some(id))
        }
        Err(_) => Ok(None),
    }
}

fn check_rqs<R: RqSet + ?Sized>(sds: &SchedDomains, rqs: &R) -> Result<(), BalanceError> {
    for i in 0..sds.cpus.len().max(rqs.nr_cpus()) {
        let found = (i < rqs.nr_cpus()).then(|| rqs[i].cpu());
        if found.map(|c| c.index()) != Some(i) || i >= sds.cpus.len() {
            return Err(BalanceError::RqMismatch { index: i, found });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::balance::{Moved, RqAccess, Snapshots};
    use crate::rq::{EnqueueFlags, RqConfig, RqSnapshot};
    use crate::topology::{BoardDesc, CpuDesc, OppDesc, PerfDomainDesc, Topology};
    use crate::types::{Khz, MicroVolt};
    use crate::uclamp::TaskUclamp;
    use alloc::format;
    use alloc::string::String;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const fn cpu(mpidr: u64, cluster: u16, dmips: u32) -> CpuDesc {
        CpuDesc {
            mpidr,
            cluster,
            perf_domain: cluster,
            capacity_dmips_mhz: Some(dmips),
            dynamic_power_coefficient: None,
            core: "test",
        }
    }
    const OPPS: &[OppDesc] = &[OppDesc {
        freq: Khz(1_000_000),
        voltage: MicroVolt(900_000),
    }];
    const fn pd(name: &'static str) -> PerfDomainDesc {
        PerfDomainDesc {
            name,
            opps: OPPS,
            transition_latency_ns: 1_000_000,
        }
    }
    /// The shapes of Juno r2 (2 big + 4 LITTLE) and HiKey960 (4 LITTLE + 4 big); the
    /// balancer reads only the clusters and the capacities.
    const JUNO: BoardDesc = BoardDesc {
        name: "juno-r2",
        cpus: &[
            cpu(0x0, 0, 1024),
            cpu(0x1, 0, 1024),
            cpu(0x100, 1, 485),
            cpu(0x101, 1, 485),
            cpu(0x102, 1, 485),
            cpu(0x103, 1, 485),
        ],
        perf_domains: &[pd("big"), pd("little")],
    };
    const HIKEY960: BoardDesc = BoardDesc {
        name: "hikey960",
        cpus: &[
            cpu(0x0, 0, 592),
            cpu(0x1, 0, 592),
            cpu(0x2, 0, 592),
            cpu(0x3, 0, 592),
            cpu(0x100, 1, 1024),
            cpu(0x101, 1, 1024),
            cpu(0x102, 1, 1024),
            cpu(0x103, 1, 1024),
        ],
        perf_domains: &[pd("little"), pd("big")],
    };
    const TICK: u64 = 4_000_000;

    /// The one-rq-at-a-time side, recording what it reports as moved.
    struct Rec<'a> {
        rqs: &'a mut Vec<Rq>,
        moved: Vec<Moved>,
    }

    impl Snapshots for Rec<'_> {
        fn nr_cpus(&self) -> usize {
            self.rqs.len()
        }
        fn snapshot(&self, cpu: CpuId) -> RqSnapshot {
            self.rqs[cpu.index()].snapshot()
        }
    }

    impl RqAccess for Rec<'_> {
        fn with_rq<R>(&mut self, cpu: CpuId, f: impl FnOnce(&mut Rq) -> R) -> R {
            f(&mut self.rqs[cpu.index()])
        }
        fn moved(&mut self, m: &Moved) {
            self.moved.push(*m);
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Periodic { cpu: u16, idle: bool },
        Softirq { cpu: u16 },
        Newidle { cpu: u16, cost: u64 },
        Tick { ms: u64 },
        Sleep { cpu: u16 },
        Misfit { cpu: u16, load: u64 },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => (0u16..8, any::<bool>()).prop_map(|(cpu, idle)| Op::Periodic { cpu, idle }),
            1 => (0u16..8).prop_map(|cpu| Op::Softirq { cpu }),
            3 => (0u16..8, 0u64..400_000).prop_map(|(cpu, cost)| Op::Newidle { cpu, cost }),
            3 => (1u64..40).prop_map(|ms| Op::Tick { ms }),
            1 => (0u16..8).prop_map(|cpu| Op::Sleep { cpu }),
            1 => (0u16..8, 0u64..2048).prop_map(|(cpu, load)| Op::Misfit { cpu, load }),
        ]
    }

    struct Side {
        rqs: Vec<Rq>,
        sds: SchedDomains,
        parked: Vec<Task>,
    }

    fn build(board: &BoardDesc, tasks: &[(u64, i32, usize)]) -> Side {
        let topo = Topology::from_board(board).unwrap();
        let nr = topo.nr_cpus();
        let mut rqs: Vec<Rq> = topo
            .cpus()
            .iter()
            .map(|c| {
                let mut cfg = RqConfig::new(c.id, nr as u32);
                cfg.capacity_orig = c.capacity_orig;
                cfg.tick_nsec = TICK;
                Rq::new(cfg, Nanos(1 << 20))
            })
            .collect();
        let all = CpuMask::first_n(nr);
        for (i, &(mask, nice, start)) in tasks.iter().enumerate() {
            let mask = CpuMask(mask).and(all);
            let mask = if mask.is_empty() { all } else { mask };
            let c = if mask.contains(CpuId((start % nr) as u16)) {
                start % nr
            } else {
                mask.first().unwrap().index()
            };
            let t = Task::new(TaskId(i as u32 + 1), nice, TaskUclamp::new(), mask).unwrap();
            rqs[c].enqueue_task(t, EnqueueFlags::NEW).unwrap();
        }
        let sds = SchedDomains::build(&topo, 250, Nanos(1 << 20)).unwrap();
        Side {
            rqs,
            sds,
            parked: Vec::new(),
        }
    }

    /// Time passes on every CPU: tick, pick, as the simulator would.
    fn tick(s: &mut Side, now: u64) {
        for rq in s.rqs.iter_mut() {
            rq.update_rq_clock(Nanos(now)).unwrap();
            if rq.curr().is_some() {
                rq.task_tick();
            } else {
                rq.update_blocked_averages();
            }
            if rq.need_resched() || (rq.curr().is_none() && rq.nr_running() > 0) {
                rq.pick_next_task();
            }
            let _ = rq.take_cpufreq_update();
        }
    }

    fn state(s: &Side) -> (Vec<String>, String) {
        let rqs = s
            .rqs
            .iter()
            .map(|rq| {
                let list: Vec<TaskId> = rq.cfs_tasks().collect();
                format!("{rq:?} {list:?}")
            })
            .collect();
        (rqs, format!("{:?}", s.sds))
    }

    fn placement(rqs: &[Rq]) -> BTreeMap<TaskId, CpuId> {
        rqs.iter()
            .flat_map(|rq| rq.tasks().map(move |t| (t.id, rq.cpu())))
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// Balancing through `RqAccess` (snapshots for the statistics, one run queue at a
        /// time for detach and attach) leaves every run queue, every sched domain and
        /// every report exactly as the all-run-queues version does, and the moves it
        /// reports are the tasks whose CPU changed.
        #[test]
        fn one_rq_at_a_time_makes_the_same_moves_as_all_rqs(
            hikey in any::<bool>(),
            tasks in proptest::collection::vec((1u64..256, -5i32..15, 0usize..8), 1..20),
            ops in proptest::collection::vec(op(), 1..50),
            biggest in any::<bool>(),
            lb_min in any::<bool>(),
            aggressive in any::<bool>(),
            overutilized in any::<bool>(),
            eas_active in any::<bool>(),
        ) {
            let board = if hikey { &HIKEY960 } else { &JUNO };
            let mut old = build(board, &tasks);
            let mut new = build(board, &tasks);
            let nr = old.rqs.len();
            let f = SchedFeatures::default()
                .with(Feature::LB_BIGGEST_TASK, biggest)
                .with(Feature::LB_MIN, lb_min)
                .with(Feature::AGGRESSIVE_NEXT_BALANCE, aggressive);
            let ctx = LbContext { overutilized, eas_active, ..LbContext::new(f) };
            let mut now = 1u64 << 20;
            for o in &ops {
                let before = placement(&new.rqs);
                let n = Nanos(now);
                let (ro, rn) = match *o {
                    Op::Tick { ms } => {
                        now += ms * 1_000_000;
                        tick(&mut old, now);
                        tick(&mut new, now);
                        continue;
                    }
                    Op::Sleep { cpu } => {
                        for s in [&mut old, &mut new] {
                            let rq = &mut s.rqs[cpu as usize % nr];
                            if let Some(id) = rq.curr() {
                                let t = rq.dequeue_task(id, crate::rq::DequeueFlags::SLEEP).unwrap();
                                s.parked.push(t);
                                rq.pick_next_task();
                            }
                        }
                        continue;
                    }
                    Op::Misfit { cpu, load } => {
                        old.rqs[cpu as usize % nr].set_misfit_task_load(load);
                        new.rqs[cpu as usize % nr].set_misfit_task_load(load);
                        continue;
                    }
                    Op::Periodic { cpu, idle } => {
                        let cpu = CpuId(cpu % nr as u16);
                        let idle = if idle { CpuIdleType::Idle } else { CpuIdleType::NotIdle };
                        let ro = sched_balance_domains(&mut old.sds, cpu, &mut old.rqs, idle, n, &ctx);
                        let mut acc = Rec { rqs: &mut new.rqs, moved: Vec::new() };
                        let rn = crate::balance::sched_balance_domains(&mut new.sds, cpu, &mut acc, idle, n, &ctx);
                        (ro, rn.map(|r| (r, acc.moved)))
                    }
                    Op::Softirq { cpu } => {
                        let cpu = CpuId(cpu % nr as u16);
                        let ro = sched_balance_softirq(&mut old.sds, cpu, &mut old.rqs, n, &ctx);
                        let mut acc = Rec { rqs: &mut new.rqs, moved: Vec::new() };
                        let rn = crate::balance::sched_balance_softirq(&mut new.sds, cpu, &mut acc, n, &ctx);
                        (ro, rn.map(|r| (r, acc.moved)))
                    }
                    Op::Newidle { cpu, cost } => {
                        let cpu = CpuId(cpu % nr as u16);
                        let (mut a, mut b) = (0u64, 0u64);
                        let mut ca = || { a += cost; a };
                        let mut cb = || { b += cost; b };
                        let ro = sched_balance_newidle(&mut old.sds, cpu, &mut old.rqs, n, &ctx, &mut ca);
                        let mut acc = Rec { rqs: &mut new.rqs, moved: Vec::new() };
                        let rn = crate::balance::sched_balance_newidle(&mut new.sds, cpu, &mut acc, n, &ctx, &mut cb);
                        (ro, rn.map(|r| (r, acc.moved)))
                    }
                };
                let (rn, mut moved) = rn.unwrap();
                let ro = ro.unwrap();
                prop_assert_eq!(ro, rn, "reports after {:?}", o);
                // The active balance the report asks for, on both sides.
                if let Some(req) = ro.active_balance {
                    old.rqs[req.src.index()].put_prev_task();
                    new.rqs[req.src.index()].put_prev_task();
                    let mo = active_load_balance_cpu_stop(&mut old.sds, &mut old.rqs, &req).unwrap();
                    let mut acc = Rec { rqs: &mut new.rqs, moved: Vec::new() };
                    let mn = crate::balance::active_load_balance_cpu_stop(&mut new.sds, &mut acc, &req).unwrap();
                    moved.extend(acc.moved);
                    prop_assert_eq!(mo, mn);
                }
                prop_assert_eq!(state(&old), state(&new), "state after {:?}", o);
                // What was reported moved is exactly what changed CPU.
                let mut net: BTreeMap<TaskId, (CpuId, CpuId)> = BTreeMap::new();
                for m in &moved {
                    prop_assert!(before.contains_key(&m.task), "{:?} was not queued", m);
                    let e = net.entry(m.task).or_insert((m.from, m.to));
                    e.1 = m.to;
                }
                net.retain(|_, (a, b)| a != b);
                let after = placement(&new.rqs);
                let diff: BTreeMap<TaskId, (CpuId, CpuId)> = after
                    .iter()
                    .filter(|(id, c)| before.get(id) != Some(c))
                    .map(|(id, c)| (*id, (before[id], *c)))
                    .collect();
                prop_assert_eq!(net, diff);
            }
        }
    }
}
