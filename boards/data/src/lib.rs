//! Board descriptions. TODO (placeholder created with the workspace skeleton).
#![no_std]
#![forbid(unsafe_code)]
