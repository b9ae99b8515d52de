"""Write and read one run folder: ``run.json`` plus one Parquet file per table.

Design decision: a run is written as it is measured. ``RunWriter.create`` makes the folder and
writes ``run.json`` at once with status ``partial``, so even a killed process leaves a folder that
says what it is. Rows are buffered and flushed as numbered Parquet parts under ``.parts/TABLE/``
(each one a complete, readable file); closing a table concatenates its parts into ``TABLE.parquet``
by streaming (memory stays flat) and removes them. Closing the run rewrites ``run.json``
atomically with its end time and status: ``complete``, ``partial`` (interrupted, e.g. Ctrl-C) or
``failed`` (an error); what was measured is kept in every case, and ``read_run`` also reads
parts a killed writer left behind.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, cast

import polars as pl

from tierscope import __version__
from tierscope.errors import InputError, SpecError, TierscopeError
from tierscope.spec.experiment import ExperimentSpec, setup_specs
from tierscope.spec.graph import Graph
from tierscope.spec.runs import RUN_KINDS, RunKind, RunSpec, parse_run_spec
from tierscope.store._host import host_facts
from tierscope.store._schema import TABLES, check_table, conform, empty
from tierscope.store._shape import graph_of, interval_of

RUN_JSON = "run.json"
PARTS = ".parts"
#: Rows buffered per table before they are flushed as one Parquet part.
PART_ROWS = 250_000
FORMAT_VERSION = 1

Status = Literal["complete", "partial", "failed"]


class RunWriter:
    """Writes one run folder; use :meth:`create`, then as a context manager.

    ``info`` is the ``run.json`` document; callers may add keys (``summary``, ...) before the
    run is closed. Leaving the ``with`` block closes the run: ``complete`` on success,
    ``partial`` on KeyboardInterrupt, ``failed`` on any other exception (which propagates).
    """

    def __init__(self, path: Path, info: dict[str, Any], *, created_dir: bool) -> None:
        self.path = path
        self.info = info
        self._created_dir = created_dir
        self._buffers: dict[str, list[pl.DataFrame]] = {}
        self._buffered_rows: dict[str, int] = {}
        self._parts: dict[str, int] = {}
        self._finished: set[str] = set()
        self._closed = False

    @classmethod
    def create(
        cls,
        run_dir: str | os.PathLike[str],
        *,
        kind: RunKind,
        spec: dict[str, Any],
        seed: int | None = None,
        options: dict[str, Any] | None = None,
        graph: Graph | None = None,
        interval: float | None = None,
        replace: bool = False,
    ) -> RunWriter:
        """Create the folder ``run_dir`` (new, or existing and empty) and its ``run.json``.

        The folder is claimed atomically, before anything else is done: ``mkdir`` of a new
        folder, then an exclusive create of ``run.json`` in it, so of two commands given the
        same folder exactly one gets it and the other gets an :class:`InputError`.
        ``graph`` and ``interval``: the system's components and the metrics' sampling interval,
        where the writer knows them (readers infer them otherwise: :mod:`._shape`).
        ``replace``: an existing run folder's own files are replaced, nothing else in it.
        """
        if kind not in RUN_KINDS:
            raise ValueError(f"kind {kind!r} is not one of {', '.join(RUN_KINDS)}")
        path = Path(run_dir)
        created = _claim(path, replace)
        info: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "kind": kind,
            "status": "partial",
            "tierscope_version": __version__,
            "start": time.time(),
            "end": None,
            "seed": seed,
            "options": options or {},
            "host": host_facts(),
            "spec": spec,
            "components": None if graph is None else graph.to_json(),
            "interval": interval,
            "tables": [],
        }
        writer = cls(path, info, created_dir=created)
        writer._write_info()
        return writer

    # ---- tables ----------------------------------------------------------------------------
    def append(self, table: str, frame: pl.DataFrame) -> None:
        """Add rows to ``table``; they reach disk in parts of about PART_ROWS rows."""
        self._check_open(table)
        if frame.height == 0:
            return
        self._buffers.setdefault(table, []).append(conform(table, frame))
        self._buffered_rows[table] = self._buffered_rows.get(table, 0) + frame.height
        if self._buffered_rows[table] >= PART_ROWS:
            self._flush(table)

    def write(self, table: str, frame: pl.DataFrame) -> None:
        """Write the whole of ``table`` at once and close it."""
        self._check_open(table)
        if self._parts.get(table) or self._buffers.get(table):
            raise TierscopeError(f"table {table} already has appended rows; use append()")
        self._replace(self.path / f"{table}.parquet", conform(table, frame))
        self._finished.add(table)

    def finish(self, table: str) -> Path:
        """Close ``table``: its parts become ``TABLE.parquet`` (empty if nothing was added)."""
        check_table(table)
        final = self.path / f"{table}.parquet"
        if table in self._finished:
            return final
        self._flush(table)
        parts = self._part_files(table)
        if parts:
            tmp = final.with_suffix(".parquet.tmp")
            _scan_parts(parts).sink_parquet(tmp)
            os.replace(tmp, final)
            shutil.rmtree(self._parts_dir(table))
        else:
            self._replace(final, empty(table))
        self._finished.add(table)
        return final

    def flush(self) -> None:
        """Write every buffered row to disk now (e.g. after each completed sweep level), so a
        killed run still has it."""
        for table in list(self._buffers):
            self._flush(table)

    def scan(self, table: str) -> pl.LazyFrame:
        """A lazy view of a finished table."""
        if table not in self._finished:
            raise TierscopeError(f"table {table} is not finished; call finish() first")
        return pl.scan_parquet(self.path / f"{table}.parquet")

    @property
    def measured(self) -> bool:
        """Whether any rows were written or are waiting to be."""
        return bool(self._finished or self._parts or any(self._buffers.values()))

    # ---- closing ---------------------------------------------------------------------------
    def close(self, status: Status = "complete", error: str | None = None) -> None:
        """Finish every table that received rows and write the final ``run.json``."""
        if self._closed:
            return
        self._closed = True
        problems = []
        for table in TABLES:
            if table in self._finished or not (self._parts.get(table) or self._buffers.get(table)):
                continue
            try:
                self.finish(table)
            except Exception as exc:  # keep the parts; read_run still reads them
                problems.append(f"{table}: {exc}")
        if problems:
            status = "failed"
            error = "; ".join(filter(None, [error, *problems]))
        self.info["status"] = status
        self.info["end"] = time.time()
        self.info["tables"] = [t for t in TABLES if (self.path / f"{t}.parquet").exists()]
        if error is not None:
            self.info["error"] = error
        self._write_info()
        parts_root = self.path / PARTS
        if parts_root.is_dir() and not any(parts_root.iterdir()):
            parts_root.rmdir()

    def discard(self) -> None:
        """Remove everything this writer wrote (for runs refused before measuring anything)."""
        self._closed = True
        if self._created_dir:
            shutil.rmtree(self.path, ignore_errors=True)
            return
        for child in self.path.iterdir():
            if child.is_dir():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._closed:
            return
        if exc is None:
            self.close("complete")
        elif isinstance(exc, KeyboardInterrupt):
            self.close("partial", "interrupted")
        else:
            self.close("failed", f"{type(exc).__name__}: {exc}")

    # ---- helpers ---------------------------------------------------------------------------
    def _check_open(self, table: str) -> None:
        check_table(table)
        if self._closed:
            raise TierscopeError(f"run {self.path} is closed")
        if table in self._finished:
            raise TierscopeError(f"table {table} of run {self.path} is already finished")

    def _parts_dir(self, table: str) -> Path:
        return self.path / PARTS / table

    def _part_files(self, table: str) -> list[Path]:
        folder = self._parts_dir(table)
        return sorted(folder.glob("part-*.parquet")) if folder.is_dir() else []

    def _flush(self, table: str) -> None:
        frames = self._buffers.pop(table, [])
        self._buffered_rows.pop(table, None)
        if not frames:
            return
        folder = self._parts_dir(table)
        folder.mkdir(parents=True, exist_ok=True)
        n = self._parts.get(table, 0)
        self._replace(folder / f"part-{n:06d}.parquet", pl.concat(frames, how="vertical"))
        self._parts[table] = n + 1

    @staticmethod
    def _replace(path: Path, frame: pl.DataFrame) -> None:
        tmp = path.with_suffix(".parquet.tmp")
        frame.write_parquet(tmp)
        os.replace(tmp, path)

    def _write_info(self) -> None:
        tmp = self.path / (RUN_JSON + ".tmp")
        tmp.write_text(json.dumps(_finite(self.info), indent=2, allow_nan=False) + "\n")
        os.replace(tmp, self.path / RUN_JSON)


#: What a run folder holds of its own (``replace`` removes these, and nothing else).
OWN_FILES = (RUN_JSON, *(f"{t}.parquet" for t in TABLES), "analysis.json", "report.html",
             "calibration.json")  # fmt: skip


def _claim(path: Path, replace: bool = False) -> bool:
    """Make ``path`` this process's run folder; returns whether the folder was created.
    ``replace``: an existing run folder's own files (:data:`OWN_FILES`) are removed first,
    anything else in it stays."""
    taken = "a new or empty folder"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir()
        created = True
    except FileExistsError:
        if replace and path.is_dir() and (path / RUN_JSON).is_file():
            for name in OWN_FILES:
                (path / name).unlink(missing_ok=True)
            shutil.rmtree(path / PARTS, ignore_errors=True)
        elif replace and path.is_dir() and any(path.iterdir()):
            raise InputError(
                "run_dir", str(path), "a run folder to replace (this one has no run.json: "
                "tierscope did not write it, and --force deletes nothing else)",
            ) from None  # fmt: skip
        elif not path.is_dir() or any(path.iterdir()):
            raise InputError("run_dir", str(path), taken) from None
        created = False
    except OSError as exc:
        raise InputError(
            "run_dir", str(path), f"a folder that can be created ({exc.strerror or exc})"
        ) from None
    try:
        # The claim: whoever creates run.json first owns the folder.
        os.close(os.open(path / RUN_JSON, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        raise InputError("run_dir", str(path), f"{taken} (another command took it)") from None
    except OSError as exc:
        if created:
            shutil.rmtree(path, ignore_errors=True)
        raise InputError(
            "run_dir", str(path), f"a folder that can be written ({exc.strerror or exc})"
        ) from None
    return created


def _finite(doc: Any) -> Any:
    """``doc`` with NaN and infinities replaced by None (JSON has no such numbers)."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {str(k): _finite(v) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [_finite(v) for v in doc]
    return doc


@dataclass(frozen=True)
class Run:
    """A run folder as read back: ``run.json`` and the tables (None when absent).

    Readers take what the run says of itself from the typed properties (``kind``, ``spec``,
    ``name``, ``experiment``, ``setups``, ``graph``, ``interval``), never from ``info``'s spec.
    """

    path: Path
    info: dict[str, Any]
    metrics: pl.DataFrame | None
    requests: pl.DataFrame | None
    events: pl.DataFrame | None
    points: pl.DataFrame | None

    @property
    def status(self) -> str:
        return str(self.info.get("status"))

    @property
    def source(self) -> str:
        return str(self.path / RUN_JSON)

    @cached_property
    def kind(self) -> RunKind | None:
        """What wrote the run (None: a run built in memory without one)."""
        kind = self.info.get("kind")
        if kind is None:
            return None
        if kind not in RUN_KINDS:
            raise InputError("kind", kind, "one of " + ", ".join(RUN_KINDS), source=self.source)
        return cast(RunKind, kind)

    @cached_property
    def spec(self) -> RunSpec | None:
        """The typed spec the run records (:mod:`tierscope.spec.runs`; None: no kind)."""
        if self.kind is None:
            return None
        try:
            return parse_run_spec(self.kind, self.info.get("spec"), source=self.source)
        except SpecError as exc:
            raise InputError(
                "spec", self.kind, f"the spec of a run of this kind ({exc})", source=self.source
            ) from None

    @property
    def name(self) -> str:
        """The spec's name, else the folder's."""
        spec = self.spec
        name = getattr(spec, "name", None)
        return str(name) if name else self.path.name

    @property
    def experiment(self) -> ExperimentSpec:
        """The experiment spec of a measured run; InputError for any other kind of run."""
        if self.kind != "experiment":
            raise InputError(
                RUN_JSON,
                self.kind,
                "a measured run folder (kind 'experiment', written by tierscope run)",
                source=str(self.path),
            )
        return cast(ExperimentSpec, self.spec)

    @cached_property
    def setups(self) -> dict[str, ExperimentSpec]:
        """Each setup's own experiment spec (its overrides applied) of a measured run."""
        try:
            return setup_specs(self.experiment, self.info["spec"], source=self.source)
        except SpecError as exc:
            raise InputError(
                "spec", "setups", f"valid setups ({exc})", source=self.source
            ) from None

    def setup(self, name: str) -> ExperimentSpec:
        """The spec of one setup of a measured run (InputError naming the setups otherwise)."""
        if name not in self.setups:
            raise InputError(
                "--setup", name, "one of " + ", ".join(self.setups), source=str(self.path)
            )
        return self.setups[name]

    @cached_property
    def graph(self) -> Graph:
        """The system's components front to back and their calls (see :mod:`._shape`)."""
        recorded = self.info.get("components")
        spec = None if isinstance(recorded, dict) else self.spec  # the record comes first
        return graph_of(recorded, spec, self.metrics, self.requests, self.source)

    @cached_property
    def interval(self) -> float | None:
        """Seconds between two samples of the metrics (None: no metrics to tell)."""
        return interval_of(self.info.get("interval"), self.spec, self.metrics)


def scan_table(run_dir: str | os.PathLike[str], table: str) -> pl.LazyFrame | None:
    """A lazy view of one table of a run (from its parts if the writer never finished it).

    A file whose Parquet footer cannot be read raises :class:`InputError` naming it; damage
    further in shows when the frame is collected (:func:`read_run` names the file then too).
    """
    check_table(table)
    path = Path(run_dir)
    final = path / f"{table}.parquet"
    files = [final] if final.is_file() else sorted((path / PARTS / table).glob("part-*.parquet"))
    for file in files:
        try:
            pl.read_parquet_schema(file)
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise _damaged(file, exc) from None
    if not files:
        return None
    return pl.scan_parquet(final) if files[0] == final else _scan_parts(files)


def _scan_parts(parts: list[Path]) -> pl.LazyFrame:
    """Parts of one table as one frame; a table whose columns grow as the run goes (the points
    table gains a metric that a later level first measured) has nulls where a part lacked one."""
    schemas = [pl.read_parquet_schema(p) for p in parts]
    if all(s == schemas[0] for s in schemas):
        return pl.scan_parquet(parts)
    return pl.concat([pl.scan_parquet(p) for p in parts], how="diagonal_relaxed")


def _damaged(file: Path, exc: BaseException) -> InputError:
    return InputError(
        "table",
        str(file),
        f"a readable Parquet file (this one is damaged: {type(exc).__name__}: {exc})",
        source=str(file),
    )


def _collect(run_dir: Path, table: str, lf: pl.LazyFrame) -> pl.DataFrame:
    try:
        return lf.collect()
    except (pl.exceptions.PolarsError, OSError) as exc:
        final = run_dir / f"{table}.parquet"
        damaged = final if final.is_file() else run_dir / PARTS / table
        raise _damaged(damaged, exc) from None


def is_run(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a run folder (it has a ``run.json``)."""
    return (Path(path) / RUN_JSON).is_file()


def run_status(run_dir: str | os.PathLike[str]) -> str | None:
    """A run folder's status (``complete``, ``partial``, ``failed``) without reading its tables;
    None where there is no readable ``run.json``."""
    try:
        info = json.loads((Path(run_dir) / RUN_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return str(info.get("status")) if isinstance(info, dict) else None


def read_run(run_dir: str | os.PathLike[str]) -> Run:
    """Read a run folder; InputError if it has no ``run.json``."""
    path = Path(run_dir)
    info_file = path / RUN_JSON
    if not info_file.is_file():
        raise InputError("run_dir", str(path), f"a run folder (with {RUN_JSON})")
    try:
        info = json.loads(info_file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise InputError(RUN_JSON, str(info_file), f"valid JSON ({exc})") from None
    except OSError as exc:
        raise InputError(RUN_JSON, str(info_file), f"a readable file ({exc.strerror})") from None
    if not isinstance(info, dict):
        raise InputError(RUN_JSON, str(info_file), "a JSON object")
    tables = {}
    for table in TABLES:
        lf = scan_table(path, table)
        tables[table] = None if lf is None else _collect(path, table, lf)
    return Run(path=path, info=info, **tables)
