//! Exact simulation of Markovian networks by their jump chain (Gillespie's
//! direct method): the fast path of the simulator.
//!
//! Design: when every timed activity of a model is exponential (each queue
//! and delay station a [race](super::station), each open class Poisson at a
//! constant rate) and nothing happens at fixed times (no perturbations,
//! schedules, finite buffers, retries, forks or traces), the network is a
//! continuous-time Markov chain with one transition "channel" per station
//! (its next completion, at the station's total rate) and per open class
//! (its next arrival). Its next transition is then drawn directly: the time
//! to it is exponential with the total rate, and it is channel `i` with
//! probability `rate_i / total`. Nothing is scheduled per station, so there
//! is no event list to keep, and the state is a handful of flat arrays. This
//! is the same process in law as the event engine ([`super::engine`]), not
//! an approximation, at about twice its speed; the event engine runs every
//! other model (and this one too when the spec says `"markov": false`).
//!
//! The semantics of jobs, requests, routing and windowed statistics are the
//! event engine's (see the module notes of [`super`]); only the way the
//! next thing to happen is found differs. The pending transition's time is
//! drawn when the previous one is done, so cutting a run into `advance`
//! calls gives the same run as one call.

use std::collections::VecDeque;
use std::time::Instant;

use super::alias::{Dest, EXIT};
use super::dist::Dist;
use super::engine::{race_rates, zero_time_passes, Advance};
use super::rng::{stream_id, Purpose, Rng};
use super::spec::{Discipline, Kind, Model, StationSpec};
use super::station::Race;
use super::stats::Recorder;

/// One job: only what the statistics need.
#[derive(Debug, Clone, Copy)]
struct Job {
    class: u32,
    home: u32,
    /// Arrival at the current station.
    arrival: f64,
    /// Start of the current request; NaN between cycles.
    sys_start: f64,
}

/// A queue or delay station, with only what a Markov transition needs.
#[derive(Debug)]
struct Node {
    /// Jobs in service (all classes exponential here).
    race: Race,
    /// FCFS jobs waiting for a server.
    waiting: VecDeque<u32>,
    /// Jobs present.
    n: u32,
    /// Most jobs in service at once: FCFS servers; no limit for PS and delay.
    limit: u32,
    /// 1 at a delay station (capacity `n`), else 0.
    per_job: f64,
    /// PS: the first `n` past the table (share `1/n`); others: never.
    ps_tail: usize,
    /// `(capacity, busy share)` with `n` jobs present, for `n` up to where
    /// they stop changing (PS shares go on as `1/n`, computed past the end):
    /// capacity `alpha(min(n, L))` at a queue (0 at a delay station, which
    /// adds `n`), share as [`super::station`]'s `h(n)`.
    tab: Box<[(f64, f64)]>,
    /// Total completion rate.
    rate: f64,
    /// Busy share of each job occupying capacity (see `Station::h`), and its integral.
    share: f64,
    busy_clock: f64,
    last: f64,
    q_max: u32,
}

impl Node {
    fn new(spec: &StationSpec, race: Race) -> Node {
        let ps = spec.kind == Kind::Queue && spec.discipline == Discipline::Ps;
        let delay = spec.kind == Kind::Delay;
        let m = spec.servers;
        let flat = spec.alpha.len().max(m as usize);
        let len = if ps { flat.max(64) } else { flat } + 1;
        let tab = (0..len)
            .map(|n| {
                let alpha = spec.alpha[n.clamp(1, spec.alpha.len()) - 1];
                let mf = f64::from(m);
                match (delay, n) {
                    (true, _) => (0.0, 1.0),
                    (false, 0) => (0.0, 0.0),
                    _ if ps => (alpha, n.min(m as usize) as f64 / (mf * n as f64)),
                    _ => (alpha, 1.0 / mf),
                }
            })
            .collect();
        Node {
            race,
            waiting: VecDeque::new(),
            n: 0,
            limit: if spec.kind == Kind::Queue && !ps {
                m
            } else {
                u32::MAX
            },
            per_job: if delay { 1.0 } else { 0.0 },
            ps_tail: if ps { len } else { usize::MAX },
            tab,
            rate: 0.0,
            share: 0.0,
            busy_clock: 0.0,
            last: 0.0,
            q_max: 0,
        }
    }

    #[inline]
    fn touch(&mut self, now: f64) {
        self.busy_clock += (now - self.last) * self.share;
        self.last = now;
    }

    #[inline]
    fn has_free_server(&self) -> bool {
        (self.race.len() as u32) < self.limit
    }

    /// Rate and busy share after `n` or the jobs in service changed. Every
    /// job that may be served is (no blocking here), so the total capacity
    /// is `alpha(min(n, L))` at a queue and `n` at a delay station, and the
    /// rate is that times the jobs' mean `mu` (bit-identical for one class).
    #[inline]
    fn refresh(&mut self) {
        let n = self.n as usize;
        let last = self.tab.len() - 1;
        let (queue_cap, share) = self.tab[n.min(last)];
        let cap = queue_cap + n as f64 * self.per_job;
        self.share = if n >= self.ps_tail {
            1.0 / n as f64
        } else {
            share
        };
        self.rate = if self.race.single_mu > 0.0 {
            self.race.single_mu * cap
        } else if self.race.len() > 0 {
            cap * (self.race.mass / self.race.len() as f64)
        } else {
            0.0
        };
    }
}

/// A running simulation of one replication of a Markovian model.
#[derive(Debug)]
pub struct MarkovSim {
    model: Model,
    m: usize,
    now: f64,
    events: u64,
    /// Time of the next transition (infinite if nothing can happen).
    next: f64,
    /// Sum of the channel rates when `next` was drawn (they stay until then).
    total: f64,
    /// Holding times and channel picks.
    clock: Rng,
    /// Channel rates: station departures `0..M`, open-class arrivals `M + class`.
    rates: Vec<f64>,
    st: Vec<Node>,
    jobs: Vec<Job>,
    free_jobs: Vec<u32>,
    route_rng: Vec<Rng>,
    /// Next destination of each routing stream, drawn one step ahead.
    route_next: Vec<Dest>,
    entry_rng: Vec<Rng>,
    /// `class * M + station`: a zero-time visit, passed through on the spot.
    pass: Vec<bool>,
    /// `class * M + station`: the reference (hub) of closed class `class`.
    cycle_end: Vec<bool>,
    rec: Recorder,
}

impl MarkovSim {
    /// Whether `model` takes this fast path: a continuous-time Markov chain
    /// with nothing at fixed times (see the module notes) whose spec does not
    /// ask for the event engine.
    pub fn applies(model: &Model) -> bool {
        let pass = zero_time_passes(model);
        let stations = model.stations.iter().enumerate().all(|(k, st)| {
            matches!(st.kind, Kind::Queue | Kind::Delay)
                && st.capacity == u32::MAX
                && race_rates(model, &pass, k).is_some()
        });
        let classes = model.classes.iter().enumerate().all(|(c, cl)| {
            !cl.open
                || (matches!(cl.interarrival, Some(Dist::Exp { .. }) | None)
                    && model.arrival_schedule[c].is_empty())
        });
        model.markov
            && stations
            && classes
            && model.perturbations.is_empty()
            && model.population_schedule.is_empty()
            && !model.trace
            && !model.rt_samples
            && model.host.is_none()
            && model.stations.iter().all(|s| s.cpu.is_none())
            && model.capacity_schedule.is_empty()
    }

    /// Places closed populations at their reference stations at t = 0 (call
    /// only if [`MarkovSim::applies`]).
    pub fn new(model: Model, seed: u64, replication: u64) -> MarkovSim {
        let (nc, m) = (model.n_classes(), model.n_stations());
        let pass = zero_time_passes(&model);
        let races: Vec<Option<Vec<f64>>> = (0..m).map(|k| race_rates(&model, &pass, k)).collect();
        let st: Vec<Node> = model
            .stations
            .iter()
            .zip(&races)
            .enumerate()
            .map(|(k, (spec, mu))| {
                let rng = Rng::stream(seed, replication, stream_id(Purpose::Race, 0, k));
                Node::new(spec, Race::new(mu.as_deref().unwrap_or(&[]), false, rng))
            })
            .collect();
        let mut route_rng: Vec<Rng> = (0..nc * m)
            .map(|i| Rng::stream(seed, replication, stream_id(Purpose::Routing, i / m, i % m)))
            .collect();
        let route_next = (0..nc * m)
            .map(|i| model.routes.draw(i, &mut route_rng[i]))
            .collect();
        let mut rates = vec![0.0; m + nc];
        for (c, cl) in model.classes.iter().enumerate() {
            if let Some(Dist::Exp { mean }) = cl.interarrival {
                rates[m + c] = 1.0 / mean;
            }
        }
        let mut sim = MarkovSim {
            m,
            now: 0.0,
            events: 0,
            next: f64::NAN,
            total: 0.0,
            clock: Rng::stream(seed, replication, stream_id(Purpose::Markov, 0, 0)),
            rates,
            st,
            jobs: Vec::new(),
            free_jobs: Vec::new(),
            route_rng,
            route_next,
            entry_rng: (0..nc)
                .map(|c| Rng::stream(seed, replication, stream_id(Purpose::Entry, c, 0)))
                .collect(),
            pass,
            cycle_end: (0..nc * m)
                .map(|i| !model.classes[i / m].open && model.classes[i / m].reference == i % m)
                .collect(),
            rec: Recorder::new(nc, m, model.window),
            model,
        };
        for c in 0..nc {
            if !sim.model.classes[c].open {
                let k = sim.model.classes[c].reference;
                for _ in 0..sim.model.classes[c].population {
                    let j = sim.new_job(c, f64::NAN);
                    sim.arrive(j, k);
                }
            }
        }
        sim.draw_next();
        sim
    }

    pub fn now(&self) -> f64 {
        self.now
    }

    pub fn events(&self) -> u64 {
        self.events
    }

    /// As [`super::Simulation::advance`].
    pub fn advance(&mut self, until: f64, max_events: u64) -> Advance {
        let wall = Instant::now();
        let mut done = 0;
        while done < max_events && self.next < until {
            let t = self.next;
            if t >= self.rec.end {
                self.close_windows(t);
            }
            self.now = t;
            let channel = self.pick();
            if channel < self.m {
                self.departure(channel);
            } else {
                self.arrival(channel - self.m);
            }
            self.draw_next();
            done += 1;
        }
        self.events += done;
        if until.is_finite() && until > self.now && self.next >= until {
            self.close_windows(until);
            self.now = until;
        }
        Advance {
            now: self.now,
            events: self.events,
            wall_s: wall.elapsed().as_secs_f64(),
            windows: std::mem::take(&mut self.rec.out),
            trace: None,
            samples: None,
        }
    }

    /// Draws the time of the next transition from the current rates.
    #[inline]
    fn draw_next(&mut self) {
        self.total = self.rates.iter().sum();
        self.next = if self.total > 0.0 {
            self.now + self.clock.exp1() / self.total
        } else {
            f64::INFINITY
        };
    }

    /// The channel of the transition now: `i` with probability `rate_i / total`.
    #[inline]
    fn pick(&mut self) -> usize {
        let u = self.clock.unit() * self.total;
        // Count the running sums at or below `u` (no branch: which channel
        // fires is unpredictable by nature); an empty channel repeats a
        // running sum, so it is stepped over.
        let mut acc = 0.0;
        let mut i = 0;
        for &r in &self.rates {
            acc += r;
            i += usize::from(u >= acc);
        }
        if self.rates.get(i).is_some_and(|&r| r > 0.0) {
            i
        } else {
            // Rounding can step past the last busy channel (probability ~2^-53).
            self.rates.iter().rposition(|&r| r > 0.0).unwrap_or(0)
        }
    }

    fn new_job(&mut self, class: usize, sys_start: f64) -> u32 {
        let job = Job {
            class: class as u32,
            home: class as u32,
            arrival: self.now,
            sys_start,
        };
        match self.free_jobs.pop() {
            Some(j) => {
                self.jobs[j as usize] = job;
                j
            }
            None => {
                self.jobs.push(job);
                (self.jobs.len() - 1) as u32
            }
        }
    }

    fn arrival(&mut self, c: usize) {
        let j = self.new_job(c, self.now);
        let k = self.model.entry_station(c, &mut self.entry_rng[c]);
        self.arrive(j, k);
    }

    /// The next `(class, station)` of class `c` leaving `k`; `None` leaves the network.
    #[inline]
    fn route(&mut self, c: usize, k: usize) -> Option<Dest> {
        let i = c * self.m + k;
        let next = self.model.routes.draw(i, &mut self.route_rng[i]);
        let d = std::mem::replace(&mut self.route_next[i], next);
        (d.station != EXIT).then_some(d)
    }

    #[inline]
    fn cell_change(&mut self, c: usize, k: usize, dn: i32, ds: i32) {
        let since_w0 = self.now - self.rec.start;
        let busy = self.st[k].busy_clock;
        self.rec.cells[c * self.m + k].change(dn, ds, since_w0, busy);
    }

    /// Station `k` completes a job.
    fn departure(&mut self, k: usize) {
        let now = self.now;
        self.st[k].touch(now);
        let Some(j) = self.st[k].race.pop() else {
            return;
        };
        let job = self.jobs[j as usize];
        let c = job.class as usize;
        self.cell_change(c, k, -1, -1);
        self.rec.cells[c * self.m + k].complete(now - job.arrival);
        self.st[k].n -= 1;
        if self.cycle_end[job.home as usize * self.m + k] {
            // Leaving the reference starts a new request of the closed job.
            self.jobs[j as usize].sys_start = now;
        }
        while !self.st[k].waiting.is_empty() && self.st[k].has_free_server() {
            let Some(w) = self.st[k].waiting.pop_front() else {
                break;
            };
            let wc = self.jobs[w as usize].class;
            self.cell_change(wc as usize, k, 0, 1);
            self.st[k].race.push(w, wc);
        }
        self.refresh(k);
        if let Some(next) = self.next_station(j, c, k) {
            self.arrive(j, next);
        }
    }

    /// Job `j` (class `c`) leaves station `k` by its routing: where it goes
    /// next, or `None` if it left the network.
    #[inline]
    fn next_station(&mut self, j: u32, c: usize, k: usize) -> Option<usize> {
        match self.route(c, k) {
            Some(d) => {
                self.jobs[j as usize].class = d.class;
                Some(d.station as usize)
            }
            None => {
                let job = self.jobs[j as usize];
                if self.model.classes[job.home as usize].open {
                    self.record_request(job.home as usize, job.sys_start);
                    self.free_jobs.push(j);
                    None
                } else {
                    // Validation makes closed rows sum to 1; kept as a safe fallback.
                    self.jobs[j as usize].class = job.home;
                    Some(self.model.classes[job.home as usize].reference)
                }
            }
        }
    }

    /// Job `j` reaches station `k`, and goes on at once through zero-time
    /// visits (in a loop, so no chain of them can deepen the stack).
    fn arrive(&mut self, j: u32, mut k: usize) {
        let now = self.now;
        loop {
            let job = self.jobs[j as usize];
            let (c, home) = (job.class as usize, job.home as usize);
            if self.cycle_end[home * self.m + k] && !job.sys_start.is_nan() {
                // A closed job is back at its reference: its request is complete.
                self.record_request(home, job.sys_start);
                self.jobs[j as usize].sys_start = f64::NAN;
            }
            self.jobs[j as usize].arrival = now;
            self.rec.cells[c * self.m + k].arrivals += 1.0;
            self.st[k].touch(now);
            if !self.pass[c * self.m + k] {
                let serve = self.st[k].has_free_server();
                self.cell_change(c, k, 1, i32::from(serve));
                let st = &mut self.st[k];
                st.n += 1;
                st.q_max = st.q_max.max(st.n);
                if serve {
                    st.race.push(j, c as u32);
                } else {
                    st.waiting.push_back(j);
                }
                return self.refresh(k);
            }
            // A zero-time visit, counted as an arrival, a start and a departure now.
            let st = &mut self.st[k];
            st.q_max = st.q_max.max(st.n + 1);
            self.rec.cells[c * self.m + k].complete(0.0);
            if self.cycle_end[home * self.m + k] {
                self.jobs[j as usize].sys_start = now;
            }
            match self.next_station(j, c, k) {
                Some(next) => k = next,
                None => return,
            }
        }
    }

    #[inline]
    fn refresh(&mut self, k: usize) {
        self.st[k].refresh();
        self.rates[k] = self.st[k].rate;
    }

    fn record_request(&mut self, home: usize, start: f64) {
        let rt = self.now - start;
        self.rec.acc.sys_completions[home] += 1.0;
        self.rec.acc.sys_rt_sum[home] += rt;
        self.rec.acc.sys_rt_max[home] = self.rec.acc.sys_rt_max[home].max(rt);
    }

    /// Completes every window that ends at or before `t` (as the event engine).
    fn close_windows(&mut self, t: f64) {
        let st = &mut self.st;
        self.rec.close_until(t, |end, busy_end, out| {
            for st in st.iter_mut() {
                st.touch(end);
                busy_end.push(st.busy_clock);
                st.busy_clock = 0.0;
                out.q_max.push(f64::from(st.q_max));
                st.q_max = st.n;
            }
        });
    }
}
