//! In-kernel self tests, one module per area; each registers its tests with `selftest!`.

mod cmdline;
mod console;
mod fault;
mod heap;
mod ipi;
mod smp;
mod sync;
mod timer;
