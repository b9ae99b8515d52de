//! Perturbations, schedules, retries, traces, determinism and spec errors.

use serde_json::{json, Value};

use super::{assert_close, both_engines, exp, run, single_queue};
use crate::des::{Simulation, Status};

fn one_job(service: Value, perturbation: Value, discipline: &str) -> Value {
    // One arrival at t = 10 (the next would come at t = 1e9).
    json!({
        "stations": [{"name": "q", "kind": "queue", "discipline": discipline}],
        "classes": [{"name": "a", "open": true, "interarrival": {"dist": "det", "mean": 10.0}}],
        "service": [[service]],
        "routing": [],
        "entry": [[[0, 1.0]]],
        "perturbations": [perturbation],
        "arrival_schedule": [{"class": 0, "times": [10.5], "multipliers": [0.0]}],
        "window": 1.0,
        "trace": true,
    })
}

fn departures(spec: &Value) -> Vec<f64> {
    let mut sim = Simulation::new(&spec.to_string(), 1, 0).expect("valid");
    let out = sim.advance(100.0, 1000);
    let tr = out.trace.expect("trace on");
    (0..tr.len())
        .filter(|&i| tr.station[i] == 0)
        .map(|i| tr.departure[i])
        .collect()
}

#[test]
fn stall_delays_service_by_exactly_its_length() {
    let det = json!({"dist": "det", "mean": 1.0});
    for disc in ["fcfs", "ps"] {
        let stall = json!({"station": 0, "factor": 0.0, "start": 10.5, "duration": 0.3});
        let d = departures(&one_job(det.clone(), stall, disc));
        assert_eq!(d.len(), 1);
        assert!((d[0] - 11.3).abs() < 1e-12, "{disc}: departed at {}", d[0]);
        // Half speed for 0.2 s: 0.1 s of work is lost, so 0.1 s later.
        let slow = json!({"station": 0, "factor": 0.5, "start": 10.5, "duration": 0.2});
        let d = departures(&one_job(det.clone(), slow, disc));
        assert!((d[0] - 11.1).abs() < 1e-12, "{disc}: departed at {}", d[0]);
    }
}

fn stalled_mm1(with_stall: bool) -> Value {
    let mut spec = single_queue(50.0, exp(0.01), "fcfs", 1, None);
    spec["window"] = json!(0.05);
    // The event engine in both runs, for common random numbers (without the
    // stall the model is Markovian and would take the Markov fast path).
    spec["markov"] = json!(false);
    if with_stall {
        spec["perturbations"] = json!([{"station": 0, "factor": 0.0, "start": 5.0,
                                        "duration": 0.3, "period": 5.0, "until": 1000.0}]);
    }
    spec
}

#[test]
fn periodic_stalls_make_queues_peak_and_conserve_work() {
    let r = run(&stalled_mm1(true), 21, 1000.0, u64::MAX);
    let m = r.stations;
    let phase = |w: usize| (r.w.t_start[w] + 1e-9) % 5.0;
    let mean = |pick: &dyn Fn(f64) -> bool| {
        let v: Vec<f64> = (0..r.n_windows())
            .filter(|&w| r.w.t_start[w] >= 5.0 && pick(phase(w)))
            .map(|w| r.w.q_max[w * m])
            .collect();
        v.iter().sum::<f64>() / v.len() as f64
    };
    // The window starting as the stall ends holds the peak (~ 50/s * 0.3 s = 15 jobs).
    let peak = mean(&|p| (0.3..0.35).contains(&p));
    let calm = mean(&|p| (2.0..4.0).contains(&p));
    assert!(
        peak > 10.0 && peak > 5.0 * calm,
        "peak {peak} vs calm {calm}"
    );
    // Same arrival and service streams without the stall: the same work gets done.
    let base = run(&stalled_mm1(false), 21, 1000.0, u64::MAX);
    let done = r.sum(&r.w.completions, 0, 0);
    let done0 = base.sum(&base.w.completions, 0, 0);
    assert!((done - done0).abs() <= 30.0, "{done} vs {done0}");
    // Busy time grows by the stalled time the station was occupied, at most 0.3 s per period.
    let busy = r.sum(&r.w.busy_area, 0, 0);
    let busy0 = base.sum(&base.w.busy_area, 0, 0);
    assert!(
        busy > busy0 && busy - busy0 <= 0.3 * 200.0,
        "{busy} vs {busy0}"
    );
}

#[test]
fn arrival_schedule_scales_the_rate() {
    let mut spec = single_queue(1.0, exp(0.1), "fcfs", 1, None);
    spec["window"] = json!(100.0);
    spec["arrival_schedule"] =
        json!([{"class": 0, "times": [100.0, 200.0], "multipliers": [0.0, 3.0]}]);
    let r = run(&spec, 22, 20_100.0, u64::MAX);
    let a = &r.w.arrivals;
    assert!((a[0] - 100.0).abs() < 40.0, "{}", a[0]);
    assert_eq!(a[1], 0.0);
    let later = r.sum(a, 0, 0) - a[0];
    assert_close("rate after the step", later / 19_900.0, 3.0, 0.02);
}

#[test]
fn population_schedule_adds_and_retires_jobs() {
    let spec = json!({
        "stations": [{"name": "think", "kind": "delay"}, {"name": "q", "kind": "queue"}],
        "classes": [{"name": "c", "open": false, "population": 2, "reference": 0}],
        "service": [[exp(1.0), exp(0.05)]],
        "routing": [{"from": [0, 0], "to": [[0, 1, 1.0]]}, {"from": [0, 1], "to": [[0, 0, 1.0]]}],
        "entry": [[]],
        "population_schedule": [{"class": 0, "times": [50.0, 100.0], "populations": [10, 1]}],
        "window": 10.0,
    });
    let r = run(&spec, 23, 200.0, u64::MAX);
    let total = |w: usize| (0..2).map(|k| r.w.q_area[w * 2 + k]).sum::<f64>() / 10.0;
    assert!((total(2) - 2.0).abs() < 1e-9);
    assert!((total(7) - 10.0).abs() < 1e-9, "{}", total(7));
    assert!((total(19) - 1.0).abs() < 1e-9, "{}", total(19));
}

#[test]
fn refused_jobs_retry_then_are_lost() {
    let mut spec = single_queue(3.0, exp(1.0), "fcfs", 1, Some(2));
    spec["stations"][0]["retry"] =
        json!({"timeout": {"dist": "det", "mean": 0.5}, "max_retries": 2});
    spec["trace"] = json!(true);
    let mut sim = Simulation::new(&spec.to_string(), 24, 0).expect("valid");
    let tr = sim.advance(2000.0, u64::MAX).trace.expect("trace");
    let mut per_request = std::collections::HashMap::<u64, (u32, u32, u32)>::new();
    for i in 0..tr.len() {
        let e = per_request.entry(tr.request_id[i]).or_default();
        match (tr.station[i], tr.status[i]) {
            (0, Status::Retry) => e.0 += 1,
            (0, Status::Dropped) => e.1 += 1,
            (-1, Status::Dropped) => e.2 += 1,
            _ => {}
        }
    }
    let lost: Vec<_> = per_request.values().filter(|e| e.1 > 0).collect();
    assert!(!lost.is_empty());
    // A lost request tried max_retries times first, and is reported lost once.
    assert!(lost.iter().all(|e| e.0 == 2 && e.1 == 1 && e.2 == 1));
    assert!(per_request.values().all(|e| e.0 <= 2));
}

#[test]
fn trace_rows_are_consistent() {
    let mut spec = single_queue(0.5, exp(1.0), "fcfs", 1, None);
    spec["trace"] = json!(true);
    let mut sim = Simulation::new(&spec.to_string(), 25, 0).expect("valid");
    let out = sim.advance(1000.0, u64::MAX);
    let tr = out.trace.expect("trace");
    assert!(tr.len() > 500);
    for i in 0..tr.len() {
        assert!(tr.arrival[i] <= tr.start[i] && tr.start[i] <= tr.departure[i]);
        assert_eq!(tr.status[i], Status::Ok);
    }
    let visits = tr.station.iter().filter(|&&s| s == 0).count();
    let requests = tr.station.iter().filter(|&&s| s == -1).count();
    assert_eq!(visits, requests);
    // Drained: the next call only has new rows.
    let again = sim.advance(1001.0, u64::MAX).trace.expect("trace");
    assert!(again.departure.iter().all(|&d| d >= 1000.0));
}

#[test]
fn same_seed_is_bit_identical_and_replications_differ() {
    let mut spec = single_queue(
        0.9,
        json!({"dist": "lognormal", "mean": 1.0, "scv": 2.0}),
        "ps",
        1,
        None,
    );
    spec["trace"] = json!(true);
    let text = spec.to_string();
    let go = |seed, rep| {
        let mut sim = Simulation::new(&text, seed, rep).expect("valid");
        let mut out = sim.advance(5000.0, u64::MAX);
        out.wall_s = 0.0;
        out
    };
    assert_eq!(go(7, 0), go(7, 0));
    assert_ne!(go(7, 0).windows, go(7, 1).windows);
    assert_ne!(go(7, 0).windows, go(8, 0).windows);
}

#[test]
fn chunked_advance_equals_one_advance() {
    for spec in both_engines(&single_queue(0.9, exp(1.0), "fcfs", 1, None)) {
        let text = spec.to_string();
        let mut one = Simulation::new(&text, 3, 0).expect("valid");
        let whole = one.advance(50_000.0, u64::MAX).windows;
        let mut many = Simulation::new(&text, 3, 0).expect("valid");
        let mut parts = crate::des::Windows::default();
        let mut until: f64 = 0.0;
        while many.now() < 50_000.0 {
            until += 777.0;
            parts.append(many.advance(until.min(50_000.0), 10_001).windows);
        }
        assert_eq!(whole, parts);
        assert_eq!(one.events(), many.events());
    }
}

#[test]
fn markov_fast_path_takes_exactly_the_markovian_models() {
    let markov = |spec: &Value| {
        Simulation::new(&spec.to_string(), 1, 0)
            .expect("valid")
            .is_markov()
    };
    let mm1 = single_queue(0.9, exp(1.0), "ps", 2, None);
    assert!(markov(&mm1));
    assert!(!markov(&both_engines(&mm1)[1]));
    let det = json!({"dist": "det", "mean": 1.0});
    assert!(!markov(&single_queue(0.5, det, "fcfs", 1, None)));
    assert!(!markov(&single_queue(0.5, exp(1.0), "fcfs", 1, Some(5))));
    let mut traced = mm1.clone();
    traced["trace"] = json!(true);
    assert!(!markov(&traced));
    let mut stalled = mm1.clone();
    stalled["perturbations"] = json!([{"station": 0, "factor": 0, "start": 1, "duration": 1}]);
    assert!(!markov(&stalled));
}

#[test]
fn bad_specs_name_the_field() {
    let base = single_queue(1.0, exp(0.5), "fcfs", 1, None);
    type Edit = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(|s| s["stations"][0]["servers"] = json!(0)),
            "stations[0].servers",
        ),
        (
            Box::new(|s| s["stations"][0]["kind"] = json!("router")),
            "stations[0].kind",
        ),
        (
            Box::new(|s| s["service"][0][0] = Value::Null),
            "service[0][0]",
        ),
        (
            Box::new(|s| s["service"][0][0]["mean"] = json!(-1)),
            "service[0][0].mean",
        ),
        (Box::new(|s| s["entry"][0][0][1] = json!(0.5)), "entry[0]"),
        (
            // `null` is a class without arrivals of its own; a missing key is an error.
            Box::new(|s| {
                s["classes"][0]
                    .as_object_mut()
                    .map(|o| o.remove("interarrival"));
            }),
            "classes[0].interarrival",
        ),
        (Box::new(|s| s["window"] = json!(0)), "window"),
        (
            Box::new(|s| s["routing"] = json!([{"from": [0, 3], "to": []}])),
            "routing[0].from[1]",
        ),
        (
            Box::new(|s| {
                s["perturbations"] =
                    json!([{"station": 0, "factor": -1, "start": 0, "duration": 1}])
            }),
            "perturbations[0].factor",
        ),
    ];
    for (edit, field) in cases {
        let mut spec = base.clone();
        edit(&mut spec);
        let err = Simulation::new(&spec.to_string(), 1, 0).expect_err("invalid");
        assert!(err.to_string().contains(field), "{field}: {err}");
    }
    let err = Simulation::new("{not json", 1, 0).expect_err("invalid");
    assert!(err.to_string().contains("spec_json"), "{err}");
    // A closed chain whose routing leaks mass is refused up front.
    let closed = json!({
        "stations": [{"name": "q", "kind": "queue"}],
        "classes": [{"name": "c", "open": false, "population": 1, "reference": 0}],
        "service": [[exp(1.0)]],
        "routing": [{"from": [0, 0], "to": [[0, 0, 0.5]]}],
        "window": 1.0,
    });
    let err = Simulation::new(&closed.to_string(), 1, 0).expect_err("invalid");
    assert!(err.to_string().contains("must sum to 1"), "{err}");
}
