"""``tierscope import jmeter``: JMeter results (JTL) in CSV, as ``jmeter -n -t plan.jmx -l
results.jtl`` writes them with their header row (the default,
``jmeter.save.saveservice.print_field_names=true``).

Columns read (JMeter's own names): ``timeStamp`` (the sample's start, epoch milliseconds, or a
date-time when ``timestamp_format`` says so), ``elapsed`` (ms), ``label``, ``success``
(``true``/``false``) and ``allThreads`` (active threads of all thread groups: the load level);
``threadName`` names the node and ``responseCode`` is kept. Every other column is left out and
said so. A stepping thread group's steps become load levels (:mod:`._client`).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from tierscope.errors import InputError
from tierscope.ingest._client import client_tables
from tierscope.ingest._files import Read, numbers, read_table, reject, require_columns
from tierscope.ingest._time import parse_times

REQUIRED = ("timeStamp", "elapsed")
USED = (*REQUIRED, "label", "success", "allThreads", "threadName", "responseCode")


def read_jmeter(path: Path, *, tz: str | None = None) -> Read:
    """One JTL CSV file (see the module's docstring)."""
    src = str(path)
    table = read_table(path)
    require_columns(
        table,
        REQUIRED,
        "a JTL CSV file with its header row (columns timeStamp, elapsed, label, success, "
        "allThreads; jmeter.save.saveservice.print_field_names=true)",
        src,
    )
    times = parse_times(table["timeStamp"], source=src, column="timeStamp", tz=tz)
    if not times.absolute:
        raise InputError("timeStamp", table["timeStamp"][0], "epoch milliseconds or a date-time",
                         source=f"{src}, line 2")  # fmt: skip
    elapsed = numbers(table, "elapsed", src, non_negative=True)
    reject(table, times.seconds.is_null(), "timeStamp", "a time (the cell is empty)", src)
    reject(table, elapsed.is_null(), "elapsed", "milliseconds (the cell is empty)", src)
    ok = pl.Series("ok", [True] * table.height)
    if "success" in table.columns:
        text = table["success"].str.strip_chars().str.to_lowercase()
        reject(table, ~text.is_in(["true", "false"]), "success", "true or false", src)
        ok = text == "true"
    users = (
        numbers(table, "allThreads", src, non_negative=True)
        if "allThreads" in table.columns
        else pl.Series("users", [None] * table.height, pl.Float64)
    )
    text = pl.lit(None, pl.String)
    samples = pl.DataFrame(
        {
            "start": times.seconds,
            "end": times.seconds + elapsed / 1000.0,
            "ok": ok,
            "users": users,
        }
    ).with_columns(
        (pl.Series(table["label"]) if "label" in table.columns else text).alias("label"),
        text.alias("request_id"),
        (pl.Series(table["threadName"]) if "threadName" in table.columns else text).alias("node"),
    )
    tables, notes = client_tables(samples)
    left = [c for c in table.columns if c not in (*USED, "_line")]
    notes = [f"{path.name}: times are {times.said}", *notes]
    if "allThreads" not in table.columns:
        notes.append(f"{path.name}: no allThreads column, so no load levels")
    if left:
        notes.append(f"{path.name}: columns left out: {', '.join(left)}")
    return Read(tables["metrics"], True, notes, requests=tables["requests"],
                points=tables["points"])  # fmt: skip


__all__ = ["read_jmeter"]
