"""Run the native simulator to a requested precision and summarise it like an analytic solver.

Design decision: the engine streams windowed sums and forgets them; this module keeps a bounded
number of windows (adjacent windows are merged when the cap is reached, so memory stays flat in
the run length), removes the warm-up with MSER-5 and stops when the confidence intervals of the
class throughputs and response times are within the requested relative precision. Replications
run in parallel threads (the engine releases the GIL) with independent, reproducible streams.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tierscope import _native
from tierscope.errors import InputError
from tierscope.progress import step
from tierscope.qn.network import Network
from tierscope.qn.result import Solution
from tierscope.sim import stats
from tierscope.sim._compile import compile_model
from tierscope.spec.model import Model, class_chains, switching_pairs

#: Windows kept per replication before neighbours are merged.
MAX_WINDOWS = 4096
#: Per-(class, station) sums streamed by the engine, and per-class system sums.
STATION_SUMS = ("arrivals", "completions", "rt_sum", "q_area", "busy_area", "drops")
CLASS_SUMS = ("sys_completions", "sys_rt_sum")
#: Events per replication and advance when the caller streams chunks (``on_chunk``, ``trace``):
#: bounds the size of one chunk, so a long traced run keeps flat memory.
STREAM_CHUNK_MAX = 500_000


@dataclass
class _Series:
    """Windowed sums of one replication; each stored row sums ``factor`` engine windows.

    When more than MAX_WINDOWS rows (an even number) are stored, neighbours are merged and
    ``factor`` doubles; incoming engine windows wait in ``pending`` until a whole row of them
    has arrived.
    """

    C: int
    M: int
    base_width: float
    factor: int = 1
    rows: dict[str, np.ndarray] = field(default_factory=dict)
    pending: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def width(self) -> float:
        return self.base_width * self.factor

    def extend(self, windows: dict[str, Any]) -> None:
        n = len(windows["t_start"])
        if n == 0:
            return
        for key in STATION_SUMS:
            self._push(key, np.asarray(windows[key], dtype=float).reshape(n, self.C, self.M))
        for key in CLASS_SUMS:
            self._push(key, np.asarray(windows[key], dtype=float).reshape(n, self.C))
        self._flush()
        n_rows = len(self.rows["sys_completions"])
        if n_rows > MAX_WINDOWS and n_rows % 2 == 0:  # merge whole pairs only
            self._merge()

    def arrays(self) -> dict[str, np.ndarray]:
        return self.rows

    def _push(self, key: str, arr: np.ndarray) -> None:
        old = self.pending.get(key)
        self.pending[key] = arr if old is None else np.concatenate([old, arr])

    def _flush(self) -> None:
        f = self.factor
        for key, arr in self.pending.items():
            whole = (arr.shape[0] // f) * f
            grouped = arr[:whole].reshape(whole // f, f, *arr.shape[1:]).sum(axis=1)
            old = self.rows.get(key)
            self.rows[key] = grouped if old is None else np.concatenate([old, grouped])
            self.pending[key] = arr[whole:]

    def _merge(self) -> None:
        for key, arr in self.rows.items():
            self.rows[key] = arr.reshape(arr.shape[0] // 2, 2, *arr.shape[1:]).sum(axis=1)
        self.factor *= 2


@dataclass(eq=False)
class SimResult:
    """A simulation summary: the analytic result shape plus ``ci`` and ``stats``."""

    solution: Solution
    ci: dict[str, Any]
    stats: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return self.solution.to_dict() | {"ci": self.ci, "stats": self.stats}


def simulate(
    model: Model,
    *,
    seed: int = 1,
    precision: float = 0.03,
    confidence: float = 0.99,
    max_events: int = 20_000_000,
    max_time: float | None = None,
    replications: int = 1,
    threads: int | None = None,
    window: float | None = None,
    trace: bool = False,
    on_chunk: Callable[[int, dict[str, Any]], None] | None = None,
) -> SimResult:
    """Simulate ``model`` until every class's throughput and response time is known to
    ``precision`` (relative CI half-width at ``confidence``), or a cap is reached.

    ``window`` is the length [s] of the engine's time windows (default: chosen from a pilot
    run so that a window holds about 100 events). With ``trace`` the engine also reports every
    finished visit and request. ``on_chunk(replication, output)`` is called in the calling
    thread after every advance of every replication with the engine's output (``windows`` and,
    when traced, ``trace``) plus ``"window"``, the window length; the output is not kept, so a
    caller that streams it to disk keeps memory flat. An exception raised by ``on_chunk`` stops
    the run and propagates.
    """
    _check(
        precision=precision,
        confidence=confidence,
        max_events=max_events,
        replications=replications,
        max_time=max_time,
        window=window,
    )
    net = Network.from_model(model)
    C, M = net.n_classes, net.n_stations
    started = time.perf_counter()
    if window is None:
        # Pilot: learn the time scale, so windows hold ~100 events each.
        pilot = _native.Simulator(json.dumps(compile_model(model, window=1.0)), seed, 0)
        pilot.advance(math.inf, 20_000)
        width = max(pilot.now, 1e-9) / 200
        if max_time is not None:  # a short run still gets a few hundred windows
            width = min(width, max_time / 200)
    else:
        width = float(window)
    spec = json.dumps(compile_model(model, window=width, trace=trace))
    streaming = trace or on_chunk is not None
    sims = [_native.Simulator(spec, seed, r) for r in range(replications)]
    series = [_Series(C, M + C, width) for _ in range(replications)]
    chunk = 100_000
    done_events = 0
    est: dict[str, Any] = {}
    with ThreadPoolExecutor(max_workers=threads or min(replications, 8)) as pool:
        until = math.inf if max_time is None else max_time
        while True:
            outs = list(pool.map(lambda s, n=chunk: s.advance(until, n), sims))
            for r, (ser, out) in enumerate(zip(series, outs, strict=True)):
                ser.extend(out["windows"])
                if on_chunk is not None:
                    out["window"] = width
                    on_chunk(r, out)
            del outs
            done_events = sum(s.events for s in sims)
            est = _estimate(series, C, M, confidence)
            reached = (max_time is not None and all(s.now >= max_time for s in sims)) or (
                done_events >= max_events
            )
            if _precise(est, precision) or reached:
                break
            _report(est, precision, done_events, max_events)
            chunk = min(chunk * 2, max(1, (max_events - done_events) // replications))
            if streaming:
                chunk = min(chunk, STREAM_CHUNK_MAX)
    wall = time.perf_counter() - started
    if "visits" not in est:
        raise InputError(
            "max_events/max_time", max_time or max_events, "a run long enough to fill a window"
        )
    switching = bool(switching_pairs(model))
    visits = _chain_visits(est, class_chains(model)) if switching else est["visits"]
    sim_net = replace(net, visits=visits)
    solution = Solution(
        "simulation",
        sim_net,
        est["X"],
        est["Q"],
        utilization_ck=est["U"],
        measured_response_time=est["R"] if _has_fork(model) or switching else None,
        # With class switching a job visits stations as other classes than the one its
        # request began as: station throughputs are measured, not X_c V_ck.
        measured_station_throughput=est["T"] if switching else None,
        notes=[]
        if _precise(est, precision)
        else [f"stopped at the cap before reaching {precision:.0%} relative precision"],
    )
    ci = _ci_doc(solution, est)
    stats_doc = {
        "events": int(done_events),
        "wall_s": wall,
        "events_per_s": done_events / wall if wall > 0 else None,
        "replications": replications,
        "seed": seed,
        "simulated_time": float(np.mean([s.now for s in sims])),
        "warmup_time": est["warmup"],
        "window": width,
        "confidence": confidence,
        "precision_reached": bool(_precise(est, precision)),
        "drops": {cname: float(d) for cname, d in zip(net.class_names, est["drops"], strict=True)},
    }
    return SimResult(solution, ci, stats_doc)


def _report(est: dict[str, Any], precision: float, events: int, max_events: int) -> None:
    """Progress: a half-width shrinks as 1/sqrt(events), so the events still needed are about
    events x (worst relative half-width / precision)^2, capped by ``max_events``."""
    worst = _worst_precision(est)
    needed = events * (worst / precision) ** 2 if math.isfinite(worst) else max_events
    step("simulating to the target precision", events, min(max(needed, events), max_events))


def _chain_visits(est: dict[str, Any], chains: list[int]) -> np.ndarray:
    """Visits as class c to station k per request of c's chain (T_ck / X_chain)."""
    X = np.asarray(est["X"], dtype=float)
    X_chain = np.array([X[[d == ch for d in chains]].sum() for ch in chains])
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(X_chain[:, None] > 0, est["T"] / X_chain[:, None], 0.0)


def _has_fork(model: Model) -> bool:
    return any(s.type in ("fork", "join") for s in model.stations)


def _check(**kw: Any) -> None:
    if not 0 < kw["precision"] < 1:
        raise InputError("precision", kw["precision"], "a fraction in (0, 1)")
    if not 0.5 <= kw["confidence"] < 1:
        raise InputError("confidence", kw["confidence"], "a level in [0.5, 1)")
    if kw["max_events"] < 1000:
        raise InputError("max_events", kw["max_events"], "at least 1000")
    if kw["replications"] < 1:
        raise InputError("replications", kw["replications"], "at least 1")
    if kw["max_time"] is not None and not kw["max_time"] > 0:
        raise InputError("max_time", kw["max_time"], "a positive time in seconds")
    if kw["window"] is not None and not (0 < kw["window"] < math.inf):
        raise InputError("window", kw["window"], "a positive window length in seconds")


def _estimate(series: list[_Series], C: int, M: int, confidence: float) -> dict[str, Any]:
    """Point estimates and CI half-widths of the model's stations (hubs dropped)."""
    per_rep = []
    for ser in series:
        a = ser.arrays()
        if not a or a["sys_completions"].shape[0] == 0:
            return {"X_hw": np.full(C, np.inf), "R_hw": np.full(C, np.inf)}
        d = stats.mser5(a["sys_completions"].sum(axis=1))
        cut = {k: v[d:] for k, v in a.items()}
        per_rep.append((cut, d * ser.width, ser.width))
    rows = []
    for cut, _, width in per_rep:
        n = cut["sys_completions"].shape[0]
        T = np.full(n, width)
        rows.append(
            {
                "X": stats.ratio_ci(cut["sys_completions"], T[:, None], confidence=confidence),
                "R": stats.ratio_ci(
                    cut["sys_rt_sum"], cut["sys_completions"], confidence=confidence
                ),
                "Q": stats.ratio_ci(
                    cut["q_area"][:, :, :M], T[:, None, None], confidence=confidence
                ),
                "U": stats.ratio_ci(
                    cut["busy_area"][:, :, :M], T[:, None, None], confidence=confidence
                ),
                "T": stats.ratio_ci(
                    cut["completions"][:, :, :M], T[:, None, None], confidence=confidence
                ),
                "W": stats.ratio_ci(
                    cut["rt_sum"][:, :, :M], cut["completions"][:, :, :M], confidence=confidence
                ),
                "drops": cut["drops"].sum(axis=(0, 2)),
            }
        )
    out: dict[str, Any] = {}
    for key in ("X", "R", "Q", "U", "T", "W"):
        if len(rows) == 1:
            out[key], out[f"{key}_hw"] = rows[0][key]
        else:
            out[key], out[f"{key}_hw"] = stats.replication_ci(
                np.stack([r[key][0] for r in rows]), confidence
            )
    for key in ("X", "Q", "U", "T"):
        out[key] = np.nan_to_num(out[key])
    with np.errstate(divide="ignore", invalid="ignore"):
        X = out["X"][:, None]
        out["visits"] = np.where(X > 0, out["T"] / np.where(X > 0, X, 1), 0.0)
    out["drops"] = np.sum([r["drops"] for r in rows], axis=0)
    out["warmup"] = float(np.mean([w for _, w, _ in per_rep]))
    return out


def _worst_precision(est: dict[str, Any]) -> float:
    """The largest relative half-width of a class throughput or response time (inf: none yet)."""
    X, R = est.get("X"), est.get("R")
    if X is None or R is None:
        return math.inf
    active = X > 0
    if not active.any():
        return math.inf
    rel_x = est["X_hw"][active] / X[active]
    rel_r = est["R_hw"][active] / np.maximum(R[active], 1e-300)
    worst = float(max(np.max(rel_x), np.max(rel_r)))
    return worst if math.isfinite(worst) else math.inf


def _precise(est: dict[str, Any], precision: float) -> bool:
    return _worst_precision(est) <= precision


def _ci_doc(sol: Solution, est: dict[str, Any]) -> dict[str, Any]:
    """Half-widths in the same shape as the result's classes and stations."""
    net = sol.network

    def num(v: float) -> float | None:
        return float(v) if math.isfinite(v) else None

    classes = {
        cname: {"throughput": num(est["X_hw"][c]), "response_time": num(est["R_hw"][c])}
        for c, cname in enumerate(net.class_names)
    }
    stations: dict[str, Any] = {}
    for k, sname in enumerate(net.station_names):
        per_class = {}
        for c, cname in enumerate(net.class_names):
            if est["T"][c, k] <= 0:
                continue
            per_class[cname] = {
                "utilization": num(est["U_hw"][c, k]),
                "queue_length": num(est["Q_hw"][c, k]),
                "response_time": num(est["W_hw"][c, k]),
                "throughput": num(est["T_hw"][c, k]),
            }
        stations[sname] = {"per_class": per_class}
    return {"classes": classes, "stations": stations}
