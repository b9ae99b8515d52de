//! Routing decisions in O(1): Walker's alias method.
//!
//! Design: each routing row (the next (class, station) of a job leaving a
//! station, or leaving the network with the row's missing mass) becomes `n`
//! equally likely slots, each holding its own destination and an alias taken
//! with the complementary probability (Vose's construction). A draw is one
//! 64-bit random word times `n`: the high word of the product is the slot
//! and the low word its uniform fractional part, tested against the slot's
//! threshold, then a branch-free select. All integer: no search whose
//! length or outcome the branch predictor must guess, no float conversion.

use std::hint::select_unpredictable;

use super::rng::Rng;

/// Destination: `(class, station)`, with `station == EXIT` for leaving the network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dest {
    pub class: u32,
    pub station: u32,
}

/// Station of the "leave the network" destination.
pub const EXIT: u32 = u32::MAX;

#[derive(Debug, Clone, Copy)]
struct Slot {
    /// Take `own` if the fractional part of the draw, in units of 2^-64, is below this.
    threshold: u64,
    own: Dest,
    alias: Dest,
}

/// Alias tables of many rows, stored back to back.
#[derive(Debug, Clone, Default)]
pub struct AliasRows {
    /// Per row: first slot and number of slots (0: the row always exits).
    rows: Vec<(u32, u32)>,
    slots: Vec<Slot>,
}

impl AliasRows {
    /// Appends a row from `(destination, probability)` pairs and the
    /// probability `exit` of leaving the network (weights are normalised;
    /// zero weights are ignored).
    pub fn push_row(&mut self, targets: &[(Dest, f64)], exit: f64) {
        let mut items: Vec<(Dest, f64)> = targets.iter().copied().filter(|t| t.1 > 0.0).collect();
        if exit > 0.0 {
            items.push((
                Dest {
                    class: 0,
                    station: EXIT,
                },
                exit,
            ));
        }
        let total: f64 = items.iter().map(|t| t.1).sum();
        let start = self.slots.len() as u32;
        let n = items.len();
        if n == 1 {
            let d = items[0].0;
            self.slots.push(Slot {
                threshold: u64::MAX,
                own: d,
                alias: d,
            });
        } else if n > 1 {
            self.slots.extend(vose(&items, total));
        }
        self.rows.push((start, n as u32));
    }

    /// The destination of a job leaving by row `row`; draws only if the row has a choice.
    #[inline]
    pub fn draw(&self, row: usize, rng: &mut Rng) -> Dest {
        let (start, n) = self.rows[row];
        match n {
            0 => Dest {
                class: 0,
                station: EXIT,
            },
            1 => self.slots[start as usize].own,
            _ => {
                let x = u128::from(rng.next_u64()) * u128::from(n);
                let (i, frac) = ((x >> 64) as u32, x as u64);
                let s = &self.slots[(start + i) as usize];
                select_unpredictable(frac < s.threshold, s.own, s.alias)
            }
        }
    }
}

/// Vose's alias construction for probabilities `items` (normalised by `total`).
fn vose(items: &[(Dest, f64)], total: f64) -> Vec<Slot> {
    let n = items.len();
    let scaled: Vec<f64> = items.iter().map(|t| t.1 * n as f64 / total).collect();
    // Thresholds as fractions in [0, 1] first; a slot that keeps 1 always
    // yields its own destination (its alias is itself).
    let mut own_share = vec![1.0; n];
    let mut slots: Vec<Slot> = items
        .iter()
        .map(|t| Slot {
            threshold: u64::MAX,
            own: t.0,
            alias: t.0,
        })
        .collect();
    let mut left = scaled.clone();
    let (mut small, mut large): (Vec<usize>, Vec<usize>) = (0..n).partition(|&i| scaled[i] < 1.0);
    while let (Some(&s), Some(&l)) = (small.last(), large.last()) {
        small.pop();
        own_share[s] = left[s];
        slots[s].alias = items[l].0;
        left[l] -= 1.0 - left[s];
        if left[l] < 1.0 {
            large.pop();
            small.push(l);
        }
    }
    // Whatever is left holds (up to rounding) exactly one slot's worth.
    for i in small.into_iter().chain(large) {
        own_share[i] = 1.0;
        slots[i].alias = slots[i].own;
    }
    for (slot, share) in slots.iter_mut().zip(own_share) {
        // 2^64 * share, saturating at 1 (the float-to-int cast saturates).
        slot.threshold = (share * 18_446_744_073_709_551_616.0) as u64;
    }
    slots
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dest(station: u32) -> Dest {
        Dest { class: 0, station }
    }

    /// Probability of each destination implied by the tables (exact, no sampling).
    fn implied(rows: &AliasRows, row: usize) -> Vec<(u32, f64)> {
        let (start, n) = rows.rows[row];
        let mut p: Vec<(u32, f64)> = Vec::new();
        let mut add = |d: Dest, w: f64| match p.iter_mut().find(|x| x.0 == d.station) {
            Some(x) => x.1 += w,
            None => p.push((d.station, w)),
        };
        for s in &rows.slots[start as usize..(start + n) as usize] {
            let share = s.threshold as f64 / 18_446_744_073_709_551_616.0;
            add(s.own, share / f64::from(n));
            add(s.alias, (1.0 - share) / f64::from(n));
        }
        p.retain(|x| x.1 > 1e-15);
        p.sort_by_key(|x| x.0);
        p
    }

    #[test]
    fn tables_reproduce_the_row_probabilities() {
        let mut rows = AliasRows::default();
        rows.push_row(&[(dest(0), 0.1), (dest(1), 0.6), (dest(2), 0.3)], 0.0);
        rows.push_row(&[(dest(4), 0.25), (dest(5), 0.5)], 0.25);
        rows.push_row(&[(dest(3), 1.0)], 0.0);
        rows.push_row(&[], 1.0);
        let close = |got: Vec<(u32, f64)>, want: &[(u32, f64)]| {
            assert_eq!(got.len(), want.len(), "{got:?}");
            for (g, w) in got.iter().zip(want) {
                assert_eq!(g.0, w.0);
                assert!((g.1 - w.1).abs() < 1e-12, "{got:?} vs {want:?}");
            }
        };
        close(implied(&rows, 0), &[(0, 0.1), (1, 0.6), (2, 0.3)]);
        close(implied(&rows, 1), &[(4, 0.25), (5, 0.5), (EXIT, 0.25)]);
        close(implied(&rows, 2), &[(3, 1.0)]);
        let mut rng = Rng::stream(3, 0, 0);
        assert_eq!(rows.draw(3, &mut rng).station, EXIT);
        assert_eq!(rows.draw(2, &mut rng).station, 3);
    }

    #[test]
    fn draws_follow_the_row() {
        // Chi-square of 100k draws against a skewed five-way row.
        let p = [0.02, 0.5, 0.08, 0.3, 0.1];
        let mut rows = AliasRows::default();
        let row: Vec<(Dest, f64)> = p
            .iter()
            .enumerate()
            .map(|(i, &q)| (dest(i as u32), q))
            .collect();
        rows.push_row(&row, 0.0);
        let mut rng = Rng::stream(8, 0, 1);
        let mut counts = [0.0f64; 5];
        let n = 100_000.0;
        for _ in 0..n as usize {
            counts[rows.draw(0, &mut rng).station as usize] += 1.0;
        }
        let chi2: f64 = counts
            .iter()
            .zip(p)
            .map(|(&c, q)| (c - n * q).powi(2) / (n * q))
            .sum();
        // 4 degrees of freedom, 0.1 % critical value 18.47.
        assert!(chi2 < 18.47, "{counts:?}");
    }
}
