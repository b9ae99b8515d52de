//! Random networks using every feature at once: no panic, sane sums, and
//! conservation of closed populations where jobs cannot be in flight.

use serde_json::{json, Value};

use super::exp;
use crate::des::rng::Rng;
use crate::des::Simulation;

fn law(r: &mut Rng) -> Value {
    let mean = 0.05 + r.unit();
    match (r.unit() * 8.0) as u32 {
        0 => exp(mean),
        1 => json!({"dist": "det", "mean": mean}),
        2 => json!({"dist": "erlang", "mean": mean, "k": 3}),
        3 => json!({"dist": "hyperexp", "mean": mean, "scv": 3.0}),
        4 => json!({"dist": "lognormal", "mean": mean, "scv": 0.7}),
        5 => json!({"dist": "uniform", "low": 0.0, "high": 2.0 * mean}),
        6 => json!({"dist": "ph", "alpha": [0.5, 0.5], "T": [[-2.0, 1.0], [0.0, -3.0]]}),
        _ => json!({"dist": "empirical", "samples": [0.0, mean, 2.0 * mean]}),
    }
}

/// A random row over `targets` (class, station) with total mass `mass`.
fn row(r: &mut Rng, from: (usize, usize), targets: &[(usize, usize)], mass: f64) -> Value {
    let w: Vec<f64> = targets.iter().map(|_| r.unit() + 0.01).collect();
    let total: f64 = w.iter().sum();
    let to: Vec<Value> = targets
        .iter()
        .zip(&w)
        .map(|(&(c, k), x)| json!([c, k, mass * x / total]))
        .collect();
    json!({"from": [from.0, from.1], "to": to})
}

fn random_spec(r: &mut Rng) -> (Value, bool) {
    let nq = 2 + (r.unit() * 4.0) as usize;
    let nc = 1 + (r.unit() * 2.0) as usize;
    let open = r.unit() < 0.5;
    let with_fork = r.unit() < 0.5;
    let mut conserving = !open && !with_fork;
    let mut stations = Vec::new();
    for k in 0..nq {
        let kind = if k > 0 && r.unit() < 0.25 {
            "delay"
        } else {
            "queue"
        };
        let mut st = json!({"name": format!("s{k}"), "kind": kind,
                            "discipline": if r.unit() < 0.5 { "fcfs" } else { "ps" },
                            "servers": 1 + (r.unit() * 3.0) as u32});
        if k > 0 && r.unit() < 0.4 {
            st["capacity"] = json!(1 + (r.unit() * 4.0) as u32);
            if r.unit() < 0.5 {
                st["on_full"] = json!("block");
            } else if r.unit() < 0.5 {
                st["retry"] = json!({"timeout": law(r), "max_retries": 2});
                conserving = false;
            }
        }
        if r.unit() < 0.3 {
            st["alpha"] = json!([1.0, 1.5, 1.8]);
        }
        stations.push(st);
    }
    let m = if with_fork { nq + 2 } else { nq };
    if with_fork {
        stations.push(json!({"name": "f", "kind": "fork", "join": nq + 1, "branches": [0, 1]}));
        stations.push(json!({"name": "j", "kind": "join",
                             "quorum": if r.unit() < 0.5 { json!(1) } else { Value::Null }}));
    }
    let service: Vec<Value> = (0..nc)
        .map(|_| {
            (0..m)
                .map(|k| if k < nq { law(r) } else { Value::Null })
                .collect()
        })
        .collect();
    let mut targets: Vec<(usize, usize)> = Vec::new();
    for c in 0..nc {
        for k in 0..m {
            if k != nq + 1 {
                targets.push((c, k));
            }
        }
    }
    let mut routing = Vec::new();
    for c in 0..nc {
        for k in 0..m {
            if with_fork && k == nq {
                continue;
            }
            if with_fork && k < 2 {
                // Branch stations lead to the join.
                routing.push(json!({"from": [c, k], "to": [[c, nq + 1, 1.0]]}));
                continue;
            }
            let mass = if open { 0.6 } else { 1.0 };
            routing.push(row(r, (c, k), &targets, mass));
        }
    }
    let classes: Vec<Value> = (0..nc)
        .map(|c| {
            if open {
                json!({"name": format!("c{c}"), "open": true, "interarrival": exp(0.5 + r.unit())})
            } else {
                json!({"name": format!("c{c}"), "open": false,
                       "population": 1 + (r.unit() * 5.0) as u32, "reference": 2 % nq})
            }
        })
        .collect();
    let entry: Vec<Value> = (0..nc)
        .map(|_| {
            if open {
                json!([[m - 1 - usize::from(with_fork), 1.0]])
            } else {
                json!([])
            }
        })
        .collect();
    let spec = json!({
        "stations": stations, "classes": classes, "service": service, "routing": routing,
        "entry": entry, "window": 0.7, "trace": r.unit() < 0.5,
        "perturbations": [{"station": 0, "factor": 0.0, "start": 1.0, "duration": 0.5,
                           "period": 3.0, "until": 50.0},
                          {"station": nq - 1, "factor": 0.3, "start": 2.0, "duration": 4.0,
                           "period": 3.0}],
    });
    (spec, conserving)
}

#[test]
fn random_networks_run_and_conserve_population() {
    let mut r = Rng::stream(99, 0, 0);
    for case in 0..300 {
        let (spec, conserving) = random_spec(&mut r);
        let text = spec.to_string();
        let mut sim = Simulation::new(&text, case, 0).unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut w = sim.advance(40.0, 20_000).windows;
        w.append(sim.advance(f64::INFINITY, 20_000).windows);
        let all = [
            &w.arrivals,
            &w.completions,
            &w.rt_sum,
            &w.q_area,
            &w.busy_area,
            &w.drops,
        ];
        for v in all {
            assert!(
                v.iter().all(|x| x.is_finite() && *x >= 0.0),
                "case {case}: {text}"
            );
        }
        if conserving && !w.is_empty() {
            let nc = spec["classes"].as_array().map_or(0, Vec::len);
            let pop: u64 = (0..nc)
                .map(|c| spec["classes"][c]["population"].as_u64().unwrap_or(0))
                .sum();
            let per_window = w.q_area.len() / w.len();
            let last = &w.q_area[(w.len() - 1) * per_window..];
            let total: f64 = last.iter().sum::<f64>() / 0.7;
            assert!(
                (total - pop as f64).abs() < 1e-6,
                "case {case}: {total} vs {pop}\n{text}"
            );
        }
    }
}
