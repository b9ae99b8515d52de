"""Load tools' results (k6, Locust, JMeter): per-request or per-second client data becomes
requests, per-second client metrics and one point per load level.

Locust runs for real here (it is a Python package), against a loopback server that counts what
it serves; k6 is under the AGPL and is not installed, so its files are written to its
documented formats (`k6 run --out json`: Metric and Point lines, fields `type`, `metric`,
`data.time`, `data.value`, `data.tags`; `--summary-export`: `metrics.<name>.<stat>`) with known
requests; JMeter's test runs the Debian package when it is installed (tests/ingest/test_jmeter.py).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tierscope import ingest
from tierscope.errors import InputError
from tierscope.ingest._client import MIN_LEVEL_S, level_windows
from tierscope.store import read_run

T0 = dt.datetime(2026, 11, 28, 12, 0, 0, tzinfo=dt.timezone(dt.timedelta(hours=2)))


def _k6_time(seconds: float) -> str:
    """k6's own time format: RFC 3339 with nanoseconds and the local zone."""
    t = T0 + dt.timedelta(seconds=seconds)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond:06d}123+02:00"


def _k6_ndjson(path: Path) -> tuple[dict[float, dict[str, float]], list[tuple[float, bool]]]:
    """A k6 run of two stages: 5 VUs for 20 s, a 1 s ramp, 10 VUs for 20 s. A VU at level 5
    makes a 50 ms request every 0.5 s, at level 10 a 100 ms request every 0.5 s, the tenth of
    those failing (status 500). Returns the truth per level."""
    lines = [
        {"type": "Metric", "data": {"type": "gauge", "contains": "default", "tainted": None,
                                    "thresholds": [], "submetrics": None}, "metric": "vus"},
        {"type": "Metric", "data": {"type": "trend", "contains": "time", "tainted": None,
                                    "thresholds": [], "submetrics": None},
         "metric": "http_req_duration"},
    ]  # fmt: skip
    for s in range(42):
        vus = 5 if s < 20 else (8 if s == 20 else 10)
        lines.append({"type": "Point", "metric": "vus",
                      "data": {"time": _k6_time(s), "value": vus, "tags": None}})  # fmt: skip
    n = 0
    sent: list[tuple[float, bool]] = []
    for level, (a, b, ms) in {5: (0.0, 20.0, 50), 10: (21.0, 41.0, 100)}.items():
        for vu in range(level):
            t = a + vu * 0.5 / level
            while t < b:
                n += 1
                fail = level == 10 and n % 10 == 0
                sent.append((t, fail))
                tags = {"group": "", "method": "GET", "name": "http://sut/item",
                        "proto": "HTTP/1.1", "scenario": "default",
                        "status": "500" if fail else "200", "url": "http://sut/item",
                        "expected_response": "false" if fail else "true"}  # fmt: skip
                lines.append({"type": "Point", "metric": "http_req_duration",
                              "data": {"time": _k6_time(t + ms / 1000), "value": float(ms),
                                       "tags": tags}})  # fmt: skip
                lines.append({"type": "Point", "metric": "http_reqs",
                              "data": {"time": _k6_time(t + ms / 1000), "value": 1,
                                       "tags": tags}})  # fmt: skip
                t += 0.5
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    truth = {5.0: {"throughput": 10.0, "rt_mean": 0.05}, 10.0: {"throughput": 20.0, "rt_mean": 0.1}}
    return truth, sent


def test_k6_json_output_gives_levels_throughput_latency_and_failures(tmp_path: Path) -> None:
    truth, sent = _k6_ndjson(tmp_path / "out.json")
    run = read_run(ingest.import_files("k6", tmp_path / "run", [tmp_path / "out.json"])[0])
    points = run.points
    assert points is not None
    assert points["level"].to_list() == [5.0, 10.0]
    for row in points.iter_rows(named=True):
        want = truth[row["level"]]
        assert row["throughput"] == pytest.approx(want["throughput"], rel=0.05)
        assert row["rt_mean"] == pytest.approx(want["rt_mean"], abs=1e-5)
        assert row["rt_p95"] == pytest.approx(want["rt_mean"], abs=1e-5)
        # the requests sent in the level's steady window (times from the first request)
        failed = sum(f for t, f in sent if row["t_start"] <= t < row["t_end"])
        assert row["errors"] == failed
    assert points["errors"].to_list()[0] == 0 and points["errors"].to_list()[1] > 0
    requests = run.requests
    assert requests is not None
    assert set(requests["interaction"]) == {"http://sut/item"}
    assert requests.height == 5 * 40 + 10 * 40
    metrics = run.metrics
    assert metrics is not None
    done = metrics.filter(pl.col("metric") == "throughput_s")["value"].sum()
    assert done == requests.height


def test_a_k6_summary_is_one_point(tmp_path: Path) -> None:
    # k6's --summary-export format (its documentation's example, trimmed)
    summary = {
        "root_group": {"name": "", "path": "", "id": "d41d8cd98f00b204e9800998ecf8427e",
                       "groups": [], "checks": []},
        "metrics": {
            "http_req_duration": {"avg": 120.5, "min": 80.1, "med": 110.2, "max": 900.0,
                                  "p(90)": 180.3, "p(95)": 240.7},
            "http_reqs": {"count": 3000, "rate": 49.8},
            "http_req_failed": {"passes": 30, "fails": 2970, "value": 0.01},
            "vus": {"value": 0, "min": 0, "max": 20},
            "vus_max": {"value": 20, "min": 20, "max": 20},
        },
    }  # fmt: skip
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(summary))
    run = read_run(ingest.import_files("k6", tmp_path / "run", [path])[0])
    assert run.points is not None
    p = run.points.row(0, named=True)
    assert (p["level"], p["throughput"], p["errors"]) == (20.0, 49.8, pytest.approx(30.0))
    assert (p["rt_mean"], p["rt_p50"], p["rt_p95"]) == pytest.approx((0.1205, 0.1102, 0.2407))
    # handleSummary's data: the statistics nested under "values"
    nested = {"metrics": {k: {"type": "trend", "values": v} for k, v in summary["metrics"].items()}}  # type: ignore[union-attr]
    path.write_text(json.dumps(nested))
    again = read_run(ingest.import_files("k6", tmp_path / "run2", [path])[0]).points
    assert again is not None and again.row(0, named=True)["throughput"] == 49.8


def test_level_windows_leave_out_ramps_and_warm_up() -> None:
    t = pl.Series([float(s) for s in range(40)])
    users = pl.Series([2.0] * 10 + [3.0, 4.0] + [5.0] * 20 + [3.0] * 8)
    windows = level_windows(t, users)
    assert windows["level"].to_list() == [2.0, 5.0, 3.0]
    assert windows["t_start"].to_list() == pytest.approx([1.0, 14.0, 32.7])
    assert windows["t_end"].to_list() == [10.0, 32.0, 39.0]
    assert MIN_LEVEL_S <= 7


@pytest.mark.parametrize(
    ("text", "field", "where"),
    [
        (
            '{"type":"Point","metric":"http_req_duration","data":{"time":"x","value":1}}\n',
            "data.time",
            "line 1",
        ),
        ('{"type":"Metric","metric":"vus","data":{}}\nnope\n', "line", "line 2"),
        (
            '{"type":"Point","metric":"http_req_duration","data":{"time":"2026-11-28T12:00:00Z",'
            '"value":-3}}\n',
            "data.value",
            "line 1",
        ),
        ('{"metrics": {"http_reqs": {"count": 1}}}', "metrics.http_reqs", "k6.json"),
        ("", "file", "k6.json"),
        (  # a duration of 2,026 years: it would have begun in year 0 (found by the fuzz test)
            '{"type":"Point","metric":"http_req_duration","data":{"time":"2026-11-28T12:00:00Z",'
            '"value":63931456800124.0}}\n',
            "data.value",
            "line 1",
        ),
    ],
)
def test_bad_k6_files_are_named(tmp_path: Path, text: str, field: str, where: str) -> None:
    path = tmp_path / "k6.json"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        ingest.import_files("k6", tmp_path / "run", [path])
    assert err.value.field == field and where in str(err.value)


def test_the_cli_exits_2_with_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "k6.json"
    path.write_text('{"type":"Metric","metric":"vus","data":{}}\n{"type": 7}\n')
    proc = subprocess.run(
        [sys.executable, "-m", "tierscope.cli", "import", "k6", str(path), "--out",
         str(tmp_path / "r")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "k6.json, line 2" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()


_K6_LINE = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["Point", "Metric", "Other"]),
        "metric": st.sampled_from(["vus", "http_req_duration", "http_reqs"]),
        "data": st.fixed_dictionaries(
            {
                "time": st.one_of(
                    st.just("2026-11-28T12:00:00.123456789+02:00"), st.text(max_size=8)
                ),
                "value": st.one_of(st.floats(allow_nan=True), st.integers(), st.text(max_size=3)),
                "tags": st.one_of(
                    st.none(), st.dictionaries(st.text(max_size=5), st.text(max_size=5))
                ),
            }
        ),
    }
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.one_of(
        st.lists(_K6_LINE, max_size=6).map(lambda xs: "\n".join(json.dumps(x) for x in xs)),
        st.text(max_size=200),
    )
)
def test_fuzzed_k6_files_give_input_errors_only(tmp_path: Path, text: str) -> None:
    path = tmp_path / "fuzz.json"
    path.write_text(text)
    try:
        ingest.import_files("k6", tmp_path / "run", [path], force=True)
    except InputError as exc:
        assert "fuzz.json" in str(exc) or exc.field in ("values", "time")


_JTL_HEAD = "timeStamp,elapsed,label,responseCode,success,allThreads\n"
_LOCUST_HEAD = (
    "Timestamp,User Count,Type,Name,Requests/s,Failures/s,50%,95%,99%,Total Request Count,"
    "Total Failure Count,Total Average Response Time\n"
)
_CELL = st.one_of(
    st.integers(-5, 2_000_000_000_000).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["", "true", "false", "N/A", "Aggregated", "x", '"', "2026-11-28 12:00:00"]),
)


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.sampled_from([("jmeter", _JTL_HEAD, 6), ("locust", _LOCUST_HEAD, 12)]),
    st.lists(st.lists(_CELL, min_size=1, max_size=13), max_size=8),
)
def test_fuzzed_jmeter_and_locust_files_give_input_errors_only(
    tmp_path: Path, fmt: tuple[str, str, int], rows: list[list[str]]
) -> None:
    name, head, _ = fmt
    path = tmp_path / "fuzz.csv"
    path.write_text(head + "".join(",".join(r) + "\n" for r in rows))
    try:
        ingest.import_files(name, tmp_path / "run", [path], force=True)
    except InputError as exc:
        assert "fuzz.csv" in str(exc) or exc.field in ("values", "time")
