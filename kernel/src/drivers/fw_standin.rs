//! The firmware stand-in of the emulated QEMU boards: the board's DVFS firmware (Juno's SCP,
//! HiKey960's LPM3, HiKey's MCU) run from `asym_dvfs::model` on a vCPU the scheduler does not
//! own, serving the shared memory and mailboxes that the emulated board's DT describes in RAM
//! pages, so the kernel runs the *real* drivers against it.
//!
//! Design: on the boards the firmware runs on its own processor, so here it gets its own vCPU
//! (QEMU `-smp` one above the board's CPU count; `xtask` leaves it out of `/cpus` and names its
//! MPIDR in the `asym,fw-standin` node). The kernel starts it with PSCI `CPU_ON`
//! (`arch::aarch64::fw_cpu`); it sleeps in `wfi` and is woken by an SGI — the doorbell — or
//! by its own virtual timer when a frequency change it is carrying out is due. So the drivers
//! see true concurrency (the firmware owns the channel while it works, memory ordering between
//! processors matters, replies arrive on their own time) and the board's transition latency,
//! and the firmware takes none of the scheduler's CPU time. Until the kernel's GIC is up (the
//! boot-time discovery runs before it) the vCPU polls instead of sleeping.
//!
//! The mailbox *hardware* has side effects a RAM page has not (writing the MHU's SET raises
//! bits in STAT and interrupts the SCP; writing the Hi3660 mailbox's SEND moves its state
//! machine). Both processors' writes to those registers go through `asym_dvfs::model`'s
//! hardware models, under one lock ([`HW_LOCK`]) as the hardware serialises them; a write that
//! raises the firmware's interrupt sends the doorbell SGI. Everything else is plain memory, as
//! the SCMI shared memory, the stub-clock SRAM and HiKey's DRAM mailbox buffer are on the
//! boards. What is not exercised is only the MMIO addresses.
//!
//! The firmware vCPU must never use kernel services that assume a kernel CPU (locks recording
//! their holder, per-CPU data, the console): it touches only its regions, the GIC CPU interface
//! of its own, its timer, and the atomics here.

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use asym_dvfs::io::Mmio;
use asym_dvfs::model::hi3660::{self as m3660, Lpm3, Mailbox};
use asym_dvfs::model::hi6220::{self as m6220, Ipc, Mcu};
use asym_dvfs::model::mhu::{self, Ring};
use asym_dvfs::model::scp::{ScmiPlatform, JUNO_R2};
use asym_sched::types::Nanos;
use tock_registers::interfaces::{Readable, Writeable};
use tock_registers::register_structs;
use tock_registers::registers::{ReadOnly, ReadWrite, WriteOnly};

use super::dvfs_mmio::DeviceRegion;
use crate::arch::aarch64::{cpu_regs, fw_cpu, gicv3_icc as icc};
use crate::dt::dvfs::{DvfsDt, StandinDt, Transport};
use crate::dt::{GicDesc, MemRange, Platform};
use crate::gic::encode::{gicd_sgir, gicr_affinity, icc_sgi1r};
use crate::sync::InitOnce;

/// How long the kernel waits for the firmware vCPU to come up, in microseconds.
const START_TIMEOUT_US: u64 = 100_000;
/// Priority of the firmware vCPU's interrupts (as the kernel's `DEFAULT_PRIORITY`).
const PRIORITY: u8 = 0xa0;
/// Priority mask (as the kernel's).
const PRIORITY_MASK: u32 = 0xf0;

/// Why the stand-in could not start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartError {
    /// PSCI `CPU_ON` of the firmware vCPU failed.
    CpuOn { mpidr: u64 },
    /// The firmware vCPU did not report ready in time (its fault, if it took one).
    NotReady {
        mpidr: u64,
        fault: Option<(u64, u64, u64)>,
    },
    /// Started already.
    Again,
}

impl core::fmt::Display for StartError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            StartError::CpuOn { mpidr } => write!(
                f,
                "firmware stand-in: PSCI CPU_ON of vCPU MPIDR {mpidr:#x} failed"
            ),
            StartError::NotReady { mpidr, fault: None } => write!(
                f,
                "firmware stand-in: vCPU MPIDR {mpidr:#x} not ready within {START_TIMEOUT_US} us"
            ),
            StartError::NotReady {
                mpidr,
                fault: Some((esr, elr, far)),
            } => write!(
                f,
                "firmware stand-in: vCPU MPIDR {mpidr:#x} faulted: ESR {esr:#x} ELR {elr:#x} FAR {far:#x}"
            ),
            StartError::Again => f.write_str("firmware stand-in: started twice"),
        }
    }
}

/// What the firmware vCPU serves.
struct Config {
    transport: Transport,
    gic: GicDesc,
    mpidr: u64,
    sgi: u8,
    timer_intid: u32,
}

static CONFIG: InitOnce<Config> = InitOnce::new();

/// The firmware vCPU's progress: 0 off, 1 running, 2 firmware ready (polling), 3 sleeping on
/// its GIC interface between doorbells, 4 stopped for want of a GIC interface.
static STATE: AtomicU32 = AtomicU32::new(0);
const STATE_READY: u32 = 2;
const STATE_GIC: u32 = 3;
/// The firmware vCPU found no GIC interface of its own and stopped (a vCPU that kept polling
/// would keep QEMU's instruction-counted clock from skipping idle time).
const STATE_NO_GIC: u32 = 4;

/// Serialises the mailbox hardware models' read-modify-write of their registers between the
/// kernel's CPUs and the firmware vCPU (the hardware does these atomically).
static HW_LOCK: AtomicBool = AtomicBool::new(false);
/// Interrupt bits the kernel raised for the firmware since it last looked.
static RAISED: AtomicU32 = AtomicU32::new(0);
/// The firmware vCPU's GICv2 CPU interface bit (0 until it knows).
static GICV2_TARGET: AtomicU32 = AtomicU32::new(0);
/// Messages the firmware took, doorbell SGIs sent, lock waits that gave up.
static MESSAGES: AtomicU64 = AtomicU64::new(0);
static DOORBELLS: AtomicU64 = AtomicU64::new(0);
static LOCK_TIMEOUTS: AtomicU64 = AtomicU64::new(0);
/// When the firmware last woke, and last completed a change (ns).
static LAST_WAKE_NS: AtomicU64 = AtomicU64::new(0);
static LAST_CHANGE_NS: AtomicU64 = AtomicU64::new(0);
/// Interrupts the firmware vCPU took: its timer's and the doorbell's.
static TIMER_IRQS: AtomicU64 = AtomicU64::new(0);

static DOORBELL_IRQS: AtomicU64 = AtomicU64::new(0);

/// Counters for the boot log and the self tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stats {
    pub state: u32,
    pub messages: u64,
    pub doorbells: u64,
    pub lock_timeouts: u64,
    /// When the firmware last woke, and last completed a frequency change (ns).
    pub last_wake_ns: u64,
    pub last_change_ns: u64,
    pub timer_irqs: u64,
    pub doorbell_irqs: u64,
}

/// The stand-in's counters.
pub fn stats() -> Stats {
    Stats {
        state: STATE.load(Ordering::Acquire),
        messages: MESSAGES.load(Ordering::Relaxed),
        doorbells: DOORBELLS.load(Ordering::Relaxed),
        lock_timeouts: LOCK_TIMEOUTS.load(Ordering::Relaxed),
        last_wake_ns: LAST_WAKE_NS.load(Ordering::Relaxed),
        last_change_ns: LAST_CHANGE_NS.load(Ordering::Relaxed),
        timer_irqs: TIMER_IRQS.load(Ordering::Relaxed),
        doorbell_irqs: DOORBELL_IRQS.load(Ordering::Relaxed),
    }
}

/// Whether a stand-in is running.
pub fn running() -> bool {
    matches!(STATE.load(Ordering::Acquire), STATE_READY | STATE_GIC)
}

/// Starts the firmware vCPU for `dvfs` (whose `standin` must be set) and waits until its
/// firmware is ready. Call on the boot CPU once, before the drivers probe.
pub fn start(plat: &Platform, dvfs: &DvfsDt, standin: StandinDt) -> Result<(), StartError> {
    let cfg = Config {
        transport: dvfs.transport,
        gic: plat.gic,
        mpidr: standin.mpidr,
        sgi: standin.doorbell_sgi,
        timer_intid: plat.timer.el1_virt_intid,
    };
    if CONFIG.set(cfg).is_err() {
        return Err(StartError::Again);
    }
    let entry = fw_cpu::entry_pa() as u64;
    crate::psci::cpu_on(plat.psci.conduit, standin.mpidr, entry, 0).map_err(|_| {
        StartError::CpuOn {
            mpidr: standin.mpidr,
        }
    })?;
    let freq = cpu_regs::cntfrq().max(1);
    let deadline = cpu_regs::cntvct() + START_TIMEOUT_US * freq / 1_000_000;
    while STATE.load(Ordering::Acquire) < STATE_READY {
        if cpu_regs::cntvct() > deadline || fw_cpu::fault().is_some() {
            return Err(StartError::NotReady {
                mpidr: standin.mpidr,
                fault: fw_cpu::fault(),
            });
        }
        cpu_regs::cpu_yield();
    }
    Ok(())
}

/// Call after the kernel's GIC init: waits, at most [`START_TIMEOUT_US`] of guest time, until
/// the firmware vCPU has looked for a GIC interface of its own, and returns the vCPU's MPIDR
/// when it found none (it then stopped, and every firmware request times out). `None` when it
/// found one, or no stand-in runs.
pub fn missing_gic() -> Option<u64> {
    let cfg = CONFIG.get()?;
    let freq = cpu_regs::cntfrq().max(1);
    let deadline = cpu_regs::cntvct() + START_TIMEOUT_US * freq / 1_000_000;
    loop {
        match STATE.load(Ordering::Acquire) {
            STATE_NO_GIC => return Some(cfg.mpidr),
            STATE_READY if cpu_regs::cntvct() <= deadline => cpu_regs::cpu_yield(),
            _ => return None,
        }
    }
}

/// The firmware vCPU's exception, if it took one.
pub fn fault() -> Option<(u64, u64, u64)> {
    fw_cpu::fault()
}

/// Which mailbox hardware a region is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hw {
    /// Plain memory (SCMI shared memory, stub-clock SRAM, the Hi6220 DRAM buffer).
    Plain,
    /// The Arm MHU.
    Mhu,
    /// The Hi3660 mailbox.
    Hi3660Mailbox,
    /// The Hi6220 IPC registers.
    Hi6220Ipc,
}

/// A stand-in region as the kernel's drivers see it: plain memory, or mailbox registers whose
/// writes have the hardware's side effects and ring the firmware's doorbell.
#[derive(Debug)]
pub struct StandinRegion {
    dev: DeviceRegion,
    hw: Hw,
}

impl StandinRegion {
    /// `range` as `hw`.
    ///
    /// # Safety
    /// As [`DeviceRegion::new`]; `range` is one of the stand-in's regions.
    pub unsafe fn new(range: MemRange, hw: Hw) -> Self {
        StandinRegion {
            // SAFETY: forwarded from the caller.
            dev: fw_region(range),
            hw,
        }
    }
}

impl Mmio for StandinRegion {
    fn read32(&self, offset: usize) -> u32 {
        self.dev.read32(offset)
    }

    fn write32(&mut self, offset: usize, value: u32) {
        let dev = &mut self.dev;
        let bits = match self.hw {
            Hw::Plain => {
                dev.write32(offset, value);
                0
            }
            Hw::Mhu => match with_hw(|| mhu::write(dev, offset, value)) {
                Some(Ring::ToScp { bits, .. }) => bits,
                _ => 0,
            },
            Hw::Hi3660Mailbox => match with_hw(|| Mailbox::default().write(dev, offset, value)) {
                Some(m3660::Event::Sent { .. }) => 1,
                None => 0,
            },
            Hw::Hi6220Ipc => match with_hw(|| Ipc::write(dev, offset, value)) {
                Some(m6220::Event::ToMcu { bits }) => bits,
                None => 0,
            },
        };
        if bits != 0 {
            doorbell(bits);
        }
    }

    fn size(&self) -> usize {
        self.dev.size()
    }

    fn wmb(&self) {
        self.dev.wmb()
    }

    fn rmb(&self) {
        self.dev.rmb()
    }
}

/// Runs `f` holding [`HW_LOCK`] (given up after a bounded wait, counted: a stuck lock must not
/// hang a kernel CPU).
fn with_hw<R>(f: impl FnOnce() -> R) -> R {
    let mut spins = 0u32;
    let mut got = true;
    while HW_LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spins += 1;
        if spins > 1_000_000 {
            LOCK_TIMEOUTS.fetch_add(1, Ordering::Relaxed);
            got = false;
            break;
        }
        cpu_regs::cpu_yield();
    }
    let r = f();
    if got {
        HW_LOCK.store(false, Ordering::Release);
    }
    r
}

/// The kernel raised the firmware's interrupt `bits`: note them and, once the firmware sleeps
/// on its GIC interface, send the doorbell SGI.
fn doorbell(bits: u32) {
    RAISED.fetch_or(bits, Ordering::AcqRel);
    cpu_regs::dsb_ishst();
    if STATE.load(Ordering::Acquire) != STATE_GIC {
        return;
    }
    let Some(cfg) = CONFIG.get() else { return };
    match cfg.gic {
        GicDesc::V2 { gicd, .. } => {
            let mask = GICV2_TARGET.load(Ordering::Acquire) as u8;
            if mask != 0 {
                // SAFETY: the kernel's map covers the distributor (`mmu::init_boot_cpu`).
                let d = unsafe { &*(gicd.base as *const GicdRegs) };
                d.sgir.set(gicd_sgir(mask, cfg.sgi));
            }
        }
        GicDesc::V3 { .. } => {
            icc::write_icc_sgi1r_el1(icc_sgi1r(cfg.mpidr, cfg.sgi));
            cpu_regs::isb();
        }
    }
    DOORBELLS.fetch_add(1, Ordering::Relaxed);
}

register_structs! {
    /// The banked and global GICv2/v3 distributor registers the firmware vCPU uses.
    GicdRegs {
        (0x0000 => _reserved0),
        (0x0100 => isenabler0: ReadWrite<u32>),
        (0x0104 => _reserved1),
        (0x0400 => ipriorityr: [ReadWrite<u8>; 32]),
        (0x0420 => _reserved2),
        (0x0800 => itargetsr: [ReadOnly<u8>; 32]),
        (0x0820 => _reserved3),
        (0x0f00 => sgir: WriteOnly<u32>),
        (0x0f04 => @END),
    }
}

register_structs! {
    /// The GICv2 CPU interface (banked per CPU).
    GiccRegs {
        (0x0000 => ctlr: ReadWrite<u32>),
        (0x0004 => pmr: ReadWrite<u32>),
        (0x0008 => _reserved0),
        (0x000c => iar: ReadOnly<u32>),
        (0x0010 => eoir: WriteOnly<u32>),
        (0x0014 => @END),
    }
}

register_structs! {
    /// A GICv3 redistributor's RD frame.
    GicrRdRegs {
        (0x0000 => _reserved0),
        (0x0008 => typer: ReadOnly<u64>),
        (0x0010 => _reserved1),
        (0x0014 => waker: ReadWrite<u32>),
        (0x0018 => @END),
    }
}

register_structs! {
    /// A GICv3 redistributor's SGI/PPI frame.
    GicrSgiRegs {
        (0x0000 => _reserved0),
        (0x0080 => igroupr0: ReadWrite<u32>),
        (0x0084 => _reserved1),
        (0x0100 => isenabler0: ReadWrite<u32>),
        (0x0104 => _reserved2),
        (0x0400 => ipriorityr: [ReadWrite<u8>; 32]),
        (0x0420 => @END),
    }
}

/// `GICR_TYPER.Last`.
const GICR_TYPER_LAST: u64 = 1 << 4;
/// `GICR_WAKER.ProcessorSleep`, `.ChildrenAsleep`.
const WAKER_SLEEP: u32 = 1 << 1;
const WAKER_ASLEEP: u32 = 1 << 2;

/// The firmware vCPU's own GIC CPU interface: the doorbell SGI and its timer PPI enabled at the
/// kernel's priority. `false` if it could not be set up (the vCPU then keeps polling).
fn gic_cpu_init(cfg: &Config) -> bool {
    let bits = (1u32 << cfg.sgi) | (1 << cfg.timer_intid);
    match cfg.gic {
        GicDesc::V2 { gicd, gicc } => {
            // SAFETY: the kernel's map covers the distributor and CPU interface; the SGI/PPI
            // registers used here are banked, so this touches only this vCPU's interrupts.
            let (d, c) = unsafe {
                (
                    &*(gicd.base as *const GicdRegs),
                    &*(gicc.base as *const GiccRegs),
                )
            };
            d.ipriorityr[cfg.sgi as usize].set(PRIORITY);
            d.ipriorityr[cfg.timer_intid as usize % 32].set(PRIORITY);
            d.isenabler0.set(bits);
            let mask = (0..32)
                .map(|i| d.itargetsr[i].get())
                .find(|&m| m != 0)
                .unwrap_or(0);
            c.pmr.set(PRIORITY_MASK);
            c.ctlr.set(1);
            GICV2_TARGET.store(u32::from(mask), Ordering::Release);
            mask != 0
        }
        GicDesc::V3 {
            gicr, gicr_stride, ..
        } => {
            let want = gicr_affinity(cfg.mpidr);
            let stride = gicr_stride.unwrap_or(0x2_0000).max(0x2_0000);
            let mut rd = None;
            let mut at = gicr.base;
            while at + 0x2_0000 <= gicr.end() {
                // SAFETY: a redistributor frame inside the DT's redistributor region, mapped
                // by the kernel.
                let r = unsafe { &*(at as *const GicrRdRegs) };
                let typer = r.typer.get();
                if typer >> 32 == want {
                    rd = Some(at);
                    break;
                }
                if typer & GICR_TYPER_LAST != 0 {
                    break;
                }
                at += stride;
            }
            let Some(rd) = rd else { return false };
            // SAFETY: this vCPU's redistributor, found above.
            let (r, s) = unsafe {
                (
                    &*(rd as *const GicrRdRegs),
                    &*((rd + 0x1_0000) as *const GicrSgiRegs),
                )
            };
            r.waker.set(r.waker.get() & !WAKER_SLEEP);
            let mut spins = 0;
            while r.waker.get() & WAKER_ASLEEP != 0 {
                spins += 1;
                if spins > 1_000_000 {
                    return false;
                }
                cpu_regs::cpu_yield();
            }
            s.igroupr0.set(s.igroupr0.get() | bits);
            s.ipriorityr[cfg.sgi as usize].set(PRIORITY);
            s.ipriorityr[cfg.timer_intid as usize % 32].set(PRIORITY);
            s.isenabler0.set(bits);
            icc::write_icc_sre_el1(icc::read_icc_sre_el1() | 1);
            cpu_regs::isb();
            icc::write_icc_pmr_el1(u64::from(PRIORITY_MASK));
            icc::write_icc_igrpen1_el1(1);
            cpu_regs::isb();
            true
        }
    }
}

/// Acknowledges and ends every pending interrupt of the firmware vCPU (its timer's is stopped
/// first, so the level does not come straight back).
fn gic_ack_all(cfg: &Config) {
    for _ in 0..32 {
        let (iar, id) = match cfg.gic {
            GicDesc::V2 { gicc, .. } => {
                // SAFETY: as in `gic_cpu_init`.
                let c = unsafe { &*(gicc.base as *const GiccRegs) };
                let iar = c.iar.get();
                (u64::from(iar), iar & 0x3ff)
            }
            GicDesc::V3 { .. } => {
                let iar = icc::read_icc_iar1_el1();
                (iar, (iar & 0xff_ffff) as u32)
            }
        };
        if id >= 1020 {
            return;
        }
        if id == cfg.timer_intid {
            cpu_regs::cntv_disable();
            TIMER_IRQS.fetch_add(1, Ordering::Relaxed);
        } else if id == u32::from(cfg.sgi) {
            DOORBELL_IRQS.fetch_add(1, Ordering::Relaxed);
        }
        match cfg.gic {
            GicDesc::V2 { gicc, .. } => {
                // SAFETY: as in `gic_cpu_init`.
                let c = unsafe { &*(gicc.base as *const GiccRegs) };
                c.eoir.set(iar as u32);
            }
            GicDesc::V3 { .. } => {
                icc::write_icc_eoir1_el1(iar);
                cpu_regs::isb();
            }
        }
    }
}

/// The counter as nanoseconds.
fn now(freq: u64) -> Nanos {
    Nanos(crate::time::clock::counter_to_ns(cpu_regs::cntvct(), freq))
}

/// The firmware, with its regions as the firmware side sees them. One value, on the firmware
/// vCPU's stack (which must not allocate: the kernel's heap lock is a kernel-CPU lock).
#[allow(clippy::large_enum_variant)]
enum Firmware {
    Scp {
        model: ScmiPlatform,
        mhu: DeviceRegion,
        channels: [(u32, DeviceRegion); 2],
    },
    Lpm3 {
        model: Lpm3,
        mbox: DeviceRegion,
        stub: DeviceRegion,
    },
    Mcu {
        model: Mcu,
        sram: DeviceRegion,
        ipc: DeviceRegion,
        buf: DeviceRegion,
    },
}

impl Firmware {
    /// The firmware for `t` after power-on: mailboxes reset, channels handed to the agent,
    /// read-back words written.
    fn boot(t: Transport) -> Option<Firmware> {
        match t {
            Transport::Scmi { base, perf } => {
                let mut chans = [base, perf].map(|c| (c.doorbell.channel, fw_region(c.shmem)));
                for (_, sh) in chans.iter_mut() {
                    ScmiPlatform::init_channel(sh);
                }
                Some(Firmware::Scp {
                    model: ScmiPlatform::new(JUNO_R2),
                    mhu: fw_region(base.doorbell.regs),
                    channels: chans,
                })
            }
            Transport::Hi3660 {
                mbox,
                stub,
                channel,
                ..
            } => {
                let mut mbox = fw_region(mbox);
                let mut stub = fw_region(stub);
                Mailbox::reset(&mut mbox);
                let model = Lpm3::new(m3660::HIKEY960_CLUSTERS, channel as usize, 300);
                model.init(&mut stub);
                Some(Firmware::Lpm3 { model, mbox, stub })
            }
            Transport::Hi6220 {
                sram,
                ipc,
                buf,
                slot,
                dst_irq,
                ack_irq,
            } => {
                let mut sram = fw_region(sram);
                let ipc = fw_region(ipc);
                let mut buf = fw_region(buf);
                let model = Mcu::new(m6220::HIKEY_OPPS_KHZ, slot as usize, dst_irq, ack_irq, 500);
                model.init(&mut sram, &mut buf);
                Some(Firmware::Mcu {
                    model,
                    sram,
                    ipc,
                    buf,
                })
            }
            Transport::Scpi { .. } => None,
        }
    }

    /// Takes whatever the kernel sent (`raised`: the interrupt bits it raised) at `now`.
    ///
    /// Each message is stamped with the time read after it was seen (for the mailboxes, under
    /// the hardware lock the kernel writes them under): a time read before could precede the
    /// kernel's request, and the change would then complete sooner than the board's latency
    /// after it.
    fn serve(&mut self, raised: u32, freq: u64) {
        match self {
            Firmware::Scp {
                model,
                mhu,
                channels,
            } => {
                for (ch, shmem) in channels.iter_mut() {
                    let bits = mhu::to_scp_pending(mhu, *ch as usize);
                    if bits != 0 {
                        with_hw(|| mhu::scp_clear(mhu, *ch as usize, bits));
                        model.handle(shmem, now(freq));
                        MESSAGES.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Firmware::Lpm3 { model, mbox, .. } => {
                let before = model.messages;
                with_hw(|| model.on_message(mbox, now(freq)));
                MESSAGES.fetch_add(model.messages - before, Ordering::Relaxed);
            }
            Firmware::Mcu {
                model,
                sram,
                ipc,
                buf,
            } => {
                if raised != 0 {
                    let before = model.messages;
                    with_hw(|| model.on_interrupt(raised, sram, buf, ipc, now(freq)));
                    MESSAGES.fetch_add(model.messages - before, Ordering::Relaxed);
                }
            }
        }
    }

    /// When the next change is due.
    fn next_change(&self) -> Option<Nanos> {
        match self {
            Firmware::Scp { model, .. } => model.next_change(),
            Firmware::Lpm3 { model, .. } => model.next_change(),
            Firmware::Mcu { model, .. } => model.next_change(),
        }
    }

    /// Completes the changes due by `now`; returns when the next one is due.
    fn advance(&mut self, now: Nanos) -> Option<Nanos> {
        match self {
            Firmware::Scp { model, .. } => {
                model.advance(now);
                model.next_change()
            }
            Firmware::Lpm3 { model, stub, .. } => {
                model.advance(stub, now);
                model.next_change()
            }
            Firmware::Mcu { model, sram, .. } => {
                model.advance(sram, now);
                model.next_change()
            }
        }
    }
}

/// One of the stand-in's regions as the firmware sees it.
fn fw_region(range: MemRange) -> DeviceRegion {
    // SAFETY: a region of the DT's DVFS transport, mapped Device by the kernel
    // (`mmu::init_boot_cpu`); it is shared with the kernel's drivers by design, through
    // volatile word accesses only.
    unsafe { DeviceRegion::new(range) }
}

/// Stops the firmware vCPU for good: exceptions and its timer off, `wfi` forever (not
/// `arch::park`, which counts wake-ups per kernel CPU).
fn fw_park() -> ! {
    crate::arch::mask_all_exceptions();
    cpu_regs::cntv_disable();
    loop {
        crate::arch::wfi();
    }
}

/// The firmware vCPU's Rust entry (from `_asym_fw_entry`, MMU on, on its own stack).
pub extern "C" fn fw_main() -> ! {
    let Some(cfg) = CONFIG.get() else { fw_park() };
    STATE.store(1, Ordering::Release);
    let Some(mut fw) = Firmware::boot(cfg.transport) else {
        fw_park()
    };
    let freq = cpu_regs::cntfrq().max(1);
    STATE.store(STATE_READY, Ordering::Release);
    let mut gic = false;
    loop {
        if !gic && crate::gic::version().is_some() {
            if !gic_cpu_init(cfg) {
                STATE.store(STATE_NO_GIC, Ordering::Release);
                fw_park();
            }
            gic = true;
            STATE.store(STATE_GIC, Ordering::Release);
        }
        let raised = RAISED.swap(0, Ordering::AcqRel);
        LAST_WAKE_NS.store(now(freq).0, Ordering::Relaxed);
        fw.serve(raised, freq);
        let before = fw.next_change();
        let next = fw.advance(now(freq));
        if before.is_some() && before != next {
            LAST_CHANGE_NS.store(now(freq).0, Ordering::Relaxed);
        }
        if !gic {
            cpu_regs::cpu_yield();
            continue;
        }
        match next {
            Some(t) => {
                let count = (u128::from(t.0) * u128::from(freq)).div_ceil(1_000_000_000) as u64;
                cpu_regs::cntv_arm(count);
            }
            None => cpu_regs::cntv_disable(),
        }
        if RAISED.load(Ordering::Acquire) == 0 {
            crate::arch::wfi();
        }
        gic_ack_all(cfg);
    }
}

/// Which mailbox hardware each of `dvfs`'s regions is (for [`StandinRegion`]).
pub fn hw_of(dvfs: &DvfsDt, range: MemRange) -> Hw {
    match dvfs.transport {
        Transport::Scmi { base, .. } if range == base.doorbell.regs => Hw::Mhu,
        Transport::Hi3660 { mbox, .. } if range == mbox => Hw::Hi3660Mailbox,
        Transport::Hi6220 { ipc, .. } if range == ipc => Hw::Hi6220Ipc,
        _ => Hw::Plain,
    }
}
