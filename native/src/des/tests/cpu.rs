//! CPU stations (CFS quotas, a shared host), round robin, balance stations
//! and demand tables, against hand-computed schedules and closed forms.

use serde_json::{json, Value};

use super::{assert_close, run};
use crate::des::spec::{CapacityChange, Change};
use crate::des::Simulation;

/// One job of each open class arriving at t = 10 (the next would come at
/// t = 20, but the schedule stops arrivals at 10.5), served at station 0.
fn arrivals_at_ten(station: Value, services: &[Value]) -> Value {
    let n = services.len();
    json!({
        "stations": [station],
        "classes": (0..n).map(|c| json!({"name": format!("c{c}"), "open": true,
                                          "interarrival": {"dist": "det", "mean": 10.0}}))
                         .collect::<Vec<_>>(),
        "service": services.iter().map(|s| json!([s])).collect::<Vec<_>>(),
        "routing": [],
        "entry": (0..n).map(|_| json!([[0, 1.0]])).collect::<Vec<_>>(),
        "arrival_schedule": (0..n).map(|c| json!({"class": c, "times": [10.5],
                                                   "multipliers": [0.0]}))
                                  .collect::<Vec<_>>(),
        "window": 1.0,
        "trace": true,
    })
}

/// Departure time of each class's job from station 0.
fn departures(spec: &Value) -> Vec<f64> {
    let mut sim = Simulation::new(&spec.to_string(), 1, 0).expect("valid spec");
    let tr = sim.advance(100.0, 100_000).trace.expect("trace on");
    let mut out = vec![f64::NAN; spec["classes"].as_array().map_or(0, Vec::len)];
    for i in 0..tr.len() {
        if tr.station[i] == 0 {
            out[tr.class[i] as usize] = tr.departure[i];
        }
    }
    out
}

fn det(x: f64) -> Value {
    json!({"dist": "det", "mean": x})
}

#[test]
fn a_quota_throttles_a_job_until_each_period_ends() {
    // 0.05 s of CPU under 0.02 s per 0.1 s period, periods from 0.05: runs
    // 10.00-10.02, throttled to 10.05, runs 10.05-10.07, throttled to 10.15,
    // then its last 0.01 s: done at 10.16.
    let cpu = json!({"budget": 0.02, "period": 0.1, "phase": 0.05});
    let st = json!({"name": "q", "kind": "queue", "discipline": "ps", "cpu": cpu});
    let d = departures(&arrivals_at_ten(st, &[det(0.05)]));
    assert!((d[0] - 10.16).abs() < 1e-9, "departed at {}", d[0]);

    // With a 4 ms tick (from the phase) the overrun runs to the next tick
    // and is repaid: 10.00-10.022 (0.002 over), 0.018 left at 10.05, spent
    // at 10.068 but noticed at 10.07 (0.002 over again), the last 0.008 s
    // from 10.15: done at 10.158.
    let cpu = json!({"budget": 0.02, "period": 0.1, "phase": 0.05, "tick": 0.004});
    let st = json!({"name": "q", "kind": "queue", "discipline": "ps", "cpu": cpu});
    let d = departures(&arrivals_at_ten(st, &[det(0.05)]));
    assert!((d[0] - 10.158).abs() < 1e-9, "departed at {}", d[0]);

    // Without a quota the CPU only counts: done at 10.05.
    let st = json!({"name": "q", "kind": "queue", "discipline": "ps", "cpu": {}});
    let d = departures(&arrivals_at_ten(st, &[det(0.05)]));
    assert!((d[0] - 10.05).abs() < 1e-9, "departed at {}", d[0]);
}

#[test]
fn round_robin_lets_a_short_job_past_a_long_one_after_one_slice() {
    // Both arrive at 10 (class 0 first): the long job runs one 5 ms slice,
    // the short one runs its 2 ms, the long one the rest.
    let st = json!({"name": "q", "kind": "queue", "discipline": "rr", "quantum": 0.005});
    let d = departures(&arrivals_at_ten(st, &[det(0.05), det(0.002)]));
    assert!((d[1] - 10.007).abs() < 1e-9, "short job at {}", d[1]);
    assert!((d[0] - 10.052).abs() < 1e-9, "long job at {}", d[0]);
    // Two processes: both run at once.
    let st = json!({"name": "q", "kind": "queue", "discipline": "rr", "quantum": 0.005,
                    "servers": 2});
    let d = departures(&arrivals_at_ten(st, &[det(0.05), det(0.002)]));
    assert!(
        (d[1] - 10.002).abs() < 1e-9 && (d[0] - 10.05).abs() < 1e-9,
        "{d:?}"
    );
    // A throttled round-robin station does not spend its slices.
    let cpu = json!({"budget": 0.0035, "period": 0.1, "phase": 0.05});
    let st = json!({"name": "q", "kind": "queue", "discipline": "rr", "quantum": 0.005,
                    "cpu": cpu});
    let d = departures(&arrivals_at_ten(st, &[det(0.004), det(0.002)]));
    // Long 10.0-10.0035 (out), long 10.05-10.0505 (done: 4 ms of its slice
    // used), short 10.0505-10.0525.
    assert!((d[0] - 10.0505).abs() < 1e-9, "long job at {}", d[0]);
    assert!((d[1] - 10.0525).abs() < 1e-9, "short job at {}", d[1]);
}

/// `jobs` closed jobs cycling through one CPU station with no think time.
fn saturated(cpu: Value, demand: f64, jobs: u32, discipline: &str) -> Value {
    json!({
        "stations": [
            {"name": "think", "kind": "delay"},
            {"name": "q", "kind": "queue", "discipline": discipline, "quantum": 0.005,
             "cpu": cpu},
        ],
        "classes": [{"name": "a", "open": false, "population": jobs, "reference": 0}],
        "service": [[det(0.0), {"dist": "exp", "mean": demand}]],
        "routing": [{"from": [0, 0], "to": [[0, 1, 1.0]]},
                    {"from": [0, 1], "to": [[0, 0, 1.0]]}],
        "window": 1.0,
    })
}

#[test]
fn a_saturated_quota_serves_its_share_and_is_throttled_every_period() {
    for (discipline, tick) in [("ps", Value::Null), ("rr", json!(0.004))] {
        let cpu = json!({"budget": 0.03, "period": 0.1, "tick": tick, "carry": 0.001});
        let r = run(&saturated(cpu, 0.01, 3, discipline), 7, 2000.0, u64::MAX);
        // X = quota / demand = 0.3 / 0.01 = 30 per second.
        assert_close("throughput", r.x(0, 1), 30.0, 0.02);
        let cpu: f64 = (0..r.n_windows()).map(|w| r.w.cpu[w * 2 + 1]).sum();
        assert_close("CPU used", cpu / r.span(), 0.3, 0.005);
        let periods: f64 = (0..r.n_windows()).map(|w| r.w.periods[w * 2 + 1]).sum();
        let throttled: f64 = (0..r.n_windows()).map(|w| r.w.throttled[w * 2 + 1]).sum();
        assert_close("periods", periods, 10.0 * r.span(), 0.01);
        assert_eq!(periods, throttled, "{discipline}: every period runs out");
    }
}

#[test]
fn a_host_shares_its_cores_among_running_processes() {
    // Two classes, each keeping one station busy: on one core with one more
    // runnable task, each process gets a third of a core.
    let st = |name: &str| {
        json!({"name": name, "kind": "queue", "discipline": "ps",
                                 "cpu": {"host": true}})
    };
    let spec = json!({
        "stations": [{"name": "think", "kind": "delay"}, st("a"), st("b")],
        "classes": [{"name": "a", "open": false, "population": 1, "reference": 0},
                    {"name": "b", "open": false, "population": 1, "reference": 0}],
        "service": [[det(0.0), det(0.01), null], [det(0.0), null, det(0.01)]],
        "routing": [{"from": [0, 0], "to": [[0, 1, 1.0]]}, {"from": [0, 1], "to": [[0, 0, 1.0]]},
                    {"from": [1, 0], "to": [[1, 2, 1.0]]}, {"from": [1, 2], "to": [[1, 0, 1.0]]}],
        "host": {"cores": 1.0, "background": 1.0},
        "window": 10.0,
    });
    let r = run(&spec, 1, 100.0, u64::MAX);
    assert_close("throughput a", r.x(0, 1), 100.0 / 3.0, 1e-3);
    assert_close("throughput b", r.x(1, 2), 100.0 / 3.0, 1e-3);
    let col = |i: usize| (0..r.n_windows()).map(|w| r.w.host[w * 3 + i]).sum::<f64>();
    assert_close("wanted", col(0) / r.span(), 2.0, 1e-9);
    assert_close("got", col(1) / r.span(), 2.0 / 3.0, 1e-9);
    assert_close("others", col(2) / r.span(), 1.0 / 3.0, 1e-9);
}

#[test]
fn balance_stations_pick_in_turn_or_the_least_loaded() {
    // Arrivals at 0.1, 0.2, ..., 0.5 to two FCFS members, m0 slow (10 s of
    // service), m1 fast (0.05 s).
    let spec = |policy: &str| {
        json!({
            "stations": [{"name": "lb", "kind": "balance", "members": [1, 2], "policy": policy},
                         {"name": "m0", "kind": "queue"}, {"name": "m1", "kind": "queue"}],
            "classes": [{"name": "a", "open": true, "interarrival": det(0.1)}],
            "service": [[null, det(10.0), det(0.05)]],
            "routing": [],
            "entry": [[[0, 1.0]]],
            "arrival_schedule": [{"class": 0, "times": [0.55], "multipliers": [0.0]}],
            "window": 20.0,
        })
    };
    let arrivals = |policy: &str| {
        let r = run(&spec(policy), 1, 20.0, u64::MAX);
        [r.sum(&r.w.arrivals, 0, 1), r.sum(&r.w.arrivals, 0, 2)]
    };
    // In turn: m1, m0, m1, m0, m1. Least loaded: m1 (a tie, taken in turn),
    // m0 (a tie again, the turn moves on), then m1 while m0 holds its job.
    assert_eq!(arrivals("round_robin"), [2.0, 3.0]);
    assert_eq!(arrivals("least_loaded"), [1.0, 4.0]);
}

#[test]
fn a_demand_table_draws_one_row_per_request_and_skips_stations_with_none() {
    // Half the requests need 10 ms at a, the other half 20 ms at b.
    let spec = json!({
        "stations": [{"name": "think", "kind": "delay"}, {"name": "a", "kind": "queue"},
                     {"name": "b", "kind": "queue"}],
        "classes": [{"name": "r", "open": false, "population": 1, "reference": 0}],
        "service": [[det(1.0), {"dist": "row", "column": 0}, {"dist": "row", "column": 1}]],
        "routing": [{"from": [0, 0], "to": [[0, 1, 1.0]]}, {"from": [0, 1], "to": [[0, 2, 1.0]]},
                    {"from": [0, 2], "to": [[0, 0, 1.0]]}],
        "rows": [[0.01, 0.0], [0.0, 0.02]],
        "rt_samples": true,
        "window": 100.0,
    });
    let mut sim = Simulation::new(&spec.to_string(), 3, 0).expect("valid spec");
    let out = sim.advance(20_000.0, u64::MAX);
    let s = out.samples.expect("samples on");
    let n = s.rt.len() as f64;
    let short = s.rt.iter().filter(|&&x| (x - 0.01).abs() < 1e-9).count() as f64;
    let long = s.rt.iter().filter(|&&x| (x - 0.02).abs() < 1e-9).count() as f64;
    assert_eq!(short + long, n, "every request took exactly one row's time");
    // Binomial(n, 1/2): within 4 standard deviations.
    assert!(
        (short - n / 2.0).abs() < 4.0 * (n / 4.0).sqrt(),
        "{short} of {n}"
    );
    let w = out.windows;
    let visits = |k: usize| (0..w.len()).map(|i| w.completions[i * 3 + k]).sum::<f64>();
    assert!((visits(1) - short).abs() <= 1.0 && (visits(2) - long).abs() <= 1.0);
}

#[test]
fn cpu_round_robin_balance_and_row_errors_name_their_field() {
    let base = |station: Value, service: Value| {
        json!({
            "stations": [{"name": "think", "kind": "delay"}, station],
            "classes": [{"name": "a", "open": false, "population": 1, "reference": 0}],
            "service": [[det(0.0), service]],
            "routing": [{"from": [0, 0], "to": [[0, 1, 1.0]]}, {"from": [0, 1], "to": [[0, 0, 1.0]]}],
            "window": 1.0,
        })
    };
    let err = |spec: Value| {
        Simulation::new(&spec.to_string(), 1, 0)
            .unwrap_err()
            .to_string()
    };
    let e = err(base(
        json!({"name": "q", "kind": "delay", "cpu": {}}),
        det(1.0),
    ));
    assert!(e.contains("stations[1].cpu"), "{e}");
    let e = err(base(
        json!({"name": "q", "kind": "queue", "discipline": "rr"}),
        det(1.0),
    ));
    assert!(e.contains("stations[1].quantum"), "{e}");
    let e = err(base(
        json!({"name": "q", "kind": "queue", "cpu": {"budget": -1}}),
        det(1.0),
    ));
    assert!(e.contains("stations[1].cpu.budget"), "{e}");
    let e = err(base(
        json!({"name": "q", "kind": "queue"}),
        json!({"dist": "row", "column": 2}),
    ));
    assert!(e.contains("service[0][1].column"), "{e}");
    let e = err(base(
        json!({"name": "q", "kind": "balance", "members": [0]}),
        det(1.0),
    ));
    assert!(e.contains("stations[1].members[0]"), "{e}");
    let mut spec = base(json!({"name": "q", "kind": "queue"}), det(1.0));
    spec["rows"] = json!([[0.1, 0.2], [0.3]]);
    let e = err(spec);
    assert!(e.contains("rows[1]"), "{e}");
}

/// 20 jobs with no think time through a balance station over two replicas
/// (10 ms each), the second stopped at the start.
fn two_replicas(cpu: Value) -> Value {
    let replica = |name: &str, active: bool| json!({"name": name, "kind": "queue", "discipline": "ps", "cpu": cpu, "active": active});
    json!({
        "stations": [{"name": "think", "kind": "delay"},
                     {"name": "lb", "kind": "balance", "members": [2, 3],
                      "policy": "least_loaded"},
                     replica("r0", true), replica("r1", false)],
        "classes": [{"name": "a", "open": false, "population": 20, "reference": 0}],
        "service": [[det(0.0), null, det(0.01), det(0.01)]],
        "routing": [{"from": [0, 0], "to": [[0, 1, 1.0]]}, {"from": [0, 2], "to": [[0, 0, 1.0]]},
                    {"from": [0, 3], "to": [[0, 0, 1.0]]}],
        "window": 10.0,
    })
}

/// Completions per second at the replicas in each 10 s window.
fn replica_rates(w: &crate::des::Windows) -> Vec<f64> {
    (0..w.len())
        .map(|i| (w.completions[i * 4 + 2] + w.completions[i * 4 + 3]) / 10.0)
        .collect()
}

#[test]
fn a_replica_started_mid_run_takes_load_and_a_stopped_one_finishes_its_jobs() {
    // Started at 100 s (as a controller would, after its start-up delay):
    // one replica serves 100 per second, two serve 200.
    let mut spec = two_replicas(json!({}));
    spec["capacity_schedule"] = json!([{"time": 100.0, "station": 3, "active": true}]);
    let r = run(&spec, 2, 200.0, u64::MAX);
    let x = replica_rates(&r.w);
    assert_close(
        "one replica",
        x[2..10].iter().sum::<f64>() / 8.0,
        100.0,
        0.01,
    );
    assert_close(
        "two replicas",
        x[12..20].iter().sum::<f64>() / 8.0,
        200.0,
        0.01,
    );
    let before: f64 = (0..10).map(|i| r.w.arrivals[i * 4 + 3]).sum();
    assert_eq!(
        before, 0.0,
        "the stopped replica took no job before it started"
    );

    // The same change scheduled by a controller while the run is under way.
    let mut sim = Simulation::new(&two_replicas(json!({})).to_string(), 2, 0).expect("valid");
    let mut w = sim.advance(100.0, u64::MAX).windows;
    let change = CapacityChange {
        time: 100.0,
        station: 3,
        change: Change::Active(true),
    };
    sim.schedule_change(change).expect("a change now");
    w.append(sim.advance(200.0, u64::MAX).windows);
    let x2 = replica_rates(&w);
    assert_close(
        "started by a controller",
        x2[12..20].iter().sum::<f64>() / 8.0,
        200.0,
        0.01,
    );
    let past = CapacityChange {
        time: 50.0,
        ..change
    };
    let e = sim.schedule_change(past).unwrap_err().to_string();
    assert!(e.contains("change.time"), "{e}");

    // Stopped at 100 s: it takes no new job, finishes those it holds, and
    // every job goes on cycling (none is lost).
    let mut spec = two_replicas(json!({}));
    spec["stations"][3]["active"] = json!(true);
    spec["capacity_schedule"] = json!([{"time": 100.0, "station": 3, "active": false}]);
    let mut sim = Simulation::new(&spec.to_string(), 2, 0).expect("valid");
    let w = sim.advance(200.0, u64::MAX).windows;
    let x = replica_rates(&w);
    assert_close(
        "two replicas",
        x[2..10].iter().sum::<f64>() / 8.0,
        200.0,
        0.01,
    );
    assert_close(
        "one replica",
        x[12..20].iter().sum::<f64>() / 8.0,
        100.0,
        0.01,
    );
    let later: f64 = (11..20).map(|i| w.arrivals[i * 4 + 3]).sum();
    let left: f64 = (11..20).map(|i| w.completions[i * 4 + 3]).sum();
    assert_eq!(
        (later, left),
        (0.0, 0.0),
        "nothing reaches or leaves it after the first window"
    );
    let n_end: f64 = (0..4).map(|k| w.q_area[19 * 4 + k] / 10.0).sum();
    assert_close("jobs present at the end", n_end, 20.0, 1e-9);
}

#[test]
fn a_quota_changed_mid_run_serves_the_new_share() {
    // 0.3 core, then 0.6 from 100 s, then no quota (one process: 1 core).
    let mut spec = two_replicas(json!({"budget": 0.03, "period": 0.1}));
    spec["capacity_schedule"] = json!([
        {"time": 100.0, "station": 2, "budget": 0.06},
        {"time": 200.0, "station": 2, "budget": null},
    ]);
    let r = run(&spec, 4, 300.0, u64::MAX);
    let x = replica_rates(&r.w);
    let mean = |a: usize, b: usize| x[a..b].iter().sum::<f64>() / (b - a) as f64;
    assert_close("0.3 core", mean(1, 10), 30.0, 0.01);
    assert_close("0.6 core", mean(11, 20), 60.0, 0.01);
    assert_close("no quota", mean(21, 30), 100.0, 0.01);
    // A quota on a station that had none starts its periods.
    let mut spec = two_replicas(json!({}));
    spec["capacity_schedule"] = json!([{"time": 100.0, "station": 2, "budget": 0.02}]);
    let r = run(&spec, 4, 200.0, u64::MAX);
    let x = replica_rates(&r.w);
    assert_close(
        "no quota first",
        x[2..10].iter().sum::<f64>() / 8.0,
        100.0,
        0.01,
    );
    assert_close("0.2 core", x[11..20].iter().sum::<f64>() / 9.0, 20.0, 0.01);
    // Errors name the change.
    let mut bad = two_replicas(json!({}));
    bad["capacity_schedule"] = json!([{"time": 1.0, "station": 0, "budget": 0.1}]);
    let e = Simulation::new(&bad.to_string(), 1, 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("capacity_schedule[0].station"), "{e}");
    bad["capacity_schedule"] = json!([{"time": 1.0, "station": 2}]);
    let e = Simulation::new(&bad.to_string(), 1, 0)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("capacity_schedule[0]") && e.contains("active or budget"),
        "{e}"
    );
}

#[test]
fn an_each_balance_station_sends_a_job_to_every_active_member_in_turn() {
    // One job; each request visits the active members (10 ms each) one after the other.
    let member =
        |name: &str, active: bool| json!({"name": name, "kind": "queue", "active": active});
    let spec = json!({
        "stations": [{"name": "think", "kind": "delay"},
                     {"name": "all", "kind": "balance", "members": [2, 3, 4], "policy": "each"},
                     member("m0", true), member("m1", false), member("m2", true)],
        "classes": [{"name": "w", "open": false, "population": 1, "reference": 0}],
        "service": [[det(1.0), null, det(0.01), det(0.01), det(0.01)]],
        "routing": [{"from": [0, 0], "to": [[0, 1, 1.0]]}, {"from": [0, 1], "to": [[0, 0, 1.0]]},
                    {"from": [0, 2], "to": [[0, 1, 1.0]]}, {"from": [0, 3], "to": [[0, 1, 1.0]]},
                    {"from": [0, 4], "to": [[0, 1, 1.0]]}],
        "capacity_schedule": [{"time": 50.5, "station": 3, "active": true}],
        "rt_samples": true,
        "window": 100.0,
    });
    let mut sim = Simulation::new(&spec.to_string(), 1, 0).expect("valid spec");
    let out = sim.advance(100.0, u64::MAX);
    let s = out.samples.expect("samples on");
    for (end, rt) in s.end.iter().zip(&s.rt) {
        let want = if *end < 50.5 { 0.02 } else { 0.03 };
        assert!((rt - want).abs() < 1e-9, "request ending at {end}: {rt}");
    }
    assert!(s.rt.len() > 90, "{} requests", s.rt.len());
    let visits = |k: usize| out.windows.completions[k];
    assert_eq!(
        (visits(2), visits(4)),
        (s.rt.len() as f64, s.rt.len() as f64)
    );
}
