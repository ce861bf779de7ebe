//! Arm SCMI (System Control and Management Interface, Arm DEN0056) agent over the
//! shared-memory transport (SMT) with an Arm MHU doorbell, as the Juno r2 SCP firmware lays it
//! out.
//!
//! Re-derives Linux's `drivers/firmware/arm_scmi/shmem.c` (`shmem_tx_prepare`,
//! `shmem_poll_done`, `shmem_fetch_response`), `common.h` (`pack_scmi_header`), `driver.c`'s
//! status mapping, and `drivers/mailbox/arm_mhu_db.c` (doorbell ring and `last_tx_done`). The
//! protocols on top are in [`base`] and [`perf`].
//!
//! Deliberate differences from Linux: polling only (no completion interrupt: `flags` = 0); a
//! reply is checked more strictly — the whole echoed header (protocol, message, type, token),
//! not only the token, and the `length` field against what the message returns — so a
//! confused firmware gives a typed [`Error`] instead of a silently short read; waiting is never
//! open-ended: [`Channel::poll`] returns at once, and [`Channel::transact`] (boot-time
//! discovery) gives up at its timeout. Notifications (the P2A channel) are not used.

pub mod base;
pub mod perf;

use core::fmt;

use crate::io::{us_between, Clock, Mmio};
use crate::Error;

/// The base protocol (discovery), always implemented.
pub const PROTOCOL_BASE: u8 = 0x10;
/// The performance domain management protocol.
pub const PROTOCOL_PERF: u8 = 0x13;

/// `PROTOCOL_VERSION`, message 0 of every protocol.
pub const MSG_PROTOCOL_VERSION: u8 = 0x0;
/// `PROTOCOL_ATTRIBUTES`, message 1 of every protocol.
pub const MSG_PROTOCOL_ATTRIBUTES: u8 = 0x1;

/// Byte offsets in a shared-memory channel (Linux `struct scmi_shared_mem`).
pub mod smt {
    /// `channel_status`: bit 0 `CHANNEL_FREE`, bit 1 `CHANNEL_ERROR`.
    pub const CHANNEL_STATUS: usize = 0x04;
    /// `flags`: bit 0 asks the platform for a completion interrupt.
    pub const FLAGS: usize = 0x10;
    /// `length`: 4 (the header) + payload bytes.
    pub const LENGTH: usize = 0x14;
    /// `msg_header`.
    pub const MSG_HEADER: usize = 0x18;
    /// `msg_payload`: the parameters of a command; in a reply, the int32 status first.
    pub const MSG_PAYLOAD: usize = 0x1c;
    /// The smallest usable channel: the layout up to and including a reply's status word.
    pub const MIN_SIZE: usize = MSG_PAYLOAD + 4;
    /// `CHANNEL_FREE`: the agent owns the channel (no message outstanding).
    pub const STATUS_FREE: u32 = 1 << 0;
    /// `CHANNEL_ERROR`: the platform could not process the message.
    pub const STATUS_ERROR: u32 = 1 << 1;
}

/// The longest reply the driver copies out, in 32-bit words after the status word (a Juno
/// channel is 128 bytes: 24 such words).
pub const MAX_REPLY_WORDS: usize = 64;

/// An SCMI message header (Linux `pack_scmi_header`): message id bits 7:0, type 9:8,
/// protocol id 17:10, token 27:18.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header(pub u32);

/// Message type 0: a command (and its synchronous response).
pub const MSG_TYPE_COMMAND: u8 = 0;

impl Header {
    /// The header of command `message` of `protocol` with `token` (10 bits).
    pub const fn command(protocol: u8, message: u8, token: u16) -> Header {
        Header(
            message as u32
                | ((MSG_TYPE_COMMAND as u32) << 8)
                | ((protocol as u32) << 10)
                | (((token & 0x3ff) as u32) << 18),
        )
    }

    /// Bits 7:0.
    pub const fn message_id(self) -> u8 {
        self.0 as u8
    }

    /// Bits 9:8.
    pub const fn msg_type(self) -> u8 {
        ((self.0 >> 8) & 0x3) as u8
    }

    /// Bits 17:10.
    pub const fn protocol_id(self) -> u8 {
        (self.0 >> 10) as u8
    }

    /// Bits 27:18.
    pub const fn token(self) -> u16 {
        ((self.0 >> 18) & 0x3ff) as u16
    }
}

/// An SCMI status code (DEN0056 "Status codes"; Linux `scmi_linux_errmap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Success,
    NotSupported,
    InvalidParameters,
    Denied,
    NotFound,
    OutOfRange,
    Busy,
    CommsError,
    GenericError,
    HardwareError,
    ProtocolError,
    /// `IN_USE` (−11), added in SCMI v3.1.
    InUse,
    /// A value the specification does not define.
    Other(i32),
}

impl Status {
    /// The status of the int32 `v`.
    pub const fn from_i32(v: i32) -> Status {
        match v {
            0 => Status::Success,
            -1 => Status::NotSupported,
            -2 => Status::InvalidParameters,
            -3 => Status::Denied,
            -4 => Status::NotFound,
            -5 => Status::OutOfRange,
            -6 => Status::Busy,
            -7 => Status::CommsError,
            -8 => Status::GenericError,
            -9 => Status::HardwareError,
            -10 => Status::ProtocolError,
            -11 => Status::InUse,
            v => Status::Other(v),
        }
    }

    /// The int32 on the wire.
    pub const fn to_i32(self) -> i32 {
        match self {
            Status::Success => 0,
            Status::NotSupported => -1,
            Status::InvalidParameters => -2,
            Status::Denied => -3,
            Status::NotFound => -4,
            Status::OutOfRange => -5,
            Status::Busy => -6,
            Status::CommsError => -7,
            Status::GenericError => -8,
            Status::HardwareError => -9,
            Status::ProtocolError => -10,
            Status::InUse => -11,
            Status::Other(v) => v,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Status::Success => "SUCCESS",
            Status::NotSupported => "NOT_SUPPORTED",
            Status::InvalidParameters => "INVALID_PARAMETERS",
            Status::Denied => "DENIED",
            Status::NotFound => "NOT_FOUND",
            Status::OutOfRange => "OUT_OF_RANGE",
            Status::Busy => "BUSY",
            Status::CommsError => "COMMS_ERROR",
            Status::GenericError => "GENERIC_ERROR",
            Status::HardwareError => "HARDWARE_ERROR",
            Status::ProtocolError => "PROTOCOL_ERROR",
            Status::InUse => "IN_USE",
            Status::Other(v) => return write!(f, "undefined status {v}"),
        };
        write!(f, "{name} ({})", self.to_i32())
    }
}

/// How a message tells the platform it is there.
pub trait Doorbell {
    /// Rings the doorbell (the caller has already ordered the message writes before it).
    fn ring(&mut self);
    /// Whether the last ring has not been taken by the platform yet (Linux `last_tx_done`
    /// is its negation).
    fn pending(&self) -> bool;
}

/// One doorbell of an Arm MHU (v1) in doorbell mode (`arm,mhu-doorbell`, Linux
/// `arm_mhu_db.c`): channel 0 low priority, 1 high priority, 2 secure; each has STAT at +0x0,
/// SET at +0x8 and CLEAR at +0x10 of its block, the AP→SCP blocks 0x100 above the SCP→AP ones
/// (0x000, 0x020, 0x200).
#[derive(Debug)]
pub struct MhuDoorbell<R> {
    regs: R,
    tx: usize,
    bit: u32,
}

/// MHU v1 register offsets.
pub mod mhu {
    /// The SCP→AP block of channels 0 (low), 1 (high), 2 (secure).
    pub const RX_BLOCK: [usize; 3] = [0x000, 0x020, 0x200];
    /// AP→SCP block = SCP→AP block + this.
    pub const TX_OFFSET: usize = 0x100;
    /// Interrupt status (the raised doorbell bits).
    pub const STAT: usize = 0x0;
    /// Write 1s to raise doorbell bits.
    pub const SET: usize = 0x8;
    /// Write 1s to clear doorbell bits (the receiver does).
    pub const CLEAR: usize = 0x10;
    /// The register block size the driver needs (the secure channel's TX CLEAR).
    pub const SIZE: usize = 0x314;
}

impl<R: Mmio> MhuDoorbell<R> {
    /// Doorbell `doorbell` of channel `channel` (the two cells of the DT `mboxes` specifier
    /// `<&mailbox channel doorbell>`) in the MHU register block `regs`.
    pub fn new(regs: R, channel: u32, doorbell: u32) -> Result<Self, Error> {
        let Some(&rx) = mhu::RX_BLOCK.get(channel as usize) else {
            return Err(Error::Malformed {
                what: "MHU channel is not 0 (low), 1 (high) or 2 (secure)",
            });
        };
        if doorbell >= 32 {
            return Err(Error::Malformed {
                what: "MHU doorbell bit is not 0..=31",
            });
        }
        let tx = rx + mhu::TX_OFFSET;
        if regs.size() < tx + mhu::CLEAR + 4 {
            return Err(Error::RegionTooSmall {
                need: tx + mhu::CLEAR + 4,
                have: regs.size(),
            });
        }
        Ok(MhuDoorbell {
            regs,
            tx,
            bit: 1 << doorbell,
        })
    }
}

impl<R: Mmio> Doorbell for MhuDoorbell<R> {
    fn ring(&mut self) {
        self.regs.write32(self.tx + mhu::SET, self.bit);
    }

    fn pending(&self) -> bool {
        self.regs.read32(self.tx + mhu::STAT) & self.bit != 0
    }
}

/// A reply read out of the channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The header the platform left in the channel (equal to the command's).
    pub header: Header,
    /// The `length` field, bytes (header + status + return values).
    pub length: u32,
    /// The status word.
    pub status: Status,
    words: [u32; MAX_REPLY_WORDS],
    nwords: usize,
}

impl Reply {
    /// The return values after the status, as 32-bit words (a partial last word is padded).
    pub fn words(&self) -> &[u32] {
        &self.words[..self.nwords]
    }

    /// `Ok` for `SUCCESS`, else [`Error::Firmware`] naming the message.
    pub fn check_status(&self) -> Result<(), Error> {
        match self.status {
            Status::Success => Ok(()),
            status => Err(Error::Firmware {
                protocol: self.header.protocol_id(),
                message: self.header.message_id(),
                status,
            }),
        }
    }

    /// A successful reply with exactly `ret_words` return values: its words.
    pub fn expect(&self, ret_words: usize) -> Result<&[u32], Error> {
        self.check_status()?;
        let want = 8 + 4 * ret_words as u32;
        if self.length != want {
            return Err(Error::WrongLength {
                expected: want,
                got: self.length,
            });
        }
        Ok(self.words())
    }
}

/// One A2P shared-memory channel and its doorbell: at most one message outstanding.
#[derive(Debug)]
pub struct Channel<S, D> {
    shmem: S,
    doorbell: D,
    next_token: u16,
    inflight: Option<Header>,
}

impl<S: Mmio, D: Doorbell> Channel<S, D> {
    /// The channel in `shmem` (the `arm,scmi-shmem` region) rung by `doorbell`.
    pub fn new(shmem: S, doorbell: D) -> Result<Self, Error> {
        if shmem.size() < smt::MIN_SIZE {
            return Err(Error::RegionTooSmall {
                need: smt::MIN_SIZE,
                have: shmem.size(),
            });
        }
        Ok(Channel {
            shmem,
            doorbell,
            next_token: 0,
            inflight: None,
        })
    }

    /// Payload capacity in 32-bit words (the region after the header).
    pub fn capacity_words(&self) -> usize {
        (self.shmem.size() - smt::MSG_PAYLOAD) / 4
    }

    /// The header of the message outstanding, if any.
    pub fn inflight(&self) -> Option<Header> {
        self.inflight
    }

    /// Whether a message can be sent now: nothing outstanding, the channel free and the last
    /// doorbell taken.
    pub fn ready(&self) -> bool {
        self.inflight.is_none()
            && self.shmem.read32(smt::CHANNEL_STATUS) & smt::STATUS_FREE != 0
            && !self.doorbell.pending()
    }

    /// Writes command `message` of `protocol` with `payload` into the channel and rings
    /// (Linux `shmem_tx_prepare` + `mbox_send_message`). Never waits: a channel still owned
    /// by the firmware is [`Error::ChannelBusy`], an untaken doorbell [`Error::DoorbellPending`].
    pub fn send(&mut self, protocol: u8, message: u8, payload: &[u32]) -> Result<Header, Error> {
        if self.inflight.is_some() {
            return Err(Error::InFlight);
        }
        if payload.len() > self.capacity_words() {
            return Err(Error::RegionTooSmall {
                need: smt::MSG_PAYLOAD + 4 * payload.len(),
                have: self.shmem.size(),
            });
        }
        if self.shmem.read32(smt::CHANNEL_STATUS) & smt::STATUS_FREE == 0 {
            return Err(Error::ChannelBusy);
        }
        if self.doorbell.pending() {
            return Err(Error::DoorbellPending);
        }
        let header = Header::command(protocol, message, self.next_token);
        self.next_token = (self.next_token + 1) & 0x3ff;
        // Busy (and error cleared) first: from here the channel is the platform's to read.
        self.shmem.write32(smt::CHANNEL_STATUS, 0);
        self.shmem.write32(smt::FLAGS, 0);
        self.shmem
            .write32(smt::LENGTH, 4 + 4 * payload.len() as u32);
        self.shmem.write32(smt::MSG_HEADER, header.0);
        for (i, w) in payload.iter().enumerate() {
            self.shmem.write32(smt::MSG_PAYLOAD + 4 * i, *w);
        }
        self.shmem.wmb();
        self.doorbell.ring();
        self.inflight = Some(header);
        Ok(header)
    }

    /// Checks for the reply to the outstanding message (Linux `shmem_poll_done` +
    /// `shmem_fetch_response`): `Ok(None)` while the platform still owns the channel. A
    /// reply, or an error about it, ends the message.
    pub fn poll(&mut self) -> Result<Option<Reply>, Error> {
        let Some(sent) = self.inflight else {
            return Err(Error::Malformed {
                what: "poll without a message outstanding",
            });
        };
        let st = self.shmem.read32(smt::CHANNEL_STATUS);
        if st & (smt::STATUS_FREE | smt::STATUS_ERROR) == 0 {
            return Ok(None);
        }
        self.shmem.rmb();
        self.inflight = None;
        if st & smt::STATUS_ERROR != 0 {
            return Err(Error::ChannelError);
        }
        let header = Header(self.shmem.read32(smt::MSG_HEADER));
        if header.token() != sent.token() {
            return Err(Error::WrongToken {
                expected: sent.token(),
                got: header.token(),
            });
        }
        if header.0 & 0x0fff_ffff != sent.0 {
            return Err(Error::WrongHeader {
                expected: sent.0,
                got: header.0,
            });
        }
        let length = self.shmem.read32(smt::LENGTH);
        let max = (self.shmem.size() - smt::MSG_HEADER) as u32;
        if length < 8 {
            return Err(Error::WrongLength {
                expected: 8,
                got: length,
            });
        }
        if length > max {
            return Err(Error::WrongLength {
                expected: max,
                got: length,
            });
        }
        let status = Status::from_i32(self.shmem.read32(smt::MSG_PAYLOAD) as i32);
        let nwords = ((length as usize - 8).div_ceil(4)).min(MAX_REPLY_WORDS);
        let mut words = [0u32; MAX_REPLY_WORDS];
        for (i, w) in words.iter_mut().enumerate().take(nwords) {
            *w = self.shmem.read32(smt::MSG_PAYLOAD + 4 + 4 * i);
        }
        Ok(Some(Reply {
            header,
            length,
            status,
            words,
            nwords,
        }))
    }

    /// Forgets the outstanding message (after its timeout). The platform may still own the
    /// channel; the next [`Channel::send`] finds out.
    pub fn abandon(&mut self) {
        self.inflight = None;
    }

    /// Sends a command and waits for its reply, at most `timeout_us` for the channel to be
    /// free and `timeout_us` for the reply (for discovery at boot; runtime requests use
    /// [`Channel::send`] and [`Channel::poll`]).
    pub fn transact(
        &mut self,
        protocol: u8,
        message: u8,
        payload: &[u32],
        clock: &impl Clock,
        timeout_us: u64,
    ) -> Result<Reply, Error> {
        let start = clock.now();
        loop {
            match self.send(protocol, message, payload) {
                Ok(_) => break,
                Err(e @ (Error::ChannelBusy | Error::DoorbellPending)) => {
                    let waited_us = us_between(start, clock.now());
                    if waited_us >= timeout_us {
                        return Err(if e == Error::ChannelBusy {
                            Error::Timeout {
                                wait: crate::Wait::ChannelFree,
                                waited_us,
                            }
                        } else {
                            e
                        });
                    }
                    clock.relax();
                }
                Err(e) => return Err(e),
            }
        }
        let sent = clock.now();
        loop {
            if let Some(r) = self.poll()? {
                return Ok(r);
            }
            let waited_us = us_between(sent, clock.now());
            if waited_us >= timeout_us {
                self.abandon();
                return Err(Error::Timeout {
                    wait: crate::Wait::Reply,
                    waited_us,
                });
            }
            clock.relax();
        }
    }

    /// The shared memory (for tests and the firmware stand-in).
    pub fn shmem(&self) -> &S {
        &self.shmem
    }
}

/// A 16-byte NUL-padded ASCII name (vendor, domain), as SCMI returns them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Name(pub [u8; 16]);

impl Name {
    /// From four little-endian words.
    pub fn from_words(w: &[u32]) -> Name {
        let mut b = [0u8; 16];
        for (i, word) in w.iter().take(4).enumerate() {
            b[4 * i..4 * i + 4].copy_from_slice(&word.to_le_bytes());
        }
        Name(b)
    }

    /// From a string (truncated to 15 bytes, NUL-terminated).
    pub fn new(s: &str) -> Name {
        let mut b = [0u8; 16];
        let n = s.len().min(15);
        b[..n].copy_from_slice(&s.as_bytes()[..n]);
        Name(b)
    }

    /// The four little-endian words.
    pub fn to_words(self) -> [u32; 4] {
        let mut w = [0u32; 4];
        for (i, word) in w.iter_mut().enumerate() {
            *word = u32::from_le_bytes([
                self.0[4 * i],
                self.0[4 * i + 1],
                self.0[4 * i + 2],
                self.0[4 * i + 3],
            ]);
        }
        w
    }

    /// Up to the first NUL; `"?"` if that is not printable ASCII.
    pub fn as_str(&self) -> &str {
        let n = self.0.iter().position(|&b| b == 0).unwrap_or(16);
        let s = &self.0[..n];
        if s.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
            core::str::from_utf8(s).unwrap_or("?")
        } else {
            "?"
        }
    }
}
