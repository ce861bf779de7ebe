//! Building the kernel for the bare-metal target and making the boot artefacts.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::cmd;
use crate::image::{elf_to_flat, Arm64Header};
use crate::uboot;

pub const TARGET: &str = "aarch64-unknown-none-softfloat";
pub const BOARD_CRATE: &str = "asym-qemu-virt";
/// Kernel-side crates that clippy checks for the bare-metal target.
pub const KERNEL_CRATES: &[&str] = &["asym-kernel", "asym-qemu-virt", "asym-sched", "asym-dvfs"];

/// What `build` produces.
#[derive(Debug, Clone)]
pub struct Artefacts {
    pub elf: PathBuf,
    pub image: PathBuf,
}

/// Whether a sysroot has the standard library for `target`.
pub fn sysroot_has_target(sysroot: &Path, target: &str) -> bool {
    sysroot
        .join("lib/rustlib")
        .join(target)
        .join("lib")
        .is_dir()
}

/// Adds the bare-metal target with rustup when the active toolchain's sysroot lacks it.
/// Never updates or installs toolchains.
pub fn ensure_target() -> Result<()> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(&rustc)
        .current_dir(cmd::workspace_root())
        .args(["--print", "sysroot"])
        .output()
        .context("running `rustc --print sysroot`")?;
    if !out.status.success() {
        bail!(
            "`rustc --print sysroot` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let sysroot = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if sysroot_has_target(&sysroot, TARGET) {
        return Ok(());
    }
    println!(
        "xtask: {} has no {TARGET} standard library; adding the target",
        sysroot.display()
    );
    cmd::run(
        Command::new("rustup")
            .current_dir(cmd::workspace_root())
            .args(["target", "add", TARGET]),
    )
    .context("adding the bare-metal target with rustup")
}

/// Directory for xtask's outputs: `<target dir>/asym`.
pub fn out_dir() -> PathBuf {
    cmd::target_dir().join("asym")
}

/// `cargo build --release` of the board binary, then the flat Image next to the ELF and in
/// `out` (default `<target>/asym`).
pub fn build(out: Option<&Path>) -> Result<Artefacts> {
    ensure_target()?;
    cmd::run(cmd::cargo().args(["build", "--release", "-p", BOARD_CRATE, "--target", TARGET]))?;
    let elf = cmd::target_dir()
        .join(TARGET)
        .join("release")
        .join(BOARD_CRATE);
    let elf_bytes =
        std::fs::read(&elf).with_context(|| format!("reading the kernel ELF {}", elf.display()))?;
    let flat = elf_to_flat(&elf_bytes)
        .with_context(|| format!("making an Image from {}", elf.display()))?;
    let header = Arm64Header::parse(&flat.bytes)
        .with_context(|| format!("checking the Image made from {}", elf.display()))?;
    if flat.entry != flat.base {
        println!(
            "xtask: warning: ELF entry {:#x} is not the Image start {:#x}; booti and QEMU start \
             at the first byte",
            flat.entry, flat.base
        );
    }
    let out = out.map(Path::to_path_buf).unwrap_or_else(out_dir);
    std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    let image = out.join("Image");
    std::fs::write(&image, &flat.bytes).with_context(|| format!("writing {}", image.display()))?;
    println!(
        "xtask: {} ({} KiB, load {:#x}, text_offset {:#x}, image_size {:#x}, {} pages{})",
        image.display(),
        flat.bytes.len().div_ceil(1024),
        flat.base,
        header.text_offset,
        header.image_size,
        header.page_size(),
        if header.phys_placement_anywhere() {
            ", any placement"
        } else {
            ""
        }
    );
    Ok(Artefacts { elf, image })
}

/// Writes `boot.scr` (and its source `boot.cmd`) for `bootargs` into `out`.
pub fn write_boot_script(out: &Path, bootargs: &str) -> Result<PathBuf> {
    let script = uboot::boot_script(bootargs);
    std::fs::write(out.join("boot.cmd"), &script)
        .with_context(|| format!("writing {}", out.join("boot.cmd").display()))?;
    let scr = uboot::script_image("asym boot", script.as_bytes())?;
    let path = out.join("boot.scr");
    std::fs::write(&path, scr).with_context(|| format!("writing {}", path.display()))?;
    println!("xtask: {} (bootargs \"{bootargs}\")", path.display());
    Ok(path)
}

/// Makes a FAT boot disk holding `Image` and `boot.scr` from `out`.
pub fn write_boot_disk(out: &Path) -> Result<PathBuf> {
    let image = std::fs::read(out.join("Image")).context("reading Image for the boot disk")?;
    let scr = std::fs::read(out.join("boot.scr")).context("reading boot.scr for the boot disk")?;
    let size_mib = (image.len() as u32 >> 20) + 32;
    let disk = uboot::fat_disk(size_mib, &[("Image", &image), ("boot.scr", &scr)])?;
    let path = out.join("boot-disk.img");
    std::fs::write(&path, disk).with_context(|| format!("writing {}", path.display()))?;
    println!("xtask: {} ({size_mib} MiB FAT disk)", path.display());
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_detection_looks_for_the_target_libdir() {
        let root = std::env::temp_dir().join(format!("asym-xtask-sysroot-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("lib/rustlib/x86_64-unknown-linux-gnu/lib")).unwrap();
        assert!(!sysroot_has_target(&root, TARGET));
        // A leftover manifest or empty dir without `lib/` is not an installed target.
        std::fs::create_dir_all(root.join("lib/rustlib").join(TARGET)).unwrap();
        assert!(!sysroot_has_target(&root, TARGET));
        std::fs::create_dir_all(root.join("lib/rustlib").join(TARGET).join("lib")).unwrap();
        assert!(sysroot_has_target(&root, TARGET));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
