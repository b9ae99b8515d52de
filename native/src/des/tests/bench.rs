//! Throughput of the engine; run with
//! `cargo test --release -- --ignored --nocapture events_per_second`.

use super::{exp, single_queue};
use crate::des::Simulation;

#[test]
#[ignore = "benchmark: run in release mode"]
fn events_per_second_mm1_rho_09() {
    let mut spec = single_queue(0.9, exp(1.0), "fcfs", 1, None);
    spec["window"] = serde_json::json!(1000.0);
    let mut sim = Simulation::new(&spec.to_string(), 1, 0).expect("valid");
    sim.advance(f64::INFINITY, 1_000_000); // warm up the slab and heaps
    let n = 20_000_000;
    let out = sim.advance(f64::INFINITY, n);
    println!(
        "M/M/1 rho=0.9 FCFS: {n} events in {:.3} s = {:.2} M events/s",
        out.wall_s,
        n as f64 / out.wall_s / 1e6
    );
    let mut spec = single_queue(0.9, exp(1.0), "ps", 1, None);
    spec["window"] = serde_json::json!(1000.0);
    let mut sim = Simulation::new(&spec.to_string(), 1, 0).expect("valid");
    sim.advance(f64::INFINITY, 1_000_000);
    let out = sim.advance(f64::INFINITY, n);
    println!(
        "M/M/1 rho=0.9 PS:   {n} events in {:.3} s = {:.2} M events/s",
        out.wall_s,
        n as f64 / out.wall_s / 1e6
    );
}
