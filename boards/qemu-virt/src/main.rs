//! asym on QEMU's `virt` machine: the board binary. Everything else comes from the device tree
//! QEMU passes; the board only names itself and its fixed early UART.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
use asym_kernel::board::{EndAction, EndPolicy};
#[cfg(target_os = "none")]
use asym_kernel::boot::Board;

/// The board description the kernel reads before the device tree.
#[cfg(target_os = "none")]
#[unsafe(no_mangle)]
pub static ASYM_BOARD: Board = Board {
    name: "qemu-virt",
    // source: QEMU hw/arm/virt.c, base_memmap[VIRT_UART] = 0x0900_0000 (PL011).
    early_uart: Some(0x0900_0000),
    // Without a semihosting host (`-semihosting-config` left out) QEMU ends on either PSCI
    // call (SYSTEM_RESET too, under xtask's `-no-reboot`), so both end the run and the console
    // says the status; SYSTEM_OFF is what a run without semihosting has always ended with.
    end: EndPolicy {
        success: EndAction::SystemOff,
        failure: EndAction::SystemOff,
    },
    // QEMU keeps nothing in guest RAM that its DT does not reserve.
    carve_outs: &[],
    // Whatever DVFS transport the DT describes (the emulated boards' firmware stand-in), else
    // the emulated driver.
    dvfs: &[],
};

/// Host builds (`cargo check --workspace`) have nothing to run.
#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("asym-qemu-virt is a bare-metal kernel: build it for aarch64-unknown-none-softfloat (cargo xtask build)");
}
