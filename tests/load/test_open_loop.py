"""Open-loop arrivals: rates within 1 % of target, and server stalls shown in full.

The stall tests are the coordinated-omission check of wrk2: the test server freezes for one
second; in open-loop mode every request due during the freeze is charged the time it waited
from its *intended* start, so the stall dominates the upper percentiles; a closed loop sends
only one request per user into the freeze and the percentiles hide it.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from scipy import stats

from tests.load.conftest import run, workload
from tierscope.load import LoadHandle, TestServer

STALL_S = 1.0


def test_constant_arrivals_hit_the_rate(server: TestServer) -> None:
    server.set_delay(0.001)
    result = run(server, workload(mode="open", arrival="constant"), 400.0, 5.0)
    steady = result.requests.filter(result.requests["phase"] == "steady")
    assert steady.height == pytest.approx(2000, abs=1)
    gaps = np.diff(np.sort(steady["intended_start"].to_numpy()))
    np.testing.assert_allclose(gaps, 1 / 400, atol=1e-6)
    # Every request was sent and answered: the achieved rate is the intended one.
    assert result.summary["throughput"] == pytest.approx(400, rel=0.01)
    assert result.summary["not_sent"] == 0


def test_poisson_arrivals_hit_the_rate(server: TestServer) -> None:
    server.set_delay(0.001)
    rate, duration = 1000.0, 5.0
    result = run(server, workload(mode="open"), rate, duration, threads=2)
    steady = result.requests.filter(result.requests["phase"] == "steady")
    n = steady.height
    # Count of a Poisson process: mean = sd² = rate × duration (4 sd band, ±1.3 %).
    assert abs(n - rate * duration) < 4 * np.sqrt(rate * duration)
    gaps = np.diff(np.sort(steady["intended_start"].to_numpy()))
    assert stats.kstest(gaps, stats.expon(scale=1 / rate).cdf).pvalue > 0.001
    # What was intended was delivered: completions track the arrivals within 1 %.
    assert result.summary["throughput"] == pytest.approx(n / duration, rel=0.01)
    assert result.summary["not_sent"] == 0


def test_ramp_up_follows_the_profile(server: TestServer) -> None:
    result = run(server, workload(mode="open", arrival="constant"), 200.0, 1.0, ramp_up_s=2.0)
    ramp = result.requests.filter(result.requests["phase"] == "ramp-up")
    # A linear ramp from 0 to 200/s over 2 s offers 200 requests, three quarters in its second half.
    assert ramp.height == pytest.approx(200, abs=1)
    t0 = result.summary["steady"]["start"] - 2.0
    late_half = (ramp["intended_start"] - t0 > 1.0).sum()
    assert late_half == pytest.approx(150, abs=3)


def _stall_after(delay_s: float, server: TestServer) -> object:
    def during(handle: LoadHandle) -> None:
        time.sleep(max(0.0, handle.steady_start + delay_s - time.monotonic()))
        server.stall(STALL_S)

    return during


def test_a_stall_shows_in_open_loop_percentiles(server: TestServer) -> None:
    server.set_delay(0.001)
    result = run(
        server,
        workload(mode="open", arrival="constant"),
        200.0,
        4.0,
        during=_stall_after(1.5, server),
    )
    lat = result.summary["latency"]
    # 200 of the 800 steady requests fall in the stall, their waits spread evenly over 0–1 s:
    # p95 is the 80th percentile of that spread (~0.8 s), p99 the 96th (~0.96 s).
    assert lat["p95"] == pytest.approx(0.8, abs=0.1)
    assert lat["p99"] == pytest.approx(0.96, abs=0.06)
    assert lat["max"] == pytest.approx(STALL_S, abs=0.05)
    assert result.summary["errors"] == 0


def test_a_closed_loop_hides_the_same_stall(server: TestServer) -> None:
    server.set_delay(0.005)
    result = run(server, workload(), 10, 4.0, during=_stall_after(1.5, server))
    lat = result.summary["latency"]
    # Each of the 10 users has exactly one request in the freeze; thousands are fast, so even
    # p99 stays far below the stall (a few ms quietly; a busy host's wake-ups add some).
    assert lat["max"] > 0.9
    assert lat["p99"] < 0.25
    slow = (result.requests["end"] - result.requests["start"] > 0.5).sum()
    assert slow == 10


def test_fixed_connections_queue_requests_and_correction_shows_it(server: TestServer) -> None:
    server.set_delay(0.001)
    result = run(
        server,
        workload(mode="open", arrival="constant"),
        200.0,
        4.0,
        connections=4,
        during=_stall_after(1.5, server),
    )
    s = result.summary
    # Queued behind four frozen connections, requests leave late: the uncorrected latency (from
    # when they were finally sent) hides the stall that the corrected one shows.
    assert s["latency"]["p99"] > 0.8
    assert s["latency_uncorrected"]["p99"] < 0.1
    assert s["late"] > 150
    assert s["client_bottleneck"]
    assert any("intended time" in why for why in s["client_bottleneck_why"])


def test_outstanding_bound_counts_requests_not_sent(server: TestServer) -> None:
    server.set_delay(0.001)
    result = run(
        server,
        workload(mode="open", arrival="constant"),
        500.0,
        3.0,
        max_outstanding=50,
        during=_stall_after(1.0, server),
    )
    s = result.summary
    # During the 1 s stall 500 requests arrive; 50 may be outstanding, the rest are not sent.
    assert s["not_sent"] == pytest.approx(450, abs=10)
    assert s["errors_by_class"]["not_sent"] == s["not_sent"]
    assert s["client_bottleneck"]
    not_sent = result.requests.filter(result.requests["error"] == "not_sent")
    assert not_sent["actual_start"].is_nan().all()
