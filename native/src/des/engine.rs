//! The simulation loop: jobs, routing, fork/join, finite capacity, schedules.
//!
//! Design: jobs live in a slab (`Vec<Job>` plus a free list) and are named
//! by `u32` indices everywhere, so the hot path allocates nothing once the
//! slab has grown to the peak population. An event handler changes state
//! directly; follow-up moves that can cascade (fork tasks, a parent released
//! by its join, jobs unblocked as room frees) go through a FIFO work list
//! that is drained after each event, so no chain of zero-time moves can
//! deepen the call stack.

use std::collections::VecDeque;
use std::time::Instant;

use super::alias::{Dest, EXIT};
use super::dist::Dist;
use super::event::{EventKind, EventList};
use super::json::bad;
use super::markov::MarkovSim;
use super::rng::{stream_id, Purpose, Rng};
use super::spec::{CapacityChange, Change, Discipline, HostSpec, Kind, Model, Policy};
use super::station::{Resched, Station};
use super::stats::{Recorder, Samples, Status, Trace, Windows};
use crate::error::Result;

/// "No job / no group" marker in `u32` links.
const NONE: u32 = u32::MAX;
/// A CPU budget running out this close before a completion waits for it (s).
const GRACE: f64 = 1e-9;

/// One job (a request, or a task of a forked request).
#[derive(Debug, Clone, Copy)]
struct Job {
    class: u32,
    /// Class the job was created as: it owns the request's system statistics
    /// and, for closed classes, the population slot and reference station.
    home: u32,
    station: u32,
    /// Fork group this job is a task of, or `NONE`.
    group: u32,
    /// While blocked: where the job goes once there is room.
    next_class: u32,
    retries: u32,
    blocked: bool,
    request: u64,
    /// Start of the current request (external arrival or cycle start); NaN if none.
    sys_start: f64,
    /// Arrival at the current station.
    arrival: f64,
    /// First time in service at the current station; NaN before.
    start: f64,
}

/// What only some models need of a job, kept beside the slab (not in [`Job`], which stays
/// one cache line).
#[derive(Debug, Clone, Copy, Default)]
struct Tags {
    /// The current request's row of the demand table.
    row: u32,
    /// At an `each` balance station: the member after the one visited last.
    cursor: u32,
}

/// The tasks of one forked job.
#[derive(Debug, Clone, Copy)]
struct Group {
    parent: u32,
    join: u32,
    quorum: u32,
    arrived: u32,
    outstanding: u32,
    released: bool,
}

/// Deferred moves, drained in order after each event.
#[derive(Debug, Clone, Copy)]
enum Pending {
    Arrive {
        job: u32,
        station: u32,
    },
    /// Room may have freed at this station: admit blocked jobs waiting for it.
    Release {
        station: u32,
    },
}

/// What one `advance` call produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Advance {
    pub now: f64,
    pub events: u64,
    pub wall_s: f64,
    pub windows: Windows,
    /// Only when the spec asked for traces.
    pub trace: Option<Trace>,
    /// Only when the spec asked for `rt_samples`.
    pub samples: Option<Samples>,
}

/// The host's cores shared by the CPU stations with `host` set.
#[derive(Debug)]
struct Host {
    spec: HostSpec,
    members: Vec<u32>,
    /// Their processes that want to run, and the share of a core each gets.
    n: f64,
    share: f64,
    /// Sums of the current window up to `t`: core-seconds the members'
    /// processes wanted and got, and the other tasks'.
    t: f64,
    wanted: f64,
    got: f64,
    others: f64,
}

impl Host {
    /// Integrates the sums up to `now` at the current state.
    fn integrate(&mut self, now: f64) {
        let span = now - self.t;
        if span > 0.0 {
            self.wanted += span * self.n;
            self.got += span * self.n * self.share;
            // The other tasks get the same share, or the cores when alone.
            let bg = self.spec.background;
            self.others += span
                * if self.n > 0.0 {
                    bg * self.share
                } else {
                    bg.min(self.spec.cores)
                };
        }
        self.t = now;
    }
}

/// A running simulation of one replication: the Markov fast path when the
/// model allows it (see [`super::markov`]), else the event engine.
#[derive(Debug)]
pub struct Simulation(Engine);

/// The event engine comes in two builds: models with CPU stations, round
/// robin, balance stations, demand tables, a host, capacity changes or
/// response-time samples take the one whose checks for them are compiled in;
/// the others pay nothing for them.
#[derive(Debug)]
enum Engine {
    Events(Box<EventSim<false>>),
    Special(Box<EventSim<true>>),
    Markov(Box<MarkovSim>),
}

/// Runs `$body` with `$s` bound to whichever engine runs the simulation.
macro_rules! each_engine {
    ($engine:expr, $s:ident => $body:expr) => {
        match $engine {
            Engine::Events($s) => $body,
            Engine::Special($s) => $body,
            Engine::Markov($s) => $body,
        }
    };
}

impl Simulation {
    /// Parses `spec_json` and places closed populations at their reference stations at t = 0.
    pub fn new(spec_json: &str, seed: u64, replication: u64) -> Result<Simulation> {
        let model = Model::from_json(spec_json)?;
        Ok(Simulation(if MarkovSim::applies(&model) {
            Engine::Markov(Box::new(MarkovSim::new(model, seed, replication)))
        } else if model.special() {
            Engine::Special(Box::new(EventSim::new(model, seed, replication)))
        } else {
            Engine::Events(Box::new(EventSim::new(model, seed, replication)))
        }))
    }

    /// Whether the Markov fast path runs this simulation.
    pub fn is_markov(&self) -> bool {
        matches!(self.0, Engine::Markov(_))
    }

    /// Simulated time.
    pub fn now(&self) -> f64 {
        each_engine!(&self.0, s => s.now())
    }

    /// Events processed so far.
    pub fn events(&self) -> u64 {
        each_engine!(&self.0, s => s.events())
    }

    /// Schedules a capacity change (a replica started or stopped, a quota
    /// changed) at `change.time`, which must not be in the past.
    pub fn schedule_change(&mut self, change: CapacityChange) -> Result<()> {
        match &mut self.0 {
            Engine::Events(s) => s.schedule_change(change),
            Engine::Special(s) => s.schedule_change(change),
            Engine::Markov(_) => Err(bad(
                "change",
                "capacity changes need the event engine (a model with balance or cpu \
                 stations, or \"markov\": false)",
            )),
        }
    }

    /// Runs until simulated time `until` (events at exactly `until` are left
    /// for later, as in SimPy) or until `max_events` more events, whichever
    /// comes first, and hands over the windows completed meanwhile.
    pub fn advance(&mut self, until: f64, max_events: u64) -> Advance {
        each_engine!(&mut self.0, s => s.advance(until, max_events))
    }
}

/// The event engine: one replication of any model.
#[derive(Debug)]
struct EventSim<const X: bool> {
    model: Model,
    m: usize,
    now: f64,
    events: u64,
    ev: EventList,
    st: Vec<Station>,
    jobs: Vec<Job>,
    free_jobs: Vec<u32>,
    groups: Vec<Group>,
    free_groups: Vec<u32>,
    pending: VecDeque<Pending>,
    next_request: u64,

    svc_rng: Vec<Rng>,
    route_rng: Vec<Rng>,
    /// The next destination of each routing stream, drawn one step ahead so
    /// that the draw's latency is off the event's critical path (the stream
    /// still yields the same sequence).
    route_next: Vec<Dest>,
    retry_rng: Vec<Rng>,
    arrival_rng: Vec<Rng>,
    entry_rng: Vec<Rng>,
    /// Open classes: steps of the arrival schedule in force at the last arrival.
    arrival_step: Vec<usize>,
    open: Vec<bool>,
    reference: Vec<u32>,
    /// Closed classes: jobs alive, and how many must retire at their next cycle end.
    live: Vec<u32>,
    to_retire: Vec<u32>,
    pert_active: Vec<u32>,
    pert_begins: Vec<u64>,
    /// Perturbation indices of each station.
    pert_at: Vec<Vec<u32>>,
    /// `class * M + station`: a zero-time visit (delay station, `det 0`
    /// service, such as the compiler's source and think hubs) that is passed
    /// through on the spot instead of scheduling a departure.
    /// (A pass is not an event: it schedules nothing, so it is not counted.)
    pass: Vec<bool>,
    /// `class * M + station`: the station is the reference of closed class
    /// `class`, where its cycles end and restart.
    cycle_end: Vec<bool>,

    /// Quota leaf of each CPU station on the event list (`NONE`: no CPU).
    quota_leaf: Vec<u32>,
    /// The CPU stations, by quota leaf.
    cpu_stations: Vec<usize>,
    /// Capacity changes scheduled so far (events name them by index).
    changes: Vec<CapacityChange>,
    /// Whether windows carry CPU sums (some station has a CPU).
    cpu_windows: bool,
    host: Option<Host>,
    /// Balance stations: the turn of their round robin.
    turn: Vec<u32>,
    row_rng: Rng,
    n_rows: u32,
    /// Whether jobs carry [`Tags`] (a demand table or an `each` balance station).
    tagged: bool,
    tags: Vec<Tags>,
    /// Whether any station has a CPU (and so a quota leaf).
    cpus: bool,
    samples: Option<Samples>,

    rec: Recorder,
    trace: Option<Trace>,
}

impl<const X: bool> EventSim<X> {
    fn now(&self) -> f64 {
        self.now
    }

    fn events(&self) -> u64 {
        self.events
    }

    /// Places closed populations at their reference stations at t = 0.
    fn new(model: Model, seed: u64, replication: u64) -> EventSim<X> {
        let (nc, m) = (model.n_classes(), model.n_stations());
        let streams = |p: Purpose| -> Vec<Rng> {
            (0..nc * m)
                .map(|i| Rng::stream(seed, replication, stream_id(p, i / m, i % m)))
                .collect()
        };
        let per_class = |p: Purpose| -> Vec<Rng> {
            (0..nc)
                .map(|c| Rng::stream(seed, replication, stream_id(p, c, 0)))
                .collect()
        };
        let mut pert_at = vec![Vec::new(); m];
        for (i, p) in model.perturbations.iter().enumerate() {
            pert_at[p.station].push(i as u32);
        }
        let pass = zero_time_passes(&model);
        let mut st: Vec<Station> = model
            .stations
            .iter()
            .enumerate()
            .map(|(k, spec)| {
                let period = spec.cpu.as_ref().map_or(0.0, |c| c.period);
                let mut rng = Rng::stream(seed, replication, stream_id(Purpose::Quota, 0, k));
                Station::new(spec, period * rng.unit())
            })
            .collect();
        let mut quota_leaf = vec![NONE; m];
        let mut quotas = Vec::new();
        for (k, station) in st.iter().enumerate() {
            if station.cpu.is_some() {
                quota_leaf[k] = quotas.len() as u32;
                quotas.push(k as u32);
            }
        }
        let host = model.host.map(|spec| Host {
            spec,
            members: (0..m as u32)
                .filter(|&k| st[k as usize].cpu.as_ref().is_some_and(|c| c.host))
                .collect(),
            n: 0.0,
            share: 1.0,
            t: 0.0,
            wanted: 0.0,
            got: 0.0,
            others: 0.0,
        });
        for (k, station) in st.iter_mut().enumerate() {
            if let Some(mu) = race_rates(&model, &pass, k) {
                let rng = Rng::stream(seed, replication, stream_id(Purpose::Race, 0, k));
                station.use_race(&mu, rng);
            }
        }
        let mut sim = EventSim {
            m,
            now: 0.0,
            events: 0,
            ev: EventList::with_quotas(m, nc, quotas.len()),
            cpu_stations: quotas.iter().map(|&k| k as usize).collect(),
            st,
            jobs: Vec::new(),
            free_jobs: Vec::new(),
            groups: Vec::new(),
            free_groups: Vec::new(),
            pending: VecDeque::with_capacity(64),
            next_request: 0,
            svc_rng: streams(Purpose::Service),
            route_next: Vec::new(),
            route_rng: streams(Purpose::Routing),
            retry_rng: streams(Purpose::RetryTimeout),
            arrival_rng: per_class(Purpose::Interarrival),
            entry_rng: per_class(Purpose::Entry),
            arrival_step: vec![0; nc],
            open: model.classes.iter().map(|c| c.open).collect(),
            reference: model.classes.iter().map(|c| c.reference as u32).collect(),
            live: vec![0; nc],
            to_retire: vec![0; nc],
            pert_active: vec![0; model.perturbations.len()],
            pert_begins: vec![0; model.perturbations.len()],
            pert_at,
            pass,
            cycle_end: (0..nc * m)
                .map(|i| !model.classes[i / m].open && model.classes[i / m].reference == i % m)
                .collect(),
            cpu_windows: model.stations.iter().any(|s| s.cpu.is_some()),
            quota_leaf,
            changes: Vec::new(),
            host,
            turn: vec![0; m],
            row_rng: Rng::stream(seed, replication, stream_id(Purpose::Rows, 0, 0)),
            n_rows: (model.rows.len() / model.row_width.max(1)).min(u32::MAX as usize) as u32,
            tagged: !model.rows.is_empty()
                || model
                    .stations
                    .iter()
                    .any(|s| s.kind == Kind::Balance && s.policy == Policy::Each),
            tags: Vec::new(),
            cpus: model.stations.iter().any(|s| s.cpu.is_some()),
            samples: model.rt_samples.then(Samples::default),
            rec: Recorder::new(nc, m, model.window),
            trace: model.trace.then(Trace::default),
            model,
        };
        sim.route_next = (0..nc * m)
            .map(|i| sim.model.routes.draw(i, &mut sim.route_rng[i]))
            .collect();
        sim.init();
        sim.rebalance();
        sim
    }

    fn init(&mut self) {
        for c in 0..self.open.len() {
            if self.open[c] {
                self.schedule_arrival(c, 0.0);
            } else {
                for _ in 0..self.model.classes[c].population {
                    self.add_closed_job(c);
                }
            }
        }
        for (i, p) in self.model.perturbations.iter().enumerate() {
            if p.period.is_none() || p.until.is_none_or(|u| p.start < u) {
                self.ev.push(
                    p.start,
                    EventKind::Perturb {
                        index: i as u32,
                        begin: true,
                    },
                );
            }
        }
        for k in 0..self.m {
            if let Some(c) = self.st[k].cpu.as_mut().filter(|c| c.has_quota()) {
                c.refilling = true;
                let t = c.next_refill();
                self.ev.push(t, EventKind::Refill { station: k as u32 });
            }
        }
        for c in self.model.capacity_schedule.clone() {
            // (checked when the spec was parsed)
            let _ = self.schedule_change(c);
        }
        for (s, sch) in self.model.population_schedule.iter().enumerate() {
            for (i, &(t, _)) in sch.steps.iter().enumerate() {
                self.ev.push(
                    t,
                    EventKind::Population {
                        schedule: s as u32,
                        step: i as u32,
                    },
                );
            }
        }
        self.drain();
    }

    fn advance(&mut self, until: f64, max_events: u64) -> Advance {
        let wall = Instant::now();
        let mut done = 0;
        while done < max_events {
            let Some(e) = self.ev.peek() else {
                break;
            };
            if e.time >= until {
                break;
            }
            self.ev.remove_peeked();
            if e.time >= self.rec.end {
                self.close_windows(e.time);
            }
            self.now = e.time;
            self.dispatch(e.kind);
            self.drain();
            if X && self.host.is_some() {
                self.rebalance();
            }
            done += 1;
        }
        self.events += done;
        // Nothing happens before `until`: the clock may move there.
        let idle_until = self.ev.peek().map_or(f64::INFINITY, |e| e.time) >= until;
        if until.is_finite() && until > self.now && idle_until {
            self.close_windows(until);
            self.now = until;
        }
        Advance {
            now: self.now,
            events: self.events,
            wall_s: wall.elapsed().as_secs_f64(),
            windows: std::mem::take(&mut self.rec.out),
            trace: self.trace.as_mut().map(std::mem::take),
            samples: self.samples.as_mut().map(std::mem::take),
        }
    }

    fn dispatch(&mut self, kind: EventKind) {
        match kind {
            EventKind::Arrival { class } => self.on_arrival(class as usize),
            EventKind::Departure { station } => self.on_departure(station as usize),
            EventKind::Retry { job } => {
                let k = self.jobs[job as usize].station as usize;
                self.arrive(job, k);
            }
            EventKind::Perturb { index, begin } => self.on_perturb(index as usize, begin),
            EventKind::Population { schedule, step } => {
                self.on_population(schedule as usize, step as usize)
            }
            EventKind::QuotaOut { index } => self.on_quota_out(self.cpu_stations[index as usize]),
            EventKind::Refill { station } => self.on_refill(station as usize),
            EventKind::Capacity { index } => self.on_capacity(index as usize),
        }
    }

    fn schedule_change(&mut self, change: CapacityChange) -> Result<()> {
        change.check(&self.model.stations, "change")?;
        if change.time < self.now {
            return Err(bad(
                "change.time",
                format!(
                    "{} is before the simulation's time {}",
                    change.time, self.now
                ),
            ));
        }
        let index = self.changes.len() as u32;
        self.changes.push(change);
        self.ev.push(change.time, EventKind::Capacity { index });
        Ok(())
    }

    /// A capacity change takes effect.
    fn on_capacity(&mut self, i: usize) {
        let CapacityChange {
            station: k, change, ..
        } = self.changes[i];
        let now = self.now;
        let st = &mut self.st[k];
        match change {
            Change::Active(a) => st.active = a,
            Change::Budget(b) => {
                st.touch(now);
                let Some(c) = st.cpu.as_mut() else {
                    return;
                };
                c.set_budget(b.unwrap_or(f64::INFINITY), now);
                let start = c.has_quota() && !c.refilling;
                c.refilling |= start;
                let next = c.next_refill();
                st.refresh();
                if start {
                    self.ev.push(next, EventKind::Refill { station: k as u32 });
                }
                self.reschedule(k);
            }
        }
    }

    #[inline(always)]
    fn drain(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        self.drain_pending();
    }

    fn drain_pending(&mut self) {
        while let Some(p) = self.pending.pop_front() {
            match p {
                Pending::Arrive { job, station } => self.arrive_instant(job, station as usize),
                Pending::Release { station } => self.release(station as usize),
            }
        }
    }

    // ----- jobs -----------------------------------------------------------

    fn alloc(&mut self, job: Job) -> u32 {
        let j = match self.free_jobs.pop() {
            Some(j) => {
                self.jobs[j as usize] = job;
                j
            }
            None => {
                self.jobs.push(job);
                (self.jobs.len() - 1) as u32
            }
        };
        if X && self.tagged {
            self.tags.resize(self.jobs.len(), Tags::default());
            self.tags[j as usize] = Tags::default();
        }
        j
    }

    fn new_job(&mut self, class: usize, sys_start: f64) -> u32 {
        let request = self.next_request;
        self.next_request += 1;
        self.alloc(Job {
            class: class as u32,
            home: class as u32,
            station: NONE,
            group: NONE,
            next_class: NONE,
            retries: 0,
            blocked: false,
            request,
            sys_start,
            arrival: self.now,
            start: f64::NAN,
        })
    }

    /// A new request of job `j` starts: its row of the demand table.
    #[inline(always)]
    fn draw_row(&mut self, j: u32) {
        if X && self.n_rows > 0 {
            self.tags[j as usize].row = self.row_rng.below(self.n_rows);
        }
    }

    fn add_closed_job(&mut self, c: usize) {
        let j = self.new_job(c, f64::NAN);
        self.live[c] += 1;
        self.arrive(j, self.reference[c] as usize);
    }

    fn retire(&mut self, j: u32) {
        let home = self.jobs[j as usize].home as usize;
        self.to_retire[home] -= 1;
        self.live[home] -= 1;
        self.free_jobs.push(j);
    }

    // ----- events ---------------------------------------------------------

    fn schedule_arrival(&mut self, c: usize, after: f64) {
        let x = match &self.model.classes[c].interarrival {
            Some(d) => d.sample(&mut self.arrival_rng[c]),
            None => return,
        };
        if let Some(t) = self.scaled_arrival(c, after, x) {
            self.ev.set_arrival(c as u32, t);
        }
    }

    /// Time-scaling of the arrival process: an interarrival `x` is measured in
    /// "operational time" whose clock runs at the scheduled rate multiplier,
    /// so the arrival comes when the integral of the multiplier since `after`
    /// reaches `x`. For Poisson arrivals this is exactly the non-homogeneous
    /// Poisson process; for renewal arrivals it keeps the shape of the law.
    /// A multiplier of 0 suspends arrivals; `None` if it stays 0 forever.
    fn scaled_arrival(&mut self, c: usize, after: f64, x: f64) -> Option<f64> {
        let steps = &self.model.arrival_schedule[c];
        if steps.is_empty() {
            // No schedule: the multiplier is 1 forever (`x / 1.0 == x` exactly).
            return Some(after + x);
        }
        let mut step = self.arrival_step[c];
        let (mut t, mut x) = (after, x);
        loop {
            let mult = if step == 0 { 1.0 } else { steps[step - 1].1 };
            let end = steps.get(step).map_or(f64::INFINITY, |s| s.0);
            if t < end && mult > 0.0 {
                let room = (end - t) * mult;
                if x <= room {
                    self.arrival_step[c] = step;
                    return Some(t + x / mult);
                }
                x -= room;
            }
            if step >= steps.len() {
                self.arrival_step[c] = step;
                return None;
            }
            t = t.max(end);
            step += 1;
        }
    }

    fn on_arrival(&mut self, c: usize) {
        let j = self.new_job(c, self.now);
        self.draw_row(j);
        // Next arrival first: the arrival stream never depends on what jobs do.
        self.schedule_arrival(c, self.now);
        let k = self.model.entry_station(c, &mut self.entry_rng[c]);
        self.arrive(j, k);
    }

    fn on_departure(&mut self, k: usize) {
        self.st[k].touch(self.now);
        let Some(j) = self.st[k].complete() else {
            // (a round-robin slice ended)
            self.st[k].refresh();
            self.reschedule(k);
            return;
        };
        let c = self.jobs[j as usize].class as usize;
        let dest = self.route(c, k);
        if let Some(t) = dest {
            let k2 = t.station as usize;
            let d = &self.st[k2];
            if d.blocks_when_full && k2 != k && d.n >= d.capacity {
                // Blocking after service: the job keeps its server until room frees at k2.
                let job = &mut self.jobs[j as usize];
                job.blocked = true;
                job.next_class = t.class;
                job.station = k as u32;
                self.st[k].blocked += 1;
                self.st[k2].waiters.push_back(j);
                self.st[k].settle();
                self.st[k].refresh();
                self.reschedule(k);
                return;
            }
        }
        self.leave(j, k);
        match dest {
            Some(t) => {
                self.jobs[j as usize].class = t.class;
                self.arrive(j, t.station as usize);
            }
            None => self.exit(j),
        }
    }

    fn on_perturb(&mut self, i: usize, begin: bool) {
        let p = &self.model.perturbations[i];
        let k = p.station;
        if begin {
            self.pert_active[i] += 1;
            self.pert_begins[i] += 1;
            self.ev.push(
                self.now + p.duration,
                EventKind::Perturb {
                    index: i as u32,
                    begin: false,
                },
            );
            if let Some(period) = p.period {
                // From `start` by multiplication, so long runs do not drift.
                let next = p.start + self.pert_begins[i] as f64 * period;
                if p.until.is_none_or(|u| next < u) {
                    self.ev.push(
                        next,
                        EventKind::Perturb {
                            index: i as u32,
                            begin: true,
                        },
                    );
                }
            }
        } else {
            self.pert_active[i] -= 1;
        }
        let mut speed = 1.0;
        for &q in &self.pert_at[k] {
            let a = self.pert_active[q as usize];
            if a > 0 {
                speed *= self.model.perturbations[q as usize].factor.powi(a as i32);
            }
        }
        let st = &mut self.st[k];
        st.touch(self.now);
        st.set_speed(speed);
        st.refresh();
        self.reschedule(k);
    }

    fn on_population(&mut self, s: usize, step: usize) {
        let sch = &self.model.population_schedule[s];
        let c = sch.class;
        let target = sch.steps[step].1;
        let current = self.live[c] - self.to_retire[c];
        if target >= current {
            let mut add = target - current;
            let keep = add.min(self.to_retire[c]);
            self.to_retire[c] -= keep;
            add -= keep;
            for _ in 0..add {
                self.add_closed_job(c);
            }
        } else {
            self.to_retire[c] += current - target;
        }
    }

    /// When station `k`'s budget runs out, on the event list.
    #[cold]
    fn reschedule_quota(&mut self, k: usize) {
        let q = self.quota_leaf[k];
        if q != NONE {
            match self.st[k].quota_out(self.now) {
                Some(t) => self.ev.set_quota_out(q, t),
                None => self.ev.cancel_quota_out(q),
            }
        }
    }

    /// Station `k` has spent its CPU budget: throttled until its period ends.
    fn on_quota_out(&mut self, k: usize) {
        let st = &mut self.st[k];
        st.touch(self.now);
        if st.completes_within(GRACE) {
            // A job that needs the budget's last instant (the times differ only
            // by rounding) completes first; the budget runs out just after.
            self.ev.set_quota_out(self.quota_leaf[k], self.now + GRACE);
            return;
        }
        st.throttle();
        self.reschedule(k);
    }

    /// A CPU period of station `k` ends: its budget is refilled.
    fn on_refill(&mut self, k: usize) {
        let st = &mut self.st[k];
        st.touch(self.now);
        st.refill();
        let next = st.cpu.as_ref().map_or(f64::INFINITY, |c| c.next_refill());
        self.ev.push(next, EventKind::Refill { station: k as u32 });
        self.reschedule(k);
    }

    /// After an event: if the processes that want to run on the host
    /// changed, the share of a core each gets, and the member stations'
    /// speeds with it.
    fn rebalance(&mut self) {
        let Some(host) = &mut self.host else {
            return;
        };
        let n: f64 = host
            .members
            .iter()
            .map(|&k| self.st[k as usize].cores_wanted())
            .sum();
        if n == host.n {
            return;
        }
        host.integrate(self.now);
        host.n = n;
        if n <= 0.0 {
            return; // (nothing runs: the share is set when something does)
        }
        let share = (host.spec.cores / (host.spec.background + n)).min(1.0);
        if share == host.share {
            return;
        }
        host.share = share;
        let members = std::mem::take(&mut host.members);
        for &k in &members {
            let st = &mut self.st[k as usize];
            st.touch(self.now);
            st.set_host_share(share);
            self.reschedule(k as usize);
        }
        if let Some(host) = &mut self.host {
            host.members = members;
        }
    }

    // ----- moves ----------------------------------------------------------

    /// Next (class, station) of class `c` leaving station `k`; `None` leaves the network.
    #[inline]
    fn route(&mut self, c: usize, k: usize) -> Option<Dest> {
        let i = c * self.m + k;
        let next = self.model.routes.draw(i, &mut self.route_rng[i]);
        let d = std::mem::replace(&mut self.route_next[i], next);
        (d.station != EXIT).then_some(d)
    }

    /// Job `j` reaches station `k` from a fork, a join or a zero-time pass.
    /// Such a job holds no server to block, so at a full blocking station it
    /// waits for room outside (counted nowhere, its request's clock running)
    /// and enters in FIFO order with the jobs blocked upstream.
    fn arrive_instant(&mut self, j: u32, k: usize) {
        let st = &self.st[k];
        if st.blocks_when_full && st.n >= st.capacity {
            let job = &mut self.jobs[j as usize];
            job.station = NONE;
            job.next_class = job.class;
            job.blocked = false;
            self.st[k].waiters.push_back(j);
            return;
        }
        self.arrive(j, k);
    }

    /// Job `j` reaches station `k`.
    fn arrive(&mut self, j: u32, k: usize) {
        match self.st[k].kind {
            Kind::Fork => return self.fork(j, k),
            Kind::Join => return self.at_join(j, k),
            Kind::Balance => return self.balance(j, k),
            Kind::Queue | Kind::Delay => {}
        }
        let job = &self.jobs[j as usize];
        let (home, group) = (job.home as usize, job.group);
        if group == NONE && self.cycle_end[home * self.m + k] {
            self.end_cycle(j);
            if self.to_retire[home] > 0 {
                return self.retire(j);
            }
        }
        if self.st[k].n >= self.st[k].capacity {
            self.refuse(j, k);
        } else {
            self.admit(j, k);
        }
    }

    /// Balance station `k` sends job `j` on to one of its members at once.
    fn balance(&mut self, j: u32, k: usize) {
        let spec = &self.model.stations[k];
        let st = &self.st;
        // The active members (all of them if none is).
        let any = spec.members.iter().any(|&b| st[b].active);
        let open = |b: &&usize| !any || st[**b].active;
        if spec.policy == Policy::Each {
            let from = self.tags[j as usize].cursor as usize;
            let next = spec.members[from..].iter().position(|b| open(&b));
            let next = next.map(|i| (from + i, spec.members[from + i]));
            let Some((i, b)) = next else {
                // Every member visited: on by this station's row.
                self.tags[j as usize].cursor = 0;
                let c = self.jobs[j as usize].class as usize;
                return self.depart_instant(j, c, k);
            };
            self.tags[j as usize].cursor = (i + 1) as u32;
            return self.arrive(j, b);
        }
        let pick = match spec.policy {
            Policy::RoundRobin => {
                let n = spec.members.iter().filter(open).count() as u32;
                self.turn[k] = (self.turn[k] + 1) % n;
                spec.members.iter().filter(open).nth(self.turn[k] as usize)
            }
            Policy::LeastLoaded => {
                let least = spec.members.iter().filter(open).map(|&b| st[b].n).min();
                let at_least = |b: &&usize| open(b) && Some(st[**b].n) == least;
                let ties = spec.members.iter().filter(at_least).count() as u32;
                self.turn[k] = (self.turn[k] + 1) % ties;
                spec.members
                    .iter()
                    .filter(at_least)
                    .nth(self.turn[k] as usize)
            }
            Policy::Each => unreachable!("handled above"),
        };
        let pick = *pick.unwrap_or(&spec.members[0]);
        self.arrive(j, pick);
    }

    /// A closed job is back at its reference: its request is complete.
    fn end_cycle(&mut self, j: u32) {
        let job = &mut self.jobs[j as usize];
        if job.sys_start.is_nan() {
            return;
        }
        let (home, request, start) = (job.home, job.request, job.sys_start);
        job.sys_start = f64::NAN;
        self.record_request(home, request, start, Status::Ok);
    }

    fn record_request(&mut self, home: u32, request: u64, start: f64, status: Status) {
        if status == Status::Ok {
            let h = home as usize;
            let rt = self.now - start;
            if let Some(s) = self.samples.as_mut().filter(|_| X) {
                s.class.push(home);
                s.end.push(self.now);
                s.rt.push(rt);
            }
            self.rec.acc.sys_completions[h] += 1.0;
            self.rec.acc.sys_rt_sum[h] += rt;
            if rt > self.rec.acc.sys_rt_max[h] {
                self.rec.acc.sys_rt_max[h] = rt;
            }
        }
        if let Some(tr) = &mut self.trace {
            tr.push(request, home, -1, start, start, self.now, status);
        }
    }

    /// Changes the counts of cell (c, k) now (station `k` touched first).
    #[inline(always)]
    fn cell_change(&mut self, c: usize, k: usize, dn: i32, ds: i32) {
        let since_w0 = self.now - self.rec.start;
        let busy = self.st[k].busy_clock;
        self.rec.cells[c * self.m + k].change(dn, ds, since_w0, busy);
    }

    /// Job `j` enters queue or delay station `k`, which has room.
    fn admit(&mut self, j: u32, k: usize) {
        let now = self.now;
        let i = self.jobs[j as usize].class as usize * self.m + k;
        if self.pass[i] {
            return self.pass_through(j, k);
        }
        if X && self.n_rows > 0 && self.row_work(j, i) == Some(0.0) {
            // No demand here in this request's row: the station is not visited.
            return self.depart_instant(j, i / self.m, k);
        }
        let job = &mut self.jobs[j as usize];
        let c = job.class as usize;
        job.station = k as u32;
        job.arrival = now;
        job.start = f64::NAN;
        job.retries = 0;
        job.blocked = false;
        self.rec.cells[c * self.m + k].arrivals += 1.0;
        self.st[k].touch(now);
        let serve = self.st[k].has_free_server();
        self.cell_change(c, k, 1, serve as i32);
        let st = &mut self.st[k];
        st.n += 1;
        st.q_max = st.q_max.max(st.n);
        if serve {
            self.start_service(j, k);
        } else {
            st.waiting.push_back(j);
        }
        self.st[k].refresh();
        self.reschedule(k);
    }

    /// A zero-time visit of job `j` to delay station `k`: counted exactly as
    /// an admission, a start and a departure at the same instant would be
    /// (arrival, completion with response time 0, one more job present for
    /// an instant), and routed on at once, without a departure event.
    fn pass_through(&mut self, j: u32, k: usize) {
        let now = self.now;
        let job = &mut self.jobs[j as usize];
        let c = job.class as usize;
        job.station = k as u32;
        job.arrival = now;
        job.start = now;
        job.retries = 0;
        job.blocked = false;
        let job = *job;
        self.rec.cells[c * self.m + k].arrivals += 1.0;
        let st = &mut self.st[k];
        st.touch(now);
        st.q_max = st.q_max.max(st.n + 1);
        self.record_visit(j, k, Status::Ok);
        let home = job.home as usize;
        if job.group == NONE && self.cycle_end[home * self.m + k] {
            // Leaving the reference starts a new request of the closed job.
            let job = &mut self.jobs[j as usize];
            job.request = self.next_request;
            job.sys_start = now;
            self.next_request += 1;
            self.draw_row(j);
        }
        self.depart_instant(j, c, k);
    }

    /// Work of job `j` at cell `i` if its law there is a row of the demand table.
    #[inline]
    fn row_work(&self, j: u32, i: usize) -> Option<f64> {
        match self.model.service[i] {
            Some(Dist::Row { column }) => {
                let row = self.tags[j as usize].row as usize;
                Some(self.model.rows[row * self.model.row_width + column as usize])
            }
            _ => None,
        }
    }

    #[inline(always)]
    fn start_service(&mut self, j: u32, k: usize) {
        let job = &mut self.jobs[j as usize];
        let i = job.class as usize * self.m + k;
        if job.start.is_nan() {
            job.start = self.now;
        }
        let class = job.class;
        // A race draws its completions itself; elsewhere validation
        // guarantees a law wherever a class can be served.
        let work = if self.st[k].is_race() {
            0.0
        } else {
            let row = if X && self.n_rows > 0 {
                self.row_work(j, i)
            } else {
                None
            };
            match row {
                Some(w) => w,
                None => self.model.service[i]
                    .as_ref()
                    .map_or(0.0, |d| d.sample(&mut self.svc_rng[i])),
            }
        };
        self.st[k].start(j, class, work);
    }

    #[inline(always)]
    fn reschedule(&mut self, k: usize) {
        match self.st[k].reschedule(self.now) {
            Resched::Keep => {}
            Resched::At(t) => self.ev.set_departure(k as u32, t),
            Resched::Cancel => self.ev.cancel_departure(k as u32),
        }
        if X && self.cpus {
            self.reschedule_quota(k);
        }
    }

    /// Job `j` finishes its visit at station `k` (after service, or after
    /// being blocked); the caller has touched the station.
    fn leave(&mut self, j: u32, k: usize) {
        let now = self.now;
        let job = &mut self.jobs[j as usize];
        let (c, home, group, blocked) = (
            job.class as usize,
            job.home as usize,
            job.group,
            job.blocked,
        );
        job.blocked = false;
        self.cell_change(c, k, -1, -1);
        let st = &mut self.st[k];
        st.n -= 1;
        st.blocked -= u32::from(blocked);
        self.record_visit(j, k, Status::Ok);
        if group == NONE && self.cycle_end[home * self.m + k] {
            // Leaving the reference starts a new request of the closed job.
            let job = &mut self.jobs[j as usize];
            job.request = self.next_request;
            job.sys_start = now;
            self.next_request += 1;
            self.draw_row(j);
        }
        // Only FCFS queues have waiting jobs.
        while !self.st[k].waiting.is_empty() && self.st[k].has_free_server() {
            let Some(w) = self.st[k].waiting.pop_front() else {
                break;
            };
            let wc = self.jobs[w as usize].class as usize;
            self.cell_change(wc, k, 0, 1);
            self.start_service(w, k);
        }
        let st = &mut self.st[k];
        st.settle();
        st.refresh();
        self.reschedule(k);
        if !self.st[k].waiters.is_empty() {
            // Blocked jobs take freed room before anything else moves.
            self.pending
                .push_front(Pending::Release { station: k as u32 });
        }
    }

    #[inline(always)]
    fn record_visit(&mut self, j: u32, k: usize, status: Status) {
        let job = &self.jobs[j as usize];
        let i = job.class as usize * self.m + k;
        let rt = self.now - job.arrival;
        self.rec.cells[i].complete(rt);
        if self.trace.is_some() {
            let job = *job;
            self.trace_visit(&job, k, status);
        }
    }

    /// Appends the visit of `job` to station `k`, ending now, to the trace (if on).
    fn trace_visit(&mut self, job: &Job, k: usize, status: Status) {
        if let Some(tr) = &mut self.trace {
            tr.push(
                job.request,
                job.class,
                k as i64,
                job.arrival,
                job.start,
                self.now,
                status,
            );
        }
    }

    /// Admits jobs blocked elsewhere (or waiting outside) for room at `k`, in FIFO order.
    fn release(&mut self, k: usize) {
        while self.st[k].n < self.st[k].capacity {
            let Some(w) = self.st[k].waiters.pop_front() else {
                break;
            };
            let from = self.jobs[w as usize].station;
            if from != NONE {
                self.st[from as usize].touch(self.now);
                self.leave(w, from as usize);
            }
            let job = &mut self.jobs[w as usize];
            job.class = job.next_class;
            self.arrive(w, k);
        }
    }

    /// Station `k` is full: drop the job, or let it retry after a timeout.
    fn refuse(&mut self, j: u32, k: usize) {
        let c = self.jobs[j as usize].class as usize;
        let i = c * self.m + k;
        self.rec.cells[i].drops += 1.0;
        let retry = self.model.stations[k]
            .retry
            .as_ref()
            .filter(|r| self.jobs[j as usize].retries < r.max_retries);
        let status = if retry.is_some() {
            Status::Retry
        } else {
            Status::Dropped
        };
        let timeout = retry.map(|r| r.timeout.sample(&mut self.retry_rng[i]));
        let job = &mut self.jobs[j as usize];
        if let Some(tr) = &mut self.trace {
            tr.push(
                job.request,
                job.class,
                k as i64,
                self.now,
                f64::NAN,
                self.now,
                status,
            );
        }
        match timeout {
            Some(d) => {
                job.retries += 1;
                job.station = k as u32;
                self.ev.push(self.now + d, EventKind::Retry { job: j });
            }
            None => self.lose(j),
        }
    }

    /// Job `j` is lost (refused for good, or its fork can no longer reach its quorum).
    fn lose(&mut self, j: u32) {
        let job = self.jobs[j as usize];
        if job.group != NONE {
            self.free_jobs.push(j);
            return self.task_end(job.group, false);
        }
        let home = job.home as usize;
        if !job.sys_start.is_nan() {
            self.record_request(job.home, job.request, job.sys_start, Status::Dropped);
        }
        if self.open[home] {
            self.free_jobs.push(j);
            return;
        }
        // A closed job's request failed; the user goes back to the reference
        // (thinks) and tries a new request, so the population is preserved.
        let job = &mut self.jobs[j as usize];
        job.sys_start = f64::NAN;
        job.class = home as u32;
        if self.to_retire[home] > 0 {
            return self.retire(j);
        }
        self.admit(j, self.reference[home] as usize);
    }

    /// Job `j` leaves the network by its routing.
    fn exit(&mut self, j: u32) {
        let job = self.jobs[j as usize];
        if job.group != NONE {
            // A task that leaves before its join never counts towards the quorum.
            self.free_jobs.push(j);
            return self.task_end(job.group, false);
        }
        let home = job.home as usize;
        if self.open[home] {
            self.record_request(job.home, job.request, job.sys_start, Status::Ok);
            self.free_jobs.push(j);
        } else {
            // Validation makes closed rows sum to 1; kept as a safe fallback.
            self.jobs[j as usize].class = job.home;
            self.arrive(j, self.reference[home] as usize);
        }
    }

    // ----- fork / join ----------------------------------------------------

    /// Splits job `j` at fork `k` into one task per branch; the parent waits at the join.
    fn fork(&mut self, j: u32, k: usize) {
        let now = self.now;
        let c = self.jobs[j as usize].class as usize;
        {
            let job = &mut self.jobs[j as usize];
            job.station = k as u32;
            job.arrival = now;
            job.start = now;
        }
        self.rec.cells[c * self.m + k].arrivals += 1.0;
        let job = self.jobs[j as usize];
        self.record_visit(j, k, Status::Ok);
        let join = self.st[k].join as usize;
        let given = self.st[k].branches.len();
        let n = if given > 0 {
            given
        } else {
            self.model.row(c, k).len()
        } as u32;
        let q = self.st[join].quorum;
        let group = Group {
            parent: j,
            join: join as u32,
            quorum: if q == 0 { n } else { q.min(n) },
            arrived: 0,
            outstanding: n,
            released: false,
        };
        let g = match self.free_groups.pop() {
            Some(g) => {
                self.groups[g as usize] = group;
                g
            }
            None => {
                self.groups.push(group);
                (self.groups.len() - 1) as u32
            }
        };
        // The parent is "at the join" from the fork on: the join's queue length
        // counts forked requests in progress, and its response time is fork-to-join.
        self.st[join].touch(now);
        self.cell_change(c, join, 1, 0);
        let sj = &mut self.st[join];
        sj.n += 1;
        sj.q_max = sj.q_max.max(sj.n);
        self.rec.cells[c * self.m + join].arrivals += 1.0;
        let parent = &mut self.jobs[j as usize];
        parent.station = join as u32;
        parent.arrival = now;
        parent.start = now;
        for b in 0..n as usize {
            let (tc, tk) = if given > 0 {
                (c as u32, self.st[k].branches[b])
            } else {
                let t = self.model.row(c, k)[b];
                (t.class, t.station)
            };
            let task = self.alloc(Job {
                class: tc,
                group: g,
                next_class: NONE,
                retries: 0,
                blocked: false,
                station: NONE,
                arrival: now,
                start: f64::NAN,
                ..job
            });
            if X && self.tagged {
                self.tags[task as usize] = Tags {
                    cursor: 0,
                    ..self.tags[j as usize]
                };
            }
            self.pending.push_back(Pending::Arrive {
                job: task,
                station: tk,
            });
        }
    }

    fn at_join(&mut self, j: u32, k: usize) {
        let job = self.jobs[j as usize];
        if job.group != NONE && self.groups[job.group as usize].join as usize == k {
            self.free_jobs.push(j);
            return self.task_end(job.group, true);
        }
        // Not forked towards this join: pass through in zero time.
        let c = job.class as usize;
        let now = self.now;
        let jm = &mut self.jobs[j as usize];
        jm.station = k as u32;
        jm.arrival = now;
        jm.start = now;
        self.rec.cells[c * self.m + k].arrivals += 1.0;
        self.record_visit(j, k, Status::Ok);
        self.depart_instant(j, c, k);
    }

    /// Routes job `j` onwards from the instantaneous station `k`.
    fn depart_instant(&mut self, j: u32, c: usize, k: usize) {
        match self.route(c, k) {
            Some(t) => {
                self.jobs[j as usize].class = t.class;
                self.pending.push_back(Pending::Arrive {
                    job: j,
                    station: t.station,
                });
            }
            None => self.exit(j),
        }
    }

    /// One task of group `g` reached its join (`reached`) or was lost.
    fn task_end(&mut self, g: u32, reached: bool) {
        let grp = &mut self.groups[g as usize];
        grp.outstanding -= 1;
        if !grp.released {
            if reached {
                grp.arrived += 1;
            }
            if grp.arrived >= grp.quorum {
                grp.released = true;
                self.parent_leaves_join(g, Status::Ok);
            } else if grp.arrived + grp.outstanding < grp.quorum {
                grp.released = true;
                self.parent_leaves_join(g, Status::Dropped);
            }
        }
        if self.groups[g as usize].outstanding == 0 {
            self.free_groups.push(g);
        }
    }

    /// The parent of group `g` is released by its join (`Ok`) or lost (`Dropped`).
    fn parent_leaves_join(&mut self, g: u32, status: Status) {
        let Group { parent, join, .. } = self.groups[g as usize];
        let k = join as usize;
        let job = self.jobs[parent as usize];
        let c = job.class as usize;
        self.st[k].touch(self.now);
        self.cell_change(c, k, -1, 0);
        self.st[k].n -= 1;
        if status == Status::Ok {
            self.record_visit(parent, k, Status::Ok);
            self.depart_instant(parent, c, k);
        } else {
            self.rec.cells[c * self.m + k].drops += 1.0;
            self.trace_visit(&job, k, status);
            self.lose(parent);
        }
    }

    // ----- windows --------------------------------------------------------

    /// Completes every window that ends at or before `t`.
    fn close_windows(&mut self, t: f64) {
        let (st, host, cpu) = (&mut self.st, &mut self.host, self.cpu_windows);
        self.rec.close_until(t, |end, busy_end, out| {
            for st in st.iter_mut() {
                st.touch(end);
                busy_end.push(st.busy_clock);
                // Busy clocks restart at every window, keeping them small.
                st.busy_clock = 0.0;
                out.q_max.push(f64::from(st.q_max));
                st.q_max = st.n;
                if cpu {
                    let (used, periods, throttled) = match &mut st.cpu {
                        Some(c) => {
                            let sums = (c.window_used, c.window_periods, c.window_throttled);
                            c.window_used = 0.0;
                            c.window_periods = 0;
                            c.window_throttled = 0;
                            sums
                        }
                        None => (0.0, 0, 0),
                    };
                    out.cpu.push(used);
                    out.periods.push(f64::from(periods));
                    out.throttled.push(f64::from(throttled));
                }
            }
            if let Some(host) = host {
                host.integrate(end);
                out.host.extend([host.wanted, host.got, host.others]);
                (host.wanted, host.got, host.others) = (0.0, 0.0, 0.0);
            }
        });
    }
}

/// Class rates `1 / mean` of station `k` if it can be served as an exponential
/// race: a queue or delay station where every class that can be in service
/// has exponential service (classes passed through in zero time never are).
pub(super) fn race_rates(model: &Model, pass: &[bool], k: usize) -> Option<Vec<f64>> {
    let m = model.n_stations();
    let st = &model.stations[k];
    if !matches!(st.kind, Kind::Queue | Kind::Delay) || st.discipline == Discipline::Rr {
        return None;
    }
    (0..model.n_classes())
        .map(|c| match &model.service[c * m + k] {
            _ if pass[c * m + k] => Some(0.0),
            None => Some(0.0),
            Some(Dist::Exp { mean }) => Some(1.0 / mean),
            Some(_) => None,
        })
        .collect()
}

/// `class * M + station`: a zero-time visit (delay station, `det 0` service,
/// such as the compiler's source and think hubs) that is passed through on
/// the spot instead of scheduling a departure.
pub(super) fn zero_time_passes(model: &Model) -> Vec<bool> {
    let (nc, m) = (model.n_classes(), model.n_stations());
    (0..nc * m)
        .map(|i| {
            let (c, k) = (i / m, i % m);
            let st = &model.stations[k];
            let zero = matches!(model.service[i], Some(Dist::Det { value }) if value == 0.0);
            // No capacity (nobody waits for room here), no speed changes (a
            // stall would hold the job), and no blocking destination (the
            // job would have to stay here on its server).
            let can_block = model.row(c, k).iter().any(|t| {
                let d = &model.stations[t.station as usize];
                d.block && d.capacity != u32::MAX
            });
            st.kind == Kind::Delay
                && zero
                && st.capacity == u32::MAX
                && model.perturbations.iter().all(|p| p.station != k)
                && !can_block
        })
        .collect()
}
