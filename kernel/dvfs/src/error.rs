//! The one error type of every driver in this crate: what went wrong, and where.

use core::fmt;

use asym_sched::types::Khz;

use crate::scmi::Status;

/// Which wait ran out of time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// The firmware's reply to a message.
    Reply,
    /// The channel to be handed back by the firmware before a message can be sent.
    ChannelFree,
    /// The mailbox's acknowledgement of the previous message.
    MailboxAck,
    /// The frequency read back from the firmware to reach the requested one.
    ReadBack,
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Wait::Reply => "the firmware's reply",
            Wait::ChannelFree => "the shared-memory channel to be free",
            Wait::MailboxAck => "the mailbox acknowledgement",
            Wait::ReadBack => "the frequency read back to match",
        })
    }
}

/// A driver error. Every firmware status, malformed reply and stuck transport becomes one of
/// these; no driver path panics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The firmware answered message `message` of protocol `protocol` with a non-zero status.
    Firmware {
        protocol: u8,
        message: u8,
        status: Status,
    },
    /// The shared-memory channel is still owned by the firmware (`CHANNEL_FREE` clear).
    ChannelBusy,
    /// The doorbell of the previous message has not been taken by the firmware yet.
    DoorbellPending,
    /// The firmware flagged the channel (`CHANNEL_ERROR`): it could not read the message.
    ChannelError,
    /// A message is already outstanding on this channel.
    InFlight,
    /// Nothing came within `waited_us` microseconds.
    Timeout { wait: Wait, waited_us: u64 },
    /// The reply carries another message's token (a late reply, or a firmware bug).
    WrongToken { expected: u16, got: u16 },
    /// The reply header names another protocol, message or message type.
    WrongHeader { expected: u32, got: u32 },
    /// The reply is not as long as the message returns (bytes, as in the `length` field).
    WrongLength { expected: u32, got: u32 },
    /// A reply field is out of its range or inconsistent.
    Malformed { what: &'static str },
    /// The firmware does not implement what the driver needs.
    Unsupported { what: &'static str },
    /// A memory-mapped region is smaller than the protocol needs.
    RegionTooSmall { need: usize, have: usize },
    /// No domain `pd` in this driver.
    NoSuchDomain { pd: usize },
    /// `freq` is not one of domain `pd`'s operating points.
    NotAnOpp { pd: usize, freq: Khz },
    /// Domain `pd` was asked for `want` but the firmware reports `got`.
    ReadBack { pd: usize, want: Khz, got: Khz },
    /// The Hi3660 mailbox stayed locked (`0x1ACCE551` written, lock register not 0).
    MailboxLocked,
    /// The mailbox channel could not be claimed (its source register did not take our bit).
    MailboxNotAcquired,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Firmware {
                protocol,
                message,
                status,
            } => write!(
                f,
                "firmware answered protocol {protocol:#x} message {message:#x} with {status}"
            ),
            Error::ChannelBusy => {
                f.write_str("the shared-memory channel is still owned by the firmware")
            }
            Error::DoorbellPending => {
                f.write_str("the firmware has not taken the previous doorbell yet")
            }
            Error::ChannelError => f.write_str("the firmware flagged a channel error"),
            Error::InFlight => f.write_str("a message is already outstanding on this channel"),
            Error::Timeout { wait, waited_us } => {
                write!(f, "timed out after {waited_us} us waiting for {wait}")
            }
            Error::WrongToken { expected, got } => {
                write!(
                    f,
                    "reply token {got} does not match the message's {expected}"
                )
            }
            Error::WrongHeader { expected, got } => write!(
                f,
                "reply header {got:#010x} does not match the message header {expected:#010x}"
            ),
            Error::WrongLength { expected, got } => {
                write!(f, "reply length {got} bytes, expected {expected}")
            }
            Error::Malformed { what } => write!(f, "malformed reply: {what}"),
            Error::Unsupported { what } => write!(f, "firmware does not support {what}"),
            Error::RegionTooSmall { need, have } => write!(
                f,
                "memory region of {have} bytes, the protocol needs {need}"
            ),
            Error::NoSuchDomain { pd } => write!(f, "no performance domain {pd}"),
            Error::NotAnOpp { pd, freq } => {
                write!(f, "{} kHz is not an operating point of domain {pd}", freq.0)
            }
            Error::ReadBack { pd, want, got } => write!(
                f,
                "domain {pd}: asked for {} kHz, firmware reports {} kHz",
                want.0, got.0
            ),
            Error::MailboxLocked => f.write_str("the mailbox stayed locked after the unlock key"),
            Error::MailboxNotAcquired => f.write_str("the mailbox channel could not be claimed"),
        }
    }
}
