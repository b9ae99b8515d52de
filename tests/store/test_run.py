"""The run folder: round trip, streaming in parts, partial and failed runs, bad folders."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tierscope import __version__
from tierscope.cli import main
from tierscope.errors import InputError
from tierscope.sim import record_simulation, simulate
from tierscope.sim import trace as tr
from tierscope.spec import load_model
from tierscope.store import (
    SCHEMAS,
    RunWriter,
    _run,
    cgroup_version,
    read_run,
    scan_table,
)

ROOT = Path(__file__).resolve().parents[2]
TWIN = ROOT / "examples" / "models" / "millibottleneck-twin.yaml"


def _metrics(t0: float, n: int, rep: int = 0) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "t": [t0 + i for i in range(n)],
            "setup": "s0",
            "level": 10,
            "rep": rep,
            "tier": "app",
            "node": "app-1",
            "metric": "queue_length",
            "value": [float(i) for i in range(n)],
        }
    )


def _create(path: Path, **kw: Any) -> RunWriter:
    return RunWriter.create(path, kind="import", spec={"name": "x"}, seed=5, **kw)


def test_round_trip_in_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_run, "PART_ROWS", 7)
    chunks = [_metrics(10.0 * k, 5) for k in range(6)]
    events = pl.DataFrame(
        {"t_start": [1.0], "t_end": [2.0], "kind": ["stall"], "tier": ["app"], "detail": ["x"]}
    )
    with _create(tmp_path / "run", options={"a": 1}) as run:
        for c in chunks:
            run.append("metrics", c)
        assert len(list((tmp_path / "run" / ".parts" / "metrics").iterdir())) == 3
        run.write("events", events)
        run.info["summary"] = {"x": math.nan, "y": [1.5, math.inf]}
    back = read_run(tmp_path / "run")
    assert back.status == "complete"
    assert back.metrics is not None
    expected = pl.concat(chunks).with_columns(pl.col("level").cast(pl.Float64))
    assert back.metrics.equals(expected)
    assert back.metrics.schema == pl.Schema(SCHEMAS["metrics"])
    assert back.events is not None and back.events.equals(events)
    assert back.requests is None and back.points is None
    info = back.info
    assert info["tierscope_version"] == __version__
    assert info["seed"] == 5 and info["spec"] == {"name": "x"} and info["options"] == {"a": 1}
    assert info["start"] <= info["end"]
    assert info["tables"] == ["metrics", "events"]
    assert set(info["host"]) >= {"cores", "kernel", "cgroup"}
    assert info["summary"] == {"x": None, "y": [1.5, None]}  # JSON has no NaN
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == [
        "events.parquet",
        "metrics.parquet",
        "run.json",
    ]


def test_extra_columns_are_kept_after_the_contract(tmp_path: Path) -> None:
    frame = _metrics(0, 3).with_columns(pl.lit(1).alias("cpu")).select("cpu", pl.exclude("cpu"))
    with _create(tmp_path / "run") as run:
        run.write("metrics", frame)
    back = read_run(tmp_path / "run").metrics
    assert back is not None
    assert back.columns == [*SCHEMAS["metrics"], "cpu"]


def test_a_column_first_written_in_a_later_part_is_kept(tmp_path: Path) -> None:
    """A points table gains a metric a later level first measured: the finished table and the
    unfinished parts both read with it, null where a part lacked it."""
    first = _metrics(0, 2)
    later = _metrics(5, 2).with_columns(pl.lit(3.5).alias("node.read_quorum_ms"))
    with _create(tmp_path / "run") as run:
        run.append("metrics", first)
        run.flush()
        run.append("metrics", later)
        run.flush()
        parts = scan_table(tmp_path / "run", "metrics")
        assert parts is not None
        assert parts.collect()["node.read_quorum_ms"].to_list() == [None, None, 3.5, 3.5]
    back = read_run(tmp_path / "run").metrics
    assert back is not None and back.height == 4
    assert back["node.read_quorum_ms"].to_list() == [None, None, 3.5, 3.5]


def test_missing_column_and_unknown_table_are_refused(tmp_path: Path) -> None:
    with _create(tmp_path / "run") as run:
        with pytest.raises(InputError, match="node"):
            run.append("metrics", _metrics(0, 2).drop("node"))
        with pytest.raises(InputError, match="table"):
            run.append("latency", _metrics(0, 2))


def test_interrupted_run_is_partial_and_keeps_what_was_measured(tmp_path: Path) -> None:
    model = load_model(TWIN)
    layout = tr.Layout.of(model)
    chunks = []

    def on_chunk(rep: int, out: dict[str, Any]) -> None:
        if len(chunks) == 2:
            raise KeyboardInterrupt  # as Ctrl-C would, in the middle of the run
        chunks.append(out)
        run.append("metrics", tr.metrics_frame(out["windows"], layout, width=0.05, rep=rep))

    run = _create(tmp_path / "run")
    with pytest.raises(KeyboardInterrupt), run:
        simulate(model, precision=0.001, max_events=2_000_000, window=0.05, on_chunk=on_chunk)
    back = read_run(tmp_path / "run")
    assert back.status == "partial"
    assert back.info["error"] == "interrupted"
    assert back.metrics is not None
    n_windows = sum(len(c["windows"]["t_start"]) for c in chunks)
    assert back.metrics["t"].n_unique() == n_windows > 0


def test_failing_simulation_is_recorded_as_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = {"n": 0}
    original = tr.requests_frame

    def flaky(*args: Any, **kw: Any) -> pl.DataFrame:
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("disk on fire")
        return original(*args, **kw)

    monkeypatch.setattr(tr, "requests_frame", flaky)
    with pytest.raises(RuntimeError, match="disk on fire"):
        record_simulation(
            load_model(TWIN), tmp_path / "run", precision=0.001, max_events=2_000_000, window=0.05
        )
    back = read_run(tmp_path / "run")
    assert back.status == "failed"
    assert "disk on fire" in back.info["error"]
    assert back.metrics is not None and back.requests is not None and back.events is not None
    end = back.metrics["t"].max()
    assert isinstance(end, float) and end > 5.0
    assert back.events.filter(pl.col("kind") == "stall").height == int(end // 5)
    assert back.points is None and "summary" not in back.info


def test_killed_writer_leaves_a_readable_partial_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_run, "PART_ROWS", 4)
    run = _create(tmp_path / "run")
    run.append("metrics", _metrics(0, 5))
    run.append("metrics", _metrics(5, 2))  # buffered, lost with the process
    del run  # never closed, as after SIGKILL
    back = read_run(tmp_path / "run")
    assert back.status == "partial" and back.info["end"] is None
    assert back.metrics is not None and back.metrics.height == 5
    lazy = scan_table(tmp_path / "run", "metrics")
    assert lazy is not None and lazy.collect().height == 5
    assert scan_table(tmp_path / "run", "points") is None


def test_non_empty_or_file_run_dir_is_refused(tmp_path: Path) -> None:
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="busy"):
        _create(busy)
    assert [p.name for p in busy.iterdir()] == ["keep.txt"]
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(InputError, match="new or empty folder"):
        _create(a_file)
    empty = tmp_path / "empty"
    empty.mkdir()
    with _create(empty):
        pass
    assert read_run(empty).status == "complete"
    with pytest.raises(InputError, match="run folder"):
        read_run(tmp_path)


def test_cli_refuses_a_non_empty_run_dir(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "old.parquet").write_text("x")
    code = main(["model", "simulate", str(TWIN), "--trace", str(tmp_path), "--json"])
    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert str(tmp_path) in captured.err and "Traceback" not in captured.err
    assert [p.name for p in tmp_path.iterdir()] == ["old.parquet"]


def test_bad_options_leave_no_folder_behind(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="precision"):
        record_simulation(load_model(TWIN), tmp_path / "new", precision=2.0)
    assert not (tmp_path / "new").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="window"):
        record_simulation(load_model(TWIN), tmp_path / "empty", window=-1.0)
    assert list((tmp_path / "empty").iterdir()) == []


def test_cgroup_version(tmp_path: Path) -> None:
    v2, v1, none = tmp_path / "v2", tmp_path / "v1", tmp_path / "none"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    (v1 / "cpu,cpuacct").mkdir(parents=True)
    none.mkdir()
    assert cgroup_version(v2) == "v2"
    assert cgroup_version(v1) == "v1"
    assert cgroup_version(none) is None
    assert cgroup_version(tmp_path / "missing") is None


def test_simulated_tables_follow_the_store_schemas() -> None:
    for table, schema in (
        ("metrics", tr.METRICS_SCHEMA),
        ("requests", tr.REQUESTS_SCHEMA),
        ("events", tr.EVENTS_SCHEMA),
    ):
        contract = SCHEMAS[table]
        assert list(schema)[: len(contract)] == list(contract), table
        assert all(schema[c] == contract[c] for c in contract), table


def test_run_json_is_plain_json(tmp_path: Path) -> None:
    record_simulation(load_model(TWIN), tmp_path / "run", precision=0.001, max_time=2.0)
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["kind"] == "simulation" and info["status"] == "complete"
    assert info["options"]["trace"] is True
    points = read_run(tmp_path / "run").points
    assert points is not None
    assert points.columns[: len(SCHEMAS["points"])] == list(SCHEMAS["points"])
    assert {"app.utilization", "app.queue_length", "app.throughput"} <= set(points.columns)
