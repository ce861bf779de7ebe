//! Firmware and mailbox hardware models, written from the same specifications as the drivers
//! (the SCMI specification and SCP-firmware's Juno configuration; the Linux HiSilicon mailbox
//! and stub-clock drivers, which are the only public description of those protocols), for the
//! host tests and for the firmware stand-in of the emulated QEMU boards. Not used on a board.
//!
//! Each model works on the same [`Mmio`](crate::io::Mmio) regions the driver sees, from the
//! other side: the mailbox *hardware* models turn register writes into their side effects
//! ([`mhu::write`], [`hi3660::Mailbox::write`], [`hi6220::Ipc::write`]) and the *firmware* models
//! answer a message and make the new frequency visible after the board's transition latency
//! ([`scp::ScmiPlatform`], [`hi3660::Lpm3`], [`hi6220::Mcu`]). Every model has fault switches
//! (error statuses, wrong tokens and lengths, silence, ignored requests, slowness) so the tests
//! can check that the drivers turn each into the right error. The models never panic, whatever
//! a driver (or a fuzzer) writes.

pub mod hi3660;
pub mod hi6220;
pub mod mhu;
pub mod scp;
