//! The cpufreq driver interface and the emulated driver.
//!
//! Re-derives the parts of Linux's `struct cpufreq_driver` the governors use
//! (`target_index`/`fast_switch`, `get`, `cpuinfo.transition_latency`,
//! `fast_switch_possible`). The firmware drivers of the real boards (Juno r2 SCMI, the
//! HiKey960/HiKey stub clocks) live in the `asym-dvfs` crate and implement this trait; the
//! [`EmulatedDriver`] is what the simulator and the emulated QEMU boards use.
//!
//! Deliberate differences from Linux: a driver call never blocks, and completion is an
//! event. [`CpufreqDriver::target`] starts a transition and returns when its completion can
//! first be expected; [`CpufreqDriver::poll`] (from a timer, the tick or the firmware's
//! interrupt) hands out each finished request as a [`Completion`] — the frequency the
//! hardware now runs at, or the driver's typed error — with the time it took effect, so the
//! request-to-effect latency is measured, not assumed. [`CpufreqDriver::next_poll`] says when
//! the driver next needs to be polled (an event-driven caller arms a timer there; a tick-driven
//! one may ignore it). A request made while another is pending on the same domain replaces it
//! (the hardware only ever ramps to the newest target); for the emulated driver its latency
//! counts from the new request, except that a request for the frequency already on its way
//! joins that transition.
//!
//! The emulated driver keeps its per-domain state and its request log on the heap (sized
//! from the policies and [`REQUEST_LOG_LEN`]), so it is a few words wherever it is moved.

use alloc::boxed::Box;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;

use super::{CpufreqError, CpufreqPolicy};
use crate::em::MAX_PERF_DOMAINS;
use crate::types::{Khz, Nanos};

/// A finished transition request (Linux `cpufreq_freq_transition_end`, with the outcome).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion<E> {
    /// The domain (policy index).
    pub pd: usize,
    /// The frequency that was asked for.
    pub requested: Khz,
    /// When it was asked for ([`CpufreqDriver::target`]'s `now`).
    pub requested_at: Nanos,
    /// The frequency the hardware runs at now, or why the transition failed. A driver that
    /// can read the frequency back reports what it read.
    pub result: Result<Khz, E>,
    /// When the new frequency took effect (or the failure was found).
    pub at: Nanos,
}

impl<E> Completion<E> {
    /// Request-to-effect latency in ns.
    pub fn latency_ns(&self) -> u64 {
        self.at.0.saturating_sub(self.requested_at.0)
    }
}

/// The interface every cpufreq driver offers the governors.
pub trait CpufreqDriver {
    /// Why a request failed; `Display` names the domain or message and the cause.
    type Error: Copy + fmt::Debug + fmt::Display;
    /// The driver's name (`cpufreq_driver->name`).
    fn name(&self) -> &'static str;
    /// Starts a transition of `policy`'s domain to `freq` (a table frequency) at `now`; never
    /// blocks. Returns the earliest time the transition can have completed (`now` + the
    /// transition latency for the emulated driver); the outcome comes from [`Self::poll`].
    /// An error here means the request was not started.
    fn target(
        &mut self,
        policy: &CpufreqPolicy,
        freq: Khz,
        now: Nanos,
    ) -> Result<Nanos, Self::Error>;
    /// The frequency the hardware of domain `pd` runs at, as far as the driver knows
    /// (`cpufreq_driver->get`).
    fn get(&self, pd: usize) -> Khz;
    /// Whether requests may be made from scheduler context (`fast_switch_possible`);
    /// if not, schedutil defers them to its worker (`sugov_deferred_update`).
    fn fast_switch_possible(&self) -> bool;
    /// The time a transition on domain `pd` takes, in ns (`cpuinfo.transition_latency`).
    fn transition_latency_ns(&self, pd: usize) -> u64;
    /// Advances the driver to `now` and returns the earliest request finished by then that
    /// was not reported yet; call until `None`.
    fn poll(&mut self, now: Nanos) -> Option<Completion<Self::Error>>;
    /// When [`Self::poll`] can next make progress (a pending transition's expected end, a
    /// firmware reply or timeout to check); `None` when nothing is outstanding.
    fn next_poll(&self) -> Option<Nanos>;
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

/// A request the emulated driver holds until it takes effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pending {
    freq: Khz,
    requested_at: Nanos,
    effective: Nanos,
}

#[derive(Clone, Copy, Debug, Default)]
struct DomainState {
    cur: Khz,
    pending: Option<Pending>,
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
            .filter_map(|d| d.pending.map(|p| p.effective))
            .min()
    }

    /// The pending request of domain `pd`, if any: the frequency and when it takes effect.
    pub fn pending(&self, pd: usize) -> Option<(Khz, Nanos)> {
        self.domains
            .get(pd)
            .and_then(|d| d.pending.map(|p| (p.freq, p.effective)))
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
    type Error = CpufreqError;

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
        // The same frequency again while it is on its way (schedutil asks again after a limits
        // change, `need_freq_update`): the hardware is already ramping there, and the request
        // joins the one in flight, as the SCMI driver's does.
        let joined = d.pending.filter(|p| !fail && p.freq == freq);
        let effective = if let Some(p) = joined {
            Some(p.effective)
        } else if fail {
            None
        } else {
            let t = Nanos(
                now.0
                    .saturating_add(d.latency_ns)
                    .saturating_add(d.extra_delay_ns),
            );
            d.pending = Some(Pending {
                freq,
                requested_at: now,
                effective: t,
            });
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
    fn poll(&mut self, now: Nanos) -> Option<Completion<CpufreqError>> {
        let (pd, _) = self
            .domains
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.pending.map(|p| (i, p.effective)))
            .filter(|&(_, t)| t <= now)
            .min_by_key(|&(_, t)| t)?;
        let d = &mut self.domains[pd];
        let p = d.pending.take()?;
        d.cur = p.freq;
        Some(Completion {
            pd,
            requested: p.freq,
            requested_at: p.requested_at,
            result: Ok(p.freq),
            at: p.effective,
        })
    }

    fn next_poll(&self) -> Option<Nanos> {
        self.next_event()
    }
}
