//! Windowed sums and per-visit traces streamed out of the engine.
//!
//! Design: the engine never keeps per-job history. Each (class, station)
//! cell holds its counts and the sums of the current window. Time integrals
//! are kept as sums over the changes: if the count `n` changes by `dn_i` at
//! times `t_i` of a window `[w0, w1)`, then `integral of n = n(w1) (w1 - w0) -
//! sum dn_i (t_i - w0)`, so an event adds one product to one sum and nothing
//! has to be remembered about when a count last changed (the busy integral
//! is the same with the station's busy clock in place of time). Completed
//! windows and trace rows wait in columnar buffers that the caller drains,
//! so memory stays flat in the run length.

/// Counts and current-window sums of one (class, station) cell.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cell {
    /// Class jobs present at the station.
    pub n: u32,
    /// Class jobs occupying capacity (in service or blocked on a server).
    pub s: u32,
    /// `sum dn (t - w0)` over this window's changes of `n`.
    q_changes: f64,
    /// `sum ds B(t)` over this window's changes of `s` (B: the station's busy clock).
    b_changes: f64,
    pub arrivals: f64,
    pub completions: f64,
    pub rt_sum: f64,
    pub rt_max: f64,
    pub drops: f64,
}

impl Cell {
    /// `n += dn` and `s += ds` at `since_w0` into the window, station busy clock `busy`.
    #[inline(always)]
    pub fn change(&mut self, dn: i32, ds: i32, since_w0: f64, busy: f64) {
        self.n = self.n.wrapping_add_signed(dn);
        self.s = self.s.wrapping_add_signed(ds);
        self.q_changes += f64::from(dn) * since_w0;
        self.b_changes += f64::from(ds) * busy;
    }

    /// One completed visit with response time `rt`.
    #[inline(always)]
    pub fn complete(&mut self, rt: f64) {
        self.completions += 1.0;
        self.rt_sum += rt;
        self.rt_max = self.rt_max.max(rt);
    }
}

/// Per-class system sums of the current window.
#[derive(Debug, Clone)]
pub struct Acc {
    pub sys_completions: Vec<f64>,
    pub sys_rt_sum: Vec<f64>,
    pub sys_rt_max: Vec<f64>,
}

impl Acc {
    pub fn new(classes: usize) -> Acc {
        let c = vec![0.0; classes];
        Acc {
            sys_completions: c.clone(),
            sys_rt_sum: c.clone(),
            sys_rt_max: c,
        }
    }

    /// Appends the window `[w0, w0 + width)` as a row of `out` and zeroes
    /// the sums; `busy_end[k]` is station `k`'s busy clock at the window's
    /// end, cell `i` belongs to station `i % busy_end.len()`.
    pub fn emit(&mut self, cells: &mut [Cell], busy_end: &[f64], width: f64, out: &mut Windows) {
        let m = busy_end.len();
        for (i, cell) in cells.iter_mut().enumerate() {
            out.arrivals.push(cell.arrivals);
            out.completions.push(cell.completions);
            out.rt_sum.push(cell.rt_sum);
            out.rt_max.push(cell.rt_max);
            out.q_area.push(f64::from(cell.n) * width - cell.q_changes);
            out.busy_area
                .push(f64::from(cell.s) * busy_end[i % m] - cell.b_changes);
            out.drops.push(cell.drops);
            *cell = Cell {
                n: cell.n,
                s: cell.s,
                ..Cell::default()
            };
        }
        let pairs: [(&mut Vec<f64>, &mut Vec<f64>); 3] = [
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

/// The windows of one replication: the cells' and classes' sums of the
/// current window, its bounds, and the completed windows waiting to be handed
/// over. Both engines keep one and close windows through it.
#[derive(Debug)]
pub struct Recorder {
    pub cells: Vec<Cell>,
    pub acc: Acc,
    pub out: Windows,
    /// The current window is `[start, end)`, number `index`.
    pub start: f64,
    pub end: f64,
    index: u64,
    width: f64,
    /// Scratch: busy clocks of the stations at a window's end.
    busy_end: Vec<f64>,
}

impl Recorder {
    /// Windows of `width` seconds from 0 for `classes` x `stations` cells.
    pub fn new(classes: usize, stations: usize, width: f64) -> Recorder {
        Recorder {
            cells: vec![Cell::default(); classes * stations],
            acc: Acc::new(classes),
            out: Windows::default(),
            start: 0.0,
            end: width,
            index: 0,
            width,
            busy_end: Vec::with_capacity(stations),
        }
    }

    /// Completes every window that ends at or before `t`. For each, `stations(end,
    /// busy_end, out)` advances the engine's stations to the window's end, pushes each
    /// station's busy clock to `busy_end` (then restarts it) and its per-station sums
    /// (`q_max`, and any CPU or host sums) to `out`.
    pub fn close_until(
        &mut self,
        t: f64,
        mut stations: impl FnMut(f64, &mut Vec<f64>, &mut Windows),
    ) {
        while self.end <= t {
            let end = self.end;
            self.busy_end.clear();
            stations(end, &mut self.busy_end, &mut self.out);
            self.out.t_start.push(self.start);
            self.acc.emit(
                &mut self.cells,
                &self.busy_end,
                end - self.start,
                &mut self.out,
            );
            self.index += 1;
            self.start = end;
            // By multiplication, so boundaries do not drift over long runs.
            self.end = (self.index + 1) as f64 * self.width;
        }
    }
}

/// Completed windows, flat row-major: `(window, class, station)` for station
/// metrics, `(window, station)` for `q_max`, `(window, class)` for system metrics.
/// Models with CPU stations add `(window, station)` CPU seconds used, CFS
/// periods in which a station ran and those throttled (0 at stations without
/// CPU); with a host, `(window, 3)`: its processes' wanted core-seconds, the
/// core-seconds they got, and the other tasks' core-seconds.
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
    pub cpu: Vec<f64>,
    pub periods: Vec<f64>,
    pub throttled: Vec<f64>,
    pub host: Vec<f64>,
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
            cpu,
            periods,
            throttled,
            host,
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
        self.cpu.extend(cpu);
        self.periods.extend(periods);
        self.throttled.extend(throttled);
        self.host.extend(host);
    }
}

/// Completed requests (when the spec asks for `rt_samples`): each one's class,
/// completion time and response time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Samples {
    pub class: Vec<u32>,
    pub end: Vec<f64>,
    pub rt: Vec<f64>,
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
