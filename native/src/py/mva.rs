//! Bindings for exact multi-class MVA (`crate::qn::mva`).
//!
//! Design: arguments are taken as owned vectors so the solve can run with the
//! GIL released (`Python::detach`); results go back as plain lists/tuples.

use pyo3::prelude::*;

use super::to_py_err;
use crate::qn::mva::{self, MvaSolution};

type Matrix = Vec<Vec<f64>>;

fn run(
    py: Python<'_>,
    demands: Matrix,
    delay: Vec<bool>,
    alphas: Matrix,
    populations: Vec<i64>,
    think: Vec<f64>,
) -> PyResult<MvaSolution> {
    py.detach(move || mva::mva_exact(&demands, &delay, &alphas, &populations, &think))
        .map_err(to_py_err)
}

/// Exact multi-class MVA for a closed product-form network.
///
/// Returns `(X, Q, W)`: class throughputs `X[c]`, mean queue lengths
/// `Q[c][k]` and residence times `W[c][k]`. Raises `ValueError` on invalid
/// input.
#[pyfunction]
#[pyo3(signature = (demands, delay, alphas, populations, think))]
fn mva_exact(
    py: Python<'_>,
    demands: Matrix,
    delay: Vec<bool>,
    alphas: Matrix,
    populations: Vec<i64>,
    think: Vec<f64>,
) -> PyResult<(Vec<f64>, Matrix, Matrix)> {
    let s = run(py, demands, delay, alphas, populations, think)?;
    Ok((s.throughput, s.queue, s.residence))
}

/// Like `mva_exact`, also returning `P[k]` = `p_k(j | N)` for
/// `j = 0..L_k-1` at load-dependent stations (empty list elsewhere).
#[pyfunction]
#[pyo3(signature = (demands, delay, alphas, populations, think))]
fn mva_exact_marginals(
    py: Python<'_>,
    demands: Matrix,
    delay: Vec<bool>,
    alphas: Matrix,
    populations: Vec<i64>,
    think: Vec<f64>,
) -> PyResult<(Vec<f64>, Matrix, Matrix, Matrix)> {
    let s = run(py, demands, delay, alphas, populations, think)?;
    Ok((s.throughput, s.queue, s.residence, s.marginals))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(mva_exact, m)?)?;
    m.add_function(wrap_pyfunction!(mva_exact_marginals, m)?)?;
    Ok(())
}
