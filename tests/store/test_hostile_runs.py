"""Run folders and imported files that fight back: damaged Parquet, NaN throughputs, epoch
milliseconds, a 64 kB header, and two commands racing for one --out folder."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tierscope.analysis.saturation import analyze_saturation
from tierscope.errors import InputError
from tierscope.ingest._files import MAX_HEADER_BYTES
from tierscope.ingest.csv import import_csv
from tierscope.spec.analysis import AnalysisOptions
from tierscope.store import RunWriter, _run, read_run, scan_table


def _points_run(path: Path, throughput: list[float]) -> Path:
    n = len(throughput)
    none = pl.Series([None] * n, dtype=pl.Float64)
    frame = pl.DataFrame(
        {"setup": ["s0"] * n, "level": [float(i + 1) for i in range(n)], "rep": [0] * n}
    ).with_columns(
        pl.Series("throughput", throughput, dtype=pl.Float64),
        *(none.alias(c) for c in ("t_start", "t_end", "rt_mean", "rt_p50", "rt_p95")),
        *(none.alias(c) for c in ("rt_p99", "errors")),
    )
    with RunWriter.create(path, kind="import", spec={"name": "x"}) as run:
        run.write("points", frame)
    return path


def _import_error(tmp_path: Path, **files: str) -> InputError:
    paths = {}
    for kind, text in files.items():
        paths[kind] = tmp_path / f"{kind}.csv"
        paths[kind].write_text(text)
    t0 = time.monotonic()
    with pytest.raises(InputError) as err:
        import_csv(tmp_path / "run", **paths)
    assert time.monotonic() - t0 < 5
    assert "\n" not in str(err.value) and len(str(err.value)) < 500
    assert not (tmp_path / "run").exists()
    return err.value


# ---- importer ------------------------------------------------------------------------------------


def test_epoch_milliseconds_are_refused_with_a_hint(tmp_path: Path) -> None:
    err = _import_error(
        tmp_path,
        metrics="ts,tier,metric,value\n1700000000000,web,cpu,0.5\n1700000000050,web,cpu,1\n",
    )
    assert err.field == "ts" and "milliseconds" in str(err) and "line 2" in str(err)


def test_a_huge_header_is_refused_without_reading_it(tmp_path: Path) -> None:
    name = "x" * (4 * MAX_HEADER_BYTES)
    err = _import_error(tmp_path, points=f"level,throughput,{name}\n1,2,3\n")
    assert err.field == "header"


def test_a_long_unknown_column_is_cut_short_in_the_message(tmp_path: Path) -> None:
    name = "y" * 10_000
    err = _import_error(tmp_path, points=f"level,throughput,{name}\n1,2,3\n")
    assert "…" in str(err) and name not in str(err)


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_points_need_finite_throughputs_and_levels(tmp_path: Path, value: str) -> None:
    err = _import_error(tmp_path, points=f"level,throughput\n1,10\n2,{value}\n")
    assert err.field == "throughput" and "line 3" in str(err)
    err = _import_error(tmp_path, points=f"level,throughput\n{value},10\n")
    assert err.field == "level"


# ---- analysis of NaN throughputs -----------------------------------------------------------------


def test_points_without_a_finite_throughput_are_skipped_with_a_note(tmp_path: Path) -> None:
    run = read_run(_points_run(tmp_path / "r", [10.0, float("nan"), 30.0, 31.0, 31.0]))
    assert run.points is not None
    [entry] = analyze_saturation(run.points, AnalysisOptions.parse({}, source="test"))
    assert [p["level"] for p in entry["curve"]] == [1.0, 3.0, 4.0, 5.0]
    assert entry["first_server_level"] == 3.0  # 30 >= 0.95 x 31
    assert any(
        "1 point(s) without a finite throughput" in n and "levels 2" in n for n in entry["notes"]
    )
    only_nan = read_run(_points_run(tmp_path / "n", [float("nan")] * 4)).points
    assert analyze_saturation(only_nan, AnalysisOptions.parse({}, source="test")) == []


# ---- damaged files -------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "zeroed"])
def test_a_damaged_parquet_file_is_named(tmp_path: Path, damage: str) -> None:
    path = _points_run(tmp_path / "r", [1.0, 2.0, 3.0])
    table = path / "points.parquet"
    data = bytearray(table.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 3 : -8] = bytes(len(data) - 8 - len(data) // 3)
    table.write_bytes(bytes(data))
    with pytest.raises(InputError) as err:
        read_run(path)
    assert str(table) in str(err.value) and "damaged" in str(err.value)
    with pytest.raises(InputError, match="damaged"):
        scan_table(path, "points")


def test_run_json_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    path = _points_run(tmp_path / "r", [1.0])
    (path / "run.json").write_text("[1, 2]")
    with pytest.raises(InputError, match="a JSON object"):
        read_run(path)


# ---- claiming the folder -------------------------------------------------------------------------


def test_a_second_command_during_the_first_ones_claim_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second command runs inside the first one's create, after its checks: before the
    fix both found the folder empty and both wrote into it."""
    target = tmp_path / "out"
    target.mkdir()  # existing and empty: the case the check alone cannot settle
    second: dict[str, Any] = {}
    real = _run.host_facts

    def facts() -> dict[str, Any]:
        if not second:
            second["started"] = True
            try:
                second["writer"] = RunWriter.create(target, kind="import", spec={"name": "b"})
            except InputError as exc:
                second["error"] = exc
        return real()

    monkeypatch.setattr(_run, "host_facts", facts)
    first = RunWriter.create(target, kind="import", spec={"name": "a"})
    assert "writer" not in second and "a new or empty folder" in str(second["error"])
    first.close()
    assert read_run(target).name == "a"


def _take(
    name: str, target: Path, barrier: threading.Barrier, won: list[str], lost: list[InputError]
) -> None:
    barrier.wait()
    try:
        RunWriter.create(target, kind="import", spec={"name": name}).close()
        won.append(name)
    except InputError as exc:
        lost.append(exc)


def test_racing_threads_get_one_folder_each_try(tmp_path: Path) -> None:
    for attempt in range(20):
        target = tmp_path / f"out{attempt}"
        if attempt % 2:
            target.mkdir()
        barrier = threading.Barrier(4)
        won: list[str] = []
        lost: list[InputError] = []
        threads = [
            threading.Thread(target=_take, args=(f"t{i}", target, barrier, won, lost))
            for i in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1 and len(lost) == 3
        assert read_run(target).name == won[0]


def test_run_into_a_non_empty_folder_makes_no_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 8: the six cgroups were made before the folder check and never removed."""
    import tempfile

    from tierscope.experiment import runner
    from tierscope.spec.experiment import parse_experiment

    made: list[str] = []

    def no_cgroups(name: str) -> None:
        made.append(name)
        raise AssertionError("cgroups made before the run folder was claimed")

    monkeypatch.setattr(runner, "open_hierarchy", no_cgroups)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # this run's locks only
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    doc = {"name": "x", "sweep": {"levels": [1]}}
    with pytest.raises(InputError, match="a new or empty folder"):
        runner.run_experiment(parse_experiment(doc), doc, out)
    assert made == [] and sorted(p.name for p in out.iterdir()) == ["keep.txt"]
