//! Bindings of the NFQUEUE network emulator (see `tierscope.experiment.netem`).

use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::to_py_err;
use crate::netem::{Config, Netem as Engine};

/// A running emulator: it binds its queues when created and holds, delays and drops their
/// packets until `stop`.
#[pyclass(module = "tierscope._native")]
struct Netem {
    engine: Engine,
}

#[pymethods]
impl Netem {
    #[new]
    fn new(py: Python<'_>, config_json: String) -> PyResult<Self> {
        let engine = py
            .detach(move || Config::from_json(&config_json).and_then(Engine::start))
            .map_err(to_py_err)?;
        Ok(Netem { engine })
    }

    /// Lets every held packet through and stops (waits for the loop to end).
    fn stop(&self, py: Python<'_>) {
        let e = &self.engine;
        py.detach(move || {
            e.stop();
            e.join();
        });
    }

    /// Per link: queue, packets, lost, delay_sum (seconds), held_max.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.engine
            .stats()
            .iter()
            .map(|s| {
                let d = PyDict::new(py);
                d.set_item("queue", s.queue)?;
                d.set_item("packets", s.packets)?;
                d.set_item("lost", s.lost)?;
                d.set_item("delay_sum", s.delay_sum)?;
                d.set_item("held_max", s.held_max)?;
                Ok(d)
            })
            .collect()
    }

    /// Why the loop stopped on its own, if it did.
    fn failure(&self) -> Option<String> {
        self.engine.failure()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Netem>()
}
