"""Importers: measurements from the tools people already use, written as run folders.

Each importer reads its format into the store's tables (metrics, requests, points) and says
how it read them (units, times, what it left out); :func:`import_metrics` writes them through
:func:`tierscope.store.write_import`, absolute times rebased to the earliest of all files (the
origin is kept in run.json). ``--baseline`` data (normal operation recorded apart) goes into
the same run as setup ``baseline``, the data itself as setup ``s0``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import polars as pl

from tierscope.errors import InputError
from tierscope.ingest.graph import read_graph
from tierscope.ingest.metrics import Read, cpu_limits, parse_limits, read_map, read_metrics

PathLike = str | os.PathLike[str]
BASELINE = "baseline"


def import_metrics(
    out: PathLike,
    files: Sequence[PathLike],
    *,
    baseline: Sequence[PathLike] = (),
    mapping: PathLike | None = None,
    time_column: str | None = None,
    time_unit: str | None = None,
    tz: str | None = None,
    cpu_unit: str | None = None,
    cpu_limit: Sequence[str] = (),
    graph: PathLike | None = None,
) -> tuple[Path, list[str]]:
    """Metric tables (long or wide; :mod:`.metrics`) written as the run folder ``out``: the
    folder and the import's notes."""
    options = {"mapping": read_map(mapping), "time_column": time_column,
               "time_unit": time_unit, "tz": tz, "cpu_unit": cpu_unit}  # fmt: skip
    return _import(
        out, "metrics", lambda p: read_metrics(p, **options), files, baseline, cpu_limit, graph
    )


def import_prometheus(
    out: PathLike,
    files: Sequence[PathLike],
    *,
    baseline: Sequence[PathLike] = (),
    component_label: Sequence[str] = (),
    metric: str | None = None,
    cpu_unit: str | None = None,
    cpu_limit: Sequence[str] = (),
    graph: PathLike | None = None,
) -> tuple[Path, list[str]]:
    """Prometheus ``query_range`` result files (:mod:`.prometheus`) written as the run folder
    ``out``: the folder and the import's notes."""
    from tierscope.ingest.prometheus import COMPONENT_LABELS, read_prometheus

    labels = tuple(component_label) or COMPONENT_LABELS
    return _import(
        out,
        "prometheus",
        lambda p: read_prometheus(p, component_labels=labels, metric=metric, cpu_unit=cpu_unit),
        files,
        baseline,
        cpu_limit,
        graph,
    )


def _import(
    out: PathLike,
    fmt: str,
    read: Callable[[Path], Read],
    files: Sequence[PathLike],
    baseline: Sequence[PathLike],
    cpu_limit: Sequence[str],
    graph: PathLike | None,
) -> tuple[Path, list[str]]:
    from tierscope.store import write_import

    if not files:
        raise InputError("FILE", None, f"at least one {fmt} file")
    limits = parse_limits(list(cpu_limit))
    parts, notes, absolute = [], [], set()
    for setup, paths in (("s0", files), (BASELINE, baseline)):
        for path in paths:
            found = read(Path(path))
            parts.append(found.frame.with_columns(pl.lit(setup).alias("setup")))
            notes += found.notes
            absolute.add(found.absolute)
    if len(absolute) > 1:
        raise InputError(
            "time", None, "absolute times in every file, or relative seconds in every file"
        )
    frame = pl.concat(parts)
    if frame.height == 0:
        raise InputError("values", None, "at least one measurement (every cell is empty)",
                         source=str(files[0]))  # fmt: skip
    frame, said = cpu_limits(frame, limits, str(files[0]))
    notes += said
    origin = float(frame["t"].min()) if absolute == {True} else None  # type: ignore[arg-type]
    if origin is not None:
        frame = frame.with_columns(pl.col("t") - origin)
    metrics = frame.with_columns(
        pl.lit(None, pl.Float64).alias("level"), pl.lit(0, pl.Int64).alias("rep")
    ).select("t", "setup", "level", "rep", "tier", "node", "metric", "value")
    given = {fmt: ", ".join(str(p) for p in files)}
    if baseline:
        given[BASELINE] = ", ".join(str(p) for p in baseline)
    calls = None
    if graph is not None:
        calls = read_graph(graph, metrics["tier"].unique(maintain_order=True).to_list())
        given["graph"] = str(graph)
        notes.append(f"call graph from {Path(graph).name}: {len(calls.edges())} calls")
    path = write_import(
        out, {"metrics": metrics}, files=given, origin=origin, fmt=fmt, notes=notes,
        graph=calls,
    )  # fmt: skip
    return path, notes


__all__ = ["BASELINE", "import_metrics", "import_prometheus"]
