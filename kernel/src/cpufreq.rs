//! The kernel's cpufreq: one [`CpufreqCore`] (policies, schedutil state, the driver) behind a
//! lock, the per-CPU `arch_freq_scale`, and the schedutil trigger called from the tick. The
//! driver is the board's DVFS firmware driver when the DT describes one (`crate::dvfs`: Juno's
//! SCMI, the HiKey stub clocks, or the emulated boards' firmware stand-in), else the emulated
//! driver.
//!
//! Re-derives the mechanism half of Linux's `drivers/cpufreq/cpufreq.c` (policy limits,
//! governor switch), `kernel/sched/cpufreq.c` (`cpufreq_update_util`) and
//! `drivers/base/arch_topology.c` (`arch_freq_scale`, a per-CPU value the cpufreq side writes
//! and the scheduler reads at each clock update). The decisions are the policy crate's.
//!
//! Deliberate differences: the driver is polled from the tick of any CPU ([`tick`]), not from a
//! timer at [`CpufreqCore::next_poll`] or the firmware's interrupt, so a transition is seen up
//! to one tick late (the emulated driver applies a request after the domain's transition
//! latency; a firmware driver when the firmware reports it). Schedutil reads the other
//! CPUs of a domain from the snapshots each CPU publishes after every change of its run queue
//! (`sched::snapshot`) instead of their run queues: Linux reads remote `cpu_util` without the
//! remote rq lock too, and taking remote rq locks from the tick would add a lock order.
//!
//! Lock order: the core's lock is taken with no rq lock held; it may take snapshot locks
//! (leaves).

use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use alloc::boxed::Box;
use asym_sched::cpufreq::driver::{
    Completion, CpufreqDriver, EmulatedDriver, Request, REQUEST_LOG_LEN,
};
use asym_sched::cpufreq::policies::CpufreqCore;
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

/// The board's cpufreq: every domain's policy, governor and the driver.
pub type Core = CpufreqCore<Driver>;

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
    /// A `CpufreqCore` keeps its policies, governor state and driver tables on the heap
    /// (about 100 bytes itself), so it sits here directly.
    core: IrqSpinLock<Core>,
    board: &'static BoardDesc,
}

static STATE: InitOnce<State> = InitOnce::new();

/// Whether the driver has a frequency transition in flight (it completes at a tick, so some
/// CPU must keep ticking: an idle CPU does not stop its tick while this is set).
static IN_FLIGHT: AtomicBool = AtomicBool::new(false);

/// Linux's per-CPU `arch_freq_scale`: `cur / cpuinfo.max_freq × 1024` of the CPU's domain.
static ARCH_FREQ_SCALE: PerCpu<AtomicU32> =
    PerCpu::new([const { AtomicU32::new(SCHED_CAPACITY_SCALE) }; MAX_CPUS]);

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

/// Builds the cpufreq core for `board` (every domain on schedutil) at `now`, with the
/// boot-time seed-era switches of `features` (`CpufreqCore::apply_seed_era`; changing them
/// later at run time does not rebuild the policies). Errors are returned for the caller to
/// report; cpufreq then stays off.
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
    let core = IrqSpinLock::with_rank(
        CpufreqCore::new(
            board,
            &caps[..topo.nr_cpus()],
            Governor::Schedutil,
            now,
            |p| match firmware {
                Some(d) => Driver::Firmware(Box::new(d), Box::new(RequestLog::new())),
                None => Driver::Emulated(EmulatedDriver::new(p, true)),
            },
        )
        .map_err(InitError::Policy)?,
        LockRank::CPUFREQ,
    );
    core.lock().apply_seed_era(features);
    for c in topo.cpus() {
        let core = core.lock();
        let scale = core.arch_scale_freq_capacity(c.id);
        ARCH_FREQ_SCALE.of(c.id).store(scale, Ordering::Relaxed);
        if let Some(p) = core
            .policy_of(c.id)
            .and_then(|pd| core.policy(pd).map(|p| (pd, p)))
        {
            let uw = crate::energy::opp_power_uw(board, p.0, p.1.cur());
            crate::energy::set_power(c.id, uw, now.0);
        }
    }
    let _ = STATE.set(State { core, board });
    Ok(())
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

/// The domain `cpu` belongs to.
pub fn domain_of(cpu: CpuId) -> Option<usize> {
    STATE.get()?.core.lock().policy_of(cpu)
}

/// A copy of policy `pd` (limits, current frequency, statistics); allocates, so not for
/// the tick path.
pub fn policy(pd: usize) -> Option<CpufreqPolicy> {
    STATE.get()?.core.lock().policy(pd).cloned()
}

/// Runs `f` on the core under its lock (for self tests and reports).
pub fn with_core<R>(f: impl FnOnce(&mut Core) -> R) -> Option<R> {
    Some(f(&mut STATE.get()?.core.lock()))
}

/// Switches domain `pd` to `gov` (`scaling_governor`).
pub fn set_governor(pd: usize, gov: Governor) -> Result<(), Error> {
    let st = STATE.get().ok_or(Error::NoCpufreq)?;
    let now = crate::sched::now();
    let mut core = st.core.lock();
    let r = core.set_governor(pd, gov, now).map_err(Error::Policy);
    IN_FLIGHT.store(core.driver.next_poll().is_some(), Ordering::Release);
    let cpus = core.policy(pd).map(|p| p.cpus);
    let all_schedutil = (0..core.nr_policies()).all(|i| {
        core.policy(i)
            .is_none_or(|p| p.governor() == Governor::Schedutil)
    });
    drop(core);
    crate::sched::governors_changed(all_schedutil);
    if r.is_ok() {
        kick_domain(cpus);
    }
    r
}

/// Schedutil runs from ticks: a domain whose CPUs all stopped theirs would never apply a new
/// governor's or new limits' choice. Each CPU of `cpus` evaluates at a tick it restarts for
/// that (call with the cpufreq core's lock dropped).
fn kick_domain(cpus: Option<CpuMask>) {
    let Some(cpus) = cpus else { return };
    for c in 0..MAX_CPUS {
        let id = CpuId(c as u16);
        if cpus.contains(id) {
            crate::sched::cpufreq_kick(id);
        }
    }
}

/// Sets `scaling_min_freq`/`scaling_max_freq` of domain `pd`. Unlike Linux's sysfs, which
/// clamps, a value outside the OPP table's range is refused with [`Error::OutOfRange`].
pub fn set_limits(pd: usize, min: Khz, max: Khz) -> Result<(), Error> {
    let st = STATE.get().ok_or(Error::NoCpufreq)?;
    let now = crate::sched::now();
    let mut core = st.core.lock();
    let p = core.policy(pd).ok_or(Error::NoSuchDomain)?;
    let table = p.table();
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
    let r = core.set_limits(pd, min, max, now).map_err(Error::Policy);
    IN_FLIGHT.store(core.driver.next_poll().is_some(), Ordering::Release);
    let cpus = core.policy(pd).map(|p| p.cpus);
    drop(core);
    // A limit that leaves `cur` inside it (a lowered minimum under schedutil) takes effect at
    // the governor's next evaluation, which an idle domain would never have.
    if r.is_ok() {
        kick_domain(cpus);
    }
    r
}

/// The tick's cpufreq work on `cpu` at `now`: run schedutil if the rq asked
/// (`cpufreq_update_util`), then apply the transitions the driver completed and update
/// `arch_freq_scale` of their CPUs.
pub fn tick(cpu: CpuId, now: Nanos, update: Option<CpufreqUpdate>, features: SchedFeatures) {
    let Some(st) = STATE.get() else {
        return;
    };
    let mut core = st.core.lock();
    if let Some(req) = update {
        let flags = if req.iowait {
            UpdateFlags::IOWAIT
        } else {
            UpdateFlags::NONE
        };
        let caps = |c: CpuId| -> Capacity { crate::sched::capacity_orig(c) };
        let uclamp_used = crate::sched::uclamp_used();
        core.update_util(now, cpu, flags, features, uclamp_used, |c| {
            crate::sched::snapshot(c).unwrap_or_else(|| RqSnapshot::idle(c, caps(c)))
        });
    }
    // Not the tick's `now`: completions are stamped with the time they are seen, and the
    // tick's was read before the lock wait and schedutil's update.
    apply_completions(&mut core, crate::sched::now());
}

/// Polls the driver (outside the tick: a self test waiting for a transition) and applies
/// what completed, as the tick does. The time is read with the lock held: one read before
/// could be older than the read-back it stamps by a whole lock wait (under QEMU's round-robin
/// vCPUs, a time slice), and a transition would look quicker than it was.
pub fn poll() {
    if let Some(st) = STATE.get() {
        let mut core = st.core.lock();
        apply_completions(&mut core, crate::sched::now());
    }
}

/// Applies every transition the driver completed by `now` and updates `arch_freq_scale` of
/// their CPUs.
fn apply_completions(core: &mut Core, now: Nanos) {
    let board = STATE.get().map(|s| s.board);
    while let Some((pd, _)) = core.poll(now) {
        if let Some(p) = core.policy(pd) {
            let scale = p.arch_scale_freq_capacity();
            let uw = board.map_or(0, |b| crate::energy::opp_power_uw(b, pd, p.cur()));
            for c in 0..MAX_CPUS {
                let id = CpuId(c as u16);
                if p.cpus.contains(id) {
                    ARCH_FREQ_SCALE.of(id).store(scale, Ordering::Relaxed);
                    // The meter changes power at the trace event's instant, so both agree.
                    let at = crate::tracing::cpu_frequency(id, p.cur().0);
                    crate::energy::set_power(id, uw, at.unwrap_or(now.0));
                }
            }
        }
    }
    IN_FLIGHT.store(core.driver.next_poll().is_some(), Ordering::Release);
}

/// Whether a frequency transition is in flight (see [`IN_FLIGHT`]).
pub fn transition_pending() -> bool {
    IN_FLIGHT.load(Ordering::Acquire)
}

/// Prints each domain: CPUs, OPPs and governor (the boot banner's cpufreq part).
pub fn print_domains() {
    let Some(st) = STATE.get() else {
        crate::println!("cpufreq: none (no operating-points-v2 tables in the DT)");
        return;
    };
    let core = st.core.lock();
    crate::println!("cpufreq: driver {}", core.driver.name());
    for (pd, d) in st.board.perf_domains.iter().enumerate() {
        let Some(p) = core.policy(pd) else { continue };
        let mut line: heapless::String<160> = heapless::String::new();
        for o in d.opps {
            let _ = fmt::Write::write_fmt(&mut line, format_args!(" {}", o.freq.0 / 1000));
        }
        crate::println!(
            "cpufreq: policy {} ({}) cpus {:?} OPPs MHz{} latency {} us governor {:?} cur {} MHz",
            pd,
            d.name,
            p.cpus,
            line.as_str(),
            d.transition_latency_ns / 1000,
            p.governor(),
            p.cur().0 / 1000
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
