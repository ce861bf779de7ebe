//! The energy model and cpufreq policies built from the real board tables
//! (`asym_boards::{JUNO_R2, HIKEY960, HIKEY}`) with `capacity_orig` from
//! `Topology::from_board`, compared with energy-model tables transcribed here as the oracle,
//! computed independently (by hand) from the mainline DT values with `dev_pm_opp_calc_power`'s
//! µW = C × mV² × MHz / 10⁶ and `em_compute_costs`.

use asym_sched::cpufreq::CpufreqPolicy;
use asym_sched::em::EnergyModel;
use asym_sched::topology::{BoardDesc, Topology};
use asym_sched::types::{Capacity, Khz, MicroWatt, Nanos};

/// (MHz, power µW, performance, cost) rows, computed from the DT values.
type Row = (u32, u64, u32, u64);

const JUNO_LITTLE: &[Row] = &[
    (450, 43296, 181, 2392),
    (800, 92543, 322, 2874),
    (950, 135673, 383, 3542),
];
const JUNO_BIG: &[Row] = &[
    (600, 185555, 512, 3624),
    (1000, 371826, 853, 4359),
    (1200, 550854, 1024, 5379),
];
const H960_LITTLE: &[Row] = &[
    (533, 28728, 133, 2160),
    (999, 70329, 250, 2813),
    (1402, 124918, 351, 3558),
    (1709, 187990, 428, 4392),
    (1844, 245436, 462, 5312),
];
const H960_BIG: &[Row] = &[
    (903, 243358, 391, 6223),
    (1421, 500192, 616, 8120),
    (1805, 804127, 782, 10282),
    (2112, 1161600, 915, 12695),
    (2362, 1571911, 1024, 15350),
];
const HIKEY: &[Row] = &[
    (208, 69966, 177, 3952),
    (432, 145315, 368, 3948),
    (729, 269364, 622, 4330),
    (960, 415714, 819, 5075),
    (1200, 660153, 1024, 6446),
];

/// Check every domain of `board` named in `want` against its rows.
fn check(board: &BoardDesc, want: &[(&str, &[Row], &[bool])]) {
    let topo = Topology::from_board(board).unwrap();
    let em = EnergyModel::from_topology(board, &topo).unwrap();
    assert!(em.complete(), "{}: every domain has an EM", board.name);
    for &(name, rows, inefficient) in want {
        let pd = board
            .perf_domains
            .iter()
            .position(|p| p.name == name)
            .unwrap();
        let m = em.pd(pd).unwrap();
        assert_eq!(m.nr_perf_states(), rows.len(), "{} {name}", board.name);
        for ((st, &(mhz, power, perf, cost)), &ineff) in
            m.states().iter().zip(rows).zip(inefficient)
        {
            let at = format!("{} {name} {mhz} MHz", board.name);
            assert_eq!(st.frequency, Khz(mhz * 1000), "{at}");
            assert_eq!(st.power, MicroWatt(power), "{at} power");
            assert_eq!(st.performance, Capacity(perf), "{at} performance");
            assert_eq!(st.cost, cost, "{at} cost");
            assert_eq!(st.inefficient, ineff, "{at} inefficient flag");
        }
        let pol = CpufreqPolicy::new(board, pd, Nanos(0)).unwrap();
        assert_eq!(
            pol.cpus, m.cpus,
            "{} {name}: policy and EM span the same CPUs",
            board.name
        );
    }
}

#[test]
fn juno_r2_energy_model_matches_hand_computed_tables() {
    check(
        &asym_boards::JUNO_R2,
        &[
            ("little", JUNO_LITTLE, &[false; 3]),
            ("big", JUNO_BIG, &[false; 3]),
        ],
    );
}

#[test]
fn hikey960_energy_model_matches_hand_computed_tables() {
    check(
        &asym_boards::HIKEY960,
        &[
            ("little", H960_LITTLE, &[false; 5]),
            ("big", H960_BIG, &[false; 5]),
        ],
    );
}

#[test]
fn hikey_energy_model_matches_hand_computed_tables_with_one_policy_for_eight_cpus() {
    check(
        &asym_boards::HIKEY,
        &[("all", HIKEY, &[true, false, false, false, false])],
    );
    let pol = CpufreqPolicy::new(&asym_boards::HIKEY, 0, Nanos(0)).unwrap();
    assert_eq!(pol.cpus.weight(), 8);
    // clock-latency-ns 500000 → rate_limit_us 750 (v6.12 rule).
    assert_eq!(pol.transition_delay_us(), 750);
}

#[test]
fn rate_limits_from_board_latencies() {
    // Juno: 1450 µs (SCMI firmware figure) → 2175 µs; HiKey960: 300 µs → 450 µs.
    let juno = CpufreqPolicy::new(&asym_boards::JUNO_R2, 0, Nanos(0)).unwrap();
    assert_eq!(juno.transition_delay_us(), 2175);
    let h960 = CpufreqPolicy::new(&asym_boards::HIKEY960, 1, Nanos(0)).unwrap();
    assert_eq!(h960.transition_delay_us(), 450);
}
