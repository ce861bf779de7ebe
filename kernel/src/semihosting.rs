//! Arm semihosting (the debugger/emulator call interface), used only to end QEMU runs.
//!
//! From Arm's "Semihosting for AArch32 and AArch64" (`HLT #0xF000`, operation in w0, parameter
//! in x1). Linux does not use semihosting. Only called when the command line asks for it
//! (`selftest`, `semihosting`): without a debugger or emulator attached, `HLT` is an undefined
//! instruction.

use core::arch::asm;

const SYS_EXIT: u64 = 0x18;
/// ADP_Stopped_ApplicationExit: the application exited; the subcode is its status.
const ADP_STOPPED_APPLICATION_EXIT: u64 = 0x2_0026;

/// Ends the emulation with exit status `status` (AArch64 parameter-block form of `SYS_EXIT`).
pub fn exit(status: u32) -> ! {
    let block: [u64; 2] = [ADP_STOPPED_APPLICATION_EXIT, u64::from(status)];
    // SAFETY: the semihosting call reads the two-word block we pass and does not return when
    // an emulator handles it; if it returns, we park.
    unsafe {
        asm!("hlt #0xf000", in("w0") SYS_EXIT as u32, in("x1") block.as_ptr(), options(nostack));
    }
    crate::arch::park()
}
