"""``tierscope import csv``: valid files become a run folder; bad ones exit 2 naming the file,
the line and the column, and write nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tierscope.cli import main
from tierscope.errors import InputError
from tierscope.ingest.csv import import_csv
from tierscope.store import read_run


def write(path: Path, text: str) -> Path:
    path.write_text(text.strip() + "\n")
    return path


def test_metrics_requests_points_with_iso_times(tmp_path: Path) -> None:
    m = write(
        tmp_path / "m.csv",
        """
ts,tier,node,metric,value
2024-05-01T10:00:00Z,db,db-1,cpu_util,0.5
2024-05-01T10:00:00.05Z,db,db-1,cpu_util,0.97
2024-05-01T10:00:00.05Z,app,,cpu_util,
2024-05-01T10:00:00.1Z,app,,cpu_util,0.2
""",
    )
    r = write(
        tmp_path / "r.csv",
        """
tier,request_id,start,end,status
client,1,2024-05-01T10:00:00.01Z,2024-05-01T10:00:00.2Z,
db,1,2024-05-01T10:00:00.02Z,2024-05-01T10:00:00.19Z,timeout
""",
    )
    p = write(
        tmp_path / "p.csv",
        """
level,throughput,rt_mean,db.cpu_util
10,100,0.01,0.3
10,104,0.011,0.31
20,180,0.02,0.6
""",
    )
    run = read_run(import_csv(tmp_path / "run", metrics=m, requests=r, points=p))
    assert run.info["kind"] == "import" and run.status == "complete"
    assert run.info["spec"]["time_origin"] == "2024-05-01T10:00:00+00:00"
    assert run.metrics["t"].to_list() == pytest.approx([0.0, 0.05, 0.1])  # empty value dropped
    assert run.metrics.filter(tier="app")["node"].to_list() == ["app"]
    assert run.requests["start"].to_list() == pytest.approx([0.01, 0.02])
    assert run.requests["status"].to_list() == ["ok", "timeout"]
    assert run.points["rep"].to_list() == [0, 1, 0]  # repeated levels are repetitions
    assert run.points["db.cpu_util"].to_list() == pytest.approx([0.3, 0.31, 0.6])


def test_relative_seconds_are_kept(tmp_path: Path) -> None:
    m = write(
        tmp_path / "m.csv", "ts,tier,metric,value\n1.5,web,cpu_util,0.1\n2.0,web,cpu_util,0.2"
    )
    run = read_run(import_csv(tmp_path / "run", metrics=m))
    assert run.metrics["t"].to_list() == [1.5, 2.0]
    assert run.info["spec"]["time_origin"] is None


BAD = [
    ("metrics", "ts,tier,value\n0,web,1", "metrics.csv", "metric", "column named 'metric'"),
    (
        "metrics",
        "ts,tier,metric,value\n0,web,cpu_util,1\n0.05,web,cpu_util,1\n0.04,web,cpu_util,1",
        "metrics.csv, line 4",
        "ts",
        "increasing",
    ),
    (
        "metrics",
        "ts,tier,metric,value\n0,web,cpu_util,high",
        "metrics.csv, line 2",
        "value",
        "a number",
    ),
    (
        "metrics",
        "ts,tier,metric,value\nnoon,web,cpu_util,1",
        "metrics.csv, line 2",
        "ts",
        "ISO 8601",
    ),
    ("metrics", "ts,tier,metric,value", "metrics.csv", "rows", "empty"),
    (
        "metrics",
        "ts,tier,metric,value,colour\n0,web,cpu_util,1,red",
        "metrics.csv",
        "colour",
        "one of the columns",
    ),
    (
        "requests",
        "tier,request_id,start,end\nweb,1,2.0,1.0",
        "requests.csv, line 2",
        "end",
        "at or after start",
    ),
    (
        "requests",
        "tier,request_id,start,end\nweb,1,0,1\nweb,1,2,3",
        "requests.csv, line 3",
        "request_id",
        "one row per request",
    ),
    ("points", "level,throughput\n10,", "points.csv, line 2", "throughput", ">= 0"),
    ("points", "level,througput\n10,1", "points.csv", "throughput", "required"),
]


@pytest.mark.parametrize(("kind", "text", "where", "column", "says"), BAD)
def test_bad_files_name_file_line_and_column(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    kind: str,
    text: str,
    where: str,
    column: str,
    says: str,
) -> None:
    path = tmp_path / f"{kind}.csv"
    path.write_text(text + "\n")
    with pytest.raises(InputError) as info:
        import_csv(tmp_path / "run", **{kind: path})
    assert info.value.field == column
    assert info.value.source is not None and info.value.source.endswith(where)
    assert says in str(info.value)
    assert not (tmp_path / "run").exists()
    code = main(["import", "csv", f"--{kind}", str(path), "--out", str(tmp_path / "run2")])
    err = capsys.readouterr().err
    assert code == 2 and str(path) in err and column in err and "Traceback" not in err


def test_mixed_absolute_and_relative_times_are_refused(tmp_path: Path) -> None:
    m = write(tmp_path / "m.csv", "ts,tier,metric,value\n1700000000,web,cpu_util,0.1")
    r = write(tmp_path / "r.csv", "tier,request_id,start,end\nweb,1,0.5,0.6")
    with pytest.raises(InputError, match="absolute times"):
        import_csv(tmp_path / "run", metrics=m, requests=r)


def test_no_file_and_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InputError):
        import_csv(tmp_path / "run")
    code = main(
        ["import", "csv", "--metrics", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "run")]
    )
    assert code == 2 and "nope.csv" in capsys.readouterr().err


def test_import_json_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = write(tmp_path / "m.csv", "ts,tier,metric,value\n0,web,cpu_util,0.1\n0.05,web,cpu_util,1")
    code = main(["import", "csv", "--metrics", str(m), "--out", str(tmp_path / "run"), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["rows"] == {"metrics": 2} and doc["tables"] == ["metrics"]


def test_imported_points_are_analysed(tmp_path: Path) -> None:
    """Points alone (levels, throughput, per-level metric columns) give saturation labels and
    indicator categories: a queue that jumps at the saturation point is reliable, a linear CPU
    is not."""
    from tierscope.analysis import analyze

    levels = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]
    lines = ["level,throughput,db.queue_length,web.cpu_util"]
    for lv in levels:
        x = min(lv, 60) * 10.0
        queue = 1.0 if lv < 60 else 40.0
        lines.append(f"{lv},{x},{queue},{lv / 200}")
    p = write(tmp_path / "p.csv", "\n".join(lines))
    doc = analyze(read_run(import_csv(tmp_path / "run", points=p)))
    (sat,) = doc["saturation"]
    assert sat["first_server_level"] == 60.0 and sat["peak_throughput"] == 600.0
    cats = {i["metric"]: i["category"] for i in doc["indicators"]}
    assert cats == {"db.queue_length": "reliable", "web.cpu_util": "not reliable"}
    assert doc["episodes"] == [] and doc["bottlenecks"] == []
