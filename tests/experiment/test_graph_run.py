"""examples/graph.yaml run for real (issue 16's acceptance): the capped payment component is the
primary bottleneck with orders' pool as its push-back and the gateway not blamed; the stalls
injected in catalogue-db are found as millibottlenecks rooted there."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml

from tierscope.analysis import analyze
from tierscope.experiment import run_experiment
from tierscope.spec.analysis import AnalysisOptions
from tierscope.spec.experiment import parse_experiment
from tierscope.store import read_run

pytestmark = pytest.mark.timeout(900)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "graph.yaml"
OPTIONS = AnalysisOptions.parse({"window_s": 0.5})


def run(tmp_path: Path, **patch: Any) -> tuple[dict[str, Any], Path]:
    doc = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    doc.update(patch)
    out = tmp_path / "run"
    assert run_experiment(parse_experiment(doc), doc, out)["status"] == "complete"
    return analyze(read_run(out), OPTIONS), out


def test_capped_payment_is_the_bottleneck_and_orders_pushes_back(tmp_path: Path) -> None:
    doc, _ = run(
        tmp_path,
        sweep={"levels": [60], "repetitions": 1},
        phases={"ramp_up": 2, "steady": 10, "ramp_down": 0.5},
        faults=[],
    )
    (level,) = doc["bottlenecks"]
    assert level["primary"]["tier"] == "payment" and level["primary"]["resource"] == "cpu"
    roles = {(r["tier"], r["resource"]): r["role"] for r in level["resources"]}
    assert roles.get(("orders", "pool")) == "push-back", roles
    assert not any(t == "gateway" and role == "bottleneck" for (t, _), role in roles.items())


def test_stalls_in_catalogue_db_are_rooted_there(tmp_path: Path) -> None:
    doc, out = run(
        tmp_path,
        sweep={"levels": [20], "repetitions": 1},
        phases={"ramp_up": 1, "steady": 15, "ramp_down": 0.5},
        faults=[
            {"kind": "stall", "tier": "catalogue-db", "at": 2.03, "duration": 0.3,
             "every": 2.03, "until": 15}
        ],
    )  # fmt: skip
    stalls = read_run(out).events.filter(pl.col("kind") == "stall").sort("t_start")
    episodes = [e for e in doc["episodes"] if e["kind"] == "millibottleneck"]
    found = sum(
        any(abs(e["start"] - t0) <= 0.1 and e["root_tier"] == "catalogue-db" for e in episodes)
        for t0 in stalls["t_start"]
    )
    assert found >= 0.9 * stalls.height, (found, stalls.height, episodes)
