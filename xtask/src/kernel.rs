//! Building the kernel for the bare-metal target and making the boot artefacts.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use asym_kernel::board::FdtSource;

use crate::boards::Target;
use crate::cmd;
use crate::image::{check_layout, elf_to_flat, Arm64Header, Placement};
use crate::uboot;

pub const TARGET: &str = "aarch64-unknown-none-softfloat";
/// Crates that clippy checks for the bare-metal target: the kernel's, and the static Linux
/// probe of `bench --vs-linux` (xtask/linux/probe), which is built for the same target.
pub const KERNEL_CRATES: &[&str] = &[
    "asym-kernel",
    "asym-qemu-virt",
    "asym-juno-r2",
    "asym-hikey960",
    "asym-hikey",
    "asym-abi",
    "asym-sched",
    "asym-rtapp",
    "asym-trace",
    "asym-dvfs",
    "asym-linux-probe",
    "asym-rtapp-el0",
];

/// The EL0 rt-app executor's crate (`user/rtapp`), built for [`TARGET`].
pub const EL0_RTAPP: &str = "asym-rtapp-el0";

/// Builds the EL0 rt-app executor (a static ELF the kernel loads with `rtapp_el0=`) and
/// returns its path.
pub fn build_el0_rtapp() -> Result<PathBuf> {
    ensure_target()?;
    cmd::run(cmd::cargo().args(["build", "--release", "-p", EL0_RTAPP, "--target", TARGET]))?;
    Ok(cmd::target_dir()
        .join(TARGET)
        .join("release")
        .join(EL0_RTAPP))
}

/// What `build` produces.
#[derive(Debug, Clone)]
pub struct Artefacts {
    pub board: Target,
    pub elf: PathBuf,
    pub image: PathBuf,
    /// The Image's header and where it is linked.
    pub header: Arm64Header,
    pub flat: crate::image::FlatImage,
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

/// Where a board's artefacts go by default: `<target>/asym` for QEMU virt (what the QEMU runs
/// use), `<target>/asym/<board>` for a real board.
pub fn board_out_dir(board: Target) -> PathBuf {
    match board {
        Target::QemuVirt => out_dir(),
        b => out_dir().join(b.name()),
    }
}

/// `cargo build --release` of the board binary, then the flat Image in `out` (default
/// [`board_out_dir`]).
pub fn build(board: Target, out: Option<&Path>) -> Result<Artefacts> {
    ensure_target()?;
    let krate = board.crate_name();
    cmd::run(cmd::cargo().args(["build", "--release", "-p", krate, "--target", TARGET]))?;
    let elf = cmd::target_dir().join(TARGET).join("release").join(krate);
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
    let out = out
        .map(Path::to_path_buf)
        .unwrap_or_else(|| board_out_dir(board));
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
    Ok(Artefacts {
        board,
        elf,
        image,
        header,
        flat,
    })
}

/// Checks the built Image against where `board`'s u-boot puts everything
/// ([`check_layout`]), with the boot script `out/boot.scr` (its size) in place.
pub fn check_board_layout(a: &Artefacts, script: &Path) -> Result<Vec<String>> {
    let script_len = std::fs::metadata(script)
        .with_context(|| format!("reading {}", script.display()))?
        .len();
    let p = Placement {
        layout: a.board.layout(),
        fdt_from_file: matches!(a.board.fdt(), FdtSource::File(_)),
        memory: a.board.memory().to_vec(),
        reserved: a.board.reserved(),
        script_len,
    };
    check_layout(&a.flat, &a.header, &p).with_context(|| {
        format!(
            "{}: the Image's layout does not fit the board's u-boot",
            a.board.name()
        )
    })
}

/// Writes `boot.scr` (and its source `boot.cmd`) for `board` and `bootargs` into `out`.
pub fn write_boot_script(board: Target, out: &Path, bootargs: &str) -> Result<PathBuf> {
    let script = uboot::boot_script(board.fdt(), bootargs);
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
