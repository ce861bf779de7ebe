//! The console stream stays well formed when every CPU prints text and defmt frames at once:
//! the captured bytes (console tap) split into text and frames exactly as the host does
//! (text until 0x1E, then a frame until 0x00), every frame is non-empty, the frame count is
//! what was logged, and every text line arrives whole and in per-CPU order.

use alloc::vec::Vec;

use asym_sched::types::CpuId;

use crate::console::{tap_start, tap_stop, FRAME_START};
use crate::dt::MAX_CPUS;
use crate::selftest::{TestError, TestResult};
use crate::{selftest, test_assert, test_eq};

const PER_CPU: u32 = 8;

fn emit(cpu: CpuId) {
    for seq in 0..PER_CPU {
        crate::println!("logtest cpu={} seq={}", cpu.0, seq);
        // `println!` frames are emitted whatever the log level.
        defmt::println!("logtest {=u16} {=u32}", cpu.0, seq);
    }
}

fn console_stream_well_formed_all_cpus() -> TestResult {
    tap_start();
    let res = crate::smp::run_on_all_cpus(emit);
    let (bytes, dropped) = tap_stop();
    test_assert!(res.is_ok(), "run_on_all_cpus: {:?}", res);
    test_eq!(dropped, 0);

    let mut text: Vec<u8> = Vec::new();
    let (mut frames, mut in_frame, mut frame_len) = (0u32, false, 0usize);
    for &b in &bytes {
        if in_frame {
            if b == 0 {
                test_assert!(frame_len > 0, "empty frame at frame {}", frames);
                frames += 1;
                in_frame = false;
            } else {
                frame_len += 1;
            }
        } else if b == FRAME_START {
            in_frame = true;
            frame_len = 0;
        } else {
            test_assert!(b != 0, "0x00 in text after {} frames", frames);
            text.push(b);
        }
    }
    test_assert!(!in_frame, "stream ends inside a frame");
    let online: Vec<CpuId> = crate::smp::online_cpus().collect();
    test_eq!(frames, online.len() as u32 * PER_CPU);

    let text = core::str::from_utf8(&text)
        .map_err(|e| TestError::new(format_args!("text not UTF-8: {e}")))?;
    let mut next = [0u32; MAX_CPUS];
    for line in text.split("\r\n").filter(|l| !l.is_empty()) {
        let parsed = line
            .strip_prefix("logtest cpu=")
            .and_then(|r| r.split_once(" seq="))
            .and_then(|(c, s)| Some((c.parse::<usize>().ok()?, s.parse::<u32>().ok()?)));
        let Some((cpu, seq)) = parsed.filter(|(c, _)| *c < MAX_CPUS) else {
            return Err(TestError::new(format_args!("mangled text line {line:?}")));
        };
        test_eq!(seq, next[cpu]);
        next[cpu] += 1;
    }
    for cpu in online {
        test_eq!(next[cpu.index()], PER_CPU);
    }
    Ok(())
}
selftest!(
    name = "console_stream_all_cpus",
    console_stream_well_formed_all_cpus
);
