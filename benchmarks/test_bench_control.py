"""Decision time of the controllers (issue 20's target: <= 10 ms per interval for IAE with
10^5 rows in its operational data store).

The store is filled with 10^5 per-second rows over 20 configurations of three components;
each decision is one control interval's observation with a violated sensitive SLA, so IAE
forecasts, queries the store and (here) answers from it. The median of 200 decisions is
printed; the target is asserted on it. Anchor: the same query written as a Python loop over
the rows (what a direct transcription of the thesis's SQL does), printed beside it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tierscope.plan.control import IAE, Bounds, Observation

Recorder = Callable[[str, Mapping[str, Any]], Path]
ROWS = 100_000
TARGET_MS = 10.0


def _filled(rng: np.random.Generator) -> IAE:
    iae = IAE(Bounds({"web": 1, "app": 1, "db": 1}, {"web": 4, "app": 5, "db": 4}))
    configs = [(w, a, d) for w in (1, 2) for a in (1, 2, 3, 4, 5) for d in (1, 2)]
    per = ROWS // len(configs)
    for i, c in enumerate(configs):
        x = rng.uniform(50 * sum(c), 80 * sum(c), size=(per, 1))
        iae.ods.append(x, c, rng.uniform(0.85, 1.0, per), t=float(i))
    return iae


def _observation(rng: np.random.Generator, t: float) -> Observation:
    per_second = rng.uniform(300, 340, 30)
    return Observation(
        t=t, interval=30.0, load=300.0, config={"web": 1, "app": 3, "db": 1},
        running={"web": 1, "app": 3, "db": 1}, throughput=float(per_second.mean()),
        utilization={"web": 0.3, "app": 0.9, "db": 0.5}, sla=0.9, sensitive_sla=0.8,
        per_second=per_second, sla_per_second=np.full(30, 0.9),
        loads=tuple(300 + 50 * np.sin(np.arange(40) / 5)), horizon=60.0,
    )  # fmt: skip


def _loop_query(rows: tuple, y: float) -> Any:
    """The thesis's query as a loop over the rows (the anchor)."""
    x, configs, sla, t = rows
    groups: dict[tuple, list] = {}
    for i in range(len(sla)):
        d = x[i, 0] - y
        if (d * d if d <= 0 else 0.0) < 50.0**2:
            groups.setdefault(configs[i], []).append((sla[i], t[i]))
    ok = [(sum(c), -max(r[1] for r in rows), c) for c, rows in groups.items()
          if len(rows) >= 30 and np.mean([r[0] for r in rows]) >= 0.9]  # fmt: skip
    return min(ok)[2] if ok else None


def test_iae_decides_in_milliseconds_with_a_large_store(record: Recorder) -> None:
    rng = np.random.default_rng(1)
    iae = _filled(rng)
    times, loops = [], []
    for k in range(200):
        obs = _observation(rng, 1000.0 + 30 * k)
        t0 = time.perf_counter()
        iae.decide(obs)
        times.append(time.perf_counter() - t0)
        if k < 3:
            rows = iae.ods.rows()
            t0 = time.perf_counter()
            _loop_query(rows, obs.throughput)
            loops.append(time.perf_counter() - t0)
    median_ms = 1e3 * statistics.median(times)
    loop_ms = 1e3 * statistics.median(loops)
    print(f"\nIAE decision with {len(iae.ods):,} store rows: median {median_ms:.2f} ms "
          f"(target <= {TARGET_MS:g} ms); the query as a Python loop: {loop_ms:.0f} ms "
          f"({loop_ms / median_ms:.0f}x)")  # fmt: skip
    record("control_iae_decision", {"rows": len(iae.ods), "median_ms": median_ms,
                                    "loop_query_ms": loop_ms})  # fmt: skip
    assert median_ms <= TARGET_MS
