//! Windowed sums and per-visit traces streamed out of the engine.
//!
//! Design: the engine never keeps per-job history. Time-integrals (queue
//! length, busy share) are accumulated lazily per (class, station) cell: a
//! cell adds `count * elapsed` only when its count changes, and every cell is
//! flushed at a window boundary, so each event costs O(1) whatever the number
//! of classes and stations. Completed windows and trace rows wait in
//! columnar buffers that the caller drains, so memory stays flat in the run
//! length.

/// Lazily integrated state of one (class, station) cell.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cell {
    /// Class jobs present at the station.
    pub n: u32,
    /// Class jobs occupying capacity (in service or blocked on a server).
    pub s: u32,
    /// Time up to which `n` is integrated.
    pub q_last: f64,
    /// Station busy clock up to which `s` is integrated.
    pub b_last: f64,
}

/// Sums of the current window, `class * M + station` (or `class`) indexed.
#[derive(Debug, Clone)]
pub struct Acc {
    pub arrivals: Vec<f64>,
    pub completions: Vec<f64>,
    pub rt_sum: Vec<f64>,
    pub rt_max: Vec<f64>,
    pub q_area: Vec<f64>,
    pub busy_area: Vec<f64>,
    pub drops: Vec<f64>,
    pub sys_completions: Vec<f64>,
    pub sys_rt_sum: Vec<f64>,
    pub sys_rt_max: Vec<f64>,
}

impl Acc {
    pub fn new(classes: usize, stations: usize) -> Acc {
        let cm = vec![0.0; classes * stations];
        let c = vec![0.0; classes];
        Acc {
            arrivals: cm.clone(),
            completions: cm.clone(),
            rt_sum: cm.clone(),
            rt_max: cm.clone(),
            q_area: cm.clone(),
            busy_area: cm.clone(),
            drops: cm,
            sys_completions: c.clone(),
            sys_rt_sum: c.clone(),
            sys_rt_max: c,
        }
    }

    /// Appends these sums as a row of `out` and zeroes them.
    pub fn emit(&mut self, out: &mut Windows) {
        let pairs: [(&mut Vec<f64>, &mut Vec<f64>); 10] = [
            (&mut self.arrivals, &mut out.arrivals),
            (&mut self.completions, &mut out.completions),
            (&mut self.rt_sum, &mut out.rt_sum),
            (&mut self.rt_max, &mut out.rt_max),
            (&mut self.q_area, &mut out.q_area),
            (&mut self.busy_area, &mut out.busy_area),
            (&mut self.drops, &mut out.drops),
            (&mut self.sys_completions, &mut out.sys_completions),
            (&mut self.sys_rt_sum, &mut out.sys_rt_sum),
            (&mut self.sys_rt_max, &mut out.sys_rt_max),
        ];
        for (acc, col) in pairs {
            col.extend_from_slice(acc);
            acc.fill(0.0);
        }
    }
}

/// Completed windows, flat row-major: `(window, class, station)` for station
/// metrics, `(window, station)` for `q_max`, `(window, class)` for system metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Windows {
    pub t_start: Vec<f64>,
    pub arrivals: Vec<f64>,
    pub completions: Vec<f64>,
    pub rt_sum: Vec<f64>,
    pub rt_max: Vec<f64>,
    pub q_area: Vec<f64>,
    pub q_max: Vec<f64>,
    pub busy_area: Vec<f64>,
    pub drops: Vec<f64>,
    pub sys_completions: Vec<f64>,
    pub sys_rt_sum: Vec<f64>,
    pub sys_rt_max: Vec<f64>,
}

impl Windows {
    pub fn len(&self) -> usize {
        self.t_start.len()
    }

    pub fn is_empty(&self) -> bool {
        self.t_start.is_empty()
    }

    /// Appends `other` (later windows) to `self`.
    pub fn append(&mut self, other: Windows) {
        let Windows {
            t_start,
            arrivals,
            completions,
            rt_sum,
            rt_max,
            q_area,
            q_max,
            busy_area,
            drops,
            sys_completions,
            sys_rt_sum,
            sys_rt_max,
        } = other;
        self.t_start.extend(t_start);
        self.arrivals.extend(arrivals);
        self.completions.extend(completions);
        self.rt_sum.extend(rt_sum);
        self.rt_max.extend(rt_max);
        self.q_area.extend(q_area);
        self.q_max.extend(q_max);
        self.busy_area.extend(busy_area);
        self.drops.extend(drops);
        self.sys_completions.extend(sys_completions);
        self.sys_rt_sum.extend(sys_rt_sum);
        self.sys_rt_max.extend(sys_rt_max);
    }
}

/// How a traced visit ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Served (or, for `station = -1`, the request completed).
    Ok,
    /// Refused and lost (or the request was lost).
    Dropped,
    /// Refused; the job tries again after a timeout.
    Retry,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Dropped => "dropped",
            Status::Retry => "retry",
        }
    }
}

/// Finished visits, columnar. `station = -1` rows are whole requests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    pub request_id: Vec<u64>,
    pub class: Vec<u32>,
    pub station: Vec<i64>,
    pub arrival: Vec<f64>,
    pub start: Vec<f64>,
    pub departure: Vec<f64>,
    pub status: Vec<Status>,
}

impl Trace {
    pub fn len(&self) -> usize {
        self.request_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.request_id.is_empty()
    }

    #[allow(clippy::too_many_arguments)]
    pub fn push(
        &mut self,
        request: u64,
        class: u32,
        station: i64,
        arrival: f64,
        start: f64,
        departure: f64,
        status: Status,
    ) {
        self.request_id.push(request);
        self.class.push(class);
        self.station.push(station);
        self.arrival.push(arrival);
        self.start.push(start);
        self.departure.push(departure);
        self.status.push(status);
    }
}
