//! Deterministic fuzzing of every firmware reply: random words in the SCMI shared memory,
//! random mailbox states and read-back words, random faults. Each run is caught with
//! `catch_unwind`; the oracle is zero panics, every completion naming a real domain, a
//! successful completion carrying one of the domain's frequencies, and — once the firmware
//! behaves again — a request that succeeds (the driver recovers from whatever it saw).

mod common;

use std::cell::Cell;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;

use asym_dvfs::hi3660::{self, Domain};
use asym_dvfs::hi6220;
use asym_dvfs::io::{Mmio, Ram};
use asym_dvfs::model::hi3660::{Lpm3, Mailbox};
use asym_dvfs::model::hi6220::{Ipc, Mcu};
use asym_dvfs::model::scp::{ScmiPlatform, JUNO_R2};
use asym_dvfs::scmi::perf::{self, Config, ScmiPerf};
use asym_dvfs::scmi::{base, smt};
use asym_dvfs::Error;
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

static JUNO: BoardDesc = BoardDesc {
    name: "juno",
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

fn kind(e: &Error) -> String {
    format!("{e:?}")
        .split([' ', '{', '('])
        .next()
        .unwrap_or("")
        .to_string()
}

/// Lets the model answer, then (with `rate` percent) overwrites 1–4 words of the channel with
/// random values or bit flips, or (1 in 8 of those) fills the whole channel with noise.
fn mutating_responder(seed: u64, rate: Rc<Cell<u64>>) -> Responder {
    let mut model = ScmiPlatform::new(JUNO_R2);
    let mut rng = Rng(seed | 1);
    Responder::Script(Box::new(move |m: &mut Ram<SHMEM_WORDS>, now| {
        model.handle(m, Nanos(now));
        if !rng.chance(rate.get()) {
            return;
        }
        if rng.chance(12) {
            for i in 0..SHMEM_WORDS {
                m.write32(4 * i, rng.next() as u32);
            }
            return;
        }
        for _ in 0..1 + rng.below(4) {
            let word = match rng.below(6) {
                0 => smt::CHANNEL_STATUS / 4,
                1 => smt::LENGTH / 4,
                2 => smt::MSG_HEADER / 4,
                3 => smt::MSG_PAYLOAD / 4,
                _ => (smt::MSG_PAYLOAD / 4) + 1 + rng.below(24) as usize,
            };
            let old = m.read32(4 * word);
            let new = match rng.below(4) {
                0 => rng.next() as u32,
                1 => old ^ (1 << rng.below(32)),
                2 => old.wrapping_add(rng.below(9) as u32).wrapping_sub(4),
                _ => rng.below(64) as u32,
            };
            m.write32(4 * word, new);
        }
    }))
}

#[test]
fn fuzz_scmi_discovery_and_level_changes_never_panic_and_recover() {
    const RUNS: u64 = 4000;
    let mut panics = 0;
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    let mut completions = 0u64;
    for seed in 0..RUNS {
        let r = catch_unwind(AssertUnwindSafe(|| {
            // Discovery is thirty-odd messages: mutate few of them (none in half the runs) so
            // that most runs get to the level changes, which then see many mutations.
            let rate = Rc::new(Cell::new(if seed % 2 == 0 { 0 } else { 3 }));
            let bus = ScmiBus::with(mutating_responder(seed * 7919 + 1, rate.clone()));
            let mut rng = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
            bus.reply_delay_ns.set(rng.below(50) * US);
            let mut chan = bus.channel();
            let clock = bus.clock();
            let stage = base::discover(&mut chan, &clock, 2_000)
                .and_then(|_| perf::discover(&mut chan, &clock, 2_000));
            let info = match stage {
                Ok(i) => i,
                Err(e) => return (format!("discovery {}", kind(&e)), 0),
            };
            let cfg = Config {
                reply_timeout_us: 2_000,
                busy_timeout_us: 4_000,
                read_back_timeout_us: 3_000,
                ..Config::default()
            };
            let mut drv = match ScmiPerf::new(chan, &info, &[0, 1], cfg, &clock) {
                Ok(d) => d,
                Err(e) => return (format!("probe {}", kind(&e)), 0),
            };
            rate.set(30);
            let mut n = 0u64;
            for _ in 0..6 {
                let pd = rng.below(2) as usize;
                let p = CpufreqPolicy::new(&JUNO, pd, Nanos(0)).unwrap();
                let table: Vec<Khz> = p.table().iter().map(|e| e.frequency).collect();
                let f = table[rng.below(table.len() as u64) as usize];
                let _ = drv.target(&p, f, bus.now());
                for _ in 0..rng.below(400) {
                    bus.advance(rng.below(40) * US + 1);
                    while let Some(c) = drv.poll(bus.now()) {
                        n += 1;
                        assert!(c.pd < 2, "{c:?}");
                        if let Ok(got) = c.result {
                            let t = CpufreqPolicy::new(&JUNO, c.pd, Nanos(0)).unwrap();
                            assert!(t.table().iter().any(|e| e.frequency == got), "{c:?}");
                        }
                    }
                }
            }
            // The firmware behaves again (and frees the channel, as after a reset): a
            // request completes with its frequency.
            *bus.responder.borrow_mut() = Responder::Model(Box::new(ScmiPlatform::new(JUNO_R2)));
            bus.keep_doorbell.set(false);
            bus.shmem
                .borrow_mut()
                .write32(smt::CHANNEL_STATUS, smt::STATUS_FREE);
            let bits = asym_dvfs::model::mhu::to_scp_pending(&*bus.mhu.borrow(), 1);
            asym_dvfs::model::mhu::scp_clear(&mut *bus.mhu.borrow_mut(), 1, bits);
            bus.rung_at.set(None);
            let p = CpufreqPolicy::new(&JUNO, 1, Nanos(0)).unwrap();
            // Let whatever is still outstanding finish or time out first.
            let _ = bus.run(&mut drv, 100 * US, 20 * MS);
            drv.target(&p, Khz(450_000), bus.now()).unwrap();
            let c = bus
                .run_until_done(&mut drv, 10 * US, 40 * MS)
                .expect("recovers");
            assert_eq!(c.result, Ok(Khz(450_000)), "seed {seed}");
            ("ran".to_string(), n)
        }));
        match r {
            Ok((o, n)) => {
                *outcomes.entry(o).or_default() += 1;
                completions += n;
            }
            Err(_) => panics += 1,
        }
    }
    eprintln!("scmi fuzz: {RUNS} runs, {completions} completions, outcomes {outcomes:?}");
    assert_eq!(panics, 0);
    assert!(
        outcomes.get("ran").copied().unwrap_or(0) > RUNS / 2,
        "{outcomes:?}"
    );
    assert!(
        outcomes.len() > 5,
        "the fuzz reaches many error kinds: {outcomes:?}"
    );
}

#[test]
fn fuzz_random_shared_memory_reply_never_panics_the_channel_or_the_model() {
    const RUNS: u64 = 100_000;
    let mut panics = 0;
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    let mut rng = Rng(0x1234_5678);
    for _ in 0..RUNS {
        let mut words: Vec<u32> = (0..SHMEM_WORDS)
            .map(|_| {
                if rng.chance(30) {
                    rng.below(16) as u32
                } else {
                    rng.next() as u32
                }
            })
            .collect();
        let proto = [0x10u8, 0x13][rng.below(2) as usize];
        let msg = rng.below(10) as u8;
        // Bias towards replies that pass the first checks, to reach the later ones.
        if rng.chance(60) {
            words[smt::MSG_HEADER / 4] = asym_dvfs::scmi::Header::command(proto, msg, 0).0;
        }
        words[smt::CHANNEL_STATUS / 4] = match rng.below(10) {
            0..=4 => smt::STATUS_FREE,
            5 => smt::STATUS_FREE | smt::STATUS_ERROR,
            _ => words[smt::CHANNEL_STATUS / 4],
        };
        if rng.chance(50) {
            words[smt::LENGTH / 4] = 8 + 4 * rng.below(25) as u32;
        }
        let r = catch_unwind(AssertUnwindSafe(|| {
            let w2 = words.clone();
            let bus = ScmiBus::with(Responder::Script(Box::new(move |m, _| {
                for (i, w) in w2.iter().enumerate() {
                    m.write32(4 * i, *w);
                }
            })));
            let mut chan = bus.channel();
            let r = chan.transact(proto, msg, &[0, 1], &bus.clock(), 200);
            let k = match r {
                Ok(rep) => match rep.expect(1) {
                    Ok(_) => "ok".to_string(),
                    Err(e) => kind(&e),
                },
                Err(e) => kind(&e),
            };
            // The platform model facing the same garbage as a request.
            let mut ram: Ram<SHMEM_WORDS> = Ram::new();
            for (i, w) in words.iter().enumerate() {
                ram.write32(4 * i, *w);
            }
            ram.write32(smt::CHANNEL_STATUS, 0);
            ScmiPlatform::new(JUNO_R2).handle(&mut ram, Nanos(0));
            k
        }));
        match r {
            Ok(k) => *kinds.entry(k).or_default() += 1,
            Err(_) => panics += 1,
        }
    }
    eprintln!("shared-memory fuzz: {RUNS} random replies, {kinds:?}");
    assert_eq!(panics, 0);
}

#[test]
fn fuzz_hi3660_mailbox_states_and_read_backs_never_panic_and_recover() {
    const RUNS: u64 = 3000;
    let mut panics = 0;
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    for seed in 0..RUNS {
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut rng = Rng(seed * 31 + 7);
            let bus = Hi3660Bus::new();
            let doms = [0usize, 1].map(|pd| {
                let f: Vec<Khz> = HIKEY960.perf_domains[pd]
                    .opps
                    .iter()
                    .map(|o| o.freq)
                    .collect();
                Domain::new(pd as u32, &f).unwrap()
            });
            let mut cfg = hi3660::Config::HIKEY960;
            cfg.ack_timeout_us = 3_000;
            cfg.read_back_timeout_us = 2_000;
            let mut drv =
                hi3660::StubClock::new(MboxH(&bus), StubH(&bus), &doms, cfg, &Hi3660Clock(&bus))
                    .unwrap();
            let mut out = Vec::new();
            for _ in 0..8 {
                let pd = rng.below(2) as usize;
                let p = CpufreqPolicy::new(&HIKEY960, pd, Nanos(0)).unwrap();
                let f = p.table()[rng.below(5) as usize].frequency;
                let _ = drv.target(&p, f, bus.now());
                for _ in 0..rng.below(200) {
                    if rng.chance(10) {
                        let off = match rng.below(3) {
                            0 => 0x350,
                            1 => 0x70 + 4 * rng.below(2) as usize,
                            _ => 0x340 + 4 * rng.below(16) as usize,
                        };
                        if off < 0x100 {
                            bus.stub.borrow_mut().write32(off, rng.next() as u32);
                        } else {
                            bus.mbox.borrow_mut().write32(off, rng.next() as u32);
                        }
                    }
                    if rng.chance(2) {
                        let mut l = bus.lpm3.borrow_mut();
                        l.faults.no_ack = rng.chance(50);
                        l.faults.ignore = rng.chance(30);
                        l.faults.report_mhz = rng.chance(20).then(|| rng.next() as u32);
                    }
                    bus.advance(rng.below(60) * US + 1);
                    while let Some(c) = drv.poll(bus.now()) {
                        assert!(c.pd < 2);
                        out.push(c.result.map_or_else(|e| kind(&e), |_| "ok".into()));
                    }
                }
            }
            // Recovery: a sane mailbox and LPM3.
            *bus.lpm3.borrow_mut() = Lpm3::hikey960();
            let src = bus.mbox.borrow().read32(0x340);
            bus.mbox.borrow_mut().write32(0x350, 0x20);
            if src & 1 == 0 {
                bus.mbox.borrow_mut().write32(0x340, 1);
            }
            // Let whatever is still outstanding finish or time out first.
            for _ in 0..200 {
                bus.advance(100 * US);
                while drv.poll(bus.now()).is_some() {}
            }
            let p = CpufreqPolicy::new(&HIKEY960, 0, Nanos(0)).unwrap();
            drv.target(&p, Khz(999_000), bus.now()).unwrap();
            let c = bus
                .run_until_done(&mut drv, 10 * US, 20 * MS)
                .expect("recovers");
            assert_eq!(c.result, Ok(Khz(999_000)), "seed {seed}");
            out
        }));
        match r {
            Ok(v) => {
                for k in v {
                    *kinds.entry(k).or_default() += 1;
                }
            }
            Err(_) => panics += 1,
        }
    }
    eprintln!("hi3660 fuzz: {RUNS} runs, {kinds:?}");
    assert_eq!(panics, 0);
    assert!(kinds.len() >= 3, "{kinds:?}");
}

#[test]
fn fuzz_hi6220_slot_states_and_sram_never_panic_and_recover() {
    const RUNS: u64 = 3000;
    let mut panics = 0;
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    for seed in 0..RUNS {
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut rng = Rng(seed * 131 + 3);
            let bus = Hi6220Bus::new();
            let opps: Vec<Khz> = HIKEY.perf_domains[0].opps.iter().map(|o| o.freq).collect();
            let mut cfg = hi6220::Config::HIKEY;
            cfg.ack_timeout_us = 3_000;
            cfg.read_back_timeout_us = 2_000;
            let mut drv =
                hi6220::StubClock::new(SramH(&bus), BufH(&bus), IpcH(&bus), &opps, cfg).unwrap();
            let mut out = Vec::new();
            let p = CpufreqPolicy::new(&HIKEY, 0, Nanos(0)).unwrap();
            for _ in 0..8 {
                let f = p.table()[rng.below(5) as usize].frequency;
                let _ = drv.target(&p, f, bus.now());
                for _ in 0..rng.below(200) {
                    if rng.chance(10) {
                        let (region, off) = match rng.below(5) {
                            0 => (1, 0x40),
                            1 => (0, 0x17cc),
                            2 => (0, 0x1724),
                            3 => (0, 0x1b30 + 4 * rng.below(3) as usize),
                            _ => (2, 0x400 + 4 * rng.below(8) as usize),
                        };
                        let v = if rng.chance(30) {
                            0xaeae_aeae
                        } else {
                            rng.next() as u32
                        };
                        match region {
                            0 => bus.sram.borrow_mut().write32(off, v),
                            1 => bus.buf.borrow_mut().write32(off, v),
                            _ => {
                                let _ = Ipc::write(&mut *bus.ipc.borrow_mut(), off, v);
                            }
                        }
                    }
                    if rng.chance(2) {
                        let mut m = bus.mcu.borrow_mut();
                        m.faults.no_ack = rng.chance(40);
                        m.faults.ignore = rng.chance(30);
                        m.faults.report_khz = rng.chance(20).then(|| rng.next() as u32);
                    }
                    bus.advance(rng.below(60) * US + 1);
                    while let Some(c) = drv.poll(bus.now()) {
                        assert_eq!(c.pd, 0);
                        out.push(c.result.map_or_else(|e| kind(&e), |_| "ok".into()));
                    }
                }
            }
            *bus.mcu.borrow_mut() = Mcu::hikey();
            bus.mcu
                .borrow()
                .init(&mut *bus.sram.borrow_mut(), &mut *bus.buf.borrow_mut());
            bus.sram.borrow_mut().write32(0x1b30, 0);
            for _ in 0..200 {
                bus.advance(100 * US);
                while drv.poll(bus.now()).is_some() {}
            }
            drv.target(&p, Khz(729_000), bus.now()).unwrap();
            let c = bus
                .run_until_done(&mut drv, 10 * US, 20 * MS)
                .expect("recovers");
            assert_eq!(c.result, Ok(Khz(729_000)), "seed {seed}");
            out
        }));
        match r {
            Ok(v) => {
                for k in v {
                    *kinds.entry(k).or_default() += 1;
                }
            }
            Err(_) => panics += 1,
        }
    }
    eprintln!("hi6220 fuzz: {RUNS} runs, {kinds:?}");
    assert_eq!(panics, 0);
    assert!(kinds.len() >= 3, "{kinds:?}");
}

#[test]
fn fuzz_mailbox_models_take_any_register_write() {
    let mut rng = Rng(42);
    let mut panics = 0;
    for _ in 0..20_000 {
        let r = catch_unwind(AssertUnwindSafe(|| {
            let mut mbox: Ram<{ 0x1000 / 4 }> = Ram::new();
            let mut stub: Ram<{ 0x100 / 4 }> = Ram::new();
            Mailbox::reset(&mut mbox);
            let hw = Mailbox::default();
            let mut lpm3 = Lpm3::hikey960();
            let mut sram: Ram<{ 0x2000 / 4 }> = Ram::new();
            let mut buf: Ram<{ 0x800 / 4 }> = Ram::new();
            let mut ipc: Ram<{ 0x1000 / 4 }> = Ram::new();
            let mut mcu = Mcu::hikey();
            for i in 0..64u64 {
                let off = (rng.below(0x1100) as usize) & !3;
                let v = rng.next() as u32;
                let _ = hw.write(&mut mbox, off, v);
                lpm3.on_message(&mut mbox, Nanos(i * 1000));
                lpm3.advance(&mut stub, Nanos(i * 1000));
                if let Some(asym_dvfs::model::hi6220::Event::ToMcu { bits }) =
                    Ipc::write(&mut ipc, off, v)
                {
                    mcu.on_interrupt(bits, &mut sram, &mut buf, &mut ipc, Nanos(i * 1000));
                }
                buf.write32((rng.below(0x800) as usize) & !3, rng.next() as u32);
                sram.write32((rng.below(0x2000) as usize) & !3, rng.next() as u32);
                mcu.advance(&mut sram, Nanos(i * 1000));
            }
        }));
        if r.is_err() {
            panics += 1;
        }
    }
    assert_eq!(panics, 0);
}
