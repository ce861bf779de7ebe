//! The `trace_marker` lines an rt-app thread writes (rt-app `src/rt-app.c`, its
//! `log_ftrace` calls), for the categories `task`, `loop` and `stats` (and
//! `rtapp_main: event=clock_ref`, which rt-app logs under `task` from its first thread).
//! LISA's rt-app analysis reads exactly these texts.

use core::fmt;

/// One rt-app trace marker. Times are µs, as rt-app prints them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    /// `rtapp_main: event=clock_ref data=%llu`: the first thread's `t_zero` (µs of
    /// `CLOCK_MONOTONIC`).
    ClockRef {
        /// `t_zero` in µs.
        data_us: u64,
    },
    /// `rtapp_task: event=start`.
    TaskStart,
    /// `rtapp_task: event=end`.
    TaskEnd,
    /// `rtapp_loop: event=start|end thread_loop=%d phase=%d phase_loop=%d`.
    Loop {
        /// `start` (true) or `end`.
        start: bool,
        /// Iteration of the task's phase list.
        thread_loop: u64,
        /// Phase index.
        phase: usize,
        /// Iteration of the phase.
        phase_loop: u64,
    },
    /// `rtapp_stats: period=%d run=%d wu_lat=%d slack=%d c_period=%d c_run=%d` after each
    /// phase iteration (see `thread_body` and `run_event` in rt-app).
    Stats {
        /// Wall time of the iteration (µs).
        period: i64,
        /// Wall time of its `run`/`runtime` events (µs).
        run: i64,
        /// Timer wake-up latency (µs).
        wu_lat: i64,
        /// Time left to the timer's next period when it was reached (µs; negative if
        /// late).
        slack: i64,
        /// Configured timer period(s) (µs).
        c_period: i64,
        /// Configured run time (µs).
        c_run: i64,
    },
}

impl fmt::Display for Marker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Marker::ClockRef { data_us } => write!(f, "rtapp_main: event=clock_ref data={data_us}"),
            Marker::TaskStart => f.write_str("rtapp_task: event=start"),
            Marker::TaskEnd => f.write_str("rtapp_task: event=end"),
            Marker::Loop {
                start,
                thread_loop,
                phase,
                phase_loop,
            } => write!(
                f,
                "rtapp_loop: event={} thread_loop={thread_loop} phase={phase} phase_loop={phase_loop}",
                if start { "start" } else { "end" }
            ),
            Marker::Stats {
                period,
                run,
                wu_lat,
                slack,
                c_period,
                c_run,
            } => write!(
                f,
                "rtapp_stats: period={period} run={run} wu_lat={wu_lat} slack={slack} c_period={c_period} c_run={c_run}"
            ),
        }
    }
}
