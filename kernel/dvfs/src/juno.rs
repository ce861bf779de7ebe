//! Juno r2: does the device tree describe the DVFS protocol the SCP firmware speaks?
//!
//! Current Juno firmware (SCP-firmware, with TF-A built `CSS_USE_SCMI_SDS_DRIVER := 1`,
//! `plat/arm/board/juno/platform.mk`) speaks SCMI; the old closed firmware spoke SCPI. Mainline
//! Linux ships one DT for each: `juno-r2-scmi.dtb` (`/firmware/scmi`, `compatible = "arm,scmi"`)
//! and `juno-r2.dtb` (`/scpi`, `compatible = "arm,scpi"`). u-boot passes whichever the user
//! flashed as `board.dtb`, so the kernel probes the firmware with SCMI `BASE
//! PROTOCOL_VERSION` on the SCMI low-priority channel (SRAM `0x2E00_0000`, MHU channel 0
//! doorbell 0; `juno-scmi.dtsi`) and says what to flash when the two disagree. asym drives
//! Juno DVFS over SCMI only.

use core::fmt;

use crate::Error;

/// Where the SCMI base protocol lives on Juno, for a probe the DT does not describe.
/// source: mainline `juno-scmi.dtsi` (`cpu_scp_lpri0: scp-sram@0`, 0x80 bytes, in
/// `sram@2e000000`; `mboxes = <&mailbox 0 0 ...>`), `juno-base.dtsi` (`mailbox@2b1f0000`).
pub mod probe_location {
    /// The non-secure SRAM.
    pub const SRAM_BASE: u64 = 0x2e00_0000;
    /// The base protocol's A2P channel in it.
    pub const BASE_CHANNEL_OFFSET: usize = 0x0;
    /// Its size.
    pub const CHANNEL_SIZE: usize = 0x80;
    /// The MHU.
    pub const MHU_BASE: u64 = 0x2b1f_0000;
    /// MHU channel (low priority) and doorbell bit of the base protocol.
    pub const MHU_CHANNEL: u32 = 0;
    /// See [`MHU_CHANNEL`].
    pub const MHU_DOORBELL: u32 = 0;
}

/// The DVFS protocol a Juno device tree describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DtProtocol {
    /// `/firmware/scmi` (`arm,scmi`): `juno-r2-scmi.dtb`.
    Scmi,
    /// `/scpi` (`arm,scpi`): `juno-r2.dtb`.
    Scpi,
    /// Neither.
    None,
}

/// What an SCMI probe of the firmware found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// A valid `BASE PROTOCOL_VERSION` answer.
    Scmi { version: u32 },
    /// No valid SCMI answer (a timeout, or a reply that is not SCMI).
    NotScmi(Error),
}

/// A DT that does not match the firmware, with what to do about it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mismatch {
    /// SCPI DT, SCMI firmware.
    ScpiDtScmiFirmware { version: u32 },
    /// SCMI DT, firmware that does not answer SCMI.
    ScmiDtNotScmiFirmware(Error),
    /// SCPI DT and firmware that does not answer SCMI (legacy firmware).
    ScpiOnly(Error),
    /// The DT describes no DVFS firmware.
    NoDvfsInDt,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Mismatch::ScpiDtScmiFirmware { version } => write!(
                f,
                "the device tree describes SCPI (juno-r2.dtb) but the SCP firmware speaks SCMI \
                 (base protocol {}.{}): flash Linux's juno-r2-scmi.dtb as board.dtb (the DTB \
                 u-boot passes); asym drives Juno DVFS over SCMI only",
                version >> 16,
                version & 0xffff
            ),
            Mismatch::ScmiDtNotScmiFirmware(e) => write!(
                f,
                "the device tree describes SCMI (juno-r2-scmi.dtb) but the SCP firmware does \
                 not answer SCMI ({e}): this looks like the legacy SCPI firmware; install a \
                 Juno firmware release built with SCP-firmware (TF-A docs/plat/arm/juno) and \
                 keep juno-r2-scmi.dtb"
            ),
            Mismatch::ScpiOnly(e) => write!(
                f,
                "the device tree describes SCPI (juno-r2.dtb) and the SCP firmware does not \
                 answer SCMI ({e}): legacy SCPI firmware, which asym does not drive; install a \
                 Juno firmware release built with SCP-firmware and flash juno-r2-scmi.dtb as \
                 board.dtb"
            ),
            Mismatch::NoDvfsInDt => f.write_str(
                "the device tree describes neither /firmware/scmi nor /scpi: flash Linux's \
                 juno-r2-scmi.dtb as board.dtb",
            ),
        }
    }
}

/// `Ok` when the DT and the firmware agree on SCMI, else what is wrong.
pub fn check(dt: DtProtocol, probe: Probe) -> Result<(), Mismatch> {
    match (dt, probe) {
        (DtProtocol::Scmi, Probe::Scmi { .. }) => Ok(()),
        (DtProtocol::Scmi, Probe::NotScmi(e)) => Err(Mismatch::ScmiDtNotScmiFirmware(e)),
        (DtProtocol::Scpi, Probe::Scmi { version }) => {
            Err(Mismatch::ScpiDtScmiFirmware { version })
        }
        (DtProtocol::Scpi, Probe::NotScmi(e)) => Err(Mismatch::ScpiOnly(e)),
        (DtProtocol::None, _) => Err(Mismatch::NoDvfsInDt),
    }
}

/// Probes for SCMI with `BASE PROTOCOL_VERSION` on `chan`, waiting at most `timeout_us`.
pub fn probe<S: crate::io::Mmio, D: crate::scmi::Doorbell>(
    chan: &mut crate::scmi::Channel<S, D>,
    clock: &impl crate::io::Clock,
    timeout_us: u64,
) -> Probe {
    let r = chan
        .transact(
            crate::scmi::PROTOCOL_BASE,
            crate::scmi::MSG_PROTOCOL_VERSION,
            &[],
            clock,
            timeout_us,
        )
        .and_then(|r| r.expect(1).map(|w| w[0]));
    match r {
        Ok(version) if version >> 16 != 0 => Probe::Scmi { version },
        Ok(_) => Probe::NotScmi(Error::Malformed {
            what: "base protocol major version 0",
        }),
        Err(e) => Probe::NotScmi(e),
    }
}
