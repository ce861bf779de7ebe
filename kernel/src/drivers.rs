//! Device drivers the kernel core needs (the console UART). Interrupt-controller and timer
//! code lives in `gic`/`timer`.

pub mod pl011;
