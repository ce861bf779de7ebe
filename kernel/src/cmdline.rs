//! The kernel command line (`/chosen/bootargs`, QEMU `-append`) parsed into typed options.
//!
//! Linux parses `key` / `key=value` words with `parse_args()` (`kernel/params.c`) and
//! `__setup()` handlers, and silently passes unknown words to init. Deliberate difference: asym
//! has no init, so every unknown option and every malformed value is reported (naming the
//! option) and the default is kept; parsing never fails as a whole. Pure code: host-tested.

use core::fmt;

/// Default tick rate; the build can override it with `ASYM_HZ`.
pub const DEFAULT_HZ: u32 = parse_hz_const(option_env!("ASYM_HZ"));
/// Allowed `hz=` range.
pub const HZ_RANGE: core::ops::RangeInclusive<u32> = 100..=1000;

/// Longest `selftest=` filter.
pub const FILTER_MAX: usize = 64;
/// Most problems reported for one command line (the rest are counted).
pub const MAX_ERRORS: usize = 8;

/// printk-like log levels, lowest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum LogLevel {
    Trace = 0,
    Debug = 1,
    Info = 2,
    Warn = 3,
    Error = 4,
}

/// Whether and which self tests to run.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum SelfTestMode {
    /// Normal boot.
    #[default]
    Off,
    /// `selftest`: all tests.
    All,
    /// `selftest=<filter>`: tests whose name contains the filter.
    Filter(heapless::String<FILTER_MAX>),
}

/// A deliberate failure to check the failure paths end the run (`crash=`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashKind {
    /// `crash=panic`: panic on the highest online CPU.
    Panic,
    /// `crash=fault`: a data abort outside any test on the highest online CPU.
    Fault,
    /// `crash=stack`: unbounded recursion on the highest online CPU (stack guard page).
    Stack,
    /// `crash=nested`: a data abort on the highest online CPU whose fault report itself faults
    /// (a test of the fatal path's re-entrancy).
    Nested,
    /// `crash=locked`: a data abort on the highest online CPU while it holds the console lock.
    Locked,
    /// `crash=park`: the highest online CPU parks (as a CPU whose bring-up failed does) and
    /// the rest of the system carries on.
    Park,
    /// `crash=held`: the highest online CPU stops for good holding the console lock (a CPU
    /// hung in a critical section), then the boot CPU panics: its report must still reach the
    /// console.
    Held,
    /// `crash=deaf`: the highest online CPU stops taking interrupts (its GIC interface masked)
    /// but stays online and idle; a cross call to it must end with the timeout's message.
    Deaf,
    /// `crash=lockorder`: the highest online CPU takes two locks against the lock order (a
    /// console-ranked lock, then a wait-queue-ranked one): with the checker on (`lockdep`) it
    /// must panic naming both.
    LockOrder,
}

/// The parsed command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cmdline {
    /// `hz=`: tick rate in Hz.
    pub hz: u32,
    /// `highres=on|off` (default on): whether timers expire at their deadline (Linux's
    /// high-resolution hrtimer mode) or on the first tick at or after it (`off`: hrtimers in
    /// low-resolution mode, run from the tick; `crate::timer`).
    pub highres: bool,
    pub selftest: SelfTestMode,
    /// `loglevel=`.
    pub loglevel: LogLevel,
    /// `maxcpus=`: bring up at most this many CPUs (boot CPU included).
    pub maxcpus: Option<u16>,
    /// `ticks=`: print tick counts after this many ticks, then stop.
    pub ticks: Option<u64>,
    /// `semihosting` (implied by `selftest`): exit QEMU through semihosting.
    pub semihosting: bool,
    /// `bench`: print the boot benchmark lines.
    pub bench: bool,
    /// `bench=switch`: run the context-switch benchmarks instead of the self tests.
    pub bench_switch: bool,
    /// `bench=sched-costs`: run the scheduler cost benchmarks (placement, balance softirq,
    /// tick, run-queue lock hold times) instead of the self tests.
    pub bench_sched_costs: bool,
    /// `bench=switch-profile`: run the round trips of `bench=switch` a few times each between
    /// profile marks, for `cargo xtask bench switch --profile` (kernel/src/bench.rs).
    pub bench_switch_profile: bool,
    /// `soak=<seconds>`: run the long stress run for this much guest time, then end.
    pub soak_s: Option<u32>,
    /// `el0_fuzz=<calls>`: system calls the EL0 fuzz self test makes (default: its short
    /// size; 100000 for the full run).
    pub el0_fuzz_calls: Option<u64>,
    /// `lockdep` (implied by `selftest`): check the lock order at every lock taken.
    pub lockdep: bool,
    /// `crash=panic|fault|stack|nested|locked|park|held|deaf|lockorder`: after the banner, fail on purpose (tests of
    /// the failure paths).
    pub crash: Option<CrashKind>,
    /// `panic=N` (Linux's `panic_timeout`): after a fatal error without `semihosting`, reset
    /// the system after N seconds; 0 (the default) halts it for good, a negative N resets at
    /// once.
    pub panic_timeout_s: i32,
    /// The scheduler's options, kept as written for `crate::sched` to parse and report:
    /// `sched_features=FEAT,NO_FEAT,...`, `sched_balance=on|off` (load balancing) and
    /// `cpufreq.<domain>.<min_khz|max_khz|governor>=v`.
    pub sched_args: heapless::String<SCHED_ARGS_MAX>,
    /// `rtapp=<host path>|demo`: run this rt-app workload (read over semihosting, or the
    /// bundled demo built into the image) instead of the tick report.
    pub rtapp: Option<heapless::String<PATH_MAX>>,
    /// `rtapp_trace=<host path>`: write the workload run's ftrace text there (semihosting).
    pub rtapp_trace: Option<heapless::String<PATH_MAX>>,
    /// `rtapp_el0=<host path>`: run the workload with this EL0 rt-app executor (an ELF read
    /// over semihosting, `user/rtapp`) instead of the in-kernel one.
    pub rtapp_el0: Option<heapless::String<PATH_MAX>>,
    /// `rtapp_duration_ms=N`: end the workload run after N ms of guest time (else the
    /// workload's `global.duration`).
    pub rtapp_duration_ms: Option<u64>,
}

/// Longest host path kept for `rtapp=` and `rtapp_trace=`.
pub const PATH_MAX: usize = 200;

/// Longest total of the scheduler's options kept in [`Cmdline::sched_args`].
pub const SCHED_ARGS_MAX: usize = 256;

impl Default for Cmdline {
    fn default() -> Self {
        Cmdline {
            hz: DEFAULT_HZ,
            highres: true,
            selftest: SelfTestMode::Off,
            loglevel: LogLevel::Info,
            maxcpus: None,
            ticks: None,
            semihosting: false,
            bench: false,
            bench_switch: false,
            bench_sched_costs: false,
            bench_switch_profile: false,
            soak_s: None,
            el0_fuzz_calls: None,
            lockdep: false,
            crash: None,
            panic_timeout_s: 0,
            sched_args: heapless::String::new(),
            rtapp: None,
            rtapp_trace: None,
            rtapp_el0: None,
            rtapp_duration_ms: None,
        }
    }
}

/// One problem with one option.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CmdlineError<'a> {
    /// The key is not an option asym knows.
    Unknown { option: &'a str },
    /// The option takes a value and got none (`hz`).
    MissingValue {
        option: &'static str,
        expected: &'static str,
    },
    /// The option takes no value and got one (`bench=1`).
    UnexpectedValue {
        option: &'static str,
        value: &'a str,
    },
    /// The value does not parse or is out of range.
    BadValue {
        option: &'static str,
        value: &'a str,
        expected: &'static str,
    },
}

impl fmt::Display for CmdlineError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmdlineError::Unknown { option } => {
                write!(f, "cmdline: unknown option `{option}` (ignored)")
            }
            CmdlineError::MissingValue { option, expected } => {
                write!(
                    f,
                    "cmdline: option `{option}` needs a value: {expected} (default kept)"
                )
            }
            CmdlineError::UnexpectedValue { option, value } => {
                write!(
                    f,
                    "cmdline: option `{option}` takes no value, got `{option}={value}` (ignored)"
                )
            }
            CmdlineError::BadValue {
                option,
                value,
                expected,
            } => {
                write!(
                    f,
                    "cmdline: bad value `{option}={value}`: expected {expected} (default kept)"
                )
            }
        }
    }
}

/// The result of parsing: options plus every problem found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed<'a> {
    pub cmdline: Cmdline,
    pub errors: heapless::Vec<CmdlineError<'a>, MAX_ERRORS>,
    /// Problems beyond [`MAX_ERRORS`].
    pub errors_dropped: usize,
}

impl Cmdline {
    /// Parses space-separated `key` / `key=value` words. Never fails: problems are collected
    /// and the affected options keep their defaults.
    pub fn parse(line: &str) -> Parsed<'_> {
        let mut cmdline = Cmdline::default();
        let mut errors = heapless::Vec::new();
        let mut errors_dropped = 0;
        for word in line.split_ascii_whitespace() {
            let (key, value) = match word.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (word, None),
            };
            if let Err(e) = cmdline.apply(key, value) {
                if errors.push(e).is_err() {
                    errors_dropped += 1;
                }
            }
        }
        Parsed {
            cmdline,
            errors,
            errors_dropped,
        }
    }

    /// Whether the run should end through semihosting.
    pub fn use_semihosting(&self) -> bool {
        self.semihosting
            || self.selftest != SelfTestMode::Off
            || self.bench_switch
            || self.bench_sched_costs
            || self.bench_switch_profile
            || self.soak_s.is_some()
            || self.rtapp.is_some()
    }

    fn apply<'a>(&mut self, key: &'a str, value: Option<&'a str>) -> Result<(), CmdlineError<'a>> {
        match key {
            "hz" => {
                const EXP: &str = "an integer in 100..=1000";
                let v = value.ok_or(CmdlineError::MissingValue {
                    option: "hz",
                    expected: EXP,
                })?;
                match v.parse::<u32>() {
                    Ok(hz) if HZ_RANGE.contains(&hz) => self.hz = hz,
                    _ => {
                        return Err(CmdlineError::BadValue {
                            option: "hz",
                            value: v,
                            expected: EXP,
                        })
                    }
                }
            }
            "highres" => {
                const EXP: &str = "on or off";
                let v = value.ok_or(CmdlineError::MissingValue {
                    option: "highres",
                    expected: EXP,
                })?;
                self.highres = match v {
                    "on" => true,
                    "off" => false,
                    _ => {
                        return Err(CmdlineError::BadValue {
                            option: "highres",
                            value: v,
                            expected: EXP,
                        })
                    }
                };
            }
            "selftest" => match value {
                None => self.selftest = SelfTestMode::All,
                Some(f) => {
                    const EXP: &str = "a non-empty test-name filter of at most 64 bytes";
                    let mut s = heapless::String::new();
                    if f.is_empty() || s.push_str(f).is_err() {
                        return Err(CmdlineError::BadValue {
                            option: "selftest",
                            value: f,
                            expected: EXP,
                        });
                    }
                    self.selftest = SelfTestMode::Filter(s);
                }
            },
            "loglevel" => {
                const EXP: &str = "one of trace, debug, info, warn, error";
                let v = value.ok_or(CmdlineError::MissingValue {
                    option: "loglevel",
                    expected: EXP,
                })?;
                self.loglevel = match v {
                    "trace" => LogLevel::Trace,
                    "debug" => LogLevel::Debug,
                    "info" => LogLevel::Info,
                    "warn" => LogLevel::Warn,
                    "error" => LogLevel::Error,
                    _ => {
                        return Err(CmdlineError::BadValue {
                            option: "loglevel",
                            value: v,
                            expected: EXP,
                        })
                    }
                };
            }
            "maxcpus" => {
                const EXP: &str = "an integer in 1..=8";
                let v = value.ok_or(CmdlineError::MissingValue {
                    option: "maxcpus",
                    expected: EXP,
                })?;
                match v.parse::<u16>() {
                    Ok(n) if (1..=crate::dt::MAX_CPUS as u16).contains(&n) => {
                        self.maxcpus = Some(n)
                    }
                    _ => {
                        return Err(CmdlineError::BadValue {
                            option: "maxcpus",
                            value: v,
                            expected: EXP,
                        })
                    }
                }
            }
            "el0_fuzz" => {
                const EXP: &str = "an integer in 1..=10000000";
                let v = value.ok_or(CmdlineError::MissingValue {
                    option: "el0_fuzz",
                    expected: EXP,
                })?;
                match v.parse::<u64>() {
                    Ok(n) if (1..=10_000_000).contains(&n) => self.el0_fuzz_calls = Some(n),
                    _ => {
                        return Err(CmdlineError::BadValue {
                            option: "el0_fuzz",
                            value: v,
                            expected: EXP,
                        })
                    }
                }
            }
            "ticks" => {
                const EXP: &str = "a positive integer";
                let v = value.ok_or(CmdlineError::MissingValue {
                    option: "ticks",
                    expected: EXP,
                })?;
                match v.parse::<u64>() {
                    Ok(n) if n > 0 => self.ticks = Some(n),
                    _ => {
                        return Err(CmdlineError::BadValue {
                            option: "ticks",
                            value: v,
                            expected: EXP,
                        })
                    }
                }
            }
            "crash" => {
                const EXP: &str =
                    "`panic`, `fault`, `stack`, `nested`, `locked`, `park`, `held` or `deaf`";
                let v = value.ok_or(CmdlineError::MissingValue {
                    option: "crash",
                    expected: EXP,
                })?;
                self.crash = Some(match v {
                    "panic" => CrashKind::Panic,
                    "fault" => CrashKind::Fault,
                    "stack" => CrashKind::Stack,
                    "nested" => CrashKind::Nested,
                    "locked" => CrashKind::Locked,
                    "park" => CrashKind::Park,
                    "held" => CrashKind::Held,
                    "deaf" => CrashKind::Deaf,
                    "lockorder" => CrashKind::LockOrder,
                    _ => {
                        return Err(CmdlineError::BadValue {
                            option: "crash",
                            value: v,
                            expected: EXP,
                        })
                    }
                });
            }
            "panic" => {
                const EXP: &str = "an integer number of seconds (0: halt, negative: at once)";
                let v = value.ok_or(CmdlineError::MissingValue {
                    option: "panic",
                    expected: EXP,
                })?;
                match v.parse::<i32>() {
                    Ok(t) => self.panic_timeout_s = t,
                    Err(_) => {
                        return Err(CmdlineError::BadValue {
                            option: "panic",
                            value: v,
                            expected: EXP,
                        })
                    }
                }
            }
            k if k == "sched_features" || k == "sched_balance" || k.starts_with("cpufreq.") => {
                let v = value.ok_or(CmdlineError::MissingValue {
                    option: "sched_features / sched_balance / cpufreq.<domain>.<knob>",
                    expected: "a value",
                })?;
                if k == "sched_balance" && !matches!(v, "on" | "off") {
                    return Err(CmdlineError::BadValue {
                        option: "sched_balance",
                        value: v,
                        expected: "on or off",
                    });
                }
                let s = &mut self.sched_args;
                let ok = (s.is_empty() || s.push(' ').is_ok())
                    && s.push_str(k).is_ok()
                    && s.push('=').is_ok()
                    && s.push_str(v).is_ok();
                if !ok {
                    return Err(CmdlineError::BadValue {
                        option: "sched_features / cpufreq.<domain>.<knob>",
                        value: v,
                        expected: "at most 256 bytes of scheduler options in all",
                    });
                }
            }
            "semihosting" => self.semihosting = flag("semihosting", value)?,
            "bench" => {
                match value {
                    None => self.bench = true,
                    Some("switch") => self.bench_switch = true,
                    Some("sched-costs") => self.bench_sched_costs = true,
                    Some("switch-profile") => self.bench_switch_profile = true,
                    Some(v) => return Err(CmdlineError::BadValue {
                        option: "bench",
                        value: v,
                        expected:
                            "no value (boot timing), `switch`, `sched-costs` or `switch-profile`",
                    }),
                }
            }
            "soak" => {
                const EXP: &str = "seconds of guest time, 1..=86400";
                let v = value.ok_or(CmdlineError::MissingValue {
                    option: "soak",
                    expected: EXP,
                })?;
                match v.parse::<u32>() {
                    Ok(t) if (1..=86_400).contains(&t) => self.soak_s = Some(t),
                    _ => {
                        return Err(CmdlineError::BadValue {
                            option: "soak",
                            value: v,
                            expected: EXP,
                        })
                    }
                }
            }
            "lockdep" => self.lockdep = flag("lockdep", value)?,
            "rtapp" | "rtapp_trace" | "rtapp_el0" => {
                const EXP: &str = "a host path of at most 200 bytes (or `demo` for rtapp)";
                let option = match key {
                    "rtapp" => "rtapp",
                    "rtapp_el0" => "rtapp_el0",
                    _ => "rtapp_trace",
                };
                let v = value.ok_or(CmdlineError::MissingValue {
                    option,
                    expected: EXP,
                })?;
                let mut s = heapless::String::new();
                if v.is_empty() || s.push_str(v).is_err() {
                    return Err(CmdlineError::BadValue {
                        option,
                        value: v,
                        expected: EXP,
                    });
                }
                match option {
                    "rtapp" => self.rtapp = Some(s),
                    "rtapp_el0" => self.rtapp_el0 = Some(s),
                    _ => self.rtapp_trace = Some(s),
                }
            }
            "rtapp_duration_ms" => {
                const EXP: &str = "a positive number of ms, at most 3600000";
                let v = value.ok_or(CmdlineError::MissingValue {
                    option: "rtapp_duration_ms",
                    expected: EXP,
                })?;
                match v.parse::<u64>() {
                    Ok(n) if (1..=3_600_000).contains(&n) => self.rtapp_duration_ms = Some(n),
                    _ => {
                        return Err(CmdlineError::BadValue {
                            option: "rtapp_duration_ms",
                            value: v,
                            expected: EXP,
                        })
                    }
                }
            }
            _ => return Err(CmdlineError::Unknown { option: key }),
        }
        Ok(())
    }
}

fn flag<'a>(option: &'static str, value: Option<&'a str>) -> Result<bool, CmdlineError<'a>> {
    match value {
        None => Ok(true),
        Some(v) => Err(CmdlineError::UnexpectedValue { option, value: v }),
    }
}

/// `ASYM_HZ` at build time, or 250 (an out-of-range or non-numeric value fails the build).
const fn parse_hz_const(s: Option<&str>) -> u32 {
    let Some(s) = s else { return 250 };
    let b = s.as_bytes();
    assert!(!b.is_empty(), "ASYM_HZ is empty");
    let mut i = 0;
    let mut v: u32 = 0;
    while i < b.len() {
        assert!(b[i].is_ascii_digit(), "ASYM_HZ must be a decimal integer");
        v = v * 10 + (b[i] - b'0') as u32;
        assert!(v <= 1000, "ASYM_HZ must be in 100..=1000");
        i += 1;
    }
    assert!(v >= 100, "ASYM_HZ must be in 100..=1000");
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_line_gives_defaults_and_no_errors() {
        let p = Cmdline::parse("");
        assert_eq!(p.cmdline, Cmdline::default());
        assert!(p.errors.is_empty());
        assert_eq!(
            p.cmdline.hz,
            if option_env!("ASYM_HZ").is_some() {
                DEFAULT_HZ
            } else {
                250
            }
        );
    }

    #[test]
    fn rtapp_options_parse_and_bad_values_are_named() {
        let c = Cmdline::parse(
            "rtapp=/tmp/w.json rtapp_trace=out/t.txt rtapp_duration_ms=500 rtapp_el0=/tmp/x",
        )
        .cmdline;
        assert_eq!(c.rtapp.as_deref(), Some("/tmp/w.json"));
        assert_eq!(c.rtapp_el0.as_deref(), Some("/tmp/x"));
        assert_eq!(c.rtapp_trace.as_deref(), Some("out/t.txt"));
        assert_eq!(c.rtapp_duration_ms, Some(500));
        assert!(c.use_semihosting());
        let long = format!("rtapp={}", "a".repeat(PATH_MAX + 1));
        for bad in [
            "rtapp",
            "rtapp=",
            long.as_str(),
            "rtapp_duration_ms=0",
            "rtapp_duration_ms=x",
        ] {
            let p = Cmdline::parse(bad);
            assert_eq!(p.errors.len(), 1, "{bad}");
            assert!(p.errors[0].to_string().contains("rtapp"), "{bad}");
        }
    }

    #[test]
    fn every_option_parses() {
        let p = Cmdline::parse(
            "  hz=1000 selftest=heap loglevel=debug maxcpus=4 ticks=20 semihosting bench crash=fault ",
        );
        assert!(p.errors.is_empty(), "{:?}", p.errors);
        let c = p.cmdline;
        assert_eq!(c.hz, 1000);
        assert_eq!(
            c.selftest,
            SelfTestMode::Filter(heapless::String::try_from("heap").unwrap())
        );
        assert_eq!(c.loglevel, LogLevel::Debug);
        assert_eq!(c.maxcpus, Some(4));
        assert_eq!(c.ticks, Some(20));
        assert!(c.semihosting && c.bench);
        assert_eq!(c.crash, Some(CrashKind::Fault));
        let c = Cmdline::parse("sched_balance=off").cmdline;
        assert_eq!(c.sched_args.as_str(), "sched_balance=off");
        let c = Cmdline::parse("bench=switch soak=600 lockdep").cmdline;
        assert!(c.bench_switch && !c.bench && c.lockdep);
        assert_eq!(c.soak_s, Some(600));
        let costs = Cmdline::parse("bench=sched-costs").cmdline;
        assert!(costs.bench_sched_costs && !costs.bench_switch && costs.use_semihosting());
        let prof = Cmdline::parse("bench=switch-profile").cmdline;
        assert!(prof.bench_switch_profile && !prof.bench_switch && prof.use_semihosting());
        assert_eq!(
            Cmdline::parse("el0_fuzz=100000").cmdline.el0_fuzz_calls,
            Some(100_000)
        );
        for bad in [
            "el0_fuzz=0",
            "el0_fuzz=x",
            "soak=0",
            "soak=86401",
            "soak=x",
            "soak",
            "lockdep=1",
            "bench=boot",
            "sched_balance=yes",
            "sched_balance",
        ] {
            assert_eq!(Cmdline::parse(bad).errors.len(), 1, "{bad}");
        }
        assert_eq!(
            Cmdline::parse("crash=panic").cmdline.crash,
            Some(CrashKind::Panic)
        );
        for (v, k) in [
            ("stack", CrashKind::Stack),
            ("nested", CrashKind::Nested),
            ("locked", CrashKind::Locked),
            ("park", CrashKind::Park),
        ] {
            assert_eq!(Cmdline::parse(&format!("crash={v}")).cmdline.crash, Some(k));
        }
        assert_eq!(Cmdline::parse("panic=-1").cmdline.panic_timeout_s, -1);
        assert_eq!(Cmdline::parse("panic=30").cmdline.panic_timeout_s, 30);
        let p = Cmdline::parse("panic=soon");
        assert_eq!(p.cmdline.panic_timeout_s, 0);
        assert!(matches!(
            p.errors[0],
            CmdlineError::BadValue {
                option: "panic",
                ..
            }
        ));
        assert!(matches!(
            Cmdline::parse("crash=boom").errors[0],
            CmdlineError::BadValue {
                option: "crash",
                ..
            }
        ));
    }

    #[test]
    fn selftest_alone_runs_all_and_implies_semihosting() {
        let c = Cmdline::parse("selftest").cmdline;
        assert_eq!(c.selftest, SelfTestMode::All);
        assert!(c.use_semihosting());
        assert!(!Cmdline::parse("hz=100").cmdline.use_semihosting());
    }

    #[test]
    fn highres_takes_on_or_off() {
        assert!(Cmdline::parse("").cmdline.highres, "default on");
        assert!(!Cmdline::parse("highres=off").cmdline.highres);
        assert!(Cmdline::parse("highres=off highres=on").cmdline.highres);
        for bad in ["highres=no", "highres=", "highres=1", "highres"] {
            let p = Cmdline::parse(bad);
            assert!(p.cmdline.highres, "{bad}: default kept");
            assert_eq!(p.errors.len(), 1, "{bad}");
            let msg = p.errors[0].to_string();
            assert!(msg.contains("`highres"), "{bad}: {msg}");
            assert!(msg.contains("on or off"), "{bad}: {msg}");
        }
        assert_eq!(
            Cmdline::parse("highres=maybe").errors[0].to_string(),
            "cmdline: bad value `highres=maybe`: expected on or off (default kept)"
        );
    }

    #[test]
    fn hz_bounds_are_inclusive() {
        assert_eq!(Cmdline::parse("hz=100").cmdline.hz, 100);
        assert_eq!(Cmdline::parse("hz=1000").cmdline.hz, 1000);
        for bad in [
            "hz=99", "hz=1001", "hz=0", "hz=-5", "hz=abc", "hz=", "hz=2.5e2",
        ] {
            let p = Cmdline::parse(bad);
            assert_eq!(p.cmdline.hz, DEFAULT_HZ, "{bad}");
            assert!(
                matches!(p.errors[0], CmdlineError::BadValue { option: "hz", .. }),
                "{bad}: {:?}",
                p.errors
            );
        }
    }

    #[test]
    fn malformed_options_are_reported_by_name_and_others_still_apply() {
        let p = Cmdline::parse(
            "hz loglevel=loud frobnicate maxcpus=9 ticks=0 bench=yes selftest= hz=300",
        );
        assert_eq!(p.cmdline.hz, 300, "later valid hz still applies");
        let msgs: Vec<String> = p.errors.iter().map(|e| e.to_string()).collect();
        assert_eq!(msgs.len(), 7, "{msgs:#?}");
        assert!(msgs[0].contains("`hz` needs a value"));
        assert!(msgs[1].contains("`loglevel=loud`"));
        assert!(msgs[2].contains("unknown option `frobnicate`"));
        assert!(msgs[3].contains("`maxcpus=9`"));
        assert!(msgs[4].contains("`ticks=0`"));
        assert!(msgs[5].contains("`bench=yes`"), "{}", msgs[5]);
        assert!(msgs[6].contains("`selftest=`"));
        assert_eq!(p.cmdline.loglevel, LogLevel::Info);
        assert_eq!(p.cmdline.maxcpus, None);
        assert_eq!(p.cmdline.selftest, SelfTestMode::Off);
        assert!(!p.cmdline.bench);
    }

    #[test]
    fn too_many_errors_are_counted_not_lost() {
        let line = "a b c d e f g h i j";
        let p = Cmdline::parse(line);
        assert_eq!(p.errors.len(), MAX_ERRORS);
        assert_eq!(p.errors_dropped, 10 - MAX_ERRORS);
    }

    #[test]
    fn overlong_filter_is_rejected() {
        let long = format!("selftest={}", "x".repeat(FILTER_MAX + 1));
        let p = Cmdline::parse(&long);
        assert_eq!(p.cmdline.selftest, SelfTestMode::Off);
        assert_eq!(p.errors.len(), 1);
    }

    #[test]
    fn hz_const_parser() {
        assert_eq!(parse_hz_const(None), 250);
        assert_eq!(parse_hz_const(Some("100")), 100);
        assert_eq!(parse_hz_const(Some("1000")), 1000);
    }
}
