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
    cap = max(int(round(tier.cap)), 1)
    upto = min(tier.contention_upto, MAX_CONTENDED) if tier.contention else 1.0
    last = max(cap, math.ceil(upto))
    out = []
    for n in range(1, last + 1):
        slow = 1.0 + tier.contention * max(min(n, tier.contention_upto) - 1.0, 0.0)
        out.append(min(n, cap) / slow)
    return out


@dataclass
class _Layout:
    """Where each tier's replicas are among the engine's stations."""

    stations: list[dict[str, Any]]
    entry: list[int]  # per tier: the station a request enters it by (balance or replica)
    replicas: list[list[int]]  # per tier: its replica stations
    outside: int | None
    think: int = 0

    def tier_of(self) -> dict[int, tuple[int, int]]:
        return {k: (t, r) for t, row in enumerate(self.replicas) for r, k in enumerate(row)}


def _layout(
    tiers: list[SimTier], *, period: float, delay_station: bool, host: bool
) -> _Layout:
    stations: list[dict[str, Any]] = [{"name": "think", "kind": "delay"}]
    entry, replicas = [], []
    for t, tier in enumerate(tiers):
        cap = max(int(round(tier.cap)), 1)
        cpu = {
            "budget": None
            if tier.quota is None
            else max(tier.quota - tier.background, 1e-6) * period,
            "period": period,
            "carry": tier.carry,
            "tick": tier.tick,
            "host": host,
        }
        first = len(stations) + (1 if tier.replicas > 1 else 0)
        rows = list(range(first, first + tier.replicas))
        # (an unbounded slice is first come, first served)
        rr = tier.quantum is not None and math.isfinite(tier.quantum)
        fcfs = tier.quantum is not None and not rr
        if tier.replicas > 1:
            entry.append(len(stations))
            policy = "round_robin" if t == 0 else "least_loaded"
            stations.append(
                {"name": tier.name, "kind": "balance", "members": rows, "policy": policy}
            )
        else:
            entry.append(rows[0])
        for r in range(tier.replicas):
            stations.append(
                {
                    "name": f"{tier.name}/{r}",
                    "kind": "queue",
                    "discipline": "rr" if rr else "fcfs" if fcfs else "ps",
                    "servers": cap,
                    "alpha": _rates(tier),
                    "cpu": cpu,
                    **({"quantum": tier.quantum} if rr else {}),
                }
            )
        replicas.append(rows)
    outside = None
    if delay_station:
        outside = len(stations)
        stations.append({"name": "outside", "kind": "delay"})
    return _Layout(stations, entry, replicas, outside)


def twin_spec(
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
    horizon: float = 65.0,
    window: float = 1.0,
    trace: bool = False,
    host_cores: float | None = None,
    host_background: float = 0.0,
) -> tuple[dict[str, Any], _Layout]:
    """The engine spec of the n-tier system (see :func:`simulate_closed` for the arguments),
    and where its tiers' replicas are."""
    T = len(tiers)
    lay = _layout(tiers, period=period, delay_station=delay > 0, host=host_cores is not None)
    M = len(lay.stations)
    means = np.asarray(demand_means, dtype=float)
    # The replicated last tier's writes: classes that visit its replicas in turn.
    last = tiers[-1]
    writes = (
        demand_samples is not None
        and write_fraction is not None
        and last.write_all
        and last.replicas > 1
        and bool(np.any(np.asarray(write_fraction) > 0))
    )
    n_write = last.replicas if writes else 0
    classes = [{"name": "request", "open": False, "population": int(users), "reference": 0}]
    classes += [
        {"name": f"write/{j}", "open": False, "population": 0, "reference": 0}
        for j in range(n_write)
    ]
    C = len(classes)
    service: list[list[Any]] = [[None] * M for _ in range(C)]
    if think_time > 0 and think_dist == "exp":
        service[0][lay.think] = {"dist": "exp", "mean": float(think_time)}
    else:
        service[0][lay.think] = _det(max(think_time, 0.0))
    if lay.outside is not None:
        service[0][lay.outside] = (
            _det(delay)
            if delay_shape is None
            else {"dist": "empirical", "samples": (delay * np.asarray(delay_shape)).tolist()}
        )
    rows = None
    if demand_samples is not None:
        samples = np.asarray(demand_samples, dtype=float)
        cols = [samples]
        if writes:
            w = np.asarray(write_fraction, dtype=float) * samples[:, -1]
            cols += [(samples[:, -1] - w)[:, None], w[:, None]]
        rows = np.clip(np.hstack(cols), 0.0, None)
    used = [True] * T
    for t in range(T):
        if rows is not None:
            law: dict[str, Any] = {"dist": "row", "column": t}
            if writes and t == T - 1:
                law = {"dist": "row", "column": T}
            used[t] = bool(np.any(rows[:, t] > 0))
        else:
            used[t] = bool(means[t] > 0)
            law = {"dist": "exp", "mean": float(means[t])} if used[t] else _det(0.0)
        for k in lay.replicas[t]:
            service[0][k] = law
    for j in range(n_write):
        service[1 + j][lay.replicas[-1][j]] = {"dist": "row", "column": T + 1}
        # (their reference, never reached: it must still serve and route them)
        service[1 + j][lay.think] = _det(0.0)
    # Routing: think -> the tiers a request may use, in order -> outside -> think.
    path = [t for t in range(T) if used[t]]
    routing = []
    after = lay.outside if lay.outside is not None else lay.think

    def then(t_index: int) -> int:
        return lay.entry[path[t_index + 1]] if t_index + 1 < len(path) else after

    routing.append({"from": [0, lay.think], "to": [[0, then(-1), 1.0]]})
    for i, t in enumerate(path):
        for k in lay.replicas[t]:
            if writes and t == T - 1:
                routing.append({"from": [0, k], "to": [[1, lay.replicas[t][0], 1.0]]})
            else:
                routing.append({"from": [0, k], "to": [[0, then(i), 1.0]]})
    for j in range(n_write):
        k = lay.replicas[-1][j]
        nxt = [[2 + j, lay.replicas[-1][j + 1], 1.0]] if j + 1 < n_write else [[0, after, 1.0]]
        routing.append({"from": [1 + j, k], "to": nxt})
        routing.append({"from": [1 + j, lay.think], "to": [[0, lay.think, 1.0]]})
    if lay.outside is not None:
        routing.append({"from": [0, lay.outside], "to": [[0, lay.think, 1.0]]})
    perturbations = []
    if stalls and stall_cycle > 0:
        for t, r, a, b in stalls:
            for k in lay.replicas[t] if r is None else [lay.replicas[t][r]]:
                perturbations.append(
                    {
                        "station": k,
                        "factor": 0.0,
                        "start": float(a),
                        "duration": float(b - a),
                        "period": float(stall_cycle),
                        "until": float(horizon),
                    }
                )
    spec: dict[str, Any] = {
        "stations": lay.stations,
        "classes": classes,
        "service": service,
        "routing": routing,
        "perturbations": perturbations,
        "window": float(window),
        "rt_samples": True,
        "trace": bool(trace),
    }
    if rows is not None:
        spec["rows"] = rows.tolist()
    if host_cores is not None:
        spec["host"] = {"cores": float(host_cores), "background": float(host_background)}
    return spec, lay


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
    if host_cores is not None and not host_cores > 0:
        raise ValueError(f"host_cores must be > 0, not {host_cores}")
    if not host_background >= 0:
        raise ValueError(f"host_background must be >= 0, not {host_background}")
    if trace:
        window = float(sample)
    else:
        window = warmup / math.ceil(warmup) if warmup > 0 else min(1.0, max(duration, 1e-3))
    skip = math.ceil(warmup / window - 1e-9)
    kept = max(math.ceil(duration / window - 1e-9), 1)
    start, horizon = skip * window, (skip + kept) * window
    spec, lay = twin_spec(
        tiers,
        users=users,
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
        horizon=horizon,
        window=window,
        trace=trace,
        host_cores=host_cores,
        host_background=host_background,
    )
    sim = _native.Simulator(json.dumps(spec), int(seed), 0)
    out = sim.advance(horizon, MAX_EVENTS)
    w = out["windows"]
    n_w, M = len(w["t_start"]), len(lay.stations)
    span = max((n_w - skip) * window, 1e-12)
    cpu = np.asarray(w["cpu"], dtype=float).reshape(n_w, M)[skip:]
    periods = np.asarray(w["periods"], dtype=float).reshape(n_w, M)[skip:]
    throttles = np.asarray(w["throttled"], dtype=float).reshape(n_w, M)[skip:]
    util, throttled = {}, {}
    for t, tier in enumerate(tiers):
        ks = lay.replicas[t]
        util[tier.name] = float(cpu[:, ks].sum()) / span
        n_periods = float(periods[:, ks].sum())
        if tier.quota is not None and n_periods:
            throttled[tier.name] = float(throttles[:, ks].sum()) / n_periods
    end = np.asarray(out["samples"]["end"], dtype=float)
    rts = np.asarray(out["samples"]["rt"], dtype=float)[(end >= start) & (end <= horizon)]
    host_share = host_busy = None
    if host_cores is not None:
        host = np.asarray(w["host"], dtype=float).reshape(n_w, 3)[skip:].sum(axis=0)
        host_share = float(host[1] / host[0]) if host[0] > 0 else 1.0
        host_busy = float((host[1] + host[2]) / span)
    rec = _trace(out, lay, window, cpu_all=w) if trace else None
    return SimOutcome(
        users=users,
        throughput=len(rts) / span,
        response_times=rts,
        utilization=util,
        simulated=span,
        throttled=throttled,
        trace=rec,
        host_share=host_share,
        host_busy=host_busy,
    )


def _trace(out: dict[str, Any], lay: _Layout, window: float, *, cpu_all: dict) -> SimTrace:
    """The engine's trace as requests, visits at replicas and CPU samples."""
    tr = out["trace"]
    where = lay.tier_of()
    rec = SimTrace()
    station = tr["station"]
    for i, k in enumerate(station):
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
    n_w, M = len(cpu_all["t_start"]), len(lay.stations)
    cpu = np.asarray(cpu_all["cpu"], dtype=float).reshape(n_w, M)
    for wi, t0 in enumerate(cpu_all["t_start"]):
        for k, (t, r) in where.items():
            rec.cpu.append((t, r, t0 + window, float(cpu[wi, k]) / window))
    return rec


__all__ = ["SimOutcome", "SimTier", "SimTrace", "simulate_closed", "twin_spec"]
