//! The future event list.
//!
//! Design: a binary min-heap keyed by `(time, sequence number)`, where the
//! sequence number grows with every insertion. Events at equal times thus run
//! in insertion order (SimPy's rule), which makes runs deterministic without
//! any notion of event priority.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// What happens at an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// External arrival of an open class.
    Arrival { class: u32 },
    /// Next service completion at a station; stale unless `gen` is the station's current one.
    Departure { station: u32, gen: u64 },
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

impl PartialEq for Event {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Event {}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Event {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest event.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .time
            .total_cmp(&self.time)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// Future event list with insertion-order tie-breaking.
#[derive(Debug, Default)]
pub struct EventList {
    heap: BinaryHeap<Event>,
    next_seq: u64,
}

impl EventList {
    pub fn new() -> Self {
        EventList {
            heap: BinaryHeap::with_capacity(1024),
            next_seq: 0,
        }
    }

    #[inline]
    pub fn push(&mut self, time: f64, kind: EventKind) {
        self.heap.push(Event {
            time,
            seq: self.next_seq,
            kind,
        });
        self.next_seq += 1;
    }

    #[inline]
    pub fn peek(&self) -> Option<&Event> {
        self.heap.peek()
    }

    #[inline]
    pub fn pop(&mut self) -> Option<Event> {
        self.heap.pop()
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
}
