"""What-if predictions against the ground truth of the changed system."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.plan._synthetic import write_sweep
from tests.plan.conftest import CPU, mix_samples, true_demands
from tierscope.errors import InputError
from tierscope.plan import apply_changes, fit_model, parse_change, whatif
from tierscope.plan.calibrate import measured_levels
from tierscope.store import read_run


def test_parse_change() -> None:
    assert parse_change("db.servers=2") == ("db", "servers", "2")
    assert parse_change("think_time=1") == (None, "think_time", "1")
    for bad in ("db.servers", "db.color=red", "speed=2", "=3"):
        with pytest.raises(InputError):
            parse_change(bad)


def test_changes_apply_to_the_right_tier(sweep: Path) -> None:
    model, _, _ = fit_model(read_run(sweep))
    new = apply_changes(model, ["db.servers=2", "app.cpu=1.5", "web.demand=*2", "think_time=1"])
    assert new.tier("db").facts.replicas == 2
    assert new.tier("app").facts.cpu == 1.5 and new.tier("app").facts.processes == 2
    assert new.tier("web").demand == pytest.approx(2 * model.tier("web").demand)
    assert new.think_time == 1.0
    assert new.max_throughput > model.max_throughput
    for bad in (["cache.cpu=1"], ["db.servers=0"], ["db.cpu=-1"], ["db.cpu=abc"]):
        with pytest.raises(InputError):
            apply_changes(model, bad)


def test_doubling_the_database_quota_matches_the_changed_system(
    sweep: Path, tmp_path: Path
) -> None:
    """Prediction from the 0.2-core sweep vs a sweep of the system with 0.4 cores (truth)."""
    levels = [30, 80, 140]
    model, _, _ = fit_model(read_run(sweep))
    result = whatif(model, ["db.cpu=0.4"], levels, duration=200)
    truth_dir = tmp_path / "truth"
    write_sweep(
        truth_dir,
        levels=levels,
        cpu={**CPU, "db": 0.4},
        demands=true_demands(),
        samples=mix_samples(),
        steady=60.0,
        seed=21,
    )
    truth = measured_levels(read_run(truth_dir), "s0")
    doc = result.to_dict()
    assert doc["capacity"]["changed"] == pytest.approx(2 * doc["capacity"]["baseline"], rel=0.05)
    for row, real in zip(doc["levels"], truth.iter_rows(named=True), strict=True):
        assert row["changed"]["throughput"] == pytest.approx(real["throughput"], rel=0.06)
        assert row["changed"]["throughput"] >= row["baseline"]["throughput"] * 0.98
    # where the old system saturated, the new one is far from it
    assert doc["levels"][-1]["changed"]["rt_mean"] < 0.2 * doc["levels"][-1]["baseline"]["rt_mean"]


def test_writes_at_every_database_replica_are_found_and_predicted(tmp_path: Path) -> None:
    """Read-write mix on two database replicas: a write runs at both. Calibration must split the
    database demand into the single copy and the repeated writes, so that one or three
    replicas are predicted right (writes do not spread, reads do)."""
    rng = np.random.default_rng(9)
    n = 4000
    is_write = rng.random(n) < 0.25
    samples = np.column_stack(
        [np.full(n, 3e-4), np.full(n, 1.2e-3), np.where(is_write, 2.0e-3, 1.6e-3)]
    )
    wf = is_write.astype(float)
    common = dict(
        cpu={"web": 0.5, "app": 0.8, "db": 0.2},
        demands={"web": 3e-4, "app": 1.2e-3, "db": 1.7e-3},
        samples=samples,
        write_fraction=wf,
        steady=60.0,
    )
    run_dir = tmp_path / "two"
    write_sweep(run_dir, levels=[10, 40, 80, 120, 160], topology="1/1/2", seed=3, **common)
    model, _, _ = fit_model(read_run(run_dir))
    db = model.tier("db")
    assert db.write_demand == pytest.approx(0.25 * 2.0e-3, rel=0.1)
    assert db.demand == pytest.approx(samples[:, 2].mean(), rel=0.06)
    for replicas in (1, 3):
        truth_dir = tmp_path / f"truth{replicas}"
        write_sweep(truth_dir, levels=[200], topology=f"1/1/{replicas}", seed=5, **common)
        real = measured_levels(read_run(truth_dir), "s0").row(0, named=True)
        pred = whatif(model, [f"db.servers={replicas}"], [200], duration=200).predicted[0]
        assert pred.throughput == pytest.approx(real["throughput"], rel=0.06), replicas


def test_stalls_none_removes_the_runs_injected_stalls(sweep: Path) -> None:
    """The app tier frozen 0.3 s of every second: a request arriving in a stall waits 0.15 s
    on average, so the mean response time of a lightly loaded system rises by about
    0.3 x 0.15 = 45 ms; without the stalls it is back to the model's."""
    from dataclasses import replace

    from tierscope.domains.ntier import predict

    model, _, _ = fit_model(read_run(sweep))
    stalled = replace(model, stalls=(("app", None, 0.0, 0.3),), stall_cycle=1.0)
    fixed = apply_changes(stalled, ["stalls=none"])
    assert fixed.stalls == ()
    with_stalls, without, plain = (
        predict(m, [5], duration=300)[0] for m in (stalled, fixed, model)
    )
    assert without.rt_mean == pytest.approx(plain.rt_mean, rel=1e-9)
    assert with_stalls.rt_mean - plain.rt_mean == pytest.approx(0.045, rel=0.25)
    with pytest.raises(InputError):
        apply_changes(stalled, ["stalls=some"])


def test_the_host_can_be_made_quiet_or_bigger(sweep: Path) -> None:
    """``host.background`` and ``host.cores`` change the machine the model shares: a quiet host
    is the model without other processes, and with 1.5 tasks of them on 2 cores a 0.2-core
    database near its knee answers slower than on a quiet one (its tasks, the app's and the
    web's share the cores), but no slower than with 100 cores to spare."""
    from dataclasses import replace

    from tierscope.domains.ntier import HostModel

    assert parse_change("host.background=0") == ("host", "background", "0")
    model, _, _ = fit_model(read_run(sweep))
    assert model.host is None  # the synthetic sweep did not measure its host
    with pytest.raises(InputError, match=r"host\.cores"):
        apply_changes(model, ["host.background=1"])
    busy = replace(model, host=HostModel(2.0, background=1.5, client_demand=1e-4))
    quiet = apply_changes(busy, ["host.background=0"])
    assert quiet.host == HostModel(2.0, 0.0, 1e-4)
    assert apply_changes(busy, ["host.background=*2"]).host.background == 3.0  # type: ignore[union-attr]
    big = apply_changes(busy, ["host.cores=100"])
    assert big.host == HostModel(100.0, 1.5, 1e-4)
    assert apply_changes(busy, ["host.cores=none"]).host is None
    result = whatif(busy, ["host.background=0"], [45], duration=200)
    assert result.to_dict()["host"] == {
        "baseline": {"cores": 2.0, "background": 1.5},
        "changed": {"cores": 2.0, "background": 0.0},
    }
    r_busy, r_quiet = result.baseline[0].rt_mean, result.predicted[0].rt_mean
    r_big = whatif(busy, ["host.cores=100"], [45], duration=200).predicted[0].rt_mean
    assert r_busy > 1.1 * r_quiet
    assert r_quiet >= 0.97 * r_big
    for bad in ("host.speed=2", "host.cores=0", "host.background=-1", "host.cores=abc"):
        with pytest.raises(InputError):
            apply_changes(busy, [bad])
