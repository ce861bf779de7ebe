//! Links the board binary (see `boards/link.rs`).
include!("../link.rs");
