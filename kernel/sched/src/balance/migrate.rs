//! Migration: what happens under one run queue's lock.
//!
//! Re-derives Linux v6.12 `fair.c`'s `detach_tasks` (with `can_migrate_task` and
//! `task_hot`), `attach_tasks` and `detach_one_task`. Each function takes the one [`Rq`]
//! it changes: the source for a detach, the destination for an attach. The detached
//! tasks travel between the two locks by value in a fixed-size [`Detached`] list, so none
//! is lost and nothing is allocated.

use super::{
    nr_migrate, CpuIdleType, Detached, LbContext, LbEnv, MigrationType, SchedDomain, LBF_ACTIVE_LB,
    LBF_ALL_PINNED, LBF_DST_PINNED, LBF_SOME_PINNED, MAX_NR_MIGRATE,
};
use crate::cpu_util::{task_fits_cpu, CpuCapacityInfo, TaskUtil};
use crate::eas::task_util_est;
use crate::features::Feature;
use crate::rq::{Rq, Task};
use crate::types::{CpuId, CpuMask, TaskId, Util};
use crate::uclamp::uclamp_eff_range;

/// One `detach_tasks` attempt from `src` for an imbalance of `imbalance` of kind
/// `migration_type`, as a balance from `dst` at domain `sd` would do it; returns the
/// detached tasks (the caller attaches them). Exposed for tests of the ordering:
/// least recently run first (the `cfs_tasks` tail), or, under `LB_BIGGEST_TASK`,
/// biggest first within the window of the `loop_max` least recently run tasks;
/// skipped tasks rotate to the head so that repeated attempts look at others.
#[allow(clippy::too_many_arguments)]
pub fn detach_tasks(
    src: &mut Rq,
    sd: &SchedDomain,
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
        src_cpu: src.cpu(),
        idle,
        imbalance,
        cpus: sd.span,
        flags: LBF_ALL_PINNED,
        loop_: 0,
        loop_max: nr_migrate(ctx).min(src.nr_running()),
        migration_type,
        rd_overutilized: None,
        rd_overloaded: None,
    };
    let mut out = Detached::new();
    detach_tasks_env(&mut env, sd, src, ctx, &mut out);
    out
}

fn task_load(p: &Task) -> u64 {
    p.avg.load_avg
}

fn task_util(p: &Task, ctx: &LbContext) -> u64 {
    let cpu = p.cpu.unwrap_or(CpuId(0));
    task_util_est(&TaskUtil::from_avg(&p.avg, cpu, true), ctx.features).0 as u64
}

/// `detach_tasks(env)` from `src` (`env.src_cpu`'s run queue, under its lock).
pub(crate) fn detach_tasks_env(
    env: &mut LbEnv,
    sd: &SchedDomain,
    src: &mut Rq,
    ctx: &LbContext,
    out: &mut Detached,
) {
    if src.nr_running() <= 1 {
        env.flags &= !LBF_ALL_PINNED;
        return;
    }
    if env.imbalance <= 0 {
        return;
    }
    let biggest = ctx.features.enabled(Feature::LB_BIGGEST_TASK);
    // The window this attempt may examine: the loop_max least recently run tasks.
    let mut window: heapless::Vec<(TaskId, u64), MAX_NR_MIGRATE> = src
        .cfs_tasks()
        .rev()
        .take(env.loop_max.saturating_sub(env.loop_) as usize)
        .take(MAX_NR_MIGRATE)
        .map(|id| (id, 0))
        .collect();
    if biggest {
        for (id, key) in window.iter_mut() {
            *key = src.task(*id).map_or(0, |p| match env.migration_type {
                MigrationType::Util => task_util(p, ctx),
                _ => task_load(p),
            });
        }
        // Stable: equal sizes keep least-recently-run first.
        insertion_sort_desc(&mut window);
    }
    for (id, _) in window {
        if env.idle != CpuIdleType::NotIdle && src.nr_running() <= 1 {
            break;
        }
        env.loop_ += 1;
        if env.loop_ > env.loop_max {
            break;
        }
        let Some(p) = src.task(id) else {
            continue;
        };
        let ok = can_migrate_task(p, env, sd, src, ctx) && {
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
                    let cap = src.capacity_orig();
                    let clamp = uclamp_eff_range(&p.uclamp, &src.uclamp_sysctl(), false);
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
            src.cfs_tasks_move_to_head(id);
            continue;
        }
        match src.detach_task(id) {
            // At most loop_max ≤ MAX_NR_MIGRATE tasks are detached: it always fits.
            Ok(t) => {
                if let Err(t) = out.push(t) {
                    let _ = src.attach_task(t);
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
pub(crate) fn can_migrate_task(
    p: &Task,
    env: &mut LbEnv,
    sd: &SchedDomain,
    src: &Rq,
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
    // task_on_cpu: the running task, or one whose registers are still live on a CPU.
    if src.curr() == Some(p.id) || ctx.task_on_cpu.is_some_and(|on_cpu| (on_cpu.0)(p.id)) {
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

/// `attach_tasks` on `dst` (under its lock): enqueue the detached tasks in the order they
/// were detached, each as `attach_task` (`activate_task`). Returns each arrival's id and
/// `load_avg` in `arrived`; a task `dst` refuses (full, or not allowed there) stays in
/// `tasks` for the caller to put back on its source.
pub fn attach_tasks(dst: &mut Rq, tasks: &mut Detached, arrived: &mut Arrived) {
    // In place, one task at a time (a second list would double the stack this takes).
    let mut refused = 0;
    for i in 0..tasks.len() {
        let t = tasks[i].clone();
        let (id, load) = (t.id, t.avg.load_avg);
        match dst.attach_task(t) {
            Ok(()) => {
                let _ = arrived.push((id, load));
            }
            Err(e) => {
                tasks[refused] = e.task;
                refused += 1;
            }
        }
    }
    tasks.truncate(refused);
}

/// The tasks an [`attach_tasks`] enqueued: id and `load_avg`.
pub type Arrived = heapless::Vec<(TaskId, u64), MAX_NR_MIGRATE>;

/// `detach_one_task` for `active_load_balance_cpu_stop` on `src` (its running task
/// already preempted by the caller): the least recently run task that may run on `dst`,
/// cache hotness ignored (`LBF_ACTIVE_LB`).
pub fn detach_one_task(src: &mut Rq, dst: CpuId, sd: &SchedDomain) -> Option<Task> {
    let mut env = LbEnv {
        dst_cpu: dst,
        dst_grpmask: CpuMask::of(dst),
        new_dst_cpu: dst,
        src_cpu: src.cpu(),
        idle: CpuIdleType::Idle,
        imbalance: 1,
        cpus: sd.span,
        flags: LBF_ACTIVE_LB,
        loop_: 0,
        loop_max: 0,
        migration_type: MigrationType::Load,
        rd_overutilized: None,
        rd_overloaded: None,
    };
    // The first one can_migrate_task accepts is detached; the walk ends there.
    let ctx = LbContext::new(crate::features::SchedFeatures::none());
    let found = src.cfs_tasks().rev().find(|&id| {
        src.task(id)
            .is_some_and(|p| can_migrate_task(p, &mut env, sd, src, &ctx))
    })?;
    src.detach_task(found).ok()
}
