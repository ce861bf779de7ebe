//! The DVFS transport the CPUs' clocks lead to: the firmware interface a cpufreq driver talks
//! to, found the way Linux binds it — the first CPU's `clocks` provider, then the provider's
//! ancestors, matched by `compatible` (`arm,scmi` for `scmi-cpufreq`, `arm,scpi` for
//! `scpi-cpufreq`, the HiSilicon stub clocks for `cpufreq-dt` over `clk-hi3660-stub.c` /
//! `clk-hi6220-stub.c`). Addresses are translated to physical ones (`ranges`).

use flat_device_tree::node::FdtNode;
use flat_device_tree::Fdt;

use super::{bad, tree, u32_prop, BoardDtError};
use crate::board::DvfsTransport;
use crate::dt::MemRange;

/// The transport behind `cpu`'s first `clocks` entry; `Ok(None)` when the CPU has no clock or
/// its provider is not one of the four known interfaces.
pub fn transport(
    fdt: &Fdt<'_>,
    cpu: FdtNode<'_, '_>,
) -> Result<Option<DvfsTransport>, BoardDtError> {
    let Some(provider) = u32_prop(cpu, "clocks") else {
        return Ok(None);
    };
    let path = super::cpu_path(cpu.name);
    let (ancestors, node) =
        tree::find_phandle(fdt, provider).ok_or(bad(&path, "clocks", "phandle names no node"))?;
    // The provider itself, then up towards the root.
    let mut chain: alloc::vec::Vec<FdtNode<'_, '_>> = ancestors.clone();
    chain.push(node);
    for depth in (1..chain.len()).rev() {
        let n = chain[depth];
        let here = &chain[..depth];
        let compat = |s: &str| n.compatible().is_some_and(|c| c.all().any(|c| c == s));
        if compat("arm,scmi") {
            return scmi(
                fdt,
                here,
                n,
                (depth + 1 < chain.len()).then(|| chain[depth + 1]),
            )
            .map(Some);
        }
        if compat("arm,scpi") {
            return scpi(fdt, here, n).map(Some);
        }
        if compat("hisilicon,hi3660-stub-clk") {
            return hi3660(fdt, here, n).map(Some);
        }
        if compat("hisilicon,hi6220-stub-clk") {
            return hi6220(fdt, here, n).map(Some);
        }
    }
    Ok(None)
}

/// Cells of a phandle-list property: the entries of `prop` as u32s.
fn cells(n: FdtNode<'_, '_>, prop: &str) -> alloc::vec::Vec<u32> {
    n.property(prop)
        .map(|p| {
            p.value
                .chunks_exact(4)
                .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        })
        .unwrap_or_default()
}

/// The `reg[index]` of the node with `phandle`, translated, and the node's compatible check.
fn reg_of_phandle(
    fdt: &Fdt<'_>,
    phandle: u32,
    index: usize,
    want_compatible: &[&str],
    user: &str,
    prop: &'static str,
) -> Result<MemRange, BoardDtError> {
    let (anc, n) =
        tree::find_phandle(fdt, phandle).ok_or(bad(user, prop, "phandle names no node"))?;
    let path = tree::path_of(&anc, n);
    if !want_compatible.is_empty()
        && !n
            .compatible()
            .is_some_and(|c| c.all().any(|c| want_compatible.contains(&c)))
    {
        return Err(bad(
            user,
            prop,
            "names a node of the wrong kind (compatible)",
        ));
    }
    tree::reg_phys(&anc, n, index, &path)
}

fn scmi(
    fdt: &Fdt<'_>,
    ancestors: &[FdtNode<'_, '_>],
    node: FdtNode<'_, '_>,
    protocol: Option<FdtNode<'_, '_>>,
) -> Result<DvfsTransport, BoardDtError> {
    let path = tree::path_of(ancestors, node);
    // `mboxes = <&mhu chan db>, ...` (#mbox-cells = 2 for arm,mhu-doorbell); the first is tx.
    let mb = cells(node, "mboxes");
    let [mhu_ph, chan, db, ..] = mb[..] else {
        return Err(bad(
            &path,
            "mboxes",
            "missing or not <&mhu channel doorbell>",
        ));
    };
    let mhu = reg_of_phandle(fdt, mhu_ph, 0, &["arm,mhu-doorbell"], &path, "mboxes")?;
    let shm = cells(node, "shmem");
    let base_shmem = reg_of_phandle(
        fdt,
        *shm.first().ok_or(bad(&path, "shmem", "missing"))?,
        0,
        &["arm,scmi-shmem"],
        &path,
        "shmem",
    )?;
    let (mut perf_doorbell, mut perf_shmem) = (None, None);
    if let Some(p) = protocol.filter(|p| u32_prop(*p, "reg") == Some(0x13)) {
        let ppath = alloc::format!("{path}/{}", p.name);
        let pm = cells(p, "mboxes");
        if let [ph, c, d, ..] = pm[..] {
            if ph != mhu_ph {
                return Err(bad(&ppath, "mboxes", "a second MHU is not supported"));
            }
            perf_doorbell = Some((c, d));
            let ps = cells(p, "shmem");
            let ph = *ps
                .first()
                .ok_or(bad(&ppath, "shmem", "mboxes without shmem"))?;
            perf_shmem = Some(reg_of_phandle(
                fdt,
                ph,
                0,
                &["arm,scmi-shmem"],
                &ppath,
                "shmem",
            )?);
        }
    }
    Ok(DvfsTransport::Scmi {
        mhu,
        base_doorbell: (chan, db),
        base_shmem,
        perf_doorbell,
        perf_shmem,
    })
}

fn scpi(
    fdt: &Fdt<'_>,
    ancestors: &[FdtNode<'_, '_>],
    node: FdtNode<'_, '_>,
) -> Result<DvfsTransport, BoardDtError> {
    let path = tree::path_of(ancestors, node);
    let mb = cells(node, "mboxes");
    let [mhu_ph, channel, ..] = mb[..] else {
        return Err(bad(&path, "mboxes", "missing or not <&mhu channel>"));
    };
    let mhu = reg_of_phandle(fdt, mhu_ph, 0, &["arm,mhu"], &path, "mboxes")?;
    let shm = cells(node, "shmem");
    let shmem = reg_of_phandle(
        fdt,
        *shm.first().ok_or(bad(&path, "shmem", "missing"))?,
        0,
        &["arm,juno-scp-shmem", "arm,scp-shmem"],
        &path,
        "shmem",
    )?;
    Ok(DvfsTransport::Scpi {
        mhu,
        channel,
        shmem,
    })
}

/// `mboxes = <&mailbox channel dst_irq ack_irq>` (#mbox-cells = 3).
fn mbox3(node: FdtNode<'_, '_>, path: &str) -> Result<[u32; 4], BoardDtError> {
    match cells(node, "mboxes")[..] {
        [ph, ch, dst, ack, ..] => Ok([ph, ch, dst, ack]),
        _ => Err(bad(
            path,
            "mboxes",
            "missing or not <&mailbox channel dst_irq ack_irq>",
        )),
    }
}

fn hi3660(
    fdt: &Fdt<'_>,
    ancestors: &[FdtNode<'_, '_>],
    node: FdtNode<'_, '_>,
) -> Result<DvfsTransport, BoardDtError> {
    let path = tree::path_of(ancestors, node);
    let [ph, channel, dst_irq, ack_irq] = mbox3(node, &path)?;
    let mailbox = reg_of_phandle(fdt, ph, 0, &["hisilicon,hi3660-mbox"], &path, "mboxes")?;
    let stub_clk = tree::reg_phys(ancestors, node, 0, &path)?;
    Ok(DvfsTransport::Hi3660Stub {
        mailbox,
        channel,
        dst_irq,
        ack_irq,
        stub_clk,
    })
}

fn hi6220(
    fdt: &Fdt<'_>,
    ancestors: &[FdtNode<'_, '_>],
    node: FdtNode<'_, '_>,
) -> Result<DvfsTransport, BoardDtError> {
    let path = tree::path_of(ancestors, node);
    let [ph, channel, dst_irq, ack_irq] = mbox3(node, &path)?;
    let compat = ["hisilicon,hi6220-mbox"];
    let mailbox = reg_of_phandle(fdt, ph, 0, &compat, &path, "mboxes")?;
    let mailbox_buffer = reg_of_phandle(fdt, ph, 1, &compat, &path, "mboxes")?;
    let sram_ph = u32_prop(node, "hisilicon,hi6220-clk-sram").ok_or(bad(
        &path,
        "hisilicon,hi6220-clk-sram",
        "missing",
    ))?;
    let sram = reg_of_phandle(
        fdt,
        sram_ph,
        0,
        &["hisilicon,hi6220-sramctrl"],
        &path,
        "hisilicon,hi6220-clk-sram",
    )?;
    Ok(DvfsTransport::Hi6220Stub {
        mailbox,
        mailbox_buffer,
        channel,
        dst_irq,
        ack_irq,
        sram,
    })
}
