//! A provable lower bound on the energy-model energy of any schedule doing a run's work.
//!
//! Not a search: a relaxation, so every number here is *at most* the energy of the best
//! placement and frequency schedule under the same energy model (the one [`crate::report`]
//! counts: a busy CPU at OPP k draws `power_k`, an idle CPU nothing). asym's energy divided
//! by it is an upper bound on how far asym is from the optimum.
//!
//! For each task, let `W` be the work the run actually did for it (Σ over its running
//! stretches of `capacity_orig × f / fmax × time`, capacity units × ns). Under the energy
//! model, doing work at an average speed `s` (capacity units) for a time `T` on one CPU,
//! with any mix of its OPPs and idle, costs at least `T × P(s)`, where `P` is the lower
//! convex hull of that CPU's points `(capacity at OPP k, power_k)` and `(0, 0)` (mixing two
//! OPPs in time gives any point on the chord; idling is free). Taking the hull over every
//! CPU the task may run on makes `P` smaller still. Then:
//!
//! - a task that waits on one periodic timer (every phase has a `timer` with the same
//!   period `T`) and met every deadline did each activation's work `w_i` within `T`, so its
//!   energy is at least `Σ_i T × P(w_i / T) ≥ A × T × P(W / (A × T))` for its `A` timer
//!   activations (Jensen: `P` is convex) — the **deadline bound**;
//! - any other task (no timer, several periods, or missed deadlines allowed) costs at least
//!   `W × e*`, `e*` the hull's first slope (the most efficient OPP's power per capacity) —
//!   the **work bound**, also used for every task in [`Bound::work_fj`].
//!
//! What the relaxation drops, each of which only lowers the bound: other tasks competing
//! for the same CPU, the shared frequency of a performance domain, uclamp, and the order of
//! the work inside a period. When the average speed a period needs is above every allowed
//! CPU's top capacity, no schedule meets the deadlines; the bound then charges the work at
//! the top point's efficiency (`P` extended along the ray through it).

use crate::board::Board;
use crate::engine::Timeline;
use crate::workload::{Event, Workload};

/// The bound of one run, fJ (µW × ns).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Bound {
    /// Every task at the work bound: valid for every schedule that does the same work.
    pub work_fj: u128,
    /// Periodic tasks at the deadline bound, the others at the work bound: valid for every
    /// schedule that does the same work and meets every timer deadline.
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

/// The one timer period every phase of the task waits on, if there is one.
fn single_period(wl: &Workload, t: usize) -> Option<u64> {
    let mut period = None;
    for ph in &wl.tasks[t].phases {
        let mut p = None;
        for e in &ph.events {
            if let Event::Timer { period_ns, .. } = e {
                match p {
                    None => p = Some(*period_ns),
                    Some(q) if q != *period_ns => return None,
                    _ => {}
                }
            }
        }
        match (period, p) {
            (_, None) => return None,
            (None, Some(x)) => period = Some(x),
            (Some(a), Some(b)) if a != b => return None,
            _ => {}
        }
    }
    period
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

/// Work done per task (capacity units × ns) from the run's running stretches.
pub fn work_done(board: &Board, tl: &Timeline, nr_tasks: usize) -> Vec<u128> {
    let mut freqs: Vec<Vec<(u64, u32)>> = vec![Vec::new(); board.domains.len()];
    for &(d, t, khz) in &tl.freqs {
        if let Some(f) = freqs.get_mut(d) {
            f.push((t, khz));
        }
    }
    for f in &mut freqs {
        f.sort_by_key(|&(t, _)| t);
    }
    let mut w = vec![0u128; nr_tasks];
    for &(cpu, s, e, task) in &tl.runs {
        let Some(m) = board.cpus.get(cpu) else {
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
            if let Some(x) = w.get_mut(task) {
                *x += cap * (t1 - t0) as u128;
            }
            if t1 >= e {
                break;
            }
            khz = f[i].1;
            t0 = t1;
            i += 1;
        }
    }
    w
}

/// The bound for a run: `timer_activations[t]` is task t's number of timer periods.
pub fn bound(board: &Board, wl: &Workload, tl: &Timeline, timer_activations: &[u64]) -> Bound {
    let work = work_done(board, tl, wl.tasks.len());
    let mut b = Bound::default();
    for (t, &w) in work.iter().enumerate() {
        let cpus = allowed(wl, t);
        let hull = lower_hull(&points(board, cpus.as_deref()));
        let work_only = first_slope(&hull, w);
        b.work_fj += work_only;
        let a = timer_activations.get(t).copied().unwrap_or(0);
        b.deadline_fj += match single_period(wl, t) {
            Some(p) if a > 0 => hull_energy(&hull, w, a as u128 * p as u128),
            _ => work_only,
        };
    }
    b
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
