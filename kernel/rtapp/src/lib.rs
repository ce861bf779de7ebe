//! rt-app workloads, shared by every executor: the simulator (`tests/sim`), the kernel's
//! in-kernel executor and (later) the EL0 executor.
//!
//! - [`json`]: a small JSON reader that keeps what rt-app files rely on and generic JSON
//!   crates drop: key order, repeated keys, and the line and column of every value.
//!   Numbers are integers or fixed-point decimals ([`json::Micro`]); no floats.
//! - [`workload`]: the rt-app workload model and its reader, with rt-app's semantics
//!   (`doc/tutorial.txt`, `src/rt-app_parse_config.c`, `src/rt-app.c`). Every error names
//!   the problem, the JSON path and the line and column ([`workload::WorkloadError`]).
//! - [`interp`]: the interpreter, one thread's program as a pure state machine that says
//!   what the thread does next ([`interp::Action`]); executors carry the actions out.
//! - [`marker`]: the `trace_marker` lines rt-app threads write (`rtapp_loop`, ...).
//!
//! `no_std` with `alloc`, like the policy crate: the parsed [`workload::Workload`] is built
//! once at set-up (the kernel has a heap by then); nothing after set-up allocates.
//! No `unsafe`, no floats, and no input makes it panic (fuzzed in `tests/fuzz.rs`).

#![no_std]
#![forbid(unsafe_code)]
#![warn(missing_docs)]

extern crate alloc;

pub mod interp;
pub mod json;
pub mod marker;
pub mod workload;
