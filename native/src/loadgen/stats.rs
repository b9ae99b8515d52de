//! What the load generator measures: per-request records, 50 ms samples of its own
//! health, and HDR histograms of the steady window.
//!
//! Design: every worker thread measures into its own structures, with no locks on
//! the request path; they are merged only when a run ends (histograms) or handed
//! over in batches at each sample tick (records, samples). Latency is kept twice,
//! as wrk2 does: corrected (from the intended start, which includes any time the
//! request waited because the client or its connections were busy) and uncorrected
//! (from the moment it was handed to a connection).

use hdrhistogram::Histogram;

/// Why a request did not get a normal response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ErrorClass {
    None = 0,
    /// The connection could not be opened (refused, unreachable, connect timeout).
    Connect = 1,
    /// No complete response within the timeout.
    Timeout = 2,
    /// The connection closed or reset before the response was complete.
    Closed = 3,
    /// The response was not valid HTTP/1.x.
    Protocol = 4,
    /// A response with status >= 400.
    Http = 5,
    /// Never sent: the outstanding-request bound was reached, or it waited for a
    /// connection longer than the timeout.
    NotSent = 6,
    /// Still in flight when the run was stopped early (not an error of the server).
    Aborted = 7,
}

/// Names of the error classes, by their `u8` value ("" for none).
pub const ERROR_NAMES: [&str; 8] = [
    "", "connect", "timeout", "closed", "protocol", "http", "not_sent", "aborted",
];

/// One finished request. Times are CLOCK_MONOTONIC nanoseconds.
#[derive(Debug, Clone, Copy)]
pub struct Record {
    pub id: u64,
    /// When the workload wanted it sent (end of think time, or arrival time).
    pub intended: i64,
    /// When it was handed to a connection (write, or connect for a new connection).
    pub actual: i64,
    /// When its response was complete (or the error was detected).
    pub end: i64,
    /// Response bytes received (head and body).
    pub bytes: u64,
    pub session: u64,
    /// Emulated user (or session slot); `u32::MAX` in open mode.
    pub user: u32,
    pub interaction: u16,
    /// HTTP status (0 when there was no response).
    pub status: u16,
    pub error: ErrorClass,
    /// Phase of `intended` (see `profile::Phase`).
    pub phase: u8,
}

/// One worker's health over one sample interval.
#[derive(Debug, Clone, Copy)]
pub struct Sample {
    /// When the sample was taken (CLOCK_MONOTONIC ns).
    pub t: i64,
    /// Sample index: `(tick deadline - start) / interval`.
    pub tick: u64,
    pub worker: u16,
    /// CPU time used by the worker thread so far (ns).
    pub cpu_ns: i64,
    /// Largest and summed lateness of timers fired in the interval (ns).
    pub lag_max_ns: i64,
    pub lag_sum_ns: i64,
    pub lag_count: u32,
    /// Cumulative counts.
    pub sent: u64,
    pub completed: u64,
    pub errors: u64,
    /// Requests in flight or waiting for a connection.
    pub outstanding: u32,
    /// Users (closed) or sessions (partly open) present.
    pub active: u32,
    /// Open connections.
    pub connections: u32,
    /// Busy fraction of the whole machine's CPUs over the interval (worker 0 only; NaN otherwise).
    pub machine_busy: f64,
}

/// A latency histogram in nanoseconds with `sigfig` significant digits that grows as needed.
pub fn histogram(sigfig: u8) -> Histogram<u64> {
    let mut h = Histogram::new_with_bounds(1, 10_000_000_000, sigfig)
        .expect("constant histogram bounds are valid");
    h.auto(true);
    h
}

/// Adds `v` (ns, clamped at 1) to `h`.
#[inline]
pub fn record_ns(h: &mut Histogram<u64>, v: i64) {
    // Auto-resizing histograms only fail for values beyond u64, which i64 cannot reach.
    let _ = h.record(v.max(1) as u64);
}

/// Latencies and counts of one interaction in the steady window.
#[derive(Debug, Clone)]
pub struct InteractionStats {
    /// Requests whose intended start fell in the window.
    pub requests: u64,
    /// Of those, the ones with an error (aborted ones excluded).
    pub errors: u64,
    /// Responses without error completed inside the window (for throughput).
    pub completed: u64,
    /// Response bytes of the window's requests.
    pub bytes: u64,
    /// Sum of corrected latencies (ns) for an exact mean.
    pub sum_ns: u128,
    pub sum_uncorrected_ns: u128,
    /// Corrected: end − intended start. Only requests with a response or a timeout.
    pub corrected: Histogram<u64>,
    /// Uncorrected: end − actual start.
    pub uncorrected: Histogram<u64>,
}

impl Default for InteractionStats {
    fn default() -> Self {
        InteractionStats {
            requests: 0,
            errors: 0,
            completed: 0,
            bytes: 0,
            sum_ns: 0,
            sum_uncorrected_ns: 0,
            corrected: histogram(3),
            uncorrected: histogram(3),
        }
    }
}

impl InteractionStats {
    /// Adds another worker's numbers.
    pub fn merge(&mut self, o: &InteractionStats) {
        self.requests += o.requests;
        self.errors += o.errors;
        self.completed += o.completed;
        self.bytes += o.bytes;
        self.sum_ns += o.sum_ns;
        self.sum_uncorrected_ns += o.sum_uncorrected_ns;
        let _ = self.corrected.add(&o.corrected);
        let _ = self.uncorrected.add(&o.uncorrected);
    }
}

/// Everything one worker measured over the steady window, and its run totals.
#[derive(Debug, Clone)]
pub struct Steady {
    /// Indexed by interaction; created lazily, so unused interactions cost nothing.
    pub interactions: Vec<Option<Box<InteractionStats>>>,
    /// Lateness of timers (think-time ends, arrivals, ticks) due in the window.
    pub timer_lag: Histogram<u64>,
    /// Actual − intended start of the window's requests.
    pub send_lag: Histogram<u64>,
    /// Window requests sent later than the late threshold.
    pub late: u64,
    /// Window requests by error class.
    pub errors_by_class: [u64; 8],
    /// Responses (any status) completed in the window.
    pub responses_in_window: u64,
    /// Sessions that started in the window (partly open) and that were turned away.
    pub sessions_started: u64,
    pub sessions_rejected: u64,
}

impl Steady {
    pub fn new(interactions: usize) -> Steady {
        Steady {
            interactions: vec![None; interactions],
            timer_lag: histogram(2),
            send_lag: histogram(2),
            late: 0,
            errors_by_class: [0; 8],
            responses_in_window: 0,
            sessions_started: 0,
            sessions_rejected: 0,
        }
    }

    /// The stats of interaction `i`, created on first use.
    #[inline]
    pub fn interaction(&mut self, i: u16) -> &mut InteractionStats {
        self.interactions[i as usize].get_or_insert_with(Box::default)
    }

    /// Adds another worker's numbers.
    pub fn merge(&mut self, o: &Steady) {
        for (mine, theirs) in self.interactions.iter_mut().zip(&o.interactions) {
            if let Some(t) = theirs {
                mine.get_or_insert_with(Box::default).merge(t);
            }
        }
        let _ = self.timer_lag.add(&o.timer_lag);
        let _ = self.send_lag.add(&o.send_lag);
        self.late += o.late;
        for (a, b) in self.errors_by_class.iter_mut().zip(o.errors_by_class) {
            *a += b;
        }
        self.responses_in_window += o.responses_in_window;
        self.sessions_started += o.sessions_started;
        self.sessions_rejected += o.sessions_rejected;
    }
}

/// Run totals of one worker (all phases).
#[derive(Debug, Clone, Copy, Default)]
pub struct Totals {
    pub sent: u64,
    pub completed: u64,
    pub errors: u64,
    pub not_sent: u64,
    pub aborted: u64,
    pub retries: u64,
    pub connects: u64,
    pub max_connections: u64,
    pub sessions_started: u64,
    pub sessions_rejected: u64,
    pub cpu_ns: i64,
}

impl Totals {
    pub fn merge(&mut self, o: &Totals) {
        self.sent += o.sent;
        self.completed += o.completed;
        self.errors += o.errors;
        self.not_sent += o.not_sent;
        self.aborted += o.aborted;
        self.retries += o.retries;
        self.connects += o.connects;
        self.max_connections += o.max_connections;
        self.sessions_started += o.sessions_started;
        self.sessions_rejected += o.sessions_rejected;
        self.cpu_ns += o.cpu_ns;
    }
}

/// Quantiles of a histogram in seconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quantiles {
    pub count: u64,
    pub mean: f64,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Quantiles {
    /// Quantiles of `h` (ns); `sum_ns`, when known, gives an exact mean.
    pub fn of(h: &Histogram<u64>, sum_ns: Option<u128>) -> Quantiles {
        let n = h.len();
        if n == 0 {
            return Quantiles {
                count: 0,
                mean: f64::NAN,
                min: f64::NAN,
                p50: f64::NAN,
                p90: f64::NAN,
                p95: f64::NAN,
                p99: f64::NAN,
                p999: f64::NAN,
                max: f64::NAN,
            };
        }
        let s = |ns: u64| ns as f64 / 1e9;
        // HDR quantiles return the highest value equivalent to the bucket; the median of
        // the bucket is the unbiased choice, so every quantile is reported at it.
        let q = |p: f64| s(h.median_equivalent(h.value_at_quantile(p)));
        Quantiles {
            count: n,
            mean: match sum_ns {
                Some(sum) => sum as f64 / n as f64 / 1e9,
                None => h.mean() / 1e9,
            },
            min: s(h.min()),
            p50: q(0.50),
            p90: q(0.90),
            p95: q(0.95),
            p99: q(0.99),
            p999: q(0.999),
            max: s(h.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_known_values() {
        let mut h = histogram(3);
        for v in 1..=1000 {
            record_ns(&mut h, v * 1_000_000); // 1..1000 ms
        }
        let q = Quantiles::of(&h, None);
        assert_eq!(q.count, 1000);
        assert!((q.p50 - 0.500).abs() < 0.001, "{q:?}");
        assert!((q.p99 - 0.990).abs() < 0.001, "{q:?}");
        assert!((q.max - 1.0).abs() < 0.001, "{q:?}");
        assert!((q.mean - 0.5005).abs() < 0.001);
    }

    #[test]
    fn histograms_grow_past_their_initial_bound() {
        let mut h = histogram(3);
        record_ns(&mut h, 100_000_000_000); // 100 s
        assert!(Quantiles::of(&h, None).max > 99.0);
    }

    #[test]
    fn merging_adds_counts() {
        let mut a = Steady::new(2);
        let mut b = Steady::new(2);
        a.interaction(0).requests = 3;
        b.interaction(0).requests = 4;
        b.interaction(1).requests = 1;
        record_ns(&mut b.interaction(1).corrected, 5);
        a.merge(&b);
        assert_eq!(a.interactions[0].as_ref().unwrap().requests, 7);
        assert_eq!(a.interactions[1].as_ref().unwrap().corrected.len(), 1);
    }
}
