//! Throughput of the engine (both models are Markovian, so this measures
//! the Markov path; set `"markov": false` in a spec for the event engine); run with
//! `cargo test --release -- --ignored --nocapture events_per_second`
//! (`TIERSCOPE_BENCH_EVENTS=N` changes the 20 M events per run, e.g. for a
//! shorter run under callgrind).

use super::{exp, single_queue};
use crate::des::Simulation;

fn events() -> u64 {
    std::env::var("TIERSCOPE_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000_000)
}

#[test]
#[ignore = "benchmark: run in release mode"]
fn events_per_second_mm1_rho_09() {
    let mut spec = single_queue(0.9, exp(1.0), "fcfs", 1, None);
    spec["window"] = serde_json::json!(1000.0);
    let mut sim = Simulation::new(&spec.to_string(), 1, 0).expect("valid");
    sim.advance(f64::INFINITY, 1_000_000); // warm up the slab and heaps
    let n = events();
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

/// The benchmark's closed model as `tierscope.sim` compiles it: 1,000 users
/// thinking 1 s (exp), then web (PS, 1), app (PS, 4), db (FCFS, 2).
const CLOSED_3TIER: &str = r#"{"stations": [{"name": "web", "kind": "queue", "discipline": "ps", "servers": 1, "alpha": [1.0], "capacity": null, "on_full": "drop", "retry": null, "join": null, "branches": [], "quorum": null}, {"name": "app", "kind": "queue", "discipline": "ps", "servers": 4, "alpha": [1.0, 2.0, 3.0, 4.0], "capacity": null, "on_full": "drop", "retry": null, "join": null, "branches": [], "quorum": null}, {"name": "db", "kind": "queue", "discipline": "fcfs", "servers": 2, "alpha": [1.0, 2.0], "capacity": null, "on_full": "drop", "retry": null, "join": null, "branches": [], "quorum": null}, {"name": "(think:users)", "kind": "delay", "discipline": "ps", "servers": 1, "alpha": [1.0], "capacity": null, "on_full": "drop", "retry": null, "join": null, "branches": [], "quorum": null}], "classes": [{"name": "users", "open": false, "interarrival": null, "population": 1000, "reference": 3}], "service": [[{"dist": "exp", "mean": 0.0005}, {"dist": "exp", "mean": 0.003}, {"dist": "exp", "mean": 0.0018}, {"dist": "exp", "mean": 1.0}]], "routing": [{"from": [0, 3], "to": [[0, 0, 0.3333333333333333], [0, 1, 0.3333333333333333], [0, 2, 0.3333333333333333]]}, {"from": [0, 0], "to": [[0, 0, 0.22222222222222224], [0, 1, 0.22222222222222224], [0, 2, 0.22222222222222224], [0, 3, 0.3333333333333333]]}, {"from": [0, 1], "to": [[0, 0, 0.22222222222222224], [0, 1, 0.22222222222222224], [0, 2, 0.22222222222222224], [0, 3, 0.3333333333333333]]}, {"from": [0, 2], "to": [[0, 0, 0.22222222222222224], [0, 1, 0.22222222222222224], [0, 2, 0.22222222222222224], [0, 3, 0.3333333333333333]]}], "entry": [[]], "perturbations": [], "arrival_schedule": [], "population_schedule": [], "window": 1.0, "trace": false}"#;

#[test]
#[ignore = "benchmark: run in release mode"]
fn events_per_second_closed_three_tier() {
    let mut sim = Simulation::new(CLOSED_3TIER, 1, 0).expect("valid");
    sim.advance(f64::INFINITY, 1_000_000);
    let n = events();
    let out = sim.advance(f64::INFINITY, n);
    let cycles: f64 = out.windows.sys_completions.iter().sum();
    println!(
        "closed 3-tier, 1000 users: {n} events in {:.3} s = {:.2} M events/s, {:.2} M cycles/s",
        out.wall_s,
        n as f64 / out.wall_s / 1e6,
        cycles / out.wall_s / 1e6
    );
}
