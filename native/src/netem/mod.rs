//! A packet-level network emulator on NFQUEUE, for kernels without `tc netem`.
//!
//! Each emulated link is one netfilter queue: an iptables rule (set up by the Python side,
//! `tierscope.experiment.netem`) sends the link's packets there, and this engine decides for
//! each whether it is lost (verdict DROP at once) or delayed (verdict ACCEPT when its delay
//! has passed), with `netem`'s distributions (`model`). Packets are released by their release
//! time, so jitter reorders them as netem does. One thread runs an epoll loop over the
//! netlink socket and a stop event, with nanosecond timeouts (`epoll_pwait2`) to the next
//! release; what it did per link is counted (`LinkStats`). When it stops, every packet it
//! still holds is let through, so stopping the emulator never drops traffic.

pub mod model;
pub mod nfqueue;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use serde::Deserialize;

use crate::error::{NativeError, Result};
use crate::loadgen::sys::{empty_event, event_token, mono_ns, Poller};
pub use model::{Delay, Link, Loss};
use nfqueue::{Held, NfQueue, Verdict};

/// One emulated link: the queue its packets are sent to, their delay and loss.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    pub queue: u16,
    #[serde(default)]
    pub delay: Option<Delay>,
    #[serde(default)]
    pub loss: Option<Loss>,
    #[serde(default = "default_seed")]
    pub seed: u64,
}

fn default_seed() -> u64 {
    1
}

fn default_max_len() -> u32 {
    100_000
}

/// The emulator's configuration (JSON).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub links: Vec<LinkConfig>,
    /// Packets a queue may hold (beyond, the kernel lets them through).
    #[serde(default = "default_max_len")]
    pub max_len: u32,
}

impl Config {
    pub fn from_json(text: &str) -> Result<Config> {
        let bad = |field: &str, message: String| NativeError::InvalidLoad {
            field: field.into(),
            message,
        };
        let cfg: Config = serde_json::from_str(text).map_err(|e| bad("netem", e.to_string()))?;
        if cfg.links.is_empty() {
            return Err(bad("links", "at least one link".into()));
        }
        let mut seen = std::collections::HashSet::new();
        for (i, l) in cfg.links.iter().enumerate() {
            if !seen.insert(l.queue) {
                return Err(bad(
                    &format!("links[{i}].queue"),
                    format!("queue {} used twice", l.queue),
                ));
            }
            if let Some(d) = &l.delay {
                d.check()
                    .map_err(|m| bad(&format!("links[{i}].delay"), m))?;
            }
            if let Some(x) = &l.loss {
                x.check().map_err(|m| bad(&format!("links[{i}].loss"), m))?;
            }
        }
        Ok(cfg)
    }
}

/// What the emulator did on one link.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LinkStats {
    pub queue: u16,
    /// packets seen
    pub packets: u64,
    /// of which dropped
    pub lost: u64,
    /// sum of the delays given to the packets let through (seconds)
    pub delay_sum: f64,
    /// most packets held at once
    pub held_max: u64,
}

struct Shared {
    stats: Mutex<Vec<LinkStats>>,
    failure: Mutex<Option<String>>,
}

/// A running emulator.
pub struct Netem {
    stop: OwnedFd,
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// A held packet: (release time ns, arrival order, queue, packet id, link index).
type Release = Reverse<(i64, u64, u16, u32, usize)>;

const STOP: u64 = 0;
const QUEUE: u64 = 1;

impl Netem {
    /// Bind the queues and start emulating (an error if the queues cannot be bound: not
    /// root, or another process holds them).
    pub fn start(cfg: Config) -> Result<Netem> {
        let io = |e: std::io::Error| NativeError::InvalidLoad {
            field: "netem".into(),
            message: e.to_string(),
        };
        let queues: Vec<u16> = cfg.links.iter().map(|l| l.queue).collect();
        let nfq = NfQueue::open(&queues, cfg.max_len).map_err(|e| NativeError::InvalidLoad {
            field: "links".into(),
            message: format!("cannot bind netfilter queues {queues:?}: {e} (root is needed)"),
        })?;
        // SAFETY: eventfd returns a new descriptor we own.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if raw < 0 {
            return Err(io(std::io::Error::last_os_error()));
        }
        // SAFETY: raw is a fresh eventfd.
        let stop = unsafe { OwnedFd::from_raw_fd(raw) };
        let poller = Poller::new().map_err(io)?;
        poller
            .add(stop.as_raw_fd(), STOP, libc::EPOLLIN as u32)
            .map_err(io)?;
        poller
            .add(nfq.fd(), QUEUE, libc::EPOLLIN as u32)
            .map_err(io)?;
        let shared = Arc::new(Shared {
            stats: Mutex::new(
                cfg.links
                    .iter()
                    .map(|l| LinkStats {
                        queue: l.queue,
                        ..Default::default()
                    })
                    .collect(),
            ),
            failure: Mutex::new(None),
        });
        let links: HashMap<u16, (usize, Link)> = cfg
            .links
            .iter()
            .enumerate()
            .map(|(i, l)| (l.queue, (i, Link::new(l.delay, l.loss, l.seed))))
            .collect();
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("netem".into())
            .spawn(move || {
                crate::loadgen::sys::tighten_timer_slack();
                if let Err(e) = run(nfq, poller, links, queues, &worker) {
                    *worker.failure.lock().unwrap() = Some(e.to_string());
                }
            })
            .map_err(io)?;
        Ok(Netem {
            stop,
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Ask the loop to stop (it lets every held packet through first).
    pub fn stop(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes to our eventfd.
        unsafe { libc::write(self.stop.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Wait for the loop to end.
    pub fn join(&self) {
        if let Some(t) = self.thread.lock().unwrap().take() {
            let _ = t.join();
        }
    }

    pub fn stats(&self) -> Vec<LinkStats> {
        self.shared.stats.lock().unwrap().clone()
    }

    pub fn failure(&self) -> Option<String> {
        self.shared.failure.lock().unwrap().clone()
    }
}

impl Drop for Netem {
    fn drop(&mut self) {
        self.stop();
        self.join();
    }
}

fn run(
    mut nfq: NfQueue,
    poller: Poller,
    mut links: HashMap<u16, (usize, Link)>,
    queues: Vec<u16>,
    shared: &Shared,
) -> std::io::Result<()> {
    let mut stats = shared.stats.lock().unwrap().clone();
    let mut heap: BinaryHeap<Release> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut events = vec![empty_event(); 8];
    let mut held = Vec::with_capacity(256);
    let mut stopping = false;
    let mut last_publish = 0i64;
    let mut holding = vec![0u64; stats.len()];
    while !stopping {
        let now = mono_ns();
        while let Some(&Reverse((t, _, queue, id, i))) = heap.peek() {
            if t > now {
                break;
            }
            heap.pop();
            holding[i] -= 1;
            nfq.verdict(Held { queue, id }, Verdict::Accept)?;
        }
        let timeout = heap.peek().map(|Reverse((t, ..))| (t - now).max(0));
        let n = poller.wait(&mut events, timeout)?;
        for e in &events[..n] {
            match event_token(e) {
                STOP => stopping = true,
                _ => {
                    held.clear();
                    nfq.recv(&mut held)?;
                    let now = mono_ns();
                    for h in &held {
                        let Some((i, link)) = links.get_mut(&h.queue) else {
                            nfq.verdict(*h, Verdict::Accept)?;
                            continue;
                        };
                        let s = &mut stats[*i];
                        s.packets += 1;
                        if link.lost() {
                            s.lost += 1;
                            nfq.verdict(*h, Verdict::Drop)?;
                            continue;
                        }
                        let d = link.delay();
                        s.delay_sum += d;
                        if d <= 0.0 {
                            nfq.verdict(*h, Verdict::Accept)?;
                        } else {
                            seq += 1;
                            heap.push(Reverse((now + (d * 1e9) as i64, seq, h.queue, h.id, *i)));
                            holding[*i] += 1;
                            s.held_max = s.held_max.max(holding[*i]);
                        }
                    }
                }
            }
        }
        let now = mono_ns();
        if stopping || now - last_publish > 50_000_000 {
            shared.stats.lock().unwrap().clone_from(&stats);
            last_publish = now;
        }
    }
    while let Some(Reverse((_, _, queue, id, _))) = heap.pop() {
        nfq.verdict(Held { queue, id }, Verdict::Accept)?;
    }
    nfq.unbind(&queues);
    shared.stats.lock().unwrap().clone_from(&stats);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_are_checked() {
        let ok = r#"{"links": [{"queue": 3, "delay": {"dist": "pareto", "mean": 0.04, "jitter": 0.01},
                                "loss": {"model": "bernoulli", "p": 0.05}}]}"#;
        let cfg = Config::from_json(ok).unwrap();
        assert_eq!(cfg.links[0].queue, 3);
        assert_eq!(cfg.max_len, 100_000);
        for bad in [
            r#"{"links": []}"#,
            r#"{"links": [{"queue": 1}, {"queue": 1}]}"#,
            r#"{"links": [{"queue": 1, "delay": {"dist": "uniform", "mean": 0.01, "jitter": 0.05}}]}"#,
            r#"{"links": [{"queue": 1, "loss": {"model": "gilbert_elliott", "p": 0, "r": 0.1}}]}"#,
            r#"{"links": [{"queue": 1, "delay": {"dist": "cauchy", "mean": 0.01}}]}"#,
        ] {
            assert!(Config::from_json(bad).is_err(), "{bad}");
        }
    }
}
