//! Links the probe as a static Linux executable: no C library, `_start` is ours.

fn main() {
    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("aarch64") {
        println!("cargo:rustc-link-arg-bins=-static");
        println!("cargo:rustc-link-arg-bins=--entry=_start");
        println!("cargo:rustc-link-arg-bins=--strip-all");
        // Linux loads PT_LOAD segments page by page: 4 KiB pages, as Debian's arm64 kernel.
        println!("cargo:rustc-link-arg-bins=-zmax-page-size=4096");
        println!("cargo:rustc-link-arg-bins=--image-base=0x400000");
    }
}
