//! The scheduling descriptions of the boards asym targets — Juno r2, HiKey960 (Hi3660) and
//! HiKey (Hi6220) — in one place for the simulator, xtask's emulated boards and the policy
//! tests.
//!
//! The tables live in each board's crate (`boards/juno-r2`, `boards/hikey960`,
//! `boards/hikey`: `SCHED`, next to the rest of the board's configuration, every number with a
//! `// source:`); this crate re-exports them under the names the simulator has always used.
//! `asym_sched::topology::Topology::from_board` derives capacities (`capacity-dmips-mhz ×
//! fmax`, normalised) from these; nothing here is pre-computed. Logical CPU order is the DT's.
#![no_std]
#![forbid(unsafe_code)]

#[cfg(test)]
extern crate std;

use asym_sched::topology::BoardDesc;

pub use asym_kernel::board::{BoardConfig, IdleState};

/// ARM Juno r2: 2× Cortex-A72 + 4× Cortex-A53, one cpufreq policy per cluster.
pub const JUNO_R2: BoardDesc = asym_juno_r2::SCHED;
/// Juno r2 big OPPs as the SCMI SCP firmware reports them (documented alternative).
pub use asym_juno_r2::SCMI_BIG_OPPS as JUNO_R2_SCMI_BIG_OPPS;
/// Juno r2 LITTLE OPPs as the SCMI SCP firmware reports them (documented alternative).
pub use asym_juno_r2::SCMI_LITTLE_OPPS as JUNO_R2_SCMI_LITTLE_OPPS;
/// HiKey960 (Hi3660): 4× Cortex-A53 + 4× Cortex-A73, one cpufreq policy per cluster.
pub const HIKEY960: BoardDesc = asym_hikey960::SCHED;
/// HiKey (Hi6220): 8× Cortex-A53 in two clusters sharing one clock. Symmetric: no EAS.
pub const HIKEY: BoardDesc = asym_hikey::SCHED;

/// Every board, default (Juno r2) first.
pub const ALL: &[&BoardDesc] = &[&JUNO_R2, &HIKEY960, &HIKEY];

/// Look a board up by name (`"juno-r2"`, `"hikey960"`, `"hikey"`); the emulated names
/// (`"qemu-juno-r2"`, ...) map to the same tables.
pub fn by_name(name: &str) -> Option<&'static BoardDesc> {
    let name = name.strip_prefix("qemu-").unwrap_or(name);
    ALL.iter().copied().find(|b| b.name == name)
}

/// Every board's whole configuration (the `CONFIG` of its crate), in [`ALL`]'s order: the
/// simulator's energy meter reads the DT idle states from it.
pub const CONFIGS: &[&BoardConfig] = &[
    &asym_juno_r2::CONFIG,
    &asym_hikey960::CONFIG,
    &asym_hikey::CONFIG,
];

/// The configuration of the board [`by_name`] finds.
pub fn config_by_name(name: &str) -> Option<&'static BoardConfig> {
    let name = name.strip_prefix("qemu-").unwrap_or(name);
    CONFIGS.iter().copied().find(|c| c.sched.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use asym_sched::topology::{OppDesc, Topology};
    use asym_sched::types::{Capacity, CpuId};

    /// capacity-dmips-mhz × fmax, normalised: A72 1024 / A53 383; A73 1024 / A53 462; HiKey all 1024.
    #[test]
    fn capacity_orig_matches_dt_capacities() {
        let juno = Topology::from_board(&JUNO_R2).unwrap();
        let caps: [u32; 6] = core::array::from_fn(|i| juno.capacity_orig(CpuId(i as u16)).0);
        assert_eq!(caps, [1024, 1024, 383, 383, 383, 383]);

        let h960 = Topology::from_board(&HIKEY960).unwrap();
        let caps: [u32; 8] = core::array::from_fn(|i| h960.capacity_orig(CpuId(i as u16)).0);
        assert_eq!(caps, [462, 462, 462, 462, 1024, 1024, 1024, 1024]);

        let hikey = Topology::from_board(&HIKEY).unwrap();
        assert!(hikey
            .cpus()
            .iter()
            .all(|c| c.capacity_orig == Capacity(1024)));
    }

    #[test]
    fn eas_possible_only_on_asymmetric_boards() {
        assert!(Topology::from_board(&JUNO_R2).unwrap().eas_possible());
        assert!(Topology::from_board(&HIKEY960).unwrap().eas_possible());
        assert!(!Topology::from_board(&HIKEY).unwrap().eas_possible());
    }

    #[test]
    fn perf_domains_group_the_clusters() {
        let juno = Topology::from_board(&JUNO_R2).unwrap();
        assert_eq!(juno.perf_domain_of(CpuId(0)).unwrap().cpus.0, 0b000011);
        assert_eq!(juno.perf_domain_of(CpuId(5)).unwrap().cpus.0, 0b111100);
        let hikey = Topology::from_board(&HIKEY).unwrap();
        assert_eq!(hikey.nr_perf_domains(), 1);
        assert_eq!(hikey.perf_domain_of(CpuId(7)).unwrap().cpus.weight(), 8);
        assert_eq!(hikey.cluster_mask(1).0, 0xf0);
    }

    /// Hand-computed EM tables: the OPPs and voltages, checked through the power formula
    /// `µW = C × mV² × MHz / 10⁶` against the µW column (independent of our tables' layout).
    #[test]
    fn power_formula_reproduces_hand_computed_tables() {
        fn power_uw(c: u32, o: &OppDesc) -> u64 {
            let mv = (o.voltage.0 / 1000) as u64;
            let mhz = (o.freq.0 / 1000) as u64;
            c as u64 * mv * mv * mhz / 1_000_000
        }
        let check = |b: &BoardDesc, pd: usize, cpu: usize, want: &[u64]| {
            let c = b.cpus[cpu].dynamic_power_coefficient.unwrap();
            let got: std::vec::Vec<u64> = b.perf_domains[pd]
                .opps
                .iter()
                .map(|o| power_uw(c, o))
                .collect();
            assert_eq!(got, want, "{} pd{pd}", b.name);
        };
        check(&JUNO_R2, 1, 2, &[43296, 92543, 135673]);
        check(&JUNO_R2, 0, 0, &[185555, 371826, 550854]);
        check(&HIKEY960, 0, 0, &[28728, 70329, 124918, 187990, 245436]);
        check(&HIKEY960, 1, 4, &[243358, 500192, 804127, 1161600, 1571911]);
        check(&HIKEY, 0, 0, &[69966, 145315, 269364, 415714, 660153]);
    }

    #[test]
    fn lookup_by_name() {
        assert_eq!(by_name("juno-r2").unwrap().name, "juno-r2");
        assert_eq!(by_name("qemu-hikey960").unwrap().name, "hikey960");
        assert!(by_name("rpi4").is_none());
        assert_eq!(ALL[0].name, "juno-r2");
    }
}
