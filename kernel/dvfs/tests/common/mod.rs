//! Test benches: each driver wired to its firmware model through shared memory regions, with
//! a clock the test advances. The platform sees a doorbell after a configurable processing
//! delay, so the drivers really poll a channel the firmware still owns.
#![allow(dead_code)]

use std::cell::{Cell, RefCell};

use asym_dvfs::io::{Clock, Mmio, Ram};
use asym_dvfs::model::hi3660::{Event as MboxEvent, Lpm3, Mailbox};
use asym_dvfs::model::hi6220::{Event as IpcEvent, Ipc, Mcu};
use asym_dvfs::model::mhu::{self, Ring};
use asym_dvfs::model::scp::{PlatformConfig, ScmiPlatform};
use asym_dvfs::scmi::{Channel, MhuDoorbell};
use asym_sched::cpufreq::driver::{Completion, CpufreqDriver};
use asym_sched::types::Nanos;

pub const US: u64 = 1000;
pub const MS: u64 = 1_000_000;

/// Deterministic xorshift64* generator.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

// ------------------------------------------------------------------------------------------
// SCMI: one A2P channel (shmem) and the MHU, served by `ScmiPlatform` on MHU channel `ch`.
// ------------------------------------------------------------------------------------------

pub const SHMEM_WORDS: usize = 32; // 128 bytes, a Juno channel
pub const MHU_WORDS: usize = 0x400 / 4;

/// A test-provided platform: a function of (shmem, now).
pub type Script = Box<dyn FnMut(&mut Ram<SHMEM_WORDS>, u64)>;

/// Who answers the doorbell.
pub enum Responder {
    /// The spec-derived platform model.
    Model(Box<ScmiPlatform>),
    /// A test-provided platform.
    Script(Script),
}

pub struct ScmiBus {
    pub now: Cell<u64>,
    pub shmem: RefCell<Ram<SHMEM_WORDS>>,
    pub mhu: RefCell<Ram<MHU_WORDS>>,
    pub responder: RefCell<Responder>,
    /// Time between the doorbell and the platform's answer.
    pub reply_delay_ns: Cell<u64>,
    /// Leave the doorbell raised (the platform never takes it).
    pub keep_doorbell: Cell<bool>,
    pub rung_at: Cell<Option<u64>>,
    /// How far `Clock::now` moves time on each call (so blocking waits progress).
    pub step_ns: Cell<u64>,
    pub channel: usize,
    pub rings: Cell<u64>,
}

impl ScmiBus {
    pub fn new(cfg: PlatformConfig) -> Self {
        Self::with(Responder::Model(Box::new(ScmiPlatform::new(cfg))))
    }

    pub fn with(responder: Responder) -> Self {
        let bus = ScmiBus {
            now: Cell::new(1_000 * MS),
            shmem: RefCell::new(Ram::new()),
            mhu: RefCell::new(Ram::new()),
            responder: RefCell::new(responder),
            reply_delay_ns: Cell::new(5 * US),
            keep_doorbell: Cell::new(false),
            rung_at: Cell::new(None),
            step_ns: Cell::new(US),
            channel: 1,
            rings: Cell::new(0),
        };
        ScmiPlatform::init_channel(&mut *bus.shmem.borrow_mut());
        bus
    }

    pub fn platform(&self) -> std::cell::RefMut<'_, ScmiPlatform> {
        std::cell::RefMut::map(self.responder.borrow_mut(), |r| match r {
            Responder::Model(p) => &mut **p,
            Responder::Script(_) => panic!("scripted responder"),
        })
    }

    pub fn now(&self) -> Nanos {
        Nanos(self.now.get())
    }

    /// Runs the platform if its answer is due.
    pub fn service(&self) {
        let now = self.now.get();
        if let Some(t) = self.rung_at.get() {
            if now >= t + self.reply_delay_ns.get() {
                self.rung_at.set(None);
                if !self.keep_doorbell.get() {
                    let bits = mhu::to_scp_pending(&*self.mhu.borrow(), self.channel);
                    mhu::scp_clear(&mut *self.mhu.borrow_mut(), self.channel, bits);
                }
                match &mut *self.responder.borrow_mut() {
                    Responder::Model(p) => {
                        p.handle(&mut *self.shmem.borrow_mut(), Nanos(now));
                    }
                    Responder::Script(f) => f(&mut self.shmem.borrow_mut(), now),
                }
            }
        }
        if let Responder::Model(p) = &mut *self.responder.borrow_mut() {
            p.advance(Nanos(now));
        }
    }

    pub fn advance(&self, ns: u64) {
        self.now.set(self.now.get() + ns);
        self.service();
    }

    pub fn channel(&self) -> Channel<Shm<'_>, MhuDoorbell<Mhu<'_>>> {
        let db = MhuDoorbell::new(Mhu(self), self.channel as u32, 0).unwrap();
        Channel::new(Shm(self), db).unwrap()
    }

    pub fn clock(&self) -> BusClock<'_> {
        BusClock(self)
    }

    /// Polls `drv` every `step_ns` until `until_ns` from now, collecting completions.
    pub fn run<D: CpufreqDriver>(
        &self,
        drv: &mut D,
        step_ns: u64,
        until_ns: u64,
    ) -> Vec<Completion<D::Error>> {
        let end = self.now.get() + until_ns;
        let mut out = Vec::new();
        while self.now.get() < end {
            self.advance(step_ns);
            while let Some(c) = drv.poll(self.now()) {
                out.push(c);
            }
        }
        out
    }

    /// Polls until the first completion (at most `max_ns`).
    pub fn run_until_done<D: CpufreqDriver>(
        &self,
        drv: &mut D,
        step_ns: u64,
        max_ns: u64,
    ) -> Option<Completion<D::Error>> {
        let end = self.now.get() + max_ns;
        while self.now.get() < end {
            self.advance(step_ns);
            if let Some(c) = drv.poll(self.now()) {
                return Some(c);
            }
        }
        None
    }
}

pub struct Shm<'a>(pub &'a ScmiBus);

impl Mmio for Shm<'_> {
    fn read32(&self, offset: usize) -> u32 {
        self.0.shmem.borrow().read32(offset)
    }
    fn write32(&mut self, offset: usize, value: u32) {
        self.0.shmem.borrow_mut().write32(offset, value)
    }
    fn size(&self) -> usize {
        SHMEM_WORDS * 4
    }
}

pub struct Mhu<'a>(pub &'a ScmiBus);

impl Mmio for Mhu<'_> {
    fn read32(&self, offset: usize) -> u32 {
        self.0.mhu.borrow().read32(offset)
    }
    fn write32(&mut self, offset: usize, value: u32) {
        let ring = mhu::write(&mut *self.0.mhu.borrow_mut(), offset, value);
        if let Some(Ring::ToScp { channel, .. }) = ring {
            if channel == self.0.channel {
                self.0.rung_at.set(Some(self.0.now.get()));
                self.0.rings.set(self.0.rings.get() + 1);
            }
        }
    }
    fn size(&self) -> usize {
        MHU_WORDS * 4
    }
}

pub struct BusClock<'a>(pub &'a ScmiBus);

impl Clock for BusClock<'_> {
    fn now(&self) -> Nanos {
        self.0.advance(self.0.step_ns.get());
        self.0.now()
    }
}

// ------------------------------------------------------------------------------------------
// Hi3660: the mailbox block (with the stub-clock read-back words at +0x570 in the same page
// on the board; a separate region here) served by `Lpm3`.
// ------------------------------------------------------------------------------------------

pub const MBOX_WORDS: usize = 0x1000 / 4;
pub const STUB_WORDS: usize = 0x100 / 4;

pub struct Hi3660Bus {
    pub now: Cell<u64>,
    pub mbox: RefCell<Ram<MBOX_WORDS>>,
    pub stub: RefCell<Ram<STUB_WORDS>>,
    pub hw: Cell<Mailbox>,
    pub lpm3: RefCell<Lpm3>,
    pub sent_at: Cell<Option<u64>>,
    pub reply_delay_ns: Cell<u64>,
    /// Every write the driver made to the mailbox: (offset, value).
    pub writes: RefCell<Vec<(usize, u32)>>,
}

impl Hi3660Bus {
    pub fn new() -> Self {
        let bus = Hi3660Bus {
            now: Cell::new(1_000 * MS),
            mbox: RefCell::new(Ram::new()),
            stub: RefCell::new(Ram::new()),
            hw: Cell::new(Mailbox::default()),
            lpm3: RefCell::new(Lpm3::hikey960()),
            sent_at: Cell::new(None),
            reply_delay_ns: Cell::new(5 * US),
            writes: RefCell::new(Vec::new()),
        };
        Mailbox::reset(&mut *bus.mbox.borrow_mut());
        bus.lpm3.borrow().init(&mut *bus.stub.borrow_mut());
        bus
    }

    pub fn now(&self) -> Nanos {
        Nanos(self.now.get())
    }

    pub fn service(&self) {
        let now = self.now.get();
        if let Some(t) = self.sent_at.get() {
            if now >= t + self.reply_delay_ns.get() {
                self.sent_at.set(None);
                self.lpm3
                    .borrow_mut()
                    .on_message(&mut *self.mbox.borrow_mut(), Nanos(now));
            }
        }
        self.lpm3
            .borrow_mut()
            .advance(&mut *self.stub.borrow_mut(), Nanos(now));
    }

    pub fn advance(&self, ns: u64) {
        self.now.set(self.now.get() + ns);
        self.service();
    }

    pub fn run_until_done<D: CpufreqDriver>(
        &self,
        drv: &mut D,
        step_ns: u64,
        max_ns: u64,
    ) -> Option<Completion<D::Error>> {
        let end = self.now.get() + max_ns;
        while self.now.get() < end {
            self.advance(step_ns);
            if let Some(c) = drv.poll(self.now()) {
                return Some(c);
            }
        }
        None
    }
}

pub struct MboxH<'a>(pub &'a Hi3660Bus);

impl Mmio for MboxH<'_> {
    fn read32(&self, offset: usize) -> u32 {
        self.0.mbox.borrow().read32(offset)
    }
    fn write32(&mut self, offset: usize, value: u32) {
        self.0.writes.borrow_mut().push((offset, value));
        let hw = self.0.hw.get();
        if let Some(MboxEvent::Sent { channel }) =
            hw.write(&mut *self.0.mbox.borrow_mut(), offset, value)
        {
            if channel == 13 {
                self.0.sent_at.set(Some(self.0.now.get()));
            }
        }
    }
    fn size(&self) -> usize {
        MBOX_WORDS * 4
    }
}

pub struct StubH<'a>(pub &'a Hi3660Bus);

impl Mmio for StubH<'_> {
    fn read32(&self, offset: usize) -> u32 {
        self.0.stub.borrow().read32(offset)
    }
    fn write32(&mut self, offset: usize, value: u32) {
        self.0.stub.borrow_mut().write32(offset, value)
    }
    fn size(&self) -> usize {
        STUB_WORDS * 4
    }
}

pub struct Hi3660Clock<'a>(pub &'a Hi3660Bus);

impl Clock for Hi3660Clock<'_> {
    fn now(&self) -> Nanos {
        self.0.advance(US);
        self.0.now()
    }
}

// ------------------------------------------------------------------------------------------
// Hi6220: SRAM, the mailbox buffer (DRAM) and the IPC registers, served by `Mcu`.
// ------------------------------------------------------------------------------------------

pub const SRAM_WORDS: usize = 0x2000 / 4;
pub const BUF_WORDS: usize = 0x800 / 4;
pub const IPC_WORDS: usize = 0x1000 / 4;

pub struct Hi6220Bus {
    pub now: Cell<u64>,
    pub sram: RefCell<Ram<SRAM_WORDS>>,
    pub buf: RefCell<Ram<BUF_WORDS>>,
    pub ipc: RefCell<Ram<IPC_WORDS>>,
    pub mcu: RefCell<Mcu>,
    pub raised: Cell<Option<(u64, u32)>>,
    pub reply_delay_ns: Cell<u64>,
    /// Every write the driver made: (region, offset, value); region 0 SRAM, 1 buffer, 2 IPC.
    pub writes: RefCell<Vec<(u8, usize, u32)>>,
}

impl Hi6220Bus {
    pub fn new() -> Self {
        let bus = Hi6220Bus {
            now: Cell::new(1_000 * MS),
            sram: RefCell::new(Ram::new()),
            buf: RefCell::new(Ram::new()),
            ipc: RefCell::new(Ram::new()),
            mcu: RefCell::new(Mcu::hikey()),
            raised: Cell::new(None),
            reply_delay_ns: Cell::new(5 * US),
            writes: RefCell::new(Vec::new()),
        };
        bus.mcu
            .borrow()
            .init(&mut *bus.sram.borrow_mut(), &mut *bus.buf.borrow_mut());
        bus
    }

    pub fn now(&self) -> Nanos {
        Nanos(self.now.get())
    }

    pub fn service(&self) {
        let now = self.now.get();
        if let Some((t, bits)) = self.raised.get() {
            if now >= t + self.reply_delay_ns.get() {
                self.raised.set(None);
                self.mcu.borrow_mut().on_interrupt(
                    bits,
                    &mut *self.sram.borrow_mut(),
                    &mut *self.buf.borrow_mut(),
                    &mut *self.ipc.borrow_mut(),
                    Nanos(now),
                );
            }
        }
        self.mcu
            .borrow_mut()
            .advance(&mut *self.sram.borrow_mut(), Nanos(now));
    }

    pub fn advance(&self, ns: u64) {
        self.now.set(self.now.get() + ns);
        self.service();
    }

    pub fn run_until_done<D: CpufreqDriver>(
        &self,
        drv: &mut D,
        step_ns: u64,
        max_ns: u64,
    ) -> Option<Completion<D::Error>> {
        let end = self.now.get() + max_ns;
        while self.now.get() < end {
            self.advance(step_ns);
            if let Some(c) = drv.poll(self.now()) {
                return Some(c);
            }
        }
        None
    }
}

pub struct SramH<'a>(pub &'a Hi6220Bus);
pub struct BufH<'a>(pub &'a Hi6220Bus);
pub struct IpcH<'a>(pub &'a Hi6220Bus);

impl Mmio for SramH<'_> {
    fn read32(&self, offset: usize) -> u32 {
        self.0.sram.borrow().read32(offset)
    }
    fn write32(&mut self, offset: usize, value: u32) {
        self.0.writes.borrow_mut().push((0, offset, value));
        self.0.sram.borrow_mut().write32(offset, value)
    }
    fn size(&self) -> usize {
        SRAM_WORDS * 4
    }
}

impl Mmio for BufH<'_> {
    fn read32(&self, offset: usize) -> u32 {
        self.0.buf.borrow().read32(offset)
    }
    fn write32(&mut self, offset: usize, value: u32) {
        self.0.writes.borrow_mut().push((1, offset, value));
        self.0.buf.borrow_mut().write32(offset, value)
    }
    fn size(&self) -> usize {
        BUF_WORDS * 4
    }
}

impl Mmio for IpcH<'_> {
    fn read32(&self, offset: usize) -> u32 {
        self.0.ipc.borrow().read32(offset)
    }
    fn write32(&mut self, offset: usize, value: u32) {
        self.0.writes.borrow_mut().push((2, offset, value));
        if let Some(IpcEvent::ToMcu { bits }) =
            Ipc::write(&mut *self.0.ipc.borrow_mut(), offset, value)
        {
            self.0.raised.set(Some((self.0.now.get(), bits)));
        }
    }
    fn size(&self) -> usize {
        IPC_WORDS * 4
    }
}
