"""``tierscope import locust``: Locust itself (the Python package) runs two load levels against
a loopback server that notes the time of every request it serves; the import must find both
levels, and each level's throughput must match what the server counted in the same window."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ingest._servers import counting_server
from tierscope import ingest
from tierscope.spec.runs import ImportSpec
from tierscope.store import read_run

pytestmark = [pytest.mark.timing, pytest.mark.timeout(180)]

SERVICE_S = 0.02
LOCUSTFILE = """
from locust import HttpUser, LoadTestShape, constant, task


class Shopper(HttpUser):
    wait_time = constant(0.1)

    @task
    def item(self):
        self.client.get("/item", name="item")


class TwoLevels(LoadTestShape):
    stages = ((12, 2), (26, 5))

    def tick(self):
        t = self.get_run_time()
        for end, users in self.stages:
            if t < end:
                return users, 50
        return None
"""


@pytest.fixture
def server() -> Iterator[tuple[str, list[float]]]:
    with counting_server(SERVICE_S) as (port, arrivals):
        yield f"http://127.0.0.1:{port}", arrivals


def test_a_real_locust_run_imports_with_its_levels_and_throughput(
    server: tuple[str, list[float]], tmp_path: Path
) -> None:
    url, arrivals = server
    (tmp_path / "locustfile.py").write_text(LOCUSTFILE)
    proc = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(tmp_path / "locustfile.py"), "--headless",
         "--host", url, "--csv", str(tmp_path / "shop"), "--only-summary", "--loglevel", "ERROR"],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
    )  # fmt: skip
    history = tmp_path / "shop_stats_history.csv"
    assert history.exists(), proc.stderr[-2000:]
    run_dir, notes = ingest.import_files("locust", tmp_path / "run", [history])
    run = read_run(run_dir)
    points = run.points
    assert points is not None, notes
    assert points["level"].to_list() == [2.0, 5.0]
    assert isinstance(run.spec, ImportSpec) and run.spec.time_origin is not None
    origin = dt.datetime.fromisoformat(run.spec.time_origin).timestamp()
    for p in points.iter_rows(named=True):
        a, b = origin + p["t_start"], origin + p["t_end"]
        served = sum(a <= t < b for t in arrivals) / (b - a)
        # Locust's totals are written once a second: a window's ends are whole seconds
        assert p["throughput"] == pytest.approx(served, rel=0.25), (p, served)
        assert SERVICE_S <= p["rt_mean"] < 1.0
        assert p["errors"] == 0
    low, high = points["throughput"].to_list()
    assert high > 1.5 * low  # 5 users against 2, with time to spare on this server
    metrics = run.metrics
    assert metrics is not None
    assert set(metrics["tier"]) == {"client"}
    assert {"throughput_s", "errors_s", "rt_mean", "rt_p95", "users"} <= set(metrics["metric"])
