//! TODO: kernel (placeholder created with the workspace skeleton).
#![no_std]
