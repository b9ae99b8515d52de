//! Queueing-network algorithms (pure Rust, no Python dependency).
//!
//! Design: each solver lives in its own submodule and takes plain slices, so
//! it can be unit-tested with `cargo test` and reused by the thin bindings in
//! `crate::py` without any conversion layer in between.

pub mod mva;
