//! The console: one PL011 carrying plain text lines and defmt frames, serialised by one lock.
//!
//! Linux's equivalent is `kernel/printk/printk.c` with the console lock; here the stream format
//! is asym's own (kernel/CONTRACTS.md "Console stream"): plain UTF-8 text never contains 0x1E or
//! 0x00; each defmt frame is written, under the same lock as text, as 0x1E followed by the
//! rzCOBS-encoded frame, which ends in 0x00.
//!
//! Before the MMU is on only the boot CPU runs, and exclusives on Device memory are not
//! guaranteed, so the early path writes without taking the lock.

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::drivers::pl011::Pl011;
use crate::dt::MAX_CPUS;
use crate::sync::{IrqSpinLock, RawLockToken};

/// The frame-start byte that separates defmt frames from text.
pub const FRAME_START: u8 = 0x1e;

/// How long [`write_fmt_force`] tries for the console lock before writing without it (about
/// 0.1 s of guest time under QEMU `-icount`, a few ms on silicon: the longest line a healthy
/// CPU may be in the middle of).
const FORCE_LOCK_SPINS: u64 = 1_000_000;

/// Bytes of received input kept until someone reads them.
const RX_BUF: usize = 256;

/// Bytes the console tap can hold (self tests of the stream format).
const TAP_LEN: usize = 16 * 1024;

/// A copy of everything the locked console paths send, while enabled (self tests check the
/// multiplexed stream with it).
struct Tap {
    on: bool,
    buf: heapless::Vec<u8, TAP_LEN>,
    dropped: usize,
}

/// The UART plus the tap: where locked output goes.
struct Sink<'a> {
    uart: &'a Pl011,
    tap: &'a mut Tap,
}

impl Sink<'_> {
    fn bytes(&mut self, bytes: &[u8]) {
        self.uart.write_bytes(bytes, false);
        if self.tap.on {
            for &b in bytes {
                if self.tap.buf.push(b).is_err() {
                    self.tap.dropped += 1;
                }
            }
        }
    }

    fn text(&mut self, s: &str) {
        if let Some(&last) = s.as_bytes().last() {
            LINE_OPEN.store(last != b'\n', Ordering::Relaxed);
        }
        for &b in s.as_bytes() {
            let b = if b == FRAME_START || b == 0 { b'?' } else { b };
            if b == b'\n' {
                self.bytes(b"\r");
            }
            self.bytes(&[b]);
        }
    }
}

impl Write for Sink<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.text(s);
        Ok(())
    }
}

/// What the receive interrupt handler has done since boot (self tests prove received bytes
/// come through the interrupt path with it, as Linux's `uart_icount` lets one check `rx`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxStats {
    /// Receive interrupts handled, per CPU that took them.
    pub irqs: [u64; MAX_CPUS],
    /// Bytes the handler moved from the UART FIFO into the input buffer.
    pub bytes: u64,
    /// Bytes the UART flagged (overrun, break, parity, framing); they are kept.
    pub flagged: u64,
    /// Bytes lost because the input buffer was full.
    pub dropped: u64,
}

impl RxStats {
    /// Receive interrupts handled on all CPUs.
    pub fn total_irqs(&self) -> u64 {
        self.irqs.iter().sum()
    }
}

/// State behind the console lock.
pub struct ConsoleState {
    uart: Option<Pl011>,
    tap: Tap,
    /// defmt's rzCOBS frame encoder (its state spans acquire→release of one frame).
    pub(crate) encoder: defmt::Encoder,
    rx: heapless::Deque<u8, RX_BUF>,
    rx_stats: RxStats,
}

static CONSOLE: IrqSpinLock<ConsoleState> = IrqSpinLock::with_rank(
    ConsoleState {
        uart: None,
        tap: Tap {
            on: false,
            buf: heapless::Vec::new(),
            dropped: 0,
        },
        encoder: defmt::Encoder::new(),
        rx: heapless::Deque::new(),
        rx_stats: RxStats {
            irqs: [0; MAX_CPUS],
            bytes: 0,
            flagged: 0,
            dropped: 0,
        },
    },
    crate::sync::LockRank::CONSOLE,
);

/// UART base for the lock-free early path (0 = none).
static EARLY_BASE: AtomicUsize = AtomicUsize::new(0);
/// Set once the MMU is on; from then on all output takes the lock.
static LOCKED_MODE: AtomicBool = AtomicBool::new(false);

/// Points the early (lock-free, boot CPU only) console at a PL011.
///
/// # Safety
/// `base` must be a PL011 accessible at that address.
pub unsafe fn init_early(base: usize) {
    EARLY_BASE.store(base, Ordering::Relaxed);
    // SAFETY: guaranteed by the caller.
    unsafe { Pl011::new(base) }.enable();
}

/// Whether a PL011 answers at `base` (its identification registers; a fault reading them
/// counts as no, and is reported as an expected fault).
///
/// # Safety
/// `base` must be mapped as device memory, its 4 KiB readable without side effects (a
/// PL011's or an absent device's: other devices' registers there may have read effects).
pub unsafe fn probe(base: usize) -> bool {
    // SAFETY: mapped device memory, per the caller.
    let uart = unsafe { Pl011::new(base) };
    // One read under `expect_fault` (it catches one fault): nothing there faults on the first.
    let fault = crate::arch::expect_fault(|| {
        let _ = uart.id_byte(4);
    });
    fault.is_none() && uart.is_pl011()
}

/// Switches to the locked console on the DT's UART, after the MMU is on.
///
/// # Safety
/// `base` must be the PL011 the DT names, mapped as device memory.
pub unsafe fn init(base: usize) {
    EARLY_BASE.store(base, Ordering::Relaxed);
    // SAFETY: guaranteed by the caller.
    let uart = unsafe { Pl011::new(base) };
    uart.enable();
    CONSOLE.lock().uart = Some(uart);
    LOCKED_MODE.store(true, Ordering::Release);
}

/// Writes plain text (0x1E and 0x00 are replaced by `?` so the host never mistakes text for a
/// frame).
pub fn write_str(s: &str) {
    if !LOCKED_MODE.load(Ordering::Acquire) {
        let base = EARLY_BASE.load(Ordering::Relaxed);
        if base != 0 {
            // SAFETY: `init_early` recorded a PL011 base; only the boot CPU runs this early.
            let uart = unsafe { Pl011::new(base) };
            write_text(&uart, s);
        }
        return;
    }
    let mut guard = CONSOLE.lock();
    let ConsoleState { uart, tap, .. } = &mut *guard;
    if let Some(uart) = uart.as_ref() {
        Sink { uart, tap }.text(s);
    }
}

/// Writes formatted text as one unit (no other CPU's output interleaves).
pub fn write_fmt(args: fmt::Arguments<'_>) {
    struct Text<'a>(&'a Pl011);
    impl Write for Text<'_> {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            write_text(self.0, s);
            Ok(())
        }
    }
    if !LOCKED_MODE.load(Ordering::Acquire) {
        let base = EARLY_BASE.load(Ordering::Relaxed);
        if base != 0 {
            // SAFETY: as in `write_str`.
            let uart = unsafe { Pl011::new(base) };
            let _ = Text(&uart).write_fmt(args);
        }
        return;
    }
    let mut guard = CONSOLE.lock();
    let ConsoleState { uart, tap, .. } = &mut *guard;
    if let Some(uart) = uart.as_ref() {
        let _ = Sink { uart, tap }.write_fmt(args);
    }
}

/// Last-resort output for panics and fault reports (the emergency path): never waits for long
/// on a lock another CPU may hold for ever. It writes straight to the UART registers; it takes
/// the console lock first when it can within a bounded wait, only so that healthy CPUs' lines
/// do not interleave with the report. If this very CPU holds the lock (it faulted while
/// printing), or the lock was already given up on once (its holder is presumed dead, and a
/// fatal report of many lines must not wait once per line), it writes at once. Interrupts
/// stay masked while writing.
pub fn write_fmt_force(args: fmt::Arguments<'_>) {
    if !LOCKED_MODE.load(Ordering::Acquire) {
        write_fmt(args);
        return;
    }
    let irq = crate::arch::irq_save_disable();
    let guard = if CONSOLE.held_by_this_cpu() || CONSOLE_ABANDONED.load(Ordering::Relaxed) {
        None
    } else {
        let g = CONSOLE.lock_timeout(FORCE_LOCK_SPINS);
        if g.is_none() {
            CONSOLE_ABANDONED.store(true, Ordering::Relaxed);
        }
        g
    };
    let base = EARLY_BASE.load(Ordering::Relaxed);
    if base == 0 {
        drop(guard);
        crate::arch::irq_restore(irq);
        return;
    }
    // SAFETY: the console base is a PL011; without the lock we accept interleaved bytes.
    let uart = unsafe { Pl011::new(base) };
    if LINE_OPEN.swap(false, Ordering::Relaxed) {
        // A line was cut short (its writer faulted or died): the report starts on its own.
        write_text(&uart, "\n");
    }
    struct Text<'a>(&'a Pl011);
    impl Write for Text<'_> {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            write_text(self.0, s);
            Ok(())
        }
    }
    let _ = Text(&uart).write_fmt(args);
    drop(guard);
    crate::arch::irq_restore(irq);
}

/// `crash=held`: takes the console lock and never releases it, as a CPU that hangs inside a
/// critical section would (the caller then stops).
pub fn take_lock_forever() {
    core::mem::forget(CONSOLE.lock());
}

/// Whether another CPU holds the console lock right now (`crash=held`).
pub fn locked_elsewhere() -> bool {
    !CONSOLE.held_by_this_cpu() && CONSOLE.lock_timeout(1).is_none()
}

/// Whether the last text the locked console wrote left a line unfinished.
static LINE_OPEN: AtomicBool = AtomicBool::new(false);

/// Set once [`write_fmt_force`] gave up waiting for the console lock: its holder is presumed
/// dead, and later emergency writes do not wait again.
static CONSOLE_ABANDONED: AtomicBool = AtomicBool::new(false);
/// Likewise for the report lock ([`lock_report`]).
static REPORT_ABANDONED: AtomicBool = AtomicBool::new(false);

/// Serialises whole multi-line fatal reports (fault reports, panics) across CPUs, so two CPUs
/// dying at once print one report after the other rather than interleaved lines.
static REPORT: IrqSpinLock<()> = IrqSpinLock::with_rank((), crate::sync::LockRank::REPORT);

/// Takes the report lock for a fatal report, unless this CPU already holds it (a fault while
/// reporting) or it stays taken past a bounded wait (its holder died; then later reports do
/// not wait for it again): then `None`, and the report goes out anyway.
pub fn lock_report() -> Option<crate::sync::IrqSpinLockGuard<'static, ()>> {
    if REPORT.held_by_this_cpu() || REPORT_ABANDONED.load(Ordering::Relaxed) {
        return None;
    }
    let g = REPORT.lock_timeout(FORCE_LOCK_SPINS);
    if g.is_none() {
        REPORT_ABANDONED.store(true, Ordering::Relaxed);
    }
    g
}

/// Takes the console lock for a defmt frame and writes the frame-start byte.
pub(crate) fn frame_begin() -> RawLockToken {
    let token = CONSOLE.raw_lock();
    // SAFETY: we hold the lock through `token`.
    let ConsoleState {
        uart, encoder, tap, ..
    } = unsafe { CONSOLE.data_mut_unchecked() };
    if let Some(uart) = uart.as_ref() {
        let mut sink = Sink { uart, tap };
        sink.bytes(&[FRAME_START]);
        encoder.start_frame(|b| sink.bytes(b));
    }
    token
}

/// Encodes frame bytes (console lock held through `frame_begin`).
pub(crate) fn frame_write(bytes: &[u8]) {
    // SAFETY: only called between `frame_begin` and `frame_end` on this CPU, which hold the lock.
    let ConsoleState {
        uart, encoder, tap, ..
    } = unsafe { CONSOLE.data_mut_unchecked() };
    if let Some(uart) = uart.as_ref() {
        let mut sink = Sink { uart, tap };
        encoder.write(bytes, |b| sink.bytes(b));
    }
}

/// Ends the frame (writes the trailing 0x00) and releases the console lock.
pub(crate) fn frame_end(token: RawLockToken) {
    // SAFETY: we hold the lock through `token`.
    let ConsoleState {
        uart, encoder, tap, ..
    } = unsafe { CONSOLE.data_mut_unchecked() };
    if let Some(uart) = uart.as_ref() {
        let mut sink = Sink { uart, tap };
        encoder.end_frame(|b| sink.bytes(b));
    }
    CONSOLE.raw_unlock(token);
}

/// Starts copying everything the console sends (text and frames) into the tap buffer.
pub(crate) fn tap_start() {
    let mut g = CONSOLE.lock();
    g.tap.buf.clear();
    g.tap.dropped = 0;
    g.tap.on = true;
}

/// Stops the tap and returns what it captured and how many bytes did not fit.
pub(crate) fn tap_stop() -> (alloc::vec::Vec<u8>, usize) {
    let mut g = CONSOLE.lock();
    g.tap.on = false;
    (g.tap.buf.to_vec(), g.tap.dropped)
}

/// Moves received bytes from the UART FIFO into the input buffer (the UART interrupt handler;
/// the GIC code calls it for the UART INTID). Bytes beyond the buffer are dropped and
/// counted. Like `pl011_rx_chars` it drains the FIFO until empty, so one interrupt (FIFO level
/// or receive timeout) moves everything that has arrived, a FIFO's worth or more.
pub fn on_rx_irq() {
    let mut guard = CONSOLE.lock();
    let ConsoleState {
        uart, rx, rx_stats, ..
    } = &mut *guard;
    if let Some(u) = uart.as_ref() {
        rx_stats.irqs[crate::percpu::current_cpu().index()] += 1;
        // Clear before draining: a byte that lands after the last empty check then raises the
        // interrupt again. Clearing after draining discarded that edge and left the byte (with
        // the FIFO off, all further input) waiting forever; the uart_rx self test caught it.
        // (Linux's `pl011_int` never clears RXIS/RTIS through ICR: draining clears them, and
        // it re-reads RIS until nothing is pending.)
        u.clear_rx_irq();
        while let Some((b, flagged)) = u.getc_flagged() {
            rx_stats.bytes += 1;
            rx_stats.flagged += u64::from(flagged);
            if rx.push_back(b).is_err() {
                rx_stats.dropped += 1;
            }
        }
    }
}

/// A snapshot of the receive interrupt counters.
pub fn rx_stats() -> RxStats {
    CONSOLE.lock().rx_stats
}

/// Unmasks the UART's receive interrupts (the GIC side is `gic` enabling the INTID).
pub fn enable_rx_irq() {
    if let Some(u) = CONSOLE.lock().uart.as_ref() {
        u.enable_rx_irq();
    }
}

/// A received byte, if any.
pub fn read_byte() -> Option<u8> {
    CONSOLE.lock().rx.pop_front()
}

fn write_text(uart: &Pl011, s: &str) {
    for &b in s.as_bytes() {
        let b = if b == FRAME_START || b == 0 { b'?' } else { b };
        if b == b'\n' {
            uart.putc(b'\r');
        }
        uart.putc(b);
    }
}

/// Prints plain text to the console (no newline).
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => { $crate::console::write_fmt(format_args!($($arg)*)) };
}

/// Prints a plain text line to the console, atomically with respect to other CPUs.
#[macro_export]
macro_rules! println {
    () => { $crate::console::write_str("\n") };
    ($($arg:tt)*) => { $crate::console::write_fmt(format_args!("{}\n", format_args!($($arg)*))) };
}
