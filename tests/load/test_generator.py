"""The Python API contract the experiment runner relies on."""

from __future__ import annotations

import contextlib
import os
import resource
import time
from pathlib import Path

import polars as pl
import pytest

from tests.load.conftest import joined, run, workload
from tierscope.errors import InputError
from tierscope.load import LoadGenerator, TestServer
from tierscope.store import SCHEMAS


def _tasks() -> int:
    """The generator's threads in this process (by name: other threads come and go)."""
    n = 0
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError), open(f"/proc/self/task/{tid}/comm") as fh:
            n += fh.read().startswith("tierscope-load")
    return n


def _sockets() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
    return n


def test_start_returns_at_once_and_snapshots_report_progress(server: TestServer) -> None:
    server.set_delay(0.002)
    gen = LoadGenerator(workload(think_time=0.01), [server.url], seed=1)
    t = time.monotonic()
    handle = gen.start(20, 0.5, 1.0, 0.2)
    assert time.monotonic() - t < 0.5  # only the reachability probe and thread start
    assert not handle.done
    time.sleep(1.0)
    snap = handle.snapshot()
    assert snap.phase == "steady"
    assert snap.active == 20
    assert snap.completed > 100
    assert snap.throughput is not None and snap.throughput > 200
    assert snap.p95 is not None and 0.002 < snap.p95 < 0.05
    assert snap.client_cpu is not None and 0 <= snap.client_cpu < 1
    result = handle.wait()
    assert handle.done
    assert handle.snapshot().phase == "done"
    assert not result.partial


def test_no_thread_or_socket_is_left_after_wait_or_stop(server: TestServer) -> None:
    tasks, sockets = _tasks(), _sockets()
    gen = LoadGenerator(workload(), [server.url], threads=2)
    gen.start(8, 0, 0.3).wait()
    handle = gen.start(8, 0, 30.0)
    deadline = time.monotonic() + 10.0  # a busy host starts the threads late, not never
    while (_tasks(), _sockets() >= sockets + 8) != (
        tasks + 2,
        True,
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _tasks() == tasks + 2
    assert _sockets() >= sockets + 8
    result = handle.stop()
    assert _tasks() == tasks
    assert _sockets() == sockets
    assert result.partial
    assert result.summary["partial"]
    assert result.requests.height > 0  # what was measured is kept


def test_stop_records_in_flight_requests_as_aborted(server: TestServer) -> None:
    server.set_delay(5.0)
    handle = LoadGenerator(workload(), [server.url]).start(3, 0, 30.0)
    time.sleep(0.3)
    t = time.monotonic()
    result = handle.stop()
    assert time.monotonic() - t < 0.5
    assert (result.requests["status"] == "aborted").sum() == 3
    assert result.summary["errors"] == 0  # aborted is not an error of the server
    assert handle.stop() is result  # idempotent


def test_requests_have_store_columns_ids_and_monotonic_times(server: TestServer) -> None:
    before = time.monotonic()
    result = run(server, workload(), 4, 0.5, request_id_prefix="r1-")
    after = time.monotonic()
    df = result.requests
    assert df.columns[: len(SCHEMAS["requests"])] == list(SCHEMAS["requests"])
    assert {"intended_start", "actual_start", "bytes", "phase", "error"} <= set(df.columns)
    assert (df["tier"] == "client").all()
    assert df["request_id"].str.starts_with("r1-").all()
    assert df["request_id"].n_unique() == df.height
    assert before < df["start"].min() and df["end"].max() < after
    assert (df["start"] <= df["actual_start"]).all() and (df["actual_start"] < df["end"]).all()
    assert (df["status"] == "ok").all() and (df["http_status"] == 200).all()
    assert df["error"].is_null().all()
    # The id the server saw in X-Request-Id is the request_id column, for every request.
    assert joined(result, server).height == df.height


def test_client_samples_cover_the_run(server: TestServer) -> None:
    result = run(server, workload(think_time=0.005), 10, 1.0)
    cs = result.client_samples
    assert cs.height >= 18  # every 50 ms over about a second
    assert cs["cpu_cores"].drop_nulls().min() >= 0
    assert (cs["t"].diff().drop_nulls() > 0).all()
    s = result.summary
    assert s["client_cpu"] is not None and 0 <= s["client_cpu"] < 1
    assert s["lag"]["p99"] is not None
    assert s["client_bottleneck"] is False
    metrics = result.client_metrics()
    assert set(metrics["metric"]) >= {"cpu_cores", "timer_lag_max_s", "throughput"}
    assert (metrics["tier"] == "client").all()
    point = result.point()
    assert point["throughput"] == pytest.approx(s["throughput"])
    assert point["rt_p99"] == s["latency"]["p99"]


def test_multiple_base_urls_share_the_users(server: TestServer) -> None:
    with TestServer(record=True) as other:
        result = LoadGenerator(workload(), [server.url, other.url]).start(6, 0, 0.5).wait()
        assert result.summary["targets"] == [server.url, other.url]
        # Users are spread round-robin: three each.
        assert server.requests > 0 and other.requests > 0
        assert other.take_log().height == other.requests


def test_bad_levels_and_options_are_input_errors(server: TestServer) -> None:
    gen = LoadGenerator(workload(mode="open"), [server.url])
    with pytest.raises(InputError, match="level"):
        gen.start(-5.0)
    with pytest.raises(InputError, match="level"):
        gen.start()  # the workload gives no rate
    with pytest.raises(InputError, match="whole number"):
        LoadGenerator(workload(), [server.url]).start(2.5)
    with pytest.raises(InputError, match="connections"):
        LoadGenerator(workload(), [server.url], connections=0).start(1)
    with pytest.raises(InputError, match="reachable"):
        LoadGenerator(workload(), ["http://127.0.0.1:9"]).start(1)
    with pytest.raises(InputError, match="plain HTTP"):
        LoadGenerator(workload(), ["https://127.0.0.1:9"]).start(1)
    with pytest.raises(InputError, match="base URL"):
        LoadGenerator(workload(), []).start(1)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 1_000_000:
        with pytest.raises(InputError, match="open-files limit"):
            LoadGenerator(workload(), [server.url]).start(hard + 1)


def test_templates_headers_and_bodies_reach_the_server(server: TestServer) -> None:
    w = workload(
        interactions=[
            {
                "name": "post",
                "method": "POST",
                "url": "/p?id={int:5:5}&user={user}",
                "headers": {"X-Test": "s{session}"},
                "body": "x={request_id}",
            }
        ]
    )
    result = run(server, w, 1, 0.2, request_id_prefix="q")
    assert result.summary["errors"] == 0
    assert result.requests["bytes"].min() > 64


def test_record_load_writes_a_run_folder(server: TestServer, tmp_path: Path) -> None:
    from tierscope.load import record_load
    from tierscope.store import read_run

    server.set_delay(0.001)
    gen = LoadGenerator(workload(think_time=0.01), [server.url], keep_requests=False)
    result = record_load(gen, tmp_path / "run", level=5, ramp_up_s=0.3, steady_s=1.2)
    run_ = read_run(tmp_path / "run")
    assert run_.status == "complete"
    assert run_.requests is not None and run_.requests.height == result.summary["totals"]["sent"]
    assert run_.requests["request_id"].n_unique() == run_.requests.height
    assert run_.metrics is not None and set(run_.metrics["tier"]) == {"client"}
    assert run_.points is not None and run_.points.height == 1
    assert run_.points["throughput"][0] == pytest.approx(result.summary["throughput"])
    assert run_.events is not None and list(run_.events["detail"]) == ["ramp-up", "steady"]
    assert run_.info["summary"]["requests"] == result.summary["requests"]


def test_record_load_keeps_what_was_measured_on_ctrl_c(server: TestServer, tmp_path: Path) -> None:
    from tierscope.load import record_load
    from tierscope.store import read_run

    calls = []

    def interrupt(handle: object) -> None:
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt

    gen = LoadGenerator(workload(think_time=0.01), [server.url])
    with pytest.raises(KeyboardInterrupt):
        record_load(gen, tmp_path / "run", level=5, steady_s=30.0, on_progress=interrupt)
    run_ = read_run(tmp_path / "run")
    assert run_.status == "partial"
    assert run_.requests is not None and run_.requests.height > 0
    assert run_.requests["request_id"].n_unique() == run_.requests.height
    assert run_.info["summary"]["partial"]


def test_request_frames_are_cheap_to_build(server: TestServer) -> None:
    # A closed loop without think time makes tens of thousands of rows; building the frame is
    # vectorised (no Python loop per request).
    result = run(server, workload(), 16, 1.0)
    assert result.requests.height > 5000
    assert isinstance(result.requests, pl.DataFrame)
