//! defmt global logger over the console, its timestamp, and the runtime log level.
//!
//! Linux's printk log levels (`loglevel=`) map onto defmt's levels. defmt filters at build time
//! with `DEFMT_LOG` (the workspace sets `debug` in `.cargo/config.toml`); the `log_*!` macros
//! filter again at run time by the command line's `loglevel=`. Frames go out through
//! [`crate::console`] (0x1E + rzCOBS frame, under the console lock with IRQs masked, so any CPU
//! and interrupt context may log).

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU8, Ordering};

use crate::cmdline::LogLevel;
use crate::sync::RawLockToken;

static LEVEL: AtomicU8 = AtomicU8::new(LogLevel::Info as u8);

/// Sets the runtime log level.
pub fn set_level(level: LogLevel) {
    LEVEL.store(level as u8, Ordering::Relaxed);
}

/// Whether messages at `level` are printed.
pub fn enabled(level: LogLevel) -> bool {
    level as u8 >= LEVEL.load(Ordering::Relaxed)
}

/// The console-lock token of the frame in progress; only touched while that lock is held.
struct FrameToken(UnsafeCell<Option<RawLockToken>>);

// SAFETY: accessed only by the CPU holding the console lock (between acquire and release).
unsafe impl Sync for FrameToken {}

static FRAME_TOKEN: FrameToken = FrameToken(UnsafeCell::new(None));

#[defmt::global_logger]
struct ConsoleLogger;

// SAFETY: acquire takes the console lock with IRQs masked (so no nesting on this CPU), and
// release gives it back; defmt calls write/flush only in between.
unsafe impl defmt::Logger for ConsoleLogger {
    fn acquire() {
        let token = crate::console::frame_begin();
        // SAFETY: we now hold the console lock, which guards FRAME_TOKEN.
        unsafe { *FRAME_TOKEN.0.get() = Some(token) };
    }

    unsafe fn flush() {}

    unsafe fn release() {
        // SAFETY: called after acquire on this CPU, which holds the console lock.
        if let Some(token) = unsafe { (*FRAME_TOKEN.0.get()).take() } {
            crate::console::frame_end(token);
        }
    }

    unsafe fn write(bytes: &[u8]) {
        crate::console::frame_write(bytes);
    }
}

defmt::timestamp!("{=u64:us}", crate::arch::uptime_us());

/// defmt `trace!` if the runtime level allows it.
#[macro_export]
macro_rules! log_trace {
    ($($t:tt)*) => { if $crate::log::enabled($crate::cmdline::LogLevel::Trace) { ::defmt::trace!($($t)*) } };
}

/// defmt `debug!` if the runtime level allows it.
#[macro_export]
macro_rules! log_debug {
    ($($t:tt)*) => { if $crate::log::enabled($crate::cmdline::LogLevel::Debug) { ::defmt::debug!($($t)*) } };
}

/// defmt `info!` if the runtime level allows it.
#[macro_export]
macro_rules! log_info {
    ($($t:tt)*) => { if $crate::log::enabled($crate::cmdline::LogLevel::Info) { ::defmt::info!($($t)*) } };
}

/// defmt `warn!` if the runtime level allows it.
#[macro_export]
macro_rules! log_warn {
    ($($t:tt)*) => { if $crate::log::enabled($crate::cmdline::LogLevel::Warn) { ::defmt::warn!($($t)*) } };
}

/// defmt `error!` (always printed).
#[macro_export]
macro_rules! log_error {
    ($($t:tt)*) => { ::defmt::error!($($t)*) };
}
