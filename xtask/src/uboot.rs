//! u-boot artefacts: the `boot.scr` script image and a FAT boot disk for QEMU.
//!
//! `boot.scr` is a legacy u-boot image (u-boot `include/image.h`, `struct legacy_img_hdr`) of
//! type `IH_TYPE_SCRIPT`, laid out as `mkimage -A arm64 -O linux -T script -C none` lays it out
//! (u-boot `tools/default_image.c` + `common/image.c` multi-file payload): a 64-byte big-endian
//! header, then the payload `[be32 script length][be32 0][script]`. Timestamp 0, so the output
//! is reproducible.
//!
//! The disk is what a board's SD card would hold: an MBR with one bootable FAT partition
//! carrying `Image` and `boot.scr`, found by u-boot's distro boot (`scan_dev_for_boot_part` →
//! `scan_dev_for_scripts` on `virtio 0:1`).

use std::io::{Cursor, Write};

use anyhow::{ensure, Context, Result};
use asym_kernel::board::FdtSource;

const IH_MAGIC: u32 = 0x2705_1956;
const IH_OS_LINUX: u8 = 5;
const IH_ARCH_ARM64: u8 = 22;
const IH_TYPE_SCRIPT: u8 = 6;
const IH_COMP_NONE: u8 = 0;
const IH_NMLEN: usize = 32;

/// The boot script text. `bootargs` becomes `/chosen/bootargs` in the DTB handed to the kernel.
/// The DT is `${fdtcontroladdr}`, the one u-boot itself runs with (on QEMU the one QEMU built,
/// on Juno the one flashed to NOR), or a DTB file next to `Image`, loaded to `${fdt_addr_r}`
/// (u-boot then writes its memory banks and `/chosen` into it at `booti`).
/// `${devtype} ${devnum}:${distro_bootpart}` and `${prefix}` are set by distro boot while it
/// scans for `boot.scr`, so the script loads from the place it was found.
pub fn boot_script(fdt: FdtSource, bootargs: &str) -> String {
    let (load_fdt, fdt_addr) = match fdt {
        FdtSource::Control => (String::new(), "${fdtcontroladdr}"),
        FdtSource::File(name) => (
            format!(
                "load ${{devtype}} ${{devnum}}:${{distro_bootpart}} ${{fdt_addr_r}} ${{prefix}}{name}\n"
            ),
            "${fdt_addr_r}",
        ),
    };
    format!(
        "# asym boot script, made by `cargo xtask image`\n\
         echo asym: loading ${{prefix}}Image from ${{devtype}} ${{devnum}}:${{distro_bootpart}}\n\
         load ${{devtype}} ${{devnum}}:${{distro_bootpart}} ${{kernel_addr_r}} ${{prefix}}Image\n\
         {load_fdt}\
         setenv bootargs \"{bootargs}\"\n\
         booti ${{kernel_addr_r}} - {fdt_addr}\n\
         echo asym: booti returned\n"
    )
}

/// Wraps `script` in a legacy u-boot script image, byte-identical to `mkimage` with
/// `SOURCE_DATE_EPOCH=0`.
pub fn script_image(name: &str, script: &[u8]) -> Result<Vec<u8>> {
    ensure!(
        name.len() < IH_NMLEN,
        "boot script name {name:?} is longer than u-boot's {} bytes",
        IH_NMLEN - 1
    );
    let script_len = u32::try_from(script.len()).context("boot script over 4 GiB")?;
    let mut payload = Vec::with_capacity(script.len() + 8);
    payload.extend_from_slice(&script_len.to_be_bytes());
    payload.extend_from_slice(&0u32.to_be_bytes());
    payload.extend_from_slice(script);

    let mut header = [0u8; 64];
    header[0..4].copy_from_slice(&IH_MAGIC.to_be_bytes());
    // 4..8 header CRC, filled last; 8..12 timestamp 0.
    header[12..16].copy_from_slice(&(payload.len() as u32).to_be_bytes());
    // 16..20 load address 0, 20..24 entry point 0.
    header[24..28].copy_from_slice(&crc32fast::hash(&payload).to_be_bytes());
    header[28] = IH_OS_LINUX;
    header[29] = IH_ARCH_ARM64;
    header[30] = IH_TYPE_SCRIPT;
    header[31] = IH_COMP_NONE;
    header[32..32 + name.len()].copy_from_slice(name.as_bytes());
    let hcrc = crc32fast::hash(&header);
    header[4..8].copy_from_slice(&hcrc.to_be_bytes());

    let mut out = header.to_vec();
    out.extend_from_slice(&payload);
    Ok(out)
}

/// First partition starts at 1 MiB, as partitioning tools align it.
const PART_START_LBA: u32 = 2048;
const SECTOR: usize = 512;

/// An MBR disk image with one bootable FAT partition holding `files` in its root directory.
pub fn fat_disk(size_mib: u32, files: &[(&str, &[u8])]) -> Result<Vec<u8>> {
    ensure!(size_mib >= 8, "boot disk of {size_mib} MiB is too small");
    let total_sectors = size_mib * (1 << 20) / SECTOR as u32;
    let part_sectors = total_sectors - PART_START_LBA;

    let mut part = Cursor::new(vec![0u8; part_sectors as usize * SECTOR]);
    fatfs::format_volume(
        &mut part,
        fatfs::FormatVolumeOptions::new()
            .volume_label(*b"ASYM-BOOT  ")
            .volume_id(0x0a53_4d00),
    )
    .context("formatting the FAT boot partition")?;
    {
        let fs = fatfs::FileSystem::new(&mut part, fatfs::FsOptions::new())
            .context("opening the new FAT partition")?;
        for (name, data) in files {
            let mut f = fs
                .root_dir()
                .create_file(name)
                .with_context(|| format!("creating {name} on the boot partition"))?;
            f.truncate()?;
            f.write_all(data).with_context(|| {
                format!(
                    "writing {name} ({} bytes) to the boot partition; is the disk big enough?",
                    data.len()
                )
            })?;
        }
        fs.unmount().context("flushing the FAT partition")?;
    }
    let part = part.into_inner();
    let fat_type_id = if part_sectors >= 65536 * 4 {
        0x0C
    } else {
        0x0E
    };

    let mut disk = vec![0u8; PART_START_LBA as usize * SECTOR];
    let entry = &mut disk[446..462];
    entry[0] = 0x80; // bootable: distro boot scans bootable partitions first
    entry[1..4].copy_from_slice(&[0xFE, 0xFF, 0xFF]); // CHS unused: LBA only
    entry[4] = fat_type_id; // FAT32 LBA or FAT16 LBA
    entry[5..8].copy_from_slice(&[0xFE, 0xFF, 0xFF]);
    entry[8..12].copy_from_slice(&PART_START_LBA.to_le_bytes());
    entry[12..16].copy_from_slice(&part_sectors.to_le_bytes());
    disk[440..444].copy_from_slice(&0x6173_796du32.to_le_bytes()); // disk signature "msya"
    disk[510] = 0x55;
    disk[511] = 0xAA;
    disk.extend_from_slice(&part);
    Ok(disk)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::process::Command;

    #[test]
    fn script_image_header_fields_and_crcs() {
        let script = boot_script(FdtSource::Control, "selftest");
        let img = script_image("asym", script.as_bytes()).unwrap();
        let be = |o: usize| u32::from_be_bytes(img[o..o + 4].try_into().unwrap());
        assert_eq!(be(0), 0x2705_1956);
        assert_eq!(be(12) as usize, img.len() - 64);
        assert_eq!(be(64) as usize, script.len());
        assert_eq!(be(68), 0);
        assert_eq!(&img[72..], script.as_bytes());
        // Header CRC is over the header with the CRC field zeroed: recompute independently
        // with the bitwise CRC-32 (IEEE, reflected, poly 0xEDB88320).
        fn crc32(data: &[u8]) -> u32 {
            let mut crc = !0u32;
            for &b in data {
                crc ^= b as u32;
                for _ in 0..8 {
                    crc = if crc & 1 != 0 {
                        (crc >> 1) ^ 0xEDB8_8320
                    } else {
                        crc >> 1
                    };
                }
            }
            !crc
        }
        let mut h = img[..64].to_vec();
        h[4..8].fill(0);
        assert_eq!(be(4), crc32(&h));
        assert_eq!(be(24), crc32(&img[64..]));
        assert!(script_image(&"x".repeat(40), b"").is_err());
    }

    /// The real oracle: Debian's `mkimage` (u-boot-tools) must produce the same bytes.
    #[test]
    fn script_image_matches_mkimage() {
        if Command::new("mkimage").arg("-V").output().is_err() {
            eprintln!("SKIPPED: mkimage (u-boot-tools) not installed");
            return;
        }
        let dir = std::env::temp_dir().join(format!("asym-xtask-mkimage-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = boot_script(FdtSource::File("board.dtb"), "selftest hz=250");
        std::fs::write(dir.join("boot.cmd"), &script).unwrap();
        let status = Command::new("mkimage")
            .env("SOURCE_DATE_EPOCH", "0")
            .args([
                "-A", "arm64", "-O", "linux", "-T", "script", "-C", "none", "-n", "asym", "-d",
            ])
            .arg(dir.join("boot.cmd"))
            .arg(dir.join("boot.scr"))
            .output()
            .unwrap();
        assert!(status.status.success(), "{status:?}");
        let theirs = std::fs::read(dir.join("boot.scr")).unwrap();
        let ours = script_image("asym", script.as_bytes()).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(ours, theirs);
    }

    #[test]
    fn disk_has_bootable_fat_partition_with_the_files() {
        let image = vec![0x5Au8; 300_000];
        let disk = fat_disk(16, &[("Image", &image), ("boot.scr", b"script")]).unwrap();
        assert_eq!(disk.len(), 16 << 20);
        assert_eq!(&disk[510..512], &[0x55, 0xAA]);
        assert_eq!(disk[446], 0x80);
        let start = u32::from_le_bytes(disk[454..458].try_into().unwrap()) as usize;
        let count = u32::from_le_bytes(disk[458..462].try_into().unwrap()) as usize;
        assert_eq!(start, 2048);
        assert_eq!(start + count, disk.len() / 512);
        // The partition's boot sector carries a FAT BPB with 512-byte sectors.
        let part = &disk[start * 512..];
        assert_eq!(&part[510..512], &[0x55, 0xAA]);
        assert_eq!(u16::from_le_bytes([part[11], part[12]]), 512);

        let fs =
            fatfs::FileSystem::new(Cursor::new(part.to_vec()), fatfs::FsOptions::new()).unwrap();
        let mut back = Vec::new();
        fs.root_dir()
            .open_file("Image")
            .unwrap()
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, image);
    }

    #[test]
    fn file_too_big_for_disk_is_an_error() {
        let big = vec![1u8; 9 << 20];
        let e = fat_disk(8, &[("Image", &big)]).unwrap_err();
        assert!(format!("{e:#}").contains("Image"), "{e:#}");
    }
}
