"""Recorded latencies and think times agree with independent truths.

Truth comes from outside the generator: the test server's own clock readings of each request
(joined by X-Request-Id; same CLOCK_MONOTONIC), its configured delay, and the configured
think-time law (Kolmogorov–Smirnov tests on the realised think times).

"Within 0.2 ms" is checked on the median and the 95th percentile of the per-request error: the
tail beyond is the operating system's thread wake-up on a shared machine (measured here: p99
0.1–0.25 ms, rare outliers of a few ms while other processes hog both cores), which no client
can control. On a virtual machine whose host is busy (CPU steal), even real-time threads wake
late for seconds at a time; a latency run therefore gets up to three attempts, and one of them
must meet every bound (on a quiet machine the first does).

The gap between client and server times holds the loopback round trip and the wake-ups of the
client's thread, which the bound takes as about 0.1 ms (the machines it was set on: 0.08-0.11
ms median). Some virtual machines are slower: on one, a minimal blocking client in C had a gap
of 0.23-0.31 ms median and 0.44-0.54 ms p95 (the generator 0.15/0.25 ms). When an attempt
misses the bound, the test measures that floor with a minimal blocking client on the same
server and holds the generator to the bound plus the floor's excess over 0.1 ms: it may add no
more to the machine's own latency than it may on a machine with the assumed floor.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest
from scipy import stats

from tests.load.conftest import blocking_client_gaps, joined, run, workload
from tierscope.load import TestServer

#: Acceptance bound: recorded latency within 0.2 ms of truth at low load.
TOLERANCE_S = 0.0002


ATTEMPTS = 3


def _gaps(server: TestServer, delay: object, think_s: float) -> tuple[np.ndarray, np.ndarray, dict]:
    """Client latency, client − server latency per request, and the summary, of one run."""
    server.set_delay(delay)  # type: ignore[arg-type]
    result = run(server, workload(think_time={"dist": "exp", "mean": think_s}), 4, 3.0)
    df = joined(result, server)
    assert df.height > 300
    client = (df["end"] - df["actual_start"]).to_numpy()
    gap = client - (df["sent"] - df["received"]).to_numpy()
    assert np.all(gap > 0), "the client's latency contains the server's"
    return client, gap, result.summary


#: Median gap of a round trip through the kernel that the bounds assume (see the module text).
ASSUMED_FLOOR_S = 0.0001


def _within(gap: np.ndarray, excess: float = 0.0) -> bool:
    # The median is bounded as tightly as the loopback floor allows.
    return bool(
        np.median(gap) < 0.75 * TOLERANCE_S + excess
        and np.quantile(gap, 0.95) < TOLERANCE_S + excess
    )


def _summary_within(gap: np.ndarray, truth: float, medians: list[float], excess: float) -> bool:
    near = all(abs(m - truth) < TOLERANCE_S + excess for m in medians)
    return _within(gap, excess) and near


def _floor_excess(server: TestServer, think_s: float) -> float:
    """How much this machine's floor (a minimal blocking client's median gap) exceeds the
    assumed one, measured now, against the same server and delay."""
    floor = blocking_client_gaps(server, 150, think_s)
    return max(0.0, float(np.median(floor)) - ASSUMED_FLOOR_S)


def test_latency_is_within_0_2_ms_of_the_server_truth(server: TestServer) -> None:
    seen = []
    for _ in range(ATTEMPTS):
        client, gap, summary = _gaps(server, 0.010, 0.02)
        # The summary's medians (corrected: from the intended start; and uncorrected) against the
        # truth, the median of client latency less gap: the server's own time for each request.
        truth = float(np.median(client - gap))
        medians = [summary["latency"]["p50"], summary["latency_uncorrected"]["p50"]]
        seen.append([*np.quantile(gap, [0.5, 0.95]).round(6).tolist(), round(truth, 6), medians])
        if _summary_within(gap, truth, medians, 0.0):
            break
        excess = _floor_excess(server, 0.02)
        seen[-1].append({"floor_excess": round(excess, 6)})
        if _summary_within(gap, truth, medians, excess):
            break
    else:
        pytest.fail(
            "gap (median, p95), server median, summary medians, floor's excess in every "
            f"attempt: {seen}"
        )
    # The server slept for its configured delay (its overshoot is the operating system's).
    assert truth == pytest.approx(0.010, abs=TOLERANCE_S)


def test_latency_tracks_a_distributed_delay(server: TestServer) -> None:
    seen = []
    for _ in range(ATTEMPTS):
        _, gap, summary = _gaps(server, {"dist": "uniform", "low": 0.002, "high": 0.012}, 0.01)
        seen.append(np.quantile(gap, [0.5, 0.95]).round(6).tolist())
        if _within(gap):
            break
        excess = _floor_excess(server, 0.01)
        seen[-1].append(round(excess, 6))
        if _within(gap, excess):
            break
    else:
        pytest.fail(
            f"client − server latency (median, p95), floor's excess in every attempt: {seen}"
        )
    # Percentiles of a uniform delay on [2, 12] ms.
    lat = summary["latency_uncorrected"]
    assert lat["p50"] == pytest.approx(0.007, abs=0.0006)
    assert lat["p90"] == pytest.approx(0.011, abs=0.0006)


def _realised_thinks(requests: pl.DataFrame) -> np.ndarray:
    """Gap between a response and the same user's next request being sent."""
    df = requests.sort("user", "intended_start").with_columns(
        (pl.col("actual_start") - pl.col("end").shift(1)).over("user").alias("think")
    )
    return df["think"].drop_nulls().to_numpy()


@pytest.mark.parametrize(
    ("law", "frozen"),
    [
        ({"dist": "exp", "mean": 0.05}, stats.expon(scale=0.05)),
        ({"dist": "uniform", "low": 0.02, "high": 0.08}, stats.uniform(0.02, 0.06)),
        ({"dist": "lognormal", "mean": 0.05, "scv": 0.5}, None),
    ],
    ids=["exp", "uniform", "lognormal"],
)
def test_think_times_follow_the_configured_law(
    server: TestServer, law: dict[str, float], frozen: stats.rv_continuous | None
) -> None:
    server.set_delay(0.001)
    result = run(server, workload(think_time=law), 40, 4.0)
    thinks = _realised_thinks(result.requests)
    assert thinks.size > 2000
    if frozen is None:  # lognormal with mean m, scv c: sigma² = ln(1 + c), mu = ln m − sigma²/2
        s2 = np.log1p(law["scv"])
        frozen = stats.lognorm(s=np.sqrt(s2), scale=np.exp(np.log(law["mean"]) - s2 / 2))
    ks = stats.kstest(thinks, frozen.cdf)
    assert ks.pvalue > 0.001, ks
    # Realised think times overshoot the drawn ones by timer lateness only (the 2 ms p99 target
    # at 5k req/s is a benchmark; a unit test on a shared machine checks the bulk).
    overshoot = (result.requests["actual_start"] - result.requests["intended_start"]).to_numpy()
    assert np.median(overshoot) < 0.0002
    assert np.quantile(overshoot, 0.95) < 0.002


def test_constant_think_time_is_held_to_the_microsecond(server: TestServer) -> None:
    result = run(server, workload(think_time={"dist": "constant", "mean": 0.01}), 5, 2.0)
    thinks = _realised_thinks(result.requests)
    assert thinks.min() >= 0.010
    assert np.median(thinks) < 0.010 + 0.0002
    assert np.quantile(thinks, 0.95) < 0.010 + 0.002
