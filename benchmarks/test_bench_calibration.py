"""Accuracy of models calibrated on the real embedded system: the issue's targets on dense sweeps.

The db-capped sweep (with the what-if setup, the database's quota doubled, interleaved level by
level on the same deployment) and the app-capped sweep are measured with three repetitions of
14 s per level, dense around the knee; the calibrated model must come within 10 % of the
measured peak and 15 % of the mean response time at 70 % of the peak. Host noise decides these
figures as much as the model does (a quiet machine has given +3 % to +9 %, a CI run once -35 %
with one disturbed level), so this benchmark reports them and records them in
benchmarks/results/, and the suite (tests/plan/test_real_system.py) keeps only bounds that hold
on a busy machine. Anchor: the same model solved without the CPU quotas (product-form MVA),
which is what a queueing tool without a quota model would predict. Then the cheapest
configurations for p95 < 50 ms at 30 and 70 users are planned, deployed and measured.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from tests.plan._real import (
    APP_BOTTLENECK,
    DB_BOTTLENECK,
    base_spec,
    calibration_summary,
    measure,
    plans_run_for_real,
    prerequisites,
    whatif_summary,
    with_whatif,
)

Recorder = Callable[[str, Mapping[str, Any]], Path]
pytestmark = pytest.mark.timeout(3600)

LEVELS = [5, 12, 18, 24, 30, 38, 50, 70]
WHATIF_LEVELS = [10, 30, 50, 60, 70, 85, 100, 130]
REPS = 3
ROOT = Path(__file__).resolve().parents[1]
PEAK_TARGET, RT_TARGET = 0.10, 0.15


def _row(name: str, summary: dict[str, Any]) -> dict[str, Any]:
    r70 = summary.get("rt_at_70pct_peak") or {}
    return {
        "case": name,
        "peak_error": summary["peak_throughput"]["error"],
        "rt70_error": r70.get("error"),
        "rt70_measured_ms": None if not r70 else 1e3 * r70["measured"],
        "rt70_predicted_ms": None if not r70 else 1e3 * r70["predicted"],
    }


def _print(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'case':38} {'peak':>8} {'R70':>8} {'R70 measured/predicted [ms]':>28}")
    for r in rows:
        r70 = "—" if r["rt70_error"] is None else f"{100 * r['rt70_error']:+.1f} %"
        ms = (
            ""
            if r["rt70_measured_ms"] is None
            else f"{r['rt70_measured_ms']:.2f} / {r['rt70_predicted_ms']:.2f}"
        )
        print(f"{r['case']:38} {100 * r['peak_error']:+7.1f} % {r70:>8} {ms:>28}")
    met = [
        abs(r["peak_error"]) < PEAK_TARGET
        and r["rt70_error"] is not None
        and abs(r["rt70_error"]) < RT_TARGET
        for r in rows
        if "anchor" not in r["case"]
    ]
    print(f"targets (peak {PEAK_TARGET:.0%}, R70 {RT_TARGET:.0%}) met in {sum(met)} of {len(met)}")


def test_calibrated_models_against_the_targets(tmp_path: Path, record: Recorder) -> None:
    prerequisites()
    db = measure(
        tmp_path / "db", with_whatif(base_spec(DB_BOTTLENECK, LEVELS, REPS), WHATIF_LEVELS, REPS)
    )
    app = measure(tmp_path / "app", base_spec(APP_BOTTLENECK, LEVELS, REPS))
    rows = []
    for name, run_dir, setup in (("db-capped", db, "base"), ("app-capped", app, "s0")):
        _, summary = calibration_summary(run_dir, setup)
        rows.append(_row(name, summary))
        _, anchor = calibration_summary(run_dir, setup, solver="mva")
        rows.append(_row(f"{name}, no quota model (anchor)", anchor))
    _, _, summary = whatif_summary(db, WHATIF_LEVELS)
    rows.append(_row("what-if db.cpu=0.4", summary))
    _print(rows)
    plans = plans_run_for_real(db, tmp_path, [30, 70], "p95<0.05")
    for m in plans:
        ms = f"{1e3 * m['predicted_p95']:.1f} / {1e3 * m['measured_p95']:.1f} ms"
        print(f"plan for {m['users']} users, p95 < 50 ms: {' '.join(m['config'])}: {ms}")
    record(
        "calibration_accuracy",
        {"rows": rows, "plans": plans, "levels": LEVELS, "repetitions": REPS},
    )


#: the shop graph of examples/graph.yaml (payment at 0.1 core saturates near 31 requests/s,
#: about 17 users; its what-if, payment at 0.2 core, near 62/s and 34 users), dense around both
GRAPH_LEVELS = [3, 6, 9, 12, 15, 18, 22, 28]
GRAPH_WHATIF_LEVELS = [6, 12, 18, 24, 30, 36, 44, 56]


def test_calibrated_graph_model_against_the_targets(tmp_path: Path, record: Recorder) -> None:
    """The call-graph model (demands per request from visits, payment's quota) on dense,
    repeated sweeps: the peak within 10 % and the mean response time at 70 % of the peak within
    15 %, for the measured graph and for the what-if of payment's quota doubled (interleaved on
    one deployment). Anchor: the same model without the quota model (product-form MVA)."""
    import copy

    import yaml

    prerequisites()
    doc = copy.deepcopy(yaml.safe_load((ROOT / "examples" / "graph.yaml").read_text()))
    doc.update(
        sweep={"levels": GRAPH_LEVELS, "repetitions": REPS},
        phases={"ramp_up": 3, "steady": 14, "ramp_down": 0.5},
        faults=[],
    )
    doc = with_whatif(
        doc, GRAPH_WHATIF_LEVELS, REPS, ("system.components.payment.cpu", 0.2), "payment-0.2"
    )
    shop = measure(tmp_path / "shop", doc)
    rows = []
    _, summary = calibration_summary(shop, "base")
    rows.append(_row("shop graph, payment capped", summary))
    _, anchor = calibration_summary(shop, "base", solver="mva")
    rows.append(_row("shop graph, no quota model (anchor)", anchor))
    _, _, summary = whatif_summary(shop, GRAPH_WHATIF_LEVELS, "payment.cpu=0.2", "payment-0.2")
    rows.append(_row("what-if payment.cpu=0.2", summary))
    _print(rows)
    record(
        "graph_calibration_accuracy", {"rows": rows, "levels": GRAPH_LEVELS, "repetitions": REPS}
    )
