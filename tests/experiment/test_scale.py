"""Scaling a component of the embedded call graph while the load runs (``Deployment.scale``):
a replica added mid-level starts in its own cgroup, its callers rebalance to it and the monitor
samples it; removed again, it drains (no request lost) and its processes and cgroup go; both
changes are events of the run."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tierscope.errors import InputError, TierscopeError
from tierscope.experiment import run_experiment
from tierscope.experiment.targets import Deployment, Node
from tierscope.spec.experiment import parse_experiment
from tierscope.store import read_run

#: worker has a tenth of a core and 4 ms of CPU a visit: 25 visits/s a replica, while 30
#: users thinking 0.2 s want far more; one more replica doubles what it can serve
SPEC: dict[str, Any] = {
    "name": "scaled",
    "system": {
        "kind": "embedded",
        "entry": "front",
        "components": {
            "front": {"cpu": 0.5, "calls": [{"to": "worker"}]},
            "worker": {"cpu": 0.1, "cpu_cost": 0.004},
        },
    },
    "workload": {"mode": "closed", "think_time": {"dist": "exp", "mean": 0.2}},
    "sweep": {"levels": [30]},
    "phases": {"ramp_up": 1, "steady": 15, "ramp_down": 0.5},
}
UP_AT, DOWN_AT = 5.0, 10.0  # seconds after the first tick


class Controller:
    """Adds a worker replica at UP_AT and removes it at DOWN_AT (what elastic control does)."""

    def __init__(self) -> None:
        self.t0: float | None = None
        self.done: list[tuple[float, Any]] = []
        self.refused: list[str] = []

    def __call__(self, dep: Deployment, tick: dict[str, Any]) -> None:
        now = time.monotonic()
        self.t0 = self.t0 if self.t0 is not None else now
        if not self.done and now - self.t0 >= UP_AT:
            self.done.append((now, dep.scale("worker", 2)))
            try:
                dep.scale("front", 2)  # the load generator drives the entry's replicas
            except InputError as exc:
                self.refused.append(str(exc))
        elif len(self.done) == 1 and now - self.t0 >= DOWN_AT:
            self.done.append((now, dep.scale("worker", 1)))


@pytest.fixture(scope="module")
def scaled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Controller, Path]:
    out = tmp_path_factory.mktemp("scale") / "run"
    control = Controller()
    summary = run_experiment(parse_experiment(SPEC), SPEC, out, control=control)
    assert summary["status"] == "complete"
    return control, out


@pytest.mark.timeout(600)
@pytest.mark.timing
def test_a_replica_added_and_removed_while_the_load_runs(
    scaled: tuple[Controller, Path],
) -> None:
    control, out = scaled
    (_, up), (_, down) = control.done
    assert [n.name for n in up.added] == ["worker-2"] and not up.removed
    assert [n.name for n in down.removed] == ["worker-2"] and not down.added
    assert control.refused and "behind the entry" in control.refused[0]
    run = read_run(out)
    assert run.events is not None and run.requests is not None and run.metrics is not None
    scale = run.events.filter(pl.col("kind") == "scale").sort("t_start")
    details = [json.loads(d) for d in scale["detail"]]
    assert [(d["replicas"], d["added"], d["removed"]) for d in details] == [
        (2, ["worker-2"], []), (1, [], ["worker-2"]),
    ]  # fmt: skip
    # asked for, then done: started and serving, or drained and stopped
    (up_asked, t_up), (down_asked, t_down) = scale.select("t_start", "t_end").rows()
    assert up_asked <= t_up < down_asked <= t_down

    # the new replica served visits only while it was there, and its callers used it
    visits = run.requests.filter(pl.col("tier") == "worker")
    second = visits.filter(pl.col("node") == "worker-2")
    assert second.height > 50, second.height
    assert second["start"].min() >= up_asked and second["end"].max() <= t_down
    # sampled by the monitor while it ran, from within a tick of its start
    sampled = run.metrics.filter(pl.col("node") == "worker-2", pl.col("metric") == "cpu_cores")
    assert t_up <= sampled["t"].min() <= t_up + 0.5
    assert down_asked - 0.5 <= sampled["t"].max() <= t_down
    assert sampled.height > 0.5 * (down_asked - t_up) / run.interval  # late ticks are skipped

    # no request lost: every one the load generator finished was answered, the ones in
    # flight at the scale-down included, and each visited a worker (up to the end of the
    # steady window: the tiers' records of the last fraction of a second of a level are
    # still in their 0.2 s write buffers when the level's records are collected)
    client = run.requests.filter(pl.col("tier") == "client")
    assert client.height > 200 and (client["status"] == "ok").all()
    steady_end = float(run.points["t_end"][0])  # type: ignore[index]
    done = client.filter(pl.col("end") <= steady_end)
    assert steady_end > t_down + 2 and set(done["request_id"]) <= set(visits["request_id"])
    around = client.filter(pl.col("start") < down_asked, pl.col("end") > down_asked)
    assert around.height > 0  # the scale-down happened under load

    # twice the replicas, about twice the throughput (each replica is capped at 0.1 core)
    def rate(a: float, b: float) -> float:
        return client.filter(pl.col("end").is_between(a, b)).height / (b - a)

    one = rate(t_up - 3.5, t_up)
    two = rate(t_up + 1.0, down_asked)
    assert two > 1.4 * one, (one, two)


@pytest.mark.timeout(600)
@pytest.mark.timing
def test_a_scaled_away_replica_leaves_nothing_behind(scaled: tuple[Controller, Path]) -> None:
    control, _ = scaled
    (_, down) = control.done[1]
    [node] = down.removed
    assert node.cgroup is not None and not any(p.exists() for p in node.cgroup.paths.values())
    for pgid in node.pgids:
        assert not Path(f"/proc/{pgid}").exists() or _zombie(pgid)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except OSError:
        return True


def test_scale_names_what_it_refuses() -> None:
    class Never:
        def add(self, component: str, count: int) -> list[Node]:
            raise AssertionError("not to be called")

        drain = stop = add  # type: ignore[assignment]

    nodes = [Node("front", "front-1", 1, None, None), Node("worker", "worker-1", 1, None, None)]
    dep = Deployment(nodes, ["http://127.0.0.1:1"], {}, lambda: None, scaler=Never())
    with pytest.raises(InputError, match=r"field 'component'.*front, worker"):
        dep.scale("nope", 2)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InputError, match="field 'replicas'"):
            dep.scale("worker", bad)  # type: ignore[arg-type]
    assert dep.scale("worker", 1).added == ()  # already so: nothing to do
    with pytest.raises(TierscopeError, match="cannot change its replicas"):
        Deployment(nodes, [], {}, lambda: None).scale("worker", 2)
