"""Open product-form networks against published values and textbook closed forms."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import net_from
from tierscope.errors import InputError, UnstableError
from tierscope.qn import open as open_solver
from tierscope.qn.result import consistency_errors


def test_bolch_example_7_4_jackson_network() -> None:
    net = net_from(
        {
            "stations": [{"name": n} for n in ("s1", "s2", "s3", "s4")],
            "classes": [
                {
                    "name": "jobs",
                    "arrival_rate": 4.0,
                    "entry": {"s4": 1.0},
                    "routing": {
                        "s1": {"s2": 0.5, "s3": 0.5},
                        "s2": {"s1": 1.0},
                        "s3": {"s1": 0.6},
                        "s4": {"s1": 1.0},
                    },
                    "service": {"s1": 0.04, "s2": 0.03, "s3": 0.06, "s4": 0.05},
                }
            ],
        }
    )
    sol = open_solver.solve(net)
    np.testing.assert_allclose(sol.station_throughput, [20, 10, 10, 4], rtol=1e-12)
    np.testing.assert_allclose(sol.queue_length, [4, 0.429, 1.5, 0.25], atol=1e-3)
    assert max(consistency_errors(sol).values()) < 1e-12


def test_mm2_erlang_c_textbook() -> None:
    # M/M/2, lambda = 1, S = 1: P(wait) = 1/3, W = S + C/(m mu - lambda) = 4/3.
    net = net_from(
        {
            "stations": [{"name": "q", "servers": 2}],
            "classes": [{"name": "c", "arrival_rate": 1.0, "demands": {"q": 1.0}}],
        }
    )
    sol = open_solver.solve(net)
    assert sol.response_time[0] == pytest.approx(4 / 3, rel=1e-12)
    assert sol.utilization[0] == pytest.approx(0.5)


def test_many_servers_do_not_overflow() -> None:
    # M/M/500 at 98 % load: Erlang C by the stable recursion gives the reference.
    lam, S, m = 490.0, 1.0, 500
    b = 1.0
    for j in range(1, m + 1):
        b = lam * S * b / (j + lam * S * b)
    C = b / (1 - 0.98 * (1 - b))
    W = S + C / (m / S - lam)
    net = net_from(
        {
            "stations": [{"name": "q", "servers": m}],
            "classes": [{"name": "c", "arrival_rate": lam, "demands": {"q": S}}],
        }
    )
    assert open_solver.solve(net).response_time[0] == pytest.approx(W, rel=1e-10)


def test_multiclass_shares_station_population_by_offered_work() -> None:
    net = net_from(
        {
            "stations": [{"name": "cpu"}, {"name": "think", "type": "delay"}],
            "classes": [
                {"name": "a", "arrival_rate": 1.0, "demands": {"cpu": 0.2, "think": 3.0}},
                {"name": "b", "arrival_rate": 2.0, "demands": {"cpu": 0.1}},
            ],
        }
    )
    sol = open_solver.solve(net)
    # rho = 0.4; each class's residence at a PS/FCFS single server is D / (1 - rho)
    np.testing.assert_allclose(sol.residence_time_ck[:, 0], [0.2 / 0.6, 0.1 / 0.6], rtol=1e-12)
    assert sol.residence_time_ck[0, 1] == pytest.approx(3.0)
    assert sol.utilization[1] == pytest.approx(3.0)  # delay: mean number busy


def test_unstable_network_names_the_station() -> None:
    net = net_from(
        {
            "stations": [{"name": "fast"}, {"name": "slow"}],
            "classes": [{"name": "c", "arrival_rate": 2.0, "demands": {"fast": 0.1, "slow": 0.5}}],
        }
    )
    with pytest.raises(UnstableError, match="slow"):
        open_solver.solve(net)


def test_open_routing_that_never_leaves_is_rejected() -> None:
    with pytest.raises(InputError, match="routing"):
        net_from(
            {
                "stations": [{"name": "a"}, {"name": "b"}],
                "classes": [
                    {
                        "name": "c",
                        "arrival_rate": 1.0,
                        "entry": {"a": 1.0},
                        "routing": {"a": {"b": 1.0}, "b": {"a": 1.0}},
                        "service": {"a": 0.1, "b": 0.1},
                    }
                ],
            }
        )
