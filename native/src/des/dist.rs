//! Distributions of service, interarrival, think and retry times.
//!
//! Design: one closed enum, parsed and validated once from the spec, whose
//! parameters are pre-transformed into what sampling needs (rates, log-space
//! parameters, cumulative tables), so a draw is a few arithmetic operations
//! on one stream.

use serde_json::Value;

use super::json::{bad, item, list, numbers, Obj};
use super::rng::Rng;
use crate::error::Result;

/// A validated distribution on `[0, inf)`.
#[derive(Debug, Clone)]
pub enum Dist {
    Exp {
        mean: f64,
    },
    Det {
        value: f64,
    },
    Erlang {
        k: u32,
        phase_mean: f64,
    },
    /// Two phases with balanced means: phase 1 with probability `p`.
    HyperExp {
        p: f64,
        mean1: f64,
        mean2: f64,
    },
    LogNormal {
        mu: f64,
        sigma: f64,
    },
    Uniform {
        low: f64,
        width: f64,
    },
    Ph(Box<PhaseType>),
    Empirical(Box<[f64]>),
    /// Column `column` of the request's row of the model's demand table
    /// (`Model::rows`): a request's demands at several stations drawn
    /// together, so that a measured mix keeps its correlations. The engine
    /// reads it from the job's row; [`Dist::sample`] never sees it.
    Row {
        column: u32,
    },
}

/// A phase-type law, simulated as its absorbing Markov chain.
#[derive(Debug, Clone)]
pub struct PhaseType {
    /// Cumulative initial probabilities; mass beyond the last is an immediate absorption.
    start_cum: Vec<f64>,
    /// Mean holding time of each phase (`1 / -T[i][i]`).
    hold_mean: Vec<f64>,
    /// Row `i`: cumulative jump probabilities to phases `0..n`; the rest absorbs.
    jump_cum: Vec<Vec<f64>>,
}

/// Tolerance for probabilities that must sum to one.
const SUM_TOL: f64 = 1e-6;

impl Dist {
    /// Parses `{"dist": ..., ...}` at `path`.
    pub fn parse(v: &Value, path: &str) -> Result<Dist> {
        let o = Obj::new(v, path)?;
        let kind = o.str("dist")?;
        let positive = |key: &str| -> Result<f64> {
            let x = o.f64(key)?;
            if x > 0.0 {
                Ok(x)
            } else {
                Err(bad(o.at(key), format!("must be > 0, got {x}")))
            }
        };
        let d = match kind {
            "exp" => Dist::Exp {
                mean: positive("mean")?,
            },
            "det" => {
                let value = o.f64("mean")?;
                if value < 0.0 {
                    return Err(bad(o.at("mean"), format!("must be >= 0, got {value}")));
                }
                Dist::Det { value }
            }
            "erlang" => {
                let mean = positive("mean")?;
                let k = o.count("k")?;
                if k == 0 || k > 1_000_000 {
                    return Err(bad(o.at("k"), format!("must be in 1..=1000000, got {k}")));
                }
                Dist::Erlang {
                    k: k as u32,
                    phase_mean: mean / k as f64,
                }
            }
            "hyperexp" => {
                let mean = positive("mean")?;
                let scv = o.f64("scv")?;
                if scv < 1.0 {
                    return Err(bad(
                        o.at("scv"),
                        format!("hyperexp needs scv >= 1 (use erlang below 1), got {scv}"),
                    ));
                }
                let p = 0.5 * (1.0 + ((scv - 1.0) / (scv + 1.0)).sqrt());
                Dist::HyperExp {
                    p,
                    mean1: mean / (2.0 * p),
                    mean2: mean / (2.0 * (1.0 - p)),
                }
            }
            "lognormal" => {
                let mean = positive("mean")?;
                let scv = o.f64("scv")?;
                if scv < 0.0 {
                    return Err(bad(o.at("scv"), format!("must be >= 0, got {scv}")));
                }
                let s2 = scv.ln_1p();
                Dist::LogNormal {
                    mu: mean.ln() - 0.5 * s2,
                    sigma: s2.sqrt(),
                }
            }
            "uniform" => {
                let low = o.f64("low")?;
                let high = o.f64("high")?;
                if low < 0.0 || high < low {
                    return Err(bad(
                        o.at("high"),
                        format!("uniform needs 0 <= low <= high, got low={low}, high={high}"),
                    ));
                }
                Dist::Uniform {
                    low,
                    width: high - low,
                }
            }
            "ph" => Dist::Ph(Box::new(PhaseType::parse(&o)?)),
            "empirical" => {
                let at = o.at("samples");
                let samples = numbers(o.req("samples")?, &at)?;
                if samples.is_empty() {
                    return Err(bad(at, "needs at least one sample"));
                }
                if let Some(i) = samples.iter().position(|&x| x < 0.0) {
                    return Err(bad(
                        item(&at, i),
                        format!("must be >= 0, got {}", samples[i]),
                    ));
                }
                Dist::Empirical(samples.into_boxed_slice())
            }
            "row" => {
                let column = o.count("column")?;
                if column > u64::from(u32::MAX) {
                    return Err(bad(o.at("column"), format!("{column} is too large")));
                }
                Dist::Row {
                    column: column as u32,
                }
            }
            other => {
                return Err(bad(
                    o.at("dist"),
                    format!(
                        "unknown distribution '{other}' (expected exp, det, erlang, hyperexp, \
                         lognormal, uniform, ph, empirical or row)"
                    ),
                ))
            }
        };
        Ok(d)
    }

    /// Whether the law puts all its mass on zero (an interarrival law must not).
    pub fn is_zero(&self) -> bool {
        match self {
            Dist::Det { value } => *value == 0.0,
            Dist::Uniform { low, width } => *low == 0.0 && *width == 0.0,
            Dist::Empirical(s) => s.iter().all(|&x| x == 0.0),
            Dist::Ph(ph) => ph.start_cum.last().is_none_or(|&c| c == 0.0),
            _ => false,
        }
    }

    /// One draw from stream `rng`.
    #[inline]
    pub fn sample(&self, rng: &mut Rng) -> f64 {
        match self {
            Dist::Exp { mean } => mean * rng.exp1(),
            Dist::Det { value } => *value,
            Dist::Erlang { k, phase_mean } => {
                // Sum of logs rather than log of a product: no underflow for large k.
                let mut s = 0.0;
                for _ in 0..*k {
                    s += rng.exp1();
                }
                phase_mean * s
            }
            Dist::HyperExp { p, mean1, mean2 } => {
                let m = if rng.unit() < *p { mean1 } else { mean2 };
                m * rng.exp1()
            }
            Dist::LogNormal { mu, sigma } => (mu + sigma * rng.normal()).exp(),
            Dist::Uniform { low, width } => low + width * rng.unit(),
            Dist::Ph(ph) => ph.sample(rng),
            Dist::Empirical(s) => {
                let i = ((rng.unit() * s.len() as f64) as usize).min(s.len() - 1);
                s[i]
            }
            // (read from the job's row by the engine)
            Dist::Row { .. } => 0.0,
        }
    }
}

/// First index whose cumulative probability exceeds `u`, or `cum.len()`.
fn pick(cum: &[f64], u: f64) -> usize {
    cum.iter().position(|&c| u < c).unwrap_or(cum.len())
}

impl PhaseType {
    fn parse(o: &Obj<'_>) -> Result<PhaseType> {
        let a_at = o.at("alpha");
        let t_at = o.at("T");
        let alpha = numbers(o.req("alpha")?, &a_at)?;
        let rows = list(o.req("T")?, &t_at)?;
        let n = alpha.len();
        if n == 0 {
            return Err(bad(a_at, "needs at least one phase"));
        }
        if rows.len() != n {
            return Err(bad(
                t_at,
                format!(
                    "has {} rows, expected {n} (one per entry of alpha)",
                    rows.len()
                ),
            ));
        }
        if let Some(i) = alpha.iter().position(|&a| a < 0.0) {
            return Err(bad(
                item(&a_at, i),
                format!("must be >= 0, got {}", alpha[i]),
            ));
        }
        let total: f64 = alpha.iter().sum();
        if total > 1.0 + SUM_TOL {
            return Err(bad(a_at, format!("sums to {total}, must be <= 1")));
        }
        let mut start_cum = Vec::with_capacity(n);
        let mut acc = 0.0;
        for a in &alpha {
            acc += a;
            start_cum.push(acc);
        }
        let mut hold_mean = Vec::with_capacity(n);
        let mut jump_cum = Vec::with_capacity(n);
        let mut exits = vec![false; n];
        let mut succ: Vec<Vec<usize>> = vec![Vec::new(); n];
        for (i, row_v) in rows.iter().enumerate() {
            let row_at = item(&t_at, i);
            let row = numbers(row_v, &row_at)?;
            if row.len() != n {
                return Err(bad(
                    row_at,
                    format!("has {} entries, expected {n}", row.len()),
                ));
            }
            let rate = -row[i];
            if rate <= 0.0 {
                return Err(bad(
                    item(&row_at, i),
                    format!("diagonal must be < 0, got {}", row[i]),
                ));
            }
            let mut cum = Vec::with_capacity(n);
            let mut acc = 0.0;
            for (j, &x) in row.iter().enumerate() {
                if j != i {
                    if x < 0.0 {
                        return Err(bad(
                            item(&row_at, j),
                            format!("off-diagonal rate must be >= 0, got {x}"),
                        ));
                    }
                    if x > 0.0 {
                        succ[i].push(j);
                    }
                    acc += x / rate;
                }
                cum.push(acc);
            }
            if acc > 1.0 + SUM_TOL {
                return Err(bad(row_at, "row sum must be <= 0 (a sub-generator)"));
            }
            exits[i] = acc < 1.0 - 1e-12;
            hold_mean.push(1.0 / rate);
            jump_cum.push(cum);
        }
        // Absorption must be reachable from every phase, or a draw never ends.
        let mut absorbs = exits.clone();
        loop {
            let mut changed = false;
            for i in 0..n {
                if !absorbs[i] && succ[i].iter().any(|&j| absorbs[j]) {
                    absorbs[i] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        if let Some(i) = absorbs.iter().position(|a| !a) {
            return Err(bad(
                t_at,
                format!("phase {i} can never be absorbed (T must be a transient generator)"),
            ));
        }
        Ok(PhaseType {
            start_cum,
            hold_mean,
            jump_cum,
        })
    }

    fn sample(&self, rng: &mut Rng) -> f64 {
        let n = self.hold_mean.len();
        let mut i = pick(&self.start_cum, rng.unit());
        let mut t = 0.0;
        while i < n {
            t += self.hold_mean[i] * rng.exp1();
            i = pick(&self.jump_cum[i], rng.unit());
        }
        t
    }
}

/// Parses an optional distribution (`null` → `None`).
pub fn parse_opt(v: &Value, path: &str) -> Result<Option<Dist>> {
    if v.is_null() {
        Ok(None)
    } else {
        Dist::parse(v, path).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn moments(d: &Dist, n: usize) -> (f64, f64) {
        let mut rng = Rng::stream(42, 0, 9);
        let (mut s, mut s2) = (0.0, 0.0);
        for _ in 0..n {
            let x = d.sample(&mut rng);
            s += x;
            s2 += x * x;
        }
        let m = s / n as f64;
        (m, (s2 / n as f64 - m * m) / (m * m))
    }

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs()
    }

    #[test]
    fn means_and_scvs_match_parameters() {
        let cases = [
            (json!({"dist": "exp", "mean": 2.0}), 2.0, 1.0),
            (json!({"dist": "det", "mean": 0.5}), 0.5, 0.0),
            (json!({"dist": "erlang", "mean": 3.0, "k": 4}), 3.0, 0.25),
            (
                json!({"dist": "hyperexp", "mean": 1.0, "scv": 4.0}),
                1.0,
                4.0,
            ),
            (
                json!({"dist": "lognormal", "mean": 1.5, "scv": 0.5}),
                1.5,
                0.5,
            ),
            (
                json!({"dist": "uniform", "low": 1.0, "high": 3.0}),
                2.0,
                1.0 / 12.0,
            ),
            // Erlang-2 with rate 2 per phase written as a PH law: mean 1, scv 1/2.
            (
                json!({"dist": "ph", "alpha": [1.0, 0.0], "T": [[-2.0, 2.0], [0.0, -2.0]]}),
                1.0,
                0.5,
            ),
            (
                json!({"dist": "empirical", "samples": [1.0, 3.0]}),
                2.0,
                0.25,
            ),
        ];
        for (v, mean, scv) in cases {
            let d = Dist::parse(&v, "d").expect("valid");
            let (m, c) = moments(&d, 400_000);
            assert!(close(m, mean, 0.01), "{v}: mean {m} vs {mean}");
            if scv == 0.0 {
                assert!(c.abs() < 1e-9, "{v}: scv {c}");
            } else {
                assert!(close(c, scv, 0.05), "{v}: scv {c} vs {scv}");
            }
        }
    }

    #[test]
    fn bad_parameters_name_the_field() {
        let e = Dist::parse(&json!({"dist": "exp", "mean": -1.0}), "service[0][1]").unwrap_err();
        assert!(e.to_string().contains("service[0][1].mean"), "{e}");
        let e =
            Dist::parse(&json!({"dist": "hyperexp", "mean": 1.0, "scv": 0.5}), "x").unwrap_err();
        assert!(e.to_string().contains("x.scv"), "{e}");
        let e = Dist::parse(&json!({"dist": "gamma", "mean": 1.0}), "x").unwrap_err();
        assert!(e.to_string().contains("x.dist"), "{e}");
        let e = Dist::parse(&json!({"dist": "ph", "alpha": [1.0], "T": [[0.0]]}), "x").unwrap_err();
        assert!(e.to_string().contains("x.T[0][0]"), "{e}");
        let e = Dist::parse(
            &json!({"dist": "ph", "alpha": [1.0, 0.0], "T": [[-1.0, 1.0], [1.0, -1.0]]}),
            "x",
        )
        .unwrap_err();
        assert!(e.to_string().contains("never be absorbed"), "{e}");
    }
}
