//! Architecture layer: everything that touches system registers, DAIF, vectors or the MMU.
//! Only AArch64 exists; host builds (unit tests) get no-op stand-ins for the few helpers pure
//! code uses (interrupt masking for locks).

#[cfg(target_os = "none")]
pub mod aarch64;
#[cfg(target_os = "none")]
pub use aarch64::*;

/// Host stand-ins so `sync` compiles in host unit tests.
#[cfg(not(target_os = "none"))]
mod host {
    /// Saved interrupt-mask state (nothing to save on the host).
    #[derive(Clone, Copy, Debug)]
    pub struct IrqState(());

    pub fn irq_save_disable() -> IrqState {
        IrqState(())
    }

    pub fn irq_restore(_state: IrqState) {}

    pub fn irq_enable() {}

    pub fn wait_until_eq(word: &core::sync::atomic::AtomicU32, value: u32) {
        while word.load(core::sync::atomic::Ordering::Acquire) != value {
            core::hint::spin_loop();
        }
    }

    pub fn cpu_relax() {
        core::hint::spin_loop();
    }

    /// Host threads have no CPU index; locks record 0 (their recursion check is target-only).
    pub fn cpu_index() -> usize {
        0
    }

    /// No generic counter on the host (the lock hold timing is target-only).
    pub fn counter() -> u64 {
        0
    }
}
#[cfg(not(target_os = "none"))]
pub use host::*;
