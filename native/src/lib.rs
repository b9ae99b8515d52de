//! Native core of `tierscope`, exposed to Python as `tierscope._native`.
//!
//! Design: this file only wires modules together. Algorithms live in plain
//! Rust modules (`qn`, `error`) that never import pyo3; the bindings in `py`
//! are compiled only with the `python` feature, so `cargo test` needs no
//! libpython.

pub mod des;
pub mod error;
pub mod loadgen;
pub mod netem;
pub mod qn;
pub mod stats;

#[cfg(feature = "python")]
mod py;

#[cfg(feature = "python")]
use pyo3::prelude::*;

/// The `tierscope._native` extension module.
#[cfg(feature = "python")]
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // Lets Python code warn when it is running an unoptimised debug build.
    let profile = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    m.add("build_profile", profile)?;
    py::register(m)
}
