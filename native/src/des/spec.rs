//! The engine's input: the JSON spec compiled by the Python side, parsed and
//! checked into flat, index-addressed tables.
//!
//! Design: everything the hot loop reads is resolved here once: routing rows
//! become cumulative tables addressed by `class * M + station`, optional
//! fields get their defaults, and a reachability pass over (class, station)
//! pairs rejects specs that would fail mid-run (a job routed to a station
//! with no service law, a closed chain whose routing leaks mass). Every
//! refusal names its JSON field.

use serde_json::Value;

use super::alias::{AliasRows, Dest};
use super::dist::{parse_opt, Dist};
use super::json::{bad, count, index, item, list, number, numbers, Obj};
use super::rng::Rng;
use crate::error::Result;

/// What a station does with a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// FCFS or PS queue with `servers` servers.
    Queue,
    /// Infinite server: every job is in service.
    Delay,
    /// Splits a job into one task per branch.
    Fork,
    /// Releases a forked job once its quorum of tasks has arrived.
    Join,
    /// Sends each job on at once to one of its member stations, chosen by its
    /// [`Policy`] (a load balancer in front of replicas).
    Balance,
}

/// How a balance station chooses a member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// The members in turn.
    RoundRobin,
    /// The member with the fewest jobs present; ties in turn.
    LeastLoaded,
    /// Every member in order (a write run at every replica): the job comes
    /// back here after each visit (by the members' routing) and goes on by
    /// this station's own routing row after the last.
    Each,
}

/// Service discipline of a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discipline {
    Fcfs,
    Ps,
    /// Round robin: the first `servers` jobs present run, each for at most
    /// `quantum` of time before it goes to the back if others wait (a Python
    /// server's GIL switch interval).
    Rr,
}

/// CPU of a station whose jobs' service is CPU time of its processes (one
/// core per server): it is accounted, may be limited by a Linux CFS quota,
/// and may share the host's cores with other stations (see [`HostSpec`]).
#[derive(Debug, Clone)]
pub struct CpuSpec {
    /// CPU seconds the station may use per `period` (`None`: no quota).
    pub budget: Option<f64>,
    pub period: f64,
    /// Unused budget kept into the next period (the kernel's per-CPU runtime).
    pub carry: f64,
    /// A spent budget is noticed at the next multiple of `tick` after the
    /// period's phase (`None`: at once).
    pub tick: Option<f64>,
    /// Start of the first period, in `[0, period)` (`None`: drawn).
    pub phase: Option<f64>,
    /// Whether the station's running processes share the host's cores.
    pub host: bool,
}

/// The cores the `host` stations share with other runnable tasks: while `n`
/// of their processes run, each gets `min(1, cores / (background + n))` of a
/// core (CFS's fair share).
#[derive(Debug, Clone, Copy)]
pub struct HostSpec {
    pub cores: f64,
    pub background: f64,
}

/// Retransmission of refused jobs.
#[derive(Debug, Clone)]
pub struct RetrySpec {
    pub timeout: Dist,
    pub max_retries: u32,
}

/// One station of the spec.
#[derive(Debug, Clone)]
pub struct StationSpec {
    pub name: String,
    pub kind: Kind,
    pub discipline: Discipline,
    pub servers: u32,
    /// Load-dependent rate multipliers `alpha(1..L)`; the last repeats.
    pub alpha: Vec<f64>,
    /// Most jobs the station holds (queued, in service and blocked); `u32::MAX` if unbounded.
    pub capacity: u32,
    /// Blocking-after-service instead of dropping when full.
    pub block: bool,
    pub retry: Option<RetrySpec>,
    /// Fork only: its join station.
    pub join: usize,
    /// Fork only: branch stations (tasks keep the class). Empty: the fork's
    /// routing row of the class lists the branches instead.
    pub branches: Vec<usize>,
    /// Join only: tasks needed to release the parent (`None`: all).
    pub quorum: Option<u32>,
    /// Round robin only: the time slice.
    pub quantum: f64,
    pub cpu: Option<CpuSpec>,
    /// Balance only: its member stations and how it chooses among them.
    pub members: Vec<usize>,
    pub policy: Policy,
    /// Whether balance stations send it jobs at the start (see [`Change::Active`]).
    pub active: bool,
}

/// One job class.
#[derive(Debug, Clone)]
pub struct ClassSpec {
    pub name: String,
    pub open: bool,
    pub interarrival: Option<Dist>,
    pub population: u32,
    /// Closed: station where cycles end and restart.
    pub reference: usize,
}

/// One routing destination; `cum` is the cumulative probability up to it.
#[derive(Debug, Clone, Copy)]
pub struct Target {
    pub cum: f64,
    pub class: u32,
    pub station: u32,
}

/// A periodic (or one-off) change of a station's speed.
#[derive(Debug, Clone)]
pub struct Perturbation {
    pub station: usize,
    pub factor: f64,
    pub start: f64,
    pub duration: f64,
    pub period: Option<f64>,
    pub until: Option<f64>,
}

/// What a capacity change does to its station.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Change {
    /// A replica starts (`true`) or stops taking jobs from its balance
    /// stations; the jobs it holds finish.
    Active(bool),
    /// The CFS quota becomes this many CPU seconds per period (`None`: no quota).
    Budget(Option<f64>),
}

/// A change of a station's capacity at a time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CapacityChange {
    pub time: f64,
    pub station: usize,
    pub change: Change,
}

impl CapacityChange {
    /// Checks the change against the stations (`path` names it in errors).
    pub fn check(&self, stations: &[StationSpec], path: &str) -> Result<()> {
        let st = stations.get(self.station).ok_or_else(|| {
            bad(
                format!("{path}.station"),
                format!("{} is not a station", self.station),
            )
        })?;
        if !(self.time >= 0.0 && self.time.is_finite()) {
            return Err(bad(
                format!("{path}.time"),
                format!("must be >= 0, got {}", self.time),
            ));
        }
        match self.change {
            Change::Active(_) if st.kind != Kind::Queue => Err(bad(
                format!("{path}.station"),
                format!("'{}' is not a queue station", st.name),
            )),
            Change::Budget(_) if st.cpu.is_none() => Err(bad(
                format!("{path}.station"),
                format!("'{}' has no cpu to give a quota", st.name),
            )),
            Change::Budget(Some(b)) if !(b > 0.0 && b.is_finite()) => Err(bad(
                format!("{path}.budget"),
                format!("must be > 0 or null, got {b}"),
            )),
            _ => Ok(()),
        }
    }
}

/// Population steps of a closed class.
#[derive(Debug, Clone)]
pub struct PopulationSchedule {
    pub class: usize,
    pub steps: Vec<(f64, u32)>,
}

/// The validated spec.
#[derive(Debug, Clone)]
pub struct Model {
    pub stations: Vec<StationSpec>,
    pub classes: Vec<ClassSpec>,
    /// Service law of class `c` at station `k`, at `c * M + k`.
    pub service: Vec<Option<Dist>>,
    /// Routing rows: row `c * M + k` is `targets[row_start[i]..row_start[i + 1]]`.
    pub targets: Vec<Target>,
    pub row_start: Vec<u32>,
    /// The same rows as alias tables, for drawing (row `c * M + k`).
    pub routes: AliasRows,
    /// External arrivals of each class: cumulative `(probability, station)`.
    pub entry: Vec<Vec<(f64, u32)>>,
    pub perturbations: Vec<Perturbation>,
    /// Open classes: `(time, multiplier)` steps of the arrival rate.
    pub arrival_schedule: Vec<Vec<(f64, f64)>>,
    pub population_schedule: Vec<PopulationSchedule>,
    /// Capacity changes (replicas started or stopped, quotas changed) at given times.
    pub capacity_schedule: Vec<CapacityChange>,
    pub window: f64,
    pub trace: bool,
    pub host: Option<HostSpec>,
    /// The demand table read by `row` laws, row-major, `row_width` columns;
    /// each request draws one row uniformly when it starts.
    pub rows: Vec<f64>,
    pub row_width: usize,
    /// Hand over every completed request's response time and end.
    pub rt_samples: bool,
    /// Use the Markov fast path when the model allows it (see
    /// [`super::markov`]); `false` forces the event engine.
    pub markov: bool,
}

/// Probability sums within this of one count as one.
const SUM_TOL: f64 = 1e-6;

impl Model {
    pub fn n_stations(&self) -> usize {
        self.stations.len()
    }

    pub fn n_classes(&self) -> usize {
        self.classes.len()
    }

    /// Whether the model uses what only the event engine's special build
    /// runs (CPU stations, round robin, balance stations, a demand table, a
    /// host, capacity changes, response-time samples).
    pub fn special(&self) -> bool {
        self.stations
            .iter()
            .any(|s| s.cpu.is_some() || s.discipline == Discipline::Rr || s.kind == Kind::Balance)
            || !self.rows.is_empty()
            || self.host.is_some()
            || !self.capacity_schedule.is_empty()
            || self.rt_samples
    }

    /// The station an external arrival of class `c` enters (`rng` is drawn
    /// from only when there is a choice).
    pub fn entry_station(&self, c: usize, rng: &mut Rng) -> usize {
        let row = &self.entry[c];
        if row.len() == 1 {
            return row[0].1 as usize;
        }
        let u = rng.unit();
        row.iter()
            .find(|e| u < e.0)
            .or(row.last())
            .map_or(0, |e| e.1 as usize)
    }

    /// Routing row of class `c` at station `k`.
    pub fn row(&self, c: usize, k: usize) -> &[Target] {
        let i = c * self.stations.len() + k;
        &self.targets[self.row_start[i] as usize..self.row_start[i + 1] as usize]
    }

    /// Parses and validates a JSON spec.
    pub fn from_json(text: &str) -> Result<Model> {
        let root: Value = serde_json::from_str(text)
            .map_err(|e| bad("spec_json", format!("is not valid JSON: {e}")))?;
        let o = Obj::new(&root, "")?;
        let stations = o
            .list("stations")?
            .iter()
            .enumerate()
            .map(|(i, v)| parse_station(v, &item("stations", i)))
            .collect::<Result<Vec<_>>>()?;
        if stations.is_empty() {
            return Err(bad("stations", "needs at least one station"));
        }
        let m = stations.len();
        check_station_links(&stations)?;
        let classes = o
            .list("classes")?
            .iter()
            .enumerate()
            .map(|(i, v)| parse_class(v, &item("classes", i), m))
            .collect::<Result<Vec<_>>>()?;
        if classes.is_empty() {
            return Err(bad("classes", "needs at least one class"));
        }
        for (i, cl) in classes.iter().enumerate() {
            let kind = stations[cl.reference].kind;
            if !cl.open && !matches!(kind, Kind::Queue | Kind::Delay) {
                return Err(bad(
                    format!("classes[{i}].reference"),
                    "must be a queue or delay station (jobs wait there between cycles)",
                ));
            }
        }
        let c = classes.len();
        let service = parse_service(o.list("service")?, c, m)?;
        let (targets, row_start) = parse_routing(o.list("routing")?, c, m)?;
        let entry = parse_entry(o.opt_list("entry")?, &classes, m)?;
        let perturbations = o
            .opt_list("perturbations")?
            .iter()
            .enumerate()
            .map(|(i, v)| parse_perturbation(v, &item("perturbations", i), m))
            .collect::<Result<Vec<_>>>()?;
        let arrival_schedule = parse_arrival_schedule(o.opt_list("arrival_schedule")?, &classes)?;
        let population_schedule =
            parse_population_schedule(o.opt_list("population_schedule")?, &classes)?;
        let capacity_schedule = o
            .opt_list("capacity_schedule")?
            .iter()
            .enumerate()
            .map(|(i, v)| parse_change(v, &item("capacity_schedule", i), &stations))
            .collect::<Result<Vec<_>>>()?;
        let window = o.f64("window")?;
        if window <= 0.0 {
            return Err(bad("window", format!("must be > 0, got {window}")));
        }
        let trace = o.opt_bool("trace")?.unwrap_or(false);
        let markov = o.opt_bool("markov")?.unwrap_or(true);
        let host = match o.opt("host") {
            Some(v) if !v.is_null() => Some(parse_host(v, "host")?),
            _ => None,
        };
        let (rows, row_width) = parse_rows(o.opt_list("rows")?)?;
        check_row_laws(&service, &classes, m, row_width)?;
        let rt_samples = o.opt_bool("rt_samples")?.unwrap_or(false);
        let model = Model {
            stations,
            classes,
            service,
            routes: alias_rows(&targets, &row_start),
            targets,
            row_start,
            entry,
            perturbations,
            arrival_schedule,
            population_schedule,
            capacity_schedule,
            window,
            trace,
            host,
            rows,
            row_width,
            rt_samples,
            markov,
        };
        model.check_reachable()?;
        Ok(model)
    }

    /// Walks every (class, station) a job can occupy and checks it can be served and routed.
    fn check_reachable(&self) -> Result<()> {
        let (nc, m) = (self.n_classes(), self.n_stations());
        // Two flags per pair: reached by an open chain, reached by a closed chain.
        let mut seen = vec![[false; 2]; nc * m];
        let mut stack: Vec<(usize, usize, usize)> = Vec::new();
        for (c, cl) in self.classes.iter().enumerate() {
            if cl.open {
                for &(_, k) in &self.entry[c] {
                    stack.push((c, k as usize, 0));
                }
            } else {
                stack.push((c, cl.reference, 1));
            }
        }
        while let Some((c, k, closed)) = stack.pop() {
            if std::mem::replace(&mut seen[c * m + k][closed], true) {
                continue;
            }
            let st = &self.stations[k];
            match st.kind {
                Kind::Queue | Kind::Delay => {
                    if self.service[c * m + k].is_none() {
                        return Err(bad(
                            format!("service[{c}][{k}]"),
                            format!(
                                "is null, but jobs of class '{}' reach station '{}'",
                                self.classes[c].name, st.name
                            ),
                        ));
                    }
                }
                Kind::Fork => {
                    let n_branches = if st.branches.is_empty() {
                        for t in self.row(c, k) {
                            stack.push((t.class as usize, t.station as usize, closed));
                        }
                        self.row(c, k).len()
                    } else {
                        for &b in &st.branches {
                            stack.push((c, b, closed));
                        }
                        st.branches.len()
                    };
                    if n_branches == 0 {
                        return Err(bad(
                            format!("stations[{k}].branches"),
                            format!(
                                "fork '{}' has no branches for class '{}' (give branches or a \
                                 routing row)",
                                st.name, self.classes[c].name
                            ),
                        ));
                    }
                    let quorum = self.stations[st.join].quorum.unwrap_or(0) as usize;
                    if quorum > n_branches {
                        return Err(bad(
                            format!("stations[{}].quorum", st.join),
                            format!(
                                "is {quorum}, but fork '{}' has only {n_branches} branches",
                                st.name
                            ),
                        ));
                    }
                    // The parent leaves the join by the join's row.
                    stack.push((c, st.join, closed));
                    continue;
                }
                Kind::Join => {}
                Kind::Balance => {
                    for &b in &st.members {
                        stack.push((c, b, closed));
                    }
                    if st.policy != Policy::Each {
                        // The job goes on from the member, by the member's row.
                        continue;
                    }
                }
            }
            let row = self.row(c, k);
            for t in row {
                stack.push((t.class as usize, t.station as usize, closed));
            }
            let total = row.last().map_or(0.0, |t| t.cum);
            if closed == 1 && (total - 1.0).abs() > SUM_TOL {
                return Err(bad(
                    "routing",
                    format!(
                        "the row from [{c}, {k}] (class '{}' at '{}') sums to {total}; jobs of a \
                         closed class reach it, so it must sum to 1",
                        self.classes[c].name, st.name
                    ),
                ));
            }
        }
        Ok(())
    }
}

fn parse_station(v: &Value, path: &str) -> Result<StationSpec> {
    let o = Obj::new(v, path)?;
    let name = o.str("name")?.to_string();
    let kind = match o.str("kind")? {
        "queue" => Kind::Queue,
        "delay" => Kind::Delay,
        "fork" => Kind::Fork,
        "join" => Kind::Join,
        "balance" => Kind::Balance,
        other => {
            return Err(bad(
                o.at("kind"),
                format!("unknown kind '{other}' (expected queue, delay, fork, join or balance)"),
            ))
        }
    };
    let discipline = match o.opt_str("discipline")?.unwrap_or("fcfs") {
        "fcfs" => Discipline::Fcfs,
        "ps" => Discipline::Ps,
        "rr" => Discipline::Rr,
        other => {
            return Err(bad(
                o.at("discipline"),
                format!("unknown discipline '{other}' (expected fcfs, ps or rr)"),
            ))
        }
    };
    let quantum = if discipline == Discipline::Rr {
        let q = o.f64("quantum")?;
        if !(q > 0.0 && q.is_finite()) {
            return Err(bad(o.at("quantum"), format!("must be > 0, got {q}")));
        }
        q
    } else {
        0.0
    };
    let cpu = match o.opt("cpu") {
        Some(v) if !v.is_null() => {
            if kind != Kind::Queue {
                return Err(bad(o.at("cpu"), "only a queue station runs on CPU"));
            }
            Some(parse_cpu(v, &o.at("cpu"))?)
        }
        _ => None,
    };
    let (members, policy) = if kind == Kind::Balance {
        let at = o.at("members");
        let members = o
            .list("members")?
            .iter()
            .enumerate()
            .map(|(i, b)| count(b, &item(&at, i)).map(|b| b as usize))
            .collect::<Result<Vec<_>>>()?;
        if members.is_empty() {
            return Err(bad(at, "needs at least one member"));
        }
        let policy = match o.opt_str("policy")?.unwrap_or("round_robin") {
            "round_robin" => Policy::RoundRobin,
            "least_loaded" => Policy::LeastLoaded,
            "each" => Policy::Each,
            other => {
                return Err(bad(
                    o.at("policy"),
                    format!(
                        "unknown policy '{other}' (expected round_robin, least_loaded or each)"
                    ),
                ))
            }
        };
        (members, policy)
    } else {
        (Vec::new(), Policy::RoundRobin)
    };
    let servers = o.opt_count("servers")?.unwrap_or(1);
    if servers == 0 || servers > u32::MAX as u64 / 2 {
        return Err(bad(o.at("servers"), format!("must be >= 1, got {servers}")));
    }
    let servers = servers as u32;
    let mut alpha = match o.opt("alpha") {
        Some(a) => numbers(a, &o.at("alpha"))?,
        None => Vec::new(),
    };
    if let Some(i) = alpha.iter().position(|&a| a <= 0.0) {
        return Err(bad(
            item(&o.at("alpha"), i),
            format!("must be > 0, got {}", alpha[i]),
        ));
    }
    if alpha.is_empty() {
        alpha = (1..=servers).map(f64::from).collect();
    }
    let capacity = match o.opt_count("capacity")? {
        None => u32::MAX,
        Some(0) => return Err(bad(o.at("capacity"), "must be >= 1 or null")),
        Some(n) => n.min(u32::MAX as u64 - 1) as u32,
    };
    let block = match o.opt_str("on_full")?.unwrap_or("drop") {
        "drop" => false,
        "block" => true,
        other => {
            return Err(bad(
                o.at("on_full"),
                format!("unknown policy '{other}' (expected drop or block)"),
            ))
        }
    };
    let retry = match o.opt("retry") {
        None => None,
        Some(r) => {
            let at = o.at("retry");
            let ro = Obj::new(r, &at)?;
            let timeout = Dist::parse(ro.req("timeout")?, &ro.at("timeout"))?;
            if matches!(timeout, Dist::Row { .. }) {
                return Err(bad(ro.at("timeout"), "a row law is a service law only"));
            }
            let max_retries = ro
                .opt_count("max_retries")?
                .unwrap_or(3)
                .min(u32::MAX as u64) as u32;
            Some(RetrySpec {
                timeout,
                max_retries,
            })
        }
    };
    let join = match (kind, o.opt("join")) {
        (Kind::Fork, Some(j)) => count(j, &o.at("join"))? as usize,
        (Kind::Fork, None) => return Err(bad(o.at("join"), "a fork needs its join station")),
        _ => usize::MAX,
    };
    let branches = if kind == Kind::Fork {
        let at = o.at("branches");
        o.opt_list("branches")?
            .iter()
            .enumerate()
            .map(|(i, b)| count(b, &item(&at, i)).map(|b| b as usize))
            .collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };
    let quorum = match o.opt_count("quorum")? {
        Some(0) => return Err(bad(o.at("quorum"), "must be >= 1 or null")),
        q => q.map(|q| q.min(u32::MAX as u64) as u32),
    };
    Ok(StationSpec {
        name,
        kind,
        discipline,
        servers,
        alpha,
        capacity,
        block,
        retry,
        join,
        branches,
        quorum,
        quantum,
        cpu,
        members,
        policy,
        active: o.opt_bool("active")?.unwrap_or(true),
    })
}

fn parse_cpu(v: &Value, path: &str) -> Result<CpuSpec> {
    let o = Obj::new(v, path)?;
    let period = o.opt_f64("period")?.unwrap_or(0.1);
    if !(period > 0.0 && period.is_finite()) {
        return Err(bad(o.at("period"), format!("must be > 0, got {period}")));
    }
    let budget = o.opt_f64("budget")?;
    if let Some(b) = budget {
        if !(b > 0.0 && b.is_finite()) {
            return Err(bad(o.at("budget"), format!("must be > 0 or null, got {b}")));
        }
    }
    let carry = o.opt_f64("carry")?.unwrap_or(0.0);
    if !(carry >= 0.0 && carry.is_finite()) {
        return Err(bad(o.at("carry"), format!("must be >= 0, got {carry}")));
    }
    let tick = o.opt_f64("tick")?;
    if let Some(t) = tick {
        if !(t > 0.0 && t.is_finite()) {
            return Err(bad(o.at("tick"), format!("must be > 0 or null, got {t}")));
        }
    }
    let phase = o.opt_f64("phase")?;
    if let Some(p) = phase {
        if !(0.0..period).contains(&p) {
            return Err(bad(
                o.at("phase"),
                format!("must be in [0, period), got {p}"),
            ));
        }
    }
    Ok(CpuSpec {
        budget,
        period,
        carry,
        tick,
        phase,
        host: o.opt_bool("host")?.unwrap_or(false),
    })
}

fn parse_host(v: &Value, path: &str) -> Result<HostSpec> {
    let o = Obj::new(v, path)?;
    let cores = o.f64("cores")?;
    if !(cores > 0.0 && cores.is_finite()) {
        return Err(bad(o.at("cores"), format!("must be > 0, got {cores}")));
    }
    let background = o.opt_f64("background")?.unwrap_or(0.0);
    if !(background >= 0.0 && background.is_finite()) {
        return Err(bad(
            o.at("background"),
            format!("must be >= 0, got {background}"),
        ));
    }
    Ok(HostSpec { cores, background })
}

/// The demand table: rows of equal length, finite and non-negative.
fn parse_rows(rows: &[Value]) -> Result<(Vec<f64>, usize)> {
    let mut out = Vec::new();
    let mut width = 0;
    for (i, r) in rows.iter().enumerate() {
        let at = item("rows", i);
        let r = numbers(r, &at)?;
        if i == 0 {
            width = r.len();
            if width == 0 {
                return Err(bad(at, "needs at least one column"));
            }
        } else if r.len() != width {
            return Err(bad(
                at,
                format!("has {} columns, the first row {width}", r.len()),
            ));
        }
        if let Some(j) = r.iter().position(|x| !(x.is_finite() && *x >= 0.0)) {
            return Err(bad(item(&at, j), format!("must be >= 0, got {}", r[j])));
        }
        out.extend(r);
    }
    Ok((out, width))
}

/// `row` laws only as service laws of a model with a demand table wide enough.
fn check_row_laws(
    service: &[Option<Dist>],
    classes: &[ClassSpec],
    m: usize,
    width: usize,
) -> Result<()> {
    for (i, d) in service.iter().enumerate() {
        if let Some(Dist::Row { column }) = d {
            if *column as usize >= width {
                return Err(bad(
                    format!("service[{}][{}].column", i / m, i % m),
                    format!("is {column}, but the demand table (rows) has {width} columns"),
                ));
            }
        }
    }
    for (c, cl) in classes.iter().enumerate() {
        if matches!(cl.interarrival, Some(Dist::Row { .. })) {
            return Err(bad(
                format!("classes[{c}].interarrival"),
                "a row law is a service law only",
            ));
        }
    }
    Ok(())
}

/// Fork → join and branch indices must point at stations of the right kind.
fn check_station_links(stations: &[StationSpec]) -> Result<()> {
    let m = stations.len();
    for (k, st) in stations.iter().enumerate() {
        if st.kind != Kind::Fork {
            continue;
        }
        if st.join >= m || stations[st.join].kind != Kind::Join {
            return Err(bad(
                format!("stations[{k}].join"),
                format!("{} is not the index of a join station", st.join),
            ));
        }
        for (i, &b) in st.branches.iter().enumerate() {
            if b >= m {
                return Err(bad(
                    format!("stations[{k}].branches[{i}]"),
                    format!("{b} is not a valid station index (there are {m})"),
                ));
            }
        }
    }
    for (k, st) in stations.iter().enumerate() {
        for (i, &b) in st.members.iter().enumerate() {
            if b >= m || stations[b].kind != Kind::Queue {
                return Err(bad(
                    format!("stations[{k}].members[{i}]"),
                    format!("{b} is not the index of a queue station"),
                ));
            }
        }
    }
    Ok(())
}

fn parse_class(v: &Value, path: &str, m: usize) -> Result<ClassSpec> {
    let o = Obj::new(v, path)?;
    let name = o.str("name")?.to_string();
    let open = o
        .opt_bool("open")?
        .ok_or_else(|| bad(o.at("open"), "is required"))?;
    let reference = match o.opt("reference") {
        Some(r) => index(r, &o.at("reference"), m, "station")?,
        None if open => 0,
        None => return Err(bad(o.at("reference"), "is required for a closed class")),
    };
    let (interarrival, population) = if open {
        // `null`: no arrivals of its own (a class entered only by class switching);
        // a missing key is still an error, so a typo cannot silence a class.
        if !o.has("interarrival") {
            return Err(bad(o.at("interarrival"), "is required (null: no arrivals)"));
        }
        let d = parse_opt(o.req_or_null("interarrival"), &o.at("interarrival"))?;
        if d.as_ref().is_some_and(Dist::is_zero) {
            return Err(bad(
                o.at("interarrival"),
                "puts all its mass on zero (infinitely many arrivals)",
            ));
        }
        (d, 0)
    } else {
        let p = o.opt_count("population")?.unwrap_or(0);
        if p > 100_000_000 {
            return Err(bad(o.at("population"), format!("{p} is too large")));
        }
        (None, p as u32)
    };
    Ok(ClassSpec {
        name,
        open,
        interarrival,
        population,
        reference,
    })
}

fn parse_service(rows: &[Value], c: usize, m: usize) -> Result<Vec<Option<Dist>>> {
    if rows.len() != c {
        return Err(bad(
            "service",
            format!("has {} rows, expected one per class ({c})", rows.len()),
        ));
    }
    let mut out = Vec::with_capacity(c * m);
    for (ci, row) in rows.iter().enumerate() {
        let at = item("service", ci);
        let row = list(row, &at)?;
        if row.len() != m {
            return Err(bad(
                at,
                format!("has {} entries, expected one per station ({m})", row.len()),
            ));
        }
        for (k, d) in row.iter().enumerate() {
            out.push(parse_opt(d, &item(&at, k))?);
        }
    }
    Ok(out)
}

/// Alias tables of the cumulative routing rows; the mass short of 1 exits.
fn alias_rows(targets: &[Target], row_start: &[u32]) -> AliasRows {
    let mut rows = AliasRows::default();
    for w in row_start.windows(2) {
        let row = &targets[w[0] as usize..w[1] as usize];
        let mut prev = 0.0;
        let items: Vec<(Dest, f64)> = row
            .iter()
            .map(|t| {
                let p = t.cum - prev;
                prev = t.cum;
                let d = Dest {
                    class: t.class,
                    station: t.station,
                };
                (d, p)
            })
            .collect();
        rows.push_row(&items, (1.0 - prev).max(0.0));
    }
    rows
}

fn parse_routing(rows: &[Value], c: usize, m: usize) -> Result<(Vec<Target>, Vec<u32>)> {
    let mut per_row: Vec<Option<Vec<Target>>> = vec![None; c * m];
    for (i, r) in rows.iter().enumerate() {
        let at = item("routing", i);
        let o = Obj::new(r, &at)?;
        let from_at = o.at("from");
        let from = list(o.req("from")?, &from_at)?;
        if from.len() != 2 {
            return Err(bad(from_at, "expected [class, station]"));
        }
        let fc = index(&from[0], &item(&from_at, 0), c, "class")?;
        let fk = index(&from[1], &item(&from_at, 1), m, "station")?;
        let to_at = o.at("to");
        let mut row = Vec::new();
        let mut acc = 0.0;
        for (j, t) in list(o.req("to")?, &to_at)?.iter().enumerate() {
            let t_at = item(&to_at, j);
            let t = list(t, &t_at)?;
            if t.len() != 3 {
                return Err(bad(t_at, "expected [class, station, probability]"));
            }
            let tc = index(&t[0], &item(&t_at, 0), c, "class")?;
            let tk = index(&t[1], &item(&t_at, 1), m, "station")?;
            let p = number(&t[2], &item(&t_at, 2))?;
            if !(0.0..=1.0 + SUM_TOL).contains(&p) {
                return Err(bad(item(&t_at, 2), format!("must be in [0, 1], got {p}")));
            }
            if p == 0.0 {
                continue;
            }
            acc += p;
            row.push(Target {
                cum: acc,
                class: tc as u32,
                station: tk as u32,
            });
        }
        if acc > 1.0 + SUM_TOL {
            return Err(bad(
                to_at,
                format!("probabilities sum to {acc}, must be <= 1"),
            ));
        }
        if let Some(last) = row.last_mut() {
            if (acc - 1.0).abs() <= SUM_TOL {
                // Exactly one, so rounding never sends a job out of the network.
                last.cum = 1.0;
            }
        }
        let slot = &mut per_row[fc * m + fk];
        if slot.is_some() {
            return Err(bad(
                from_at,
                format!("a second row from [{fc}, {fk}]; give one row per (class, station)"),
            ));
        }
        *slot = Some(row);
    }
    let mut targets = Vec::new();
    let mut row_start = Vec::with_capacity(c * m + 1);
    for r in per_row {
        row_start.push(targets.len() as u32);
        targets.extend(r.unwrap_or_default());
    }
    row_start.push(targets.len() as u32);
    Ok((targets, row_start))
}

fn parse_entry(rows: &[Value], classes: &[ClassSpec], m: usize) -> Result<Vec<Vec<(f64, u32)>>> {
    let c = classes.len();
    if !rows.is_empty() && rows.len() != c {
        return Err(bad(
            "entry",
            format!("has {} rows, expected one per class ({c})", rows.len()),
        ));
    }
    let mut out = Vec::with_capacity(c);
    for (ci, cl) in classes.iter().enumerate() {
        let at = item("entry", ci);
        let row = match rows.get(ci) {
            Some(r) if !r.is_null() => list(r, &at)?,
            _ => &[],
        };
        let mut cum = Vec::new();
        let mut acc = 0.0;
        for (j, e) in row.iter().enumerate() {
            let e_at = item(&at, j);
            let e = list(e, &e_at)?;
            if e.len() != 2 {
                return Err(bad(e_at, "expected [station, probability]"));
            }
            let k = index(&e[0], &item(&e_at, 0), m, "station")?;
            let p = number(&e[1], &item(&e_at, 1))?;
            if !(0.0..=1.0 + SUM_TOL).contains(&p) {
                return Err(bad(item(&e_at, 1), format!("must be in [0, 1], got {p}")));
            }
            if p > 0.0 {
                acc += p;
                cum.push((acc, k as u32));
            }
        }
        if cl.open && cl.interarrival.is_some() {
            if (acc - 1.0).abs() > SUM_TOL {
                return Err(bad(
                    at,
                    format!(
                        "entry probabilities of open class '{}' sum to {acc}, must be 1",
                        cl.name
                    ),
                ));
            }
            if let Some(last) = cum.last_mut() {
                last.0 = 1.0;
            }
        }
        out.push(cum);
    }
    Ok(out)
}

fn parse_perturbation(v: &Value, path: &str, m: usize) -> Result<Perturbation> {
    let o = Obj::new(v, path)?;
    let station = index(o.req("station")?, &o.at("station"), m, "station")?;
    let factor = o.f64("factor")?;
    let start = o.f64("start")?;
    let duration = o.f64("duration")?;
    let period = o.opt_f64("period")?;
    let until = o.opt_f64("until")?;
    if factor < 0.0 {
        return Err(bad(o.at("factor"), format!("must be >= 0, got {factor}")));
    }
    if start < 0.0 {
        return Err(bad(o.at("start"), format!("must be >= 0, got {start}")));
    }
    if duration < 0.0 {
        return Err(bad(
            o.at("duration"),
            format!("must be >= 0, got {duration}"),
        ));
    }
    if let Some(p) = period {
        if p <= 0.0 {
            return Err(bad(o.at("period"), format!("must be > 0, got {p}")));
        }
    }
    Ok(Perturbation {
        station,
        factor,
        start,
        duration,
        period,
        until,
    })
}

/// `times` of a schedule: non-negative and non-decreasing.
fn parse_times(o: &Obj<'_>) -> Result<Vec<f64>> {
    let at = o.at("times");
    let times = numbers(o.req("times")?, &at)?;
    for (i, &t) in times.iter().enumerate() {
        if t < 0.0 || (i > 0 && t < times[i - 1]) {
            return Err(bad(
                item(&at, i),
                format!("{t}: times must be >= 0 and non-decreasing"),
            ));
        }
    }
    Ok(times)
}

fn schedule_class(o: &Obj<'_>, classes: &[ClassSpec], open: bool) -> Result<usize> {
    let c = index(o.req("class")?, &o.at("class"), classes.len(), "class")?;
    if classes[c].open != open {
        return Err(bad(
            o.at("class"),
            format!(
                "class '{}' is {}; {} schedules apply to {} classes",
                classes[c].name,
                if open { "closed" } else { "open" },
                if open { "arrival" } else { "population" },
                if open { "open" } else { "closed" },
            ),
        ));
    }
    Ok(c)
}

fn parse_arrival_schedule(rows: &[Value], classes: &[ClassSpec]) -> Result<Vec<Vec<(f64, f64)>>> {
    let mut out = vec![Vec::new(); classes.len()];
    for (i, v) in rows.iter().enumerate() {
        let at = item("arrival_schedule", i);
        let o = Obj::new(v, &at)?;
        let c = schedule_class(&o, classes, true)?;
        let times = parse_times(&o)?;
        let m_at = o.at("multipliers");
        let mult = numbers(o.req("multipliers")?, &m_at)?;
        if mult.len() != times.len() {
            return Err(bad(
                m_at,
                format!(
                    "has {} entries, expected {} (one per time)",
                    mult.len(),
                    times.len()
                ),
            ));
        }
        if let Some(j) = mult.iter().position(|&x| x < 0.0) {
            return Err(bad(
                item(&m_at, j),
                format!("must be >= 0, got {}", mult[j]),
            ));
        }
        if !out[c].is_empty() {
            return Err(bad(
                o.at("class"),
                format!("class {c} has a second arrival schedule"),
            ));
        }
        out[c] = times.into_iter().zip(mult).collect();
    }
    Ok(out)
}

fn parse_change(v: &Value, path: &str, stations: &[StationSpec]) -> Result<CapacityChange> {
    let o = Obj::new(v, path)?;
    let change = match (o.opt_bool("active")?, o.has("budget")) {
        (Some(a), false) => Change::Active(a),
        (None, true) => Change::Budget(o.opt_f64("budget")?),
        _ => return Err(bad(path, "give one of active or budget")),
    };
    let c = CapacityChange {
        time: o.f64("time")?,
        station: count(o.req("station")?, &o.at("station"))? as usize,
        change,
    };
    c.check(stations, path)?;
    Ok(c)
}

fn parse_population_schedule(
    rows: &[Value],
    classes: &[ClassSpec],
) -> Result<Vec<PopulationSchedule>> {
    let mut out = Vec::new();
    for (i, v) in rows.iter().enumerate() {
        let at = item("population_schedule", i);
        let o = Obj::new(v, &at)?;
        let c = schedule_class(&o, classes, false)?;
        let times = parse_times(&o)?;
        let p_at = o.at("populations");
        let pops = list(o.req("populations")?, &p_at)?
            .iter()
            .enumerate()
            .map(|(j, p)| {
                let n = count(p, &item(&p_at, j))?;
                if n > 100_000_000 {
                    return Err(bad(item(&p_at, j), format!("{n} is too large")));
                }
                Ok(n as u32)
            })
            .collect::<Result<Vec<_>>>()?;
        if pops.len() != times.len() {
            return Err(bad(
                p_at,
                format!(
                    "has {} entries, expected {} (one per time)",
                    pops.len(),
                    times.len()
                ),
            ));
        }
        out.push(PopulationSchedule {
            class: c,
            steps: times.into_iter().zip(pops).collect(),
        });
    }
    Ok(out)
}
