"""Column contracts of the store's tables (PRODUCT §4.3): names, order and types.

Design decision: one dict per table, used on every write, so a table is only ever written with
its contract columns first, in contract order and with contract types; extra columns a producer
adds (such as ``service_start`` in simulated requests) are kept after them. Levels are floats so
that both concurrencies and arrival rates fit; ``rep`` is an integer.
"""

from __future__ import annotations

import polars as pl

from tierscope.errors import InputError

SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    "metrics": {
        "t": pl.Float64(),
        "setup": pl.String(),
        "level": pl.Float64(),
        "rep": pl.Int64(),
        "tier": pl.String(),
        "node": pl.String(),
        "metric": pl.String(),
        "value": pl.Float64(),
    },
    "requests": {
        "tier": pl.String(),
        "request_id": pl.String(),
        "start": pl.Float64(),
        "end": pl.Float64(),
        "setup": pl.String(),
        "level": pl.Float64(),
        "rep": pl.Int64(),
        "interaction": pl.String(),
        "status": pl.String(),
    },
    "events": {
        "t_start": pl.Float64(),
        "t_end": pl.Float64(),
        "kind": pl.String(),
        "tier": pl.String(),
        "detail": pl.String(),
    },
    "points": {
        "setup": pl.String(),
        "level": pl.Float64(),
        "rep": pl.Int64(),
        "t_start": pl.Float64(),
        "t_end": pl.Float64(),
        "throughput": pl.Float64(),
        "rt_mean": pl.Float64(),
        "rt_p50": pl.Float64(),
        "rt_p95": pl.Float64(),
        "rt_p99": pl.Float64(),
        "errors": pl.Float64(),
    },
}
TABLES = tuple(SCHEMAS)


def check_table(table: str) -> dict[str, pl.DataType]:
    """The schema of ``table``; InputError if the store has no such table."""
    try:
        return SCHEMAS[table]
    except KeyError:
        raise InputError("table", table, "one of " + ", ".join(TABLES)) from None


def conform(table: str, frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with the contract columns first, in order and cast to type; extras kept."""
    schema = check_table(table)
    missing = [c for c in schema if c not in frame.columns]
    if missing:
        raise InputError(f"{table}.columns", frame.columns, "columns " + ", ".join(missing))
    extras = [c for c in frame.columns if c not in schema]
    return frame.select(
        *(pl.col(c).cast(dtype) for c, dtype in schema.items()),
        *extras,
    )


def empty(table: str) -> pl.DataFrame:
    """A table with no rows and the contract columns."""
    return pl.DataFrame(schema=check_table(table))
