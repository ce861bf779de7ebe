//! `thread_clock` and `set_name` (docs/syscalls.md), the calls the EL0 rt-app executor
//! (`user/rtapp`) adds: an unknown clock is refused; while the task spins, its work clock
//! advances by no more than its running time, which advances by no more than guest time (the
//! work clock counts `capacity_orig × f / fmax / 1024` per ns of running); `set_name` refuses
//! an empty or over-long name, a kernel pointer and text that is not UTF-8, and cuts a
//! 16-byte name to 15 as Linux's `TASK_COMM_LEN` does.

use asym_sched::types::CpuMask;

use crate::selftest::{TestError, TestResult};
use crate::task::{self, ExitStatus, ThreadParams, ThreadState};
use crate::user;
use crate::{selftest, test_assert, test_eq};

use crate::user::el0_program as blob;

// 1-2: thread_clock(2) and thread_clock(-1) are -EINVAL; 3: over a spin of 5,000 iterations
// the work clock advances, by no more than the running time, which advances by no more than
// guest time (read nested: guest, running, work before the spin and the reverse after, so each
// interval lies inside the next; read in one order both times, a big CPU at its top OPP, where
// work and running advance alike, could show more work than running by the syscalls' jitter);
// 4-7: set_name refusals (length 0, length 17, a kernel pointer, bytes that are not UTF-8);
// 8: set_name of 16 bytes succeeds. exit(0), or the number of the failed check.
core::arch::global_asm!(
    r#"
    .section .rodata.el0clock, "a"
    .balign 4
    .global __el0_clock_start
__el0_clock_start:
    mov     x21, #1
    mov     x0, #2
    mov     x8, #15
    svc     #0
    cmn     x0, #22
    b.ne    8f
    mov     x21, #2
    mov     x0, #-1
    mov     x8, #15
    svc     #0
    cmn     x0, #22
    b.ne    8f
    mov     x21, #3
    mov     x8, #4
    svc     #0
    mov     x23, x0
    mov     x0, #0
    mov     x8, #15
    svc     #0
    mov     x20, x0
    mov     x0, #1
    mov     x8, #15
    svc     #0
    mov     x19, x0
    mov     x9, #5000
1:  subs    x9, x9, #1
    b.ne    1b
    mov     x0, #1
    mov     x8, #15
    svc     #0
    sub     x19, x0, x19
    mov     x0, #0
    mov     x8, #15
    svc     #0
    sub     x20, x0, x20
    mov     x8, #4
    svc     #0
    sub     x23, x0, x23
    cbz     x19, 8f
    cmp     x20, x19
    b.lo    8f
    cmp     x23, x20
    b.lo    8f
    mov     x21, #4
    adr     x0, 30f
    mov     x1, #0
    mov     x8, #16
    svc     #0
    cmn     x0, #22
    b.ne    8f
    mov     x21, #5
    adr     x0, 30f
    mov     x1, #17
    mov     x8, #16
    svc     #0
    cmn     x0, #22
    b.ne    8f
    mov     x21, #6
    mov     x0, #0x40000000
    mov     x1, #4
    mov     x8, #16
    svc     #0
    cmn     x0, #14
    b.ne    8f
    mov     x21, #7
    adr     x0, 31f
    mov     x1, #2
    mov     x8, #16
    svc     #0
    cmn     x0, #22
    b.ne    8f
    mov     x21, #8
    adr     x0, 30f
    mov     x1, #16
    mov     x8, #16
    svc     #0
    cbnz    x0, 8f
    mov     x21, #0
8:  mov     x0, x21
    mov     x8, #0
    svc     #0
30: .ascii  "abcdefghijklmnopq"
31: .byte   0xff, 0xfe
    .balign 4
    .global __el0_clock_end
__el0_clock_end:
    .text
"#
);

blob!(clock, __el0_clock_start, __el0_clock_end);

fn err(e: impl core::fmt::Display) -> TestError {
    TestError::new(format_args!("{e}"))
}

fn el0_thread_clock_and_set_name() -> TestResult {
    let params = ThreadParams {
        affinity: CpuMask(u64::MAX),
        ..ThreadParams::default()
    };
    let id = user::spawn("el0-clock", params, clock(), 0).map_err(err)?;
    let exited = super::sched::wait_until(5_000_000_000, || {
        task::get(id).is_none_or(|t| t.state() == ThreadState::Zombie)
    });
    // The name lives in the slot until the join frees it.
    let name = task::name(id);
    let st = task::join(id).map_err(|e| err(format_args!("{e:?}")))?;
    test_assert!(exited, "el0-clock did not exit");
    test_eq!(st, ExitStatus::Exited(0));
    test_eq!(name.as_str(), "abcdefghijklmno");
    Ok(())
}

selftest!(
    name = "el0_thread_clock_and_set_name",
    el0_thread_clock_and_set_name
);
