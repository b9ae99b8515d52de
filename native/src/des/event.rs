//! The future event list.
//!
//! Design: a 4-ary min-heap keyed by `(time, sequence number)`, where the
//! sequence number grows with every insertion (or re-keying). Events at equal
//! times thus run in insertion order (SimPy's rule), which makes runs
//! deterministic without any notion of event priority.
//!
//! Each station has at most one departure on the list, and the heap knows
//! where it is: rescheduling a departure re-keys it in place (with a fresh
//! sequence number, exactly as if it had been pushed anew) and cancelling
//! removes it, so the heap never holds stale events and stays as small as
//! the number of things that can happen next.

/// "Not in the heap" marker of a station's departure slot.
const ABSENT: u32 = u32::MAX;

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
}

/// A scheduled event.
#[derive(Debug, Clone, Copy)]
pub struct Event {
    pub time: f64,
    pub seq: u64,
    pub kind: EventKind,
}

impl Event {
    #[inline(always)]
    fn before(&self, other: &Event) -> bool {
        (self.time < other.time) | ((self.time == other.time) & (self.seq < other.seq))
    }
}

/// Future event list with insertion-order tie-breaking.
#[derive(Debug, Default)]
pub struct EventList {
    heap: Vec<Event>,
    /// Heap position of each station's departure, or `ABSENT`.
    dep_pos: Vec<u32>,
    next_seq: u64,
}

impl EventList {
    pub fn new() -> Self {
        Self::with_stations(0)
    }

    /// An empty list for a model with `stations` stations.
    pub fn with_stations(stations: usize) -> Self {
        EventList {
            heap: Vec::with_capacity(1024),
            dep_pos: vec![ABSENT; stations],
            next_seq: 0,
        }
    }

    #[inline]
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    #[inline(always)]
    fn take_seq(&mut self) -> u64 {
        let s = self.next_seq;
        self.next_seq += 1;
        s
    }

    /// Records that `e` now sits at heap position `i`.
    #[inline(always)]
    fn place(&mut self, i: usize, e: Event) {
        if let EventKind::Departure { station } = e.kind {
            self.dep_pos[station as usize] = i as u32;
        }
        self.heap[i] = e;
    }

    /// Moves `e` from the hole at `i` towards the root; returns its final position.
    #[inline]
    fn sift_up(&mut self, mut i: usize, e: Event) {
        while i > 0 {
            let p = (i - 1) / 4;
            let pe = self.heap[p];
            if !e.before(&pe) {
                break;
            }
            self.place(i, pe);
            i = p;
        }
        self.place(i, e);
    }

    /// Moves `e` from the hole at `i` towards the leaves.
    #[inline]
    fn sift_down(&mut self, mut i: usize, e: Event) {
        let n = self.heap.len();
        loop {
            let first = 4 * i + 1;
            if first >= n {
                break;
            }
            let last = (first + 4).min(n);
            let mut c = first;
            let mut ce = self.heap[first];
            for k in first + 1..last {
                let ke = self.heap[k];
                if ke.before(&ce) {
                    c = k;
                    ce = ke;
                }
            }
            if !ce.before(&e) {
                break;
            }
            self.place(i, ce);
            i = c;
        }
        self.place(i, e);
    }

    /// Restores the heap order around position `i`, which holds `e`.
    #[inline]
    fn fix(&mut self, i: usize, e: Event) {
        if i > 0 && e.before(&self.heap[(i - 1) / 4]) {
            self.sift_up(i, e);
        } else {
            self.sift_down(i, e);
        }
    }

    #[inline]
    fn insert(&mut self, e: Event) {
        let i = self.heap.len();
        self.heap.push(e);
        self.sift_up(i, e);
    }

    /// Schedules a non-departure event.
    #[inline]
    pub fn push(&mut self, time: f64, kind: EventKind) {
        debug_assert!(!matches!(kind, EventKind::Departure { .. }));
        let seq = self.take_seq();
        self.insert(Event { time, seq, kind });
    }

    /// Sets station `station`'s departure to `time`, replacing any pending one.
    #[inline]
    pub fn set_departure(&mut self, station: u32, time: f64) {
        let seq = self.take_seq();
        let e = Event {
            time,
            seq,
            kind: EventKind::Departure { station },
        };
        let pos = self.dep_pos[station as usize];
        if pos == ABSENT {
            self.insert(e);
        } else {
            self.fix(pos as usize, e);
        }
    }

    /// Removes station `station`'s pending departure, if any.
    #[inline]
    pub fn cancel_departure(&mut self, station: u32) {
        let pos = self.dep_pos[station as usize];
        if pos != ABSENT {
            self.dep_pos[station as usize] = ABSENT;
            self.remove_at(pos as usize);
        }
    }

    fn remove_at(&mut self, i: usize) {
        let last = self.heap.pop().expect("non-empty heap");
        if i < self.heap.len() {
            self.fix(i, last);
        }
    }

    #[inline]
    pub fn peek(&self) -> Option<&Event> {
        self.heap.first()
    }

    #[inline]
    pub fn pop(&mut self) -> Option<Event> {
        let top = *self.heap.first()?;
        if let EventKind::Departure { station } = top.kind {
            self.dep_pos[station as usize] = ABSENT;
        }
        let last = self.heap.pop().expect("non-empty heap");
        if !self.heap.is_empty() {
            self.sift_down(0, last);
        }
        Some(top)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_by_time_then_insertion_order() {
        let mut ev = EventList::new();
        ev.push(2.0, EventKind::Arrival { class: 0 });
        ev.push(1.0, EventKind::Arrival { class: 1 });
        ev.push(2.0, EventKind::Arrival { class: 2 });
        ev.push(1.0, EventKind::Arrival { class: 3 });
        let order: Vec<_> = std::iter::from_fn(|| ev.pop())
            .map(|e| match e.kind {
                EventKind::Arrival { class } => class,
                _ => 99,
            })
            .collect();
        assert_eq!(order, vec![1, 3, 0, 2]);
    }

    #[test]
    fn departures_are_rekeyed_and_cancelled_in_place() {
        let mut ev = EventList::with_stations(3);
        for i in 0..20u32 {
            ev.push(f64::from(i), EventKind::Arrival { class: i });
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
    fn random_rekeys_keep_heap_order() {
        let mut rng = crate::des::rng::Rng::stream(1, 0, 0);
        let stations = 17;
        let mut ev = EventList::with_stations(stations);
        let mut want: Vec<Option<f64>> = vec![None; stations];
        let mut now = 0.0;
        for step in 0..20_000 {
            let s = (rng.unit() * stations as f64) as usize;
            match step % 5 {
                0 => {
                    ev.cancel_departure(s as u32);
                    want[s] = None;
                }
                1 => ev.push(now + rng.unit() * 10.0, EventKind::Retry { job: 0 }),
                2 => {
                    if let Some(e) = ev.pop() {
                        assert!(e.time >= now);
                        now = e.time;
                        if let EventKind::Departure { station } = e.kind {
                            assert_eq!(want[station as usize], Some(e.time));
                            want[station as usize] = None;
                        }
                    }
                }
                _ => {
                    let t = now + rng.unit() * 10.0;
                    ev.set_departure(s as u32, t);
                    want[s] = Some(t);
                }
            }
        }
        let pending = want.iter().filter(|w| w.is_some()).count();
        let mut seen = 0;
        while let Some(e) = ev.pop() {
            if let EventKind::Departure { station } = e.kind {
                assert_eq!(want[station as usize], Some(e.time));
                seen += 1;
            }
        }
        assert_eq!(seen, pending);
    }
}
