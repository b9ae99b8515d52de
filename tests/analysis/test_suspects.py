"""Suspects (issue 17): for incident data, components ranked by how strongly and how early their
resources depart from normal. Checked on data nobody here made (the ten Sock Shop fault cases
and their answers) and on planted departures with a call graph."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from tierscope.analysis import analyze
from tierscope.cli import main
from tierscope.ingest import import_metrics
from tierscope.spec.graph import Graph
from tierscope.store import Run, read_run

SOCKSHOP = Path(__file__).resolve().parents[2].parent / "shared" / "validation" / "sockshop"
RESOURCE = {"cpu": "cpu", "mem": "memory"}


@pytest.mark.parametrize(
    ("case", "component", "fault"),
    pl.read_csv(SOCKSHOP / "answers.csv").rows(),
    ids=lambda v: str(v),
)
def test_sock_shop_suspects_name_the_stressed_service_and_resource(
    tmp_path: Path, case: str, component: str, fault: str
) -> None:
    where = SOCKSHOP / "cases" / case
    out, _ = import_metrics(tmp_path / case, [where / "anomalous.csv"],
                            baseline=[where / "normal.csv"])  # fmt: skip
    doc = analyze(read_run(out))
    first = doc["suspects"][0]
    assert (first["tier"], first["resource"]) == (component, RESOURCE[fault]), doc["suspects"][:3]
    assert first["score"] > 2 * doc["suspects"][1]["score"]  # not a close call
    assert any("suspects ranked with normal behaviour from the 'baseline'" in n
               for n in doc["notes"])  # fmt: skip


def _series(tier: str, metric: str, values: np.ndarray, t0: float = 0.0) -> pl.DataFrame:
    n = values.size
    return pl.DataFrame(
        {"t": t0 + np.arange(n, dtype=float), "setup": "s0", "level": None, "rep": 0,
         "tier": tier, "node": tier, "metric": metric, "value": values},
        schema_overrides={"level": pl.Float64},
    )  # fmt: skip


def _run(frames: list[pl.DataFrame], graph: Graph | None) -> Run:
    info = {"kind": "import", "spec": {"name": "planted"},
            "components": None if graph is None else graph.to_json()}  # fmt: skip
    return Run(Path("planted"), info, pl.concat(frames), None, None, None)


def test_a_callee_that_departs_first_explains_its_caller() -> None:
    """back's CPU saturates at 200 s; front, which calls it, queues from 205 s and departs
    further (in its own normal spreads). With the call graph, back is the cause and front is
    explained by it; without one, the larger departure leads."""
    rng = np.random.default_rng(7)
    t = np.arange(300)
    back = np.where(t >= 200, 0.98, 0.40) + rng.normal(0, 0.01, t.size)
    queue = np.where(t >= 205, 40.0, 2.0) + rng.normal(0, 0.5, t.size)
    steady = 0.3 + rng.normal(0, 0.01, t.size)
    frames = [_series("back", "cpu_util", back), _series("front", "queue_length", queue),
              _series("front", "cpu_util", steady)]  # fmt: skip
    graph = Graph.chain(["front", "back"])
    with_graph = analyze(_run(frames, graph))["suspects"]
    assert [s["tier"] for s in with_graph] == ["back", "front"]
    assert with_graph[0]["resource"] == "cpu" and with_graph[0]["onset"] == pytest.approx(
        200 - 60, abs=1
    )  # seconds into the data after the first 20 % taken as normal
    assert "explained by back" in with_graph[1]["evidence"]
    without = analyze(_run(frames, None))["suspects"]
    assert without[0]["tier"] == "front" and without[0]["resource"] == "queue"
    assert "explained" not in without[0]["evidence"]


def test_nothing_departs_nothing_is_blamed_and_the_cli_prints_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(3)
    quiet = [_series(c, "cpu_cores", 0.2 + rng.normal(0, 0.01, 200)) for c in ("a", "b")]
    doc = analyze(_run(quiet, None))
    assert all("no departure" in s["evidence"] for s in doc["suspects"])
    frame = pl.concat(quiet).select(pl.col("t").alias("time"), "tier", "metric", "value")
    frame.write_csv(tmp_path / "m.csv")
    assert main(["import", "metrics", str(tmp_path / "m.csv"), "--out", str(tmp_path / "r")]) == 0
    capsys.readouterr()
    assert main(["analyze", str(tmp_path / "r"), "--json", "--no-write"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {s["tier"] for s in out["suspects"]} == {"a", "b"}
    assert any("first 20% of the data" in n for n in out["notes"])
    assert main(["report", str(tmp_path / "r")]) == 0
    page = (tmp_path / "r" / "report.html").read_text()
    assert page.index("<h2>Suspects") < page.index("<h2>Throughput")  # the first section
