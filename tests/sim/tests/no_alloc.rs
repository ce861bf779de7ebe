//! Nothing allocates while the simulator runs: every bundled workload, 10 simulated
//! seconds, EAS and load balancing on, on juno-r2 and hikey960, with the policy's run
//! queues, balancer, schedutil and the engine's own event handling all inside the measured
//! loop (set-up and the final report are outside it).
//!
//! Oracle: a counting global allocator armed only on this test's thread between
//! [`Engine::start`] and the end of [`Engine::run_events`]; the count must be 0. The first
//! allocation's backtrace is printed when it is not.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Mutex;

use asym_sim::engine::{Engine, SimConfig};
use asym_sim::{load_board, parse_features, workload};

struct Counting;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

static FIRST: Mutex<Option<String>> = Mutex::new(None);

fn note() {
    if ARMED.with(Cell::get) {
        COUNT.with(|c| c.set(c.get() + 1));
        if COUNT.with(Cell::get) == 1 {
            // Capturing allocates: disarm while doing it.
            ARMED.with(|a| a.set(false));
            let bt = std::backtrace::Backtrace::force_capture().to_string();
            if let Ok(mut f) = FIRST.lock() {
                *f = Some(bt);
            }
            ARMED.with(|a| a.set(true));
        }
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator, which upholds
// GlobalAlloc's contract; the counter touches only const-initialised thread-locals.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: the caller's contract for `alloc` is passed through as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: as for `dealloc`, and the caller's contract for `realloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const TEN_S: u64 = 10_000_000_000;

/// Allocations made while `board` runs `file` for 10 s with EAS and LB on.
fn allocations(board: &str, file: &std::path::Path) -> (u64, u64) {
    let b = load_board(board).unwrap();
    let text = std::fs::read_to_string(file).unwrap();
    let wl = workload::parse(&text, "w", b.nr_cpus()).unwrap();
    let cfg = SimConfig {
        duration_ns: TEN_S,
        features: parse_features(&["ENERGY_AWARE=on".to_string()]).unwrap(),
        ..SimConfig::default()
    };
    let mut e = Engine::<std::io::Sink>::new(&b, &wl, cfg, None).unwrap();
    // 10 s of samples for a task activated every 100 µs (cyclictest's period), with room
    // to spare: the engine's only storage that grows with the run's length.
    e.reserve_samples(120_000);
    e.start().unwrap();
    COUNT.with(|c| c.set(0));
    ARMED.with(|a| a.set(true));
    let end = e.run_events();
    ARMED.with(|a| a.set(false));
    let end = end.unwrap();
    let (res, _) = e.finish(end).unwrap();
    (COUNT.with(Cell::get), res.events)
}

#[test]
fn no_allocation_while_the_simulation_runs() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../workloads");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 9,
        "bundled workloads missing in {}",
        dir.display()
    );
    let mut bad = Vec::new();
    for board in ["juno-r2", "hikey960"] {
        for f in &files {
            let (n, events) = allocations(board, f);
            assert!(
                events > 1000,
                "{board} {}: only {events} events",
                f.display()
            );
            if n != 0 {
                bad.push(format!("{board} {}: {n} allocations", f.display()));
            }
        }
    }
    if !bad.is_empty() {
        let first = FIRST.lock().unwrap().clone().unwrap_or_default();
        panic!("{}\nfirst allocation:\n{first}", bad.join("\n"));
    }
}
