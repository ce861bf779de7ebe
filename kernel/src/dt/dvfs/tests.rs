//! Oracles: the DVFS nodes of Linux's mainline device trees (`arm/juno-scmi.dtsi`,
//! `juno-base.dtsi`, `hisilicon/hi3660.dtsi`, `hi6220.dtsi`), rebuilt here with the same
//! structure (phandles, `#mbox-cells`, the Juno SRAM's `ranges`), and the addresses those
//! files give: Juno's SCMI base channel at SRAM `0x2E00_0000` with MHU channel 0, the
//! performance channel at `0x2E00_0100` with MHU channel 1; HiKey960's mailbox channel 13
//! (3, 0); HiKey's slot 1 (0, 11) with the buffer at `0x06DF_F800`. (Parsing the compiled
//! mainline DTBs of Debian's linux-image-6.1.0-57-arm64 gives the same values.)

use super::*;
use crate::dt::Platform;
use vm_fdt::FdtWriter;

/// A minimal platform (memory, GIC, timer, UART, PSCI, CPUs) with `extra` adding the DVFS
/// nodes at the root and `clock` the `clocks` of CPU n (`None`: no property).
fn blob(
    cpus: usize,
    clock: &dyn Fn(usize) -> Option<[u32; 2]>,
    extra: &dyn Fn(&mut FdtWriter),
) -> Vec<u8> {
    let mut w = FdtWriter::new().unwrap();
    let root = w.begin_node("").unwrap();
    w.property_u32("#address-cells", 2).unwrap();
    w.property_u32("#size-cells", 2).unwrap();
    let m = w.begin_node("memory@80000000").unwrap();
    w.property_string("device_type", "memory").unwrap();
    w.property_array_u32("reg", &[0, 0x8000_0000, 0, 0x4000_0000])
        .unwrap();
    w.end_node(m).unwrap();
    let c = w.begin_node("cpus").unwrap();
    w.property_u32("#address-cells", 1).unwrap();
    w.property_u32("#size-cells", 0).unwrap();
    for i in 0..cpus {
        let n = w.begin_node(&format!("cpu@{i}")).unwrap();
        w.property_string("device_type", "cpu").unwrap();
        w.property_string("compatible", "arm,cortex-a53").unwrap();
        w.property_u32("reg", i as u32).unwrap();
        w.property_string("enable-method", "psci").unwrap();
        if let Some(cl) = clock(i) {
            w.property_array_u32("clocks", &cl).unwrap();
        }
        w.end_node(n).unwrap();
    }
    w.end_node(c).unwrap();
    let p = w.begin_node("psci").unwrap();
    w.property_string("compatible", "arm,psci-0.2").unwrap();
    w.property_string("method", "smc").unwrap();
    w.end_node(p).unwrap();
    let g = w.begin_node("interrupt-controller@2c010000").unwrap();
    w.property_string("compatible", "arm,gic-400").unwrap();
    w.property_u32("#interrupt-cells", 3).unwrap();
    w.property_null("interrupt-controller").unwrap();
    w.property_u32("phandle", 1).unwrap();
    w.property_array_u32(
        "reg",
        &[0, 0x2c01_0000, 0, 0x1000, 0, 0x2c02_f000, 0, 0x2000],
    )
    .unwrap();
    w.end_node(g).unwrap();
    let t = w.begin_node("timer").unwrap();
    w.property_string("compatible", "arm,armv8-timer").unwrap();
    w.property_u32("interrupt-parent", 1).unwrap();
    w.property_array_u32(
        "interrupts",
        &[1, 13, 0xf08, 1, 14, 0xf08, 1, 11, 0xf08, 1, 10, 0xf08],
    )
    .unwrap();
    w.end_node(t).unwrap();
    let u = w.begin_node("uart@7ff80000").unwrap();
    w.property_string("compatible", "arm,pl011").unwrap();
    w.property_array_u32("reg", &[0, 0x7ff8_0000, 0, 0x1000])
        .unwrap();
    w.property_u32("interrupt-parent", 1).unwrap();
    w.property_array_u32("interrupts", &[0, 83, 4]).unwrap();
    w.end_node(u).unwrap();
    extra(&mut w);
    w.end_node(root).unwrap();
    w.finish().unwrap()
}

const MHU: u32 = 0x52;
const SHM: [u32; 4] = [0x53, 0x54, 0x55, 0x56];
const SCMI_DVFS: u32 = 0x36;

/// `juno-base.dtsi`'s `mhu@2b1f0000` and `sram@2e000000` with `juno-scmi.dtsi`'s four
/// `arm,scmi-shmem` children and `/firmware/scmi`; `ranges` of the SRAM as given.
fn juno_scmi(w: &mut FdtWriter, sram_ranges: &[u32], perf_mboxes: Option<&[u32]>) {
    let m = w.begin_node("mhu@2b1f0000").unwrap();
    w.property_string_list(
        "compatible",
        vec!["arm,mhu-doorbell".into(), "arm,primecell".into()],
    )
    .unwrap();
    w.property_array_u32("reg", &[0, 0x2b1f_0000, 0, 0x1000])
        .unwrap();
    w.property_u32("#mbox-cells", 2).unwrap();
    w.property_u32("phandle", MHU).unwrap();
    w.end_node(m).unwrap();
    let s = w.begin_node("sram@2e000000").unwrap();
    w.property_string_list(
        "compatible",
        vec!["arm,juno-sram-ns".into(), "mmio-sram".into()],
    )
    .unwrap();
    w.property_array_u32("reg", &[0, 0x2e00_0000, 0, 0x8000])
        .unwrap();
    w.property_u32("#address-cells", 1).unwrap();
    w.property_u32("#size-cells", 1).unwrap();
    w.property_array_u32("ranges", sram_ranges).unwrap();
    for (i, ph) in SHM.iter().enumerate() {
        let n = w.begin_node(&format!("scp-sram@{:x}", i * 0x80)).unwrap();
        w.property_string("compatible", "arm,scmi-shmem").unwrap();
        w.property_array_u32("reg", &[(i * 0x80) as u32, 0x80])
            .unwrap();
        w.property_u32("phandle", *ph).unwrap();
        w.end_node(n).unwrap();
    }
    w.end_node(s).unwrap();
    let f = w.begin_node("firmware").unwrap();
    let sc = w.begin_node("scmi").unwrap();
    w.property_string("compatible", "arm,scmi").unwrap();
    w.property_array_u32("mboxes", &[MHU, 0, 0, MHU, 0, 1])
        .unwrap();
    w.property_array_u32("shmem", &[SHM[0], SHM[1]]).unwrap();
    w.property_u32("#address-cells", 1).unwrap();
    w.property_u32("#size-cells", 0).unwrap();
    let p11 = w.begin_node("protocol@11").unwrap();
    w.property_u32("reg", 0x11).unwrap();
    w.end_node(p11).unwrap();
    let p = w.begin_node("protocol@13").unwrap();
    w.property_u32("reg", 0x13).unwrap();
    w.property_u32("#clock-cells", 1).unwrap();
    if let Some(mb) = perf_mboxes {
        w.property_array_u32("mboxes", mb).unwrap();
        w.property_array_u32("shmem", &[SHM[2], SHM[3]]).unwrap();
    }
    w.property_u32("phandle", SCMI_DVFS).unwrap();
    w.end_node(p).unwrap();
    w.end_node(sc).unwrap();
    w.end_node(f).unwrap();
}

fn parse_dvfs(b: &[u8]) -> Result<Option<DvfsDt>, DtError> {
    Platform::from_fdt(b, 0x9000_0000).unwrap().dvfs
}

fn juno_clock(i: usize) -> Option<[u32; 2]> {
    Some([SCMI_DVFS, if i < 2 { 0 } else { 1 }])
}

const JUNO_RANGES: [u32; 4] = [0, 0, 0x2e00_0000, 0x8000];

#[test]
fn juno_scmi_channels_doorbells_and_cpu_domains() {
    let b = blob(6, &juno_clock, &|w| {
        juno_scmi(w, &JUNO_RANGES, Some(&[MHU, 1, 0, MHU, 1, 1]))
    });
    let d = parse_dvfs(&b).unwrap().unwrap();
    let Transport::Scmi { base, perf } = d.transport else {
        panic!("{d:?}")
    };
    let mhu = MemRange {
        base: 0x2b1f_0000,
        size: 0x1000,
    };
    assert_eq!(
        base.shmem,
        MemRange {
            base: 0x2e00_0000,
            size: 0x80
        }
    );
    assert_eq!(
        (
            base.doorbell.regs,
            base.doorbell.channel,
            base.doorbell.doorbell
        ),
        (mhu, 0, 0)
    );
    assert_eq!(
        perf.shmem,
        MemRange {
            base: 0x2e00_0100,
            size: 0x80
        }
    );
    assert_eq!((perf.doorbell.channel, perf.doorbell.doorbell), (1, 0));
    assert_eq!(
        d.cpu_domain.as_slice(),
        &[Some(0), Some(0), Some(1), Some(1), Some(1), Some(1)]
    );
    assert_eq!(d.standin, None);
    assert_eq!(d.in_ram, None);
    assert_eq!(d.regions().len(), 3, "base shmem, MHU, perf shmem");
}

#[test]
fn scmi_perf_without_its_own_channel_uses_the_base_channel() {
    let b = blob(2, &juno_clock, &|w| juno_scmi(w, &JUNO_RANGES, None));
    let d = parse_dvfs(&b).unwrap().unwrap();
    let Transport::Scmi { base, perf } = d.transport else {
        panic!()
    };
    assert_eq!(base, perf);
}

#[test]
fn scmi_errors_name_the_node_and_property() {
    // The SRAM's `ranges` does not cover the shared memory.
    let b = blob(2, &juno_clock, &|w| {
        juno_scmi(w, &[0, 0, 0x2e00_0000, 0x40], Some(&[MHU, 1, 0, MHU, 1, 1]))
    });
    let e = parse_dvfs(&b).unwrap_err();
    assert_eq!(
        (e.node.as_str(), e.property),
        ("/sram@2e000000", "ranges"),
        "{e}"
    );
    // A doorbell specifier with one cell too few: the list is misaligned.
    let b = blob(2, &juno_clock, &|w| {
        juno_scmi(w, &JUNO_RANGES, Some(&[MHU, 1]))
    });
    let e = parse_dvfs(&b).unwrap_err();
    assert_eq!(
        (e.node.as_str(), e.property),
        ("/firmware/scmi/protocol@13", "mboxes"),
        "{e}"
    );
    // `mboxes` naming the SRAM instead of the MHU.
    let b = blob(2, &juno_clock, &|w| {
        juno_scmi(w, &JUNO_RANGES, Some(&[SHM[2], 1, 0]))
    });
    let e = parse_dvfs(&b).unwrap_err();
    assert_eq!(
        (e.node.as_str(), e.property),
        ("/firmware/scmi/protocol@13", "mboxes"),
        "{e}"
    );
    assert!(
        e.problem.contains("names /sram@2e000000/scp-sram@100"),
        "{e}"
    );
    // A DVFS error does not stop the platform: it is kept in `Platform::dvfs`.
    assert!(Platform::from_fdt(&b, 0x9000_0000).is_ok());
}

#[test]
fn juno_scpi_is_recognised() {
    let b = blob(2, &|_| None, &|w| {
        let m = w.begin_node("mhu@2b1f0000").unwrap();
        w.property_string_list("compatible", vec!["arm,mhu".into(), "arm,primecell".into()])
            .unwrap();
        w.property_array_u32("reg", &[0, 0x2b1f_0000, 0, 0x1000])
            .unwrap();
        w.property_u32("#mbox-cells", 1).unwrap();
        w.property_u32("phandle", MHU).unwrap();
        w.end_node(m).unwrap();
        let s = w.begin_node("sram@2e000000").unwrap();
        w.property_array_u32("reg", &[0, 0x2e00_0000, 0, 0x8000])
            .unwrap();
        w.property_u32("#address-cells", 1).unwrap();
        w.property_u32("#size-cells", 1).unwrap();
        w.property_array_u32("ranges", &JUNO_RANGES).unwrap();
        let n = w.begin_node("scp-sram@200").unwrap();
        w.property_string("compatible", "arm,juno-scp-shmem")
            .unwrap();
        w.property_array_u32("reg", &[0x200, 0x200]).unwrap();
        w.property_u32("phandle", SHM[1]).unwrap();
        w.end_node(n).unwrap();
        w.end_node(s).unwrap();
        let sc = w.begin_node("scpi").unwrap();
        w.property_string("compatible", "arm,scpi").unwrap();
        w.property_array_u32("mboxes", &[MHU, 1]).unwrap();
        w.property_u32("shmem", SHM[1]).unwrap();
        w.end_node(sc).unwrap();
    });
    let d = parse_dvfs(&b).unwrap().unwrap();
    assert_eq!(
        d.transport,
        Transport::Scpi {
            sram: MemRange {
                base: 0x2e00_0200,
                size: 0x200
            },
            mhu: MemRange {
                base: 0x2b1f_0000,
                size: 0x1000
            },
        }
    );
    assert_eq!(d.cpu_domain.as_slice(), &[None, None]);
}

fn soc(w: &mut FdtWriter, body: &dyn Fn(&mut FdtWriter)) {
    let s = w.begin_node("soc").unwrap();
    w.property_string("compatible", "simple-bus").unwrap();
    w.property_u32("#address-cells", 2).unwrap();
    w.property_u32("#size-cells", 2).unwrap();
    w.property_null("ranges").unwrap();
    body(w);
    w.end_node(s).unwrap();
}

#[test]
fn hikey960_stub_clock_over_mailbox_channel_13() {
    let b = blob(8, &|i| Some([0x44, if i < 4 { 0 } else { 1 }]), &|w| {
        soc(w, &|w| {
            let m = w.begin_node("mailbox@e896b000").unwrap();
            w.property_string("compatible", "hisilicon,hi3660-mbox")
                .unwrap();
            w.property_array_u32("reg", &[0, 0xe896_b000, 0, 0x1000])
                .unwrap();
            w.property_u32("#mbox-cells", 3).unwrap();
            w.property_u32("phandle", 0x43).unwrap();
            w.end_node(m).unwrap();
            let s = w.begin_node("stub_clock@e896b500").unwrap();
            w.property_string("compatible", "hisilicon,hi3660-stub-clk")
                .unwrap();
            w.property_array_u32("reg", &[0, 0xe896_b500, 0, 0x100])
                .unwrap();
            w.property_u32("#clock-cells", 1).unwrap();
            w.property_array_u32("mboxes", &[0x43, 13, 3, 0]).unwrap();
            w.property_u32("phandle", 0x44).unwrap();
            w.end_node(s).unwrap();
        })
    });
    let d = parse_dvfs(&b).unwrap().unwrap();
    assert_eq!(
        d.transport,
        Transport::Hi3660 {
            mbox: MemRange {
                base: 0xe896_b000,
                size: 0x1000
            },
            stub: MemRange {
                base: 0xe896_b500,
                size: 0x100
            },
            channel: 13,
            dst_irq: 3,
            ack_irq: 0,
        }
    );
    let doms: Vec<_> = d.cpu_domain.iter().copied().collect();
    assert_eq!(doms, [0, 0, 0, 0, 1, 1, 1, 1].map(Some));
}

#[test]
fn hikey_stub_clock_sram_ipc_and_a_buffer_in_ram() {
    let b = blob(8, &|_| Some([0x20, 0]), &|w| {
        soc(w, &|w| {
            let m = w.begin_node("mailbox@f7510000").unwrap();
            w.property_string("compatible", "hisilicon,hi6220-mbox")
                .unwrap();
            // The buffer inside /memory (0x80000000..): as after a u-boot /memory rewrite.
            w.property_array_u32(
                "reg",
                &[0, 0xf751_0000, 0, 0x1000, 0, 0x86df_f800, 0, 0x800],
            )
            .unwrap();
            w.property_u32("#mbox-cells", 3).unwrap();
            w.property_u32("phandle", 0x21).unwrap();
            w.end_node(m).unwrap();
            let s = w.begin_node("sram@fff80000").unwrap();
            w.property_string_list(
                "compatible",
                vec!["hisilicon,hi6220-sramctrl".into(), "syscon".into()],
            )
            .unwrap();
            w.property_array_u32("reg", &[0, 0xfff8_0000, 0, 0x12000])
                .unwrap();
            w.property_u32("phandle", 0x22).unwrap();
            w.end_node(s).unwrap();
        });
        let s = w.begin_node("stub_clock").unwrap();
        w.property_string("compatible", "hisilicon,hi6220-stub-clk")
            .unwrap();
        w.property_u32("hisilicon,hi6220-clk-sram", 0x22).unwrap();
        w.property_u32("#clock-cells", 1).unwrap();
        w.property_array_u32("mboxes", &[0x21, 1, 0, 11]).unwrap();
        w.property_u32("phandle", 0x20).unwrap();
        w.end_node(s).unwrap();
    });
    let d = parse_dvfs(&b).unwrap().unwrap();
    let buf = MemRange {
        base: 0x86df_f800,
        size: 0x800,
    };
    assert_eq!(
        d.transport,
        Transport::Hi6220 {
            sram: MemRange {
                base: 0xfff8_0000,
                size: 0x12000
            },
            ipc: MemRange {
                base: 0xf751_0000,
                size: 0x1000
            },
            buf,
            slot: 1,
            dst_irq: 0,
            ack_irq: 11,
        }
    );
    assert_eq!(d.in_ram, Some(buf));
    assert!(d.cpu_domain.iter().all(|c| *c == Some(0)));
}

#[test]
fn the_qemu_firmware_stand_in_node_is_read() {
    let b = blob(2, &juno_clock, &|w| {
        juno_scmi(w, &JUNO_RANGES, Some(&[MHU, 1, 0, MHU, 1, 1]));
        let s = w.begin_node("asym-fw-standin").unwrap();
        w.property_string("compatible", "asym,fw-standin").unwrap();
        w.property_u32("cpu", 6).unwrap();
        w.property_u32("doorbell-sgi", 15).unwrap();
        w.end_node(s).unwrap();
    });
    let d = parse_dvfs(&b).unwrap().unwrap();
    assert_eq!(
        d.standin,
        Some(StandinDt {
            mpidr: 6,
            doorbell_sgi: 15
        })
    );
}

#[test]
fn a_dt_without_dvfs_firmware_has_none() {
    let b = blob(2, &|_| None, &|_| {});
    assert_eq!(parse_dvfs(&b), Ok(None));
}
