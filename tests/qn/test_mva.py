"""Exact MVA (closed and mixed) against published results and independent closed forms."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from tests.conftest import net_from
from tierscope.errors import UnstableError, UnsupportedModelError
from tierscope.qn import mva
from tierscope.qn.network import Network
from tierscope.qn.result import consistency_errors


def test_bolch_example_8_3(bolch_8_3: Network) -> None:
    sol = mva.solve(bolch_8_3)
    assert sol.method == "exact-mva"
    np.testing.assert_allclose(sol.utilization, [0.198, 0.794, 0.794, 0.595], atol=1e-3)
    np.testing.assert_allclose(sol.station_throughput, [9.920, 3.968, 1.984, 0.992], atol=1e-3)
    np.testing.assert_allclose(sol.queue_length, [0.244, 2.261, 2.261, 1.234], atol=1e-3)


def test_jain_central_server(jain_central_server: Network) -> None:
    sol = mva.solve(jain_central_server)
    assert sol.throughput[0] == pytest.approx(0.33325, abs=1e-5)
    assert sol.response_time[0] == pytest.approx(56.016, abs=1e-3)
    np.testing.assert_allclose(sol.utilization, [0.667, 0.9997, 0.333], atol=1e-3)


def test_lazowska_two_classes(lazowska_two_class: Network) -> None:
    sol = mva.solve(lazowska_two_class)
    np.testing.assert_allclose(sol.throughput, [3 / 19, 2 / 19], rtol=1e-12)


def _repairman(m: int, N: int, D: float, Z: float) -> tuple[float, float]:
    """Finite-source M/M/m//N (machine repairman): throughput and mean number at the queue.

    p(n) is proportional to N!/(N-n)! (D/Z)^n / prod_{j<=n} min(j, m); computed in logs.
    """
    logs = []
    for n in range(N + 1):
        lp = math.lgamma(N + 1) - math.lgamma(N - n + 1) + n * math.log(D / Z)
        lp -= sum(math.log(min(j, m)) for j in range(1, n + 1))
        logs.append(lp)
    a = np.array(logs)
    p = np.exp(a - a.max())
    p /= p.sum()
    n = np.arange(N + 1)
    busy = np.minimum(n, m) @ p
    return float(busy / D), float(n @ p)


@pytest.mark.parametrize(
    ("m", "N", "D", "Z"), [(4, 30, 1.0, 5.0), (8, 200, 1.0, 0.5), (1, 50, 2, 30)]
)
def test_multiserver_matches_machine_repairman(m: int, N: int, D: float, Z: float) -> None:
    net = net_from(
        {
            "stations": [{"name": "q", "servers": m}],
            "classes": [{"name": "c", "population": N, "think_time": Z, "demands": {"q": D}}],
        }
    )
    sol = mva.solve(net)
    X, Q = _repairman(m, N, D, Z)
    assert sol.throughput[0] == pytest.approx(X, rel=1e-9)
    assert sol.queue_length[0] == pytest.approx(Q, rel=1e-9)


def test_rates_equal_servers() -> None:
    def model(station: dict) -> Network:
        return net_from(
            {
                "stations": [{"name": "q", **station}, {"name": "d"}],
                "classes": [{"name": "c", "population": 25, "demands": {"q": 0.9, "d": 0.2}}],
            }
        )

    a = mva.solve(model({"servers": 3}))
    b = mva.solve(model({"rates": [1, 2, 3]}))
    np.testing.assert_allclose(a.throughput, b.throughput, rtol=1e-12)
    np.testing.assert_allclose(a.queue_length_ck, b.queue_length_ck, rtol=1e-12)


def _enumerate(D: np.ndarray, alphas: list[list[float]], N: tuple[int, ...]):
    """G(N) and sum of n * weight over every state of the product form (independent of MVA)."""
    C, M = D.shape
    splits = [
        [s for s in itertools.product(range(N[c] + 1), repeat=M) if sum(s) == N[c]]
        for c in range(C)
    ]
    G = 0.0
    Qacc = np.zeros((C, M))
    for combo in itertools.product(*splits):
        n = np.array(combo)  # [C, M]
        w = 1.0
        for k in range(M):
            tot = int(n[:, k].sum())
            w *= math.factorial(tot) / math.prod(math.factorial(int(x)) for x in n[:, k])
            w *= math.prod(D[c, k] ** n[c, k] for c in range(C))
            a = alphas[k]
            w /= math.prod(a[min(j, len(a)) - 1] for j in range(1, tot + 1))
        G += w
        Qacc += w * n
    return G, Qacc


def _brute_force_closed(D: np.ndarray, alphas: list[list[float]], N: tuple[int, ...]):
    """Throughputs X_c = G(N - e_c)/G(N) and mean queue lengths by enumeration."""
    G, Qacc = _enumerate(D, alphas, N)
    X = np.zeros(len(N))
    for c in range(len(N)):
        if N[c] > 0:
            X[c] = _enumerate(D, alphas, tuple(n - (i == c) for i, n in enumerate(N)))[0] / G
    return X, Qacc / G


def test_multiclass_multiserver_matches_enumeration() -> None:
    D = np.array([[0.5, 1.2, 0.3], [0.9, 0.4, 0.8]])
    net = net_from(
        {
            "stations": [
                {"name": "a", "servers": 2},
                {"name": "b"},
                {"name": "c", "rates": [1, 1.5]},
            ],
            "classes": [
                {"name": "x", "population": 3, "demands": dict(zip("abc", D[0], strict=True))},
                {"name": "y", "population": 2, "demands": dict(zip("abc", D[1], strict=True))},
            ],
        }
    )
    sol = mva.solve(net)
    X, Q = _brute_force_closed(D, [[1, 2], [1], [1, 1.5]], (3, 2))
    np.testing.assert_allclose(sol.throughput, X, rtol=1e-10)
    np.testing.assert_allclose(sol.queue_length_ck, Q, rtol=1e-10)


def test_high_utilisation_multiserver_stays_stable() -> None:
    # 64 servers, 5,000 jobs, almost no think time: plain load-dependent MVA breaks down here.
    net = net_from(
        {
            "stations": [{"name": "q", "servers": 64}, {"name": "r"}],
            "classes": [
                {
                    "name": "c",
                    "population": 5000,
                    "think_time": 0.01,
                    "demands": {"q": 1.0, "r": 0.001},
                }
            ],
        }
    )
    sol = mva.solve(net, marginals=True)
    assert sol.throughput[0] == pytest.approx(64.0, rel=1e-9)
    p = np.asarray(sol.extra["marginals_head"]["q"])
    assert np.all(p >= 0) and np.all(p <= 1)


def _mixed_brute_force(Dc: np.ndarray, N: int, lam_D: np.ndarray, cut: int = 300):
    """Product-form mixed network with load-independent single servers, by enumeration.

    P(a, b) is proportional to prod_k (a_k + b_k)!/(a_k! b_k!) Dc_k^a_k (lam D_o,k)^b_k, where a is
    the closed-class split of N and b the open-class counts (truncated at ``cut``).
    """
    M = Dc.size
    b = np.arange(cut)
    G = 0.0
    Qc = np.zeros(M)
    Qo = np.zeros(M)
    for a in itertools.product(range(N + 1), repeat=M):
        if sum(a) != N:
            continue
        # each station's open-class factor sums independently given a_k
        w_c = math.prod(Dc[k] ** a[k] for k in range(M))
        f = []
        for k in range(M):
            logc = np.array(
                [math.lgamma(a[k] + x + 1) - math.lgamma(a[k] + 1) - math.lgamma(x + 1) for x in b]
            )
            f.append(np.exp(logc + b * math.log(lam_D[k])))
        tot = math.prod(fk.sum() for fk in f)
        G += w_c * tot
        for k in range(M):
            Qc[k] += w_c * tot * a[k]
            Qo[k] += w_c * tot * (b @ f[k]) / f[k].sum()
    return Qc / G, Qo / G


def test_mixed_network_matches_enumeration() -> None:
    net = net_from(
        {
            "stations": [{"name": "cpu"}, {"name": "disk"}],
            "classes": [
                {"name": "closed", "population": 4, "demands": {"cpu": 0.3, "disk": 0.5}},
                {"name": "open", "arrival_rate": 0.8, "demands": {"cpu": 0.4, "disk": 0.25}},
            ],
        }
    )
    sol = mva.solve(net)
    assert sol.method == "mixed-mva"
    Qc, Qo = _mixed_brute_force(np.array([0.3, 0.5]), 4, 0.8 * np.array([0.4, 0.25]))
    np.testing.assert_allclose(sol.queue_length_ck[0], Qc, rtol=1e-8)
    np.testing.assert_allclose(sol.queue_length_ck[1], Qo, rtol=1e-8)
    assert max(consistency_errors(sol).values()) < 1e-9


def test_mixed_network_unstable_open_part_names_station() -> None:
    net = net_from(
        {
            "stations": [{"name": "cpu"}, {"name": "disk"}],
            "classes": [
                {"name": "closed", "population": 2, "demands": {"cpu": 0.3}},
                {"name": "open", "arrival_rate": 5.0, "demands": {"disk": 0.25}},
            ],
        }
    )
    with pytest.raises(UnstableError, match="disk"):
        mva.solve(net)


def test_mixed_network_with_multiserver_is_refused() -> None:
    net = net_from(
        {
            "stations": [{"name": "cpu", "servers": 2}],
            "classes": [
                {"name": "closed", "population": 2, "demands": {"cpu": 0.3}},
                {"name": "open", "arrival_rate": 1.0, "demands": {"cpu": 0.25}},
            ],
        }
    )
    with pytest.raises(UnsupportedModelError, match="cpu"):
        mva.solve(net)


def test_zero_population_class_gets_zero_throughput(lazowska_two_class: Network) -> None:
    sol = mva.solve(lazowska_two_class.with_population([0, 2]))
    assert sol.throughput[0] == 0.0
    # one class alone: exact single-class MVA on D = [2, 4] with N = 2
    R1 = np.array([2.0, 4.0])
    X1 = 1 / R1.sum()
    Q1 = X1 * R1
    R2 = np.array([2.0, 4.0]) * (1 + Q1)
    assert sol.throughput[1] == pytest.approx(2 / R2.sum(), rel=1e-12)


def test_fork_join_is_refused() -> None:
    net = net_from(
        {
            "stations": [
                {"name": "f", "type": "fork", "branches": ["a", "b"]},
                {"name": "a"},
                {"name": "b"},
                {"name": "j", "type": "join"},
            ],
            "classes": [{"name": "c", "population": 2, "demands": {"a": 1, "b": 1}}],
        }
    )
    with pytest.raises(UnsupportedModelError, match="simulator"):
        mva.solve(net)
