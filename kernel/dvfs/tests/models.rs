//! The firmware and mailbox models themselves: they are the oracles of the driver tests and
//! the firmware of the QEMU stand-in, so their behaviour is checked against the sources they
//! were written from (the SCMI specification / SCP-firmware's handlers, the register
//! semantics Linux's mailbox drivers rely on).

use asym_dvfs::hi3660::regs as h3;
use asym_dvfs::hi6220::regs as h6;
use asym_dvfs::io::{Mmio, Ram};
use asym_dvfs::model::hi3660::{Event, Lpm3, Mailbox};
use asym_dvfs::model::hi6220::Ipc;
use asym_dvfs::model::mhu::{self, Ring};
use asym_dvfs::model::scp::{Handled, ScmiPlatform, JUNO_R2};
use asym_dvfs::scmi::{smt, Header, Status};
use asym_sched::types::Nanos;

/// Writes a command into `m` the way an agent would and lets the platform answer it.
fn ask(p: &mut ScmiPlatform, proto: u8, msg: u8, params: &[u32]) -> (Status, Vec<u32>) {
    let mut m: Ram<32> = Ram::new();
    m.write32(smt::CHANNEL_STATUS, 0);
    m.write32(smt::LENGTH, 4 + 4 * params.len() as u32);
    m.write32(smt::MSG_HEADER, Header::command(proto, msg, 9).0);
    for (i, w) in params.iter().enumerate() {
        m.write32(smt::MSG_PAYLOAD + 4 * i, *w);
    }
    let h = p.handle(&mut m, Nanos(0));
    assert!(matches!(h, Handled::Answered { .. }));
    assert_eq!(m.read32(smt::CHANNEL_STATUS) & 1, 1, "handed back");
    assert_eq!(
        m.read32(smt::MSG_HEADER),
        Header::command(proto, msg, 9).0,
        "echoed"
    );
    let len = m.read32(smt::LENGTH) as usize;
    let st = Status::from_i32(m.read32(smt::MSG_PAYLOAD) as i32);
    let ret = (0..(len - 8) / 4).map(|i| m.read32(0x20 + 4 * i)).collect();
    (st, ret)
}

#[test]
fn scmi_model_answers_errors_as_the_specification_and_scp_firmware_do() {
    let mut p = ScmiPlatform::new(JUNO_R2);
    assert_eq!(
        ask(&mut p, 0x13, 7, &[0, 1234]).0,
        Status::OutOfRange,
        "not an OPP"
    );
    assert_eq!(
        ask(&mut p, 0x13, 7, &[3, 600_000_000]).0,
        Status::NotFound,
        "no domain 3"
    );
    assert_eq!(
        ask(&mut p, 0x13, 7, &[0]).0,
        Status::ProtocolError,
        "payload size"
    );
    assert_eq!(
        ask(&mut p, 0x13, 4, &[0, 3]).0,
        Status::InvalidParameters,
        "index past end"
    );
    assert_eq!(
        ask(&mut p, 0x13, 0x2a, &[]).0,
        Status::NotFound,
        "unknown message"
    );
    assert_eq!(
        ask(&mut p, 0x42, 0, &[]).0,
        Status::NotSupported,
        "unknown protocol"
    );
    assert_eq!(ask(&mut p, 0x10, 0, &[]), (Status::Success, vec![0x2_0000]));
    // LEVEL_SET is answered at once; the level changes 1450 µs later.
    let (st, _) = ask(&mut p, 0x13, 7, &[1, 450_000_000]);
    assert_eq!(st, Status::Success);
    assert_eq!(ask(&mut p, 0x13, 8, &[1]).1, [950_000_000]);
    p.advance(Nanos(1_449_999));
    assert_eq!(p.freq_khz(1), Some(950_000));
    p.advance(Nanos(1_450_000));
    assert_eq!(ask(&mut p, 0x13, 8, &[1]).1, [450_000_000]);
    // A doorbell with the channel still free is not a message.
    let mut m: Ram<32> = Ram::new();
    ScmiPlatform::init_channel(&mut m);
    assert_eq!(p.handle(&mut m, Nanos(0)), Handled::NotOurs);
    // A length beyond the channel: CHANNEL_ERROR and PROTOCOL_ERROR (mod_transport.c).
    let mut m: Ram<32> = Ram::new();
    m.write32(smt::LENGTH, 4 + 200);
    p.handle(&mut m, Nanos(0));
    assert_eq!(
        m.read32(smt::CHANNEL_STATUS),
        smt::STATUS_FREE | smt::STATUS_ERROR
    );
    assert_eq!(m.read32(smt::MSG_PAYLOAD) as i32, -10);
}

#[test]
fn mhu_set_raises_and_clear_lowers_the_doorbell_bits() {
    let mut r: Ram<{ 0x400 / 4 }> = Ram::new();
    assert_eq!(
        mhu::write(&mut r, 0x128, 1),
        Some(Ring::ToScp {
            channel: 1,
            bits: 1
        })
    );
    assert_eq!(
        mhu::write(&mut r, 0x128, 4),
        Some(Ring::ToScp {
            channel: 1,
            bits: 4
        })
    );
    assert_eq!(mhu::to_scp_pending(&r, 1), 5);
    assert_eq!(mhu::to_scp_pending(&r, 0), 0);
    mhu::scp_clear(&mut r, 1, 1);
    assert_eq!(r.read32(0x120), 4);
    assert_eq!(
        mhu::write(&mut r, 0x008, 2),
        Some(Ring::ToAp {
            channel: 0,
            bits: 2
        })
    );
    assert_eq!(mhu::write(&mut r, 0x120, 0xff), None, "STAT is read-only");
    assert_eq!(r.read32(0x120), 4);
}

#[test]
fn hi3660_mailbox_state_machine_is_the_one_linux_drives() {
    let mut r: Ram<{ 0x1000 / 4 }> = Ram::new();
    Mailbox::reset(&mut r);
    let hw = Mailbox::default();
    let ch = 13 * 0x40;
    let state = |r: &Ram<{ 0x1000 / 4 }>| r.read32(ch + h3::MODE) & h3::STATE_MASK;
    // Locked: channel writes are ignored.
    assert_eq!(hw.write(&mut r, ch + h3::SRC, 1), None);
    assert_eq!(r.read32(ch + h3::SRC), 0);
    hw.write(&mut r, h3::LOCK, h3::UNLOCK_KEY);
    assert_eq!(r.read32(h3::LOCK), 0);
    hw.write(&mut r, ch + h3::SRC, 1);
    assert_eq!(state(&r), h3::STATE_READY);
    // A second owner cannot take it.
    hw.write(&mut r, ch + h3::SRC, 2);
    assert_eq!(r.read32(ch + h3::SRC), 1);
    hw.write(&mut r, ch + h3::MODE, 1);
    assert_eq!(state(&r), h3::STATE_READY, "MODE writes keep the state");
    assert_eq!(
        hw.write(&mut r, ch + h3::SEND, 1),
        Some(Event::Sent { channel: 13 })
    );
    assert_eq!(state(&r), h3::STATE_DEST);
    assert_eq!(
        hw.write(&mut r, ch + h3::SEND, 1),
        None,
        "no second send in flight"
    );
    hw.write(&mut r, ch + h3::ICLR, 1);
    assert_eq!(state(&r), h3::STATE_DEST, "nothing to clear before the ack");
    Mailbox::ack(&mut r, 13);
    assert_eq!(state(&r), h3::STATE_ACK);
    hw.write(&mut r, ch + h3::ICLR, 1);
    assert_eq!(state(&r), h3::STATE_READY);
}

#[test]
fn lpm3_reports_the_new_frequency_after_300us() {
    let mut mbox: Ram<{ 0x1000 / 4 }> = Ram::new();
    let mut stub: Ram<{ 0x100 / 4 }> = Ram::new();
    let mut l = Lpm3::hikey960();
    l.init(&mut stub);
    assert_eq!(stub.read32(0x74), 2362);
    let ch = 13 * 0x40;
    mbox.write32(ch + h3::MODE, h3::STATE_DEST | 1);
    mbox.write32(ch + h3::DATA, 0x0002_030a);
    mbox.write32(ch + h3::DATA + 4, 1421);
    l.on_message(&mut mbox, Nanos(1000));
    assert_eq!(mbox.read32(ch + h3::MODE) & h3::STATE_MASK, h3::STATE_ACK);
    l.advance(&mut stub, Nanos(1000 + 299_999));
    assert_eq!(stub.read32(0x74), 2362);
    l.advance(&mut stub, Nanos(1000 + 300_000));
    assert_eq!(stub.read32(0x74), 1421);
}

#[test]
fn hi6220_ipc_mask_clear_and_status_follow_the_registers() {
    let mut r: Ram<{ 0x1000 / 4 }> = Ram::new();
    Ipc::write(&mut r, h6::ACK_INT_ENA, 1 << 11);
    Ipc::raise_ack(&mut r, 11);
    Ipc::raise_ack(&mut r, 3);
    assert_eq!(r.read32(h6::ACK_INT_RAW), (1 << 11) | (1 << 3));
    assert_eq!(r.read32(h6::ACK_INT_STAT), 1 << 11, "masked");
    Ipc::write(&mut r, h6::ACK_INT_CLR, 1 << 11);
    assert_eq!(r.read32(h6::ACK_INT_STAT), 0);
    Ipc::write(&mut r, h6::ACK_INT_DIS, 1 << 11);
    assert_eq!(r.read32(h6::ACK_INT_MSK), 0);
    assert_eq!(
        Ipc::write(&mut r, h6::DST_INT_RAW, 1),
        Some(asym_dvfs::model::hi6220::Event::ToMcu { bits: 1 })
    );
}
