"""``tierscope import locust``: the stats history Locust writes with ``--csv PREFIX``
(``PREFIX_stats_history.csv``: a row a second for every request name and one ``Aggregated``).

Columns read (Locust's own names): ``Timestamp`` (epoch seconds), ``User Count`` (the load
level), ``Name``, ``Total Request Count``, ``Total Failure Count``,
``Total Average Response Time`` (ms) and the percentile columns ``50%``, ``95%``, ``99%`` (ms).
From the ``Aggregated`` rows: per second, ``throughput_s`` and ``errors_s`` from the change of
the running totals (exact), ``rt_mean`` from the change of the running total of response time
(average × count, exact), ``rt_p50``/``rt_p95``/``rt_p99`` as Locust gives them (over its last
10 s, not the last second: said in the notes) and ``users``. A point per load level (a user
count held 5 s or more, :mod:`._client`) with throughput, mean response time and failures from
the totals at the ends of its steady window, and the median of Locust's percentiles within it.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tierscope.errors import InputError
from tierscope.ingest._client import CLIENT, level_windows, levels_said, long_metrics
from tierscope.ingest._files import Read, numbers, read_table, reject, require_columns
from tierscope.ingest._time import parse_times

TOTALS = ("Total Request Count", "Total Failure Count", "Total Average Response Time")
REQUIRED = ("Timestamp", "User Count", "Name", *TOTALS)
PERCENTILES = {"50%": "rt_p50", "95%": "rt_p95", "99%": "rt_p99"}
AGGREGATED = "Aggregated"


def read_locust(path: Path) -> Read:
    """One ``*_stats_history.csv`` (see the module's docstring)."""
    src = str(path)
    table = read_table(path)
    require_columns(
        table,
        REQUIRED,
        "a Locust stats history (locust --csv PREFIX writes PREFIX_stats_history.csv) "
        "with the columns " + ", ".join(REQUIRED),
        src,
    )
    table = table.filter(pl.col("Name").str.strip_chars() == AGGREGATED)
    if table.height == 0:
        raise InputError("Name", None, f"rows named {AGGREGATED} (Locust's totals)", source=src)
    times = parse_times(table["Timestamp"], source=src, column="Timestamp",
                        first_line=int(table["_line"][0]))  # fmt: skip
    reject(table, times.seconds.is_null(), "Timestamp", "a time (the cell is empty)", src)
    wide = pl.DataFrame({"t": times.seconds}).with_columns(
        numbers(table, c, src, non_negative=True).alias(c) for c in ("User Count", *TOTALS)
    )
    for column in PERCENTILES:  # Locust writes N/A before a request completes
        if column in table.columns:
            text = table[column].str.strip_chars().replace("N/A", None)
            wide = wide.with_columns(
                numbers(
                    table.with_columns(text.alias(column)), column, src, non_negative=True
                ).alias(column)
            )
    reject(table, pl.Series(wide["t"].diff() <= 0), "Timestamp",
           "times increasing from row to row (this one repeats or goes back)", src)  # fmt: skip
    count, failed, avg = (pl.col(c) for c in TOTALS)
    per = wide.with_columns((count * avg / 1000.0).alias("rt_sum")).with_columns(
        pl.col("t").diff().alias("dt"),
        count.diff().alias("dn"),
        failed.diff().alias("df"),
        pl.col("rt_sum").diff().alias("drt"),
    )
    back = per.filter(pl.col("dn") < 0)
    if back.height:
        raise InputError("Total Request Count", back["Total Request Count"][0],
                         "a running total that never goes down", source=src)  # fmt: skip
    metrics = per.select(
        "t",
        (pl.col("dn") / pl.col("dt")).alias("throughput_s"),
        (pl.col("df") / pl.col("dt")).alias("errors_s"),
        pl.when(pl.col("dn") > 0).then(pl.col("drt") / pl.col("dn")).alias("rt_mean"),
        *((pl.col(c) / 1000.0).alias(m) for c, m in PERCENTILES.items() if c in per.columns),
        pl.col("User Count").alias("users"),
    ).slice(1)
    windows = level_windows(wide["t"], wide["User Count"])
    notes = [
        f"{path.name}: times are {times.said}; {table.height} seconds of Locust's totals; its "
        "percentiles cover the last 10 s (Locust's window), not each second",
        levels_said(windows),
    ]
    return Read(long_metrics(metrics, CLIENT), times.absolute, notes,
                points=_points(wide, windows))  # fmt: skip


def _points(wide: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame | None:
    """A point per steady window from Locust's running totals at its two ends."""
    if windows.height == 0:
        return None
    at = wide.sort("t")
    rows = []
    for w in windows.iter_rows(named=True):
        inside = at.filter((pl.col("t") >= w["t_start"]) & (pl.col("t") <= w["t_end"]))
        if inside.height < 2:
            continue
        a, b = inside.row(0, named=True), inside.row(-1, named=True)
        n = b["Total Request Count"] - a["Total Request Count"]
        span = b["t"] - a["t"]
        rt_sum = (
            b["Total Request Count"] * b["Total Average Response Time"]
            - a["Total Request Count"] * a["Total Average Response Time"]
        ) / 1000.0
        row = {
            "level": w["level"], "rep": w["rep"], "t_start": a["t"], "t_end": b["t"],
            "throughput": n / span, "rt_mean": rt_sum / n if n > 0 else None,
            "errors": float(b["Total Failure Count"] - a["Total Failure Count"]),
        }  # fmt: skip
        for column, name in PERCENTILES.items():
            if column in inside.columns:
                median = inside[column].median()
                row[name] = None if median is None else float(median) / 1000.0  # type: ignore[arg-type]
        rows.append(row)
    return pl.DataFrame(rows) if rows else None


__all__ = ["read_locust"]
