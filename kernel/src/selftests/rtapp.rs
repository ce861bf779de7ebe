//! rt-app in the kernel build: the shared workload reader (`asym-rtapp`) parses a bundled
//! workload embedded in the image, its interpreter steps a thread through rt-app's start,
//! and the shared trace formatter (`asym-trace`) writes records taken from a per-CPU trace
//! ring — the same code the simulator runs, here compiled for and run on the target.

use asym_rtapp::interp::{Action, Thread, Timer};
use asym_rtapp::marker::Marker;
use asym_rtapp::workload;
use asym_trace::ftrace::{format_into, Comm, Ctx, Event, Record};
use asym_trace::ring::TraceRing;

use crate::selftest::TestResult;
use crate::{selftest, test_assert, test_eq};

/// `tests/workloads/periodic-small.json`: four `small` threads, each `run` 1600 µs per
/// `timer` period of 16 ms.
const PERIODIC_SMALL: &str = include_str!("../../../tests/workloads/periodic-small.json");

fn rtapp_embedded_workload_parses_and_steps() -> TestResult {
    let w = match workload::parse(PERIODIC_SMALL, "periodic-small.json", 6) {
        Ok(w) => w,
        Err(e) => return Err(crate::selftest::TestError::new(format_args!("{e}"))),
    };
    test_eq!(w.tasks.len(), 4);
    test_eq!(w.tasks[3].name.as_str(), "small-3");
    test_eq!(w.nr_timers, 4);
    let mut timers = [Timer::new(); 4];
    let mut th = Thread::new(&w, 0, 6);
    let mut seen = heapless::Vec::<Action<'_>, 8>::new();
    loop {
        let a = th.step(&w, &mut timers, 2_000);
        test_assert!(
            seen.push(a).is_ok(),
            "more than 8 actions before the first run"
        );
        if matches!(a, Action::Run { .. }) {
            break;
        }
    }
    test_eq!(seen[0], Action::Start);
    test_eq!(seen[1], Action::Marker(Marker::ClockRef { data_us: 2 }));
    test_eq!(seen[2], Action::Marker(Marker::TaskStart));
    test_eq!(seen.last(), Some(&Action::Run { work_ns: 1_600_000 }));
    // The first timer period runs from the thread's start (no delay): 16 ms.
    let Action::Timer(t) = th.step(&w, &mut timers, 3_000_000) else {
        return Err(crate::selftest::TestError::new(format_args!(
            "no timer after the run"
        )));
    };
    test_eq!(t.wait_until_ns, Some(16_000_000));
    Ok(())
}
selftest!(
    name = "rtapp_embedded_workload_parses_and_steps",
    rtapp_embedded_workload_parses_and_steps
);

fn rtapp_bad_workload_error_is_located() -> TestResult {
    let bad =
        "{\"tasks\": {\"a\": {\n  \"run\": 10,\n  \"timer\": {\"ref\": \"t\", \"period\": 1.5}}}}";
    let Err(e) = workload::parse(bad, "bad.json", 6) else {
        return Err(crate::selftest::TestError::new(format_args!(
            "a fractional period was accepted"
        )));
    };
    test_eq!((e.line, e.col), (3, 35));
    test_eq!(e.path.as_str(), "tasks.a.timer.period");
    Ok(())
}
selftest!(
    name = "rtapp_bad_workload_error_is_located",
    rtapp_bad_workload_error_is_located
);

/// A record as a kernel tracer might pack it: time, CPU, frequency.
fn pack(ts_ns: u64, cpu: u64, khz: u64) -> [u64; 2] {
    [ts_ns, cpu << 32 | khz]
}

fn trace_ring_drains_through_the_shared_formatter() -> TestResult {
    static RING: TraceRing<4, 2> = TraceRing::new();
    for i in 0..6u64 {
        RING.push(&pack(1_000_000_000 + i, 1, 450_000 + i));
    }
    test_eq!(RING.lost(), 2);
    let mut buf = [0u8; 160];
    let mut n = 0;
    while let Some([ts_ns, w]) = RING.pop() {
        let cpu = (w >> 32) as usize;
        let rec = Record {
            ctx: Ctx {
                comm: Comm::Idle,
                pid: 0,
                cpu,
                ns: ts_ns,
            },
            ts_ns,
            event: Event::CpuFrequency { khz: w as u32, cpu },
        };
        let Some(len) = format_into(&rec, &mut buf) else {
            return Err(crate::selftest::TestError::new(format_args!(
                "line too long"
            )));
        };
        if n == 3 {
            test_eq!(
                core::str::from_utf8(&buf[..len]).unwrap_or("?"),
                "          <idle>-0       [001]     1.000000003: cpu_frequency: state=450003 cpu_id=1\n"
            );
        }
        n += 1;
    }
    test_eq!(n, 4);
    Ok(())
}
selftest!(
    name = "trace_ring_drains_through_the_shared_formatter",
    trace_ring_drains_through_the_shared_formatter
);
