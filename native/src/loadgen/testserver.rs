//! An HTTP/1.1 server with known, controllable latency, for testing and calibrating
//! the load generator (and any other client).
//!
//! Design: the same epoll-plus-deadline-heap loop as the generator, so a response
//! scheduled `d` after its request arrived leaves within microseconds of `d`. Each
//! response's delay is drawn from a distribution (or set per request with the query
//! parameter `delay_ms`), and `stall(s)` freezes the server: every response due
//! during the stall leaves when it ends, as after a garbage-collection pause. With
//! `record`, the server logs every request's `X-Request-Id`, arrival and departure
//! time (CLOCK_MONOTONIC), which is the ground truth the tests compare the client's
//! measurements with.
//!
//! Query parameters: `delay_ms` (overrides the distribution), `size` (body bytes),
//! `status` (response status), `close=1` (close after responding), `chunked=1`
//! (chunked body), `abort=1` (close the connection instead of responding).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::Write;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use serde::Deserialize;
use serde_json::Value;

use crate::des::dist::Dist;
use crate::des::rng::Rng;
use crate::error::Result;

use super::config::{bad, Priority};
use super::http::parse_request;
use super::priority::PriorityGuard;
use super::shared::lock;
use super::sys::{self, Io, Poller, READ, WRITE};

const LISTENER: u64 = u64::MAX;
const MAX_WAIT_NS: i64 = 50_000_000;

/// Configuration of a test server.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on (`127.0.0.1:0` picks a free port).
    pub bind: String,
    /// Response delay law in the simulator's format (`None`: respond at once).
    #[serde(default)]
    pub delay: Option<Value>,
    /// Body bytes of each response (unless `size` is given in the query).
    #[serde(default = "default_body")]
    pub body_bytes: usize,
    #[serde(default = "one")]
    pub threads: usize,
    #[serde(default)]
    pub seed: u64,
    /// Keep a log of every request (id, arrival, departure).
    #[serde(default)]
    pub record: bool,
    /// Scheduling priority of its threads (real time by default, so that delays are kept on a
    /// busy machine; see `priority`).
    #[serde(default = "realtime")]
    pub priority: Priority,
}

fn realtime() -> Priority {
    Priority::Realtime
}

fn default_body() -> usize {
    64
}

fn one() -> usize {
    1
}

/// One request as the server saw it. Times are CLOCK_MONOTONIC ns.
#[derive(Debug, Clone)]
pub struct LogEntry {
    pub request_id: String,
    /// When the whole request had been read.
    pub received: i64,
    /// When the response was handed to the kernel.
    pub sent: i64,
    /// The delay that was asked for (ns), before any stall.
    pub delay_ns: i64,
    pub status: u16,
}

#[derive(Debug)]
struct ServerShared {
    stop: AtomicBool,
    stall_until: AtomicI64,
    delay: RwLock<Option<Dist>>,
    requests: AtomicU64,
    connections: AtomicU64,
    log: Mutex<Vec<LogEntry>>,
    record: bool,
}

/// A running test server; dropping it stops it.
pub struct TestServer {
    addr: SocketAddr,
    shared: Arc<ServerShared>,
    handles: Mutex<Vec<JoinHandle<()>>>,
}

fn parse_delay(v: &Option<Value>) -> Result<Option<Dist>> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => Ok(Some(Dist::parse(v, "delay")?)),
    }
}

impl TestServer {
    /// Starts the server from a JSON configuration.
    pub fn start_json(text: &str) -> Result<TestServer> {
        let cfg: ServerConfig = serde_json::from_str(text)
            .map_err(|e| bad("<server config>", format!("not a valid configuration: {e}")))?;
        TestServer::start(&cfg)
    }

    /// Starts the server.
    pub fn start(cfg: &ServerConfig) -> Result<TestServer> {
        let bind: SocketAddr = cfg
            .bind
            .parse()
            .map_err(|_| bad("bind", format!("not ip:port: {}", cfg.bind)))?;
        if cfg.threads == 0 || cfg.threads > 64 {
            return Err(bad(
                "threads",
                format!("must be in 1..=64, got {}", cfg.threads),
            ));
        }
        let delay = parse_delay(&cfg.delay)?;
        sys::raise_open_files_limit();
        let (listener, addr) = sys::listen(&bind, 4096)
            .map_err(|e| bad("bind", format!("cannot listen on {bind}: {e}")))?;
        let listener = Arc::new(listener);
        let shared = Arc::new(ServerShared {
            stop: AtomicBool::new(false),
            stall_until: AtomicI64::new(0),
            delay: RwLock::new(delay),
            requests: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            log: Mutex::new(Vec::new()),
            record: cfg.record,
        });
        let mut handles = Vec::new();
        for k in 0..cfg.threads {
            let (l, s) = (listener.clone(), shared.clone());
            let body = cfg.body_bytes;
            let seed = cfg.seed;
            let priority = cfg.priority;
            let h = std::thread::Builder::new()
                .name(format!("tierscope-testserver-{k}"))
                .spawn(move || {
                    if let Ok(mut loop_) = ServerLoop::new(k, l, s, body, seed) {
                        loop_.run(priority);
                    }
                })
                .map_err(|e| bad("threads", format!("cannot start a thread: {e}")))?;
            handles.push(h);
        }
        Ok(TestServer {
            addr,
            shared,
            handles: Mutex::new(handles),
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Replaces the delay law (JSON in the simulator's format, or null).
    pub fn set_delay_json(&self, text: &str) -> Result<()> {
        let v: Value =
            serde_json::from_str(text).map_err(|e| bad("delay", format!("not JSON: {e}")))?;
        let d = parse_delay(&Some(v))?;
        *self.shared.delay.write().unwrap_or_else(|e| e.into_inner()) = d;
        Ok(())
    }

    /// Freezes responses for `seconds` from now; returns the stall's (start, end) in ns.
    pub fn stall(&self, seconds: f64) -> (i64, i64) {
        let now = sys::mono_ns();
        let end = now + (seconds.max(0.0) * 1e9) as i64;
        self.shared.stall_until.fetch_max(end, Relaxed);
        (now, end)
    }

    /// Requests answered so far.
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Relaxed)
    }

    /// Connections currently open.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Relaxed)
    }

    /// The log entries since the last call (empty unless `record`).
    pub fn take_log(&self) -> Vec<LogEntry> {
        std::mem::take(&mut *lock(&self.shared.log))
    }

    /// Stops the server and closes every connection.
    pub fn stop(&self) {
        self.shared.stop.store(true, Relaxed);
        for h in lock(&self.handles).drain(..) {
            let _ = h.join();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

#[derive(Debug)]
struct Answer {
    received: i64,
    delay_ns: i64,
    request_id: String,
    status: u16,
    size: usize,
    close: bool,
    chunked: bool,
    /// Close the connection instead of answering.
    abort: bool,
    head_method: bool,
}

#[derive(Debug, Default)]
struct SConn {
    fd: Option<OwnedFd>,
    gen: u32,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    out_off: usize,
    /// A request is being delayed (its answer is in the heap).
    waiting: Option<Answer>,
    close_after: bool,
    want_write: bool,
}

struct ServerLoop {
    listener: Arc<OwnedFd>,
    shared: Arc<ServerShared>,
    poller: Poller,
    conns: Vec<SConn>,
    free: Vec<u32>,
    timers: BinaryHeap<Reverse<(i64, u32, u32)>>,
    rng: Rng,
    body_bytes: usize,
    buf: Vec<u8>,
}

fn query_param<'a>(target: &'a str, name: &str) -> Option<&'a str> {
    let q = target.split_once('?')?.1;
    q.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == name).then_some(v)
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

impl ServerLoop {
    fn new(
        k: usize,
        listener: Arc<OwnedFd>,
        shared: Arc<ServerShared>,
        body_bytes: usize,
        seed: u64,
    ) -> std::io::Result<ServerLoop> {
        let poller = Poller::new()?;
        poller.add(
            listener.as_raw_fd(),
            LISTENER,
            libc::EPOLLIN as u32 | libc::EPOLLEXCLUSIVE as u32,
        )?;
        Ok(ServerLoop {
            listener,
            shared,
            poller,
            conns: Vec::new(),
            free: Vec::new(),
            timers: BinaryHeap::new(),
            rng: Rng::stream(seed, 0x7365_7276, k as u64),
            body_bytes,
            buf: vec![0; 64 * 1024],
        })
    }

    fn run(&mut self, priority: Priority) {
        sys::tighten_timer_slack();
        let mut guard = PriorityGuard::raise(priority, true);
        let mut events = vec![sys::empty_event(); 512];
        while !self.shared.stop.load(Relaxed) {
            self.fire_timers();
            let now = sys::mono_ns();
            guard.check(now);
            let timeout = self
                .timers
                .peek()
                .map_or(MAX_WAIT_NS, |Reverse((d, _, _))| {
                    (d - now).clamp(0, MAX_WAIT_NS)
                });
            let n = match self.poller.wait(&mut events, Some(timeout)) {
                Ok(n) => n,
                Err(_) => break,
            };
            for ev in events.iter().take(n) {
                let tok = sys::event_token(ev);
                if tok == LISTENER {
                    self.accept_all();
                } else {
                    self.on_event(tok, sys::event_flags(ev));
                }
            }
        }
        for c in 0..self.conns.len() {
            self.close(c as u32);
        }
    }

    fn accept_all(&mut self) {
        while let Ok(Some(fd)) = sys::accept(self.listener.as_raw_fd()) {
            let c = match self.free.pop() {
                Some(c) => c,
                None => {
                    self.conns.push(SConn::default());
                    (self.conns.len() - 1) as u32
                }
            };
            let conn = &mut self.conns[c as usize];
            let tok = ((c as u64) << 32) | conn.gen as u64;
            if self.poller.add(fd.as_raw_fd(), tok, READ).is_err() {
                self.free.push(c);
                continue;
            }
            conn.fd = Some(fd);
            conn.inbuf.clear();
            conn.out.clear();
            conn.out_off = 0;
            conn.waiting = None;
            conn.close_after = false;
            conn.want_write = false;
            self.shared.connections.fetch_add(1, Relaxed);
        }
    }

    fn close(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        if conn.fd.take().is_some() {
            conn.gen = conn.gen.wrapping_add(1);
            conn.waiting = None;
            conn.inbuf = Vec::new();
            conn.out = Vec::new();
            self.free.push(c);
            self.shared.connections.fetch_sub(1, Relaxed);
        }
    }

    fn on_event(&mut self, tok: u64, flags: u32) {
        let c = (tok >> 32) as u32;
        let gen = tok as u32;
        match self.conns.get(c as usize) {
            Some(conn) if conn.gen == gen && conn.fd.is_some() => {}
            _ => return,
        }
        if flags & WRITE != 0 {
            self.write_out(c);
        }
        if self.conns[c as usize].gen == gen && (flags & READ != 0 || sys::is_error(flags)) {
            self.read_in(c);
        }
    }

    fn read_in(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        let fd = conn.fd.as_ref().expect("open").as_raw_fd();
        loop {
            match sys::read(fd, &mut self.buf) {
                Ok(Io::Done(0)) | Err(_) => {
                    self.close(c);
                    return;
                }
                Ok(Io::Done(n)) => {
                    conn.inbuf.extend_from_slice(&self.buf[..n]);
                    if n < self.buf.len() {
                        break;
                    }
                }
                Ok(Io::WouldBlock) => break,
            }
        }
        self.next_request(c);
    }

    /// Parses the next complete request on `c` (if idle) and schedules its answer.
    fn next_request(&mut self, c: u32) {
        let now = sys::mono_ns();
        let conn = &mut self.conns[c as usize];
        if conn.waiting.is_some() || conn.out_off < conn.out.len() || conn.fd.is_none() {
            return;
        }
        let head = match parse_request(&conn.inbuf) {
            Ok(Some(h)) => h,
            Ok(None) => return,
            Err(_) => {
                self.close(c);
                return;
            }
        };
        let total = head.head_len + head.body_len as usize;
        if conn.inbuf.len() < total {
            return;
        }
        conn.inbuf.drain(..total);
        let t = head.target.as_str();
        let delay_ns = match query_param(t, "delay_ms").and_then(|v| v.parse::<f64>().ok()) {
            Some(ms) => (ms.max(0.0) * 1e6) as i64,
            None => match &*self.shared.delay.read().unwrap_or_else(|e| e.into_inner()) {
                Some(d) => (d.sample(&mut self.rng) * 1e9) as i64,
                None => 0,
            },
        };
        let answer = Answer {
            received: now,
            delay_ns,
            request_id: head.request_id.unwrap_or_default(),
            status: query_param(t, "status")
                .and_then(|v| v.parse().ok())
                .filter(|s| (100..=999).contains(s))
                .unwrap_or(200),
            size: query_param(t, "size")
                .and_then(|v| v.parse().ok())
                .unwrap_or(self.body_bytes),
            close: head.close || query_param(t, "close") == Some("1"),
            chunked: query_param(t, "chunked") == Some("1"),
            abort: query_param(t, "abort") == Some("1"),
            head_method: head.head_method,
        };
        let due = now + delay_ns;
        conn.waiting = Some(answer);
        if due <= now && self.shared.stall_until.load(Relaxed) <= now {
            self.respond(c);
        } else {
            self.timers.push(Reverse((due, c, conn.gen)));
        }
    }

    fn fire_timers(&mut self) {
        while let Some(&Reverse((due, c, gen))) = self.timers.peek() {
            let now = sys::mono_ns();
            if due > now {
                return;
            }
            self.timers.pop();
            let conn = &self.conns[c as usize];
            if conn.gen != gen || conn.waiting.is_none() {
                continue;
            }
            let stall = self.shared.stall_until.load(Relaxed);
            if stall > now {
                self.timers.push(Reverse((stall, c, gen)));
                continue;
            }
            self.respond(c);
        }
    }

    fn respond(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        let a = conn.waiting.take().expect("a request is waiting");
        if a.abort {
            self.close(c);
            return;
        }
        conn.out.clear();
        conn.out_off = 0;
        let out = &mut conn.out;
        let _ = write!(out, "HTTP/1.1 {} {}\r\n", a.status, reason(a.status));
        out.extend_from_slice(b"Content-Type: text/plain\r\n");
        if a.close {
            out.extend_from_slice(b"Connection: close\r\n");
        }
        if a.chunked {
            out.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
            if !a.head_method {
                let mut left = a.size;
                while left > 0 {
                    let n = left.min(1000);
                    let _ = write!(out, "{n:x}\r\n");
                    out.extend(std::iter::repeat_n(b'x', n));
                    out.extend_from_slice(b"\r\n");
                    left -= n;
                }
                out.extend_from_slice(b"0\r\n\r\n");
            }
        } else {
            let _ = write!(out, "Content-Length: {}\r\n\r\n", a.size);
            if !a.head_method {
                out.extend(std::iter::repeat_n(b'x', a.size));
            }
        }
        conn.close_after = a.close;
        self.shared.requests.fetch_add(1, Relaxed);
        // Logged before the write, so the entry exists before the client can see the
        // response, and `sent` precedes the client's receipt by causality.
        if self.shared.record {
            lock(&self.shared.log).push(LogEntry {
                request_id: a.request_id,
                received: a.received,
                sent: sys::mono_ns(),
                delay_ns: a.delay_ns,
                status: a.status,
            });
        }
        self.write_out(c);
    }

    fn write_out(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        let Some(fd) = conn.fd.as_ref().map(|f| f.as_raw_fd()) else {
            return;
        };
        while conn.out_off < conn.out.len() {
            match sys::write(fd, &conn.out[conn.out_off..]) {
                Ok(Io::Done(n)) => conn.out_off += n,
                Ok(Io::WouldBlock) => {
                    if !conn.want_write {
                        conn.want_write = true;
                        let tok = ((c as u64) << 32) | conn.gen as u64;
                        let _ = self.poller.modify(fd, tok, READ | WRITE);
                    }
                    return;
                }
                Err(_) => {
                    self.close(c);
                    return;
                }
            }
        }
        if conn.want_write {
            conn.want_write = false;
            let tok = ((c as u64) << 32) | conn.gen as u64;
            let _ = self.poller.modify(fd, tok, READ);
        }
        if conn.close_after {
            self.close(c);
            return;
        }
        // A pipelined request may already be buffered.
        if !self.conns[c as usize].inbuf.is_empty() {
            self.next_request(c);
        }
    }
}
