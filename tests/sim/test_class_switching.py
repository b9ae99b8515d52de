"""Class switching in the model file, simulated against closed forms of its chains.

A class switch (a routing target written ``station:class``) keeps the network product form with
*chains* in place of classes: the chain of classes ``a`` and ``b`` below behaves, as a whole, like
one class whose demand at each station is the sum of its classes' demands. The truths are closed
forms of those chains (a machine-repairman model, a Jackson network), solved by hand here.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest

from tierscope.cli import main
from tierscope.qn.network import Network
from tierscope.sim import simulate
from tierscope.spec import parse_model

# Closed chain: 5 users think 1 s at a delay station, then use a PS cpu as class a (0.1 s);
# half of the time they use it once more as class b (0.3 s) before thinking again.
CLOSED: dict[str, Any] = {
    "stations": [{"name": "think", "type": "delay"}, {"name": "cpu", "discipline": "ps"}],
    "classes": [
        {
            "name": "a",
            "population": 5,
            "routing": {"think": {"cpu": 1.0}, "cpu": {"think": 0.5, "cpu:b": 0.5}},
            "service": {"think": 1.0, "cpu": 0.1},
        },
        {
            "name": "b",
            "population": 0,
            "routing": {"cpu": {"think:a": 1.0}},
            "service": {"cpu": 0.3},
        },
    ],
}

# Open chain: get requests (2/s) enter web (PS, 0.2 s); then db as get (p 0.5, 0.3 s), db as
# put (p 0.25, 0.5 s) or leave; a put goes back to web as a get w.p. 0.4, else leaves.
OPEN: dict[str, Any] = {
    "stations": [{"name": "web", "discipline": "ps"}, {"name": "db", "discipline": "ps"}],
    "classes": [
        {
            "name": "get",
            "arrival_rate": 2.0,
            "entry": {"web": 1.0},
            "routing": {"web": {"db": 0.5, "db:put": 0.25}},
            "service": {"web": 0.2, "db": 0.3},
        },
        {
            "name": "put",
            "arrival_rate": 0,
            "routing": {"db": {"web:get": 0.4}},
            "service": {"db": 0.5},
        },
    ],
}


def _repairman(N: int, Z: float, D: float) -> tuple[float, float]:
    """Throughput and mean number at the queue of N users, think Z, one exponential server D."""
    w = [math.factorial(N) / math.factorial(N - n) * (D / Z) ** n for n in range(N + 1)]
    p = np.array(w) / sum(w)
    return (1 - p[0]) / D, float(np.arange(N + 1) @ p)


def _jackson() -> dict[str, float]:
    """Visit rates of the open chain (traffic equations by hand) and its PS queue lengths."""
    lam_get_web = 2.0 / (1 - 0.25 * 0.4)  # = 2 + 0.4 * (0.25 * lam_get_web)
    lam = {"get.web": lam_get_web, "get.db": 0.5 * lam_get_web, "put.db": 0.25 * lam_get_web}
    rho = {"get.web": 0.2 * lam["get.web"], "get.db": 0.3 * lam["get.db"]}
    rho["put.db"] = 0.5 * lam["put.db"]
    rho_db = rho["get.db"] + rho["put.db"]
    q_web = rho["get.web"] / (1 - rho["get.web"])
    q_db = rho_db / (1 - rho_db)
    return {
        **{f"T.{k}": v for k, v in lam.items()},
        "Q.get.web": q_web,
        "Q.get.db": q_db * rho["get.db"] / rho_db,
        "Q.put.db": q_db * rho["put.db"] / rho_db,
        "R.get": (q_web + q_db) / 2.0,  # Little over the whole chain, all jobs began as get
    }


def _near(got: float, half_width: float | None, truth: float, rel: float) -> bool:
    """Within 2 CI half-widths (one seed) or ``rel`` of the truth."""
    assert half_width is not None
    return abs(got - truth) <= max(2 * half_width, rel * truth)


def test_chain_visits_solve_the_traffic_equations() -> None:
    closed = Network.from_model(parse_model(CLOSED))
    np.testing.assert_allclose(closed.visits, [[1.0, 1.0], [0.0, 0.5]], atol=1e-12)
    open_ = Network.from_model(parse_model(OPEN))
    t = _jackson()
    np.testing.assert_allclose(
        open_.visits * 2.0,
        [[t["T.get.web"], t["T.get.db"]], [0.0, t["T.put.db"]]],
        rtol=1e-12,
    )


def test_closed_chain_matches_the_machine_repairman() -> None:
    X, Q = _repairman(5, 1.0, 0.1 + 0.5 * 0.3)
    out = simulate(parse_model(CLOSED), seed=2, precision=0.01).to_dict()
    ci = out["ci"]
    a = out["classes"]["a"]
    assert _near(a["throughput"], ci["classes"]["a"]["throughput"], X, 0.01)
    assert _near(a["response_time"], ci["classes"]["a"]["response_time"], 5 / X, 0.01)
    assert out["classes"]["b"]["throughput"] == 0.0  # no request begins as b
    cpu, cpu_ci = out["stations"]["cpu"]["per_class"], ci["stations"]["cpu"]["per_class"]
    # Per-class shares at a PS station are the classes' shares of the chain's demand there.
    for cls, demand, visits in (("a", 0.1, 1.0), ("b", 0.15, 0.5)):
        got, hw = cpu[cls], cpu_ci[cls]
        assert _near(got["throughput"], hw["throughput"], X * visits, 0.02)
        assert _near(got["utilization"], hw["utilization"], X * demand, 0.02)
        assert _near(got["queue_length"], hw["queue_length"], Q * demand / 0.25, 0.03)
        # Little per class and station, with the measured (not X_c V_ck) throughput.
        assert got["queue_length"] == pytest.approx(got["throughput"] * got["response_time"])


def test_open_chain_matches_the_jackson_network() -> None:
    t = _jackson()
    out = simulate(parse_model(OPEN), seed=3, precision=0.01).to_dict()
    ci = out["ci"]
    get = out["classes"]["get"]
    assert _near(get["throughput"], ci["classes"]["get"]["throughput"], 2.0, 0.01)
    assert _near(get["response_time"], ci["classes"]["get"]["response_time"], t["R.get"], 0.02)
    for key in ("get.web", "get.db", "put.db"):
        cls, st = key.split(".")
        got, hw = out["stations"][st]["per_class"][cls], ci["stations"][st]["per_class"][cls]
        assert _near(got["throughput"], hw["throughput"], t[f"T.{key}"], 0.02), key
        assert _near(got["queue_length"], hw["queue_length"], t[f"Q.{key}"], 0.04), key


def test_analytic_methods_refuse_class_switching(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    path = tmp_path / "switch.json"
    path.write_text(json.dumps(CLOSED))
    assert main(["model", "solve", str(path)]) == 2
    err = capsys.readouterr().err
    assert "class switching ('a' to 'b', 'b' to 'a')" in " ".join(err.split())
    assert "simulator" in err
