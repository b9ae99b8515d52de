"""Schema of the observation CSV read by ``tierscope estimate FILE.csv``.

One row per observation window; the header names what each column holds:

=====================  ==========================================================================
column                 meaning
=====================  ==========================================================================
``x_<class>``          throughput of the class in the window, 1/s (at least one such column)
``u_<station>``        utilisation of the station, 0–1 per server
``r_<class>``          mean response time of the class in the window, s (blank: not measured)
``n_<station>_<class>`` queue-length sample: jobs of the class at the station (blank: none)
``pop_<class>``        closed population of the class (the same in every row)
``z_<class>``          think time of the class, s (the same in every row)
``m_<station>``        servers of the station (default 1; the same in every row)
``dt``                 length of the window, s (weights; default: all windows equal)
``t``                  time stamp of the window (kept for the reader, not used)
=====================  ==========================================================================

Design decision: class names come from the ``x_`` columns and station names from the ``u_``
columns, so ``n_<station>_<class>`` is split at the one position where both halves are known
names (names may contain underscores, as interaction names do); without ``u_`` columns the part
before the class name is the station. Every problem is reported with the file, the column and
the line, as :class:`~tierscope.errors.InputError`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
from pydantic import BaseModel, ConfigDict, Field, model_validator

from tierscope.errors import InputError

_STRICT = ConfigDict(extra="forbid", frozen=True)
#: Columns with one value per row that may be blank (not measured in that window).
OPTIONAL_PER_ROW = ("r_", "n_")


class ObservationLayout(BaseModel):
    """Which column of the CSV holds what (the file's schema, derived from its header)."""

    model_config = _STRICT

    classes: list[str] = Field(min_length=1)
    stations: list[str]
    throughput: dict[str, str]
    utilization: dict[str, str] = Field(default_factory=dict)
    response_time: dict[str, str] = Field(default_factory=dict)
    queue: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="station -> class -> column"
    )
    population: dict[str, str] = Field(default_factory=dict)
    think_time: dict[str, str] = Field(default_factory=dict)
    servers: dict[str, str] = Field(default_factory=dict)
    window: str | None = None

    @model_validator(mode="after")
    def _names_known(self) -> ObservationLayout:
        for field in ("response_time", "population", "think_time"):
            for cls in getattr(self, field):
                if cls not in self.classes:
                    raise ValueError(f"{field}: unknown class '{cls}'")
        for field in ("utilization", "servers", "queue"):
            for st in getattr(self, field):
                if st not in self.stations:
                    raise ValueError(f"{field}: unknown station '{st}'")
        return self


def classify_columns(header: list[str], source: str) -> ObservationLayout:
    """The layout of a CSV with this header; InputError naming the first bad column."""
    seen: set[str] = set()
    for col in header:
        if col in seen:
            raise InputError("header", col, "each column once", source=source)
        seen.add(col)
    classes = [c[2:] for c in header if c.startswith("x_") and len(c) > 2]
    if not classes:
        raise InputError(
            "header", header, "at least one throughput column x_<class>", source=source
        )
    util = {c[2:]: c for c in header if c.startswith("u_") and len(c) > 2}
    stations = list(util)
    servers = {c[2:]: c for c in header if c.startswith("m_") and len(c) > 2}
    queue: dict[str, dict[str, str]] = {}
    layout: dict[str, dict[str, str]] = {"r_": {}, "pop_": {}, "z_": {}}
    window = None
    for col in header:
        if col.startswith(("x_", "u_", "m_")) and len(col) > 2:
            continue
        if col in ("t", "time"):
            continue
        if col == "dt":
            window = col
            continue
        if col.startswith("n_"):
            station, cls = _split_queue_column(col, stations, classes, source)
            queue.setdefault(station, {})[cls] = col
            continue
        for prefix in layout:
            if col.startswith(prefix) and col[len(prefix) :] in classes:
                layout[prefix][col[len(prefix) :]] = col
                break
        else:
            raise InputError(
                "header",
                col,
                "columns x_<class>, u_<station>, r_<class>, n_<station>_<class>, pop_<class>, "
                "z_<class>, m_<station>, dt or t (class names come from the x_ columns: "
                + ", ".join(classes)
                + ")",
                source=source,
            )
    for st in [*queue, *servers]:
        if st not in stations:
            stations.append(st)
    return ObservationLayout(
        classes=classes,
        stations=stations,
        throughput={c: f"x_{c}" for c in classes},
        utilization=util,
        response_time=layout["r_"],
        queue=queue,
        population=layout["pop_"],
        think_time=layout["z_"],
        servers=servers,
        window=window,
    )


def _split_queue_column(
    col: str, stations: list[str], classes: list[str], source: str
) -> tuple[str, str]:
    body = col[2:]
    splits = [
        (body[:i], body[i + 1 :])
        for i, ch in enumerate(body)
        if ch == "_" and 0 < i < len(body) - 1 and body[i + 1 :] in classes
    ]
    if stations:
        splits = [(s, c) for s, c in splits if s in stations]
    if len(splits) != 1:
        why = "no" if not splits else "more than one"
        raise InputError(
            "header",
            col,
            f"n_<station>_<class> with a known station and class ({why} way to split it; "
            f"stations: {', '.join(stations) or 'from u_ columns'}; classes: {', '.join(classes)})",
            source=source,
        )
    return splits[0]


def load_observations_csv(path: str | Path) -> tuple[ObservationLayout, dict[str, np.ndarray]]:
    """Read and check an observation CSV: its layout and one float array per column.

    Blank cells are allowed in ``r_`` and ``n_`` columns only (NaN: not measured in that row).
    """
    source = str(path)
    try:
        frame = pl.read_csv(path, infer_schema=False)
    except FileNotFoundError:
        raise InputError("INPUT", source, "an existing run folder or CSV file") from None
    except (pl.exceptions.PolarsError, OSError, UnicodeDecodeError) as exc:
        raise InputError("INPUT", source, f"a readable CSV file ({exc})") from None
    frame = frame.rename({c: c.strip() for c in frame.columns})
    if frame.height == 0:
        raise InputError("rows", 0, "at least one observation row", source=source)
    layout = classify_columns(frame.columns, source)
    columns: dict[str, np.ndarray] = {}
    for col in frame.columns:
        if col in ("t", "time"):
            continue
        columns[col] = _column_values(frame, col, source)
    _check_values(layout, columns, source)
    return layout, columns


def _column_values(frame: pl.DataFrame, col: str, source: str) -> np.ndarray:
    raw = frame[col].to_list()
    out = np.empty(len(raw))
    blank_ok = col.startswith(OPTIONAL_PER_ROW)
    for i, cell in enumerate(raw):
        text = (cell or "").strip()
        if not text:
            if not blank_ok:
                raise InputError(col, "", "a number", source=f"{source}, line {i + 2}")
            out[i] = math.nan
            continue
        try:
            out[i] = float(text)
        except ValueError:
            raise InputError(col, text, "a number", source=f"{source}, line {i + 2}") from None
        if not math.isfinite(out[i]):
            raise InputError(col, text, "a finite number", source=f"{source}, line {i + 2}")
    return out


def _check_values(layout: ObservationLayout, columns: dict[str, np.ndarray], source: str) -> None:
    def check(col: str, ok: np.ndarray, expected: str) -> None:
        bad = np.flatnonzero(~ok & ~np.isnan(columns[col]))
        if bad.size:
            i = int(bad[0])
            raise InputError(
                col, float(columns[col][i]), expected, source=f"{source}, line {i + 2}"
            )

    for col in layout.throughput.values():
        check(col, columns[col] >= 0, "a throughput >= 0 (1/s)")
    for col in layout.utilization.values():
        check(col, (columns[col] >= 0) & (columns[col] <= 1), "a utilisation in [0, 1]")
    for col in layout.response_time.values():
        check(col, columns[col] >= 0, "a response time >= 0 (s)")
    for by_class in layout.queue.values():
        for col in by_class.values():
            v = columns[col]
            check(col, (v >= 0) & (v == np.round(v)), "a queue length: an integer >= 0")
    for col in layout.think_time.values():
        check(col, columns[col] >= 0, "a think time >= 0 (s)")
    for col in layout.population.values():
        v = columns[col]
        check(col, (v >= 1) & (v == np.round(v)), "a population: an integer >= 1")
    for col in layout.servers.values():
        check(col, columns[col] > 0, "a number of servers > 0")
    if layout.window is not None:
        check(layout.window, columns[layout.window] > 0, "a window length > 0 (s)")
    for col in [*layout.population.values(), *layout.think_time.values(), *layout.servers.values()]:
        v = columns[col]
        if np.ptp(v) > 0:
            i = int(np.flatnonzero(v != v[0])[0])
            raise InputError(
                col,
                float(v[i]),
                f"the same value in every row ({v[0]:g})",
                source=f"{source}, line {i + 2}",
            )


__all__ = ["ObservationLayout", "classify_columns", "load_observations_csv"]
