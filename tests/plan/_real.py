"""Sweeps of the real embedded system for the calibration tests and their benchmark.

The suite (tests/plan/test_real_system.py) runs short sweeps and holds the model to bounds that
hold on a busy machine; the benchmark (benchmarks/test_bench_calibration.py) runs the dense,
repeated sweeps and reports the errors against the issue's targets (10 % peak, 15 % mean
response time at 70 % of the peak) without failing.
"""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path
from typing import Any

from tests.experiment._support import require
from tierscope.plan import calibrate, fit_model, parse_slo, plan, plan_document, whatif
from tierscope.plan.calibrate import accuracy_summary, comparison_row, measured_levels
from tierscope.spec.experiment import apply_override, parse_experiment, parse_override
from tierscope.spec.prices import parse_prices
from tierscope.store import read_run

DB_BOTTLENECK = {"web": {"cpu": 0.5}, "app": {"cpu": 0.8}, "db": {"cpu": 0.2}}
APP_BOTTLENECK = {"web": {"cpu": 0.5}, "app": {"cpu": 0.2, "cpu_cost": 0.0015}, "db": {"cpu": 0.8}}
#: The what-if setup measured beside the db-capped one: the database's quota doubled.
WHATIF = "db-0.4"


def base_spec(
    tiers: dict[str, Any],
    levels: list[int],
    repetitions: int = 1,
    phases: dict[str, float] | None = None,
) -> dict[str, Any]:
    return {
        "name": "acceptance",
        "system": {"kind": "embedded", "topology": "1/1/1", "tiers": tiers},
        "workload": {
            "mode": "closed",
            "think_time": {"dist": "exp", "mean": 0.5},
            "mix": "browse-only",
        },
        "sweep": {"levels": levels, "repetitions": repetitions},
        "phases": phases or {"ramp_up": 3, "steady": 14, "ramp_down": 0.5},
        "monitor": {"interval": 0.05},
    }


def with_whatif(
    doc: dict[str, Any],
    levels: list[int],
    repetitions: int,
    change: tuple[str, Any] = ("system.tiers.db.cpu", 0.4),
    name: str = WHATIF,
) -> dict[str, Any]:
    """``doc`` (by default the db-capped sweep) with the what-if setup (``change``: field and
    value) interleaved level by level on one deployment: host drift between runs minutes apart
    cannot pass for model error."""
    doc = copy.deepcopy(doc)
    doc["sweep"]["interleave"] = True
    doc["sweep"]["setups"] = [
        {"name": "base", "set": {}},
        {
            "name": name,
            "set": {change[0]: change[1], "sweep.levels": levels, "sweep.repetitions": repetitions},
        },
    ]
    return doc


def prerequisites() -> None:
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


def calibration_summary(run_dir: Path, setup: str, **options: Any) -> tuple[Any, dict[str, Any]]:
    """The calibrated model of ``setup`` and its accuracy over the measured levels."""
    cal = calibrate(read_run(run_dir), setup=setup, **options)
    return cal, cal.summary | {"levels": cal.rows}


def whatif_summary(
    run_dir: Path, levels: list[int], change: str = "db.cpu=0.4", setup: str = WHATIF
) -> tuple[Any, Any, dict[str, Any]]:
    """The base model, the what-if prediction of ``change`` (default: the doubled database
    quota), and its accuracy against ``setup``, measured beside the base."""
    run = read_run(run_dir)
    model, _, _ = fit_model(run, setup="base")
    result = whatif(model, [change], levels)
    real = measured_levels(run, setup)
    rows = [
        comparison_row(r, p)
        for r, p in zip(real.iter_rows(named=True), result.predicted, strict=True)
    ]
    return model, result, accuracy_summary(rows, result.changed) | {"levels": rows}


def plans_run_for_real(
    run_dir: Path, out: Path, users: list[int], slo: str, phases: dict[str, float] | None = None
) -> list[dict[str, Any]]:
    """The cheapest configuration meeting ``slo`` at each number of users, planned from the
    base setup's model, deployed and measured: what was planned and what it did."""
    model, _, _ = fit_model(read_run(run_dir), setup="base")
    objectives = parse_slo(slo)
    prices = parse_prices({"search": {"replicas": [1, 2], "cpu": [0.1, 0.2, 0.3, 0.4, 0.6, 0.8]}})
    doc = plan_document(model, plan(model, users, objectives, prices), objectives, prices)
    measured = []
    for lv in doc["levels"]:
        best = lv["cheapest"]
        assert best is not None, lv
        spec = base_spec(DB_BOTTLENECK, [lv["users"]], phases=phases)
        run = measure(out / f"plan-{lv['users']}", spec, best["overrides"])
        row = measured_levels(read_run(run), "s0").row(0, named=True)
        measured.append(
            {
                "users": lv["users"],
                "config": best["overrides"],
                "predicted_p95": best["predicted"]["rt_p95"],
                "measured_p95": row["rt_p95"],
                "measured_throughput": row["throughput"],
            }
        )
    return measured
