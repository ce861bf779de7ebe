//! Heap allocation stress from all CPUs at once is consistent: every CPU allocates, fills,
//! checks and frees blocks of varied sizes concurrently; a block that another CPU's block
//! overlapped (or the allocator corrupted) shows up as a wrong fill pattern, and the heap's
//! used byte count must return to where it started (nothing leaked or double-freed).

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use asym_sched::types::CpuId;

use crate::dt::MAX_CPUS;
use crate::selftest::TestResult;
use crate::{selftest, test_assert, test_eq};

const ROUNDS: u64 = 300;
const LIVE: usize = 16;

static RAN: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
static BAD: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
static ALLOCS: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

fn pattern(cpu: CpuId, round: u64, i: usize) -> u64 {
    (u64::from(cpu.0) << 56) ^ (round << 24) ^ (i as u64).wrapping_mul(0x9e37_79b9)
}

/// One CPU's share: a sliding window of LIVE blocks; sizes cycle through 8 B .. ~4 KiB.
fn stress(cpu: CpuId) {
    let mut live: [Option<(u64, Vec<u64>)>; LIVE] = [const { None }; LIVE];
    let mut bad = 0;
    for round in 0..ROUNDS {
        let slot = (round as usize) % LIVE;
        if let Some((r, v)) = live[slot].take() {
            bad += v
                .iter()
                .enumerate()
                .filter(|&(i, &x)| x != pattern(cpu, r, i))
                .count() as u64;
        }
        let len = 1 + ((round as usize * 37 + cpu.index() * 11) % 509);
        let v: Vec<u64> = (0..len).map(|i| pattern(cpu, round, i)).collect();
        ALLOCS[cpu.index()].fetch_add(1, Ordering::Relaxed);
        live[slot] = Some((round, v));
    }
    for (r, v) in live.into_iter().flatten() {
        bad += v
            .iter()
            .enumerate()
            .filter(|&(i, &x)| x != pattern(cpu, r, i))
            .count() as u64;
    }
    BAD[cpu.index()].fetch_add(bad, Ordering::Relaxed);
    RAN[cpu.index()].fetch_add(1, Ordering::Relaxed);
}

fn heap_stress_all_cpus() -> TestResult {
    for i in 0..MAX_CPUS {
        RAN[i].store(0, Ordering::Relaxed);
        BAD[i].store(0, Ordering::Relaxed);
        ALLOCS[i].store(0, Ordering::Relaxed);
    }
    let before = crate::heap::stats();
    test_assert!(before.size > 0, "heap not initialised");
    let res = crate::smp::run_on_all_cpus(stress);
    test_assert!(res.is_ok(), "run_on_all_cpus: {:?}", res);
    let after = crate::heap::stats();
    let online: Vec<CpuId> = crate::smp::online_cpus().collect();
    test_assert!(!online.is_empty());
    for cpu in &online {
        test_eq!(RAN[cpu.index()].load(Ordering::Relaxed), 1);
        test_eq!(ALLOCS[cpu.index()].load(Ordering::Relaxed), ROUNDS);
        test_eq!(BAD[cpu.index()].load(Ordering::Relaxed), 0);
    }
    // `online` itself is still allocated; everything the stress allocated is freed.
    let online_bytes = online.capacity() * core::mem::size_of::<CpuId>();
    test_assert!(
        after.used <= before.used + online_bytes + 64,
        "heap used {} -> {} bytes after the stress (leak?)",
        before.used,
        after.used
    );
    Ok(())
}
selftest!(name = "heap_stress_all_cpus", heap_stress_all_cpus);

fn heap_alloc_free_roundtrip() -> TestResult {
    let before = crate::heap::stats();
    let v: Vec<u8> = alloc::vec![0xa5; 100_000];
    let during = crate::heap::stats();
    test_assert!(
        during.used >= before.used + 100_000,
        "used {} -> {}",
        before.used,
        during.used
    );
    test_assert!(v.iter().all(|&b| b == 0xa5));
    drop(v);
    test_eq!(crate::heap::stats().used, before.used);
    Ok(())
}
selftest!(
    name = "heap_alloc_free_roundtrip",
    heap_alloc_free_roundtrip
);
