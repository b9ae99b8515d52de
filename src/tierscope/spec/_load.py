"""Reading YAML documents with errors that name the file and line (no tracebacks for users).

Design decision: a document is checked for its shape right after decoding, before any schema
sees it: nesting deeper than :data:`MAX_DEPTH` (PyYAML itself recurses and fails at a few
hundred levels) and aliases that expand to more than :data:`MAX_VALUES` values (a few lines of
``&a [*b, *b, ...]`` make billions, which validation would walk for hours) are refused with a
:class:`SpecError`, like malformed YAML.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import yaml

from tierscope.errors import SpecError

#: Deepest nesting of mappings and lists accepted (tierscope's own formats need fewer than 10).
MAX_DEPTH = 64
#: Most values a document may hold once its aliases are expanded.
MAX_VALUES = 5_000_000


def load_yaml(path: str | Path) -> Any:
    """Decode a YAML file; a missing file or malformed YAML raises :class:`SpecError`."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(source, [("", f"cannot read file: {exc.strerror or exc}")]) from None
    except UnicodeDecodeError:
        raise SpecError(source, [("", "file is not UTF-8 text")]) from None
    return parse_yaml(text, source)


def parse_yaml(text: str, source: str, where: str = "") -> Any:
    """Decode YAML ``text``; malformed or oversized documents raise :class:`SpecError`
    (``where`` is the location the problems are reported at)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        at = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            at = f" at line {mark.line + 1}, column {mark.column + 1}"
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError(source, [(where, f"malformed YAML{at}: {problem}")]) from None
    except RecursionError:
        raise SpecError(
            source, [(where, f"malformed YAML: nested more than {MAX_DEPTH} levels deep")]
        ) from None
    except (ValueError, TypeError, OverflowError) as exc:  # e.g. a date such as 2001-13-45
        raise SpecError(source, [(where, f"malformed YAML: {exc}")]) from None
    problem = shape_problem(data)
    if problem is not None:
        raise SpecError(source, [(where, problem)])
    return data


def shape_problem(data: Any) -> str | None:
    """Why ``data`` is too deep, too big or cyclic to be validated, or None.

    Shared containers (YAML aliases) are counted once per use but walked once, so the check
    itself costs one pass over the distinct containers.
    """
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    # Iterative post-order walk: (node, children pushed?)
    stack: list[tuple[Any, bool]] = [(data, False)]
    on_path: set[int] = set()
    while stack:
        node, expanded = stack.pop()
        if not isinstance(node, dict | list):
            continue
        key = id(node)
        children = list(node.keys()) + list(node.values()) if isinstance(node, dict) else node
        if expanded:
            on_path.discard(key)
            size, depth = 1, 1
            for child in children:
                if isinstance(child, dict | list):
                    size += sizes[id(child)]
                    depth = max(depth, depths[id(child)] + 1)
                else:
                    size += 1
            if depth > MAX_DEPTH:
                return f"nested more than {MAX_DEPTH} levels deep"
            if size > MAX_VALUES:
                return f"more than {MAX_VALUES:,} values once its aliases are expanded"
            sizes[key], depths[key] = size, depth
            continue
        if key in sizes:
            continue
        if key in on_path:
            return "a YAML alias that contains itself"
        if len(on_path) >= MAX_DEPTH:
            return f"nested more than {MAX_DEPTH} levels deep"
        on_path.add(key)
        stack.append((node, True))
        stack.extend(
            (c, False) for c in children if isinstance(c, dict | list) and id(c) not in sizes
        )
    return None


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
