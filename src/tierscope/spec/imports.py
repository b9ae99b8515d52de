"""Schemas of the CSV files ``tierscope import csv`` reads (PRODUCT.md §4.4).

Design decision: one pydantic model per file describes one row (its fields are the columns,
required or optional, with their types); the importer validates whole columns at once with
polars against these models (a row-by-row pydantic pass would cost minutes on a million
requests) and reports the first bad value with the file, the line and the column.

Times (``ts``, ``start``, ``end``, ``t_start``, ``t_end``) are seconds or ISO 8601 date-times;
ISO times and numbers of at least 1e9 (Unix epoch seconds) are absolute and are rebased to the
earliest absolute time of all imported files, so every table shares one time base starting at 0.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

#: Numbers at or above this are read as Unix epoch seconds (2001-09-09 onwards).
EPOCH_MIN = 1e9

Time = float | str


class MetricsRow(BaseModel):
    """One sample of one metric: ``--metrics FILE.csv``."""

    model_config = ConfigDict(extra="forbid")
    ts: Time
    tier: str
    metric: str
    value: float | None  # empty: no measurement (the row is skipped)
    node: str | None = None
    setup: str | None = None
    level: float | None = None
    rep: int | None = None


class RequestsRow(BaseModel):
    """One request at one tier: ``--requests FILE.csv`` (tier ``client`` = end to end)."""

    model_config = ConfigDict(extra="forbid")
    tier: str
    request_id: str
    start: Time
    end: Time
    interaction: str | None = None
    status: str | None = None
    setup: str | None = None
    level: float | None = None
    rep: int | None = None


class PointsRow(BaseModel):
    """One load level (one repetition): ``--points FILE.csv``.

    Any further column is a metric aggregate named ``tier.metric`` (a number).
    """

    model_config = ConfigDict(extra="allow")
    level: float
    throughput: float
    setup: str | None = None
    rep: int | None = None
    t_start: Time | None = None
    t_end: Time | None = None
    rt_mean: float | None = None
    rt_p50: float | None = None
    rt_p95: float | None = None
    rt_p99: float | None = None
    errors: float | None = None


ImportKind = Literal["metrics", "requests", "points"]
ROWS: dict[str, type[BaseModel]] = {
    "metrics": MetricsRow,
    "requests": RequestsRow,
    "points": PointsRow,
}
#: Columns holding times, per file kind.
TIME_COLUMNS: dict[str, tuple[str, ...]] = {
    "metrics": ("ts",),
    "requests": ("start", "end"),
    "points": ("t_start", "t_end"),
}


def columns(kind: str) -> tuple[list[str], list[str]]:
    """(required, optional) column names of a file kind."""
    fields = ROWS[kind].model_fields
    required = [n for n, f in fields.items() if f.is_required()]
    optional = [n for n, f in fields.items() if not f.is_required()]
    return required, optional


def column_type(kind: str, name: str) -> str:
    """``time``, ``number``, ``integer`` or ``text`` for a column of a file kind."""
    if name in TIME_COLUMNS[kind]:
        return "time"
    field = ROWS[kind].model_fields.get(name)
    if field is None:  # a points metric column
        return "number"
    text = str(field.annotation)
    if "int" in text:
        return "integer"
    if "float" in text:
        return "number"
    return "text"


# ---- wide tables (``tierscope import metrics``) ---------------------------------------------
#: What a column's metric part means: the metric it becomes and how its values are read.
#: ``cpu``: CPU whose unit is detected (percent of one core, cores, or a fraction of the
#: limit); ``fraction``: 0-1, or percent when the values pass 1.5; ``per_row``: a count over
#: each row's interval, divided by the rows' time step into a rate; ``bytes``, ``rate`` (per
#: second), ``seconds``, ``count``: as they are.
METRIC_SUFFIXES: dict[str, tuple[str, str]] = {
    "cpu": ("cpu", "cpu"),
    "cpu_usage": ("cpu", "cpu"),
    "cpu_percent": ("cpu", "percent"),
    "cpu_pct": ("cpu", "percent"),
    "cpu_cores": ("cpu_cores", "count"),
    "cpu_util": ("cpu_util", "fraction"),
    "cpu_utilization": ("cpu_util", "fraction"),
    "cpu_throttled_ratio": ("cpu_throttled_ratio", "fraction"),
    "mem": ("mem_bytes", "bytes"),
    "memory": ("mem_bytes", "bytes"),
    "mem_bytes": ("mem_bytes", "bytes"),
    "memory_usage": ("mem_bytes", "bytes"),
    "rss": ("mem_bytes", "bytes"),
    "mem_util": ("mem_util", "fraction"),
    "major_faults": ("major_faults_s", "rate"),
    "disk_util": ("disk_util", "fraction"),
    "net_rx_bytes_s": ("net_rx_bytes_s", "rate"),
    "net_tx_bytes_s": ("net_tx_bytes_s", "rate"),
    "lod": ("throughput_s", "rate"),
    "load": ("throughput_s", "rate"),
    "rps": ("throughput_s", "rate"),
    "qps": ("throughput_s", "rate"),
    "throughput": ("throughput_s", "rate"),
    "throughput_s": ("throughput_s", "rate"),
    "request_rate": ("throughput_s", "rate"),
    "errors": ("errors_s", "rate"),
    "error_rate": ("errors_s", "rate"),
    "lat": ("rt_mean", "seconds"),
    "latency": ("rt_mean", "seconds"),
    "rt_mean": ("rt_mean", "seconds"),
    "lat_50": ("rt_p50", "seconds"),
    "lat_90": ("rt_p90", "seconds"),
    "lat_95": ("rt_p95", "seconds"),
    "lat_99": ("rt_p99", "seconds"),
    "p50": ("rt_p50", "seconds"),
    "p90": ("rt_p90", "seconds"),
    "p95": ("rt_p95", "seconds"),
    "p99": ("rt_p99", "seconds"),
    "queue_length": ("queue_length", "count"),
    "active_workers": ("active_workers", "count"),
    # CloudWatch / X-Ray style (a metric and its statistic, e.g. pandas column levels)
    "latency_average": ("rt_mean", "seconds"),
    "latency_p50": ("rt_p50", "seconds"),
    "latency_p90": ("rt_p90", "seconds"),
    "latency_p95": ("rt_p95", "seconds"),
    "latency_p99": ("rt_p99", "seconds"),
    "requests_sum": ("throughput_s", "per_row"),
    "availability_average": ("availability", "fraction"),
    "availability": ("availability", "fraction"),
}
#: Names a wide table's time column goes by (first found).
TIME_NAMES = ("time", "ts", "timestamp", "unix_timestamp", "datetime", "date", "t")
#: Units the user may give for CPU columns (``--cpu-unit``).
CPU_UNITS = ("percent", "cores", "fraction")
