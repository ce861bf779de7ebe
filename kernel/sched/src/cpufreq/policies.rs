//! The cpufreq core for a whole board: every policy, its schedutil state and the driver.
//!
//! Linux spreads this over the cpufreq core's per-CPU `cpufreq_cpu_data`, the governor's
//! `sugov_policy`/`sugov_cpu` and the hook `cpufreq_update_util`
//! (`kernel/sched/cpufreq.c`). [`CpufreqCore`] holds them together so the simulator and the
//! kernel have one object to call at the trigger points and one to poll for completed
//! transitions.
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

/// Every cpufreq policy of a board with its governor state and the driver.
#[derive(Clone, Debug)]
pub struct CpufreqCore<D: CpufreqDriver> {
    /// One per performance domain, indexed by `pd`.
    policies: Vec<CpufreqPolicy>,
    /// `sugov[pd]` is policy `pd`'s schedutil state (kept while another governor runs).
    sugov: Vec<SugovPolicy>,
    /// The driver.
    pub driver: D,
    /// Requests the driver refused or failed.
    pub failed_requests: u64,
    /// The latest failure: the domain and the driver's error.
    pub last_error: Option<(usize, D::Error)>,
    /// `last[pd]`: policy `pd`'s latest completion, with its measured latency.
    last: Vec<Option<Completion<D::Error>>>,
    /// `requested[pd]`: the frequency policy `pd`'s latest request asked for, while it has
    /// not completed.
    requested: Vec<Option<Khz>>,
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
        let sugov = policies.iter().map(SugovPolicy::new).collect();
        let mut core = CpufreqCore {
            policies,
            sugov,
            driver,
            failed_requests: 0,
            last_error: None,
            last: alloc::vec![None; nr],
            requested: alloc::vec![None; nr],
        };
        for pd in 0..nr {
            core.set_governor(pd, governor, now)?;
        }
        Ok(core)
    }

    /// Apply the seed-era cpufreq switches of `features` to every policy (call once, after
    /// [`Self::new`]): [`Feature::KEEP_INEFFICIENT_OPPS`] stops skipping inefficient
    /// frequencies, [`Feature::LEGACY_TRANSITION_DELAY`] sets schedutil's `rate_limit_us` to
    /// the pre-2024 default. Both off leave everything as v6.12 has it.
    pub fn apply_seed_era(&mut self, features: SchedFeatures) {
        for (p, sg) in self.policies.iter_mut().zip(self.sugov.iter_mut()) {
            if features.enabled(Feature::KEEP_INEFFICIENT_OPPS) {
                p.set_efficiencies_available(false);
            }
            if features.enabled(Feature::LEGACY_TRANSITION_DELAY) {
                sg.set_rate_limit_us(p.transition_delay_us_legacy());
            }
        }
    }

    /// Number of policies.
    pub fn nr_policies(&self) -> usize {
        self.policies.len()
    }

    /// Policy `pd`.
    pub fn policy(&self, pd: usize) -> Option<&CpufreqPolicy> {
        self.policies.get(pd)
    }

    /// Every policy, indexed by `pd`.
    pub fn policies(&self) -> &[CpufreqPolicy] {
        &self.policies
    }

    /// Schedutil state of policy `pd`.
    pub fn sugov(&self, pd: usize) -> Option<&SugovPolicy> {
        self.sugov.get(pd)
    }

    /// Mutable schedutil state (to tune `rate_limit_us`).
    pub fn sugov_mut(&mut self, pd: usize) -> Option<&mut SugovPolicy> {
        self.sugov.get_mut(pd)
    }

    /// The policy `cpu` belongs to.
    pub fn policy_of(&self, cpu: CpuId) -> Option<usize> {
        self.policies.iter().position(|p| p.cpus.contains(cpu))
    }

    /// `arch_scale_freq_capacity(cpu)`: 1024 for a CPU without a policy.
    pub fn arch_scale_freq_capacity(&self, cpu: CpuId) -> u32 {
        self.policy_of(cpu).and_then(|pd| self.policy(pd)).map_or(
            SCHED_CAPACITY_SCALE,
            CpufreqPolicy::arch_scale_freq_capacity,
        )
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
        let want = p.set_governor(governor);
        if governor == Governor::Schedutil {
            if let Some(sg) = self.sugov.get_mut(pd) {
                sg.restart(p);
            }
        }
        self.apply_governor(pd, want, now);
        Ok(())
    }

    /// Requests what a governor or limit change wants. `None` (keep `cur`) still needs a request
    /// while another frequency is on its way: the driver would otherwise end there.
    fn apply_governor(&mut self, pd: usize, want: Option<Khz>, now: Nanos) {
        let cur = self.policies.get(pd).map(CpufreqPolicy::cur);
        let pending = self.requested.get(pd).copied().flatten();
        let target = want.or(match (pending, cur) {
            (Some(r), Some(c)) if r != c => Some(c),
            _ => None,
        });
        if let Some(f) = target {
            self.request(pd, f, now);
        }
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
        let want = self.policy_mut(pd)?.set_limits(min, max)?;
        self.apply_governor(pd, want, now);
        Ok(())
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
        let (Some(p), Some(sg)) = (self.policies.get_mut(pd), self.sugov.get_mut(pd)) else {
            return None;
        };
        let f = sg.update(p, now, cpu, flags, features, uclamp_used, input)?;
        self.request(pd, f, now)
    }

    /// Apply every transition the driver completed by `now` to its policy and return the
    /// first successful one, `None` when there is none; call until `None`. Failed requests
    /// are counted in [`Self::failed_requests`] and skipped.
    pub fn poll(&mut self, now: Nanos) -> Option<(usize, Khz)> {
        loop {
            let c = self.driver.poll(now)?;
            if let Some(slot) = self.last.get_mut(c.pd) {
                *slot = Some(c);
            }
            if let Some(r) = self.requested.get_mut(c.pd) {
                if *r == Some(c.requested) {
                    *r = None;
                }
            }
            match c.result {
                Ok(f) => {
                    if let Some(p) = self.policies.get_mut(c.pd) {
                        p.freq_transition(f, c.at);
                    }
                    return Some((c.pd, f));
                }
                Err(e) => {
                    self.failed_requests += 1;
                    self.last_error = Some((c.pd, e));
                    let hw = self.driver.get(c.pd);
                    if let Some(p) = self.policies.get_mut(c.pd) {
                        if hw.0 != 0 && hw != p.cur() {
                            p.freq_transition(hw, c.at);
                            return Some((c.pd, hw));
                        }
                    }
                }
            }
        }
    }

    /// Policy `pd`'s latest completed (or failed) request, with when it was made and when it
    /// took effect: the measured transition latency.
    pub fn last_completion(&self, pd: usize) -> Option<&Completion<D::Error>> {
        self.last.get(pd)?.as_ref()
    }

    /// When the driver next needs [`Self::poll`] ([`CpufreqDriver::next_poll`]).
    pub fn next_poll(&self) -> Option<Nanos> {
        self.driver.next_poll()
    }

    fn policy_mut(&mut self, pd: usize) -> Result<&mut CpufreqPolicy, CpufreqError> {
        self.policies
            .get_mut(pd)
            .ok_or(CpufreqError::NoSuchDomain { pd })
    }

    fn request(&mut self, pd: usize, f: Khz, now: Nanos) -> Option<Nanos> {
        let p = self.policies.get(pd)?;
        match self.driver.target(p, f, now) {
            Ok(t) => {
                if let Some(r) = self.requested.get_mut(pd) {
                    *r = Some(f);
                }
                Some(t)
            }
            Err(e) => {
                self.failed_requests += 1;
                self.last_error = Some((pd, e));
                None
            }
        }
    }
}
