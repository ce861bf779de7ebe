//! The board's DVFS firmware driver: built from the device tree's transport
//! (`crate::dt::dvfs`), probed, checked against the DT's operating points, and handed to cpufreq.
//!
//! Mechanism only: the protocols are `asym_dvfs`'s (the same code the host tests run against
//! the firmware models). This module maps each region ([`Region`]: the board's device memory,
//! or the QEMU firmware stand-in's, `crate::drivers::fw_standin`), starts the stand-in when the
//! DT describes one, runs discovery with a bounded wait (boot time: the scheduler's tick is not
//! running yet), and prints what it found and every difference between the firmware's and the
//! DT's operating points. Linux: `drivers/firmware/arm_scmi/driver.c` probe, `scmi-cpufreq.c`
//! `scmi_cpufreq_init`, the HiSilicon stub clocks' probes.

extern crate alloc;

use alloc::vec::Vec;
use core::fmt;

use asym_dvfs::io::{Clock, Mmio};
use asym_dvfs::juno::{self, DtProtocol, Probe};
use asym_dvfs::opp::{self, Opp, Source, Table};
use asym_dvfs::scmi::perf::{self, PowerUnit, ScmiPerf};
use asym_dvfs::scmi::{base, Channel, MhuDoorbell};
use asym_dvfs::{hi3660, hi6220, AnyDriver, Error};
use asym_sched::topology::BoardDesc;
use asym_sched::types::{Khz, Nanos};

use crate::drivers::dvfs_mmio::DeviceRegion;
use crate::drivers::fw_standin::{self, StandinRegion, StartError};
use crate::dt::dvfs::{DvfsDt, ScmiChannelDt, Transport};
use crate::dt::{MemRange, Platform};

/// How long one discovery message may take at boot (Linux's SCMI mailbox timeout, 30 ms).
const DISCOVERY_TIMEOUT_US: u64 = 30_000;

/// A DVFS region: the board's device memory, or the firmware stand-in's.
#[derive(Debug)]
pub enum Region {
    Device(DeviceRegion),
    Standin(StandinRegion),
}

impl Mmio for Region {
    fn read32(&self, offset: usize) -> u32 {
        match self {
            Region::Device(r) => r.read32(offset),
            Region::Standin(r) => r.read32(offset),
        }
    }

    fn write32(&mut self, offset: usize, value: u32) {
        match self {
            Region::Device(r) => r.write32(offset, value),
            Region::Standin(r) => r.write32(offset, value),
        }
    }

    fn size(&self) -> usize {
        match self {
            Region::Device(r) => r.size(),
            Region::Standin(r) => r.size(),
        }
    }

    fn wmb(&self) {
        match self {
            Region::Device(r) => r.wmb(),
            Region::Standin(r) => r.wmb(),
        }
    }

    fn rmb(&self) {
        match self {
            Region::Device(r) => r.rmb(),
            Region::Standin(r) => r.rmb(),
        }
    }
}

/// The board's firmware cpufreq driver.
pub type FirmwareDriver = AnyDriver<Region>;

/// The kernel's clock (the generic counter) for the drivers' bounded waits.
#[derive(Clone, Copy, Debug)]
pub struct CounterClock;

impl Clock for CounterClock {
    fn now(&self) -> Nanos {
        crate::sched::now()
    }

    fn relax(&self) {
        crate::arch::aarch64::cpu_regs::cpu_yield();
    }
}

/// Why there is no firmware driver.
#[derive(Debug)]
pub enum ProbeError {
    /// The DT's DVFS description is unusable (boxed: `DtError` carries its text).
    Dt(alloc::boxed::Box<crate::dt::DtError>),
    /// The stand-in did not start.
    Standin(StartError),
    /// A Juno DT that does not match the firmware.
    Juno(juno::Mismatch),
    /// The transport is described but not driven (legacy SCPI).
    NotDriven(&'static str),
    /// The policies and the DT's firmware domains disagree.
    Domains(&'static str, usize),
    /// The driver failed.
    Driver(Error),
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeError::Dt(e) => write!(f, "{e}"),
            ProbeError::Standin(e) => write!(f, "{e}"),
            ProbeError::Juno(m) => write!(f, "{m}"),
            ProbeError::NotDriven(what) => write!(f, "{what} is not driven by asym"),
            ProbeError::Domains(what, pd) => write!(f, "cpufreq policy {pd}: {what}"),
            ProbeError::Driver(e) => write!(f, "{e}"),
        }
    }
}

impl From<Error> for ProbeError {
    fn from(e: Error) -> Self {
        ProbeError::Driver(e)
    }
}

/// Builds the firmware driver for `plat`'s DVFS transport and the policies of `board` (the
/// DT's OPP tables): `Ok(None)` when the DT describes no DVFS firmware.
pub fn probe(plat: &Platform, board: &BoardDesc) -> Result<Option<FirmwareDriver>, ProbeError> {
    let dvfs = match &plat.dvfs {
        Ok(None) => return Ok(None),
        Ok(Some(d)) => d,
        Err(e) => return Err(ProbeError::Dt(alloc::boxed::Box::new(e.clone()))),
    };
    if let Some(s) = dvfs.standin {
        fw_standin::start(plat, dvfs, s).map_err(ProbeError::Standin)?;
        crate::println!(
            "dvfs: firmware stand-in running on vCPU MPIDR {:#x} (doorbell SGI {})",
            s.mpidr,
            s.doorbell_sgi
        );
    }
    if let Some(r) = dvfs.in_ram {
        crate::println!(
            "dvfs: {} region {} lies in RAM (/memory) and no /reserved-memory keeps it: it must be a carve-out",
            dvfs.transport.name(),
            r
        );
    }
    report_board_transport(dvfs);
    let domains = domain_of_pd(dvfs, board)?;
    let clock = CounterClock;
    let drv = match dvfs.transport {
        Transport::Scmi { base, perf } => scmi(dvfs, board, base, perf, &domains, &clock)?,
        Transport::Scpi { sram, mhu } => return Err(scpi(dvfs, sram, mhu, &clock)),
        Transport::Hi3660 {
            mbox,
            stub,
            channel,
            dst_irq,
            ack_irq,
        } => {
            let cfg = hi3660::Config {
                channel,
                dst_irq,
                ack_irq,
                latency_us: max_latency_us(board).unwrap_or(300),
                ..hi3660::Config::HIKEY960
            };
            let doms: Vec<hi3660::Domain> = (0..board.perf_domains.len())
                .map(|pd| hi3660::Domain::new(domains[pd], &opp_freqs(board, pd)))
                .collect::<Result<_, _>>()?;
            AnyDriver::Hi3660(hi3660::StubClock::new(
                region(dvfs, mbox),
                region(dvfs, stub),
                &doms,
                cfg,
                &clock,
            )?)
        }
        Transport::Hi6220 {
            sram,
            ipc,
            buf,
            slot,
            dst_irq,
            ack_irq,
        } => {
            if board.perf_domains.len() != 1 {
                return Err(ProbeError::Domains(
                    "the Hi6220 stub clock drives one domain for all CPUs",
                    1,
                ));
            }
            let cfg = hi6220::Config {
                slot,
                dst_irq,
                ack_irq,
                latency_us: max_latency_us(board).unwrap_or(500),
                ..hi6220::Config::HIKEY
            };
            AnyDriver::Hi6220(hi6220::StubClock::new(
                region(dvfs, sram),
                region(dvfs, buf),
                region(dvfs, ipc),
                &opp_freqs(board, 0),
                cfg,
            )?)
        }
    };
    Ok(Some(drv))
}

/// On a real board: says when the DT's transport is none of those the board crate lists
/// (the DT is what the firmware was built with, so its transport is the one driven).
fn report_board_transport(dvfs: &DvfsDt) {
    let listed = crate::boot::board().dvfs;
    if listed.is_empty() || listed.iter().any(|t| t.matches(&dvfs.transport)) {
        return;
    }
    let mut regions: heapless::String<160> = heapless::String::new();
    for r in dvfs.regions() {
        let _ = fmt::Write::write_fmt(&mut regions, format_args!(" {r}"));
    }
    crate::println!(
        "dvfs: the device tree's {} (regions{}) is not one board {} lists ({} transports, docs/boards/{}.md): driving the device tree's",
        dvfs.transport.name(),
        regions.as_str(),
        crate::boot::board().name,
        listed.len(),
        crate::boot::board().name
    );
}

/// A region of the transport, as the stand-in's when there is one.
fn region(dvfs: &DvfsDt, range: MemRange) -> Region {
    if dvfs.standin.is_some() {
        // SAFETY: a region of the DT's DVFS transport, mapped Device by `mmu::init_boot_cpu`;
        // the stand-in firmware shares it by design.
        Region::Standin(unsafe { StandinRegion::new(range, fw_standin::hw_of(dvfs, range)) })
    } else {
        // SAFETY: as above; the board's firmware shares it by design.
        Region::Device(unsafe { DeviceRegion::new(range) })
    }
}

fn channel(dvfs: &DvfsDt, c: ScmiChannelDt) -> Result<Channel<Region, MhuDoorbell<Region>>, Error> {
    let db = MhuDoorbell::new(
        region(dvfs, c.doorbell.regs),
        c.doorbell.channel,
        c.doorbell.doorbell,
    )?;
    Channel::new(region(dvfs, c.shmem), db)
}

/// The firmware domain of each policy: the `clocks` cell of its CPUs, which must agree.
fn domain_of_pd(dvfs: &DvfsDt, board: &BoardDesc) -> Result<Vec<u32>, ProbeError> {
    let mut out = Vec::new();
    for pd in 0..board.perf_domains.len() {
        let mut dom = None;
        for (i, c) in board.cpus.iter().enumerate() {
            if usize::from(c.perf_domain) != pd {
                continue;
            }
            match (dom, dvfs.cpu_domain.get(i).copied().flatten()) {
                (_, None) => {
                    return Err(ProbeError::Domains(
                        "a CPU has no `clocks` naming the firmware's clock provider",
                        pd,
                    ))
                }
                (None, Some(d)) => dom = Some(d),
                (Some(a), Some(b)) if a != b => {
                    return Err(ProbeError::Domains(
                        "its CPUs' `clocks` name different firmware domains",
                        pd,
                    ))
                }
                _ => {}
            }
        }
        out.push(dom.ok_or(ProbeError::Domains("no CPU", pd))?);
    }
    Ok(out)
}

fn opp_freqs(board: &BoardDesc, pd: usize) -> Vec<Khz> {
    board.perf_domains[pd].opps.iter().map(|o| o.freq).collect()
}

fn max_latency_us(board: &BoardDesc) -> Option<u64> {
    board
        .perf_domains
        .iter()
        .map(|d| d.transition_latency_ns / 1000)
        .max()
        .filter(|&l| l > 0)
}

fn scmi(
    dvfs: &DvfsDt,
    board: &BoardDesc,
    base_ch: ScmiChannelDt,
    perf_ch: ScmiChannelDt,
    domains: &[u32],
    clock: &CounterClock,
) -> Result<FirmwareDriver, ProbeError> {
    let mut bc = channel(dvfs, base_ch)?;
    let probe = juno::probe(&mut bc, clock, DISCOVERY_TIMEOUT_US);
    juno::check(DtProtocol::Scmi, probe).map_err(ProbeError::Juno)?;
    let b = base::discover(&mut bc, clock, DISCOVERY_TIMEOUT_US)?;
    let mut list: heapless::String<96> = heapless::String::new();
    for p in b.protocols() {
        let _ = fmt::Write::write_fmt(&mut list, format_args!(" {p:#x}"));
    }
    crate::println!(
        "dvfs: SCMI base protocol {}.{}, vendor \"{}\", implementation {:#x}, protocols{}",
        b.version >> 16,
        b.version & 0xffff,
        b.vendor.as_str(),
        b.impl_version,
        list.as_str()
    );
    if !b.implements(asym_dvfs::scmi::PROTOCOL_PERF) {
        return Err(Error::Unsupported {
            what: "the SCMI performance protocol (0x13)",
        }
        .into());
    }
    let mut pc = if perf_ch == base_ch {
        bc
    } else {
        channel(dvfs, perf_ch)?
    };
    let info = perf::discover(&mut pc, clock, DISCOVERY_TIMEOUT_US)?;
    crate::println!(
        "dvfs: SCMI performance protocol {}.{}, {} domains",
        info.version >> 16,
        info.version & 0xffff,
        info.nr_domains()
    );
    for d in info.domains() {
        let mut mhz: heapless::String<128> = heapless::String::new();
        for l in d.levels() {
            let _ = fmt::Write::write_fmt(&mut mhz, format_args!(" {}", l.freq.0 / 1000));
        }
        crate::println!(
            "dvfs: SCMI domain {} \"{}\": MHz{}, latency {} us",
            d.id,
            d.name.as_str(),
            mhz.as_str(),
            d.max_latency_us()
        );
    }
    for (pd, &id) in domains.iter().enumerate() {
        let Some(d) = info.domain(id) else {
            return Err(ProbeError::Domains(
                "names a firmware domain the firmware does not have",
                pd,
            ));
        };
        let to_uw = match info.power_unit {
            PowerUnit::MilliWatt => Some(1000),
            PowerUnit::MicroWatt => Some(1),
            PowerUnit::Abstract => None,
        };
        let fw: Vec<Opp> = d
            .levels()
            .iter()
            .map(|l| Opp {
                freq: l.freq,
                voltage: None,
                power_uw: to_uw.map(|m| u64::from(l.power) * m),
            })
            .collect();
        report_opps(board, pd, &fw, d.max_latency_us(), to_uw.unwrap_or(1));
    }
    Ok(AnyDriver::Scmi(ScmiPerf::new(
        pc,
        &info,
        domains,
        perf::Config::default(),
        clock,
    )?))
}

/// Prints the differences between the firmware's and the DT's operating points of policy `pd`.
fn report_opps(board: &BoardDesc, pd: usize, fw: &[Opp], fw_latency_us: u32, resolution: u64) {
    let d = &board.perf_domains[pd];
    let dt: Vec<Opp> = d
        .opps
        .iter()
        .map(|o| Opp::with_voltage(o.freq, o.voltage))
        .collect();
    let coefficient = board
        .cpus
        .iter()
        .filter(|c| usize::from(c.perf_domain) == pd)
        .find_map(|c| c.dynamic_power_coefficient);
    let r = opp::cross_check(
        &[
            Table {
                source: Source::Firmware,
                opps: fw,
                latency_us: Some(fw_latency_us),
            },
            Table {
                source: Source::DeviceTree,
                opps: &dt,
                latency_us: Some((d.transition_latency_ns / 1000) as u32),
            },
        ],
        coefficient,
        resolution,
    );
    if r.is_empty() {
        crate::println!("dvfs: {}: firmware and DT operating points agree", d.name);
    }
    for diff in r.iter() {
        crate::println!("dvfs: {}: {}", d.name, diff);
    }
    if r.dropped > 0 {
        crate::println!("dvfs: {}: {} more differences", d.name, r.dropped);
    }
}

/// A DT describing legacy SCPI: probe for SCMI where Juno's SCMI firmware has its base channel
/// (the start of the same SRAM, MHU channel 0 doorbell 0: `juno-scmi.dtsi`) and say what to
/// flash.
fn scpi(dvfs: &DvfsDt, sram: MemRange, mhu: MemRange, clock: &CounterClock) -> ProbeError {
    let probe_ch = ScmiChannelDt {
        shmem: MemRange {
            base: sram.base & !0xfff,
            size: 0x80,
        },
        doorbell: crate::dt::dvfs::MhuDoorbellDt {
            regs: mhu,
            channel: 0,
            doorbell: 0,
        },
    };
    let probe = match channel(dvfs, probe_ch) {
        Ok(mut c) => juno::probe(&mut c, clock, DISCOVERY_TIMEOUT_US),
        Err(e) => Probe::NotScmi(e),
    };
    match juno::check(DtProtocol::Scpi, probe) {
        Err(m) => ProbeError::Juno(m),
        Ok(()) => ProbeError::NotDriven("SCPI (arm,scpi)"),
    }
}
