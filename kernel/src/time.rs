//! Time: the generic counter as guest nanoseconds, exact both ways ([`clock`]), and the per-CPU
//! one-shot timer queue ([`timerqueue`]) that [`crate::timer`] programs the CPU's timer from.

pub mod clock;
pub mod timerqueue;

#[cfg(target_os = "none")]
pub use target::*;

#[cfg(target_os = "none")]
mod target {
    use asym_sched::types::Nanos;

    use super::clock::ClockConv;
    use crate::sync::InitOnce;

    static CONV: InitOnce<ClockConv> = InitOnce::new();

    /// Fixes the counter frequency (once, at timer initialisation); refuses 0 Hz.
    pub fn init(freq_hz: u32) -> Result<(), super::clock::ClockError> {
        let conv = ClockConv::new(freq_hz)?;
        let _ = CONV.set(conv);
        Ok(())
    }

    /// Guest time: nanoseconds since the counter started (0 before [`init`]).
    #[inline]
    pub fn now() -> Nanos {
        Nanos(cyc_to_ns(crate::arch::counter()))
    }

    /// Counter cycles as ns (0 before [`init`]).
    #[inline]
    pub fn cyc_to_ns(cyc: u64) -> u64 {
        CONV.get().map_or(0, |c| c.cyc_to_ns(cyc))
    }

    /// The first counter value at or after `ns` (`u64::MAX` before [`init`]).
    #[inline]
    pub fn ns_to_cyc(ns: u64) -> u64 {
        CONV.get().map_or(u64::MAX, |c| c.ns_to_cyc(ns))
    }
}
