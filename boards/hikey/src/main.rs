//! asym on the HiKey: the board binary (linked at `linker/hikey.ld`'s 0x0008_0000).
#![cfg_attr(target_os = "none", no_std, no_main)]

/// The board description the kernel reads before the device tree.
#[cfg(target_os = "none")]
#[unsafe(no_mangle)]
pub static ASYM_BOARD: asym_kernel::boot::Board =
    asym_kernel::boot::Board::from_config(&asym_hikey::CONFIG);

/// Host builds (`cargo check --workspace`) have nothing to run.
#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("asym-hikey is a bare-metal kernel: build it with `cargo xtask image --board hikey`");
}
