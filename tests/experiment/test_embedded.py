"""The embedded bulletin board on its own: real pages from real data, request ids across tiers,
load balancing, write-all replication, and gauges that agree with the request records."""

from __future__ import annotations

import sqlite3
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tierscope.experiment.cgroups import Hierarchy
from tierscope.experiment.embedded._instrument import read_gauges
from tierscope.experiment.embedded.data import database_copy
from tierscope.experiment.monitor import Monitor, NodeProbe
from tierscope.experiment.processes import Supervisor
from tierscope.experiment.targets import Deployment
from tierscope.experiment.targets.embedded import start_embedded
from tierscope.spec.experiment import SystemSpec


@pytest.fixture
def deployment(tmp_path: Path, hierarchy: Hierarchy):
    system = SystemSpec(topology="1/2/2", tiers={"db": {"cpu_cost": 0.0005}})
    sup = Supervisor(tmp_path)
    sup.start_reaper()
    dep = start_embedded(system, tmp_path, sup, hierarchy)
    try:
        yield dep
    finally:
        dep.stop()
        for n in dep.nodes:
            assert n.cgroup is not None
            n.cgroup.destroy()
        hierarchy.nodes.clear()
        sup.close()


def get(dep: Deployment, path: str, rid: str | None = None, data: bytes | None = None) -> str:
    req = urllib.request.Request(dep.entry_urls[0] + path, data=data)
    if rid:
        req.add_header("X-Request-Id", rid)
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
        return resp.read().decode("utf-8", "replace")


def rows(dep: Deployment, tier: str) -> pl.DataFrame:
    time.sleep(0.5)  # > the logs' flush interval
    frames = [src() for n in dep.nodes if n.tier == tier for src in n.request_sources]
    return pl.concat(frames)


def test_pages_come_from_the_database(deployment: Deployment, tmp_path: Path) -> None:
    con = sqlite3.connect(database_copy(tmp_path / "truth.sqlite"))
    title = con.execute("SELECT title FROM stories WHERE id = 42").fetchone()[0]
    assert f"<title>{title}</title>" in get(deployment, "/story?id=42")
    for path in (
        "/",
        "/categories",
        "/category?id=3",
        "/comment?id=7",
        "/search?q=queue",
        "/user?id=5",
        "/static/logo.png",
    ):
        get(deployment, path)


def test_request_id_reaches_every_tier(deployment: Deployment) -> None:
    get(deployment, "/story?id=7", rid="req-123")
    for tier, n in (("web", 1), ("app", 1), ("db", 2)):  # view_story runs two queries
        got = rows(deployment, tier).filter(pl.col("request_id") == "req-123")
        assert got.height == n, tier
        assert (got["interaction"] == "view_story").all()


def test_web_balances_over_app_replicas(deployment: Deployment) -> None:
    for i in range(20):
        get(deployment, f"/story?id={i + 1}", rid=f"lb-{i}")
    time.sleep(0.5)
    per_node = [
        sum(src().height for src in n.request_sources) for n in deployment.nodes if n.tier == "app"
    ]
    assert len(per_node) == 2 and min(per_node) >= 5, per_node


def test_writes_go_to_every_db_replica(deployment: Deployment) -> None:
    get(deployment, "/comment", rid="w-1", data=b"story=3&author=2&subject=hello&body=x")
    time.sleep(0.5)
    for node in (n for n in deployment.nodes if n.tier == "db"):
        got = pl.concat([src() for src in node.request_sources]).filter(
            pl.col("request_id") == "w-1"
        )
        assert sorted(got["detail"].to_list()) == ["insert_comment", "rate_user"], node.name


def test_gauges_obey_littles_law_against_the_records(deployment: Deployment) -> None:
    """Mean number in the app tier from 20 ms gauge samples = the request records' area / time."""
    stop = threading.Event()

    def user(k: int) -> None:
        i = 0
        while not stop.is_set():
            get(deployment, f"/story?id={(k * 97 + i) % 6000 + 1}", rid=f"u{k}-{i}")
            i += 1

    app = [n for n in deployment.nodes if n.tier == "app"]
    probes = [NodeProbe(n.tier, n.name, n.cgroup, quota_cores=None, gauges=n.gauges) for n in app]
    t0 = time.monotonic()
    monitor = Monitor(0.02, t0, probes, host=False).start()
    threads = [threading.Thread(target=user, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    time.sleep(4.0)
    stop.set()
    for t in threads:
        t.join()
    time.sleep(0.3)
    monitor.stop()
    m = monitor.drain()
    a, b = 1.0, 3.5  # a window well inside the load
    q = m.filter(pl.col("metric") == "queue_length", pl.col("t").is_between(a, b))
    gauge_mean = q.group_by("t").agg(pl.col("value").sum())["value"].mean()
    rec = rows(deployment, "app").with_columns(pl.col("start") - t0, pl.col("end") - t0)
    overlap = (np.minimum(rec["end"].to_numpy(), b) - np.maximum(rec["start"].to_numpy(), a)).clip(
        0
    )
    record_mean = overlap.sum() / (b - a)
    assert record_mean > 0.5  # the test generated real concurrency
    assert gauge_mean == pytest.approx(record_mean, rel=0.15)
    for n in app:
        g = [read_gauges(p) for p in n.gauges]
        assert all(x is not None and x["arrivals"] == x["departures"] for x in g)
