//! The Hi6220 IPC (mailbox interrupt) hardware and the MCU firmware's CPU-frequency service,
//! modelled from what Linux's `hi6220-mailbox.c` and `clk-hi6220-stub.c` expect: writing
//! `DST_INT_RAW` interrupts the MCU; the MCU reads the slot (state TX) and the request word in
//! SRAM, acknowledges (automatic mode: the slot goes back to IDLE; interrupt mode: state ACK
//! and the acknowledge interrupt raised), clamps the request to `ACPU_DFS_FREQ_MAX` and the
//! limit, and after the latency writes the new frequency to `ACPU_DFS_CUR_FREQ`.
//!
//! Where the public sources say nothing, the model chooses (UNCONFIRMED against the MCU
//! image): a request is rounded down to the highest OPP at or below it (the lowest if below
//! all), and the MCU acknowledges as soon as it has read the message.

use asym_sched::types::Nanos;

use crate::hi6220::regs;
use crate::io::Mmio;

/// What a write to the IPC registers did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// The remote's interrupts `bits` were raised.
    ToMcu { bits: u32 },
}

/// The IPC hardware (its registers live in the region passed to each call).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ipc;

impl Ipc {
    /// Applies a write with the hardware's side effects: `ACK_INT_CLR` clears raw bits,
    /// `ACK_INT_ENA`/`_DIS` set and clear the mask, `ACK_INT_STAT` follows raw & mask,
    /// `DST_INT_RAW` interrupts the MCU. Other offsets are plain stores.
    pub fn write(r: &mut impl Mmio, offset: usize, value: u32) -> Option<Event> {
        match offset {
            regs::ACK_INT_CLR => {
                let raw = r.read32(regs::ACK_INT_RAW) & !value;
                r.write32(regs::ACK_INT_RAW, raw);
            }
            regs::ACK_INT_ENA => {
                let m = r.read32(regs::ACK_INT_MSK) | value;
                r.write32(regs::ACK_INT_MSK, m);
            }
            regs::ACK_INT_DIS => {
                let m = r.read32(regs::ACK_INT_MSK) & !value;
                r.write32(regs::ACK_INT_MSK, m);
            }
            regs::DST_INT_RAW => return (value != 0).then_some(Event::ToMcu { bits: value }),
            regs::ACK_INT_RAW | regs::ACK_INT_STAT => {}
            _ => r.write32(offset, value),
        }
        let stat = r.read32(regs::ACK_INT_RAW) & r.read32(regs::ACK_INT_MSK);
        r.write32(regs::ACK_INT_STAT, stat);
        None
    }

    /// The MCU raises acknowledge interrupt `bit`.
    pub fn raise_ack(r: &mut impl Mmio, bit: u32) {
        if bit < 32 {
            let raw = r.read32(regs::ACK_INT_RAW) | (1 << bit);
            r.write32(regs::ACK_INT_RAW, raw);
            let stat = raw & r.read32(regs::ACK_INT_MSK);
            r.write32(regs::ACK_INT_STAT, stat);
        }
    }
}

/// The MCU's faults (all off by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct McuFaults {
    /// Never acknowledge.
    pub no_ack: bool,
    /// Acknowledge but never change the frequency.
    pub ignore: bool,
    /// Report this kHz instead of the one set.
    pub report_khz: Option<u32>,
    /// A change takes this much longer than the latency.
    pub extra_latency_us: u32,
}

/// HiKey's CPU OPPs, kHz. source: mainline `hi6220.dtsi` `cpu_opp_table` (208/432/729/960/1200
/// MHz), the same five profiles TF-A's `plat/hisilicon/hikey/hisi_dvfs.c` writes for the MCU.
pub const HIKEY_OPPS_KHZ: &[u32] = &[208_000, 432_000, 729_000, 960_000, 1_200_000];

/// The MCU firmware's frequency service.
#[derive(Clone, Copy, Debug)]
pub struct Mcu {
    opps_khz: &'static [u32],
    slot: usize,
    dst_irq: u32,
    ack_irq: u32,
    latency_us: u32,
    cur_khz: u32,
    pending: Option<(u32, Nanos)>,
    /// Faults to inject.
    pub faults: McuFaults,
    /// Messages taken.
    pub messages: u64,
}

impl Mcu {
    /// The MCU serving `opps_khz` on mailbox `slot` (interrupts `dst_irq` in, `ack_irq` out),
    /// changes taking `latency_us`, booted at the top OPP (UNCONFIRMED: TF-A does not say).
    pub fn new(
        opps_khz: &'static [u32],
        slot: usize,
        dst_irq: u32,
        ack_irq: u32,
        latency_us: u32,
    ) -> Self {
        Mcu {
            opps_khz,
            slot,
            dst_irq,
            ack_irq,
            latency_us,
            cur_khz: opps_khz.last().copied().unwrap_or(0),
            pending: None,
            faults: McuFaults::default(),
            messages: 0,
        }
    }

    /// HiKey: slot 1, interrupts 0 and 11, 500 µs (`clock-latency-ns = <500000>`).
    pub fn hikey() -> Self {
        Mcu::new(HIKEY_OPPS_KHZ, 1, 0, 11, 500)
    }

    /// What TF-A and the MCU leave at boot: the maximum and current frequency in SRAM, every
    /// mailbox slot idle.
    pub fn init(&self, sram: &mut impl Mmio, mbox: &mut impl Mmio) {
        sram.write32(
            regs::ACPU_DFS_FREQ_MAX,
            self.opps_khz.last().copied().unwrap_or(0),
        );
        sram.write32(regs::ACPU_DFS_CUR_FREQ, self.cur_khz);
        for s in 0..mbox.size() / regs::SLOT_STRIDE {
            mbox.write32(s * regs::SLOT_STRIDE + regs::SLOT_MODE, regs::STATE_IDLE);
        }
    }

    /// The CPUs' frequency, kHz.
    pub fn cur_khz(&self) -> u32 {
        self.cur_khz
    }

    /// The pending change, if any.
    pub fn next_change(&self) -> Option<Nanos> {
        self.pending.map(|p| p.1)
    }

    /// The MCU's IPC interrupt `bits` at `now`: takes the message of its slot.
    pub fn on_interrupt(
        &mut self,
        bits: u32,
        sram: &mut impl Mmio,
        mbox: &mut impl Mmio,
        ipc: &mut impl Mmio,
        now: Nanos,
    ) {
        if self.dst_irq >= 32 || bits & (1 << self.dst_irq) == 0 {
            return;
        }
        let slot = self.slot * regs::SLOT_STRIDE;
        let mode = mbox.read32(slot + regs::SLOT_MODE);
        if mode & regs::STATE_MASK != regs::STATE_TX {
            return;
        }
        self.messages += 1;
        let msg = mbox.read32(slot + regs::SLOT_DATA);
        if !self.faults.no_ack {
            if mode & regs::ACK_AUTOMATIC != 0 {
                mbox.write32(
                    slot + regs::SLOT_MODE,
                    (mode & !regs::STATE_MASK) | regs::STATE_IDLE,
                );
            } else {
                mbox.write32(
                    slot + regs::SLOT_MODE,
                    (mode & !regs::STATE_MASK) | regs::STATE_ACK,
                );
                Ipc::raise_ack(ipc, self.ack_irq);
            }
        }
        if msg != regs::MSG_SET_FREQ || self.faults.ignore {
            return;
        }
        let mut want = sram.read32(regs::ACPU_DFS_FREQ_REQ);
        want = want.min(sram.read32(regs::ACPU_DFS_FREQ_MAX));
        if sram.read32(regs::ACPU_DFS_FLAG) == regs::ACPU_DFS_LOCK_FLAG {
            want = want.min(sram.read32(regs::ACPU_DFS_FREQ_LMT));
        }
        let khz = self
            .opps_khz
            .iter()
            .rev()
            .find(|&&f| f <= want)
            .or(self.opps_khz.first())
            .copied()
            .unwrap_or(want);
        let us = u64::from(self.latency_us) + u64::from(self.faults.extra_latency_us);
        self.pending = Some((khz, Nanos(now.0.saturating_add(us * 1000))));
    }

    /// Completes the change due by `now` (writes `ACPU_DFS_CUR_FREQ`).
    pub fn advance(&mut self, sram: &mut impl Mmio, now: Nanos) {
        if let Some((khz, at)) = self.pending {
            if at <= now {
                self.pending = None;
                self.cur_khz = khz;
                sram.write32(
                    regs::ACPU_DFS_CUR_FREQ,
                    self.faults.report_khz.unwrap_or(khz),
                );
            }
        }
    }
}
