"""Issue 7 acceptance on the real embedded system (cgroup quotas, the native load generator).

* A sweep of a system with a known bottleneck (the database tier capped at 0.2 core; then the
  application tier) is calibrated: the model's peak throughput must be within 10 % of the
  measured one and its mean response time at 70 % of the peak within 15 %.
* What-if: the database quota doubled is predicted from that model and run for real; the
  same two bounds must hold against the new measurements. The changed system is measured in the
  same experiment as the calibrated one, level by level in turn on one deployment
  (``sweep.interleave``): the model sees only the calibrated setup's data, and the drift of
  this shared host between runs minutes apart (15 % in light-load response time once) cannot
  pass for model error.
* Plan: the cheapest configurations for an SLO at two workload levels are deployed and run;
  the measured p95 must meet the SLO.

Each measured number is printed (``pytest -s``) and the acceptance bounds are asserted.
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.experiment._support import require
from tierscope.plan import calibrate, fit_model, parse_slo, plan, plan_document, whatif
from tierscope.plan.calibrate import accuracy_summary, comparison_row, measured_levels
from tierscope.spec.experiment import apply_override, parse_experiment, parse_override
from tierscope.spec.prices import parse_prices
from tierscope.store import read_run

pytestmark = [pytest.mark.real_system, pytest.mark.timeout(1800)]

#: Levels dense around the knee (about 30 users), so that 70 % of the peak falls between two.
LEVELS = [5, 12, 18, 24, 30, 38, 50, 70]
PHASES = {"ramp_up": 3, "steady": 14, "ramp_down": 0.5}


def base_spec(tiers: dict[str, Any], levels: list[int], repetitions: int = 1) -> dict[str, Any]:
    return {
        "name": "acceptance",
        "system": {"kind": "embedded", "topology": "1/1/1", "tiers": tiers},
        "workload": {
            "mode": "closed",
            "think_time": {"dist": "exp", "mean": 0.5},
            "mix": "browse-only",
        },
        "sweep": {"levels": levels, "repetitions": repetitions},
        "phases": PHASES,
        "monitor": {"interval": 0.05},
    }


#: The issue's target for the mean response time at 70 % of the peak. With the contention law
#: (docs/models-from-measurements.md) three runs of this test measured, db-capped / app-capped /
#: what-if: +3.2 / -4.8 / -0.3 %, +4.4 / -5.0 / -0.5 %, +5.0 / -8.9 / +7.5 %. Before it the
#: what-if missed once by +42 % (the database's mean demand 14 % high below the knee), and by
#: -18 % when it ran minutes after its base on a drifting host (hence the interleaved sweep).
#: On a noisier CI machine the what-if came out +19.8 % with two repetitions: the base's light
#: levels measured 7.6-8.9 ms and the what-if's, interleaved with them, 6.2-7.1 ms (on the same
#: machine when quiet, both quotas 5.7 ms at 5 and 10 users), so the model's outside delay, fitted
#: on the base, was 1 ms high for the what-if. Its levels now get three repetitions as well.
RT_BOUND = 0.15
#: Sweeps that are compared with a model are measured more than once and averaged per level:
#: one 14 s window near the knee is noisy (the db-capped sweep measured 6.5 to 9.8 ms at 30
#: users in four runs), and 70 % of the peak is read between two such levels. The calibrated
#: sweeps and the what-if run get three repetitions each.
CAL_REPS = 3
REPS = 3

DB_BOTTLENECK = {"web": {"cpu": 0.5}, "app": {"cpu": 0.8}, "db": {"cpu": 0.2}}
APP_BOTTLENECK = {"web": {"cpu": 0.5}, "app": {"cpu": 0.2, "cpu_cost": 0.0015}, "db": {"cpu": 0.8}}


def _prerequisites() -> None:
    try:
        import tierscope.load  # noqa: F401
    except ImportError:
        require("the load generator (tierscope.load)", "build tierscope with its native core")
    from tierscope.experiment.cgroups import CgroupUnavailableError, open_hierarchy

    try:
        open_hierarchy(f"tierscope-check-{uuid.uuid4().hex[:6]}").remove()
    except CgroupUnavailableError as exc:
        require("writable cgroups", f"run as root on Linux: {exc}")


def measure(out: Path, doc: dict[str, Any], overrides: list[str] = ()) -> Path:
    from tierscope.experiment import run_experiment

    doc = copy.deepcopy(doc)
    for text in overrides:
        apply_override(doc, *parse_override(text), source="test")
    summary = run_experiment(parse_experiment(doc), doc, out)
    assert summary["status"] == "complete"
    return out


def report(title: str, doc: dict[str, Any]) -> None:
    print(f"\n== {title}\n{json.dumps(doc, indent=1, default=float)}")


#: The what-if setup measured beside the db-capped one: the database's quota doubled. Its 70 %
#: point (about 50 users: 70 % of 140-149/s) is read between 50 and 60 users, not between 50
#: and 70, where the database is at 86 % of its quota and a few ms of error at 70 moved the
#: interpolated value by 40 % in one CI run.
WHATIF, WHATIF_LEVELS = "db-0.4", [10, 30, 50, 60, 70, 85, 100, 130]


@pytest.fixture(scope="module")
def db_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The db-capped sweep ("base") and the what-if setup, interleaved on one deployment."""
    _prerequisites()
    doc = base_spec(DB_BOTTLENECK, LEVELS, CAL_REPS)
    doc["sweep"]["interleave"] = True
    doc["sweep"]["setups"] = [
        {"name": "base", "set": {}},
        {
            "name": WHATIF,
            "set": {
                "system.tiers.db.cpu": 0.4,
                "sweep.levels": WHATIF_LEVELS,
                "sweep.repetitions": REPS,
            },
        },
    ]
    return measure(tmp_path_factory.mktemp("real") / "db", doc)


@pytest.mark.parametrize("bottleneck", ["db", "app"])
def test_calibrated_model_predicts_the_measured_sweep(
    bottleneck: str, db_run: Path, tmp_path: Path
) -> None:
    run_dir, setup = (
        (db_run, "base")
        if bottleneck == "db"
        else (measure(tmp_path / "app", base_spec(APP_BOTTLENECK, LEVELS, CAL_REPS)), "s0")
    )
    cal = calibrate(read_run(run_dir), setup=setup)
    report(f"calibration, {bottleneck} bottleneck", cal.summary | {"levels": cal.rows})
    assert cal.model.bottleneck() == bottleneck
    s = cal.summary
    assert abs(s["peak_throughput"]["error"]) < 0.10
    assert "rt_at_70pct_peak" in s
    assert abs(s["rt_at_70pct_peak"]["error"]) < RT_BOUND


def test_whatif_database_quota_doubled_agrees_with_the_changed_system(db_run: Path) -> None:
    run = read_run(db_run)
    model, _, _ = fit_model(run, setup="base")
    result = whatif(model, ["db.cpu=0.4"], WHATIF_LEVELS)
    real = measured_levels(run, WHATIF)
    rows = [
        comparison_row(r, p)
        for r, p in zip(real.iter_rows(named=True), result.predicted, strict=True)
    ]
    summary = accuracy_summary(rows, result.changed)
    report("what-if db.cpu=0.4 vs the real run", summary | {"levels": rows})
    assert result.changed.max_throughput > 1.8 * model.max_throughput
    assert abs(summary["peak_throughput"]["error"]) < 0.10
    assert abs(summary["rt_at_70pct_peak"]["error"]) < RT_BOUND


def test_planned_configurations_meet_the_slo_when_run(db_run: Path, tmp_path: Path) -> None:
    model, _, _ = fit_model(read_run(db_run), setup="base")
    slo = parse_slo("p95<0.05")
    prices = parse_prices({"search": {"replicas": [1, 2], "cpu": [0.1, 0.2, 0.3, 0.4, 0.6, 0.8]}})
    levels = [30, 70]
    plans = plan(model, levels, slo, prices)
    doc = plan_document(model, plans, slo, prices)
    measured = []
    for lv in doc["levels"]:
        best = lv["cheapest"]
        assert best is not None, lv
        spec = base_spec(DB_BOTTLENECK, [lv["users"]])
        out = measure(tmp_path / f"plan-{lv['users']}", spec, best["overrides"])
        row = measured_levels(read_run(out), "s0").row(0, named=True)
        measured.append(
            {
                "users": lv["users"],
                "config": best["overrides"],
                "cost_per_hour": best["cost_per_hour"],
                "predicted_p95": best["predicted"]["rt_p95"],
                "measured_p95": row["rt_p95"],
                "measured_throughput": row["throughput"],
            }
        )
    report("plan p95<0.05 run for real", {"levels": measured})
    for m in measured:
        assert m["measured_p95"] < 0.05, m
