//! In-kernel self tests: a registry in the `.selftests` linker section, a runner, and the
//! `selftest!`/`test_assert!`/`test_eq!` macros.
//!
//! Linux's nearest equivalent is KUnit (`lib/kunit/`), whose suites also live in a linker
//! section (`.kunit_test_suites`). Deliberate differences: flat tests (no suites), run on the
//! boot CPU after all CPUs are up, results as plain text lines
//! (`selftest <name> ... ok|FAILED: <message>`, then `N passed, N failed`), and the run ends
//! through semihosting with status 0 only if every test passed.

use alloc::string::String;
use core::fmt;

/// A failed test's message (on the heap, so `Result<(), TestError>` stays small).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestError {
    pub message: String,
}

impl TestError {
    /// A failure with a formatted message.
    pub fn new(args: fmt::Arguments<'_>) -> Self {
        TestError {
            message: alloc::fmt::format(args),
        }
    }
}

impl fmt::Display for TestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// A test's outcome.
pub type TestResult = Result<(), TestError>;

/// One registered test.
#[derive(Debug)]
#[repr(C)]
pub struct SelfTest {
    pub name: &'static str,
    pub func: fn() -> TestResult,
}

unsafe extern "C" {
    /// First [`SelfTest`] of the `.selftests` section (linker/kernel.ld).
    static __selftests_start: u8;
    /// One past the last [`SelfTest`] of the `.selftests` section (linker/kernel.ld).
    static __selftests_end: u8;
}

/// All registered tests, in link order.
pub fn all() -> &'static [SelfTest] {
    // SAFETY: the linker script places only `SelfTest` statics (emitted by `selftest!`) between
    // the two symbols, contiguously and suitably aligned.
    unsafe {
        let start = (&raw const __selftests_start).cast::<SelfTest>();
        let end = (&raw const __selftests_end).cast::<SelfTest>();
        let len = (end as usize - start as usize) / core::mem::size_of::<SelfTest>();
        core::slice::from_raw_parts(start, len)
    }
}

/// Counts of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
}

/// Runs every test whose name contains `filter` (all if `None`) and prints each result and the
/// summary line. Running no test at all counts as one failure.
pub fn run(filter: Option<&str>) -> Summary {
    let mut s = Summary {
        passed: 0,
        failed: 0,
    };
    for t in all()
        .iter()
        .filter(|t| filter.is_none_or(|f| t.name.contains(f)))
    {
        // Every test must leave the run queues consistent (the policy crate's invariants on
        // every CPU, and the kernel's threads where the run queues say they are).
        let result = (t.func)().and_then(|()| {
            crate::sched::check_invariants().map_err(|e| {
                TestError::new(format_args!("after the test, scheduler invariants: {e}"))
            })
        });
        match result {
            Ok(()) => {
                crate::println!("selftest {} ... ok", t.name);
                s.passed += 1;
            }
            Err(e) => {
                crate::println!("selftest {} ... FAILED: {}", t.name, e);
                s.failed += 1;
            }
        }
    }
    if s.passed + s.failed == 0 {
        // A misspelt `selftest=<filter>` must not pass as "0 passed, 0 failed".
        crate::println!(
            "selftest: no test name contains {:?} ({} tests registered)",
            filter.unwrap_or(""),
            all().len()
        );
        s.failed = 1;
    }
    crate::println!("{} passed, {} failed", s.passed, s.failed);
    s
}

/// Registers a self test: `selftest!(name = "heap_stress", heap_stress);` where
/// `fn heap_stress() -> Result<(), TestError>`. Tests run in link order; `selftest!(name = ...,
/// func, last)` puts a test after all others (one that waits for the host, so its
/// host-dependent duration shifts no other test's guest time).
#[macro_export]
macro_rules! selftest {
    (name = $name:literal, $func:path, last) => {
        const _: () = {
            #[used]
            #[unsafe(link_section = ".selftests.last")]
            static SELFTEST: $crate::selftest::SelfTest = $crate::selftest::SelfTest {
                name: $name,
                func: $func,
            };
        };
    };
    (name = $name:literal, $func:path) => {
        const _: () = {
            #[used]
            #[unsafe(link_section = ".selftests")]
            static SELFTEST: $crate::selftest::SelfTest = $crate::selftest::SelfTest {
                name: $name,
                func: $func,
            };
        };
    };
}

/// Fails the test with a message unless `cond` holds.
#[macro_export]
macro_rules! test_assert {
    ($cond:expr) => {
        if !$cond {
            return Err($crate::selftest::TestError::new(format_args!(
                "assertion failed: {} at {}:{}", stringify!($cond), file!(), line!()
            )));
        }
    };
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err($crate::selftest::TestError::new(format_args!(
                "{} ({}:{})", format_args!($($arg)+), file!(), line!()
            )));
        }
    };
}

/// Fails the test unless `left == right`, showing both.
#[macro_export]
macro_rules! test_eq {
    ($left:expr, $right:expr $(,)?) => {
        match (&$left, &$right) {
            (l, r) => {
                if !(*l == *r) {
                    return Err($crate::selftest::TestError::new(format_args!(
                        "{} == {} failed: left {:?}, right {:?} ({}:{})",
                        stringify!($left),
                        stringify!($right),
                        l,
                        r,
                        file!(),
                        line!()
                    )));
                }
            }
        }
    };
}
