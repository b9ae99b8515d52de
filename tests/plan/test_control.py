"""Elastic control on the twin: traces, the forecast, each controller, the evaluation's
accounting and the command line, against closed forms and planted workloads.

The system: web (no quota, 0.5 ms), app (0.4 core, 4 ms: 100 requests/s a replica), db (no
quota, 1 ms), users thinking 0.5 s. A replica of app is saturated near 50 users; the traces
swing between 20 and 140 users, so the load needs one to three app replicas.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from tierscope.cli import main
from tierscope.domains.ntier import NTierModel, TierFacts, TierModel
from tierscope.plan.control import (
    IAE,
    Bounds,
    ModelPolicy,
    Static,
    Threshold,
    cheapest,
    control_twin,
    model_meets,
)
from tierscope.plan.control.forecast import fourier_forecast
from tierscope.plan.sla import parse_slo
from tierscope.spec.trace import generate, load_trace

SLO = parse_slo("p95<0.1")
NAMES = ("web", "app", "db")
LOW = dict.fromkeys(NAMES, 1)
HIGH = {"web": 1, "app": 4, "db": 1}
BOUNDS = Bounds(LOW, HIGH)


def _model() -> NTierModel:
    def tier(name: str, cpu: float | None, demand: float) -> TierModel:
        return TierModel(TierFacts(name, 1, cpu, 1, quantum=0.005, tick=None), demand)

    tiers = (tier("web", None, 0.0005), tier("app", 0.4, 0.004), tier("db", None, 0.001))
    return NTierModel(tiers=tiers, think_time=0.5)


def _run(controller, trace, initial=None, most=HIGH):  # type: ignore[no-untyped-def]
    start = initial or dict(LOW)
    return control_twin(
        _model(), trace, controller, objectives=SLO, initial=start, most=most, interval=30,
        startup=30,
    )  # fmt: skip


def test_a_trace_file_and_what_it_refuses(tmp_path: Path) -> None:
    good = tmp_path / "t.csv"
    good.write_text("time,load\n0,10\n60,40\n120,\n")
    tr = load_trace(good)
    assert (tr.at(0), tr.at(59.9), tr.at(60), tr.end) == (10, 10, 40, 120)
    assert tr.mean() == pytest.approx(25.0) and tr.peak == 40
    for text, field in (
        ("time,users\n0,1\n", "header"),
        ("time,load\n5,1\n", "time"),
        ("time,load\n0,1\n0,2\n", "time (row 3)"),
        ("time,load\n0,-1\n", "load (row 2)"),
        ("time,load\n0,x\n", "load (row 2)"),
        ("time,load\n0,nan\n", "load (row 2)"),
    ):
        bad = tmp_path / "bad.csv"
        bad.write_text(text)
        with pytest.raises(ValueError, match=re.escape(f"'{field}'")):
            load_trace(bad)


def test_generators_have_the_shape_they_say() -> None:
    d = generate("diurnal:low=10,high=110,period=600,duration=1200,step=10")
    assert (d.loads.min(), d.loads.max(), d.end) == (10, 110, 1200)
    assert d.at(300) == pytest.approx(110) and d.at(600) == pytest.approx(10)
    s = generate("step:low=20,high=100,at=300,duration=600")
    assert (s.at(290), s.at(300)) == (20, 100)
    f = generate("flash:low=20,high=150,at=300,rise=30,hold=120,fall=240,duration=900")
    assert (f.at(290), f.at(340), f.at(440), f.at(890)) == (20, 150, 150, 20)
    assert f.at(570) == pytest.approx(20 + 130 * (1 - 120 / 240))
    with pytest.raises(ValueError, match="--trace spike"):
        generate("spike:height=3")
    with pytest.raises(ValueError, match="a CSV file or one of"):
        generate("wave")


def test_the_forecast_extrapolates_trend_and_season() -> None:
    t = np.arange(60.0)
    season = 50 + 40 * np.sin(2 * np.pi * t / 20)  # a period of 20 steps (600 s at 30 s)
    ahead = 50 + 40 * np.sin(2 * np.pi * (59 + 2) / 20)
    assert fourier_forecast(season, 30.0, 60.0) == pytest.approx(ahead, abs=1.0)
    trend = 10 + 2 * t
    assert fourier_forecast(trend, 30.0, 90.0) == pytest.approx(10 + 2 * 62, rel=1e-6)
    assert fourier_forecast(np.array([10.0, 20.0]), 30.0, 30.0) == pytest.approx(30.0)
    assert fourier_forecast(np.array([]), 30.0, 30.0) == 0.0


def test_statics_cost_their_size_and_the_one_for_the_mean_misses_the_slo() -> None:
    trace = generate("step:low=20,high=140,at=300,duration=600,step=30")
    meets = model_meets(_model(), SLO)
    peak = cheapest(BOUNDS, lambda c: meets(c, trace.peak))
    mean = cheapest(BOUNDS, lambda c: meets(c, trace.mean()))
    assert peak is not None and mean is not None and peak["app"] > mean["app"]
    big = _run(Static(peak), trace, initial=peak)
    small = _run(Static(mean), trace, initial=mean)
    # node-hours: replicas x duration, exactly
    assert big.node_hours == pytest.approx(sum(peak.values()) * 600 / 3600)
    assert small.node_hours == pytest.approx(sum(mean.values()) * 600 / 3600)
    assert big.reconfigurations == small.reconfigurations == 0
    assert big.sla_satisfaction > 0.98 and big.under_provisioned_s == 0
    assert small.sla_satisfaction < 0.8 and small.under_provisioned_s >= 240


def test_the_model_policy_scales_ahead_of_a_diurnal_load_for_less_than_the_peak() -> None:
    trace = generate("diurnal:low=20,high=140,period=600,duration=1200,step=30")
    meets = model_meets(_model(), SLO)
    peak = cheapest(BOUNDS, lambda c: meets(c, trace.peak))
    assert peak is not None
    out = _run(ModelPolicy(BOUNDS, meets), trace)
    static = sum(peak.values()) * 1200 / 3600
    assert out.sla_satisfaction >= 0.95
    assert out.node_hours < 0.9 * static
    apps = [row["config"]["app"] for row in out.intervals]
    assert min(apps) == 1 and max(apps) >= peak["app"] - 1


def test_the_threshold_controller_follows_a_spike_up_and_back_down() -> None:
    trace = generate("spike:low=20,high=140,at=300,width=300,duration=1200,step=30")
    out = _run(Threshold(BOUNDS, stabilization=120), trace)
    apps = {row["t"]: row["config"]["app"] for row in out.intervals}
    assert apps[270] == 1 and max(apps[t] for t in range(330, 600, 30)) >= 2
    assert apps[1170] == 1  # back down once the spike and the stabilization window are over
    assert out.reconfigurations >= 2


def test_iae_adds_a_replica_where_the_cpu_is_busiest_and_learns_configurations() -> None:
    trace = generate("step:low=20,high=140,at=300,duration=1500,step=30")
    room = dict.fromkeys(NAMES, 3)
    iae = IAE(Bounds(LOW, room))
    out = _run(iae, trace, most=room)
    configs = [tuple(row["config"].values()) for row in out.intervals]
    first = next(c for c in configs if c != (1, 1, 1))
    assert first == (1, 2, 1)  # the horizontal scale model picked app, the busiest, not web/db
    # The store holds per-second rows of the configurations it ran.
    stored = iae.ods.configurations()
    assert (1, 1, 1) in stored and any(c[1] >= 2 for c in stored)


def test_control_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.plan._synthetic import write_sweep

    run = tmp_path / "run"
    doc = write_sweep(run, levels=[5, 20, 40], cpu={"web": None, "app": 0.4, "db": None},
                      demands={"web": 5e-4, "app": 4e-3, "db": 1e-3}, steady=20.0)  # fmt: skip
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(doc))
    trace = tmp_path / "trace.csv"
    trace.write_text("time,load\n0,20\n120,90\n240,20\n360,\n")
    base = ["control", str(spec), "--twin", str(run)]
    assert main([*base, "--slo", "p95<0.1", "--policy", "threshold", "--trace", str(trace),
                 "--json"]) == 0  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert {"policy", "sla_satisfaction", "node_hours", "reconfigurations",
            "under_provisioned_s", "intervals"} <= set(out)  # fmt: skip
    assert {"t", "load", "config", "sla"} <= set(out["intervals"][0])
    assert out["intervals"][4]["load"] == 90 and len(out["intervals"]) == 12
    bad = tmp_path / "neg.csv"
    bad.write_text("time,load\n0,-5\n")
    for args, said in (
        (["--policy", "threshold", "--trace", str(bad)], "load (row 2)"),
        (["--policy", "hpa", "--trace", str(trace)], "--policy"),
        (["--policy", "iae", "--trace", str(trace), "--slo", "p95 under 1"], "--slo"),
    ):
        assert main([*base, *args]) == 2
        err = capsys.readouterr().err
        assert said in err and "Traceback" not in err


def test_the_operational_data_store_answers_the_theses_query() -> None:
    """Seed 001 eq. 24-25 with alpha = 0 (only shortfalls count), threshold 50, support >= 30,
    mean SLA >= 90 %, cheapest then most recent."""
    from tierscope.plan.control import OperationalDataStore

    ods = OperationalDataStore()
    rows = lambda x, n: np.full((n, 1), float(x))  # noqa: E731
    ods.append(rows(100, 40), (1, 1, 1), np.full(40, 0.95), t=10)
    ods.append(rows(150, 40), (1, 2, 1), np.full(40, 0.99), t=20)
    ods.append(rows(150, 10), (2, 1, 1), np.full(10, 1.0), t=30)  # too little support
    ods.append(rows(200, 40), (1, 1, 2), np.full(40, 0.85), t=40)  # SLA too low
    ask = dict(threshold=50.0, alpha=0.0, min_support=30, min_sla=0.9)
    assert ods.query(np.array([140.0]), **ask) == (1, 1, 1)  # 40 short: near; cheapest
    assert ods.query(np.array([160.0]), **ask) == (1, 2, 1)  # 60 short: (1, 1, 1) is not near
    assert ods.query(np.array([260.0]), **ask) is None
    # With alpha = 1 over-capacity counts too: 150 is 90 above 60, (1, 1, 1) is 40 above.
    assert ods.query(np.array([60.0]), **(ask | {"alpha": 1.0})) == (1, 1, 1)
    # Equal cost: the most recently used.
    ods.append(rows(100, 40), (1, 1, 1), np.full(40, 0.95), t=50)
    ods.append(rows(100, 40), (2, 0, 1), np.full(40, 0.95), t=60)
    assert ods.query(np.array([100.0]), **ask) == (2, 0, 1)
    assert len(ods) == 210
