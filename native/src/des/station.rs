//! Service at a station: one virtual-clock mechanism for FCFS, PS and delay.
//!
//! Design: all jobs in service progress at a common per-job rate
//! `r(t) = speed(t) * g(n)` (`g = alpha(n)/n` for PS, `alpha(n)/min(n, m)`
//! for FCFS, `1` for delay). The station keeps a virtual clock `V` (work
//! attained by each in-service job), advanced lazily; a job entering service
//! gets the finish tag `V + work`, and the next completion is the smallest
//! tag. Only that one departure is on the event list; it is re-keyed in
//! place (or removed) whenever `r` or the smallest tag changes. PS costs O(log n) per event, and a stall (`speed = 0`) simply
//! schedules nothing until the speed returns, so stalls are exact.

use std::collections::VecDeque;

use super::spec::{Discipline, Kind, StationSpec};

/// A job in service with its finish tag; `seq` breaks tag ties by entry order.
#[derive(Debug, Clone, Copy)]
pub struct Tagged {
    pub tag: f64,
    pub seq: u64,
    pub job: u32,
}

impl Tagged {
    #[inline]
    fn before(&self, other: &Tagged) -> bool {
        // Non-short-circuit, so heap walks compile to selects, not branches.
        (self.tag < other.tag) | ((self.tag == other.tag) & (self.seq < other.seq))
    }
}

/// 4-ary min-heap of in-service jobs by `(tag, seq)`.
#[derive(Debug, Default)]
pub struct TagHeap {
    v: Vec<Tagged>,
}

impl TagHeap {
    #[inline]
    pub fn len(&self) -> usize {
        self.v.len()
    }

    #[inline]
    pub fn is_empty(&self) -> bool {
        self.v.is_empty()
    }

    #[inline]
    pub fn peek(&self) -> Option<&Tagged> {
        self.v.first()
    }

    /// Inserts `x`, moving a hole up instead of swapping.
    pub fn push(&mut self, x: Tagged) {
        let mut i = self.v.len();
        self.v.push(x);
        while i > 0 {
            let p = (i - 1) / ARITY;
            let pe = self.v[p];
            if !x.before(&pe) {
                break;
            }
            self.v[i] = pe;
            i = p;
        }
        self.v[i] = x;
    }

    /// Removes the smallest entry. Bottom-up (Floyd): the hole at the root
    /// sinks to a leaf along the smallest children (selects, no branches on
    /// the keys), then the last entry rises from there, usually at once.
    pub fn pop(&mut self) -> Option<Tagged> {
        let last = self.v.pop()?;
        let n = self.v.len();
        if n == 0 {
            return Some(last);
        }
        let v = &mut self.v[..];
        let top = v[0];
        let mut i = 0;
        loop {
            let first = ARITY * i + 1;
            if first >= n {
                break;
            }
            let mut c = first;
            if first + ARITY <= n {
                for k in first + 1..first + ARITY {
                    c = if v[k].before(&v[c]) { k } else { c };
                }
            } else {
                for k in first + 1..n {
                    c = if v[k].before(&v[c]) { k } else { c };
                }
            }
            v[i] = v[c];
            i = c;
        }
        while i > 0 {
            let p = (i - 1) / ARITY;
            let pe = v[p];
            if !last.before(&pe) {
                break;
            }
            v[i] = pe;
            i = p;
        }
        v[i] = last;
        Some(top)
    }
}

/// Children per node of [`TagHeap`]: a shallow tree for large delay and PS stations.
const ARITY: usize = 4;

/// Run-time state of one station.
#[derive(Debug)]
pub struct Station {
    pub kind: Kind,
    pub ps: bool,
    pub servers: u32,
    alpha: Box<[f64]>,
    pub capacity: u32,
    pub block: bool,
    /// Fork: its join; join: its quorum (0: all branches).
    pub join: u32,
    pub quorum: u32,
    pub branches: Box<[u32]>,

    /// Jobs present: waiting, in service and blocked.
    pub n: u32,
    /// Jobs that finished service but wait for room downstream (they keep their server).
    pub blocked: u32,
    pub speed: f64,
    /// Current per-job service rate `speed * g(n)`.
    pub rate: f64,
    /// Current busy share `h(n)` of each job occupying capacity.
    pub share: f64,
    /// Virtual clock: work attained per in-service job since the station last emptied.
    pub vclock: f64,
    /// Integral of `share` since the window started (for busy-time accounting).
    pub busy_clock: f64,
    /// Time up to which both clocks are advanced.
    pub last: f64,
    pub in_service: TagHeap,
    /// FCFS jobs waiting for a server.
    pub waiting: VecDeque<u32>,
    /// Jobs blocked elsewhere that wait for room here, in arrival order.
    pub waiters: VecDeque<u32>,
    scheduled: bool,
    sched_rate: f64,
    sched_seq: u64,
    next_seq: u64,
    /// Most jobs present in the current window.
    pub q_max: u32,
}

impl Station {
    pub fn new(spec: &StationSpec) -> Station {
        let ps = spec.kind == Kind::Queue && spec.discipline == Discipline::Ps;
        let mut st = Station {
            kind: spec.kind,
            ps,
            servers: spec.servers,
            alpha: spec.alpha.clone().into_boxed_slice(),
            capacity: spec.capacity,
            block: spec.block,
            join: spec.join.min(u32::MAX as usize) as u32,
            quorum: spec.quorum.unwrap_or(0),
            branches: spec.branches.iter().map(|&b| b as u32).collect(),
            n: 0,
            blocked: 0,
            speed: 1.0,
            rate: 0.0,
            share: 0.0,
            vclock: 0.0,
            busy_clock: 0.0,
            last: 0.0,
            in_service: TagHeap::default(),
            waiting: VecDeque::new(),
            waiters: VecDeque::new(),
            scheduled: false,
            sched_rate: 0.0,
            sched_seq: 0,
            next_seq: 0,
            q_max: 0,
        };
        st.refresh();
        st
    }

    /// Whether jobs here are served at all (fork and join stations are instantaneous).
    #[inline]
    pub fn serves(&self) -> bool {
        matches!(self.kind, Kind::Queue | Kind::Delay)
    }

    /// Per-job rate at speed 1 with `n` jobs present.
    #[inline]
    fn g(&self, n: u32) -> f64 {
        if n == 0 || self.kind != Kind::Queue {
            return 1.0;
        }
        let a = self.alpha[(n as usize).min(self.alpha.len()) - 1];
        if self.ps {
            a / f64::from(n)
        } else {
            a / f64::from(n.min(self.servers))
        }
    }

    /// Busy share of each job occupying capacity with `n` jobs present:
    /// PS `min(n, m)/(m n)`, FCFS `1/m` (per occupied server), delay 1.
    #[inline]
    fn h(&self, n: u32) -> f64 {
        match self.kind {
            Kind::Delay => 1.0,
            Kind::Queue if n == 0 => 0.0,
            Kind::Queue if self.ps => {
                f64::from(n.min(self.servers)) / (f64::from(self.servers) * f64::from(n))
            }
            Kind::Queue => 1.0 / f64::from(self.servers),
            _ => 0.0,
        }
    }

    /// Advances both clocks to `now` at the current rates.
    #[inline]
    pub fn touch(&mut self, now: f64) {
        let dt = now - self.last;
        if dt > 0.0 {
            self.vclock += dt * self.rate;
            self.busy_clock += dt * self.share;
            self.last = now;
        }
    }

    /// Recomputes the rates after `n`, `blocked` or `speed` changed (call `touch` first).
    #[inline]
    pub fn refresh(&mut self) {
        self.rate = self.speed * self.g(self.n);
        self.share = self.h(self.n);
    }

    /// FCFS: a server is free for a waiting job (blocked jobs keep theirs).
    #[inline]
    pub fn has_free_server(&self) -> bool {
        (self.in_service.len() as u64 + u64::from(self.blocked)) < u64::from(self.servers)
    }

    /// Whether a job arriving now enters service at once.
    #[inline]
    pub fn serves_on_arrival(&self) -> bool {
        self.kind == Kind::Delay || self.ps || self.has_free_server()
    }

    /// Puts `job` in service with `work` (time at speed 1) left.
    #[inline]
    pub fn start(&mut self, job: u32, work: f64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.in_service.push(Tagged {
            tag: self.vclock + work,
            seq,
            job,
        });
    }

    /// Removes the job that completes now; the clock is set to its tag exactly,
    /// so rounding in the event time never accumulates.
    #[inline]
    pub fn complete(&mut self) -> Option<u32> {
        let top = self.in_service.pop()?;
        self.vclock = top.tag;
        self.scheduled = false;
        Some(top.job)
    }

    /// Restarts the virtual clock when nobody is in service, keeping it small.
    #[inline]
    pub fn settle(&mut self) {
        if self.in_service.is_empty() {
            self.vclock = 0.0;
        }
    }

    /// What must happen to the station's departure on the event list.
    #[inline]
    pub fn reschedule(&mut self, now: f64) -> Resched {
        let top = match self.in_service.peek() {
            Some(top) if self.rate > 0.0 => *top,
            _ => {
                if self.scheduled {
                    self.scheduled = false;
                    return Resched::Cancel;
                }
                return Resched::Keep;
            }
        };
        if self.scheduled && self.sched_rate == self.rate && self.sched_seq == top.seq {
            // Same job at the same rate: the pending event is still exact.
            return Resched::Keep;
        }
        self.scheduled = true;
        self.sched_rate = self.rate;
        self.sched_seq = top.seq;
        Resched::At(now + (top.tag - self.vclock).max(0.0) / self.rate)
    }
}

/// Outcome of [`Station::reschedule`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Resched {
    /// The pending departure (or its absence) is still right.
    Keep,
    /// The departure is now at this time.
    At(f64),
    /// Nothing can complete: remove the pending departure.
    Cancel,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_heap_pops_in_tag_then_seq_order() {
        let mut h = TagHeap::default();
        let tags = [3.0, 1.0, 2.0, 1.0, 5.0, 0.5, 2.0];
        for (i, &t) in tags.iter().enumerate() {
            h.push(Tagged {
                tag: t,
                seq: i as u64,
                job: i as u32,
            });
        }
        let order: Vec<u32> = std::iter::from_fn(|| h.pop()).map(|x| x.job).collect();
        assert_eq!(order, vec![5, 1, 3, 2, 6, 0, 4]);
    }

    #[test]
    fn tag_heap_matches_a_sorted_list_under_mixed_use() {
        let mut rng = crate::des::rng::Rng::stream(2, 0, 0);
        let mut h = TagHeap::default();
        let mut want: Vec<(f64, u64)> = Vec::new();
        for seq in 0..50_000u64 {
            if rng.unit() < 0.55 {
                // Coarse tags, so ties broken by `seq` happen often.
                let tag = (rng.unit() * 64.0).floor();
                h.push(Tagged { tag, seq, job: 0 });
                want.push((tag, seq));
            } else {
                want.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
                let got = h.pop().map(|x| (x.tag, x.seq));
                assert_eq!(got, want.pop());
            }
            assert_eq!(h.len(), want.len());
        }
    }
}
