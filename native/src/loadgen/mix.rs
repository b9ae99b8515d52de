//! The Markov chain that chooses interactions (RUBBoS/RUBiS-style transition tables).
//!
//! Design: after interaction `i` the session ends with probability `end[i]`;
//! otherwise the next interaction is drawn from the row of the one just done. A new
//! session starts from `initial`. Open mode has no sessions, so its requests are
//! independent draws from the chain's stationary distribution (computed by the caller,
//! which includes the restarts). Rows are cumulative, so a draw is one uniform and a
//! binary search.

use crate::des::rng::Rng;

use super::config::MixSpec;

fn cumulative(p: &[f64]) -> Box<[f64]> {
    let mut acc = 0.0;
    let mut v: Vec<f64> = p
        .iter()
        .map(|x| {
            acc += x;
            acc
        })
        .collect();
    // Guard against rounding: the last non-zero entry must catch every uniform below 1.
    if let Some(&top) = v.last() {
        for c in v.iter_mut().rev() {
            if *c == top {
                *c = f64::INFINITY;
            } else {
                break;
            }
        }
    }
    v.into_boxed_slice()
}

#[inline]
fn pick(cum: &[f64], u: f64) -> u16 {
    cum.partition_point(|&c| c <= u).min(cum.len() - 1) as u16
}

/// A validated chain over the interactions.
#[derive(Debug, Clone)]
pub struct Mix {
    initial: Box<[f64]>,
    rows: Box<[Box<[f64]>]>,
    stationary: Box<[f64]>,
    end: Box<[f64]>,
}

impl Mix {
    /// Builds the chain from a validated spec.
    pub fn new(spec: &MixSpec) -> Mix {
        Mix {
            initial: cumulative(&spec.initial),
            rows: spec.transitions.iter().map(|r| cumulative(r)).collect(),
            stationary: cumulative(&spec.stationary),
            end: spec.end.clone().into_boxed_slice(),
        }
    }

    /// First interaction of a session.
    #[inline]
    pub fn first(&self, rng: &mut Rng) -> u16 {
        pick(&self.initial, rng.unit())
    }

    /// Interaction after `i`, or `None` when the session ends.
    #[inline]
    pub fn next(&self, i: u16, rng: &mut Rng) -> Option<u16> {
        let end = self.end[i as usize];
        if end > 0.0 && rng.unit() < end {
            return None;
        }
        Some(pick(&self.rows[i as usize], rng.unit()))
    }

    /// An independent draw from the stationary mix (open mode).
    #[inline]
    pub fn independent(&self, rng: &mut Rng) -> u16 {
        pick(&self.stationary, rng.unit())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(initial: &[f64], rows: &[&[f64]], end: f64) -> MixSpec {
        MixSpec {
            initial: initial.to_vec(),
            transitions: rows.iter().map(|r| r.to_vec()).collect(),
            end: vec![end; initial.len()],
            stationary: initial.to_vec(),
        }
    }

    #[test]
    fn zero_probability_entries_are_never_drawn() {
        let row: &[f64] = &[0.0, 0.0, 1.0];
        let m = Mix::new(&spec(&[0.0, 1.0, 0.0], &[row; 3], 0.0));
        let mut rng = Rng::stream(1, 0, 0);
        for _ in 0..10_000 {
            assert_eq!(m.first(&mut rng), 1);
            assert_eq!(m.next(1, &mut rng), Some(2));
        }
    }

    #[test]
    fn two_state_chain_has_its_stationary_mix() {
        // P = [[0.9, 0.1], [0.5, 0.5]] has stationary (5/6, 1/6).
        let m = Mix::new(&spec(&[1.0, 0.0], &[&[0.9, 0.1], &[0.5, 0.5]], 0.0));
        let mut rng = Rng::stream(3, 0, 0);
        let mut state = m.first(&mut rng);
        let n = 600_000;
        let mut ones = 0;
        for _ in 0..n {
            state = m.next(state, &mut rng).unwrap();
            ones += state as u64;
        }
        let frac = ones as f64 / n as f64;
        assert!((frac - 1.0 / 6.0).abs() < 0.004, "{frac}");
    }

    #[test]
    fn sessions_have_geometric_length() {
        let m = Mix::new(&spec(&[1.0], &[&[1.0]], 0.25));
        let mut rng = Rng::stream(4, 0, 0);
        let sessions = 100_000;
        let mut total = 0u64;
        for _ in 0..sessions {
            let mut len = 1;
            while m.next(0, &mut rng).is_some() {
                len += 1;
            }
            total += len;
        }
        let mean = total as f64 / sessions as f64;
        assert!((mean - 4.0).abs() < 0.05, "{mean}");
    }
}
