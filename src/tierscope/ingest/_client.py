"""What a load tool saw from the client side, as tierscope's tables.

A load tool (JMeter, Locust, k6) knows each request it sent (start, end, name, success) and how
many virtual users were active; the importers turn that into:

- ``requests``: one row per request at tier ``client`` (end to end);
- ``metrics`` of tier ``client`` every second: ``throughput_s`` (requests completed),
  ``errors_s``, ``rt_mean``, ``rt_p95`` (seconds) and ``users`` (active virtual users);
- ``points``: one per load level. A level is a stretch of at least :data:`MIN_LEVEL_S` during
  which the number of active users stays the same (shorter stretches are ramps between
  levels); its steady window leaves out the stretch's first :data:`WARMUP` share, as a sweep's
  own warm-up does. A level held twice is two repetitions.

Design decision: the level windows are found once (:func:`level_windows`) from any series of
(time, users), so per-request tools (JMeter, k6) and per-second ones (Locust) share them.
"""

from __future__ import annotations

import polars as pl

CLIENT = "client"
#: A stretch of constant users shorter than this is a ramp, not a level.
MIN_LEVEL_S = 5.0
#: Share of a level's stretch left out at its start (warm-up).
WARMUP = 0.1
#: Width of the per-second metrics' bins.
BIN_S = 1.0

#: Columns of the samples :func:`client_tables` reads (``users``, ``request_id`` and
#: ``node`` may be null).
SAMPLE_COLUMNS = ("start", "end", "ok", "label", "users", "request_id", "node")


def level_windows(t: pl.Series, users: pl.Series) -> pl.DataFrame:
    """Steady windows ``level, rep, t_start, t_end`` of the load levels in a series of active
    user counts (``t`` sorted; null counts are skipped)."""
    frame = (
        pl.DataFrame({"t": t, "users": users})
        .drop_nulls()
        .with_columns(
            (pl.col("users") != pl.col("users").shift(1)).fill_null(True).cum_sum().alias("run")
        )
    )
    if frame.height == 0:
        return _no_windows()
    runs = (
        frame.group_by("run", maintain_order=True)
        .agg(pl.col("users").first().alias("level"), pl.col("t").min().alias("a"))
        .with_columns(pl.col("a").shift(-1).alias("b"))
    )
    last = float(frame["t"].max())  # type: ignore[arg-type]
    runs = runs.with_columns(pl.col("b").fill_null(last))
    held = runs.filter(pl.col("b") - pl.col("a") >= MIN_LEVEL_S)
    # a level interrupted by a short ramp blip (a user count that flickers) is one stretch
    held = (
        held.with_columns(
            (pl.col("level") != pl.col("level").shift(1)).fill_null(True).cum_sum().alias("stretch")
        )
        .group_by("stretch", maintain_order=True)
        .agg(pl.col("level").first(), pl.col("a").min(), pl.col("b").max())
    )
    return held.select(
        pl.col("level").cast(pl.Float64),
        pl.int_range(pl.len()).over("level").cast(pl.Int64).alias("rep"),
        (pl.col("a") + WARMUP * (pl.col("b") - pl.col("a"))).alias("t_start"),
        pl.col("b").alias("t_end"),
    )


def _no_windows() -> pl.DataFrame:
    return pl.DataFrame(
        schema={"level": pl.Float64, "rep": pl.Int64, "t_start": pl.Float64, "t_end": pl.Float64}
    )


def client_tables(
    samples: pl.DataFrame, users: pl.DataFrame | None = None
) -> tuple[dict[str, pl.DataFrame], list[str]]:
    """Requests, per-second metrics and level points from per-request samples
    (:data:`SAMPLE_COLUMNS`; times in seconds); ``users``: a separate ``t, users`` series of
    active users (k6's ``vus``), else the samples' own ``users`` column. Returns the tables
    (metrics in the long form ``t, tier, node, metric, value``) and notes."""
    samples = samples.sort("start")
    if users is None:
        users = samples.select(pl.col("start").alias("t"), "users")
    users = users.sort("t")
    windows = level_windows(users["t"], users["users"])
    requests = _label(samples, windows).select(
        pl.lit(CLIENT).alias("tier"),
        pl.coalesce("request_id", pl.int_range(pl.len()).cast(pl.String)).alias("request_id"),
        "start",
        "end",
        "level",
        "rep",
        pl.col("label").alias("interaction"),
        pl.when("ok").then(pl.lit("ok")).otherwise(pl.lit("error")).alias("status"),
        pl.col("node"),
    )
    metrics = _per_second(requests, users)
    points = _points(samples, windows)
    failed = samples.height - int(samples["ok"].sum())
    notes = [
        f"{samples.height} requests ({failed} failed), {samples['label'].n_unique()} request names",
        levels_said(windows),
    ]
    return {"requests": requests, "metrics": metrics, "points": points}, notes


def levels_said(windows: pl.DataFrame) -> str:
    if windows.height == 0:
        return (
            "no load levels: no count of active users held for "
            f"{MIN_LEVEL_S:g} s (the per-second metrics and the requests are kept)"
        )
    levels = ", ".join(f"{v:g}" for v in windows["level"].unique(maintain_order=True))
    return f"{windows.height} load levels (active users held {MIN_LEVEL_S:g} s or more): {levels}"


def _label(samples: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """Each sample with the level and repetition of the steady window its start falls in."""
    if windows.height == 0:
        return samples.with_columns(
            pl.lit(None, pl.Float64).alias("level"), pl.lit(0, pl.Int64).alias("rep")
        )
    joined = samples.join_asof(
        windows.sort("t_start"), left_on="start", right_on="t_start", strategy="backward"
    )
    inside = pl.col("start") < pl.col("t_end")
    return joined.with_columns(
        pl.when(inside).then(pl.col("level")).alias("level"),
        pl.when(inside).then(pl.col("rep")).otherwise(0).alias("rep"),
    ).drop("t_start", "t_end")


def _per_second(requests: pl.DataFrame, users: pl.DataFrame) -> pl.DataFrame:
    """:func:`per_second` of the client's requests, and the most ``users`` active in each
    second."""
    active = (
        users.drop_nulls()
        .with_columns(_bin_end("t"))
        .group_by("t")
        .agg(pl.col("users").max().alias("value"))
        .select(
            "t",
            pl.lit(CLIENT).alias("tier"),
            pl.lit(CLIENT).alias("node"),
            pl.lit("users").alias("metric"),
            pl.col("value").cast(pl.Float64),
        )
    )
    return pl.concat([per_second(requests), active]).sort("tier", "metric", "t")


def _bin_end(column: str) -> pl.Expr:
    return ((pl.col(column) / BIN_S).floor() * BIN_S + BIN_S).alias("t")


def per_second(requests: pl.DataFrame, *extra: pl.Expr) -> pl.DataFrame:
    """Per tier and second, of the requests (``tier, start, end, status``) that ended in it:
    ``throughput_s``, ``errors_s`` (status ``error``), ``rt_mean``, ``rt_p95`` (seconds) and
    the ``extra`` aggregates, as long samples ``t, tier, node, metric, value`` (t: the
    second's end)."""
    rt = pl.col("end") - pl.col("start")
    wide = (
        requests.with_columns(_bin_end("end"))
        .group_by("tier", "t")
        .agg(
            (pl.len() / BIN_S).cast(pl.Float64).alias("throughput_s"),
            ((pl.col("status") == "error").sum() / BIN_S).cast(pl.Float64).alias("errors_s"),
            rt.mean().alias("rt_mean"),
            rt.quantile(0.95, "linear").alias("rt_p95"),
            *extra,
        )
    )
    return (
        wide.unpivot(index=["tier", "t"], variable_name="metric", value_name="value")
        .drop_nulls("value")
        .select(
            "t", "tier", pl.col("tier").alias("node"), "metric", pl.col("value").cast(pl.Float64)
        )
        .sort("tier", "metric", "t")
    )


def long_metrics(wide: pl.DataFrame, tier: str) -> pl.DataFrame:
    """A wide ``t, <metric>…`` table of one tier as long samples (empty cells dropped)."""
    return (
        wide.unpivot(index="t", variable_name="metric", value_name="value")
        .drop_nulls("value")
        .select(
            "t",
            pl.lit(tier).alias("tier"),
            pl.lit(tier).alias("node"),
            "metric",
            pl.col("value").cast(pl.Float64),
        )
    )


def _points(samples: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """One point per steady window: throughput (requests started in it per second), response
    times of those requests (seconds) and their failures."""
    if windows.height == 0:
        return pl.DataFrame()
    rt = pl.col("end") - pl.col("start")
    inside = (
        _label(samples, windows)
        .filter(pl.col("level").is_not_null())
        .group_by("level", "rep")
        .agg(
            pl.len().alias("n"),
            rt.mean().alias("rt_mean"),
            rt.quantile(0.5, "linear").alias("rt_p50"),
            rt.quantile(0.95, "linear").alias("rt_p95"),
            rt.quantile(0.99, "linear").alias("rt_p99"),
            (~pl.col("ok")).sum().cast(pl.Float64).alias("errors"),
        )
    )
    return (
        windows.join(inside, on=["level", "rep"], how="left")
        .with_columns(
            (pl.col("n").fill_null(0) / (pl.col("t_end") - pl.col("t_start"))).alias("throughput"),
            pl.col("errors").fill_null(0.0),
        )
        .drop("n")
        .sort("t_start")
    )


__all__ = [
    "CLIENT",
    "SAMPLE_COLUMNS",
    "client_tables",
    "level_windows",
    "levels_said",
    "long_metrics",
    "per_second",
]
