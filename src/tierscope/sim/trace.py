"""Turn the simulator's streamed output into the tables of the experiment store (PRODUCT §4.3).

Design decision: pure conversion, no file I/O. The runner hands every engine chunk to a callback;
these functions turn it into polars frames in the store's long formats, and ``store`` writes them,
so a simulated run is read by the same analyses as a measured one, with the model's perturbations
as ground truth. Hub stations (think times, open sources) are engine plumbing and never appear.

- metrics: one row per (window, tier, metric); tier = node = station name, setup ``sim``,
  level 0, rep = replication, t = window start. Station metrics (summed over classes):
  ``queue_length`` (time average), ``queue_length_max``, ``utilization`` (per server, as in the
  summary), ``arrivals``, ``completions``, ``drops`` (counts in the window), ``rt_mean`` and
  ``rt_max`` (per visit, only in windows with completions). Tier ``client`` (node = class)
  carries the end-to-end ``completions``, ``rt_mean`` and ``rt_max`` of each class.
- requests: one row per finished visit (tier = station) and per finished request (tier
  ``client``); start = arrival, end = departure, plus ``service_start`` (NaN if never served).
- events: every occurrence of a perturbation (``stall`` if factor 0, else ``slowdown``) and every
  step of a load schedule (``load``, tier ``client``), up to the simulated end; a perturbation
  is a ``stall`` (factor 0), a ``slowdown`` (factor < 1) or a ``speedup``.
- points: one row per replication over the steady window (after the warm-up), computed from the
  metrics and requests tables, with ``STATION.utilization|queue_length|throughput`` aggregates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from tierscope.spec.model import Model, Perturbation, Schedule

SETUP = "sim"
LEVEL = 0.0
CLIENT = "client"
#: Quantiles of the end-to-end response time reported per point.
QUANTILES = {"rt_p50": 0.50, "rt_p95": 0.95, "rt_p99": 0.99}

METRICS_SCHEMA = {
    "t": pl.Float64,
    "setup": pl.String,
    "level": pl.Float64,
    "rep": pl.Int64,
    "tier": pl.String,
    "node": pl.String,
    "metric": pl.String,
    "value": pl.Float64,
}
REQUESTS_SCHEMA = {
    "tier": pl.String,
    "request_id": pl.String,
    "start": pl.Float64,
    "end": pl.Float64,
    "setup": pl.String,
    "level": pl.Float64,
    "rep": pl.Int64,
    "interaction": pl.String,
    "status": pl.String,
    "service_start": pl.Float64,
}
EVENTS_SCHEMA = {
    "t_start": pl.Float64,
    "t_end": pl.Float64,
    "kind": pl.String,
    "tier": pl.String,
    "detail": pl.String,
}


@dataclass(frozen=True)
class Layout:
    """Names of the engine's model stations and classes, in engine order (hubs excluded)."""

    stations: tuple[str, ...]
    classes: tuple[str, ...]

    @classmethod
    def of(cls, model: Model) -> Layout:
        return cls(tuple(s.name for s in model.stations), tuple(c.name for c in model.classes))


def metrics_frame(
    windows: Mapping[str, Any],
    layout: Layout,
    *,
    width: float,
    rep: int,
    setup: str = SETUP,
    level: float = LEVEL,
) -> pl.DataFrame:
    """Long-format metrics of the engine windows of one chunk of one replication."""
    t0 = np.asarray(windows["t_start"], dtype=float)
    n, C, M = t0.size, len(layout.classes), len(layout.stations)
    if n == 0:
        return pl.DataFrame(schema=METRICS_SCHEMA)
    m_all = M + C  # engine stations: model stations, then one hub per class

    def cells(key: str) -> np.ndarray:
        return np.asarray(windows[key], dtype=float).reshape(n, C, m_all)[:, :, :M]

    def per_class(key: str) -> np.ndarray:
        return np.asarray(windows[key], dtype=float).reshape(n, C)

    completions = cells("completions").sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rt_mean = np.where(completions > 0, cells("rt_sum").sum(axis=1) / completions, np.nan)
        sys_n = per_class("sys_completions")
        sys_rt = np.where(sys_n > 0, per_class("sys_rt_sum") / sys_n, np.nan)
    has = completions > 0
    station_values = {
        "queue_length": cells("q_area").sum(axis=1) / width,
        "queue_length_max": np.asarray(windows["q_max"], dtype=float).reshape(n, m_all)[:, :M],
        "utilization": cells("busy_area").sum(axis=1) / width,
        "arrivals": cells("arrivals").sum(axis=1),
        "completions": completions,
        "drops": cells("drops").sum(axis=1),
        "rt_mean": rt_mean,
        "rt_max": np.where(has, cells("rt_max").max(axis=1), np.nan),
    }
    client_values = {
        "completions": sys_n,
        "rt_mean": sys_rt,
        "rt_max": np.where(sys_n > 0, per_class("sys_rt_max"), np.nan),
    }
    stations = np.array(layout.stations)
    blocks = [
        _long(t0, station_values, tier=stations, node=stations),
        _long(t0, client_values, tier=np.array([CLIENT] * C), node=np.array(layout.classes)),
    ]
    frame = pl.concat(blocks).filter(pl.col("value").is_not_nan())
    return frame.select(
        pl.col("t"),
        pl.lit(setup, pl.String).alias("setup"),
        pl.lit(level, pl.Float64).alias("level"),
        pl.lit(rep, pl.Int64).alias("rep"),
        pl.col("tier"),
        pl.col("node"),
        pl.col("metric"),
        pl.col("value"),
    )


def _long(
    t0: np.ndarray, values: dict[str, np.ndarray], *, tier: np.ndarray, node: np.ndarray
) -> pl.DataFrame:
    """Rows (t, tier, node, metric, value) of (window, column) arrays, metric by metric."""
    n, k = t0.size, tier.size
    parts = []
    for metric, arr in values.items():
        parts.append(
            pl.DataFrame(
                {
                    "t": np.repeat(t0, k),
                    "tier": np.tile(tier, n),
                    "node": np.tile(node, n),
                    "metric": np.full(n * k, metric),
                    "value": np.asarray(arr, dtype=float).reshape(n * k),
                },
                schema={
                    "t": pl.Float64,
                    "tier": pl.String,
                    "node": pl.String,
                    "metric": pl.String,
                    "value": pl.Float64,
                },
            )
        )
    return pl.concat(parts)


def requests_frame(
    trace: Mapping[str, Any],
    layout: Layout,
    *,
    rep: int,
    setup: str = SETUP,
    level: float = LEVEL,
) -> pl.DataFrame:
    """Requests rows of the engine trace of one chunk of one replication (hub visits dropped)."""
    station = np.asarray(trace["station"], dtype=np.int64)
    M = len(layout.stations)
    keep = station < M  # -1 is the whole request; M and above are hubs
    if not keep.any():
        return pl.DataFrame(schema=REQUESTS_SCHEMA)
    tiers = np.array([*layout.stations, CLIENT])  # index -1 picks "client"
    ids = np.asarray(trace["request_id"], dtype=np.uint64)[keep]
    frame = pl.DataFrame(
        {
            "tier": tiers[station[keep]],
            "id": ids,
            "start": np.asarray(trace["arrival"], dtype=float)[keep],
            "end": np.asarray(trace["departure"], dtype=float)[keep],
            "interaction": np.array(layout.classes)[np.asarray(trace["class"], dtype=np.int64)][
                keep
            ],
            "status": np.asarray(trace["status"])[keep],
            "service_start": np.asarray(trace["start"], dtype=float)[keep],
        },
        schema_overrides={"tier": pl.String, "interaction": pl.String, "status": pl.String},
    )
    return frame.select(
        pl.col("tier"),
        pl.concat_str(pl.lit(f"r{rep}-"), pl.col("id").cast(pl.String)).alias("request_id"),
        pl.col("start"),
        pl.col("end"),
        pl.lit(setup, pl.String).alias("setup"),
        pl.lit(level, pl.Float64).alias("level"),
        pl.lit(rep, pl.Int64).alias("rep"),
        pl.col("interaction"),
        pl.col("status"),
        pl.col("service_start"),
    )


def perturbation_times(p: Perturbation, end: float) -> list[float]:
    """Start times of the occurrences of ``p`` before ``end`` (the engine's schedule)."""
    if p.start >= end:
        return []
    if p.period is None:
        return [p.start]
    stop = end if p.until is None else min(end, p.until)
    if p.start >= stop:
        return []
    out, k = [p.start], 1
    while (t := p.start + k * p.period) < stop:  # by multiplication, as the engine does
        out.append(t)
        k += 1
    return out


def events_frame(model: Model, *, end: float) -> pl.DataFrame:
    """Ground truth up to simulated time ``end``: perturbations and load-schedule steps."""
    rows: list[dict[str, Any]] = []
    for p in model.simulation.perturbations:
        kind = "stall" if p.factor == 0 else "slowdown" if p.factor < 1 else "speedup"
        for t in perturbation_times(p, end):
            rows.append(
                {
                    "t_start": t,
                    "t_end": t + p.duration,
                    "kind": kind,
                    "tier": p.station,
                    "detail": f"factor={p.factor:g}",
                }
            )
    open_classes = {c.name for c in model.classes if c.is_open}
    for sch in model.simulation.schedules:
        rows += _schedule_rows(sch, end, is_open=sch.class_ in open_classes)
    if not rows:
        return pl.DataFrame(schema=EVENTS_SCHEMA)
    return pl.DataFrame(rows, schema=EVENTS_SCHEMA).sort("t_start", "kind", "tier")


def _schedule_rows(sch: Schedule, end: float, *, is_open: bool) -> list[dict[str, Any]]:
    what = "arrival_multiplier" if is_open else "population"
    rows = []
    for i, (t, v) in enumerate(zip(sch.times, sch.values, strict=True)):
        if t >= end:
            break
        t_end = sch.times[i + 1] if i + 1 < len(sch.times) else end
        rows.append(
            {
                "t_start": t,
                "t_end": min(t_end, end),
                "kind": "load",
                "tier": CLIENT,
                "detail": f"class={sch.class_};{what}={v:g}",
            }
        )
    return rows


def points_frame(
    metrics: pl.LazyFrame | pl.DataFrame,
    requests: pl.LazyFrame | pl.DataFrame | None,
    *,
    width: float,
    warmup: float,
    stations: Sequence[str],
) -> pl.DataFrame:
    """One row per (setup, level, rep) over the windows that start at or after ``warmup``.

    ``throughput`` and ``rt_mean`` are end-to-end over all classes, ``errors`` counts refusals
    by full buffers, the ``rt_p*`` quantiles come from the ``client`` requests (null without a
    trace), and ``STATION.utilization|queue_length|throughput`` are time averages.
    """
    keys = ["setup", "level", "rep"]
    steady = metrics.lazy().filter(pl.col("t") >= warmup - 1e-9 * max(width, 1.0))
    span = steady.group_by(keys).agg(
        pl.col("t").min().alias("t_start"), (pl.col("t").max() + width).alias("t_end")
    )
    client = steady.filter(pl.col("tier") == CLIENT)
    at = [*keys, "t", "node"]
    n_done = client.filter(pl.col("metric") == "completions").select(*at, n=pl.col("value"))
    rt = client.filter(pl.col("metric") == "rt_mean").select(*at, rt=pl.col("value"))
    e2e = (
        n_done.join(rt, on=at, how="left")
        .group_by(keys)
        .agg(pl.col("n").sum(), (pl.col("n") * pl.col("rt").fill_null(0.0)).sum().alias("rt_sum"))
    )
    tiers = steady.filter(pl.col("tier") != CLIENT)
    errors = tiers.group_by(keys).agg(
        pl.col("value").filter(pl.col("metric") == "drops").sum().alias("errors")
    )
    duration = pl.col("t_end") - pl.col("t_start")
    points = (
        span.join(e2e, on=keys, how="left")
        .join(errors, on=keys, how="left")
        .with_columns(
            (pl.col("n") / duration).alias("throughput"),
            (pl.col("rt_sum") / pl.col("n")).alias("rt_mean"),
            pl.col("errors").fill_null(0.0),
        )
    )
    if requests is not None:
        rts = (
            requests.lazy()
            .filter((pl.col("tier") == CLIENT) & (pl.col("status") == "ok"))
            .join(span, on=keys)
            .filter((pl.col("start") >= pl.col("t_start")) & (pl.col("end") <= pl.col("t_end")))
            .group_by(keys)
            .agg(
                (pl.col("end") - pl.col("start")).quantile(q).alias(c) for c, q in QUANTILES.items()
            )
        )
        points = points.join(rts, on=keys, how="left")
    else:
        points = points.with_columns(pl.lit(None, pl.Float64).alias(c) for c in QUANTILES)
    base = [*keys, "t_start", "t_end", "throughput", "rt_mean", *QUANTILES, "errors"]
    points = points.select(base).with_columns(
        pl.col(c).cast(pl.Float64) for c in ("throughput", "rt_mean", *QUANTILES)
    )
    # per-station aggregates: windows have equal widths, so a time average is sum * width / T
    names = {
        "utilization": "utilization",
        "queue_length": "queue_length",
        "completions": "throughput",
    }
    agg = (
        tiers.filter(pl.col("metric").is_in(list(names)))
        .group_by([*keys, "tier", "metric"])
        .agg(pl.col("value").sum())
        .join(span, on=keys)
        .select(
            *keys,
            pl.concat_str(
                pl.col("tier"), pl.lit("."), pl.col("metric").replace_strict(names)
            ).alias("column"),
            pl.when(pl.col("metric") == "completions")
            .then(pl.col("value") / duration)
            .otherwise(pl.col("value") * width / duration)
            .alias("value"),
        )
        .collect()
    )
    df = points.collect()
    columns = [f"{s}.{m}" for s in stations for m in names.values()]
    if agg.height:
        wide = agg.pivot(on="column", index=keys, values="value")
        df = df.join(wide, on=keys, how="left")
    return (
        df.with_columns(
            (pl.col(c).cast(pl.Float64) if c in df.columns else pl.lit(None, pl.Float64)).alias(c)
            for c in columns
        )
        .select(*base, *columns)
        .sort(keys)
    )
