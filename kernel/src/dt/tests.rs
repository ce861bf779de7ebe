//! Oracles: the QEMU DTBs were dumped by QEMU itself (`-M virt,dumpdtb=...`, see
//! `kernel/tests/dtb/README.md`); expected addresses and interrupts are QEMU's
//! `hw/arm/virt.c` memory map and IRQ numbers, and Juno r2's from its mainline DTS. The odd
//! device trees are QEMU's with one property changed ([`edit`]), each the shape of a
//! mistake a firmware or a hand-edited DTS makes; the expected result is Linux's reaction to
//! the same value (`drivers/of/fdt.c`, `arch/arm64/kernel/smp.c`) or, where Linux would
//! misbehave too, an error naming the node and the property.
use super::*;

fn load(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/dtb/{}", env!("CARGO_MANIFEST_DIR"), name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// One change to a DTB: set (or add) a property, delete it (`None`), or delete a node
/// (`prop` empty, `None`). `path` is a node path as [`Found::scan`] builds them.
struct Edit<'e> {
    path: &'e str,
    prop: &'e str,
    value: Option<Vec<u8>>,
}

fn set<'e>(path: &'e str, prop: &'e str, cells: &[u32]) -> Edit<'e> {
    Edit {
        path,
        prop,
        value: Some(cells.iter().flat_map(|c| c.to_be_bytes()).collect()),
    }
}

fn set_bytes<'e>(path: &'e str, prop: &'e str, bytes: &[u8]) -> Edit<'e> {
    Edit {
        path,
        prop,
        value: Some(bytes.to_vec()),
    }
}

fn delete_node(path: &str) -> Edit<'_> {
    Edit {
        path,
        prop: "",
        value: None,
    }
}

/// `blob` rewritten with `edits` applied (read with `flat_device_tree`, written with
/// `vm-fdt`, memory reservations kept).
fn edit(blob: &[u8], edits: &[Edit<'_>]) -> Vec<u8> {
    fn copy(
        w: &mut vm_fdt::FdtWriter,
        n: FdtNode<'_, '_>,
        name: &str,
        path: &str,
        edits: &[Edit<'_>],
    ) {
        let node = w.begin_node(name).unwrap();
        for p in n.properties() {
            match edits.iter().find(|e| e.path == path && e.prop == p.name) {
                Some(Edit { value: Some(v), .. }) => w.property(p.name, v).unwrap(),
                Some(Edit { value: None, .. }) => {}
                None => w.property(p.name, p.value).unwrap(),
            }
        }
        for e in edits
            .iter()
            .filter(|e| e.path == path && !e.prop.is_empty())
        {
            if let (Some(v), None) = (&e.value, n.property(e.prop)) {
                w.property(e.prop, v).unwrap();
            }
        }
        for c in n.children() {
            let cp = child_path(path, c.name);
            let gone = edits
                .iter()
                .any(|e| e.path == cp.as_str() && e.prop.is_empty() && e.value.is_none());
            if !gone {
                copy(w, c, c.name, &cp, edits);
            }
        }
        w.end_node(node).unwrap();
    }
    let fdt = Fdt::new(blob).unwrap();
    let rsv: Vec<vm_fdt::FdtReserveEntry> = fdt
        .memory_reservations()
        .map(|r| vm_fdt::FdtReserveEntry::new(r.address() as u64, r.size() as u64).unwrap())
        .collect();
    let mut w = vm_fdt::FdtWriter::new_with_mem_reserv(&rsv).unwrap();
    copy(&mut w, fdt.find_node("/").unwrap(), "", "/", edits);
    w.finish().unwrap()
}

fn qemu_v2() -> Vec<u8> {
    load("qemu-virt-gicv2-smp6.dtb")
}

fn qemu_v3() -> Vec<u8> {
    load("qemu-virt-gicv3-el2-smp4.dtb")
}

fn parse(blob: &[u8]) -> Result<Platform, DtError> {
    Platform::from_fdt(blob, 0x4800_0000)
}

/// The error, which must name `node` and `property`.
fn err_at(blob: &[u8], node: &str, property: &str) -> DtError {
    let e = parse(blob).expect_err("the DT must be refused");
    assert_eq!(
        (e.node.as_str(), e.property),
        (node, property),
        "wrong location in {e}"
    );
    e
}

const MEM: &str = "/memory@40000000";
const UART: &str = "/pl011@9000000";
const GIC: &str = "/intc@8000000";

#[test]
fn long_bootargs_are_cut_between_options() {
    let long = "selftest hz=100 loglevel=debug";
    assert_eq!(truncate_bootargs(long, 100), long);
    assert_eq!(truncate_bootargs(long, 15), "selftest hz=100");
    assert_eq!(truncate_bootargs(long, 14), "selftest");
    assert_eq!(truncate_bootargs(long, 16), "selftest hz=100");
    assert_eq!(truncate_bootargs("averyveryverylongoption", 5), "");
    let many = "x=1 ".repeat(300);
    let kept = truncate_bootargs(&many, BOOTARGS_MAX);
    assert!(kept.len() <= BOOTARGS_MAX && kept.ends_with("x=1"));
    // Through the parser: cut, and the original length recorded.
    let blob = edit(
        &qemu_v2(),
        &[set_bytes("/chosen", "bootargs", (many + "\0").as_bytes())],
    );
    let p = parse(&blob).unwrap();
    assert!(p.bootargs.len() <= BOOTARGS_MAX && p.bootargs.ends_with("x=1"));
    assert_eq!(p.bootargs_truncated_from, Some(1200));
}

#[test]
fn qemu_virt_gicv2_smp6() {
    let p = parse(&qemu_v2()).unwrap();
    assert_eq!(
        p.memory.as_slice(),
        [MemRange {
            base: 0x4000_0000,
            size: 256 << 20
        }]
    );
    // VIRT_UART at 0x0900_0000, SPI 1.
    assert_eq!(
        (p.uart.base, p.uart.size, p.uart.intid),
        (0x0900_0000, 0x1000, 33)
    );
    assert_eq!(p.uart.node.as_str(), UART);
    assert_eq!(
        p.gic,
        GicDesc::V2 {
            gicd: MemRange {
                base: 0x0800_0000,
                size: 0x1_0000
            },
            gicc: MemRange {
                base: 0x0801_0000,
                size: 0x1_0000
            },
        }
    );
    // ARCH_TIMER_NS_EL1_IRQ = PPI 14, ARCH_TIMER_VIRT_IRQ = PPI 11.
    assert_eq!(p.timer.el1_phys_intid, 30);
    assert_eq!(p.timer.el1_virt_intid, 27);
    assert_eq!(p.psci.conduit, Conduit::Hvc);
    assert_eq!(p.cpus.len(), 6);
    for (i, c) in p.cpus.iter().enumerate() {
        assert_eq!(c.mpidr, i as u64);
        assert_eq!(c.cluster, 0);
        assert_eq!(c.capacity_dmips_mhz, None);
        assert_eq!(p.capacity_of(CpuId(i as u16)), Some(Capacity(1024)));
    }
    assert_eq!(p.bootargs.as_str(), "selftest hz=100");
    assert_eq!(p.dtb.base, 0x4800_0000);
    assert_eq!(
        p.cpu_by_mpidr(0x8000_0003),
        Some(CpuId(3)),
        "MPIDR bit 31 (RES1) ignored"
    );
    assert!(p.notes.list.is_empty(), "{:?}", p.notes);
    assert_eq!(p.sched, Ok(None));
}

#[test]
fn qemu_virt_gicv3_el2_smp4() {
    let p = parse(&qemu_v3()).unwrap();
    assert_eq!(p.memory[0].size, 512 << 20);
    // VIRT_GIC_REDIST: 0x080a_0000, 0xf6_0000 bytes (123 redistributors).
    assert_eq!(
        p.gic,
        GicDesc::V3 {
            gicd: MemRange {
                base: 0x0800_0000,
                size: 0x1_0000
            },
            gicr: MemRange {
                base: 0x080a_0000,
                size: 0xf6_0000
            },
            gicr_stride: None,
        }
    );
    assert_eq!(p.gic.version(), 3);
    // With virtualization=on QEMU's PSCI is reached through smc.
    assert_eq!(p.psci.conduit, Conduit::Smc);
    assert_eq!(p.cpus.len(), 4);
    assert!(p.bootargs.is_empty());
}

#[test]
fn juno_r2_clusters_capacities_and_two_banks() {
    let p = parse(&load("juno-r2-like.dtb")).unwrap();
    let mpidrs: Vec<u64> = p.cpus.iter().map(|c| c.mpidr).collect();
    assert_eq!(mpidrs, [0x0, 0x1, 0x100, 0x101, 0x102, 0x103]);
    let clusters: Vec<u16> = p.cpus.iter().map(|c| c.cluster).collect();
    assert_eq!(clusters, [0, 0, 1, 1, 1, 1]);
    let caps: Vec<u32> = (0..6).map(|i| p.capacity_of(CpuId(i)).unwrap().0).collect();
    // 485 * 1024 / 1024 = 485: normalised to the biggest CPU.
    assert_eq!(caps, [1024, 1024, 485, 485, 485, 485]);
    assert_eq!((p.uart.base, p.uart.intid), (0x7ff8_0000, 83 + 32));
    assert_eq!(
        p.gic,
        GicDesc::V2 {
            gicd: MemRange {
                base: 0x2c01_0000,
                size: 0x1000
            },
            gicc: MemRange {
                base: 0x2c02_f000,
                size: 0x2000
            },
        }
    );
    assert_eq!(p.psci.conduit, Conduit::Smc);
    // juno-base.dtsi: 2 GiB - 16 MiB at 0x8000_0000, 6 GiB at 0x8_8000_0000.
    assert_eq!(
        p.memory.as_slice(),
        [
            MemRange {
                base: 0x8000_0000,
                size: 0x7f00_0000
            },
            MemRange {
                base: 0x8_8000_0000,
                size: 0x1_8000_0000
            }
        ]
    );
    assert_eq!(p.bootargs.as_str(), "hz=300 loglevel=debug");
}

#[test]
fn garbage_is_an_error_naming_the_header() {
    let e = Platform::from_fdt(&[0u8; 64], 0).unwrap_err();
    assert_eq!((e.property, e.offset), ("magic", Some(0)));
    let mut blob = load("juno-r2-like.dtb");
    blob.truncate(100);
    assert!(Platform::from_fdt(&blob, 0).is_err());
}

#[test]
fn missing_psci_is_named() {
    // Rename the PSCI compatible strings in place (same length) so the node is not found.
    let mut blob = load("juno-r2-like.dtb");
    let needle = b"arm,psci-1.0\0arm,psci-0.2";
    let pos = blob
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("psci compatible in fixture");
    blob[pos..pos + needle.len()].copy_from_slice(b"xxx,psci-1.0\0xxx,psci-0.2");
    let e = Platform::from_fdt(&blob, 0).unwrap_err();
    assert_eq!(e.node.as_str(), "arm,psci");
    assert!(e.to_string().contains("no PSCI node"), "{e}");
}

#[test]
fn missing_nodes_are_named() {
    let cases = [
        ("/cpus", "/cpus"),
        (UART, "arm,pl011"),
        ("/timer", "arm,armv8-timer"),
        (GIC, "interrupt-controller"),
        (MEM, "/memory"),
    ];
    for (node, named) in cases {
        let e = parse(&edit(&qemu_v2(), &[delete_node(node)])).unwrap_err();
        assert_eq!(e.node.as_str(), named, "deleting {node}: {e}");
    }
}

// --- /memory (finding 11): banks ignored or clipped as Linux does, with a note -------------

#[test]
fn memory_bank_of_size_0_is_ignored_and_no_bank_at_all_is_an_error() {
    let two = edit(
        &qemu_v2(),
        &[set(
            MEM,
            "reg",
            &[0, 0x4000_0000, 0, 0, 0, 0x4000_0000, 0, 0x1000_0000],
        )],
    );
    let p = parse(&two).unwrap();
    assert_eq!(p.memory.len(), 1);
    assert_eq!(p.notes.list[0].node.as_str(), MEM);
    assert!(p.notes.list[0].problem.contains("size 0"), "{:?}", p.notes);
    // HiKey960's DT before u-boot fills it in: `reg = <0 0 0 0>`.
    let e = err_at(
        &edit(&qemu_v2(), &[set(MEM, "reg", &[0, 0, 0, 0])]),
        MEM,
        "reg",
    );
    assert!(e.problem.contains("no usable RAM bank"), "{e}");
}

#[test]
fn memory_bank_that_wraps_or_lies_beyond_the_map_is_not_used() {
    // base + size wraps (the review's `RAM 0xffffffffffe00000..0x3fe00000`).
    let wrap = [0xffff_ffff, 0xffe0_0000, 0, 0x4000_0000];
    let e = err_at(&edit(&qemu_v2(), &[set(MEM, "reg", &wrap)]), MEM, "reg");
    assert!(e.problem.contains("wraps"), "{e}");
    // 1 TiB from 0x4000_0000: clipped below the thread-stack window's GiB, with a note.
    let p = parse(&edit(
        &qemu_v2(),
        &[set(MEM, "reg", &[0, 0x4000_0000, 0x100, 0])],
    ))
    .unwrap();
    assert_eq!(p.memory[0].end(), MAP_LIMIT);
    assert!(p.notes.list[0].problem.contains("clipped"), "{:?}", p.notes);
    // Wholly beyond 2^39: nothing usable.
    let e = err_at(
        &edit(&qemu_v2(), &[set(MEM, "reg", &[0x80, 0, 0, 0x1000_0000])]),
        MEM,
        "reg",
    );
    assert!(e.problem.contains("39-bit"), "{e}");
}

#[test]
fn overlapping_memory_banks_keep_the_first() {
    let reg = [
        0,
        0x4000_0000,
        0,
        0x1000_0000,
        0,
        0x4800_0000,
        0,
        0x1000_0000,
    ];
    let p = parse(&edit(&qemu_v2(), &[set(MEM, "reg", &reg)])).unwrap();
    assert_eq!(p.memory.len(), 1);
    assert!(
        p.notes.list[0].problem.contains("overlaps"),
        "{:?}",
        p.notes
    );
}

#[test]
fn the_kernel_must_lie_in_a_bank() {
    let p = parse(&load("juno-r2-like.dtb")).unwrap();
    let image = MemRange {
        base: 0x8008_0000,
        size: 0x20_0000,
    };
    assert_eq!(p.bank_holding(image), Ok(p.memory[0]));
    let elsewhere = MemRange {
        base: 0x4008_0000,
        ..image
    };
    let e = p.bank_holding(elsewhere).unwrap_err();
    assert_eq!((e.node.as_str(), e.property), ("/memory", "reg"));
}

#[test]
fn reserved_memory_and_memreserve_are_kept_and_the_heap_avoids_them() {
    // A /reserved-memory node like the ramoops one of HiKey960's DT, plus a /memreserve/.
    let mut blob = edit(&qemu_v2(), &[]);
    let fdt = Fdt::new(&blob).unwrap();
    let mut w = vm_fdt::FdtWriter::new_with_mem_reserv(&[vm_fdt::FdtReserveEntry::new(
        0x4100_0000,
        0x1000,
    )
    .unwrap()])
    .unwrap();
    let root = w.begin_node("").unwrap();
    for p in fdt.find_node("/").unwrap().properties() {
        w.property(p.name, p.value).unwrap();
    }
    let rm = w.begin_node("reserved-memory").unwrap();
    w.property_u32("#address-cells", 2).unwrap();
    w.property_u32("#size-cells", 2).unwrap();
    w.property_null("ranges").unwrap();
    let r = w.begin_node("ramoops@44000000").unwrap();
    w.property_array_u64("reg", &[0x4400_0000, 0x10_0000])
        .unwrap();
    w.property_null("no-map").unwrap();
    w.end_node(r).unwrap();
    let d = w.begin_node("dynamic").unwrap();
    w.property_array_u64("size", &[0x10_0000]).unwrap();
    w.end_node(d).unwrap();
    w.end_node(rm).unwrap();
    // The rest of QEMU's tree, unchanged.
    fn copy(w: &mut vm_fdt::FdtWriter, n: FdtNode<'_, '_>) {
        let node = w.begin_node(n.name).unwrap();
        for p in n.properties() {
            w.property(p.name, p.value).unwrap();
        }
        for c in n.children() {
            copy(w, c);
        }
        w.end_node(node).unwrap();
    }
    for c in fdt.find_node("/").unwrap().children() {
        copy(&mut w, c);
    }
    w.end_node(root).unwrap();
    blob = w.finish().unwrap();
    let p = parse(&blob).unwrap();
    let ranges: Vec<(usize, usize, bool)> = p
        .reserved
        .iter()
        .map(|r| (r.range.base, r.range.size, r.no_map))
        .collect();
    assert_eq!(
        ranges,
        [(0x4100_0000, 0x1000, false), (0x4400_0000, 0x10_0000, true)]
    );
    assert!(
        p.notes
            .list
            .iter()
            .any(|n| n.node.as_str() == "/reserved-memory/dynamic"),
        "{:?}",
        p.notes
    );
    // The heap from just past a kernel at 0x4008_0000..0x4030_0000: stops below the
    // /memreserve/ entry; starting past it, it stops below ramoops; inside ramoops it starts
    // after it and stops below the DTB (0x4800_0000).
    let bank = p.memory[0];
    let free = |start| p.free_ram_from(bank, start, usize::MAX);
    assert_eq!(
        free(0x4030_0000),
        Some(MemRange {
            base: 0x4030_0000,
            size: 0x4100_0000 - 0x4030_0000
        })
    );
    assert_eq!(free(0x4100_0800).unwrap().base, 0x4100_1000);
    assert_eq!(free(0x4100_0800).unwrap().end(), 0x4400_0000);
    assert_eq!(
        free(0x4400_0000),
        Some(MemRange {
            base: 0x4410_0000,
            size: 0x4800_0000 - 0x4410_0000
        })
    );
    // Past the DTB up to the bank's last whole 2 MiB; nothing past the bank.
    let dtb_end = p.dtb.end();
    assert_eq!(free(dtb_end).unwrap().end(), 0x5000_0000);
    assert_eq!(free(0x5000_0000), None);
    // `max` caps it.
    assert_eq!(
        p.free_ram_from(bank, 0x4030_0000, 0x1000).unwrap().size,
        0x1000
    );
}

// --- device addresses (finding 3) -----------------------------------------------------------

#[test]
fn device_addresses_outside_the_map_or_wrapping_are_refused_with_their_node() {
    // The review's UART at 0xffff_ffff_ffff_f000 and with bit 39 set.
    for reg in [
        [0xffff_ffff, 0xffff_f000, 0, 0x1000],
        [0x80, 0x0900_0000, 0, 0x1000],
        [0x7f, 0xffff_f000, 0, 0x2000],
    ] {
        let e = err_at(&edit(&qemu_v2(), &[set(UART, "reg", &reg)]), UART, "reg");
        assert!(
            e.problem.contains("39-bit") || e.problem.contains("wraps"),
            "{e}"
        );
    }
    // A GIC distributor whose size wraps.
    let reg = [
        0,
        0x0800_0000,
        0xffff_ffff,
        0xffff_0000,
        0,
        0x0801_0000,
        0,
        0x1_0000,
    ];
    let e = err_at(&edit(&qemu_v2(), &[set(GIC, "reg", &reg)]), GIC, "reg");
    assert!(e.problem.contains("distributor"), "{e}");
    // A redistributor region of 2^38 bytes: beyond what a device may span.
    let reg = [0, 0x0800_0000, 0, 0x1_0000, 0, 0x080a_0000, 0x40, 0];
    let e = err_at(&edit(&qemu_v3(), &[set(GIC, "reg", &reg)]), GIC, "reg");
    assert!(e.problem.contains("redistributor region"), "{e}");
}

#[test]
fn devices_overlapping_ram_or_each_other_are_refused() {
    let e = err_at(
        &edit(
            &qemu_v2(),
            &[set(UART, "reg", &[0, 0x4010_0000, 0, 0x1000])],
        ),
        UART,
        "reg",
    );
    assert!(e.problem.contains("overlaps RAM"), "{e}");
    let reg = [0, 0x0800_0000, 0, 0x1_0000, 0, 0x0800_8000, 0, 0x2000];
    let e = err_at(&edit(&qemu_v2(), &[set(GIC, "reg", &reg)]), GIC, "reg");
    assert!(e.problem.contains("overlaps CPU interface"), "{e}");
    // Too small for the registers the driver uses.
    let e = err_at(
        &edit(&qemu_v2(), &[set(UART, "reg", &[0, 0x0900_0000, 0, 0x100])]),
        UART,
        "reg",
    );
    assert!(e.problem.contains("size 0x100"), "{e}");
}

#[test]
fn dtb_address_is_checked() {
    assert!(check_dtb_pa(0x4800_0000).is_ok());
    for bad in [0, 0x4800_0004, 0x80_4800_0000, 0xffff_ffff_ffff_0000] {
        let e = check_dtb_pa(bad).unwrap_err();
        assert_eq!(e.property, "x0", "{bad:#x}: {e}");
    }
    let e = Platform::from_fdt(&qemu_v2(), 0x7f_ffff_f000).unwrap_err();
    assert_eq!(e.property, "x0", "{e}");
}

#[test]
fn gicv3_redistributor_stride_is_checked_against_the_binding() {
    // Finding 12: 0x1_0000_0000 overflowed the map's `stride × 8`; 0 and 4 KiB "worked" only
    // because the map covered a whole block.
    for stride in [[0u32], [0x1000], [0x1_0000], [0x2_8000]] {
        let e = err_at(
            &edit(&qemu_v3(), &[set(GIC, "redistributor-stride", &stride)]),
            GIC,
            "redistributor-stride",
        );
        assert!(e.problem.contains("64 KiB"), "{e}");
    }
    let e = err_at(
        &edit(&qemu_v3(), &[set(GIC, "redistributor-stride", &[1, 0])]),
        GIC,
        "redistributor-stride",
    );
    assert!(e.problem.contains("region size"), "{e}");
    let p = parse(&edit(
        &qemu_v3(),
        &[set(GIC, "redistributor-stride", &[0x4_0000])],
    ))
    .unwrap();
    assert!(matches!(
        p.gic,
        GicDesc::V3 {
            gicr_stride: Some(0x4_0000),
            ..
        }
    ));
}

// --- interrupt specifiers (finding 6) --------------------------------------------------------

#[test]
fn interrupt_numbers_are_range_checked() {
    let cases: [(&str, [u32; 3], &str); 5] = [
        // SPI 0xffffffe1 + 32 wrapped to SGI 1 (the call-function IPI).
        (UART, [0, 0xffff_ffe1, 4], "out of range"),
        (UART, [0, 988, 4], "out of range"),
        (UART, [1, 16, 4], "out of range"),
        (UART, [2, 1, 4], "neither SPI"),
        (UART, [1, 11, 4], "architected timer's"),
    ];
    for (node, spec, why) in cases {
        let e = err_at(
            &edit(&qemu_v2(), &[set(node, "interrupts", &spec)]),
            node,
            "interrupts",
        );
        assert!(e.problem.contains(why), "{spec:?}: {e}");
    }
    // The timer: PPI 0xfffffffb wrapped to SGI 11; a virtual timer on an SPI (the UART's).
    let timer = |virt: [u32; 3]| {
        let mut c = vec![1, 0xd, 4, 1, 0xe, 4];
        c.extend(virt);
        c.extend([1, 0xa, 4]);
        edit(&qemu_v2(), &[set("/timer", "interrupts", &c)])
    };
    let e = err_at(&timer([1, 0xffff_fffb, 4]), "/timer", "interrupts");
    assert!(e.problem.contains("out of range"), "{e}");
    let e = err_at(&timer([0, 1, 4]), "/timer", "interrupts");
    assert!(e.problem.contains("expected a Ppi"), "{e}");
    // A GIC with 4-cell specifiers (PPI partitions) is not read as 3-cell ones.
    err_at(
        &edit(&qemu_v3(), &[set(GIC, "#interrupt-cells", &[4])]),
        GIC,
        "#interrupt-cells",
    );
    // A timer clock-frequency that does not fit 32 bits is refused, not truncated.
    err_at(
        &edit(&qemu_v2(), &[set("/timer", "clock-frequency", &[1, 0])]),
        "/timer",
        "clock-frequency",
    );
}

// --- CPUs ---------------------------------------------------------------------------------------

#[test]
fn cpus_with_invalid_or_duplicate_mpidr_are_skipped_with_a_note() {
    let blob = edit(
        &qemu_v2(),
        &[
            set("/cpus/cpu@1", "reg", &[0]),
            set("/cpus/cpu@2", "reg", &[0xff00_0000]),
        ],
    );
    let p = parse(&blob).unwrap();
    let mpidrs: Vec<u64> = p.cpus.iter().map(|c| c.mpidr).collect();
    assert_eq!(mpidrs, [0, 3, 4, 5]);
    let nodes: Vec<&str> = p.notes.list.iter().map(|n| n.node.as_str()).collect();
    assert_eq!(nodes, ["/cpus/cpu@1", "/cpus/cpu@2"]);
}

// --- bootargs (finding 10) ------------------------------------------------------------------

#[test]
fn non_utf8_bootargs_keep_the_valid_options_and_name_the_bytes() {
    // The review's repro: "selftest=cmd\xff\xfe hz=100".
    let raw = b"selftest=cmd\xff\xfe hz=100\0";
    let p = parse(&edit(&qemu_v2(), &[set_bytes("/chosen", "bootargs", raw)])).unwrap();
    assert_eq!(p.bootargs.as_str(), "hz=100");
    let n = &p.notes.list[0];
    assert_eq!((n.node.as_str(), n.property), ("/chosen", "bootargs"));
    assert!(n.problem.contains("byte 12: 0xff"), "{n}");
}
