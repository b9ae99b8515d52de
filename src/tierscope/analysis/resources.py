"""Which metrics measure the saturation of which resource, and the per-window saturation score.

Design decision: a resource (cpu, workers, pool, disk, pressure, lag) is judged from every
metric that measures it, each divided by its own threshold; the resource's score in a window is
the largest of these ratios, and the resource is critically saturated when the score is >= 1.
So ``cpu_util`` at 0.97 of the quota and ``cpu_throttled_ratio`` at 1.0 both say "cpu at its
quota" without double counting, and a new metric is one line in :data:`SIGNALS`.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from tierscope.spec.analysis import AnalysisOptions

__all__ = ["SIGNALS", "Signal", "resource_samples", "resource_scores", "thresholds_of"]


@dataclass(frozen=True)
class Signal:
    """A metric that measures how saturated ``resource`` is; ``threshold`` names an option."""

    resource: str
    threshold: str
    client_only: bool = False


#: metric name -> what it measures. ``utilization`` is the busy fraction of a simulated station
#: (``model simulate --trace``), which plays the part of the tier's CPU.
SIGNALS: dict[str, Signal] = {
    "cpu_util": Signal("cpu", "saturation_threshold"),
    "cpu_throttled_ratio": Signal("cpu", "saturation_threshold"),
    "utilization": Signal("cpu", "saturation_threshold"),
    "worker_util": Signal("workers", "saturation_threshold"),
    "pool_util": Signal("pool", "saturation_threshold"),
    "disk_util": Signal("disk", "saturation_threshold"),
    "psi_cpu_some": Signal("cpu_pressure", "psi_threshold"),
    "psi_io_some": Signal("io_pressure", "psi_threshold"),
    "lag_s": Signal("lag", "client_lag_s", client_only=True),
}


def thresholds_of(options: AnalysisOptions) -> dict[str, float]:
    """metric name -> the value at which it means "saturated" under ``options``."""
    return {m: float(getattr(options, s.threshold)) for m, s in SIGNALS.items()}


def resource_samples(
    metrics: pl.LazyFrame | pl.DataFrame, options: AnalysisOptions
) -> pl.LazyFrame:
    """Rows (t, tier, node, metric, resource, value, score) of the saturation metrics.

    ``score`` = value / threshold; null and NaN values are dropped; ``node`` falls back to the
    tier when missing. Client-only signals (the load generator's lag) are kept for tier
    ``client`` only. A metric ``<signal>:<part>`` measures one part of the signal's resource
    (``pool_util:<callee>``: a component's pool to one callee) and is judged as the signal is.
    """
    limits = thresholds_of(options)
    signal = pl.col("metric").str.replace(":.*", "")
    resource = signal.replace_strict({m: s.resource for m, s in SIGNALS.items()}, default=None)
    client_only = [m for m, s in SIGNALS.items() if s.client_only]
    return (
        metrics.lazy()
        .filter(signal.is_in(list(SIGNALS)))
        .filter(pl.col("value").is_not_null() & pl.col("value").is_not_nan())
        .filter(~signal.is_in(client_only) | (pl.col("tier") == "client"))
        .select(
            pl.col("t"),
            pl.col("tier"),
            pl.coalesce(pl.col("node"), pl.col("tier")).alias("node"),
            pl.col("metric"),
            resource.alias("resource"),
            pl.col("value"),
            (pl.col("value") / signal.replace_strict(limits, default=None)).alias("score"),
        )
    )


def resource_scores(metrics: pl.LazyFrame | pl.DataFrame, options: AnalysisOptions) -> pl.DataFrame:
    """Rows (tier, node, resource, t, score): each resource's score at each sample time (the
    largest over its metrics), sorted by resource and time."""
    return (
        resource_samples(metrics, options)
        .group_by("tier", "node", "resource", "t")
        .agg(pl.col("score").max())
        .sort("tier", "node", "resource", "t")
        .collect()
    )
