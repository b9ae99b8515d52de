//! Bindings for `crate::stats::windows`: the arrays are read in place through the buffer
//! protocol (no copy), the sweep runs with the GIL released, the per-window results go back as
//! float64 bytes.

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use super::to_py_err;
use crate::stats::windows;

/// The buffer's items in place (C-contiguous only).
fn contiguous<'a, T: pyo3::buffer::Element>(name: &str, buf: &'a PyBuffer<T>) -> PyResult<&'a [T]> {
    if !buf.is_c_contiguous() {
        return Err(PyValueError::new_err(format!(
            "{name} must be a C-contiguous array"
        )));
    }
    // SAFETY: the buffer is C-contiguous with item_count() items of T (PyBuffer<T> checked
    // the format); it lives as long as `buf`, and the arrays are fresh temporaries of the
    // caller (tierscope.analysis.millibottlenecks) that nothing mutates meanwhile.
    Ok(unsafe { std::slice::from_raw_parts(buf.buf_ptr().cast::<T>(), buf.item_count()) })
}

/// Native-endian bytes of a slice of plain numbers (one copy, into the bytes object).
fn raw_bytes<'py, T: Copy>(py: Python<'py>, values: &[T]) -> Bound<'py, PyBytes> {
    // SAFETY: f64 and u64 have no padding; the byte view covers exactly the slice.
    let raw = unsafe {
        std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
    };
    PyBytes::new(py, raw)
}

/// Per-window statistics of one tier from sorted float64 `starts` and `ends` (times from the
/// grid's origin) and sorted uint64 response-time `keys` ((window << 40) | microseconds).
/// Returns float64 bytes of `(q_mean, q_max, completions, rt_mean, rt_max, rt_p99)`.
#[pyfunction]
#[pyo3(signature = (starts, ends, keys, width, n))]
fn window_sweep<'py>(
    py: Python<'py>,
    starts: PyBuffer<f64>,
    ends: PyBuffer<f64>,
    keys: PyBuffer<u64>,
    width: f64,
    n: usize,
) -> PyResult<Bound<'py, PyTuple>> {
    let s = contiguous("starts", &starts)?;
    let e = contiguous("ends", &ends)?;
    let k = contiguous("keys", &keys)?;
    let w = py
        .detach(|| windows::sweep(s, e, k, width, n))
        .map_err(to_py_err)?;
    let parts = [
        &w.q_mean,
        &w.q_max,
        &w.completions,
        &w.rt_mean,
        &w.rt_max,
        &w.rt_p99,
    ];
    PyTuple::new(py, parts.iter().map(|v| raw_bytes(py, v)))
}

/// Unsorted uint64 response-time keys `(window << 40) | microseconds` of the requests of
/// float64 `start`/`end` (times from the grid's origin) that complete on the grid.
#[pyfunction]
#[pyo3(signature = (start, end, width, n))]
fn rt_keys<'py>(
    py: Python<'py>,
    start: PyBuffer<f64>,
    end: PyBuffer<f64>,
    width: f64,
    n: usize,
) -> PyResult<Bound<'py, PyBytes>> {
    let s = contiguous("start", &start)?;
    let e = contiguous("end", &end)?;
    let keys = py
        .detach(|| windows::rt_keys(s, e, width, n))
        .map_err(to_py_err)?;
    Ok(raw_bytes(py, &keys))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(window_sweep, m)?)?;
    m.add_function(wrap_pyfunction!(rt_keys, m)?)
}
