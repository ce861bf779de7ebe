//! The Arm Generic Interrupt Controller, versions 2 and 3: distributor set-up, per-CPU interface
//! (GICv2 CPU interface MMIO, GICv3 redistributor + `ICC_*` system registers), a handler table,
//! the IRQ entry point and SGI generation.
//!
//! Re-derives Linux's `drivers/irqchip/irq-gic.c` (`gic_dist_init`, `gic_cpu_init`,
//! `gic_get_cpumask`, `gic_handle_irq`, `gic_ipi_send_mask`) and `irq-gic-v3.c`
//! (`gic_dist_init`, `gic_populate_rdist`, `gic_enable_redist`, `gic_cpu_sys_reg_init`,
//! `gic_handle_irq`, `gic_send_sgi`). Same defaults: every interrupt at priority 0xa0
//! (`GICD_INT_DEF_PRI`), priority mask 0xf0, SPIs level-triggered and routed to the boot CPU,
//! EOImode 0 (an EOI also deactivates).
//!
//! Deliberate differences: no irq domains or `irq_desc`; handlers are plain `fn(IntId)` in a
//! table indexed by INTID. No LPIs/ITS, no extended SPI/PPI ranges, no pseudo-NMIs, no
//! GICv2 bypass/split-EOI modes. Why not the `arm-gic` crate: its GICv2 driver has no per-CPU
//! interface initialisation apart from a full `setup()` that rewrites the distributor, and uses
//! the Secure-view layout for group 1 (`GICD_CTLR` bit 1, the aliased `GICC_AIAR`/`GICC_AEOIR`)
//! where a non-secure kernel must use bit 0 and `GICC_IAR`/`GICC_EOIR`; its GICv3 driver finds a
//! CPU's redistributor by linear position instead of by `GICR_TYPER` affinity as Linux does.

pub mod encode;
mod regs;
mod v2;
mod v3;

use core::fmt;
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use asym_sched::types::CpuId;

use crate::dt::{GicDesc, Platform};
use crate::sync::InitOnce;

/// A GIC interrupt ID (SGI 0–15, PPI 16–31, SPI 32–1019).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct IntId(pub u32);

impl IntId {
    /// SGI `n` (0–15).
    pub const fn sgi(n: u8) -> IntId {
        IntId(n as u32 & 0xf)
    }

    /// Whether this is a software-generated interrupt.
    pub const fn is_sgi(self) -> bool {
        self.0 < 16
    }

    /// Whether this is banked per CPU (SGI or PPI).
    pub const fn is_private(self) -> bool {
        self.0 < 32
    }
}

/// An interrupt handler; runs on the CPU that took the interrupt with IRQs masked.
pub type IrqHandler = fn(IntId);

/// What went wrong in the GIC driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GicError {
    /// `gic::init` has not run (or failed).
    NotInitialised,
    /// The INTID is outside SGI/PPI/SPI, or beyond what the distributor implements.
    InvalidIntId(u32),
    /// No redistributor frame has this CPU's affinity (`GICR_TYPER` vs `MPIDR_EL1`).
    NoRedistributor { mpidr: u64 },
    /// The redistributor did not wake up (`GICR_WAKER.ChildrenAsleep` stayed set).
    RedistributorAsleep { mpidr: u64 },
    /// `ICC_SRE_EL1.SRE` stays 0: the system register interface is disabled (by EL2/EL3).
    SystemRegistersDisabled,
    /// The GICv2 CPU interface number of this CPU reads as 0 (`GICD_ITARGETSR0`).
    NoCpuInterfaceMask { cpu: u16 },
    /// The target CPU has not initialised its GIC CPU interface.
    TargetNotReady { cpu: u16 },
    /// The INTID already has a different handler: two devices on one interrupt (a device
    /// tree mistake), which would leave one of them unserved.
    HandlerConflict(u32),
}

impl fmt::Display for GicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            GicError::NotInitialised => write!(f, "gic: not initialised"),
            GicError::InvalidIntId(id) => write!(f, "gic: INTID {id} is not a valid SGI/PPI/SPI"),
            GicError::NoRedistributor { mpidr } => {
                write!(
                    f,
                    "gic: no GICv3 redistributor for MPIDR {mpidr:#x} in the regions the device \
                     tree's GIC node gives (`reg`, `#redistributor-regions`, \
                     `redistributor-stride`)"
                )
            }
            GicError::RedistributorAsleep { mpidr } => {
                write!(f, "gic: redistributor of MPIDR {mpidr:#x} did not wake up")
            }
            GicError::SystemRegistersDisabled => {
                write!(
                    f,
                    "gic: ICC_SRE_EL1.SRE cannot be set (enable ICC_SRE_EL2.Enable at EL2)"
                )
            }
            GicError::NoCpuInterfaceMask { cpu } => {
                write!(
                    f,
                    "gic: cpu {cpu}: GICD_ITARGETSR0 reads 0, no CPU interface number"
                )
            }
            GicError::TargetNotReady { cpu } => {
                write!(f, "gic: cpu {cpu} has no initialised CPU interface")
            }
            GicError::HandlerConflict(id) => write!(
                f,
                "gic: INTID {id} already has a different handler (two devices on one interrupt?)"
            ),
        }
    }
}

/// The largest INTID + 1 this driver handles (SPIs end at 1019; 1020–1023 are special).
pub const NR_IRQS: usize = 1020;

/// Linux's `GICD_INT_DEF_PRI`: the priority every interrupt gets.
const DEFAULT_PRIORITY: u8 = 0xa0;
/// Linux's `GICC_INT_PRI_THRESHOLD` / `DEFAULT_PMR_VALUE`.
const PRIORITY_MASK: u8 = 0xf0;

/// 0 until [`init`] succeeds, then 2 or 3.
static VERSION: AtomicU8 = AtomicU8::new(0);
/// Each INTID's handler, written once when it is registered and read without a lock by every
/// interrupt on every CPU (Linux's `irq_desc->handle_irq`, read under no lock either).
static HANDLERS: [InitOnce<IrqHandler>; NR_IRQS] = [const { InitOnce::new() }; NR_IRQS];
/// Interrupts acknowledged with no handler registered (they are EOIed and counted).
static UNHANDLED: AtomicU64 = AtomicU64::new(0);

/// Initialises the distributor and the boot CPU's interface (Linux `gic_of_init` +
/// `gic_dist_init` + `gic_cpu_init` on the boot CPU). Must run on the boot CPU with IRQs masked,
/// before any other function of this module.
pub fn init(plat: &'static Platform) -> Result<(), GicError> {
    match plat.gic {
        GicDesc::V2 { gicd, gicc } => {
            v2::init_dist(gicd.base, gicc.base);
            VERSION.store(2, Ordering::Release);
        }
        GicDesc::V3 {
            gicd,
            gicr,
            gicr_stride,
        } => {
            v3::init_dist(gicd.base, gicr, gicr_stride);
            VERSION.store(3, Ordering::Release);
        }
    }
    init_cpu()
}

/// Initialises the calling CPU's interface: GICv2 CPU interface, or GICv3 redistributor wake-up
/// and `ICC_*` registers; SGIs enabled, PPIs disabled until a driver enables them.
pub fn init_cpu() -> Result<(), GicError> {
    match version() {
        Some(2) => v2::init_cpu(),
        Some(3) => v3::init_cpu(),
        _ => Err(GicError::NotInitialised),
    }
}

/// 2 or 3 once [`init`] has run.
pub fn version() -> Option<u8> {
    match VERSION.load(Ordering::Acquire) {
        0 => None,
        v => Some(v),
    }
}

/// Installs `handler` for `intid`. Does not enable the interrupt. Refuses an INTID that
/// already has a different handler ([`GicError::HandlerConflict`]): the earlier one is kept
/// (Linux `request_irq` without `IRQF_SHARED` likewise fails with `-EBUSY`).
pub fn register_handler(intid: IntId, handler: IrqHandler) -> Result<(), GicError> {
    let slot = intid.0 as usize;
    if slot >= NR_IRQS {
        return Err(GicError::InvalidIntId(intid.0));
    }
    match HANDLERS[slot].set(handler) {
        Ok(_) => Ok(()),
        // Registering the same handler again is allowed (a CPU's set-up after the boot
        // CPU's); a second registration racing the first counts as a conflict.
        Err(_) => match HANDLERS[slot].get() {
            Some(&old) if core::ptr::fn_addr_eq(old, handler) => Ok(()),
            _ => Err(GicError::HandlerConflict(intid.0)),
        },
    }
}

/// Enables `intid`: an SGI or PPI on the calling CPU only (they are banked), an SPI routed to the
/// calling CPU.
pub fn enable_irq(intid: IntId) -> Result<(), GicError> {
    match version() {
        Some(2) => v2::set_enabled(intid, true),
        Some(3) => v3::set_enabled(intid, true),
        _ => Err(GicError::NotInitialised),
    }
}

/// Disables `intid` (SGI/PPI: on the calling CPU).
pub fn disable_irq(intid: IntId) -> Result<(), GicError> {
    match version() {
        Some(2) => v2::set_enabled(intid, false),
        Some(3) => v3::set_enabled(intid, false),
        _ => Err(GicError::NotInitialised),
    }
}

/// The IRQ exception entry (Linux `gic_handle_irq`): acknowledges, dispatches and ends every
/// pending interrupt until the CPU interface reports none. Called by the IRQ vector with IRQs
/// masked.
pub fn handle_irq() {
    match version() {
        Some(2) => v2::handle_irq(),
        Some(3) => v3::handle_irq(),
        _ => {}
    }
}

/// Stops the calling CPU's interface from signalling any interrupt (priority mask 0), so a
/// parked CPU's `wfi` is not ended by interrupts it will never take. No locks: the stop and
/// fatal paths call it. Nothing to do before this CPU's interface was set up.
pub fn mask_this_cpu() {
    match version() {
        Some(2) => v2::mask_this_cpu(),
        Some(3) => v3::mask_this_cpu(),
        _ => {}
    }
}

/// [`mask_this_cpu`] as a cross-call function (`crash=deaf`).
pub fn mask_this_cpu_for(_cpu: CpuId) {
    mask_this_cpu();
}

/// How many interrupts arrived with no handler registered.
pub fn unhandled_count() -> u64 {
    UNHANDLED.load(Ordering::Relaxed)
}

/// Sends SGI `sgi` (0–15) to `target` (Linux `gic_ipi_send_mask` for one CPU). Memory writes
/// made before the call are visible to the target when its handler runs.
pub fn send_sgi(sgi: u8, target: CpuId) -> Result<(), GicError> {
    match version() {
        Some(2) => v2::send_sgi(sgi, target),
        Some(3) => v3::send_sgi(sgi, target),
        _ => Err(GicError::NotInitialised),
    }
}

/// Runs the registered handler for `intid`, or counts it as unhandled.
fn dispatch(intid: IntId) {
    let handler = HANDLERS
        .get(intid.0 as usize)
        .and_then(InitOnce::get)
        .copied();
    match handler {
        Some(h) => h(intid),
        None => {
            UNHANDLED.fetch_add(1, Ordering::Relaxed);
        }
    }
}
