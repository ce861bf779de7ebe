//! GICv2: distributor and memory-mapped CPU interface (Linux `drivers/irqchip/irq-gic.c`).

use core::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use asym_sched::types::CpuId;
use tock_registers::interfaces::{Readable, Writeable};

use super::encode::gicd_sgir;
use super::regs::{GiccRegs, GicdRegs, GICD_CTLR_ENABLE, GICD_TYPER};
use super::{dispatch, GicError, IntId, DEFAULT_PRIORITY, NR_IRQS, PRIORITY_MASK};
use crate::arch::aarch64::cpu_regs;
use crate::percpu::{current_cpu, PerCpu, MAX_CPUS};

static GICD_BASE: AtomicUsize = AtomicUsize::new(0);
static GICC_BASE: AtomicUsize = AtomicUsize::new(0);
/// Interrupt lines the distributor implements (`GICD_TYPER.ITLinesNumber`).
static NR_LINES: AtomicUsize = AtomicUsize::new(0);
/// Each CPU's CPU-interface bit for `GICD_SGIR`/`GICD_ITARGETSR` (Linux `gic_cpu_map`); 0 until
/// that CPU ran [`init_cpu`].
static CPU_IF_MASK: PerCpu<AtomicU8> = PerCpu::new([const { AtomicU8::new(0) }; MAX_CPUS]);

fn gicd() -> &'static GicdRegs {
    // SAFETY: GICD_BASE is set once in `init_dist` from the device tree's GICv2 distributor
    // address before any other function of this module runs (`gic::version()` gates them); the
    // region is identity-mapped device memory for the kernel's lifetime, and every access goes
    // through tock-registers' volatile cells.
    unsafe { &*(GICD_BASE.load(Ordering::Relaxed) as *const GicdRegs) }
}

fn gicc() -> &'static GiccRegs {
    // SAFETY: as for `gicd`: GICC_BASE is the device tree's CPU interface address, mapped as
    // device memory; the CPU interface is banked, so every CPU sees its own registers there.
    unsafe { &*(GICC_BASE.load(Ordering::Relaxed) as *const GiccRegs) }
}

/// Linux `gic_dist_init`: disable, SPIs level-triggered at the default priority, routed to the
/// boot CPU and disabled, then enable forwarding.
pub(super) fn init_dist(gicd_base: usize, gicc_base: usize) {
    GICD_BASE.store(gicd_base, Ordering::Relaxed);
    GICC_BASE.store(gicc_base, Ordering::Relaxed);
    let d = gicd();
    d.ctlr.set(0);
    let lines = (32 * (d.typer.read(GICD_TYPER::ITLinesNumber) as usize + 1)).min(NR_IRQS);
    NR_LINES.store(lines, Ordering::Relaxed);

    // The boot CPU's interface bit, read from its banked ITARGETSR0..7 (Linux gic_get_cpumask).
    let boot_mask = banked_cpu_mask().max(1);
    for i in 32..lines {
        d.itargetsr[i].set(boot_mask);
        d.ipriorityr[i].set(DEFAULT_PRIORITY);
    }
    for w in 2..lines / 16 {
        d.icfgr[w].set(0);
    }
    for w in 1..lines / 32 {
        d.icenabler[w].set(u32::MAX);
        d.icactiver[w].set(u32::MAX);
    }
    d.ctlr.set(GICD_CTLR_ENABLE);
}

/// Linux `gic_cpu_init`: record this CPU's interface bit, SGIs enabled, PPIs disabled, all at the
/// default priority; priority mask 0xf0; enable the CPU interface.
pub(super) fn init_cpu() -> Result<(), GicError> {
    let cpu = current_cpu();
    let mask = match banked_cpu_mask() {
        // A uniprocessor GIC has RAZ target registers (IHI 0048B 4.3.12): interface 0.
        0 if cpu.0 == 0 => 1,
        0 => return Err(GicError::NoCpuInterfaceMask { cpu: cpu.0 }),
        m => m,
    };
    let d = gicd();
    d.icactiver[0].set(u32::MAX);
    d.icenabler[0].set(0xffff_0000);
    d.isenabler[0].set(0x0000_ffff);
    for i in 0..32 {
        d.ipriorityr[i].set(DEFAULT_PRIORITY);
    }
    let c = gicc();
    c.pmr.set(u32::from(PRIORITY_MASK));
    c.bpr.set(0);
    // Bit 0: enable signalling (group 0 without security extensions, group 1 in the
    // non-secure view); FIQ bypass and split EOI stay off.
    c.ctlr.set(1);
    CPU_IF_MASK.of(cpu).store(mask, Ordering::Release);
    Ok(())
}

/// `GICC_PMR` = 0 on this CPU's (banked) interface, once it is set up.
pub(super) fn mask_this_cpu() {
    // Called with IRQs masked (park, stop) or from a cross-call handler: no migration.
    if CPU_IF_MASK
        .of(crate::percpu::current_cpu())
        .load(Ordering::Acquire)
        != 0
    {
        gicc().pmr.set(0);
    }
}

pub(super) fn set_enabled(intid: IntId, enable: bool) -> Result<(), GicError> {
    let n = intid.0 as usize;
    if n >= NR_LINES.load(Ordering::Relaxed) {
        return Err(GicError::InvalidIntId(intid.0));
    }
    let d = gicd();
    if !intid.is_private() && enable {
        let guard = crate::percpu::PreemptGuard::new();
        let mask = CPU_IF_MASK.this(&guard).load(Ordering::Relaxed);
        d.itargetsr[n].set(mask);
    }
    let bit = 1u32 << (n % 32);
    if enable {
        d.isenabler[n / 32].set(bit);
    } else {
        d.icenabler[n / 32].set(bit);
    }
    Ok(())
}

/// Linux `gic_handle_irq`: acknowledge (`GICC_IAR`), dispatch, end (`GICC_EOIR` with the whole
/// IAR value, which carries the source CPU of an SGI) until a spurious INTID says none is left.
pub(super) fn handle_irq() {
    let c = gicc();
    loop {
        let iar = c.iar.get();
        // Linux `gic_handle_irq`: read data an SGI's sender published only after the
        // acknowledge (pairs with the barrier in `send_sgi`).
        cpu_regs::dmb_ishld();
        let intid = iar & 0x3ff;
        if intid >= NR_IRQS as u32 {
            break;
        }
        dispatch(IntId(intid));
        c.eoir.set(iar);
    }
}

/// Linux `gic_ipi_send_mask` for one CPU: `GICD_SGIR` with TargetListFilter 0 and the target's
/// CPU-interface bit. The `dsb` makes earlier normal-memory writes visible first.
pub(super) fn send_sgi(sgi: u8, target: CpuId) -> Result<(), GicError> {
    let mask = CPU_IF_MASK
        .get(target)
        .map_or(0, |m| m.load(Ordering::Acquire));
    if mask == 0 {
        return Err(GicError::TargetNotReady { cpu: target.0 });
    }
    cpu_regs::dsb_ishst();
    gicd().sgir.set(gicd_sgir(mask, sgi));
    Ok(())
}

/// This CPU's interface bit: the banked target bytes of SGIs/PPIs (`GICD_ITARGETSR0..7`) read
/// back this CPU's own bit. Like Linux, take the first non-zero byte: some implementations leave
/// the SGIs' fields 0.
fn banked_cpu_mask() -> u8 {
    let d = gicd();
    (0..32)
        .map(|i| d.itargetsr[i].get())
        .find(|&m| m != 0)
        .unwrap_or(0)
}
