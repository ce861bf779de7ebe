//! One type for whichever firmware driver a board has, so a kernel can hold "the board's
//! cpufreq driver" without generics: every region is the same [`Mmio`] type `R`.

use asym_sched::cpufreq::driver::{Completion, CpufreqDriver};
use asym_sched::cpufreq::CpufreqPolicy;
use asym_sched::types::{Khz, Nanos};

use crate::io::Mmio;
use crate::scmi::perf::ScmiPerf;
use crate::scmi::MhuDoorbell;
use crate::{hi3660, hi6220, Error};

/// The board's firmware cpufreq driver. The SCMI variant carries its discovered level tables
/// (about 4 KiB): keep it boxed (the crate itself has no allocator to do so).
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum AnyDriver<R> {
    /// Juno r2: SCMI performance protocol.
    Scmi(ScmiPerf<R, MhuDoorbell<R>>),
    /// HiKey960: Hi3660 stub clock.
    Hi3660(hi3660::StubClock<R, R>),
    /// HiKey: Hi6220 stub clock.
    Hi6220(hi6220::StubClock<R, R, R>),
}

macro_rules! each {
    ($self:ident, $d:ident => $e:expr) => {
        match $self {
            AnyDriver::Scmi($d) => $e,
            AnyDriver::Hi3660($d) => $e,
            AnyDriver::Hi6220($d) => $e,
        }
    };
}

impl<R: Mmio> CpufreqDriver for AnyDriver<R> {
    type Error = Error;

    fn name(&self) -> &'static str {
        each!(self, d => d.name())
    }

    fn target(&mut self, policy: &CpufreqPolicy, freq: Khz, now: Nanos) -> Result<Nanos, Error> {
        each!(self, d => d.target(policy, freq, now))
    }

    fn get(&self, pd: usize) -> Khz {
        each!(self, d => d.get(pd))
    }

    fn fast_switch_possible(&self) -> bool {
        each!(self, d => d.fast_switch_possible())
    }

    fn transition_latency_ns(&self, pd: usize) -> u64 {
        each!(self, d => d.transition_latency_ns(pd))
    }

    fn poll(&mut self, now: Nanos) -> Option<Completion<Error>> {
        each!(self, d => d.poll(now))
    }

    fn next_poll(&self) -> Option<Nanos> {
        each!(self, d => d.next_poll())
    }
}
