//! GICv3 CPU interface system registers (`ICC_*_EL1`), by their encodings so no assembler GIC
//! support is needed. Linux: `arch/arm64/include/asm/arch_gicv3.h` and `sysreg.h`.
//!
//! Each accessor is a single `mrs`/`msr`. They are safe functions: on a CPU without the GICv3
//! system register interface enabled they trap (an undefined-instruction exception reported by
//! the exception vectors), which is a bug report, not memory unsafety. Callers only use them when
//! the device tree says the GIC is a GICv3.

use core::arch::asm;

macro_rules! icc_read {
    ($(#[$doc:meta])* $name:ident, $enc:literal) => {
        $(#[$doc])*
        pub fn $name() -> u64 {
            let value: u64;
            // SAFETY: reading a GIC CPU interface register has no memory effects; the register
            // exists when the GIC is a GICv3 (the only case callers use it).
            unsafe { asm!(concat!("mrs {}, ", $enc), out(reg) value, options(nomem, nostack)) };
            value
        }
    };
}

macro_rules! icc_write {
    ($(#[$doc:meta])* $name:ident, $enc:literal) => {
        $(#[$doc])*
        pub fn $name(value: u64) {
            // SAFETY: writing a GIC CPU interface register changes interrupt delivery only;
            // callers pass architecturally valid values. Not `nomem`: the write must also be a
            // compiler barrier, so memory accesses are not moved across an SGI or an EOI.
            unsafe { asm!(concat!("msr ", $enc, ", {}"), in(reg) value, options(nostack)) };
        }
    };
}

icc_read!(
    /// `ICC_SRE_EL1`.
    read_icc_sre_el1, "S3_0_C12_C12_5"
);
icc_write!(
    /// `ICC_SRE_EL1`: bit 0 SRE, bit 1 DFB, bit 2 DIB.
    write_icc_sre_el1, "S3_0_C12_C12_5"
);
icc_write!(
    /// `ICC_PMR_EL1`, the priority mask (0xff lets every priority through).
    write_icc_pmr_el1, "S3_0_C4_C6_0"
);
icc_write!(
    /// `ICC_BPR1_EL1`, the group 1 binary point.
    write_icc_bpr1_el1, "S3_0_C12_C12_3"
);
icc_write!(
    /// `ICC_CTLR_EL1` (0: EOImode 0, a write to EOIR also deactivates).
    write_icc_ctlr_el1, "S3_0_C12_C12_4"
);
icc_write!(
    /// `ICC_IGRPEN1_EL1`, group 1 interrupt enable.
    write_icc_igrpen1_el1, "S3_0_C12_C12_7"
);
icc_read!(
    /// `ICC_IAR1_EL1`: acknowledges the highest-priority pending group 1 interrupt.
    read_icc_iar1_el1, "S3_0_C12_C12_0"
);
icc_write!(
    /// `ICC_EOIR1_EL1`: ends (drops priority of and deactivates) an interrupt.
    write_icc_eoir1_el1, "S3_0_C12_C12_1"
);
icc_write!(
    /// `ICC_SGI1R_EL1`: generates a group 1 SGI.
    write_icc_sgi1r_el1, "S3_0_C12_C11_5"
);
