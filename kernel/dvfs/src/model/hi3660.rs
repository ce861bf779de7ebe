//! The Hi3660 mailbox hardware and the LPM3 firmware's stub-clock service, modelled from what
//! Linux's `hi3660-mailbox.c` and `clk-hi3660-stub.c` expect of them: a channel is claimed by
//! writing the source register while idle (state READY), `SEND` hands the message to the
//! destination (state DEST), the destination's acknowledgement moves it to ACK, and the
//! source's write to `ICLR` back to READY; LPM3 takes `{cmd, MHz}`, changes the cluster
//! frequency after the transition latency and writes the new MHz at `+0x70 + 4 × id` of the
//! stub-clock region.
//!
//! Where the public sources say nothing, the model chooses (UNCONFIRMED against the silicon):
//! LPM3 rounds a request down to the highest OPP at or below it (the lowest OPP if below all),
//! and acknowledges as soon as it has read the message.

use asym_sched::types::Nanos;

use crate::hi3660::regs;
use crate::io::Mmio;

/// What a write to the mailbox did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// A message was sent on `channel`: the destination's interrupt.
    Sent { channel: usize },
}

/// The mailbox hardware (its registers live in the region passed to each call).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mailbox {
    /// The unlock key never takes (fault).
    pub lock_stuck: bool,
    /// Channels' source registers never take a new owner (fault).
    pub src_stuck: bool,
}

impl Mailbox {
    /// Power-on state: locked, every channel idle.
    pub fn reset(regs: &mut impl Mmio) {
        for ch in 0..32 {
            regs.write32(ch * regs::CHANNEL_STRIDE + regs::MODE, regs::STATE_IDLE);
        }
        regs.write32(regs::LOCK, 1);
    }

    /// Applies a write of `value` at `offset` with the hardware's side effects.
    pub fn write(&self, r: &mut impl Mmio, offset: usize, value: u32) -> Option<Event> {
        if offset == regs::LOCK {
            let locked = self.lock_stuck || value != regs::UNLOCK_KEY;
            r.write32(regs::LOCK, u32::from(locked));
            return None;
        }
        if r.read32(regs::LOCK) != 0 || offset >= 32 * regs::CHANNEL_STRIDE {
            // Locked, or not a channel register: ignored.
            return None;
        }
        let channel = offset / regs::CHANNEL_STRIDE;
        let base = channel * regs::CHANNEL_STRIDE;
        let reg = offset - base;
        let mode = r.read32(base + regs::MODE);
        let state = mode & regs::STATE_MASK;
        let with_state = |st: u32| (mode & !regs::STATE_MASK) | st;
        let src = r.read32(base + regs::SRC);
        match reg {
            regs::SRC => {
                if state == regs::STATE_IDLE && value != 0 && !self.src_stuck {
                    r.write32(base + regs::SRC, value);
                    r.write32(base + regs::MODE, with_state(regs::STATE_READY));
                } else if value == 0 && state != regs::STATE_DEST {
                    r.write32(base + regs::SRC, 0);
                    r.write32(base + regs::MODE, with_state(regs::STATE_IDLE));
                }
                None
            }
            regs::MODE => {
                r.write32(base + regs::MODE, (mode & regs::STATE_MASK) | (value & 0xf));
                None
            }
            regs::SEND => {
                if state == regs::STATE_READY && value & src != 0 {
                    r.write32(base + regs::MODE, with_state(regs::STATE_DEST));
                    Some(Event::Sent { channel })
                } else {
                    None
                }
            }
            regs::ICLR => {
                if state == regs::STATE_ACK && value & src != 0 {
                    r.write32(base + regs::MODE, with_state(regs::STATE_READY));
                }
                None
            }
            _ => {
                r.write32(offset, value);
                None
            }
        }
    }

    /// The destination acknowledges the message on `channel` (DEST → ACK).
    pub fn ack(r: &mut impl Mmio, channel: usize) {
        let base = channel * regs::CHANNEL_STRIDE;
        let mode = r.read32(base + regs::MODE);
        if mode & regs::STATE_MASK == regs::STATE_DEST {
            r.write32(
                base + regs::MODE,
                (mode & !regs::STATE_MASK) | regs::STATE_ACK,
            );
        }
    }
}

/// LPM3's faults (all off by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lpm3Faults {
    /// Never acknowledge.
    pub no_ack: bool,
    /// Acknowledge but never change the frequency.
    pub ignore: bool,
    /// Report this MHz instead of the one set.
    pub report_mhz: Option<u32>,
    /// A change takes this much longer than the latency.
    pub extra_latency_us: u32,
}

/// One modelled cluster: its OPPs (MHz, ascending) and the frequency it boots at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cluster {
    /// Stub clock id.
    pub clock_id: u32,
    /// OPP frequencies, MHz, ascending.
    pub opps_mhz: &'static [u32],
    /// Boot frequency, MHz.
    pub boot_mhz: u32,
}

/// HiKey960's clusters. source: mainline `hi3660.dtsi` OPP tables (cluster0 533/999/1402/
/// 1709/1844 MHz, cluster1 903/1421/1805/2112/2362 MHz); the boot frequency is not published
/// (UNCONFIRMED): the top OPP here.
pub const HIKEY960_CLUSTERS: [Cluster; 2] = [
    Cluster {
        clock_id: 0,
        opps_mhz: &[533, 999, 1402, 1709, 1844],
        boot_mhz: 1844,
    },
    Cluster {
        clock_id: 1,
        opps_mhz: &[903, 1421, 1805, 2112, 2362],
        boot_mhz: 2362,
    },
];

/// The LPM3 firmware's stub-clock service.
#[derive(Clone, Copy, Debug)]
pub struct Lpm3 {
    clusters: [Cluster; 2],
    latency_us: u32,
    channel: usize,
    cur_mhz: [u32; 2],
    pending: [Option<(u32, Nanos)>; 2],
    /// Faults to inject.
    pub faults: Lpm3Faults,
    /// Messages taken.
    pub messages: u64,
}

impl Lpm3 {
    /// LPM3 serving `clusters` on mailbox `channel`, changes taking `latency_us`.
    pub fn new(clusters: [Cluster; 2], channel: usize, latency_us: u32) -> Self {
        Lpm3 {
            clusters,
            latency_us,
            channel,
            cur_mhz: [clusters[0].boot_mhz, clusters[1].boot_mhz],
            pending: [None; 2],
            faults: Lpm3Faults::default(),
            messages: 0,
        }
    }

    /// HiKey960: channel 13, 300 µs (`clock-latency-ns = <300000>`).
    pub fn hikey960() -> Self {
        Lpm3::new(HIKEY960_CLUSTERS, 13, 300)
    }

    /// Writes the boot frequencies to the read-back words of `stub`.
    pub fn init(&self, stub: &mut impl Mmio) {
        for (c, mhz) in self.clusters.iter().zip(self.cur_mhz) {
            stub.write32(regs::STUB_CLOCK_DATA + 4 * c.clock_id as usize, mhz);
        }
    }

    /// Cluster `i`'s frequency, MHz.
    pub fn cur_mhz(&self, i: usize) -> Option<u32> {
        self.cur_mhz.get(i).copied()
    }

    /// The earliest pending change.
    pub fn next_change(&self) -> Option<Nanos> {
        self.pending.iter().flatten().map(|p| p.1).min()
    }

    /// LPM3's mailbox interrupt: reads the message on its channel of `mbox`, acknowledges it,
    /// and schedules the change.
    pub fn on_message(&mut self, mbox: &mut impl Mmio, now: Nanos) {
        let base = self.channel * regs::CHANNEL_STRIDE;
        if mbox.read32(base + regs::MODE) & regs::STATE_MASK != regs::STATE_DEST {
            return;
        }
        self.messages += 1;
        let cmd = mbox.read32(base + regs::DATA);
        let mhz = mbox.read32(base + regs::DATA + 4);
        if !self.faults.no_ack {
            Mailbox::ack(mbox, self.channel);
        }
        let Some(i) = self
            .clusters
            .iter()
            .position(|c| crate::hi3660::set_rate_cmd(c.clock_id) == Some(cmd))
        else {
            return;
        };
        if self.faults.ignore {
            return;
        }
        let opps = self.clusters[i].opps_mhz;
        let rounded = opps
            .iter()
            .rev()
            .find(|&&f| f <= mhz)
            .or(opps.first())
            .copied()
            .unwrap_or(mhz);
        let us = u64::from(self.latency_us) + u64::from(self.faults.extra_latency_us);
        self.pending[i] = Some((rounded, Nanos(now.0.saturating_add(us * 1000))));
    }

    /// Completes the changes due by `now` and writes their read-back words in `stub`.
    pub fn advance(&mut self, stub: &mut impl Mmio, now: Nanos) {
        for i in 0..2 {
            if let Some((mhz, at)) = self.pending[i] {
                if at <= now {
                    self.pending[i] = None;
                    self.cur_mhz[i] = mhz;
                    let shown = self.faults.report_mhz.unwrap_or(mhz);
                    let id = self.clusters[i].clock_id as usize;
                    stub.write32(regs::STUB_CLOCK_DATA + 4 * id, shown);
                }
            }
        }
    }
}
