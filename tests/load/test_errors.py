"""Error classes: timeouts, connections closed by the server, stale keep-alive retries."""

from __future__ import annotations

import pytest

from tests.load.conftest import run, workload
from tierscope.load import TestServer


def test_timeouts_are_errors_that_keep_their_latency(server: TestServer) -> None:
    server.set_delay(2.0)
    result = run(server, workload(), 2, 1.0, timeout_s=0.3)
    s = result.summary
    assert s["errors_by_class"]["timeout"] == s["errors"] > 0
    timed_out = result.requests.filter(result.requests["error"] == "timeout")
    lat = (timed_out["end"] - timed_out["actual_start"]).to_numpy()
    # Detected by the sweep within a few tens of milliseconds of the deadline.
    assert lat.min() >= 0.3 and lat.max() < 0.3 + 0.05
    # Timeouts stay in the percentiles: hiding them would hide the stall.
    assert s["latency"]["p50"] >= 0.3
    assert (timed_out["status"] == "timeout").all()


def test_a_server_that_hangs_up_gives_closed_errors_after_one_retry(server: TestServer) -> None:
    # The first request of each connection succeeds; the next one is answered by a hang-up on
    # the now kept-alive connection, so the generator retries it once on a fresh connection,
    # where it is refused again and recorded as "closed".
    w = workload(
        interactions=[{"name": "ok", "url": "/"}, {"name": "bye", "url": "/?abort=1"}],
        mixes={"m": {"initial": {"ok": 1}, "transitions": {"ok": {"bye": 1}, "bye": {"ok": 1}}}},
    )
    result = run(server, w, 2, 0.5)
    s = result.summary
    bye = s["interactions"]["bye"]
    assert bye["errors"] == bye["requests"] > 0
    assert s["errors_by_class"] == {"closed": bye["errors"]}
    assert s["interactions"]["ok"]["errors"] == 0
    assert s["totals"]["retries"] >= bye["requests"] - 2  # each hang-up on a reused connection
    assert s["totals"]["connects"] >= s["totals"]["retries"]


@pytest.mark.parametrize("status", ["404", "503"])
def test_http_error_statuses(server: TestServer, status: str) -> None:
    w = workload(interactions=[{"name": "e", "url": f"/?status={status}"}])
    result = run(server, w, 1, 0.3)
    assert set(result.requests["status"]) == {status}
    assert result.summary["errors_by_class"] == {"http": result.summary["errors"]}
    assert result.summary["throughput"] == 0  # errors are not throughput
