//! Pure encodings of GIC register values, kept apart from the MMIO and system-register code so
//! the host unit tests (`cargo test -p asym-kernel`) check them against the architecture's field
//! layouts: `ICC_SGI1R_EL1` (Arm ARM D24.2, GICv3 IHI 0069 12.2.25), `GICR_TYPER.Affinity_Value`
//! (IHI 0069 12.11.34) and `GICD_SGIR` (GICv2 IHI 0048B 4.3.15). Linux: `gic_send_sgi`,
//! `gic_iterate_rdists`'s affinity comparison, `gic_ipi_send_mask` (v2).

/// `MPIDR_EL1` affinity (Aff3 at bits 39:32, Aff2.Aff1.Aff0 at 23:0) in the packed form
/// `GICR_TYPER[63:32]` reports: Aff3.Aff2.Aff1.Aff0 in 32 bits.
pub const fn gicr_affinity(mpidr: u64) -> u64 {
    ((mpidr >> 8) & 0xff00_0000) | (mpidr & 0xff_ffff)
}

/// `ICC_SGI1R_EL1` value sending SGI `sgi` to the one CPU with affinity `mpidr`: TargetList
/// bit `Aff0 % 16`, range selector `Aff0 / 16`, IRM 0 (use the target list).
pub const fn icc_sgi1r(mpidr: u64, sgi: u8) -> u64 {
    let aff0 = mpidr & 0xff;
    let aff1 = (mpidr >> 8) & 0xff;
    let aff2 = (mpidr >> 16) & 0xff;
    let aff3 = (mpidr >> 32) & 0xff;
    (aff3 << 48)
        | ((aff0 >> 4) << 44)
        | (aff2 << 32)
        | (((sgi & 0xf) as u64) << 24)
        | (aff1 << 16)
        | (1 << (aff0 & 0xf))
}

/// `GICD_SGIR` value sending SGI `sgi` to the CPU interfaces in `cpu_if_mask`
/// (TargetListFilter 0: use the list; NSATT 0).
pub const fn gicd_sgir(cpu_if_mask: u8, sgi: u8) -> u32 {
    ((cpu_if_mask as u32) << 16) | (sgi & 0xf) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sgi1r_targets_cpu0_of_cluster0() {
        // SGI 1 to MPIDR 0: INTID 1 in bits 27:24, TargetList bit 0.
        assert_eq!(icc_sgi1r(0x0, 1), 0x0100_0001);
    }

    #[test]
    fn sgi1r_puts_aff1_in_bits_23_16() {
        // Juno r2's third LITTLE core, MPIDR 0x102: Aff1 = 1, TargetList bit 2.
        assert_eq!(icc_sgi1r(0x102, 3), 0x0301_0004);
    }

    #[test]
    fn sgi1r_uses_range_selector_above_aff0_15() {
        // Aff0 = 0x13 = 19: RS = 1 (bit 44), TargetList bit 3.
        assert_eq!(icc_sgi1r(0x13, 0), 0x0000_1000_0000_0008);
    }

    #[test]
    fn sgi1r_puts_aff2_and_aff3_high() {
        // Aff3 = 0x1 (MPIDR bits 39:32), Aff2 = 0x2: bits 55:48 and 39:32.
        assert_eq!(icc_sgi1r(0x01_0002_0000, 15), 0x0001_0002_0f00_0001);
    }

    #[test]
    fn sgi_number_is_masked_to_four_bits() {
        assert_eq!(icc_sgi1r(0, 0x12) >> 24 & 0xf, 2);
        assert_eq!(gicd_sgir(1, 0x12) & 0xf, 2);
    }

    #[test]
    fn gicr_affinity_packs_aff3_next_to_aff2() {
        assert_eq!(gicr_affinity(0x0), 0);
        assert_eq!(gicr_affinity(0x103), 0x103);
        assert_eq!(gicr_affinity(0x01_0002_0304), 0x0102_0304);
        // MT and U bits (24, 30) and RES1 bit 31 of MPIDR_EL1 are not affinity.
        assert_eq!(gicr_affinity(0x8100_0001), 0x1);
    }

    #[test]
    fn gicd_sgir_sets_target_list_and_filter_zero() {
        // CPU interface 2 (bit 2): TargetList 0x04 in bits 23:16, filter bits 25:24 zero.
        assert_eq!(gicd_sgir(0x04, 5), 0x0004_0005);
        assert_eq!(gicd_sgir(0xff, 0) >> 24, 0);
    }
}
