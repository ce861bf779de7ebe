//! HiKey (Hi6220): the stub clock that asks the MCU firmware for the CPU frequency through a
//! request word in SRAM and the Hi6220 mailbox, and reads the frequency the MCU reports back.
//!
//! Re-derives Linux `drivers/clk/hisilicon/clk-hi6220-stub.c` (SRAM words `ACPU_DFS_FREQ_MAX`
//! `+0x1724`, `ACPU_DFS_CUR_FREQ` `+0x17CC`, `ACPU_DFS_FLAG` `+0x1B30`, `ACPU_DFS_FREQ_REQ`
//! `+0x1B34`, `ACPU_DFS_FREQ_LMT` `+0x1B38`, all kHz; lock flag `0xAEAEAEAE`; message
//! `{type 0x0A, cmd 0x03, obj 0x00, src 0x00}`; the limit clamp of `hi6220_acpu_round_freq`)
//! and `drivers/mailbox/hi6220-mailbox.c` (slot registers in the DRAM buffer every 0x40 bytes,
//! state in MODE bits 7:4, automatic acknowledge in bit 0, `DST_INT_RAW` at IPC `+0x420` to
//! interrupt the MCU, `last_tx_done` = slot back to IDLE). DT (mainline `hi6220.dtsi`):
//! `mailbox@f7510000` (`reg` IPC `0xf7510000`, buffer `0x06dff800`), `sram@fff80000`,
//! `stub_clock` with `mboxes = <&mailbox 1 0 11>` (slot 1, destination interrupt 0, acknowledge
//! interrupt 11); `clock-latency-ns = 500000`.
//!
//! Deliberate differences from Linux: polled automatic acknowledge (Linux uses the acknowledge
//! interrupt unless `hi6220,mbox-tx-noirq`); a request completes when `ACPU_DFS_CUR_FREQ` shows
//! the frequency — measuring the latency — and a request above the firmware's limit is clamped
//! as Linux's `round_rate` does, then completes with the clamped frequency.

use asym_sched::cpufreq::driver::{Completion, CpufreqDriver};
use asym_sched::cpufreq::CpufreqPolicy;
use asym_sched::types::{Khz, Nanos};

use crate::io::{after_us, us_between, Mmio};
use crate::queue::Fifo;
use crate::{Error, Wait};

/// Register and SRAM offsets (Linux `clk-hi6220-stub.c`, `hi6220-mailbox.c`).
pub mod regs {
    /// SRAM: the highest frequency the MCU allows, kHz.
    pub const ACPU_DFS_FREQ_MAX: usize = 0x1724;
    /// SRAM: the frequency the CPUs run at, kHz.
    pub const ACPU_DFS_CUR_FREQ: usize = 0x17cc;
    /// SRAM: [`ACPU_DFS_LOCK_FLAG`] when a limit is in force.
    pub const ACPU_DFS_FLAG: usize = 0x1b30;
    /// SRAM: the requested frequency, kHz.
    pub const ACPU_DFS_FREQ_REQ: usize = 0x1b34;
    /// SRAM: the limit, kHz.
    pub const ACPU_DFS_FREQ_LMT: usize = 0x1b38;
    /// The limit flag's value.
    pub const ACPU_DFS_LOCK_FLAG: u32 = 0xaeae_aeae;
    /// The SRAM the driver needs.
    pub const SRAM_SIZE: usize = ACPU_DFS_FREQ_LMT + 4;
    /// Mailbox buffer: bytes per slot.
    pub const SLOT_STRIDE: usize = 0x40;
    /// Slot MODE (offset in the slot).
    pub const SLOT_MODE: usize = 0x0;
    /// Slot DATA0..7 (offset in the slot).
    pub const SLOT_DATA: usize = 0x4;
    /// Slot state bits.
    pub const STATE_MASK: u32 = 0xf << 4;
    /// Slot free.
    pub const STATE_IDLE: u32 = 1 << 4;
    /// Message sent.
    pub const STATE_TX: u32 = 2 << 4;
    /// Message received.
    pub const STATE_RX: u32 = 4 << 4;
    /// Acknowledged (interrupt mode).
    pub const STATE_ACK: u32 = 8 << 4;
    /// MODE bit 0: automatic acknowledge.
    pub const ACK_AUTOMATIC: u32 = 1;
    /// IPC: raw acknowledge interrupts.
    pub const ACK_INT_RAW: usize = 0x400;
    /// IPC: acknowledge interrupt mask.
    pub const ACK_INT_MSK: usize = 0x404;
    /// IPC: masked acknowledge interrupts.
    pub const ACK_INT_STAT: usize = 0x408;
    /// IPC: clear acknowledge interrupts.
    pub const ACK_INT_CLR: usize = 0x40c;
    /// IPC: raise the remote's interrupt.
    pub const DST_INT_RAW: usize = 0x420;
    /// IPC: enable acknowledge interrupts.
    pub const ACK_INT_ENA: usize = 0x500;
    /// IPC: disable acknowledge interrupts.
    pub const ACK_INT_DIS: usize = 0x504;
    /// The IPC registers the driver needs.
    pub const IPC_SIZE: usize = ACK_INT_DIS + 4;
    /// DATA0 of a set-frequency message: type 0x0A (FREQ), cmd 0x03 (SET), obj 0 (AP), src 0.
    pub const MSG_SET_FREQ: u32 = 0x0000_030a;
}

/// The most OPPs.
pub const MAX_OPPS: usize = 16;

/// The mailbox slot and timing (from the DT and Linux).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// `mboxes` cell 1: the slot (1).
    pub slot: u32,
    /// `mboxes` cell 2: the MCU's interrupt (0).
    pub dst_irq: u32,
    /// `mboxes` cell 3: our acknowledge interrupt (11).
    pub ack_irq: u32,
    /// `clock-latency-ns` / 1000.
    pub latency_us: u64,
    /// How long the MCU may take to acknowledge (Linux `tx_tout` 500 ms).
    pub ack_timeout_us: u64,
    /// How long after the latency the read-back may take to show the frequency.
    pub read_back_timeout_us: u64,
    /// Polling interval suggested by [`CpufreqDriver::next_poll`].
    pub poll_us: u64,
}

impl Config {
    /// HiKey: `mboxes = <&mailbox 1 0 11>`, `clock-latency-ns = <500000>`.
    pub const HIKEY: Config = Config {
        slot: 1,
        dst_irq: 0,
        ack_irq: 11,
        latency_us: 500,
        ack_timeout_us: 500_000,
        read_back_timeout_us: 30_000,
        poll_us: 50,
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Queued,
    Acked { sent_at: Nanos },
    Sent { sent_at: Nanos },
}

#[derive(Clone, Copy, Debug)]
struct Req {
    freq: Khz,
    /// After the firmware's limit.
    asked: Khz,
    requested_at: Nanos,
    stage: Stage,
}

/// The Hi6220 stub-clock cpufreq driver: one domain (policy 0) for all CPUs.
pub struct StubClock<S, B, I> {
    sram: S,
    mbox: B,
    ipc: I,
    cfg: Config,
    opps: [Khz; MAX_OPPS],
    nr_opps: usize,
    cur: Khz,
    req: Option<Req>,
    done: Fifo<Completion<Error>, 2>,
    retry_at: Option<Nanos>,
    last_step: Nanos,
    /// Messages sent.
    pub sent: u64,
}

impl<S, B, I> core::fmt::Debug for StubClock<S, B, I> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("hi6220::StubClock")
            .field("cur", &self.cur)
            .field("sent", &self.sent)
            .finish_non_exhaustive()
    }
}

impl<S: Mmio, B: Mmio, I: Mmio> StubClock<S, B, I> {
    /// The driver over the SRAM (`sram@fff80000`), the mailbox buffer (the mailbox's second
    /// `reg`) and the IPC registers (its first `reg`), for the OPP frequencies `opps` (from
    /// the DT). Clears the flag, request and limit words and enables the acknowledge
    /// interrupt, as Linux's probe and `hi6220_mbox_startup` do.
    pub fn new(mut sram: S, mbox: B, mut ipc: I, opps: &[Khz], cfg: Config) -> Result<Self, Error> {
        if sram.size() < regs::SRAM_SIZE {
            return Err(Error::RegionTooSmall {
                need: regs::SRAM_SIZE,
                have: sram.size(),
            });
        }
        let need = (cfg.slot as usize + 1) * regs::SLOT_STRIDE;
        if cfg.slot >= 32 || mbox.size() < need {
            return Err(Error::RegionTooSmall {
                need,
                have: mbox.size(),
            });
        }
        if ipc.size() < regs::IPC_SIZE {
            return Err(Error::RegionTooSmall {
                need: regs::IPC_SIZE,
                have: ipc.size(),
            });
        }
        if cfg.dst_irq >= 32 || cfg.ack_irq >= 32 {
            return Err(Error::Malformed {
                what: "Hi6220 mailbox interrupt number is not 0..=31",
            });
        }
        if opps.is_empty() || opps.len() > MAX_OPPS {
            return Err(Error::Unsupported {
                what: "a stub-clock domain with no or more than 16 OPPs",
            });
        }
        sram.write32(regs::ACPU_DFS_FLAG, 0);
        sram.write32(regs::ACPU_DFS_FREQ_REQ, 0);
        sram.write32(regs::ACPU_DFS_FREQ_LMT, 0);
        ipc.write32(regs::ACK_INT_ENA, 1 << cfg.ack_irq);
        let cur = Khz(sram.read32(regs::ACPU_DFS_CUR_FREQ));
        let mut o = [Khz(0); MAX_OPPS];
        o[..opps.len()].copy_from_slice(opps);
        Ok(StubClock {
            sram,
            mbox,
            ipc,
            cfg,
            opps: o,
            nr_opps: opps.len(),
            cur,
            req: None,
            done: Fifo::new(),
            retry_at: None,
            last_step: Nanos(0),
            sent: 0,
        })
    }

    /// The OPP frequencies.
    pub fn opps(&self) -> &[Khz] {
        &self.opps[..self.nr_opps]
    }

    /// The frequency the MCU reports now (`ACPU_DFS_CUR_FREQ`).
    pub fn read_back(&self) -> Khz {
        Khz(self.sram.read32(regs::ACPU_DFS_CUR_FREQ))
    }

    /// The highest frequency the MCU allows now (Linux `hi6220_acpu_round_freq`).
    pub fn limit(&self) -> Khz {
        let max = self.sram.read32(regs::ACPU_DFS_FREQ_MAX);
        let lmt = if self.sram.read32(regs::ACPU_DFS_FLAG) == regs::ACPU_DFS_LOCK_FLAG {
            self.sram.read32(regs::ACPU_DFS_FREQ_LMT)
        } else {
            u32::MAX
        };
        Khz(max.min(lmt))
    }

    fn slot(&self) -> usize {
        self.cfg.slot as usize * regs::SLOT_STRIDE
    }

    fn slot_state(&self) -> u32 {
        self.mbox.read32(self.slot() + regs::SLOT_MODE) & regs::STATE_MASK
    }

    fn finish(&mut self, result: Result<Khz, Error>, at: Nanos) {
        let Some(req) = self.req.take() else { return };
        if let Ok(f) = result {
            self.cur = f;
        }
        self.done.push(Completion {
            pd: 0,
            requested: req.freq,
            requested_at: req.requested_at,
            result,
            at,
        });
    }

    fn kick(&mut self, now: Nanos) {
        let Some(req) = self.req.filter(|r| r.stage == Stage::Queued) else {
            return;
        };
        if self.slot_state() != regs::STATE_IDLE {
            let waited_us = us_between(req.requested_at, now);
            if waited_us >= self.cfg.ack_timeout_us {
                self.finish(
                    Err(Error::Timeout {
                        wait: Wait::MailboxAck,
                        waited_us,
                    }),
                    now,
                );
            } else {
                self.retry_at = Some(after_us(now, self.cfg.poll_us));
            }
            return;
        }
        self.retry_at = None;
        let slot = self.slot();
        self.sram.write32(regs::ACPU_DFS_FREQ_REQ, req.asked.0);
        let mode = self.mbox.read32(slot + regs::SLOT_MODE);
        let mode = (mode & !regs::STATE_MASK) | regs::STATE_TX;
        self.mbox.write32(slot + regs::SLOT_MODE, mode);
        self.mbox
            .write32(slot + regs::SLOT_MODE, (mode & !1) | regs::ACK_AUTOMATIC);
        let msg = [regs::MSG_SET_FREQ, 0, 0, 0, 0, 0, 0, 0];
        for (i, w) in msg.iter().enumerate() {
            self.mbox.write32(slot + regs::SLOT_DATA + 4 * i, *w);
        }
        self.mbox.wmb();
        self.ipc.write32(regs::DST_INT_RAW, 1 << self.cfg.dst_irq);
        self.sent += 1;
        if let Some(r) = self.req.as_mut() {
            r.stage = Stage::Sent { sent_at: now };
        }
    }

    fn step(&mut self, now: Nanos) {
        self.last_step = now;
        if let Some(req) = self.req {
            match req.stage {
                Stage::Queued => {}
                Stage::Sent { sent_at } => {
                    if self.slot_state() == regs::STATE_IDLE {
                        if let Some(r) = self.req.as_mut() {
                            r.stage = Stage::Acked { sent_at };
                        }
                    } else {
                        let waited_us = us_between(sent_at, now);
                        if waited_us >= self.cfg.ack_timeout_us {
                            self.finish(
                                Err(Error::Timeout {
                                    wait: Wait::MailboxAck,
                                    waited_us,
                                }),
                                now,
                            );
                        }
                    }
                }
                Stage::Acked { .. } => {}
            }
        }
        if let Some(Req {
            stage: Stage::Acked { sent_at },
            freq,
            asked,
            ..
        }) = self.req
        {
            let got = self.read_back();
            if got == asked {
                self.finish(Ok(got), now);
            } else if us_between(sent_at, now)
                >= self.cfg.latency_us + self.cfg.read_back_timeout_us
            {
                self.cur = got;
                self.finish(
                    Err(Error::ReadBack {
                        pd: 0,
                        want: freq,
                        got,
                    }),
                    now,
                );
            }
        }
        self.kick(now);
    }
}

impl<S: Mmio, B: Mmio, I: Mmio> CpufreqDriver for StubClock<S, B, I> {
    type Error = Error;

    fn name(&self) -> &'static str {
        "hi6220-stub-clk"
    }

    fn target(&mut self, policy: &CpufreqPolicy, freq: Khz, now: Nanos) -> Result<Nanos, Error> {
        let pd = policy.pd;
        let now = now.max(self.last_step);
        if pd != 0 {
            return Err(Error::NoSuchDomain { pd });
        }
        if !self.opps().contains(&freq) {
            return Err(Error::NotAnOpp { pd, freq });
        }
        if let Some(r) = self.req.filter(|r| r.freq == freq) {
            // The same frequency again joins the request in progress.
            return Ok(after_us(r.requested_at, self.cfg.latency_us));
        }
        let asked = Khz(freq.0.min(self.limit().0));
        // The MCU has one request word: a new request replaces a queued one and supersedes
        // a sent one once the slot is free again.
        self.req = Some(Req {
            freq,
            asked,
            requested_at: now,
            stage: Stage::Queued,
        });
        self.kick(now);
        Ok(after_us(now, self.cfg.latency_us))
    }

    fn get(&self, pd: usize) -> Khz {
        if pd == 0 {
            self.cur
        } else {
            Khz(0)
        }
    }

    fn fast_switch_possible(&self) -> bool {
        true
    }

    fn transition_latency_ns(&self, pd: usize) -> u64 {
        if pd == 0 {
            self.cfg.latency_us * 1000
        } else {
            0
        }
    }

    fn poll(&mut self, now: Nanos) -> Option<Completion<Error>> {
        // Callers on several CPUs may pass times a little out of order: never go back.
        let now = now.max(self.last_step);
        if let Some(c) = self.done.pop() {
            return Some(c);
        }
        self.step(now);
        self.done.pop()
    }

    fn next_poll(&self) -> Option<Nanos> {
        if !self.done.is_empty() {
            return Some(Nanos(0));
        }
        let again = after_us(self.last_step, self.cfg.poll_us);
        let stage = self.req.and_then(|r| match r.stage {
            Stage::Queued => None,
            Stage::Sent { .. } => Some(again),
            Stage::Acked { sent_at } => Some(after_us(sent_at, self.cfg.latency_us).max(again)),
        });
        [stage, self.retry_at].into_iter().flatten().min()
    }
}
