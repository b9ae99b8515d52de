"""Seed 004's SD evaluation protocol (§7.8) on random closed models with known demands.

A closed product-form model with a think time (known, like the thesis' YCSB station), two
processor-sharing stations and two classes of five users each (ten clients) has four unknown
demands, drawn uniformly in [1e-5, 0.1] as in the thesis. Its exact per-class marginals are
the "measured" distributions (the thesis' protocol), or ``samples`` states drawn from them (the
same with measurement noise). SD must find the demands back.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from tierscope.estimate import SD, Observations
from tierscope.qn.nc import class_marginals
from tierscope.qn.network import Network, rate_multipliers

POPULATION = np.array([5, 5])
THINK = np.array([0.1, 0.1])
STATIONS = ("node1", "node2")
CLASSES = ("local", "remote")


def network(D: np.ndarray) -> Network:
    K, C = D.shape
    return Network(
        station_names=STATIONS,
        class_names=CLASSES,
        is_delay=np.zeros(K, dtype=bool),
        servers=np.ones(K, dtype=np.int64),
        alpha=tuple(rate_multipliers(1, None) for _ in range(K)),
        discipline=("ps",) * K,
        visits=np.ones((C, K)),
        service=D.T.copy(),
        is_open=np.zeros(C, dtype=bool),
        population=POPULATION.astype(np.int64),
        arrival_rate=np.zeros(C),
        think_time=THINK,
    )


def observations(D: np.ndarray, *, samples: int | None, rng: np.random.Generator) -> Observations:
    """The model's marginals as weighted states (exact), or ``samples`` draws from them."""
    counts, marg, X = class_marginals(network(D))
    rows, weights = [], []
    per_station = []
    for st in STATIONS:
        p = marg[st]
        if samples is None:
            idx = np.flatnonzero(p > 1e-15)
            per_station.append((idx, p[idx]))
        else:
            draw = rng.choice(p.size, size=samples, p=p / p.sum())
            per_station.append((draw, None))
    if samples is None:
        # every pair of states with the product weight: each station's marginal is exact
        (i1, p1), (i2, p2) = per_station
        for a, pa in zip(i1, p1, strict=True):
            for b, pb in zip(i2, p2, strict=True):
                rows.append([counts[a], counts[b]])
                weights.append(pa * pb)
    else:
        (d1, _), (d2, _) = per_station
        rows = [[counts[a], counts[b]] for a, b in zip(d1, d2, strict=True)]
        weights = [1.0] * samples
    Q = np.array(rows, dtype=float)
    R = POPULATION / X - THINK
    pop = POPULATION[None, :].astype(float)
    return Observations(
        classes=CLASSES,
        stations=STATIONS,
        throughput=X[None, :],
        servers=np.ones(len(STATIONS)),
        response_time=R[None, :],
        population=pop,
        think_time=THINK,
        queue=Q,
        queue_weight=np.array(weights),
        queue_population=np.repeat(pop, len(Q), axis=0),
    )


def evaluate(
    n_models: int,
    *,
    k_states: list[int],
    searches: list[str],
    deltas: list[float | None],
    samples: int | None = None,
    starts: int = 8,
    seed: int = 1,
) -> list[dict[str, Any]]:
    """Mean % demand error and mean fit time for every (search, K, delta)."""
    rng = np.random.default_rng(seed)
    models = [rng.uniform(1e-5, 0.1, size=(2, 2)) for _ in range(n_models)]
    data = [observations(D, samples=samples, rng=rng) for D in models]
    out = []
    for search in searches:
        for k in k_states:
            for delta in deltas:
                errors, times = [], []
                for D, obs in zip(models, data, strict=True):
                    t = time.perf_counter()
                    est = SD(
                        k_states=k, search=search, delta=delta, starts=starts, n_boot=0, seed=seed
                    ).fit(obs)
                    times.append(time.perf_counter() - t)
                    errors.append(float(np.mean(np.abs(est.demands_ / D - 1)) * 100))
                out.append(
                    {
                        "search": search,
                        "k_states": k,
                        "delta": delta,
                        "mean_error_pct": float(np.mean(errors)),
                        "median_error_pct": float(np.median(errors)),
                        "mean_time_s": float(np.mean(times)),
                    }
                )
    return out
