//! HiKey960 (Hi3660): the stub clock that asks the LPM3 firmware for a cluster frequency over
//! the Hi3660 mailbox, and reads the frequency LPM3 reports back.
//!
//! Re-derives Linux `drivers/clk/hisilicon/clk-hi3660-stub.c` (message
//! `{cmd, MHz, 0, …}`, commands `0x0001030A`/`0x0002030A` for clusters 0/1, read-back at
//! `+0x70 + 4 × id` of the stub-clock region) and `drivers/mailbox/hi3660-mailbox.c` (channel
//! registers every 0x40 bytes, unlock key `0x1ACCE551` at `+0xA00`, claiming a channel through
//! its source register, `hi3660_mbox_check_state`, automatic acknowledge). DT (mainline
//! `hi3660.dtsi`): `mailbox@e896b000`, `stub_clock@e896b500` with `mboxes = <&mailbox 13 3 0>`
//! (channel 13, destination interrupt 3, acknowledge interrupt 0), `clock-latency-ns = 300000`.
//!
//! Deliberate differences from Linux: Linux fires the message and forgets it
//! (`mbox_client_txdone` at once, the clock framework re-reads the rate later); here a request
//! completes when LPM3's read-back shows the new frequency — measuring the latency — or fails
//! with [`Error::ReadBack`] after a timeout. Waiting for the previous message's
//! acknowledgement never blocks: the request stays queued until the channel is ready, and fails
//! with a [`Wait::MailboxAck`] timeout after Linux's 300 ms.

use asym_sched::cpufreq::driver::{Completion, CpufreqDriver};
use asym_sched::cpufreq::CpufreqPolicy;
use asym_sched::types::{Khz, Nanos};

use crate::io::{after_us, us_between, Clock, Mmio};
use crate::queue::Fifo;
use crate::{Error, Wait};

/// Mailbox register offsets (Linux `hi3660-mailbox.c`).
pub mod regs {
    /// Bytes per channel.
    pub const CHANNEL_STRIDE: usize = 0x40;
    /// Source: the bit of the owner's acknowledge interrupt.
    pub const SRC: usize = 0x00;
    /// Destination: the remote's interrupt bit.
    pub const DST: usize = 0x04;
    /// Mode: bits 3:0 configuration (bit 0 automatic acknowledge), bits 7:4 state.
    pub const MODE: usize = 0x10;
    /// Interrupt mask.
    pub const IMASK: usize = 0x14;
    /// Interrupt clear (acknowledge taken).
    pub const ICLR: usize = 0x18;
    /// Send: write the source bit to send.
    pub const SEND: usize = 0x1c;
    /// Eight data words.
    pub const DATA: usize = 0x20;
    /// Words in a message.
    pub const MSG_LEN: usize = 8;
    /// The global IPC lock.
    pub const LOCK: usize = 0xa00;
    /// Writing this to [`LOCK`] unlocks the mailbox registers.
    pub const UNLOCK_KEY: u32 = 0x1acc_e551;
    /// Channel free.
    pub const STATE_IDLE: u32 = 1 << 4;
    /// Claimed by a source, ready to send.
    pub const STATE_READY: u32 = 1 << 5;
    /// Message with the destination.
    pub const STATE_DEST: u32 = 1 << 6;
    /// The destination acknowledged.
    pub const STATE_ACK: u32 = 1 << 7;
    /// All state bits.
    pub const STATE_MASK: u32 = 0xf0;
    /// `MODE` bit 0: the hardware acknowledges automatically.
    pub const AUTOMATIC_ACK: u32 = 1;
    /// Offset of the frequency read-back words in the stub-clock region (Linux
    /// `HI3660_STUB_CLOCK_DATA`): MHz, one word per clock id.
    pub const STUB_CLOCK_DATA: usize = 0x70;
}

/// The set-rate command of stub clock `id` (Linux `hi3660_stub_clks`): cluster 0, cluster 1,
/// GPU, DDR.
pub const fn set_rate_cmd(id: u32) -> Option<u32> {
    match id {
        0 => Some(0x0001_030a),
        1 => Some(0x0002_030a),
        2 => Some(0x0003_030a),
        3 => Some(0x0004_0309),
        _ => None,
    }
}

/// The most OPPs per domain.
pub const MAX_OPPS: usize = 16;
/// The most domains (clusters) per driver.
pub const MAX_DOMAINS: usize = 4;

/// The mailbox channel and timing (from the DT and Linux).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// `mboxes` cell 1: the channel (13 on HiKey960).
    pub channel: u32,
    /// `mboxes` cell 2: LPM3's interrupt (3).
    pub dst_irq: u32,
    /// `mboxes` cell 3: our acknowledge interrupt (0).
    pub ack_irq: u32,
    /// `clock-latency-ns` / 1000: when to start reading back.
    pub latency_us: u64,
    /// How long the previous message's acknowledgement may take (Linux
    /// `hi3660_mbox_check_state`: 300 ms).
    pub ack_timeout_us: u64,
    /// How long after the latency the read-back may take to show the frequency.
    pub read_back_timeout_us: u64,
    /// Polling interval suggested by [`CpufreqDriver::next_poll`].
    pub poll_us: u64,
}

impl Config {
    /// HiKey960: `mboxes = <&mailbox 13 3 0>`, `clock-latency-ns = <300000>`.
    pub const HIKEY960: Config = Config {
        channel: 13,
        dst_irq: 3,
        ack_irq: 0,
        latency_us: 300,
        ack_timeout_us: 300_000,
        read_back_timeout_us: 30_000,
        poll_us: 50,
    };
}

/// One stub clock driven as a cpufreq domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Domain {
    /// The stub clock id (`HI3660_CLK_STUB_CLUSTER0` = 0, `_CLUSTER1` = 1).
    pub clock_id: u32,
    opps: [Khz; MAX_OPPS],
    nr: usize,
}

impl Domain {
    /// Clock `clock_id` with the OPP frequencies `opps` (from the DT's OPP table).
    pub fn new(clock_id: u32, opps: &[Khz]) -> Result<Domain, Error> {
        if set_rate_cmd(clock_id).is_none() {
            return Err(Error::Malformed {
                what: "Hi3660 stub clock id is not 0..=3",
            });
        }
        if opps.is_empty() || opps.len() > MAX_OPPS {
            return Err(Error::Unsupported {
                what: "a stub-clock domain with no or more than 16 OPPs",
            });
        }
        let mut o = [Khz(0); MAX_OPPS];
        o[..opps.len()].copy_from_slice(opps);
        Ok(Domain {
            clock_id,
            opps: o,
            nr: opps.len(),
        })
    }

    /// The OPP frequencies.
    pub fn opps(&self) -> &[Khz] {
        &self.opps[..self.nr]
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Queued,
    ReadBack { sent_at: Nanos },
}

#[derive(Clone, Copy, Debug)]
struct Req {
    freq: Khz,
    requested_at: Nanos,
    stage: Stage,
}

#[derive(Clone, Copy, Debug)]
struct Dom {
    d: Domain,
    cur: Khz,
    req: Option<Req>,
}

/// The Hi3660 stub-clock cpufreq driver: policy `pd` is `domains[pd]`.
pub struct StubClock<M, S> {
    mbox: M,
    stub: S,
    cfg: Config,
    doms: [Option<Dom>; MAX_DOMAINS],
    nr: usize,
    done: Fifo<Completion<Error>, MAX_DOMAINS>,
    retry_at: Option<Nanos>,
    last_step: Nanos,
    /// Messages sent.
    pub sent: u64,
}

impl<M, S> core::fmt::Debug for StubClock<M, S> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("hi3660::StubClock")
            .field("domains", &self.nr)
            .field("sent", &self.sent)
            .finish_non_exhaustive()
    }
}

impl<M: Mmio, S: Mmio> StubClock<M, S> {
    /// The driver over the mailbox block `mbox` (`mailbox@e896b000`, 4 KiB) and the stub-clock
    /// region `stub` (`stub_clock@e896b500`): unlocks the mailbox, claims the channel (Linux
    /// `hi3660_mbox_startup`) and reads every domain's frequency.
    pub fn new(
        mut mbox: M,
        stub: S,
        domains: &[Domain],
        cfg: Config,
        clock: &impl Clock,
    ) -> Result<Self, Error> {
        let ch = cfg.channel as usize * regs::CHANNEL_STRIDE;
        let need = (ch + regs::DATA + 4 * regs::MSG_LEN).max(regs::LOCK + 4);
        if cfg.channel >= 32 || mbox.size() < need {
            return Err(Error::RegionTooSmall {
                need,
                have: mbox.size(),
            });
        }
        if cfg.dst_irq >= 32 || cfg.ack_irq >= 32 {
            return Err(Error::Malformed {
                what: "Hi3660 mailbox interrupt number is not 0..=31",
            });
        }
        if domains.len() > MAX_DOMAINS {
            return Err(Error::Unsupported {
                what: "more than 4 stub-clock domains",
            });
        }
        for d in domains {
            let need = regs::STUB_CLOCK_DATA + 4 * (d.clock_id as usize + 1);
            if stub.size() < need {
                return Err(Error::RegionTooSmall {
                    need,
                    have: stub.size(),
                });
            }
        }
        // Unlock: up to 4 writes, 10 µs apart (Linux `hi3660_mbox_unlock`).
        let mut unlocked = false;
        for _ in 0..4 {
            mbox.write32(regs::LOCK, regs::UNLOCK_KEY);
            if mbox.read32(regs::LOCK) == 0 {
                unlocked = true;
                break;
            }
            let t = after_us(clock.now(), 10);
            while clock.now() < t {
                clock.relax();
            }
        }
        if !unlocked {
            return Err(Error::MailboxLocked);
        }
        // Claim (Linux `hi3660_mbox_acquire_channel`): an idle channel takes our bit.
        let ack = 1u32 << cfg.ack_irq;
        let mut claimed = false;
        for _ in 0..10 {
            if mbox.read32(ch + regs::MODE) & regs::STATE_IDLE != 0 {
                mbox.write32(ch + regs::SRC, ack);
            }
            if mbox.read32(ch + regs::SRC) & ack != 0 {
                claimed = true;
                break;
            }
        }
        if !claimed {
            return Err(Error::MailboxNotAcquired);
        }
        let mut doms = [None; MAX_DOMAINS];
        for (slot, d) in doms.iter_mut().zip(domains) {
            let mhz = stub.read32(regs::STUB_CLOCK_DATA + 4 * d.clock_id as usize);
            *slot = Some(Dom {
                d: *d,
                cur: Khz(mhz.saturating_mul(1000)),
                req: None,
            });
        }
        Ok(StubClock {
            mbox,
            stub,
            cfg,
            doms,
            nr: domains.len(),
            done: Fifo::new(),
            retry_at: None,
            last_step: Nanos(0),
            sent: 0,
        })
    }

    /// Domain `pd`.
    pub fn domain(&self, pd: usize) -> Option<&Domain> {
        self.doms.get(pd)?.as_ref().map(|d| &d.d)
    }

    /// The frequency LPM3 reports for domain `pd` now.
    pub fn read_back(&self, pd: usize) -> Option<Khz> {
        let d = self.domain(pd)?;
        let mhz = self
            .stub
            .read32(regs::STUB_CLOCK_DATA + 4 * d.clock_id as usize);
        Some(Khz(mhz.saturating_mul(1000)))
    }

    fn ch(&self) -> usize {
        self.cfg.channel as usize * regs::CHANNEL_STRIDE
    }

    fn finish(&mut self, pd: usize, result: Result<Khz, Error>, at: Nanos) {
        let Some(d) = self.doms.get_mut(pd).and_then(Option::as_mut) else {
            return;
        };
        let Some(req) = d.req.take() else { return };
        if let Ok(f) = result {
            d.cur = f;
        }
        self.done.push(Completion {
            pd,
            requested: req.freq,
            requested_at: req.requested_at,
            result,
            at,
        });
    }

    /// Whether the channel can take a message (Linux `hi3660_mbox_check_state`, without the
    /// wait): ready, or acknowledged (then the acknowledgement is cleared).
    fn channel_ready(&mut self) -> bool {
        let ch = self.ch();
        let mode = self.mbox.read32(ch + regs::MODE);
        if mode & regs::STATE_READY != 0 {
            return true;
        }
        if mode & regs::STATE_ACK != 0 {
            self.mbox.write32(ch + regs::ICLR, 1 << self.cfg.ack_irq);
            return true;
        }
        false
    }

    fn send(&mut self, pd: usize, mhz: u32) {
        let ch = self.ch();
        let Some(id) = self.domain(pd).map(|d| d.clock_id) else {
            return;
        };
        let Some(cmd) = set_rate_cmd(id) else { return };
        let dst = 1u32 << self.cfg.dst_irq;
        self.mbox.write32(ch + regs::IMASK, !dst);
        self.mbox.write32(ch + regs::DST, dst);
        self.mbox.write32(ch + regs::MODE, regs::AUTOMATIC_ACK);
        let msg = [cmd, mhz, 0, 0, 0, 0, 0, 0];
        for (i, w) in msg.iter().enumerate() {
            self.mbox.write32(ch + regs::DATA + 4 * i, *w);
        }
        self.mbox.wmb();
        self.mbox.write32(ch + regs::SEND, 1 << self.cfg.ack_irq);
        self.sent += 1;
    }

    fn kick(&mut self, now: Nanos) {
        let next = self
            .doms
            .iter()
            .enumerate()
            .filter_map(|(pd, d)| Some((pd, d.as_ref()?.req?)))
            .filter(|(_, r)| r.stage == Stage::Queued)
            .min_by_key(|(_, r)| r.requested_at);
        let Some((pd, req)) = next else { return };
        if !self.channel_ready() {
            let waited_us = us_between(req.requested_at, now);
            if waited_us >= self.cfg.ack_timeout_us {
                self.finish(
                    pd,
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
        self.send(pd, req.freq.0 / 1000);
        if let Some(r) = self.doms[pd].as_mut().and_then(|d| d.req.as_mut()) {
            r.stage = Stage::ReadBack { sent_at: now };
        }
    }

    fn step(&mut self, now: Nanos) {
        self.last_step = now;
        for pd in 0..self.nr {
            let Some(req) = self.doms[pd].as_ref().and_then(|d| d.req) else {
                continue;
            };
            let Stage::ReadBack { sent_at } = req.stage else {
                continue;
            };
            let Some(got) = self.read_back(pd) else {
                continue;
            };
            if got.0 / 1000 == req.freq.0 / 1000 {
                self.finish(pd, Ok(got), now);
            } else if us_between(sent_at, now)
                >= self.cfg.latency_us + self.cfg.read_back_timeout_us
            {
                if let Some(d) = self.doms[pd].as_mut() {
                    d.cur = got;
                }
                self.finish(
                    pd,
                    Err(Error::ReadBack {
                        pd,
                        want: req.freq,
                        got,
                    }),
                    now,
                );
            }
        }
        self.kick(now);
    }
}

impl<M: Mmio, S: Mmio> CpufreqDriver for StubClock<M, S> {
    type Error = Error;

    fn name(&self) -> &'static str {
        "hi3660-stub-clk"
    }

    fn target(&mut self, policy: &CpufreqPolicy, freq: Khz, now: Nanos) -> Result<Nanos, Error> {
        let pd = policy.pd;
        let now = now.max(self.last_step);
        let d = self
            .doms
            .get_mut(pd)
            .and_then(Option::as_mut)
            .ok_or(Error::NoSuchDomain { pd })?;
        if !d.d.opps().contains(&freq) {
            return Err(Error::NotAnOpp { pd, freq });
        }
        // The same frequency again joins the request in progress; another replaces a queued
        // request and supersedes a sent one (its read-back is no longer awaited).
        if let Some(r) = d.req.filter(|r| r.freq == freq) {
            return Ok(after_us(r.requested_at, self.cfg.latency_us));
        }
        d.req = Some(Req {
            freq,
            requested_at: now,
            stage: Stage::Queued,
        });
        self.kick(now);
        Ok(after_us(now, self.cfg.latency_us))
    }

    fn get(&self, pd: usize) -> Khz {
        self.doms
            .get(pd)
            .and_then(Option::as_ref)
            .map_or(Khz(0), |d| d.cur)
    }

    fn fast_switch_possible(&self) -> bool {
        true
    }

    fn transition_latency_ns(&self, pd: usize) -> u64 {
        if pd < self.nr {
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
        let rb = self
            .doms
            .iter()
            .flatten()
            .filter_map(|d| match d.req?.stage {
                Stage::ReadBack { sent_at } => Some(
                    after_us(sent_at, self.cfg.latency_us)
                        .max(after_us(self.last_step, self.cfg.poll_us)),
                ),
                Stage::Queued => None,
            })
            .min();
        [rb, self.retry_at].into_iter().flatten().min()
    }
}
