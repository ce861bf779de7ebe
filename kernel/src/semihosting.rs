//! Arm semihosting (the debugger/emulator call interface): ends QEMU runs with a status, and
//! reads and writes host files for the rt-app executor (the workload in, the trace out).
//!
//! From Arm's "Semihosting for AArch32 and AArch64" (`HLT #0xF000`, operation in w0, parameter
//! in x1, result in x0). Linux does not use semihosting. Without a debugger or emulator
//! listening (every board on its own, QEMU without `-semihosting-config`), `HLT` is an
//! undefined instruction. So the one `HLT` lives at a known address
//! (`__asym_semihosting_hlt`): the exception vectors recognise an undefined-instruction
//! exception there ([`catch_undefined`]), record that there is no host and resume after it,
//! and the call reports "no host" to its caller, which ends the run another way (PSCI).
//! That costs one caught exception, once; later calls do not execute `HLT` again.

use core::arch::global_asm;
use core::sync::atomic::{AtomicU8, Ordering};

const SYS_OPEN: u64 = 0x01;
const SYS_CLOSE: u64 = 0x02;
const SYS_WRITE: u64 = 0x05;
const SYS_READ: u64 = 0x06;
const SYS_FLEN: u64 = 0x0c;
const SYS_EXIT: u64 = 0x18;
/// `SYS_OPEN` modes (the `fopen` mode strings' index): `"rb"` and `"wb"`.
const MODE_RB: u64 = 1;
const MODE_WB: u64 = 5;
/// ADP_Stopped_ApplicationExit: the application exited; the subcode is its status.
const ADP_STOPPED_APPLICATION_EXIT: u64 = 0x2_0026;

/// Whether a semihosting host answers: not known until the first call.
const UNKNOWN: u8 = 0;
const PRESENT: u8 = 1;
const ABSENT: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

// `__asym_semihosting_call(op, param) -> x0`: the semihosting trap, in its own function so
// the vectors can tell its `HLT` from any other undefined instruction by address.
global_asm!(
    r#"
    .section .text.asym_semihosting, "ax"
    .global __asym_semihosting_call
    .global __asym_semihosting_hlt
    .balign 4
__asym_semihosting_call:
__asym_semihosting_hlt:
    hlt     #0xf000
    ret
"#
);

unsafe extern "C" {
    /// Semihosting operation `op` with parameter `param` (w0/x1), result in x0. Returns
    /// whatever x0 holds when the `HLT` was undefined and skipped.
    fn __asym_semihosting_call(op: u64, param: u64) -> u64;
    /// The address of the `HLT` above.
    static __asym_semihosting_hlt: u8;
}

/// Whether a semihosting host answered a call (`None`: no call made yet).
pub fn present() -> Option<bool> {
    match STATE.load(Ordering::Relaxed) {
        PRESENT => Some(true),
        ABSENT => Some(false),
        _ => None,
    }
}

/// The exception vectors' side: an undefined-instruction exception (ESR EC 0) taken at `elr`
/// is the semihosting `HLT` with no host listening. Records that, and returns true so the
/// vectors resume after the instruction; false for any other undefined instruction.
pub fn catch_undefined(elr: u64) -> bool {
    if elr != (&raw const __asym_semihosting_hlt) as u64 {
        return false;
    }
    STATE.store(ABSENT, Ordering::Relaxed);
    true
}

/// Ends the emulation with exit status `status` (AArch64 parameter-block form of `SYS_EXIT`).
/// Returns only if there is no semihosting host (or it ignored the call): the caller must end
/// the run another way.
pub fn try_exit(status: u32) {
    if STATE.load(Ordering::Relaxed) == ABSENT {
        return;
    }
    let block: [u64; 2] = [ADP_STOPPED_APPLICATION_EXIT, u64::from(status)];
    // SAFETY: the host reads the two-word block we pass and does not return; without a host
    // the `HLT` is undefined, and `catch_undefined` makes the vectors resume after it.
    unsafe { __asym_semihosting_call(SYS_EXIT, block.as_ptr() as u64) };
    if STATE.load(Ordering::Relaxed) != ABSENT {
        STATE.store(PRESENT, Ordering::Relaxed);
    }
}

/// Why a host file operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileError {
    /// No semihosting host answers (a board, or QEMU without `-semihosting-config`).
    NoHost,
    /// The path is too long to pass (at most [`PATH_MAX`] bytes) or holds a NUL.
    BadPath,
    /// The host refused to open it.
    Open,
    /// The host reported a short read or write, or an unknown length.
    Io,
    /// The file is larger than the caller's limit (its length).
    TooLarge(usize),
}

impl core::fmt::Display for FileError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FileError::NoHost => f.write_str("no semihosting host"),
            FileError::BadPath => write!(f, "path longer than {PATH_MAX} bytes or with a NUL"),
            FileError::Open => f.write_str("the host cannot open it"),
            FileError::Io => f.write_str("the host reported a short read or write"),
            FileError::TooLarge(n) => write!(f, "{n} bytes is too large"),
        }
    }
}

/// Longest host path [`File::open`] passes.
pub const PATH_MAX: usize = 255;

/// An open host file.
#[derive(Debug)]
pub struct File {
    handle: u64,
}

impl File {
    /// Opens `path` on the host for reading (`write: false`) or to be written from scratch.
    pub fn open(path: &str, write: bool) -> Result<File, FileError> {
        if STATE.load(Ordering::Relaxed) == ABSENT {
            return Err(FileError::NoHost);
        }
        let mut name = [0u8; PATH_MAX + 1];
        if path.len() > PATH_MAX || path.bytes().any(|b| b == 0) {
            return Err(FileError::BadPath);
        }
        name[..path.len()].copy_from_slice(path.as_bytes());
        let block: [u64; 3] = [
            name.as_ptr() as u64,
            if write { MODE_WB } else { MODE_RB },
            path.len() as u64,
        ];
        let r = call(SYS_OPEN, &block)?;
        if r == u64::MAX {
            return Err(FileError::Open);
        }
        Ok(File { handle: r })
    }

    /// The file's length in bytes.
    pub fn len(&self) -> Result<usize, FileError> {
        let block = [self.handle];
        let r = call(SYS_FLEN, &block)?;
        usize::try_from(r as i64).map_err(|_| FileError::Io)
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> Result<bool, FileError> {
        Ok(self.len()? == 0)
    }

    /// Fills `buf` from the file.
    pub fn read_exact(&mut self, buf: &mut [u8]) -> Result<(), FileError> {
        let block = [self.handle, buf.as_mut_ptr() as u64, buf.len() as u64];
        // SYS_READ returns the number of bytes *not* read.
        match call(SYS_READ, &block)? {
            0 => Ok(()),
            _ => Err(FileError::Io),
        }
    }

    /// Writes all of `buf`.
    pub fn write_all(&mut self, buf: &[u8]) -> Result<(), FileError> {
        if buf.is_empty() {
            return Ok(());
        }
        let block = [self.handle, buf.as_ptr() as u64, buf.len() as u64];
        // SYS_WRITE returns the number of bytes *not* written.
        match call(SYS_WRITE, &block)? {
            0 => Ok(()),
            _ => Err(FileError::Io),
        }
    }
}

impl Drop for File {
    fn drop(&mut self) {
        let block = [self.handle];
        let _ = call(SYS_CLOSE, &block);
    }
}

/// Reads the whole host file `path`, refusing one longer than `max` bytes.
pub fn read_file(path: &str, max: usize) -> Result<alloc::vec::Vec<u8>, FileError> {
    let mut f = File::open(path, false)?;
    let len = f.len()?;
    if len > max {
        return Err(FileError::TooLarge(len));
    }
    let mut buf = alloc::vec![0u8; len];
    f.read_exact(&mut buf)?;
    Ok(buf)
}

/// One call with a parameter block; [`FileError::NoHost`] when the `HLT` found no host.
fn call(op: u64, block: &[u64]) -> Result<u64, FileError> {
    if STATE.load(Ordering::Relaxed) == ABSENT {
        return Err(FileError::NoHost);
    }
    // SAFETY: the host reads the parameter block (and the buffers it points to, which the
    // callers keep alive and sized as stated) and writes only the buffers a read names; without
    // a host the `HLT` is undefined and `catch_undefined` makes the vectors resume after it.
    let r = unsafe { __asym_semihosting_call(op, block.as_ptr() as u64) };
    if STATE.load(Ordering::Relaxed) == ABSENT {
        return Err(FileError::NoHost);
    }
    STATE.store(PRESENT, Ordering::Relaxed);
    Ok(r)
}
