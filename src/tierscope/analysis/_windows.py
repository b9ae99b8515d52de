"""Placing samples in the steady windows: one helper for every analysis that needs it."""

from __future__ import annotations

import polars as pl


def in_steady_windows(
    frame: pl.LazyFrame | pl.DataFrame, windows: pl.DataFrame, time: str = "t"
) -> pl.LazyFrame:
    """The rows of ``frame`` whose ``time`` lies in a steady window [t_start, t_end), with that
    window's ``_setup``, ``_level``, ``_rep``, ``t_start`` and ``t_end`` (windows never overlap,
    so the window is the last one starting at or before the time)."""
    spans = windows.select(
        pl.col("setup").alias("_setup"),
        pl.col("level").cast(pl.Float64).alias("_level"),
        pl.col("rep").cast(pl.Int64).alias("_rep"),
        pl.col("t_start").cast(pl.Float64),
        pl.col("t_end").cast(pl.Float64),
    ).sort("t_start")
    return (
        frame.lazy()
        .sort(time)
        .join_asof(spans.lazy(), left_on=time, right_on="t_start", strategy="backward")
        .filter(pl.col("t_start").is_not_null() & (pl.col(time) < pl.col("t_end")))
    )
