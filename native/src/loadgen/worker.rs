//! One worker thread: an epoll event loop that runs its share of the users, sessions
//! or arrivals, and measures them.
//!
//! Design (after wrk): each worker owns its sockets, timers and statistics outright,
//! so the request path has no locks and no allocation. Time-driven work (end of a
//! think time, the next open-loop arrival, a sample tick) sits in one binary heap of
//! deadlines; the loop sleeps in `epoll_pwait2` until the earliest deadline or socket
//! readiness, whichever comes first, which gives timers microsecond resolution.
//! Requests keep the time the workload *intended* to send them: a user's think time
//! ends at `end of last response + think`, an open-loop request at its arrival time,
//! whether or not the client managed to send it then. Latency measured from that
//! intended time is free of coordinated omission.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use hdrhistogram::Histogram;

use crate::des::rng::Rng;

use super::config::{Arrival, ConnectionPolicy, Mode, Priority};
use super::http::{Feed, ResponseParser};
use super::plan::{Pending, Plan, NONE};
use super::priority::PriorityGuard;
use super::profile::Phase;
use super::shared::{lock, Shared, WorkerResult};
use super::stats::{histogram, record_ns, ErrorClass, Record, Sample, Steady, Totals};
use super::sys::{self, Io, Poller, EDGE, READ, WRITE};

/// Timer kinds (top byte of a timer key); the low bits carry a user slot.
const WAKE: u64 = 1;
const ARRIVAL: u64 = 2;
const TICK: u64 = 3;
const SWEEP: u64 = 4;
const DRAIN: u64 = 5;
const HARD_STOP: u64 = 6;
const KIND_SHIFT: u32 = 56;

/// Random streams (the replication coordinate of `Rng::stream`).
const STREAM_USER: u64 = 0x75_73_65_72;
const STREAM_SESSION: u64 = 0x73_65_73_73;
const STREAM_ARRIVAL: u64 = 0x61_72_72_69;
const STREAM_CHOICE: u64 = 0x63_68_6f_69;

/// After a failed connect a user waits at least this long before its next request,
/// so a refused port is not hammered in a tight loop.
const CONNECT_BACKOFF_NS: i64 = 10_000_000;
const READ_BUF: usize = 64 * 1024;
/// Non-blocking polls before sleeping, after a wake-up that brought events (a poll costs
/// about 0.4 µs, so this spins for about `SPIN_NS`).
const SPIN_POLLS: u32 = 8;
const SPIN_NS: i64 = 3_000;
const MAX_EVENTS: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnState {
    Free,
    Connecting,
    Idle,
    Busy,
}

#[derive(Debug)]
struct Conn {
    fd: Option<OwnedFd>,
    gen: u32,
    state: ConnState,
    target: u32,
    /// The user slot that owns this connection, or NONE for a pooled one.
    owner: u32,
    /// Whether a response has completed on it (a stale keep-alive candidate).
    reused: bool,
    req: Option<Pending>,
    deadline: i64,
    parser: ResponseParser,
    unsent: Vec<u8>,
}

impl Conn {
    fn new() -> Conn {
        Conn {
            fd: None,
            gen: 0,
            state: ConnState::Free,
            target: 0,
            owner: NONE,
            reused: false,
            req: None,
            deadline: 0,
            parser: ResponseParser::default(),
            unsent: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UserState {
    /// Slot not in use (partly open).
    Free,
    /// Thinking (a WAKE timer is pending) or about to start.
    Waiting,
    /// A request is outstanding.
    Busy,
    /// Finished for this run.
    Done,
}

#[derive(Debug)]
struct User {
    rng: Rng,
    state: UserState,
    interaction: u16,
    session: u64,
    target: u32,
    conn: u32,
    stop_at: i64,
}

/// One worker's event loop and everything it owns.
pub struct Worker {
    k: usize,
    plan: Arc<Plan>,
    shared: Arc<Shared>,
    poller: Poller,
    events: Vec<sys::Event>,
    conns: Vec<Conn>,
    free_conns: Vec<u32>,
    users: Vec<User>,
    free_users: Vec<u32>,
    timers: BinaryHeap<Reverse<(i64, u64)>>,
    /// Each user has its own connection (else connections are pooled).
    dedicated: bool,
    pool_limit: usize,
    open_conns: usize,
    idle: Vec<Vec<u32>>,
    waiting: VecDeque<Pending>,
    outstanding: u64,
    max_outstanding: u64,
    max_sessions: u64,
    active: u64,
    arrival_rng: Rng,
    choice_rng: Rng,
    arrival_s: f64,
    arrival_j: u64,
    next_seq: u64,
    next_session: u64,
    next_target: u32,
    sweep_ns: i64,
    read_buf: Vec<u8>,
    req_buf: Vec<u8>,
    body_buf: Vec<u8>,
    records: Vec<Record>,
    steady: Steady,
    totals: Totals,
    rolling: Histogram<u64>,
    tick_lag_max: i64,
    tick_lag_sum: i64,
    tick_lag_count: u32,
    lag_ring: Vec<i64>,
    lag_pos: usize,
    machine_prev: Option<(u64, u64)>,
    ticks: u64,
    priority: PriorityGuard,
    draining: bool,
    stopped: bool,
}

#[inline]
fn key(kind: u64, id: u32) -> u64 {
    (kind << KIND_SHIFT) | id as u64
}

#[inline]
fn token(c: u32, gen: u32) -> u64 {
    ((c as u64) << 32) | gen as u64
}

#[inline]
fn secs_to_ns(s: f64) -> i64 {
    (s * 1e9).round() as i64
}

/// Share of `total` for worker `k` of `n` (the first `total % n` get one more).
fn share(total: u64, k: usize, n: usize) -> u64 {
    total / n as u64 + u64::from((k as u64) < total % n as u64)
}

impl Worker {
    /// A worker for share `k` of the plan.
    pub fn new(k: usize, plan: Arc<Plan>, shared: Arc<Shared>) -> std::io::Result<Worker> {
        let n = plan.threads;
        let dedicated = plan.mode != Mode::Open && plan.connections.is_none();
        let pool_limit = match plan.connections {
            Some(c) => share(c, k, n).max(1) as usize,
            None => share(plan.max_outstanding, k, n).max(1) as usize,
        };
        let slots = (1_000_000_000 / plan.tick_ns).max(1) as usize;
        let sweep_ns = (plan.timeout_ns / 20).clamp(1_000_000, 100_000_000);
        Ok(Worker {
            k,
            poller: Poller::new()?,
            events: vec![sys::empty_event(); MAX_EVENTS],
            conns: Vec::new(),
            free_conns: Vec::new(),
            users: Vec::new(),
            free_users: Vec::new(),
            timers: BinaryHeap::new(),
            dedicated,
            pool_limit,
            open_conns: 0,
            idle: vec![Vec::new(); plan.targets.len()],
            waiting: VecDeque::new(),
            outstanding: 0,
            max_outstanding: share(plan.max_outstanding, k, n).max(1),
            max_sessions: plan
                .max_sessions
                .map_or(u64::MAX, |m| share(m, k, n).max(1)),
            active: 0,
            arrival_rng: Rng::stream(plan.seed, STREAM_ARRIVAL, k as u64),
            choice_rng: Rng::stream(plan.seed, STREAM_CHOICE, k as u64),
            arrival_s: 0.0,
            arrival_j: 0,
            next_seq: 0,
            next_session: 0,
            next_target: k as u32 % plan.base_targets,
            sweep_ns,
            read_buf: vec![0; READ_BUF],
            req_buf: Vec::with_capacity(1024),
            body_buf: Vec::new(),
            records: Vec::new(),
            steady: Steady::new(plan.interactions.len()),
            totals: Totals::default(),
            rolling: histogram(2),
            tick_lag_max: 0,
            tick_lag_sum: 0,
            tick_lag_count: 0,
            lag_ring: vec![0; slots],
            lag_pos: 0,
            machine_prev: None,
            ticks: 0,
            priority: PriorityGuard::raise(Priority::Normal, false),
            draining: false,
            stopped: false,
            plan,
            shared,
        })
    }

    /// Runs the worker's share of the load to the end (or until stopped).
    pub fn run(mut self) {
        sys::tighten_timer_slack();
        // Real time only helps workloads with timers; a closed loop without think time has none.
        let timed = self.plan.think.is_some() || self.plan.mode != Mode::Closed;
        self.priority = PriorityGuard::raise(self.plan.priority, timed);
        self.machine_prev = if self.k == 0 {
            sys::machine_cpu_jiffies()
        } else {
            None
        };
        self.schedule_start();
        let mut busy = false;
        loop {
            self.fire_timers();
            if self.shared.stopping() && !self.stopped {
                self.abort();
            }
            if self.finished() {
                break;
            }
            let n = match self.wait_events(busy) {
                Ok(n) => n,
                Err(e) => {
                    self.shared.fail(format!("epoll_wait failed: {e}"));
                    self.abort();
                    break;
                }
            };
            busy = n > 0;
            for i in 0..n {
                let ev = self.events[i];
                self.on_event(sys::event_token(&ev), sys::event_flags(&ev));
            }
        }
        self.finish();
    }

    /// Waits for readiness or the next timer. After a wake-up that brought events, it first
    /// polls without blocking for about `SPIN_NS`: a response arriving within microseconds
    /// then costs no sleep and wake-up of the thread. At saturation that saves about 15 % of
    /// the CPU per request (measured against nginx), and it never costs more than one
    /// context switch would.
    fn wait_events(&mut self, busy: bool) -> std::io::Result<usize> {
        let now = sys::mono_ns();
        let deadline = self.timers.peek().map(|Reverse((d, _))| *d);
        // Counted polls, not timed ones: a clock read per poll would cost as much as the poll.
        if busy && deadline.is_none_or(|d| d > now + SPIN_NS) {
            for _ in 0..SPIN_POLLS {
                let n = self.poller.wait(&mut self.events, Some(0))?;
                if n > 0 {
                    return Ok(n);
                }
            }
        }
        let timeout = deadline.map(|d| (d - sys::mono_ns()).max(0));
        self.poller.wait(&mut self.events, timeout)
    }

    fn finished(&self) -> bool {
        self.stopped || (self.draining && self.outstanding == 0)
    }

    // ---- start and timers ------------------------------------------------------------------

    fn schedule_start(&mut self) {
        let plan = self.plan.clone();
        self.timers
            .push(Reverse((plan.t0 + plan.tick_ns, key(TICK, 0))));
        self.timers
            .push(Reverse((plan.t0 + self.sweep_ns, key(SWEEP, 0))));
        self.timers.push(Reverse((plan.load_end, key(DRAIN, 0))));
        match plan.mode {
            Mode::Closed => {
                let n = plan.level as u64;
                let mut i = self.k as u64;
                while i < n {
                    let (start, stop) = plan.profile.user_window(i, n);
                    let mut rng = Rng::stream(plan.seed, STREAM_USER, i);
                    let interaction = plan.mix.first(&mut rng);
                    // Without a ramp, a first think time staggers the start (as a stationary
                    // process would); with one, the ramp staggers and users start at once.
                    let think = match &plan.think {
                        Some(d) if plan.profile.ramp_up == 0.0 => d.sample(&mut rng),
                        _ => 0.0,
                    };
                    let session = self.new_session();
                    let slot = self.users.len() as u32;
                    self.users.push(User {
                        rng,
                        state: UserState::Waiting,
                        interaction,
                        session,
                        target: (i % plan.base_targets as u64) as u32,
                        conn: NONE,
                        stop_at: plan.at(stop),
                    });
                    self.active += 1;
                    self.timers
                        .push(Reverse((plan.at(start + think), key(WAKE, slot))));
                    i += plan.threads as u64;
                }
            }
            Mode::Open | Mode::PartlyOpen => self.schedule_arrival(),
        }
    }

    fn schedule_arrival(&mut self) {
        let plan = &self.plan;
        if plan.level <= 0.0 {
            return;
        }
        let threads = plan.threads as f64;
        // Positions in full-load seconds (see `profile`): worker k runs a 1/threads share.
        self.arrival_s = match plan.arrival {
            Arrival::Poisson => self.arrival_s + self.arrival_rng.exp1() * threads / plan.level,
            Arrival::Constant => {
                let j = self.arrival_j * plan.threads as u64 + self.k as u64;
                self.arrival_j += 1;
                (j as f64 + 0.5) / plan.level
            }
        };
        if let Some(t) = plan.profile.inverse(self.arrival_s) {
            let at = plan.at(t);
            self.timers.push(Reverse((at, key(ARRIVAL, 0))));
        }
    }

    fn fire_timers(&mut self) {
        while let Some(&Reverse((due, k))) = self.timers.peek() {
            let now = sys::mono_ns();
            if due > now {
                return;
            }
            self.timers.pop();
            self.note_lag(due, now - due);
            match k >> KIND_SHIFT {
                WAKE => self.wake(k as u32, due),
                ARRIVAL => self.arrive(due),
                TICK => self.tick(due),
                SWEEP => self.sweep(due),
                DRAIN => self.drain(),
                HARD_STOP => self.abort(),
                _ => {}
            }
            if self.stopped {
                return;
            }
        }
    }

    fn note_lag(&mut self, due: i64, lag: i64) {
        self.tick_lag_max = self.tick_lag_max.max(lag);
        self.tick_lag_sum += lag;
        self.tick_lag_count += 1;
        if self.plan.phase(due) == Phase::Steady {
            record_ns(&mut self.steady.timer_lag, lag);
        }
    }

    // ---- users, sessions and arrivals -----------------------------------------------------

    fn new_session(&mut self) -> u64 {
        let s = self.next_session * self.plan.threads as u64 + self.k as u64;
        self.next_session += 1;
        s
    }

    fn next_id(&mut self) -> u64 {
        let id = self.next_seq * self.plan.threads as u64 + self.k as u64 + 1;
        self.next_seq += 1;
        id
    }

    fn wake(&mut self, u: u32, due: i64) {
        let user = &self.users[u as usize];
        if user.state != UserState::Waiting {
            return;
        }
        if self.draining || due >= user.stop_at {
            self.user_done(u);
        } else {
            self.user_issue(u, due);
        }
    }

    fn user_issue(&mut self, u: u32, intended: i64) {
        let id = self.next_id();
        let user = &mut self.users[u as usize];
        user.state = UserState::Busy;
        let p = Pending {
            id,
            intended,
            actual: 0,
            user: u,
            session: user.session,
            interaction: user.interaction,
            target: self.plan.target_of(user.interaction, user.target),
            retried: false,
        };
        self.outstanding += 1;
        self.totals.sent += 1;
        self.dispatch(p);
    }

    fn user_done(&mut self, u: u32) {
        let user = &mut self.users[u as usize];
        if matches!(user.state, UserState::Done | UserState::Free) {
            return;
        }
        user.state = if self.plan.mode == Mode::PartlyOpen {
            UserState::Free
        } else {
            UserState::Done
        };
        let c = user.conn;
        self.active -= 1;
        if c != NONE {
            self.drop_conn(c);
        }
        if self.plan.mode == Mode::PartlyOpen {
            self.free_users.push(u);
        }
    }

    /// The user's response (or error) arrived at `now`: think, then the next request.
    fn user_after(&mut self, u: u32, now: i64, error: ErrorClass) {
        if self.stopped || self.draining {
            self.users[u as usize].state = UserState::Waiting;
            self.user_done(u);
            return;
        }
        // Field borrows (not a clone of the plan's Arc): this runs once per request.
        let (next, mode, policy) = {
            let plan = &*self.plan;
            let user = &mut self.users[u as usize];
            user.state = UserState::Waiting;
            let next = plan.mix.next(user.interaction, &mut user.rng);
            (next, plan.mode, plan.policy)
        };
        match next {
            Some(i) => self.users[u as usize].interaction = i,
            None => {
                let c = self.users[u as usize].conn;
                if mode == Mode::PartlyOpen {
                    self.user_done(u);
                    return;
                }
                if policy == ConnectionPolicy::PerSession && c != NONE {
                    self.drop_conn(c);
                }
                let session = self.new_session();
                let plan = &*self.plan;
                let user = &mut self.users[u as usize];
                user.session = session;
                user.interaction = plan.mix.first(&mut user.rng);
            }
        }
        let plan = &*self.plan;
        let user = &mut self.users[u as usize];
        let mut think = plan
            .think
            .as_ref()
            .map_or(0, |d| secs_to_ns(d.sample(&mut user.rng)));
        if error == ErrorClass::Connect {
            think = think.max(CONNECT_BACKOFF_NS);
        }
        let due = now + think;
        if due >= user.stop_at {
            // Thinking past its stop time: the user stays (with its connection) until then.
            let stop = user.stop_at;
            self.timers.push(Reverse((stop, key(WAKE, u))));
        } else if think == 0 && matches!(error, ErrorClass::None | ErrorClass::Http) {
            self.user_issue(u, now);
        } else {
            // Through the heap even when due now, so a failing server cannot recurse.
            self.timers.push(Reverse((due, key(WAKE, u))));
        }
    }

    fn arrive(&mut self, due: i64) {
        if self.draining {
            return;
        }
        let plan = self.plan.clone();
        match plan.mode {
            Mode::Open => {
                let i = plan.mix.independent(&mut self.choice_rng);
                let target = plan.target_of(i, self.next_target);
                self.next_target = (self.next_target + 1) % plan.base_targets;
                let p = Pending {
                    id: self.next_id(),
                    intended: due,
                    actual: 0,
                    user: NONE,
                    session: 0,
                    interaction: i,
                    target,
                    retried: false,
                };
                self.outstanding += 1;
                self.totals.sent += 1;
                if self.outstanding > self.max_outstanding {
                    self.finish_request(p, sys::mono_ns(), 0, ErrorClass::NotSent, 0);
                } else {
                    self.dispatch(p);
                }
            }
            Mode::PartlyOpen => {
                let in_window = plan.phase(due) == Phase::Steady;
                if self.active >= self.max_sessions {
                    self.totals.sessions_rejected += 1;
                    if in_window {
                        self.steady.sessions_rejected += 1;
                    }
                } else {
                    self.totals.sessions_started += 1;
                    if in_window {
                        self.steady.sessions_started += 1;
                    }
                    let session = self.new_session();
                    let mut rng = Rng::stream(plan.seed, STREAM_SESSION, session);
                    let interaction = plan.mix.first(&mut rng);
                    let user = User {
                        rng,
                        state: UserState::Waiting,
                        interaction,
                        session,
                        target: (session % plan.base_targets as u64) as u32,
                        conn: NONE,
                        stop_at: plan.load_end,
                    };
                    let u = match self.free_users.pop() {
                        Some(u) => {
                            self.users[u as usize] = user;
                            u
                        }
                        None => {
                            self.users.push(user);
                            (self.users.len() - 1) as u32
                        }
                    };
                    self.active += 1;
                    self.user_issue(u, due);
                }
            }
            Mode::Closed => {}
        }
        self.schedule_arrival();
    }

    // ---- connections -----------------------------------------------------------------------

    /// Sends `p` on a suitable connection, opening one if needed, or queues it.
    fn dispatch(&mut self, p: Pending) {
        if self.dedicated && p.user != NONE {
            let c = self.users[p.user as usize].conn;
            if c != NONE {
                let conn = &self.conns[c as usize];
                if conn.state == ConnState::Idle && conn.target == p.target {
                    self.send_on(c, p);
                    return;
                }
                self.drop_conn(c);
            }
            self.connect(p);
            return;
        }
        if let Some(c) = self.idle[p.target as usize].pop() {
            self.send_on(c, p);
        } else if self.open_conns < self.pool_limit {
            self.connect(p);
        } else if let Some(t) = self.idle.iter().position(|v| !v.is_empty()) {
            // Pool full but a connection to another target is idle: move it.
            let c = self.idle[t].pop().expect("non-empty");
            self.drop_conn(c);
            self.connect(p);
        } else {
            self.waiting.push_back(p);
        }
    }

    fn alloc_conn(&mut self) -> u32 {
        match self.free_conns.pop() {
            Some(c) => c,
            None => {
                self.conns.push(Conn::new());
                (self.conns.len() - 1) as u32
            }
        }
    }

    fn connect(&mut self, mut p: Pending) {
        let now = sys::mono_ns();
        if p.actual == 0 {
            p.actual = now;
        }
        let addr = self.plan.targets[p.target as usize].addr;
        let (fd, in_progress) = match sys::connect(&addr) {
            Ok(x) => x,
            Err(_) => {
                self.finish_request(p, now, 0, ErrorClass::Connect, 0);
                return;
            }
        };
        let c = self.alloc_conn();
        let gen = self.conns[c as usize].gen;
        if self
            .poller
            .add(fd.as_raw_fd(), token(c, gen), READ | WRITE | EDGE)
            .is_err()
        {
            self.free_conns.push(c);
            self.finish_request(p, now, 0, ErrorClass::Connect, 0);
            return;
        }
        let owner = if self.dedicated { p.user } else { NONE };
        let conn = &mut self.conns[c as usize];
        conn.fd = Some(fd);
        conn.state = ConnState::Connecting;
        conn.target = p.target;
        conn.owner = owner;
        conn.reused = false;
        conn.req = Some(p);
        conn.deadline = now + self.plan.timeout_ns;
        conn.unsent.clear();
        if owner != NONE {
            self.users[owner as usize].conn = c;
        }
        self.open_conns += 1;
        self.totals.connects += 1;
        self.totals.max_connections = self.totals.max_connections.max(self.open_conns as u64);
        if !in_progress {
            self.on_connected(c);
        }
    }

    fn on_connected(&mut self, c: u32) {
        // From now on only readability is watched: with writability too, every request would
        // bring a spurious EPOLLOUT edge when the peer's ACK frees send-buffer space.
        self.set_write_interest(c, false);
        self.conns[c as usize].state = ConnState::Busy;
        self.start_write(c);
    }

    /// Watches `c` for writability (while a request is partly written) or not.
    fn set_write_interest(&mut self, c: u32, on: bool) {
        let conn = &self.conns[c as usize];
        let fd = conn.fd.as_ref().expect("open").as_raw_fd();
        let flags = if on { READ | WRITE | EDGE } else { READ | EDGE };
        // A failure leaves the old interest; the timeout sweep still ends a stuck request.
        let _ = self.poller.modify(fd, token(c, conn.gen), flags);
    }

    fn send_on(&mut self, c: u32, mut p: Pending) {
        let now = sys::mono_ns();
        if p.actual == 0 {
            p.actual = now;
        }
        let conn = &mut self.conns[c as usize];
        conn.state = ConnState::Busy;
        conn.req = Some(p);
        conn.deadline = now + self.plan.timeout_ns;
        self.start_write(c);
    }

    fn start_write(&mut self, c: u32) {
        let Worker {
            plan,
            conns,
            users,
            choice_rng,
            req_buf,
            body_buf,
            ..
        } = self;
        let conn = &mut conns[c as usize];
        let p = conn.req.expect("a request is attached before writing");
        let rng = if p.user != NONE {
            &mut users[p.user as usize].rng
        } else {
            choice_rng
        };
        plan.render(&p, rng, req_buf, body_buf);
        conn.parser.begin(plan.is_head(p.interaction));
        let fd = conn.fd.as_ref().expect("open").as_raw_fd();
        match sys::write(fd, req_buf) {
            Ok(Io::Done(n)) if n == req_buf.len() => {}
            Ok(Io::Done(n)) => {
                conn.unsent.extend_from_slice(&req_buf[n..]);
                self.set_write_interest(c, true);
            }
            Ok(Io::WouldBlock) => {
                conn.unsent.extend_from_slice(req_buf);
                self.set_write_interest(c, true);
            }
            Err(_) => self.io_failed(c, ErrorClass::Closed),
        }
    }

    fn flush(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        let fd = conn.fd.as_ref().expect("open").as_raw_fd();
        match sys::write(fd, &conn.unsent) {
            Ok(Io::Done(n)) => {
                conn.unsent.drain(..n);
                if conn.unsent.is_empty() {
                    self.set_write_interest(c, false);
                }
            }
            Ok(Io::WouldBlock) => {}
            Err(_) => self.io_failed(c, ErrorClass::Closed),
        }
    }

    fn on_event(&mut self, tok: u64, flags: u32) {
        let c = (tok >> 32) as u32;
        let gen = tok as u32;
        let Some(conn) = self.conns.get(c as usize) else {
            return;
        };
        if conn.gen != gen || conn.fd.is_none() {
            return; // an event for a connection closed earlier in this batch
        }
        if conn.state == ConnState::Connecting {
            if flags & (WRITE | READ) != 0 || sys::is_error(flags) {
                let fd = conn.fd.as_ref().expect("open").as_raw_fd();
                match sys::take_socket_error(fd) {
                    Ok(()) => self.on_connected(c),
                    Err(_) => self.io_failed(c, ErrorClass::Connect),
                }
            }
            return;
        }
        if flags & WRITE != 0 && !conn.unsent.is_empty() {
            self.flush(c);
            if self.conns[c as usize].gen != gen {
                return;
            }
        }
        if flags & READ != 0 || sys::is_error(flags) {
            self.on_readable(c);
        }
    }

    fn on_readable(&mut self, c: u32) {
        loop {
            let conn = &mut self.conns[c as usize];
            let fd = conn.fd.as_ref().expect("open").as_raw_fd();
            match sys::read(fd, &mut self.read_buf) {
                Ok(Io::Done(0)) => {
                    if conn.req.is_none() {
                        self.drop_conn(c); // the server closed an idle connection
                    } else if let Feed::Done { .. } = conn.parser.eof() {
                        self.complete(c, true);
                    } else {
                        self.io_failed(c, ErrorClass::Closed);
                    }
                    return;
                }
                Ok(Io::Done(n)) => {
                    if conn.req.is_none() {
                        self.drop_conn(c); // bytes nobody asked for: do not reuse
                        return;
                    }
                    match conn.parser.feed(&self.read_buf[..n]) {
                        Feed::More => {
                            // A short read drained the socket; edge-triggered epoll will
                            // report the next bytes.
                            if n < self.read_buf.len() {
                                return;
                            }
                        }
                        Feed::Done { .. } => {
                            self.complete(c, false);
                            return;
                        }
                        Feed::Invalid(_) => {
                            self.io_failed(c, ErrorClass::Protocol);
                            return;
                        }
                    }
                }
                Ok(Io::WouldBlock) => return,
                Err(_) => {
                    self.io_failed(c, ErrorClass::Closed);
                    return;
                }
            }
        }
    }

    /// The response on `c` is complete.
    fn complete(&mut self, c: u32, at_eof: bool) {
        let now = sys::mono_ns();
        let conn = &mut self.conns[c as usize];
        let p = conn.req.take().expect("a request is in flight");
        let status = conn.parser.status;
        let bytes = conn.parser.bytes;
        let close = at_eof || conn.parser.close || self.plan.policy == ConnectionPolicy::PerRequest;
        conn.reused = true;
        if close {
            self.drop_conn(c);
        } else {
            self.release_conn(c);
        }
        let error = if status >= 400 {
            ErrorClass::Http
        } else {
            ErrorClass::None
        };
        self.finish_request(p, now, status, error, bytes);
    }

    /// `c` failed with its request (if any) in flight.
    fn io_failed(&mut self, c: u32, class: ErrorClass) {
        let now = sys::mono_ns();
        let conn = &mut self.conns[c as usize];
        let req = conn.req.take();
        let bytes = conn.parser.bytes;
        // A kept-alive connection the server closed just as we reused it: retry once on a
        // fresh connection, as browsers do, since the server never saw the request.
        let retry = class == ErrorClass::Closed
            && conn.reused
            && !conn.parser.started()
            && req.is_some_and(|p| !p.retried);
        self.drop_conn(c);
        if let Some(mut p) = req {
            if retry {
                p.retried = true;
                self.totals.retries += 1;
                self.dispatch(p);
            } else {
                self.finish_request(p, now, 0, class, bytes);
            }
        }
    }

    /// Returns an idle connection to its owner or the pool (or a waiting request).
    fn release_conn(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        conn.state = ConnState::Idle;
        conn.unsent.clear();
        if self.dedicated {
            return;
        }
        let target = conn.target;
        match self.waiting.pop_front() {
            Some(p) if p.target == target => self.send_on(c, p),
            Some(p) => {
                self.drop_conn(c);
                self.connect(p);
            }
            None => self.idle[target as usize].push(c),
        }
    }

    /// Closes `c` (its request, if any, must have been taken).
    fn drop_conn(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        if conn.state == ConnState::Free {
            return;
        }
        let was_idle = conn.state == ConnState::Idle;
        conn.fd = None; // closing the socket also removes it from epoll
        conn.gen = conn.gen.wrapping_add(1);
        conn.state = ConnState::Free;
        conn.unsent = Vec::new();
        let owner = conn.owner;
        let target = conn.target;
        conn.owner = NONE;
        if owner != NONE && self.users[owner as usize].conn == c {
            self.users[owner as usize].conn = NONE;
        }
        if was_idle && !self.dedicated {
            let idle = &mut self.idle[target as usize];
            if let Some(pos) = idle.iter().position(|&x| x == c) {
                idle.swap_remove(pos);
            }
        }
        self.open_conns -= 1;
        self.free_conns.push(c);
        if !self.dedicated {
            while self.open_conns < self.pool_limit {
                match self.waiting.pop_front() {
                    Some(p) => self.connect(p),
                    None => break,
                }
            }
        }
    }

    // ---- accounting ------------------------------------------------------------------------

    fn finish_request(&mut self, p: Pending, end: i64, status: u16, error: ErrorClass, bytes: u64) {
        let plan = &self.plan;
        self.outstanding -= 1;
        let got_response = matches!(error, ErrorClass::None | ErrorClass::Http);
        // Timeouts keep their latency (at least the timeout): dropping them would hide
        // exactly the stalls a bottleneck study looks for.
        let has_latency = got_response || error == ErrorClass::Timeout;
        let counts_as_error = !matches!(error, ErrorClass::None | ErrorClass::Aborted);
        match error {
            ErrorClass::Aborted => self.totals.aborted += 1,
            ErrorClass::NotSent => self.totals.not_sent += 1,
            _ => {}
        }
        if got_response {
            self.totals.completed += 1;
        }
        if counts_as_error {
            self.totals.errors += 1;
        }
        if has_latency {
            record_ns(&mut self.rolling, end - p.intended);
        }
        let phase = plan.phase(p.intended);
        if phase == Phase::Steady && error != ErrorClass::Aborted {
            let st = self.steady.interaction(p.interaction);
            st.requests += 1;
            st.bytes += bytes;
            if counts_as_error {
                st.errors += 1;
            }
            if has_latency {
                let actual = if p.actual == 0 { end } else { p.actual };
                record_ns(&mut st.corrected, end - p.intended);
                record_ns(&mut st.uncorrected, end - actual);
                st.sum_ns += (end - p.intended).max(0) as u128;
                st.sum_uncorrected_ns += (end - actual).max(0) as u128;
            }
            if counts_as_error {
                self.steady.errors_by_class[error as usize] += 1;
            }
            if p.actual != 0 {
                let lag = p.actual - p.intended;
                record_ns(&mut self.steady.send_lag, lag);
                if lag > plan.late_ns {
                    self.steady.late += 1;
                }
            }
        }
        if got_response && end >= plan.steady_start && end < plan.steady_end {
            self.steady.responses_in_window += 1;
            if error == ErrorClass::None {
                self.steady.interaction(p.interaction).completed += 1;
            }
        }
        if plan.keep_records {
            self.records.push(Record {
                id: p.id,
                intended: p.intended,
                actual: p.actual,
                end,
                bytes,
                session: p.session,
                user: p.user,
                interaction: p.interaction,
                status,
                error,
                phase: phase as u8,
            });
        }
        if p.user != NONE {
            self.user_after(p.user, end, error);
        }
    }

    fn tick(&mut self, due: i64) {
        let plan = self.plan.clone();
        let now = sys::mono_ns();
        let machine_busy = if self.k == 0 {
            let cur = sys::machine_cpu_jiffies();
            let frac = match (self.machine_prev, cur) {
                (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => (b1 - b0) as f64 / (t1 - t0) as f64,
                _ => f64::NAN,
            };
            if cur.is_some() {
                self.machine_prev = cur;
            }
            frac
        } else {
            f64::NAN
        };
        let cpu = sys::thread_cpu_ns();
        self.ticks += 1;
        let sample = Sample {
            t: now,
            tick: self.ticks,
            worker: self.k as u16,
            cpu_ns: cpu,
            lag_max_ns: self.tick_lag_max,
            lag_sum_ns: self.tick_lag_sum,
            lag_count: self.tick_lag_count,
            sent: self.totals.sent,
            completed: self.totals.completed,
            errors: self.totals.errors,
            outstanding: self.outstanding as u32,
            active: self.active as u32,
            connections: self.open_conns as u32,
            machine_busy,
        };
        self.priority.check(now);
        self.lag_ring[self.lag_pos] = self.tick_lag_max;
        self.lag_pos = (self.lag_pos + 1) % self.lag_ring.len();
        self.tick_lag_max = 0;
        self.tick_lag_sum = 0;
        self.tick_lag_count = 0;
        let me = &self.shared.workers[self.k];
        let live = &me.live;
        live.sent.store(self.totals.sent, Relaxed);
        live.completed.store(self.totals.completed, Relaxed);
        live.errors.store(self.totals.errors, Relaxed);
        live.outstanding.store(self.outstanding, Relaxed);
        live.active.store(self.active, Relaxed);
        live.connections.store(self.open_conns as u64, Relaxed);
        live.cpu_ns.store(cpu, Relaxed);
        live.lag_max_ns
            .store(self.lag_ring.iter().copied().max().unwrap_or(0), Relaxed);
        live.late.store(self.steady.late, Relaxed);
        live.not_sent.store(self.totals.not_sent, Relaxed);
        {
            let mut out = lock(&me.outbox);
            out.samples.push(sample);
            if !self.records.is_empty() {
                let capacity = self.records.len() + self.records.len() / 4;
                let full = std::mem::replace(&mut self.records, Vec::with_capacity(capacity));
                out.records.push(full);
            }
        }
        {
            let mut r = lock(&me.rolling);
            let pos = r.pos;
            std::mem::swap(&mut r.slots[pos], &mut self.rolling);
            r.pos = (pos + 1) % r.slots.len();
        }
        self.rolling.reset();
        if !self.finished() {
            self.timers
                .push(Reverse((due + plan.tick_ns, key(TICK, 0))));
        }
    }

    /// Fails requests past their deadline and queued requests that waited too long.
    fn sweep(&mut self, due: i64) {
        let now = sys::mono_ns();
        for c in 0..self.conns.len() {
            let conn = &self.conns[c];
            if conn.req.is_some() && conn.deadline <= now {
                let class = if conn.state == ConnState::Connecting {
                    ErrorClass::Connect
                } else {
                    ErrorClass::Timeout
                };
                self.io_failed(c as u32, class);
            }
        }
        let timeout = self.plan.timeout_ns;
        while let Some(p) = self.waiting.front() {
            if p.intended + timeout > now {
                break;
            }
            let p = self.waiting.pop_front().expect("non-empty");
            self.finish_request(p, now, 0, ErrorClass::NotSent, 0);
        }
        self.timers
            .push(Reverse((due + self.sweep_ns, key(SWEEP, 0))));
    }

    /// The load is over: no new requests; wait for those in flight.
    fn drain(&mut self) {
        self.draining = true;
        let keep: Vec<_> = self
            .timers
            .drain()
            .filter(|Reverse((_, k))| matches!(k >> KIND_SHIFT, TICK | SWEEP))
            .collect();
        self.timers = keep.into();
        for u in 0..self.users.len() as u32 {
            if self.users[u as usize].state == UserState::Waiting {
                self.user_done(u);
            }
        }
        let deadline = self.plan.load_end + self.plan.timeout_ns + 2 * self.sweep_ns + 100_000_000;
        self.timers.push(Reverse((deadline, key(HARD_STOP, 0))));
    }

    /// Stops at once: requests in flight or queued are recorded as aborted.
    fn abort(&mut self) {
        if self.stopped {
            return;
        }
        self.draining = true;
        let now = sys::mono_ns();
        while let Some(p) = self.waiting.pop_front() {
            self.finish_request(p, now, 0, ErrorClass::Aborted, 0);
        }
        for c in 0..self.conns.len() as u32 {
            let req = self.conns[c as usize].req.take();
            let bytes = self.conns[c as usize].parser.bytes;
            self.drop_conn(c);
            if let Some(p) = req {
                self.finish_request(p, now, 0, ErrorClass::Aborted, bytes);
            }
        }
        for u in 0..self.users.len() as u32 {
            if self.users[u as usize].state == UserState::Waiting {
                self.user_done(u);
            }
        }
        self.timers.clear();
        self.stopped = true;
    }

    fn finish(mut self) {
        // A last sample so the time series reaches the end of the run.
        let due = sys::mono_ns().max(self.plan.t0);
        self.tick(due);
        for c in 0..self.conns.len() as u32 {
            self.conns[c as usize].req = None;
            self.drop_conn(c);
        }
        self.totals.cpu_ns = sys::thread_cpu_ns();
        let me = &self.shared.workers[self.k];
        *lock(&me.result) = Some(WorkerResult {
            steady: std::mem::replace(&mut self.steady, Steady::new(0)),
            totals: self.totals,
            priority: self.priority.current,
            demoted: self.priority.demoted,
        });
    }
}
