//! An SCMI platform (the Juno SCP firmware's agent-facing side): the base protocol and the
//! performance protocol over one shared-memory channel.
//!
//! Written from the SCMI specification (DEN0056: message formats, status codes, the
//! shared-memory transport) and SCP-firmware's behaviour where the specification leaves a
//! choice (`module/transport/src/mod_transport.c`: a length outside the channel sets
//! `CHANNEL_ERROR` and answers `PROTOCOL_ERROR`; `module/scmi/src/mod_scmi.c`: an unknown
//! protocol is `NOT_SUPPORTED`, an unknown message `NOT_FOUND`, a wrong payload size
//! `PROTOCOL_ERROR`; `module/scmi_perf/src/scmi_perf_protocol_ops.c`: `DESCRIBE_LEVELS` with
//! an index past the end is `INVALID_PARAMETERS`, an unknown domain `NOT_FOUND`, a level that is
//! not an OPP `OUT_OF_RANGE`, and `LEVEL_SET` is answered at once, the level changing after the
//! DVFS transition). Juno r2's tables are [`JUNO_R2`], from
//! `product/juno/scp_ramfw/config_dvfs.c`.

use asym_sched::types::Nanos;

use crate::io::Mmio;
use crate::scmi::base::{
    MSG_DISCOVER_IMPLEMENTATION_VERSION, MSG_DISCOVER_LIST_PROTOCOLS, MSG_DISCOVER_VENDOR,
};
use crate::scmi::perf::{MSG_DESCRIBE_LEVELS, MSG_DOMAIN_ATTRIBUTES, MSG_LEVEL_GET, MSG_LEVEL_SET};
use crate::scmi::{
    smt, Header, Name, Status, MSG_PROTOCOL_ATTRIBUTES, MSG_PROTOCOL_VERSION, PROTOCOL_BASE,
    PROTOCOL_PERF,
};

/// Domains modelled.
const MAX_MODEL_DOMAINS: usize = 8;
/// Return words a response can carry in this model.
const MAX_RET: usize = 64;

/// One performance level of a modelled domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelLevel {
    /// `performance_level`.
    pub perf: u32,
    /// `power_cost`.
    pub power: u32,
    /// The frequency in kHz (v4 `indicative_freq`).
    pub freq_khz: u32,
}

/// One modelled performance domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelDomain {
    /// `name`.
    pub name: &'static str,
    /// Ascending.
    pub levels: &'static [ModelLevel],
    /// Index of the sustained level (`DOMAIN_ATTRIBUTES` sustained frequency and level).
    pub sustained: usize,
    /// Transition latency, µs (reported per level; also how long a change takes here).
    pub latency_us: u16,
    /// Index of the level the domain starts at.
    pub boot_level: usize,
}

/// What the platform is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlatformConfig {
    /// Base protocol version.
    pub base_version: u32,
    /// Performance protocol version (major 1–3: three-word levels; 4: five words).
    pub perf_version: u32,
    /// `BASE_DISCOVER_VENDOR`.
    pub vendor: &'static str,
    /// `BASE_DISCOVER_IMPLEMENTATION_VERSION`.
    pub impl_version: u32,
    /// Agents (`PROTOCOL_ATTRIBUTES` bits 15:8).
    pub num_agents: u8,
    /// Protocols implemented besides base, ascending.
    pub protocols: &'static [u8],
    /// Power in milliwatts (`PROTOCOL_ATTRIBUTES` flags bit 0).
    pub power_mw: bool,
    /// v4 level indexing (`DOMAIN_ATTRIBUTES` bit 25).
    pub level_indexing: bool,
    /// At most this many levels per `DESCRIBE_LEVELS` page (0: as many as fit the channel).
    pub levels_per_page: usize,
    /// At most this many protocol ids per `BASE_DISCOVER_LIST_PROTOCOLS` page (0: as many as
    /// fit the channel).
    pub protocols_per_page: usize,
    /// The domains, by id.
    pub domains: &'static [ModelDomain],
}

const fn lvl(mhz: u32, power_mw: u32) -> ModelLevel {
    ModelLevel {
        perf: mhz * 1_000_000,
        power: power_mw,
        freq_khz: mhz * 1000,
    }
}

/// Juno r2's SCP firmware. source: ARM-software/SCP-firmware
/// `product/juno/scp_ramfw/config_dvfs.c` (`cpu_group_big_r2`, `cpu_group_little_r2`,
/// `gpu_r2`: level = frequency in Hz, power = (u32)(C·MHz·V²) mW with C = 0.45, 0.14, 4.6875,
/// latency 1450 µs, sustained index 1), `config_dvfs.h` (domain ids BIG 0, LITTLE 1, GPU 2),
/// `config_scmi.c` (vendor "arm"), `mod_scmi_base.h`/`scmi_perf.h` (versions 2.0); the
/// protocol list is the SCMI protocols `scp_ramfw` configures (power domain 0x11, system power
/// 0x12, perf 0x13, clock 0x14, sensor 0x15, reset 0x16); agents OSPM and PSCI.
pub const JUNO_R2: PlatformConfig = PlatformConfig {
    base_version: 0x2_0000,
    perf_version: 0x2_0000,
    vendor: "arm",
    // The firmware's build version; its value does not matter to the agent.
    impl_version: 0,
    num_agents: 2,
    protocols: &[0x11, 0x12, 0x13, 0x14, 0x15, 0x16],
    power_mw: true,
    level_indexing: false,
    levels_per_page: 0,
    protocols_per_page: 0,
    domains: &[
        ModelDomain {
            name: "BIG_CPU",
            // 0.45·600·0.82² = 181.5, 0.45·1000·0.9² = 364.5, 0.45·1200·1.0² = 540.
            levels: &[lvl(600, 181), lvl(1000, 364), lvl(1200, 540)],
            sustained: 1,
            latency_us: 1450,
            boot_level: 2,
        },
        ModelDomain {
            name: "LITTLE_CPU",
            // 0.14·450·0.82² = 42.4, 0.14·800·0.9² = 90.7, 0.14·950·1.0² = 133.
            levels: &[lvl(450, 42), lvl(800, 90), lvl(950, 133)],
            sustained: 1,
            latency_us: 1450,
            boot_level: 2,
        },
        ModelDomain {
            name: "GPU",
            // 4.6875·450·0.82² = 1418.3, 4.6875·600·0.9² = 2278.1.
            levels: &[lvl(450, 1418), lvl(600, 2278)],
            sustained: 1,
            latency_us: 1450,
            boot_level: 1,
        },
    ],
};

/// Faults to inject into the platform's answers (all off by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Faults {
    /// Answer message (protocol, message) with this status and nothing else.
    pub status: Option<(u8, u8, Status)>,
    /// XOR into the token of every answer.
    pub token_xor: u16,
    /// XOR into the rest of the answer's header (message id, type, protocol).
    pub header_xor: u32,
    /// Added to the answer's `length` field.
    pub length_delta: i32,
    /// Never answer: the channel stays the platform's.
    pub silent: bool,
    /// Set `CHANNEL_ERROR` on every answer.
    pub channel_error: bool,
    /// Answer `LEVEL_SET` with success but change nothing.
    pub ignore_level_set: bool,
    /// Make a level change take this much longer than the advertised latency.
    pub extra_latency_us: u32,
    /// `DESCRIBE_LEVELS` claims this many more levels remain than there are.
    pub remaining_lie: u16,
}

#[derive(Clone, Copy, Debug, Default)]
struct DomainState {
    cur: usize,
    /// (level index, when it takes effect).
    pending: Option<(usize, Nanos)>,
}

/// What a doorbell made the platform do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Handled {
    /// The channel was not the platform's (`CHANNEL_FREE` set): nothing read.
    NotOurs,
    /// Answered (or deliberately left unanswered by [`Faults::silent`]).
    Answered { header: Header, status: Status },
}

/// The platform: its configuration, each domain's level, the faults to inject.
#[derive(Clone, Debug)]
pub struct ScmiPlatform {
    cfg: PlatformConfig,
    state: [DomainState; MAX_MODEL_DOMAINS],
    /// Faults to inject.
    pub faults: Faults,
    /// Messages answered.
    pub answered: u64,
}

impl ScmiPlatform {
    /// The platform `cfg`, every domain at its boot level. Domains beyond 8 are not modelled.
    pub fn new(cfg: PlatformConfig) -> Self {
        let mut state = [DomainState::default(); MAX_MODEL_DOMAINS];
        for (s, d) in state.iter_mut().zip(cfg.domains) {
            s.cur = d.boot_level.min(d.levels.len().saturating_sub(1));
        }
        ScmiPlatform {
            cfg,
            state,
            faults: Faults::default(),
            answered: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &PlatformConfig {
        &self.cfg
    }

    /// The platform's boot-time channel set-up: the channel is the agent's (`CHANNEL_FREE`).
    pub fn init_channel(shmem: &mut impl Mmio) {
        shmem.write32(smt::CHANNEL_STATUS, smt::STATUS_FREE);
    }

    /// Completes the level changes due by `now`.
    pub fn advance(&mut self, now: Nanos) {
        for s in self.state.iter_mut() {
            if let Some((lvl, at)) = s.pending {
                if at <= now {
                    s.cur = lvl;
                    s.pending = None;
                }
            }
        }
    }

    /// The earliest pending level change.
    pub fn next_change(&self) -> Option<Nanos> {
        self.state
            .iter()
            .filter_map(|s| s.pending.map(|p| p.1))
            .min()
    }

    /// Domain `id`'s current level (index into its table).
    pub fn level_index(&self, id: usize) -> Option<usize> {
        self.cfg.domains.get(id).map(|_| self.state[id].cur)
    }

    /// Domain `id`'s current frequency, kHz.
    pub fn freq_khz(&self, id: usize) -> Option<u32> {
        let d = self.cfg.domains.get(id)?;
        d.levels.get(self.state[id].cur).map(|l| l.freq_khz)
    }

    /// Answers the message in the A2P channel `shmem` at `now` (the platform's doorbell
    /// handler).
    pub fn handle(&mut self, shmem: &mut impl Mmio, now: Nanos) -> Handled {
        self.advance(now);
        let size = shmem.size();
        if size < smt::MIN_SIZE || shmem.read32(smt::CHANNEL_STATUS) & smt::STATUS_FREE != 0 {
            return Handled::NotOurs;
        }
        let max_payload = size - smt::MSG_PAYLOAD;
        let length = shmem.read32(smt::LENGTH) as usize;
        let header = Header(shmem.read32(smt::MSG_HEADER));
        let mut ret = [0u32; MAX_RET];
        let (status, n, channel_error) = if length < 4 || length - 4 > max_payload {
            (Status::ProtocolError, 0, true)
        } else {
            let nparams = (length - 4) / 4;
            let mut params = [0u32; 4];
            for (i, p) in params.iter_mut().enumerate().take(nparams.min(4)) {
                *p = shmem.read32(smt::MSG_PAYLOAD + 4 * i);
            }
            let cap = ((max_payload - 4) / 4).min(MAX_RET);
            let (st, n) = self.dispatch(header, length - 4, &params, &mut ret[..cap], now);
            (st, n, false)
        };
        let status = match self.faults.status {
            Some((p, m, st)) if p == header.protocol_id() && m == header.message_id() => st,
            _ => status,
        };
        let n = if status == Status::Success { n } else { 0 };
        self.answered += 1;
        if self.faults.silent {
            return Handled::Answered { header, status };
        }
        let answer_header = Header(
            (header.0 ^ (u32::from(self.faults.token_xor & 0x3ff) << 18))
                ^ (self.faults.header_xor & 0x3_ffff),
        );
        let len =
            (8 + 4 * n as i64 + i64::from(self.faults.length_delta)).clamp(0, u32::MAX as i64);
        shmem.write32(smt::LENGTH, len as u32);
        shmem.write32(smt::MSG_HEADER, answer_header.0);
        shmem.write32(smt::MSG_PAYLOAD, status.to_i32() as u32);
        for (i, w) in ret.iter().enumerate().take(n) {
            shmem.write32(smt::MSG_PAYLOAD + 4 + 4 * i, *w);
        }
        shmem.wmb();
        let err = if channel_error || self.faults.channel_error {
            smt::STATUS_ERROR
        } else {
            0
        };
        shmem.write32(smt::CHANNEL_STATUS, smt::STATUS_FREE | err);
        Handled::Answered { header, status }
    }

    /// Runs one command; returns its status and how many return words it wrote.
    fn dispatch(
        &mut self,
        h: Header,
        payload_len: usize,
        p: &[u32; 4],
        ret: &mut [u32],
        now: Nanos,
    ) -> (Status, usize) {
        if h.msg_type() != 0 {
            return (Status::NotSupported, 0);
        }
        let want_len = |n: usize| payload_len == 4 * n;
        let mut put = |vals: &[u32]| -> (Status, usize) {
            if vals.len() > ret.len() {
                return (Status::GenericError, 0);
            }
            ret[..vals.len()].copy_from_slice(vals);
            (Status::Success, vals.len())
        };
        match (h.protocol_id(), h.message_id()) {
            (PROTOCOL_BASE, MSG_PROTOCOL_VERSION) if want_len(0) => put(&[self.cfg.base_version]),
            (PROTOCOL_BASE, MSG_PROTOCOL_ATTRIBUTES) if want_len(0) => {
                put(&[(self.cfg.protocols.len() as u32 & 0xff)
                    | (u32::from(self.cfg.num_agents) << 8)])
            }
            (PROTOCOL_BASE, MSG_DISCOVER_VENDOR) if want_len(0) => {
                put(&Name::new(self.cfg.vendor).to_words())
            }
            (PROTOCOL_BASE, MSG_DISCOVER_IMPLEMENTATION_VERSION) if want_len(0) => {
                put(&[self.cfg.impl_version])
            }
            (PROTOCOL_BASE, MSG_DISCOVER_LIST_PROTOCOLS) if want_len(1) => {
                if ret.is_empty() {
                    return (Status::GenericError, 0);
                }
                let skip = p[0] as usize;
                let all = self.cfg.protocols;
                if skip > all.len() {
                    return (Status::InvalidParameters, 0);
                }
                let rest = &all[skip..];
                let fit = (ret.len().saturating_sub(1)) * 4;
                let fit = match self.cfg.protocols_per_page {
                    0 => fit,
                    n => n.min(fit),
                };
                let n = rest.len().min(fit);
                ret[0] = n as u32;
                let words = n.div_ceil(4);
                for w in ret[1..=words].iter_mut() {
                    *w = 0;
                }
                for (i, &b) in rest[..n].iter().enumerate() {
                    ret[1 + i / 4] |= u32::from(b) << (8 * (i % 4));
                }
                (Status::Success, 1 + words)
            }
            (PROTOCOL_BASE, MSG_PROTOCOL_VERSION..=MSG_DISCOVER_LIST_PROTOCOLS) => {
                (Status::ProtocolError, 0)
            }
            (PROTOCOL_BASE, _) => (Status::NotFound, 0),
            (PROTOCOL_PERF, _) if !self.cfg.protocols.contains(&PROTOCOL_PERF) => {
                (Status::NotSupported, 0)
            }
            (PROTOCOL_PERF, m) => self.perf(m, payload_len, p, ret, now),
            _ => (Status::NotSupported, 0),
        }
    }

    fn perf(
        &mut self,
        m: u8,
        payload_len: usize,
        p: &[u32; 4],
        ret: &mut [u32],
        now: Nanos,
    ) -> (Status, usize) {
        let sizes: &[(u8, usize)] = &[
            (MSG_PROTOCOL_VERSION, 0),
            (MSG_PROTOCOL_ATTRIBUTES, 0),
            (MSG_DOMAIN_ATTRIBUTES, 1),
            (MSG_DESCRIBE_LEVELS, 2),
            (MSG_LEVEL_SET, 2),
            (MSG_LEVEL_GET, 1),
        ];
        let Some(&(_, n)) = sizes.iter().find(|(id, _)| *id == m) else {
            return (Status::NotFound, 0);
        };
        if payload_len != 4 * n {
            return (Status::ProtocolError, 0);
        }
        let v4 = self.cfg.perf_version >> 16 >= 4;
        let domain = |id: u32| self.cfg.domains.get(id as usize);
        let mut out = |vals: &[u32]| -> (Status, usize) {
            if vals.len() > ret.len() {
                return (Status::GenericError, 0);
            }
            ret[..vals.len()].copy_from_slice(vals);
            (Status::Success, vals.len())
        };
        match m {
            MSG_PROTOCOL_VERSION => out(&[self.cfg.perf_version]),
            MSG_PROTOCOL_ATTRIBUTES => out(&[
                (self.cfg.domains.len().min(MAX_MODEL_DOMAINS) as u32)
                    | (u32::from(self.cfg.power_mw) << 16),
                0,
                0,
                0,
            ]),
            MSG_DOMAIN_ATTRIBUTES => {
                let Some(d) = domain(p[0]) else {
                    return (Status::NotFound, 0);
                };
                let Some(s) = d.levels.get(d.sustained) else {
                    return (Status::GenericError, 0);
                };
                let flags = (1u32 << 31)
                    | (1 << 30)
                    | if self.cfg.level_indexing && v4 {
                        1 << 25
                    } else {
                        0
                    };
                let name = Name::new(d.name).to_words();
                out(&[
                    flags, 0, s.freq_khz, s.perf, name[0], name[1], name[2], name[3],
                ])
            }
            MSG_DESCRIBE_LEVELS => {
                let Some(d) = domain(p[0]) else {
                    return (Status::NotFound, 0);
                };
                let start = p[1] as usize;
                if start >= d.levels.len() {
                    return (Status::InvalidParameters, 0);
                }
                let per = if v4 { 5 } else { 3 };
                let fit = ret.len().saturating_sub(1) / per;
                let page = match self.cfg.levels_per_page {
                    0 => fit,
                    n => n.min(fit),
                };
                let n = (d.levels.len() - start).min(page);
                if n == 0 {
                    return (Status::GenericError, 0);
                }
                let remaining =
                    (d.levels.len() - start - n) as u32 + u32::from(self.faults.remaining_lie);
                ret[0] = n as u32 | (remaining << 16);
                for (i, l) in d.levels[start..start + n].iter().enumerate() {
                    let e = &mut ret[1 + i * per..1 + (i + 1) * per];
                    e[0] = l.perf;
                    e[1] = l.power;
                    e[2] = u32::from(d.latency_us);
                    if v4 {
                        e[3] = l.freq_khz;
                        e[4] = (start + i) as u32;
                    }
                }
                (Status::Success, 1 + n * per)
            }
            MSG_LEVEL_SET => {
                let id = p[0] as usize;
                let Some(d) = domain(p[0]) else {
                    return (Status::NotFound, 0);
                };
                let found = if self.cfg.level_indexing && v4 {
                    (p[1] as usize) < d.levels.len()
                } else {
                    d.levels.iter().any(|l| l.perf == p[1])
                };
                if !found {
                    return (Status::OutOfRange, 0);
                }
                let idx = if self.cfg.level_indexing && v4 {
                    p[1] as usize
                } else {
                    d.levels.iter().position(|l| l.perf == p[1]).unwrap_or(0)
                };
                if !self.faults.ignore_level_set {
                    let us = u64::from(d.latency_us) + u64::from(self.faults.extra_latency_us);
                    let at = Nanos(now.0.saturating_add(us * 1000));
                    if let Some(s) = self.state.get_mut(id) {
                        s.pending = Some((idx, at));
                    }
                }
                (Status::Success, 0)
            }
            MSG_LEVEL_GET => {
                let id = p[0] as usize;
                let Some(d) = domain(p[0]) else {
                    return (Status::NotFound, 0);
                };
                let cur = self.state.get(id).map_or(0, |s| s.cur);
                let v = if self.cfg.level_indexing && v4 {
                    cur as u32
                } else {
                    d.levels.get(cur).map_or(0, |l| l.perf)
                };
                out(&[v])
            }
            _ => (Status::NotFound, 0),
        }
    }
}
