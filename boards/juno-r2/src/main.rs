//! asym on the Arm Juno r2: the board binary (linked at `linker/juno-r2.ld`'s 0x8008_0000).
#![cfg_attr(target_os = "none", no_std, no_main)]

/// The board description the kernel reads before the device tree.
#[cfg(target_os = "none")]
#[unsafe(no_mangle)]
pub static ASYM_BOARD: asym_kernel::boot::Board =
    asym_kernel::boot::Board::from_config(&asym_juno_r2::CONFIG);

/// Host builds (`cargo check --workspace`) have nothing to run.
#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!(
        "asym-juno-r2 is a bare-metal kernel: build it with `cargo xtask image --board juno-r2`"
    );
}
