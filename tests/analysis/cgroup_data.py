"""The real 50 ms cgroup data of ../shared/validation/cgroup-50ms as import CSV files.

The conversion is what a user does before ``tierscope import csv``: the cumulative counters
become rates over each sampling interval (stamped at the interval's start, in epoch seconds):
``cpu_cores`` (CPU seconds per second), ``cpu_throttled_ratio`` (throttled periods / periods,
only in intervals where a CFS period ended) and ``mem_bytes``. Rows written after a container
exited (empty cells) are dropped.
"""

from __future__ import annotations

import csv
import gzip
import itertools
from pathlib import Path

VALIDATION = Path(__file__).resolve().parents[3] / "shared" / "validation" / "cgroup-50ms"


def data_dir() -> Path | None:
    for base in (VALIDATION, Path("/work/shared/validation/cgroup-50ms")):
        if base.is_dir():
            return base
    return None


def samples(path: Path) -> list[dict[str, int]]:
    with gzip.open(path, "rt", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if all(v != "" for v in r.values())]
    return [{k: int(v) for k, v in r.items()} for r in rows]


def throttled_span(rows: list[dict[str, int]]) -> tuple[float, float]:
    """(first, last) epoch seconds bounding the intervals in which a period was throttled."""
    first = last = None
    for a, b in itertools.pairwise(rows):
        if b["cpu.throttling.throttled.count"] > a["cpu.throttling.throttled.count"]:
            first = a["t_ns"] / 1e9 if first is None else first
            last = b["t_ns"] / 1e9
    assert first is not None and last is not None
    return first, last


def write_metrics_csv(out: Path, containers: list[str]) -> dict[str, tuple[float, float]]:
    """Write the import CSV for the given containers (tier = container name); returns each
    one's throttled span (epoch seconds) as the independent truth."""
    base = data_dir()
    assert base is not None
    spans = {}
    with out.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["ts", "tier", "metric", "value"])
        for name in containers:
            rows = samples(base / f"{name}.csv.gz")
            spans[name] = throttled_span(rows)
            for a, b in itertools.pairwise(rows):
                t = a["t_ns"] / 1e9
                dt = (b["t_ns"] - a["t_ns"]) / 1e9
                w.writerow(
                    [
                        f"{t:.6f}",
                        name,
                        "cpu_cores",
                        (b["cpu.usage.total"] - a["cpu.usage.total"]) / 1e9 / dt,
                    ]
                )
                periods = b["cpu.throttling.periods"] - a["cpu.throttling.periods"]
                if periods > 0:
                    throttled = (
                        b["cpu.throttling.throttled.count"] - a["cpu.throttling.throttled.count"]
                    )
                    w.writerow([f"{t:.6f}", name, "cpu_throttled_ratio", throttled / periods])
                w.writerow([f"{t:.6f}", name, "mem_bytes", b["memory.usage.current"]])
    return spans
