//! The compiled, immutable form of a configuration that every worker thread shares.
//!
//! Design: everything that can be decided before the first request is decided here
//! (socket addresses, byte strings of request heads, cumulative mix tables, phase
//! boundaries in nanoseconds), so the request path only copies bytes and draws numbers.

use std::net::SocketAddr;

use crate::des::dist::Dist;
use crate::des::rng::Rng;
use crate::error::Result;

use super::config::{Arrival, Config, ConnectionPolicy, Mode, Priority};
use super::mix::Mix;
use super::profile::{Phase, Profile};
use super::sys::NS_PER_S;
use super::template::{push_u64, Template, Vars};

/// A server requests go to.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    pub host: Box<[u8]>,
    pub prefix: Box<[u8]>,
}

/// One interaction, ready to render.
#[derive(Debug, Clone)]
pub struct Interaction {
    pub method: Box<[u8]>,
    pub head_method: bool,
    pub path: Template,
    pub headers: Vec<(Box<[u8]>, Template)>,
    pub body: Option<Template>,
    pub target: Option<u32>,
}

/// A request that has been decided but not yet finished.
#[derive(Debug, Clone, Copy)]
pub struct Pending {
    pub id: u64,
    pub intended: i64,
    /// When it was handed to a connection (0 while it waits for one).
    pub actual: i64,
    pub user: u32,
    pub session: u64,
    pub interaction: u16,
    pub target: u32,
    /// Already retried once on a fresh connection (stale keep-alive connection).
    pub retried: bool,
}

/// No user (open-mode requests) / no connection.
pub const NONE: u32 = u32::MAX;

/// The shared plan of a run.
#[derive(Debug)]
pub struct Plan {
    pub mode: Mode,
    pub level: f64,
    pub profile: Profile,
    /// Start of the load (CLOCK_MONOTONIC ns) and phase boundaries.
    pub t0: i64,
    pub steady_start: i64,
    pub steady_end: i64,
    pub load_end: i64,
    pub think: Option<Dist>,
    pub arrival: Arrival,
    pub targets: Vec<Target>,
    /// How many targets (the first ones) users are spread over (at least 1).
    pub base_targets: u32,
    pub interactions: Vec<Interaction>,
    pub mix: Mix,
    pub policy: ConnectionPolicy,
    pub connections: Option<u64>,
    pub max_outstanding: u64,
    pub max_sessions: Option<u64>,
    pub timeout_ns: i64,
    pub seed: u64,
    pub id_prefix: Box<[u8]>,
    pub late_ns: i64,
    pub tick_ns: i64,
    pub keep_records: bool,
    pub user_agent: Box<[u8]>,
    pub threads: usize,
    pub priority: Priority,
}

fn ns(s: f64) -> i64 {
    (s * NS_PER_S).round() as i64
}

impl Plan {
    /// Compiles a validated configuration; the load starts at `t0` (CLOCK_MONOTONIC ns).
    pub fn compile(cfg: &Config, t0: i64) -> Result<Plan> {
        let profile = Profile {
            ramp_up: cfg.ramp_up_s,
            steady: cfg.steady_s,
            ramp_down: cfg.ramp_down_s,
        };
        let targets = cfg
            .targets
            .iter()
            .map(|t| Target {
                addr: t.addr.parse().expect("validated in Config::from_json"),
                host: t.host.as_bytes().into(),
                prefix: t.path_prefix.trim_end_matches('/').as_bytes().into(),
            })
            .collect();
        let mut interactions = Vec::with_capacity(cfg.interactions.len());
        for (i, it) in cfg.interactions.iter().enumerate() {
            let at = format!("interactions[{i}]");
            let mut headers = Vec::with_capacity(it.headers.len());
            for (j, (name, value)) in it.headers.iter().enumerate() {
                headers.push((
                    name.as_bytes().into(),
                    Template::compile(value, &format!("{at}.headers[{j}]"))?,
                ));
            }
            interactions.push(Interaction {
                method: it.method.to_ascii_uppercase().into_bytes().into(),
                head_method: it.method.eq_ignore_ascii_case("HEAD"),
                path: Template::compile(&it.path, &format!("{at}.path"))?,
                headers,
                body: match &it.body {
                    Some(b) => Some(Template::compile(b, &format!("{at}.body"))?),
                    None => None,
                },
                target: it.target.map(|t| t as u32),
            });
        }
        let think = cfg.think_dist().filter(|d| !d.is_zero());
        Ok(Plan {
            mode: cfg.mode,
            level: cfg.level,
            profile,
            t0,
            steady_start: t0 + ns(profile.ramp_up),
            steady_end: t0 + ns(profile.ramp_up + profile.steady),
            load_end: t0 + ns(profile.end()),
            think,
            arrival: cfg.arrival,
            base_targets: cfg.base_targets.unwrap_or(cfg.targets.len()).max(1) as u32,
            targets,
            interactions,
            mix: Mix::new(&cfg.mix),
            policy: cfg.connection,
            connections: cfg.connections,
            max_outstanding: cfg.max_outstanding,
            max_sessions: cfg.max_sessions,
            timeout_ns: ns(cfg.timeout_s),
            seed: cfg.seed,
            id_prefix: cfg.request_id_prefix.as_bytes().into(),
            late_ns: ns(cfg.late_threshold_s),
            tick_ns: ns(cfg.sample_interval_s).max(1_000_000),
            keep_records: cfg.keep_records,
            user_agent: cfg.user_agent.as_bytes().into(),
            threads: cfg.threads,
            priority: cfg.priority,
        })
    }

    /// Seconds → ns offset from `t0`.
    pub fn at(&self, s: f64) -> i64 {
        self.t0 + ns(s)
    }

    /// Phase of a CLOCK_MONOTONIC time.
    #[inline]
    pub fn phase(&self, t: i64) -> Phase {
        if t < self.steady_start {
            Phase::RampUp
        } else if t < self.steady_end {
            Phase::Steady
        } else {
            Phase::RampDown
        }
    }

    /// Target of interaction `i` for a user whose own target is `own`.
    #[inline]
    pub fn target_of(&self, i: u16, own: u32) -> u32 {
        self.interactions[i as usize].target.unwrap_or(own)
    }

    /// Whether HEAD was used (the response has no body).
    #[inline]
    pub fn is_head(&self, i: u16) -> bool {
        self.interactions[i as usize].head_method
    }

    /// Writes the whole request `p` into `out` (`scratch` holds a rendered body).
    pub fn render(&self, p: &Pending, rng: &mut Rng, out: &mut Vec<u8>, scratch: &mut Vec<u8>) {
        let it = &self.interactions[p.interaction as usize];
        let target = &self.targets[p.target as usize];
        let vars = Vars {
            user: if p.user == NONE { 0 } else { p.user as u64 },
            session: p.session,
            request_id: p.id,
            id_prefix: &self.id_prefix,
        };
        out.clear();
        out.extend_from_slice(&it.method);
        out.push(b' ');
        out.extend_from_slice(&target.prefix);
        it.path.render(&vars, rng, out);
        out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        out.extend_from_slice(&target.host);
        out.extend_from_slice(b"\r\nUser-Agent: ");
        out.extend_from_slice(&self.user_agent);
        out.extend_from_slice(b"\r\nX-Request-Id: ");
        out.extend_from_slice(&self.id_prefix);
        push_u64(out, p.id);
        out.extend_from_slice(b"\r\n");
        for (name, value) in &it.headers {
            out.extend_from_slice(name);
            out.extend_from_slice(b": ");
            value.render(&vars, rng, out);
            out.extend_from_slice(b"\r\n");
        }
        if self.policy == ConnectionPolicy::PerRequest {
            out.extend_from_slice(b"Connection: close\r\n");
        }
        match &it.body {
            Some(body) => {
                scratch.clear();
                body.render(&vars, rng, scratch);
                out.extend_from_slice(b"Content-Length: ");
                push_u64(out, scratch.len() as u64);
                out.extend_from_slice(b"\r\n\r\n");
                out.extend_from_slice(scratch);
            }
            None => out.extend_from_slice(b"\r\n"),
        }
    }
}
