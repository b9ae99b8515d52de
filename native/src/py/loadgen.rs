//! Bindings for the load generator and its test server (`crate::loadgen`).
//!
//! Design: `LoadRun(config_json)` starts the native threads and returns at once;
//! every method is short and non-blocking except `wait`, which releases the GIL.
//! Per-request records cross as one little-endian byte string per column (read with
//! `numpy.frombuffer`), the cheapest shape for millions of rows; summaries and
//! snapshots cross as small dicts. Times are CLOCK_MONOTONIC, in nanoseconds for
//! records and samples and seconds elsewhere.

use std::time::Duration;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use super::to_py_err;
use crate::loadgen::config::{Config, Priority};
use crate::loadgen::stats::{InteractionStats, Quantiles, Record, Steady};
use crate::loadgen::{LoadRun as Run, TestServer as Server, ERROR_NAMES};

fn seconds(ns: i64) -> f64 {
    ns as f64 / 1e9
}

/// One column of the records, little-endian.
fn column<'py, T, const N: usize>(
    py: Python<'py>,
    chunks: &[Vec<Record>],
    field: impl Fn(&Record) -> T,
    to_le: fn(T) -> [u8; N],
) -> Bound<'py, PyBytes> {
    let n: usize = chunks.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(n * N);
    for r in chunks.iter().flatten() {
        out.extend_from_slice(&to_le(field(r)));
    }
    PyBytes::new(py, &out)
}

fn quantiles<'py>(py: Python<'py>, q: &Quantiles) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("count", q.count)?;
    d.set_item("mean", q.mean)?;
    d.set_item("min", q.min)?;
    d.set_item("p50", q.p50)?;
    d.set_item("p90", q.p90)?;
    d.set_item("p95", q.p95)?;
    d.set_item("p99", q.p99)?;
    d.set_item("p999", q.p999)?;
    d.set_item("max", q.max)?;
    Ok(d)
}

fn interaction<'py>(py: Python<'py>, s: &InteractionStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("requests", s.requests)?;
    d.set_item("errors", s.errors)?;
    d.set_item("completed", s.completed)?;
    d.set_item("bytes", s.bytes)?;
    d.set_item(
        "latency",
        quantiles(py, &Quantiles::of(&s.corrected, Some(s.sum_ns)))?,
    )?;
    d.set_item(
        "latency_uncorrected",
        quantiles(
            py,
            &Quantiles::of(&s.uncorrected, Some(s.sum_uncorrected_ns)),
        )?,
    )?;
    Ok(d)
}

/// A running load (see `tierscope.load`).
#[pyclass(module = "tierscope._native")]
struct LoadRun {
    run: Run,
}

#[pymethods]
impl LoadRun {
    /// Validates the JSON configuration and starts the worker threads.
    #[new]
    fn new(py: Python<'_>, config_json: String) -> PyResult<Self> {
        let run = py
            .detach(move || Config::from_json(&config_json).and_then(|c| Run::start(&c)))
            .map_err(to_py_err)?;
        Ok(LoadRun { run })
    }

    /// `(t0, steady_start, steady_end, load_end)` in CLOCK_MONOTONIC seconds.
    fn times(&self) -> (f64, f64, f64, f64) {
        let (a, b, c, d) = self.run.times();
        (seconds(a), seconds(b), seconds(c), seconds(d))
    }

    /// Asks the workers to stop now (returns at once).
    fn stop(&self) {
        self.run.stop();
    }

    /// Waits (without the GIL) up to `timeout_s` (None: forever); True once finished.
    #[pyo3(signature = (timeout_s = None))]
    fn wait(&self, py: Python<'_>, timeout_s: Option<f64>) -> PyResult<bool> {
        let timeout = match timeout_s {
            None => None,
            Some(t) if t.is_finite() && t >= 0.0 => Some(Duration::from_secs_f64(t)),
            Some(t) => {
                return Err(PyValueError::new_err(format!(
                    "timeout_s must be >= 0, got {t}"
                )))
            }
        };
        let run = &self.run;
        Ok(py.detach(move || run.wait(timeout)))
    }

    /// Whether every worker has finished.
    #[getter]
    fn done(&self) -> bool {
        self.run.is_done()
    }

    /// The first worker failure (None if none).
    fn failure(&self) -> Option<String> {
        self.run.failure()
    }

    /// Live counters and the latency quantiles of about the last second.
    fn snapshot<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.run.snapshot();
        let d = PyDict::new(py);
        d.set_item("now", seconds(s.now))?;
        d.set_item("sent", s.sent)?;
        d.set_item("completed", s.completed)?;
        d.set_item("errors", s.errors)?;
        d.set_item("outstanding", s.outstanding)?;
        d.set_item("active", s.active)?;
        d.set_item("connections", s.connections)?;
        d.set_item("cpu_s", seconds(s.cpu_ns))?;
        d.set_item("lag_max", seconds(s.lag_max_ns))?;
        d.set_item("late", s.late)?;
        d.set_item("not_sent", s.not_sent)?;
        d.set_item("recent", quantiles(py, &s.recent)?)?;
        d.set_item("done", s.done)?;
        Ok(d)
    }

    /// Records finished since the last call, one little-endian byte string per column:
    /// `id` u64, `intended`/`actual`/`end` i64 ns, `bytes` u64, `session` u64, `user` u32,
    /// `interaction` u16, `status` u16, `error` u8, `phase` u8.
    fn take_records<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let recs = self.run.take_records();
        let d = PyDict::new(py);
        d.set_item("n", recs.iter().map(Vec::len).sum::<usize>())?;
        d.set_item("id", column(py, &recs, |r| r.id, u64::to_le_bytes))?;
        d.set_item(
            "intended",
            column(py, &recs, |r| r.intended, i64::to_le_bytes),
        )?;
        d.set_item("actual", column(py, &recs, |r| r.actual, i64::to_le_bytes))?;
        d.set_item("end", column(py, &recs, |r| r.end, i64::to_le_bytes))?;
        d.set_item("bytes", column(py, &recs, |r| r.bytes, u64::to_le_bytes))?;
        d.set_item(
            "session",
            column(py, &recs, |r| r.session, u64::to_le_bytes),
        )?;
        d.set_item("user", column(py, &recs, |r| r.user, u32::to_le_bytes))?;
        d.set_item(
            "interaction",
            column(py, &recs, |r| r.interaction, u16::to_le_bytes),
        )?;
        d.set_item("status", column(py, &recs, |r| r.status, u16::to_le_bytes))?;
        d.set_item(
            "error",
            column(py, &recs, |r| r.error as u8, u8::to_le_bytes),
        )?;
        d.set_item("phase", column(py, &recs, |r| r.phase, u8::to_le_bytes))?;
        Ok(d)
    }

    /// Samples taken since the last call, as lists (one entry per worker and tick).
    fn take_samples<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.run.take_samples();
        let d = PyDict::new(py);
        d.set_item("t", s.iter().map(|x| seconds(x.t)).collect::<Vec<_>>())?;
        d.set_item("tick", s.iter().map(|x| x.tick).collect::<Vec<_>>())?;
        d.set_item("worker", s.iter().map(|x| x.worker).collect::<Vec<_>>())?;
        d.set_item(
            "cpu_s",
            s.iter().map(|x| seconds(x.cpu_ns)).collect::<Vec<_>>(),
        )?;
        d.set_item(
            "lag_max",
            s.iter().map(|x| seconds(x.lag_max_ns)).collect::<Vec<_>>(),
        )?;
        d.set_item(
            "lag_sum",
            s.iter().map(|x| seconds(x.lag_sum_ns)).collect::<Vec<_>>(),
        )?;
        d.set_item(
            "lag_count",
            s.iter().map(|x| x.lag_count).collect::<Vec<_>>(),
        )?;
        d.set_item("sent", s.iter().map(|x| x.sent).collect::<Vec<_>>())?;
        d.set_item(
            "completed",
            s.iter().map(|x| x.completed).collect::<Vec<_>>(),
        )?;
        d.set_item("errors", s.iter().map(|x| x.errors).collect::<Vec<_>>())?;
        d.set_item(
            "outstanding",
            s.iter().map(|x| x.outstanding).collect::<Vec<_>>(),
        )?;
        d.set_item("active", s.iter().map(|x| x.active).collect::<Vec<_>>())?;
        d.set_item(
            "connections",
            s.iter().map(|x| x.connections).collect::<Vec<_>>(),
        )?;
        d.set_item(
            "machine_busy",
            s.iter().map(|x| x.machine_busy).collect::<Vec<_>>(),
        )?;
        Ok(d)
    }

    /// The merged measurements once finished (None before).
    fn summary<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(s) = self.run.summary() else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        d.set_item("stopped", s.stopped)?;
        d.set_item(
            "priority",
            match s.priority {
                Priority::Realtime => "realtime",
                Priority::High => "high",
                Priority::Normal => "normal",
            },
        )?;
        d.set_item("priority_demoted", s.demoted)?;
        let t = &s.totals;
        let totals = PyDict::new(py);
        totals.set_item("sent", t.sent)?;
        totals.set_item("completed", t.completed)?;
        totals.set_item("errors", t.errors)?;
        totals.set_item("not_sent", t.not_sent)?;
        totals.set_item("aborted", t.aborted)?;
        totals.set_item("retries", t.retries)?;
        totals.set_item("connects", t.connects)?;
        totals.set_item("max_connections", t.max_connections)?;
        totals.set_item("sessions_started", t.sessions_started)?;
        totals.set_item("sessions_rejected", t.sessions_rejected)?;
        totals.set_item("cpu_s", seconds(t.cpu_ns))?;
        d.set_item("totals", totals)?;
        let st: &Steady = &s.steady;
        let mut per = Vec::with_capacity(st.interactions.len());
        for i in &st.interactions {
            per.push(match i {
                Some(x) => Some(interaction(py, x)?),
                None => None,
            });
        }
        d.set_item("interactions", per)?;
        d.set_item("all", interaction(py, &s.all())?)?;
        d.set_item(
            "timer_lag",
            quantiles(py, &Quantiles::of(&st.timer_lag, None))?,
        )?;
        d.set_item(
            "send_lag",
            quantiles(py, &Quantiles::of(&st.send_lag, None))?,
        )?;
        d.set_item("late", st.late)?;
        let errors = PyDict::new(py);
        for (name, n) in ERROR_NAMES.iter().zip(st.errors_by_class).skip(1) {
            if n > 0 {
                errors.set_item(*name, n)?;
            }
        }
        d.set_item("errors_by_class", errors)?;
        d.set_item("responses_in_window", st.responses_in_window)?;
        d.set_item("sessions_started", st.sessions_started)?;
        d.set_item("sessions_rejected", st.sessions_rejected)?;
        Ok(Some(d))
    }
}

/// An HTTP server with controllable latency (see `tierscope.load.testing`).
#[pyclass(module = "tierscope._native")]
struct TestServer {
    server: Server,
}

#[pymethods]
impl TestServer {
    #[new]
    fn new(py: Python<'_>, config_json: String) -> PyResult<Self> {
        let server = py
            .detach(move || Server::start_json(&config_json))
            .map_err(to_py_err)?;
        Ok(TestServer { server })
    }

    /// `(host, port)` it listens on.
    #[getter]
    fn address(&self) -> (String, u16) {
        let a = self.server.addr();
        (a.ip().to_string(), a.port())
    }

    /// Replaces the delay law (JSON in the simulator's format, or `null`).
    fn set_delay(&self, delay_json: &str) -> PyResult<()> {
        self.server.set_delay_json(delay_json).map_err(to_py_err)
    }

    /// Freezes responses for `seconds`; returns the stall's (start, end), monotonic seconds.
    fn stall(&self, seconds_: f64) -> PyResult<(f64, f64)> {
        if !(seconds_.is_finite() && seconds_ >= 0.0) {
            return Err(PyValueError::new_err(format!(
                "stall seconds must be >= 0, got {seconds_}"
            )));
        }
        let (a, b) = self.server.stall(seconds_);
        Ok((seconds(a), seconds(b)))
    }

    #[getter]
    fn requests(&self) -> u64 {
        self.server.requests()
    }

    #[getter]
    fn connections(&self) -> u64 {
        self.server.connections()
    }

    /// Log entries since the last call: lists `request_id`, `received`, `sent`
    /// (monotonic seconds), `delay` (seconds asked for), `status`.
    fn take_log<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let log = self.server.take_log();
        let d = PyDict::new(py);
        d.set_item(
            "request_id",
            log.iter()
                .map(|e| e.request_id.as_str())
                .collect::<Vec<_>>(),
        )?;
        d.set_item(
            "received",
            log.iter().map(|e| seconds(e.received)).collect::<Vec<_>>(),
        )?;
        d.set_item(
            "sent",
            log.iter().map(|e| seconds(e.sent)).collect::<Vec<_>>(),
        )?;
        d.set_item(
            "delay",
            log.iter().map(|e| seconds(e.delay_ns)).collect::<Vec<_>>(),
        )?;
        d.set_item("status", log.iter().map(|e| e.status).collect::<Vec<_>>())?;
        Ok(d)
    }

    /// Stops the server (joins its threads, closes every connection).
    fn stop(&self, py: Python<'_>) {
        let s = &self.server;
        py.detach(move || s.stop());
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<LoadRun>()?;
    m.add_class::<TestServer>()?;
    Ok(())
}
