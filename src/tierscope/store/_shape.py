"""What a run says of its system's shape: its components and call graph, and its sampling
interval, read once here for every reader of a run (``Run.graph``, ``Run.interval``).

Where they come from, first found first:

* **components**: ``run.json``'s ``components`` (every run the runner writes); the experiment
  spec's system (runs written before components were recorded); otherwise the components the
  data names, taken as a chain in the order a request's records start (a simulated sweep's
  stations in order; then :data:`KNOWN_ORDER` by the first word of a name), marked
  ``inferred``: the calls are a guess from the order, and the analysis says so. Data without
  request records (metrics only) gives unrelated components: nothing says who calls whom.
* **interval**: ``run.json``'s ``interval``; the spec's ``monitor.interval``; otherwise the
  median step between the samples of each series of the metrics (imported data).
"""

from __future__ import annotations

import math
from typing import Any

import polars as pl

from tierscope.errors import InputError
from tierscope.spec.experiment import ExperimentSpec
from tierscope.spec.graph import Component, Graph
from tierscope.spec.runs import RunSpec, SimulatedSweepSpec

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
    recorded: Any, spec: RunSpec | None, metrics: pl.DataFrame | None,
    requests: pl.DataFrame | None, source: str = "run.json",
) -> Graph:  # fmt: skip
    """The run's graph from ``recorded`` (``run.json``'s ``components``), its spec or its data."""
    if isinstance(recorded, dict):
        try:
            return Graph.from_json(recorded)
        except ValueError as exc:
            raise InputError("components", source, f"a components document ({exc})") from None
    if isinstance(spec, ExperimentSpec):
        return spec.system.graph
    names = _data_order(spec, metrics, requests)
    if _nonempty(requests) is None and not isinstance(spec, SimulatedSweepSpec):
        # nothing tells who calls whom: the components are unrelated, not a chain by name
        return Graph(tuple(Component(n) for n in names), None, inferred=True)
    return Graph.chain(names, inferred=True)


def _data_order(
    spec: RunSpec | None, metrics: pl.DataFrame | None, requests: pl.DataFrame | None
) -> list[str]:
    seen: set[str] = set()
    for frame in (metrics, requests):
        if _nonempty(frame) is not None and "tier" in frame.columns:
            seen |= {str(t) for t in frame["tier"].unique().drop_nulls().to_list()}
    seen -= {CLIENT, HOST}
    rank: dict[str, float] = {}
    if isinstance(spec, SimulatedSweepSpec) and spec.system.tiers:
        rank = {str(t): float(i) for i, t in enumerate(spec.system.tiers)}
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


def interval_of(recorded: Any, spec: RunSpec | None, metrics: pl.DataFrame | None) -> float | None:
    """Seconds between two samples of the metrics (None: no metrics to tell): ``recorded``
    (``run.json``'s ``interval``), the spec's monitor, else the data's own step."""
    if isinstance(recorded, int | float) and math.isfinite(recorded) and recorded > 0:
        return float(recorded)
    if isinstance(spec, ExperimentSpec | SimulatedSweepSpec):
        return spec.monitor.interval
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
