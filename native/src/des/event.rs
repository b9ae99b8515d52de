//! The future event list.
//!
//! Design: events are ordered by `(time, sequence number)`, where the
//! sequence number grows with every scheduling (or re-scheduling). Events at
//! equal times thus run in the order they were scheduled (SimPy's rule),
//! which makes runs deterministic without any notion of event priority.
//!
//! Almost every event is one of a fixed set: the next departure of each
//! station and the next external arrival of each class (a source has at most
//! one of each pending). Those live in the leaves of a tournament tree whose
//! inner nodes hold the winning (earliest) leaf of their subtree, so
//! rescheduling one is a walk of `log2(leaves)` branch-free comparisons to
//! the root, with no data moved. The rare events (retries, perturbations,
//! population steps) wait in a binary heap whose earliest entry is one more
//! leaf. Popping a departure or an arrival leaves its leaf in place: its
//! handler almost always reschedules the same source next, which repairs the
//! path once instead of twice; if it does not, the leaf is emptied before
//! anything else touches the tree.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::hint::select_unpredictable;

/// Key of an empty leaf: after every real `(time, seq)` key.
const NEVER: u128 = u128::MAX;
/// "No leaf" marker.
const NO_LEAF: u32 = u32::MAX;

/// `(time, seq)` as one integer ordered like the pair: times are never
/// negative, and the bits of non-negative floats sort as the floats do.
#[inline(always)]
fn key(time: f64, seq: u64) -> u128 {
    debug_assert!(time >= 0.0, "event at negative time {time}");
    // `+ 0.0` turns a -0.0 into +0.0.
    (u128::from((time + 0.0).to_bits()) << 64) | u128::from(seq)
}

/// What happens at an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// External arrival of an open class.
    Arrival { class: u32 },
    /// Next service completion at a station.
    Departure { station: u32 },
    /// A refused job tries its station again.
    Retry { job: u32 },
    /// A perturbation starts (`begin`) or ends.
    Perturb { index: u32, begin: bool },
    /// Step `step` of population schedule `schedule`.
    Population { schedule: u32, step: u32 },
    /// CPU station number `index` (in the order given to
    /// [`EventList::with_quotas`]) has spent its budget.
    QuotaOut { index: u32 },
    /// A CPU period of a station with a quota ends: its budget is refilled.
    Refill { station: u32 },
    /// Capacity change number `index` (see `EventSim::changes`).
    Capacity { index: u32 },
}

/// A scheduled event.
#[derive(Debug, Clone, Copy)]
pub struct Event {
    pub time: f64,
    pub seq: u64,
    pub kind: EventKind,
}

/// A rare event in the side heap, ordered by `(time, seq)`.
#[derive(Debug, Clone, Copy)]
struct Rare(Event);

impl PartialEq for Rare {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Rare {}

impl PartialOrd for Rare {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Rare {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0
            .time
            .total_cmp(&other.0.time)
            .then(self.0.seq.cmp(&other.0.seq))
    }
}

/// Future event list with scheduling-order tie-breaking.
#[derive(Debug)]
pub struct EventList {
    stations: u32,
    classes: u32,
    /// Node `i` holds the key and leaf of the earliest event in its subtree
    /// (root 1; node `width + l` is leaf `l`). Leaves `0..S` are station
    /// departures, `S..S+C` class arrivals, `S+C` the rare heap's top, and
    /// `S+C+1+q` the budget running out at CPU station number `q`.
    key: Vec<u128>,
    leaf: Vec<u32>,
    width: usize,
    rare: BinaryHeap<Reverse<Rare>>,
    /// CPU stations (leaves after the rare heap's).
    quotas: u32,
    /// A popped departure or arrival whose leaf is not yet emptied.
    popped: u32,
    next_seq: u64,
}

impl Default for EventList {
    fn default() -> Self {
        Self::new(0, 0)
    }
}

impl EventList {
    /// An empty list for a model with `stations` stations and `classes` classes.
    pub fn new(stations: usize, classes: usize) -> Self {
        Self::with_quotas(stations, classes, 0)
    }

    /// An empty list that also keeps when each of `quotas` CPU stations
    /// spends its budget ([`EventList::set_quota_out`]).
    pub fn with_quotas(stations: usize, classes: usize, quotas: usize) -> Self {
        let width = (stations + classes + 1 + quotas).next_power_of_two();
        let mut leaf = vec![0u32; 2 * width];
        for l in 0..width {
            leaf[width + l] = l as u32;
        }
        for i in (1..width).rev() {
            leaf[i] = leaf[2 * i];
        }
        EventList {
            stations: stations as u32,
            classes: classes as u32,
            key: vec![NEVER; 2 * width],
            leaf,
            width,
            rare: BinaryHeap::new(),
            quotas: quotas as u32,
            popped: NO_LEAF,
            next_seq: 0,
        }
    }

    /// Pending events.
    pub fn len(&self) -> usize {
        let sources = self.stations + self.classes;
        let leaves = (0..sources).chain((0..self.quotas).map(|q| sources + 1 + q));
        let live = leaves
            .filter(|&l| self.key[self.width + l as usize] != NEVER && self.popped != l)
            .count();
        live + self.rare.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline(always)]
    fn take_seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    /// Sets leaf `leaf`'s key (emptying a popped leaf first, if another).
    #[inline(always)]
    fn set(&mut self, leaf: u32, key: u128) {
        if self.popped != leaf && self.popped != NO_LEAF {
            self.flush();
        }
        self.popped = NO_LEAF;
        self.replay(leaf, key);
    }

    /// Sets leaf `leaf`'s key and replays its matches up to the root: at each
    /// level the path's winner meets the sibling subtree's (whose address is
    /// known in advance, so the loads do not wait on each other), by selects.
    #[inline(always)]
    fn replay(&mut self, leaf: u32, key: u128) {
        let mut i = self.width + leaf as usize;
        assert!(i < self.key.len() && self.key.len() == self.leaf.len());
        let (mut t, mut s, mut l) = ((key >> 64) as u64, key as u64, leaf);
        let (keys, leaves) = (self.key.as_mut_ptr(), self.leaf.as_mut_ptr());
        // SAFETY: `i` starts below `key.len() == leaf.len()` (asserted) and
        // only halves, and `i ^ 1 <= i + 1 < 2 * width == key.len()` because
        // `i` and `i ^ 1` are siblings below node `i / 2`; the hot loop runs
        // without bounds checks.
        unsafe {
            *keys.add(i) = key;
            *leaves.add(i) = l;
            while i > 1 {
                let sk = *keys.add(i ^ 1);
                let (st, ss, sl) = ((sk >> 64) as u64, sk as u64, *leaves.add(i ^ 1));
                // Which subtree wins is a coin toss to the branch predictor.
                let sibling_first = (st < t) | ((st == t) & (ss < s));
                t = select_unpredictable(sibling_first, st, t);
                s = select_unpredictable(sibling_first, ss, s);
                l = select_unpredictable(sibling_first, sl, l);
                i >>= 1;
                *keys.add(i) = (u128::from(t) << 64) | u128::from(s);
                *leaves.add(i) = l;
            }
        }
    }

    /// Empties the leaf of a popped event its handler did not reschedule.
    #[inline(never)]
    fn flush(&mut self) {
        if self.popped != NO_LEAF {
            let leaf = self.popped;
            self.popped = NO_LEAF;
            self.replay(leaf, NEVER);
        }
    }

    fn rare_leaf(&self) -> u32 {
        self.stations + self.classes
    }

    /// Re-keys the rare leaf after the heap's top changed.
    fn sync_rare(&mut self) {
        let k = self
            .rare
            .peek()
            .map_or(NEVER, |r| key(r.0 .0.time, r.0 .0.seq));
        self.set(self.rare_leaf(), k);
    }

    /// Schedules a rare event (not a departure or an arrival).
    pub fn push(&mut self, time: f64, kind: EventKind) {
        debug_assert!(!matches!(
            kind,
            EventKind::Departure { .. } | EventKind::Arrival { .. } | EventKind::QuotaOut { .. }
        ));
        let seq = self.take_seq();
        let e = Event { time, seq, kind };
        let new_top = self.rare.peek().is_none_or(|top| Rare(e) < top.0);
        self.rare.push(Reverse(Rare(e)));
        if new_top {
            self.sync_rare();
        }
    }

    /// Sets station `station`'s departure to `time`, replacing any pending one.
    #[inline]
    pub fn set_departure(&mut self, station: u32, time: f64) {
        let seq = self.take_seq();
        self.set(station, key(time, seq));
    }

    /// Removes station `station`'s pending departure, if any.
    #[inline]
    pub fn cancel_departure(&mut self, station: u32) {
        self.set(station, NEVER);
    }

    /// Sets class `class`'s next external arrival to `time`, replacing any pending one.
    #[inline]
    pub fn set_arrival(&mut self, class: u32, time: f64) {
        let seq = self.take_seq();
        self.set(self.stations + class, key(time, seq));
    }

    /// Sets when CPU station number `q` spends its budget.
    #[inline]
    pub fn set_quota_out(&mut self, q: u32, time: f64) {
        let seq = self.take_seq();
        self.set(self.rare_leaf() + 1 + q, key(time, seq));
    }

    /// Quota station number `q` does not spend its budget while nothing changes.
    #[inline]
    pub fn cancel_quota_out(&mut self, q: u32) {
        self.set(self.rare_leaf() + 1 + q, NEVER);
    }

    /// The earliest event.
    #[inline]
    pub fn peek(&mut self) -> Option<Event> {
        if self.popped != NO_LEAF {
            self.flush();
        }
        let k = self.key[1];
        if k == NEVER {
            return None;
        }
        let leaf = self.leaf[1];
        let kind = if leaf < self.stations {
            EventKind::Departure { station: leaf }
        } else if leaf < self.stations + self.classes {
            EventKind::Arrival {
                class: leaf - self.stations,
            }
        } else if leaf == self.rare_leaf() {
            self.rare.peek()?.0 .0.kind
        } else {
            EventKind::QuotaOut {
                index: leaf - self.rare_leaf() - 1,
            }
        };
        Some(Event {
            time: f64::from_bits((k >> 64) as u64),
            seq: k as u64,
            kind,
        })
    }

    /// Removes the earliest event. A departure's or an arrival's leaf stays
    /// until its source is rescheduled or anything else changes the list.
    #[inline]
    pub fn pop(&mut self) -> Option<Event> {
        let e = self.peek()?;
        self.remove_peeked();
        Some(e)
    }

    /// Removes the event the last [`EventList::peek`] returned (it must have
    /// returned one, and nothing may have changed the list since).
    #[inline]
    pub fn remove_peeked(&mut self) {
        let leaf = self.leaf[1];
        if leaf == self.rare_leaf() {
            self.rare.pop();
            self.sync_rare();
        } else {
            self.popped = leaf;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_by_time_then_scheduling_order() {
        let mut ev = EventList::new(0, 4);
        ev.set_arrival(0, 2.0);
        ev.set_arrival(1, 1.0);
        ev.push(2.0, EventKind::Retry { job: 7 });
        ev.set_arrival(2, 2.0);
        ev.push(1.0, EventKind::Retry { job: 8 });
        ev.set_arrival(3, 1.0);
        let order: Vec<_> = std::iter::from_fn(|| ev.pop())
            .map(|e| match e.kind {
                EventKind::Arrival { class } => class,
                EventKind::Retry { job } => job,
                _ => 99,
            })
            .collect();
        assert_eq!(order, vec![1, 8, 3, 0, 7, 2]);
        assert!(ev.is_empty());
    }

    #[test]
    fn departures_are_rekeyed_and_cancelled_in_place() {
        let mut ev = EventList::new(3, 0);
        for i in 0..20u32 {
            ev.push(f64::from(i), EventKind::Retry { job: i });
        }
        ev.set_departure(0, 5.5);
        ev.set_departure(1, 30.0);
        ev.set_departure(2, 0.5);
        ev.set_departure(1, 2.5); // earlier
        ev.set_departure(2, 12.5); // later
        ev.set_departure(0, 7.0); // same station twice: only the last counts
        ev.cancel_departure(0);
        ev.set_departure(0, 9.5);
        ev.cancel_departure(0);
        ev.cancel_departure(0); // no-op
        ev.set_departure(0, 3.0);
        assert_eq!(ev.len(), 23);
        let mut last = (f64::NEG_INFINITY, 0);
        let mut deps = Vec::new();
        while let Some(e) = ev.pop() {
            assert!(e.time > last.0 || (e.time == last.0 && e.seq > last.1));
            last = (e.time, e.seq);
            if let EventKind::Departure { station } = e.kind {
                deps.push((station, e.time));
            }
        }
        assert_eq!(deps, vec![(1, 2.5), (0, 3.0), (2, 12.5)]);
    }

    #[test]
    fn random_use_matches_a_sorted_list() {
        // Against a plain list of (time, seq, source) searched for its minimum.
        let mut rng = crate::des::rng::Rng::stream(1, 0, 0);
        let (stations, classes) = (11, 3);
        let mut ev = EventList::new(stations, classes);
        let mut want: Vec<(f64, u64, EventKind)> = Vec::new();
        let mut seq = 0u64;
        let mut now = 0.0;
        // Coarse times, so that ties broken by the sequence number are common.
        let later = |rng: &mut crate::des::rng::Rng, now: f64| now + (rng.unit() * 8.0).floor();
        for step in 0..40_000 {
            let s = rng.below(stations as u32);
            let c = rng.below(classes as u32);
            match step % 6 {
                0 => {
                    ev.cancel_departure(s);
                    want.retain(|w| w.2 != EventKind::Departure { station: s });
                }
                1 => {
                    let t = later(&mut rng, now);
                    ev.push(t, EventKind::Retry { job: step });
                    want.push((t, seq, EventKind::Retry { job: step }));
                    seq += 1;
                }
                2 | 3 => {
                    let i = (0..want.len()).min_by(|&a, &b| {
                        want[a]
                            .0
                            .total_cmp(&want[b].0)
                            .then(want[a].1.cmp(&want[b].1))
                    });
                    let expected = i.map(|i| want.remove(i));
                    let got = ev.pop();
                    assert_eq!(got.map(|e| (e.time, e.kind)), expected.map(|w| (w.0, w.2)));
                    if let Some(e) = got {
                        now = e.time;
                    }
                }
                4 => {
                    let t = later(&mut rng, now);
                    ev.set_arrival(c, t);
                    want.retain(|w| w.2 != EventKind::Arrival { class: c });
                    want.push((t, seq, EventKind::Arrival { class: c }));
                    seq += 1;
                }
                _ => {
                    let t = later(&mut rng, now);
                    ev.set_departure(s, t);
                    want.retain(|w| w.2 != EventKind::Departure { station: s });
                    want.push((t, seq, EventKind::Departure { station: s }));
                    seq += 1;
                }
            }
            assert_eq!(ev.len(), want.len());
        }
    }
}
