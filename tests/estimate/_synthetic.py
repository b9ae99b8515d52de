"""Observations with known demands: exact formulas and simulator runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tierscope.estimate import Observations, observations_from_run
from tierscope.sim import record_simulation
from tierscope.spec.model import parse_model
from tierscope.store import read_run

D_TRUE = np.array([[0.010, 0.025]])  # one PS station, classes a and b


def two_class_ps_run(run_dir: Path, *, seed: int = 3, horizon: float = 600.0) -> Observations:
    """Two open classes at one PS station, utilisation 0.5 on average, the class mix changing
    every 100 s (load schedules), simulated with per-visit traces and read back as a run."""
    lam_a, lam_b = 20.0, 12.0  # 0.20 + 0.30 = 0.5
    times = [0, 100, 200, 300, 400, 500]
    mult_a = [1.5, 0.5, 1.2, 0.8, 1.4, 0.6]
    mult_b = [0.67, 1.33, 0.87, 1.13, 0.73, 1.27]  # keeps the utilisation near 0.5
    model = parse_model(
        {
            "stations": [{"name": "cpu", "discipline": "ps"}],
            "classes": [
                {"name": "a", "arrival_rate": lam_a, "demands": {"cpu": float(D_TRUE[0, 0])}},
                {"name": "b", "arrival_rate": lam_b, "demands": {"cpu": float(D_TRUE[0, 1])}},
            ],
            "simulation": {
                "schedules": [
                    {"class": "a", "times": times, "values": mult_a},
                    {"class": "b", "times": times, "values": mult_b},
                ]
            },
        }
    )
    record_simulation(model, run_dir, seed=seed, max_time=horizon, window=0.5)
    return observations_from_run(read_run(run_dir), window=10.0)


def exact_open_ps(D: np.ndarray, X: np.ndarray, servers: np.ndarray | None = None) -> Observations:
    """Noise-free windows: utilisations U = X D^T / m and open-PS response times."""
    K, C = D.shape
    m = np.ones(K) if servers is None else servers
    U = X @ D.T / m[None, :]
    R = (D[None, :, :] / (1 - U)[:, :, None]).sum(axis=1)
    return Observations(
        classes=tuple(f"c{c}" for c in range(C)),
        stations=tuple(f"s{k}" for k in range(K)),
        throughput=X,
        servers=m.astype(float),
        utilization=U,
        response_time=R,
    )
