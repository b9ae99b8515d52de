//! A running load: starts the worker threads and gives the driver snapshots, records,
//! samples and, at the end, the merged summary.
//!
//! Design: `LoadRun` is the only handle on the threads. Dropping it stops and joins
//! them, so no thread or socket can outlive the object that started it.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::Result;

use super::config::{bad, Config, Mode, Priority};
use super::plan::Plan;
use super::shared::{lock, DoneGuard, Shared};
use super::stats::{histogram, InteractionStats, Quantiles, Record, Sample, Steady, Totals};
use super::sys;
use super::worker::Worker;

/// Delay between `start()` and the first request, so every worker starts on time.
const START_DELAY_NS: i64 = 5_000_000;
/// Sockets kept free for everything else the process does.
const SPARE_FDS: u64 = 64;

/// Live view of a run.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub now: i64,
    pub sent: u64,
    pub completed: u64,
    pub errors: u64,
    pub outstanding: u64,
    pub active: u64,
    pub connections: u64,
    pub cpu_ns: i64,
    pub lag_max_ns: i64,
    pub late: u64,
    pub not_sent: u64,
    /// Latencies of responses completed over about the last second.
    pub recent: Quantiles,
    pub done: bool,
}

/// Everything measured, merged over workers.
#[derive(Debug, Clone)]
pub struct Summary {
    pub steady: Steady,
    pub totals: Totals,
    pub stopped: bool,
    /// The lowest priority any worker thread ran at in the end.
    pub priority: Priority,
    /// Whether a thread dropped from real time because it used too much CPU.
    pub demoted: bool,
}

impl Summary {
    /// The steady-window stats of all interactions together.
    pub fn all(&self) -> InteractionStats {
        let mut all = InteractionStats::default();
        for s in self.steady.interactions.iter().flatten() {
            all.merge(s);
        }
        all
    }
}

/// A load run in progress (or finished).
pub struct LoadRun {
    plan: Arc<Plan>,
    shared: Arc<Shared>,
    handles: Mutex<Vec<JoinHandle<()>>>,
}

impl LoadRun {
    /// Validates nothing (see `Config::from_json`); compiles the plan and starts the threads.
    pub fn start(cfg: &Config) -> Result<LoadRun> {
        let limit = sys::raise_open_files_limit();
        let needed = match (cfg.mode, cfg.connections) {
            (_, Some(c)) => c,
            (Mode::Closed, None) => cfg.level as u64,
            (Mode::Open, None) => cfg.max_outstanding,
            (Mode::PartlyOpen, None) => cfg.max_sessions.unwrap_or(0),
        };
        if needed + SPARE_FDS > limit {
            let field = if cfg.connections.is_some() {
                "connections"
            } else if cfg.mode == Mode::Closed {
                "level"
            } else {
                "max_outstanding"
            };
            return Err(bad(
                field,
                format!(
                    "at most {} sockets, one per {} (the open-files limit is {limit}: raise \
                     it with `ulimit -n`, or share connections with --connections)",
                    limit.saturating_sub(SPARE_FDS),
                    if cfg.mode == Mode::Closed && cfg.connections.is_none() {
                        "user"
                    } else {
                        "connection"
                    },
                ),
            ));
        }
        let t0 = match cfg.start_at {
            Some(s) => (s * 1e9).round() as i64,
            None => sys::mono_ns() + START_DELAY_NS,
        };
        let plan = Arc::new(Plan::compile(cfg, t0)?);
        let slots = (1_000_000_000 + plan.tick_ns - 1) / plan.tick_ns;
        let shared = Arc::new(Shared::new(plan.threads, slots as usize));
        let mut handles = Vec::with_capacity(plan.threads);
        for k in 0..plan.threads {
            let (p, s) = (plan.clone(), shared.clone());
            let spawned = std::thread::Builder::new()
                .name(format!("tierscope-load-{k}"))
                .spawn(move || {
                    let _done = DoneGuard(&s);
                    match Worker::new(k, p, s.clone()) {
                        Ok(w) => w.run(),
                        Err(e) => {
                            s.fail(format!("load generator thread {k} could not start: {e}"));
                            s.stop.store(true, Relaxed);
                        }
                    }
                });
            match spawned {
                Ok(h) => handles.push(h),
                Err(e) => {
                    shared.stop.store(true, Relaxed);
                    for h in handles {
                        let _ = h.join();
                    }
                    return Err(bad("threads", format!("cannot start a thread: {e}")));
                }
            }
        }
        Ok(LoadRun {
            plan,
            shared,
            handles: Mutex::new(handles),
        })
    }

    /// Start of the load and phase boundaries (CLOCK_MONOTONIC ns).
    pub fn times(&self) -> (i64, i64, i64, i64) {
        let p = &self.plan;
        (p.t0, p.steady_start, p.steady_end, p.load_end)
    }

    /// Asks every worker to stop now (in-flight requests are recorded as aborted).
    pub fn stop(&self) {
        self.shared.stop.store(true, Relaxed);
    }

    /// Waits until every worker has finished (`None`: no limit); true when they have.
    pub fn wait(&self, timeout: Option<Duration>) -> bool {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut done = lock(&self.shared.done);
        while *done < self.plan.threads {
            match deadline {
                None => {
                    done = self
                        .shared
                        .done_cv
                        .wait(done)
                        .unwrap_or_else(|e| e.into_inner())
                }
                Some(d) => {
                    let now = Instant::now();
                    if now >= d {
                        return false;
                    }
                    done = self
                        .shared
                        .done_cv
                        .wait_timeout(done, d - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
        drop(done);
        for h in lock(&self.handles).drain(..) {
            let _ = h.join();
        }
        true
    }

    /// Whether every worker has finished.
    pub fn is_done(&self) -> bool {
        *lock(&self.shared.done) >= self.plan.threads
    }

    /// The first failure of a worker, if any.
    pub fn failure(&self) -> Option<String> {
        lock(&self.shared.failure).clone()
    }

    /// Current counters and the latencies of about the last second.
    pub fn snapshot(&self) -> Snapshot {
        let mut s = Snapshot {
            now: sys::mono_ns(),
            sent: 0,
            completed: 0,
            errors: 0,
            outstanding: 0,
            active: 0,
            connections: 0,
            cpu_ns: 0,
            lag_max_ns: 0,
            late: 0,
            not_sent: 0,
            recent: Quantiles::default(),
            done: self.is_done(),
        };
        let mut recent = histogram(2);
        for w in &self.shared.workers {
            let l = &w.live;
            s.sent += l.sent.load(Relaxed);
            s.completed += l.completed.load(Relaxed);
            s.errors += l.errors.load(Relaxed);
            s.outstanding += l.outstanding.load(Relaxed);
            s.active += l.active.load(Relaxed);
            s.connections += l.connections.load(Relaxed);
            s.cpu_ns += l.cpu_ns.load(Relaxed);
            s.lag_max_ns = s.lag_max_ns.max(l.lag_max_ns.load(Relaxed));
            s.late += l.late.load(Relaxed);
            s.not_sent += l.not_sent.load(Relaxed);
            for h in &lock(&w.rolling).slots {
                let _ = recent.add(h);
            }
        }
        s.recent = Quantiles::of(&recent, None);
        s
    }

    /// Records finished since the last call (all workers), in chunks.
    pub fn take_records(&self) -> Vec<Vec<Record>> {
        let mut out = Vec::new();
        for w in &self.shared.workers {
            out.append(&mut lock(&w.outbox).records);
        }
        out
    }

    /// Samples taken since the last call (all workers).
    pub fn take_samples(&self) -> Vec<Sample> {
        let mut out = Vec::new();
        for w in &self.shared.workers {
            out.append(&mut lock(&w.outbox).samples);
        }
        out
    }

    /// The merged measurements, once every worker has finished.
    pub fn summary(&self) -> Option<Summary> {
        if !self.is_done() {
            return None;
        }
        let mut steady = Steady::new(self.plan.interactions.len());
        let mut totals = Totals::default();
        let mut priority = self.plan.priority;
        let mut demoted = false;
        for w in &self.shared.workers {
            if let Some(r) = lock(&w.result).as_ref() {
                steady.merge(&r.steady);
                totals.merge(&r.totals);
                priority = priority.min(r.priority);
                demoted |= r.demoted;
            }
        }
        Some(Summary {
            steady,
            totals,
            stopped: self.shared.stopping(),
            priority,
            demoted,
        })
    }
}

impl Drop for LoadRun {
    fn drop(&mut self) {
        self.stop();
        self.wait(None);
    }
}
