//! Arm semihosting (the debugger/emulator call interface), used only to end QEMU runs with a
//! status.
//!
//! From Arm's "Semihosting for AArch32 and AArch64" (`HLT #0xF000`, operation in w0, parameter
//! in x1, result in x0). Linux does not use semihosting. Without a debugger or emulator
//! listening (every board on its own, QEMU without `-semihosting-config`), `HLT` is an
//! undefined instruction. So the one `HLT` lives at a known address
//! (`__asym_semihosting_hlt`): the exception vectors recognise an undefined-instruction
//! exception there ([`catch_undefined`]), record that there is no host and resume after it,
//! and the call reports "no host" to its caller, which ends the run another way (PSCI).
//! That costs one caught exception, once; later calls do not execute `HLT` again.

use core::arch::global_asm;
use core::sync::atomic::{AtomicU8, Ordering};

const SYS_EXIT: u64 = 0x18;
/// ADP_Stopped_ApplicationExit: the application exited; the subcode is its status.
const ADP_STOPPED_APPLICATION_EXIT: u64 = 0x2_0026;

/// Whether a semihosting host answers: not known until the first call.
const UNKNOWN: u8 = 0;
const PRESENT: u8 = 1;
const ABSENT: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

// `__asym_semihosting_call(op, param) -> x0`: the semihosting trap, in its own function so
// the vectors can tell its `HLT` from any other undefined instruction by address.
global_asm!(
    r#"
    .section .text.asym_semihosting, "ax"
    .global __asym_semihosting_call
    .global __asym_semihosting_hlt
    .balign 4
__asym_semihosting_call:
__asym_semihosting_hlt:
    hlt     #0xf000
    ret
"#
);

unsafe extern "C" {
    /// Semihosting operation `op` with parameter `param` (w0/x1), result in x0. Returns
    /// whatever x0 holds when the `HLT` was undefined and skipped.
    fn __asym_semihosting_call(op: u64, param: u64) -> u64;
    /// The address of the `HLT` above.
    static __asym_semihosting_hlt: u8;
}

/// Whether a semihosting host answered a call (`None`: no call made yet).
pub fn present() -> Option<bool> {
    match STATE.load(Ordering::Relaxed) {
        PRESENT => Some(true),
        ABSENT => Some(false),
        _ => None,
    }
}

/// The exception vectors' side: an undefined-instruction exception (ESR EC 0) taken at `elr`
/// is the semihosting `HLT` with no host listening. Records that, and returns true so the
/// vectors resume after the instruction; false for any other undefined instruction.
pub fn catch_undefined(elr: u64) -> bool {
    if elr != (&raw const __asym_semihosting_hlt) as u64 {
        return false;
    }
    STATE.store(ABSENT, Ordering::Relaxed);
    true
}

/// Ends the emulation with exit status `status` (AArch64 parameter-block form of `SYS_EXIT`).
/// Returns only if there is no semihosting host (or it ignored the call): the caller must end
/// the run another way.
pub fn try_exit(status: u32) {
    if STATE.load(Ordering::Relaxed) == ABSENT {
        return;
    }
    let block: [u64; 2] = [ADP_STOPPED_APPLICATION_EXIT, u64::from(status)];
    // SAFETY: the host reads the two-word block we pass and does not return; without a host
    // the `HLT` is undefined, and `catch_undefined` makes the vectors resume after it.
    unsafe { __asym_semihosting_call(SYS_EXIT, block.as_ptr() as u64) };
    if STATE.load(Ordering::Relaxed) != ABSENT {
        STATE.store(PRESENT, Ordering::Relaxed);
    }
}
