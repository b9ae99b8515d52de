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
