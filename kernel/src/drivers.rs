//! Device drivers the kernel core needs (the console UART, the DVFS firmware's regions and the
//! QEMU firmware stand-in). Interrupt-controller and timer
//! code lives in `gic`/`timer`.

pub mod dvfs_mmio;
pub mod fw_standin;
pub mod pl011;
