//! The load profile of a run (ramp-up, steady, ramp-down) and arrival times under it.
//!
//! Design: the offered load is `level × f(t)` with `f` rising linearly from 0 to 1
//! over the ramp-up, 1 in the steady window and falling linearly to 0 over the
//! ramp-down. Arrivals of a non-homogeneous process are produced by time change:
//! points of a homogeneous process in "full-load seconds" `s` are mapped back to
//! clock time through the inverse of `F(t) = ∫₀ᵗ f`, which is exact for Poisson
//! processes and keeps constant spacing exact in `s`.

/// Phase of a time within a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    RampUp = 0,
    Steady = 1,
    RampDown = 2,
}

/// Names of the phases, by their `u8` value.
pub const PHASE_NAMES: [&str; 3] = ["ramp-up", "steady", "ramp-down"];

/// Durations of the three phases, in seconds.
#[derive(Debug, Clone, Copy)]
pub struct Profile {
    pub ramp_up: f64,
    pub steady: f64,
    pub ramp_down: f64,
}

impl Profile {
    /// End of the load (seconds after its start).
    pub fn end(&self) -> f64 {
        self.ramp_up + self.steady + self.ramp_down
    }

    /// `F(t)`: full-load seconds offered up to `t`.
    pub fn cum(&self, t: f64) -> f64 {
        let (ru, st, rd) = (self.ramp_up, self.steady, self.ramp_down);
        if t <= 0.0 {
            0.0
        } else if t < ru {
            t * t / (2.0 * ru)
        } else if t < ru + st {
            ru / 2.0 + (t - ru)
        } else if t < ru + st + rd {
            let tau = t - ru - st;
            ru / 2.0 + st + tau - tau * tau / (2.0 * rd)
        } else {
            self.total()
        }
    }

    /// `F(end)`.
    pub fn total(&self) -> f64 {
        self.ramp_up / 2.0 + self.steady + self.ramp_down / 2.0
    }

    /// The time `t` with `F(t) = s`, or `None` beyond the end of the load.
    pub fn inverse(&self, s: f64) -> Option<f64> {
        let (ru, st, rd) = (self.ramp_up, self.steady, self.ramp_down);
        if s < 0.0 || s >= self.total() {
            return None;
        }
        if s < ru / 2.0 {
            return Some((2.0 * ru * s).sqrt());
        }
        let s2 = s - ru / 2.0;
        if s2 < st {
            return Some(ru + s2);
        }
        // tau - tau²/(2 rd) = s3, smaller root; written to avoid cancellation.
        let s3 = s2 - st;
        let disc = (1.0 - 2.0 * s3 / rd).max(0.0);
        let tau = 2.0 * s3 / (1.0 + disc.sqrt());
        Some(ru + st + tau)
    }

    /// The phase `t` falls in (times after the end count as ramp-down).
    pub fn phase(&self, t: f64) -> Phase {
        if t < self.ramp_up {
            Phase::RampUp
        } else if t < self.ramp_up + self.steady {
            Phase::Steady
        } else {
            Phase::RampDown
        }
    }

    /// Closed mode: when user `i` of `n` starts and stops (seconds), so that the number
    /// of users present follows the profile (last started, first stopped).
    pub fn user_window(&self, i: u64, n: u64) -> (f64, f64) {
        let n = n.max(1) as f64;
        let i = i as f64;
        // Mid-points, so that round(n · f(t)) users are present at time t.
        let start = self.ramp_up * (i + 0.5) / n;
        let stop = self.ramp_up + self.steady + self.ramp_down * (n - 0.5 - i) / n;
        (start, stop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inverse_inverts_cum_in_every_phase() {
        let p = Profile {
            ramp_up: 4.0,
            steady: 10.0,
            ramp_down: 6.0,
        };
        assert!((p.total() - (2.0 + 10.0 + 3.0)).abs() < 1e-12);
        for k in 0..1500 {
            let s = k as f64 * 0.01;
            let t = p.inverse(s).unwrap();
            assert!((p.cum(t) - s).abs() < 1e-9, "s={s} t={t}");
        }
        assert_eq!(p.inverse(p.total()), None);
    }

    #[test]
    fn no_ramps_is_a_plain_window() {
        let p = Profile {
            ramp_up: 0.0,
            steady: 5.0,
            ramp_down: 0.0,
        };
        assert_eq!(p.inverse(0.0), Some(0.0));
        assert_eq!(p.inverse(2.5), Some(2.5));
        assert_eq!(p.phase(0.0), Phase::Steady);
        assert_eq!(p.phase(5.0), Phase::RampDown);
    }

    #[test]
    fn users_follow_the_profile() {
        let p = Profile {
            ramp_up: 10.0,
            steady: 5.0,
            ramp_down: 10.0,
        };
        let n = 100;
        let present = |t: f64| {
            (0..n)
                .filter(|&i| {
                    let (a, b) = p.user_window(i, n);
                    a <= t && t < b
                })
                .count()
        };
        assert_eq!(present(5.0), 50);
        assert_eq!(present(12.0), 100);
        assert_eq!(present(20.0), 50);
        assert_eq!(present(25.0), 0);
    }
}
