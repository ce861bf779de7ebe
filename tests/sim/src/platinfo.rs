//! `platform_info.yml`: the modelled board as LISA's `PlatformInfo`
//! (`lisa.platforms.platinfo`), written beside every trace so that LISA's frequency,
//! capacity and energy analyses need no hand-written set-up:
//!
//! ```python
//! from lisa.platforms.platinfo import PlatformInfo
//! from lisa.trace import Trace
//! plat_info = PlatformInfo.from_yaml_map("out/platform_info.yml")
//! trace = Trace("out/trace.txt", plat_info=plat_info)
//! ```
//!
//! Keys (`PlatformInfo.STRUCTURE`): `name`, `os`, `abi`, `cpus-count`,
//! `numa-nodes-count`, `freq-domains`, `freqs`, `cpu-capacities` (`orig`, not
//! `writeable`), `rtapp.calib` and `nrg-model`. The energy model is built the way
//! `LinuxEnergyModel.from_target` builds one from Linux's `energy_model` debugfs: one
//! node per CPU whose active states are the domain's OPPs with
//! `capacity = capacity_orig × f / fmax` and the OPP's power in µW (so LISA's estimate
//! integrates to µJ, `report.json`'s unit), one idle state `WFI` at 0 µW (the model's
//! idle CPUs draw nothing), each CPU its own power domain. The objects are YAML
//! `!call:` tags, which LISA's loader (`lisa.utils.Serializable`) turns into calls.
//!
//! `rtapp.calib` is what rt-app's calibration would measure on the model at top
//! frequency: `run` is work in big-CPU units (`docs/sim.md`), so a loop costs
//! `100 × 1024 / capacity_orig` ns on each CPU.

use std::fmt::Write;

use crate::board::Board;

/// rt-app's calibration (ns per loop) on the biggest CPU.
const RTAPP_CALIB_BIG_NS: u64 = 100;

/// The YAML text of `platform_info.yml` for `board`.
pub fn platform_info_yaml(board: &Board) -> String {
    let nr = board.nr_cpus();
    let doms: Vec<String> = board.domains.iter().map(|d| list(&d.cpus)).collect();
    let freq_domains = format!("[{}]", doms.join(", "));
    let mut y = String::new();
    let name = board.desc.name;
    // Writing to a String cannot fail.
    let _ = writeln!(
        y,
        "# LISA PlatformInfo of the board asym-sim modelled ({name}); see docs/sim.md."
    );
    y.push_str("platform-info:\n    conf:\n");
    let _ = writeln!(y, "        name: {name}");
    y.push_str("        os: linux\n        abi: arm64\n");
    let _ = writeln!(y, "        cpus-count: {nr}");
    y.push_str("        numa-nodes-count: 1\n");
    let _ = writeln!(y, "        freq-domains: {freq_domains}");
    y.push_str("        freqs:\n");
    for (cpu, c) in board.cpus.iter().enumerate() {
        let khz: Vec<u32> = board.domains[c.domain].opps.iter().map(|o| o.khz).collect();
        let _ = writeln!(y, "            {cpu}: {}", list(&khz));
    }
    y.push_str("        cpu-capacities:\n            writeable: false\n            orig:\n");
    for (cpu, c) in board.cpus.iter().enumerate() {
        let _ = writeln!(y, "                {cpu}: {}", c.capacity_orig);
    }
    y.push_str("        rtapp:\n            calib:\n");
    for (cpu, c) in board.cpus.iter().enumerate() {
        let calib = (RTAPP_CALIB_BIG_NS * 1024).div_ceil(c.capacity_orig.max(1) as u64);
        let _ = writeln!(y, "                {cpu}: {calib}");
    }
    if board.has_energy_model {
        y.push_str("        nrg-model: !call:lisa.energy_model.LinuxEnergyModel\n");
        y.push_str("            root_node: !call:lisa.energy_model.EnergyModelRoot\n");
        y.push_str("                children:\n");
        for (cpu, c) in board.cpus.iter().enumerate() {
            let dom = &board.domains[c.domain];
            let _ = writeln!(
                y,
                "                -   !call:lisa.energy_model.EnergyModelNode\n                    cpu: {cpu}\n                    active_states:"
            );
            for o in &dom.opps {
                let cap = c.capacity_orig as u64 * o.khz as u64 / dom.fmax_khz.max(1) as u64;
                let _ = writeln!(
                    y,
                    "                        {}: !call:lisa.energy_model.ActiveState {{capacity: {cap}, power: {}}}",
                    o.khz, o.power_uw
                );
            }
            y.push_str("                    idle_states: !call:collections.OrderedDict {WFI: 0}\n");
        }
        y.push_str("            root_power_domain: !call:lisa.energy_model.PowerDomain\n");
        y.push_str("                idle_states: []\n                children:\n");
        for cpu in 0..nr {
            let _ = writeln!(
                y,
                "                -   !call:lisa.energy_model.PowerDomain {{cpu: {cpu}, idle_states: [WFI]}}"
            );
        }
        let _ = writeln!(y, "            freq_domains: {freq_domains}");
    }
    y
}

fn list<T: std::fmt::Display>(v: &[T]) -> String {
    let items: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("[{}]", items.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn juno_r2_platform_info_has_its_domains_capacities_and_em() {
        let b = crate::load_board("juno-r2").unwrap();
        let y = platform_info_yaml(&b);
        assert!(y.contains("        cpus-count: 6\n"), "{y}");
        assert!(
            y.contains("        freq-domains: [[0, 1], [2, 3, 4, 5]]\n"),
            "{y}"
        );
        assert!(y.contains("                2: 383\n"), "{y}");
        // A53 at 950 MHz is its top OPP: full capacity.
        assert!(
            y.contains("950000: !call:lisa.energy_model.ActiveState {capacity: 383, power: "),
            "{y}"
        );
        assert_eq!(
            y.matches("!call:lisa.energy_model.EnergyModelNode").count(),
            6
        );
        // Every line is indented by multiples of 4 spaces (block YAML).
        for l in y.lines().filter(|l| !l.starts_with('#')) {
            let ind = l.len() - l.trim_start().len();
            assert_eq!(ind % 4, 0, "{l}");
        }
    }
}
