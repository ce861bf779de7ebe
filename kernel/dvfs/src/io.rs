//! The drivers' only view of the hardware: 32-bit register/word access to a memory-mapped
//! region ([`Mmio`]) and a clock for bounded waits ([`Clock`]).
//!
//! On a board, the kernel implements [`Mmio`] over a Device-nGnRE mapping (as Linux's
//! `ioremap` maps SCMI shared memory and mailbox registers: the firmware's processor is not
//! cache-coherent with the application processors); in host tests and in the QEMU firmware
//! stand-in it is plain memory shared with a firmware model. Every access is one aligned
//! little-endian 32-bit word, the access size the SCMI shared-memory transport and the
//! HiSilicon mailboxes use.
//!
//! Ordering contract (Linux `writel`/`readl` semantics): accesses through one region happen in
//! program order; [`Mmio::wmb`] makes every earlier write through any region visible before any
//! later write (the barrier between filling a message and ringing a doorbell, `dsb st` on
//! arm64); [`Mmio::rmb`] orders earlier reads before later ones (after seeing a channel
//! handed back, before reading the reply, `dsb ld`).

use asym_sched::types::Nanos;

/// A memory-mapped region accessed as 32-bit little-endian words at byte offsets.
///
/// Offsets are multiples of 4 below [`Mmio::size`]; the drivers check the region's size once
/// when they are built and never go outside it. An implementation must not panic on an
/// offset outside the region: it reads 0 and ignores the write.
pub trait Mmio {
    /// The word at byte `offset`.
    fn read32(&self, offset: usize) -> u32;
    /// Writes `value` at byte `offset`.
    fn write32(&mut self, offset: usize, value: u32);
    /// The region's size in bytes.
    fn size(&self) -> usize;
    /// Every earlier write (through any region) is visible before any later write.
    fn wmb(&self) {}
    /// Every earlier read (through any region) happens before any later read.
    fn rmb(&self) {}
}

/// A monotonic clock, for waits that must end (discovery at boot, a stuck mailbox).
pub trait Clock {
    /// The time now.
    fn now(&self) -> Nanos;
    /// Called between two looks at the clock in a bounded wait: let whatever is waited for
    /// run (a kernel yields the CPU's time slice, under QEMU the vCPU).
    fn relax(&self) {
        core::hint::spin_loop();
    }
}

/// A region in ordinary memory: `N` words, for firmware models, host tests and fuzzing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ram<const N: usize> {
    /// The words, little-endian values as the bus sees them.
    pub words: [u32; N],
}

impl<const N: usize> Ram<N> {
    /// All zero.
    pub const fn new() -> Self {
        Ram { words: [0; N] }
    }
}

impl<const N: usize> Default for Ram<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Mmio for Ram<N> {
    fn read32(&self, offset: usize) -> u32 {
        self.words.get(offset / 4).copied().unwrap_or(0)
    }

    fn write32(&mut self, offset: usize, value: u32) {
        if let Some(w) = self.words.get_mut(offset / 4) {
            *w = value;
        }
    }

    fn size(&self) -> usize {
        N * 4
    }
}

impl<M: Mmio + ?Sized> Mmio for &mut M {
    fn read32(&self, offset: usize) -> u32 {
        (**self).read32(offset)
    }

    fn write32(&mut self, offset: usize, value: u32) {
        (**self).write32(offset, value)
    }

    fn size(&self) -> usize {
        (**self).size()
    }

    fn wmb(&self) {
        (**self).wmb()
    }

    fn rmb(&self) {
        (**self).rmb()
    }
}

/// A window `[base, base + len)` of another region, seen from offset 0 (one SCMI channel in
/// the SRAM, one mailbox channel's registers). Offsets past `len` read 0 and ignore writes.
#[derive(Debug)]
pub struct Window<M> {
    inner: M,
    base: usize,
    len: usize,
}

impl<M: Mmio> Window<M> {
    /// The window of `inner` at `base`, `len` bytes (cut at the end of `inner`).
    pub fn new(inner: M, base: usize, len: usize) -> Self {
        let len = len.min(inner.size().saturating_sub(base));
        Window { inner, base, len }
    }

    /// The region the window looks into.
    pub fn into_inner(self) -> M {
        self.inner
    }
}

impl<M: Mmio> Mmio for Window<M> {
    fn read32(&self, offset: usize) -> u32 {
        if offset < self.len {
            self.inner.read32(self.base + offset)
        } else {
            0
        }
    }

    fn write32(&mut self, offset: usize, value: u32) {
        if offset < self.len {
            self.inner.write32(self.base + offset, value)
        }
    }

    fn size(&self) -> usize {
        self.len
    }

    fn wmb(&self) {
        self.inner.wmb()
    }

    fn rmb(&self) {
        self.inner.rmb()
    }
}

/// `now + us` microseconds, saturating.
pub(crate) fn after_us(now: Nanos, us: u64) -> Nanos {
    Nanos(now.0.saturating_add(us.saturating_mul(1000)))
}

/// Microseconds from `from` to `to` (0 if `to` is earlier).
pub(crate) fn us_between(from: Nanos, to: Nanos) -> u64 {
    to.0.saturating_sub(from.0) / 1000
}
