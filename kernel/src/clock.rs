//! Conversions between the architected counter and time, exact at any `CNTFRQ_EL0`.
//!
//! The boards' counters run far slower than QEMU's 62.5 MHz (HiKey 1.2 MHz, HiKey960
//! 1.92 MHz, Juno r2 50 MHz), where a per-tick period rounded once and then added up drifts:
//! at 1.2 MHz a 1 µs step is 1.2 ticks. So every conversion here is one multiplication and one
//! division of the whole quantity in 128 bits (no intermediate rounding, no overflow for any
//! 64-bit count), and the tick's deadlines are computed from the start of the sequence each
//! time (Linux `clockevents` programs each next event from the period in ns and its `mult`/
//! `shift` pair; here the deadline of period `n` is `base + ⌊n·freq/hz⌋`, so `hz` periods are
//! exactly `freq` counter ticks, whatever `freq/hz` rounds to).
//!
//! Pure functions, host-tested; `crate::timer` and `crate::sched::now` use them.

/// `count` counter ticks at `freq_hz` in nanoseconds, rounded down (0 when `freq_hz` is 0).
pub const fn counter_to_ns(count: u64, freq_hz: u64) -> u64 {
    scale(count, 1_000_000_000, freq_hz)
}

/// `count` counter ticks at `freq_hz` in microseconds, rounded down (0 when `freq_hz` is 0).
pub const fn counter_to_us(count: u64, freq_hz: u64) -> u64 {
    scale(count, 1_000_000, freq_hz)
}

/// `us` microseconds in counter ticks at `freq_hz`, rounded down.
pub const fn us_to_counter(us: u64, freq_hz: u64) -> u64 {
    scale(us, freq_hz, 1_000_000)
}

/// The counter value at which period `n` of a tick at `hz` that started at `base` ends:
/// `base + ⌊n·freq_hz/hz⌋` (wrapping, as the counter does). `hz` 0 counts as 1.
pub const fn tick_deadline(base: u64, n: u64, freq_hz: u64, hz: u32) -> u64 {
    let hz = if hz == 0 { 1 } else { hz as u64 };
    base.wrapping_add(scale(n, freq_hz, hz))
}

/// `⌊x·mul/div⌋` in 128 bits, saturated to `u64::MAX`; 0 when `div` is 0.
const fn scale(x: u64, mul: u64, div: u64) -> u64 {
    if div == 0 {
        return 0;
    }
    let v = (x as u128) * (mul as u128) / (div as u128);
    if v > u64::MAX as u128 {
        u64::MAX
    } else {
        v as u64
    }
}

#[cfg(test)]
mod tests {
    //! Oracles: the definitions of floor division checked with exact integer inequalities
    //! (`q·d ≤ x·m < (q+1)·d`), and the physical facts a drifting conversion breaks (one second
    //! of ticks is exactly `freq` counter ticks, a counter period in ns is 10⁹/freq).
    use super::*;

    /// CNTFRQ_EL0 of HiKey, HiKey960, a 24 MHz SoC (RK3399), Juno r2, QEMU virt, and 1 GHz
    /// (Armv8.6's fixed frequency).
    const FREQS: [u64; 6] = [
        1_200_000,
        1_920_000,
        24_000_000,
        50_000_000,
        62_500_000,
        1_000_000_000,
    ];
    const HZS: [u32; 5] = [100, 250, 300, 1000, 1024];

    fn is_floor(q: u64, x: u64, m: u64, d: u64) -> bool {
        let (q, x, m, d) = (q as u128, x as u128, m as u128, d as u128);
        q * d <= x * m && x * m < (q + 1) * d
    }

    #[test]
    fn tick_deadlines_never_drift() {
        for f in FREQS {
            for hz in HZS {
                let base = 0xffff_ffff_ffff_0000 - u64::from(hz); // wraps within the run
                let mut prev = tick_deadline(base, 0, f, hz);
                assert_eq!(prev, base);
                let (lo, hi) = (f / u64::from(hz), f.div_ceil(u64::from(hz)));
                for n in 1..=10 * u64::from(hz) {
                    let d = tick_deadline(base, n, f, hz);
                    let step = d.wrapping_sub(prev);
                    assert!(
                        step == lo || step == hi,
                        "{f} Hz, HZ={hz}: period {n} is {step} ticks, not {lo} or {hi}"
                    );
                    assert!(is_floor(d.wrapping_sub(base), n, f, u64::from(hz)));
                    if n % u64::from(hz) == 0 {
                        // Whole seconds: exactly freq ticks each, no accumulated rounding.
                        assert_eq!(
                            d.wrapping_sub(base),
                            n / u64::from(hz) * f,
                            "{f} Hz HZ={hz}"
                        );
                    }
                    prev = d;
                }
            }
        }
    }

    #[test]
    fn counter_time_conversions_are_exact_floors() {
        for f in FREQS {
            // One second of counter is 10^9 ns and 10^6 us exactly.
            assert_eq!(counter_to_ns(f, f), 1_000_000_000);
            assert_eq!(counter_to_us(f, f), 1_000_000);
            assert_eq!(us_to_counter(1_000_000, f), f);
            // One counter period, in ns, rounded down (833 ns at 1.2 MHz, 520 at 1.92 MHz).
            assert!(is_floor(counter_to_ns(1, f), 1, 1_000_000_000, f));
            for c in [
                0u64,
                1,
                7,
                f / 3 + 1,
                f * 3600,
                1 << 40,
                (1 << 62) + 12345,
                u64::MAX / 1_000_000_000,
            ] {
                if u128::from(c) * 1_000_000_000 / u128::from(f) > u128::from(u64::MAX) {
                    assert_eq!(counter_to_ns(c, f), u64::MAX, "{c} at {f} saturates");
                } else {
                    assert!(
                        is_floor(counter_to_ns(c, f), c, 1_000_000_000, f),
                        "{c} at {f}"
                    );
                }
                assert!(is_floor(counter_to_us(c, f), c, 1_000_000, f), "{c} at {f}");
                // Back and forth loses less than one counter tick per microsecond.
                let back = us_to_counter(counter_to_us(c, f), f);
                assert!(back <= c && c - back <= f.div_ceil(1_000_000), "{c} at {f}");
            }
            for us in [0u64, 1, 3, 999, 1_450, 4_000, 86_400_000_000] {
                assert!(
                    is_floor(us_to_counter(us, f), us, f, 1_000_000),
                    "{us} us at {f}"
                );
            }
            // Monotone across a range that crosses many fractional boundaries.
            let mut last = 0;
            for c in 0..5_000u64 {
                let ns = counter_to_ns(c, f);
                assert!(ns >= last);
                last = ns;
            }
        }
    }

    #[test]
    fn no_overflow_and_no_division_by_zero() {
        // 2^64 - 1 ticks at 1.2 MHz is ~487 000 years: the 128-bit product does not overflow,
        // and a result beyond u64 saturates instead of wrapping.
        assert_eq!(counter_to_ns(u64::MAX, 1_200_000), u64::MAX);
        assert_eq!(counter_to_ns(u64::MAX, 1_000_000_000), u64::MAX);
        assert_eq!(counter_to_us(u64::MAX, 1_200_000), u64::MAX / 6 * 5 + 2);
        assert_eq!(counter_to_ns(5, 0), 0);
        assert_eq!(counter_to_us(5, 0), 0);
        assert_eq!(tick_deadline(10, 3, 1_200_000, 0), 10 + 3_600_000);
    }
}
