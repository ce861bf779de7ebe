//! PSCI firmware calls through the conduit the device tree names (`hvc` or `smc`).
//!
//! Linux: `drivers/firmware/psci/psci.c` (`psci_cpu_on`, `psci_sys_poweroff`, `psci_sys_reset`,
//! `get_set_conduit_method`) and `arch/arm64/kernel/psci.c` (`cpu_psci_cpu_boot`). The calls
//! themselves come from the `smccc` crate; this module only picks the conduit.

pub use smccc::psci::Error as PsciError;
use smccc::psci::Version;
use smccc::{Hvc, Smc};

use crate::dt::Conduit;

/// `PSCI_VERSION`.
pub fn version(conduit: Conduit) -> Result<Version, PsciError> {
    match conduit {
        Conduit::Hvc => smccc::psci::version::<Hvc>(),
        Conduit::Smc => smccc::psci::version::<Smc>(),
    }
}

/// `CPU_ON` (64-bit): start the CPU whose `MPIDR_EL1` affinity is `mpidr` at physical address
/// `entry_pa`, with `context_id` in its `x0`.
pub fn cpu_on(
    conduit: Conduit,
    mpidr: u64,
    entry_pa: u64,
    context_id: u64,
) -> Result<(), PsciError> {
    match conduit {
        Conduit::Hvc => smccc::psci::cpu_on::<Hvc>(mpidr, entry_pa, context_id),
        Conduit::Smc => smccc::psci::cpu_on::<Smc>(mpidr, entry_pa, context_id),
    }
}

/// `SYSTEM_OFF`. Returns only if the firmware refuses.
pub fn system_off(conduit: Conduit) -> PsciError {
    let result = match conduit {
        Conduit::Hvc => smccc::psci::system_off::<Hvc>(),
        Conduit::Smc => smccc::psci::system_off::<Smc>(),
    };
    match result {
        Ok(()) => PsciError::InternalFailure,
        Err(e) => e,
    }
}

/// `SYSTEM_RESET`. Returns only if the firmware refuses.
pub fn system_reset(conduit: Conduit) -> PsciError {
    let result = match conduit {
        Conduit::Hvc => smccc::psci::system_reset::<Hvc>(),
        Conduit::Smc => smccc::psci::system_reset::<Smc>(),
    };
    match result {
        Ok(()) => PsciError::InternalFailure,
        Err(e) => e,
    }
}
