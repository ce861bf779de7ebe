//! The identity map's memory types where they matter for firmware: memory that must not be
//! mapped (`no-map` `/reserved-memory` regions and the board crate's `no_map` carve-outs) and
//! the DVFS firmware's shared memory and mailboxes.
//!
//! Oracle: the MMU's own table walk (`AT S1E1R`, `mmu::translate`), not our tables read back.
//! Every page of a no-map region (every page of regions up to 4 MiB, else 1024 spread evenly
//! plus both ends) must be unmapped, or Device where a DVFS region lies in it; every page of a
//! DVFS region must be Device (a Normal, cacheable mapping of memory shared with a
//! non-coherent firmware processor loses its messages in the cache on hardware). The query is
//! first checked to tell the three apart: kernel data is Normal, the UART Device, an address
//! past RAM unmapped.

#![allow(clippy::result_large_err)] // `TestError` carries a heap message by design.

use crate::arch::aarch64::mmu::{self, Translation};
use crate::dt::MemRange;
use crate::selftest::{TestError, TestResult};
use crate::{selftest, test_assert};

selftest!(name = "mmu_no_map_memory_and_dvfs_regions", no_map_and_dvfs);

/// An address the identity map leaves unmapped (as in `selftests/fault.rs`).
const UNMAPPED: u64 = 0x40_0000_0000 + 0x5670;
const PAGE: u64 = 4096;
/// Regions up to this size are checked page by page.
const ALL_PAGES_UP_TO: u64 = 4 << 20;

static NORMAL_PROBE: u64 = 0;

fn err(e: impl core::fmt::Display) -> TestError {
    TestError::new(format_args!("{e}"))
}

fn no_map_and_dvfs() -> TestResult {
    let plat = crate::boot::platform().ok_or(err("no platform"))?;
    let data = (&raw const NORMAL_PROBE) as u64;
    test_assert!(
        mmu::translate(data) == Translation::Normal,
        "kernel data at {:#x} translates as {:?}",
        data,
        mmu::translate(data)
    );
    let uart = plat.uart.base as u64;
    test_assert!(
        mmu::translate(uart) == Translation::Device,
        "the UART at {:#x} translates as {:?}",
        uart,
        mmu::translate(uart)
    );
    test_assert!(
        mmu::translate(UNMAPPED) == Translation::Unmapped,
        "{:#x} translates as {:?}",
        UNMAPPED,
        mmu::translate(UNMAPPED)
    );

    let dvfs: heapless::Vec<MemRange, 4> = match &plat.dvfs {
        Ok(Some(d)) => d.regions(),
        _ => heapless::Vec::new(),
    };
    let in_dvfs = |a: u64| {
        dvfs.iter()
            .any(|r| a + PAGE > r.base as u64 & !(PAGE - 1) && a < r.end() as u64)
    };
    let carve = crate::boot::no_map_carve_outs();
    let (mut regions, mut unmapped, mut device) = (0, 0u64, 0u64);
    for r in mmu::no_map_ranges(plat, &carve) {
        regions += 1;
        let start = r.base as u64 & !(PAGE - 1);
        let end = (r.end() as u64).next_multiple_of(PAGE);
        let step = if end - start <= ALL_PAGES_UP_TO {
            PAGE
        } else {
            ((end - start) / 1024) & !(PAGE - 1)
        };
        let mut a = start;
        loop {
            match mmu::translate(a) {
                Translation::Unmapped => unmapped += 1,
                Translation::Device if in_dvfs(a) => device += 1,
                t => {
                    return Err(err(format_args!(
                        "no-map region {} (page {:#x}) is mapped {:?}",
                        r, a, t
                    )))
                }
            }
            if a + PAGE >= end {
                break;
            }
            a = (a + step).min(end - PAGE);
        }
    }
    let mut dvfs_pages = 0u64;
    for r in &dvfs {
        let mut a = r.base as u64 & !(PAGE - 1);
        while a < r.end() as u64 {
            let t = mmu::translate(a);
            test_assert!(
                t == Translation::Device,
                "DVFS region {} (page {:#x}) is mapped {:?}, not Device",
                r,
                a,
                t
            );
            dvfs_pages += 1;
            a += PAGE;
        }
    }
    crate::println!(
        "mmu: {} no-map regions: {} pages checked unmapped, {} Device (DVFS); {} DVFS pages Device",
        regions,
        unmapped,
        device,
        dvfs_pages
    );
    Ok(())
}
