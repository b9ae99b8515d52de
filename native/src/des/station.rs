//! Service at a station: one virtual-clock mechanism for FCFS, PS and delay.
//!
//! Design: all jobs in service progress at a common per-job rate
//! `r(t) = speed(t) * g(n)` (`g = alpha(n)/n` for PS, `alpha(n)/min(n, m)`
//! for FCFS, `1` for delay). The station keeps a lazily advanced clock and
//! only its next completion is on the event list, re-keyed in place (or
//! removed) whenever that completion moves. A stall (`speed = 0`) simply
//! schedules nothing until the speed returns, so stalls are exact. The jobs
//! in service are held one of two ways:
//!
//! - [`TagHeap`] (any service law): the clock `V` is the work attained by
//!   each in-service job; a job entering service gets the finish tag
//!   `V + work`, and the next completion is the smallest tag. O(log n).
//! - [`Race`] (every class served here has exponential service): job `i`
//!   completes at hazard rate `r * mu_i`, so by memorylessness the station
//!   as a whole completes at rate `r * sum(mu_i)`, and the job that leaves
//!   is picked with probability `mu_i / sum(mu)`, whatever happened before.
//!   The clock is then the integrated total hazard, and the next completion
//!   is when it reaches an Exp(1) threshold: the same process in law as the
//!   tags (the exact Markov chain), exact under any speed profile, and O(1)
//!   per event with no service time drawn per job. It is what makes a
//!   1,000-user think station cheap.
//! - [`RoundRobin`] (the `rr` discipline): the first `servers` jobs present
//!   run, each at the per-job rate, for at most a time slice of wall time
//!   before it goes to the back of the queue if others wait; the next event
//!   is the earliest completion or slice end among the running jobs.
//!
//! A station whose service is CPU time of its processes (`cpu` in the spec)
//! also keeps its [`Cpu`]: the CPU seconds its running processes use (one
//! core each, times the share of a core the host gives them), and, under a
//! Linux CFS quota, the budget left in the current period; a spent budget
//! throttles the station (its gate closes: speed 0) until the period ends.

use std::collections::VecDeque;
use std::hint::select_unpredictable;

use super::rng::Rng;
use super::spec::{CpuSpec, Discipline, Kind, StationSpec};

/// Work or time below this counts as none (seconds).
const EPS: f64 = 1e-12;

/// A job under round robin: work left, and time left in its slice.
#[derive(Debug, Clone, Copy)]
struct Slot {
    job: u32,
    work: f64,
    slice: f64,
}

/// Jobs at a round-robin station, in queue order; the first `servers` run.
#[derive(Debug)]
pub struct RoundRobin {
    queue: VecDeque<Slot>,
    quantum: f64,
    servers: usize,
}

impl RoundRobin {
    fn running(&self) -> usize {
        self.queue.len().min(self.servers)
    }

    /// The running jobs progress `work` and spend `time` of their slices.
    fn progress(&mut self, work: f64, time: f64) {
        let n = self.running();
        for s in self.queue.iter_mut().take(n) {
            s.work -= work;
            s.slice -= time;
        }
    }

    /// Time to the next completion or slice end at per-job rate `rate`, the
    /// running job it concerns, and whether it completes.
    fn next(&self, rate: f64) -> Option<(f64, usize, bool)> {
        let mut best: Option<(f64, usize, bool)> = None;
        for (i, s) in self.queue.iter().take(self.running()).enumerate() {
            let done = s.work.max(0.0) / rate;
            let (t, completes) = if done <= s.slice {
                (done, true)
            } else {
                (s.slice.max(0.0), false)
            };
            if best.is_none_or(|b| t < b.0) {
                best = Some((t, i, completes));
            }
        }
        best
    }
}

/// CPU use and CFS quota of a station (see the module notes).
#[derive(Debug, Clone)]
pub struct Cpu {
    /// CPU seconds per period (infinite without a quota), and what is left.
    pub per_period: f64,
    pub budget: f64,
    carry: f64,
    /// 0: a spent budget throttles at once.
    tick: f64,
    pub period: f64,
    pub phase: f64,
    /// Whether the station's processes share the host's cores.
    pub host: bool,
    /// Share of a core each running process gets from the host.
    pub share: f64,
    /// Speed factor of the perturbations in force (the station's `speed` is this
    /// times the share, or 0 while throttled).
    pert: f64,
    /// CPU seconds used per second now.
    burn: f64,
    pub throttled: bool,
    /// The budget ran out in the current period.
    out: bool,
    /// CPU seconds used in all, and when the period began.
    pub used: f64,
    used_at_refill: f64,
    /// Refills so far: the next is at `phase + refills * period`.
    pub refills: u64,
    /// Whether refills are on the event list (from the first quota on).
    pub refilling: bool,
    /// This window's CPU seconds, periods in which the station ran, and
    /// those of them in which it was throttled (the kernel's nr_periods and
    /// nr_throttled).
    pub window_used: f64,
    pub window_periods: u32,
    pub window_throttled: u32,
}

impl Cpu {
    fn new(spec: &CpuSpec, phase: f64) -> Cpu {
        let per_period = spec.budget.unwrap_or(f64::INFINITY);
        Cpu {
            per_period,
            budget: per_period,
            carry: spec.carry,
            tick: spec.tick.unwrap_or(0.0),
            period: spec.period,
            phase,
            host: spec.host,
            share: 1.0,
            pert: 1.0,
            burn: 0.0,
            throttled: false,
            out: false,
            used: 0.0,
            used_at_refill: 0.0,
            refills: 0,
            refilling: false,
            window_used: 0.0,
            window_periods: 0,
            window_throttled: 0,
        }
    }

    pub fn has_quota(&self) -> bool {
        self.per_period.is_finite()
    }

    /// The next period's start.
    pub fn next_refill(&self) -> f64 {
        self.phase + self.refills as f64 * self.period
    }

    /// A new quota of `budget` CPU seconds per period (infinite: none) from
    /// now on: the kernel refills the runtime when the quota is written.
    pub fn set_budget(&mut self, budget: f64, now: f64) {
        self.per_period = budget;
        self.budget = budget;
        self.throttled = false;
        if !self.refilling {
            // Periods from the one in progress on.
            self.refills = ((now - self.phase) / self.period).floor().max(0.0) as u64 + 1;
            while self.next_refill() <= now {
                self.refills += 1;
            }
        }
    }
}

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

/// Jobs in service at a station where every class is served exponentially.
#[derive(Debug)]
pub struct Race {
    /// Slot of each class (`u32::MAX`: never served here); one slot per served class.
    slot_of: Box<[u32]>,
    /// Completion rate `1 / mean` of each slot's class at speed 1.
    mu: Box<[f64]>,
    /// With one slot: its rate (0 otherwise).
    pub(super) single_mu: f64,
    /// Jobs in service grouped by slot: slot `s` holds `jobs[bounds[s]..bounds[s + 1]]`.
    jobs: Vec<u32>,
    bounds: Vec<u32>,
    /// `sum(mu)` over the jobs in service.
    pub(super) mass: f64,
    /// Exp(1) level of integrated hazard at which the next completion happens.
    threshold: f64,
    /// The next threshold and the random bits of the next pick, drawn one
    /// step ahead so that drawing is off the event's critical path.
    next_threshold: f64,
    next_pick: u64,
    /// Whether the race keeps its own completion clock (not when a network-wide
    /// clock decides when the station completes, see [`super::markov`]).
    timed: bool,
    rng: Rng,
}

impl Race {
    /// A race with class rates `mu` (0: never served) drawing from `rng`.
    pub fn new(mu: &[f64], timed: bool, mut rng: Rng) -> Race {
        let mut slot_of = vec![u32::MAX; mu.len()];
        let mut rates = Vec::new();
        for (c, &m) in mu.iter().enumerate() {
            if m > 0.0 {
                slot_of[c] = rates.len() as u32;
                rates.push(m);
            }
        }
        let single_mu = match rates[..] {
            [m] => m,
            _ => 0.0,
        };
        Race {
            slot_of: slot_of.into_boxed_slice(),
            single_mu,
            bounds: vec![0; rates.len() + 1],
            mu: rates.into_boxed_slice(),
            jobs: Vec::new(),
            mass: 0.0,
            threshold: rng.exp1(),
            next_threshold: rng.exp1(),
            next_pick: rng.next_u64(),
            timed,
            rng,
        }
    }

    #[inline]
    pub(super) fn len(&self) -> usize {
        self.jobs.len()
    }

    /// Recomputed from the counts (not updated incrementally, so no rounding drifts).
    #[inline]
    fn update_mass(&mut self) {
        self.mass = if self.mu.len() == 1 {
            self.jobs.len() as f64 * self.mu[0]
        } else {
            (0..self.mu.len())
                .map(|s| f64::from(self.bounds[s + 1] - self.bounds[s]) * self.mu[s])
                .sum()
        };
    }

    #[inline]
    pub(super) fn push(&mut self, job: u32, class: u32) {
        if self.mu.len() == 1 {
            self.jobs.push(job);
            self.mass = self.jobs.len() as f64 * self.single_mu;
            return;
        }
        // Open a hole at the end of the class's group: the first job of every
        // later group moves to its group's end, from the last group down.
        let slots = self.mu.len();
        let s = self.slot_of[class as usize] as usize;
        self.jobs.push(job);
        for t in (s + 1..slots).rev() {
            let (first, end) = (self.bounds[t] as usize, self.bounds[t + 1] as usize);
            self.jobs[end] = self.jobs[first];
        }
        self.jobs[self.bounds[s + 1] as usize] = job;
        for b in &mut self.bounds[s + 1..] {
            *b += 1;
        }
        self.update_mass();
    }

    /// Removes the completing job: a class by its share of the hazard, then a
    /// job of it uniformly; then moves on to the next threshold.
    #[inline]
    pub(super) fn pop(&mut self) -> Option<u32> {
        if self.jobs.is_empty() {
            return None;
        }
        if self.mu.len() == 1 {
            // One class: a uniform pick among all jobs in service.
            let n = self.jobs.len();
            let i = ((u128::from(self.next_pick) * n as u128) >> 64) as usize;
            self.next_pick = self.rng.next_u64();
            let job = self.jobs.swap_remove(i);
            self.mass = (n - 1) as f64 * self.single_mu;
            self.next_threshold_if_timed();
            return Some(job);
        }
        let slots = self.mu.len();
        let s = if slots == 1 {
            0
        } else {
            let mut u = self.rng.unit() * self.mass;
            let mut pick = 0;
            for s in 0..slots {
                let n = self.bounds[s + 1] - self.bounds[s];
                if n > 0 {
                    pick = s;
                    u -= f64::from(n) * self.mu[s];
                    if u < 0.0 {
                        break;
                    }
                }
            }
            pick
        };
        let (first, end) = (self.bounds[s] as usize, self.bounds[s + 1] as usize);
        let i = match end - first {
            1 => first,
            n => {
                let i = ((u128::from(self.next_pick) * n as u128) >> 64) as usize;
                self.next_pick = self.rng.next_u64();
                first + i
            }
        };
        // Close the hole: the group's last job fills it, then the last job of
        // every later group moves to the place just before its group.
        let job = self.jobs[i];
        self.jobs[i] = self.jobs[end - 1];
        for t in s + 1..slots {
            let (first, end) = (self.bounds[t] as usize, self.bounds[t + 1] as usize);
            self.jobs[first - 1] = self.jobs[end - 1];
        }
        self.jobs.pop();
        for b in &mut self.bounds[s + 1..] {
            *b -= 1;
        }
        self.update_mass();
        self.next_threshold_if_timed();
        Some(job)
    }

    #[inline]
    fn next_threshold_if_timed(&mut self) {
        if self.timed {
            self.threshold = self.next_threshold;
            self.next_threshold = self.rng.exp1();
        }
    }
}

/// How a station holds its jobs in service (see the module notes).
#[derive(Debug)]
enum InService {
    Tags(TagHeap),
    Race(Race),
    Rr(RoundRobin),
}

/// Run-time state of one station.
#[derive(Debug)]
pub struct Station {
    pub kind: Kind,
    pub ps: bool,
    /// Round robin (see [`RoundRobin`]).
    pub rr: bool,
    pub servers: u32,
    alpha: Box<[f64]>,
    pub capacity: u32,
    pub block: bool,
    /// A full queue or delay station that makes arriving jobs wait upstream.
    pub blocks_when_full: bool,
    /// Fork: its join; join: its quorum (0: all branches).
    pub join: u32,
    pub quorum: u32,
    pub branches: Box<[u32]>,

    /// Jobs present: waiting, in service and blocked.
    pub n: u32,
    /// Whether balance stations send it jobs.
    pub active: bool,
    /// Jobs that finished service but wait for room downstream (they keep their server).
    pub blocked: u32,
    /// Speed factor now: the perturbations' in force, times (at a CPU
    /// station) the host's share, or 0 while throttled (set it with
    /// `set_speed`; call `touch` before, `refresh` after).
    pub speed: f64,
    /// The station's CPU, if accounted (call `touch` before changing it,
    /// `refresh` after).
    pub cpu: Option<Box<Cpu>>,
    /// Whether `touch` has more to do than the clocks (round robin or CPU).
    extra: bool,
    /// Rate of the clock: per-job service rate `speed * g(n)` with tags, total
    /// hazard rate `speed * g(n) * sum(mu)` in a race.
    pub rate: f64,
    /// Current busy share `h(n)` of each job occupying capacity.
    pub share: f64,
    /// Tags: work attained per in-service job since the station last emptied.
    /// Race: hazard integrated since the last completion.
    pub vclock: f64,
    /// Integral of `share` since the window started (for busy-time accounting).
    pub busy_clock: f64,
    /// Time up to which both clocks are advanced.
    pub last: f64,
    in_service: InService,
    /// Jobs in service (not blocked, not waiting).
    serving: u32,
    /// Most jobs in service at once: FCFS servers; no limit for PS and delay.
    serve_limit: u32,
    /// `(g(n), h(n))` for small `n` (see [`Station::g`] and [`Station::h`]).
    rate_share: Box<[(f64, f64)]>,
    /// Queues: `alpha(i)` for `i = min(n, L)`, the total service capacity
    /// with `n` jobs present (index 0: none).
    caps: Box<[f64]>,
    /// FCFS jobs waiting for a server.
    pub waiting: VecDeque<u32>,
    /// Jobs blocked elsewhere, or waiting outside (from a fork, a join or a
    /// zero-time visit), for room here, in arrival order.
    pub waiters: VecDeque<u32>,
    scheduled: bool,
    sched_rate: f64,
    sched_seq: u64,
    next_seq: u64,
    /// Most jobs present in the current window.
    pub q_max: u32,
}

impl Station {
    /// The station of `spec`; `phase` starts the CPU periods of a quota
    /// whose spec leaves the phase open.
    pub fn new(spec: &StationSpec, phase: f64) -> Station {
        let ps = spec.kind == Kind::Queue && spec.discipline == Discipline::Ps;
        let rr = spec.kind == Kind::Queue && spec.discipline == Discipline::Rr;
        let cpu = spec
            .cpu
            .as_ref()
            .map(|c| Box::new(Cpu::new(c, c.phase.unwrap_or(phase))));
        let mut st = Station {
            kind: spec.kind,
            ps,
            rr,
            extra: rr || cpu.is_some(),
            cpu,
            servers: spec.servers,
            alpha: spec.alpha.clone().into_boxed_slice(),
            capacity: spec.capacity,
            block: spec.block,
            blocks_when_full: spec.block
                && spec.capacity != u32::MAX
                && matches!(spec.kind, Kind::Queue | Kind::Delay),
            join: spec.join.min(u32::MAX as usize) as u32,
            quorum: spec.quorum.unwrap_or(0),
            branches: spec.branches.iter().map(|&b| b as u32).collect(),
            n: 0,
            active: spec.active,
            blocked: 0,
            speed: 1.0,
            rate: 0.0,
            share: 0.0,
            vclock: 0.0,
            busy_clock: 0.0,
            last: 0.0,
            in_service: if rr {
                InService::Rr(RoundRobin {
                    queue: VecDeque::new(),
                    quantum: spec.quantum,
                    servers: spec.servers as usize,
                })
            } else {
                InService::Tags(TagHeap::default())
            },
            serving: 0,
            serve_limit: if spec.kind == Kind::Queue && !ps && !rr {
                spec.servers
            } else {
                u32::MAX
            },
            rate_share: Box::default(),
            caps: std::iter::once(0.0)
                .chain(spec.alpha.iter().copied())
                .collect(),
            waiting: VecDeque::new(),
            waiters: VecDeque::new(),
            scheduled: false,
            sched_rate: 0.0,
            sched_seq: 0,
            next_seq: 0,
            q_max: 0,
        };
        // Past `max(L, m)` jobs only PS rates still change; PS tables go on
        // to where the tail is rarely reached.
        let flat = spec.alpha.len().max(spec.servers as usize) + 1;
        let len = if ps || rr { flat.max(257) } else { flat };
        st.rate_share = (0..len as u32).map(|n| (st.g(n), st.h(n))).collect();
        st.refresh();
        st
    }

    /// Serves the jobs here as an exponential race with class rates `mu` (see
    /// the module notes); the caller guarantees every class that can be in
    /// service here has exponential service.
    pub fn use_race(&mut self, mu: &[f64], rng: Rng) {
        self.in_service = InService::Race(Race::new(mu, true, rng));
        self.refresh();
    }

    /// Whether service times are left to the race (no work is drawn per job).
    #[inline]
    pub fn is_race(&self) -> bool {
        matches!(self.in_service, InService::Race(_))
    }

    /// Whether jobs here are served at all (fork and join stations are instantaneous).
    #[inline]
    pub fn serves(&self) -> bool {
        matches!(self.kind, Kind::Queue | Kind::Delay)
    }

    /// `(g(n), h(n))`: from the table, or computed past its end (PS only
    /// varies there).
    #[inline]
    fn rate_share(&self, n: u32) -> (f64, f64) {
        let last = self.rate_share.len() - 1;
        if (n as usize) <= last || !(self.ps || self.rr) {
            self.rate_share[(n as usize).min(last)]
        } else {
            self.rate_share_tail(n)
        }
    }

    #[cold]
    fn rate_share_tail(&self, n: u32) -> (f64, f64) {
        (self.g(n), self.h(n))
    }

    /// Per-job rate at speed 1 with `n` jobs present.
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
    fn h(&self, n: u32) -> f64 {
        match self.kind {
            Kind::Delay => 1.0,
            Kind::Queue if n == 0 => 0.0,
            Kind::Queue if self.ps || self.rr => {
                f64::from(n.min(self.servers)) / (f64::from(self.servers) * f64::from(n))
            }
            Kind::Queue => 1.0 / f64::from(self.servers),
            _ => 0.0,
        }
    }

    /// Advances both clocks to `now` at the current rates.
    #[inline]
    pub fn touch(&mut self, now: f64) {
        // Time never runs back, so `dt >= 0` and no branch is needed.
        let dt = now - self.last;
        self.vclock += dt * self.rate;
        self.busy_clock += dt * self.share;
        self.last = now;
        if self.extra {
            self.touch_extra(dt);
        }
    }

    /// Round-robin progress and CPU use over the last `dt`.
    #[cold]
    fn touch_extra(&mut self, dt: f64) {
        if let InService::Rr(rr) = &mut self.in_service {
            if self.rate > 0.0 {
                rr.progress(dt * self.rate, dt);
            }
        }
        if let Some(c) = &mut self.cpu {
            let used = dt * c.burn;
            c.used += used;
            c.window_used += used;
            c.budget -= used;
        }
    }

    /// Processes that would run now if the host had a core for each: jobs
    /// in service up to the servers, none while stalled or throttled.
    pub fn cores_wanted(&self) -> f64 {
        match &self.cpu {
            Some(c) if c.pert > 0.0 && !c.throttled => f64::from(self.serving.min(self.servers)),
            _ => 0.0,
        }
    }

    /// When the budget runs out at the current use (`None`: not while
    /// nothing changes); at once if it is spent, else at the next tick after
    /// the instant it is (see `CpuSpec::tick`).
    pub fn quota_out(&self, now: f64) -> Option<f64> {
        let c = self.cpu.as_ref()?;
        if !c.has_quota() || c.throttled || c.burn <= 0.0 {
            return None;
        }
        if c.budget <= EPS {
            return Some(now);
        }
        let t = now + c.budget / c.burn;
        if c.tick > 0.0 {
            return Some(c.phase + ((t - c.phase) / c.tick).ceil() * c.tick);
        }
        Some(t)
    }

    /// The perturbations in force slow the station to `factor` of its speed
    /// (call `touch` first, `refresh` after).
    pub fn set_speed(&mut self, factor: f64) {
        match &mut self.cpu {
            Some(c) => c.pert = factor,
            None => self.speed = factor,
        }
    }

    /// Whether a job completes within `dt` at the current rate.
    pub fn completes_within(&self, dt: f64) -> bool {
        if self.rate <= 0.0 {
            return false;
        }
        let level = match &self.in_service {
            InService::Tags(h) => h.peek().map(|top| top.tag),
            InService::Race(r) => (r.len() > 0).then_some(r.threshold),
            InService::Rr(rr) => return rr.next(self.rate).is_some_and(|n| n.2 && n.0 <= dt),
        };
        level.is_some_and(|l| (l - self.vclock) / self.rate <= dt)
    }

    /// The budget is spent: throttled until the period ends (call `touch` first).
    pub fn throttle(&mut self) {
        if let Some(c) = &mut self.cpu {
            c.throttled = true;
            c.out = true;
        }
        self.refresh();
    }

    /// A new period (call `touch` first): the period that ends is counted if
    /// the station ran in it, the budget is refilled (keeping up to `carry`
    /// of what was left, or a debt), and the station runs again.
    pub fn refill(&mut self) {
        if let Some(c) = &mut self.cpu {
            if c.used > c.used_at_refill {
                c.window_periods += 1;
                c.window_throttled += u32::from(c.out);
            }
            c.used_at_refill = c.used;
            c.out = false;
            c.throttled = false;
            c.budget = c.per_period + c.budget.min(c.carry);
            c.refills += 1;
        }
        self.refresh();
    }

    /// The host gives each running process `share` of a core (call `touch` first).
    pub fn set_host_share(&mut self, share: f64) {
        if let Some(c) = &mut self.cpu {
            c.share = share;
        }
        self.refresh();
    }

    /// Recomputes the rates after `n`, `blocked`, `speed` or the jobs in
    /// service changed (call `touch` first).
    #[inline]
    pub fn refresh(&mut self) {
        let n = self.n;
        let (g, h) = self.rate_share(n);
        self.share = h;
        if self.extra {
            self.refresh_cpu();
        }
        let speed = self.speed;
        match &self.in_service {
            InService::Race(r) if r.single_mu > 0.0 && self.serving == n.min(self.serve_limit) => {
                // All jobs present that may be served are: the total
                // capacity is exact (alpha(n), or n at a delay station), so
                // the rate is bit-identical whenever the state repeats.
                self.rate = speed * (r.single_mu * self.capacity(n));
            }
            InService::Race(r) => self.rate = speed * g * r.mass,
            // (round robin: the rate of each running job, as FCFS's g)
            InService::Tags(_) | InService::Rr(_) => self.rate = speed * g,
        }
    }

    /// The CPU's gate and use after a change.
    #[cold]
    fn refresh_cpu(&mut self) {
        let cores = self.cores_wanted();
        if let Some(c) = &mut self.cpu {
            self.speed = if c.throttled { 0.0 } else { c.pert * c.share };
            c.burn = cores * c.share;
        }
    }

    /// Total service capacity `g(n) * min(n, limit)` with `n` jobs present:
    /// `alpha(n)` at a queue, `n` at a delay station (selected without a
    /// branch: the station changes from event to event).
    #[inline]
    fn capacity(&self, n: u32) -> f64 {
        let qc = self.caps[(n as usize).min(self.caps.len() - 1)];
        select_unpredictable(self.kind == Kind::Delay, f64::from(n), qc)
    }

    /// A job may enter service: FCFS has a free server (blocked jobs keep
    /// theirs); PS and delay stations always serve.
    #[inline]
    pub fn has_free_server(&self) -> bool {
        self.serving + self.blocked < self.serve_limit
    }

    /// Puts `job` of `class` in service with `work` (time at speed 1) left;
    /// a race ignores `work`.
    #[inline]
    pub fn start(&mut self, job: u32, class: u32, work: f64) {
        match &mut self.in_service {
            InService::Tags(h) => {
                let seq = self.next_seq;
                self.next_seq += 1;
                h.push(Tagged {
                    tag: self.vclock + work,
                    seq,
                    job,
                });
            }
            InService::Race(r) => r.push(job, class),
            InService::Rr(rr) => rr.queue.push_back(Slot {
                job,
                work,
                slice: rr.quantum,
            }),
        }
        self.serving += 1;
    }

    /// Removes the job that completes now. Tags: the clock is set to its tag
    /// exactly, so rounding in the event time never accumulates; race: the
    /// hazard clock restarts for the next threshold; round robin: the
    /// running job that was due completes, or, if its slice ended first, goes
    /// to the back of the queue when others wait (`None`).
    #[inline]
    pub fn complete(&mut self) -> Option<u32> {
        if self.rr {
            return self.complete_rr();
        }
        let job = match &mut self.in_service {
            InService::Tags(h) => {
                let top = h.pop()?;
                self.vclock = top.tag;
                top.job
            }
            InService::Race(r) => {
                let job = r.pop()?;
                self.vclock = 0.0;
                job
            }
            InService::Rr(_) => unreachable!("handled above"),
        };
        self.serving -= 1;
        self.scheduled = false;
        Some(job)
    }

    /// [`Station::complete`] under round robin.
    #[cold]
    #[inline(never)]
    fn complete_rr(&mut self) -> Option<u32> {
        let InService::Rr(rr) = &mut self.in_service else {
            return None;
        };
        self.scheduled = false;
        let (_, i, completes) = rr.next(self.rate.max(f64::MIN_POSITIVE))?;
        if !completes {
            let mut slot = rr.queue.remove(i)?;
            slot.slice = rr.quantum;
            if rr.queue.len() >= rr.servers {
                rr.queue.push_back(slot);
            } else {
                rr.queue.insert(i, slot);
            }
            return None;
        }
        let slot = rr.queue.remove(i)?;
        self.serving -= 1;
        Some(slot.job)
    }

    /// Restarts the virtual clock when nobody is in service, keeping it small.
    #[inline]
    pub fn settle(&mut self) {
        if self.serving == 0 {
            self.vclock = 0.0;
        }
    }

    /// What must happen to the station's departure on the event list.
    #[inline]
    pub fn reschedule(&mut self, now: f64) -> Resched {
        // The clock level of the next completion, and what identifies it.
        let next = match &self.in_service {
            InService::Tags(h) => h.peek().map(|top| (top.tag, top.seq)),
            InService::Race(r) => (r.len() > 0).then_some((r.threshold, 0)),
            InService::Rr(_) => return self.reschedule_rr(now),
        };
        let (level, seq) = match next {
            Some(next) if self.rate > 0.0 => next,
            _ => {
                if self.scheduled {
                    self.scheduled = false;
                    return Resched::Cancel;
                }
                return Resched::Keep;
            }
        };
        if self.scheduled && self.sched_rate == self.rate && self.sched_seq == seq {
            // Same completion at the same clock rate: the pending event is still exact.
            return Resched::Keep;
        }
        self.scheduled = true;
        self.sched_rate = self.rate;
        self.sched_seq = seq;
        Resched::At(now + (level - self.vclock).max(0.0) / self.rate)
    }
}

impl Station {
    /// [`Station::reschedule`] under round robin.
    #[cold]
    #[inline(never)]
    fn reschedule_rr(&mut self, now: f64) -> Resched {
        let next = match &self.in_service {
            InService::Rr(rr) if self.rate > 0.0 => rr.next(self.rate),
            _ => None,
        };
        match next {
            Some((dt, _, _)) => {
                self.scheduled = true;
                Resched::At(now + dt)
            }
            None if self.scheduled => {
                self.scheduled = false;
                Resched::Cancel
            }
            None => Resched::Keep,
        }
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
    fn race_groups_jobs_by_class_and_picks_by_rate() {
        // Classes 0 and 2 served (rates 1 and 3), class 1 never; random pushes
        // and pops must keep every group holding exactly its class's jobs,
        // and pops must choose class 2 with probability 3 n2 / (n0 + 3 n2).
        let mut r = Race::new(
            &[1.0, 0.0, 3.0],
            true,
            crate::des::rng::Rng::stream(4, 0, 0),
        );
        let mut rng = crate::des::rng::Rng::stream(4, 0, 1);
        let class_of = |job: u32| job % 3;
        let mut present: Vec<u32> = Vec::new();
        let (mut next, mut expect, mut got) = (0u32, 0.0, 0.0);
        for _ in 0..200_000 {
            if present.len() < 4 || (rng.unit() < 0.5 && present.len() < 40) {
                next += 1 + u32::from(next % 3 == 0); // skip class 1
                let job = next;
                r.push(job, class_of(job));
                present.push(job);
            } else {
                let n2 = present.iter().filter(|&&j| class_of(j) == 2).count() as f64;
                expect += 3.0 * n2 / ((present.len() as f64 - n2) + 3.0 * n2);
                let job = r.pop().expect("non-empty");
                got += f64::from(u8::from(class_of(job) == 2));
                let at = present
                    .iter()
                    .position(|&j| j == job)
                    .expect("a present job");
                present.swap_remove(at);
            }
            assert_eq!(r.jobs.len(), present.len());
            for s in 0..2 {
                let class = [0, 2][s];
                let group = &r.jobs[r.bounds[s] as usize..r.bounds[s + 1] as usize];
                assert!(group.iter().all(|&j| class_of(j) == class));
            }
            let mut a = r.jobs.clone();
            let mut b = present.clone();
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b);
        }
        // About 100k pops: the count of class-2 picks is within 4 sd of its mean.
        assert!(
            (got - expect).abs() < 4.0 * (expect * 0.25).sqrt(),
            "{got} vs {expect}"
        );
    }

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
