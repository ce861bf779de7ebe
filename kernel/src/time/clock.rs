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
