//! Single queues against closed-form results.

use serde_json::json;

use super::{assert_close, both_engines, exp, run, single_queue};

#[test]
fn mm1_response_time_at_rho_half() {
    let r = run(
        &single_queue(0.5, exp(1.0), "fcfs", 1, None),
        1,
        f64::INFINITY,
        1_000_000,
    );
    assert_close("M/M/1 rho=0.5 W", r.rt(0, 0), 2.0, 0.02);
    assert_close("M/M/1 rho=0.5 X", r.x(0, 0), 0.5, 0.01);
    // Little's law inside the engine's own accounting.
    assert_close("L = X W", r.q(0, 0), r.x(0, 0) * r.rt(0, 0), 0.01);
    // Busy fraction equals rho.
    let u = r.sum(&r.w.busy_area, 0, 0) / r.span();
    assert_close("M/M/1 U", u, 0.5, 0.01);
}

#[test]
fn mm1_response_time_at_rho_09() {
    let r = run(
        &single_queue(0.9, exp(1.0), "fcfs", 1, None),
        2,
        f64::INFINITY,
        4_000_000,
    );
    assert_close("M/M/1 rho=0.9 W", r.rt(0, 0), 10.0, 0.05);
    // System response time of the open class is the same single visit.
    let sys = r.sum_class(&r.w.sys_rt_sum, 0) / r.sum_class(&r.w.sys_completions, 0);
    assert_close("M/M/1 rho=0.9 sys W", sys, r.rt(0, 0), 1e-3);
}

/// Pollaczek–Khinchine: W = S + rho S (1 + scv) / (2 (1 - rho)).
fn pk(rho: f64, s: f64, scv: f64) -> f64 {
    s + rho * s * (1.0 + scv) / (2.0 * (1.0 - rho))
}

#[test]
fn md1_matches_pollaczek_khinchine() {
    let det = json!({"dist": "det", "mean": 1.0});
    let r = run(
        &single_queue(0.7, det, "fcfs", 1, None),
        3,
        f64::INFINITY,
        1_000_000,
    );
    assert_close("M/D/1 W", r.rt(0, 0), pk(0.7, 1.0, 0.0), 0.02);
}

#[test]
fn mh2_1_matches_pollaczek_khinchine() {
    let h2 = json!({"dist": "hyperexp", "mean": 1.0, "scv": 4.0});
    let r = run(
        &single_queue(0.7, h2, "fcfs", 1, None),
        4,
        f64::INFINITY,
        4_000_000,
    );
    assert_close("M/H2/1 W", r.rt(0, 0), pk(0.7, 1.0, 4.0), 0.05);
}

#[test]
fn mg1_ps_is_insensitive() {
    let laws = [
        json!({"dist": "det", "mean": 1.0}),
        json!({"dist": "hyperexp", "mean": 1.0, "scv": 4.0}),
    ];
    for (i, law) in laws.into_iter().enumerate() {
        let r = run(
            &single_queue(0.7, law.clone(), "ps", 1, None),
            5 + i as u64,
            f64::INFINITY,
            2_000_000,
        );
        assert_close(
            &format!("M/G/1-PS W with {law}"),
            r.rt(0, 0),
            1.0 / 0.3,
            0.04,
        );
    }
}

#[test]
fn mm3_matches_erlang_c() {
    let (lambda, m) = (2.4_f64, 3);
    let a = lambda; // offered load with mu = 1
    let rho = a / m as f64;
    let mut fact = 1.0;
    let mut sum = 0.0;
    for k in 0..m {
        if k > 0 {
            fact *= k as f64;
        }
        sum += a.powi(k) / fact;
    }
    let top = a.powi(m) / (fact * m as f64) / (1.0 - rho);
    let erlang_c = top / (sum + top);
    let w = erlang_c / (m as f64 - lambda) + 1.0;
    for spec in both_engines(&single_queue(lambda, exp(1.0), "fcfs", 3, None)) {
        let r = run(&spec, 6, f64::INFINITY, 2_000_000);
        assert_close("M/M/3 W", r.rt(0, 0), w, 0.03);
        let u = r.sum(&r.w.busy_area, 0, 0) / r.span();
        assert_close("M/M/3 U", u, rho, 0.01);
        assert_close("M/M/3 L = X W", r.q(0, 0), r.x(0, 0) * r.rt(0, 0), 0.01);
    }
}

#[test]
fn load_dependent_ps_equals_multiserver_rates() {
    // PS with alpha = [1, 2, 3] is a 3-server PS: same queue-length law as M/M/3.
    let mut spec = single_queue(2.4, exp(1.0), "ps", 3, None);
    spec["stations"][0]["alpha"] = json!([1.0, 2.0, 3.0]);
    let fcfs = run(
        &single_queue(2.4, exp(1.0), "fcfs", 3, None),
        7,
        f64::INFINITY,
        2_000_000,
    );
    let ps = run(&spec, 7, f64::INFINITY, 2_000_000);
    assert_close("3-server PS vs M/M/3 W", ps.rt(0, 0), fcfs.rt(0, 0), 0.04);
}

#[test]
fn delay_station_is_infinite_server() {
    let mut spec = single_queue(
        5.0,
        json!({"dist": "erlang", "mean": 2.0, "k": 3}),
        "ps",
        1,
        None,
    );
    spec["stations"][0]["kind"] = json!("delay");
    let r = run(&spec, 8, f64::INFINITY, 1_000_000);
    assert_close("M/G/inf W", r.rt(0, 0), 2.0, 0.01);
    assert_close("M/G/inf L", r.q(0, 0), 10.0, 0.02);
    // For a delay station the busy area is the number in service.
    assert_close(
        "M/G/inf busy",
        r.sum(&r.w.busy_area, 0, 0) / r.span(),
        10.0,
        0.02,
    );
}

#[test]
fn mm1k_drop_matches_blocking_probability() {
    let (rho, k) = (0.8_f64, 5);
    let p_block = (1.0 - rho) * rho.powi(k) / (1.0 - rho.powi(k + 1));
    let r = run(
        &single_queue(0.8, exp(1.0), "fcfs", 1, Some(k as u32)),
        9,
        f64::INFINITY,
        2_000_000,
    );
    let drops = r.sum(&r.w.drops, 0, 0);
    let admitted = r.sum(&r.w.arrivals, 0, 0);
    assert_close("M/M/1/K P_block", drops / (drops + admitted), p_block, 0.03);
    assert!(r.w.q_max.iter().all(|&q| q <= k as f64));
}
