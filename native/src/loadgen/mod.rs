//! Native HTTP/1.1 load generator: closed, open and partly-open workloads with
//! Markov session mixes, measured without coordinated omission.
//!
//! Main design decision: a wrk-style engine. Each worker thread runs one epoll loop
//! over non-blocking sockets with a hand-written HTTP/1.1 client (heads parsed by
//! `httparse`, bodies counted, never stored), and a heap of deadlines for think
//! times, arrivals and samples that `epoll_pwait2` honours to the microsecond. A
//! request costs one `write`, one `read` and a share of one `epoll_pwait2`, which is
//! what lets it match wrk's CPU per request while doing more per request (a unique
//! `X-Request-Id`, a per-request record, two HDR histograms).
//!
//! Every request carries the time the workload *intended* to send it; latency is
//! measured from there (wrk2's coordinated-omission correction) and, separately, from
//! when it was actually handed to a connection. The engine also measures itself: the
//! CPU time of its threads, how late its timers fire, and how late requests leave,
//! so the caller can tell when the client, not the server, was the bottleneck.
//!
//! Modules: `config` (the JSON configuration), `plan` (its compiled form), `worker`
//! (the event loop), `run` (threads and hand-over), `priority` (real-time scheduling with a
//! CPU guard), `stats` (records, samples,
//! histograms), `http` (parsing), `template`, `mix`, `profile`, `sys` (the only
//! `unsafe`), and `testserver`, an accurate HTTP server with controllable latency and
//! stalls used to test the generator. This module never imports pyo3; the bindings
//! live in `crate::py::loadgen`.

pub mod config;
pub mod http;
pub mod mix;
pub mod plan;
pub mod priority;
pub mod profile;
pub mod run;
mod shared;
pub mod stats;
pub mod sys;
pub mod template;
pub mod testserver;
mod worker;

#[cfg(test)]
mod tests;

pub use config::Config;
pub use run::{LoadRun, Snapshot, Summary};
pub use stats::{ErrorClass, Quantiles, Record, Sample, ERROR_NAMES};
pub use testserver::{ServerConfig, TestServer};
