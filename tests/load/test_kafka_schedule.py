"""The Kafka producers' open schedule (tierscope.load.kafka_worker.schedule) against closed
forms: the expected count of a ramped rate, Poisson counts and gaps, even spacing."""

from __future__ import annotations

import numpy as np

from tierscope.load._records import schedule


def test_ramped_rate_has_the_expected_count_and_shape() -> None:
    rate, up, steady, down = 400.0, 4.0, 10.0, 2.0
    expected = rate * (up / 2 + steady + down / 2)  # 5200
    t = schedule(rate, up, steady, down, arrivals="uniform", seed=1)
    assert abs(t.size - expected) <= 1
    assert np.all(np.diff(t) > 0) and t[0] >= 0 and t[-1] <= up + steady + down
    # a linear ramp: the first half of it holds a quarter of its messages
    assert abs((t < up / 2).sum() - rate * up / 8) <= 2
    steady_gaps = np.diff(t[(t > up) & (t < up + steady)])
    assert np.allclose(steady_gaps, 1 / rate, rtol=1e-2)
    counts = [schedule(rate, up, steady, down, arrivals="poisson", seed=s).size for s in range(40)]
    assert abs(np.mean(counts) - expected) < 4 * np.sqrt(expected / 40)
    assert 0.6 * expected < np.var(counts) < 1.6 * expected  # Poisson: variance = mean


def test_a_count_at_a_constant_rate() -> None:
    t = schedule(2000.0, 0, 0, 0, arrivals="poisson", seed=3, count=50_000)
    gaps = np.diff(t)
    assert t.size == 50_000
    assert abs(gaps.mean() - 1 / 2000) < 0.02 / 2000
    assert abs(gaps.std() / gaps.mean() - 1) < 0.03  # exponential gaps: CV 1
    even = schedule(100.0, 0, 0, 0, arrivals="uniform", seed=3, count=10)
    assert np.allclose(even, np.arange(10) / 100)
