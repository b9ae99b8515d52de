"""The simulator against closed forms, exact MVA and published fork-join results."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from tests.conftest import net_from
from tierscope.cli import main
from tierscope.qn import mva
from tierscope.sim import simulate
from tierscope.spec import parse_model


def _mg1(service: Any, *, discipline: str = "fcfs", lam: float = 0.5) -> dict[str, Any]:
    return {
        "stations": [{"name": "q", "discipline": discipline}],
        "classes": [
            {"name": "c", "arrival_rate": lam, "visits": {"q": 1}, "service": {"q": service}}
        ],
    }


def _within(value: float, half_width: float | None, truth: float, slack: float = 1.0) -> bool:
    """Truth inside the CI (widened by ``slack`` for tests that run a single seed)."""
    assert half_width is not None
    return abs(value - truth) <= slack * half_width


@pytest.mark.parametrize(
    ("service", "scv"),
    [
        ({"dist": "exp", "mean": 1.0}, 1.0),
        ({"dist": "det", "mean": 1.0}, 0.0),
        ({"dist": "erlang", "mean": 1.0, "k": 2}, 0.5),
        ({"dist": "hyperexp", "mean": 1.0, "scv": 4.0}, 4.0),
    ],
    ids=["M/M/1", "M/D/1", "M/E2/1", "M/H2/1"],
)
def test_mg1_matches_pollaczek_khinchine(service: dict[str, Any], scv: float) -> None:
    rho, S = 0.5, 1.0
    truth = S + rho * S * (1 + scv) / (2 * (1 - rho))
    doc = simulate(parse_model(_mg1(service)), seed=3, precision=0.01).to_dict()
    r = doc["classes"]["c"]["response_time"]
    assert _within(r, doc["ci"]["classes"]["c"]["response_time"], truth, slack=1.5), (r, truth)


@pytest.mark.parametrize(
    "service", [{"dist": "det", "mean": 1.0}, {"dist": "hyperexp", "mean": 1.0, "scv": 9.0}]
)
def test_mg1_ps_is_insensitive(service: dict[str, Any]) -> None:
    doc = simulate(parse_model(_mg1(service, discipline="ps")), seed=5, precision=0.01).to_dict()
    r = doc["classes"]["c"]["response_time"]
    assert _within(r, doc["ci"]["classes"]["c"]["response_time"], 2.0, slack=1.5), r


def test_closed_network_matches_exact_mva() -> None:
    doc = {
        "stations": [{"name": n} for n in ("s1", "s2", "s3", "s4")],
        "classes": [
            {
                "name": "jobs",
                "population": 6,
                "visits": {"s1": 1, "s2": 0.4, "s3": 0.2, "s4": 0.1},
                "service": {"s1": 0.02, "s2": 0.2, "s3": 0.4, "s4": 0.6},
            }
        ],
    }
    exact = mva.solve(net_from(doc))
    out = simulate(parse_model(doc), seed=11, precision=0.01).to_dict()
    x = out["classes"]["jobs"]["throughput"]
    assert _within(x, out["ci"]["classes"]["jobs"]["throughput"], exact.throughput[0], 1.5)
    for k, name in enumerate(("s1", "s2", "s3", "s4")):
        q = out["stations"][name]["queue_length"]
        assert q == pytest.approx(exact.queue_length[k], rel=0.05)


def _fork_join(lam: float, n: int, quorum: int | None) -> dict[str, Any]:
    branches = [f"b{i}" for i in range(n)]
    join: dict[str, Any] = {"name": "j", "type": "join"}
    if quorum is not None:
        join["quorum"] = quorum
    return {
        "stations": [
            {"name": "f", "type": "fork", "branches": branches},
            *({"name": b} for b in branches),
            join,
        ],
        "classes": [
            {
                "name": "c",
                "arrival_rate": lam,
                "entry": {"f": 1.0},
                "routing": {b: {"j": 1.0} for b in branches},
                "service": {b: 1.0 for b in branches},
            }
        ],
    }


def test_two_way_fork_join_nelson_tantawi() -> None:
    # (12 - rho)/8 / (mu - lambda) with rho = 0.5: 2.875, not the single branch's 2.0
    out = simulate(parse_model(_fork_join(0.5, 2, None)), seed=2, precision=0.01).to_dict()
    r = out["classes"]["c"]["response_time"]
    assert _within(r, out["ci"]["classes"]["c"]["response_time"], 2.875, slack=1.5), r


def test_quorum_join_at_low_load_is_an_order_statistic() -> None:
    out = simulate(parse_model(_fork_join(0.001, 3, 2)), seed=4, precision=0.02).to_dict()
    r = out["classes"]["c"]["response_time"]
    assert _within(r, out["ci"]["classes"]["c"]["response_time"], 1 / 3 + 1 / 2, 1.5), r


def test_same_seed_same_result_on_one_or_several_threads() -> None:
    model = parse_model(_mg1({"dist": "exp", "mean": 1.0}))
    a = simulate(model, seed=9, precision=0.05, replications=3).to_dict()
    b = simulate(model, seed=9, precision=0.05, replications=3).to_dict()
    c = simulate(model, seed=10, precision=0.05, replications=3).to_dict()
    for d in (a, b, c):
        for k in ("wall_s", "events_per_s"):
            d["stats"].pop(k)
    assert a == b
    assert a != c


def test_coverage_of_confidence_intervals() -> None:
    """Each mean is within its 99 % CI of the exact value in >= 95 of 100 seeded runs."""
    doc = {
        "stations": [{"name": "cpu"}, {"name": "disk"}],
        "classes": [
            {"name": "c", "population": 4, "think_time": 1.0, "demands": {"cpu": 0.2, "disk": 0.3}}
        ],
    }
    exact = mva.solve(net_from(doc)).to_dict()
    model = parse_model(doc)
    hits: dict[str, int] = {}
    for seed in range(100):
        out = simulate(model, seed=seed, precision=0.05).to_dict()
        checks = {
            "X": (
                out["classes"]["c"]["throughput"],
                out["ci"]["classes"]["c"]["throughput"],
                exact["classes"]["c"]["throughput"],
            ),
            "R": (
                out["classes"]["c"]["response_time"],
                out["ci"]["classes"]["c"]["response_time"],
                exact["classes"]["c"]["response_time"],
            ),
        }
        for st in ("cpu", "disk"):
            got, ci = (
                out["stations"][st]["per_class"]["c"],
                out["ci"]["stations"][st]["per_class"]["c"],
            )
            want = exact["stations"][st]["per_class"]["c"]
            for m in ("utilization", "queue_length"):
                checks[f"{st}.{m}"] = (got[m], ci[m], want[m])
        for key, (value, hw, truth) in checks.items():
            hits[key] = hits.get(key, 0) + int(_within(value, hw, truth))
    assert min(hits.values()) >= 95, hits


def test_bad_precision_exits_2(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(json.dumps(_mg1(1.0)))
    assert main(["model", "simulate", str(path), "--precision", "2"]) == 2
    assert "precision" in capsys.readouterr().err


def test_simulate_cli_json(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    path = tmp_path / "m.yaml"
    path.write_text(json.dumps(_mg1(1.0)))
    assert main(["model", "simulate", str(path), "--json", "--precision", "0.05"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["method"] == "simulation"
    assert set(doc["stats"]) >= {"events", "wall_s", "events_per_s"}
    assert np.isfinite(doc["classes"]["c"]["response_time"])
