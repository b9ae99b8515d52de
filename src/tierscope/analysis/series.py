"""The time series and per-level curves the report draws, as plain lists.

Design decision: the report renders and never computes; this module turns a run into the few
series the charts need (queues and point-in-time response time per 50 ms window, VLRT
requests, resource saturation over time, utilisation per level), thinned to at most
``max_points`` windows by taking maxima, so spikes stay visible in a long run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from tierscope.analysis import indicators, millibottlenecks
from tierscope.analysis._analyze import RunLike, steady_windows
from tierscope.analysis.resources import SIGNALS, resource_scores
from tierscope.spec.analysis import AnalysisOptions

__all__ = ["report_series"]

MAX_VLRT_MARKERS = 5000


def _thin(values: np.ndarray, factor: int) -> list[float | None]:
    if factor > 1:
        n = values.size // factor * factor
        head = values[:n].reshape(-1, factor)
        # max of each group ignoring gaps (nanmax warns on an all-gap group: it stays a gap)
        peak = np.where(np.isnan(head), -np.inf, head).max(axis=1)
        values = np.where(np.isneginf(peak), np.nan, peak)
    return [None if not np.isfinite(v) else float(v) for v in values]


def report_series(
    run: RunLike, options: AnalysisOptions, max_points: int = 8_000
) -> dict[str, Any]:
    """Plot data of ``run``: ``timeline`` (per tier), ``vlrt``, ``resources``, ``utilization``."""
    out: dict[str, Any] = {"timeline": None, "vlrt": [], "resources": [], "utilization": []}
    requests = run.requests if run.requests is not None and run.requests.height else None
    metrics = run.metrics if run.metrics is not None and run.metrics.height else None
    if requests is not None:
        tl = millibottlenecks.timeline(requests, options.mb_window_s)
        if tl is not None:
            factor = max(1, -(-tl.n // max_points))
            t = tl.times()[::factor][: tl.n // factor if factor > 1 else tl.n]
            tiers = {}
            for name, tw in tl.tiers.items():
                tiers[name] = {
                    "q_mean": _thin(tw.q_mean, factor),
                    "rt_mean": _thin(tw.rt_mean, factor),
                    "rt_p99": _thin(tw.rt_p99, factor),
                }
            out["timeline"] = {
                "t": [float(v) for v in t],
                "width": tl.width * factor,
                "tiers": tiers,
            }
        present = set(requests["tier"].unique().to_list())
        front = "client" if "client" in present else sorted(present)[0]
        slow = (
            requests.filter(
                (pl.col("tier") == front) & ((pl.col("end") - pl.col("start")) >= options.vlrt_s)
            )
            .select("start", "end")
            .head(MAX_VLRT_MARKERS)
        )
        out["vlrt"] = [{"start": s, "end": e} for s, e in slow.iter_rows()]
    if metrics is not None:
        samples = resource_scores(metrics, options)
        for (tier, node, resource), frame in samples.group_by(
            "tier", "node", "resource", maintain_order=True
        ):
            factor = max(1, -(-frame.height // max_points))
            t = frame["t"].to_numpy()
            score = frame["score"].to_numpy().astype(float)
            out["resources"].append(
                {
                    "tier": tier,
                    "node": node,
                    "resource": resource,
                    "t": [float(v) for v in t[::factor][: max(1, t.size // factor)]],
                    "score": _thin(score, factor),
                }
            )
        if run.points is not None and run.points.height:
            util = {m for m, s in SIGNALS.items() if s.threshold == "saturation_threshold"}
            levels = indicators.metric_levels(metrics, run.points, steady_windows(run))
            levels = levels.filter(pl.col("name").str.split(".").list.last().is_in(sorted(util)))
            for (setup, name), frame in levels.group_by("setup", "name", maintain_order=True):
                frame = frame.sort("level")
                out["utilization"].append(
                    {
                        "setup": setup,
                        "metric": name,
                        "levels": frame["level"].to_list(),
                        "values": frame["value"].to_list(),
                    }
                )
    return out
