//! Arm PrimeCell UART (PL011), polled transmit and interrupt-driven receive-FIFO draining.
//!
//! Re-derives the parts of Linux's `drivers/tty/serial/amba-pl011.c` that the console needs
//! (`pl011_console_putchar`, `pl011_rx_chars`). Deliberate differences: the baud rate is left as
//! the firmware set it (QEMU ignores it; u-boot has programmed it on boards), no DMA, no
//! modem control. Register names from the PL011 TRM (DDI 0183).

use tock_registers::interfaces::{Readable, Writeable};
use tock_registers::registers::{ReadOnly, ReadWrite, WriteOnly};
use tock_registers::{register_bitfields, register_structs};

register_bitfields! {
    u32,
    /// Data register: a read returns the received byte with its error flags.
    DR [
        /// Overrun: the FIFO was full and a byte was lost before this one.
        OE OFFSET(11) NUMBITS(1) [],
        /// Break condition.
        BE OFFSET(10) NUMBITS(1) [],
        /// Parity error.
        PE OFFSET(9) NUMBITS(1) [],
        /// Framing error.
        FE OFFSET(8) NUMBITS(1) [],
        DATA OFFSET(0) NUMBITS(8) []
    ],
    /// Flag register.
    FR [
        /// Transmit FIFO full.
        TXFF OFFSET(5) NUMBITS(1) [],
        /// Receive FIFO empty.
        RXFE OFFSET(4) NUMBITS(1) [],
        /// UART busy transmitting.
        BUSY OFFSET(3) NUMBITS(1) []
    ],
    /// Control register.
    CR [
        RXE OFFSET(9) NUMBITS(1) [],
        TXE OFFSET(8) NUMBITS(1) [],
        UARTEN OFFSET(0) NUMBITS(1) []
    ],
    /// Interrupt mask set/clear, raw/masked status and clear registers share this layout.
    INT [
        /// Receive timeout.
        RTIM OFFSET(6) NUMBITS(1) [],
        /// Receive.
        RXIM OFFSET(4) NUMBITS(1) []
    ]
}

register_structs! {
    pub Registers {
        (0x00 => dr: ReadWrite<u32, DR::Register>),
        (0x04 => _reserved0),
        (0x18 => fr: ReadOnly<u32, FR::Register>),
        (0x1c => _reserved1),
        (0x30 => cr: ReadWrite<u32, CR::Register>),
        (0x34 => _reserved2),
        (0x38 => imsc: ReadWrite<u32, INT::Register>),
        (0x3c => _reserved3),
        (0x44 => icr: WriteOnly<u32, INT::Register>),
        (0x48 => _reserved4),
        /// UARTPeriphID0..3, UARTPCellID0..3: one identification byte per word.
        (0xfe0 => id: [ReadOnly<u32>; 8]),
        (0x1000 => @END),
    }
}

/// A PL011 at a fixed MMIO address.
#[derive(Debug)]
pub struct Pl011 {
    regs: *const Registers,
}

// SAFETY: the device is a fixed MMIO block; callers serialise access (the console lock).
unsafe impl Send for Pl011 {}

impl Pl011 {
    /// # Safety
    /// `base` must be the address of a PL011 register block, mapped as device memory (or the
    /// MMU off), used by nobody else except through this driver with external serialisation.
    pub const unsafe fn new(base: usize) -> Self {
        Pl011 {
            regs: base as *const Registers,
        }
    }

    fn regs(&self) -> &Registers {
        // SAFETY: `new`'s contract makes `regs` a valid register block for the kernel's life.
        unsafe { &*self.regs }
    }

    /// Whether the identification registers say PL011 (PL011 TRM "Peripheral identification
    /// registers"; Linux's AMBA bus matches the same: component ID 0xB105F00D, part 0x011,
    /// designer 0x41, `amba-pl011.c`'s id 0x00041011 under mask 0x000fffff). On a device
    /// that is not a PrimeCell the reads return whatever it has there (or fault).
    pub fn is_pl011(&self) -> bool {
        let b = |i: usize| self.id_byte(i);
        let periph = b(0) | b(1) << 8 | b(2) << 16 | b(3) << 24;
        let cell = b(4) | b(5) << 8 | b(6) << 16 | b(7) << 24;
        cell == 0xb105_f00d && periph & 0x000f_ffff == 0x0004_1011
    }

    /// Identification byte `i` (0..8: UARTPeriphID0..3, UARTPCellID0..3).
    pub fn id_byte(&self, i: usize) -> u32 {
        self.regs().id[i % 8].get() & 0xff
    }

    /// Enables transmit and receive (the firmware's baud/line settings are kept).
    pub fn enable(&self) {
        self.regs()
            .cr
            .write(CR::UARTEN::SET + CR::TXE::SET + CR::RXE::SET);
    }

    /// Sends one byte, waiting while the transmit FIFO is full.
    pub fn putc(&self, b: u8) {
        while self.regs().fr.is_set(FR::TXFF) {
            core::hint::spin_loop();
        }
        self.regs().dr.set(u32::from(b));
    }

    /// Sends bytes, turning `\n` into `\r\n` when `crlf`.
    pub fn write_bytes(&self, bytes: &[u8], crlf: bool) {
        for &b in bytes {
            if crlf && b == b'\n' {
                self.putc(b'\r');
            }
            self.putc(b);
        }
    }

    /// A received byte, if the receive FIFO holds one.
    pub fn getc(&self) -> Option<u8> {
        self.getc_flagged().map(|(b, _)| b)
    }

    /// A received byte and whether the UART flagged it (overrun, break, parity or framing
    /// error; `pl011_fifo_to_tty` counts these in `icount` and passes the byte on with a flag).
    pub fn getc_flagged(&self) -> Option<(u8, bool)> {
        if self.regs().fr.is_set(FR::RXFE) {
            return None;
        }
        let dr = self.regs().dr.extract();
        let flagged =
            dr.is_set(DR::OE) || dr.is_set(DR::BE) || dr.is_set(DR::PE) || dr.is_set(DR::FE);
        Some((dr.read(DR::DATA) as u8, flagged))
    }

    /// Unmasks the receive and receive-timeout interrupts.
    pub fn enable_rx_irq(&self) {
        self.regs().imsc.write(INT::RXIM::SET + INT::RTIM::SET);
    }

    /// Clears the receive interrupts; call before draining the FIFO (a byte arriving after the
    /// drain then raises them again).
    pub fn clear_rx_irq(&self) {
        self.regs().icr.write(INT::RXIM::SET + INT::RTIM::SET);
    }
}
