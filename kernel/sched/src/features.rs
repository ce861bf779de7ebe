//! The runtime feature set, Linux's `sched_features`.
//!
//! Re-derives `kernel/sched/features.h` and the `/sys/kernel/debug/sched/features` parser
//! (`sched_feat_set` in `kernel/sched/debug.c`): each feature is a named boolean with a
//! default, set with `NAME` / `NO_NAME`. We also accept `NAME=on|off` (boot command lines and
//! simulator configs read better that way) and a list separated by spaces or commas.
//!
//! Deliberate differences from Linux: the set is a plain `Copy` value passed to the policy
//! code (no static keys, no global), and some switches exist only in asym, to compare
//! behaviours that Linux changed over time: `PELT_CLOCK` (clock_pelt scale invariance vs the
//! pre-v5.0 contribution scaling), `RUNNABLE_BOOST` (v6.5 runnable boosting, always on in
//! Linux) and `UCLAMP_FIT_TRISTATE` (v6.2 three-way `util_fits_cpu`, always on in Linux).
//!
//! Adding a feature is one line in the `sched_features!` invocation below.

use core::fmt;

macro_rules! sched_features {
    ($( $(#[$doc:meta])* $name:ident = $default:expr, )*) => {
        /// One scheduler feature. Variant names are Linux's `sched_feat()` names.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum Feature {
            $( $(#[$doc])* $name, )*
        }

        impl Feature {
            /// Every feature, in declaration order.
            pub const ALL: &'static [Feature] = &[ $( Feature::$name, )* ];

            /// The Linux-style name (`"UTIL_EST"`).
            pub const fn name(self) -> &'static str {
                match self {
                    $( Feature::$name => stringify!($name), )*
                }
            }

            /// Whether the feature is on by default (Linux's `features.h` value).
            pub const fn default_enabled(self) -> bool {
                match self {
                    $( Feature::$name => $default, )*
                }
            }
        }
    };
}

sched_features! {
    /// Utilisation estimation (`util_est`) in `cpu_util` and task placement.
    UTIL_EST = true,
    /// Runnable boosting: `max(util_avg, runnable_avg)` for frequency selection, EAS max util
    /// and `migrate_util` (v6.5, seed 000). Always on in Linux.
    RUNNABLE_BOOST = true,
    /// On: clock_pelt scale invariance (Linux >= v5.0). Off: pre-v5.0 contribution scaling
    /// (seed 001), `clock_pelt == clock_task` and each contribution scaled by freq and capacity.
    PELT_CLOCK = true,
    /// On: three-way `util_fits_cpu` (v6.2, seed 003). Off: the v6.1 two-way result.
    UCLAMP_FIT_TRISTATE = true,
    /// EEVDF: preserve lag across sleep/wake-up (`place_entity`).
    PLACE_LAG = true,
    /// EEVDF: new tasks start with half a slice of virtual deadline.
    PLACE_DEADLINE_INITIAL = true,
    /// EEVDF: keep the virtual deadline relative to vruntime across a non-sleep dequeue
    /// (migration, nice change), so the task does not get a fresh slice (v6.12).
    PLACE_REL_DEADLINE = true,
    /// EEVDF: let the current task run until it reaches its deadline (0-lag point).
    RUN_TO_PARITY = true,
    /// Wake-up preemption of the current task.
    WAKEUP_PREEMPTION = true,
    /// EEVDF: a waking task with a shorter slice may preempt (v6.12).
    PREEMPT_SHORT = true,
    /// `wake_affine`: an idle waking CPU or an idle previous CPU decides the target
    /// (`wake_affine_idle`).
    WA_IDLE = true,
    /// `wake_affine`: otherwise compare the waking and the previous CPU's loads
    /// (`wake_affine_weight`).
    WA_WEIGHT = true,
    /// `wake_affine_weight`: weigh the previous CPU's load up by half the domain's
    /// imbalance_pct (108 against 100), which favours the waking CPU.
    WA_BIAS = true,
    /// On: the fork path is v6.12's `sched_balance_find_dst_cpu` (the local group kept
    /// while at least as idle, the most recently idled CPU). Off: asym's earlier
    /// simplified cluster-then-CPU choice. Not a Linux feature (Linux has only the former).
    FORK_FIND_IDLEST = true,
    /// Energy-aware wake-up placement (`find_energy_efficient_cpu`) while the root domain is
    /// not overutilized. Linux's switch is the `kernel.sched_energy_aware` sysctl (default
    /// on); asym keeps it off until EAS is complete (the simulator's `--eas on` sets it).
    ENERGY_AWARE = false,
    /// `detach_tasks`: skip tasks with `task_h_load < 16` under `migrate_load` until a
    /// balance attempt has failed (`features.h`, default off).
    LB_MIN = false,
    /// `detach_tasks`: try the biggest task first instead of the least recently run one
    /// (seed 004; not in Linux). The skipped tasks are still rotated to the head.
    LB_BIGGEST_TASK = false,
    /// `sched_balance_newidle` updates `rq->next_balance` from every domain's stale
    /// `last_balance`, which can pull it into the past (Linux mainline). Off: the seed-002
    /// fix (ChromeOS `sched_aggressive_next_balance=0`): only domains actually balanced
    /// update it, and they stamp `sd->last_balance`.
    AGGRESSIVE_NEXT_BALANCE = true,
    /// Seed-era cpufreq (seed 001's 2018 HiKey, Linux before v5.16): the energy model's
    /// inefficient OPPs are *not* skipped (no `em_cpufreq_update_efficiencies`, no
    /// `CPUFREQ_RELATION_E`), so schedutil may pick HiKey's 208 MHz. Not a Linux feature.
    KEEP_INEFFICIENT_OPPS = false,
    /// Seed-era schedutil rate limit (Linux v4.14 until Qais Yousef's 2024 "cpufreq: Change
    /// default transition delay to 2ms"): the default `rate_limit_us` is
    /// `min(transition_latency_us × LATENCY_MULTIPLIER (1000), 10 ms)` — 10 ms on Juno r2,
    /// HiKey960 and HiKey — instead of v6.12's 1.5 × the latency. Not a Linux feature.
    LEGACY_TRANSITION_DELAY = false,
    /// On: newidle balance's gate reads the root domain's sticky `rd->overloaded` as v6.12
    /// keeps it (set by `add_nr_running` when a CPU gets its second task, rewritten only by
    /// the root level's load-balance statistics). Off: asym's earlier approximation, which
    /// recomputes it from every CPU's snapshot at each newidle (so it clears as soon as no
    /// CPU has two tasks or a misfit one). Not a Linux feature (Linux has only the former);
    /// off until the seed-004 reproduction is re-derived under it (docs/experiments.md).
    STICKY_OVERLOADED = false,
    /// asym's util_est improvement (not in Linux): when a task's util_avg at dequeue is
    /// below its runnable_avg (it waited behind other tasks), Linux keeps the ewma as it is;
    /// with this on the ewma still decays — towards the runnable_avg, never below it — so an
    /// estimate inflated earlier (a fork's initial util, a past heavy phase) cannot stay
    /// frozen above what the task would use even if it had run whenever it was runnable.
    UTIL_EST_DECAY_TO_RUNNABLE = false,
    /// asym's schedutil improvement (not in Linux): the DVFS headroom is what the CPU's
    /// utilisation can grow in one update horizon (`max(TICK_NSEC, rate_limit_us)`) while
    /// running at the OPP being considered — the lowest OPP whose capacity covers that
    /// grown utilisation — instead of a flat 25 %; never more than Linux's 25 %. A light
    /// periodic load whose util_est sits just under an OPP's capacity then stays on it,
    /// rather than being pushed one OPP up by the margin (`sugov_growth_perf`). Only while the
    /// CPU runs within its estimate (`within_estimate`); otherwise Linux's 25 %. An
    /// experiment: it saves energy but adds deadline misses on pipelines whose deadline is on
    /// a chain of small stages (`docs/experiments.md`, "the 25 % DVFS margin").
    SUGOV_GROWTH_HEADROOM = false,
    /// EEVDF delayed dequeue (v6.12, `features.h` default on; off here): a task that blocks
    /// while not eligible (negative lag) stays queued, `se->sched_delayed`, keeping its weight
    /// in the queue's load and in the average V until a pick finds it (then its dequeue is
    /// finished) or it wakes first (then it is requeued in place on its CPU: `ttwu_runnable`,
    /// no `select_task_rq`). Off in asym until the kernel keeps a blocked thread's task on
    /// its run queue (`kernel/src/sched`'s block path hands every sleeper back at once and
    /// refuses this switch on the command line); the policy crate and the simulator do it.
    DELAY_DEQUEUE = false,
    /// With `DELAY_DEQUEUE`: a delayed entity's positive lag is dropped when its dequeue is
    /// finished (`finish_delayed_dequeue_entity`) and, at a wake-up that requeues it,
    /// clamped to 0 and the entity re-placed (`requeue_delayed_entity`) — lag earned while
    /// delayed is not kept (v6.12 default on; off here with `DELAY_DEQUEUE`).
    DELAY_ZERO = false,
}

/// A set of enabled [`Feature`]s. `Default` is Linux's defaults.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SchedFeatures(u64);

/// Why a feature string was rejected; `token` is the offending part of the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureParseError<'a> {
    /// The token that failed (`"FOO"` or `"UTIL_EST=maybe"`).
    pub token: &'a str,
    /// Byte offset of `token` in the parsed string.
    pub offset: usize,
    /// What is wrong with it.
    pub kind: FeatureParseErrorKind,
}

/// The kinds of [`FeatureParseError`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FeatureParseErrorKind {
    /// No feature has this name.
    UnknownFeature,
    /// The value after `=` is not `on`/`off` (nor `1`/`0`, `true`/`false`).
    BadValue,
    /// `NO_NAME=...` mixes both syntaxes.
    NegatedAssignment,
}

impl Default for SchedFeatures {
    fn default() -> Self {
        SchedFeatures::linux_defaults()
    }
}

impl SchedFeatures {
    /// Linux's defaults (every feature at [`Feature::default_enabled`]).
    pub const fn linux_defaults() -> SchedFeatures {
        // Evaluated at compile time: this is on the scheduler's hot paths.
        const BITS: u64 = {
            let mut bits = 0u64;
            let mut i = 0;
            while i < Feature::ALL.len() {
                if Feature::ALL[i].default_enabled() {
                    bits |= 1 << (Feature::ALL[i] as u8);
                }
                i += 1;
            }
            bits
        };
        SchedFeatures(BITS)
    }

    /// Every feature off.
    pub const fn none() -> SchedFeatures {
        SchedFeatures(0)
    }

    /// The set as a bit mask (bit `f as u8` for feature `f`), for a lock-free copy such as
    /// an atomic word; [`SchedFeatures::from_bits`] turns it back.
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// The set whose [`bits`](SchedFeatures::bits) are `bits` (bits naming no feature are
    /// dropped).
    pub const fn from_bits(bits: u64) -> SchedFeatures {
        const KNOWN: u64 = {
            let mut known = 0u64;
            let mut i = 0;
            while i < Feature::ALL.len() {
                known |= 1 << (Feature::ALL[i] as u8);
                i += 1;
            }
            known
        };
        SchedFeatures(bits & KNOWN)
    }

    /// `sched_feat(f)`.
    pub const fn enabled(self, f: Feature) -> bool {
        self.0 & (1 << (f as u8)) != 0
    }

    /// Turn `f` on or off.
    pub fn set(&mut self, f: Feature, on: bool) {
        if on {
            self.0 |= 1 << (f as u8);
        } else {
            self.0 &= !(1 << (f as u8));
        }
    }

    /// A copy with `f` set to `on` (for building configurations in `const`-like style).
    pub fn with(mut self, f: Feature, on: bool) -> SchedFeatures {
        self.set(f, on);
        self
    }

    /// Every feature with its state, in declaration order.
    pub fn iter(self) -> impl Iterator<Item = (Feature, bool)> {
        Feature::ALL.iter().map(move |&f| (f, self.enabled(f)))
    }

    /// Look a feature up by its Linux name (exact, upper case).
    pub fn feature_by_name(name: &str) -> Option<Feature> {
        Feature::ALL.iter().copied().find(|f| f.name() == name)
    }

    /// Apply one setting: `NAME`, `NO_NAME` (Linux debugfs syntax) or `NAME=on|off`.
    pub fn apply<'a>(&mut self, token: &'a str) -> Result<(), FeatureParseError<'a>> {
        self.apply_at(token, 0)
    }

    /// Apply a list of settings separated by whitespace or commas, left to right. On error
    /// nothing after the failing token is applied (earlier tokens are).
    pub fn apply_list<'a>(&mut self, list: &'a str) -> Result<(), FeatureParseError<'a>> {
        let mut start = None;
        for (i, c) in list
            .char_indices()
            .chain(core::iter::once((list.len(), ' ')))
        {
            let sep = c.is_whitespace() || c == ',';
            match (sep, start) {
                (true, Some(s)) => {
                    self.apply_at(&list[s..i], s)?;
                    start = None;
                }
                (false, None) => start = Some(i),
                _ => {}
            }
        }
        Ok(())
    }

    /// Parse a list (see [`SchedFeatures::apply_list`]) on top of Linux's defaults.
    pub fn parse(list: &str) -> Result<SchedFeatures, FeatureParseError<'_>> {
        let mut f = SchedFeatures::linux_defaults();
        f.apply_list(list)?;
        Ok(f)
    }

    fn apply_at<'a>(&mut self, token: &'a str, offset: usize) -> Result<(), FeatureParseError<'a>> {
        let err = |kind| FeatureParseError {
            token,
            offset,
            kind,
        };
        let (name, value) = match token.split_once('=') {
            Some((n, v)) => {
                let on = match v {
                    "on" | "1" | "true" | "yes" => true,
                    "off" | "0" | "false" | "no" => false,
                    _ => return Err(err(FeatureParseErrorKind::BadValue)),
                };
                if n.starts_with("NO_") && SchedFeatures::feature_by_name(n).is_none() {
                    return Err(err(FeatureParseErrorKind::NegatedAssignment));
                }
                (n, on)
            }
            None => match token.strip_prefix("NO_") {
                Some(n) if SchedFeatures::feature_by_name(token).is_none() => (n, false),
                _ => (token, true),
            },
        };
        // An unknown name is reported as itself, without `NO_` or `=value`.
        let f = SchedFeatures::feature_by_name(name).ok_or_else(|| {
            let at = token.find(name).unwrap_or(0);
            FeatureParseError {
                token: name,
                offset: offset + at,
                kind: FeatureParseErrorKind::UnknownFeature,
            }
        })?;
        self.set(f, value);
        Ok(())
    }
}

/// Linux's debugfs format: every feature, `NAME` when on, `NO_NAME` when off, space-separated.
impl fmt::Display for SchedFeatures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (feat, on)) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            if !on {
                f.write_str("NO_")?;
            }
            f.write_str(feat.name())?;
        }
        Ok(())
    }
}

impl fmt::Debug for SchedFeatures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SchedFeatures({self})")
    }
}

impl fmt::Display for FeatureParseError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            FeatureParseErrorKind::UnknownFeature => "unknown scheduler feature",
            FeatureParseErrorKind::BadValue => "feature value must be on or off",
            FeatureParseErrorKind::NegatedAssignment => "use NAME=off or NO_NAME, not NO_NAME=...",
        };
        write!(f, "{what}: `{}` at byte {}", self.token, self.offset)?;
        if self.kind == FeatureParseErrorKind::UnknownFeature {
            f.write_str(" (known:")?;
            for feat in Feature::ALL {
                write!(f, " {}", feat.name())?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;
    use std::string::ToString;

    #[test]
    fn bits_round_trip_every_single_feature_and_drop_unknown_bits() {
        for &f in Feature::ALL {
            let one = SchedFeatures::none().with(f, true);
            assert_eq!(SchedFeatures::from_bits(one.bits()), one, "{}", f.name());
            assert!(SchedFeatures::from_bits(one.bits()).enabled(f));
        }
        let d = SchedFeatures::default();
        assert_eq!(SchedFeatures::from_bits(d.bits()), d);
        assert_eq!(SchedFeatures::from_bits(1 << 63), SchedFeatures::none());
    }

    #[test]
    fn defaults_match_linux_features_h() {
        let f = SchedFeatures::default();
        // features.h v6.12: all of these default to true.
        for feat in [
            Feature::UTIL_EST,
            Feature::PLACE_LAG,
            Feature::PLACE_DEADLINE_INITIAL,
            Feature::RUN_TO_PARITY,
            Feature::WAKEUP_PREEMPTION,
            Feature::PREEMPT_SHORT,
            Feature::WA_IDLE,
            Feature::WA_WEIGHT,
            Feature::WA_BIAS,
        ] {
            assert!(f.enabled(feat), "{feat} should default on");
        }
        assert!(f.enabled(Feature::PELT_CLOCK));
        assert!(f.enabled(Feature::RUNNABLE_BOOST));
        assert!(f.enabled(Feature::UCLAMP_FIT_TRISTATE));
    }

    #[test]
    fn debugfs_and_assignment_syntax() {
        let mut f = SchedFeatures::default();
        f.apply("NO_UTIL_EST").unwrap();
        assert!(!f.enabled(Feature::UTIL_EST));
        f.apply("UTIL_EST").unwrap();
        assert!(f.enabled(Feature::UTIL_EST));
        f.apply("PELT_CLOCK=off").unwrap();
        assert!(!f.enabled(Feature::PELT_CLOCK));
        f.apply("PELT_CLOCK=on").unwrap();
        assert!(f.enabled(Feature::PELT_CLOCK));
        let g = SchedFeatures::parse("NO_RUNNABLE_BOOST, UCLAMP_FIT_TRISTATE=off  NO_PLACE_LAG")
            .unwrap();
        assert!(!g.enabled(Feature::RUNNABLE_BOOST));
        assert!(!g.enabled(Feature::UCLAMP_FIT_TRISTATE));
        assert!(!g.enabled(Feature::PLACE_LAG));
        assert!(g.enabled(Feature::UTIL_EST));
    }

    #[test]
    fn errors_name_the_token_and_place() {
        let e = SchedFeatures::parse("UTIL_EST NO_BOGUS").unwrap_err();
        assert_eq!(e.kind, FeatureParseErrorKind::UnknownFeature);
        // The unknown name itself, where it starts.
        assert_eq!(e.token, "BOGUS");
        assert_eq!(e.offset, 12);
        let e = SchedFeatures::parse("PLACE_LAG FOO=on").unwrap_err();
        assert_eq!((e.token, e.offset), ("FOO", 10));
        let msg = e.to_string();
        assert!(msg.contains("`FOO` at byte 10"), "{msg}");
        assert!(msg.contains("known: UTIL_EST"), "{msg}");
        let e = SchedFeatures::parse("UTIL_EST=maybe").unwrap_err();
        assert_eq!(e.kind, FeatureParseErrorKind::BadValue);
        let e = SchedFeatures::parse("NO_UTIL_EST=on").unwrap_err();
        assert_eq!(e.kind, FeatureParseErrorKind::NegatedAssignment);
    }

    #[test]
    fn display_round_trips() {
        let f = SchedFeatures::default()
            .with(Feature::UTIL_EST, false)
            .with(Feature::PREEMPT_SHORT, false);
        let s = format!("{f}");
        assert!(s.contains("NO_UTIL_EST"));
        assert!(s.contains(" RUN_TO_PARITY"));
        assert_eq!(SchedFeatures::parse(&s).unwrap(), f);
        assert_eq!(s.split(' ').count(), Feature::ALL.len());
    }
}
