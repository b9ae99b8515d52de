"""Calibration of a simulated sweep written in the measured format: the model must find the
demands, quotas and think time it was given, and predict the other levels."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from tests.plan._synthetic import write_sweep
from tests.plan.conftest import CPU, LEVELS, mix_samples, true_demands
from tierscope.domains.ntier import predict
from tierscope.plan import calibrate, model_vs_measurement
from tierscope.plan.calibrate import _interaction_demands, _validation_advice
from tierscope.qn import Network, solve
from tierscope.spec import parse_model
from tierscope.store import read_run


@pytest.fixture(scope="module")
def calibration(sweep: Path):
    return calibrate(read_run(sweep), duration=200)


def test_demands_quotas_and_think_time_are_found(calibration) -> None:
    truth = true_demands()
    for t in calibration.model.tiers:
        assert t.facts.cpu == CPU[t.name]
        assert t.demand == pytest.approx(truth[t.name], rel=0.05)
        assert t.background < 0.03 * CPU[t.name]  # the truth has none
    assert calibration.model.think_time == pytest.approx(0.5, rel=0.03)
    assert calibration.model.bottleneck() == "db"
    assert calibration.solver == "quota-sim"


def test_the_calibrated_model_predicts_the_sweep(calibration) -> None:
    s = calibration.summary
    assert abs(s["peak_throughput"]["error"]) < 0.05
    assert abs(s["rt_at_70pct_peak"]["error"]) < 0.15
    for row in calibration.rows:
        assert abs(row["error"]["throughput"]) < 0.06, row


def test_the_model_file_is_a_valid_product_form_model(calibration) -> None:
    doc = calibration.model_document()
    model = parse_model(doc)
    assert [s.name for s in model.stations][:3] == ["web", "app", "db"]
    assert model.classes[0].population == max(LEVELS)
    sol = solve(Network.from_model(model), "auto")
    # saturated product-form model: the db quota over its demand
    assert sol.throughput[0] == pytest.approx(calibration.model.max_throughput, rel=0.01)


def test_model_vs_measurement_columns(calibration) -> None:
    cols = model_vs_measurement(calibration)
    assert cols["level"] == [float(v) for v in LEVELS]
    assert all(len(v) == len(LEVELS) for v in cols.values())
    doc = calibration.to_dict()
    assert {"model", "levels", "summary", "estimates", "notes"} <= set(doc)


def test_injected_stalls_are_repeated_over_the_steady_window() -> None:
    """Stalls at 10, 15, 20, 25 s of each level (0.3 s) and a single one of replica 2 at
    4.9 s; the steady window is 5..25 s: the first three and the tail of the single one."""
    from tierscope.plan.calibrate import _stall_schedule
    from tierscope.spec.experiment import parse_experiment

    doc = {
        "name": "stalls",
        "system": {"kind": "embedded", "topology": "1/2/1"},
        "workload": {"mode": "closed", "think_time": {"dist": "exp", "mean": 0.5}},
        "sweep": {"levels": [10]},
        "phases": {"ramp_up": 5, "steady": 20, "ramp_down": 1},
        "faults": [
            {"kind": "stall", "tier": "db", "at": 10, "duration": 0.3, "every": 5},
            {"kind": "stall", "tier": "app", "replica": 2, "at": 4.9, "duration": 0.3},
            {"kind": "cpu_hog", "tier": "web", "at": 6, "duration": 1},
        ],
    }
    stalls, cycle = _stall_schedule(parse_experiment(doc))
    assert cycle == 20
    rounded = sorted((t, r, round(a, 9), round(b, 9)) for t, r, a, b in stalls)
    assert rounded == [
        ("app", 1, 0.0, 0.2),
        ("db", None, 5.0, 5.3),
        ("db", None, 10.0, 10.3),
        ("db", None, 15.0, 15.3),
    ]


def test_contention_injected_at_the_database_is_found(tmp_path: Path) -> None:
    """The simulated database burns 2 % more CPU per query for each other query present (the
    embedded database measured 2.2 %), without bound, so that its throughput falls beyond the
    knee: calibration finds the demand of a query alone and the law, and predicts the sweep."""
    truth = true_demands()
    write_sweep(
        tmp_path / "run",
        levels=[10, 30, 45, 55, 65, 80],
        cpu=CPU,
        demands=truth,
        samples=mix_samples(),
        steady=40.0,
        contention={"db": 0.02},
        seed=13,
    )
    cal = calibrate(read_run(tmp_path / "run"), duration=200)
    db = cal.model.tier("db")
    assert db.demand == pytest.approx(truth["db"], rel=0.06)
    assert db.contention == pytest.approx(0.02, rel=0.3)
    assert cal.model.tier("app").contention == 0.0  # the app never held two requests
    s = cal.summary
    assert abs(s["peak_throughput"]["error"]) < 0.05
    assert abs(s["rt_at_70pct_peak"]["error"]) < 0.15


def _levels(rt_ms: list[float], reps: int) -> pl.DataFrame:
    return pl.DataFrame(
        {"level": [10, 20, 40, 60, 80], "rt_mean": [v / 1e3 for v in rt_ms], "reps": [reps] * 5}
    )


def test_a_comparison_read_across_the_knee_gets_advice() -> None:
    # The worked example's sweep: 70 % of the peak between 40 and 60 users, 9 -> 25 ms, once.
    levels = _levels([5.3, 5.5, 9.2, 25.5, 262], reps=1)
    summary = {"rt_at_70pct_peak": {"between_levels": [40.0, 60.0]}}
    steep, once = _validation_advice(summary, levels)
    assert "between 40 and 60 users" in steep and "45, 50, 55" in steep
    assert "9.2 to 25.5 ms" in steep
    assert "measured once" in once
    # levels close enough to the knee, and repeated: nothing to add
    flat = _levels([5.3, 5.5, 6.0, 7.5, 262], reps=3)
    assert _validation_advice(summary, flat) == []
    assert "add lighter levels" in _validation_advice({}, flat)[0]


def test_a_planted_host_background_is_found_and_predicted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep is simulated on a 2-core host beside 1.5 tasks of other processes (and a load
    generator spending 0.1 ms per request), and its points record the host's busy cores as
    the simulation gave them. Calibration finds the background and the client's CPU, and its
    model predicts the sweep; without the host it predicts the knee 20-30 % too fast."""
    from tests.plan import _synthetic
    from tierscope.sim.twin import simulate_closed

    cores, background, client = 2.0, 1.5, 1e-4
    host_busy: list[float] = []

    def on_the_host(*args: object, **kw: object):
        out = simulate_closed(*args, host_cores=cores, host_background=background, **kw)  # type: ignore[arg-type]
        host_busy.append(out.host_busy)  # type: ignore[arg-type]
        return out

    monkeypatch.setattr(_synthetic, "simulate_closed", on_the_host)
    levels = [10, 30, 45, 55, 70]
    write_sweep(
        tmp_path / "run",
        levels=levels,
        cpu=CPU,
        demands=true_demands(),
        samples=mix_samples(),
        steady=60.0,
        seed=17,
    )
    run = read_run(tmp_path / "run")
    assert run.points is not None
    points = run.points.with_columns(
        (pl.col("throughput") * client).alias("client.cpu_cores"),
        (pl.Series(host_busy) + pl.col("throughput") * client).alias("host.cpu_cores"),
    )
    info = run.info | {"host": {"cores": 2, "usable_cores": 2}}
    run = replace(run, points=points, info=info)
    cal = calibrate(run, duration=200)
    host = cal.model.host
    assert host is not None and host.cores == 2.0
    # what the other processes got: all of their 1.5 cores while the tiers rest, 2 / (1.5 + n)
    # of a core each while n tasks of the tiers run — a little less than they wanted
    assert 0.85 * background < host.background < background
    assert host.client_demand == pytest.approx(client, rel=1e-6)
    note = f"host: 2 cores, {host.background:.2g} cores used by other processes"
    assert any(n.startswith(note) for n in cal.notes)
    s = cal.summary
    assert abs(s["peak_throughput"]["error"]) < 0.05
    assert abs(s["rt_at_70pct_peak"]["error"]) < 0.15
    # the same model on a host with cores to spare predicts the knee too fast
    quiet = predict(replace(cal.model, host=None), [55], solver="quota-sim", duration=200)[0]
    at55 = next(r for r in cal.rows if r["level"] == 55)
    assert quiet.rt_mean < 0.8 * at55["measured"]["rt_mean"]
    assert abs(at55["error"]["rt_mean"]) < 0.2


def test_on_a_call_graph_a_skipped_branch_keeps_its_zero_demand() -> None:
    # one interaction; requests 0 and 1 visit payment, 2 and 3 skip it (p < 1). Smoothed by
    # interaction alone every request would get half a payment visit; by interaction and path
    # the two that skipped keep none and the two that called it share their mean.
    rows = [("client", r) for r in "abcd"] + [("gateway", r) for r in "abcd"]
    rows += [("payment", "a"), ("payment", "b")]
    requests = pl.DataFrame(
        {"tier": [t for t, _ in rows], "request_id": [r for _, r in rows], "interaction": "visit"}
    )
    run = SimpleNamespace(requests=requests)
    samples = [[0.001, 0.005], [0.003, 0.003], [0.002, 0.0], [0.002, 0.0]]  # gateway, payment
    ids = pl.Series(list("abcd"))

    plain, _ = _interaction_demands(run, ids, np.array(samples))  # type: ignore[arg-type]
    assert plain[:, 1].tolist() == pytest.approx([0.002] * 4)
    by_path, used = _interaction_demands(run, ids, np.array(samples), paths=True)  # type: ignore[arg-type]
    assert used
    assert by_path[:, 1].tolist() == pytest.approx([0.004, 0.004, 0.0, 0.0])
    assert by_path[:, 0].tolist() == pytest.approx([0.002] * 4)
