//! Links the board binary with `linker/qemu-virt.ld` (which includes `linker/kernel.ld`) and
//! defmt's `defmt.x`, for the bare-metal target only.

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let linker_dir = std::path::Path::new(&manifest).join("../../linker");
    println!(
        "cargo:rerun-if-changed={}",
        linker_dir.join("qemu-virt.ld").display()
    );
    println!(
        "cargo:rerun-if-changed={}",
        linker_dir.join("kernel.ld").display()
    );
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        println!("cargo:rustc-link-search={}", linker_dir.display());
        println!("cargo:rustc-link-arg-bins=-Tqemu-virt.ld");
        println!("cargo:rustc-link-arg-bins=-Tdefmt.x");
    }
}
