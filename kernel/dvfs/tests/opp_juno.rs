//! The OPP cross-check and the Juno DT/firmware protocol check. Oracles: SCP-firmware's Juno
//! r2 table against the board data (whose voltages are the legacy SCPI firmware's), the
//! energy model's µW = C × mV² × MHz / 10⁶, and the messages a user must see.

mod common;

use asym_dvfs::juno::{self, DtProtocol, Mismatch, Probe};
use asym_dvfs::model::scp::JUNO_R2;
use asym_dvfs::opp::{cross_check, model_power_uw, Difference, Opp, Source, Table};
use asym_dvfs::scmi::perf;
use asym_dvfs::{Error, Wait};
use asym_sched::types::{Khz, MicroVolt};
use common::*;

fn fw_opps(bus: &ScmiBus, id: u32) -> (Vec<Opp>, u32) {
    let p = perf::discover(&mut bus.channel(), &bus.clock(), 30_000).unwrap();
    let d = p.domain(id).unwrap();
    let opps = d
        .levels()
        .iter()
        .map(|l| Opp {
            freq: l.freq,
            voltage: None,
            power_uw: Some(u64::from(l.power) * 1000),
        })
        .collect();
    (opps, d.max_latency_us())
}

fn v(mhz: u32, mv: u32) -> Opp {
    Opp::with_voltage(Khz(mhz * 1000), MicroVolt(mv * 1000))
}

#[test]
fn model_power_is_the_energy_model_formula() {
    // Juno r2 A72 at 1200 MHz, 1010 mV, C = 450: 450 × 1010² × 1200 / 10⁶ = 550854 µW.
    assert_eq!(
        model_power_uw(450, MicroVolt(1_010_000), Khz(1_200_000)),
        550_854
    );
    assert_eq!(
        model_power_uw(140, MicroVolt(829_000), Khz(450_000)),
        43_296
    );
}

#[test]
fn juno_firmware_power_matches_scmi_voltages_and_differs_from_legacy_ones() {
    let bus = ScmiBus::new(JUNO_R2);
    let (fw, lat) = fw_opps(&bus, 0);
    let firmware = Table {
        source: Source::Firmware,
        opps: &fw,
        latency_us: Some(lat),
    };
    // The SCMI firmware's own voltages (SCP-firmware config_dvfs.c): no power difference
    // beyond its 1 mW truncation.
    let scmi_v = [v(600, 820), v(1000, 900), v(1200, 1000)];
    let board = Table {
        source: Source::Board,
        opps: &scmi_v,
        latency_us: Some(1450),
    };
    let r = cross_check(&[firmware, board], Some(450), 1000);
    assert!(r.is_empty(), "{:?}", r.iter().collect::<Vec<_>>());
    // The legacy SCPI voltages (seed 004, the board data): every level's power differs.
    let legacy = [v(600, 829), v(1000, 909), v(1200, 1010)];
    let board = Table {
        source: Source::Board,
        opps: &legacy,
        latency_us: Some(1450),
    };
    let r = cross_check(&[firmware, board], Some(450), 1000);
    let d: Vec<_> = r.iter().copied().collect();
    assert_eq!(d.len(), 3, "{d:?}");
    assert_eq!(
        d[2],
        Difference::Power {
            freq: Khz(1_200_000),
            firmware_uw: 540_000,
            model_uw: 550_854,
            source: Source::Board
        }
    );
    assert_eq!(
        format!("{}", d[2]),
        "1200000 kHz: firmware power 540000 uW, C*V^2*f with the board data voltage 550854 uW"
    );
}

#[test]
fn missing_frequencies_voltages_and_latencies_are_all_reported() {
    let dt = [v(450, 820), v(800, 900), v(950, 1000)];
    let board = [v(450, 829), v(800, 909), v(1100, 1010)];
    let r = cross_check(
        &[
            Table {
                source: Source::DeviceTree,
                opps: &dt,
                latency_us: Some(1450),
            },
            Table {
                source: Source::Board,
                opps: &board,
                latency_us: Some(1000),
            },
        ],
        Some(140),
        1000,
    );
    let lines: Vec<String> = r.iter().map(|d| d.to_string()).collect();
    assert_eq!(
        lines,
        [
            "950000 kHz is in the DT but not in the board data",
            "1100000 kHz is in the board data but not in the DT",
            "450000 kHz: DT 820000 uV, board data 829000 uV",
            "800000 kHz: DT 900000 uV, board data 909000 uV",
            "transition latency: DT 1450 us, board data 1000 us",
        ]
    );
}

#[test]
fn juno_dt_firmware_mismatch_says_what_to_flash() {
    let scmi = Probe::Scmi { version: 0x2_0000 };
    let silent = Probe::NotScmi(Error::Timeout {
        wait: Wait::Reply,
        waited_us: 30_000,
    });
    assert_eq!(juno::check(DtProtocol::Scmi, scmi), Ok(()));
    let e = juno::check(DtProtocol::Scpi, scmi).unwrap_err();
    assert_eq!(e, Mismatch::ScpiDtScmiFirmware { version: 0x2_0000 });
    let msg = e.to_string();
    assert!(
        msg.contains("juno-r2.dtb") && msg.contains("flash Linux's juno-r2-scmi.dtb as board.dtb"),
        "{msg}"
    );
    assert!(msg.contains("SCMI (base protocol 2.0)"), "{msg}");
    let msg = juno::check(DtProtocol::Scmi, silent)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("does not answer SCMI (timed out after 30000 us"),
        "{msg}"
    );
    assert!(msg.contains("SCP-firmware"), "{msg}");
    let msg = juno::check(DtProtocol::Scpi, silent)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("legacy SCPI firmware"), "{msg}");
    assert_eq!(
        juno::check(DtProtocol::None, scmi),
        Err(Mismatch::NoDvfsInDt)
    );
}

#[test]
fn juno_probe_finds_scmi_firmware_and_times_out_on_a_silent_one() {
    let bus = ScmiBus::new(JUNO_R2);
    assert_eq!(
        juno::probe(&mut bus.channel(), &bus.clock(), 30_000),
        Probe::Scmi { version: 0x2_0000 }
    );
    let bus = ScmiBus::new(JUNO_R2);
    bus.platform().faults.silent = true;
    let p = juno::probe(&mut bus.channel(), &bus.clock(), 3_000);
    assert!(
        matches!(
            p,
            Probe::NotScmi(Error::Timeout {
                wait: Wait::Reply,
                ..
            })
        ),
        "{p:?}"
    );
    // A firmware that writes something that is not an SCMI reply (legacy SCPI answering its
    // own protocol in the same SRAM) is "not SCMI", not a hang.
    let bus = ScmiBus::with(Responder::Script(Box::new(|m, _| {
        use asym_dvfs::io::Mmio;
        m.write32(0x18, 0x0000_0001);
        m.write32(0x04, 1);
    })));
    let p = juno::probe(&mut bus.channel(), &bus.clock(), 3_000);
    assert!(
        matches!(p, Probe::NotScmi(Error::WrongHeader { .. })),
        "{p:?}"
    );
}
