//! GIC register blocks (offsets from the GICv2 and GICv3 architecture specifications,
//! IHI 0048B and IHI 0069; Linux `include/linux/irqchip/arm-gic.h`, `arm-gic-v3.h`).

use tock_registers::register_bitfields;
use tock_registers::register_structs;
use tock_registers::registers::{ReadOnly, ReadWrite, WriteOnly};

register_bitfields! {u32,
    /// `GICD_TYPER`.
    pub GICD_TYPER [
        /// Implemented interrupt lines: 32 × (N + 1).
        ITLinesNumber OFFSET(0) NUMBITS(5) [],
    ],
    /// `GICR_WAKER`.
    pub GICR_WAKER [
        ProcessorSleep OFFSET(1) NUMBITS(1) [],
        ChildrenAsleep OFFSET(2) NUMBITS(1) [],
    ],
}

register_bitfields! {u64,
    /// `GICR_TYPER`.
    pub GICR_TYPER [
        /// The redistributor has GICv4 virtual LPI frames (two more 64 KiB frames).
        VLPIS OFFSET(1) NUMBITS(1) [],
        /// This is the last redistributor in the region.
        Last OFFSET(4) NUMBITS(1) [],
        /// Aff3.Aff2.Aff1.Aff0 of the CPU this redistributor serves.
        Affinity OFFSET(32) NUMBITS(32) [],
    ],
}

/// `GICD_CTLR` bits. GICv2: bit 0 enables forwarding (group 0, or group 1 in the non-secure
/// view). GICv3: bit 1 enables group 1 (non-secure view and DS=1), bit 4 ARE (affinity
/// routing), bit 31 RWP (register write pending).
pub const GICD_CTLR_ENABLE: u32 = 1 << 0;
pub const GICD_CTLR_ENABLE_G1: u32 = 1 << 1;
pub const GICD_CTLR_ARE: u32 = 1 << 4;
pub const GICD_CTLR_RWP: u32 = 1 << 31;
/// `GICR_CTLR.RWP`.
pub const GICR_CTLR_RWP: u32 = 1 << 3;

register_structs! {
    /// The distributor. GICv2 implements up to `sgir` (4 KiB); GICv3 adds `irouter` and ignores
    /// `itargetsr`/`sgir` under affinity routing.
    pub GicdRegs {
        (0x0000 => pub ctlr: ReadWrite<u32>),
        (0x0004 => pub typer: ReadOnly<u32, GICD_TYPER::Register>),
        (0x0008 => pub iidr: ReadOnly<u32>),
        (0x000c => _reserved0),
        (0x0080 => pub igroupr: [ReadWrite<u32>; 32]),
        (0x0100 => pub isenabler: [ReadWrite<u32>; 32]),
        (0x0180 => pub icenabler: [ReadWrite<u32>; 32]),
        (0x0200 => pub ispendr: [ReadWrite<u32>; 32]),
        (0x0280 => pub icpendr: [ReadWrite<u32>; 32]),
        (0x0300 => pub isactiver: [ReadWrite<u32>; 32]),
        (0x0380 => pub icactiver: [ReadWrite<u32>; 32]),
        (0x0400 => pub ipriorityr: [ReadWrite<u8>; 1020]),
        (0x07fc => _reserved1),
        (0x0800 => pub itargetsr: [ReadWrite<u8>; 1020]),
        (0x0bfc => _reserved2),
        (0x0c00 => pub icfgr: [ReadWrite<u32>; 64]),
        (0x0d00 => _reserved3),
        (0x0f00 => pub sgir: WriteOnly<u32>),
        (0x0f04 => _reserved4),
        (0x6000 => pub irouter: [ReadWrite<u64>; 1020]),
        (0x7fe0 => _reserved5),
        (0x8000 => @END),
    }
}

register_structs! {
    /// The GICv2 CPU interface (banked per CPU at the same address).
    pub GiccRegs {
        (0x0000 => pub ctlr: ReadWrite<u32>),
        (0x0004 => pub pmr: ReadWrite<u32>),
        (0x0008 => pub bpr: ReadWrite<u32>),
        (0x000c => pub iar: ReadOnly<u32>),
        (0x0010 => pub eoir: WriteOnly<u32>),
        (0x0014 => @END),
    }
}

register_structs! {
    /// A GICv3 redistributor's control frame (`RD_base`).
    pub GicrRdRegs {
        (0x0000 => pub ctlr: ReadWrite<u32>),
        (0x0004 => pub iidr: ReadOnly<u32>),
        (0x0008 => pub typer: ReadOnly<u64, GICR_TYPER::Register>),
        (0x0010 => pub statusr: ReadWrite<u32>),
        (0x0014 => pub waker: ReadWrite<u32, GICR_WAKER::Register>),
        (0x0018 => @END),
    }
}

register_structs! {
    /// A GICv3 redistributor's SGI/PPI frame (`SGI_base` = `RD_base` + 64 KiB).
    pub GicrSgiRegs {
        (0x0000 => _reserved0),
        (0x0080 => pub igroupr0: ReadWrite<u32>),
        (0x0084 => _reserved1),
        (0x0100 => pub isenabler0: ReadWrite<u32>),
        (0x0104 => _reserved2),
        (0x0180 => pub icenabler0: ReadWrite<u32>),
        (0x0184 => _reserved3),
        (0x0280 => pub icpendr0: ReadWrite<u32>),
        (0x0284 => _reserved4),
        (0x0380 => pub icactiver0: ReadWrite<u32>),
        (0x0384 => _reserved5),
        (0x0400 => pub ipriorityr: [ReadWrite<u8>; 32]),
        (0x0420 => _reserved6),
        (0x0c00 => pub icfgr: [ReadWrite<u32>; 2]),
        (0x0c08 => @END),
    }
}
