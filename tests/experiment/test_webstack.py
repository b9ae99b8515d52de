"""The webstack target end to end: nginx -> app -> PostgreSQL from Debian packages."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from tests.experiment._support import require
from tierscope.experiment import run_experiment
from tierscope.experiment.targets.webstack import INSTALL_HINT, missing_parts
from tierscope.spec.experiment import parse_experiment
from tierscope.store import read_run

pytestmark = [pytest.mark.real_system, pytest.mark.timeout(600)]


def test_webstack_runs_end_to_end(tmp_path: Path) -> None:
    missing = missing_parts()
    if missing:
        require(", ".join(missing), INSTALL_HINT)
    doc = {
        "name": "webstack",
        "system": {
            "kind": "webstack",
            "topology": "1/2/1",
            "tiers": {"web": {"cpu": 0.5}, "app": {"cpu": 0.4}, "db": {"cpu": 0.3}},
        },
        "workload": {
            "mode": "closed",
            "think_time": {"dist": "exp", "mean": 0.3},
            "mix": "read-write",
        },
        "sweep": {"levels": [10, 30], "repetitions": 1},
        "phases": {"ramp_up": 1, "steady": 4, "ramp_down": 0.5},
        "faults": [{"kind": "stall", "tier": "db", "at": 2, "duration": 0.3}],
    }
    out = tmp_path / "run"
    summary = run_experiment(parse_experiment(doc), doc, out)
    assert summary["status"] == "complete"
    r = read_run(out)
    counts = dict(r.requests.group_by("tier").len().iter_rows())
    assert set(counts) == {"client", "web", "app", "db"}
    ok = r.requests.filter(pl.col("tier") == "client", pl.col("status") == "ok").height
    assert ok > 0.95 * counts["client"]
    # Every end-to-end request reached nginx, and page requests reached an app replica.
    client_ids = set(r.requests.filter(pl.col("tier") == "client")["request_id"])
    web_ids = set(r.requests.filter(pl.col("tier") == "web")["request_id"])
    assert len(client_ids & web_ids) > 0.95 * len(client_ids)
    nodes = set(r.requests.filter(pl.col("tier") == "app")["node"])
    assert nodes == {"app-1", "app-2"}
    metrics = set(r.metrics.filter(pl.col("tier") == "db")["metric"])
    assert {"cpu_util", "queue_length", "xact_commit_s"} <= metrics
    assert r.events.filter(pl.col("kind") == "stall", pl.col("tier") == "db").height == 2
    assert r.points["throughput"].to_list()[1] > r.points["throughput"].to_list()[0]
