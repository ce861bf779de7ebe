//! The kernel's cpufreq: each performance domain's policy and schedutil state under its own
//! lock, the driver under another, the per-CPU `arch_freq_scale`, the schedutil trigger
//! called from the tick, and the driver's completion timer. The driver is the board's DVFS
//! firmware driver when the DT describes one (`crate::dvfs`: Juno's SCMI, the HiKey stub
//! clocks, or the emulated boards' firmware stand-in), else the emulated driver.
//!
//! Re-derives the mechanism half of Linux's `drivers/cpufreq/cpufreq.c` (policy limits,
//! governor switch), `kernel/sched/cpufreq.c` (`cpufreq_update_util`) and
//! `drivers/base/arch_topology.c` (`arch_freq_scale`, a per-CPU value the cpufreq side writes
//! and the scheduler reads at each clock update). The decisions are the policy crate's
//! (`asym_sched::cpufreq::policies::PolicyState`, the same code the simulator's
//! `CpufreqCore` runs).
//!
//! Locks: a tick that runs schedutil takes its own domain's policy lock (Linux's
//! `sg_policy->update_lock`) and, only when schedutil asks for a new frequency (at most once
//! per `rate_limit_us`), the driver's lock for that one call; a tick without an update takes
//! no cpufreq lock. Policy locks never nest with each other; the driver's lock is taken inside
//! a policy's or alone, and nothing but leaves is taken inside it. Both are taken with no
//! run-queue lock held.
//!
//! Completion is asynchronous: a request arms a one-shot timer on the requesting CPU at the
//! driver's [`CpufreqDriver::next_poll`] (the emulated driver's transition end; the firmware's
//! reply poll or settle check), and the timer's handler ([`poll`]) applies what completed and
//! re-arms for what is still outstanding, on Juno as Linux's SCMI transport polls for a reply
//! or takes the MHU's completion interrupt. So a transition is seen when it completes, not up
//! to a tick later, and an idle domain's CPUs may stop their ticks while one is in flight.
//!
//! Deliberate difference: schedutil reads the other CPUs of a domain from the snapshots each
//! CPU publishes after every change of its run queue (`sched::snapshot`) instead of their run
//! queues: Linux reads remote `cpu_util` without the remote rq lock too, and taking remote rq
//! locks from the tick would add a lock order.

use core::fmt;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use alloc::boxed::Box;
use asym_sched::cpufreq::driver::{
    Completion, CpufreqDriver, EmulatedDriver, Request, REQUEST_LOG_LEN,
};
use asym_sched::cpufreq::policies::{CpufreqCore, PolicyState};
use asym_sched::cpufreq::{CpufreqError, CpufreqPolicy, Governor};
use asym_sched::features::SchedFeatures;
use asym_sched::rq::CpufreqUpdate;
use asym_sched::rq::RqSnapshot;
use asym_sched::schedutil::UpdateFlags;
use asym_sched::topology::{BoardDesc, Topology};
use asym_sched::types::{Capacity, CpuId, CpuMask, Khz, Nanos, SCHED_CAPACITY_SCALE};

use crate::dt::MAX_CPUS;
use crate::percpu::PerCpu;
use crate::sync::{InitOnce, IrqSpinLock, LockRank};

/// The cpufreq driver: the board's firmware, or the emulated one.
#[derive(Debug)]
pub enum Driver {
    Emulated(EmulatedDriver),
    /// The firmware driver and a log of its requests like the emulated driver's (each entry's
    /// `effective` filled in when its completion arrives).
    Firmware(Box<crate::dvfs::FirmwareDriver>, Box<RequestLog>),
}

/// The most recent requests to a firmware driver.
#[derive(Debug)]
pub struct RequestLog {
    log: [Request; REQUEST_LOG_LEN],
    n: u64,
}

impl RequestLog {
    fn new() -> Self {
        RequestLog {
            log: [Request::default(); REQUEST_LOG_LEN],
            n: 0,
        }
    }

    fn push(&mut self, r: Request) {
        self.log[(self.n % REQUEST_LOG_LEN as u64) as usize] = r;
        self.n += 1;
    }

    fn iter(&self) -> impl Iterator<Item = &Request> {
        let n = self.n.min(REQUEST_LOG_LEN as u64) as usize;
        let start = (self.n as usize + REQUEST_LOG_LEN - n) % REQUEST_LOG_LEN;
        (0..n).map(move |i| &self.log[(start + i) % REQUEST_LOG_LEN])
    }

    /// Records `c`'s outcome on the requests it completes: every open request for its
    /// frequency made before it (a repeated request joins the one in progress).
    fn complete<E>(&mut self, c: &Completion<E>) {
        if c.result.is_err() {
            return;
        }
        for r in self.log.iter_mut() {
            if r.pd == c.pd && r.freq == c.requested && r.effective.is_none() && r.at <= c.at {
                r.effective = Some(c.at);
            }
        }
    }
}

impl Driver {
    /// The most recent requests, oldest first: when each was made and, once it completed,
    /// when it took effect (`None`: failed, superseded or still pending).
    pub fn requests(&self) -> impl Iterator<Item = &Request> {
        let (a, b) = match self {
            Driver::Emulated(d) => (Some(d.requests()), None),
            Driver::Firmware(_, log) => (None, Some(log.iter())),
        };
        a.into_iter().flatten().chain(b.into_iter().flatten())
    }

    /// The firmware driver, if this is one.
    pub fn firmware(&self) -> Option<&crate::dvfs::FirmwareDriver> {
        match self {
            Driver::Firmware(d, _) => Some(d),
            Driver::Emulated(_) => None,
        }
    }
}

/// A driver's error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverError {
    Emulated(CpufreqError),
    Firmware(asym_dvfs::Error),
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverError::Emulated(e) => write!(f, "{e}"),
            DriverError::Firmware(e) => write!(f, "dvfs: {e}"),
        }
    }
}

impl CpufreqDriver for Driver {
    type Error = DriverError;

    fn name(&self) -> &'static str {
        match self {
            Driver::Emulated(d) => d.name(),
            Driver::Firmware(d, _) => d.name(),
        }
    }

    fn target(
        &mut self,
        policy: &CpufreqPolicy,
        freq: Khz,
        now: Nanos,
    ) -> Result<Nanos, DriverError> {
        match self {
            Driver::Emulated(d) => d.target(policy, freq, now).map_err(DriverError::Emulated),
            Driver::Firmware(d, log) => {
                let r = d.target(policy, freq, now).map_err(DriverError::Firmware);
                log.push(Request {
                    pd: policy.pd,
                    freq,
                    at: now,
                    effective: None,
                });
                r
            }
        }
    }

    fn get(&self, pd: usize) -> Khz {
        match self {
            Driver::Emulated(d) => d.get(pd),
            Driver::Firmware(d, _) => d.get(pd),
        }
    }

    fn fast_switch_possible(&self) -> bool {
        match self {
            Driver::Emulated(d) => d.fast_switch_possible(),
            Driver::Firmware(d, _) => d.fast_switch_possible(),
        }
    }

    fn transition_latency_ns(&self, pd: usize) -> u64 {
        match self {
            Driver::Emulated(d) => d.transition_latency_ns(pd),
            Driver::Firmware(d, _) => d.transition_latency_ns(pd),
        }
    }

    fn poll(&mut self, now: Nanos) -> Option<Completion<DriverError>> {
        fn map<E>(c: Completion<E>, f: fn(E) -> DriverError) -> Completion<DriverError> {
            Completion {
                pd: c.pd,
                requested: c.requested,
                requested_at: c.requested_at,
                result: c.result.map_err(f),
                at: c.at,
            }
        }
        match self {
            Driver::Emulated(d) => d.poll(now).map(|c| map(c, DriverError::Emulated)),
            Driver::Firmware(d, log) => {
                let c = d.poll(now)?;
                log.complete(&c);
                Some(map(c, DriverError::Firmware))
            }
        }
    }

    fn next_poll(&self) -> Option<Nanos> {
        match self {
            Driver::Emulated(d) => d.next_poll(),
            Driver::Firmware(d, _) => d.next_poll(),
        }
    }
}

/// Why cpufreq could not start.
#[derive(Debug)]
pub enum InitError {
    /// The policies could not be built.
    Policy(CpufreqError),
    /// The DT describes DVFS firmware the kernel could not drive.
    Firmware(crate::dvfs::ProbeError),
    /// A real board whose DT describes no DVFS firmware: its frequencies are the firmware's,
    /// and an emulated driver would only pretend to change them.
    NoFirmware {
        board: &'static str,
        expected: &'static [crate::board::DvfsTransport],
    },
}

impl fmt::Display for InitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InitError::Policy(e) => write!(f, "{e}"),
            InitError::Firmware(e) => write!(f, "dvfs: {e}"),
            InitError::NoFirmware { board, expected } => {
                write!(f, "the device tree describes no DVFS firmware, and {board} changes frequencies only through its firmware (")?;
                for (i, t) in expected.iter().enumerate() {
                    write!(f, "{}{}", if i == 0 { "" } else { " or " }, t.name())?;
                }
                write!(
                    f,
                    "): boot with the board's mainline DTB (docs/boards/{board}.md); frequencies stay where the firmware left them"
                )
            }
        }
    }
}

struct State {
    /// `policies[pd]`: policy `pd` with its schedutil state and request bookkeeping, under its
    /// own lock (Linux's `policy->rwsem` with `sg_policy->update_lock`). A tick that runs
    /// schedutil takes its own domain's lock and no other.
    policies: Box<[IrqSpinLock<Policy>]>,
    /// `cpus[pd]`: policy `pd`'s CPUs, fixed at [`init`], so a CPU finds its policy without a
    /// lock.
    cpus: Box<[CpuMask]>,
    /// The driver, one firmware channel for every domain: taken for one driver call at a time
    /// (a request, a poll, a read-back), inside a policy's lock or with none held.
    driver: IrqSpinLock<Driver>,
    board: &'static BoardDesc,
}

static STATE: InitOnce<State> = InitOnce::new();

/// One policy's state as the kernel keeps it.
pub type Policy = PolicyState<DriverError>;

/// When the driver next needs a poll, in ns of guest time (`u64::MAX`: nothing outstanding).
/// Written under the driver's lock, so the latest write is the driver's latest state; read
/// without it ([`transition_pending`], and [`start_timer`] at boot).
static NEXT_POLL: AtomicU64 = AtomicU64::new(u64::MAX);

/// Per CPU: how long its cpufreq timer waits at least before the next poll
/// ([`rearm_after_poll`]), ns.
static POLL_BACKOFF_NS: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);
/// The first back-off after a poll that found nothing.
const POLL_BACKOFF_MIN_NS: u64 = 10_000;

/// Linux's per-CPU `arch_freq_scale`: `cur / cpuinfo.max_freq × 1024` of the CPU's domain.
static ARCH_FREQ_SCALE: PerCpu<AtomicU32> =
    PerCpu::new([const { AtomicU32::new(SCHED_CAPACITY_SCALE) }; MAX_CPUS]);

/// The driver as the policy operations see it: each call takes the driver's lock for itself
/// only, so a policy's lock is never held across another policy's driver call.
struct LockedDriver<'a>(&'a IrqSpinLock<Driver>);

impl CpufreqDriver for LockedDriver<'_> {
    type Error = DriverError;

    fn name(&self) -> &'static str {
        self.0.lock().name()
    }

    fn target(
        &mut self,
        policy: &CpufreqPolicy,
        freq: Khz,
        now: Nanos,
    ) -> Result<Nanos, DriverError> {
        let mut d = self.0.lock();
        let r = d.target(policy, freq, now);
        NEXT_POLL.store(d.next_poll().map_or(u64::MAX, |t| t.0), Ordering::Release);
        r
    }

    fn get(&self, pd: usize) -> Khz {
        self.0.lock().get(pd)
    }

    fn fast_switch_possible(&self) -> bool {
        self.0.lock().fast_switch_possible()
    }

    fn transition_latency_ns(&self, pd: usize) -> u64 {
        self.0.lock().transition_latency_ns(pd)
    }

    fn poll(&mut self, now: Nanos) -> Option<Completion<DriverError>> {
        self.0.lock().poll(now)
    }

    fn next_poll(&self) -> Option<Nanos> {
        self.0.lock().next_poll()
    }
}

/// A refused cpufreq request from a kernel API or the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Error {
    /// The board has no OPP tables.
    NoCpufreq,
    /// No domain with this name or index.
    NoSuchDomain,
    /// A frequency outside the domain's OPP table range.
    OutOfRange {
        pd: usize,
        khz: u32,
        min: u32,
        max: u32,
    },
    /// Refused by the policy (e.g. min above max).
    Policy(CpufreqError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::NoCpufreq => write!(f, "cpufreq: this board has no OPP tables"),
            Error::NoSuchDomain => write!(f, "cpufreq: no such performance domain"),
            Error::OutOfRange { pd, khz, min, max } => write!(
                f,
                "cpufreq policy {pd}: {khz} kHz is outside the OPP table ({min}..={max} kHz)"
            ),
            Error::Policy(e) => write!(f, "{e}"),
        }
    }
}

/// Builds cpufreq for `board` (every domain on schedutil) at `now`, with the boot-time
/// seed-era switches of `features` (`PolicyState::apply_seed_era`; changing them later at run
/// time does not rebuild the policies). Errors are returned for the caller to report; cpufreq
/// then stays off. The requests made here complete through the driver's timer, armed by
/// [`start_timer`] once the timers run.
pub fn init(
    plat: &crate::dt::Platform,
    board: &'static BoardDesc,
    topo: &Topology,
    now: Nanos,
    features: SchedFeatures,
) -> Result<(), InitError> {
    let mut caps = [Capacity(SCHED_CAPACITY_SCALE); MAX_CPUS];
    for c in topo.cpus() {
        caps[c.id.index()] = c.capacity_orig;
    }
    let firmware = crate::dvfs::probe(plat, board).map_err(InitError::Firmware)?;
    let real_board = crate::boot::board();
    if firmware.is_none() && !real_board.dvfs.is_empty() {
        return Err(InitError::NoFirmware {
            board: real_board.name,
            expected: real_board.dvfs,
        });
    }
    let (policies, driver) =
        CpufreqCore::<Driver>::build(board, &caps[..topo.nr_cpus()], now, |p| match firmware {
            Some(d) => Driver::Firmware(Box::new(d), Box::new(RequestLog::new())),
            None => Driver::Emulated(EmulatedDriver::new(p, true)),
        })
        .map_err(InitError::Policy)?;
    let driver = IrqSpinLock::with_rank(driver, LockRank::CPUFREQ_DRIVER);
    let cpus: Box<[CpuMask]> = policies.iter().map(|p| p.cpus).collect();
    let policies: Box<[IrqSpinLock<Policy>]> = policies
        .into_iter()
        .map(|p| {
            let mut s = PolicyState::new(p);
            // As `CpufreqCore::new` then `apply_seed_era`, the simulator's order.
            s.set_governor(&mut LockedDriver(&driver), Governor::Schedutil, now);
            s.apply_seed_era(features);
            IrqSpinLock::with_rank(s, LockRank::CPUFREQ_POLICY)
        })
        .collect();
    for (pd, l) in policies.iter().enumerate() {
        let p = l.lock();
        let p = p.policy();
        let scale = p.arch_scale_freq_capacity();
        let uw = crate::energy::opp_power_uw(board, pd, p.cur());
        for c in topo.cpus().iter().filter(|c| p.cpus.contains(c.id)) {
            ARCH_FREQ_SCALE.of(c.id).store(scale, Ordering::Relaxed);
            crate::energy::set_power(c.id, uw, now.0);
        }
    }
    let _ = STATE.set(State {
        policies,
        cpus,
        driver,
        board,
    });
    Ok(())
}

/// Arms the driver's timer for the requests made before the timers ran ([`init`], the command
/// line's `cpufreq.*`). Call once after `timer::init` on the boot CPU.
pub fn start_timer() {
    arm_timer();
}

/// Whether the board has cpufreq (OPP tables in its DT).
pub fn available() -> bool {
    STATE.get().is_some()
}

/// `arch_scale_freq_capacity(cpu)`, 1024 without cpufreq.
pub fn arch_freq_scale(cpu: CpuId) -> u32 {
    ARCH_FREQ_SCALE.of(cpu).load(Ordering::Relaxed)
}

/// Index of the domain named `name` ("big", "little", ...) or given by number.
pub fn domain_by_name(name: &str) -> Option<usize> {
    let st = STATE.get()?;
    st.board
        .perf_domains
        .iter()
        .position(|d| d.name == name)
        .or_else(|| {
            name.parse::<usize>()
                .ok()
                .filter(|&i| i < st.board.perf_domains.len())
        })
}

/// The domain `cpu` belongs to (no lock).
pub fn domain_of(cpu: CpuId) -> Option<usize> {
    STATE.get()?.domain_of(cpu)
}

impl State {
    /// The domain `cpu` belongs to.
    fn domain_of(&self, cpu: CpuId) -> Option<usize> {
        self.cpus.iter().position(|m| m.contains(cpu))
    }
}

/// How many policies (performance domains) there are; 0 without cpufreq.
pub fn nr_policies() -> usize {
    STATE.get().map_or(0, |st| st.policies.len())
}

/// A copy of policy `pd` (limits, current frequency, statistics); allocates, so not for
/// the tick path.
pub fn policy(pd: usize) -> Option<CpufreqPolicy> {
    Some(STATE.get()?.policies.get(pd)?.lock().policy().clone())
}

/// Runs `f` on policy `pd`'s state under its lock (for self tests and reports).
pub fn with_policy<R>(pd: usize, f: impl FnOnce(&mut Policy) -> R) -> Option<R> {
    Some(f(&mut STATE.get()?.policies.get(pd)?.lock()))
}

/// Runs `f` on the driver under its lock (for self tests and reports).
pub fn with_driver<R>(f: impl FnOnce(&mut Driver) -> R) -> Option<R> {
    Some(f(&mut STATE.get()?.driver.lock()))
}

/// Switches domain `pd` to `gov` (`scaling_governor`).
pub fn set_governor(pd: usize, gov: Governor) -> Result<(), Error> {
    let st = STATE.get().ok_or(Error::NoCpufreq)?;
    let lock = st.policies.get(pd).ok_or(Error::NoSuchDomain)?;
    let cpus = {
        let mut p = lock.lock();
        p.set_governor(&mut LockedDriver(&st.driver), gov, crate::sched::now());
        p.policy().cpus
    };
    arm_timer();
    let all_schedutil = st
        .policies
        .iter()
        .all(|l| l.lock().policy().governor() == Governor::Schedutil);
    crate::sched::governors_changed(all_schedutil);
    kick_domain(cpus);
    Ok(())
}

/// Schedutil runs from ticks: a domain whose CPUs all stopped theirs would never apply a new
/// governor's or new limits' choice. Each CPU of `cpus` evaluates at a tick it restarts for
/// that (call with no cpufreq lock held).
fn kick_domain(cpus: CpuMask) {
    for c in cpus.iter() {
        crate::sched::cpufreq_kick(c);
    }
}

/// Sets `scaling_min_freq`/`scaling_max_freq` of domain `pd`. Unlike Linux's sysfs, which
/// clamps, a value outside the OPP table's range is refused with [`Error::OutOfRange`].
pub fn set_limits(pd: usize, min: Khz, max: Khz) -> Result<(), Error> {
    let st = STATE.get().ok_or(Error::NoCpufreq)?;
    let lock = st.policies.get(pd).ok_or(Error::NoSuchDomain)?;
    let (r, cpus) = {
        let mut p = lock.lock();
        let table = p.policy().table();
        let (lo, hi) = (
            table.first().map_or(0, |e| e.frequency.0),
            table.last().map_or(0, |e| e.frequency.0),
        );
        for f in [min.0, max.0] {
            if !(lo..=hi).contains(&f) {
                return Err(Error::OutOfRange {
                    pd,
                    khz: f,
                    min: lo,
                    max: hi,
                });
            }
        }
        let now = crate::sched::now();
        let r = p.set_limits(&mut LockedDriver(&st.driver), min, max, now);
        (r, p.policy().cpus)
    };
    arm_timer();
    // A limit that leaves `cur` inside it (a lowered minimum under schedutil) takes effect at
    // the governor's next evaluation, which an idle domain would never have.
    if r.is_ok() {
        kick_domain(cpus);
    }
    r.map(|_| ()).map_err(Error::Policy)
}

/// `cpufreq_update_util` for `cpu` at `now`, when its rq asked for it (from its tick, or from
/// a NOHZ balancer that decayed its blocked load): schedutil on `cpu`'s domain under that
/// domain's lock, and a new frequency handed to the driver. Nothing is polled here: the
/// driver's completions arrive through its timer ([`poll`]). Without an update no cpufreq
/// lock is taken.
pub fn update_util(cpu: CpuId, now: Nanos, update: Option<CpufreqUpdate>, features: SchedFeatures) {
    let Some(req) = update else { return };
    let Some(st) = STATE.get() else { return };
    let Some(lock) = st.domain_of(cpu).and_then(|pd| st.policies.get(pd)) else {
        return;
    };
    let flags = if req.iowait {
        UpdateFlags::IOWAIT
    } else {
        UpdateFlags::NONE
    };
    let caps = |c: CpuId| -> Capacity { crate::sched::capacity_orig(c) };
    let uclamp_used = crate::sched::uclamp_used();
    let requested = lock.lock().update_util(
        &mut LockedDriver(&st.driver),
        now,
        cpu,
        flags,
        features,
        uclamp_used,
        |c| crate::sched::snapshot(c).unwrap_or_else(|| RqSnapshot::idle(c, caps(c))),
    );
    if requested.is_some() {
        arm_timer();
    }
}

/// Arms the calling CPU's cpufreq timer for the driver's next poll, if it wants one
/// ([`NEXT_POLL`], which every driver call that changes it stores under the driver's lock),
/// with no back-off: a request was just made.
fn arm_timer() {
    let t = NEXT_POLL.load(Ordering::Acquire);
    if t == u64::MAX {
        return;
    }
    let irq = crate::arch::irq_save_disable();
    POLL_BACKOFF_NS
        .of(crate::percpu::current_cpu())
        .store(0, Ordering::Relaxed);
    crate::timer::arm_cpufreq(crate::time::ns_to_cyc(t));
    crate::arch::irq_restore(irq);
}

/// Re-arms the calling CPU's cpufreq timer after a poll, at the driver's `next` poll but not
/// sooner than the CPU's back-off: 0 after a request or a completion, then doubling from
/// [`POLL_BACKOFF_MIN_NS`] with every poll that found nothing, up to a tick period. A firmware
/// that does not answer (every request times out) then costs a CPU a few interrupts and then
/// one per tick, not one every few µs for the whole timeout (the SCMI driver asks for a poll
/// 10 µs after its last one, less than the poll's own cost under `-icount`).
fn rearm_after_poll(next: Option<Nanos>, progressed: bool) {
    let Some(t) = next else { return };
    let irq = crate::arch::irq_save_disable();
    let b = POLL_BACKOFF_NS.of(crate::percpu::current_cpu());
    let backoff = if progressed {
        0
    } else {
        let tick = 1_000_000_000 / u64::from(crate::timer::hz().max(1));
        (b.load(Ordering::Relaxed) * 2).clamp(POLL_BACKOFF_MIN_NS, tick)
    };
    b.store(backoff, Ordering::Relaxed);
    let at = t.0.max(crate::sched::now().0.saturating_add(backoff));
    crate::timer::arm_cpufreq(crate::time::ns_to_cyc(at));
    crate::arch::irq_restore(irq);
}

/// The driver's timer (Linux: the firmware's completion interrupt, or the SCMI transport's
/// poll): takes every transition the driver completed, applies each to its policy and the
/// policy's CPUs' `arch_freq_scale`, and re-arms the calling CPU's timer for the driver's next
/// poll. Also called by self tests that wait for a transition. The time is read with the
/// driver's lock held: a read before could be older than the read-back it stamps by a whole
/// lock wait (under QEMU's round-robin vCPUs, a time slice), and a transition would look
/// quicker than it was.
pub fn poll() {
    let Some(st) = STATE.get() else { return };
    let mut progressed = false;
    loop {
        let (c, hw, next) = {
            let mut d = st.driver.lock();
            let c = d.poll(crate::sched::now());
            let hw = match &c {
                Some(c) if c.result.is_err() => d.get(c.pd),
                _ => Khz(0),
            };
            let next = d.next_poll();
            NEXT_POLL.store(next.map_or(u64::MAX, |t| t.0), Ordering::Release);
            (c, hw, next)
        };
        let Some(c) = c else {
            rearm_after_poll(next, progressed);
            return;
        };
        progressed = true;
        apply_completion(st, c, hw);
    }
}

/// Applies completion `c` to its policy and, when the policy moved, to its CPUs'
/// `arch_freq_scale`, the trace and the energy meter (under the policy's lock, so two CPUs
/// applying completions of one domain leave the newest).
fn apply_completion(st: &State, c: Completion<DriverError>, hw: Khz) {
    let Some(lock) = st.policies.get(c.pd) else {
        return;
    };
    let completed_at = c.at;
    let cpus = {
        let mut p = lock.lock();
        if p.complete(c, hw).is_none() {
            return;
        }
        let p = p.policy();
        let scale = p.arch_scale_freq_capacity();
        let uw = crate::energy::opp_power_uw(st.board, c.pd, p.cur());
        let now = crate::sched::now();
        for id in p.cpus.iter() {
            ARCH_FREQ_SCALE.of(id).store(scale, Ordering::Relaxed);
            // The meter changes power at the trace event's instant, so both agree.
            let at = crate::tracing::cpu_frequency(id, p.cur().0);
            crate::energy::set_power(id, uw, at.unwrap_or(now.0));
        }
        p.cpus
    };
    // The domain's running threads work at the new frequency from the completion on (no
    // cpufreq lock held: this takes run-queue locks).
    crate::sched::freq_transition(cpus, completed_at);
}

/// Whether the driver has a frequency transition (or a firmware reply) outstanding.
pub fn transition_pending() -> bool {
    NEXT_POLL.load(Ordering::Acquire) != u64::MAX
}

/// Prints each domain: CPUs, OPPs and governor (the boot banner's cpufreq part).
pub fn print_domains() {
    let Some(st) = STATE.get() else {
        crate::println!("cpufreq: none (no operating-points-v2 tables in the DT)");
        return;
    };
    crate::println!("cpufreq: driver {}", st.driver.lock().name());
    for (pd, d) in st.board.perf_domains.iter().enumerate() {
        let Some(lock) = st.policies.get(pd) else {
            continue;
        };
        let (cpus, gov, cur) = {
            let p = lock.lock();
            let p = p.policy();
            (p.cpus, p.governor(), p.cur())
        };
        let mut line: heapless::String<160> = heapless::String::new();
        for o in d.opps {
            let _ = fmt::Write::write_fmt(&mut line, format_args!(" {}", o.freq.0 / 1000));
        }
        crate::println!(
            "cpufreq: policy {} ({}) cpus {:?} OPPs MHz{} latency {} us governor {:?} cur {} MHz",
            pd,
            d.name,
            cpus,
            line.as_str(),
            d.transition_latency_ns / 1000,
            gov,
            cur.0 / 1000
        );
    }
}

/// Applies a command-line option `cpufreq.<domain>.<min_khz|max_khz|governor>=<value>`.
pub fn apply_option(key: &str, value: &str) -> Result<(), OptionError> {
    let rest = key.strip_prefix("cpufreq.").ok_or(OptionError::Syntax)?;
    let (dom, knob) = rest.split_once('.').ok_or(OptionError::Syntax)?;
    let pd = domain_by_name(dom).ok_or(if available() {
        OptionError::Cpufreq(Error::NoSuchDomain)
    } else {
        OptionError::Cpufreq(Error::NoCpufreq)
    })?;
    let p = policy(pd).ok_or(OptionError::Cpufreq(Error::NoSuchDomain))?;
    let khz = || {
        value
            .parse::<u32>()
            .map(Khz)
            .map_err(|_| OptionError::BadNumber)
    };
    match knob {
        "governor" => {
            let g = match value {
                "schedutil" => Governor::Schedutil,
                "performance" => Governor::Performance,
                "powersave" => Governor::Powersave,
                _ => return Err(OptionError::BadGovernor),
            };
            set_governor(pd, g).map_err(OptionError::Cpufreq)
        }
        "min_khz" => set_limits(pd, khz()?, p.max()).map_err(OptionError::Cpufreq),
        "max_khz" => set_limits(pd, p.min(), khz()?).map_err(OptionError::Cpufreq),
        _ => Err(OptionError::Syntax),
    }
}

/// Why a `cpufreq.*` option was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptionError {
    /// Not `cpufreq.<domain>.<min_khz|max_khz|governor>`.
    Syntax,
    /// The value is not a decimal number of kHz.
    BadNumber,
    /// Not schedutil, performance or powersave.
    BadGovernor,
    Cpufreq(Error),
}

impl fmt::Display for OptionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionError::Syntax => {
                write!(
                    f,
                    "expected cpufreq.<domain>.<min_khz|max_khz|governor>=<value>"
                )
            }
            OptionError::BadNumber => write!(f, "expected a frequency in kHz"),
            OptionError::BadGovernor => {
                write!(f, "expected schedutil, performance or powersave")
            }
            OptionError::Cpufreq(e) => write!(f, "{e}"),
        }
    }
}
