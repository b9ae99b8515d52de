"""Dipietro's Cassandra model calibrated on a real ONE sweep, predicting the QUORUM sweep.

What is measured: a real cluster of 3 nodes (Cassandra 5.0.9, each capped at ``QUOTA`` core),
RF 3, YCSB workload C on 2,000 records, ONE and QUORUM interleaved level by level on one
deployment (``LEVELS`` closed users, ``STEADY`` s each, after the adaptive warm-up of each).
``tierscope calibrate`` calibrates the model on the ONE setup and predicts every QUORUM level;
the per-level errors of throughput and mean response time are printed and logged (issue 19's
acceptance: within 15 %; the thesis reached 6–10 % with demands measured per level). It needs
a quiet machine: a CPU hog beside it changes the nodes' throttling, not the model.

Results are appended to ``benchmarks/results/<date>-<hostname>.jsonl``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from tierscope.experiment import run_experiment
from tierscope.plan.cassandra import calibrate_cassandra
from tierscope.spec.experiment import parse_experiment
from tierscope.store import read_run

pytestmark = pytest.mark.timeout(3600)
Recorder = Callable[[str, Mapping[str, Any]], Path]

QUOTA = 0.3
LEVELS = [1, 2, 4, 8, 16]
STEADY = 30
TARGET = 0.15


def test_the_model_calibrated_on_one_predicts_quorum(tmp_path: Path, record: Recorder) -> None:
    pytest.importorskip("cassandra", reason="pip install 'tierscope[cassandra]'")
    from tierscope.experiment.artifacts import fetched

    if not fetched("cassandra"):
        pytest.skip("tierscope fetch cassandra (and jolokia) first")
    doc = {
        "name": "bench-cassandra-model",
        "system": {"kind": "cassandra", "nodes": 3, "components": {"node": {"cpu": QUOTA}},
                   "keyspace": {"replication": 3}},
        "workload": {"mode": "closed", "ycsb": {"workload": "c", "records": 2000},
                     "consistency": "one"},
        "sweep": {"levels": LEVELS, "interleave": True,
                  "setups": [{"name": "one", "set": {"workload.consistency": "one"}},
                             {"name": "quorum", "set": {"workload.consistency": "quorum"}}]},
        "phases": {"ramp_up": 2, "steady": STEADY, "ramp_down": 0},
    }  # fmt: skip
    out = tmp_path / "run"
    summary = run_experiment(parse_experiment(doc), doc, out)
    assert summary["status"] == "complete"
    cal = calibrate_cassandra(read_run(out), setup="one")
    print(f"\ncalibrated on ONE: {cal.measured}")
    print("setup   users   X meas   X model   error   R meas ms  R model ms  error")
    for r in cal.rows:
        print(
            f"{r['setup']:7} {r['level']:5d} {r['throughput']:8.0f} {r['throughput_model']:9.0f} "
            f"{r['throughput_error']:+7.1%} {r['rt_mean'] * 1e3:10.2f} {r['rt_model'] * 1e3:11.2f} "
            f"{r['rt_error']:+7.1%}"
        )
    quorum = [r for r in cal.rows if r["setup"] == "quorum"]
    x_err = [abs(r["throughput_error"]) for r in quorum]
    r_err = [abs(r["rt_error"]) for r in quorum]
    record(
        "cassandra_model_one_to_quorum",
        {
            "quota": QUOTA,
            "levels": LEVELS,
            "steady_s": STEADY,
            "calibration": cal.measured,
            "rows": cal.rows,
            "quorum_throughput_error_median": statistics.median(x_err),
            "quorum_rt_error_median": statistics.median(r_err),
        },
    )
    print(
        f"QUORUM predicted from ONE: throughput error median {statistics.median(x_err):.1%} "
        f"(max {max(x_err):.1%}), response time median {statistics.median(r_err):.1%} "
        f"(max {max(r_err):.1%}); target {TARGET:.0%}"
    )
    assert statistics.median(x_err) <= TARGET and statistics.median(r_err) <= TARGET
