//! The interpreter against rt-app's semantics, worked out by hand for small programs
//! (`src/rt-app.c`: `thread_body`, `run_event`, `rtapp_timer`; `doc/tutorial.txt`).

use asym_rtapp::interp::{Action, Params, Thread, Timer, TimerTick};
use asym_rtapp::marker::Marker;
use asym_rtapp::workload::{self, Workload};

fn wl(text: &str) -> Workload {
    workload::parse(text, "t.json", 4).unwrap_or_else(|e| panic!("{e}"))
}

fn timers(w: &Workload) -> Vec<Timer> {
    vec![Timer::new(); w.nr_timers]
}

fn loop_mark(start: bool, thread_loop: u64, phase: usize, phase_loop: u64) -> Action<'static> {
    Action::Marker(Marker::Loop {
        start,
        thread_loop,
        phase,
        phase_loop,
    })
}

/// Step until an action that takes time or blocks; return everything seen on the way.
fn until_busy<'w>(
    th: &mut Thread,
    w: &'w Workload,
    tm: &mut [Timer],
    now_ns: u64,
) -> Vec<Action<'w>> {
    let mut out = Vec::new();
    loop {
        let a = th.step(w, tm, now_ns);
        out.push(a);
        match a {
            Action::Start
            | Action::Marker(_)
            | Action::Phase(_)
            | Action::Resume(_)
            | Action::Timer(TimerTick {
                wait_until_ns: None,
                ..
            }) => {}
            _ => return out,
        }
    }
}

#[test]
fn loops_bracket_each_iteration_with_markers_and_measured_stats() {
    let w = wl(r#"{"tasks": {"a": {"loop": 2, "run": 100, "sleep": 50}}}"#);
    let mut tm = timers(&w);
    let mut th = Thread::new(&w, 0, 4);
    let all = Params {
        nice: 0,
        allowed: 0b1111,
        uclamp: None,
    };
    assert_eq!(
        until_busy(&mut th, &w, &mut tm, 5_000),
        [
            Action::Start,
            Action::Marker(Marker::ClockRef { data_us: 5 }),
            Action::Marker(Marker::TaskStart),
            loop_mark(true, 0, 0, 0),
            Action::Phase(all),
            Action::Run { work_ns: 100_000 },
        ]
    );
    // The run took 180 µs of wall time (a slow CPU), then the sleep.
    assert_eq!(
        until_busy(&mut th, &w, &mut tm, 185_000),
        [Action::Sleep { ns: 50_000 }]
    );
    // The iteration ends when the sleep does: 230 µs from its start, 180 µs of it
    // running, 100 µs of run configured, no timer.
    assert_eq!(
        until_busy(&mut th, &w, &mut tm, 235_000),
        [
            loop_mark(false, 0, 0, 0),
            Action::Marker(Marker::Stats {
                period: 230,
                run: 180,
                wu_lat: 0,
                slack: 0,
                c_period: 0,
                c_run: 100,
            }),
            loop_mark(true, 1, 0, 0),
            Action::Phase(all),
            Action::Run { work_ns: 100_000 },
        ]
    );
    assert_eq!(
        until_busy(&mut th, &w, &mut tm, 335_000),
        [Action::Sleep { ns: 50_000 }]
    );
    let end = until_busy(&mut th, &w, &mut tm, 385_000);
    assert_eq!(end[0], loop_mark(false, 1, 0, 0));
    assert_eq!(end[2..], [Action::Marker(Marker::TaskEnd), Action::Exit]);
    assert!(th.exited());
    assert_eq!(th.step(&w, &mut tm, 400_000), Action::Exit);
}

#[test]
fn only_the_first_thread_writes_the_clock_reference() {
    let w = wl(r#"{"tasks": {"a": {"instance": 2, "run": 1}}}"#);
    let mut tm = timers(&w);
    let mut second = Thread::new(&w, 1, 4);
    let seen = until_busy(&mut second, &w, &mut tm, 0);
    assert_eq!(
        seen[..2],
        [Action::Start, Action::Marker(Marker::TaskStart)]
    );
}

#[test]
fn timer_periods_start_at_the_thread_start_and_late_threads_restart_or_keep_schedule() {
    for mode in ["relative", "absolute"] {
        let w = wl(&format!(
            r#"{{"tasks": {{"a": {{"delay": 100, "loop": -1, "run": 10,
                 "timer": {{"ref": "t", "period": 1000, "mode": "{mode}"}}}}}}}}"#
        ));
        let mut tm = timers(&w);
        let mut th = Thread::new(&w, 0, 4);
        until_busy(&mut th, &w, &mut tm, 100_000);
        // Reaches the timer at 300 µs: the first period runs from t_first = the delay.
        let a = until_busy(&mut th, &w, &mut tm, 300_000);
        assert_eq!(
            a,
            [Action::Timer(TimerTick {
                period_start_ns: 100_000,
                expiry_ns: 1_100_000,
                overrun: false,
                wait_until_ns: Some(1_100_000),
            })],
            "{mode}"
        );
        // Woken 20 µs late; the next period's work overruns to 2.5 ms.
        let a = until_busy(&mut th, &w, &mut tm, 1_120_000);
        let Some(Action::Marker(Marker::Stats { slack, wu_lat, .. })) = a.get(1) else {
            panic!("{mode}: {a:?}")
        };
        assert_eq!((*slack, *wu_lat), (800, 20), "{mode}");
        let a = until_busy(&mut th, &w, &mut tm, 2_500_000);
        assert_eq!(
            a[0],
            Action::Timer(TimerTick {
                period_start_ns: 1_100_000,
                expiry_ns: 2_100_000,
                overrun: true,
                wait_until_ns: None,
            }),
            "{mode}"
        );
        assert!(
            matches!(a.last(), Some(Action::Run { .. })),
            "{mode}: {a:?}"
        );
        // relative: the timer restarted at 2.5 ms; absolute: it kept 2.1 ms + k periods.
        let a = until_busy(&mut th, &w, &mut tm, 2_600_000);
        let Action::Timer(t) = a[0] else {
            panic!("{mode}: {a:?}")
        };
        let want = if mode == "relative" {
            2_500_000 + 1_000_000
        } else {
            2_100_000 + 1_000_000
        };
        assert_eq!(t.expiry_ns, want, "{mode}");
    }
}

#[test]
fn phases_keep_unset_priorities_and_fall_back_to_the_task_affinity() {
    let w = wl(
        r#"{"tasks": {"a": {"cpus": [0, 1], "nice": 5, "util_max": 800, "phases": {
        "p0": {"cpus": [3], "nice": -2, "util_min": 100, "run": 1},
        "p1": {"util_max": 500, "run": 1},
        "p2": {"run": 1}}}}}"#,
    );
    let mut tm = timers(&w);
    let mut th = Thread::new(&w, 0, 4);
    let phases: Vec<Params> = (0..3)
        .flat_map(|i| until_busy(&mut th, &w, &mut tm, i * 1000))
        .filter_map(|a| match a {
            Action::Phase(p) => Some(p),
            _ => None,
        })
        .collect();
    let p = |nice, allowed, lo, hi| Params {
        nice,
        allowed,
        uclamp: Some((lo, hi)),
    };
    assert_eq!(
        phases,
        [
            p(-2, 0b1000, 100, 800),
            p(-2, 0b0011, 100, 500),
            p(-2, 0b0011, 100, 500)
        ]
    );
    // Before the first step, the first phase's parameters already hold.
    assert_eq!(Thread::new(&w, 0, 4).params(), phases[0]);
}

#[test]
fn a_resume_before_the_suspend_is_remembered_once() {
    let w = wl(r#"{"tasks": {"a": {"loop": -1, "suspend": "", "run": 10},
                              "b": {"run": 1, "resume": "a"}}}"#);
    let mut tm = timers(&w);
    let mut a = Thread::new(&w, 0, 4);
    a.post_resume();
    let seen = until_busy(&mut a, &w, &mut tm, 0);
    assert_eq!(seen.last(), Some(&Action::Run { work_ns: 10_000 }));
    // The second suspend finds no pending resume.
    let seen = until_busy(&mut a, &w, &mut tm, 50_000);
    assert_eq!(seen.last(), Some(&Action::Suspend));
    let mut b = Thread::new(&w, 1, 4);
    until_busy(&mut b, &w, &mut tm, 0);
    let seen = until_busy(&mut b, &w, &mut tm, 1_000);
    assert_eq!(seen[0], Action::Resume(&[0]));
}

/// Every bundled workload, stepped for a long while with pseudo-random time steps: no
/// panic (the fixed queue never overflows), and every thread keeps making progress
/// (an action that takes time at least every few steps).
#[test]
fn bundled_workloads_step_without_panic() {
    let files = [
        include_str!("../../../tests/workloads/camera-lb.json"),
        include_str!("../../../tests/workloads/camera.json"),
        include_str!("../../../tests/workloads/cyclictest.json"),
        include_str!("../../../tests/workloads/jank.json"),
        include_str!("../../../tests/workloads/messaging.json"),
        include_str!("../../../tests/workloads/periodic-big.json"),
        include_str!("../../../tests/workloads/periodic-small.json"),
        include_str!("../../../tests/workloads/ramp.json"),
        include_str!("../../../tests/workloads/uclamp-topapp.json"),
    ];
    let mut x = 1u64;
    for text in files {
        let w = workload::parse(text, "w.json", 8).unwrap();
        let mut tm = timers(&w);
        let mut threads: Vec<_> = (0..w.tasks.len()).map(|i| Thread::new(&w, i, 8)).collect();
        let mut now = 0u64;
        for round in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            now += x % 5_000_000;
            let th = &mut threads[round % w.tasks.len()];
            let seen = until_busy(th, &w, &mut tm, now);
            assert!(seen.len() <= 16, "{seen:?}");
        }
    }
}
