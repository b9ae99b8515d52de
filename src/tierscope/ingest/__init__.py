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
from typing import Any

import polars as pl

from tierscope.errors import InputError
from tierscope.ingest._files import Read
from tierscope.ingest.graph import read_graph
from tierscope.ingest.metrics import cpu_limits, mem_limits, parse_limits, read_map, read_metrics

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
    mem_limit: Sequence[str] = (),
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
    return _write(out, "metrics", main, normal, (cpu_limit, mem_limit), graph,
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
    mem_limit: Sequence[str] = (),
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
    return _write(out, "prometheus", main, read(baseline), (cpu_limit, mem_limit), graph, given,
                  force)  # fmt: skip


def _readers() -> dict[str, Callable[..., Read]]:
    from tierscope.ingest.accesslog import read_access_log
    from tierscope.ingest.collectl import read_collectl
    from tierscope.ingest.jmeter import read_jmeter
    from tierscope.ingest.k6 import read_k6
    from tierscope.ingest.locust import read_locust
    from tierscope.ingest.otlp import read_otlp

    return {"jmeter": read_jmeter, "locust": read_locust, "k6": read_k6, "otlp": read_otlp,
            "access-log": read_access_log, "collectl": read_collectl}  # fmt: skip


#: Formats whose files are read together (a trace's spans may be in several files; a host's
#: per-CPU file replaces its summary's CPU).
_TOGETHER = ("otlp", "collectl")
#: Formats :func:`import_files` reads.
FORMATS = ("jmeter", "locust", "k6", "otlp", "access-log", "collectl")


def import_files(
    fmt: str,
    out: PathLike,
    files: Sequence[PathLike],
    *,
    baseline: Sequence[PathLike] = (),
    cpu_limit: Sequence[str] = (),
    mem_limit: Sequence[str] = (),
    graph: PathLike | None = None,
    force: bool = False,
    **options: Any,
) -> tuple[Path, list[str]]:
    """Files in format ``fmt`` (one of :data:`FORMATS`; ``options``: the reader's own)
    written as the run folder ``out``: the folder and the import's notes."""
    readers = _readers()
    if fmt not in readers:
        raise InputError("format", fmt, "one of " + ", ".join(readers))
    if not files:
        raise InputError("FILE", None, f"at least one {fmt} file")
    read = readers[fmt]

    def reads(paths: Sequence[PathLike]) -> list[Read]:
        if not paths:
            return []
        if fmt in _TOGETHER:
            return [read([Path(f) for f in paths], **options)]
        return [read(Path(f), **options) for f in paths]

    main, normal = reads(files), reads(baseline)
    return _write(out, fmt, main, normal, (cpu_limit, mem_limit), graph,
                  _given(fmt, files, baseline), force)  # fmt: skip


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
    limits: tuple[Sequence[str], Sequence[str]],
    graph: PathLike | None,
    given: dict[str, str],
    force: bool = False,
) -> tuple[Path, list[str]]:
    """The reads as one run: the data as setup ``s0``, the baseline's as ``baseline``, times
    rebased to the earliest, the CPU and memory ``limits`` (``--cpu-limit``, ``--mem-limit``
    pairs) and the call graph applied (the user's, else the one the data shows; ``force``:
    replacing a run folder's own files)."""
    from tierscope.store import write_import

    cores = parse_limits(list(limits[0]))
    memory = parse_limits(list(limits[1]), "--mem-limit")
    parts: dict[str, list[pl.DataFrame]] = {"metrics": [], "requests": [], "points": []}
    notes: list[str] = []
    absolute: set[bool] = set()
    shown = None
    for setup, reads in (("s0", main), (BASELINE, normal)):
        for found in reads:
            tagged = pl.lit(setup).alias("setup")
            for table, frame in (("metrics", found.frame), ("requests", found.requests),
                                 ("points", found.points)):  # fmt: skip
                if frame is not None and frame.height:
                    parts[table].append(frame.with_columns(tagged))
            notes += found.notes
            absolute.add(found.absolute)
            shown = shown or found.calls
    if len(absolute) > 1:
        raise InputError(
            "time", None, "absolute times in every file, or relative seconds in every file"
        )
    tables = {k: pl.concat(v, how="diagonal_relaxed") for k, v in parts.items() if v}
    if not tables:
        raise InputError("values", None, "at least one measurement (every cell is empty)",
                         source=next(iter(given.values())))  # fmt: skip
    if "metrics" in tables:
        source = next(iter(given.values()))
        tables["metrics"], said = cpu_limits(tables["metrics"], cores, source)
        tables["metrics"], more = mem_limits(tables["metrics"], memory, source)
        notes += said + more
    origin = None
    if absolute == {True}:
        firsts = [tables[k][c].min() for k, c in _TIMES if k in tables]
        origin = min(float(v) for v in firsts if v is not None)  # type: ignore[arg-type]
        tables = {
            k: frame.with_columns(pl.col(c) - origin for t, c in _TIMES_ALL if t == k)
            for k, frame in tables.items()
        }
    if "metrics" in tables:
        tables["metrics"] = (
            tables["metrics"]
            .with_columns(pl.lit(None, pl.Float64).alias("level"), pl.lit(0, pl.Int64).alias("rep"))
            .select("t", "setup", "level", "rep", "tier", "node", "metric", "value")
        )
    calls = shown
    if graph is not None:
        components = pl.concat(
            [tables[k].select("tier") for k in ("metrics", "requests") if k in tables]
        )["tier"].unique(maintain_order=True)
        calls = read_graph(graph, [c for c in components.to_list() if c != "client"])
        given["graph"] = str(graph)
        notes.append(f"call graph from {Path(graph).name}: {len(calls.edges())} calls")
    path = write_import(
        out, tables, files=given, origin=origin, fmt=fmt, notes=notes, graph=calls,
        replace=force,
    )  # fmt: skip
    return path, notes


#: The first time column of each table, and all of them.
_TIMES = (("metrics", "t"), ("requests", "start"), ("points", "t_start"))
_TIMES_ALL = (*_TIMES, ("requests", "end"), ("points", "t_end"))


__all__ = ["BASELINE", "FORMATS", "import_files", "import_metrics", "import_prometheus"]
