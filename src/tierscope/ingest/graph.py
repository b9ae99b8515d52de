"""``--graph FILE``: the call graph of imported data, so push-back, episode roots and suspects
follow who calls whom instead of a guess.

Two forms: a square adjacency matrix in CSV (first row and column: the component names; a
non-zero cell in row A, column B means A calls B, as the PetShop dataset and
``networkx.to_pandas_adjacency`` write it), or YAML ``component: [callee, ...]``. Components of
the data the graph does not name are kept, calling nobody; a graph with a cycle, or a cell that
is not a number, is an InputError naming it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from tierscope.errors import InputError
from tierscope.ingest._files import read_table
from tierscope.spec.graph import Call, Component, Graph


def read_graph(path: str | os.PathLike[str], components: Iterable[str]) -> Graph:
    """The call graph in ``path`` over ``components`` (those of the data) and its own."""
    src = str(path)
    calls: dict[str, list[str]] = {}
    if Path(path).suffix.lower() in (".yaml", ".yml", ".json"):
        from tierscope.spec._load import load_yaml

        doc = load_yaml(path)
        if not isinstance(doc, dict):
            raise InputError("--graph", src, "a mapping of component: [callees]")
        for name, callees in doc.items():
            if callees is None:
                callees = []
            if not isinstance(callees, list) or not all(isinstance(c, str) for c in callees):
                raise InputError(str(name), callees, "a list of callee names", source=src)
            calls[str(name)] = list(callees)
    else:
        table = read_table(Path(path))
        first = table.columns[1]  # after _line: the row names
        names = [c for c in table.columns if c not in ("_line", first)]
        for row in table.iter_rows(named=True):
            caller = str(row[first])
            calls[caller] = []
            for callee in names:
                cell = (row[callee] or "").strip()
                try:
                    value = float(cell) if cell else 0.0
                except ValueError:
                    raise InputError(callee, cell, "0 or 1 (row calls column)",
                                     source=f"{src}, line {row['_line']}") from None  # fmt: skip
                if value:
                    calls[caller].append(callee)
    every = list(dict.fromkeys([*calls, *(c for cs in calls.values() for c in cs), *components]))
    built = [Component(n, calls=tuple(Call(c) for c in calls.get(n, []))) for n in every]
    try:
        return Graph.build(built, None)
    except ValueError as exc:
        raise InputError("--graph", src, f"a call graph without cycles ({exc})") from None


__all__ = ["read_graph"]
