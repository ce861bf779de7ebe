//! `report.json`: the deterministic summary of a run. Schema in `docs/sim.md`.
//!
//! Energy follows the energy model's view (`kernel/power/energy_model.c`,
//! `em_cpu_energy`): a CPU consumes its OPP's busy power while running and nothing
//! while idle, so `energy = Σ_cpu Σ_opp busy_time(cpu, opp) × power(opp)`, with
//! power from the DT formula `C × mV² × MHz / 10⁶` (`dev_pm_opp_calc_power`).
//!
//! Nothing here depends on the wall clock or on hash-map order; keys are written in
//! a fixed order, so identical runs give identical bytes.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde::Serialize as DeriveSerialize;

use asym_sched::features::{Feature, SchedFeatures};

use crate::board::Board;
use crate::engine::{CpuSignal, SimConfig, SimResult, TaskSignal};
use crate::signals::{RtAppTotals, SignalSummary, StepSignal};

/// Schema identifier written in every report.
pub const SCHEMA: &str = "asym-sim-report/1";

/// The whole report.
#[derive(DeriveSerialize, Debug)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Board name.
    pub board: String,
    /// Workload file as given.
    pub workload: String,
    /// Every scheduler feature and its state, in declaration order; those of
    /// [`LISTED_WHEN_ON`] only when on (as `highres` only when off), so that reports of runs
    /// without them stay byte-identical with the reports from before they existed.
    pub features: Features,
    /// Governor name.
    pub governor: &'static str,
    /// Whether load balancing ran (`--lb`).
    pub load_balance: bool,
    /// EAS was active: `ENERGY_AWARE` asked for it and `sched_is_eas_possible()` held
    /// (asymmetric capacities, an energy model for every domain, schedutil).
    pub eas_active: bool,
    /// Wake-up placement (`--placement`): `linux` or `interim`.
    pub placement: &'static str,
    /// Simulated duration.
    pub duration_ns: u64,
    /// RNG seed.
    pub seed: u64,
    /// Tick rate.
    pub hz: u32,
    /// Timer resolution (`--highres`): present, as `false`, only for a low-resolution run,
    /// so reports of default runs stay as they were.
    #[serde(skip_serializing_if = "is_true")]
    pub highres: bool,
    /// cpufreq user limits set at start (`--freq-limit`), as given.
    pub freq_limits: Vec<FreqLimitReport>,
    /// Energy (the energy model's view: busy CPUs' dynamic power only).
    pub energy: Energy,
    /// What a power meter would read ([`crate::meter`]): `null` without an energy model or
    /// without the timeline.
    pub meter: Option<MeterReport>,
    /// Lower bounds on the energy-model energy of any schedule doing this run's work
    /// ([`crate::optimal`]); `null` without an energy model.
    pub energy_bound: Option<EnergyBound>,
    /// Per task.
    pub tasks: Vec<TaskReport>,
    /// Per CPU: capacity and the root cfs_rq's traced signals.
    pub cpus: Vec<CpuReport>,
    /// Counters.
    pub counters: CountersReport,
}

/// `skip_serializing_if` for counters absent while zero.
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// `skip_serializing_if` for fields whose default is `true`.
fn is_true(b: &bool) -> bool {
    *b
}

/// One `--freq-limit`.
#[derive(DeriveSerialize, Debug)]
pub struct FreqLimitReport {
    /// Performance-domain name.
    pub domain: String,
    /// `scaling_min_freq` (kHz).
    pub min_khz: u32,
    /// `scaling_max_freq` (kHz).
    pub max_khz: u32,
}

/// Features a report lists only when they are on (see [`Report::features`]).
pub const LISTED_WHEN_ON: [Feature; 2] = [Feature::DELAY_DEQUEUE, Feature::DELAY_ZERO];

/// Features as an ordered JSON object.
#[derive(Debug)]
pub struct Features(pub Vec<(&'static str, bool)>);

impl Serialize for Features {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// A name → count object in a fixed order.
#[derive(Debug)]
pub struct Named(pub Vec<(String, u64)>);

impl Serialize for Named {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

/// Energy totals.
#[derive(DeriveSerialize, Debug)]
pub struct Energy {
    /// Whether the board has power numbers (otherwise every energy is 0).
    pub model_available: bool,
    /// Total energy in µJ.
    pub total_uj: f64,
    /// Per performance domain.
    pub perf_domains: Vec<DomainEnergy>,
}

/// [`crate::optimal::Bound`] in µJ, with asym's energy-model energy as a ratio to each.
#[derive(DeriveSerialize, Debug)]
pub struct EnergyBound {
    /// Valid for every schedule doing the same work.
    pub work_uj: f64,
    /// The per-task part alone (no contention, no shared domains): what `deadline_uj` was
    /// before the cluster bound, kept to show how much that adds.
    pub per_task_uj: f64,
    /// Valid for every schedule doing the same work and meeting the timer deadlines this
    /// run met (`src/optimal.rs`).
    pub deadline_uj: f64,
    /// `energy.total_uj / deadline_uj`.
    pub ratio_to_deadline_bound: f64,
}

impl EnergyBound {
    /// From a bound and asym's energy.
    pub fn new(b: crate::optimal::Bound, total_uj: f64) -> EnergyBound {
        let deadline_uj = fj_to_uj(b.deadline_fj);
        EnergyBound {
            work_uj: fj_to_uj(b.work_fj),
            per_task_uj: fj_to_uj(b.per_task_fj),
            deadline_uj,
            ratio_to_deadline_bound: if deadline_uj > 0.0 {
                (total_uj / deadline_uj * 10_000.0).round() / 10_000.0
            } else {
                0.0
            },
        }
    }
}

/// The meter's reading and the model it used.
#[derive(DeriveSerialize, Debug)]
pub struct MeterReport {
    /// The reading.
    #[serde(flatten)]
    pub reading: crate::meter::MeterReading,
    /// The model (powers in µW, DT idle states in ns).
    pub model: crate::meter::MeterModel,
}

/// One domain's energy.
#[derive(DeriveSerialize, Debug)]
pub struct DomainEnergy {
    /// Domain name.
    pub name: &'static str,
    /// CPUs of the domain.
    pub cpus: Vec<usize>,
    /// Energy in µJ.
    pub energy_uj: f64,
    /// Busy residency per CPU of the domain.
    pub residency: Vec<CpuResidency>,
    /// Time at each OPP, busy or idle (ascending frequency).
    pub frequency_residency: Vec<FreqResidency>,
}

/// Time a domain spent at one OPP.
#[derive(DeriveSerialize, Debug)]
pub struct FreqResidency {
    /// Frequency.
    pub khz: u32,
    /// Time at it.
    pub time_ns: u64,
}

/// One CPU.
#[derive(DeriveSerialize, Debug)]
pub struct CpuReport {
    /// CPU number.
    pub cpu: usize,
    /// `capacity_orig` (`arch_scale_cpu_capacity`).
    pub capacity_orig: u32,
    /// The signals the trace carries for the CPU.
    pub signals: CpuSignals,
}

/// A CPU's traced signals (`null` if never written).
#[derive(DeriveSerialize, Debug)]
pub struct CpuSignals {
    /// Root cfs_rq `util_avg` (`sched_pelt_cfs`).
    pub util: Option<SignalSummary>,
    /// Root cfs_rq `load_avg`.
    pub load: Option<SignalSummary>,
    /// Root cfs_rq util_est, the sum of its queued tasks' (`sched_util_est_cfs` `enqueued`).
    pub util_est_enqueued: Option<SignalSummary>,
    /// `capacity_curr` (`sched_cpu_capacity`).
    pub capacity_curr: Option<SignalSummary>,
}

/// A task's traced signals (`null` if never written).
#[derive(DeriveSerialize, Debug)]
pub struct TaskSignals {
    /// `util_avg` (`sched_pelt_se`).
    pub util: Option<SignalSummary>,
    /// `load_avg`.
    pub load: Option<SignalSummary>,
    /// util_est ewma (`sched_util_est_se` `ewma`).
    pub util_est_ewma: Option<SignalSummary>,
    /// util at the last dequeue to sleep (`sched_util_est_se` `enqueued`).
    pub util_est_enqueued: Option<SignalSummary>,
}

/// A task's rt-app statistics, from the `rtapp_stats` lines rt-app would write.
#[derive(DeriveSerialize, Debug)]
pub struct RtAppReport {
    /// Finished phase iterations (`rtapp_stats` lines).
    pub loops: u64,
    /// Mean slack (µs; 0 without loops).
    pub slack_us_mean: f64,
    /// Mean of LISA's performance index `slack / (c_period - c_run)` over the loops
    /// where it is defined (0 without).
    pub perf_index_mean: f64,
    /// Loops where it is defined.
    pub perf_index_samples: u64,
}

impl RtAppReport {
    fn from_totals(t: &RtAppTotals) -> Self {
        let round = |v: f64| (v * 1e6).round() / 1e6;
        RtAppReport {
            loops: t.loops,
            slack_us_mean: if t.loops == 0 {
                0.0
            } else {
                round(t.slack_us_sum as f64 / t.loops as f64)
            },
            perf_index_mean: if t.perf_index_samples == 0 {
                0.0
            } else {
                round(t.perf_index_sum / t.perf_index_samples as f64)
            },
            perf_index_samples: t.perf_index_samples,
        }
    }
}

/// One CPU's busy time per OPP.
#[derive(DeriveSerialize, Debug)]
pub struct CpuResidency {
    /// CPU number.
    pub cpu: usize,
    /// One entry per OPP, ascending frequency.
    pub opps: Vec<OppResidency>,
}

/// Busy time at one OPP.
#[derive(DeriveSerialize, Debug)]
pub struct OppResidency {
    /// Frequency.
    pub khz: u32,
    /// Power while busy.
    pub power_uw: u64,
    /// Busy time.
    pub busy_ns: u64,
    /// Energy in µJ.
    pub energy_uj: f64,
}

/// Per task.
#[derive(DeriveSerialize, Debug)]
pub struct TaskReport {
    /// Thread name.
    pub name: String,
    /// pid in the trace.
    pub pid: u32,
    /// Wake-ups (including the first).
    pub activations: u64,
    /// Time running.
    pub runtime_ns: u64,
    /// Time running on each CPU.
    pub residency_ns: Vec<u64>,
    /// Migrations.
    pub migrations: u64,
    /// Of those, by load balancing (`detach_tasks`; not misfit).
    pub lb_migrations: u64,
    /// Timer periods started.
    pub timer_activations: u64,
    /// Timer periods whose work overran into the next period.
    pub deadline_misses: u64,
    /// Wake-up latency statistics.
    pub wakeup_latency_ns: Percentiles,
    /// Time from each timer period's start until the task reached its next `timer`
    /// event (a frame's duration for frame-based workloads).
    pub period_completion_ns: Percentiles,
    /// Mean of `period_completion_ns` (0 without samples).
    pub period_completion_mean_ns: u64,
    /// Whether the task finished all its loops.
    pub exited: bool,
    /// rt-app's per-loop statistics.
    pub rtapp: RtAppReport,
    /// The signals the trace carries for the task.
    pub signals: TaskSignals,
}

/// Nearest-rank percentiles.
#[derive(DeriveSerialize, Debug, PartialEq, Eq)]
pub struct Percentiles {
    /// Number of samples.
    pub samples: u64,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Maximum.
    pub max: u64,
}

/// Counters.
#[derive(DeriveSerialize, Debug)]
pub struct CountersReport {
    /// `SCHED_SOFTIRQ` raises.
    pub sched_softirq_raises: u64,
    /// Load-balance runs by kind.
    pub load_balance: Named,
    /// Migrations by reason.
    pub migrations: Named,
    /// Sum of the tasks' `load_avg` at their load-balance migrations.
    pub load_balance_migrated_load_sum: u64,
    /// Applied frequency changes per domain.
    pub frequency_changes: Named,
    /// Time overutilized.
    pub overutilized_ns: u64,
    /// Context switches.
    pub context_switches: u64,
    /// Wake-ups of a delayed task (`DELAY_DEQUEUE`'s `ttwu_runnable`: no CPU selection);
    /// present only when there were any, so runs without the feature keep their reports.
    #[serde(skip_serializing_if = "is_zero")]
    pub wakeups_delayed: u64,
}

/// Nearest-rank percentiles of `v` (sorted in place).
pub fn percentiles(v: &mut [u64]) -> Percentiles {
    v.sort_unstable();
    let n = v.len();
    let rank = |p: u64| -> u64 {
        if n == 0 {
            0
        } else {
            let r = (p as usize * n).div_ceil(100).max(1);
            v[r - 1]
        }
    };
    Percentiles {
        samples: n as u64,
        p50: rank(50),
        p90: rank(90),
        p99: rank(99),
        max: v.last().copied().unwrap_or(0),
    }
}

/// fJ (µW × ns) to µJ.
fn fj_to_uj(fj: u128) -> f64 {
    // Round to a nanojoule so the text is short and stable.
    ((fj / 1_000_000) as f64) / 1000.0
}

/// Build the report of a finished run.
pub fn build(
    board: &Board,
    workload: &str,
    cfg: &SimConfig,
    features: SchedFeatures,
    res: &SimResult,
) -> Report {
    let mut total: u128 = 0;
    let mut pds = Vec::new();
    for dm in &board.domains {
        let mut dom: u128 = 0;
        let mut residency = Vec::new();
        for &c in &dm.cpus {
            let mut opps = Vec::new();
            for (i, o) in dm.opps.iter().enumerate() {
                let busy = res.busy_ns[c][i];
                let fj = busy as u128 * o.power_uw as u128;
                dom += fj;
                opps.push(OppResidency {
                    khz: o.khz,
                    power_uw: o.power_uw,
                    busy_ns: busy,
                    energy_uj: fj_to_uj(fj),
                });
            }
            residency.push(CpuResidency { cpu: c, opps });
        }
        total += dom;
        let d = pds.len();
        pds.push(DomainEnergy {
            name: dm.name,
            cpus: dm.cpus.clone(),
            energy_uj: fj_to_uj(dom),
            residency,
            frequency_residency: dm
                .opps
                .iter()
                .zip(&res.freq_time_ns[d])
                .map(|(o, &time_ns)| FreqResidency {
                    khz: o.khz,
                    time_ns,
                })
                .collect(),
        });
    }
    let sig = |s: &StepSignal| s.summary(res.end_ns);
    let tasks = res
        .tasks
        .iter()
        .zip(&res.names)
        .map(|(t, (name, pid))| {
            let mut lat = t.wakeup_latency_ns.clone();
            let mut frames = t.period_completion_ns.clone();
            let mean = if frames.is_empty() {
                0
            } else {
                frames.iter().sum::<u64>() / frames.len() as u64
            };
            TaskReport {
                name: name.clone(),
                pid: *pid,
                activations: t.activations,
                runtime_ns: t.runtime_ns,
                residency_ns: t.residency_ns.clone(),
                migrations: t.migrations,
                lb_migrations: t.lb_migrations,
                timer_activations: t.timer_activations,
                deadline_misses: t.deadline_misses,
                wakeup_latency_ns: percentiles(&mut lat),
                period_completion_ns: percentiles(&mut frames),
                period_completion_mean_ns: mean,
                exited: t.exited,
                rtapp: RtAppReport::from_totals(&t.rtapp),
                signals: TaskSignals {
                    util: sig(&t.signals[TaskSignal::Util as usize]),
                    load: sig(&t.signals[TaskSignal::Load as usize]),
                    util_est_ewma: sig(&t.signals[TaskSignal::Ewma as usize]),
                    util_est_enqueued: sig(&t.signals[TaskSignal::Enqueued as usize]),
                },
            }
        })
        .collect();
    let cpus = res
        .cpu_signals
        .iter()
        .enumerate()
        .map(|(cpu, s)| CpuReport {
            cpu,
            capacity_orig: board.cpus[cpu].capacity_orig,
            signals: CpuSignals {
                util: sig(&s[CpuSignal::Util as usize]),
                load: sig(&s[CpuSignal::Load as usize]),
                util_est_enqueued: sig(&s[CpuSignal::Enqueued as usize]),
                capacity_curr: sig(&s[CpuSignal::CapacityCurr as usize]),
            },
        })
        .collect();
    let c = &res.counters;
    Report {
        schema: SCHEMA,
        board: board.desc.name.to_string(),
        workload: workload.to_string(),
        features: Features(
            features
                .iter()
                .filter(|&(f, on)| on || !LISTED_WHEN_ON.contains(&f))
                .map(|(f, on)| (f.name(), on))
                .collect(),
        ),
        governor: cfg.governor.name(),
        load_balance: cfg.load_balance,
        eas_active: res.eas_active,
        placement: match cfg.placement {
            crate::engine::Placement::Linux => "linux",
            crate::engine::Placement::Interim => "interim",
        },
        duration_ns: res.end_ns,
        seed: cfg.seed,
        hz: cfg.hz,
        highres: cfg.highres,
        freq_limits: cfg
            .freq_limits
            .iter()
            .map(|l| FreqLimitReport {
                domain: l.domain.clone(),
                min_khz: l.min_khz,
                max_khz: l.max_khz,
            })
            .collect(),
        energy: Energy {
            model_available: board.has_energy_model,
            total_uj: fj_to_uj(total),
            perf_domains: pds,
        },
        meter: res.timeline.as_ref().and_then(|tl| {
            let model = crate::meter::model(board)?;
            let reading =
                crate::meter::read(board, &model, tl, res.end_ns, &res.counters.freq_changes);
            Some(MeterReport { reading, model })
        }),
        energy_bound: None,
        tasks,
        cpus,
        counters: CountersReport {
            sched_softirq_raises: c.sched_softirq_raises,
            load_balance: Named(vec![
                ("periodic".into(), c.lb_periodic),
                ("newidle".into(), c.lb_newidle),
                ("nohz".into(), c.lb_nohz),
            ]),
            migrations: Named(vec![
                ("wakeup".into(), c.migrations_wakeup),
                ("load_balance".into(), c.migrations_load_balance),
                ("misfit".into(), c.migrations_misfit),
            ]),
            load_balance_migrated_load_sum: c.lb_migrated_load_sum,
            frequency_changes: Named(
                board
                    .domains
                    .iter()
                    .zip(&c.freq_changes)
                    .map(|(d, n)| (d.name.to_string(), *n))
                    .collect(),
            ),
            overutilized_ns: c.overutilized_ns,
            context_switches: c.context_switches,
            wakeups_delayed: c.wakeups_delayed,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut v: Vec<u64> = (1..=100).rev().collect();
        let p = percentiles(&mut v);
        assert_eq!(
            p,
            Percentiles {
                samples: 100,
                p50: 50,
                p90: 90,
                p99: 99,
                max: 100
            }
        );
        let p = percentiles(&mut []);
        assert_eq!(p.max, 0);
        let p = percentiles(&mut [7]);
        assert_eq!((p.p50, p.p99), (7, 7));
    }
}
