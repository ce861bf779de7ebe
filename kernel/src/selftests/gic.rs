//! A second, different handler for an INTID that has one is refused, and the first keeps
//! working: the review's UART on the virtual timer's PPI replaced the tick handler, and the
//! timer's level interrupt then stormed with nobody clearing it.
//!
//! Oracle: the tick counter of this CPU keeps rising after the refused registration (the
//! tick handler is still the one called).

#![allow(clippy::result_large_err)] // `TestError` carries a 256-byte message by design.

use crate::gic::{self, GicError, IntId};
use crate::selftest::{TestError, TestResult};
use crate::{selftest, test_assert, test_eq};

fn not_the_tick(_intid: IntId) {}

fn second_handler_refused() -> TestResult {
    let plat = crate::boot::platform().ok_or(TestError::new(format_args!("no platform")))?;
    let tick = IntId(plat.timer.el1_virt_intid);
    test_eq!(
        gic::register_handler(tick, not_the_tick),
        Err(GicError::HandlerConflict(tick.0))
    );
    let me = crate::percpu::current_cpu();
    let before = crate::timer::ticks(me);
    let until = crate::timer::counter() + crate::timer::us_to_counter(20_000);
    while crate::timer::counter() < until {
        crate::arch::wfi();
    }
    let after = crate::timer::ticks(me);
    test_assert!(
        after > before,
        "no tick in 20 ms after the refused registration ({} -> {})",
        before,
        after
    );
    Ok(())
}
selftest!(name = "gic_second_handler_refused", second_handler_refused);
