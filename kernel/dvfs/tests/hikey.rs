//! HiKey960 (Hi3660) and HiKey (Hi6220) stub-clock drivers against the mailbox and firmware
//! models. Oracles: the register sequences Linux's drivers write (`hi3660-mailbox.c` +
//! `clk-hi3660-stub.c`, `hi6220-mailbox.c` + `clk-hi6220-stub.c`), the DT OPP tables and
//! latencies, and the error each fault must give.

mod common;

use asym_dvfs::hi3660::{self, regs as h3, Domain};
use asym_dvfs::hi6220::{self, regs as h6};
use asym_dvfs::io::Mmio;
use asym_dvfs::{Error, Wait};
use asym_sched::cpufreq::driver::CpufreqDriver;
use asym_sched::cpufreq::CpufreqPolicy;
use asym_sched::topology::{BoardDesc, CpuDesc, OppDesc, PerfDomainDesc};
use asym_sched::types::{Khz, MicroVolt, Nanos};
use common::*;

const fn opp(mhz: u32) -> OppDesc {
    OppDesc {
        freq: Khz(mhz * 1000),
        voltage: MicroVolt(900_000),
    }
}

const fn cpu(pd: u16) -> CpuDesc {
    CpuDesc {
        mpidr: pd as u64,
        cluster: pd,
        perf_domain: pd,
        capacity_dmips_mhz: Some(1024),
        dynamic_power_coefficient: None,
        core: "cpu",
    }
}

// source: mainline hi3660.dtsi (cluster0/cluster1 OPP tables) and hi6220.dtsi (cpu_opp_table).
static HIKEY960: BoardDesc = BoardDesc {
    name: "hikey960",
    cpus: &[cpu(0), cpu(1)],
    perf_domains: &[
        PerfDomainDesc {
            name: "little",
            opps: &[opp(533), opp(999), opp(1402), opp(1709), opp(1844)],
            transition_latency_ns: 300_000,
        },
        PerfDomainDesc {
            name: "big",
            opps: &[opp(903), opp(1421), opp(1805), opp(2112), opp(2362)],
            transition_latency_ns: 300_000,
        },
    ],
};

static HIKEY: BoardDesc = BoardDesc {
    name: "hikey",
    cpus: &[cpu(0)],
    perf_domains: &[PerfDomainDesc {
        name: "cpu",
        opps: &[opp(208), opp(432), opp(729), opp(960), opp(1200)],
        transition_latency_ns: 500_000,
    }],
};

fn policy(b: &'static BoardDesc, pd: usize) -> CpufreqPolicy {
    CpufreqPolicy::new(b, pd, Nanos(0)).unwrap()
}

fn domains() -> [Domain; 2] {
    let f = |pd: usize| -> Vec<Khz> {
        HIKEY960.perf_domains[pd]
            .opps
            .iter()
            .map(|o| o.freq)
            .collect()
    };
    [
        Domain::new(0, &f(0)).unwrap(),
        Domain::new(1, &f(1)).unwrap(),
    ]
}

fn hi3660(bus: &Hi3660Bus) -> hi3660::StubClock<MboxH<'_>, StubH<'_>> {
    hi3660::StubClock::new(
        MboxH(bus),
        StubH(bus),
        &domains(),
        hi3660::Config::HIKEY960,
        &Hi3660Clock(bus),
    )
    .unwrap()
}

fn hi6220(bus: &Hi6220Bus) -> hi6220::StubClock<SramH<'_>, BufH<'_>, IpcH<'_>> {
    let opps: Vec<Khz> = HIKEY.perf_domains[0].opps.iter().map(|o| o.freq).collect();
    hi6220::StubClock::new(
        SramH(bus),
        BufH(bus),
        IpcH(bus),
        &opps,
        hi6220::Config::HIKEY,
    )
    .unwrap()
}

const fn mhz(m: u32) -> Khz {
    Khz(m * 1000)
}

// ---------------------------------------------------------------------------------------
// Hi3660
// ---------------------------------------------------------------------------------------

#[test]
fn hi3660_startup_unlocks_and_claims_channel_13_as_linux_does() {
    let bus = Hi3660Bus::new();
    let drv = hi3660(&bus);
    let w = bus.writes.borrow().clone();
    // hi3660_mbox_unlock: the key at +0xA00; hi3660_mbox_acquire_channel: SRC of channel 13
    // (0x340) = BIT(ack_irq 0).
    assert_eq!(w, [(0xa00, 0x1acc_e551), (0x340, 1)]);
    assert_eq!(bus.mbox.borrow().read32(0x350) & 0xf0, h3::STATE_READY);
    assert_eq!(drv.get(0), mhz(1844), "LPM3's boot read-back");
    assert_eq!(drv.get(1), mhz(2362));
}

#[test]
fn hi3660_set_rate_writes_the_linux_register_sequence() {
    let bus = Hi3660Bus::new();
    let mut drv = hi3660(&bus);
    bus.writes.borrow_mut().clear();
    drv.target(&policy(&HIKEY960, 1), mhz(1421), bus.now())
        .unwrap();
    let w = bus.writes.borrow().clone();
    // hi3660_mbox_send_data on channel 13 (base 0x340): IMASK = ~BIT(3), DST = BIT(3),
    // MODE = automatic ack, DATA0..7 = {0x0002030A, 1421, 0...}, SEND = BIT(0).
    let ch = 0x340;
    let mut want = vec![(ch + 0x14, !8u32), (ch + 0x04, 8), (ch + 0x10, 1)];
    want.push((ch + 0x20, 0x0002_030a));
    want.push((ch + 0x24, 1421));
    for i in 2..8 {
        want.push((ch + 0x20 + 4 * i, 0));
    }
    want.push((ch + 0x1c, 1));
    assert_eq!(w, want);
}

#[test]
fn hi3660_every_opp_of_both_clusters_is_set_and_read_back_after_300us() {
    let bus = Hi3660Bus::new();
    let mut drv = hi3660(&bus);
    assert_eq!(drv.transition_latency_ns(0), 300_000);
    for pd in 0..2 {
        let p = policy(&HIKEY960, pd);
        for e in p.table() {
            let t0 = bus.now();
            drv.target(&p, e.frequency, t0).unwrap();
            let c = bus.run_until_done(&mut drv, 10 * US, 40 * MS).unwrap();
            assert_eq!(c.result, Ok(e.frequency));
            // Sent at once, 5 µs to LPM3, 300 µs transition, seen at the next 10 µs poll.
            let lat = c.latency_ns();
            assert!((305 * US..330 * US).contains(&lat), "pd {pd} {e:?}: {lat}");
            let shown = bus.stub.borrow().read32(0x70 + 4 * pd);
            assert_eq!(shown * 1000, e.frequency.0);
        }
    }
    assert_eq!(bus.lpm3.borrow().messages, 10);
}

#[test]
fn hi3660_the_second_cluster_waits_for_the_first_message_acknowledgement() {
    let bus = Hi3660Bus::new();
    let mut drv = hi3660(&bus);
    let t0 = bus.now();
    drv.target(&policy(&HIKEY960, 0), mhz(533), t0).unwrap();
    drv.target(&policy(&HIKEY960, 1), mhz(903), t0).unwrap();
    assert_eq!(drv.sent, 1, "channel 13 is with LPM3 until it acknowledges");
    let mut done = Vec::new();
    for _ in 0..200 {
        bus.advance(10 * US);
        while let Some(c) = drv.poll(bus.now()) {
            done.push((c.pd, c.result));
        }
    }
    done.sort_by_key(|d| d.0);
    assert_eq!(done, [(0, Ok(mhz(533))), (1, Ok(mhz(903)))]);
    assert_eq!(drv.sent, 2);
}

#[test]
fn hi3660_a_locked_mailbox_or_a_taken_channel_fails_the_probe() {
    let bus = Hi3660Bus::new();
    bus.hw.set(asym_dvfs::model::hi3660::Mailbox {
        lock_stuck: true,
        ..Default::default()
    });
    let r = hi3660::StubClock::new(
        MboxH(&bus),
        StubH(&bus),
        &domains(),
        hi3660::Config::HIKEY960,
        &Hi3660Clock(&bus),
    );
    assert_eq!(r.map(|_| ()).unwrap_err(), Error::MailboxLocked);
    let tries = bus.writes.borrow().iter().filter(|w| w.0 == 0xa00).count();
    assert_eq!(
        tries, 4,
        "the key written 4 times (Linux: retry = 3 after the first)"
    );
    let bus = Hi3660Bus::new();
    bus.hw.set(asym_dvfs::model::hi3660::Mailbox {
        src_stuck: true,
        ..Default::default()
    });
    let r = hi3660::StubClock::new(
        MboxH(&bus),
        StubH(&bus),
        &domains(),
        hi3660::Config::HIKEY960,
        &Hi3660Clock(&bus),
    );
    assert_eq!(r.map(|_| ()).unwrap_err(), Error::MailboxNotAcquired);
}

#[test]
fn hi3660_no_acknowledgement_times_out_the_next_request_after_300ms() {
    let bus = Hi3660Bus::new();
    let mut drv = hi3660(&bus);
    bus.lpm3.borrow_mut().faults.no_ack = true;
    bus.lpm3.borrow_mut().faults.ignore = true;
    drv.target(&policy(&HIKEY960, 0), mhz(999), bus.now())
        .unwrap();
    let c = bus.run_until_done(&mut drv, 100 * US, 100 * MS).unwrap();
    assert!(matches!(c.result, Err(Error::ReadBack { .. })), "{c:?}");
    let t1 = bus.now();
    drv.target(&policy(&HIKEY960, 1), mhz(903), t1).unwrap();
    let c = bus.run_until_done(&mut drv, 100 * US, 400 * MS).unwrap();
    let Err(Error::Timeout {
        wait: Wait::MailboxAck,
        waited_us,
    }) = c.result
    else {
        panic!("{c:?}")
    };
    assert!((300_000..300_200).contains(&waited_us), "{waited_us}");
    assert_eq!(drv.sent, 1, "never sent over an unacknowledged message");
}

#[test]
fn hi3660_a_frequency_that_does_not_show_is_a_read_back_error() {
    let bus = Hi3660Bus::new();
    let mut drv = hi3660(&bus);
    bus.lpm3.borrow_mut().faults.report_mhz = Some(1402);
    let t0 = bus.now();
    drv.target(&policy(&HIKEY960, 0), mhz(999), t0).unwrap();
    let c = bus.run_until_done(&mut drv, 100 * US, 100 * MS).unwrap();
    assert_eq!(
        c.result,
        Err(Error::ReadBack {
            pd: 0,
            want: mhz(999),
            got: mhz(1402)
        })
    );
    assert!(c.latency_ns() >= 300 * US + 30 * MS);
    assert_eq!(drv.get(0), mhz(1402));
}

#[test]
fn hi3660_unknown_frequency_or_domain_is_refused() {
    let bus = Hi3660Bus::new();
    let mut drv = hi3660(&bus);
    assert_eq!(
        drv.target(&policy(&HIKEY960, 0), mhz(903), bus.now()),
        Err(Error::NotAnOpp {
            pd: 0,
            freq: mhz(903)
        })
    );
    let mut p = policy(&HIKEY960, 1);
    p.pd = 3;
    assert_eq!(
        drv.target(&p, mhz(903), bus.now()),
        Err(Error::NoSuchDomain { pd: 3 })
    );
    assert_eq!(
        Domain::new(7, &[mhz(1)]).unwrap_err(),
        Error::Malformed {
            what: "Hi3660 stub clock id is not 0..=3"
        }
    );
}

// ---------------------------------------------------------------------------------------
// Hi6220
// ---------------------------------------------------------------------------------------

#[test]
fn hi6220_probe_clears_the_request_words_and_enables_the_ack_interrupt() {
    let bus = Hi6220Bus::new();
    bus.sram.borrow_mut().write32(h6::ACPU_DFS_FLAG, 0x1234);
    bus.sram.borrow_mut().write32(h6::ACPU_DFS_FREQ_LMT, 5);
    let drv = hi6220(&bus);
    let w = bus.writes.borrow().clone();
    assert_eq!(
        w,
        [
            (0, 0x1b30, 0),
            (0, 0x1b34, 0),
            (0, 0x1b38, 0),
            (2, 0x500, 1 << 11)
        ]
    );
    assert_eq!(drv.get(0), mhz(1200));
    assert_eq!(drv.limit(), mhz(1200));
}

#[test]
fn hi6220_set_rate_writes_the_linux_sequence() {
    let bus = Hi6220Bus::new();
    let mut drv = hi6220(&bus);
    bus.writes.borrow_mut().clear();
    drv.target(&policy(&HIKEY, 0), mhz(729), bus.now()).unwrap();
    let w = bus.writes.borrow().clone();
    // hi6220_acpu_set_freq: REQ = 729000 kHz; hi6220_mbox_send_data on slot 1 (0x40):
    // state TX, automatic ack, DATA0 = {0x0A, 0x03, 0, 0}, DATA1..7 = 0, DST_INT_RAW = BIT(0).
    let mut want = vec![
        (0u8, 0x1b34usize, 729_000u32),
        (1, 0x40, 0x20),
        (1, 0x40, 0x21),
    ];
    want.push((1, 0x44, 0x030a));
    for i in 1..8 {
        want.push((1, 0x44 + 4 * i, 0));
    }
    want.push((2, 0x420, 1));
    assert_eq!(w, want);
}

#[test]
fn hi6220_every_opp_is_set_and_read_back_after_500us() {
    let bus = Hi6220Bus::new();
    let mut drv = hi6220(&bus);
    assert_eq!(drv.transition_latency_ns(0), 500_000);
    let p = policy(&HIKEY, 0);
    for e in p.table() {
        let t0 = bus.now();
        drv.target(&p, e.frequency, t0).unwrap();
        let c = bus.run_until_done(&mut drv, 10 * US, 40 * MS).unwrap();
        assert_eq!(c.result, Ok(e.frequency));
        assert_eq!(
            bus.sram.borrow().read32(h6::ACPU_DFS_CUR_FREQ),
            e.frequency.0
        );
        let lat = c.latency_ns();
        assert!((505 * US..530 * US).contains(&lat), "{e:?}: {lat}");
    }
    assert_eq!(bus.mcu.borrow().messages, 5);
}

#[test]
fn hi6220_a_request_above_the_firmware_limit_is_clamped() {
    let bus = Hi6220Bus::new();
    let mut drv = hi6220(&bus);
    bus.sram
        .borrow_mut()
        .write32(h6::ACPU_DFS_FLAG, h6::ACPU_DFS_LOCK_FLAG);
    bus.sram
        .borrow_mut()
        .write32(h6::ACPU_DFS_FREQ_LMT, 960_000);
    drv.target(&policy(&HIKEY, 0), mhz(432), bus.now()).unwrap();
    bus.run_until_done(&mut drv, 10 * US, 40 * MS).unwrap();
    drv.target(&policy(&HIKEY, 0), mhz(1200), bus.now())
        .unwrap();
    assert_eq!(bus.sram.borrow().read32(h6::ACPU_DFS_FREQ_REQ), 960_000);
    let c = bus.run_until_done(&mut drv, 10 * US, 40 * MS).unwrap();
    assert_eq!((c.requested, c.result), (mhz(1200), Ok(mhz(960))));
}

#[test]
fn hi6220_no_acknowledgement_times_out_after_500ms() {
    let bus = Hi6220Bus::new();
    let mut drv = hi6220(&bus);
    bus.mcu.borrow_mut().faults.no_ack = true;
    drv.target(&policy(&HIKEY, 0), mhz(432), bus.now()).unwrap();
    let c = bus.run_until_done(&mut drv, 100 * US, 600 * MS).unwrap();
    let Err(Error::Timeout {
        wait: Wait::MailboxAck,
        waited_us,
    }) = c.result
    else {
        panic!("{c:?}")
    };
    assert!((500_000..500_200).contains(&waited_us), "{waited_us}");
    // The slot is still the MCU's: the next request waits for it, then fails the same way.
    drv.target(&policy(&HIKEY, 0), mhz(729), bus.now()).unwrap();
    let c = bus.run_until_done(&mut drv, 100 * US, 600 * MS).unwrap();
    assert!(matches!(
        c.result,
        Err(Error::Timeout {
            wait: Wait::MailboxAck,
            ..
        })
    ));
    assert_eq!(drv.sent, 1);
}

#[test]
fn hi6220_a_frequency_that_does_not_show_is_a_read_back_error() {
    let bus = Hi6220Bus::new();
    let mut drv = hi6220(&bus);
    bus.mcu.borrow_mut().faults.ignore = true;
    drv.target(&policy(&HIKEY, 0), mhz(208), bus.now()).unwrap();
    let c = bus.run_until_done(&mut drv, 100 * US, 100 * MS).unwrap();
    assert_eq!(
        c.result,
        Err(Error::ReadBack {
            pd: 0,
            want: mhz(208),
            got: mhz(1200)
        })
    );
}

#[test]
fn hi6220_regions_too_small_are_refused() {
    let bus = Hi6220Bus::new();
    struct Tiny;
    impl Mmio for Tiny {
        fn read32(&self, _: usize) -> u32 {
            0
        }
        fn write32(&mut self, _: usize, _: u32) {}
        fn size(&self) -> usize {
            0x100
        }
    }
    let r = hi6220::StubClock::new(
        Tiny,
        BufH(&bus),
        IpcH(&bus),
        &[mhz(208)],
        hi6220::Config::HIKEY,
    );
    assert_eq!(
        r.map(|_| ()).unwrap_err(),
        Error::RegionTooSmall {
            need: 0x1b3c,
            have: 0x100
        }
    );
}
