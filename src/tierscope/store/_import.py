"""Imported tables written as a run folder (``kind: import``): the store's side of
:mod:`tierscope.ingest`, which reads other tools' files."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import polars as pl

from tierscope.spec.graph import Graph
from tierscope.spec.runs import ImportSpec
from tierscope.store._run import RunWriter

__all__ = ["write_import"]


def write_import(
    out: str | os.PathLike[str],
    tables: dict[str, pl.DataFrame],
    *,
    files: dict[str, str],
    origin: float | None,
    fmt: str = "csv",
    notes: list[str] | None = None,
    graph: Graph | None = None,
    replace: bool = False,
) -> Path:
    """Write imported tables (in the store's schemas, times in seconds from ``origin``, the
    epoch seconds of time 0, or relative when None) as the run folder ``out`` (new or empty)."""
    spec = ImportSpec(
        name=Path(out).name,
        format=fmt,
        files=files,
        time_origin=None
        if origin is None
        else dt.datetime.fromtimestamp(origin, tz=dt.UTC).isoformat(),
        notes=notes or [],
    ).model_dump(mode="json", by_alias=True)
    with RunWriter.create(out, kind="import", spec=spec, graph=graph, replace=replace) as run:
        for table, frame in tables.items():
            run.write(table, frame)
    return Path(out)
