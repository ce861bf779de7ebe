//! The cpufreq core for a whole board: every policy, its schedutil state and the driver.
//!
//! Linux spreads this over the cpufreq core's per-CPU `cpufreq_cpu_data`, the governor's
//! `sugov_policy`/`sugov_cpu` and the hook `cpufreq_update_util`
//! (`kernel/sched/cpufreq.c`). One policy's share — the policy, its schedutil state, its
//! outstanding request, latest completion and failures — is a [`PolicyState`]; its
//! operations take the driver as an argument, so the kernel keeps each policy under its own
//! lock (Linux's `policy->rwsem` and `sg_policy->update_lock`) and the driver under another.
//! [`CpufreqCore`] holds every policy and the driver together, for the simulator and the
//! tests: one object to call at the trigger points and to poll for completed transitions,
//! doing exactly what the kernel does with its locks.
//!
//! Deliberate differences from Linux: a failed driver request is counted and otherwise
//! dropped (`cpufreq_driver_fast_switch` returning 0 leaves `policy->cur` alone, as here);
//! schedutil keeps its `next_freq` and does not retry until its target changes, as Linux.
//! A request that fails after it was started (a firmware error or timeout reported by
//! [`CpufreqDriver::poll`]) is counted the same way, kept as [`CpufreqCore::last_error`], and
//! `policy->cur` is re-read from the driver (`cpufreq_driver->get`), which may have seen the
//! hardware move anyway.
//! The policies and their governor state are vectors sized from the board (Linux
//! allocates each `cpufreq_policy`/`sugov_policy` on demand), built in place on the heap:
//! a [`CpufreqCore`] is a few words on the stack and nothing policy-sized is copied.

use alloc::vec::Vec;

use super::driver::{Completion, CpufreqDriver};
use super::{CpufreqError, CpufreqPolicy, Governor};
use crate::em::{EmPerfDomain, MAX_PERF_DOMAINS};
use crate::features::{Feature, SchedFeatures};
use crate::rq::RqSnapshot;
use crate::schedutil::{SugovPolicy, UpdateFlags};
use crate::topology::BoardDesc;
use crate::types::{Capacity, CpuId, Khz, Nanos, SCHED_CAPACITY_SCALE};

/// One cpufreq policy with its governor state and request bookkeeping (`E`: the driver's
/// error type). Every operation that talks to the hardware takes the driver.
#[derive(Clone, Debug)]
pub struct PolicyState<E> {
    policy: CpufreqPolicy,
    /// Schedutil's state (kept while another governor runs).
    sugov: SugovPolicy,
    /// The frequency the latest request asked for, while it has not completed.
    requested: Option<Khz>,
    /// The latest completion, with its measured latency.
    last: Option<Completion<E>>,
    /// Requests the driver refused or failed.
    failed_requests: u64,
    /// The latest failure: when it was seen and the driver's error.
    last_error: Option<(Nanos, E)>,
}

impl<E: Copy> PolicyState<E> {
    /// The state for `policy` with schedutil's initial state (not yet the governor's choice:
    /// call [`Self::set_governor`]).
    pub fn new(policy: CpufreqPolicy) -> Self {
        let sugov = SugovPolicy::new(&policy);
        PolicyState {
            policy,
            sugov,
            requested: None,
            last: None,
            failed_requests: 0,
            last_error: None,
        }
    }

    /// The policy.
    pub fn policy(&self) -> &CpufreqPolicy {
        &self.policy
    }

    /// Schedutil's state.
    pub fn sugov(&self) -> &SugovPolicy {
        &self.sugov
    }

    /// Schedutil's state, mutable (to tune `rate_limit_us`).
    pub fn sugov_mut(&mut self) -> &mut SugovPolicy {
        &mut self.sugov
    }

    /// The latest completed (or failed) request, with when it was made and when it took
    /// effect: the measured transition latency.
    pub fn last_completion(&self) -> Option<&Completion<E>> {
        self.last.as_ref()
    }

    /// Requests the driver refused or failed.
    pub fn failed_requests(&self) -> u64 {
        self.failed_requests
    }

    /// The latest failure, with the time it was seen.
    pub fn last_error(&self) -> Option<(Nanos, E)> {
        self.last_error
    }

    /// Apply the seed-era cpufreq switches of `features` ([`CpufreqCore::apply_seed_era`]).
    pub fn apply_seed_era(&mut self, features: SchedFeatures) {
        if features.enabled(Feature::KEEP_INEFFICIENT_OPPS) {
            self.policy.set_efficiencies_available(false);
        }
        if features.enabled(Feature::LEGACY_TRANSITION_DELAY) {
            self.sugov
                .set_rate_limit_us(self.policy.transition_delay_us_legacy());
        }
    }

    /// Switch to `governor`; its starting frequency is requested now. Returns when the
    /// request can first have completed, `None` if nothing was requested.
    pub fn set_governor<D: CpufreqDriver<Error = E>>(
        &mut self,
        driver: &mut D,
        governor: Governor,
        now: Nanos,
    ) -> Option<Nanos> {
        let want = self.policy.set_governor(governor);
        if governor == Governor::Schedutil {
            self.sugov.restart(&self.policy);
        }
        self.apply_governor(driver, want, now)
    }

    /// Set `scaling_min_freq`/`scaling_max_freq` (see [`CpufreqPolicy::set_limits`]); a
    /// frequency outside the new limits is corrected now. `Ok`: as [`Self::set_governor`].
    pub fn set_limits<D: CpufreqDriver<Error = E>>(
        &mut self,
        driver: &mut D,
        min: Khz,
        max: Khz,
        now: Nanos,
    ) -> Result<Option<Nanos>, CpufreqError> {
        let want = self.policy.set_limits(min, max)?;
        Ok(self.apply_governor(driver, want, now))
    }

    /// Requests what a governor or limit change wants. `None` (keep `cur`) still needs a request
    /// while another frequency is on its way: the driver would otherwise end there.
    fn apply_governor<D: CpufreqDriver<Error = E>>(
        &mut self,
        driver: &mut D,
        want: Option<Khz>,
        now: Nanos,
    ) -> Option<Nanos> {
        let cur = self.policy.cur();
        let target = want.or(match self.requested {
            Some(r) if r != cur => Some(cur),
            _ => None,
        });
        self.request(driver, target?, now)
    }

    /// `cpufreq_update_util(rq, flags)` on `cpu` (one of the policy's CPUs) at `now`: run
    /// schedutil and hand any new frequency to the driver. Returns when the request can
    /// first have completed, `None` if nothing was requested. `input(c)`: CPU `c`'s snapshot.
    #[allow(clippy::too_many_arguments)] // the hook's arguments, the driver and the inputs
    pub fn update_util<D, F>(
        &mut self,
        driver: &mut D,
        now: Nanos,
        cpu: CpuId,
        flags: UpdateFlags,
        features: SchedFeatures,
        uclamp_used: bool,
        input: F,
    ) -> Option<Nanos>
    where
        D: CpufreqDriver<Error = E>,
        F: FnMut(CpuId) -> RqSnapshot,
    {
        let f = self.sugov.update(
            &mut self.policy,
            now,
            cpu,
            flags,
            features,
            uclamp_used,
            input,
        )?;
        self.request(driver, f, now)
    }

    /// Applies completion `c` of this policy's domain, which the driver's
    /// [`CpufreqDriver::poll`] returned; `hw` is the driver's [`CpufreqDriver::get`] read
    /// right after it (used when the request failed: the hardware may have moved anyway).
    /// Returns the frequency the policy moved to, `None` when it did not move.
    ///
    /// A completion older than the latest one applied is stale and ignored: with each policy
    /// under its own lock, two CPUs may take completions from the driver in order and then
    /// reach the policy's lock in the other order, and the older must not undo the newer.
    pub fn complete(&mut self, c: Completion<E>, hw: Khz) -> Option<Khz> {
        if self.last.is_some_and(|l| c.at < l.at) {
            return None;
        }
        self.last = Some(c);
        if self.requested == Some(c.requested) {
            self.requested = None;
        }
        match c.result {
            Ok(f) => {
                self.policy.freq_transition(f, c.at);
                Some(f)
            }
            Err(e) => {
                self.failed_requests += 1;
                self.last_error = Some((c.at, e));
                if hw.0 != 0 && hw != self.policy.cur() {
                    self.policy.freq_transition(hw, c.at);
                    Some(hw)
                } else {
                    None
                }
            }
        }
    }

    fn request<D: CpufreqDriver<Error = E>>(
        &mut self,
        driver: &mut D,
        f: Khz,
        now: Nanos,
    ) -> Option<Nanos> {
        match driver.target(&self.policy, f, now) {
            Ok(t) => {
                self.requested = Some(f);
                Some(t)
            }
            Err(e) => {
                self.failed_requests += 1;
                self.last_error = Some((now, e));
                None
            }
        }
    }
}

/// Every cpufreq policy of a board with its governor state and the driver.
#[derive(Clone, Debug)]
pub struct CpufreqCore<D: CpufreqDriver> {
    /// One per performance domain, indexed by `pd`.
    policies: Vec<PolicyState<D::Error>>,
    /// The driver.
    pub driver: D,
}

impl<D: CpufreqDriver> CpufreqCore<D> {
    /// One policy per performance domain of `board`, all with `governor`, at `now`.
    /// `capacity_orig[n]` is CPU n's capacity; domains with an energy model get its
    /// inefficient frequencies marked (`em_cpufreq_update_efficiencies`). `make_driver`
    /// builds the driver from the policies (e.g. `|p| EmulatedDriver::new(p, true)`); a policy
    /// starts at the frequency the driver reports (`cpufreq_driver->get`), if it knows one.
    /// The governor's starting frequency is requested at once.
    pub fn new(
        board: &BoardDesc,
        capacity_orig: &[Capacity],
        governor: Governor,
        now: Nanos,
        make_driver: impl FnOnce(&[CpufreqPolicy]) -> D,
    ) -> Result<Self, CpufreqError> {
        let (policies, driver) = Self::build(board, capacity_orig, now, make_driver)?;
        let mut core = CpufreqCore {
            policies: policies.into_iter().map(PolicyState::new).collect(),
            driver,
        };
        for pd in 0..core.policies.len() {
            core.set_governor(pd, governor, now)?;
        }
        Ok(core)
    }

    /// The policies of `board` and the driver [`Self::new`] starts from, for a caller that
    /// keeps them apart (the kernel: each [`PolicyState`] under its own lock): each policy at
    /// the driver's frequency, with no governor started yet.
    pub fn build(
        board: &BoardDesc,
        capacity_orig: &[Capacity],
        now: Nanos,
        make_driver: impl FnOnce(&[CpufreqPolicy]) -> D,
    ) -> Result<(Vec<CpufreqPolicy>, D), CpufreqError> {
        let nr = board.perf_domains.len();
        if nr == 0 || nr > MAX_PERF_DOMAINS {
            return Err(CpufreqError::NoSuchDomain {
                pd: nr.min(MAX_PERF_DOMAINS),
            });
        }
        let mut policies = Vec::with_capacity(nr);
        for pd in 0..nr {
            let mut p = CpufreqPolicy::new(board, pd, now)?;
            if let Ok(em) = EmPerfDomain::new(board, pd, capacity_orig) {
                p.set_efficiencies(&em);
            }
            policies.push(p);
        }
        let driver = make_driver(&policies);
        for p in policies.iter_mut() {
            let hw = driver.get(p.pd);
            if hw.0 != 0 && hw != p.cur() {
                p.init_cur(hw, now);
            }
        }
        Ok((policies, driver))
    }

    /// Apply the seed-era cpufreq switches of `features` to every policy (call once, after
    /// [`Self::new`]): [`Feature::KEEP_INEFFICIENT_OPPS`] stops skipping inefficient
    /// frequencies, [`Feature::LEGACY_TRANSITION_DELAY`] sets schedutil's `rate_limit_us` to
    /// the pre-2024 default. Both off leave everything as v6.12 has it.
    pub fn apply_seed_era(&mut self, features: SchedFeatures) {
        for p in self.policies.iter_mut() {
            p.apply_seed_era(features);
        }
    }

    /// Number of policies.
    pub fn nr_policies(&self) -> usize {
        self.policies.len()
    }

    /// Policy `pd`.
    pub fn policy(&self, pd: usize) -> Option<&CpufreqPolicy> {
        self.policies.get(pd).map(PolicyState::policy)
    }

    /// Every policy's state, indexed by `pd`.
    pub fn policies(&self) -> &[PolicyState<D::Error>] {
        &self.policies
    }

    /// Schedutil state of policy `pd`.
    pub fn sugov(&self, pd: usize) -> Option<&SugovPolicy> {
        self.policies.get(pd).map(PolicyState::sugov)
    }

    /// Mutable schedutil state (to tune `rate_limit_us`).
    pub fn sugov_mut(&mut self, pd: usize) -> Option<&mut SugovPolicy> {
        self.policies.get_mut(pd).map(PolicyState::sugov_mut)
    }

    /// The policy `cpu` belongs to.
    pub fn policy_of(&self, cpu: CpuId) -> Option<usize> {
        self.policies
            .iter()
            .position(|p| p.policy().cpus.contains(cpu))
    }

    /// `arch_scale_freq_capacity(cpu)`: 1024 for a CPU without a policy.
    pub fn arch_scale_freq_capacity(&self, cpu: CpuId) -> u32 {
        self.policy_of(cpu).and_then(|pd| self.policy(pd)).map_or(
            SCHED_CAPACITY_SCALE,
            CpufreqPolicy::arch_scale_freq_capacity,
        )
    }

    /// Requests the driver refused or failed, over every policy.
    pub fn failed_requests(&self) -> u64 {
        self.policies.iter().map(PolicyState::failed_requests).sum()
    }

    /// The latest failure over every policy: the domain and the driver's error.
    pub fn last_error(&self) -> Option<(usize, D::Error)> {
        self.policies
            .iter()
            .enumerate()
            .filter_map(|(pd, p)| p.last_error().map(|(at, e)| (at, pd, e)))
            .max_by_key(|&(at, _, _)| at)
            .map(|(_, pd, e)| (pd, e))
    }

    /// Switch policy `pd` to `governor`; its starting frequency is requested now.
    pub fn set_governor(
        &mut self,
        pd: usize,
        governor: Governor,
        now: Nanos,
    ) -> Result<(), CpufreqError> {
        let p = self
            .policies
            .get_mut(pd)
            .ok_or(CpufreqError::NoSuchDomain { pd })?;
        p.set_governor(&mut self.driver, governor, now);
        Ok(())
    }

    /// Set `scaling_min_freq`/`scaling_max_freq` of policy `pd` (see
    /// [`CpufreqPolicy::set_limits`]); a frequency outside the new limits is corrected now.
    pub fn set_limits(
        &mut self,
        pd: usize,
        min: Khz,
        max: Khz,
        now: Nanos,
    ) -> Result<(), CpufreqError> {
        let p = self
            .policies
            .get_mut(pd)
            .ok_or(CpufreqError::NoSuchDomain { pd })?;
        p.set_limits(&mut self.driver, min, max, now).map(|_| ())
    }

    /// `cpufreq_update_util(rq, flags)` on `cpu` at `now`: run schedutil for `cpu`'s policy
    /// and hand any new frequency to the driver. Returns the time the request takes effect
    /// (for the caller's event queue), `None` if nothing was requested.
    pub fn update_util<F>(
        &mut self,
        now: Nanos,
        cpu: CpuId,
        flags: UpdateFlags,
        features: SchedFeatures,
        uclamp_used: bool,
        input: F,
    ) -> Option<Nanos>
    where
        F: FnMut(CpuId) -> RqSnapshot,
    {
        let pd = self.policy_of(cpu)?;
        self.policies.get_mut(pd)?.update_util(
            &mut self.driver,
            now,
            cpu,
            flags,
            features,
            uclamp_used,
            input,
        )
    }

    /// Apply every transition the driver completed by `now` to its policy and return the
    /// first that moved a policy, `None` when there is none; call until `None`. Failed
    /// requests are counted in [`Self::failed_requests`] and skipped.
    pub fn poll(&mut self, now: Nanos) -> Option<(usize, Khz)> {
        loop {
            let c = self.driver.poll(now)?;
            let hw = if c.result.is_err() {
                self.driver.get(c.pd)
            } else {
                Khz(0)
            };
            let Some(p) = self.policies.get_mut(c.pd) else {
                continue;
            };
            if let Some(f) = p.complete(c, hw) {
                return Some((c.pd, f));
            }
        }
    }

    /// Policy `pd`'s latest completed (or failed) request, with when it was made and when it
    /// took effect: the measured transition latency.
    pub fn last_completion(&self, pd: usize) -> Option<&Completion<D::Error>> {
        self.policies.get(pd)?.last_completion()
    }

    /// When the driver next needs [`Self::poll`] ([`CpufreqDriver::next_poll`]).
    pub fn next_poll(&self) -> Option<Nanos> {
        self.driver.next_poll()
    }
}
