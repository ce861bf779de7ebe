//! The Arm MHU (v1) in doorbell mode, as hardware: writing SET raises bits in STAT (and the
//! receiver's interrupt), writing CLEAR lowers them (Linux `arm_mhu_db.c` register use;
//! offsets in [`crate::scmi::mhu`]).

use crate::io::Mmio;
use crate::scmi::mhu::{CLEAR, RX_BLOCK, SET, STAT, TX_OFFSET};

/// Who an MHU write raised an interrupt for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ring {
    /// AP→SCP channel `channel` (0 low, 1 high, 2 secure): the SCP's interrupt.
    ToScp { channel: usize, bits: u32 },
    /// SCP→AP channel `channel`: the AP's receive interrupt (`mhu_lpri_rx`/`mhu_hpri_rx`).
    ToAp { channel: usize, bits: u32 },
}

/// Applies a write of `value` at `offset` to the MHU register file `regs` with the hardware's
/// side effects; returns the interrupt it raised, if any. Other offsets are plain stores.
pub fn write(regs: &mut impl Mmio, offset: usize, value: u32) -> Option<Ring> {
    for (channel, &rx) in RX_BLOCK.iter().enumerate() {
        for (base, to_scp) in [(rx, false), (rx + TX_OFFSET, true)] {
            if offset == base + SET {
                let st = regs.read32(base + STAT);
                regs.write32(base + STAT, st | value);
                return (value != 0).then_some(if to_scp {
                    Ring::ToScp {
                        channel,
                        bits: value,
                    }
                } else {
                    Ring::ToAp {
                        channel,
                        bits: value,
                    }
                });
            }
            if offset == base + CLEAR {
                let st = regs.read32(base + STAT);
                regs.write32(base + STAT, st & !value);
                return None;
            }
            if offset == base + STAT {
                // Read-only.
                return None;
            }
        }
    }
    regs.write32(offset, value);
    None
}

/// The raised bits of AP→SCP channel `channel` (what the SCP's interrupt handler reads).
pub fn to_scp_pending(regs: &impl Mmio, channel: usize) -> u32 {
    RX_BLOCK
        .get(channel)
        .map_or(0, |rx| regs.read32(rx + TX_OFFSET + STAT))
}

/// The SCP takes doorbell `bits` of AP→SCP channel `channel` (writes CLEAR).
pub fn scp_clear(regs: &mut impl Mmio, channel: usize, bits: u32) {
    if let Some(rx) = RX_BLOCK.get(channel) {
        let _ = write(regs, rx + TX_OFFSET + CLEAR, bits);
    }
}
