//! `Rq::check_invariants`: the run queue's internal consistency, for tests and debug
//! builds.

use crate::rq::Rq;

impl Rq {
    /// Check the run queue's internal consistency (for tests and debug builds):
    /// the tree's invariants, that it holds exactly the queued tasks other than
    /// `curr` with their current keys, the counters and sums, and that the weighted
    /// lags sum to zero (within rounding). O(n log n).
    pub fn check_invariants(&self) -> Result<(), &'static str> {
        let tl = self.cfs.timeline();
        tl.check().map_err(|_| "timeline tree invariant broken")?;
        let curr = self.cfs.curr();
        if tl.len() + curr.is_some() as usize != self.tasks.len() {
            return Err("timeline + curr != queued tasks");
        }
        if self.tasks.len() != self.h_nr_running as usize
            || self.cfs.nr_running() != self.h_nr_running
        {
            return Err("nr_running mismatch");
        }
        // A delayed task is queued but its clamps left the rq when it blocked.
        let nr_delayed = self.tasks().filter(|t| t.se.sched_delayed).count() as u32;
        if self.uclamp.nr_tasks() != self.h_nr_running - nr_delayed {
            return Err("uclamp accounts a different number of tasks");
        }
        if curr
            .and_then(|c| self.tasks.get(c))
            .is_some_and(|t| t.se.sched_delayed)
        {
            return Err("the running task is delayed");
        }
        self.tasks.check()?;
        let mut load = 0u64;
        let (mut avg, mut w_sum) = (0i64, 0u64);
        for t in self.tasks() {
            if !t.se.on_rq || t.cpu != Some(self.cpu) {
                return Err("queued task not on_rq or with another task_cpu");
            }
            if crate::fair::vdiff(t.se.deadline, t.se.vruntime) <= 0 || t.se.rel_deadline {
                return Err("deadline not after vruntime");
            }
            load += t.se.load.weight;
            if Some(t.id) == curr {
                continue;
            }
            let key = crate::fair::TimelineKey {
                deadline: t.se.deadline,
                id: t.id,
            };
            match tl.get(&key) {
                Some(q) if q.vruntime == t.se.vruntime && q.weight == t.se.weight() => {}
                _ => return Err("timeline key differs from the entity"),
            }
            let w = t.se.weight();
            avg += crate::fair::vdiff(t.se.vruntime, self.cfs.min_vruntime()) * w as i64;
            w_sum += w;
        }
        if load != self.cfs.load_weight() {
            return Err("cfs load.weight differs from the sum of weights");
        }
        if (avg, w_sum) != self.cfs.avg_sums() {
            return Err("avg_vruntime/avg_load differ from their definition");
        }
        // Σ w_i (V − v_i) = 0 up to V's rounding (< 1 ns of virtual time each).
        let curr_se = curr.and_then(|c| self.tasks.get(c)).map(|t| &t.se);
        let v = self.cfs.avg_vruntime(curr_se);
        let (mut lag_sum, mut total_w) = (0i128, 0i128);
        for t in self.tasks() {
            let w = t.se.weight() as i128;
            lag_sum += w * crate::fair::vdiff(v, t.se.vruntime) as i128;
            total_w += w;
        }
        if lag_sum.abs() > total_w {
            return Err("weighted lags do not sum to zero");
        }
        // util_est_enqueue/_dequeue: the cfs_rq's estimate is its queued tasks' (a delayed
        // task's left at its sleep).
        if self.features.enabled(crate::features::Feature::UTIL_EST) {
            let sum: u32 = self
                .tasks()
                .filter(|t| !t.se.sched_delayed)
                .map(|t| crate::util_est::task_util_est_raw(&t.avg).0)
                .sum();
            if sum != self.cfs_avg.avg.util_est {
                return Err("cfs util_est differs from the queued tasks' sum");
            }
        }
        Ok(())
    }
}
