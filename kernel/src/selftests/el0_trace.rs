//! The `trace_marker` system call (docs/syscalls.md): an EL0 task's rt-app markers and other
//! text reach the kernel's trace as `tracing_mark_write` lines in the task's context, as
//! Linux's `trace_marker` file puts them; a bad pointer or length is refused as for `write`,
//! and a write while the trace is off is refused (`-EBADF`) and leaves nothing behind.

use alloc::string::String;
use alloc::vec::Vec;

use asym_sched::types::CpuMask;

use crate::selftest::{TestError, TestResult};
use crate::task::{self, ExitStatus, ThreadParams, ThreadState};
use crate::user::{self, DATA_VA};
use crate::{selftest, test_assert, test_eq};

use crate::user::el0_program as blob;

// x0 unused. 1: a marker while the trace is off is -EBADF; 2: `wait` for the kernel, which
// turns the trace on and wakes it; 3-6: four markers, each returning its length; 7-9: a
// kernel pointer, a length over 1024, a range running off the data page are refused.
// exit(0), or the number of the failed check.
core::arch::global_asm!(
    r#"
    .section .rodata.el0marker, "a"
    .balign 4
    .global __el0_marker_start
__el0_marker_start:
    mov     x21, #1
    adr     x0, 20f
    mov     x1, #(21f - 20f)
    mov     x8, #14
    svc     #0
    cmn     x0, #9
    b.ne    8f
    mov     x21, #2
    mov     x0, #-1
    mov     x8, #8
    svc     #0
    cbnz    x0, 8f
    mov     x21, #3
    adr     x0, 21f
    mov     x1, #(22f - 21f)
    mov     x8, #14
    svc     #0
    cmp     x0, #(22f - 21f)
    b.ne    8f
    mov     x21, #4
    adr     x0, 22f
    mov     x1, #(23f - 22f)
    mov     x8, #14
    svc     #0
    cmp     x0, #(23f - 22f)
    b.ne    8f
    mov     x21, #5
    adr     x0, 23f
    mov     x1, #(24f - 23f)
    mov     x8, #14
    svc     #0
    cmp     x0, #(24f - 23f)
    b.ne    8f
    mov     x21, #6
    adr     x0, 24f
    mov     x1, #(25f - 24f)
    mov     x8, #14
    svc     #0
    cmp     x0, #(25f - 24f)
    b.ne    8f
    mov     x21, #7
    mov     x0, #0x40000000
    mov     x1, #8
    mov     x8, #14
    svc     #0
    cmn     x0, #14
    b.ne    8f
    mov     x21, #8
    adr     x0, 24f
    mov     x1, #1025
    mov     x8, #14
    svc     #0
    cmn     x0, #22
    b.ne    8f
    mov     x21, #9
    ldr     x0, 7f
    add     x0, x0, #4090
    mov     x1, #16
    mov     x8, #14
    svc     #0
    cmn     x0, #14
    b.ne    8f
    mov     x21, #0
8:  mov     x0, x21
    mov     x8, #0
    svc     #0
    .balign 8
7:  .quad   {data_va}
20: .ascii  "rtapp_task: event=start\n"
21: .ascii  "rtapp_main: event=clock_ref data=1234\n"
22: .ascii  "rtapp_loop: event=start thread_loop=3 phase=1 phase_loop=2\n"
23: .ascii  "rtapp_stats: period=16000 run=1650 wu_lat=7 slack=-12 c_period=16000 c_run=1600"
24: .ascii  "el0 says: a marker of more than one trace record, 63 bytes long"
25:
    .balign 4
    .global __el0_marker_end
__el0_marker_end:
    .text
"#,
    data_va = const DATA_VA,
);

blob!(marker, __el0_marker_start, __el0_marker_end);

/// Records per CPU ring for this test (the rings are allocated once, on first use).
const RECORDS: usize = 1024;

fn err(e: impl core::fmt::Display) -> TestError {
    TestError::new(format_args!("{e}"))
}

fn el0_trace_marker() -> TestResult {
    let nr_cpus = crate::sched::nr_cpus();
    test_assert!(
        crate::tracing::init(nr_cpus, RECORDS),
        "no memory for {} trace records per CPU",
        RECORDS
    );
    crate::tracing::disable();
    let params = ThreadParams {
        affinity: CpuMask(u64::MAX),
        ..ThreadParams::default()
    };
    let id = user::spawn("el0-marker", params, marker(), 0).map_err(err)?;
    let waiting = super::sched::wait_until(2_000_000_000, || user::waits(id));
    // Records from before now (another test's) are no part of this trace.
    let mut sink = |_: &[u8]| Ok::<(), ()>(());
    let _ = crate::tracing::drain(nr_cpus, &[], &mut sink);
    crate::tracing::enable();
    user::wake_from_kernel(id);
    // Drained while the task is a zombie: the drain names a thread by its slot's name, which
    // a join frees.
    let exited = super::sched::wait_until(5_000_000_000, || {
        task::get(id).is_none_or(|t| t.state() == ThreadState::Zombie)
    });
    let mut out: Vec<u8> = Vec::new();
    let _ = crate::tracing::drain(nr_cpus, &[], |b: &[u8]| {
        out.extend_from_slice(b);
        Ok::<(), ()>(())
    });
    let st = task::join(id).map_err(|e| err(format_args!("{e:?}")))?;
    test_eq!(st, ExitStatus::Exited(0));
    test_assert!(exited, "el0-marker did not exit");
    test_assert!(waiting, "el0-marker never waited for the kernel");
    let text = String::from_utf8(out).map_err(|_| err("the trace is not UTF-8"))?;
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("tracing_mark_write:"))
        .collect();
    let want = [
        "tracing_mark_write: rtapp_main: event=clock_ref data=1234",
        "tracing_mark_write: rtapp_loop: event=start thread_loop=3 phase=1 phase_loop=2",
        "tracing_mark_write: rtapp_stats: period=16000 run=1650 wu_lat=7 slack=-12 c_period=16000 c_run=1600",
        "tracing_mark_write: el0 says: a marker of more than one trace record, 63 bytes long",
    ];
    test_eq!(lines.len(), want.len());
    for (line, w) in lines.iter().zip(want) {
        test_assert!(
            line.ends_with(w) && line.trim_start().starts_with("el0-marker-"),
            "trace line {:?}: expected el0-marker's {:?}",
            line,
            w
        );
    }
    Ok(())
}

selftest!(name = "el0_trace_marker", el0_trace_marker);
