//! Summaries of the signals the trace carries, kept by the engine whether or not a trace
//! is written, so that `report.json` states what a trace analysis (LISA) must find:
//! time-weighted means of step signals, and the totals of rt-app's per-loop statistics
//! (measured by `asym_rtapp::interp`).

/// A step signal (PELT, util_est, capacity): its value holds from one update to the
/// next. Keeps the last value and the time-weighted mean from the first update on.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StepSignal {
    first_ns: Option<u64>,
    last_ns: u64,
    last: u64,
    /// Σ value × ns over the closed steps.
    integral: u128,
}

impl StepSignal {
    /// The signal takes `value` at `now_ns`.
    pub fn update(&mut self, now_ns: u64, value: u64) {
        if self.first_ns.is_some() {
            self.integral += self.last as u128 * now_ns.saturating_sub(self.last_ns) as u128;
        } else {
            self.first_ns = Some(now_ns);
        }
        self.last_ns = now_ns;
        self.last = value;
    }

    /// Last value and time-weighted mean over `[first update, end_ns]` (`None` before
    /// any update).
    pub fn summary(&self, end_ns: u64) -> Option<SignalSummary> {
        let first = self.first_ns?;
        let integral =
            self.integral + self.last as u128 * end_ns.saturating_sub(self.last_ns) as u128;
        let span = end_ns.saturating_sub(first);
        let mean = if span == 0 {
            self.last as f64
        } else {
            integral as f64 / span as f64
        };
        Some(SignalSummary {
            first_ns: first,
            last: self.last,
            mean: (mean * 1000.0).round() / 1000.0,
        })
    }
}

/// What [`StepSignal::summary`] reports.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct SignalSummary {
    /// Time of the first update (ns).
    pub first_ns: u64,
    /// Last value.
    pub last: u64,
    /// Time-weighted mean from the first update to the end of the run, rounded to 0.001.
    pub mean: f64,
}

/// Per-task totals of the `rtapp_stats` lines (`report.json` `rtapp`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RtAppTotals {
    /// `rtapp_stats` lines (finished phase iterations).
    pub loops: u64,
    /// Σ slack (µs).
    pub slack_us_sum: i64,
    /// Σ LISA's performance index `slack / (c_period - c_run)` over the iterations
    /// where it is defined (`c_period != c_run`).
    pub perf_index_sum: f64,
    /// Number of those iterations.
    pub perf_index_samples: u64,
}

impl RtAppTotals {
    /// Count one finished iteration.
    pub fn add(&mut self, slack_us: i64, c_period_us: i64, c_run_us: i64) {
        self.loops += 1;
        self.slack_us_sum += slack_us;
        if c_period_us != c_run_us {
            self.perf_index_sum += slack_us as f64 / (c_period_us - c_run_us) as f64;
            self.perf_index_samples += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_mean_weighs_values_by_how_long_they_hold() {
        let mut s = StepSignal::default();
        assert_eq!(s.summary(10), None);
        s.update(10, 100);
        s.update(30, 400);
        // 100 for 20 ns, 400 for 10 ns.
        let m = s.summary(40).unwrap();
        assert_eq!((m.first_ns, m.last), (10, 400));
        assert_eq!(m.mean, 200.0);
        // A single update: the mean is that value.
        let mut s = StepSignal::default();
        s.update(5, 7);
        assert_eq!(s.summary(5).unwrap().mean, 7.0);
    }

    #[test]
    fn perf_index_skips_iterations_without_a_period() {
        let mut t = RtAppTotals::default();
        t.add(8000, 16000, 8000);
        t.add(0, 0, 0);
        assert_eq!(t.loops, 2);
        assert_eq!(t.perf_index_samples, 1);
        assert_eq!(t.perf_index_sum, 1.0);
    }
}
