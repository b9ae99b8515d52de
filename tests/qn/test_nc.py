"""Normalising-constant solver against published examples and independent closed forms."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from scipy.special import gammaln, logsumexp

from tests.conftest import bolch_8_3_network, net_from
from tierscope.errors import InputError, UnsupportedModelError
from tierscope.qn import nc
from tierscope.qn.network import Network
from tierscope.qn.result import consistency_errors


def _assert_consistent(sol: Any, tol: float = 1e-9) -> None:
    for law, err in consistency_errors(sol).items():
        assert err < tol, law


def _mva_li(D: np.ndarray, is_delay: np.ndarray, N: int, Z: float) -> tuple[float, np.ndarray]:
    """Single-class exact MVA for load-independent stations (means only: no overflow)."""
    Q = np.zeros(D.size)
    X = 0.0
    for n in range(1, N + 1):
        R = np.where(is_delay, D, D * (1.0 + Q))
        X = n / (Z + R.sum())
        Q = X * R
    return X, Q


# --------------------------------------------------------------------------- published cases


def test_bolch_example_8_3_measures() -> None:
    sol = nc.solve(bolch_8_3_network())
    assert sol.method == "nc"
    np.testing.assert_allclose(sol.station_throughput, [9.920, 3.968, 1.984, 0.992], atol=1e-3)
    np.testing.assert_allclose(sol.utilization, [0.198, 0.794, 0.794, 0.595], atol=1e-3)
    np.testing.assert_allclose(sol.queue_length, [0.244, 2.261, 2.261, 1.234], atol=1e-3)
    _assert_consistent(sol)


def test_bolch_example_8_3_marginal_of_second_station() -> None:
    sol = nc.solve(bolch_8_3_network())
    p = sol.extra["marginals"]["d1"]
    published = [0.2064, 0.1943, 0.1781, 0.1565, 0.1281, 0.0911, 0.0455]
    np.testing.assert_allclose(p, published, atol=1e-4)
    for name in sol.network.station_names:
        marg = sol.extra["marginals"][name]
        assert len(marg) == 7
        assert math.isclose(marg.sum(), 1.0, abs_tol=1e-12)
        k = sol.station(name)
        assert math.isclose(marg @ np.arange(7), sol.queue_length[k], rel_tol=1e-10)


def test_jain_central_server_with_think_time(jain_central_server: Network) -> None:
    net = jain_central_server
    sol = nc.solve(net)
    assert sol.throughput[0] == pytest.approx(0.33325, abs=5e-6)
    _assert_consistent(sol)


def test_lazowska_two_class_single_job_each() -> None:
    net = net_from(
        {
            "stations": [{"name": "s1"}, {"name": "s2"}],
            "classes": [
                {"name": "A", "population": 1, "demands": {"s1": 1, "s2": 3}},
                {"name": "B", "population": 1, "demands": {"s1": 2, "s2": 4}},
            ],
        }
    )
    sol = nc.solve(net)
    np.testing.assert_allclose(sol.throughput, [3 / 19, 2 / 19], rtol=1e-12)
    _assert_consistent(sol)
    # Two jobs in total: the marginals of the total number run over 0..2.
    for marg in sol.extra["marginals"].values():
        assert len(marg) == 3 and math.isclose(marg.sum(), 1.0, abs_tol=1e-12)


# --------------------------------------------------------------------------- closed forms


def _repairman(N: int, Z: float, S: float, alpha: np.ndarray) -> tuple[float, float, np.ndarray]:
    """M/M/m//N with rate multipliers alpha(j): p(n) ~ Z^(N-n)/(N-n)! * S^n / prod alpha(j)."""
    n = np.arange(N + 1)
    log_a = np.concatenate([[0.0], np.cumsum(np.log(alpha[np.minimum(n[1:], alpha.size) - 1]))])
    log_p = (N - n) * math.log(Z) - gammaln(N - n + 1.0) + n * math.log(S) - log_a
    p = np.exp(log_p - logsumexp(log_p))
    rate = np.concatenate([[0.0], alpha[np.minimum(n[1:], alpha.size) - 1]]) / S
    return float(p @ rate), float(p @ n), p


@pytest.mark.parametrize("as_think_time", [False, True])
@pytest.mark.parametrize(
    ("servers", "rates"), [(1, None), (3, None), (2, [1.0, 1.5, 1.8]), (1, [1.0, 0.7])]
)
def test_machine_repairman_closed_form(
    servers: int, rates: list[float] | None, as_think_time: bool
) -> None:
    N, Z, S = 9, 12.0, 2.5
    repair: dict[str, Any] = {"name": "repair", "servers": servers}
    if rates is not None:
        repair["rates"] = rates
    stations = [repair]
    cls: dict[str, Any] = {"name": "machines", "population": N, "demands": {"repair": S}}
    if as_think_time:
        cls["think_time"] = Z
    else:
        stations.append({"name": "up", "type": "delay"})
        cls["demands"]["up"] = Z
    net = net_from({"stations": stations, "classes": [cls]})
    X, Q, p = _repairman(N, Z, S, net.alpha[0])
    sol = nc.solve(net)
    assert sol.throughput[0] == pytest.approx(X, rel=1e-12)
    assert sol.queue_length[0] == pytest.approx(Q, rel=1e-12)
    np.testing.assert_allclose(sol.extra["marginals"]["repair"], p, rtol=1e-10, atol=1e-15)
    if not as_think_time:
        assert sol.queue_length[1] == pytest.approx(N - Q, rel=1e-12)
    _assert_consistent(sol)


def test_log_g_matches_two_station_closed_form() -> None:
    # G(n) = sum_j D1^j D2^(n-j) = (D1^(n+1) - D2^(n+1)) / (D1 - D2).
    d1, d2, N = 0.7, 0.3, 12
    net = net_from(
        {
            "stations": [{"name": "a"}, {"name": "b"}],
            "classes": [{"name": "c", "population": N, "demands": {"a": d1, "b": d2}}],
        }
    )
    n = np.arange(N + 1)
    expected = np.log((d1 ** (n + 1) - d2 ** (n + 1)) / (d1 - d2))
    np.testing.assert_allclose(nc.log_normalizing_constant(net), expected, rtol=1e-13, atol=1e-15)
    assert nc.solve(net).extra["log_G"] == pytest.approx(expected[-1], rel=1e-13)


def test_multiclass_log_g_matches_brute_force() -> None:
    # Two classes, one queue shared by both, one 2-server queue, one delay: sum the product
    # form over every way to place the jobs.
    D = np.array([[0.5, 1.2, 2.0], [1.5, 0.4, 0.7]])
    N = (2, 3)
    net = net_from(
        {
            "stations": [
                {"name": "q"},
                {"name": "m", "servers": 2},
                {"name": "z", "type": "delay"},
            ],
            "classes": [
                {
                    "name": f"c{c}",
                    "population": N[c],
                    "demands": dict(zip("qmz", D[c], strict=True)),
                }
                for c in range(2)
            ],
        }
    )
    alpha_m = np.array([1.0, 2.0])

    def factor(k: int, n: tuple[int, int]) -> float:
        tot = sum(n)
        if k == 2:
            return math.prod(D[c, k] ** n[c] / math.factorial(n[c]) for c in range(2))
        f = math.factorial(tot) / math.prod(math.factorial(x) for x in n)
        f *= math.prod(D[c, k] ** n[c] for c in range(2))
        if k == 1:
            f /= math.prod(alpha_m[min(j, 2) - 1] for j in range(1, tot + 1))
        return f

    G = 0.0
    Q = np.zeros((2, 3))
    for a0 in range(N[0] + 1):
        for b0 in range(N[0] - a0 + 1):
            for a1 in range(N[1] + 1):
                for b1 in range(N[1] - a1 + 1):
                    place = [(a0, a1), (b0, b1), (N[0] - a0 - b0, N[1] - a1 - b1)]
                    w = math.prod(factor(k, place[k]) for k in range(3))
                    G += w
                    Q += w * np.array(place).T
    sol = nc.solve(net)
    assert sol.extra["log_G"] == pytest.approx(math.log(G), rel=1e-13)
    np.testing.assert_allclose(sol.queue_length_ck, Q / G, rtol=1e-11)
    _assert_consistent(sol)


# --------------------------------------------------------------------------- numerical range


def _stress_network(with_multiserver: bool) -> tuple[Network, np.ndarray]:
    rng = np.random.default_rng(20240611)
    D = rng.uniform(10.0, 1000.0, size=6)
    stations: list[dict[str, Any]] = [{"name": f"s{i}"} for i in range(D.size)]
    demands = {f"s{i}": float(d) for i, d in enumerate(D)}
    stations.append({"name": "lan", "type": "delay"})
    demands["lan"] = 25.0
    if with_multiserver:
        stations.append({"name": "pool", "servers": 4})
        demands["pool"] = 2_000.0
    cls = {"name": "batch", "population": 5_000, "think_time": 100.0, "demands": demands}
    return net_from({"stations": stations, "classes": [cls]}), D


def test_large_population_and_demands_do_not_overflow() -> None:
    net, D = _stress_network(with_multiserver=False)
    sol = nc.solve(net)
    # G(N) is about Dmax^N = 10^15000: far outside the float range, fine as a logarithm.
    assert np.isfinite(sol.extra["log_G"]) and sol.extra["log_G"] > 1_000
    x = sol.throughput[0]
    assert np.isfinite(x) and x <= 1 / D.max() * (1 + 1e-12)
    assert x == pytest.approx(1 / D.max(), rel=1e-6)  # deep in saturation
    x_mva, Q_mva = _mva_li(net.demands[0], net.is_delay, 5_000, 100.0)
    assert x == pytest.approx(x_mva, rel=1e-9)
    np.testing.assert_allclose(sol.queue_length_ck[0], Q_mva, rtol=1e-8, atol=1e-9)
    for marg in sol.extra["marginals"].values():
        assert np.all(np.isfinite(marg)) and math.isclose(marg.sum(), 1.0, abs_tol=1e-9)
    _assert_consistent(sol, tol=1e-7)


def test_large_population_multiserver_agrees_with_exact_mva() -> None:
    from tierscope.qn import mva

    for with_multiserver in (False, True):
        net, _ = _stress_network(with_multiserver)
        sol = nc.solve(net)
        ref = mva.solve(net)
        np.testing.assert_allclose(sol.throughput, ref.throughput, rtol=1e-8)
        np.testing.assert_allclose(sol.queue_length_ck, ref.queue_length_ck, rtol=1e-7, atol=1e-8)


def test_many_classes_small_populations() -> None:
    # Four classes on a 6 x 5 x 4 x 3 lattice, all sharing a load-dependent queue.
    pops = [5, 4, 3, 2]
    rng = np.random.default_rng(7)
    D = rng.uniform(0.1, 2.0, size=(4, 3))
    net = net_from(
        {
            "stations": [
                {"name": "a"},
                {"name": "b", "servers": 3},
                {"name": "z", "type": "delay"},
            ],
            "classes": [
                {
                    "name": f"c{c}",
                    "population": pops[c],
                    "demands": dict(zip("abz", D[c], strict=True)),
                }
                for c in range(4)
            ],
        }
    )
    sol = nc.solve(net)
    _assert_consistent(sol)
    for marg in sol.extra["marginals"].values():
        assert len(marg) == sum(pops) + 1 and math.isclose(marg.sum(), 1.0, abs_tol=1e-12)


# --------------------------------------------------------------------------- edges and errors


def test_zero_population_and_unvisited_station() -> None:
    net = net_from(
        {
            "stations": [{"name": "a"}, {"name": "idle"}],
            "classes": [
                {"name": "x", "population": 0, "demands": {"a": 1.0}},
                {"name": "y", "population": 3, "demands": {"a": 2.0}},
            ],
        }
    )
    sol = nc.solve(net)
    assert sol.throughput[0] == 0.0
    assert sol.throughput[1] == pytest.approx(0.5)
    np.testing.assert_allclose(sol.queue_length_ck, [[0, 0], [3, 0]], atol=1e-12)
    np.testing.assert_allclose(sol.extra["marginals"]["idle"], [1, 0, 0, 0])
    np.testing.assert_allclose(sol.extra["marginals"]["a"], [0, 0, 0, 1], atol=1e-12)


def test_think_time_only_class() -> None:
    net = net_from(
        {
            "stations": [{"name": "a"}],
            "classes": [
                {"name": "idle", "population": 4, "think_time": 2.0, "demands": {}},
                {"name": "busy", "population": 2, "demands": {"a": 1.0}},
            ],
        }
    )
    sol = nc.solve(net)
    np.testing.assert_allclose(sol.throughput, [2.0, 1.0], rtol=1e-12)


def test_open_class_is_rejected() -> None:
    net = net_from(
        {
            "stations": [{"name": "a"}],
            "classes": [{"name": "o", "arrival_rate": 0.5, "demands": {"a": 1.0}}],
        }
    )
    with pytest.raises(UnsupportedModelError, match='"open"'):
        nc.solve(net)


def test_lattice_limit_and_options() -> None:
    net = bolch_8_3_network()
    with pytest.raises(UnsupportedModelError, match=r"has 7\)"):
        nc.solve(net, max_lattice=5)
    with pytest.raises(InputError, match="max_lattice"):
        nc.solve(net, max_lattice=0)
    with pytest.raises(InputError, match="max_lattice"):
        nc.solve(net, max_lattice=2.5)  # type: ignore[arg-type]


def test_class_without_demand_or_think_time_is_rejected() -> None:
    # Its throughput would be unbounded: the model file itself is refused, before any solver.
    with pytest.raises(InputError, match="lost"):
        net_from(
            {
                "stations": [{"name": "a"}],
                "classes": [
                    {"name": "ok", "population": 1, "demands": {"a": 1.0}},
                    {"name": "lost", "population": 2, "demands": {}},
                ],
            }
        )


def test_to_dict_is_json_ready() -> None:
    import json

    out = nc.solve(bolch_8_3_network()).to_dict()
    text = json.dumps(out)
    assert '"marginals"' in text and '"log_G"' in text
