//! The console receives through the PL011 receive interrupt: the test asks the host for known
//! bytes on the console and checks they arrive intact, in order, and that every one of them was
//! moved by the receive interrupt handler (`console::on_rx_irq`), never by polling the UART.
//!
//! Linux has no in-kernel test for this; the nearest is checking `/proc/tty/driver/ttyAMA`'s
//! `rx:` count (`uart_icount.rx`, incremented in `pl011_fifo_to_tty`) after sending bytes.
//!
//! Protocol (kernel/CONTRACTS.md "Console stream"): the test prints the plain
//! line `selftest uart_rx: send hex <hex bytes>` and waits; `cargo xtask test` (and
//! `cargo xtask qemu --expect-pass`, or any run whose stdin is not a terminal) writes exactly
//! those bytes to QEMU's serial input when it sees the line, and never writes anything before,
//! so u-boot's autoboot countdown is not interrupted. Two requests: 5 bytes (fewer than any FIFO
//! trigger level, so on hardware they arrive through the receive-timeout interrupt), then a
//! 96-byte burst, longer than the 32-byte FIFO (more than one FIFO's worth must be drained
//! without an overrun or a lost interrupt; with the FIFO off, as after a direct boot, QEMU
//! holds back each byte until the previous one was read).
//!
//! Nobody answering (self tests run by hand in a terminal without typing the bytes) is a
//! failure after [`TIMEOUT_US`] of guest time, with a message saying so: deliberately not a
//! skip, because a skipped test would let a run without a working receive path pass (a manual
//! run can leave it out with a `selftest=<filter>` that does not match it, or paste the
//! requested bytes: they are printable ASCII). The wait sleeps in `wfi`, so under
//! `-icount ... sleep=off` guest time only advances from timer tick to timer tick while QEMU
//! waits for host input; the timeout is generous so a slow host cannot make a run fail.

use alloc::vec::Vec;
use core::fmt;

use crate::console::{read_byte, rx_stats, RxStats};
use crate::selftest::{TestError, TestResult};
use crate::{selftest, test_assert, test_eq};

/// How long to wait, in guest time, for the host to send the requested bytes.
pub const TIMEOUT_US: u64 = 120_000_000;
/// How long to wait after the last expected byte for bytes that should not be there.
const SETTLE_US: u64 = 20_000;
/// The two request sizes: below any FIFO trigger level, and more than the 32-byte FIFO.
const SIZES: [usize; 2] = [5, 96];

/// The request line's prefix, matched by xtask (`xtask/src/qemu.rs`).
const REQUEST: &str = "selftest uart_rx: send hex ";

/// Bytes printed as lowercase hex.
struct Hex<'a>(&'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

/// Request `n` of `len` bytes: printable ASCII, varied so a lost, duplicated or reordered byte
/// shows as a mismatch, and different between requests so a stale byte does too.
fn pattern(n: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| b'!' + ((i * 7 + n * 41 + 3) % 94) as u8)
        .collect()
}

fn stats_since(before: &RxStats) -> (u64, u64, u64, u64) {
    let now = rx_stats();
    (
        now.total_irqs() - before.total_irqs(),
        now.bytes - before.bytes,
        now.flagged - before.flagged,
        now.dropped - before.dropped,
    )
}

/// Reads bytes from the console input buffer until `want` arrived or `timeout_us` of guest time
/// passed, sleeping in `wfi` in between (the receive interrupt or the next tick wakes it).
fn receive(want: usize, timeout_us: u64) -> Vec<u8> {
    let start = crate::timer::counter();
    let limit = crate::timer::us_to_counter(timeout_us);
    let mut got = Vec::with_capacity(want);
    while got.len() < want {
        match read_byte() {
            Some(b) => got.push(b),
            None if crate::timer::counter().wrapping_sub(start) >= limit => break,
            None => crate::arch::wfi(),
        }
    }
    got
}

fn uart_rx_interrupt() -> TestResult {
    // Whatever arrived before the test (someone typing) is not part of the exchange.
    while read_byte().is_some() {}
    for (n, len) in SIZES.into_iter().enumerate() {
        let want = pattern(n, len);
        let before = rx_stats();
        crate::println!("{}{}", REQUEST, Hex(&want));
        let got = receive(len, TIMEOUT_US);
        let (irqs, bytes, _, _) = stats_since(&before);
        test_assert!(
            got.len() == len,
            "request {}: received {} of {} bytes within {} s of guest time (receive IRQs {}, \
             bytes moved by the IRQ handler {}); did the host answer \"{}...\"? \
             (`cargo xtask test` does)",
            n,
            got.len(),
            len,
            TIMEOUT_US / 1_000_000,
            irqs,
            bytes,
            REQUEST.trim_end()
        );
        if let Some(i) = (0..len).find(|&i| got[i] != want[i]) {
            return Err(TestError::new(format_args!(
                "request {n}: byte {i} is {:#04x}, expected {:#04x} (got {}, wanted {})",
                got[i],
                want[i],
                Hex(&got),
                Hex(&want)
            )));
        }
        // Nothing more than asked for (a duplicated byte would show here).
        let extra = receive(1, SETTLE_US);
        test_assert!(
            extra.is_empty(),
            "request {}: unrequested byte {:#04x} after the {} expected ones",
            n,
            extra.first().copied().unwrap_or(0),
            len
        );
        // Every byte came through the interrupt handler, none lost or flagged by the UART.
        let (irqs, bytes, flagged, dropped) = stats_since(&before);
        // (One interrupt may move more than a FIFO's worth: QEMU refills the FIFO while the
        // handler reads it, so no lower bound above 1 holds for the IRQ count.)
        test_eq!(bytes, len as u64);
        test_eq!((flagged, dropped), (0, 0));
        test_assert!(
            irqs >= 1,
            "request {}: no receive IRQ for {} bytes",
            n,
            bytes
        );
    }
    Ok(())
}
// Last: how long the host takes to answer varies, and must not move later tests in guest time.
selftest!(name = "uart_rx_interrupt", uart_rx_interrupt, last);
