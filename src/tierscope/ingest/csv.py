"""``tierscope import csv``: tierscope's own CSV formats as a run folder (PRODUCT.md §4.3-4.4).

Design decision: every check is a whole-column polars expression driven by the row schemas of
:mod:`tierscope.spec.imports`, and every failure is an :class:`InputError` whose source is
``FILE, line N`` and whose field is the column, so a bad file costs one clear message and no
traceback; nothing is written unless every file is valid. Absolute times (ISO 8601, or epoch
seconds) are rebased to the earliest of them so all tables share the run's time base.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import polars as pl

from tierscope.errors import InputError
from tierscope.ingest._files import read_table
from tierscope.progress import tracked
from tierscope.spec.imports import EPOCH_MIN, TIME_COLUMNS, column_type, columns

__all__ = ["import_csv"]


#: Largest epoch seconds accepted: the last second of the year 9999.
EPOCH_MAX = 253_402_300_799.0


def _read(path: Path, kind: str) -> pl.DataFrame:
    src = str(path)
    if not path.is_file():
        raise InputError(f"--{kind}", src, "an existing CSV file", source=src)
    frame = read_table(path)
    required, optional = columns(kind)
    missing = [c for c in required if c not in frame.columns]
    if missing:
        raise InputError(
            missing[0],
            None,
            f"a column named '{missing[0]}' (required: {', '.join(required)})",
            source=src,
        )
    unknown = [c for c in frame.columns if c not in [*required, *optional, "_line"]]
    if kind == "points":
        unknown = [c for c in unknown if "." not in c]
    if unknown:
        raise InputError(
            unknown[0],
            None,
            "one of the columns "
            + ", ".join(required + optional)
            + (" or a metric column named tier.metric" if kind == "points" else ""),
            source=src,
        )
    return frame


def _bad(frame: pl.DataFrame, mask: pl.Expr, column: str, expected: str, src: str) -> None:
    hit = frame.filter(mask).head(1)
    if hit.height:
        line, value = hit.select("_line", column).row(0)
        raise InputError(column, value, expected, source=f"{src}, line {line}")


def _numbers(frame: pl.DataFrame, kind: str, src: str) -> pl.DataFrame:
    """Cast number/integer columns, rejecting non-numbers with the line and column."""
    casts = []
    for col in frame.columns:
        if col == "_line":
            continue
        ctype = column_type(kind, col)
        if ctype not in ("number", "integer"):
            continue
        parsed = pl.col(col).str.strip_chars().cast(pl.Float64, strict=False)
        _bad(
            frame,
            pl.col(col).is_not_null() & parsed.is_null(),
            col,
            "a number" if ctype == "number" else "an integer",
            src,
        )
        if ctype == "integer":
            _bad(frame, parsed.is_not_null() & (parsed != parsed.round()), col, "an integer", src)
            casts.append(parsed.cast(pl.Int64).alias(col))
        else:
            casts.append(parsed.alias(col))
    return frame.with_columns(casts) if casts else frame


def _times(frame: pl.DataFrame, kind: str, src: str) -> tuple[pl.DataFrame, bool]:
    """Time columns as float seconds; returns whether they are absolute (epoch seconds)."""
    absolute: bool | None = None
    out = []
    for col in TIME_COLUMNS[kind]:
        if col not in frame.columns:
            continue
        raw = pl.col(col).str.strip_chars()
        numeric = raw.cast(pl.Float64, strict=False)
        values = frame.select(numeric.alias("n"), raw.alias("r"))
        non_numeric = values.filter(pl.col("r").is_not_null() & pl.col("n").is_null())
        if non_numeric.height == 0:
            col_abs = bool(values.select((pl.col("n") >= EPOCH_MIN).any()).item())
            if col_abs and not bool(values.select((pl.col("n") >= EPOCH_MIN).all()).item()):
                _bad(frame, numeric < EPOCH_MIN, col, "epoch seconds like the other rows", src)
            _bad(
                frame,
                numeric.abs() > EPOCH_MAX,
                col,
                "seconds (Unix epoch seconds end in the year 9999; for epoch milliseconds "
                "divide by 1000)",
                src,
            )
            expr = numeric
        else:
            parsed = raw.str.to_datetime(time_zone="UTC", strict=False)
            _bad(
                frame,
                raw.is_not_null() & parsed.is_null(),
                col,
                "seconds or an ISO 8601 date-time",
                src,
            )
            col_abs = True
            expr = parsed.dt.epoch("us").cast(pl.Float64) / 1e6
        if absolute is not None and absolute != col_abs:
            raise InputError(
                col, None, "times of the same kind as the file's other time column", source=src
            )
        absolute = col_abs
        out.append(expr.alias(col))
    return (frame.with_columns(out) if out else frame), bool(absolute)


def _prepare(path: Path, kind: str) -> tuple[pl.DataFrame, bool]:
    src = str(path)
    frame = _read(path, kind)
    frame, absolute = _times(frame, kind, src)
    frame = _numbers(frame, kind, src)
    for col in TIME_COLUMNS[kind]:
        if col in frame.columns:
            required = col in columns(kind)[0]
            missing = pl.col(col).is_null()
            if required:
                _bad(frame, missing, col, "a time (the cell is empty)", src)
            _bad(frame, ~pl.col(col).is_finite() & ~missing, col, "a finite time", src)
    for col in ("tier", "metric", "request_id"):
        if col in frame.columns:
            _bad(
                frame,
                pl.col(col).is_null() | (pl.col(col).str.strip_chars() == ""),
                col,
                "a non-empty name",
                src,
            )
    return frame, absolute


def _check_metrics(frame: pl.DataFrame, src: str) -> pl.DataFrame:
    frame = frame.with_columns(
        pl.coalesce(
            pl.col("node") if "node" in frame.columns else pl.lit(None, pl.String), pl.col("tier")
        ).alias("node")
    )
    series = [c for c in ("tier", "node", "metric", "setup", "level", "rep") if c in frame.columns]
    step = pl.col("ts").diff().over(series)
    _bad(
        frame,
        step <= 0,
        "ts",
        "times increasing within each series (tier, node, metric): the time goes back or repeats",
        src,
    )
    _bad(
        frame,
        pl.col("value").is_not_null() & ~pl.col("value").is_finite(),
        "value",
        "a finite number",
        src,
    )
    return frame.filter(pl.col("value").is_not_null())


def _check_requests(frame: pl.DataFrame, src: str) -> pl.DataFrame:
    _bad(frame, pl.col("end") < pl.col("start"), "end", "a time at or after start", src)
    _bad(
        frame,
        ~pl.struct("tier", "request_id").is_first_distinct(),
        "request_id",
        "one row per request and tier (this request_id repeats at its tier)",
        src,
    )
    return frame


def _check_points(frame: pl.DataFrame, src: str) -> pl.DataFrame:
    _bad(frame, pl.col("level").is_null(), "level", "a number (the cell is empty)", src)
    _bad(frame, ~pl.col("level").is_finite(), "level", "a finite number", src)
    _bad(
        frame,
        pl.col("throughput").is_null()
        | ~pl.col("throughput").is_finite()
        | (pl.col("throughput") < 0),
        "throughput",
        "a finite number >= 0",
        src,
    )
    if {"t_start", "t_end"} <= set(frame.columns):
        _bad(frame, pl.col("t_end") <= pl.col("t_start"), "t_end", "a time after t_start", src)
    if "setup" not in frame.columns:
        frame = frame.with_columns(pl.lit("s0").alias("setup"))
    if "rep" not in frame.columns:  # repeated levels are repetitions, in file order
        frame = frame.with_columns(
            pl.int_range(pl.len()).over("setup", "level").cast(pl.Int64).alias("rep")
        )
    _bad(
        frame,
        ~pl.struct("setup", "level", "rep").is_first_distinct(),
        "rep",
        "one row per (setup, level, rep)",
        src,
    )
    return frame


def _to_store(frame: pl.DataFrame, kind: str) -> pl.DataFrame:
    frame = frame.drop("_line")
    defaults: dict[str, Any] = {
        "setup": pl.lit("s0", pl.String),
        "level": pl.lit(None, pl.Float64),
        "rep": pl.lit(0, pl.Int64),
        "interaction": pl.lit(None, pl.String),
        "status": pl.lit("ok", pl.String),
        "t_start": pl.lit(None, pl.Float64),
        "t_end": pl.lit(None, pl.Float64),
        "rt_mean": pl.lit(None, pl.Float64),
        "rt_p50": pl.lit(None, pl.Float64),
        "rt_p95": pl.lit(None, pl.Float64),
        "rt_p99": pl.lit(None, pl.Float64),
        "errors": pl.lit(None, pl.Float64),
    }
    wanted = {
        "metrics": ("setup", "level", "rep"),
        "requests": ("interaction", "status", "setup", "level", "rep"),
        "points": ("t_start", "t_end", "rt_mean", "rt_p50", "rt_p95", "rt_p99", "errors"),
    }[kind]
    frame = frame.with_columns(
        defaults[c].alias(c) for c in wanted if c not in frame.columns
    ).with_columns(
        pl.col(c).fill_null(defaults[c]) for c in ("setup", "rep", "status") if c in wanted
    )
    if kind == "metrics":
        frame = frame.rename({"ts": "t"})
    return frame


def import_csv(
    out: str | os.PathLike[str],
    *,
    metrics: str | os.PathLike[str] | None = None,
    requests: str | os.PathLike[str] | None = None,
    points: str | os.PathLike[str] | None = None,
    force: bool = False,
) -> Path:
    """Validate the given CSV files and write them as the run folder ``out`` (new or empty).

    Returns the folder. Bad input raises :class:`InputError` naming the file, the line and the
    column; nothing is written then.
    """
    given = {
        k: Path(v)
        for k, v in (("metrics", metrics), ("requests", requests), ("points", points))
        if v is not None
    }
    if not given:
        raise InputError("--metrics/--requests/--points", None, "at least one CSV file to import")
    checks = {"metrics": _check_metrics, "requests": _check_requests, "points": _check_points}
    frames: dict[str, pl.DataFrame] = {}
    absolute: dict[str, bool] = {}
    for kind, path in tracked(given.items(), f"reading and checking {len(given)} CSV files"):
        frame, absolute[kind] = _prepare(path, kind)
        frames[kind] = checks[kind](frame, str(path))
    timed = [k for k in frames if any(c in frames[k].columns for c in TIME_COLUMNS[k])]
    kinds = {absolute[k] for k in timed}
    if len(kinds) > 1:
        rel = next(k for k in timed if not absolute[k])
        raise InputError(
            TIME_COLUMNS[rel][0],
            None,
            "absolute times (ISO 8601 or epoch seconds) like the other files, or relative "
            "seconds in every file",
            source=str(given[rel]),
        )
    origin = None
    if kinds == {True}:
        origin = min(
            frames[k]
            .select(
                pl.min_horizontal(
                    *(pl.col(c).min() for c in TIME_COLUMNS[k] if c in frames[k].columns)
                )
            )
            .item()
            for k in timed
        )
        for k in timed:
            frames[k] = frames[k].with_columns(
                pl.col(c) - origin for c in TIME_COLUMNS[k] if c in frames[k].columns
            )
    from tierscope.store import write_import

    return write_import(
        out,
        {kind: _to_store(frame, kind) for kind, frame in frames.items()},
        files={k: str(p) for k, p in given.items()},
        origin=origin,
        replace=force,
    )
