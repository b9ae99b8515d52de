//! Statistics over measured data (no pyo3 here).
//!
//! - `windows`: per-window queue, throughput and response-time statistics of one tier's
//!   request records, by an exact event sweep.

pub mod windows;
