//! Exact conversions between generic-counter cycles and nanoseconds.
//!
//! Linux converts counter deltas with `ns = (cyc × mult) >> shift`, where
//! `clocks_calc_mult_shift(&mult, &shift, from, to, maxsec)` picks the largest shift whose
//! 32-bit `mult` cannot overflow over `maxsec` seconds, rounding `mult` to nearest; the error is
//! bounded (well under 1 ppm) but not zero, and the timekeeping core re-bases deltas before
//! they get long. asym converts absolute counter values and wants timer deadlines that land on
//! exactly the right counter tick, so the conversion here is exact for every input:
//! - whole seconds are split off with one hardware divide by the frequency (`cyc / f`), which
//!   leaves a remainder `r < f`;
//! - the remainder goes through `(r × mult) >> shift` with `mult = ⌈2^shift × 10^9 / f⌉`
//!   rounded *up*, and `shift` chosen as in `clocks_calc_mult_shift`'s spirit (as large as the
//!   range needs) but so that `2^shift ≥ f² / gcd(f, 10^9)`. Rounding up overshoots
//!   `r × 10^9 / f` by less than `r / 2^shift ≤ gcd / f`, which is below the gap between that
//!   value and the next integer (a multiple of `gcd / f` away), so the floor is exact.
//!   `mult` is 64-bit and the product 128-bit (`umulh`), which keeps every frequency up to
//!   4.29 GHz exact (Linux's 32-bit `mult` could not be).
//!
//! The reverse, `ns → cyc` rounded up (a deadline's first counter value at or after it), is
//! exact the same way: whole seconds times `f`, plus `⌈r × f / 10^9⌉` for `r < 10^9`, whose
//! division by a constant the compiler turns into a multiply and shift itself.

/// Nanoseconds per second.
const NSEC_PER_SEC: u64 = 1_000_000_000;

/// Why a counter frequency cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockError {
    /// 0 Hz.
    ZeroFrequency,
}

impl core::fmt::Display for ClockError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ClockError::ZeroFrequency => write!(f, "clock: the counter frequency is 0 Hz"),
        }
    }
}

/// The conversions for one counter frequency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockConv {
    freq_hz: u64,
    mult: u64,
    shift: u32,
}

const fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        let t = a % b;
        a = b;
        b = t;
    }
    a
}

impl ClockConv {
    /// The conversions for a counter of `freq_hz` (at most `u32::MAX`: `CNTFRQ_EL0` is 32 bits).
    pub const fn new(freq_hz: u32) -> Result<ClockConv, ClockError> {
        if freq_hz == 0 {
            return Err(ClockError::ZeroFrequency);
        }
        let f = freq_hz as u64;
        let need = (f as u128 * f as u128) / gcd(f, NSEC_PER_SEC) as u128;
        let mut shift = 0;
        while (1u128 << shift) < need {
            shift += 1;
        }
        // ⌈2^shift × 10^9 / f⌉ < 2^64: 2^shift < 2 f² ≤ 2^65 and 10^9 / f ... checked below.
        let mult = ((1u128 << shift) * NSEC_PER_SEC as u128).div_ceil(f as u128);
        assert!(mult <= u64::MAX as u128, "clock: mult overflows");
        Ok(ClockConv {
            freq_hz: f,
            mult: mult as u64,
            shift,
        })
    }

    /// The counter frequency.
    pub const fn freq_hz(&self) -> u64 {
        self.freq_hz
    }

    /// `⌊cyc × 10^9 / f⌋`, saturating at `u64::MAX` (584 years).
    #[inline]
    pub fn cyc_to_ns(&self, cyc: u64) -> u64 {
        let secs = cyc / self.freq_hz;
        let rem = cyc % self.freq_hz;
        let frac = ((u128::from(rem) * u128::from(self.mult)) >> self.shift) as u64;
        secs.saturating_mul(NSEC_PER_SEC).saturating_add(frac)
    }

    /// `⌈ns × f / 10^9⌉`: the first counter value at or after `ns`, saturating.
    #[inline]
    pub fn ns_to_cyc(&self, ns: u64) -> u64 {
        let secs = ns / NSEC_PER_SEC;
        let rem = ns % NSEC_PER_SEC;
        let frac = (rem * self.freq_hz).div_ceil(NSEC_PER_SEC);
        secs.saturating_mul(self.freq_hz).saturating_add(frac)
    }

    /// The multiplier and shift of the sub-second conversion (for the docs and tests).
    pub const fn mult_shift(&self) -> (u64, u32) {
        (self.mult, self.shift)
    }
}

// Whole-quantity conversions for callers without a `ClockConv` (the firmware stand-in's vCPU,
// microsecond delays) and the tick's deadline sequence. At the boards' slow counters (HiKey
// 1.2 MHz, HiKey960 1.92 MHz) a per-tick period rounded once and then added up drifts, so the
// deadline of period `n` is `base + ⌊n·freq/hz⌋`, computed from the start of the sequence each
// time: `hz` periods are exactly `freq` counter ticks, whatever `freq/hz` rounds to.

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
    // A whole number of counter cycles per tick (every board's counter at every HZ we allow,
    // but not in general): no 128-bit division on the tick path.
    if freq_hz.is_multiple_of(hz) {
        if let Some(off) = n.checked_mul(freq_hz / hz) {
            return base.wrapping_add(off);
        }
    }
    base.wrapping_add(scale(n, freq_hz, hz))
}

/// The first deadline of the tick sequence `base + ⌊n·freq_hz/hz⌋` (n ≥ 0) at or after `at`: where
/// a timer due at `at` expires when timers run only from the tick (low-resolution mode,
/// `highres=off`). Linux without high-resolution hrtimers runs them from the tick
/// (`update_process_times` → `run_local_timers` → `hrtimer_run_queues`), and a NOHZ-idle CPU
/// programs its next event rounded up to a jiffy (`cmp_next_hrtimer_event`), so an hrtimer
/// fires on the first tick at or after its expiry. A deadline on a tick stays; one counter
/// cycle after it goes to the next tick; a deadline at or before `base` is returned as it is
/// (already due). `hz` 0 counts as 1; a tick past the counter's range saturates.
pub const fn tick_deadline_at_or_after(at: u64, base: u64, freq_hz: u64, hz: u32) -> u64 {
    if at <= base || freq_hz == 0 {
        return at;
    }
    let hz = if hz == 0 { 1 } else { hz as u64 };
    // The smallest n with ⌊n·f/hz⌋ ≥ e is ⌈e·hz/f⌉ (e is an integer, so ⌊x⌋ ≥ e ⟺ x ≥ e).
    let e = (at - base) as u128;
    let n = (e * hz as u128).div_ceil(freq_hz as u128);
    if n > u64::MAX as u128 {
        return u64::MAX;
    }
    let off = scale(n as u64, freq_hz, hz);
    match base.checked_add(off) {
        Some(d) => d,
        None => u64::MAX,
    }
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
    use super::*;

    /// The frequencies of the boards asym runs on: HiKey (1.2 MHz), HiKey960 (1.92 MHz),
    /// Juno r2 and most SoCs (24 MHz), Juno r2's FVP and others (50 MHz), QEMU virt (62.5 MHz),
    /// Armv8.6+ (1 GHz).
    const FREQS: [u32; 6] = [
        1_200_000,
        1_920_000,
        24_000_000,
        50_000_000,
        62_500_000,
        1_000_000_000,
    ];

    fn oracle_ns(f: u64, c: u64) -> u64 {
        (u128::from(c) * u128::from(NSEC_PER_SEC) / u128::from(f)).min(u128::from(u64::MAX)) as u64
    }

    fn oracle_cyc(f: u64, ns: u64) -> u64 {
        (u128::from(ns) * u128::from(f))
            .div_ceil(u128::from(NSEC_PER_SEC))
            .min(u128::from(u64::MAX)) as u64
    }

    /// Inputs that stress the remainder: around every multiple of a second and of the
    /// frequency's period structure, plus a pseudo-random spread over the whole range.
    fn samples(f: u64) -> Vec<u64> {
        let mut v = Vec::new();
        for s in [0u64, 1, 2, 59, 3600, 86_400, 31_536_000, 315_360_000] {
            let base = s * f;
            for d in 0..64u64 {
                v.push(base + d);
                v.push((base + f).saturating_sub(d + 1));
                v.push(base + f / 2 + d);
                v.push(base + f / 3 + d);
            }
        }
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ f;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Up to ~30 years of counter at 1 GHz; less at lower frequencies.
            v.push(x % (f * 1_000_000_000));
        }
        v
    }

    #[test]
    fn cyc_to_ns_is_exact_at_the_boards_frequencies() {
        for f in FREQS {
            let c = ClockConv::new(f).unwrap();
            for cyc in samples(u64::from(f)) {
                assert_eq!(
                    c.cyc_to_ns(cyc),
                    oracle_ns(u64::from(f), cyc),
                    "f {f} cyc {cyc}"
                );
            }
        }
    }

    #[test]
    fn cyc_to_ns_is_exact_over_a_whole_second_of_remainders() {
        // Every remainder once for the slow counters (where the remainder structure is
        // richest relative to f): the exactness argument covers all r < f.
        for f in [1_200_000u32, 1_920_000] {
            let c = ClockConv::new(f).unwrap();
            for r in 0..u64::from(f) {
                assert_eq!(c.cyc_to_ns(r), oracle_ns(u64::from(f), r), "f {f} r {r}");
            }
        }
    }

    #[test]
    fn ns_to_cyc_is_exact_and_rounds_up() {
        for f in FREQS {
            let c = ClockConv::new(f).unwrap();
            let f64_ = u64::from(f);
            for cyc in samples(f64_) {
                let ns = oracle_ns(f64_, cyc);
                for t in [ns, ns + 1, ns.saturating_sub(1)] {
                    let got = c.ns_to_cyc(t);
                    assert_eq!(got, oracle_cyc(f64_, t), "f {f} ns {t}");
                    // The deadline property timers rely on: the counter value is the first
                    // one at or after t.
                    assert!(c.cyc_to_ns(got) >= t, "f {f} ns {t}");
                    if got > 0 {
                        assert!(c.cyc_to_ns(got - 1) < t, "f {f} ns {t}");
                    }
                }
            }
        }
    }

    #[test]
    fn odd_frequencies_are_exact_too() {
        // A prime frequency (gcd with 10^9 is 1: the hardest case) and the 32-bit maximum.
        for f in [19_200_013u32, 999_999_937, u32::MAX] {
            let c = ClockConv::new(f).unwrap();
            for cyc in samples(u64::from(f)) {
                assert_eq!(
                    c.cyc_to_ns(cyc),
                    oracle_ns(u64::from(f), cyc),
                    "f {f} cyc {cyc}"
                );
            }
        }
    }

    #[test]
    fn saturates_instead_of_wrapping() {
        let c = ClockConv::new(1_200_000).unwrap();
        assert_eq!(c.cyc_to_ns(u64::MAX), u64::MAX);
        let c = ClockConv::new(u32::MAX).unwrap();
        assert_eq!(c.ns_to_cyc(u64::MAX), u64::MAX);
        assert_eq!(ClockConv::new(0), Err(ClockError::ZeroFrequency));
    }

    #[test]
    fn exact_frequencies_need_no_fraction() {
        // 62.5 MHz is 16 ns per cycle: mult / 2^shift must be exactly 16.
        let c = ClockConv::new(62_500_000).unwrap();
        let (m, s) = c.mult_shift();
        assert_eq!(u128::from(m), 16u128 << s);
    }
}

#[cfg(test)]
mod scale_tests {
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
    fn lowres_expiry_is_the_first_tick_deadline_at_or_after() {
        // QEMU virt's 62.5 MHz at HZ=250: 250,000 cycles a tick.
        let (f, hz, base) = (62_500_000u64, 250u32, 1_000u64);
        let p = 250_000u64;
        // On a tick: stays.
        assert_eq!(
            tick_deadline_at_or_after(base + 3 * p, base, f, hz),
            base + 3 * p
        );
        // One cycle after a tick: the next one.
        assert_eq!(
            tick_deadline_at_or_after(base + 3 * p + 1, base, f, hz),
            base + 4 * p
        );
        // One cycle before a tick: that tick.
        assert_eq!(
            tick_deadline_at_or_after(base + 4 * p - 1, base, f, hz),
            base + 4 * p
        );
        // Before the grid starts, or on its origin: already due, unchanged.
        assert_eq!(tick_deadline_at_or_after(base, base, f, hz), base);
        assert_eq!(tick_deadline_at_or_after(5, base, f, hz), 5);
        // Far out, and at the counter's end.
        assert_eq!(
            tick_deadline_at_or_after(u64::MAX - 10, base, f, hz),
            u64::MAX
        );
        // Against the tick sequence itself, at every board frequency and HZ, including the
        // uneven ones (1.92 MHz at HZ=300 is 6,400 cycles; 1.2 MHz at HZ=1024 is not whole):
        // the result is a deadline of the sequence, at or after `at`, and the one before it is
        // before `at`.
        for f in FREQS {
            for hz in HZS {
                let base = 12_345u64;
                for n in 1..200u64 {
                    let d = tick_deadline(base, n, f, hz);
                    let prev = tick_deadline(base, n - 1, f, hz);
                    for at in [prev + 1, (prev + d) / 2 + 1, d - 1, d] {
                        if at <= prev {
                            continue;
                        }
                        assert_eq!(
                            tick_deadline_at_or_after(at, base, f, hz),
                            d,
                            "{f} Hz HZ={hz} n {n} at {at}"
                        );
                    }
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
