"""Workload traces for ``tierscope control --trace``: a CSV file, or a built-in generator.

The file is ``time,load`` (a header, then one row per step): seconds from the start, and the
load from that time on (users for a closed workload, requests per second for an open one), held
until the next row; the last row's time is where the trace ends if its load is empty, else the
trace ends one step after it. Times start at 0 and increase.

Generators (``NAME:key=value,...``), each sampled every ``step`` seconds (default 10):

- ``diurnal:low=20,high=100,period=600,duration=1200`` — a day compressed into ``period``:
  low at the start, high half a period later, cosine in between;
- ``step:low=20,high=100,at=300,duration=900`` — low, then high from ``at`` on;
- ``spike:low=20,high=100,at=300,width=60,duration=900`` — high for ``width`` seconds at ``at``;
- ``flash:low=20,high=150,at=300,rise=30,hold=120,fall=240,duration=900`` — a flash crowd:
  up in ``rise`` seconds, held, then back down over ``fall`` seconds.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tierscope.errors import InputError

#: Rows a trace file may have (a day at one row per second is 86,400).
MAX_ROWS = 1_000_000


@dataclass(frozen=True)
class Trace:
    """A piecewise-constant load: ``loads[i]`` from ``times[i]`` to ``times[i + 1]`` (the last
    up to ``end``)."""

    times: np.ndarray
    loads: np.ndarray
    end: float
    source: str = "<trace>"

    def at(self, t: float) -> float:
        """The load at time ``t``."""
        i = int(np.searchsorted(self.times, t, side="right")) - 1
        return float(self.loads[max(i, 0)])

    def mean(self) -> float:
        spans = np.diff(np.append(self.times, self.end))
        return float((self.loads * spans).sum() / max(self.end - self.times[0], 1e-12))

    @property
    def peak(self) -> float:
        return float(self.loads.max())


def _check(times: list[float], loads: list[float], end: float, source: str) -> Trace:
    if not times:
        raise InputError("time,load", "no rows", "at least one row", source=source)
    if times[0] != 0:
        raise InputError("time", times[0], "the first row at time 0", source=source)
    for i in range(1, len(times)):
        if not times[i] > times[i - 1]:
            raise InputError(f"time (row {i + 2})", times[i], "times that increase", source=source)
    if not end > times[-1]:
        raise InputError("time", end, "an end after the last step", source=source)
    return Trace(np.array(times), np.array(loads), float(end), source)


def load_trace(path: str | Path) -> Trace:
    """Reads a ``time,load`` CSV file (see the module notes)."""
    source = str(path)
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        raise InputError("--trace", source, f"a readable CSV file ({exc.strerror})") from None
    times: list[float] = []
    loads: list[float] = []
    end: float | None = None
    reader = csv.reader(io.StringIO(text))
    header = [h.strip().lower() for h in next(reader, [])]
    if header[:2] != ["time", "load"]:
        raise InputError("header", ",".join(header), "time,load", source=source)
    for n, row in enumerate(reader, start=2):
        if not row or not "".join(row).strip():
            continue
        if n > MAX_ROWS:
            raise InputError("rows", n, f"at most {MAX_ROWS:,}", source=source)
        if end is not None:
            raise InputError(f"load (row {n - 1})", "", "a load on every row but the last",
                             source=source)  # fmt: skip
        t = _number(row[0], f"time (row {n})", source)
        cell = row[1].strip() if len(row) > 1 else ""
        if not cell:
            end = t
            continue
        load = _number(cell, f"load (row {n})", source)
        if load < 0:
            raise InputError(f"load (row {n})", load, "a load >= 0", source=source)
        times.append(t)
        loads.append(load)
    if end is None and times:  # (one step after the last row)
        end = times[-1] + (times[-1] - times[-2] if len(times) > 1 else 1.0)
    return _check(times, loads, 0.0 if end is None else end, source)


def _number(text: str, field: str, source: str) -> float:
    try:
        x = float(text)
    except ValueError:
        raise InputError(field, text, "a number", source=source) from None
    if not math.isfinite(x):
        raise InputError(field, text, "a finite number", source=source)
    return x


#: Each generator's parameters and their defaults.
GENERATORS: dict[str, dict[str, float]] = {
    "diurnal": {"low": 20, "high": 100, "period": 600, "duration": 1200, "step": 10},
    "step": {"low": 20, "high": 100, "at": 300, "duration": 900, "step": 10},
    "spike": {"low": 20, "high": 100, "at": 300, "width": 60, "duration": 900, "step": 10},
    "flash": {"low": 20, "high": 150, "at": 300, "rise": 30, "hold": 120, "fall": 240,
              "duration": 900, "step": 10},
}  # fmt: skip


def generate(text: str) -> Trace:
    """A built-in trace from ``NAME:key=value,...`` (see the module notes)."""
    name, _, args = text.partition(":")
    if name not in GENERATORS:
        raise InputError("--trace", text, "a CSV file or one of " + ", ".join(GENERATORS))
    p = dict(GENERATORS[name])
    for item in filter(None, (a.strip() for a in args.split(","))):
        key, eq, value = item.partition("=")
        if not eq or key not in p:
            raise InputError(f"--trace {name}", item, "key=value with a key of " + ", ".join(p))
        p[key] = _number(value, f"--trace {name}:{key}", "<trace>")
        if p[key] < 0:
            raise InputError(f"--trace {name}:{key}", p[key], "a value >= 0")
    if not (p["duration"] > 0 and p["step"] > 0):
        raise InputError(f"--trace {name}", text, "duration and step > 0")
    t = np.arange(0.0, p["duration"], p["step"])
    lo, hi = p["low"], p["high"]
    if name == "diurnal":
        if p["period"] <= 0:
            raise InputError("--trace diurnal:period", p["period"], "a period > 0")
        load = lo + (hi - lo) * 0.5 * (1 - np.cos(2 * np.pi * t / p["period"]))
    elif name == "step":
        load = np.where(t >= p["at"], hi, lo)
    elif name == "spike":
        load = np.where((t >= p["at"]) & (t < p["at"] + p["width"]), hi, lo)
    else:  # flash crowd
        up = np.clip((t - p["at"]) / max(p["rise"], 1e-9), 0, 1)
        down_from = p["at"] + p["rise"] + p["hold"]
        down = np.clip((t - down_from) / max(p["fall"], 1e-9), 0, 1)
        load = lo + (hi - lo) * up * (1 - down)
    return Trace(t, np.round(load, 6), float(p["duration"]), f"<{text}>")


def read_trace(text: str) -> Trace:
    """A trace file, or a generator when ``text`` names one and no such file exists."""
    name = text.partition(":")[0]
    if name in GENERATORS and not Path(text).exists():
        return generate(text)
    return load_trace(text)


__all__ = ["GENERATORS", "Trace", "generate", "load_trace", "read_trace"]
