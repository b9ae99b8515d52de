"""Markov-chain solver: published cases, agreement with NC and MVA, and its own contract."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import bolch_8_3_network, lazowska_two_class_network, net_from
from tierscope.errors import InputError, UnsupportedModelError
from tierscope.qn import ctmc, nc
from tierscope.qn.network import Network
from tierscope.qn.result import consistency_errors


def _two_class_medium(n1: int, n2: int, stiffness: float = 1.0) -> Network:
    """Two classes, a multi-server queue, a delay and think times (all moves possible)."""
    f = stiffness
    return net_from(
        {
            "stations": [
                {"name": "a"},
                {"name": "b"},
                {"name": "m", "servers": 2},
                {"name": "d", "type": "delay"},
            ],
            "classes": [
                {
                    "name": "x",
                    "population": n1,
                    "think_time": 5.0 * f,
                    "demands": {"a": 1.0 / f, "b": 2.0, "m": 1.5 * f, "d": 3.0},
                },
                {
                    "name": "y",
                    "population": n2,
                    "think_time": 2.0,
                    "demands": {"a": 2.0, "b": 0.5 / f, "m": 1.0},
                },
            ],
        }
    )


def _assert_same(sol: Any, ref: Any, tol: float) -> None:
    np.testing.assert_allclose(sol.throughput, ref.throughput, rtol=tol, atol=tol)
    np.testing.assert_allclose(sol.queue_length_ck, ref.queue_length_ck, rtol=tol, atol=tol)


# --------------------------------------------------------------------------- published cases


def test_bolch_example_8_3() -> None:
    sol = ctmc.solve(bolch_8_3_network())
    assert sol.method == "ctmc"
    assert sol.extra["states"] == math.comb(6 + 3, 3)
    np.testing.assert_allclose(sol.station_throughput, [9.920, 3.968, 1.984, 0.992], atol=1e-3)
    np.testing.assert_allclose(sol.utilization, [0.198, 0.794, 0.794, 0.595], atol=1e-3)
    np.testing.assert_allclose(sol.queue_length, [0.244, 2.261, 2.261, 1.234], atol=1e-3)
    published = [0.2064, 0.1943, 0.1781, 0.1565, 0.1281, 0.0911, 0.0455]
    np.testing.assert_allclose(sol.extra["marginals"]["d1"], published, atol=1e-4)
    for err in consistency_errors(sol).values():
        assert err < 1e-9


def test_lazowska_two_class() -> None:
    sol = ctmc.solve(lazowska_two_class_network())
    np.testing.assert_allclose(sol.throughput, [3 / 19, 2 / 19], rtol=1e-12)
    assert sol.extra["states"] == 4


# --------------------------------------------------------------------------- against NC / MVA


@st.composite
def _small_closed_models(draw: st.DrawFn) -> Network:
    n_stations = draw(st.integers(1, 3))
    kinds = draw(
        st.lists(
            st.sampled_from(["queue", "queue2", "delay", "ld"]),
            min_size=n_stations,
            max_size=n_stations,
        )
    )
    stations: list[dict[str, Any]] = []
    for i, kind in enumerate(kinds):
        s: dict[str, Any] = {"name": f"s{i}"}
        if kind == "queue2":
            s["servers"] = 2
        elif kind == "delay":
            s["type"] = "delay"
        elif kind == "ld":
            s["rates"] = draw(st.lists(st.floats(0.3, 3.0), min_size=1, max_size=3))
        stations.append(s)
    n_classes = draw(st.integers(1, 2))
    classes = []
    for c in range(n_classes):
        visits = {s["name"]: draw(st.sampled_from([0.0, 0.5, 1.0, 2.5])) for s in stations}
        service = {name: draw(st.floats(0.1, 3.0)) for name, v in visits.items() if v > 0}
        think = draw(st.sampled_from([0.0, 0.0, 1.5, 4.0]))
        if not service and think == 0:
            visits[stations[0]["name"]] = 1.0
            service[stations[0]["name"]] = 1.0
        classes.append(
            {
                "name": f"c{c}",
                "population": draw(st.integers(1, 4)),
                "think_time": think,
                "visits": {k: v for k, v in visits.items() if v > 0},
                "service": service,
            }
        )
    return net_from({"stations": stations, "classes": classes})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_small_closed_models())
def test_ctmc_equals_nc_on_random_small_models(net: Network) -> None:
    sol = ctmc.solve(net)
    ref = nc.solve(net)
    _assert_same(sol, ref, 1e-8)
    total = int(net.population.sum())
    for name, marg in sol.extra["marginals"].items():
        assert len(marg) == total + 1
        assert math.isclose(marg.sum(), 1.0, abs_tol=1e-12)
        np.testing.assert_allclose(marg, ref.extra["marginals"][name], atol=1e-9)
    for err in consistency_errors(sol).values():
        assert err < 1e-9


def test_ctmc_equals_exact_mva() -> None:
    from tierscope.qn import mva

    for net in (bolch_8_3_network(), lazowska_two_class_network(), _two_class_medium(3, 2)):
        _assert_same(ctmc.solve(net), mva.solve(net), 1e-8)


@pytest.mark.parametrize("stiffness", [1.0, 100.0])
def test_iterative_solver_on_a_larger_chain(stiffness: float) -> None:
    # 11,760 states: beyond the direct limit of "auto"; rates spread over 1e4 when stiff.
    net = _two_class_medium(6, 5, stiffness)
    assert ctmc.state_count(net) == 11_760
    joint = ctmc.joint_distribution(net)
    assert joint.linear_solver in ("bicgstab", "gmres", "gmres-repinned")
    sol = ctmc.solve(net)
    _assert_same(sol, nc.solve(net), 1e-9)
    assert sol.extra["residual"] <= 1e-11


def test_direct_and_iterative_agree() -> None:
    net = _two_class_medium(3, 3, 10.0)
    direct = ctmc.joint_distribution(net, solver="direct")
    iterative = ctmc.joint_distribution(net, solver="iterative")
    assert direct.linear_solver == "direct"
    np.testing.assert_allclose(direct.probabilities, iterative.probabilities, atol=1e-11)


# --------------------------------------------------------------------------- joint distribution


def test_joint_distribution_is_consistent() -> None:
    net = _two_class_medium(3, 2)
    joint = ctmc.joint_distribution(net)
    assert joint.n_states == ctmc.state_count(net)
    assert math.isclose(joint.probabilities.sum(), 1.0, abs_tol=1e-12)
    assert np.all(joint.probabilities >= 0)
    jobs = joint.counts.sum(axis=2) + joint.thinking
    assert np.all(jobs == net.population[None, :])
    # Every state appears once.
    flat = np.concatenate([joint.counts.reshape(joint.n_states, -1), joint.thinking], axis=1)
    assert np.unique(flat, axis=0).shape[0] == joint.n_states
    # Class y never visits the delay station d.
    assert np.all(joint.counts[:, 1, 3] == 0)


def test_composition_ranking_is_the_enumeration_order() -> None:
    for total, parts in [(0, 3), (3, 1), (5, 3), (4, 4), (7, 2), (2, 6)]:
        comp = ctmc._compositions(total, parts)
        assert comp.shape == (ctmc._n_compositions(total, parts), parts)
        assert np.all(comp.sum(axis=1) == total)
        np.testing.assert_array_equal(ctmc._rank(comp, total), np.arange(comp.shape[0]))


def test_think_time_only_class_and_single_state() -> None:
    net = net_from(
        {
            "stations": [{"name": "a"}],
            "classes": [
                {"name": "idle", "population": 4, "think_time": 2.0, "demands": {}},
                {"name": "busy", "population": 2, "demands": {"a": 1.0}},
            ],
        }
    )
    sol = ctmc.solve(net)
    np.testing.assert_allclose(sol.throughput, [2.0, 1.0], rtol=1e-12)
    assert sol.extra["states"] == 1
    np.testing.assert_allclose(sol.extra["marginals"]["a"], [0, 0, 1, 0, 0, 0, 0])


# --------------------------------------------------------------------------- errors


def test_state_limit_names_the_state_count() -> None:
    net = bolch_8_3_network()
    with pytest.raises(UnsupportedModelError, match=r"this model has 84\b"):
        ctmc.solve(net, max_states=50)
    big = _two_class_medium(20, 20)
    with pytest.raises(UnsupportedModelError, match="max_states"):
        ctmc.solve(big)


def test_open_class_is_rejected() -> None:
    net = net_from(
        {
            "stations": [{"name": "a"}],
            "classes": [
                {"name": "closed", "population": 2, "demands": {"a": 1.0}},
                {"name": "o", "arrival_rate": 0.2, "demands": {"a": 1.0}},
            ],
        }
    )
    with pytest.raises(UnsupportedModelError, match='"exact"'):
        ctmc.solve(net)


@pytest.mark.parametrize(
    ("option", "value"),
    [("max_states", 0), ("max_states", True), ("max_states", 1.5), ("solver", "lu")],
)
def test_bad_options(option: str, value: Any) -> None:
    with pytest.raises(InputError, match=option):
        ctmc.solve(lazowska_two_class_network(), **{option: value})
