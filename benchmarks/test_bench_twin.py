"""The quota-aware twin (the native engine, ``tierscope.sim.twin``) against what it replaced.

1. **Speed.** A three-tier model under CPU quotas (60 users thinking 0.5 s; web 1 ms, no quota;
   two app replicas at 0.5 core, 8 ms; db at 0.8 core, 10 ms; one process per replica serving
   first come first served, exponential demands): simulated requests per second of wall time of
   the twin, of the Python quota simulation it replaces (``tierscope.domains._quota_sim``, what
   ``predict`` runs until the twin takes over) and of SimPy 4 written the usual way
   (a ``simpy.Resource`` per replica, the budget spent in chunks and refilled by a process per
   replica). Target: the twin >= 20x the Python simulation. Sanity: the three throughputs agree
   within 3 %.
2. **Agreement** on the models of freshly calibrated real-system runs: the embedded three-tier
   system swept with the app capped and with the database capped (``tests/plan/_real.py``),
   calibrated by today's code; at every measured level both simulations run ``REPLICATIONS``
   times; the table gives each one's mean throughput, mean and p95 response time with 95 %
   intervals, and whether the intervals overlap. ``TIERSCOPE_BENCH_TWIN_RUNS=DIR[:DIR...]`` uses
   run folders measured before instead of sweeping.

Run with ``make bench`` (or ``pytest benchmarks/test_bench_twin.py -s``).
"""

from __future__ import annotations

import math
import os
import random
import statistics
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.harness import Timing, print_table
from tierscope.domains import _quota_sim as anchor
from tierscope.sim import twin

Recorder = Callable[[str, Mapping[str, Any]], Path]
pytestmark = pytest.mark.timeout(3600)

USERS, THINK = 60, 0.5
TIERS = [("web", 1, None, 1e-3), ("app", 2, 0.5, 8e-3), ("db", 1, 0.8, 10e-3)]
PERIOD = 0.1
TARGET_VS_PYTHON = 20.0
X_RTOL = 0.03
REPLICATIONS = 10


def _tiers(module: Any) -> list[Any]:
    return [
        module.SimTier(name, replicas, 1.0, quota, quantum=math.inf)
        for name, replicas, quota, _ in TIERS
    ]


def _run(module: Any, duration: float, seed: int) -> tuple[float, int]:
    out = module.simulate_closed(
        _tiers(module),
        users=USERS,
        think_time=THINK,
        demand_means=np.array([d for *_, d in TIERS]),
        warmup=5.0,
        duration=duration,
        seed=seed,
    )
    return out.throughput, len(out.response_times)


def simpy_three_tier(duration: float, seed: int) -> tuple[float, int]:
    """The same model in SimPy: FCFS replicas whose CPU budget is spent in chunks."""
    import simpy

    rng = random.Random(seed)
    env = simpy.Environment()
    warmup = 5.0

    class Replica:
        def __init__(self, quota: float | None) -> None:
            self.res = simpy.Resource(env, capacity=1)
            self.quota = quota
            self.budget = math.inf if quota is None else quota * PERIOD
            self.refilled = env.event()
            if quota is not None:
                env.process(self.refill(rng.uniform(0, PERIOD)))

        def refill(self, phase: float):  # type: ignore[no-untyped-def]
            yield env.timeout(phase)
            while True:
                self.budget = self.quota * PERIOD  # type: ignore[operator]
                self.refilled.succeed()
                self.refilled = env.event()
                yield env.timeout(PERIOD)

        def serve(self, work: float):  # type: ignore[no-untyped-def]
            with self.res.request() as req:
                yield req
                while work > 1e-12:
                    if self.budget <= 1e-12:
                        yield self.refilled
                        continue
                    run = min(work, self.budget)
                    yield env.timeout(run)
                    self.budget -= run
                    work -= run

    tiers = [[Replica(q) for _ in range(n)] for _, n, q, _ in TIERS]
    turn = [0]
    done = [0]

    def user():  # type: ignore[no-untyped-def]
        while True:
            yield env.timeout(rng.expovariate(1 / THINK))
            start = env.now
            for t, (_, _, _, demand) in enumerate(TIERS):
                row = tiers[t]
                if t == 0:
                    turn[0] = (turn[0] + 1) % len(row)
                    rep = row[turn[0]]
                else:
                    rep = min(row, key=lambda r: len(r.res.queue) + r.res.count)
                yield from rep.serve(rng.expovariate(1 / demand))
            if start >= warmup:
                done[0] += 1

    for _ in range(USERS):
        env.process(user())
    env.run(until=warmup + duration)
    return done[0] / duration, done[0]


def _timed(label: str, fn: Callable[[int], tuple[float, int]], seeds: int) -> tuple[Timing, list]:
    runs, outs = [], []
    for seed in range(seeds):
        t0 = time.perf_counter()
        outs.append(fn(seed))
        runs.append(time.perf_counter() - t0)
    return Timing(label, runs), outs


def test_twin_speed_against_the_python_simulation_and_simpy(record: Recorder) -> None:
    pytest.importorskip("simpy", reason="install the bench extra: pip install -e '.[bench]'")
    durations = {"twin": 3000.0, "python": 300.0, "simpy": 300.0}
    fns = {
        "twin": lambda s: _run(twin, durations["twin"], s),
        "python": lambda s: _run(anchor, durations["python"], s),
        "simpy": lambda s: simpy_three_tier(durations["simpy"], s),
    }
    results = {k: _timed(k, fn, 5) for k, fn in fns.items()}
    rate = {
        k: statistics.median(n / t for (_, n), t in zip(outs, timing.runs, strict=True))
        for k, (timing, outs) in results.items()
    }
    x = {k: statistics.mean(xv for xv, _ in outs) for k, (_, outs) in results.items()}
    speedup = {k: rate["twin"] / rate[k] for k in ("python", "simpy")}
    # Wall time per simulated request: the ratio column is the speed ratio.
    rows = [
        Timing(f"{k} ({durations[k]:g} s simulated)", [1 / rate[k]]) for k in ("python", "simpy")
    ]
    rows.insert(0, Timing(f"twin ({durations['twin']:g} s simulated)", [1 / rate["twin"]]))
    print_table(
        f"3-tier quota model, {USERS} users: wall time per simulated request",
        rows,
        reference=rows[0],
        notes=[
            f"requests per wall second: twin {rate['twin']:,.0f}, Python {rate['python']:,.0f},"
            f" SimPy {rate['simpy']:,.0f}",
            f"twin / Python: {speedup['python']:.0f}x (target >= {TARGET_VS_PYTHON:g}x); "
            f"twin / SimPy: {speedup['simpy']:.0f}x",
            "throughput: " + ", ".join(f"{k} {v:.2f}/s" for k, v in x.items()),
        ],
    )
    record("twin_speed", {"requests_per_s": rate, "speedup": speedup, "throughput": x})
    for k in ("python", "simpy"):
        assert abs(x["twin"] / x[k] - 1) < X_RTOL, x
    assert speedup["python"] >= TARGET_VS_PYTHON, speedup


# ---- 2. agreement on calibrated models of real runs ------------------------------------------
def _real_runs(tmp: Path) -> list[tuple[str, Path]]:
    given = os.environ.get("TIERSCOPE_BENCH_TWIN_RUNS")
    if given:
        return [(Path(p).name, Path(p)) for p in given.split(":") if p]
    from tests.plan._real import (
        APP_BOTTLENECK,
        DB_BOTTLENECK,
        base_spec,
        measure,
        prerequisites,
    )

    prerequisites()
    levels = [5, 12, 20, 28, 36, 50, 70]
    return [
        (name, measure(tmp / name, base_spec(tiers, levels)))
        for name, tiers in (("app", APP_BOTTLENECK), ("db", DB_BOTTLENECK))
    ]


def _interval(xs: list[float]) -> tuple[float, float]:
    """Mean and 95 % half-width (t, n - 1 degrees of freedom)."""
    from scipy import stats

    m = statistics.mean(xs)
    hw = stats.t.ppf(0.975, len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))
    return m, float(hw)


def test_twin_agrees_with_the_python_simulation_on_calibrated_models(
    tmp_path: Path, record: Recorder
) -> None:
    from tierscope.domains.ntier import twin_arguments
    from tierscope.plan import fit_model
    from tierscope.plan.calibrate import measured_levels
    from tierscope.store import read_run

    table, overlap, total = [], 0, 0
    for name, run_dir in _real_runs(tmp_path):
        run = read_run(run_dir)
        setup = run.points["setup"][0]  # type: ignore[index]
        model, _, _ = fit_model(run, setup=setup)
        for level in measured_levels(run, setup)["level"].to_list():
            tiers, kw = twin_arguments(model, round(level))
            got: dict[str, dict[str, list[float]]] = {}
            for label, module in (("twin", twin), ("python", anchor)):
                outs = [
                    module.simulate_closed(
                        [module.SimTier(**t) for t in tiers],
                        warmup=5.0,
                        duration=120.0,
                        seed=seed,
                        **kw,
                    )
                    for seed in range(REPLICATIONS)
                ]
                got[label] = {
                    "X": [o.throughput for o in outs],
                    "R": [o.rt_mean for o in outs],
                    "p95": [o.rt_quantile(0.95) for o in outs],
                }
            row: dict[str, Any] = {"run": name, "users": round(level)}
            for metric in ("X", "R", "p95"):
                (a, ha), (b, hb) = (_interval(got[k][metric]) for k in ("twin", "python"))
                agree = abs(a - b) <= ha + hb
                overlap += agree
                total += 1
                row[metric] = {"twin": [a, ha], "python": [b, hb], "overlap": agree}
            table.append(row)
    print(f"\n{'=' * 96}\ntwin vs Python quota simulation, {REPLICATIONS} replications of 120 s")
    print(f"{'run':<6}{'users':>6}  {'X twin':>16}{'X python':>16}  {'R twin (ms)':>18}"
          f"{'R python (ms)':>18}  {'p95 twin':>12}{'p95 py':>10}")  # fmt: skip

    def pm(pair: list[float], scale: float = 1.0) -> str:
        return f"{scale * pair[0]:>9.2f} ±{scale * pair[1]:>5.2f}"

    for r in table:
        x, rr, p = r["X"], r["R"], r["p95"]
        print(
            f"{r['run']:<6}{r['users']:>6}  {pm(x['twin'])}{pm(x['python'])}"
            f"  {pm(rr['twin'], 1e3):>18}{pm(rr['python'], 1e3):>18}"
            f"  {1e3 * p['twin'][0]:>10.1f}{'' if p['overlap'] else '*':1}"
            f"{1e3 * p['python'][0]:>9.1f}"
        )
    print(f"intervals that overlap: {overlap} of {total} (* p95 intervals apart)")
    record("twin_agreement", {"replications": REPLICATIONS, "levels": table,
                              "overlap": overlap, "total": total})  # fmt: skip
    # Two simulations of one model: a few of many intervals may miss each other by chance.
    assert overlap >= 0.9 * total, f"{overlap} of {total} intervals overlap"
