"""Shared benchmark machinery: host facts, median timings, printed tables and the results log.

Design decision: every comparison is measured in the same process run and reported as a ratio of
medians, because absolute timings move with the machine and its load while ratios taken a few
seconds apart mostly do not. Each benchmark appends one small JSON line (numbers only, no arrays)
to ``benchmarks/results/<date>-<hostname>.jsonl`` together with the host facts needed to compare
runs later (cores, CPU model, Python and library versions, build profile of the Rust extension).
"""

from __future__ import annotations

import datetime as dt
import gc
import importlib.metadata
import json
import os
import platform
import socket
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"

#: Distributions whose versions go into every result line.
_VERSIONED = ("tierscope", "numpy", "scipy", "line-solver", "pytest")


# ---- host facts --------------------------------------------------------------------------------
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _native_profile() -> str | None:
    try:
        from tierscope import _native
    except ImportError:
        return None
    return str(getattr(_native, "build_profile", "unknown"))


@cache
def host_facts() -> dict[str, Any]:
    """Facts about this machine and software stack that affect timings."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count()
    return {
        "hostname": socket.gethostname(),
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "cpu_model": _cpu_model(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "native_build": _native_profile(),
        "versions": {d: _version(d) for d in _VERSIONED},
    }


def load_average() -> float | None:
    """One-minute load average (a noisy machine shows up here), None where unsupported."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


# ---- results log -------------------------------------------------------------------------------
def record(name: str, data: Mapping[str, Any]) -> Path:
    """Append one dated JSON line for benchmark ``name`` to today's results file for this host."""
    facts = host_facts()
    now = dt.datetime.now(dt.UTC)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{now:%Y-%m-%d}-{facts['hostname']}.jsonl"
    line = {
        "name": name,
        "at": now.isoformat(timespec="seconds"),
        "load_1min": load_average(),
        "host": facts,
        "data": _rounded(dict(data)),
    }
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(line, sort_keys=True, default=_jsonable) + "\n")
    return path


def _rounded(value: Any) -> Any:
    """Floats to 6 significant digits (timings are not more precise), to keep the log small."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, Mapping):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    return value


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):  # numpy scalars and (small) arrays
        return value.tolist()
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")


# ---- timing ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Timing:
    """Wall-clock seconds of repeated runs of one implementation."""

    label: str
    runs: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def best(self) -> float:
        return min(self.runs)

    def summary(self) -> dict[str, float | int]:
        return {"median_s": self.median, "min_s": self.best, "runs": len(self.runs)}


def measure(label: str, fn: Callable[[], Any], repeats: int, warmup: int = 1) -> tuple[Timing, Any]:
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` times timed; return timings and the
    last result."""
    result = None
    for _ in range(warmup):
        result = fn()
    gc.collect()
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        runs.append(time.perf_counter() - t0)
    return Timing(label, tuple(runs)), result


def measure_adaptive(
    label: str, fn: Callable[[], Any], *, max_repeats: int, budget_s: float
) -> tuple[Timing, Any]:
    """Time ``fn`` once, then repeat it up to ``max_repeats`` runs while the total stays within
    ``budget_s`` (for slow references such as LINE, where one run may take many seconds)."""
    t0 = time.perf_counter()
    result = fn()
    runs = [time.perf_counter() - t0]
    while len(runs) < max_repeats and sum(runs) + statistics.median(runs) <= budget_s:
        t0 = time.perf_counter()
        result = fn()
        runs.append(time.perf_counter() - t0)
    return Timing(label, tuple(runs)), result


# ---- printing ----------------------------------------------------------------------------------
def fmt_seconds(s: float) -> str:
    if s < 1e-3:
        return f"{s * 1e6:8.1f} µs"
    if s < 1.0:
        return f"{s * 1e3:8.2f} ms"
    return f"{s:8.3f} s "


def print_table(
    title: str,
    rows: Sequence[Timing],
    *,
    reference: Timing,
    notes: Sequence[str] = (),
) -> None:
    """Print median timings and each row's median divided by the reference median."""
    width = max(len(r.label) for r in rows) + 2
    bar = "=" * max(width + 44, len(title))
    print(f"\n{bar}\n{title}\n{bar}")
    print(f"{'implementation':<{width}}{'runs':>5} {'median':>12} {'min':>12} {'ratio':>10}")
    for r in rows:
        ratio = r.median / reference.median
        print(
            f"{r.label:<{width}}{len(r.runs):>5} {fmt_seconds(r.median):>12} "
            f"{fmt_seconds(r.best):>12} {ratio:>9.1f}x"
        )
    print(f"(ratio = median / median of '{reference.label}'; load 1 min: {load_average()})")
    for note in notes:
        print(f"  {note}")
