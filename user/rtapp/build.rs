//! Links the EL0 rt-app executor as a static ELF at the address the kernel loads EL0 programs
//! at (`crate::user::ELF_BASE` in the kernel: `USER_BASE + 1 MiB`), with 4 KiB segment
//! alignment so that no two segments share a page (the kernel maps them page by page, W^X).

fn main() {
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("none") {
        println!("cargo:rustc-link-arg-bins=-static");
        println!("cargo:rustc-link-arg-bins=--entry=_start");
        println!("cargo:rustc-link-arg-bins=--strip-all");
        println!("cargo:rustc-link-arg-bins=-zmax-page-size=4096");
        println!("cargo:rustc-link-arg-bins=-zseparate-loadable-segments");
        println!("cargo:rustc-link-arg-bins=--image-base=0xffffff8000100000");
    }
}
