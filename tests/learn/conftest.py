"""Fixtures of the learning tests: a corpus of the queueing twin (planted limiting tiers) and a
synthetic observation table with planted labels."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tierscope.learn.corpus import build_corpus
from tierscope.spec.learn import CorpusSpec

TWIN_SPEC: dict[str, Any] = {
    "name": "twin",
    "seed": 7,
    "experiment": {
        "system": {"kind": "embedded", "topology": "1/1/1"},
        "workload": {"mode": "closed", "think_time": {"dist": "exp", "mean": 0.3}},
        "sweep": {"levels": [5, 10, 20, 35, 55, 80], "repetitions": 1},
        "phases": {"ramp_up": 1.0, "steady": 4.0, "ramp_down": 0.0},
    },
    "vary": {"capped_cpu": [0.12, 0.25], "capped_cost": [0.0015, 0.003]},
}


@pytest.fixture(scope="session")
def twin_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("learn") / "twin"
    build_corpus(CorpusSpec.model_validate(TWIN_SPEC), 12, out, twin=True)
    return out


def planted_tiers(corpus: Path) -> dict[str, str]:
    manifest = json.loads((corpus / "corpus.json").read_text())
    return {s["name"]: s["planted_tier"] for s in manifest["setups"]}


def planted_table(setups: int = 8, seed: int = 3, noise: float = 0.02) -> pl.DataFrame:
    """Observations of closed systems with a planted capacity and limiting tier.

    Setup i: capacity C (req/s), limiting tier ``tiers[i % 3]`` with demand 1/C, the others a
    third of it; at N users (think time Z = 0.3 s) throughput is min(N / Z', C) with Z' = Z +
    1/C; utilisation U_t = X D_t. The label follows the saturation rule on the noise-free curve
    (peak C, M = 7 %), computed here independently of tierscope.
    """
    rng = np.random.default_rng(seed)
    tiers = ("web", "app", "db")
    levels = [5, 10, 20, 35, 55, 80]
    rows = []
    for i in range(setups):
        cap = rng.uniform(40, 140)
        limiting = tiers[i % 3]
        demand = {t: (1 / cap if t == limiting else 0.33 / cap) for t in tiers}
        curve = [min(n / (0.3 + 1 / cap), cap) for n in levels]
        peak = max(curve)
        th95, th_lim = 0.95 * peak, 0.95 * peak * 0.93
        for n, x in zip(levels, curve, strict=True):
            label = "server" if x >= th95 else "gray" if x >= th_lim else "client"
            for w in range(4):
                xo = x * (1 + noise * rng.standard_normal())
                row = {
                    "setup": f"p{i}",
                    "level": float(n),
                    "rep": 0,
                    "window": w,
                    "throughput": xo,
                    "label": label,
                    "tier": limiting,
                }
                for t in tiers:
                    u = min(1.0, xo * demand[t])
                    row[f"{t}.cpu_util"] = u + noise * rng.standard_normal()
                    row[f"{t}.queue_length"] = u / max(1e-3, 1 - min(u, 0.97))
                rows.append(row)
    return pl.DataFrame(rows)
