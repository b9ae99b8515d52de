"""What a run says of its system's shape: its components and call graph, and its sampling
interval, read once here for every reader of a run (``Run.graph``, ``Run.interval``).

Where they come from, first found first:

* **components**: ``run.json``'s ``components`` (every run the runner writes); the experiment
  spec's system (runs written before components were recorded); otherwise the components the
  data names, taken as a chain in the order a request's records start (the spec's ``system.tiers``
  order where a spec names tiers; then :data:`KNOWN_ORDER` by the first word of a name), marked
  ``inferred``: the calls are a guess from the order, and the analysis says so.
* **interval**: ``run.json``'s ``interval``; the spec's ``monitor.interval``; otherwise the
  median step between the samples of each series of the metrics (imported data).
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from tierscope.errors import InputError, SpecError
from tierscope.spec.experiment import MonitorSpec, parse_experiment
from tierscope.spec.graph import Graph

#: Who is outside the system under test: the load generator, the host.
CLIENT, HOST = "client", "host"
#: Common names of components in the order requests usually reach them (for data without a
#: call graph or a request trace).
KNOWN_ORDER = (
    "client", "lb", "proxy", "haproxy", "web", "nginx", "apache", "frontend", "gateway",
    "app", "api", "service", "worker", "broker", "kafka", "stream", "spark", "cache",
    "middleware", "db", "database", "postgres", "mysql", "storage", "cassandra", "disk", "host",
)  # fmt: skip


def _nonempty(frame: pl.DataFrame | None) -> pl.DataFrame | None:
    return frame if frame is not None and frame.height > 0 else None


def graph_of(
    info: dict[str, Any], metrics: pl.DataFrame | None, requests: pl.DataFrame | None,
    source: str = "run.json",
) -> Graph:  # fmt: skip
    recorded = info.get("components")
    if isinstance(recorded, dict):
        try:
            return Graph.from_json(recorded)
        except ValueError as exc:
            raise InputError("components", source, f"a components document ({exc})") from None
    spec = info.get("spec")
    if info.get("kind") == "experiment" and isinstance(spec, dict):
        try:
            return parse_experiment(spec, source=source).system.graph
        except SpecError:
            pass  # a spec of an older format: the data tells
    return Graph.chain(_data_order(spec, metrics, requests), inferred=True)


def _data_order(
    spec: Any, metrics: pl.DataFrame | None, requests: pl.DataFrame | None
) -> list[str]:
    seen: set[str] = set()
    for frame in (metrics, requests):
        if _nonempty(frame) is not None and "tier" in frame.columns:
            seen |= {str(t) for t in frame["tier"].unique().drop_nulls().to_list()}
    seen -= {CLIENT, HOST}
    tiers = ((spec if isinstance(spec, dict) else {}).get("system") or {}).get("tiers")
    rank: dict[str, float] = {}
    if isinstance(tiers, dict):
        rank = {str(t): float(i) for i, t in enumerate(tiers)}
    elif _nonempty(requests) is not None:
        sample = (
            requests.head(200_000)
            .filter(~pl.col("tier").is_in([CLIENT, HOST]))
            .select("request_id", "tier", "start")
            .with_columns(pl.col("start").rank("ordinal").over("request_id").alias("r"))
            .group_by("tier")
            .agg(pl.col("r").mean())
        )
        rank = {str(t): float(r) for t, r in sample.iter_rows()}
    known = {t: i for i, t in enumerate(KNOWN_ORDER)}
    return sorted(
        seen, key=lambda t: (rank.get(t, math.inf), known.get(t.split("-")[0], len(known)), t)
    )


def interval_of(info: dict[str, Any], metrics: pl.DataFrame | None) -> float | None:
    """Seconds between two samples of the metrics (None: no metrics to tell)."""
    recorded = info.get("interval")
    if isinstance(recorded, int | float) and math.isfinite(recorded) and recorded > 0:
        return float(recorded)
    spec = info.get("spec")
    if isinstance(spec, dict):
        monitor = spec.get("monitor")
        given = monitor.get("interval") if isinstance(monitor, dict) else None
        if isinstance(given, int | float) and math.isfinite(given) and given > 0:
            return float(given)
        if info.get("kind") == "experiment":
            return MonitorSpec().interval  # the spec's default
    if _nonempty(metrics) is None or "t" not in metrics.columns:
        return None
    # each series's own step: series sampled at different instants interleave in time
    keys = [c for c in ("setup", "rep", "tier", "node", "metric") if c in metrics.columns]
    steps = (
        metrics.lazy()
        .select(*keys, "t")
        .sort("t")
        .group_by(keys)
        .agg(pl.col("t").diff().filter(pl.col("t").diff() > 0).median().alias("dt"))
        .collect()["dt"]
        .drop_nulls()
    )
    step = float(steps.median() or 0.0) if steps.len() else 0.0
    return step if step > 0 else None


__all__ = ["CLIENT", "HOST", "KNOWN_ORDER", "graph_of", "interval_of"]
