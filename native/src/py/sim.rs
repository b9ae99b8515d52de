//! Bindings for the discrete-event simulator (`crate::des`).
//!
//! Design: `Simulator` wraps one `des::Simulation` (one replication) and
//! runs it with the GIL released, so Python can drive several replications
//! from threads. Results cross as a plain dict of flat lists (row-major), the
//! cheapest shape for `numpy.asarray(...).reshape(...)`; nothing is kept on
//! the Rust side once returned.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::to_py_err;
use crate::des::spec::{CapacityChange, Change};
use crate::des::{Advance, Simulation};

/// One replication of a simulated queueing network.
///
/// `Simulator(spec_json, seed, replication=0)` parses the JSON spec (raising
/// `ValueError` naming the offending field) and places closed populations at
/// their reference stations at time 0.
#[pyclass(module = "tierscope._native")]
struct Simulator {
    sim: Simulation,
}

#[pymethods]
impl Simulator {
    #[new]
    #[pyo3(signature = (spec_json, seed, replication = 0))]
    fn new(py: Python<'_>, spec_json: String, seed: u64, replication: u64) -> PyResult<Self> {
        let sim = py
            .detach(move || Simulation::new(&spec_json, seed, replication))
            .map_err(to_py_err)?;
        Ok(Simulator { sim })
    }

    /// Simulates until time `until` or `max_events` more events, whichever
    /// comes first, and returns the windows completed since the last call
    /// (and trace rows, if the spec asked for them).
    #[pyo3(signature = (until, max_events))]
    fn advance<'py>(
        &mut self,
        py: Python<'py>,
        until: f64,
        max_events: u64,
    ) -> PyResult<Bound<'py, PyDict>> {
        check_until(until)?;
        let sim = &mut self.sim;
        let out = py.detach(move || sim.advance(until, max_events));
        to_dict(py, out)
    }

    /// From time `time` (not before `now`), balance stations send station
    /// `station` jobs (`active`) or no longer do (the jobs it holds finish).
    fn set_active(&mut self, time: f64, station: usize, active: bool) -> PyResult<()> {
        self.change(time, station, Change::Active(active))
    }

    /// From time `time` (not before `now`), station `station` has a CFS quota of
    /// `budget` CPU seconds per period (`None`: no quota).
    #[pyo3(signature = (time, station, budget))]
    fn set_budget(&mut self, time: f64, station: usize, budget: Option<f64>) -> PyResult<()> {
        self.change(time, station, Change::Budget(budget))
    }

    /// Simulated time.
    #[getter]
    fn now(&self) -> f64 {
        self.sim.now()
    }

    /// Events processed so far.
    #[getter]
    fn events(&self) -> u64 {
        self.sim.events()
    }
}

impl Simulator {
    fn change(&mut self, time: f64, station: usize, change: Change) -> PyResult<()> {
        let c = CapacityChange {
            time,
            station,
            change,
        };
        self.sim.schedule_change(c).map_err(to_py_err)
    }
}

/// A fresh `Simulator(spec_json, seed, replication)` advanced once.
#[pyfunction]
#[pyo3(signature = (spec_json, seed, replication, until, max_events))]
fn simulate_once<'py>(
    py: Python<'py>,
    spec_json: String,
    seed: u64,
    replication: u64,
    until: f64,
    max_events: u64,
) -> PyResult<Bound<'py, PyDict>> {
    check_until(until)?;
    let out = py
        .detach(move || {
            Simulation::new(&spec_json, seed, replication).map(|mut s| s.advance(until, max_events))
        })
        .map_err(to_py_err)?;
    to_dict(py, out)
}

fn check_until(until: f64) -> PyResult<()> {
    if until.is_nan() {
        return Err(PyValueError::new_err(
            "until must be a time (inf for no limit), got nan",
        ));
    }
    Ok(())
}

fn to_dict(py: Python<'_>, out: Advance) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("now", out.now)?;
    d.set_item("events", out.events)?;
    d.set_item("wall_s", out.wall_s)?;
    let w = out.windows;
    let wd = PyDict::new(py);
    wd.set_item("t_start", w.t_start)?;
    wd.set_item("arrivals", w.arrivals)?;
    wd.set_item("completions", w.completions)?;
    wd.set_item("rt_sum", w.rt_sum)?;
    wd.set_item("rt_max", w.rt_max)?;
    wd.set_item("q_area", w.q_area)?;
    wd.set_item("q_max", w.q_max)?;
    wd.set_item("busy_area", w.busy_area)?;
    wd.set_item("drops", w.drops)?;
    wd.set_item("sys_completions", w.sys_completions)?;
    wd.set_item("sys_rt_sum", w.sys_rt_sum)?;
    wd.set_item("sys_rt_max", w.sys_rt_max)?;
    if !w.cpu.is_empty() {
        wd.set_item("cpu", w.cpu)?;
        wd.set_item("periods", w.periods)?;
        wd.set_item("throttled", w.throttled)?;
    }
    if !w.host.is_empty() {
        wd.set_item("host", w.host)?;
    }
    d.set_item("windows", wd)?;
    if let Some(s) = out.samples {
        let sd = PyDict::new(py);
        sd.set_item("class", s.class)?;
        sd.set_item("end", s.end)?;
        sd.set_item("rt", s.rt)?;
        d.set_item("samples", sd)?;
    }
    if let Some(t) = out.trace {
        let td = PyDict::new(py);
        td.set_item("request_id", t.request_id)?;
        td.set_item("class", t.class)?;
        td.set_item("station", t.station)?;
        td.set_item("arrival", t.arrival)?;
        td.set_item("start", t.start)?;
        td.set_item("departure", t.departure)?;
        let status: Vec<&str> = t.status.iter().map(|s| s.as_str()).collect();
        td.set_item("status", status)?;
        d.set_item("trace", td)?;
    }
    Ok(d)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Simulator>()?;
    m.add_function(wrap_pyfunction!(simulate_once, m)?)?;
    Ok(())
}
