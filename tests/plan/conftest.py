"""A synthetic measured sweep shared by the calibration, what-if and planning tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.plan._synthetic import write_sweep

#: Per-request CPU seconds at web, app, db: a page mix like the embedded bulletin board's
#: (static files touch only the web tier; some pages make two database queries).
MIX = np.array(
    [
        [0.0003, 0.0, 0.0],
        [0.0003, 0.0013, 0.0014],
        [0.0003, 0.0013, 0.0028],
    ]
)
MIX_P = np.array([0.12, 0.58, 0.30])
CPU = {"web": 0.5, "app": 0.8, "db": 0.2}
LEVELS = [10, 30, 45, 55, 65, 80, 100]


def mix_samples(n: int = 4000, seed: int = 5) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return MIX[rng.choice(len(MIX), size=n, p=MIX_P)]


def true_demands() -> dict[str, float]:
    mean = MIX_P @ MIX
    return dict(zip(("web", "app", "db"), mean.tolist(), strict=True))


@pytest.fixture(scope="session")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sweep") / "run"
    write_sweep(
        out,
        levels=LEVELS,
        cpu=CPU,
        demands=true_demands(),
        samples=mix_samples(),
        steady=60.0,
        seed=11,
    )
    return out
