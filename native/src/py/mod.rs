//! Python bindings (compiled only with the `python` feature).
//!
//! Design: bindings stay thin. They convert Python lists to owned Rust
//! vectors, release the GIL while the pure-Rust solver runs, and turn every
//! `NativeError` into a `ValueError` carrying its message unchanged.

mod loadgen;
mod mva;
mod netem;
mod sim;
mod windows;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::error::NativeError;

/// Adds every binding to the `_native` module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    loadgen::register(m)?;
    mva::register(m)?;
    netem::register(m)?;
    sim::register(m)?;
    windows::register(m)
}

/// One place decides how native errors look from Python.
pub(crate) fn to_py_err(err: NativeError) -> PyErr {
    PyValueError::new_err(err.to_string())
}
