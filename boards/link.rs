// The build script every board binary shares (`include!`d by `boards/<name>/build.rs`): links
// the board binary with `linker/<name>.ld` (the board's MEMORY, which INCLUDEs
// `linker/kernel.ld`) and defmt's `defmt.x`, for the bare-metal target only. `<name>` is the
// package name without its `asym-` prefix.

fn main() {
    let manifest = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let package = std::env::var("CARGO_PKG_NAME").expect("cargo sets CARGO_PKG_NAME");
    let board = package.strip_prefix("asym-").unwrap_or(&package);
    let linker_dir = std::path::Path::new(&manifest).join("../../linker");
    let script = format!("{board}.ld");
    for f in [script.as_str(), "kernel.ld"] {
        println!("cargo:rerun-if-changed={}", linker_dir.join(f).display());
    }
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        println!("cargo:rustc-link-search={}", linker_dir.display());
        println!("cargo:rustc-link-arg-bins=-T{script}");
        println!("cargo:rustc-link-arg-bins=-Tdefmt.x");
    }
}
