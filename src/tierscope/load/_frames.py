"""Native records and samples as polars tables in the store's shapes (PRODUCT.md §4.3).

Design decision: pure conversion, no I/O. Records arrive as one little-endian byte string per
column and become arrays without a Python loop, so handing over a million requests costs
milliseconds. Times are CLOCK_MONOTONIC seconds throughout (the clock of ``time.monotonic()``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl

CLIENT = "client"
NODE = "loadgen"
ERROR_NAMES = ("", "connect", "timeout", "closed", "protocol", "http", "not_sent", "aborted")
PHASE_NAMES = ("ramp-up", "steady", "ramp-down")
NO_USER = 0xFFFF_FFFF

#: Columns of the requests table: the store contract first, then the generator's own.
REQUEST_COLUMNS = {
    "tier": pl.String,
    "request_id": pl.String,
    "start": pl.Float64,
    "end": pl.Float64,
    "setup": pl.String,
    "level": pl.Float64,
    "rep": pl.Int64,
    "interaction": pl.String,
    "status": pl.String,
    "http_status": pl.Int64,
    "intended_start": pl.Float64,
    "actual_start": pl.Float64,
    "bytes": pl.Int64,
    "phase": pl.String,
    "error": pl.String,
    "user": pl.Int64,
    "session": pl.Int64,
}


def requests_frame(
    raw: Mapping[str, Any],
    interactions: Sequence[str],
    *,
    id_prefix: str,
    setup: str,
    level: float,
    rep: int,
) -> pl.DataFrame:
    """One row per request; ``start`` is the intended start (see docs/load.md)."""
    n = int(raw["n"])
    if n == 0:
        return pl.DataFrame(schema=REQUEST_COLUMNS)

    def col(name: str, dtype: str) -> np.ndarray:
        return np.frombuffer(raw[name], dtype=dtype)

    intended = col("intended", "<i8") / 1e9
    actual_ns = col("actual", "<i8")
    actual = np.where(actual_ns == 0, np.nan, actual_ns / 1e9)
    user = col("user", "<u4").astype(np.int64)
    frame = pl.DataFrame(
        {
            "id": col("id", "<u8"),
            "intended_start": intended,
            "actual_start": actual,
            "end": col("end", "<i8") / 1e9,
            "bytes": col("bytes", "<u8").astype(np.int64),
            "session": col("session", "<u8").astype(np.int64),
            "user_raw": user,
            "interaction_ix": col("interaction", "<u2").astype(np.int64),
            "status_code": col("status", "<u2").astype(np.int64),
            "error_ix": col("error", "u1").astype(np.int64),
            "phase_ix": col("phase", "u1").astype(np.int64),
        }
    )
    error = pl.col("error_ix").replace_strict(
        list(range(len(ERROR_NAMES))), [None, *ERROR_NAMES[1:]], return_dtype=pl.String
    )
    return frame.select(
        pl.lit(CLIENT).alias("tier"),
        pl.concat_str(pl.lit(id_prefix), pl.col("id").cast(pl.String)).alias("request_id"),
        pl.col("intended_start").alias("start"),
        pl.col("end"),
        pl.lit(setup).alias("setup"),
        pl.lit(float(level)).alias("level"),
        pl.lit(int(rep), dtype=pl.Int64).alias("rep"),
        pl.col("interaction_ix")
        .replace_strict(list(range(len(interactions))), list(interactions), return_dtype=pl.String)
        .alias("interaction"),
        # The store's convention: "ok" for a successful response (2xx/3xx), else the HTTP
        # status or the error class.
        pl.when(pl.col("status_code").is_between(200, 399))
        .then(pl.lit("ok"))
        .when(pl.col("status_code") > 0)
        .then(pl.col("status_code").cast(pl.String))
        .otherwise(error)
        .alias("status"),
        pl.when(pl.col("status_code") > 0).then(pl.col("status_code")).alias("http_status"),
        pl.col("intended_start"),
        pl.col("actual_start"),
        pl.col("bytes"),
        pl.col("phase_ix")
        .replace_strict(list(range(3)), list(PHASE_NAMES), return_dtype=pl.String)
        .alias("phase"),
        error.alias("error"),
        pl.when(pl.col("user_raw") == NO_USER)
        .then(None)
        .otherwise(pl.col("user_raw"))
        .alias("user"),
        pl.col("session"),
    )


SAMPLE_COLUMNS = (
    "t", "tick", "worker", "cpu_s", "lag_max", "lag_sum", "lag_count", "sent", "completed",
    "errors", "outstanding", "active", "connections", "machine_busy",
)  # fmt: skip


def raw_samples(batches: Sequence[Mapping[str, Sequence[Any]]]) -> pl.DataFrame:
    """The native sample batches as one table (one row per worker and tick)."""
    frames = [pl.DataFrame({c: list(b[c]) for c in SAMPLE_COLUMNS}) for b in batches if b["t"]]
    if not frames:
        return pl.DataFrame(
            schema={
                c: pl.Float64
                if c in ("t", "cpu_s", "lag_max", "lag_sum", "machine_busy")
                else pl.Int64
                for c in SAMPLE_COLUMNS
            }
        )
    return (
        pl.concat(frames, how="vertical_relaxed")
        .with_columns(pl.col("machine_busy").fill_nan(None))
        .sort("worker", "tick")
    )


def client_samples(raw: pl.DataFrame) -> pl.DataFrame:
    """The generator's own health per sample tick (all worker threads together).

    Columns: ``t`` (monotonic s), ``cpu_cores`` (CPU the generator threads used over the
    interval), ``cpu_max_thread`` (busiest thread's share of one core), ``lag_max`` and
    ``lag_mean`` (timer lateness, s), ``throughput`` (responses/s), cumulative ``sent``,
    ``completed``, ``errors``, and ``outstanding``, ``active``, ``connections``,
    ``machine_busy`` (fraction of the machine's CPUs busy).
    """
    if raw.height == 0:
        return pl.DataFrame(
            schema={
                "t": pl.Float64, "cpu_cores": pl.Float64, "cpu_max_thread": pl.Float64,
                "lag_max": pl.Float64, "lag_mean": pl.Float64, "throughput": pl.Float64,
                "sent": pl.Int64, "completed": pl.Int64, "errors": pl.Int64,
                "outstanding": pl.Int64, "active": pl.Int64, "connections": pl.Int64,
                "machine_busy": pl.Float64,
            }
        )  # fmt: skip
    per_worker = raw.with_columns(
        (pl.col("cpu_s").diff() / pl.col("t").diff()).over("worker").alias("cores"),
    )
    agg = (
        per_worker.group_by("tick")
        .agg(
            pl.col("t").max(),
            pl.col("cores").sum().alias("cpu_cores"),
            pl.col("cores").max().alias("cpu_max_thread"),
            pl.col("lag_max").max(),
            (pl.col("lag_sum").sum() / pl.col("lag_count").sum()).alias("lag_mean"),
            pl.col("sent").sum(),
            pl.col("completed").sum(),
            pl.col("errors").sum(),
            pl.col("outstanding").sum(),
            pl.col("active").sum(),
            pl.col("connections").sum(),
            pl.col("machine_busy").max(),
            pl.col("cores").null_count().alias("_missing"),
        )
        .sort("tick")
    )
    return agg.select(
        "t",
        pl.when(pl.col("_missing") > 0)
        .then(None)
        .otherwise(pl.col("cpu_cores"))
        .alias("cpu_cores"),
        "cpu_max_thread",
        "lag_max",
        pl.col("lag_mean").fill_nan(None),
        (pl.col("completed").diff() / pl.col("t").diff()).alias("throughput"),
        "sent",
        "completed",
        "errors",
        "outstanding",
        "active",
        "connections",
        "machine_busy",
    )


def window_cpu(raw: pl.DataFrame, start: float, end: float) -> tuple[float | None, float | None]:
    """CPU cores the generator used in ``[start, end)`` and the busiest thread's share."""
    if raw.height == 0 or end <= start:
        return None, None
    total, busiest = 0.0, 0.0
    for (_,), w in raw.group_by(["worker"]):
        t = w["t"].to_numpy()
        cpu = w["cpu_s"].to_numpy()
        if t.size < 2 or t[0] > end or t[-1] < start:
            continue
        a, b = max(start, t[0]), min(end, t[-1])
        if b <= a:
            continue
        used = float(np.interp(b, t, cpu) - np.interp(a, t, cpu))
        total += used / (end - start)
        busiest = max(busiest, used / (b - a))
    return total, busiest


def client_metrics(samples: pl.DataFrame, *, setup: str, level: float, rep: int) -> pl.DataFrame:
    """The client samples in the store's long ``metrics`` format (tier ``client``)."""
    metrics = {
        "cpu_cores": "cpu_cores",
        "timer_lag_max_s": "lag_max",
        "throughput": "throughput",
        "outstanding": "outstanding",
        "active": "active",
        "connections": "connections",
        "machine_cpu_busy": "machine_busy",
    }
    if samples.height == 0:
        return pl.DataFrame(
            schema={"t": pl.Float64, "setup": pl.String, "level": pl.Float64, "rep": pl.Int64,
                    "tier": pl.String, "node": pl.String, "metric": pl.String,
                    "value": pl.Float64}
        )  # fmt: skip
    long = samples.select(
        "t", *(pl.col(src).cast(pl.Float64).alias(name) for name, src in metrics.items())
    ).unpivot(index="t", variable_name="metric", value_name="value")
    return long.drop_nulls("value").select(
        "t",
        pl.lit(setup).alias("setup"),
        pl.lit(float(level)).alias("level"),
        pl.lit(int(rep), dtype=pl.Int64).alias("rep"),
        pl.lit(CLIENT).alias("tier"),
        pl.lit(NODE).alias("node"),
        "metric",
        "value",
    )
