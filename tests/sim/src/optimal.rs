//! A provable lower bound on the energy-model energy of any schedule doing a run's work.
//!
//! Not a search: a relaxation, so every number here is *at most* the energy of the best
//! placement and frequency schedule under the same energy model (the one [`crate::report`]
//! counts: a busy CPU at OPP k draws `power_k`, an idle CPU nothing). asym's energy divided
//! by it is an upper bound on how far asym is from the optimum.
//!
//! Doing work at an average speed `s` (capacity units) for a time `T` on CPUs of one kind,
//! with any mix of their OPPs and idle, costs at least `T × P(s)`, where `P` is the lower
//! convex hull of the points `(capacity at OPP k, power_k)` and `(0, 0)` (mixing two OPPs
//! in time gives any point on the chord; idling is free; Jensen). Three bounds use it:
//!
//! - **work bound**: any task's work `W` costs at least `W × e*`, `e*` the hull's first
//!   slope (the most efficient OPP's power per capacity) over the CPUs it may use.
//! - **per-task bound**: each `timer` activation the run completed in time did its work
//!   `w_i` inside a window — from the task's release after its previous `timer` to the
//!   period's expiry, length `L_i` — so it costs at least `L_i × P(w_i / L_i)` on the
//!   task's own hull. Work outside those windows (no timer, an overrun period, a period
//!   the run cut off) is charged at the work bound.
//! - **cluster bound**: the activations (as above) whose windows lie inside one interval `I` of a
//!   partition of time run, in any schedule meeting the deadlines, inside `I`, on the
//!   `n_c` CPUs of each performance domain `c`; whatever other tasks do, those CPUs' energy
//!   for that work `x_c` is at least `n_c |I| P_c(x_c / (n_c |I|))` (Jensen over CPUs and
//!   time; `t P(x / t)` does not grow with `t`). Minimised over every split of the work
//!   between domains (a task's work may only go to the domains of the CPUs it may use;
//!   a task allowed on several may go anywhere — a relaxation), that is a lower bound for
//!   the interval (and as one task runs on one CPU at a time, what the other domains'
//!   top speeds cannot do inside an activation's window is forced onto this one); the
//!   larger of it and the per-task bounds of the same activations is
//!   one too. Activations that straddle the partition keep their per-task bound, and the
//!   best of several partitions (aligned to the tasks' periods and release times, and the
//!   whole run) is kept. This is what sees contention and the shared frequency of a
//!   domain: many small tasks cannot all run at the most efficient OPP when their sum
//!   does not fit there.
//!
//! The premise of the last two: *the same job set* — every schedule that does the same
//! work and completes each activation this run completed in time inside the same window.
//! rt-app's timers keep their schedule while no period overruns, so for a run without
//! misses (and threads with timers of their own) that is every schedule meeting every
//! deadline; after a miss, a relative timer restarts from the late wake-up and later
//! windows are the run's own. Every bound is then valid for every run, with or without
//! misses. `runtime` events (busy for a wall time at any speed) are work in time, not
//! capacity: a task made only of them is charged its busy time at the lowest power of its
//! CPUs; a task mixing them with `run` gets 0.

//! What the relaxation still drops, each of which only lowers the bound: order and
//! dependencies inside a window (a pipeline's stages), one task on one CPU at a time
//! across domains, uclamp, and that a domain's CPUs share one frequency at each instant
//! (the cluster bound charges them an average).

use crate::board::Board;
use crate::engine::Timeline;
use crate::workload::{Event, Workload};

/// The bound of one run, fJ (µW × ns).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Bound {
    /// Every task at the work bound: valid for every schedule that does the same work.
    pub work_fj: u128,
    /// Deadline tasks at the per-task bound, the others at the work bound.
    pub per_task_fj: u128,
    /// The best bound: the cluster bound where it is higher, the per-task bound elsewhere.
    /// Valid for every schedule that does the same work and meets the deadlines this run
    /// met.
    pub deadline_fj: u128,
}

/// One `(speed, power)` point: capacity units, µW.
type Point = (u64, u64);

/// The lower convex hull of `pts` ∪ {(0, 0)}, from (0, 0) to the fastest point.
fn lower_hull(pts: &[Point]) -> Vec<Point> {
    let mut p: Vec<Point> = pts.to_vec();
    p.push((0, 0));
    p.sort_unstable();
    // For equal speed keep the cheapest.
    p.dedup_by(|b, a| a.0 == b.0);
    let mut h: Vec<Point> = Vec::new();
    for q in p {
        while h.len() >= 2 {
            let (a, b) = (h[h.len() - 2], h[h.len() - 1]);
            // b is above or on the chord a→q: drop it.
            let cross = (b.0 as i128 - a.0 as i128) * (q.1 as i128 - a.1 as i128)
                - (b.1 as i128 - a.1 as i128) * (q.0 as i128 - a.0 as i128);
            if cross <= 0 {
                h.pop();
            } else {
                break;
            }
        }
        h.push(q);
    }
    h
}

/// `T × P(work / T)` on `hull`, in fJ, for `work` in capacity units × ns over `t_ns`.
fn hull_energy(hull: &[Point], work: u128, t_ns: u128) -> u128 {
    if work == 0 || hull.len() < 2 {
        return 0;
    }
    let top = hull[hull.len() - 1];
    // Past the fastest point: along the ray through it.
    if t_ns == 0 || work >= top.0 as u128 * t_ns {
        return work * top.1 as u128 / top.0 as u128;
    }
    for w in hull.windows(2) {
        let (a, b) = (w[0], w[1]);
        if work <= b.0 as u128 * t_ns {
            // Interpolate: T × (p_a + (s − s_a) (p_b − p_a) / (s_b − s_a)), s = work / T.
            let (sa, pa, sb, pb) = (a.0 as u128, a.1 as u128, b.0 as u128, b.1 as u128);
            return t_ns * pa + (work - sa * t_ns) * (pb - pa) / (sb - sa);
        }
    }
    work * top.1 as u128 / top.0 as u128
}

/// The points of the CPUs in `cpus` (all when `None`).
fn points(board: &Board, cpus: Option<&[u16]>) -> Vec<Point> {
    let mut v = Vec::new();
    for (c, m) in board.cpus.iter().enumerate() {
        if cpus.is_some_and(|l| !l.contains(&(c as u16))) {
            continue;
        }
        let d = &board.domains[m.domain];
        for o in &d.opps {
            let s = m.capacity_orig as u64 * o.khz as u64 / d.fmax_khz.max(1) as u64;
            v.push((s, o.power_uw));
        }
    }
    v
}

/// The CPUs a task may ever use (its own affinity, widened by its phases').
fn allowed(wl: &Workload, t: usize) -> Option<Vec<u16>> {
    let ts = &wl.tasks[t];
    let mut all: Vec<u16> = Vec::new();
    for ph in &ts.phases {
        match ph.cpus.as_ref().or(ts.cpus.as_ref()) {
            None => return None,
            Some(l) => all.extend(l),
        }
    }
    if all.is_empty() {
        return ts.cpus.clone();
    }
    all.sort_unstable();
    all.dedup();
    Some(all)
}

/// One running stretch at one frequency: `[t0, t1)` at `cap` capacity units.
#[derive(Clone, Copy, Debug)]
struct Frag {
    t0: u64,
    t1: u64,
    cap: u128,
}

/// Each task's running stretches, split at frequency changes, in time order.
fn fragments(board: &Board, tl: &Timeline, nr_tasks: usize) -> Vec<Vec<Frag>> {
    let mut freqs: Vec<Vec<(u64, u32)>> = vec![Vec::new(); board.domains.len()];
    for &(d, t, khz) in &tl.freqs {
        if let Some(f) = freqs.get_mut(d) {
            f.push((t, khz));
        }
    }
    for f in &mut freqs {
        f.sort_by_key(|&(t, _)| t);
    }
    let mut out = vec![Vec::new(); nr_tasks];
    for &(cpu, s, e, task) in &tl.runs {
        let (Some(m), Some(v)) = (board.cpus.get(cpu), out.get_mut(task)) else {
            continue;
        };
        let d = &board.domains[m.domain];
        let f = &freqs[m.domain];
        // The frequency in force at s, then each change inside (s, e).
        let mut i = f.partition_point(|&(t, _)| t <= s);
        let mut khz = if i == 0 { d.fmax_khz } else { f[i - 1].1 };
        let mut t0 = s;
        loop {
            let t1 = if i < f.len() && f[i].0 < e { f[i].0 } else { e };
            let cap = m.capacity_orig as u128 * khz as u128 / d.fmax_khz.max(1) as u128;
            if t1 > t0 {
                v.push(Frag { t0, t1, cap });
            }
            if t1 >= e {
                break;
            }
            khz = f[i].1;
            t0 = t1;
            i += 1;
        }
    }
    for v in &mut out {
        v.sort_by_key(|f| f.t0);
    }
    out
}

/// Work done per task (capacity units × ns) from the run's running stretches.
pub fn work_done(board: &Board, tl: &Timeline, nr_tasks: usize) -> Vec<u128> {
    fragments(board, tl, nr_tasks)
        .iter()
        .map(|v| v.iter().map(|f| f.cap * (f.t1 - f.t0) as u128).sum())
        .collect()
}

/// What the bound needs of one task's run (from [`crate::engine::TaskStats`]).
#[derive(Clone, Copy, Debug)]
pub struct TaskRun<'a> {
    /// Its timer activations' windows and overruns
    /// ([`crate::engine::TaskStats::timer_windows_ns`]).
    pub windows: &'a [(u64, u64, bool)],
}

/// One deadline-task activation: its window, work, per-task bound and domains.
#[derive(Clone, Copy, Debug)]
struct Job {
    r: u64,
    d: u64,
    w: u128,
    per_task: u128,
    /// The only domain the task may use, or `None` for several.
    domain: Option<usize>,
}

/// The bound for a run.
pub fn bound(board: &Board, wl: &Workload, tl: &Timeline, runs: &[TaskRun]) -> Bound {
    let frags = fragments(board, tl, wl.tasks.len());
    let mut b = Bound::default();
    let mut jobs: Vec<Job> = Vec::new();
    for (t, fr) in frags.iter().enumerate() {
        let cpus = allowed(wl, t);
        let hull = lower_hull(&points(board, cpus.as_deref()));
        let w: u128 = fr.iter().map(|f| f.cap * (f.t1 - f.t0) as u128).sum();
        let (has_run, has_runtime) = events_of(wl, t);
        if has_runtime {
            // Busy for a wall time at any speed: at best at the lowest power.
            let e = if has_run {
                0
            } else {
                let busy: u128 = fr.iter().map(|f| (f.t1 - f.t0) as u128).sum();
                busy * min_power(board, cpus.as_deref()) as u128
            };
            b.work_fj += e;
            b.per_task_fj += e;
            b.deadline_fj += e;
            continue;
        }
        let work_only = first_slope(&hull, w);
        b.work_fj += work_only;
        let windows = runs.get(t).map_or(&[][..], |r| r.windows);
        let domain = single_domain(board, cpus.as_deref());
        // Windows are disjoint and in order; the task's work inside each that did not
        // overrun is that activation's, the rest (overruns, a period the run cut off) is
        // charged at the work bound.
        let mut inside = 0u128;
        let mut k = 0usize;
        for &(r, d, overrun) in windows {
            if overrun {
                continue;
            }
            let mut wj = 0u128;
            while k < fr.len() && fr[k].t1 <= r {
                k += 1;
            }
            let mut j = k;
            while j < fr.len() && fr[j].t0 < d {
                let (a, z) = (fr[j].t0.max(r), fr[j].t1.min(d));
                if z > a {
                    wj += fr[j].cap * (z - a) as u128;
                }
                j += 1;
            }
            if wj == 0 {
                continue;
            }
            inside += wj;
            let per_task = hull_energy(&hull, wj, (d - r) as u128);
            jobs.push(Job {
                r,
                d,
                w: wj,
                per_task,
                domain,
            });
        }
        let rest = first_slope(&hull, w.saturating_sub(inside));
        b.per_task_fj += rest;
        b.deadline_fj += rest;
    }
    let per_task_jobs: u128 = jobs.iter().map(|j| j.per_task).sum();
    b.per_task_fj += per_task_jobs;
    let domains: Vec<DomainHull> = board
        .domains
        .iter()
        .map(|d| DomainHull {
            n: d.cpus.len() as u128,
            hull: lower_hull(&points(
                board,
                Some(&d.cpus.iter().map(|&c| c as u16).collect::<Vec<_>>()),
            )),
        })
        .collect();
    let best = partitions(&jobs)
        .into_iter()
        .map(|(len, off)| partition_bound(&jobs, &domains, len, off))
        .fold(per_task_jobs, u128::max);
    b.deadline_fj += best;
    b
}

/// Whether task t has `run` events and `runtime` events.
fn events_of(wl: &Workload, t: usize) -> (bool, bool) {
    let (mut run, mut runtime) = (false, false);
    for ph in &wl.tasks[t].phases {
        for e in &ph.events {
            match e {
                Event::Run { .. } => run = true,
                Event::Runtime { .. } => runtime = true,
                _ => {}
            }
        }
    }
    (run, runtime)
}

/// The lowest busy power among `cpus` (all when `None`), µW.
fn min_power(board: &Board, cpus: Option<&[u16]>) -> u64 {
    points(board, cpus).iter().map(|p| p.1).min().unwrap_or(0)
}

/// The one performance domain all of `cpus` are in, if so.
fn single_domain(board: &Board, cpus: Option<&[u16]>) -> Option<usize> {
    let l = cpus?;
    let mut d = None;
    for &c in l {
        let x = board.cpus.get(c as usize)?.domain;
        match d {
            None => d = Some(x),
            Some(y) if y != x => return None,
            _ => {}
        }
    }
    d
}

/// A performance domain's CPU count and hull.
struct DomainHull {
    n: u128,
    hull: Vec<Point>,
}

impl DomainHull {
    /// The top speed of one of its CPUs.
    fn top(&self) -> u128 {
        self.hull.last().map_or(0, |p| p.0 as u128)
    }
}

/// The partitions of time tried: `(interval length, offset)` — each of the most common
/// window lengths with each of its most common release phases, and the whole run.
fn partitions(jobs: &[Job]) -> Vec<(u64, u64)> {
    if jobs.is_empty() {
        return Vec::new();
    }
    let most_common = |mut v: Vec<u64>, n: usize| -> Vec<u64> {
        v.sort_unstable();
        let mut c: Vec<(usize, u64)> = Vec::new();
        for x in v {
            match c.last_mut() {
                Some((k, y)) if *y == x => *k += 1,
                _ => c.push((1, x)),
            }
        }
        c.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        c.into_iter().take(n).map(|(_, x)| x).collect()
    };
    let mut out = Vec::new();
    for len in most_common(jobs.iter().map(|j| j.d - j.r).collect(), 6) {
        let offs = most_common(
            jobs.iter()
                .filter(|j| j.d - j.r == len)
                .map(|j| j.r % len)
                .collect(),
            4,
        );
        out.extend(offs.into_iter().map(|o| (len, o)));
    }
    let r0 = jobs.iter().map(|j| j.r).min().unwrap_or(0);
    let d1 = jobs.iter().map(|j| j.d).max().unwrap_or(0);
    out.push((d1 - r0, r0));
    out
}

/// Per interval of one partition: the work only one domain may do, the work any may do,
/// and the activations' per-task bounds.
#[derive(Clone, Default)]
struct Interval {
    fixed: Vec<u128>,
    free: u128,
    per_task: u128,
}

/// The cluster bound over the partition `[off + k len, off + (k + 1) len)`.
fn partition_bound(jobs: &[Job], domains: &[DomainHull], len: u64, off: u64) -> u128 {
    if len == 0 {
        return 0;
    }
    let mut ivs: Vec<Interval> = Vec::new();
    let mut straddling = 0u128;
    for j in jobs {
        let k = if j.r >= off {
            (j.r - off) / len
        } else {
            u64::MAX
        };
        if k == u64::MAX || j.d > off + (k + 1) * len {
            straddling += j.per_task;
            continue;
        }
        let k = k as usize;
        if ivs.len() <= k {
            ivs.resize(k + 1, Interval::default());
        }
        let iv = &mut ivs[k];
        if iv.fixed.is_empty() {
            iv.fixed = vec![0; domains.len()];
        }
        match j.domain {
            Some(d) if d < domains.len() => iv.fixed[d] += j.w,
            _ => {
                // One task runs on one CPU at a time: what the other domains' top
                // speeds cannot do within its window must be done on this one.
                let l = (j.d - j.r) as u128;
                let tops: Vec<u128> = domains.iter().map(|d| d.top() * l).collect();
                let all: u128 = tops.iter().sum();
                let mut left = j.w;
                for (c, top) in tops.iter().enumerate() {
                    let forced = j.w.saturating_sub(all - top).min(left);
                    iv.fixed[c] += forced;
                    left -= forced;
                }
                iv.free += left;
            }
        }
        iv.per_task += j.per_task;
    }
    let mut total = straddling;
    for iv in &ivs {
        if iv.fixed.is_empty() {
            continue;
        }
        total += cluster_energy(domains, &iv.fixed, iv.free, len as u128).max(iv.per_task);
    }
    total
}

/// The least energy of doing `fixed[c]` on domain c and `free` anywhere within `t_ns`:
/// each domain's cost `n t P(x / (n t))` is convex and piecewise linear in x, so filling
/// the cheapest remaining segments first is optimal. Past a domain's top the last slope
/// continues (no schedule meeting the deadlines gets there; it keeps the cost convex).
fn cluster_energy(domains: &[DomainHull], fixed: &[u128], free: u128, t_ns: u128) -> u128 {
    // Remaining segments: (slope numerator µW, slope denominator capacity, room cap·ns).
    let mut segs: Vec<(u128, u128, u128)> = Vec::new();
    let mut e = 0u128;
    for (d, &want) in domains.iter().zip(fixed) {
        let h = &d.hull;
        let mut left = want;
        for (i, w) in h.windows(2).enumerate() {
            let (ds, dp) = ((w[1].0 - w[0].0) as u128, (w[1].1 - w[0].1) as u128);
            if ds == 0 {
                continue;
            }
            let last = i + 2 == h.len();
            let room = if last { u128::MAX } else { ds * d.n * t_ns };
            let take = left.min(room);
            e += take * dp / ds;
            left -= take;
            if room > take {
                segs.push((dp, ds, if last { u128::MAX } else { room - take }));
            }
        }
    }
    // Cheapest slope first (cross-multiplied), then by room for a fixed order.
    segs.sort_by(|a, b| (a.0 * b.1).cmp(&(b.0 * a.1)).then(a.2.cmp(&b.2)));
    let mut left = free;
    for (dp, ds, room) in segs {
        if left == 0 {
            break;
        }
        let take = left.min(room);
        e += take * dp / ds;
        left -= take;
    }
    e
}

/// `work × e*`: the work at the hull's first (most efficient) slope.
fn first_slope(hull: &[Point], work: u128) -> u128 {
    match hull.get(1) {
        Some(&(s, p)) if s > 0 => work * p as u128 / s as u128,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hull of a convex set of OPPs is all of them; a point above a chord (HiKey's
    /// inefficient 208 MHz against 432 MHz through the origin) is dropped.
    #[test]
    fn hull_drops_points_above_a_chord() {
        let h = lower_hull(&[(100, 50), (200, 120), (300, 300)]);
        assert_eq!(h, vec![(0, 0), (100, 50), (200, 120), (300, 300)]);
        // 177 → 69 966 µW is above the chord from (0, 0) to (368, 145 315)? 69966/177 =
        // 395.3 > 145315/368 = 394.9 per unit: yes.
        let h = lower_hull(&[(177, 69_966), (368, 145_315), (622, 269_364)]);
        assert_eq!(h, vec![(0, 0), (368, 145_315), (622, 269_364)]);
    }

    /// Worked by hand: points (0,0), (100, 50), (200, 150). Work 100 units for 1 ns: speed
    /// 100 → 50 fJ. Work 150 over 1 ns: halfway on the second segment → 100. Work 50 over
    /// 1 ns → 25 (half the first segment). Work 400 over 1 ns: past the top → along the
    /// ray, 400 × 150 / 200 = 300. Without a deadline (t = 0) the same ray.
    #[test]
    fn hull_energy_by_hand() {
        let h = lower_hull(&[(100, 50), (200, 150)]);
        assert_eq!(hull_energy(&h, 100, 1), 50);
        assert_eq!(hull_energy(&h, 150, 1), 100);
        assert_eq!(hull_energy(&h, 50, 1), 25);
        assert_eq!(hull_energy(&h, 400, 1), 300);
        assert_eq!(first_slope(&h, 400), 200);
        assert_eq!(hull_energy(&h, 0, 5), 0);
    }

    /// Worked by hand: domain A (2 CPUs) with points (100, 50), (200, 150), domain B (1
    /// CPU) with (300, 300), (400, 500), over 1 ns. 500 units anywhere: A's first segment
    /// (200 units at 1/2 → 100), then slope 1 on A (200 → 200) and B (100 → 100): 400. With
    /// 350 units that only B may do: B's first segment (300 → 300) and 50 at slope 2 (100),
    /// then 100 free units on A's first segment (50): 450. Past every top the last slope
    /// continues: 1000 units on B alone → 300 + 100 × 2 + 600 × 2 = 1700.
    #[test]
    fn cluster_energy_by_hand() {
        let d = [
            DomainHull {
                n: 2,
                hull: lower_hull(&[(100, 50), (200, 150)]),
            },
            DomainHull {
                n: 1,
                hull: lower_hull(&[(300, 300), (400, 500)]),
            },
        ];
        assert_eq!(cluster_energy(&d, &[0, 0], 500, 1), 400);
        assert_eq!(cluster_energy(&d, &[0, 350], 100, 1), 450);
        assert_eq!(cluster_energy(&d, &[0, 1000], 0, 1), 1700);
        assert_eq!(cluster_energy(&d, &[0, 0], 0, 1), 0);
    }

    /// One task runs on one CPU at a time: what the cheap domain's top speed cannot do
    /// inside the job's window is forced onto the other. B (1 CPU, 400 units at 1/10 per
    /// unit) would take all 600 units of a 1-ns job for 60; it can take 400 (40), and the
    /// other 200 go to A's first segment (2 CPUs × 100 at 1/2: 100) — 140.
    #[test]
    fn partition_forces_what_one_cpu_elsewhere_cannot_do() {
        let d = [
            DomainHull {
                n: 2,
                hull: lower_hull(&[(100, 50), (200, 150)]),
            },
            DomainHull {
                n: 1,
                hull: lower_hull(&[(300, 30), (400, 40)]),
            },
        ];
        let job = Job {
            r: 0,
            d: 1,
            w: 600,
            per_task: 0,
            domain: None,
        };
        assert_eq!(partition_bound(&[job], &d, 1, 0), 140);
        // A job allowed only on A pays A's prices for all of it: 200 × ½ + 200 × 1 +
        // 200 × 1 (past A's top, the last slope) = 500.
        let job = Job {
            domain: Some(0),
            ..job
        };
        assert_eq!(partition_bound(&[job], &d, 1, 0), 500);
        // A job straddling the partition keeps its per-task bound.
        let job = Job {
            r: 1,
            d: 3,
            per_task: 7,
            ..job
        };
        assert_eq!(partition_bound(&[job], &d, 2, 0), 7);
    }

    /// Juno r2's hull worked by hand (boards.md's EM tables: LITTLE 450/800/950 MHz at
    /// performance 181/322/383, 43 296/92 543/135 673 µW; big 600/1000/1200 at 512/853/1024,
    /// 185 555/371 826/550 854 µW): 950 MHz is above the chord 800 → big 600 (707 µW per
    /// unit against 489.5), everything else is a vertex. A 12 ms-in-16 ms task (speed 768)
    /// costs at least 16 ms × (185 555 + 256 × 186 271 / 341) µW.
    #[test]
    fn juno_hull_by_hand() {
        let b = crate::load_board("juno-r2").unwrap();
        let h = lower_hull(&points(&b, None));
        let s: Vec<u64> = h.iter().map(|p| p.0).collect();
        assert_eq!(s, vec![0, 181, 322, 512, 853, 1024]);
        let t = 16_000_000u128;
        let want = t * (185_555 + 256 * 186_271 / 341);
        let got = hull_energy(&h, 768 * t, t);
        assert!(got.abs_diff(want) * 10_000 < want, "{got} vs {want}");
        // LITTLEs only (an affinity of CPUs 2-5): 768 is past 383, along the ray.
        let hl = lower_hull(&points(&b, Some(&[2, 3, 4, 5])));
        assert_eq!(hl.last(), Some(&(383, 135_673)));
    }
}
