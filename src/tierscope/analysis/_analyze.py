"""The whole analysis of one run: the sections of PRODUCT.md §4.5 put together.

Design decision: every section reads the same steady windows (from ``points.parquet``, else
from the setup/level/rep columns of the metrics or requests) and the same tier order, computed
once here; the sections never read each other's internals, only the saturation labels flow on
to the bottleneck and indicator sections, and the bottleneck primaries on to the episode groups.
"""

from __future__ import annotations

import math
from typing import Any, Protocol

import polars as pl

from tierscope.analysis import bottleneck, indicators, millibottlenecks, saturation, suspects
from tierscope.analysis import episodes as episode_groups
from tierscope.analysis._windows import in_steady_windows
from tierscope.errors import InputError
from tierscope.spec.analysis import AnalysisDocument, AnalysisOptions
from tierscope.spec.graph import Graph
from tierscope.spec.runs import RunKind, RunSpec, plus_one_pairs, workload_mode

CLIENT, HOST = "client", "host"


class RunLike(Protocol):
    """What the analysis needs of a run (``tierscope.store.Run`` has it)."""

    metrics: pl.DataFrame | None
    requests: pl.DataFrame | None
    events: pl.DataFrame | None
    points: pl.DataFrame | None

    @property
    def status(self) -> str: ...

    @property
    def kind(self) -> RunKind | None: ...

    @property
    def spec(self) -> RunSpec | None: ...

    @property
    def name(self) -> str: ...

    @property
    def graph(self) -> Graph: ...

    @property
    def interval(self) -> float | None: ...


def _nonempty(frame: pl.DataFrame | None) -> pl.DataFrame | None:
    return frame if frame is not None and frame.height > 0 else None


def steady_windows(run: RunLike) -> pl.DataFrame:
    """One row per (setup, level, rep) with its steady window [t_start, t_end).

    From ``points`` when it has the windows; else the span of each (setup, level, rep) of the
    metrics, else of the requests (imported data), with setup ``s0`` and rep 0 when absent.
    """
    schema = {
        "setup": pl.String,
        "level": pl.Float64,
        "rep": pl.Int64,
        "t_start": pl.Float64,
        "t_end": pl.Float64,
    }
    points = _nonempty(run.points)
    if points is not None and {"t_start", "t_end"} <= set(points.columns):
        win = points.filter(pl.col("t_start").is_not_null() & pl.col("t_end").is_not_null())
        if win.height:
            return (
                _with_defaults(win)
                .select(*(pl.col(c).cast(t) for c, t in schema.items()))
                .sort("t_start")
            )
    for frame, t0, t1 in ((run.metrics, "t", "t"), (run.requests, "start", "end")):
        frame = _nonempty(frame)
        if frame is None:
            continue
        frame = _with_defaults(frame)
        spans = (
            frame.group_by("setup", "level", "rep")
            .agg(pl.col(t0).min().alias("t_start"), pl.col(t1).max().alias("t_end"))
            .filter(pl.col("t_start").is_not_null())
        )
        if t0 == "t":  # a sample describes the interval after it
            spans = spans.with_columns(pl.col("t_end") + (run.interval or 0.0))
        return spans.select(*(pl.col(c).cast(t) for c, t in schema.items())).sort("t_start")
    return pl.DataFrame(schema=schema)


def _with_defaults(frame: pl.DataFrame) -> pl.DataFrame:
    cols = []
    if "setup" not in frame.columns:
        cols.append(pl.lit("s0", pl.String).alias("setup"))
    if "level" not in frame.columns:
        cols.append(pl.lit(None, pl.Float64).alias("level"))
    if "rep" not in frame.columns:
        cols.append(pl.lit(0, pl.Int64).alias("rep"))
    frame = frame.with_columns(cols) if cols else frame
    return frame.with_columns(
        pl.col("setup").fill_null("s0"), pl.col("rep").fill_null(0).cast(pl.Int64)
    )


def tier_order(run: RunLike) -> list[str]:
    """The tiers the data names, front to back: ``client`` first, then the run's components by
    their depth in the call graph (then their order), then names the graph lacks, ``host``
    last."""
    seen: set[str] = set()
    for frame in (run.metrics, run.requests):
        if _nonempty(frame) is not None and "tier" in frame.columns:
            seen |= {str(t) for t in frame["tier"].unique().drop_nulls().to_list()}
    graph = run.graph

    def key(t: str) -> tuple[int, int, int, str]:
        head = 0 if t == CLIENT else 2 if t == HOST else 1
        return (head, graph.depth(t), graph.position(t), t)

    return sorted(seen, key=key)


def _slo_satisfaction(
    requests: pl.DataFrame | None, windows: pl.DataFrame, tiers: list[str], slo_s: float
) -> dict[tuple[str, float], float]:
    if requests is None or windows.height == 0:
        return {}
    front = CLIENT if CLIENT in tiers else (tiers[0] if tiers else None)
    front_requests = requests.filter(pl.col("tier") == front).select("start", "end")
    sat = (
        in_steady_windows(front_requests, windows, time="start")
        .filter(pl.col("end") <= pl.col("t_end"))
        .group_by("_setup", "_level")
        .agg(((pl.col("end") - pl.col("start")) <= slo_s).mean().alias("ok"))
        .collect()
    )
    return {(str(s), float(lv)): float(ok) for s, lv, ok in sat.iter_rows() if lv is not None}


def analyze(run: RunLike, options: AnalysisOptions | None = None) -> dict[str, Any]:
    """The analysis document of ``run`` (PRODUCT.md §4.5, validated by AnalysisDocument)."""
    options = options or AnalysisOptions()
    metrics = _nonempty(run.metrics)
    requests = _nonempty(run.requests)
    points = _nonempty(run.points)
    if metrics is None and requests is None and points is None:
        raise InputError(
            "run",
            str(getattr(run, "path", "run")),
            "a run with metrics, requests or points (it is empty)",
        )
    windows = steady_windows(run)
    tiers = tier_order(run)
    notes: list[str] = []
    if run.graph.inferred and len(run.graph.components) > 1:
        notes.append(
            "the run records no call graph: its components are taken as a chain in the order "
            "requests reach them (" + " -> ".join(run.graph.names) + "); push-back and the "
            "roots of episodes follow it"
            if run.graph.edges()
            else "the run records no call graph and no requests: its components are taken as "
            "unrelated (no push-back between them; each episode is its own root)"
        )

    slo_sat = (
        _slo_satisfaction(requests, windows, tiers, options.slo_s)
        if options.slo_s is not None
        else {}
    )
    sat = saturation.analyze_saturation(
        points,
        options,
        companions=plus_one_pairs(run.spec),
        open_workload=workload_mode(run.spec) == "open",
        slo_satisfaction=slo_sat,
    )
    few = sorted(
        set(points["setup"].unique().to_list()) - {s["setup"] for s in sat}
        if points is not None and "setup" in points.columns
        else []
    )
    if few:
        notes.append(
            f"setups with fewer than {saturation.MIN_LEVELS} load levels have no saturation "
            "analysis: " + ", ".join(few)
        )
    labels = {(s["setup"], c["level"]): c["label"] for s in sat for c in s["curve"]}

    level_keys = sorted(
        {
            (str(s), None if lv is None else float(lv))
            for s, lv in windows.select("setup", "level").iter_rows()
        },
        key=lambda k: (k[0], -math.inf if k[1] is None else k[1]),
    )
    if metrics is not None and windows.height:
        states = bottleneck.window_states(metrics, windows, options)
        growing = bottleneck.queue_growth(metrics, windows)
    else:
        states, growing = pl.DataFrame(), {}
    bottlenecks = bottleneck.analyze_bottlenecks(
        states, options, labels=labels, levels=level_keys, growing=growing, graph=run.graph
    )
    if metrics is None:
        notes.append("no metrics: bottleneck resources are not judged")
    client_levels = [b for b in bottlenecks if b["kind"] == "client"]
    if client_levels:
        notes.append(
            "the load generator limited throughput at "
            + ", ".join(
                f"{b['setup']}@{b['level']:g}" for b in client_levels if b["level"] is not None
            )
        )

    if points is not None:
        levels = indicators.metric_levels(metrics, points, windows)
        indicator_list, sets = indicators.analyze_indicators(levels, sat, options)
    else:
        indicator_list, sets = [], []

    episodes, groups, loads, vlrt = _episodes(
        run, requests, metrics, tiers, options, windows, bottlenecks
    )
    if requests is None and metrics is not None:
        notes.append("no request records: episodes are resource-saturation episodes from metrics")
    found: list[dict[str, Any]] = []
    no_levels = metrics is not None and (
        "level" not in metrics.columns or metrics["level"].is_null().all()
    )
    if points is None and metrics is not None and no_levels:
        found, said = suspects.rank_suspects(
            metrics, None if run.graph.inferred else run.graph, options.normal_until_s
        )
        notes.append(
            "no load levels (incident data): no saturation curve or indicators, which need a "
            f"sweep; suspects ranked with {said}"
            + ("" if not run.graph.inferred else ", without a call graph (none recorded)")
        )

    doc = {
        "saturation": sat,
        "bottlenecks": bottlenecks,
        "indicators": indicator_list,
        "episodes": episodes,
        "vlrt": vlrt,
        "episode_groups": groups,
        "indicator_sets": sets,
        "tier_loads": loads,
        "tiers": tiers,
        "notes": notes,
        "options": options.model_dump(mode="json"),
        "run": {
            "status": run.status,
            "kind": run.kind,
            "name": run.name,
        },
        "suspects": found,
    }
    return AnalysisDocument.model_validate(doc).model_dump(mode="json", by_alias=True)


def _episodes(
    run: RunLike,
    requests: pl.DataFrame | None,
    metrics: pl.DataFrame | None,
    tiers: list[str],
    options: AnalysisOptions,
    windows: pl.DataFrame,
    bottlenecks: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    loads: list[dict[str, Any]] = []
    vlrt_tier = None
    count = explained = 0
    if requests is not None:
        tl = millibottlenecks.timeline(requests, options.mb_window_s)
        episodes, loads = (
            millibottlenecks.detect_episodes(tl, tiers, options) if tl is not None else ([], [])
        )
        millibottlenecks.cross_check(episodes, metrics, options)
    elif metrics is not None:
        episodes = millibottlenecks.metric_episodes(metrics, options)
    else:
        episodes = []
    frozen = millibottlenecks.frozen_stretches(
        metrics,
        [t for t in tiers if t != CLIENT],
        nested=run.kind not in ("simulation", "simulated-sweep"),
        front={t: run.graph.callers(t) for t in tiers if t in run.graph},
    )
    millibottlenecks.assign_roots(episodes, tiers, options.mb_window_s, frozen, graph=run.graph)
    # the steady windows stand in for the phases of imported data, so episodes keep their setup
    spans = millibottlenecks.spans_of(run.events, windows)
    millibottlenecks.place(episodes, spans)
    millibottlenecks.push_back_roots(episodes, bottlenecks, run.graph.downstream)
    front_times = None
    if requests is not None:
        present = set(requests["tier"].unique().to_list())
        vlrt_tier = CLIENT if CLIENT in present else next((t for t in tiers if t in present), None)
        front = requests.filter(pl.col("tier") == vlrt_tier)
        front_times = (front["start"].to_numpy(), front["end"].to_numpy())
        count, explained = millibottlenecks.vlrt_links(*front_times, episodes, options.vlrt_s)
    else:
        for ep in episodes:
            ep["vlrt_requests"] = 0
    episodes.sort(key=lambda e: (e["start"], tiers.index(e["tier"]) if e["tier"] in tiers else 0))
    groups = episode_groups.group_episodes(
        episodes,
        tiers,
        spans,
        options.mb_window_s,
        front_times,
        options.vlrt_s,
        episode_groups.bottleneck_levels(bottlenecks),
    )
    vlrt = {
        "threshold_s": options.vlrt_s,
        "count": count,
        "explained": explained,
        "explained_fraction": explained / count if count else None,
        "tier": vlrt_tier,
    }
    return episodes, groups, loads, vlrt
