//! `/cpus/idle-states` and each CPU's `cpu-idle-states`, as Linux's `dt_init_idle_driver`
//! (`drivers/cpuidle/dt_idle_states.c`) and the `arm,idle-state` binding read them.
//!
//! asym does not enter these states yet (WFI only): they are parsed so `dt-check` shows what a
//! board offers and so the board data can be checked against them.

use alloc::string::String;
use alloc::vec::Vec;

use flat_device_tree::node::FdtNode;
use flat_device_tree::Fdt;

use super::{bad, u32_prop, BoardDtError};

/// One `arm,idle-state`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DtIdleState {
    pub name: String,
    pub psci_suspend_param: u32,
    pub entry_latency_us: u32,
    pub exit_latency_us: u32,
    pub min_residency_us: u32,
    pub local_timer_stop: bool,
}

/// The idle states and, per CPU node (DT order, the first `nr_cpus`), the indices of its
/// `cpu-idle-states` in that list.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdleStates {
    pub states: Vec<DtIdleState>,
    pub per_cpu: Vec<Vec<u8>>,
}

pub fn parse(fdt: &Fdt<'_>, cpu_nodes: &[FdtNode<'_, '_>]) -> Result<IdleStates, BoardDtError> {
    let mut out = IdleStates::default();
    let cpus = fdt
        .find_node("/")
        .and_then(|root| root.children().find(|c| c.name == "cpus"));
    let node = cpus.and_then(|c| c.children().find(|n| n.name == "idle-states"));
    let mut phandles: Vec<u32> = Vec::new();
    if let Some(node) = node {
        const PATH: &str = "/cpus/idle-states";
        if let Some(m) = node.property("entry-method").and_then(|p| p.as_str()) {
            if m.trim_end_matches('\0') != "psci" {
                return Err(bad(PATH, "entry-method", "not \"psci\""));
            }
        }
        for s in node.children() {
            let is_state = s
                .compatible()
                .is_some_and(|c| c.all().any(|c| c == "arm,idle-state"));
            if !is_state {
                continue;
            }
            let path = alloc::format!("{PATH}/{}", s.name);
            let need = |p: &'static str| u32_prop(s, p).ok_or(bad(&path, p, "missing"));
            out.states.push(DtIdleState {
                name: String::from(s.name),
                psci_suspend_param: need("arm,psci-suspend-param")?,
                entry_latency_us: need("entry-latency-us")?,
                exit_latency_us: need("exit-latency-us")?,
                min_residency_us: need("min-residency-us")?,
                local_timer_stop: s.property("local-timer-stop").is_some(),
            });
            phandles.push(u32_prop(s, "phandle").unwrap_or(0));
        }
    }
    for cpu in cpu_nodes {
        let mut list = Vec::new();
        if let Some(p) = cpu.property("cpu-idle-states") {
            for c in p.value.chunks_exact(4) {
                let ph = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
                let i = phandles.iter().position(|&p| p == ph).ok_or(bad(
                    &super::cpu_path(cpu.name),
                    "cpu-idle-states",
                    "names no arm,idle-state under /cpus/idle-states",
                ))?;
                list.push(i as u8);
            }
        }
        out.per_cpu.push(list);
    }
    Ok(out)
}
