"""Reading YAML documents with errors that name the file and line (no tracebacks for users)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import yaml

from tierscope.errors import SpecError


def load_yaml(path: str | Path) -> Any:
    """Decode a YAML file; a missing file or malformed YAML raises :class:`SpecError`."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(source, [("", f"cannot read file: {exc.strerror or exc}")]) from None
    except UnicodeDecodeError:
        raise SpecError(source, [("", "file is not UTF-8 text")]) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(source, [("", f"malformed YAML{where}: {problem}")]) from None


def inline_schedule_files(data: Any, base: Path, source: str) -> Any:
    """Replace ``file: trace.csv`` in ``simulation.schedules`` by its ``times`` and ``values``.

    The CSV (path relative to the model file) has a header with columns ``t`` and ``value``.
    """
    sim = data.get("simulation") if isinstance(data, dict) else None
    schedules = sim.get("schedules") if isinstance(sim, dict) else None
    if not isinstance(schedules, list):
        return data
    for i, sch in enumerate(schedules):
        if not isinstance(sch, dict) or "file" not in sch:
            continue
        where = f"simulation.schedules[{i}].file"
        path = base / str(sch.pop("file"))
        try:
            with path.open(newline="", encoding="utf-8") as fh:
                rows = list(csv.DictReader(fh))
        except OSError as exc:
            raise SpecError(source, [(where, f"cannot read {path}: {exc.strerror}")]) from None
        times, values = [], []
        for line, row in enumerate(rows, start=2):
            try:
                times.append(float(row["t"]))
                values.append(float(row["value"]))
            except (KeyError, TypeError, ValueError):
                raise SpecError(
                    source, [(where, f"{path}, line {line}: expected numbers in columns t,value")]
                ) from None
        sch["times"], sch["values"] = times, values
    return data
