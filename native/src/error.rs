//! Error type shared by every pure-Rust algorithm of the native core.
//!
//! Design: a single `thiserror` enum whose `Display` text is already the
//! user-facing message (it names the offending argument and index), so the
//! Python bindings can forward it verbatim as a `ValueError` without knowing
//! about individual variants.

use thiserror::Error;

/// Every way a native computation can refuse its input.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum NativeError {
    /// A list does not have the length implied by the other arguments.
    #[error("{arg} has length {got}, expected {expected} ({why})")]
    LengthMismatch {
        arg: String,
        got: usize,
        expected: usize,
        why: &'static str,
    },

    /// A numeric entry violates its documented domain.
    #[error("{arg} = {value} is invalid: must be {requirement}")]
    InvalidValue {
        arg: String,
        value: f64,
        requirement: &'static str,
    },

    /// A population entry is negative.
    #[error("populations[{index}] = {value} is invalid: must be >= 0")]
    NegativePopulation { index: usize, value: i64 },

    /// A list that must hold at least one entry is empty.
    #[error("{arg} is empty: {why}")]
    Empty { arg: String, why: &'static str },

    /// A class with jobs but no demand and no think time cycles infinitely fast.
    #[error(
        "class {class} has population > 0 but zero total demand and zero think time, \
         so its throughput is unbounded"
    )]
    UnboundedThroughput { class: usize },

    /// The population lattice layer would not fit in memory.
    #[error(
        "population lattice too large: a layer needs {needed} values, limit is {limit} \
         (reduce the number of classes or their populations)"
    )]
    LatticeTooLarge { needed: u128, limit: u128 },

    /// The simulation spec (JSON) is malformed; `field` is its JSON path.
    #[error("invalid simulation spec: {field}: {message}")]
    InvalidSpec { field: String, message: String },

    /// A load-generator or test-server configuration cannot be used; `field` is its JSON path.
    #[error("invalid load configuration: {field}: {message}")]
    InvalidLoad { field: String, message: String },
}

/// Result alias used throughout the native core.
pub type Result<T> = std::result::Result<T, NativeError>;
