//! The energy meter: what a board's power meter would read, beside the energy model.
//!
//! The scheduler's energy model (`kernel/power/energy_model.c`, [`crate::report`]) counts
//! only the dynamic power of busy CPUs (`C × V² × f`); an idle CPU costs nothing. A meter on
//! the board's rails (Juno's energy meters, a HiKey with an external one) also reads:
//!
//! - **CPU static (leakage) power** of every powered CPU, busy or in WFI (a CPU in WFI is
//!   clock-gated, so what remains is leakage);
//! - **idle states**: a CPU in `cpu-sleep` (PSCI power-down, the DT's `arm,idle-state` with
//!   power level 0) is power-gated and costs nothing; a cluster whose CPUs are all idle
//!   burns its shared logic's power (L2, SCU, snoop filter) unless it is in
//!   `cluster-sleep` (power level 1);
//! - **cluster active power** while any of its CPUs runs, per OPP;
//! - **frequency transitions**.
//!
//! Idle-state choice is an *oracle governor*: an idle period of length `d` enters the
//! deepest state of the CPU's DT `cpu-idle-states` whose `min-residency-us` is at most `d`
//! (Linux's menu/teo governors predict `d`; the oracle is their best case), spending its
//! `entry-latency-us` and `exit-latency-us` at WFI power; a cluster is off while all its
//! CPUs are idle for at least its cluster state's residency. The simulator does not delay
//! wake-ups by exit latencies (the schedule is the same as without the meter).
//!
//! **Where the numbers come from.** Idle states, entry/exit latencies and residencies: the
//! board DTs (the board crates, `// source:` there). Powers: the only public per-state power
//! tables for these boards are the ones Arm published with its EAS development kernels in
//! 2016 (`arch/arm64/kernel/energy_model.h`, "Juno (r0, r2)" and "HiKey" tables, the same
//! numbers as LISA's `juno_r0_energy.py` / `hikey_energy.py` platform files): core and
//! cluster power per OPP and per idle state, in one consistent but arbitrary unit per
//! board. We keep their *ratios* and convert units with one scale per board: our energy
//! model's busy power of the biggest CPU at its top OPP divided by the table's core power
//! at its top OPP. The cluster's active power at one of our OPPs is the table's,
//! interpolated linearly at the same fraction of fmax. **Model parameters**, not
//! measurements: (1) that scale; (2) HiKey960 has no public table, so its A53 cluster uses
//! Juno's A53 ratios and its A73 cluster Juno's A57 ratios; (3) Juno r2's A72 uses the
//! A57 table (the published one says "r0, r2"); (4) the energy of one frequency transition,
//! [`TRANSITION_STALL_NS`] of the cluster's idle power plus its CPUs' leakage, for which no
//! public measurement exists.

use asym_boards::{BoardConfig, IdleState};
use serde::Serialize;

use crate::board::Board;
use crate::engine::Timeline;

/// Model parameter: how long one frequency transition keeps a domain's clusters and CPUs
/// powered without doing work (PLL relock and voltage settling). No public figure for these
/// boards; the DTs' `clock-latency-ns` (300 µs – 1.45 ms) time the firmware round trip,
/// during which the CPUs keep running at the old OPP.
pub const TRANSITION_STALL_NS: u64 = 50_000;

/// A published per-cluster power table (one unit per board, see the module docs).
struct RefTable {
    /// Where it is from.
    source: &'static str,
    /// OPP frequencies of the table (kHz, ascending).
    khz: &'static [u32],
    /// Core busy power at each.
    cpu_busy: &'static [u32],
    /// Cluster busy power at each (any CPU of the cluster running).
    cluster_busy: &'static [u32],
    /// Core power in WFI.
    cpu_wfi: u32,
    /// Cluster power with its CPUs idle, the shallowest in WFI.
    cluster_wfi: u32,
    /// Cluster power with every CPU in cpu-sleep.
    cluster_cpu_sleep: u32,
    /// Cluster power in cluster-sleep.
    cluster_off: u32,
}

// source: Arm's EAS kernel arch/arm64/kernel/energy_model.h (2016), "Juno (r0, r2)":
// idle_states_cluster_juno_a57 {65, 65, 65, 24}, cap_states_cluster_juno_a57 power
// {24, 32, 43, 49, 64} at 450/625/800/950/1100 MHz, idle_states_core_juno_a57 {15, 15, 0, 0},
// cap_states_core_juno_a57 power {168, 251, 359, 479, 616}. LISA's juno_r0_energy.py agrees.
const JUNO_A57: RefTable = RefTable {
    source: "energy_model.h Juno A57",
    khz: &[450_000, 625_000, 800_000, 950_000, 1_100_000],
    cpu_busy: &[168, 251, 359, 479, 616],
    cluster_busy: &[24, 32, 43, 49, 64],
    cpu_wfi: 15,
    cluster_wfi: 65,
    cluster_cpu_sleep: 65,
    cluster_off: 24,
};

// source: as JUNO_A57, the A53 rows: cluster idle {56, 56, 56, 17}, cluster busy
// {26, 30, 39, 47, 57} at 450/575/700/775/850 MHz, core idle {6, 6, 0, 0}, core busy
// {33, 46, 61, 76, 93}.
const JUNO_A53: RefTable = RefTable {
    source: "energy_model.h Juno A53",
    khz: &[450_000, 575_000, 700_000, 775_000, 850_000],
    cpu_busy: &[33, 46, 61, 76, 93],
    cluster_busy: &[26, 30, 39, 47, 57],
    cpu_wfi: 6,
    cluster_wfi: 56,
    cluster_cpu_sleep: 56,
    cluster_off: 17,
};

// source: as JUNO_A57, "HiKey": idle_states_cluster_hikey {107, 107, 47, 0},
// cap_states_cluster_hikey power {16, 29, 47, 75, 112} at 208/432/729/960/1200 MHz,
// idle_states_core_hikey {15, 15, 0, 0}, cap_states_core_hikey power {69, 125, 224, 367,
// 670}. (LISA's hikey_energy.py gives the cluster 47 in WFI too.)
const HIKEY_A53: RefTable = RefTable {
    source: "energy_model.h HiKey",
    khz: &[208_000, 432_000, 729_000, 960_000, 1_200_000],
    cpu_busy: &[69, 125, 224, 367, 670],
    cluster_busy: &[16, 29, 47, 75, 112],
    cpu_wfi: 15,
    cluster_wfi: 107,
    cluster_cpu_sleep: 47,
    cluster_off: 0,
};

/// One DT idle state in ns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct IdleParams {
    /// DT name.
    pub name: &'static str,
    /// `entry-latency-us` in ns.
    pub entry_ns: u64,
    /// `exit-latency-us` in ns.
    pub exit_ns: u64,
    /// `min-residency-us` in ns.
    pub min_residency_ns: u64,
}

impl IdleParams {
    fn from_dt(s: &IdleState) -> IdleParams {
        IdleParams {
            name: s.name,
            entry_ns: s.entry_latency_us as u64 * 1000,
            exit_ns: s.exit_latency_us as u64 * 1000,
            min_residency_ns: s.min_residency_us as u64 * 1000,
        }
    }
}

/// The meter's model of one `cpu-map` cluster (µW).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ClusterPower {
    /// `cluster<N>`.
    pub name: String,
    /// The published table its ratios come from.
    pub source: &'static str,
    /// Its CPUs.
    pub cpus: Vec<usize>,
    /// Its performance domain.
    pub domain: usize,
    /// Static power of one powered CPU (busy or in WFI).
    pub cpu_static_uw: u64,
    /// Cluster power while any CPU runs, per OPP of the domain (ascending).
    pub cluster_busy_uw: Vec<u64>,
    /// Cluster power while every CPU is idle and one is in WFI.
    pub cluster_idle_uw: u64,
    /// Cluster power while every CPU is in cpu-sleep.
    pub cluster_cpu_sleep_uw: u64,
    /// Cluster power in cluster-sleep.
    pub cluster_off_uw: u64,
    /// The CPUs' power-level-0 state, if the DT has one.
    pub cpu_sleep: Option<IdleParams>,
    /// The cluster's power-level-1 state, if the DT has one.
    pub cluster_sleep: Option<IdleParams>,
}

/// The meter's model of a board.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MeterModel {
    /// µW per table unit (model parameter, see the module docs).
    pub uw_per_unit: f64,
    /// Per cluster.
    pub clusters: Vec<ClusterPower>,
    /// [`TRANSITION_STALL_NS`].
    pub transition_stall_ns: u64,
}

/// What the meter read, µJ.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct MeterReading {
    /// Everything below.
    pub total_uj: f64,
    /// CPUs' dynamic power while busy (equals the energy model's total).
    pub cpu_dynamic_uj: f64,
    /// CPUs' static power while powered.
    pub cpu_static_uj: f64,
    /// Clusters' power (active, idle and off).
    pub cluster_uj: f64,
    /// Frequency transitions.
    pub transition_uj: f64,
    /// Per cluster.
    pub clusters: Vec<ClusterReading>,
}

/// One cluster's reading.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClusterReading {
    /// `cluster<N>`.
    pub name: String,
    /// Dynamic, static and cluster energy of this cluster, µJ (no transitions).
    pub energy_uj: f64,
    /// Σ over its CPUs of busy time.
    pub cpu_busy_ns: u64,
    /// Σ over its CPUs of time in WFI (including deeper states' entry and exit).
    pub cpu_wfi_ns: u64,
    /// Σ over its CPUs of time power-gated (cpu-sleep or cluster-sleep).
    pub cpu_sleep_ns: u64,
    /// Time the cluster was in cluster-sleep.
    pub cluster_off_ns: u64,
    /// Frequency transitions of its domain.
    pub transitions: u64,
}

/// The meter's model of `board`; `None` when the board has no energy model or no
/// published table applies.
pub fn model(board: &Board) -> Option<MeterModel> {
    if !board.has_energy_model {
        return None;
    }
    let cfg = asym_boards::config_by_name(board.desc.name)?;
    let tables: &[&RefTable] = match board.desc.name {
        "juno-r2" => &[&JUNO_A57, &JUNO_A53],
        // Model parameter: no public table; Juno's A53 and A57 ratios (module docs).
        "hikey960" => &[&JUNO_A53, &JUNO_A57],
        "hikey" => &[&HIKEY_A53, &HIKEY_A53],
        _ => return None,
    };
    let topo = &board.topology;
    let mut clusters: Vec<(u16, Vec<usize>)> = Vec::new();
    for c in topo.cpus() {
        match clusters.iter_mut().find(|(id, _)| *id == c.cluster) {
            Some((_, v)) => v.push(c.id.0 as usize),
            None => clusters.push((c.cluster, vec![c.id.0 as usize])),
        }
    }
    clusters.sort_by_key(|(id, _)| *id);
    if clusters.len() != tables.len() {
        return None;
    }
    // One unit per board: the biggest CPU's top-OPP power over its table's.
    let (big_cl, _) = clusters
        .iter()
        .enumerate()
        .max_by_key(|(_, (_, cpus))| board.cpus[cpus[0]].capacity_orig)?;
    let big_dom = &board.domains[board.cpus[clusters[big_cl].1[0]].domain];
    let top_uw = big_dom.opps.last()?.power_uw as f64;
    let uw_per_unit = top_uw / *tables[big_cl].cpu_busy.last()? as f64;
    let to_uw = |units: f64| (units * uw_per_unit).round() as u64;
    let mut out = Vec::new();
    for ((id, cpus), t) in clusters.iter().zip(tables) {
        let dom = board.cpus[cpus[0]].domain;
        let dm = &board.domains[dom];
        let t_fmax = *t.khz.last()? as f64;
        let cluster_busy_uw = dm
            .opps
            .iter()
            .map(|o| {
                let at = o.khz as f64 / dm.fmax_khz.max(1) as f64 * t_fmax;
                to_uw(interp(t.khz, t.cluster_busy, at))
            })
            .collect();
        let (cpu_sleep, cluster_sleep) = dt_states(cfg, cpus[0]);
        out.push(ClusterPower {
            name: format!("cluster{id}"),
            source: t.source,
            cpus: cpus.clone(),
            domain: dom,
            cpu_static_uw: to_uw(t.cpu_wfi as f64),
            cluster_busy_uw,
            cluster_idle_uw: to_uw(t.cluster_wfi as f64),
            cluster_cpu_sleep_uw: to_uw(t.cluster_cpu_sleep as f64),
            cluster_off_uw: to_uw(t.cluster_off as f64),
            cpu_sleep,
            cluster_sleep,
        });
    }
    Some(MeterModel {
        uw_per_unit,
        clusters: out,
        transition_stall_ns: TRANSITION_STALL_NS,
    })
}

/// The CPU's DT idle states: power level 0 (cpu-sleep) and 1 (cluster-sleep), from the
/// PSCI `arm,psci-suspend-param` (original format: bits 25:24 are the power level).
fn dt_states(cfg: &BoardConfig, cpu: usize) -> (Option<IdleParams>, Option<IdleParams>) {
    let mut cpu_sleep = None;
    let mut cluster_sleep = None;
    let idx = cfg.cpu_idle_states.get(cpu).copied().unwrap_or(&[]);
    for &i in idx {
        let Some(s) = cfg.idle_states.get(i as usize) else {
            continue;
        };
        match (s.psci_suspend_param >> 24) & 0x3 {
            0 => cpu_sleep = Some(IdleParams::from_dt(s)),
            1 => cluster_sleep = Some(IdleParams::from_dt(s)),
            _ => {}
        }
    }
    (cpu_sleep, cluster_sleep)
}

/// Piecewise-linear interpolation of `ys` over `xs` at `x`, clamped to the ends.
fn interp(xs: &[u32], ys: &[u32], x: f64) -> f64 {
    let n = xs.len().min(ys.len());
    if n == 0 {
        return 0.0;
    }
    if x <= xs[0] as f64 {
        return ys[0] as f64;
    }
    for i in 1..n {
        let (x0, x1) = (xs[i - 1] as f64, xs[i] as f64);
        if x <= x1 {
            let (y0, y1) = (ys[i - 1] as f64, ys[i] as f64);
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
        }
    }
    ys[n - 1] as f64
}

/// A CPU's state over a stretch of time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CpuState {
    Busy,
    Wfi,
    Sleep,
}

/// `[start, end)` in one state.
type Seg = (u64, u64, CpuState);

/// Read the meter over a run: `timeline` holds every running stretch and frequency change
/// up to `end_ns`; `transitions[d]` counts domain `d`'s frequency changes.
pub fn read(
    board: &Board,
    m: &MeterModel,
    timeline: &Timeline,
    end_ns: u64,
    transitions: &[u64],
) -> MeterReading {
    let nr = board.nr_cpus();
    let mut busy: Vec<Vec<(u64, u64)>> = vec![Vec::new(); nr];
    for &(cpu, s, e, _) in &timeline.runs {
        if cpu < nr && e > s {
            busy[cpu].push((s, e.min(end_ns)));
        }
    }
    let mut r = MeterReading::default();
    let (mut dyn_fj, mut stat_fj, mut clus_fj, mut trans_fj) = (0u128, 0u128, 0u128, 0u128);
    for cl in &m.clusters {
        let dm = &board.domains[cl.domain];
        // The domain's OPP index over time: (from, opp), ascending.
        let mut opp_at: Vec<(u64, usize)> = timeline
            .freqs
            .iter()
            .filter(|(d, _, _)| *d == cl.domain)
            .map(|&(_, t, khz)| (t, board.opp_index(cl.domain, khz)))
            .collect();
        opp_at.sort_by_key(|&(t, _)| t);
        if opp_at.first().is_none_or(|&(t, _)| t > 0) {
            opp_at.insert(0, (0, dm.opps.len().saturating_sub(1)));
        }
        let segs: Vec<Vec<Seg>> = cl
            .cpus
            .iter()
            .map(|&c| cpu_segments(&mut busy[c], end_ns, cl.cpu_sleep))
            .collect();
        let off = cluster_off(&segs, end_ns, cl.cluster_sleep);
        let mut cuts: Vec<u64> = vec![0, end_ns];
        for s in segs.iter().flatten() {
            cuts.push(s.0);
        }
        cuts.extend(off.iter().flat_map(|&(a, b)| [a, b]));
        cuts.extend(opp_at.iter().map(|&(t, _)| t).filter(|&t| t < end_ns));
        cuts.sort_unstable();
        cuts.dedup();
        let mut cr = ClusterReading {
            name: cl.name.clone(),
            transitions: transitions.get(cl.domain).copied().unwrap_or(0),
            ..ClusterReading::default()
        };
        let mut pos = vec![0usize; segs.len()];
        let (mut opp_pos, mut off_pos) = (0usize, 0usize);
        let mut cl_fj = 0u128;
        for w in cuts.windows(2) {
            let (t0, t1) = (w[0], w[1]);
            let dt = (t1 - t0) as u128;
            while opp_pos + 1 < opp_at.len() && opp_at[opp_pos + 1].0 <= t0 {
                opp_pos += 1;
            }
            while off_pos < off.len() && off[off_pos].1 <= t0 {
                off_pos += 1;
            }
            let is_off = off.get(off_pos).is_some_and(|&(a, _)| a <= t0);
            let opp = opp_at[opp_pos].1;
            let (mut any_busy, mut all_sleep) = (false, true);
            for (i, s) in segs.iter().enumerate() {
                while s[pos[i]].1 <= t0 {
                    pos[i] += 1;
                }
                match s[pos[i]].2 {
                    CpuState::Busy => {
                        any_busy = true;
                        all_sleep = false;
                        cr.cpu_busy_ns += t1 - t0;
                        dyn_fj += dt * dm.opps[opp].power_uw as u128;
                        cl_fj += dt * dm.opps[opp].power_uw as u128;
                        stat_fj += dt * cl.cpu_static_uw as u128;
                        cl_fj += dt * cl.cpu_static_uw as u128;
                    }
                    CpuState::Wfi if !is_off => {
                        all_sleep = false;
                        cr.cpu_wfi_ns += t1 - t0;
                        stat_fj += dt * cl.cpu_static_uw as u128;
                        cl_fj += dt * cl.cpu_static_uw as u128;
                    }
                    _ => cr.cpu_sleep_ns += t1 - t0,
                }
            }
            let p = if is_off {
                cr.cluster_off_ns += t1 - t0;
                cl.cluster_off_uw
            } else if any_busy {
                cl.cluster_busy_uw[opp]
            } else if all_sleep {
                cl.cluster_cpu_sleep_uw
            } else {
                cl.cluster_idle_uw
            };
            clus_fj += dt * p as u128;
            cl_fj += dt * p as u128;
        }
        cr.energy_uj = fj_to_uj(cl_fj);
        r.clusters.push(cr);
    }
    // A transition keeps every cluster of the domain (idle power) and its CPUs (static
    // power) up for the stall, once per domain.
    for (d, &n) in transitions.iter().enumerate() {
        let per: u64 = m
            .clusters
            .iter()
            .filter(|c| c.domain == d)
            .map(|c| c.cluster_idle_uw + c.cpu_static_uw * c.cpus.len() as u64)
            .sum();
        trans_fj += n as u128 * per as u128 * m.transition_stall_ns as u128;
    }
    r.cpu_dynamic_uj = fj_to_uj(dyn_fj);
    r.cpu_static_uj = fj_to_uj(stat_fj);
    r.cluster_uj = fj_to_uj(clus_fj);
    r.transition_uj = fj_to_uj(trans_fj);
    r.total_uj = fj_to_uj(dyn_fj + stat_fj + clus_fj + trans_fj);
    r
}

/// fJ (µW × ns) to µJ, rounded to a nanojoule as the report's energy is.
fn fj_to_uj(fj: u128) -> f64 {
    ((fj / 1_000_000) as f64) / 1000.0
}

/// One CPU's timeline as covering, ascending segments of `[0, end)`: busy stretches
/// (merged), and each idle gap in cpu-sleep when it is long enough (its entry and exit
/// in WFI), else in WFI.
fn cpu_segments(busy: &mut [(u64, u64)], end: u64, sleep: Option<IdleParams>) -> Vec<Seg> {
    busy.sort_unstable();
    let mut out: Vec<Seg> = Vec::new();
    let mut t = 0u64;
    let idle = |out: &mut Vec<Seg>, a: u64, b: u64| {
        if b <= a {
            return;
        }
        match sleep {
            Some(s) if b - a >= s.min_residency_ns && b - a > s.entry_ns + s.exit_ns => {
                out.push((a, a + s.entry_ns, CpuState::Wfi));
                out.push((a + s.entry_ns, b - s.exit_ns, CpuState::Sleep));
                out.push((b - s.exit_ns, b, CpuState::Wfi));
            }
            _ => out.push((a, b, CpuState::Wfi)),
        }
    };
    for &(s, e) in busy.iter() {
        let (s, e) = (s.max(t), e.min(end));
        if e <= s {
            continue;
        }
        idle(&mut out, t, s);
        match out.last_mut() {
            Some(last) if last.2 == CpuState::Busy && last.1 == s => last.1 = e,
            _ => out.push((s, e, CpuState::Busy)),
        }
        t = e;
    }
    idle(&mut out, t, end);
    out.retain(|s| s.1 > s.0);
    out
}

/// The stretches a cluster is off: every CPU idle (not busy) over `[a, b)` with
/// `b - a` at least the cluster state's residency, minus its entry and exit.
fn cluster_off(segs: &[Vec<Seg>], end: u64, st: Option<IdleParams>) -> Vec<(u64, u64)> {
    let Some(st) = st else {
        return Vec::new();
    };
    // Busy stretches of any CPU, merged; the gaps are all-idle.
    let mut busy: Vec<(u64, u64)> = segs
        .iter()
        .flatten()
        .filter(|s| s.2 == CpuState::Busy)
        .map(|s| (s.0, s.1))
        .collect();
    busy.sort_unstable();
    let mut out = Vec::new();
    let mut t = 0u64;
    let mut gap = |a: u64, b: u64| {
        if b > a && b - a >= st.min_residency_ns && b - a > st.entry_ns + st.exit_ns {
            out.push((a + st.entry_ns, b - st.exit_ns));
        }
    };
    for (s, e) in busy {
        if s > t {
            gap(t, s);
        }
        t = t.max(e);
    }
    gap(t, end);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn juno() -> Board {
        crate::load_board("juno-r2").unwrap()
    }

    fn tl(runs: &[(usize, u64, u64)], freqs: &[(usize, u64, u32)]) -> Timeline {
        Timeline {
            runs: runs.iter().map(|&(c, s, e)| (c, s, e, 0)).collect(),
            freqs: freqs.to_vec(),
            utils: Vec::new(),
        }
    }

    /// The model's powers follow the published ratios: the big CPU's top OPP defines the
    /// unit (550 854 µW = 616 units), so the A57 WFI power is 15/616 of it, Juno's LITTLE
    /// cluster off 17/616 of it; the cluster busy power at our 1200 MHz (= the table's
    /// fmax) is the table's top entry (64).
    #[test]
    fn juno_model_keeps_the_published_ratios() {
        let b = juno();
        let m = model(&b).unwrap();
        let u: f64 = 550_854.0 / 616.0;
        let big = &m.clusters[0];
        assert_eq!(big.cpus, vec![0, 1]);
        assert_eq!(big.cpu_static_uw, (15.0 * u).round() as u64);
        assert_eq!(big.cluster_idle_uw, (65.0 * u).round() as u64);
        assert_eq!(
            *big.cluster_busy_uw.last().unwrap(),
            (64.0 * u).round() as u64
        );
        // 600 MHz is half of fmax: the table at 550 MHz, between 24 (450) and 32 (625).
        let want: f64 = 24.0 + 8.0 * 100.0 / 175.0;
        assert_eq!(big.cluster_busy_uw[0], (want * u).round() as u64);
        let little = &m.clusters[1];
        assert_eq!(little.cluster_off_uw, (17.0 * u).round() as u64);
        assert_eq!(big.cpu_sleep.unwrap().min_residency_ns, 2_000_000);
        assert_eq!(big.cluster_sleep.unwrap().entry_ns, 400_000);
        assert!(model(&crate::load_board("hikey960").unwrap()).is_some());
        assert!(model(&crate::load_board("hikey").unwrap()).is_some());
    }

    /// Hand-computed reading: CPU 0 busy 1 ms at 600 MHz in a 10 ms run, everything else
    /// idle. CPU 0: 1 ms busy, then a 9 ms gap → cpu-sleep with 0.3 ms entry and 1.2 ms
    /// exit at WFI power (the 0 → 1 ms stretch before is busy). CPU 1 idle throughout:
    /// 0.3 + 1.2 ms WFI, 8.5 ms asleep. The big cluster: all idle from 1 ms to 10 ms (9 ms
    /// ≥ 2.5 ms) → off from 1.4 ms to 8.8 ms; busy 0–1 ms, idle (CPU 1 in WFI... then both
    /// asleep) otherwise.
    #[test]
    fn hand_computed_reading() {
        let b = juno();
        let m = model(&b).unwrap();
        let t = tl(&[(0, 0, 1_000_000)], &[(0, 0, 600_000), (1, 0, 450_000)]);
        let r = read(&b, &m, &t, 10_000_000, &[0, 0]);
        let big = &m.clusters[0];
        let p_dyn = b.domains[0].opps[0].power_uw as f64;
        let s = big.cpu_static_uw as f64;
        // CPU 0: busy 1 ms, WFI 0.3 ms (1.0–1.3) and 1.2 ms (8.8–10). CPU 1: WFI 0–0.3 and
        // 8.8–10, but 1.4–8.8 is cluster-off (no static power for either CPU then).
        let cpu_busy_ns = 1_000_000.0;
        let cpu0_wfi = 300_000.0 + 1_200_000.0;
        let cpu1_wfi = 300_000.0 + 1_200_000.0;
        assert_eq!(r.clusters[0].cpu_busy_ns, 1_000_000);
        assert_eq!(r.clusters[0].cpu_wfi_ns, 3_000_000);
        assert_eq!(r.clusters[0].cluster_off_ns, 7_400_000);
        // Cluster: busy 0–1 at busy_uw[0]; 1.0–1.4 idle: CPU 0 in WFI (1.0–1.3), then both
        // asleep (1.3–1.4: CPU 1 entered cpu-sleep at 0.3); off 1.4–8.8; 8.8–10 idle with
        // CPUs in WFI.
        let cl = big.cluster_busy_uw[0] as f64 * 1e6
            + big.cluster_idle_uw as f64 * 300_000.0
            + big.cluster_cpu_sleep_uw as f64 * 100_000.0
            + big.cluster_off_uw as f64 * 7_400_000.0
            + big.cluster_idle_uw as f64 * 1_200_000.0;
        let want_big = p_dyn * cpu_busy_ns + s * (cpu_busy_ns + cpu0_wfi + cpu1_wfi) + cl;
        assert_eq!(r.clusters[0].energy_uj, (want_big / 1e6).floor() / 1000.0);
        assert_eq!(
            r.cpu_dynamic_uj,
            (p_dyn * cpu_busy_ns / 1e6).floor() / 1000.0
        );
    }

    /// A short gap stays in WFI, and a cluster whose CPUs never all idle long enough
    /// never turns off.
    #[test]
    fn short_gaps_stay_in_wfi() {
        let b = juno();
        let m = model(&b).unwrap();
        // CPU 0 busy 1 ms of every 2 ms; CPU 1 likewise, out of phase: never all idle.
        let mut runs = Vec::new();
        for k in 0..5u64 {
            runs.push((0, k * 2_000_000, k * 2_000_000 + 1_000_000));
            runs.push((1, k * 2_000_000 + 1_000_000, k * 2_000_000 + 2_000_000));
        }
        let t = tl(&runs, &[(0, 0, 1_200_000), (1, 0, 950_000)]);
        let r = read(&b, &m, &t, 10_000_000, &[0, 0]);
        let c = &r.clusters[0];
        assert_eq!(c.cpu_busy_ns, 10_000_000);
        assert_eq!(c.cpu_wfi_ns, 10_000_000);
        assert_eq!(c.cpu_sleep_ns, 0);
        assert_eq!(c.cluster_off_ns, 0);
        // The LITTLE cluster, idle the whole 10 ms, is off but for entry and exit.
        assert_eq!(
            r.clusters[1].cluster_off_ns,
            10_000_000 - 400_000 - 1_200_000
        );
    }

    /// Transitions cost the stall at the domain's idle and static power, per change.
    #[test]
    fn transitions_are_charged_per_change() {
        let b = juno();
        let m = model(&b).unwrap();
        let t = tl(&[], &[(0, 0, 600_000), (1, 0, 450_000)]);
        let r0 = read(&b, &m, &t, 1_000_000, &[0, 0]);
        let r = read(&b, &m, &t, 1_000_000, &[3, 0]);
        let big = &m.clusters[0];
        let per = (big.cluster_idle_uw + 2 * big.cpu_static_uw) as u128 * 50_000;
        assert_eq!(r.transition_uj, fj_to_uj(3 * per));
        assert_eq!(r0.transition_uj, 0.0);
        assert!((r.total_uj - fj_to_uj(3 * per) - r0.total_uj).abs() < 0.002);
    }
}
