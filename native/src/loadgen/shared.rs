//! State shared between the worker threads and whoever drives the run (Python).
//!
//! Design: the request path never takes a lock. Workers publish counters through
//! relaxed atomics (for progress views) and, once per sample tick, move their
//! records, samples and last-interval histogram into mutex-protected mailboxes;
//! the driver empties the mailboxes whenever it likes. Final histograms are handed
//! over once, when a worker exits.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use hdrhistogram::Histogram;

use super::config::Priority;
use super::stats::{histogram, Record, Sample, Steady, Totals};

/// Locks `m`, ignoring poisoning (a panicked worker must not hide what others measured).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counters a worker keeps current for progress views.
#[derive(Debug, Default)]
pub struct Live {
    pub sent: AtomicU64,
    pub completed: AtomicU64,
    pub errors: AtomicU64,
    pub outstanding: AtomicU64,
    pub active: AtomicU64,
    pub connections: AtomicU64,
    pub cpu_ns: AtomicI64,
    /// Largest timer lateness over about the last second (ns).
    pub lag_max_ns: AtomicI64,
    pub late: AtomicU64,
    pub not_sent: AtomicU64,
}

/// Records and samples waiting to be taken. Records stay in the chunks the worker filled
/// (one per sample tick), so handing them over never copies or reallocates.
#[derive(Debug, Default)]
pub struct Outbox {
    pub records: Vec<Vec<Record>>,
    pub samples: Vec<Sample>,
}

/// Latency histograms of the last few sample intervals (about one second).
#[derive(Debug)]
pub struct Rolling {
    pub slots: Vec<Histogram<u64>>,
    pub pos: usize,
}

impl Rolling {
    pub fn new(slots: usize) -> Rolling {
        Rolling {
            slots: (0..slots.max(1)).map(|_| histogram(2)).collect(),
            pos: 0,
        }
    }
}

/// What a worker leaves behind when it exits.
#[derive(Debug, Clone)]
pub struct WorkerResult {
    pub steady: Steady,
    pub totals: Totals,
    /// The priority the thread ran at in the end, and whether it dropped from real time.
    pub priority: Priority,
    pub demoted: bool,
}

/// One worker's side of the shared state.
#[derive(Debug)]
pub struct WorkerShared {
    pub live: Live,
    pub outbox: Mutex<Outbox>,
    pub rolling: Mutex<Rolling>,
    pub result: Mutex<Option<WorkerResult>>,
}

/// The state of a whole run.
#[derive(Debug)]
pub struct Shared {
    pub stop: AtomicBool,
    pub workers: Vec<WorkerShared>,
    pub done: Mutex<usize>,
    pub done_cv: Condvar,
    /// First failure of a worker (it could not start, or panicked).
    pub failure: Mutex<Option<String>>,
}

impl Shared {
    pub fn new(workers: usize, rolling_slots: usize) -> Shared {
        Shared {
            stop: AtomicBool::new(false),
            workers: (0..workers)
                .map(|_| WorkerShared {
                    live: Live::default(),
                    outbox: Mutex::new(Outbox::default()),
                    rolling: Mutex::new(Rolling::new(rolling_slots)),
                    result: Mutex::new(None),
                })
                .collect(),
            done: Mutex::new(0),
            done_cv: Condvar::new(),
            failure: Mutex::new(None),
        }
    }

    /// Whether the driver asked the run to stop.
    #[inline]
    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Records a failure (the first one wins).
    pub fn fail(&self, message: String) {
        let mut f = lock(&self.failure);
        if f.is_none() {
            *f = Some(message);
        }
    }
}

/// Marks its worker as done when dropped, even if the worker panicked.
pub struct DoneGuard<'a>(pub &'a Shared);

impl Drop for DoneGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0
                .fail("a load generator thread panicked (a bug: please report it)".into());
        }
        *lock(&self.0.done) += 1;
        self.0.done_cv.notify_all();
    }
}
