"""Huge populations and server counts: answered in bounded memory, or refused with an estimate.

Truths: the asymptotic bound X = m / D_max that any closed network reaches as N grows, the same
model with the many-server station written as a delay, M/M/inf and M/M/1 for open classes, and
the finite-source law evaluated at every n (for the grid that sums its tail).
"""

from __future__ import annotations

import time
import tracemalloc
from typing import Any

import numpy as np
import pytest

from tests.conftest import net_from
from tierscope.errors import InputError, UnsupportedModelError
from tierscope.qn import amva, mva, solve
from tierscope.qn.network import MAX_RATE_LEVELS


def _two_tier(population: int, web: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "stations": [{"name": "web", "servers": 4, **(web or {})}, {"name": "db"}],
        "classes": [
            {
                "name": "users",
                "population": population,
                "think_time": 1.0,
                "demands": {"web": 0.01, "db": 0.02},
            }
        ],
    }


def _peak_bytes(fn: Any) -> tuple[Any, int]:
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("population", [10**9, 10**12])
def test_auto_answers_huge_populations_in_bounded_memory(population: int) -> None:
    net = net_from(_two_tier(population))
    sol, peak = _peak_bytes(lambda: solve(net, "auto"))
    assert sol.method == "linearizer"
    # N/(D+Z) is astronomically above 1/D_max: the db (D = 0.02) is saturated.
    assert sol.throughput[0] == pytest.approx(1 / 0.02, rel=1e-9)
    assert sol.utilization == pytest.approx([50 * 0.01 / 4, 1.0], rel=1e-9)
    assert peak < 50e6  # the population's arrays were 8 bytes per job (8 GB at 10^9)


def test_schweitzer_and_a_rate_law_station_stay_bounded_too() -> None:
    net = net_from(_two_tier(10**9, {"rates": [1.0, 0.9, 0.8]}))
    for method in ("amva", "linearizer"):
        sol, peak = _peak_bytes(lambda method=method: solve(net, method))
        assert sol.throughput[0] == pytest.approx(50.0, rel=1e-6)
        assert 0 < sol.utilization[0] <= 1 and peak < 50e6


def test_exact_refuses_a_huge_lattice_at_once_with_its_estimate() -> None:
    net = net_from(_two_tier(10**9))
    t0 = time.monotonic()
    with pytest.raises(UnsupportedModelError) as err:
        solve(net, "exact")
    assert time.monotonic() - t0 < 5
    text = str(err.value)
    assert "1,000,000,001 population vectors" in text and "linearizer" in text
    cost = mva.exact_cost(net)
    assert cost.vectors == 10**9 + 1 and not cost.feasible()


def test_auto_keeps_exact_where_it_is_quick() -> None:
    net = net_from(_two_tier(50))
    assert mva.exact_cost(net).feasible()
    assert solve(net, "auto").method == "exact-mva"


@pytest.mark.parametrize(("servers", "population"), [(10**9, 20), (10**9, 10**9)])
def test_at_least_as_many_servers_as_jobs_is_a_delay(servers: int, population: int) -> None:
    doc = _two_tier(population)
    doc["stations"][0] = {"name": "web", "servers": servers}
    as_delay = _two_tier(population)
    as_delay["stations"][0] = {"name": "web", "type": "delay"}
    net, ref = net_from(doc), net_from(as_delay)
    method = "exact" if population <= 1000 else "linearizer"
    sol, peak = _peak_bytes(lambda: solve(net, method))
    truth = solve(ref, method)
    assert sol.throughput == pytest.approx(truth.throughput, rel=1e-12)
    assert sol.queue_length == pytest.approx(truth.queue_length, rel=1e-12)
    # utilisation per server: the jobs there divided by the servers
    assert sol.utilization[0] == pytest.approx(truth.queue_length[0] / servers, rel=1e-12)
    assert peak < 50e6


def test_open_class_at_a_station_with_a_billion_servers() -> None:
    net = net_from(
        {
            "stations": [{"name": "pool", "servers": 10**9}, {"name": "db"}],
            "classes": [{"name": "c", "arrival_rate": 20.0, "demands": {"pool": 0.5, "db": 0.02}}],
        }
    )
    sol = solve(net, "auto")
    rho = 20 * 0.02
    assert sol.queue_length == pytest.approx(
        [20 * 0.5, rho / (1 - rho)], rel=1e-12
    )  # M/M/inf, M/M/1


def test_many_servers_with_rates_are_cut_at_the_population() -> None:
    """2 million servers with a rate law and 40 jobs: the law beyond 40 never matters, so the
    result is that of 40 servers; only the per-server utilisation differs (capacity m r_last)."""
    many, few = _two_tier(40, {"servers": 2 * 10**6}), _two_tier(40, {"servers": 40})
    for doc in (many, few):
        doc["stations"][0]["rates"] = [1.0, 0.5]
    net = net_from(many)
    assert net.alpha[0].size == 40
    sol, ref = solve(net, "exact"), solve(net_from(few), "exact")
    assert sol.throughput == pytest.approx(ref.throughput, rel=1e-12)
    assert sol.utilization[0] == pytest.approx(ref.utilization[0] * 40 / 2e6, rel=1e-9)
    with pytest.raises(InputError, match="at most 40 jobs"):
        net.with_population([41])


def test_too_many_servers_for_the_jobs_is_refused_by_field() -> None:
    with pytest.raises(InputError, match=r"stations\[0\]\.servers"):
        net_from(_two_tier(10**9, {"servers": 2 * MAX_RATE_LEVELS}))


def test_finite_source_tail_grid_matches_the_law_at_every_n(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A rate-law station near its knee, so the busy share depends on the whole distribution.
    net = net_from(
        {
            "stations": [{"name": "db", "servers": 4, "rates": [1.0, 0.9, 0.8]}, {"name": "w"}],
            "classes": [
                {"name": "u", "population": 3000, "think_time": 1.4, "demands": {"db": 1e-3}}
            ],
        }
    )
    Q = np.array([[3.1, 0.0]])
    dense = amva._rate_law_marginals(net, Q)["db"]  # 3001 <= 4096: every n evaluated
    monkeypatch.setattr(amva, "_DENSE_LEVELS", 16)
    head = amva._rate_law_marginals(net, Q)["db"]  # n > 16 summed on the grid
    assert head.size == 17
    assert head == pytest.approx(dense[:17], rel=1e-6, abs=1e-12)


def test_ctmc_refuses_many_jobs_even_with_few_states() -> None:
    # one station, no think time: a chain of one state, but marginals of N + 1 entries
    net = net_from(
        {
            "stations": [{"name": "s"}],
            "classes": [{"name": "c", "population": 10**12, "demands": {"s": 0.02}}],
        }
    )
    with pytest.raises(UnsupportedModelError, match="fewer jobs than max_states"):
        solve(net, "ctmc")
