//! Discrete-event simulator of multi-class queueing networks.
//!
//! The engine consumes the JSON spec compiled by `tierscope.sim` (stations,
//! classes, distributions, routing with class switching, fork/join, finite
//! capacity with drop/retry or blocking, speed perturbations, arrival-rate
//! and population schedules) and streams windowed sums and optional
//! per-visit traces back.
//!
//! Two engines share this spec, these semantics and this output. The event
//! engine ([`engine`]) runs any model. Models that are continuous-time
//! Markov chains with nothing at fixed times (every service and interarrival
//! time exponential; no perturbations, schedules, finite buffers, forks or
//! traces) run on the Markov fast path ([`markov`]), which draws the
//! network's next transition directly, exactly, at about twice the speed.
//! `"markov": false` in the spec forces the event engine.
//!
//! Main design decision of the event engine: one service mechanism for
//! every discipline. Jobs in service at a station progress at a common rate
//! `speed(t) * g(n)` measured by a lazily advanced virtual clock, and only
//! the station's next completion is on the event list (see [`station`];
//! exponential stations are a race, and the list a tournament tree, see
//! [`event`]). FCFS, PS, multi-server,
//! load-dependent and infinite-server stations, and stalls, are all the same
//! code. Determinism follows SimPy: events are ordered by `(time, insertion
//! sequence)`, and every (class, station, purpose) has its own seeded stream
//! (see [`rng`]), so a seed reproduces a run bit for bit.
//!
//! Semantics the spec leaves open, decided here:
//! - Windows: station metrics are flat `(window, class, station)`; `q_max`
//!   is per `(window, station)` (total jobs present); system metrics are
//!   `(window, class)`. `arrivals` counts admitted jobs; `drops` counts every
//!   refused arrival (each refused retry again). `busy_area` integrates
//!   occupancy: FCFS occupied servers / m (a server held by a blocked job
//!   counts), PS `min(n, m)/m` split over classes by their share of `n`,
//!   delay the number present; a stalled station with jobs counts as busy.
//! - Requests: an open request runs from its external arrival until it
//!   leaves the network. A closed cycle starts when the job leaves its
//!   class's reference station and completes when it next *arrives* there
//!   (`sys_rt` excludes the reference's own time); `sys_*` belong to the
//!   class the job was created as, whatever class switches happen on the way.
//! - Fork/join: the fork is a zero-time visit; the parent then counts as
//!   present at the join (its queue length is the number of forked requests
//!   in progress, its response time is fork-to-release). Branches come from
//!   the fork's `branches` (tasks keep the class) or else its routing row.
//!   A task lost on the way (dropped, or routed out) never counts; if the
//!   quorum becomes unreachable the parent is lost (a drop at the join).
//! - Capacity: a job routed from a served station to a full `block` station
//!   waits on its server (blocking after service) and is admitted FIFO as
//!   room frees. Arrivals that cannot wait (external, fork tasks, jobs
//!   leaving a fork/join, retries) are refused like at a `drop` station.
//!   A lost closed job goes back to its reference (its request counts as
//!   dropped), so populations are conserved.
//! - Arrival schedules are applied by time-scaling (exact for Poisson
//!   arrivals, shape-preserving for renewal ones); population decreases
//!   retire jobs when they next reach their reference station.
//! - `advance(until, n)` leaves events at exactly `until` for the next call.
//!
//! This module never imports pyo3; the bindings live in `crate::py::sim`.

pub mod alias;
pub mod dist;
mod engine;
pub mod event;
mod json;
mod markov;
pub mod rng;
pub mod spec;
pub mod station;
pub mod stats;

#[cfg(test)]
mod tests;

pub use engine::{Advance, Simulation};
pub use stats::{Status, Trace, Windows};
