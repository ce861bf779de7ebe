//! TODO: board binary (placeholder created with the workspace skeleton).
#![no_std]
#![no_main]
