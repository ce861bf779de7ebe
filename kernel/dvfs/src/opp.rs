//! Operating points from the firmware checked against the device tree and the board's data:
//! the differences, one line each, for the boot log.
//!
//! The three sources rarely agree on everything: Juno r2's SCMI firmware reports frequencies
//! and power (mW) but no voltage, its mainline DT has no OPP table at all, and the board data
//! carries the legacy SCPI firmware's voltages. So the check compares what two sources both
//! have — the set of frequencies, voltages where both give one, the firmware's power against
//! the energy model's `C × V² × f` where a voltage and a coefficient are known (Linux
//! `em_compute_costs` inputs; `dev_pm_opp_of_register_em`'s formula, µW =
//! coefficient × mV² × MHz / 10⁶), and the transition latency.

use core::fmt;

use asym_sched::types::{Khz, MicroVolt};

/// Where an operating point comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The firmware (SCMI `DESCRIBE_LEVELS`, a stub-clock read-back).
    Firmware,
    /// The device tree's `operating-points-v2` table.
    DeviceTree,
    /// The board crate's table.
    Board,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Source::Firmware => "firmware",
            Source::DeviceTree => "DT",
            Source::Board => "board data",
        })
    }
}

/// One operating point as one source describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Opp {
    /// The frequency.
    pub freq: Khz,
    /// The voltage, if the source gives one.
    pub voltage: Option<MicroVolt>,
    /// The power, µW, if the source gives one.
    pub power_uw: Option<u64>,
}

impl Opp {
    /// A frequency and voltage (DT, board data).
    pub const fn with_voltage(freq: Khz, voltage: MicroVolt) -> Opp {
        Opp {
            freq,
            voltage: Some(voltage),
            power_uw: None,
        }
    }
}

/// The operating points of one domain as one source describes them.
#[derive(Clone, Copy, Debug)]
pub struct Table<'a> {
    /// Where they come from.
    pub source: Source,
    /// Ascending or not; compared by frequency.
    pub opps: &'a [Opp],
    /// Transition latency, µs, if the source gives one.
    pub latency_us: Option<u32>,
}

/// One difference between two sources.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Difference {
    /// `freq` is in `present` but not in `absent`.
    Missing {
        freq: Khz,
        present: Source,
        absent: Source,
    },
    /// The two sources give `freq` different voltages.
    Voltage {
        freq: Khz,
        a: (Source, MicroVolt),
        b: (Source, MicroVolt),
    },
    /// The firmware's power at `freq` differs from `C × V² × f` with `voltage` from `source`
    /// by more than the firmware's resolution.
    Power {
        freq: Khz,
        firmware_uw: u64,
        model_uw: u64,
        source: Source,
    },
    /// The sources give different transition latencies.
    Latency { a: (Source, u32), b: (Source, u32) },
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Difference::Missing {
                freq,
                present,
                absent,
            } => write!(f, "{} kHz is in the {present} but not in the {absent}", freq.0),
            Difference::Voltage { freq, a, b } => write!(
                f,
                "{} kHz: {} {} uV, {} {} uV",
                freq.0, a.0, a.1 .0, b.0, b.1 .0
            ),
            Difference::Power {
                freq,
                firmware_uw,
                model_uw,
                source,
            } => write!(
                f,
                "{} kHz: firmware power {firmware_uw} uW, C*V^2*f with the {source} voltage {model_uw} uW",
                freq.0
            ),
            Difference::Latency { a, b } => {
                write!(f, "transition latency: {} {} us, {} {} us", a.0, a.1, b.0, b.1)
            }
        }
    }
}

/// The most differences a report keeps.
pub const MAX_DIFFERENCES: usize = 48;

/// The differences found (at most [`MAX_DIFFERENCES`], then counted).
#[derive(Clone, Copy, Debug)]
pub struct Report {
    diffs: [Option<Difference>; MAX_DIFFERENCES],
    n: usize,
    /// Differences beyond the first [`MAX_DIFFERENCES`].
    pub dropped: usize,
}

impl Report {
    fn new() -> Self {
        Report {
            diffs: [None; MAX_DIFFERENCES],
            n: 0,
            dropped: 0,
        }
    }

    fn push(&mut self, d: Difference) {
        if self.n < MAX_DIFFERENCES {
            self.diffs[self.n] = Some(d);
            self.n += 1;
        } else {
            self.dropped += 1;
        }
    }

    /// The differences.
    pub fn iter(&self) -> impl Iterator<Item = &Difference> {
        self.diffs[..self.n].iter().flatten()
    }

    /// Whether the sources agree.
    pub fn is_empty(&self) -> bool {
        self.n == 0 && self.dropped == 0
    }
}

/// `coefficient × mV² × MHz / 10⁶` µW (the energy model's power, Linux `dev_pm_opp_calc_power`).
pub fn model_power_uw(coefficient: u32, voltage: MicroVolt, freq: Khz) -> u64 {
    let mv = u64::from(voltage.0) / 1000;
    let mhz = u64::from(freq.0) / 1000;
    u64::from(coefficient) * mv * mv * mhz / 1_000_000
}

/// Compares every pair of `tables` (normally firmware, DT, board). `coefficient` is the
/// domain's `dynamic-power-coefficient`; `power_resolution_uw` is the firmware's power step
/// (1000 for milliwatts: it truncates), below which a power difference is not reported.
pub fn cross_check(
    tables: &[Table<'_>],
    coefficient: Option<u32>,
    power_resolution_uw: u64,
) -> Report {
    let mut r = Report::new();
    for (i, a) in tables.iter().enumerate() {
        for b in &tables[i + 1..] {
            compare(&mut r, a, b, coefficient, power_resolution_uw);
        }
    }
    r
}

fn compare(r: &mut Report, a: &Table<'_>, b: &Table<'_>, coefficient: Option<u32>, tol: u64) {
    for (x, y) in [(a, b), (b, a)] {
        for o in x.opps {
            if !y.opps.iter().any(|p| p.freq == o.freq) {
                r.push(Difference::Missing {
                    freq: o.freq,
                    present: x.source,
                    absent: y.source,
                });
            }
        }
    }
    for o in a.opps {
        let Some(p) = b.opps.iter().find(|p| p.freq == o.freq) else {
            continue;
        };
        if let (Some(va), Some(vb)) = (o.voltage, p.voltage) {
            if va != vb {
                r.push(Difference::Voltage {
                    freq: o.freq,
                    a: (a.source, va),
                    b: (b.source, vb),
                });
            }
        }
        for (fw, other, other_src) in [(o, p, b.source), (p, o, a.source)] {
            let (Some(pw), Some(v), Some(c)) = (fw.power_uw, other.voltage, coefficient) else {
                continue;
            };
            if fw.voltage.is_some() {
                continue;
            }
            let m = model_power_uw(c, v, fw.freq);
            if pw.abs_diff(m) >= tol.max(1) {
                r.push(Difference::Power {
                    freq: fw.freq,
                    firmware_uw: pw,
                    model_uw: m,
                    source: other_src,
                });
            }
        }
    }
    if let (Some(la), Some(lb)) = (a.latency_us, b.latency_us) {
        if la != lb {
            r.push(Difference::Latency {
                a: (a.source, la),
                b: (b.source, lb),
            });
        }
    }
}
