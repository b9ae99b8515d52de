"""Importers: measurements from the tools people already use, written as run folders.

Each importer reads its format into the store's tables (metrics, requests, points) and says
how it read them (units, times, what it left out); :func:`import_metrics` writes them through
:func:`tierscope.store.write_import`, absolute times rebased to the earliest of all files (the
origin is kept in run.json). ``--baseline`` data (normal operation recorded apart) goes into
the same run as setup ``baseline``, the data itself as setup ``s0``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
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
    force: bool = False,
) -> tuple[Path, list[str]]:
    """Metric tables (long or wide; :mod:`.metrics`) written as the run folder ``out``: the
    folder and the import's notes."""
    if not files:
        raise InputError("FILE", None, "at least one metrics file")
    options = {"mapping": read_map(mapping), "time_column": time_column,
               "time_unit": time_unit, "tz": tz, "cpu_unit": cpu_unit}  # fmt: skip
    main = [read_metrics(Path(f), **options) for f in files]  # type: ignore[arg-type]
    normal = [read_metrics(Path(f), **options) for f in baseline]  # type: ignore[arg-type]
    return _write(out, "metrics", main, normal, cpu_limit, graph,
                  _given("metrics", files, baseline), force)  # fmt: skip


def import_prometheus(
    out: PathLike,
    files: Sequence[PathLike] = (),
    *,
    url: str | None = None,
    query_file: PathLike | None = None,
    start: str | None = None,
    end: str | None = None,
    step: float = 15.0,
    baseline: Sequence[PathLike] = (),
    component_label: Sequence[str] = (),
    metric: str | None = None,
    cpu_unit: str | None = None,
    cpu_limit: Sequence[str] = (),
    graph: PathLike | None = None,
    force: bool = False,
) -> tuple[Path, list[str]]:
    """Prometheus ``query_range`` answers (:mod:`.prometheus`) written as the run folder
    ``out``: from answer files, or asked of the server at ``url`` (``query_file``: YAML
    ``metric: PromQL``; ``start``/``end``: epoch seconds or ISO 8601; ``step`` seconds)."""
    from tierscope.ingest.prometheus import COMPONENT_LABELS, query_range, read_prometheus

    labels = tuple(component_label) or COMPONENT_LABELS

    def read(paths: Sequence[PathLike]) -> list[Read]:
        return [read_prometheus(Path(f), component_labels=labels, metric=metric,
                                cpu_unit=cpu_unit) for f in paths]  # fmt: skip

    if (url is None) == (not files):
        raise InputError("FILE/--url", url, "answer files, or --url with --query-file (not both)")
    if url is None:
        main, given = read(files), _given("prometheus", files, baseline)
    else:
        queries = _queries(query_file)
        t0, t1 = _instant("--start", start), _instant("--end", end)
        main = query_range(url, queries, start=t0, end=t1, step=step,
                           component_labels=labels, cpu_unit=cpu_unit)  # fmt: skip
        given = {"prometheus": f"{url} {start}..{end} every {step:g} s: " + ", ".join(queries)}
        if baseline:
            given["baseline"] = ", ".join(str(p) for p in baseline)
    return _write(out, "prometheus", main, read(baseline), cpu_limit, graph, given, force)


def _queries(path: PathLike | None) -> dict[str, str]:
    from tierscope.spec._load import load_yaml

    if path is None:
        raise InputError("--query-file", None, "a YAML file of metric: PromQL (with --url)")
    doc = load_yaml(path)
    if (
        not isinstance(doc, dict)
        or not doc
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in doc.items())
    ):
        raise InputError("--query-file", str(path), "a YAML mapping of metric: PromQL")
    return dict(doc)


def _instant(flag: str, text: str | None) -> float:
    from tierscope.ingest._time import parse_times

    if text is None:
        raise InputError(flag, None, "a time: epoch seconds or ISO 8601 (with --url)")
    times = parse_times(pl.Series(flag, [text]), source=flag, column=flag)
    if not times.absolute:
        raise InputError(flag, text, "an absolute time: epoch seconds or ISO 8601")
    return float(times.seconds[0])


def _given(fmt: str, files: Sequence[PathLike], baseline: Sequence[PathLike]) -> dict[str, str]:
    given = {fmt: ", ".join(str(p) for p in files)}
    if baseline:
        given[BASELINE] = ", ".join(str(p) for p in baseline)
    return given


def _write(
    out: PathLike,
    fmt: str,
    main: list[Read],
    normal: list[Read],
    cpu_limit: Sequence[str],
    graph: PathLike | None,
    given: dict[str, str],
    force: bool = False,
) -> tuple[Path, list[str]]:
    """The reads as one run: the data as setup ``s0``, the baseline's as ``baseline``, times
    rebased to the earliest, the CPU limits and the call graph applied (``force``: replacing a
    run folder's own files)."""
    from tierscope.store import write_import

    limits = parse_limits(list(cpu_limit))
    parts, notes, absolute = [], [], set()
    for setup, reads in (("s0", main), (BASELINE, normal)):
        for found in reads:
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
                         source=next(iter(given.values())))  # fmt: skip
    frame, said = cpu_limits(frame, limits, next(iter(given.values())))
    notes += said
    origin = float(frame["t"].min()) if absolute == {True} else None  # type: ignore[arg-type]
    if origin is not None:
        frame = frame.with_columns(pl.col("t") - origin)
    metrics = frame.with_columns(
        pl.lit(None, pl.Float64).alias("level"), pl.lit(0, pl.Int64).alias("rep")
    ).select("t", "setup", "level", "rep", "tier", "node", "metric", "value")
    calls = None
    if graph is not None:
        calls = read_graph(graph, metrics["tier"].unique(maintain_order=True).to_list())
        given["graph"] = str(graph)
        notes.append(f"call graph from {Path(graph).name}: {len(calls.edges())} calls")
    path = write_import(
        out, {"metrics": metrics}, files=given, origin=origin, fmt=fmt, notes=notes,
        graph=calls, replace=force,
    )  # fmt: skip
    return path, notes


__all__ = ["BASELINE", "import_metrics", "import_prometheus"]
