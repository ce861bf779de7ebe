//! The SCMI base protocol (0x10): what the platform is and which protocols it implements.
//!
//! Re-derives Linux `drivers/firmware/arm_scmi/base.c` (`scmi_base_attributes_get`,
//! `scmi_base_vendor_id_get`, `scmi_base_implementation_version_get`,
//! `scmi_base_implementation_list_get`). Deliberate differences: every reply length is
//! checked exactly, and a protocol list that stops short, overruns the announced count or
//! would not fit is an error (Linux warns and carries on with what it got).

use super::{Channel, Doorbell, Name, PROTOCOL_BASE};
use crate::io::{Clock, Mmio};
use crate::Error;

/// `BASE_DISCOVER_VENDOR`.
pub const MSG_DISCOVER_VENDOR: u8 = 0x3;
/// `BASE_DISCOVER_IMPLEMENTATION_VERSION`.
pub const MSG_DISCOVER_IMPLEMENTATION_VERSION: u8 = 0x5;
/// `BASE_DISCOVER_LIST_PROTOCOLS`.
pub const MSG_DISCOVER_LIST_PROTOCOLS: u8 = 0x6;

/// The most protocols we record (SCMI defines protocol ids 0x10–0xff; Linux
/// `MAX_PROTOCOLS_IMP` is 16).
pub const MAX_PROTOCOLS: usize = 32;

/// What the base protocol says about the platform.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaseInfo {
    /// Base protocol version: major in bits 31:16, minor 15:0.
    pub version: u32,
    /// `PROTOCOL_ATTRIBUTES` bits 15:8.
    pub num_agents: u8,
    /// `BASE_DISCOVER_VENDOR`.
    pub vendor: Name,
    /// `BASE_DISCOVER_IMPLEMENTATION_VERSION`.
    pub impl_version: u32,
    protocols: [u8; MAX_PROTOCOLS],
    nr_protocols: usize,
}

impl BaseInfo {
    /// The protocols other than base the platform implements for this agent.
    pub fn protocols(&self) -> &[u8] {
        &self.protocols[..self.nr_protocols]
    }

    /// Whether `protocol` is implemented.
    pub fn implements(&self, protocol: u8) -> bool {
        self.protocols().contains(&protocol)
    }
}

/// Runs base-protocol discovery on `chan` (the base protocol's channel), each message
/// waiting at most `timeout_us`.
pub fn discover<S: Mmio, D: Doorbell>(
    chan: &mut Channel<S, D>,
    clock: &impl Clock,
    timeout_us: u64,
) -> Result<BaseInfo, Error> {
    let mut call =
        |msg: u8, payload: &[u32]| chan.transact(PROTOCOL_BASE, msg, payload, clock, timeout_us);
    let version = call(super::MSG_PROTOCOL_VERSION, &[])?.expect(1)?[0];
    if version >> 16 == 0 {
        return Err(Error::Malformed {
            what: "base protocol major version 0",
        });
    }
    let attrs = call(super::MSG_PROTOCOL_ATTRIBUTES, &[])?.expect(1)?[0];
    let num_protocols = (attrs & 0xff) as usize;
    let num_agents = ((attrs >> 8) & 0xff) as u8;
    if num_protocols > MAX_PROTOCOLS {
        return Err(Error::Unsupported {
            what: "more than 32 protocols",
        });
    }
    let vendor = Name::from_words(call(MSG_DISCOVER_VENDOR, &[])?.expect(4)?);
    let impl_version = call(MSG_DISCOVER_IMPLEMENTATION_VERSION, &[])?.expect(1)?[0];
    let mut protocols = [0u8; MAX_PROTOCOLS];
    let mut nr = 0usize;
    while nr < num_protocols {
        let r = call(MSG_DISCOVER_LIST_PROTOCOLS, &[nr as u32])?;
        r.check_status()?;
        let w = r.words();
        let Some(&n) = w.first() else {
            return Err(Error::WrongLength {
                expected: 12,
                got: r.length,
            });
        };
        let n = n as usize;
        if n == 0 {
            return Err(Error::Malformed {
                what: "protocol list ended before the announced number of protocols",
            });
        }
        if n > num_protocols - nr {
            return Err(Error::Malformed {
                what: "protocol list longer than the announced number of protocols",
            });
        }
        let want = 8 + 4 + 4 * n.div_ceil(4) as u32;
        if r.length != want {
            return Err(Error::WrongLength {
                expected: want,
                got: r.length,
            });
        }
        for i in 0..n {
            let byte = (w[1 + i / 4] >> (8 * (i % 4))) as u8;
            if byte < 0x11 {
                return Err(Error::Malformed {
                    what: "protocol id below 0x11 in the protocol list",
                });
            }
            protocols[nr] = byte;
            nr += 1;
        }
    }
    Ok(BaseInfo {
        version,
        num_agents,
        vendor,
        impl_version,
        protocols,
        nr_protocols: nr,
    })
}
