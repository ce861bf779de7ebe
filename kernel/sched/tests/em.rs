//! Energy-model tests. The boards are `asym_boards`' (the one set of fixtures every test uses);
//! the oracle is a set of energy-model tables transcribed below, computed
//! independently of this code (by hand / a spreadsheet) from the mainline DT values
//! (`juno-r2.dts`, `hi3660.dtsi`, `hi6220.dtsi`: OPPs, `dynamic-power-coefficient`) with the
//! formulas of Linux's `dev_pm_opp_calc_power` (µW = C × mV² × MHz / 10⁶) and `em_compute_costs`.

use asym_boards::{HIKEY960 as H960, JUNO_R2 as JUNO};
use asym_sched::em::{EmError, EmPerfDomain, EnergyModel};
use asym_sched::topology::{BoardDesc, CpuDesc, OppDesc, PerfDomainDesc};
use asym_sched::types::{Capacity, CpuId, CpuMask, Khz, MicroVolt, MicroWatt, Util};
use proptest::prelude::*;

/// (MHz, mV, power µW, performance, cost) rows, computed from the DT values.
type Row = (u32, u32, u64, u32, u64);

const JUNO_LITTLE: &[Row] = &[
    (450, 829, 43296, 181, 2392),
    (800, 909, 92543, 322, 2874),
    (950, 1010, 135673, 383, 3542),
];
const JUNO_BIG: &[Row] = &[
    (600, 829, 185555, 512, 3624),
    (1000, 909, 371826, 853, 4359),
    (1200, 1010, 550854, 1024, 5379),
];
const H960_LITTLE: &[Row] = &[
    (533, 700, 28728, 133, 2160),
    (999, 800, 70329, 250, 2813),
    (1402, 900, 124918, 351, 3558),
    (1709, 1000, 187990, 428, 4392),
    (1844, 1100, 245436, 462, 5312),
];
const H960_BIG: &[Row] = &[
    (903, 700, 243358, 391, 6223),
    (1421, 800, 500192, 616, 8120),
    (1805, 900, 804127, 782, 10282),
    (2112, 1000, 1161600, 915, 12695),
    (2362, 1100, 1571911, 1024, 15350),
];
const HIKEY: &[Row] = &[
    (208, 1040, 69966, 177, 3952),
    (432, 1040, 145315, 368, 3948),
    (729, 1090, 269364, 622, 4330),
    (960, 1180, 415714, 819, 5075),
    (1200, 1330, 660153, 1024, 6446),
];

const fn opp(mhz: u32, mv: u32) -> OppDesc {
    OppDesc {
        freq: Khz(mhz * 1000),
        voltage: MicroVolt(mv * 1000),
    }
}

const fn cpu(mpidr: u64, cluster: u16, pd: u16, c: Option<u32>) -> CpuDesc {
    CpuDesc {
        mpidr,
        cluster,
        perf_domain: pd,
        capacity_dmips_mhz: None,
        dynamic_power_coefficient: c,
        core: "test",
    }
}

const JUNO_CAPS: &[Capacity] = &[
    Capacity(1024),
    Capacity(1024),
    Capacity(383),
    Capacity(383),
    Capacity(383),
    Capacity(383),
];

const H960_CAPS: &[Capacity] = &[
    Capacity(462),
    Capacity(462),
    Capacity(462),
    Capacity(462),
    Capacity(1024),
    Capacity(1024),
    Capacity(1024),
    Capacity(1024),
];

/// HiKey as hi6220.dtsi writes it: one shared OPP table, and the coefficient on cpu0 only
/// (`asym_boards::HIKEY` repeats it on every CPU). `from_board` must find it on the domain's
/// first CPU, so this keeps the DT's shape rather than the board crate's.
const HIKEY_CPUS: &[CpuDesc] = &[
    cpu(0x0, 0, 0, Some(311)),
    cpu(0x1, 0, 0, None),
    cpu(0x2, 0, 0, None),
    cpu(0x3, 0, 0, None),
    cpu(0x100, 1, 0, None),
    cpu(0x101, 1, 0, None),
    cpu(0x102, 1, 0, None),
    cpu(0x103, 1, 0, None),
];
const HIKEY_BOARD: BoardDesc = BoardDesc {
    name: "hikey",
    cpus: HIKEY_CPUS,
    perf_domains: asym_boards::HIKEY.perf_domains,
};
const HIKEY_CAPS: &[Capacity] = &[Capacity(1024); 8];

fn check_table(em: &EmPerfDomain, rows: &[Row], what: &str) {
    assert_eq!(em.nr_perf_states(), rows.len(), "{what}");
    for (st, &(mhz, _mv, power, perf, cost)) in em.states().iter().zip(rows) {
        assert_eq!(st.frequency, Khz(mhz * 1000), "{what} {mhz} MHz");
        assert_eq!(st.power, MicroWatt(power), "{what} {mhz} MHz power");
        assert_eq!(
            st.performance,
            Capacity(perf),
            "{what} {mhz} MHz performance"
        );
        assert_eq!(st.cost, cost, "{what} {mhz} MHz cost");
    }
}

#[test]
fn juno_r2_tables_match_hand_computed_tables() {
    let em = EnergyModel::from_board(&JUNO, JUNO_CAPS).unwrap();
    // asym_boards lists the big cluster (cpu0, cpu1) first, as juno-r2.dts does.
    check_table(em.pd(0).unwrap(), JUNO_BIG, "juno big");
    check_table(em.pd(1).unwrap(), JUNO_LITTLE, "juno little");
    // Costs strictly increase: no inefficient state, nothing to skip.
    for pd in 0..2 {
        let pd = em.pd(pd).unwrap();
        assert!(pd.states().iter().all(|s| !s.inefficient));
        assert!(!pd.skip_inefficiencies);
    }
    assert_eq!(em.pd(0).unwrap().cpus, CpuMask(0b11));
    assert_eq!(em.em_cpu_get(CpuId(3)).unwrap().cpus, CpuMask(0b111100));
    assert!(em.complete());
}

#[test]
fn hikey960_tables_match_hand_computed_tables() {
    let em = EnergyModel::from_board(&H960, H960_CAPS).unwrap();
    check_table(em.pd(0).unwrap(), H960_LITTLE, "hikey960 little");
    check_table(em.pd(1).unwrap(), H960_BIG, "hikey960 big");
    assert!(em.pd(0).unwrap().states().iter().all(|s| !s.inefficient));
    assert!(em.pd(1).unwrap().states().iter().all(|s| !s.inefficient));
}

#[test]
fn hikey_one_domain_for_eight_cpus_and_208mhz_is_inefficient() {
    let em = EnergyModel::from_board(&HIKEY_BOARD, HIKEY_CAPS).unwrap();
    assert_eq!(em.nr_perf_domains(), 1);
    let pd = em.pd(0).unwrap();
    assert_eq!(pd.cpus.weight(), 8);
    check_table(pd, HIKEY, "hikey");
    // 208 MHz costs more than 432 MHz → EM_PERF_STATE_INEFFICIENT.
    let flags: Vec<bool> = pd.states().iter().map(|s| s.inefficient).collect();
    assert_eq!(flags, [true, false, false, false, false]);
    assert!(pd.skip_inefficiencies);
}

#[test]
fn dt_power_truncates_to_millivolts_and_megahertz_first() {
    use asym_sched::em::dt_opp_power;
    // _get_power: mV = µV / 1000 and MHz = Hz / 10⁶ are integer divisions before the
    // product, so 829.999 mV at 450.999 MHz counts as 829 mV at 450 MHz: 43296 µW.
    assert_eq!(dt_opp_power(140, Khz(450_999), 829_999), MicroWatt(43296));
    // 311 × 1040² × 208 / 10⁶ = 69966.6 → 69966 (truncated, not rounded).
    assert_eq!(dt_opp_power(311, Khz(208_000), 1_040_000), MicroWatt(69966));
    // Absurd inputs saturate instead of overflowing, and the table rejects them.
    assert_eq!(
        dt_opp_power(u32::MAX, Khz(u32::MAX), u32::MAX),
        MicroWatt(u64::MAX)
    );
    let huge = [OppDesc {
        freq: Khz(u32::MAX),
        voltage: MicroVolt(u32::MAX),
    }];
    assert!(matches!(
        EmPerfDomain::from_opps(0, &huge, u32::MAX, Capacity(1024), CpuMask(1)),
        Err(EmError::InvalidPower { index: 0, .. })
    ));
}

#[test]
fn em_cpu_energy_picks_the_state_covering_max_util() {
    let em = EnergyModel::from_board(&JUNO, JUNO_CAPS).unwrap();
    let big = em.pd(0).unwrap();
    let cap = Capacity(1024);
    // max_util 512 → 600 MHz (performance 512 ≥ 512): cost 3624 × sum_util 700.
    assert_eq!(big.em_cpu_energy(Util(512), Util(700), cap), 3624 * 700);
    // 513 → 1000 MHz (853).
    assert_eq!(big.em_cpu_energy(Util(513), Util(700), cap), 4359 * 700);
    // Above every state → the top state.
    assert_eq!(big.em_cpu_energy(Util(1300), Util(10), cap), 5379 * 10);
    // hw pressure caps max_util at 853 → 1000 MHz even for 1000.
    assert_eq!(
        big.em_cpu_energy(Util(1000), Util(10), Capacity(853)),
        4359 * 10
    );
    // Nothing to run, no energy.
    assert_eq!(big.em_cpu_energy(Util(900), Util(0), cap), 0);
}

#[test]
fn em_cpu_energy_skips_inefficient_states_when_the_domain_does() {
    let em = EnergyModel::from_board(&HIKEY_BOARD, HIKEY_CAPS).unwrap();
    let mut pd = em.pd(0).unwrap().clone();
    // max_util 100 fits 208 MHz (177) but 208 is inefficient: 432 MHz, cost 3948.
    assert_eq!(pd.efficient_state(Util(100)), 1);
    assert_eq!(
        pd.em_cpu_energy(Util(100), Util(100), Capacity(1024)),
        3948 * 100
    );
    pd.skip_inefficiencies = false;
    assert_eq!(
        pd.em_cpu_energy(Util(100), Util(100), Capacity(1024)),
        3952 * 100
    );
}

#[test]
fn performance_limits_bound_the_state_search() {
    let em = EnergyModel::from_board(&JUNO, JUNO_CAPS).unwrap();
    let mut big = em.pd(0).unwrap().clone();
    // Big-cluster minimum at 1000 MHz (seed 004's experiment): low util still costs 1000 MHz.
    big.update_performance_limits(Khz(1_000_000), Khz(1_200_000));
    assert_eq!(
        big.em_cpu_energy(Util(10), Util(10), Capacity(1024)),
        4359 * 10
    );
    // Max at 1000 MHz: the top state is out of reach.
    big.update_performance_limits(Khz(600_000), Khz(1_000_000));
    assert_eq!(
        big.em_cpu_energy(Util(1024), Util(10), Capacity(1024)),
        4359 * 10
    );
}

#[test]
fn bad_tables_are_errors_naming_the_place() {
    let non_monotonic = [opp(450, 829), opp(950, 1010), opp(800, 909)];
    let e = EmPerfDomain::from_opps(3, &non_monotonic, 140, Capacity(383), CpuMask(1)).unwrap_err();
    assert_eq!(
        e,
        EmError::NonIncreasingFrequency {
            pd: 3,
            index: 2,
            freq: Khz(800_000)
        }
    );
    assert!(e.to_string().contains("OPP 2"), "{e}");
    let dup = [opp(450, 829), opp(450, 829)];
    assert!(matches!(
        EmPerfDomain::from_opps(0, &dup, 140, Capacity(383), CpuMask(1)),
        Err(EmError::NonIncreasingFrequency { index: 1, .. })
    ));
    assert_eq!(
        EmPerfDomain::from_opps(0, &[], 140, Capacity(383), CpuMask(1)),
        Err(EmError::EmptyTable { pd: 0 })
    );
    let zero_v = [opp(450, 829), opp(800, 0)];
    assert_eq!(
        EmPerfDomain::from_opps(0, &zero_v, 140, Capacity(383), CpuMask(1)),
        Err(EmError::ZeroVoltage { pd: 0, index: 1 })
    );
}

#[test]
fn power_coefficient_zero_is_an_error_absent_means_no_em() {
    const ZERO: &[CpuDesc] = &[cpu(0, 0, 0, Some(450)), cpu(0x100, 1, 1, Some(0))];
    const PDS: &[PerfDomainDesc] = &[
        PerfDomainDesc {
            name: "a",
            opps: JUNO.perf_domains[0].opps,
            transition_latency_ns: 0,
        },
        PerfDomainDesc {
            name: "b",
            opps: JUNO.perf_domains[1].opps,
            transition_latency_ns: 0,
        },
    ];
    let caps = [Capacity(1024), Capacity(383)];
    let b = BoardDesc {
        name: "t",
        cpus: ZERO,
        perf_domains: PDS,
    };
    let e = EnergyModel::from_board(&b, &caps).unwrap_err();
    assert_eq!(e, EmError::ZeroPowerCoefficient { cpu: CpuId(1) });
    assert!(e.to_string().contains("cpu1"), "{e}");

    const ABSENT: &[CpuDesc] = &[cpu(0, 0, 0, Some(450)), cpu(0x100, 1, 1, None)];
    let b = BoardDesc {
        name: "t",
        cpus: ABSENT,
        perf_domains: PDS,
    };
    let em = EnergyModel::from_board(&b, &caps).unwrap();
    assert!(em.pd(0).is_some());
    assert!(em.pd(1).is_none(), "no coefficient → no EM for that domain");
    assert!(!em.complete());
    assert_eq!(
        EmPerfDomain::new(&b, 1, &caps),
        Err(EmError::MissingPowerCoefficient { cpu: CpuId(1) })
    );
}

fn arb_table() -> impl Strategy<Value = (Vec<OppDesc>, u32, u32)> {
    // 1..8 OPPs with strictly increasing frequencies; voltages anywhere in 0.5..1.3 V,
    // so costs can go up or down and inefficient states appear.
    (
        prop::collection::vec((1u32..400, 500u32..1300), 1..8),
        50u32..800,
        100u32..=1024,
    )
        .prop_map(|(steps, c, cap)| {
            let mut f = 100;
            let opps = steps
                .into_iter()
                .map(|(df, mv)| {
                    f += df;
                    opp(f, mv)
                })
                .collect();
            (opps, c, cap)
        })
}

proptest! {
    /// Independent oracle: a state is inefficient iff some higher state costs no more,
    /// and the efficient state for `u` is the lowest allowed state with performance ≥ u
    /// that is not inefficient (the top state if none).
    #[test]
    fn inefficiency_and_state_choice_match_brute_force((opps, c, cap) in arb_table(), u in 0u32..1200) {
        let em = EmPerfDomain::from_opps(0, &opps, c, Capacity(cap), CpuMask(1)).unwrap();
        let st = em.states();
        for i in 0..st.len() {
            let oracle = st[i + 1..].iter().any(|h| h.cost <= st[i].cost);
            prop_assert_eq!(st[i].inefficient, oracle);
            // cost definition, re-derived in f64.
            let p = c as f64 * (opps[i].voltage.0 / 1000) as f64 * (opps[i].voltage.0 / 1000) as f64
                * (opps[i].freq.0 / 1000) as f64 / 1e6;
            prop_assert!((st[i].power.0 as f64 - p).abs() < 1.0);
        }
        let want = (0..st.len())
            .find(|&i| st[i].performance.0 >= u && !(em.skip_inefficiencies && st[i].inefficient))
            .unwrap_or(st.len() - 1);
        prop_assert_eq!(em.efficient_state(Util(u)), want);
        // The chosen state never costs more than any other state that covers u.
        let chosen = &st[want];
        for s in st.iter().filter(|s| s.performance.0 >= u) {
            prop_assert!(chosen.cost <= s.cost);
        }
    }
}
