"""The native twin of a closed n-tier system whose replicas run under CPU quotas.

Why a quota-aware twin: a Linux CFS quota is not a slower processor. A replica with a quota of
q cores runs at full speed (up to one core per process) until it has used q x 100 ms of CPU in
the current 100 ms period, then it is *throttled* until the period ends. Below saturation a
request therefore usually runs at full speed, while a processor-sharing server of speed q (the
product-form reading of a quota) stretches every request by 1/q: measured on the embedded
system, the product-form model overestimates the response time near the knee several-fold.
Capacity is the same in both (q cores on average), so product-form solvers stay right for
throughput bounds and this twin is what predicts response times.

Design decision: the twin is the native engine (``tierscope._native``, see ``native/src/des``),
not a simulator of its own: this module only writes the n-tier system as an engine spec and
reads the engine's output back. What the engine does for it:

- each tier replica is a CPU station (``cpu``) with ``cap`` servers, its processes: the
  requests present share them in processor sharing, or round robin with a time slice
  (``quantum``: Python's GIL hands the interpreter over every 5 ms, so a Python server behaves
  like first-come-first-served for requests shorter than that, and round robin for longer
  ones); under a quota its budget ((cpu - background) x period) is refilled at every period
  boundary (each replica has its own random phase), a spent budget throttles it until then,
  the kernel's per-CPU runtime left when its tasks sleep (``carry``, 1 ms per process) is kept
  into the next period, and an overrun is noticed at the next scheduler tick (``tick``) and
  repaid from the next period's budget;
- a tier of several replicas is a balance station in front of them: the first tier's in turn,
  the others' to the replica with the fewest requests present (the embedded web tier's
  balancing); writes at a replicated last tier run at every replica one after the other
  (RAIDb-1), as classes that visit the replicas in order;
- per-request CPU demands are rows of a demand table (rows of per-tier demands measured for
  real requests, so the mix and its correlations are kept), or exponential with the tiers'
  means; a tier a request does not use is not visited;
- contention: with n requests present a replica does 1 / (1 + c (min(n, upto) - 1)) of a
  request's work per CPU second (its rate multipliers), while its CPU use stays one core per
  running process;
- the host: while n processes of the replicas run, each gets min(1, C / (background + n)) of
  a core (CFS's fair share among runnable tasks), and burns its quota at that rate;
- stalls freeze a replica (a perturbation of speed 0), repeated every ``stall_cycle``;
- a ``delay`` outside the tiers (network, client, wake-ups) is a delay station after them
  (constant, or its mean times a draw from ``delay_shape``); users think for an exponential
  (or constant) time between requests.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tierscope import _native

#: Events a twin run may take before it is cut short (a runaway guard, far above any sweep).
MAX_EVENTS = 2**62
#: Requests present up to which contention is tabulated when it grows without a bound (the
#: last rate repeats beyond).
MAX_CONTENDED = 10_000


@dataclass
class SimTier:
    """One tier as the twin needs it."""

    name: str
    replicas: int
    cap: float  # processes per replica: cores usable at once
    quota: float | None  # cores per replica
    background: float = 0.0  # cores per replica used regardless of requests
    write_all: bool = False  # writes run at every replica (the replicated last tier)
    quantum: float | None = None  # round-robin time slice (None: processor sharing)
    carry: float = 0.0  # unused budget (CPU seconds) a replica keeps into the next period
    tick: float | None = None  # the kernel's tick (None: a quota is enforced to the instant)
    contention: float = 0.0  # CPU per request grows by this fraction per other request present
    contention_upto: float = 1.0  # ... up to this many requests present


@dataclass
class SimTrace:
    """What a traced run recorded (times from the start of the run).

    ``requests``: (request, start, end); ``visits``: (request, tier, replica, start, end,
    write), one per stay at a replica (``write``: a write run at every replica); ``cpu``:
    (tier, replica, t, cores) — the cores used over the ``sample`` seconds up to t.
    """

    requests: list[tuple[int, float, float]] = field(default_factory=list)
    visits: list[tuple[int, int, int, float, float, bool]] = field(default_factory=list)
    cpu: list[tuple[int, int, float, float]] = field(default_factory=list)


@dataclass
class SimOutcome:
    users: int
    throughput: float
    response_times: np.ndarray
    utilization: dict[str, float]  # busy cores per tier (requests only)
    simulated: float
    #: per tier with a quota: throttled periods / periods in which it ran (the kernel's
    #: nr_throttled / nr_periods), over all its replicas
    throttled: dict[str, float] = field(default_factory=dict)
    trace: SimTrace | None = None
    #: with a host: the mean share of a core a running task got (1: never short of cores)
    host_share: float | None = None
    #: with a host: cores busy on it on average (the replicas' and the other processes')
    host_busy: float | None = None

    @property
    def rt_mean(self) -> float:
        return float(self.response_times.mean()) if self.response_times.size else math.nan

    def rt_quantile(self, q: float) -> float:
        return float(np.quantile(self.response_times, q)) if self.response_times.size else math.nan


def _det(x: float) -> dict[str, Any]:
    return {"dist": "det", "mean": float(x)}


def _rates(tier: SimTier) -> list[float]:
    """Rate multipliers alpha(n), n = 1..L, of a replica: min(n, cap) processes busy, each
    doing 1 / (1 + c (min(n, upto) - 1)) of a request's work per CPU second."""
    cap = max(round(tier.cap), 1)
    upto = min(tier.contention_upto, MAX_CONTENDED) if tier.contention else 1.0
    last = max(cap, math.ceil(upto))
    out = []
    for n in range(1, last + 1):
        slow = 1.0 + tier.contention * max(min(n, tier.contention_upto) - 1.0, 0.0)
        out.append(min(n, cap) / slow)
    return out


@dataclass
class TwinSystem:
    """A closed n-tier system as the twin runs it (see :func:`simulate_closed` for the
    fields). ``max_replicas``: per tier, the replicas it may be scaled to (default: its
    ``replicas``)."""

    tiers: list[SimTier]
    think_time: float
    demand_means: np.ndarray
    demand_samples: np.ndarray | None = None
    write_fraction: np.ndarray | None = None
    delay: float = 0.0
    delay_shape: np.ndarray | None = None
    stalls: list[tuple[int, int | None, float, float]] | None = None
    stall_cycle: float = 0.0
    think_dist: str = "exp"
    period: float = 0.1
    host_cores: float | None = None
    host_background: float = 0.0
    max_replicas: list[int] | None = None

    def __post_init__(self) -> None:
        if self.host_cores is not None and not self.host_cores > 0:
            raise ValueError(f"host_cores must be > 0, not {self.host_cores}")
        if not self.host_background >= 0:
            raise ValueError(f"host_background must be >= 0, not {self.host_background}")

    def most(self, t: int) -> int:
        tier = self.tiers[t]
        return tier.replicas if self.max_replicas is None else max(self.max_replicas[t], 1)

    @property
    def writes(self) -> bool:
        """Whether the last tier's replicas each run a part of some requests (its writes)."""
        last = self.tiers[-1]
        return (
            self.demand_samples is not None
            and self.write_fraction is not None
            and last.write_all
            and self.most(len(self.tiers) - 1) > 1
            and bool(np.any(np.asarray(self.write_fraction) > 0))
        )


@dataclass
class _Layout:
    """Where each tier's replicas are among the engine's stations."""

    stations: list[dict[str, Any]]
    entry: list[int]  # per tier: the station a request enters it by (balance or replica)
    replicas: list[list[int]]  # per tier: its replica stations (up to its most)
    outside: int | None
    writes: int | None  # the balance station that sends writes to every replica
    think: int = 0

    def tier_of(self) -> dict[int, tuple[int, int]]:
        return {k: (t, r) for t, row in enumerate(self.replicas) for r, k in enumerate(row)}


def _budget(tier: SimTier, cpu: float | None, period: float) -> float | None:
    """CPU seconds per period a replica's requests may use under a quota of ``cpu`` cores."""
    return None if cpu is None else max(cpu - tier.background, 1e-6) * period


def _layout(system: TwinSystem) -> _Layout:
    stations: list[dict[str, Any]] = [{"name": "think", "kind": "delay"}]
    entry, replicas = [], []
    for t, tier in enumerate(system.tiers):
        most = system.most(t)
        cpu = {
            "budget": _budget(tier, tier.quota, system.period),
            "period": system.period,
            "carry": tier.carry,
            "tick": tier.tick,
            "host": system.host_cores is not None,
        }
        first = len(stations) + (1 if most > 1 else 0)
        rows = list(range(first, first + most))
        # (an unbounded slice is first come, first served)
        rr = tier.quantum is not None and math.isfinite(tier.quantum)
        fcfs = tier.quantum is not None and not rr
        if most > 1:
            entry.append(len(stations))
            policy = "round_robin" if t == 0 else "least_loaded"
            stations.append(
                {"name": tier.name, "kind": "balance", "members": rows, "policy": policy}
            )
        else:
            entry.append(rows[0])
        for r in range(most):
            stations.append(
                {
                    "name": f"{tier.name}/{r}",
                    "kind": "queue",
                    "discipline": "rr" if rr else "fcfs" if fcfs else "ps",
                    "servers": max(round(tier.cap), 1),
                    "alpha": _rates(tier),
                    "cpu": cpu,
                    "active": r < tier.replicas,
                    **({"quantum": tier.quantum} if rr else {}),
                }
            )
        replicas.append(rows)
    writes = None
    if system.writes:
        writes = len(stations)
        stations.append(
            {"name": "writes", "kind": "balance", "members": replicas[-1], "policy": "each"}
        )
    outside = None
    if system.delay > 0:
        outside = len(stations)
        stations.append({"name": "outside", "kind": "delay"})
    return _Layout(stations, entry, replicas, outside, writes)


def twin_spec(
    system: TwinSystem,
    *,
    users: int | Sequence[tuple[float, int]],
    window: float = 1.0,
    trace: bool = False,
    horizon: float = math.inf,
) -> tuple[dict[str, Any], _Layout]:
    """The engine spec of ``system`` with ``users`` users (or a schedule of (from time,
    users) steps), and where its tiers' replicas are."""
    tiers = system.tiers
    T = len(tiers)
    lay = _layout(system)
    M = len(lay.stations)
    means = np.asarray(system.demand_means, dtype=float)
    steps = [(0.0, int(users))] if isinstance(users, int | np.integer) else list(users)
    classes = [{"name": "request", "open": False, "population": 0, "reference": 0}]
    if lay.writes is not None:
        # The writes of a request: a class that visits every replica of the last tier.
        classes.append({"name": "write", "open": False, "population": 0, "reference": 0})
    service: list[list[Any]] = [[None] * M for _ in classes]
    if system.think_time > 0 and system.think_dist == "exp":
        service[0][lay.think] = {"dist": "exp", "mean": float(system.think_time)}
    else:
        service[0][lay.think] = _det(max(system.think_time, 0.0))
    if lay.outside is not None:
        shape = system.delay_shape
        service[0][lay.outside] = (
            _det(system.delay)
            if shape is None
            else {"dist": "empirical", "samples": (system.delay * np.asarray(shape)).tolist()}
        )
    rows = None
    if system.demand_samples is not None:
        samples = np.asarray(system.demand_samples, dtype=float)
        cols = [samples]
        if lay.writes is not None:
            w = np.asarray(system.write_fraction, dtype=float) * samples[:, -1]
            cols += [(samples[:, -1] - w)[:, None], w[:, None]]
        rows = np.clip(np.hstack(cols), 0.0, None)
    used = [True] * T
    for t in range(T):
        if rows is not None:
            read = T if lay.writes is not None and t == T - 1 else t
            law: dict[str, Any] = {"dist": "row", "column": read}
            used[t] = bool(np.any(rows[:, t] > 0))
        else:
            used[t] = bool(means[t] > 0)
            law = {"dist": "exp", "mean": float(means[t])} if used[t] else _det(0.0)
        for k in lay.replicas[t]:
            service[0][k] = law
    # Routing: think -> the tiers a request may use, in order -> outside -> think.
    path = [t for t in range(T) if used[t]]
    after = lay.outside if lay.outside is not None else lay.think

    def then(i: int) -> int:
        return lay.entry[path[i + 1]] if i + 1 < len(path) else after

    routing = [{"from": [0, lay.think], "to": [[0, then(-1), 1.0]]}]
    for i, t in enumerate(path):
        for k in lay.replicas[t]:
            if lay.writes is not None and t == T - 1:
                routing.append({"from": [0, k], "to": [[1, lay.writes, 1.0]]})
            else:
                routing.append({"from": [0, k], "to": [[0, then(i), 1.0]]})
    if lay.writes is not None:
        for k in lay.replicas[-1]:
            service[1][k] = {"dist": "row", "column": T + 1}
            routing.append({"from": [1, k], "to": [[1, lay.writes, 1.0]]})
        routing.append({"from": [1, lay.writes], "to": [[0, after, 1.0]]})
        # (its reference, never reached: it must still serve and route it)
        service[1][lay.think] = _det(0.0)
        routing.append({"from": [1, lay.think], "to": [[0, lay.think, 1.0]]})
    if lay.outside is not None:
        routing.append({"from": [0, lay.outside], "to": [[0, lay.think, 1.0]]})
    perturbations = []
    if system.stalls and system.stall_cycle > 0:
        for t, r, a, b in system.stalls:
            for k in lay.replicas[t] if r is None else [lay.replicas[t][r]]:
                perturbations.append(
                    {
                        "station": k,
                        "factor": 0.0,
                        "start": float(a),
                        "duration": float(b - a),
                        "period": float(system.stall_cycle),
                        "until": float(horizon) if math.isfinite(horizon) else None,
                    }
                )
    spec: dict[str, Any] = {
        "stations": lay.stations,
        "classes": classes,
        "service": service,
        "routing": routing,
        "perturbations": perturbations,
        "population_schedule": [
            {
                "class": 0,
                "times": [float(t) for t, _ in steps],
                "populations": [int(n) for _, n in steps],
            }
        ],
        "window": float(window),
        "rt_samples": True,
        "trace": bool(trace),
    }
    if rows is not None:
        spec["rows"] = rows.tolist()
    if system.host_cores is not None:
        spec["host"] = {
            "cores": float(system.host_cores),
            "background": float(system.host_background),
        }
    return spec, lay


@dataclass
class Step:
    """What the twin did between two times: per engine window (``t_start``) and tier, the CPU
    seconds its replicas used, the CFS periods in which they ran and those throttled; with a
    host, per window its processes' wanted and got core-seconds and the other tasks'; the end
    and response time of every request completed; and the engine's trace, if asked for."""

    start: float
    end: float
    window: float
    t_start: np.ndarray
    #: [window, station]: CPU seconds each engine station used (see ``Twin.layout``)
    station_cpu: np.ndarray
    cpu: np.ndarray
    periods: np.ndarray
    throttled: np.ndarray
    host: np.ndarray | None
    done: np.ndarray
    rt: np.ndarray
    trace: dict[str, Any] | None = None


class Twin:
    """A running twin of a closed n-tier system, advanced in steps. Between steps a caller
    (a controller) may change a tier's replicas or quota, with effect from a time not before
    the twin's: a replica started takes requests from then on (schedule it after its start-up
    delay); a replica stopped takes no new request and finishes those it holds."""

    def __init__(
        self,
        system: TwinSystem,
        *,
        users: int | Sequence[tuple[float, int]],
        seed: int = 1,
        window: float = 1.0,
        trace: bool = False,
        horizon: float = math.inf,
    ):
        self.system = system
        self.window = float(window)
        spec, self.layout = twin_spec(
            system, users=users, window=window, trace=trace, horizon=horizon
        )
        self._sim = _native.Simulator(json.dumps(spec), int(seed), 0)
        self._active = [min(t.replicas, system.most(i)) for i, t in enumerate(system.tiers)]
        self._latest = [0.0] * len(system.tiers)  # each tier's latest change asked for

    @property
    def now(self) -> float:
        return float(self._sim.now)

    def replicas(self, tier: str) -> int:
        """The tier's replicas once the changes asked for so far have taken effect."""
        return self._active[self._index(tier)]

    def _index(self, tier: str) -> int:
        for i, t in enumerate(self.system.tiers):
            if t.name == tier:
                return i
        raise ValueError(f"no tier {tier!r}")

    def scale(self, tier: str, replicas: int, at: float) -> None:
        """From time ``at`` the tier has ``replicas`` replicas (at most its ``max_replicas``);
        a tier's changes must be asked for in the order of their times."""
        t = self._index(tier)
        most = self.system.most(t)
        if not 1 <= replicas <= most:
            raise ValueError(f"{tier}: {replicas} replicas, the twin has room for 1 to {most}")
        if at < self._latest[t]:
            raise ValueError(f"{tier}: a change at {at} s before the one at {self._latest[t]} s")
        self._latest[t] = float(at)
        stations = self.layout.replicas[t]
        for r in range(most):
            if (r < replicas) != (r < self._active[t]):
                self._sim.set_active(float(at), stations[r], r < replicas)
        self._active[t] = replicas

    def set_quota(self, tier: str, cpu: float | None, at: float) -> None:
        """From time ``at`` each replica of the tier has a quota of ``cpu`` cores (None: none)."""
        t = self._index(tier)
        budget = _budget(self.system.tiers[t], cpu, self.system.period)
        for k in self.layout.replicas[t]:
            self._sim.set_budget(float(at), k, budget)

    def advance(self, until: float) -> Step:
        """Runs the twin to time ``until``; what happened since the last step."""
        start = self.now
        out = self._sim.advance(float(until), MAX_EVENTS)
        w = out["windows"]
        n_w, M = len(w["t_start"]), len(self.layout.stations)

        def per_station(key: str) -> np.ndarray:
            return np.asarray(w.get(key, []), dtype=float).reshape(n_w, M)

        def per_tier(a: np.ndarray) -> np.ndarray:
            return np.stack([a[:, ks].sum(axis=1) for ks in self.layout.replicas], axis=1)

        cpu = per_station("cpu")

        host = None
        if self.system.host_cores is not None:
            host = np.asarray(w.get("host", []), dtype=float).reshape(n_w, 3)
        return Step(
            start=start,
            end=self.now,
            window=self.window,
            t_start=np.asarray(w["t_start"], dtype=float),
            station_cpu=cpu,
            cpu=per_tier(cpu),
            periods=per_tier(per_station("periods")),
            throttled=per_tier(per_station("throttled")),
            host=host,
            done=np.asarray(out["samples"]["end"], dtype=float),
            rt=np.asarray(out["samples"]["rt"], dtype=float),
            trace=out.get("trace"),
        )


def simulate_closed(
    tiers: list[SimTier],
    *,
    users: int,
    think_time: float,
    demand_means: np.ndarray,
    demand_samples: np.ndarray | None = None,
    write_fraction: np.ndarray | None = None,
    delay: float = 0.0,
    delay_shape: np.ndarray | None = None,
    stalls: list[tuple[int, int | None, float, float]] | None = None,
    stall_cycle: float = 0.0,
    think_dist: str = "exp",
    period: float = 0.1,
    warmup: float = 5.0,
    duration: float = 60.0,
    seed: int = 1,
    trace: bool = False,
    sample: float = 0.05,
    host_cores: float | None = None,
    host_background: float = 0.0,
) -> SimOutcome:
    """Run ``users`` closed-loop users for ``warmup + duration`` seconds on the twin.

    ``demand_samples[i, k]``: CPU seconds of the i-th sampled request at tier k (all replicas
    together); ``write_fraction[i]``: the part of its last-tier demand that is a write (run at
    every replica of a write-all tier). Without samples, demands are exponential with
    ``demand_means``. ``stalls``: (tier, replica or None for all, start, end) of the stalls in
    one ``stall_cycle`` of seconds, repeated from time 0; a stalled replica runs nothing. With
    ``trace``, every request, every stay at a replica and the CPU of every replica each
    ``sample`` seconds are recorded. ``host_cores``: the cores the replicas share with each
    other and with ``host_background`` runnable tasks of other processes (None: a core is free
    whenever a replica may run). Warm-up and duration are rounded up to whole windows of the
    engine (``sample`` when traced, else at most 1 s).
    """
    system = TwinSystem(
        tiers=tiers,
        think_time=think_time,
        demand_means=demand_means,
        demand_samples=demand_samples,
        write_fraction=write_fraction,
        delay=delay,
        delay_shape=delay_shape,
        stalls=stalls,
        stall_cycle=stall_cycle,
        think_dist=think_dist,
        period=period,
        host_cores=host_cores,
        host_background=host_background,
    )
    if trace:
        window = float(sample)
    else:
        window = warmup / math.ceil(warmup) if warmup > 0 else min(1.0, max(duration, 1e-3))
    skip = math.ceil(warmup / window - 1e-9)
    kept = max(math.ceil(duration / window - 1e-9), 1)
    start, horizon = skip * window, (skip + kept) * window
    twin = Twin(system, users=users, seed=seed, window=window, trace=trace, horizon=horizon)
    step = twin.advance(horizon)
    span = max((len(step.t_start) - skip) * window, 1e-12)
    util, throttled = {}, {}
    for t, tier in enumerate(tiers):
        util[tier.name] = float(step.cpu[skip:, t].sum()) / span
        n_periods = float(step.periods[skip:, t].sum())
        if tier.quota is not None and n_periods:
            throttled[tier.name] = float(step.throttled[skip:, t].sum()) / n_periods
    rts = step.rt[(step.done >= start) & (step.done <= horizon)]
    host_share = host_busy = None
    if step.host is not None:
        host = step.host[skip:].sum(axis=0)
        host_share = float(host[1] / host[0]) if host[0] > 0 else 1.0
        host_busy = float((host[1] + host[2]) / span)
    return SimOutcome(
        users=users,
        throughput=len(rts) / span,
        response_times=rts,
        utilization=util,
        simulated=span,
        throttled=throttled,
        trace=_trace(step, twin.layout) if trace else None,
        host_share=host_share,
        host_busy=host_busy,
    )


def _trace(step: Step, lay: _Layout) -> SimTrace:
    """The engine's trace as requests, visits at replicas and CPU samples."""
    tr = step.trace or {}
    where = lay.tier_of()
    rec = SimTrace()
    for i, k in enumerate(tr.get("station", [])):
        if tr["status"][i] != "ok":
            continue
        if k == -1:
            rec.requests.append((int(tr["request_id"][i]), tr["arrival"][i], tr["departure"][i]))
        elif k in where:
            t, r = where[k]
            rec.visits.append(
                (int(tr["request_id"][i]), t, r, tr["arrival"][i], tr["departure"][i],
                 tr["class"][i] > 0)
            )  # fmt: skip
    for wi, t0 in enumerate(step.t_start):
        for k, (t, r) in where.items():
            rec.cpu.append((t, r, t0 + step.window, float(step.station_cpu[wi, k]) / step.window))
    return rec


__all__ = [
    "SimOutcome",
    "SimTier",
    "SimTrace",
    "Step",
    "Twin",
    "TwinSystem",
    "simulate_closed",
    "twin_spec",
]
