//! GICv3: distributor with affinity routing, per-CPU redistributors and the `ICC_*` system
//! register CPU interface (Linux `drivers/irqchip/irq-gic-v3.c`).

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use asym_sched::types::CpuId;
use tock_registers::interfaces::{ReadWriteable, Readable, Writeable};

use super::encode::{gicr_affinity, icc_sgi1r};
use super::regs::{
    GicdRegs, GicrRdRegs, GicrSgiRegs, GICD_CTLR_ARE, GICD_CTLR_ENABLE_G1, GICD_CTLR_RWP,
    GICD_TYPER, GICR_CTLR_RWP, GICR_TYPER, GICR_WAKER,
};
use super::{dispatch, GicError, IntId, DEFAULT_PRIORITY, NR_IRQS, PRIORITY_MASK};
use crate::arch::aarch64::{cpu_regs, gicv3_icc as icc};
use crate::dt::MemRange;
use crate::percpu::{current_cpu, PerCpu, MAX_CPUS};

static GICD_BASE: AtomicUsize = AtomicUsize::new(0);
static GICR_BASE: AtomicUsize = AtomicUsize::new(0);
/// One past the redistributor region (the walk never reads beyond it).
static GICR_END: AtomicUsize = AtomicUsize::new(0);
/// The DT's `redistributor-stride`, 0 when absent (then the frames say).
static GICR_STRIDE: AtomicUsize = AtomicUsize::new(0);
static NR_LINES: AtomicUsize = AtomicUsize::new(0);
/// Each CPU's redistributor `RD_base`; 0 until that CPU ran [`init_cpu`].
static RD_BASE: PerCpu<AtomicUsize> = PerCpu::new([const { AtomicUsize::new(0) }; MAX_CPUS]);
/// Each CPU's `MPIDR_EL1` affinity, for `ICC_SGI1R_EL1`; valid once `RD_BASE` is set.
static MPIDR: PerCpu<AtomicU64> = PerCpu::new([const { AtomicU64::new(0) }; MAX_CPUS]);

/// Bounded waits on the GIC (RWP, ChildrenAsleep): generous for QEMU and silicon alike.
const SPIN_LIMIT: u32 = 1_000_000;
/// A redistributor is two 64 KiB frames (RD_base, SGI_base); four with GICv4 vLPIs.
const GICR_FRAME: usize = 0x1_0000;

fn gicd() -> &'static GicdRegs {
    // SAFETY: GICD_BASE is set once in `init_dist` from the device tree's GICv3 distributor
    // address before any other function of this module runs (`gic::version()` gates them); the
    // region is identity-mapped device memory for the kernel's lifetime, and accesses are volatile.
    unsafe { &*(GICD_BASE.load(Ordering::Relaxed) as *const GicdRegs) }
}

fn gicr_rd(rd_base: usize) -> &'static GicrRdRegs {
    // SAFETY: `rd_base` is a redistributor frame inside the device tree's redistributor region
    // (computed by `find_redistributor` from the region base and stride), mapped as device memory.
    unsafe { &*(rd_base as *const GicrRdRegs) }
}

fn gicr_sgi(rd_base: usize) -> &'static GicrSgiRegs {
    // SAFETY: the SGI/PPI frame is the 64 KiB frame after a redistributor's RD_base, inside the
    // same device-tree region; see `gicr_rd`.
    unsafe { &*((rd_base + GICR_FRAME) as *const GicrSgiRegs) }
}

/// Linux `gic_dist_init` (v3): disable and wait for RWP, SPIs group 1, level, default priority,
/// disabled and inactive, enable affinity routing and group 1, route every SPI to the boot CPU.
pub(super) fn init_dist(gicd_base: usize, gicr: MemRange, gicr_stride: Option<usize>) {
    GICD_BASE.store(gicd_base, Ordering::Relaxed);
    GICR_BASE.store(gicr.base, Ordering::Relaxed);
    GICR_END.store(gicr.end(), Ordering::Relaxed);
    GICR_STRIDE.store(gicr_stride.unwrap_or(0), Ordering::Relaxed);
    let d = gicd();
    d.ctlr.set(0);
    wait_rwp_dist();
    let lines = (32 * (d.typer.read(GICD_TYPER::ITLinesNumber) as usize + 1)).min(NR_IRQS);
    NR_LINES.store(lines, Ordering::Relaxed);
    for w in 1..lines / 32 {
        d.igroupr[w].set(u32::MAX);
        d.icenabler[w].set(u32::MAX);
        d.icactiver[w].set(u32::MAX);
    }
    for w in 2..lines / 16 {
        d.icfgr[w].set(0);
    }
    for i in 32..lines {
        d.ipriorityr[i].set(DEFAULT_PRIORITY);
    }
    wait_rwp_dist();
    d.ctlr.set(GICD_CTLR_ARE);
    wait_rwp_dist();
    d.ctlr.set(GICD_CTLR_ARE | GICD_CTLR_ENABLE_G1);
    wait_rwp_dist();
    let boot = cpu_regs::mpidr_hwid();
    for i in 32..lines {
        d.irouter[i].set(boot);
    }
}

/// Linux `gic_populate_rdist` + `gic_enable_redist` + `gic_cpu_config` +
/// `gic_cpu_sys_reg_init`: find this CPU's redistributor by affinity, wake it, SGIs group 1 and
/// enabled, PPIs disabled, default priorities; then the system register interface with priority
/// mask 0xf0, EOImode 0 and group 1 enabled.
pub(super) fn init_cpu() -> Result<(), GicError> {
    let cpu = current_cpu();
    let mpidr = cpu_regs::mpidr_hwid();
    let rd = find_redistributor(mpidr).ok_or(GicError::NoRedistributor { mpidr })?;

    let r = gicr_rd(rd);
    r.waker.modify(GICR_WAKER::ProcessorSleep::CLEAR);
    let mut spins = 0;
    while r.waker.is_set(GICR_WAKER::ChildrenAsleep) {
        spins += 1;
        if spins > SPIN_LIMIT {
            return Err(GicError::RedistributorAsleep { mpidr });
        }
        core::hint::spin_loop();
    }

    let s = gicr_sgi(rd);
    s.igroupr0.set(u32::MAX);
    s.icactiver0.set(u32::MAX);
    s.icenabler0.set(0xffff_0000);
    s.isenabler0.set(0x0000_ffff);
    for i in 0..32 {
        s.ipriorityr[i].set(DEFAULT_PRIORITY);
    }
    wait_rwp_redist(rd);

    icc::write_icc_sre_el1(icc::read_icc_sre_el1() | 1);
    cpu_regs::isb();
    if icc::read_icc_sre_el1() & 1 == 0 {
        return Err(GicError::SystemRegistersDisabled);
    }
    icc::write_icc_pmr_el1(u64::from(PRIORITY_MASK));
    icc::write_icc_bpr1_el1(0);
    icc::write_icc_ctlr_el1(0);
    icc::write_icc_igrpen1_el1(1);
    cpu_regs::isb();

    MPIDR.of(cpu).store(mpidr, Ordering::Relaxed);
    RD_BASE.of(cpu).store(rd, Ordering::Release);
    Ok(())
}

/// `ICC_PMR_EL1` = 0, once this CPU's system-register interface is enabled (before, the
/// register may not even be accessible).
pub(super) fn mask_this_cpu() {
    // Called with IRQs masked (park, stop) or from a cross-call handler: no migration.
    if RD_BASE
        .of(crate::percpu::current_cpu())
        .load(Ordering::Acquire)
        != 0
    {
        icc::write_icc_pmr_el1(0);
        cpu_regs::isb();
    }
}

pub(super) fn set_enabled(intid: IntId, enable: bool) -> Result<(), GicError> {
    let n = intid.0 as usize;
    let bit = 1u32 << (n % 32);
    if intid.is_private() {
        // Banked per CPU: the caller's CPU's redistributor, which it must not leave meanwhile.
        let guard = crate::percpu::PreemptGuard::new();
        let rd = RD_BASE.this(&guard).load(Ordering::Acquire);
        if rd == 0 {
            return Err(GicError::TargetNotReady {
                cpu: current_cpu().0,
            });
        }
        let s = gicr_sgi(rd);
        if enable {
            s.isenabler0.set(bit);
        } else {
            s.icenabler0.set(bit);
            wait_rwp_redist(rd);
        }
        return Ok(());
    }
    if n >= NR_LINES.load(Ordering::Relaxed) {
        return Err(GicError::InvalidIntId(intid.0));
    }
    let d = gicd();
    if enable {
        d.irouter[n].set(cpu_regs::mpidr_hwid());
        d.isenabler[n / 32].set(bit);
    } else {
        d.icenabler[n / 32].set(bit);
        wait_rwp_dist();
    }
    Ok(())
}

/// Linux `gic_handle_irq` (v3): `ICC_IAR1_EL1`, dispatch, `ICC_EOIR1_EL1`, until a special
/// INTID (1020–1023) says nothing is pending.
pub(super) fn handle_irq() {
    loop {
        let intid = (icc::read_icc_iar1_el1() & 0xff_ffff) as u32;
        // Linux `gic_read_iar`: the acknowledge (a system register read) is not ordered with
        // the handler's memory accesses by itself; a DSB makes the handler see what the
        // interrupt's sender published before raising it.
        cpu_regs::dsb_sy();
        if intid >= NR_IRQS as u32 {
            break;
        }
        dispatch(IntId(intid));
        // Linux `gic_write_eoir`: the ISB makes the priority drop/deactivation take effect
        // before the next acknowledge.
        icc::write_icc_eoir1_el1(u64::from(intid));
        cpu_regs::isb();
    }
}

/// Linux `gic_send_sgi`: `ICC_SGI1R_EL1` with the target's Aff3/Aff2/Aff1, the range selector
/// and target-list bit for Aff0. The `dsb` orders earlier memory writes before the system
/// register write; the `isb` issues the SGI now.
pub(super) fn send_sgi(sgi: u8, target: CpuId) -> Result<(), GicError> {
    let ready = RD_BASE
        .get(target)
        .is_some_and(|rd| rd.load(Ordering::Acquire) != 0);
    if !ready {
        return Err(GicError::TargetNotReady { cpu: target.0 });
    }
    let value = icc_sgi1r(MPIDR.of(target).load(Ordering::Relaxed), sgi);
    cpu_regs::dsb_ishst();
    icc::write_icc_sgi1r_el1(value);
    cpu_regs::isb();
    Ok(())
}

/// Walks the redistributor region (Linux `gic_iterate_rdists`) for the frame whose
/// `GICR_TYPER.Affinity` equals `mpidr`'s Aff3.Aff2.Aff1.Aff0. Never reads past the region
/// the device tree gave (which is what the MMU maps): a redistributor must fit whole in it.
fn find_redistributor(mpidr: u64) -> Option<usize> {
    let want = gicr_affinity(mpidr);
    let end = GICR_END.load(Ordering::Relaxed);
    let stride = GICR_STRIDE.load(Ordering::Relaxed);
    let mut rd = GICR_BASE.load(Ordering::Relaxed);
    while rd.checked_add(2 * GICR_FRAME).is_some_and(|e| e <= end) {
        let typer = gicr_rd(rd).typer.extract();
        if typer.read(GICR_TYPER::Affinity) == want {
            return Some(rd);
        }
        if typer.is_set(GICR_TYPER::Last) {
            return None;
        }
        // Linux: the DT's stride when given (checked against the binding by the DT parser),
        // else two frames, four with GICv4 vLPIs.
        let step = match stride {
            0 if typer.is_set(GICR_TYPER::VLPIS) => 4 * GICR_FRAME,
            0 => 2 * GICR_FRAME,
            s => s,
        };
        rd = rd.checked_add(step)?;
    }
    None
}

fn wait_rwp_dist() {
    let d = gicd();
    for _ in 0..SPIN_LIMIT {
        if d.ctlr.get() & GICD_CTLR_RWP == 0 {
            return;
        }
        core::hint::spin_loop();
    }
}

fn wait_rwp_redist(rd: usize) {
    let r = gicr_rd(rd);
    for _ in 0..SPIN_LIMIT {
        if r.ctlr.get() & GICR_CTLR_RWP == 0 {
            return;
        }
        core::hint::spin_loop();
    }
}
