//! The load generator's configuration: the JSON document `tierscope.load` compiles from a
//! workload file, validated once before any thread starts.
//!
//! Design: Python owns the user-facing schema and its messages (`spec/workload.py`); this
//! side receives plain, already-resolved values (IP addresses, parsed URL templates,
//! probability vectors) through serde, and still checks every domain so that a bad
//! document is an `InvalidSpec` error naming its field, never a panic in a worker thread.

use serde::Deserialize;
use serde_json::Value;

use crate::des::dist::Dist;
use crate::error::{NativeError, Result};

use super::template::{PartSpec, Template};

/// How load is offered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// `level` users, each sending its next request a think time after the last response.
    Closed,
    /// Requests arrive at `level` per second, whatever the responses do.
    Open,
    /// Sessions arrive at `level` per second; inside a session the user is closed-loop.
    PartlyOpen,
}

/// The arrival process of open and partly-open modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrival {
    Poisson,
    Constant,
}

/// When connections are opened and closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConnectionPolicy {
    /// Keep connections open across requests (HTTP/1.1 keep-alive).
    KeepAlive,
    /// A new connection for every session, closed when the session ends.
    PerSession,
    /// A new connection for every request (`Connection: close`).
    PerRequest,
}

/// How the worker threads ask the kernel for CPU (every step is best effort: without the
/// privilege, the thread keeps the next lower class).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Priority {
    /// Normal scheduling.
    Normal,
    /// Nice -10: a larger CPU share and earlier wake-ups than normal processes.
    High,
    /// Real-time FIFO while the workload has timers (think times, arrivals) and the thread
    /// stays light; a thread that uses more than half a core drops to `High`.
    Realtime,
}

/// One server the requests go to.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TargetSpec {
    /// Resolved socket address, `ip:port` (`[v6]:port`).
    pub addr: String,
    /// Value of the Host header.
    pub host: String,
    /// Path of the base URL, prepended to every relative interaction path.
    #[serde(default)]
    pub path_prefix: String,
}

/// One interaction (request type) of the workload.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InteractionSpec {
    pub name: String,
    pub method: String,
    /// Path and query, as a template.
    pub path: Vec<PartSpec>,
    #[serde(default)]
    pub headers: Vec<(String, Vec<PartSpec>)>,
    #[serde(default)]
    pub body: Option<Vec<PartSpec>>,
    /// Index of a fixed target (absolute URL); `None`: the user's own target.
    #[serde(default)]
    pub target: Option<usize>,
}

/// The Markov chain that picks interactions.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MixSpec {
    /// Probability of each interaction being the first of a session.
    pub initial: Vec<f64>,
    /// Row i: probability of each next interaction after interaction i.
    pub transitions: Vec<Vec<f64>>,
    /// Probability that the session ends after interaction i.
    pub end: Vec<f64>,
    /// Interaction probabilities for open mode (independent draws): the chain's
    /// stationary distribution, computed by the caller.
    pub stationary: Vec<f64>,
}

/// The whole configuration of one load run.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub mode: Mode,
    /// Users (closed), requests/s (open) or sessions/s (partly open) at steady state.
    pub level: f64,
    pub ramp_up_s: f64,
    pub steady_s: f64,
    pub ramp_down_s: f64,
    /// Think-time distribution in the simulator's format (`None`: no think time).
    #[serde(default)]
    pub think: Option<Value>,
    #[serde(default = "default_arrival")]
    pub arrival: Arrival,
    pub targets: Vec<TargetSpec>,
    /// The first `base_targets` targets are shared out among users (the others serve
    /// interactions with absolute URLs); `None`: all of them.
    #[serde(default)]
    pub base_targets: Option<usize>,
    pub interactions: Vec<InteractionSpec>,
    pub mix: MixSpec,
    #[serde(default = "default_policy")]
    pub connection: ConnectionPolicy,
    /// Total connections shared by the users (`None`: one per user or session, and as
    /// many as needed in open mode).
    #[serde(default)]
    pub connections: Option<u64>,
    /// Open mode: requests in flight or waiting for a connection beyond which arrivals
    /// are not sent (and counted as `not_sent`).
    pub max_outstanding: u64,
    /// Partly-open mode: sessions in progress beyond which arrivals are turned away.
    #[serde(default)]
    pub max_sessions: Option<u64>,
    pub timeout_s: f64,
    pub threads: usize,
    pub seed: u64,
    #[serde(default)]
    pub request_id_prefix: String,
    pub late_threshold_s: f64,
    pub sample_interval_s: f64,
    pub keep_records: bool,
    pub user_agent: String,
    /// CLOCK_MONOTONIC time (s) at which the load starts; `None`: a few ms after start().
    #[serde(default)]
    pub start_at: Option<f64>,
    /// Scheduling priority of the worker threads (best effort).
    #[serde(default = "default_priority")]
    pub priority: Priority,
}

fn default_priority() -> Priority {
    Priority::Normal
}

fn default_arrival() -> Arrival {
    Arrival::Poisson
}

fn default_policy() -> ConnectionPolicy {
    ConnectionPolicy::KeepAlive
}

/// The error for `field` of a load configuration.
pub(crate) fn bad(field: impl Into<String>, message: impl Into<String>) -> NativeError {
    NativeError::InvalidLoad {
        field: field.into(),
        message: message.into(),
    }
}

/// Tolerance for probability vectors that must sum to one.
const SUM_TOL: f64 = 1e-6;

fn check_probabilities(v: &[f64], n: usize, field: &str) -> Result<()> {
    if v.len() != n {
        return Err(bad(field, format!("has {} entries, expected {n}", v.len())));
    }
    if let Some(i) = v.iter().position(|p| !(p.is_finite() && *p >= 0.0)) {
        return Err(bad(
            format!("{field}[{i}]"),
            format!("must be >= 0, got {}", v[i]),
        ));
    }
    let s: f64 = v.iter().sum();
    if (s - 1.0).abs() > SUM_TOL {
        return Err(bad(field, format!("must sum to 1, sums to {s}")));
    }
    Ok(())
}

fn check_nonneg(x: f64, field: &str) -> Result<()> {
    if x.is_finite() && x >= 0.0 {
        Ok(())
    } else {
        Err(bad(field, format!("must be a finite number >= 0, got {x}")))
    }
}

fn check_positive(x: f64, field: &str) -> Result<()> {
    if x.is_finite() && x > 0.0 {
        Ok(())
    } else {
        Err(bad(field, format!("must be a finite number > 0, got {x}")))
    }
}

impl Config {
    /// Parses and validates the JSON document.
    pub fn from_json(text: &str) -> Result<Config> {
        let cfg: Config = serde_json::from_str(text)
            .map_err(|e| bad("<load config>", format!("not a valid configuration: {e}")))?;
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<()> {
        check_nonneg(self.level, "level")?;
        check_nonneg(self.ramp_up_s, "ramp_up_s")?;
        check_nonneg(self.steady_s, "steady_s")?;
        check_nonneg(self.ramp_down_s, "ramp_down_s")?;
        if self.mode == Mode::Closed && self.level.fract() != 0.0 {
            return Err(bad(
                "level",
                format!("users must be a whole number, got {}", self.level),
            ));
        }
        if self.mode == Mode::Closed && self.level > 10_000_000.0 {
            return Err(bad("level", "more than 10,000,000 users"));
        }
        check_positive(self.timeout_s, "timeout_s")?;
        check_positive(self.sample_interval_s, "sample_interval_s")?;
        check_nonneg(self.late_threshold_s, "late_threshold_s")?;
        if self.threads == 0 || self.threads > 256 {
            return Err(bad(
                "threads",
                format!("must be in 1..=256, got {}", self.threads),
            ));
        }
        if self.max_outstanding == 0 {
            return Err(bad("max_outstanding", "must be >= 1"));
        }
        if self.connections == Some(0) {
            return Err(bad("connections", "must be >= 1"));
        }
        if self.targets.is_empty() {
            return Err(bad("targets", "needs at least one target"));
        }
        for (i, t) in self.targets.iter().enumerate() {
            t.addr.parse::<std::net::SocketAddr>().map_err(|_| {
                bad(
                    format!("targets[{i}].addr"),
                    format!("not ip:port: {}", t.addr),
                )
            })?;
            if t.host.is_empty() || t.host.bytes().any(|b| b.is_ascii_control() || b == b' ') {
                return Err(bad(
                    format!("targets[{i}].host"),
                    "must be a non-empty host[:port]",
                ));
            }
            if t.path_prefix
                .bytes()
                .any(|b| b.is_ascii_control() || b == b' ')
            {
                return Err(bad(
                    format!("targets[{i}].path_prefix"),
                    "must not contain spaces",
                ));
            }
        }
        if let Some(b) = self.base_targets {
            if b > self.targets.len() {
                return Err(bad(
                    "base_targets",
                    format!("{b} exceeds the {} targets", self.targets.len()),
                ));
            }
        }
        let n = self.interactions.len();
        if n == 0 || n > u16::MAX as usize {
            return Err(bad(
                "interactions",
                format!("needs 1..=65535 interactions, got {n}"),
            ));
        }
        for (i, it) in self.interactions.iter().enumerate() {
            let at = format!("interactions[{i}]");
            if it.method.is_empty() || !it.method.bytes().all(|b| b.is_ascii_alphabetic()) {
                return Err(bad(
                    format!("{at}.method"),
                    format!("not an HTTP method: {:?}", it.method),
                ));
            }
            if let Some(t) = it.target {
                if t >= self.targets.len() {
                    return Err(bad(format!("{at}.target"), format!("no target {t}")));
                }
            }
            Template::compile(&it.path, &format!("{at}.path"))?;
            for (j, (name, value)) in it.headers.iter().enumerate() {
                if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic() && b != b':') {
                    return Err(bad(
                        format!("{at}.headers[{j}]"),
                        format!("bad header name {name:?}"),
                    ));
                }
                Template::compile(value, &format!("{at}.headers[{j}]"))?;
            }
            if let Some(b) = &it.body {
                Template::compile(b, &format!("{at}.body"))?;
            }
        }
        check_probabilities(&self.mix.initial, n, "mix.initial")?;
        check_probabilities(&self.mix.stationary, n, "mix.stationary")?;
        if self.mix.transitions.len() != n {
            return Err(bad(
                "mix.transitions",
                format!("has {} rows, expected {n}", self.mix.transitions.len()),
            ));
        }
        for (i, row) in self.mix.transitions.iter().enumerate() {
            check_probabilities(row, n, &format!("mix.transitions[{i}]"))?;
        }
        if self.mix.end.len() != n {
            return Err(bad(
                "mix.end",
                format!("has {} entries, expected {n}", self.mix.end.len()),
            ));
        }
        if let Some(i) = self.mix.end.iter().position(|p| !(0.0..=1.0).contains(p)) {
            return Err(bad(
                format!("mix.end[{i}]"),
                format!("must be in [0, 1], got {}", self.mix.end[i]),
            ));
        }
        if self.mode == Mode::PartlyOpen && self.mix.end.iter().all(|&p| p == 0.0) {
            return Err(bad(
                "mix.end",
                "partly-open sessions must end: needs an end probability > 0",
            ));
        }
        if let Some(t) = &self.think {
            Dist::parse(t, "think")?;
        }
        if let Some(s) = self.start_at {
            check_nonneg(s, "start_at")?;
        }
        Ok(())
    }

    /// The think-time law, if any (validated in `from_json`).
    pub fn think_dist(&self) -> Option<Dist> {
        self.think
            .as_ref()
            .and_then(|t| Dist::parse(t, "think").ok())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn minimal(mode: &str, level: f64, addr: &str) -> String {
        format!(
            r#"{{"mode":"{mode}","level":{level},"ramp_up_s":0,"steady_s":1,"ramp_down_s":0,
            "think":null,"targets":[{{"addr":"{addr}","host":"{addr}"}}],
            "interactions":[{{"name":"home","method":"GET","path":[{{"lit":"/"}}]}}],
            "mix":{{"initial":[1],"transitions":[[1]],"end":[0.5],"stationary":[1]}},
            "max_outstanding":1000,"timeout_s":2,"threads":1,"seed":1,
            "late_threshold_s":0.002,"sample_interval_s":0.05,"keep_records":true,
            "user_agent":"t"}}"#
        )
    }

    #[test]
    fn a_minimal_config_parses() {
        let c = Config::from_json(&minimal("closed", 3.0, "127.0.0.1:80")).unwrap();
        assert_eq!(c.mode, Mode::Closed);
        assert_eq!(c.connection, ConnectionPolicy::KeepAlive);
    }

    #[test]
    fn bad_values_name_their_field() {
        let cases = [
            (minimal("closed", 2.5, "127.0.0.1:80"), "level"),
            (minimal("open", -1.0, "127.0.0.1:80"), "level"),
            (minimal("closed", 1.0, "localhost:80"), "targets[0].addr"),
            (
                minimal("closed", 1.0, "127.0.0.1:80")
                    .replace("\"initial\":[1]", "\"initial\":[0.5]"),
                "mix.initial",
            ),
            (
                minimal("closed", 1.0, "127.0.0.1:80").replace("\"threads\":1", "\"threads\":0"),
                "threads",
            ),
            (
                minimal("closed", 1.0, "127.0.0.1:80")
                    .replace("\"think\":null", "\"think\":{\"dist\":\"exp\",\"mean\":-1}"),
                "think.mean",
            ),
            (
                minimal("closed", 1.0, "127.0.0.1:80").replace("\"mode\"", "\"mood\""),
                "<load config>",
            ),
        ];
        for (doc, field) in cases {
            match Config::from_json(&doc) {
                Err(
                    NativeError::InvalidLoad { field: f, .. }
                    | NativeError::InvalidSpec { field: f, .. },
                ) => assert_eq!(f, field, "{doc}"),
                other => panic!("expected an error at {field}, got {other:?}"),
            }
        }
    }
}
