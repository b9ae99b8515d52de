"""Dipietro's Cassandra model calibrated from a run (``tierscope calibrate`` and ``whatif`` on a
cassandra run): the event costs the thesis's demands imply, the snitch's share carried from one
consistency level to another, and the calibration recovering injected truth — a run whose
points the model itself made, ONE calibrating and QUORUM predicted."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tierscope.cli import main
from tierscope.domains.cassandra import CassandraCluster, ReadCosts, cpu_per_request
from tierscope.errors import InputError
from tierscope.plan.cassandra import calibrate_cassandra, local_first, parse_changes
from tierscope.sim.runner import simulate
from tierscope.store import read_run

from ._cassandra_sweep import write_cassandra_points

COSTS = ReadCosts.thesis().scaled(0.4)
TRUTH = {"quota": 0.5, "local_first": 0.6, "client_cpu": 3e-4, "client_delay": 4e-4}


def test_the_thesis_one_demands_split_into_events_give_its_quorum_demands() -> None:
    """Table 3.2's ONE classes split with both sides of a replica request alike predict the
    CPU per read of its QUORUM classes (RF 3 on 4 nodes) within 7 %."""
    costs = ReadCosts.thesis()
    one = CassandraCluster.thesis("one", clients=1)
    quorum = CassandraCluster.thesis("quorum", clients=1)
    assert cpu_per_request(replace(one, cpu=costs.cpu(1))) == pytest.approx(
        cpu_per_request(one), rel=1e-9
    )
    predicted = cpu_per_request(replace(quorum, cpu=costs.cpu(2)))
    assert predicted == pytest.approx(cpu_per_request(quorum), rel=0.07)


@pytest.mark.parametrize("cl", ["one", "quorum"])
def test_the_snitch_share_routes_reads_to_other_nodes(cl: str) -> None:
    """A coordinator holding a replica reads its own with the chance local_kept (its own first
    with local_first, the others alike); the simulated forks and replica requests agree, and
    local_first comes back from the answers per read."""
    c = CassandraCluster(3, 3, cl, 6, COSTS.cpu(1 if cl == "one" else 2), 1e-9, 1e-9, 1e-9,
                         3e-4, cores=1, client_cores=1, local_first=0.6)  # fmt: skip
    kept = {"one": 0.6, "quorum": 0.6 + 0.4 / 2}[cl]
    assert c.local_kept == pytest.approx(kept)
    out = simulate(c.model(), seed=4, precision=0.02).to_dict()
    st, x = out["stations"], out["classes"]["client"]["throughput"]
    remote = sum(v["throughput"] for n, v in st.items() if n.endswith("-remote"))
    answers = sum(v["throughput"] for n, v in st.items() if n.startswith("route-"))
    assert remote / x == pytest.approx(1 - kept, abs=0.02)
    w = c.waited
    assert answers / x == pytest.approx(w - kept, abs=0.03)
    assert local_first(answers / x, w, 3, 1.0) == pytest.approx(0.6, abs=0.06)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("cassandra-model") / "run"
    truth = write_cassandra_points(
        out, costs=COSTS, setups={"one": "one", "quorum": "quorum"}, levels=[1, 4, 12],
        quota=TRUTH["quota"], local_first=TRUTH["local_first"],
        client_cpu=TRUTH["client_cpu"], client_delay=TRUTH["client_delay"],
    )  # fmt: skip
    return out, truth


def test_calibrated_on_one_the_model_predicts_quorum(run_dir: tuple[Path, dict]) -> None:
    path, truth = run_dir
    cal = calibrate_cassandra(read_run(path), setup="one", precision=0.02)
    assert cal.costs.coordinate == pytest.approx(COSTS.coordinate, rel=0.03)
    assert cal.cluster.local_first == pytest.approx(TRUTH["local_first"], abs=0.05)
    assert cal.cluster.client_delay == pytest.approx(TRUTH["client_delay"], rel=0.1)
    assert cal.node.speed(1.0) == pytest.approx(TRUTH["quota"])
    rows = {(r["setup"], r["level"]): r for r in cal.rows}
    assert set(rows) == set(truth)
    for key, x in truth.items():
        assert rows[key]["throughput_model"] == pytest.approx(x, rel=0.05), key
    assert {r["role"] for r in cal.rows if r["setup"] == "quorum"} == {"prediction"}


def test_calibrate_and_whatif_from_the_command_line(
    run_dir: tuple[Path, dict], capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    path, _ = run_dir
    assert main(["calibrate", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["kind"] == "cassandra" and (path / "model.yaml").is_file()
    assert doc["summary"]["setups"]["quorum"]["role"] == "prediction"
    assert main(["whatif", str(path), "--set", "consistency=all", "--levels", "12", "--json"]) == 0
    what = json.loads(capsys.readouterr().out)
    row = what["levels"][0]
    assert row["changed"]["throughput"] < row["baseline"]["throughput"]  # ALL reads all three
    assert what["capacity"]["changed"] < what["capacity"]["baseline"]


@pytest.mark.parametrize(
    ("change", "field"),
    [("consistency=two", "--set"), ("nodes=0", "--set"), ("node.cpu=-1", "--set"),
     ("colour=red", "--set")],
)  # fmt: skip
def test_a_bad_change_is_refused_naming_it(change: str, field: str) -> None:
    with pytest.raises(InputError) as err:
        parse_changes([change])
    assert err.value.field == field and change in str(err.value)


def test_levels_without_reads_or_latency_are_no_traceback(
    run_dir: tuple[Path, dict], tmp_path: Path
) -> None:
    """A level that served nothing is left out of the CPU per read; a lightest level without
    Cassandra's coordinator latency gives no outside delay and says so; a run without the
    nodes' counters is refused naming the column."""
    import polars as pl

    from tierscope.store import RunWriter

    path, _ = run_dir
    run = read_run(path)
    assert run.points is not None
    points = run.points.with_columns(
        pl.when(pl.col("level") == 1).then(None).otherwise(pl.col("node.read_ms"))
        .alias("node.read_ms")
    )  # fmt: skip
    idle = points.filter(pl.col("level") == 12).with_columns(
        pl.lit(0.0).alias("throughput"), pl.lit(24.0).alias("level")
    )
    for name, frame in (("gaps", pl.concat([points, idle])), ("bare", points.drop(
            "node.table_reads_s"))):  # fmt: skip
        writer = RunWriter.create(tmp_path / name, kind="experiment", spec=run.info["spec"])
        with writer:
            writer.append("points", frame)
    cal = calibrate_cassandra(read_run(tmp_path / "gaps"), setup="one", precision=0.05)
    assert cal.cluster.client_delay == 0.0 and any("node.read_ms" in n for n in cal.notes)
    assert cal.costs.coordinate == pytest.approx(COSTS.coordinate, rel=0.03)
    with pytest.raises(InputError) as err:
        calibrate_cassandra(read_run(tmp_path / "bare"), setup="one")
    assert "node.table_reads_s" in str(err.value)
