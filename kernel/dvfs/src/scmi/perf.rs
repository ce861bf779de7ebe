//! The SCMI performance domain management protocol (0x13): discovery of the domains and
//! their levels, and [`ScmiPerf`], the cpufreq driver that sets levels and reads them back.
//!
//! Re-derives Linux `drivers/firmware/arm_scmi/perf.c` (`scmi_perf_attributes_get`,
//! `scmi_perf_domain_attributes_get` with its `mult_factor`, `scmi_perf_describe_levels_get`
//! with the iterator of `driver.c` for pagination, v1–v3 and v4 level formats, level indexing
//! mode, `scmi_perf_level_set`/`_get`) and `drivers/cpufreq/scmi-cpufreq.c`
//! (`scmi_cpufreq_set_target`, `scmi_cpufreq_get_rate`).
//!
//! Deliberate differences from Linux: a level set is asynchronous (the request is queued,
//! sent when the channel is free, and completes later), and by default confirmed by reading
//! the level back with `LEVEL_GET` once the advertised transition latency has passed, retried
//! until it matches or a timeout — the completion time is when the firmware reports the new
//! level, so the request-to-effect latency is measured. (The Juno SCP firmware answers
//! `LEVEL_SET` at once, "fire-and-forget", and changes the level afterwards: SCP-firmware
//! `module/scmi_perf/src/scmi_perf_protocol_ops.c`, `scmi_perf_level_set_handler`.)
//! Pagination is checked harder than Linux does: a page count that changes between pages,
//! a zero-length page with levels remaining, and a reply whose length does not match its
//! number of levels are errors. A request for the frequency a request in progress already
//! asks for joins it (no second `LEVEL_SET`). Fast channels and notifications are not used.

use asym_sched::cpufreq::driver::{Completion, CpufreqDriver};
use asym_sched::cpufreq::CpufreqPolicy;
use asym_sched::types::{Khz, Nanos};

use super::{Channel, Doorbell, Name, Reply, PROTOCOL_PERF};
use crate::io::{after_us, us_between, Clock, Mmio};
use crate::queue::Fifo;
use crate::{Error, Wait};

/// `PERFORMANCE_DOMAIN_ATTRIBUTES`.
pub const MSG_DOMAIN_ATTRIBUTES: u8 = 0x3;
/// `PERFORMANCE_DESCRIBE_LEVELS`.
pub const MSG_DESCRIBE_LEVELS: u8 = 0x4;
/// `PERFORMANCE_LEVEL_SET`.
pub const MSG_LEVEL_SET: u8 = 0x7;
/// `PERFORMANCE_LEVEL_GET`.
pub const MSG_LEVEL_GET: u8 = 0x8;

/// The most performance domains recorded.
pub const MAX_DOMAINS: usize = 8;
/// The most levels per domain (Linux `MAX_OPPS`; the policy crate's `MAX_PERF_STATES`).
pub const MAX_LEVELS: usize = 16;
/// The newest protocol major version whose message formats this driver knows.
pub const MAX_VERSION_MAJOR: u32 = 4;

/// What the `power` of a level counts in (`PROTOCOL_ATTRIBUTES` flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerUnit {
    /// An abstract, linear scale.
    Abstract,
    /// Milliwatts (flags bit 0).
    MilliWatt,
    /// Microwatts (flags bit 1, v3+).
    MicroWatt,
}

/// One performance level (Linux `struct scmi_opp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Level {
    /// `performance_level`: the value `LEVEL_SET` takes (unless the domain uses level
    /// indexing).
    pub perf: u32,
    /// `power_cost`, in [`PerfInfo::power_unit`].
    pub power: u32,
    /// Worst-case transition latency to this level, µs.
    pub latency_us: u16,
    /// v4 `level_index` (the value `LEVEL_SET` takes in level indexing mode); else the
    /// level's position.
    pub index: u32,
    /// The frequency: `perf × mult_factor` (or v4 `indicative_freq` in level indexing mode).
    pub freq: Khz,
}

/// One performance domain as discovered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DomainInfo {
    /// The firmware's domain id.
    pub id: u32,
    /// `name`.
    pub name: Name,
    /// Flags bit 31: the agent may set limits.
    pub set_limits: bool,
    /// Flags bit 30: the agent may set the level.
    pub set_level: bool,
    /// Flags bit 27: fast channels exist (not used).
    pub fast_channels: bool,
    /// Flags bit 25 (v4): `LEVEL_SET`/`LEVEL_GET` take level indices.
    pub level_indexing: bool,
    /// Minimum time between level changes the firmware wants, µs (bits 19:0).
    pub rate_limit_us: u32,
    /// `sustained_freq_khz`.
    pub sustained_freq_khz: u32,
    /// `sustained_perf_level`.
    pub sustained_perf_level: u32,
    /// Hz per performance-level unit (Linux `mult_factor`).
    pub mult_factor: u64,
    levels: [Level; MAX_LEVELS],
    nr_levels: usize,
}

impl DomainInfo {
    /// The levels, ascending.
    pub fn levels(&self) -> &[Level] {
        &self.levels[..self.nr_levels]
    }

    /// The largest transition latency of any level, µs (Linux
    /// `scmi_dvfs_transition_latency_get`).
    pub fn max_latency_us(&self) -> u32 {
        self.levels()
            .iter()
            .map(|l| u32::from(l.latency_us))
            .max()
            .unwrap_or(0)
    }

    /// The level whose frequency is exactly `freq`.
    pub fn level_of(&self, freq: Khz) -> Option<&Level> {
        self.levels().iter().find(|l| l.freq == freq)
    }

    /// The value `LEVEL_SET` takes for `level`.
    pub fn wire_value(&self, level: &Level) -> u32 {
        if self.level_indexing {
            level.index
        } else {
            level.perf
        }
    }

    /// The frequency of a value `LEVEL_GET` returned: a listed level's, or (no level
    /// indexing) `value × mult_factor`; `None` if it names nothing.
    pub fn freq_of_wire(&self, value: u32) -> Option<Khz> {
        if let Some(l) = self.levels().iter().find(|l| self.wire_value(l) == value) {
            return Some(l.freq);
        }
        if self.level_indexing {
            return None;
        }
        u32::try_from(u64::from(value) * self.mult_factor / 1000)
            .ok()
            .map(Khz)
    }
}

/// What the performance protocol says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerfInfo {
    /// Protocol version: major bits 31:16, minor 15:0.
    pub version: u32,
    /// The unit of [`Level::power`].
    pub power_unit: PowerUnit,
    domains: [Option<DomainInfo>; MAX_DOMAINS],
    nr_domains: usize,
}

impl PerfInfo {
    /// Number of domains the firmware reports.
    pub fn nr_domains(&self) -> usize {
        self.nr_domains
    }

    /// Domain `id`.
    pub fn domain(&self, id: u32) -> Option<&DomainInfo> {
        self.domains.get(id as usize).and_then(Option::as_ref)
    }

    /// Every domain, by id.
    pub fn domains(&self) -> impl Iterator<Item = &DomainInfo> {
        self.domains.iter().flatten()
    }
}

/// Runs performance-protocol discovery on `chan` (the perf protocol's channel): version,
/// attributes, then every domain's attributes and levels; each message waits at most
/// `timeout_us`.
pub fn discover<S: Mmio, D: Doorbell>(
    chan: &mut Channel<S, D>,
    clock: &impl Clock,
    timeout_us: u64,
) -> Result<PerfInfo, Error> {
    let mut call =
        |msg: u8, payload: &[u32]| chan.transact(PROTOCOL_PERF, msg, payload, clock, timeout_us);
    let version = call(super::MSG_PROTOCOL_VERSION, &[])?.expect(1)?[0];
    let major = version >> 16;
    if major == 0 {
        return Err(Error::Malformed {
            what: "performance protocol major version 0",
        });
    }
    if major > MAX_VERSION_MAJOR {
        return Err(Error::Unsupported {
            what: "performance protocol versions above 4.x",
        });
    }
    let attrs_reply = call(super::MSG_PROTOCOL_ATTRIBUTES, &[])?;
    let attrs = attrs_reply.expect(4)?;
    let num_domains = (attrs[0] & 0xffff) as usize;
    let flags = attrs[0] >> 16;
    let power_unit = if major >= 3 && flags & 0b10 != 0 {
        PowerUnit::MicroWatt
    } else if flags & 0b01 != 0 {
        PowerUnit::MilliWatt
    } else {
        PowerUnit::Abstract
    };
    if num_domains == 0 {
        return Err(Error::Unsupported {
            what: "performance protocol without domains",
        });
    }
    if num_domains > MAX_DOMAINS {
        return Err(Error::Unsupported {
            what: "more than 8 performance domains",
        });
    }
    let mut domains = [None; MAX_DOMAINS];
    for (id, slot) in domains.iter_mut().enumerate().take(num_domains) {
        let mut d = domain_attributes(&mut call, id as u32, major)?;
        describe_levels(&mut call, &mut d, major)?;
        *slot = Some(d);
    }
    Ok(PerfInfo {
        version,
        power_unit,
        domains,
        nr_domains: num_domains,
    })
}

fn domain_attributes(
    call: &mut impl FnMut(u8, &[u32]) -> Result<Reply, Error>,
    id: u32,
    major: u32,
) -> Result<DomainInfo, Error> {
    let r = call(MSG_DOMAIN_ATTRIBUTES, &[id])?;
    let w = r.expect(8)?;
    let flags = w[0];
    let sustained_freq_khz = w[2];
    let sustained_perf_level = w[3];
    let mult_factor = if sustained_freq_khz == 0 || sustained_perf_level == 0 {
        1000
    } else {
        u64::from(sustained_freq_khz) * 1000 / u64::from(sustained_perf_level)
    };
    Ok(DomainInfo {
        id,
        name: Name::from_words(&w[4..8]),
        set_limits: flags & (1 << 31) != 0,
        set_level: flags & (1 << 30) != 0,
        fast_channels: flags & (1 << 27) != 0,
        level_indexing: major >= 4 && flags & (1 << 25) != 0,
        rate_limit_us: w[1] & 0xf_ffff,
        sustained_freq_khz,
        sustained_perf_level,
        mult_factor,
        levels: [Level::default(); MAX_LEVELS],
        nr_levels: 0,
    })
}

fn describe_levels(
    call: &mut impl FnMut(u8, &[u32]) -> Result<Reply, Error>,
    d: &mut DomainInfo,
    major: u32,
) -> Result<(), Error> {
    let entry_words = if major >= 4 { 5 } else { 3 };
    let mut total: Option<usize> = None;
    let mut n = 0usize;
    // Each page returns at least one level and there are at most MAX_LEVELS: bounded.
    for _ in 0..=MAX_LEVELS {
        let r = call(MSG_DESCRIBE_LEVELS, &[d.id, n as u32])?;
        r.check_status()?;
        let w = r.words();
        let Some(&head) = w.first() else {
            return Err(Error::WrongLength {
                expected: 12,
                got: r.length,
            });
        };
        let returned = (head & 0xfff) as usize;
        let remaining = (head >> 16) as usize;
        let want_len = 8 + 4 + 4 * (entry_words * returned) as u32;
        if r.length != want_len {
            return Err(Error::WrongLength {
                expected: want_len,
                got: r.length,
            });
        }
        if returned == 0 {
            return Err(Error::Malformed {
                what: if remaining > 0 {
                    "DESCRIBE_LEVELS returned no level but more remain"
                } else {
                    "performance domain without levels"
                },
            });
        }
        let this_total = n + returned + remaining;
        match total {
            None => total = Some(this_total),
            Some(t) if t != this_total => {
                return Err(Error::Malformed {
                    what: "DESCRIBE_LEVELS level count changed between pages",
                })
            }
            Some(_) => {}
        }
        if this_total > MAX_LEVELS {
            return Err(Error::Unsupported {
                what: "more than 16 performance levels in a domain",
            });
        }
        for i in 0..returned {
            let e = &w[1 + i * entry_words..1 + (i + 1) * entry_words];
            let (freq, index) = if major >= 4 && d.level_indexing {
                (Khz(e[3]), e[4])
            } else {
                let khz = u64::from(e[0]) * d.mult_factor / 1000;
                (Khz(u32::try_from(khz).unwrap_or(0)), (n + i) as u32)
            };
            if freq.0 == 0 {
                return Err(Error::Malformed {
                    what: "performance level of 0 kHz or beyond 4.29 THz",
                });
            }
            d.levels[n + i] = Level {
                perf: e[0],
                power: e[1],
                latency_us: (e[2] & 0xffff) as u16,
                index,
                freq,
            };
        }
        n += returned;
        if remaining == 0 {
            break;
        }
    }
    if total != Some(n) {
        return Err(Error::Malformed {
            what: "DESCRIBE_LEVELS never finished",
        });
    }
    let levels = &mut d.levels[..n];
    levels.sort_unstable_by_key(|l| l.perf);
    if levels.windows(2).any(|p| p[0].freq >= p[1].freq) {
        return Err(Error::Malformed {
            what: "performance levels with equal or decreasing frequencies",
        });
    }
    d.nr_levels = n;
    Ok(())
}

/// Timeouts and behaviour of [`ScmiPerf`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// How long a reply may take (Linux `transports/mailbox.c` `max_rx_timeout_ms` = 30).
    pub reply_timeout_us: u64,
    /// How long a request may wait for the firmware to hand the channel back (Linux
    /// `shmem_tx_prepare` waits twice the reply timeout).
    pub busy_timeout_us: u64,
    /// Confirm every level set with `LEVEL_GET` after the transition latency.
    pub read_back: bool,
    /// Delay between read-backs that still show the old level.
    pub read_back_retry_us: u64,
    /// How long after the advertised latency the level may take to show.
    pub read_back_timeout_us: u64,
    /// Polling interval [`CpufreqDriver::next_poll`] suggests while a reply is outstanding.
    pub reply_poll_us: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            reply_timeout_us: 30_000,
            busy_timeout_us: 60_000,
            read_back: true,
            read_back_retry_us: 100,
            read_back_timeout_us: 30_000,
            reply_poll_us: 10,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Waiting for the channel.
    Queued,
    /// `LEVEL_SET` outstanding.
    Set,
    /// Set acknowledged; read back (or complete) at `check_at`.
    Settle { check_at: Nanos },
    /// `LEVEL_GET` due.
    ReadBackDue,
    /// `LEVEL_GET` outstanding.
    Get,
}

#[derive(Clone, Copy, Debug)]
struct Req {
    freq: Khz,
    wire: u32,
    requested_at: Nanos,
    gen: u32,
    stage: Stage,
    /// When the set was acknowledged (the read-back deadline counts from it).
    acked_at: Nanos,
}

#[derive(Clone, Copy, Debug)]
struct Dom {
    info: DomainInfo,
    cur: Khz,
    req: Option<Req>,
    gen: u32,
}

#[derive(Clone, Copy, Debug)]
struct Op {
    pd: usize,
    gen: u32,
    get: bool,
    sent_at: Nanos,
}

/// Message counters, for the boot report and the self tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages sent.
    pub sent: u64,
    /// Replies received (any status).
    pub replies: u64,
    /// Requests that failed.
    pub failed: u64,
    /// Read-backs that still showed another level and were retried.
    pub read_back_retries: u64,
}

/// The SCMI performance cpufreq driver: policy `pd` is firmware domain `domain_of_pd[pd]`.
pub struct ScmiPerf<S, D> {
    chan: Channel<S, D>,
    doms: [Option<Dom>; MAX_DOMAINS],
    nr: usize,
    op: Option<Op>,
    done: Fifo<Completion<Error>, MAX_DOMAINS>,
    retry_at: Option<Nanos>,
    last_step: Nanos,
    cfg: Config,
    stats: Stats,
}

impl<S, D> core::fmt::Debug for ScmiPerf<S, D> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ScmiPerf")
            .field("domains", &self.nr)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<S: Mmio, D: Doorbell> ScmiPerf<S, D> {
    /// The driver for the policies whose firmware domains are `domain_of_pd` (Juno r2:
    /// `[0, 1]`, from the CPUs' `clocks = <&scmi_dvfs N>`), on the perf protocol's channel,
    /// with the levels `info` discovered. Reads each domain's current level (each read waits
    /// at most `cfg.reply_timeout_us`).
    pub fn new(
        mut chan: Channel<S, D>,
        info: &PerfInfo,
        domain_of_pd: &[u32],
        cfg: Config,
        clock: &impl Clock,
    ) -> Result<Self, Error> {
        if domain_of_pd.len() > MAX_DOMAINS {
            return Err(Error::Unsupported {
                what: "more than 8 cpufreq policies",
            });
        }
        let mut doms = [None; MAX_DOMAINS];
        for (pd, &id) in domain_of_pd.iter().enumerate() {
            let info = *info.domain(id).ok_or(Error::NoSuchDomain { pd })?;
            let r = chan.transact(
                PROTOCOL_PERF,
                MSG_LEVEL_GET,
                &[id],
                clock,
                cfg.reply_timeout_us,
            )?;
            let v = r.expect(1)?[0];
            let cur = info.freq_of_wire(v).ok_or(Error::Malformed {
                what: "LEVEL_GET returned a level the domain does not list",
            })?;
            doms[pd] = Some(Dom {
                info,
                cur,
                req: None,
                gen: 0,
            });
        }
        Ok(ScmiPerf {
            chan,
            doms,
            nr: domain_of_pd.len(),
            op: None,
            done: Fifo::new(),
            retry_at: None,
            last_step: Nanos(0),
            cfg,
            stats: Stats::default(),
        })
    }

    /// The firmware's description of policy `pd`'s domain.
    pub fn domain(&self, pd: usize) -> Option<&DomainInfo> {
        self.doms.get(pd)?.as_ref().map(|d| &d.info)
    }

    /// Number of policies.
    pub fn nr_domains(&self) -> usize {
        self.nr
    }

    /// Message counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Whether nothing is queued or outstanding.
    pub fn idle(&self) -> bool {
        self.op.is_none()
            && self.done.is_empty()
            && self.doms.iter().flatten().all(|d| d.req.is_none())
    }

    fn dom(&mut self, pd: usize) -> Option<&mut Dom> {
        self.doms.get_mut(pd)?.as_mut()
    }

    fn finish(&mut self, pd: usize, gen: u32, result: Result<Khz, Error>, at: Nanos) {
        let Some(d) = self.dom(pd) else { return };
        let Some(req) = d.req.filter(|r| r.gen == gen) else {
            return;
        };
        d.req = None;
        if let Ok(f) = result {
            d.cur = f;
        }
        if result.is_err() {
            self.stats.failed += 1;
        }
        self.done.push(Completion {
            pd,
            requested: req.freq,
            requested_at: req.requested_at,
            result,
            at,
        });
    }

    fn set_stage(&mut self, pd: usize, gen: u32, stage: Stage) {
        if let Some(req) = self.dom(pd).and_then(|d| d.req.as_mut()) {
            if req.gen == gen {
                req.stage = stage;
            }
        }
    }

    /// Sends the next message if the channel is ours: a queued set first (oldest request),
    /// else a due read-back.
    fn kick(&mut self, now: Nanos) {
        if self.op.is_some() {
            return;
        }
        let pick = |want: Stage| {
            self.doms
                .iter()
                .enumerate()
                .filter_map(|(pd, d)| Some((pd, d.as_ref()?.req?)))
                .filter(|(_, r)| r.stage == want)
                .min_by_key(|(_, r)| r.requested_at)
        };
        let (pd, req, get) = match pick(Stage::Queued) {
            Some((pd, r)) => (pd, r, false),
            None => match pick(Stage::ReadBackDue) {
                Some((pd, r)) => (pd, r, true),
                None => return,
            },
        };
        let Some(id) = self.doms[pd].as_ref().map(|d| d.info.id) else {
            return;
        };
        let sent = if get {
            self.chan.send(PROTOCOL_PERF, MSG_LEVEL_GET, &[id])
        } else {
            self.chan
                .send(PROTOCOL_PERF, MSG_LEVEL_SET, &[id, req.wire])
        };
        match sent {
            Ok(_) => {
                self.stats.sent += 1;
                self.retry_at = None;
                self.op = Some(Op {
                    pd,
                    gen: req.gen,
                    get,
                    sent_at: now,
                });
                self.set_stage(pd, req.gen, if get { Stage::Get } else { Stage::Set });
            }
            Err(Error::ChannelBusy | Error::DoorbellPending) => {
                let waited_us = us_between(req.requested_at, now);
                if waited_us >= self.cfg.busy_timeout_us {
                    self.finish(
                        pd,
                        req.gen,
                        Err(Error::Timeout {
                            wait: Wait::ChannelFree,
                            waited_us,
                        }),
                        now,
                    );
                } else {
                    self.retry_at = Some(after_us(now, self.cfg.reply_poll_us));
                }
            }
            Err(e) => self.finish(pd, req.gen, Err(e), now),
        }
    }

    fn on_reply(&mut self, op: Op, r: Result<Reply, Error>, now: Nanos) {
        self.stats.replies += u64::from(r.is_ok());
        let Some(d) = self.doms.get(op.pd).and_then(Option::as_ref) else {
            return;
        };
        let info = d.info;
        let live = d.req.filter(|q| q.gen == op.gen);
        if !op.get {
            let Some(req) = live else { return };
            match r.and_then(|r| r.expect(0).map(|_| ())) {
                Ok(()) => {
                    let latency = u64::from(info.max_latency_us());
                    let check_at = after_us(now, latency);
                    if let Some(q) = self.dom(op.pd).and_then(|d| d.req.as_mut()) {
                        q.acked_at = now;
                    }
                    self.set_stage(op.pd, req.gen, Stage::Settle { check_at });
                }
                Err(e) => self.finish(op.pd, req.gen, Err(e), now),
            }
            return;
        }
        let got = r.and_then(|r| {
            let v = r.expect(1)?[0];
            info.freq_of_wire(v).ok_or(Error::Malformed {
                what: "LEVEL_GET returned a level the domain does not list",
            })
        });
        if let (Ok(f), Some(d)) = (got, self.dom(op.pd)) {
            d.cur = f;
        }
        let Some(req) = live else { return };
        match got {
            Ok(f) if f == req.freq => self.finish(op.pd, req.gen, Ok(f), now),
            Ok(f) => {
                let deadline = after_us(
                    req.acked_at,
                    u64::from(info.max_latency_us()) + self.cfg.read_back_timeout_us,
                );
                if now >= deadline {
                    self.finish(
                        op.pd,
                        req.gen,
                        Err(Error::ReadBack {
                            pd: op.pd,
                            want: req.freq,
                            got: f,
                        }),
                        now,
                    );
                } else {
                    self.stats.read_back_retries += 1;
                    let check_at = after_us(now, self.cfg.read_back_retry_us);
                    self.set_stage(op.pd, req.gen, Stage::Settle { check_at });
                }
            }
            Err(e) => self.finish(op.pd, req.gen, Err(e), now),
        }
    }

    fn step(&mut self, now: Nanos) {
        self.last_step = now;
        if let Some(op) = self.op {
            match self.chan.poll() {
                Ok(None) => {
                    let waited_us = us_between(op.sent_at, now);
                    if waited_us >= self.cfg.reply_timeout_us {
                        self.chan.abandon();
                        self.op = None;
                        self.finish(
                            op.pd,
                            op.gen,
                            Err(Error::Timeout {
                                wait: Wait::Reply,
                                waited_us,
                            }),
                            now,
                        );
                    }
                }
                Ok(Some(r)) => {
                    self.op = None;
                    self.on_reply(op, Ok(r), now);
                }
                Err(e) => {
                    self.op = None;
                    self.on_reply(op, Err(e), now);
                }
            }
        }
        for pd in 0..self.nr {
            let Some(req) = self.doms[pd].as_ref().and_then(|d| d.req) else {
                continue;
            };
            if let Stage::Settle { check_at } = req.stage {
                if check_at <= now {
                    if self.cfg.read_back {
                        self.set_stage(pd, req.gen, Stage::ReadBackDue);
                    } else {
                        self.finish(pd, req.gen, Ok(req.freq), check_at);
                    }
                }
            }
        }
        self.kick(now);
    }
}

impl<S: Mmio, D: Doorbell> CpufreqDriver for ScmiPerf<S, D> {
    type Error = Error;

    fn name(&self) -> &'static str {
        "scmi-perf"
    }

    fn target(&mut self, policy: &CpufreqPolicy, freq: Khz, now: Nanos) -> Result<Nanos, Error> {
        let pd = policy.pd;
        let now = now.max(self.last_step);
        let d = self.dom(pd).ok_or(Error::NoSuchDomain { pd })?;
        let level = *d.info.level_of(freq).ok_or(Error::NotAnOpp { pd, freq })?;
        if !d.info.set_level {
            return Err(Error::Unsupported {
                what: "LEVEL_SET on this domain (the firmware denies this agent)",
            });
        }
        let latency = u64::from(d.info.max_latency_us());
        // The same frequency again (schedutil repeats a request when its limits change)
        // joins the request in progress instead of restarting it.
        if let Some(r) = d.req.filter(|r| r.freq == freq) {
            return Ok(after_us(r.requested_at, latency));
        }
        d.gen = d.gen.wrapping_add(1);
        d.req = Some(Req {
            freq,
            wire: d.info.wire_value(&level),
            requested_at: now,
            gen: d.gen,
            stage: Stage::Queued,
            acked_at: now,
        });
        self.kick(now);
        Ok(after_us(now, latency))
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
        self.domain(pd)
            .map_or(0, |d| u64::from(d.max_latency_us()) * 1000)
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
        let op = self.op.map(|op| {
            after_us(op.sent_at, self.cfg.reply_poll_us)
                .max(after_us(self.last_step, self.cfg.reply_poll_us))
        });
        let settle = self
            .doms
            .iter()
            .flatten()
            .filter_map(|d| match d.req?.stage {
                Stage::Settle { check_at } => Some(check_at),
                _ => None,
            })
            .min();
        [op, settle, self.retry_at].into_iter().flatten().min()
    }
}
