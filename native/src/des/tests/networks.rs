//! Networks: closed product-form, fork/join, blocking, class switching.

use serde_json::{json, Value};

use super::{assert_close, both_engines, exp, run};
use crate::qn::mva::mva_exact;

fn queue(name: &str) -> Value {
    json!({"name": name, "kind": "queue", "discipline": "fcfs", "servers": 1})
}

#[test]
fn closed_network_matches_bolch_and_exact_mva() {
    // Bolch et al., Example 8.3: N = 6, visit ratios [1, 0.4, 0.2, 0.1].
    let s = [0.02, 0.2, 0.4, 0.6];
    let spec = json!({
        "stations": [queue("cpu"), queue("d1"), queue("d2"), queue("d3")],
        "classes": [{"name": "c", "open": false, "population": 6, "reference": 0}],
        "service": [[exp(s[0]), exp(s[1]), exp(s[2]), exp(s[3])]],
        "routing": [
            {"from": [0, 0], "to": [[0, 0, 0.3], [0, 1, 0.4], [0, 2, 0.2], [0, 3, 0.1]]},
            {"from": [0, 1], "to": [[0, 0, 1.0]]},
            {"from": [0, 2], "to": [[0, 0, 1.0]]},
            {"from": [0, 3], "to": [[0, 0, 1.0]]},
        ],
        "entry": [[]],
        "window": 10.0,
    });
    for spec in both_engines(&spec) {
        bolch_8_3(&spec, s);
    }
}

fn bolch_8_3(spec: &Value, s: [f64; 4]) {
    let r = run(spec, 11, f64::INFINITY, 2_000_000);
    assert_close("Bolch 8.3 X1", r.x(0, 0), 9.920, 0.015);
    let v = [1.0, 0.4, 0.2, 0.1];
    let demands = vec![(0..4).map(|k| v[k] * s[k]).collect::<Vec<_>>()];
    let mva = mva_exact(&demands, &[false; 4], &vec![vec![1.0]; 4], &[6], &[0.0]).expect("mva");
    assert_close("X1 vs exact MVA", r.x(0, 0), mva.throughput[0], 0.015);
    for k in 0..4 {
        assert_close(
            &format!("Q{k} vs exact MVA"),
            r.q(0, k),
            mva.queue[0][k],
            0.03,
        );
    }
    // The population is conserved exactly.
    let total: f64 = (0..4).map(|k| r.q(0, k)).sum();
    assert_close("sum of Q", total, 6.0, 1e-9);
    // System completions are the cycles through the reference station.
    let sys_x = r.sum_class(&r.w.sys_completions, 0) / r.span();
    assert_close("system X", sys_x, r.x(0, 0), 1e-3);
}

fn fork_join(lambda: f64, branches: usize, quorum: Option<u32>) -> Value {
    let mut stations = vec![json!({"name": "fork", "kind": "fork", "join": 1 + branches,
               "branches": (1..=branches).collect::<Vec<_>>()})];
    for b in 0..branches {
        stations.push(queue(&format!("b{b}")));
    }
    stations.push(json!({"name": "join", "kind": "join", "quorum": quorum}));
    let m = stations.len();
    let mut service = vec![Value::Null; m];
    for s in service.iter_mut().take(branches + 1).skip(1) {
        *s = exp(1.0);
    }
    let routing: Vec<Value> = (1..=branches)
        .map(|b| json!({"from": [0, b], "to": [[0, m - 1, 1.0]]}))
        .collect();
    json!({
        "stations": stations,
        "classes": [{"name": "c", "open": true, "interarrival": exp(1.0 / lambda)}],
        "service": [service],
        "routing": routing,
        "entry": [[[0, 1.0]]],
        "window": 100.0,
    })
}

#[test]
fn two_way_fork_join_matches_nelson_tantawi() {
    let (lambda, mu) = (0.5, 1.0);
    let rho = lambda / mu;
    let want = (12.0 - rho) / 8.0 / (mu - lambda);
    let spec = fork_join(lambda, 2, None);
    let r = run(&spec, 12, f64::INFINITY, 2_000_000);
    let join = 3;
    assert_close("fork-join R", r.rt(0, join), want, 0.03);
    // The open request ends when the parent leaves the join (and the network).
    let sys = r.sum_class(&r.w.sys_rt_sum, 0) / r.sum_class(&r.w.sys_completions, 0);
    assert_close("fork-join system R", sys, r.rt(0, join), 1e-6);
    assert_close("branch W", r.rt(0, 1), 1.0 / (mu - lambda), 0.03);
}

#[test]
fn quorum_two_of_three_releases_at_second_order_statistic() {
    let spec = fork_join(0.001, 3, Some(2));
    let r = run(&spec, 13, f64::INFINITY, 1_000_000);
    // E[2nd smallest of 3 Exp(1)] = 1/3 + 1/2.
    assert_close("2-of-3 R", r.rt(0, 4), 1.0 / 3.0 + 0.5, 0.03);
    // Late siblings are still served: every branch completes every task.
    let forks = r.sum(&r.w.completions, 0, 0);
    for b in 1..=3 {
        let done = r.sum(&r.w.completions, 0, b);
        assert!((done - forks).abs() <= 3.0, "branch {b}: {done} vs {forks}");
    }
}

#[test]
fn fork_branches_may_come_from_the_routing_row() {
    // Without "branches", the fork's routing row lists them (here with a class switch).
    let mut spec = fork_join(0.5, 2, None);
    spec["stations"][0]["branches"] = json!(null);
    spec["routing"]
        .as_array_mut()
        .expect("list")
        .push(json!({"from": [0, 0], "to": [[0, 1, 0.5], [0, 2, 0.5]]}));
    let r = run(&spec, 12, f64::INFINITY, 2_000_000);
    assert_close("fork-join R via routing row", r.rt(0, 3), 2.875, 0.03);
}

#[test]
fn zero_buffer_tandem_blocking_matches_markov_chain() {
    // A saturated machine A feeding B with no buffer (capacity 1 = the job in
    // service), blocking after service, exp(1) each: a 3-state CTMC gives X = 2/3.
    let spec = json!({
        "stations": [queue("A"),
                     {"name": "B", "kind": "queue", "servers": 1, "capacity": 1, "on_full": "block"}],
        "classes": [{"name": "c", "open": false, "population": 3, "reference": 0}],
        "service": [[exp(1.0), exp(1.0)]],
        "routing": [{"from": [0, 0], "to": [[0, 1, 1.0]]}, {"from": [0, 1], "to": [[0, 0, 1.0]]}],
        "entry": [[]],
        "window": 10.0,
    });
    let r = run(&spec, 14, f64::INFINITY, 1_000_000);
    assert_close("blocking X", r.x(0, 1), 2.0 / 3.0, 0.015);
    assert!(
        r.w.q_max.chunks(2).all(|q| q[1] <= 1.0),
        "B never exceeds capacity"
    );
    assert_eq!(r.sum(&r.w.drops, 0, 1), 0.0, "blocking never drops");
    // A's busy share includes the time its server is held by a blocked job: 1 - P(A idle) = 1.
    assert_close(
        "A occupied",
        r.sum(&r.w.busy_area, 0, 0) / r.span(),
        1.0,
        1e-9,
    );
}

#[test]
fn fork_task_waits_outside_a_full_blocking_station() {
    // Think (delay, mean 1) -> fork -> Q (one FCFS server, mean 0.5, room for
    // 2, blocking) -> join -> think, 6 users. A task holds no server, so at a
    // full Q it waits outside in FIFO order: the network then behaves as one
    // with Q unbounded, a birth-death chain in the jobs n forked but not yet
    // joined (birth (6 - n) / Z, death 1 / S), with min(n, 2) of them in Q.
    let (pop, z, s, room) = (6usize, 1.0, 0.5, 2usize);
    let spec = json!({
        "stations": [{"name": "think", "kind": "delay"},
                     {"name": "fork", "kind": "fork", "join": 3, "branches": [2]},
                     {"name": "Q", "kind": "queue", "discipline": "fcfs", "servers": 1,
                      "capacity": room, "on_full": "block"},
                     {"name": "join", "kind": "join"}],
        "classes": [{"name": "c", "open": false, "population": pop, "reference": 0}],
        "service": [[exp(z), null, exp(s), null]],
        "routing": [{"from": [0, 0], "to": [[0, 1, 1.0]]},
                    {"from": [0, 2], "to": [[0, 3, 1.0]]},
                    {"from": [0, 3], "to": [[0, 0, 1.0]]}],
        "entry": [[]],
        "window": 10.0,
    });
    let mut p = vec![1.0];
    for n in 1..=pop {
        p.push(p[n - 1] * (pop - n + 1) as f64 / z * s);
    }
    let total: f64 = p.iter().sum();
    let p: Vec<f64> = p.iter().map(|x| x / total).collect();
    let x = (1.0 - p[0]) / s;
    let in_q: f64 = p
        .iter()
        .enumerate()
        .map(|(n, q)| q * n.min(room) as f64)
        .sum();
    let forked: f64 = p.iter().enumerate().map(|(n, q)| q * n as f64).sum();
    let r = run(&spec, 16, f64::INFINITY, 2_000_000);
    assert_eq!(
        r.sum(&r.w.drops, 0, 2),
        0.0,
        "a waiting task is never dropped"
    );
    assert!(
        r.w.q_max.chunks(4).all(|q| q[2] <= room as f64),
        "Q never exceeds its room"
    );
    assert_close("X at Q", r.x(0, 2), x, 0.015);
    assert_close("jobs in Q", r.q(0, 2), in_q, 0.03);
    assert_close("forked jobs (at the join)", r.q(0, 3), forked, 0.03);
    let sys_x = r.sum_class(&r.w.sys_completions, 0) / r.span();
    assert_close("system X", sys_x, x, 0.015);
}

#[test]
fn class_switching_moves_statistics_to_the_new_class() {
    let spec = json!({
        "stations": [queue("s0"), queue("s1")],
        "classes": [{"name": "a", "open": true, "interarrival": exp(2.0)},
                    {"name": "b", "open": true, "interarrival": exp(1.0)}],
        "service": [[exp(0.5), null], [null, exp(0.5)]],
        "routing": [{"from": [0, 0], "to": [[1, 1, 1.0]]}],
        "entry": [[[0, 1.0]], [[1, 1.0]]],
        "window": 100.0,
    });
    for spec in both_engines(&spec) {
        switched_statistics(&spec);
    }
}

fn switched_statistics(spec: &Value) {
    let r = run(spec, 15, f64::INFINITY, 500_000);
    assert_eq!(r.sum(&r.w.completions, 0, 1), 0.0);
    // Class b at s1 sees both its own arrivals (rate 1) and switched ones (rate 0.5).
    assert_close("s1 class-b X", r.x(1, 1), 1.5, 0.02);
    // Requests are counted for the class they entered as.
    assert_close(
        "class a system X",
        r.sum_class(&r.w.sys_completions, 0) / r.span(),
        0.5,
        0.02,
    );
    assert_close(
        "class b system X",
        r.sum_class(&r.w.sys_completions, 1) / r.span(),
        1.0,
        0.02,
    );
}

#[test]
fn zero_time_hub_passes_and_empty_cycles() {
    // Three jobs, one exponential server (mean 1) and a zero-time hub that
    // sends a job back to itself w.p. 0.99: every pass through the hub ends
    // (and starts) a cycle, so cycles come at 100 times the server's
    // throughput, which is 1 (it is never idle). Long chains of passes must
    // not deepen the stack.
    let spec = json!({
        "stations": [queue("q"), {"name": "hub", "kind": "delay"}],
        "classes": [{"name": "c", "open": false, "population": 3, "reference": 1}],
        "service": [[exp(1.0), {"dist": "det", "mean": 0.0}]],
        "routing": [
            {"from": [0, 1], "to": [[0, 1, 0.99], [0, 0, 0.01]]},
            {"from": [0, 0], "to": [[0, 1, 1.0]]},
        ],
        "entry": [[]],
        "window": 100.0,
    });
    for spec in both_engines(&spec) {
        let r = run(&spec, 5, f64::INFINITY, 40_000);
        assert_close("server X", r.x(0, 0), 1.0, 0.02);
        let cycles = r.sum_class(&r.w.sys_completions, 0) / r.span();
        assert_close("cycles per second", cycles, 100.0, 0.03);
    }
}
