//! The cpufreq driver interface and the emulated driver.
//!
//! Re-derives the parts of Linux's `struct cpufreq_driver` the governors use
//! (`target_index`/`fast_switch`, `get`, `cpuinfo.transition_latency`,
//! `fast_switch_possible`). Real-board drivers (SCPI, Hi6220/Hi3660 stub clocks) come
//! with the boards; the [`EmulatedDriver`] is what the simulator and the QEMU boards use.
//!
//! Deliberate differences from Linux: a driver call never blocks. [`CpufreqDriver::target`]
//! returns the time the new frequency takes effect; the emulated driver holds it as
//! pending until then and hands it out from [`EmulatedDriver::poll`], after which the
//! caller records it with [`super::CpufreqPolicy::freq_transition`]. A request made
//! while another is pending replaces it (the hardware only ever ramps to the newest
//! target), and its latency counts from the new request.
//!
//! The emulated driver keeps its per-domain state and its request log on the heap (sized
//! from the policies and [`REQUEST_LOG_LEN`]), so it is a few words wherever it is moved.

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;

use super::{CpufreqError, CpufreqPolicy};
use crate::em::MAX_PERF_DOMAINS;
use crate::types::{Khz, Nanos};

/// The interface every cpufreq driver offers the governors.
pub trait CpufreqDriver {
    /// The driver's name (`cpufreq_driver->name`).
    fn name(&self) -> &'static str;
    /// Ask for `freq` (a table frequency) on `policy`'s domain at `now`; returns when it
    /// takes effect (`now` + transition latency for the emulated driver).
    fn target(
        &mut self,
        policy: &CpufreqPolicy,
        freq: Khz,
        now: Nanos,
    ) -> Result<Nanos, CpufreqError>;
    /// The frequency the hardware of domain `pd` runs at now (`cpufreq_driver->get`).
    fn get(&self, pd: usize) -> Khz;
    /// Whether requests may be made from scheduler context (`fast_switch_possible`);
    /// if not, schedutil defers them to its worker (`sugov_deferred_update`).
    fn fast_switch_possible(&self) -> bool;
    /// The time a transition on domain `pd` takes, in ns (`cpuinfo.transition_latency`).
    fn transition_latency_ns(&self, pd: usize) -> u64;
    /// The earliest transition completed by `now` that was not reported yet, as
    /// `(domain, frequency, completion time)`; call until `None`. A driver whose
    /// transitions complete inside [`CpufreqDriver::target`] reports them here too.
    fn poll(&mut self, now: Nanos) -> Option<(usize, Khz, Nanos)>;
}

/// How many recent requests the emulated driver remembers.
pub const REQUEST_LOG_LEN: usize = 64;

/// One request the emulated driver received.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Request {
    /// The domain.
    pub pd: usize,
    /// The frequency asked for.
    pub freq: Khz,
    /// When it was asked for.
    pub at: Nanos,
    /// When it takes effect; `None` if the driver failed it.
    pub effective: Option<Nanos>,
}

#[derive(Clone, Copy, Debug, Default)]
struct DomainState {
    cur: Khz,
    pending: Option<(Khz, Nanos)>,
    latency_ns: u64,
    extra_delay_ns: u64,
    fail_next: u32,
    fail_always: bool,
}

/// The emulated cpufreq driver: records every request and applies each after its
/// domain's transition latency; it can be told to fail requests or to be slow, for
/// fault tests.
#[derive(Clone, Debug)]
pub struct EmulatedDriver {
    /// One per policy (at most [`MAX_PERF_DOMAINS`]), indexed by `pd`.
    domains: Vec<DomainState>,
    fast_switch: bool,
    /// A ring of [`REQUEST_LOG_LEN`] entries.
    log: Box<[Request]>,
    nr_requests: u64,
}

impl EmulatedDriver {
    /// A driver for `policies`, each domain starting at its policy's `cur` with the
    /// policy's transition latency. Domains beyond [`MAX_PERF_DOMAINS`] are ignored.
    pub fn new(policies: &[CpufreqPolicy], fast_switch: bool) -> Self {
        let domains = policies
            .iter()
            .take(MAX_PERF_DOMAINS)
            .map(|p| DomainState {
                cur: p.cur(),
                latency_ns: p.transition_latency_ns,
                ..DomainState::default()
            })
            .collect();
        EmulatedDriver {
            domains,
            fast_switch,
            log: vec![Request::default(); REQUEST_LOG_LEN].into_boxed_slice(),
            nr_requests: 0,
        }
    }

    /// Fail the next `n` requests on domain `pd` (fault injection).
    pub fn fail_next(&mut self, pd: usize, n: u32) {
        if let Some(d) = self.domains.get_mut(pd) {
            d.fail_next = n;
        }
    }

    /// Fail every request on domain `pd` until told otherwise.
    pub fn set_fail_always(&mut self, pd: usize, fail: bool) {
        if let Some(d) = self.domains.get_mut(pd) {
            d.fail_always = fail;
        }
    }

    /// Make domain `pd` take `extra_ns` longer than its transition latency.
    pub fn set_extra_delay(&mut self, pd: usize, extra_ns: u64) {
        if let Some(d) = self.domains.get_mut(pd) {
            d.extra_delay_ns = extra_ns;
        }
    }

    /// When the next pending request takes effect, if any (for event-driven callers).
    pub fn next_event(&self) -> Option<Nanos> {
        self.domains
            .iter()
            .filter_map(|d| d.pending.map(|(_, t)| t))
            .min()
    }

    /// The pending request of domain `pd`, if any.
    pub fn pending(&self, pd: usize) -> Option<(Khz, Nanos)> {
        self.domains.get(pd).and_then(|d| d.pending)
    }

    /// How many requests were made in total.
    pub fn nr_requests(&self) -> u64 {
        self.nr_requests
    }

    /// The most recent requests, oldest first (at most [`REQUEST_LOG_LEN`]).
    pub fn requests(&self) -> impl Iterator<Item = &Request> {
        let n = self.nr_requests.min(REQUEST_LOG_LEN as u64) as usize;
        let start = (self.nr_requests as usize + REQUEST_LOG_LEN - n) % REQUEST_LOG_LEN;
        (0..n).map(move |i| &self.log[(start + i) % REQUEST_LOG_LEN])
    }

    fn record(&mut self, r: Request) {
        self.log[(self.nr_requests % REQUEST_LOG_LEN as u64) as usize] = r;
        self.nr_requests += 1;
    }
}

impl CpufreqDriver for EmulatedDriver {
    fn name(&self) -> &'static str {
        "asym-emulated"
    }

    fn target(
        &mut self,
        policy: &CpufreqPolicy,
        freq: Khz,
        now: Nanos,
    ) -> Result<Nanos, CpufreqError> {
        let pd = policy.pd;
        let Some(d) = self.domains.get_mut(pd) else {
            return Err(CpufreqError::NoSuchDomain { pd });
        };
        let fail = d.fail_always || d.fail_next > 0;
        d.fail_next = d.fail_next.saturating_sub(1);
        let effective = if fail {
            None
        } else {
            let t = Nanos(
                now.0
                    .saturating_add(d.latency_ns)
                    .saturating_add(d.extra_delay_ns),
            );
            d.pending = Some((freq, t));
            Some(t)
        };
        self.record(Request {
            pd,
            freq,
            at: now,
            effective,
        });
        effective.ok_or(CpufreqError::DriverFailed { pd, freq })
    }

    fn get(&self, pd: usize) -> Khz {
        self.domains.get(pd).map_or(Khz(0), |d| d.cur)
    }

    fn fast_switch_possible(&self) -> bool {
        self.fast_switch
    }

    fn transition_latency_ns(&self, pd: usize) -> u64 {
        self.domains.get(pd).map_or(0, |d| d.latency_ns)
    }

    /// Applies the earliest pending request that is due at `now`; the caller then
    /// records it with [`CpufreqPolicy::freq_transition`] (or uses
    /// [`super::policies::CpufreqCore::poll`], which does).
    fn poll(&mut self, now: Nanos) -> Option<(usize, Khz, Nanos)> {
        let (pd, _) = self
            .domains
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.pending.map(|(_, t)| (i, t)))
            .filter(|&(_, t)| t <= now)
            .min_by_key(|&(_, t)| t)?;
        let d = &mut self.domains[pd];
        let (freq, at) = d.pending.take()?;
        d.cur = freq;
        Some((pd, freq, at))
    }
}
