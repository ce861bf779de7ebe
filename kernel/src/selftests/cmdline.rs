//! The command-line parser rejects malformed options with a message naming them (the same
//! parser the host tests cover, here run in the kernel build).

use core::fmt::Write;

use crate::cmdline::{Cmdline, CmdlineError};
use crate::selftest::TestResult;
use crate::{selftest, test_assert, test_eq};

fn cmdline_rejects_malformed() -> TestResult {
    let p = Cmdline::parse("hz=5000 loglevel=verbose nosuchopt ticks=x selftest");
    test_eq!(p.errors.len(), 4);
    test_eq!(p.cmdline.hz, crate::cmdline::DEFAULT_HZ);
    test_assert!(matches!(
        p.errors[2],
        CmdlineError::Unknown {
            option: "nosuchopt"
        }
    ));
    for (e, needle) in p
        .errors
        .iter()
        .zip(["hz=5000", "loglevel=verbose", "nosuchopt", "ticks=x"])
    {
        let mut msg: heapless::String<160> = heapless::String::new();
        let _ = write!(msg, "{e}");
        test_assert!(
            msg.contains(needle),
            "message `{}` does not name `{}`",
            msg,
            needle
        );
    }
    test_assert!(p.cmdline.use_semihosting());
    Ok(())
}
selftest!(
    name = "cmdline_rejects_malformed",
    cmdline_rejects_malformed
);

fn cmdline_accepts_valid() -> TestResult {
    let p = Cmdline::parse("hz=100 maxcpus=2 ticks=5 loglevel=warn bench");
    test_assert!(p.errors.is_empty(), "{:?}", p.errors);
    test_eq!(p.cmdline.hz, 100);
    test_eq!(p.cmdline.maxcpus, Some(2));
    test_eq!(p.cmdline.ticks, Some(5));
    test_assert!(p.cmdline.bench);
    Ok(())
}
selftest!(name = "cmdline_accepts_valid", cmdline_accepts_valid);
