"""Synthetic runs with planted ground truth, for tests, benchmarks and examples (in the spirit
of ruptures' ``datasets``): request records of a chain of tiers with injected stalls, metric
series with planted saturation patterns, and indicator curves of the thesis's shapes.

Design decision: every generator is seeded, vectorised and independent of the analysis code;
the truth it plants (stall times, saturated windows, pattern shapes) is returned beside the
data, so tests compare the analysis with it rather than with the analysis's own earlier output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from tierscope.analysis.indicators import LEVELS_SCHEMA
from tierscope.spec.graph import Graph

__all__ = [
    "PATTERNS",
    "Stall",
    "chain_requests",
    "chain_sweep",
    "graph_requests",
    "indicator_curve",
    "indicator_setups",
    "saturation_series",
    "sweep_labels",
]


@dataclass(frozen=True)
class Stall:
    """Tier ``tier`` does no work during [start, start + duration)."""

    tier: str
    start: float
    duration: float


def _fcfs(arrivals: np.ndarray, service: np.ndarray, stalls: Sequence[Stall]) -> np.ndarray:
    """Departures of a single-server FCFS queue (arrivals sorted), stalls as phantom jobs.

    D_i = max(A_i, D_{i-1}) + S_i unrolled: D = C + cummax(A - C_prev) with C the cumulative
    service; a stall is a job of length ``duration`` arriving at its start, so the server
    finishes the job in hand, then stops.
    """
    if stalls:
        a = np.concatenate((arrivals, [s.start for s in stalls]))
        s = np.concatenate((service, [s.duration for s in stalls]))
        real = np.concatenate((np.ones(arrivals.size, bool), np.zeros(len(stalls), bool)))
        order = np.argsort(a, kind="stable")
        a, s, real = a[order], s[order], real[order]
    else:
        a, s, real = arrivals, service, None
    c = np.cumsum(s)
    d = c + np.maximum.accumulate(a - (c - s))
    if real is None:
        return d
    out = np.empty(arrivals.size)
    out[order[real]] = d[real]
    return out


def _labelled(frames: list[pl.DataFrame], setup: str, level: float | None) -> pl.DataFrame:
    """Request records in the store's format: ``frames`` with setup, level, rep 0, one
    interaction and status ok."""
    return pl.concat(frames).with_columns(
        pl.lit(setup).alias("setup"),
        pl.lit(level, pl.Float64).alias("level"),
        pl.lit(0, pl.Int64).alias("rep"),
        pl.lit("req").alias("interaction"),
        pl.lit("ok").alias("status"),
    )


def chain_requests(
    n: int,
    rate: float,
    service: Mapping[str, float],
    *,
    stalls: Sequence[Stall] = (),
    nested: bool = True,
    seed: int = 0,
    setup: str = "s0",
    level: float | None = None,
) -> pl.DataFrame:
    """``n`` requests arriving as a Poisson stream of ``rate`` per second through single-server
    FCFS tiers in the order of ``service`` (mean exponential service times [s]).

    Records (store format): one per request per tier plus ``client`` (end to end). ``nested``:
    a tier's record lasts until the request has left every tier behind it (as when a tier
    waits for its downstream call); otherwise it is the visit alone (as the simulator writes).
    """
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1.0 / rate, n))
    tiers = list(service)
    arrive = {}
    leave = {}
    a = t
    for tier in tiers:
        own = [s for s in stalls if s.tier == tier]
        d = _fcfs(a, rng.exponential(service[tier], n), own)
        arrive[tier], leave[tier] = a, d
        order = np.argsort(d, kind="stable")  # the next tier sees departures in time order
        a_next = np.empty(n)
        a_next[order] = np.maximum.accumulate(d[order])
        a = a_next
    last = leave[tiers[-1]]
    eps = 1e-6
    ids = np.arange(n).astype(str)
    frames = []
    for k, tier in enumerate(tiers):
        end = last + (len(tiers) - 1 - k) * eps if nested else leave[tier]
        frames.append(
            pl.DataFrame({"tier": tier, "request_id": ids, "start": arrive[tier], "end": end})
        )
    frames.append(
        pl.DataFrame(
            {"tier": "client", "request_id": ids, "start": t - eps, "end": last + len(tiers) * eps}
        )
    )
    return _labelled(frames, setup, level)


def graph_requests(
    n: int,
    rate: float,
    graph: Graph,
    service: Mapping[str, float],
    *,
    stalls: Sequence[Stall] = (),
    seed: int = 0,
    setup: str = "s0",
    level: float | None = None,
) -> pl.DataFrame:
    """``n`` requests arriving as a Poisson stream of ``rate`` per second at ``graph``'s entry.

    Each component is a single-server FCFS queue (mean exponential service ``service[name]``
    [s]); after its service a visit makes its calls: each with its probability, ``times``
    visits, in sequence (a call starts when the one before returned) or all at once and joined
    (``parallel``). A visit's record lasts until its calls have returned (nested), with its own
    id (``visit``) and its caller's (``parent``); ``client`` is end to end. Each component must
    have at most one caller, and the repeated visits of one call (``times`` > 1) queue apart
    from each other (an approximation)."""
    shared = [c for c in graph.names if len(graph.callers(c)) > 1]
    if shared:
        raise ValueError(f"components with several callers are not generated: {shared}")
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1.0 / rate, n))
    ids = np.arange(n)
    frames: list[pl.DataFrame] = []
    counter = [0]

    def visit(name: str, a: np.ndarray, req: np.ndarray, parent: np.ndarray | None) -> np.ndarray:
        order = np.argsort(a, kind="stable")
        d = np.empty(a.size)
        own = [s for s in stalls if s.tier == name]
        d[order] = _fcfs(a[order], rng.exponential(service[name], a.size), own)
        vid = np.arange(counter[0], counter[0] + a.size)
        counter[0] += a.size
        comp = graph[name]
        end = d.copy()
        for call in comp.calls:
            for _ in range(call.times):
                made = np.flatnonzero(rng.random(a.size) < call.p)
                if made.size == 0:
                    continue
                start = d[made] if comp.parallel else end[made]
                back = visit(call.to, start, req[made], vid[made])
                end[made] = np.maximum(end[made], back) if comp.parallel else back
        frame = pl.DataFrame(
            {"request_id": req.astype(str), "start": a, "end": end, "visit": vid.astype(str)}
        )
        frames.append(
            frame.select(
                pl.lit(name).alias("tier"),
                pl.all(),
                (
                    pl.lit(None, pl.String) if parent is None else pl.Series(parent.astype(str))
                ).alias("parent"),
            )
        )
        return end

    entry = graph.entry or graph.names[0]
    last = visit(entry, t, ids, None)
    eps = 1e-6
    none = pl.lit(None, pl.String)
    client = {"tier": "client", "request_id": ids.astype(str), "start": t - eps, "end": last + eps}
    frames.append(pl.DataFrame(client).with_columns(none.alias("visit"), none.alias("parent")))
    return _labelled(frames, setup, level)


def saturation_series(
    fractions: Mapping[str, float],
    windows: int,
    *,
    mode: str = "independent",
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Binary saturation series per resource with the given fractions of saturated windows.

    ``independent``: each resource saturates in a random subset of windows, independently;
    ``alternating``: the resources take turns (never two at once; fractions must sum to <= 1);
    ``together``: all saturate in the same windows (the largest fraction's subset, nested).
    """
    rng = np.random.default_rng(seed)
    names = list(fractions)
    out = {}
    if mode == "independent":
        for name in names:
            b = np.zeros(windows, bool)
            b[rng.choice(windows, round(fractions[name] * windows), replace=False)] = True
            out[name] = b
    elif mode == "alternating":
        if sum(fractions.values()) > 1 + 1e-9:
            raise ValueError("alternating fractions must sum to at most 1")
        owner = np.full(windows, -1)
        # turns of random length (1-4 windows), assigned round-robin, then trimmed to fractions
        pos = 0
        turn = 0
        while pos < windows:
            length = int(rng.integers(1, 5))
            owner[pos : pos + length] = turn % (len(names) + 1) - 1
            pos += length
            turn += 1
        for i, name in enumerate(names):
            idx = np.flatnonzero(owner == i)
            want = round(fractions[name] * windows)
            b = np.zeros(windows, bool)
            b[idx[:want]] = True
            out[name] = b
    elif mode == "together":
        order = rng.permutation(windows)
        for name in names:
            b = np.zeros(windows, bool)
            b[order[: round(fractions[name] * windows)]] = True
            out[name] = b
    else:
        raise ValueError(f"unknown mode {mode!r}")
    return out


#: The sub-patterns the thesis draws for each category (seed 000, Figs 3.8-3.12).
PATTERNS: dict[str, tuple[str, ...]] = {
    "reliable": (
        "constant-step-constant",
        "constant-linear",
        "linear-constant",
        "constant-constant-linear",
    ),
    "partially reliable": ("linear-linear", "constant-constant-decrease", "linear-periodic"),
    "not reliable": ("constant", "linear", "periodic", "spikes-same-values"),
    "misleading": ("early-step", "late-step", "early-bend"),
}


def sweep_labels(levels: int, first_gray: int, first_server: int) -> list[str]:
    """client / gray / server labels of a sweep with the shift at the given level indices."""
    return [
        "client" if i < first_gray else "gray" if i < first_server else "server"
        for i in range(levels)
    ]


def indicator_curve(
    pattern: str,
    levels: int,
    first_gray: int,
    first_server: int,
    *,
    noise: float = 0.02,
    seed: int = 0,
) -> np.ndarray:
    """A metric's mean per level following one of the thesis's sub-patterns (:data:`PATTERNS`)
    for a sweep whose bottleneck shifts at ``first_gray``/``first_server``; values span about
    [0, 1] plus Gaussian noise of ``noise`` (relative to that span)."""
    rng = np.random.default_rng(seed)
    i = np.arange(levels, dtype=float)
    g, s = float(first_gray), float(first_server)
    up = 1.0 if rng.random() < 0.5 else -1.0
    amp = rng.uniform(0.5, 1.0)
    if pattern == "constant-step-constant":  # V, ramp through the gray zone, W
        y = np.clip((i - (g - 1)) / max(s - g + 1, 1.0), 0, 1) * amp * up
    elif pattern == "constant-linear":
        y = np.maximum(i - (s - 1), 0) / max(levels - s, 1) * amp * up
    elif pattern == "linear-constant":
        y = np.minimum(i, s) / s * amp * up
    elif pattern == "constant-constant-linear":
        y = 0.3 * (i >= max(2.0, g - 3)) + np.maximum(i - (s - 1), 0) / max(levels - s, 1)
        y = y * amp * up
    elif pattern == "linear-linear":  # rises, then falls back over the same values
        y = np.where(i < s, i / s, 1 - (i - s) / max(levels - s, 1) * rng.uniform(0.7, 1.0))
        y = y * amp * up
    elif pattern == "constant-constant-decrease":
        y = 0.6 * (i >= max(2.0, g - 3)) - np.maximum(i - (s - 1), 0) / max(levels - s, 1) * 0.9
        y = y * amp
    elif pattern == "linear-periodic":
        y = np.where(i < s, i / s, 1 + 0.6 * (-1.0) ** i) * amp
    elif pattern == "constant":
        y = np.zeros(levels)
    elif pattern == "linear":
        y = i / (levels - 1) * amp * up
    elif pattern == "periodic":
        y = 0.5 * (-1.0) ** i * amp
    elif pattern == "spikes-same-values":  # constant, then spikes whose troughs stay at V
        y = np.where((i >= s) & (i % 2 == 0), amp, 0.0)
    elif pattern == "early-step":
        at = rng.integers(1, max(2, int(g) - 2))
        y = (i >= at) * amp * up
    elif pattern == "late-step":
        at = rng.integers(min(int(s) + 3, levels - 2), levels - 1)
        y = (i >= at) * amp * up
    elif pattern == "early-bend":  # constant, then linear from well before the gray zone
        at = rng.integers(1, max(2, int(g) - 2))
        y = np.maximum(i - at, 0) / (levels - at) * amp * up
    else:
        raise ValueError(f"unknown pattern {pattern!r}")
    return y + rng.normal(0.0, noise, levels)


def chain_sweep(
    rates: Mapping[float, float],
    length: float,
    service: Mapping[str, float],
    *,
    stalls: Mapping[float, Sequence[Stall]] | None = None,
    gap: float = 3.0,
    nested: bool = True,
    seed: int = 0,
    setup: str = "s0",
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """A sweep of :func:`chain_requests` levels run one after the other: level ``lv`` is a
    Poisson stream of ``rates[lv]`` per second for ``length`` seconds, the next one starts
    ``gap`` seconds after it. ``stalls[lv]`` are planted in that level, their starts counted
    from the level's own start (as the runner schedules faults).

    Returns (requests, points): the records on the run's time base, and one row per level with
    its window and end-to-end throughput (``setup, level, rep, t_start, t_end, throughput``:
    client records completed in the window per second), as ``points.parquet`` has them.
    """
    frames = []
    rows = []
    t0 = 0.0
    for k, (level, rate) in enumerate(rates.items()):
        planted = (stalls or {}).get(level, ())
        n = max(1, round(rate * length))
        req = chain_requests(
            n,
            rate,
            service,
            stalls=planted,
            nested=nested,
            seed=seed + k,
            setup=setup,
            level=float(level),
        )
        frames.append(
            req.with_columns(
                pl.col("start") + t0,
                pl.col("end") + t0,
                pl.concat_str(pl.lit(f"{level:g}/"), pl.col("request_id")),
            )
        )
        done = req.filter((pl.col("tier") == "client") & (pl.col("end") < length)).height
        rows.append((setup, float(level), 0, t0, t0 + length, done / length))
        t0 += length + gap
    points = pl.DataFrame(
        rows,
        schema={
            "setup": pl.String,
            "level": pl.Float64,
            "rep": pl.Int64,
            "t_start": pl.Float64,
            "t_end": pl.Float64,
            "throughput": pl.Float64,
        },
        orient="row",
    )
    return pl.concat(frames), points


def indicator_setups(
    plan: Mapping[str, Mapping[str, tuple[str, str | None]]],
    levels: Sequence[float],
    shifts: Mapping[str, tuple[int, int]],
    *,
    noise: float = 0.02,
    seed: int = 0,
) -> tuple[pl.DataFrame, list[dict[str, object]]]:
    """Several setups' metric curves with planted shapes and senses, for the indicator rules.

    ``plan[metric][setup] = (pattern, sense)``: the metric follows ``pattern`` of
    :data:`PATTERNS` in that setup, oriented so that its server-bound values lie above
    (``"up"``) or below (``"down"``) its client-bound ones (None: as drawn). ``shifts[setup] =
    (first_gray, first_server)`` level indices. Returns (levels, saturation): one row per
    (setup, level, metric) as ``indicators.metric_levels`` gives them (the tier is the part of
    the name before the dot) and one saturation entry per setup with its labels.
    """
    rows = []
    rng = np.random.default_rng(seed)
    k = len(levels)
    for m, (name, per_setup) in enumerate(sorted(plan.items())):
        for setup, (pattern, sense) in sorted(per_setup.items()):
            g, s = shifts[setup]
            y = indicator_curve(pattern, k, g, s, noise=0.0, seed=seed * 7919 + m)
            low = y[: g or s].mean()
            if sense is not None and (y[s:].mean() > low) != (sense == "up"):
                y = -y
            y = y + rng.normal(0.0, noise, k)
            rows += [
                (setup, float(lv), name, name.split(".")[0], float(v))
                for lv, v in zip(levels, y, strict=True)
            ]
    frame = pl.DataFrame(rows, schema=LEVELS_SCHEMA, orient="row")
    saturation: list[dict[str, object]] = [
        {
            "setup": setup,
            "curve": [
                {"level": float(lv), "label": lab}
                for lv, lab in zip(levels, sweep_labels(k, g, s), strict=True)
            ],
        }
        for setup, (g, s) in sorted(shifts.items())
    ]
    return frame, saturation
