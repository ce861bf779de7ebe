//! SCMI driver against the spec-derived platform model (`asym_dvfs::model::scp`) and against
//! hand-written replies. Oracles: the SCMI specification's encodings (the header example of
//! Linux `pack_scmi_header`), SCP-firmware's Juno r2 tables (frequencies, power = C·f·V²,
//! 1450 µs), and the error each malformed reply must give.

mod common;

use asym_dvfs::io::{Mmio, Ram};
use asym_dvfs::model::scp::{ModelDomain, ModelLevel, PlatformConfig, JUNO_R2};
use asym_dvfs::scmi::base;
use asym_dvfs::scmi::perf::{self, Config, PowerUnit, ScmiPerf, MSG_LEVEL_SET};
use asym_dvfs::scmi::{smt, Header, Status, PROTOCOL_BASE, PROTOCOL_PERF};
use asym_dvfs::{Error, Wait};
use asym_sched::cpufreq::driver::CpufreqDriver;
use asym_sched::cpufreq::CpufreqPolicy;
use asym_sched::topology::{BoardDesc, CpuDesc, OppDesc, PerfDomainDesc};
use asym_sched::types::{Khz, MicroVolt, Nanos};
use common::*;

const ALL_ERRORS: [Status; 12] = [
    Status::NotSupported,
    Status::InvalidParameters,
    Status::Denied,
    Status::NotFound,
    Status::OutOfRange,
    Status::Busy,
    Status::CommsError,
    Status::GenericError,
    Status::HardwareError,
    Status::ProtocolError,
    Status::InUse,
    Status::Other(-42),
];

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

/// Policies shaped like Juno r2's (pd 0 big, pd 1 LITTLE), to call `target` with.
static POLICY_BOARD: BoardDesc = BoardDesc {
    name: "juno-r2-scmi",
    cpus: &[cpu(0), cpu(1)],
    perf_domains: &[
        PerfDomainDesc {
            name: "big",
            opps: &[opp(600), opp(1000), opp(1200)],
            transition_latency_ns: 1_450_000,
        },
        PerfDomainDesc {
            name: "little",
            opps: &[opp(450), opp(800), opp(950)],
            transition_latency_ns: 1_450_000,
        },
    ],
};

fn policy(pd: usize) -> CpufreqPolicy {
    CpufreqPolicy::new(&POLICY_BOARD, pd, Nanos(0)).unwrap()
}

fn driver(bus: &ScmiBus, cfg: Config) -> ScmiPerf<Shm<'_>, asym_dvfs::scmi::MhuDoorbell<Mhu<'_>>> {
    let mut chan = bus.channel();
    let info = perf::discover(&mut chan, &bus.clock(), 30_000).unwrap();
    ScmiPerf::new(chan, &info, &[0, 1], cfg, &bus.clock()).unwrap()
}

const fn mhz(m: u32) -> Khz {
    Khz(m * 1000)
}

#[test]
fn header_packing_matches_the_specification() {
    // PERF LEVEL_SET with token 5: 0x07 | 0x13 << 10 | 5 << 18 (Linux pack_scmi_header).
    let h = Header::command(PROTOCOL_PERF, MSG_LEVEL_SET, 5);
    assert_eq!(h.0, 0x0014_4c07);
    assert_eq!(
        (h.message_id(), h.msg_type(), h.protocol_id(), h.token()),
        (7, 0, 0x13, 5)
    );
    // The token is 10 bits.
    assert_eq!(Header::command(0x10, 0, 0x3ff).token(), 0x3ff);
    assert_eq!(Header::command(0x10, 0, 0x400).token(), 0);
}

#[test]
fn status_codes_follow_the_specification_table() {
    let table = [
        (0, Status::Success),
        (-1, Status::NotSupported),
        (-2, Status::InvalidParameters),
        (-3, Status::Denied),
        (-4, Status::NotFound),
        (-5, Status::OutOfRange),
        (-6, Status::Busy),
        (-7, Status::CommsError),
        (-8, Status::GenericError),
        (-9, Status::HardwareError),
        (-10, Status::ProtocolError),
        (-11, Status::InUse),
        (-12, Status::Other(-12)),
        (7, Status::Other(7)),
    ];
    for (v, s) in table {
        assert_eq!(Status::from_i32(v), s);
        assert_eq!(s.to_i32(), v);
    }
    assert_eq!(format!("{}", Status::Denied), "DENIED (-3)");
}

#[test]
fn message_layout_in_the_channel_is_the_smt_layout() {
    let bus = ScmiBus::new(JUNO_R2);
    bus.reply_delay_ns.set(u64::MAX / 2);
    let mut chan = bus.channel();
    let h = chan
        .send(PROTOCOL_PERF, MSG_LEVEL_SET, &[1, 800_000_000])
        .unwrap();
    let m = bus.shmem.borrow();
    assert_eq!(m.read32(smt::CHANNEL_STATUS), 0, "busy, error cleared");
    assert_eq!(m.read32(smt::FLAGS), 0, "polled: no completion interrupt");
    assert_eq!(m.read32(smt::LENGTH), 12, "header + two parameters");
    assert_eq!(m.read32(smt::MSG_HEADER), h.0);
    assert_eq!(h, Header::command(0x13, 7, 0));
    assert_eq!(m.read32(0x1c), 1);
    assert_eq!(m.read32(0x20), 800_000_000);
    // The doorbell: channel 1 (high priority), bit 0 → AP→SCP high SET at +0x128.
    assert_eq!(bus.mhu.borrow().read32(0x120), 1, "STAT raised");
    assert_eq!(bus.rings.get(), 1);
    drop(m);
    // Nothing outstanding twice.
    assert_eq!(chan.send(PROTOCOL_PERF, 8, &[0]), Err(Error::InFlight));
}

#[test]
fn base_discovery_of_the_juno_firmware() {
    let bus = ScmiBus::new(JUNO_R2);
    let mut chan = bus.channel();
    let b = base::discover(&mut chan, &bus.clock(), 30_000).unwrap();
    assert_eq!(b.version, 0x2_0000);
    assert_eq!(b.vendor.as_str(), "arm");
    assert_eq!(b.num_agents, 2);
    assert_eq!(b.protocols(), &[0x11, 0x12, 0x13, 0x14, 0x15, 0x16]);
    assert!(b.implements(PROTOCOL_PERF));
    assert!(!b.implements(0x17));
}

#[test]
fn protocol_list_is_read_across_pages() {
    static MANY: PlatformConfig = PlatformConfig {
        protocols: &[0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17],
        protocols_per_page: 3,
        ..JUNO_R2
    };
    let bus = ScmiBus::new(MANY);
    let b = base::discover(&mut bus.channel(), &bus.clock(), 30_000).unwrap();
    assert_eq!(b.protocols(), MANY.protocols);
    // Version, attributes, vendor, implementation version, then three list pages (3+3+1).
    assert_eq!(bus.rings.get(), 4 + 3);
}

#[test]
fn perf_discovery_of_the_juno_firmware() {
    let bus = ScmiBus::new(JUNO_R2);
    let mut chan = bus.channel();
    let p = perf::discover(&mut chan, &bus.clock(), 30_000).unwrap();
    assert_eq!(p.version, 0x2_0000);
    assert_eq!(p.power_unit, PowerUnit::MilliWatt);
    assert_eq!(p.nr_domains(), 3);
    let names: Vec<_> = p.domains().map(|d| d.name.as_str().to_string()).collect();
    assert_eq!(names, ["BIG_CPU", "LITTLE_CPU", "GPU"]);
    let big = p.domain(0).unwrap();
    // level = frequency in Hz: sustained 1_000_000 kHz / 1e9 level → mult_factor 1.
    assert_eq!(big.mult_factor, 1);
    assert_eq!(
        (big.sustained_freq_khz, big.sustained_perf_level),
        (1_000_000, 1_000_000_000)
    );
    assert!(big.set_level && big.set_limits && !big.level_indexing);
    let f: Vec<u32> = big.levels().iter().map(|l| l.freq.0).collect();
    assert_eq!(f, [600_000, 1_000_000, 1_200_000]);
    let power: Vec<u32> = big.levels().iter().map(|l| l.power).collect();
    assert_eq!(power, [181, 364, 540]);
    assert_eq!(big.max_latency_us(), 1450);
    let little = p.domain(1).unwrap();
    let f: Vec<u32> = little.levels().iter().map(|l| l.freq.0).collect();
    assert_eq!(f, [450_000, 800_000, 950_000]);
    assert_eq!(p.domain(2).unwrap().levels().len(), 2);
}

#[test]
fn describe_levels_pagination_gives_the_same_levels_in_v2_and_v4() {
    static LEVELS: [ModelLevel; 5] = [
        ModelLevel {
            perf: 10,
            power: 1,
            freq_khz: 208_000,
        },
        ModelLevel {
            perf: 20,
            power: 2,
            freq_khz: 432_000,
        },
        ModelLevel {
            perf: 35,
            power: 3,
            freq_khz: 729_000,
        },
        ModelLevel {
            perf: 46,
            power: 4,
            freq_khz: 960_000,
        },
        ModelLevel {
            perf: 58,
            power: 5,
            freq_khz: 1_200_000,
        },
    ];
    static DOMS: [ModelDomain; 1] = [ModelDomain {
        name: "CPU",
        levels: &LEVELS,
        sustained: 4,
        latency_us: 500,
        boot_level: 0,
    }];
    let mut seen = Vec::new();
    for (version, indexing, per_page) in [
        (0x2_0000, false, 0),
        (0x2_0000, false, 1),
        (0x2_0000, false, 2),
        (0x4_0000, false, 2),
        (0x4_0000, true, 3),
    ] {
        let cfg = PlatformConfig {
            perf_version: version,
            level_indexing: indexing,
            levels_per_page: per_page,
            domains: &DOMS,
            ..JUNO_R2
        };
        let bus = ScmiBus::new(cfg);
        let mut chan = bus.channel();
        let p = perf::discover(&mut chan, &bus.clock(), 30_000).unwrap();
        let d = p.domain(0).unwrap();
        assert_eq!(d.level_indexing, indexing);
        // Abstract levels: mult_factor = 1_200_000 kHz × 1000 / 58 (integer, as Linux).
        let freqs: Vec<u32> = d.levels().iter().map(|l| l.freq.0).collect();
        if indexing {
            assert_eq!(freqs, [208_000, 432_000, 729_000, 960_000, 1_200_000]);
        } else {
            let m = 1_200_000u64 * 1000 / 58;
            let want: Vec<u32> = [10u64, 20, 35, 46, 58]
                .iter()
                .map(|l| (l * m / 1000) as u32)
                .collect();
            assert_eq!(freqs, want);
        }
        seen.push(
            d.levels()
                .iter()
                .map(|l| (l.perf, l.power, l.latency_us))
                .collect::<Vec<_>>(),
        );
    }
    assert!(seen.windows(2).all(|w| w[0] == w[1]), "{seen:?}");
}

#[test]
fn every_opp_of_every_domain_is_set_and_read_back_with_the_latency() {
    let bus = ScmiBus::new(JUNO_R2);
    let mut drv = driver(&bus, Config::default());
    assert_eq!(drv.get(0), mhz(1200), "boot level read at probe");
    assert_eq!(drv.get(1), mhz(950));
    assert_eq!(drv.transition_latency_ns(0), 1_450_000);
    for pd in 0..2 {
        let p = policy(pd);
        for e in p.table() {
            let t0 = bus.now();
            let expect = drv.target(&p, e.frequency, t0).unwrap();
            assert_eq!(expect.0 - t0.0, 1_450_000);
            let c = bus
                .run_until_done(&mut drv, 10 * US, 40 * MS)
                .expect("completes");
            assert_eq!(c.result, Ok(e.frequency), "pd {pd}");
            assert_eq!((c.pd, c.requested, c.requested_at), (pd, e.frequency, t0));
            // The model changes the level 1450 µs after it answered LEVEL_SET; the driver
            // sees it at the first LEVEL_GET after the latency: within a few polls of it.
            let lat = c.latency_ns();
            assert!(
                (1_450_000..1_450_000 + 100 * US).contains(&lat),
                "latency {lat}"
            );
            let fw = bus
                .platform()
                .freq_khz(if pd == 0 { 0 } else { 1 })
                .unwrap();
            assert_eq!(fw, e.frequency.0, "firmware agrees");
            assert_eq!(drv.get(pd), e.frequency);
        }
    }
    assert!(drv.idle());
    assert_eq!(drv.stats().failed, 0);
}

#[test]
fn without_read_back_a_set_completes_after_the_advertised_latency() {
    let bus = ScmiBus::new(JUNO_R2);
    let cfg = Config {
        read_back: false,
        ..Config::default()
    };
    let mut drv = driver(&bus, cfg);
    let t0 = bus.now();
    drv.target(&policy(1), mhz(450), t0).unwrap();
    let c = bus.run_until_done(&mut drv, 10 * US, 10 * MS).unwrap();
    assert_eq!(c.result, Ok(mhz(450)));
    // Answered after the 5 µs processing delay (seen at the next 10 µs poll), then 1450 µs.
    assert_eq!(c.latency_ns(), 10 * US + 1_450_000);
}

#[test]
fn requests_on_two_domains_share_the_channel_and_both_complete() {
    let bus = ScmiBus::new(JUNO_R2);
    let mut drv = driver(&bus, Config::default());
    let t0 = bus.now();
    drv.target(&policy(0), mhz(600), t0).unwrap();
    drv.target(&policy(1), mhz(450), t0).unwrap();
    let done = bus.run(&mut drv, 10 * US, 10 * MS);
    let mut got: Vec<_> = done.iter().map(|c| (c.pd, c.result)).collect();
    got.sort_by_key(|g| g.0);
    assert_eq!(got, [(0, Ok(mhz(600))), (1, Ok(mhz(450)))]);
}

#[test]
fn a_newer_request_supersedes_an_older_one() {
    let bus = ScmiBus::new(JUNO_R2);
    let mut drv = driver(&bus, Config::default());
    let p = policy(0);
    drv.target(&p, mhz(600), bus.now()).unwrap();
    bus.advance(100 * US);
    drv.poll(bus.now());
    drv.target(&p, mhz(1000), bus.now()).unwrap();
    let done = bus.run(&mut drv, 10 * US, 10 * MS);
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!(done[0].result, Ok(mhz(1000)));
    assert_eq!(bus.platform().freq_khz(0), Some(1_000_000));
}

#[test]
fn requests_for_unknown_domains_or_frequencies_are_refused_at_once() {
    let bus = ScmiBus::new(JUNO_R2);
    let mut drv = driver(&bus, Config::default());
    assert_eq!(
        drv.target(&policy(0), Khz(700_000), bus.now()),
        Err(Error::NotAnOpp {
            pd: 0,
            freq: Khz(700_000)
        })
    );
    let mut pol = policy(1);
    pol.pd = 5;
    assert_eq!(
        drv.target(&pol, mhz(450), bus.now()),
        Err(Error::NoSuchDomain { pd: 5 })
    );
}

#[test]
fn every_error_status_of_level_set_is_reported_with_the_message() {
    for st in ALL_ERRORS {
        let bus = ScmiBus::new(JUNO_R2);
        let mut drv = driver(&bus, Config::default());
        bus.platform().faults.status = Some((PROTOCOL_PERF, MSG_LEVEL_SET, st));
        drv.target(&policy(0), mhz(600), bus.now()).unwrap();
        let c = bus.run_until_done(&mut drv, 10 * US, 10 * MS).unwrap();
        assert_eq!(
            c.result,
            Err(Error::Firmware {
                protocol: 0x13,
                message: 7,
                status: st
            })
        );
        assert_eq!(bus.platform().freq_khz(0), Some(1_200_000), "unchanged");
    }
}

#[test]
fn every_error_status_during_discovery_stops_it_with_that_status() {
    let msgs = [
        (PROTOCOL_BASE, 0u8),
        (PROTOCOL_BASE, 1),
        (PROTOCOL_BASE, 3),
        (PROTOCOL_BASE, 5),
        (PROTOCOL_BASE, 6),
        (PROTOCOL_PERF, 0),
        (PROTOCOL_PERF, 1),
        (PROTOCOL_PERF, 3),
        (PROTOCOL_PERF, 4),
        (PROTOCOL_PERF, 8),
    ];
    for (proto, msg) in msgs {
        for st in ALL_ERRORS {
            let bus = ScmiBus::new(JUNO_R2);
            bus.platform().faults.status = Some((proto, msg, st));
            let mut chan = bus.channel();
            let want = Err(Error::Firmware {
                protocol: proto,
                message: msg,
                status: st,
            });
            if proto == PROTOCOL_BASE {
                assert_eq!(
                    base::discover(&mut chan, &bus.clock(), 30_000).map(|_| ()),
                    want
                );
            } else if msg == 8 {
                let info = perf::discover(&mut chan, &bus.clock(), 30_000).unwrap();
                let r = ScmiPerf::new(chan, &info, &[0, 1], Config::default(), &bus.clock());
                assert_eq!(r.map(|_| ()).err(), want.err());
            } else {
                assert_eq!(
                    perf::discover(&mut chan, &bus.clock(), 30_000).map(|_| ()),
                    want
                );
            }
        }
    }
}

#[test]
fn a_reply_with_another_token_is_a_wrong_token_error() {
    let bus = ScmiBus::new(JUNO_R2);
    let mut drv = driver(&bus, Config::default());
    bus.platform().faults.token_xor = 0x155;
    drv.target(&policy(0), mhz(600), bus.now()).unwrap();
    let c = bus.run_until_done(&mut drv, 10 * US, 10 * MS).unwrap();
    let Err(Error::WrongToken { expected, got }) = c.result else {
        panic!("{c:?}")
    };
    assert_eq!(expected ^ got, 0x155);
    // Discovery too.
    let bus = ScmiBus::new(JUNO_R2);
    bus.platform().faults.token_xor = 1;
    let r = base::discover(&mut bus.channel(), &bus.clock(), 30_000);
    assert_eq!(
        r.map(|_| ()),
        Err(Error::WrongToken {
            expected: 0,
            got: 1
        })
    );
}

#[test]
fn a_reply_naming_another_message_or_protocol_is_a_wrong_header_error() {
    for xor in [0x1u32, 0x100, 0x400] {
        let bus = ScmiBus::new(JUNO_R2);
        let mut drv = driver(&bus, Config::default());
        bus.platform().faults.header_xor = xor;
        drv.target(&policy(0), mhz(600), bus.now()).unwrap();
        let c = bus.run_until_done(&mut drv, 10 * US, 10 * MS).unwrap();
        let Err(Error::WrongHeader { expected, got }) = c.result else {
            panic!("{c:?}")
        };
        assert_eq!(expected ^ got, xor);
    }
}

#[test]
fn a_reply_of_the_wrong_length_is_a_wrong_length_error() {
    for delta in [-8, -4, -1, 1, 4, 200] {
        let bus = ScmiBus::new(JUNO_R2);
        let mut drv = driver(&bus, Config::default());
        bus.platform().faults.length_delta = delta;
        drv.target(&policy(0), mhz(600), bus.now()).unwrap();
        let c = bus.run_until_done(&mut drv, 10 * US, 10 * MS).unwrap();
        let Err(Error::WrongLength { got, .. }) = c.result else {
            panic!("delta {delta}: {c:?}")
        };
        assert_eq!(
            got as i64,
            8 + delta as i64,
            "LEVEL_SET returns status only"
        );
        // And in discovery, where most messages return values.
        let bus = ScmiBus::new(JUNO_R2);
        bus.platform().faults.length_delta = delta;
        let r = perf::discover(&mut bus.channel(), &bus.clock(), 30_000);
        assert!(
            matches!(r, Err(Error::WrongLength { .. })),
            "delta {delta}: {r:?}"
        );
    }
}

#[test]
fn a_channel_error_flag_is_a_channel_error() {
    let bus = ScmiBus::new(JUNO_R2);
    let mut drv = driver(&bus, Config::default());
    bus.platform().faults.channel_error = true;
    drv.target(&policy(1), mhz(800), bus.now()).unwrap();
    let c = bus.run_until_done(&mut drv, 10 * US, 10 * MS).unwrap();
    assert_eq!(c.result, Err(Error::ChannelError));
    // A message too long for the channel makes the platform set the flag itself.
    let bus = ScmiBus::new(JUNO_R2);
    let mut chan = bus.channel();
    chan.send(PROTOCOL_PERF, 8, &[0]).unwrap();
    bus.shmem.borrow_mut().write32(smt::LENGTH, 4 + 200);
    bus.advance(10 * US);
    assert_eq!(chan.poll(), Err(Error::ChannelError));
}

#[test]
fn a_silent_firmware_times_out_after_the_reply_timeout() {
    let bus = ScmiBus::new(JUNO_R2);
    let mut drv = driver(&bus, Config::default());
    bus.platform().faults.silent = true;
    let t0 = bus.now();
    drv.target(&policy(0), mhz(600), t0).unwrap();
    let c = bus.run_until_done(&mut drv, 100 * US, 100 * MS).unwrap();
    let Err(Error::Timeout {
        wait: Wait::Reply,
        waited_us,
    }) = c.result
    else {
        panic!("{c:?}")
    };
    assert!((30_000..30_200).contains(&waited_us), "{waited_us}");
    assert!((30 * MS..30 * MS + 200 * US).contains(&(c.at.0 - t0.0)));
    // The channel stays the platform's: the next request waits, then says why it failed.
    let t1 = bus.now();
    drv.target(&policy(0), mhz(1000), t1).unwrap();
    let c = bus.run_until_done(&mut drv, 100 * US, 100 * MS).unwrap();
    let Err(Error::Timeout {
        wait: Wait::ChannelFree,
        waited_us,
    }) = c.result
    else {
        panic!("{c:?}")
    };
    assert!((60_000..60_200).contains(&waited_us), "{waited_us}");
    // Discovery gives up too.
    let bus = ScmiBus::new(JUNO_R2);
    bus.platform().faults.silent = true;
    let r = base::discover(&mut bus.channel(), &bus.clock(), 5_000);
    assert!(
        matches!(
            r,
            Err(Error::Timeout {
                wait: Wait::Reply,
                ..
            })
        ),
        "{r:?}"
    );
}

#[test]
fn a_busy_channel_is_reported_not_overwritten() {
    let bus = ScmiBus::new(JUNO_R2);
    bus.shmem.borrow_mut().write32(smt::CHANNEL_STATUS, 0);
    let mut chan = bus.channel();
    assert_eq!(chan.send(PROTOCOL_BASE, 0, &[]), Err(Error::ChannelBusy));
    assert_eq!(
        bus.shmem.borrow().read32(smt::MSG_HEADER),
        0,
        "nothing written"
    );
    assert_eq!(bus.rings.get(), 0);
    let r = chan.transact(PROTOCOL_BASE, 0, &[], &bus.clock(), 2_000);
    assert!(
        matches!(
            r,
            Err(Error::Timeout {
                wait: Wait::ChannelFree,
                ..
            })
        ),
        "{r:?}"
    );
    // Freed by the platform later: the message goes out.
    bus.shmem
        .borrow_mut()
        .write32(smt::CHANNEL_STATUS, smt::STATUS_FREE);
    assert_eq!(
        chan.transact(PROTOCOL_BASE, 0, &[], &bus.clock(), 2_000)
            .unwrap()
            .expect(1)
            .unwrap(),
        &[0x2_0000]
    );
}

#[test]
fn an_untaken_doorbell_is_reported() {
    let bus = ScmiBus::new(JUNO_R2);
    let mut drv = driver(&bus, Config::default());
    bus.keep_doorbell.set(true);
    drv.target(&policy(0), mhz(600), bus.now()).unwrap();
    // The first message is answered, but its doorbell stays raised: the read-back
    // LEVEL_GET cannot be sent, and the request fails once the busy timeout has passed.
    let c = bus.run_until_done(&mut drv, 100 * US, 100 * MS).unwrap();
    assert!(
        matches!(
            c.result,
            Err(Error::Timeout {
                wait: Wait::ChannelFree,
                ..
            })
        ),
        "{c:?}"
    );
    let mut chan = bus.channel();
    assert_eq!(
        chan.send(PROTOCOL_BASE, 0, &[]),
        Err(Error::DoorbellPending)
    );
}

#[test]
fn a_level_that_never_shows_is_a_read_back_error() {
    let bus = ScmiBus::new(JUNO_R2);
    let mut drv = driver(&bus, Config::default());
    bus.platform().faults.ignore_level_set = true;
    let t0 = bus.now();
    drv.target(&policy(1), mhz(450), t0).unwrap();
    let c = bus.run_until_done(&mut drv, 50 * US, 100 * MS).unwrap();
    assert_eq!(
        c.result,
        Err(Error::ReadBack {
            pd: 1,
            want: mhz(450),
            got: mhz(950)
        })
    );
    assert!(c.latency_ns() >= 1_450_000 + 30 * MS);
    assert!(drv.stats().read_back_retries > 10);
    assert_eq!(drv.get(1), mhz(950), "the driver believes the firmware");
}

#[test]
fn a_slow_transition_is_waited_for_and_its_latency_measured() {
    let bus = ScmiBus::new(JUNO_R2);
    let mut drv = driver(&bus, Config::default());
    bus.platform().faults.extra_latency_us = 2_000;
    let t0 = bus.now();
    drv.target(&policy(0), mhz(1000), t0).unwrap();
    let c = bus.run_until_done(&mut drv, 10 * US, 100 * MS).unwrap();
    assert_eq!(c.result, Ok(mhz(1000)));
    let lat = c.latency_ns();
    assert!((3_450_000..3_450_000 + 200 * US).contains(&lat), "{lat}");
}

// --- Hand-written replies: malformed discovery answers. ---------------------------------

/// A responder that answers with the model, except message (protocol, message), answered
/// with `words` after a success status and a length of `len` (None: matching the words).
fn patched(cfg: PlatformConfig, proto: u8, msg: u8, words: Vec<u32>, len: Option<u32>) -> ScmiBus {
    let mut model = asym_dvfs::model::scp::ScmiPlatform::new(cfg);
    ScmiBus::with(Responder::Script(Box::new(
        move |m: &mut Ram<SHMEM_WORDS>, now| {
            let h = Header(m.read32(smt::MSG_HEADER));
            if h.protocol_id() == proto && h.message_id() == msg {
                m.write32(smt::LENGTH, len.unwrap_or(8 + 4 * words.len() as u32));
                m.write32(smt::MSG_PAYLOAD, 0);
                for (i, w) in words.iter().enumerate() {
                    m.write32(smt::MSG_PAYLOAD + 4 + 4 * i, *w);
                }
                m.write32(smt::CHANNEL_STATUS, smt::STATUS_FREE);
            } else {
                model.handle(m, Nanos(now));
            }
        },
    )))
}

fn perf_discovery_error(proto: u8, msg: u8, words: Vec<u32>, len: Option<u32>) -> Error {
    let bus = patched(JUNO_R2, proto, msg, words, len);
    let mut chan = bus.channel();
    if proto == PROTOCOL_BASE {
        base::discover(&mut chan, &bus.clock(), 30_000).unwrap_err()
    } else {
        perf::discover(&mut chan, &bus.clock(), 30_000).unwrap_err()
    }
}

#[test]
fn malformed_level_descriptions_are_errors() {
    let lvl = |perf: u32| [perf, 10, 1450];
    let page = |ret: u32, rem: u32, levels: &[u32]| {
        let mut w = vec![ret | (rem << 16)];
        for &l in levels {
            w.extend(lvl(l));
        }
        w
    };
    let cases: Vec<(Vec<u32>, Option<u32>, Error)> = vec![
        (
            page(0, 2, &[]),
            None,
            Error::Malformed {
                what: "DESCRIBE_LEVELS returned no level but more remain",
            },
        ),
        (
            page(0, 0, &[]),
            None,
            Error::Malformed {
                what: "performance domain without levels",
            },
        ),
        (
            page(3, 0, &[600_000_000, 1_000_000_000]),
            None,
            Error::WrongLength {
                expected: 48,
                got: 36,
            },
        ),
        (
            page(2, 0, &[600_000_000, 600_000_000]),
            None,
            Error::Malformed {
                what: "performance levels with equal or decreasing frequencies",
            },
        ),
        (
            page(1, 0, &[0]),
            None,
            Error::Malformed {
                what: "performance level of 0 kHz or beyond 4.29 THz",
            },
        ),
        (
            page(1, 16, &[600_000_000]),
            None,
            Error::Unsupported {
                what: "more than 16 performance levels in a domain",
            },
        ),
        (
            page(1, 0, &[600_000_000]),
            Some(200),
            Error::WrongLength {
                expected: 104,
                got: 200,
            },
        ),
    ];
    for (words, len, want) in cases {
        let got = perf_discovery_error(PROTOCOL_PERF, 4, words.clone(), len);
        assert_eq!(got, want, "{words:x?}");
    }
}

#[test]
fn malformed_attributes_and_protocol_lists_are_errors() {
    // Versions.
    assert_eq!(
        perf_discovery_error(PROTOCOL_PERF, 0, vec![0x5_0000], None),
        Error::Unsupported {
            what: "performance protocol versions above 4.x"
        }
    );
    assert_eq!(
        perf_discovery_error(PROTOCOL_BASE, 0, vec![0x0_0001], None),
        Error::Malformed {
            what: "base protocol major version 0"
        }
    );
    // Domain counts.
    assert_eq!(
        perf_discovery_error(PROTOCOL_PERF, 1, vec![0x1_0000, 0, 0, 0], None),
        Error::Unsupported {
            what: "performance protocol without domains"
        }
    );
    assert_eq!(
        perf_discovery_error(PROTOCOL_PERF, 1, vec![9, 0, 0, 0], None),
        Error::Unsupported {
            what: "more than 8 performance domains"
        }
    );
    // Protocol lists: stops short, overruns, wrong length, an impossible id.
    for (words, want) in [
        (
            vec![0],
            Error::Malformed {
                what: "protocol list ended before the announced number of protocols",
            },
        ),
        (
            vec![7, 0x1413_1211, 0x0017_1615],
            Error::Malformed {
                what: "protocol list longer than the announced number of protocols",
            },
        ),
        (
            vec![6, 0x1413_1211],
            Error::WrongLength {
                expected: 20,
                got: 16,
            },
        ),
        (
            vec![6, 0x1413_1201, 0x0000_1615],
            Error::Malformed {
                what: "protocol id below 0x11 in the protocol list",
            },
        ),
    ] {
        assert_eq!(perf_discovery_error(PROTOCOL_BASE, 6, words, None), want);
    }
}

#[test]
fn the_same_frequency_again_joins_the_request_in_progress() {
    let bus = ScmiBus::new(JUNO_R2);
    let mut drv = driver(&bus, Config::default());
    let t0 = bus.now();
    drv.target(&policy(0), mhz(600), t0).unwrap();
    bus.advance(200 * US);
    drv.poll(bus.now());
    let sent = drv.stats().sent;
    assert_eq!(
        drv.target(&policy(0), mhz(600), bus.now()),
        Ok(Nanos(t0.0 + 1_450_000))
    );
    assert_eq!(drv.stats().sent, sent, "no second LEVEL_SET");
    let done = bus.run(&mut drv, 10 * US, 10 * MS);
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].requested_at, done[0].result), (t0, Ok(mhz(600))));
}
