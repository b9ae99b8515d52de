"""Fork-join and quorum formulas against simulation and closed forms."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierscope.errors import InputError, UnstableError
from tierscope.qn.forkjoin import (
    exp_order_stat_mean,
    harmonic,
    nelson_tantawi_2way,
    nelson_tantawi_kway,
    quorum_fork_join_mm1,
    quorum_wait,
)


def _mm1_sojourns(arrivals_gap: np.ndarray, service: np.ndarray) -> np.ndarray:
    """FCFS sojourn times by Lindley's recursion, vectorised as a reflected random walk.

    W_0 = 0, W_n = max(0, W_{n-1} + S_{n-1} - A_n) equals P_n - min_{j<=n} P_j with P the
    partial sums of S_{j-1} - A_j (P_0 = 0).
    """
    steps = service[:-1] - arrivals_gap[1:]
    walk = np.concatenate([[0.0], np.cumsum(steps)])
    wait = walk - np.minimum.accumulate(walk)
    return wait + service


def _simulate_fork_join(lam: float, mus: list[float], k: int, jobs: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1.0 / lam, jobs)
    soj = np.stack([_mm1_sojourns(gaps, rng.exponential(1.0 / mu, jobs)) for mu in mus])
    done = np.sort(soj, axis=0)[k - 1]
    return float(done[jobs // 10 :].mean())  # drop warm-up from an empty system


# --------------------------------------------------------------------------- Nelson-Tantawi


@pytest.mark.parametrize("rho", [0.3, 0.5, 0.7])
def test_two_way_matches_simulation(rho: float) -> None:
    mu = 1.0
    sim = _simulate_fork_join(rho * mu, [mu, mu], 2, 200_000, seed=int(rho * 100))
    assert nelson_tantawi_2way(rho * mu, mu) == pytest.approx(sim, rel=0.03)


def test_two_way_closed_form() -> None:
    assert nelson_tantawi_2way(0.5, 1.0) == pytest.approx(11.5 / 8 / 0.5)
    assert nelson_tantawi_2way(0.0, 2.0) == pytest.approx(0.75)  # E[max of two Exp(2)]


def test_kway_special_cases() -> None:
    assert nelson_tantawi_kway(0.4, 1.0, 1) == pytest.approx(1 / 0.6)
    assert nelson_tantawi_kway(0.4, 1.0, 2) == pytest.approx(nelson_tantawi_2way(0.4, 1.0))
    # rho -> 0: the max of k independent Exp(mu) has mean H_k / mu
    assert nelson_tantawi_kway(0.0, 2.0, 8) == pytest.approx(harmonic(8) / 2.0)


def test_kway_within_five_percent_of_simulation() -> None:
    sim = _simulate_fork_join(0.5, [1.0] * 4, 4, 200_000, seed=7)
    assert nelson_tantawi_kway(0.5, 1.0, 4) == pytest.approx(sim, rel=0.05)


def test_independence_is_upper_bound_for_full_join() -> None:
    lam, mu = 0.7, 1.0
    assert quorum_fork_join_mm1(lam, [mu, mu], 2) > nelson_tantawi_2way(lam, mu)
    sim = _simulate_fork_join(lam, [1.0, 1.5, 2.0], 3, 1_000_000, seed=3)  # gap ~3%
    assert quorum_fork_join_mm1(lam, [1.0, 1.5, 2.0], 3) > sim
    # and a lower bound for k = 1
    sim1 = _simulate_fork_join(lam, [1.0, 1.5, 2.0], 1, 200_000, seed=4)  # gap ~15%
    assert quorum_fork_join_mm1(lam, [1.0, 1.5, 2.0], 1) < sim1


# --------------------------------------------------------------------------- order statistics


def test_order_stat_closed_forms() -> None:
    a, b = 1.0, 3.0
    assert exp_order_stat_mean([a, b], 2) == pytest.approx(1 / a + 1 / b - 1 / (a + b))
    assert exp_order_stat_mean([a, b], 1) == pytest.approx(1 / (a + b))
    rates = [0.5, 1.0, 2.0, 4.0]
    assert exp_order_stat_mean(rates, 1) == pytest.approx(1 / sum(rates))
    assert exp_order_stat_mean([2.0] * 5, 3) == pytest.approx((1 / 5 + 1 / 4 + 1 / 3) / 2.0)
    assert exp_order_stat_mean([2.0] * 5, 5) == pytest.approx(harmonic(5) / 2.0)


def _max_inclusion_exclusion(rates: list[float]) -> float:
    """E[max] = sum over non-empty subsets of (-1)^(|A|+1) / sum(A)."""
    n, total = len(rates), 0.0
    for mask in range(1, 1 << n):
        sub = [rates[i] for i in range(n) if mask >> i & 1]
        total += (-1) ** (len(sub) + 1) / sum(sub)
    return total


def test_max_matches_inclusion_exclusion() -> None:
    rates = [0.3, 0.7, 1.1, 2.0, 5.0, 9.0]
    expected = _max_inclusion_exclusion(rates)
    assert exp_order_stat_mean(rates, 6) == pytest.approx(expected, rel=1e-12)
    assert exp_order_stat_mean(rates, 6, method="integrate") == pytest.approx(expected, rel=1e-8)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_order_stat_monte_carlo(k: int) -> None:
    rates = np.array([1.0, 2.0, 3.0, 5.0, 5.0])
    rng = np.random.default_rng(k)
    draws = np.sort(rng.exponential(1.0 / rates, size=(400_000, rates.size)), axis=1)[:, k - 1]
    stderr = draws.std() / math.sqrt(draws.size)
    assert abs(exp_order_stat_mean(rates, k) - draws.mean()) < 4 * stderr


def test_integration_path_large_n() -> None:
    rng = np.random.default_rng(11)
    rates = rng.uniform(0.5, 4.0, 40)  # 2^40 race states: auto must integrate
    draws = np.sort(rng.exponential(1.0 / rates, size=(100_000, 40)), axis=1)[:, 29]
    stderr = draws.std() / math.sqrt(draws.size)
    assert abs(exp_order_stat_mean(rates, 30) - draws.mean()) < 4 * stderr


def test_grouped_rates_stay_exact_for_large_n() -> None:
    rates = [1.0] * 100 + [3.0] * 100  # 101^2 states: exact
    exact = exp_order_stat_mean(rates, 150)
    assert exact == pytest.approx(exp_order_stat_mean(rates, 150, method="integrate"), rel=1e-8)


@settings(max_examples=60, deadline=None)
@given(
    rates=st.lists(st.floats(0.05, 20.0), min_size=2, max_size=9),
    data=st.data(),
)
def test_exact_equals_integration(rates: list[float], data: st.DataObject) -> None:
    k = data.draw(st.integers(1, len(rates)))
    exact = exp_order_stat_mean(rates, k, method="exact")
    assert exact == pytest.approx(exp_order_stat_mean(rates, k, method="integrate"), rel=1e-7)
    if k > 1:  # strictly increasing in k
        assert exact > exp_order_stat_mean(rates, k - 1)


# --------------------------------------------------------------------------- quorum


def test_quorum_wait_uses_means() -> None:
    assert quorum_wait([1.0, 2.0], 2) == pytest.approx(exp_order_stat_mean([1.0, 0.5], 2))
    assert quorum_wait([4.0, 4.0, 4.0], 1) == pytest.approx(4.0 / 3.0)


def test_quorum_fork_join_single_branch_is_mm1() -> None:
    assert quorum_fork_join_mm1(0.5, [2.0], 1) == pytest.approx(1 / 1.5)
    # QUORUM of replication factor 3
    assert quorum_fork_join_mm1(1.0, [3.0, 3.0, 3.0], 2) == pytest.approx((1 / 3 + 1 / 2) / 2.0)


@pytest.mark.parametrize(
    ("call", "field", "unstable"),
    [
        (lambda: nelson_tantawi_2way(1.0, 1.0), "arrival_rate", True),
        (lambda: nelson_tantawi_kway(0.5, 0.0, 3), "service_rate", False),
        (lambda: nelson_tantawi_kway(0.5, 1.0, 0), "k", False),
        (lambda: exp_order_stat_mean([], 1), "rates", False),
        (lambda: exp_order_stat_mean([1.0, -1.0], 1), "rates", False),
        (lambda: exp_order_stat_mean([1.0, math.nan], 1), "rates", False),
        (lambda: exp_order_stat_mean([1.0, 2.0], 3), "k", False),
        (lambda: exp_order_stat_mean([1.0, 2.0], 1.5), "k", False),
        (lambda: exp_order_stat_mean([1.0, 2.0], 1, method="magic"), "method", False),
        (lambda: quorum_wait([1.0, 0.0], 1), "response_time_means", False),
        (lambda: quorum_fork_join_mm1(2.0, [3.0, 2.0], 1), "arrival_rate", True),
        (lambda: quorum_fork_join_mm1(1.0, "abc", 1), "service_rates", False),
    ],
)
def test_invalid_inputs(call: object, field: str, unstable: bool) -> None:
    with pytest.raises(InputError) as info:
        call()  # type: ignore[operator]
    assert info.value.field == field
    assert isinstance(info.value, UnstableError) == unstable
