//! What happens to each packet of a link: its delay and whether it is lost.
//!
//! The semantics follow Linux `netem`, which these kernels lack: a delay of a `mean` with a
//! `jitter` drawn from a distribution (constant, uniform on mean ± jitter, normal, or Pareto
//! with that mean and standard deviation, the heavy tail of the Kafka thesis's traces), the
//! successive uniforms optionally correlated as netem correlates them
//! (u' = (1 - ρ) u + ρ u_prev); loss either Bernoulli (correlated the same way) or a
//! Gilbert–Elliott chain (netem's `gemodel p r 1-h 1-k`: good → bad with `p`, bad → good with
//! `r`, a packet lost with `bad_loss` in the bad state and `good_loss` in the good one).

use serde::Deserialize;

use crate::des::rng::Rng;

/// A delay distribution (seconds).
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
pub enum Delay {
    Constant {
        mean: f64,
    },
    Uniform {
        mean: f64,
        jitter: f64,
        #[serde(default)]
        correlation: f64,
    },
    Normal {
        mean: f64,
        jitter: f64,
        #[serde(default)]
        correlation: f64,
    },
    Pareto {
        mean: f64,
        jitter: f64,
        #[serde(default)]
        correlation: f64,
    },
}

/// A loss process.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(tag = "model", rename_all = "snake_case", deny_unknown_fields)]
pub enum Loss {
    Bernoulli {
        p: f64,
        #[serde(default)]
        correlation: f64,
    },
    GilbertElliott {
        p: f64,
        r: f64,
        #[serde(default = "one")]
        bad_loss: f64,
        #[serde(default)]
        good_loss: f64,
    },
}

fn one() -> f64 {
    1.0
}

impl Delay {
    pub fn check(&self) -> Result<(), String> {
        let (mean, jitter, rho) = match *self {
            Delay::Constant { mean } => (mean, 0.0, 0.0),
            Delay::Uniform {
                mean,
                jitter,
                correlation,
            }
            | Delay::Normal {
                mean,
                jitter,
                correlation,
            }
            | Delay::Pareto {
                mean,
                jitter,
                correlation,
            } => (mean, jitter, correlation),
        };
        if !(0.0..=60.0).contains(&mean) {
            return Err(format!("delay mean {mean} s: expected 0 to 60 seconds"));
        }
        if !(jitter.is_finite() && jitter >= 0.0) {
            return Err(format!("delay jitter {jitter} s: expected >= 0"));
        }
        if let Delay::Uniform { .. } = self {
            if jitter > mean {
                return Err(format!(
                    "uniform delay jitter {jitter} s above its mean {mean} s"
                ));
            }
        }
        if let Delay::Pareto { .. } = self {
            if !(jitter > 0.0 && mean > 0.0) {
                return Err("a Pareto delay needs a mean and a jitter above 0".into());
            }
        }
        if !(0.0..1.0).contains(&rho) {
            return Err(format!(
                "delay correlation {rho}: expected 0 <= correlation < 1"
            ));
        }
        Ok(())
    }
}

impl Loss {
    pub fn check(&self) -> Result<(), String> {
        let ok = |x: f64| (0.0..=1.0).contains(&x);
        match *self {
            Loss::Bernoulli { p, correlation } => {
                if !ok(p) || !(0.0..1.0).contains(&correlation) {
                    return Err(format!(
                        "bernoulli loss p {p}, correlation {correlation}: expected 0..1"
                    ));
                }
            }
            Loss::GilbertElliott {
                p,
                r,
                bad_loss,
                good_loss,
            } => {
                if !(p > 0.0 && ok(p) && r > 0.0 && ok(r) && ok(bad_loss) && ok(good_loss)) {
                    return Err(format!(
                        "gilbert_elliott p {p}, r {r}: expected in (0, 1]; losses in [0, 1]"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The state of one link's random processes.
pub struct Link {
    delay: Option<Delay>,
    loss: Option<Loss>,
    rng: Rng,
    last_delay_u: f64,
    last_loss_u: f64,
    bad: bool,
}

impl Link {
    pub fn new(delay: Option<Delay>, loss: Option<Loss>, seed: u64) -> Link {
        Link {
            delay,
            loss,
            rng: Rng::stream(seed, 0, 0),
            last_delay_u: 0.5,
            last_loss_u: 0.5,
            bad: false,
        }
    }

    fn correlated(&mut self, rho: f64, last: f64) -> f64 {
        let u = self.rng.open_unit();
        if rho > 0.0 {
            (1.0 - rho) * u + rho * last
        } else {
            u
        }
    }

    /// Whether the next packet is lost.
    pub fn lost(&mut self) -> bool {
        match self.loss {
            None => false,
            Some(Loss::Bernoulli { p, correlation }) => {
                let u = self.correlated(correlation, self.last_loss_u);
                self.last_loss_u = u;
                u < p
            }
            Some(Loss::GilbertElliott {
                p,
                r,
                bad_loss,
                good_loss,
            }) => {
                // the state the packet meets, then the chain's next step
                let lose = self.rng.unit() < if self.bad { bad_loss } else { good_loss };
                let flip = self.rng.unit() < if self.bad { r } else { p };
                if flip {
                    self.bad = !self.bad;
                }
                lose
            }
        }
    }

    /// The next packet's delay in seconds (never below 0).
    pub fn delay(&mut self) -> f64 {
        let Some(d) = self.delay else { return 0.0 };
        let u = match d.correlation() {
            None => 0.5, // a constant delay draws nothing
            Some(correlation) => {
                let u = self.correlated(correlation, self.last_delay_u);
                self.last_delay_u = u;
                u
            }
        };
        d.quantile(u).max(0.0)
    }
}

impl Delay {
    /// The correlation of successive draws; None for a constant delay, which draws nothing.
    fn correlation(&self) -> Option<f64> {
        match *self {
            Delay::Constant { .. } => None,
            Delay::Uniform { correlation, .. }
            | Delay::Normal { correlation, .. }
            | Delay::Pareto { correlation, .. } => Some(correlation),
        }
    }

    /// The delay at probability ``u`` in (0, 1) of the distribution.
    fn quantile(&self, u: f64) -> f64 {
        match *self {
            Delay::Constant { mean } => mean,
            Delay::Uniform { mean, jitter, .. } => mean - jitter + 2.0 * jitter * u,
            Delay::Normal { mean, jitter, .. } => mean + jitter * inverse_normal(u),
            Delay::Pareto { mean, jitter, .. } => {
                // Pareto I with this mean and standard deviation: shape a = 1 + sqrt(1 + m²/s²)
                let a = 1.0 + (1.0 + (mean / jitter).powi(2)).sqrt();
                let scale = mean * (a - 1.0) / a;
                scale / (1.0 - u).powf(1.0 / a)
            }
        }
    }
}

/// The standard normal quantile (Acklam's rational approximation, |error| < 1.2e-9).
#[allow(clippy::excessive_precision)]
pub fn inverse_normal(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.383577518672690e2,
        -3.066479806614716e1,
        2.506628277459239,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e1,
        1.615858368580409e2,
        -1.556989798598866e2,
        6.680131188771972e1,
        -1.328068155288572e1,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-3,
        3.224671290700398e-1,
        2.445134137142996,
        3.754408661907416,
    ];
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let lo = 0.02425;
    if p < lo {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - lo {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        -inverse_normal(1.0 - p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draws(link: &mut Link, n: usize) -> Vec<f64> {
        (0..n).map(|_| link.delay()).collect()
    }

    fn mean_sd(x: &[f64]) -> (f64, f64) {
        let m = x.iter().sum::<f64>() / x.len() as f64;
        let v = x.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / x.len() as f64;
        (m, v.sqrt())
    }

    #[test]
    fn delays_have_their_mean_and_jitter() {
        let cases = [
            Delay::Uniform {
                mean: 0.04,
                jitter: 0.01,
                correlation: 0.0,
            },
            Delay::Normal {
                mean: 0.04,
                jitter: 0.01,
                correlation: 0.0,
            },
            Delay::Pareto {
                mean: 0.04,
                jitter: 0.01,
                correlation: 0.0,
            },
        ];
        let sds = [0.01 / 3f64.sqrt(), 0.01, 0.01];
        for (d, want_sd) in cases.iter().zip(sds) {
            let (m, sd) = mean_sd(&draws(&mut Link::new(Some(*d), None, 7), 400_000));
            assert!((m - 0.04).abs() < 0.0004, "{d:?}: mean {m}");
            assert!((sd - want_sd).abs() < 0.08 * want_sd, "{d:?}: sd {sd}");
        }
        assert_eq!(
            Link::new(Some(Delay::Constant { mean: 0.02 }), None, 1).delay(),
            0.02
        );
    }

    #[test]
    fn correlated_uniform_delays_follow_each_other() {
        let d = Delay::Uniform {
            mean: 0.05,
            jitter: 0.05,
            correlation: 0.9,
        };
        let x = draws(&mut Link::new(Some(d), None, 3), 100_000);
        let (m, _) = mean_sd(&x);
        let lag1: f64 = x.windows(2).map(|w| (w[0] - m) * (w[1] - m)).sum::<f64>()
            / x.iter().map(|v| (v - m) * (v - m)).sum::<f64>();
        assert!(lag1 > 0.8, "lag-1 autocorrelation {lag1}");
    }

    #[test]
    fn bernoulli_loss_rate() {
        let mut link = Link::new(
            None,
            Some(Loss::Bernoulli {
                p: 0.1,
                correlation: 0.0,
            }),
            5,
        );
        let lost = (0..200_000).filter(|_| link.lost()).count() as f64 / 200_000.0;
        assert!((lost - 0.1).abs() < 0.003, "{lost}");
    }

    #[test]
    fn gilbert_elliott_loss_and_bursts() {
        // netem gemodel 1% 10% 70% 0.1%: stationary loss (p(1-h) + r(1-k)) / (p + r) = 6.45 %,
        // bad-state stays geometric with mean 1/r = 10 packets
        let ge = Loss::GilbertElliott {
            p: 0.01,
            r: 0.10,
            bad_loss: 0.70,
            good_loss: 0.001,
        };
        let mut link = Link::new(None, Some(ge), 11);
        let n = 2_000_000;
        let mut lost = 0usize;
        let mut bursts = Vec::new();
        let mut run = 0usize;
        for _ in 0..n {
            let was_bad = link.bad;
            lost += link.lost() as usize;
            if was_bad {
                run += 1;
            } else if run > 0 {
                bursts.push(run);
                run = 0;
            }
        }
        let rate = lost as f64 / n as f64;
        assert!((rate - 0.0645).abs() < 0.002, "{rate}");
        let mean_burst = bursts.iter().sum::<usize>() as f64 / bursts.len() as f64;
        assert!((mean_burst - 10.0).abs() < 0.3, "{mean_burst}");
    }

    #[test]
    fn bad_settings_are_refused() {
        assert!(Delay::Uniform {
            mean: 0.01,
            jitter: 0.02,
            correlation: 0.0
        }
        .check()
        .is_err());
        assert!(Delay::Pareto {
            mean: 0.01,
            jitter: 0.0,
            correlation: 0.0
        }
        .check()
        .is_err());
        assert!(Loss::Bernoulli {
            p: 1.5,
            correlation: 0.0
        }
        .check()
        .is_err());
        assert!(Loss::GilbertElliott {
            p: 0.0,
            r: 0.1,
            bad_loss: 1.0,
            good_loss: 0.0
        }
        .check()
        .is_err());
        assert!((inverse_normal(0.975) - 1.959964).abs() < 1e-5);
    }
}
