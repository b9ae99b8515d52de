//! Tests of the simulator against independent truths (queueing formulas,
//! exact MVA, hand-built Markov chains) and of its contracts (determinism,
//! streaming, error messages).
//!
//! Design: every test builds its spec as JSON, exactly as the Python side
//! does, and reads results only through the public `advance` output.

mod bench;
mod cpu;
mod features;
mod fuzz;
mod networks;
mod queues;

use serde_json::{json, Value};

use super::{Simulation, Windows};

/// All windows of one run, with sums over windows per (class, station).
pub struct Run {
    pub classes: usize,
    pub stations: usize,
    pub width: f64,
    pub w: Windows,
}

impl Run {
    pub fn n_windows(&self) -> usize {
        self.w.len()
    }

    /// Simulated time covered by the completed windows.
    pub fn span(&self) -> f64 {
        self.n_windows() as f64 * self.width
    }

    /// Sum over windows of a (window, class, station) metric.
    pub fn sum(&self, v: &[f64], c: usize, k: usize) -> f64 {
        let cm = self.classes * self.stations;
        (0..self.n_windows())
            .map(|w| v[w * cm + c * self.stations + k])
            .sum()
    }

    /// Sum over windows of a (window, class) metric.
    pub fn sum_class(&self, v: &[f64], c: usize) -> f64 {
        (0..self.n_windows()).map(|w| v[w * self.classes + c]).sum()
    }

    /// Mean response time per visit of class `c` at station `k`.
    pub fn rt(&self, c: usize, k: usize) -> f64 {
        self.sum(&self.w.rt_sum, c, k) / self.sum(&self.w.completions, c, k)
    }

    /// Throughput of class `c` at station `k`.
    pub fn x(&self, c: usize, k: usize) -> f64 {
        self.sum(&self.w.completions, c, k) / self.span()
    }

    /// Mean number of class `c` jobs at station `k`.
    pub fn q(&self, c: usize, k: usize) -> f64 {
        self.sum(&self.w.q_area, c, k) / self.span()
    }
}

/// Runs `spec` for `max_events` events (or until `until`).
pub fn run(spec: &Value, seed: u64, until: f64, max_events: u64) -> Run {
    let mut sim = Simulation::new(&spec.to_string(), seed, 0).expect("valid spec");
    let out = sim.advance(until, max_events);
    Run {
        classes: spec["classes"].as_array().map_or(0, Vec::len),
        stations: spec["stations"].as_array().map_or(0, Vec::len),
        width: spec["window"].as_f64().unwrap_or(1.0),
        w: out.windows,
    }
}

/// `spec` twice: for the Markov fast path (where the model allows it) and
/// forced onto the event engine, so each test checks both against its truth.
pub fn both_engines(spec: &Value) -> [Value; 2] {
    let mut events = spec.clone();
    events["markov"] = Value::Bool(false);
    [spec.clone(), events]
}

pub fn exp(mean: f64) -> Value {
    json!({"dist": "exp", "mean": mean})
}

/// One open class through one queue, then out.
pub fn single_queue(
    lambda: f64,
    service: Value,
    discipline: &str,
    servers: u32,
    capacity: Option<u32>,
) -> Value {
    json!({
        "stations": [{"name": "q", "kind": "queue", "discipline": discipline,
                      "servers": servers, "capacity": capacity}],
        "classes": [{"name": "a", "open": true, "interarrival": exp(1.0 / lambda)}],
        "service": [[service]],
        "routing": [],
        "entry": [[[0, 1.0]]],
        "window": 100.0,
    })
}

/// Asserts `got` is within `rel` of `want`.
#[track_caller]
pub fn assert_close(what: &str, got: f64, want: f64, rel: f64) {
    let err = (got - want).abs() / want.abs();
    assert!(
        err <= rel,
        "{what}: got {got}, expected {want} (error {:.2}% > {:.2}%)",
        100.0 * err,
        100.0 * rel
    );
}
