"""Approximate MVA (Bard-Schweitzer, Linearizer) against published fixed points and exact MVA.

The exact reference is ``tierscope.qn.mva.solve``; while the native extension it needs is not
built, the tests fall back to ``_convolution``, a product-form convolution over the population
lattice written here from the BCMP formula (independent of every solver in the package), and
``test_exact_references_agree`` checks the two against each other once both exist.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import net_from
from tierscope.errors import InputError, UnsupportedModelError
from tierscope.qn import amva, mva
from tierscope.qn.network import Network
from tierscope.qn.result import Solution, consistency_errors

SOLVERS = {"schweitzer": amva.solve_schweitzer, "linearizer": amva.solve_linearizer}


# ---- exact references --------------------------------------------------------------------------


def _station_factor(net: Network, k: int | None, shape: tuple[int, ...]) -> np.ndarray:
    """f(m) of one station over the lattice (k = None: the think times as a delay station).

    Queue: |m|! prod_c D_c^m_c / m_c! / prod_{j<=|m|} alpha(j); delay: prod_c D_c^m_c / m_c!.
    """
    D = net.think_time if k is None else net.demands[:, k]
    delay = k is None or bool(net.is_delay[k])
    f = np.zeros(shape)
    for m in itertools.product(*(range(s) for s in shape)):
        if any(mc and D[c] == 0 for c, mc in enumerate(m)):
            continue
        v = math.prod(D[c] ** mc / math.factorial(mc) for c, mc in enumerate(m))
        if not delay:
            assert k is not None
            v *= math.factorial(sum(m)) / math.prod(
                float(net.alpha_at(k, j)) for j in range(1, sum(m) + 1)
            )
        f[m] = v
    return f


def _lattice_convolve(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros_like(a)
    for m in itertools.product(*(range(s) for s in a.shape)):
        if a[m] != 0:
            dst = tuple(slice(mi, s) for mi, s in zip(m, a.shape, strict=True))
            src = tuple(slice(0, s - mi) for mi, s in zip(m, a.shape, strict=True))
            out[dst] += a[m] * b[src]
    return out


def _convolution(net: Network) -> tuple[np.ndarray, np.ndarray]:
    """Exact X[c] and Q[c, k] of a closed product-form network by brute-force convolution."""
    N = tuple(int(n) for n in net.population)
    shape = tuple(n + 1 for n in N)
    factors = [_station_factor(net, k, shape) for k in range(net.n_stations)]
    factors.append(_station_factor(net, None, shape))
    unit = np.zeros(shape)
    unit[(0,) * len(N)] = 1.0
    prefix = [unit]
    for f in factors:
        prefix.append(_lattice_convolve(prefix[-1], f))
    suffix = [unit]
    for f in reversed(factors):
        suffix.append(_lattice_convolve(suffix[-1], f))
    suffix.reverse()  # suffix[i] convolves factors[i:]
    G = prefix[-1][N]
    X = np.array(
        [
            prefix[-1][tuple(n - (i == c) for i, n in enumerate(N))] / G if N[c] else 0.0
            for c in range(len(N))
        ]
    )
    Q = np.zeros((len(N), net.n_stations))
    for k in range(net.n_stations):
        rest = _lattice_convolve(prefix[k], suffix[k + 1])
        for m in itertools.product(*(range(s) for s in shape)):
            w = factors[k][m] * rest[tuple(n - mi for n, mi in zip(N, m, strict=True))] / G
            Q[:, k] += np.array(m) * w
    return X, Q


def _exact(net: Network) -> tuple[np.ndarray, np.ndarray]:
    sol = mva.solve(net)
    return sol.throughput, sol.queue_length_ck


# ---- model generators --------------------------------------------------------------------------


@st.composite
def closed_models(
    draw: st.DrawFn, kinds: tuple[str, ...] = ("single", "single", "delay"), max_pop: int = 8
) -> Network:
    n_classes = draw(st.integers(1, 3))
    n_stations = draw(st.integers(1, 4))
    stations: list[dict[str, Any]] = []
    for k in range(n_stations):
        kind = draw(st.sampled_from(kinds))
        doc: dict[str, Any] = {"name": f"s{k}"}
        if kind == "delay":
            doc["type"] = "delay"
        elif kind == "multi":
            doc["servers"] = draw(st.integers(2, 4))
        stations.append(doc)
    pops = [draw(st.integers(1, max_pop)) for _ in range(n_classes)]
    # Keep the exact reference's lattice small.
    while math.prod(p + 1 for p in pops) > 400:
        pops[pops.index(max(pops))] -= 1
    classes = [
        {
            "name": f"c{c}",
            "population": pops[c],
            "think_time": draw(st.sampled_from([0.0, 0.0, 1.5, 10.0])),
            "demands": {f"s{k}": draw(st.floats(0.05, 2.0)) for k in range(n_stations)},
        }
        for c in range(n_classes)
    ]
    return net_from({"stations": stations, "classes": classes})


def _rel_error(sol: Solution, X: np.ndarray) -> float:
    return float(np.max(np.abs(sol.throughput / X - 1.0)))


# ---- published fixed points --------------------------------------------------------------------


def test_lazowska_single_class_schweitzer() -> None:
    """Lazowska et al., Quantitative System Performance (1984) p. 117: S, N = 3, Z = 15."""
    net = net_from(
        {
            "stations": [{"name": n} for n in ("cpu", "d1", "d2")],
            "classes": [
                {
                    "name": "u",
                    "population": 3,
                    "think_time": 15,
                    "demands": {"cpu": 0.605, "d1": 2.1, "d2": 1.35},
                }
            ],
        }
    )
    sol = amva.solve_schweitzer(net)
    np.testing.assert_allclose(sol.queue_length, [0.0973, 0.4021, 0.2359], atol=1e-3)
    assert sol.throughput[0] == pytest.approx(0.1510, abs=1e-3)
    assert sol.response_time[0] == pytest.approx(4.87, abs=1e-2)


def test_lazowska_two_class_schweitzer(lazowska_two_class: Network) -> None:
    """QSP chapter 7: two classes of one job each, demands (1, 3) and (2, 4)."""
    sol = amva.solve_schweitzer(lazowska_two_class)
    np.testing.assert_allclose(sol.queue_length_ck, [[0.192, 0.808], [0.248, 0.752]], atol=1e-3)
    np.testing.assert_allclose(sol.throughput, [0.154, 0.104], atol=1e-3)
    np.testing.assert_allclose(1 / sol.throughput, [6.508, 9.614], atol=5e-3)
    # Exact X is (3/19, 2/19); Linearizer is far closer than Schweitzer.
    exact = np.array([3 / 19, 2 / 19])
    lin = amva.solve_linearizer(lazowska_two_class)
    assert _rel_error(lin, exact) < 0.2 * _rel_error(sol, exact)


def _schweitzer_residual(sol: Solution) -> float:
    """Largest violation of the Bard-Schweitzer equations (single-server and delay stations)."""
    net = sol.network
    D, N, Q = net.demands, net.population.astype(float), sol.queue_length_ck
    arrival = Q.sum(axis=0)[None, :] - Q / np.maximum(N, 1)[:, None]
    R = np.where(net.is_delay[None, :], D, D * (1 + arrival))
    X = N / (net.think_time + R.sum(axis=1))
    return float(max(np.max(np.abs(X - sol.throughput)), np.max(np.abs(X[:, None] * R - Q))))


def test_bolch_8_3_schweitzer_fixed_point(bolch_8_3: Network) -> None:
    """Bolch et al. Ex. 8.3 (N = 6): the fixed point satisfies its equations, near exact MVA."""
    sol = amva.solve_schweitzer(bolch_8_3)
    assert sol.extra["converged"]
    assert _schweitzer_residual(sol) < 1e-9
    # Exact (Bolch Table 8.3): lambda_1 = 9.920, Q = (0.244, 2.261, 2.261, 1.234).
    assert sol.station_throughput[0] == pytest.approx(9.920, rel=0.01)
    np.testing.assert_allclose(sol.queue_length, [0.244, 2.261, 2.261, 1.234], atol=0.08)
    lin = amva.solve_linearizer(bolch_8_3)
    assert lin.station_throughput[0] == pytest.approx(9.920, rel=1e-3)


@settings(max_examples=40, deadline=None)
@given(closed_models(max_pop=30))
def test_schweitzer_solves_its_own_equations(net: Network) -> None:
    sol = amva.solve_schweitzer(net)
    assert sol.extra["converged"]
    assert _schweitzer_residual(sol) < 1e-9 * max(1, int(net.population.max()))


# ---- accuracy against exact MVA ----------------------------------------------------------------


def test_exact_references_agree() -> None:
    net = net_from(
        {
            "stations": [
                {"name": "a"},
                {"name": "b", "servers": 3},
                {"name": "z", "type": "delay"},
            ],
            "classes": [
                {
                    "name": "x",
                    "population": 4,
                    "think_time": 1.0,
                    "demands": {"a": 0.4, "b": 1.1, "z": 0.3},
                },
                {"name": "y", "population": 3, "demands": {"a": 0.9, "b": 0.2}},
            ],
        }
    )
    X, Q = _convolution(net)
    sol = mva.solve(net)
    np.testing.assert_allclose(sol.throughput, X, rtol=1e-9)
    np.testing.assert_allclose(sol.queue_length_ck, Q, rtol=1e-8, atol=1e-12)


def test_convolution_reference_matches_a_closed_form() -> None:
    """Two classes of one job at one PS station: each gets half the server, X_c = 1 / (2 D_c)."""
    net = net_from(
        {
            "stations": [{"name": "q"}],
            "classes": [
                {"name": "a", "population": 1, "demands": {"q": 1.0}},
                {"name": "b", "population": 1, "demands": {"q": 3.0}},
            ],
        }
    )
    X, Q = _convolution(net)
    np.testing.assert_allclose(X, [1 / 2, 1 / 6])
    np.testing.assert_allclose(Q.sum(), 2.0)


# Worst throughput errors seen on models of this shape (1-3 classes, 1-4 stations, 1-8 jobs per
# class), over ~1,200 uniform draws and a hypothesis search steered by ``target(error)`` (see the
# module docstring of amva): Schweitzer 31 % (single-server and delay stations) and 29 % (with
# 2-4 server stations); Linearizer 2.8 % and 7.5 %.
SCHWEITZER_MAX = 0.35
LINEARIZER_MAX = {"single": 0.04, "multi": 0.10}


@settings(max_examples=60, deadline=None)
@given(closed_models())
def test_accuracy_single_server_networks(net: Network) -> None:
    X, _ = _exact(net)
    sch, lin = amva.solve_schweitzer(net), amva.solve_linearizer(net)
    assert sch.extra["converged"] and lin.extra["converged"]
    assert _rel_error(sch, X) < SCHWEITZER_MAX
    assert _rel_error(lin, X) < LINEARIZER_MAX["single"]


@settings(max_examples=60, deadline=None)
@given(closed_models(kinds=("single", "multi", "multi", "delay")))
def test_accuracy_multiserver_networks(net: Network) -> None:
    X, _ = _exact(net)
    sch, lin = amva.solve_schweitzer(net), amva.solve_linearizer(net)
    assert sch.extra["converged"] and lin.extra["converged"]
    assert _rel_error(sch, X) < SCHWEITZER_MAX
    assert _rel_error(lin, X) < LINEARIZER_MAX["multi"]


def test_linearizer_better_than_schweitzer_on_average() -> None:
    rng = np.random.default_rng(2024)
    errors: dict[str, list[float]] = {"schweitzer": [], "linearizer": []}
    for _ in range(40):
        C, M = int(rng.integers(1, 4)), int(rng.integers(1, 5))
        stations: list[dict[str, Any]] = [
            {
                "name": f"s{k}",
                **({"servers": int(rng.integers(2, 4))} if rng.random() < 0.3 else {}),
            }
            for k in range(M)
        ]
        classes = [
            {
                "name": f"c{c}",
                "population": int(rng.integers(1, 6)),
                "think_time": float(rng.choice([0.0, 2.0])),
                "demands": {f"s{k}": float(rng.uniform(0.05, 2.0)) for k in range(M)},
            }
            for c in range(C)
        ]
        net = net_from({"stations": stations, "classes": classes})
        X, _ = _exact(net)
        for name, solve in SOLVERS.items():
            errors[name].append(_rel_error(solve(net), X))
    mean = {k: float(np.mean(v)) for k, v in errors.items()}
    assert mean["linearizer"] < 0.5 * mean["schweitzer"]
    assert mean["schweitzer"] < 0.05 and mean["linearizer"] < 0.01


# ---- multi-server and load-dependent stations --------------------------------------------------


@pytest.mark.parametrize("solve", SOLVERS.values(), ids=SOLVERS.keys())
@pytest.mark.parametrize(("m", "N"), [(4, 1), (4, 3), (4, 4), (2, 7), (64, 10)])
def test_lone_multiserver_station_is_exact(solve: Any, m: int, N: int) -> None:
    """No think time: an arriving job finds the other N - 1 jobs, X = min(N, m) / D exactly."""
    net = net_from(
        {
            "stations": [{"name": "q", "servers": m}],
            "classes": [{"name": "c", "population": N, "demands": {"q": 0.5}}],
        }
    )
    sol = solve(net)
    assert sol.throughput[0] == pytest.approx(min(N, m) / 0.5, rel=1e-9)
    assert any("binomial" in n for n in sol.notes)


def _repairman(m: int, N: int, D: float, Z: float) -> float:
    """Throughput of the finite-source M/M/m//N queue (machine repairman), by its distribution."""
    logs = np.array(
        [
            math.lgamma(N + 1)
            - math.lgamma(N - n + 1)
            + n * math.log(D / Z)
            - sum(math.log(min(j, m)) for j in range(1, n + 1))
            for n in range(N + 1)
        ]
    )
    p = np.exp(logs - logs.max())
    p /= p.sum()
    return float(np.minimum(np.arange(N + 1), m) @ p / D)


@pytest.mark.parametrize(
    ("m", "N", "D", "Z", "tol_schweitzer", "tol_linearizer"),
    [
        (4, 30, 1.0, 5.0, 0.04, 0.01),
        (2, 3, 1.0, 1.0, 0.01, 1e-3),
        (8, 200, 1.0, 0.5, 1e-3, 1e-3),
        (64, 100, 1.0, 0.7, 1e-3, 1e-3),
        (200, 1000, 1.0, 4.0, 0.006, 0.006),
    ],
)
def test_multiserver_against_machine_repairman(
    m: int, N: int, D: float, Z: float, tol_schweitzer: float, tol_linearizer: float
) -> None:
    net = net_from(
        {
            "stations": [{"name": "q", "servers": m}],
            "classes": [{"name": "c", "population": N, "think_time": Z, "demands": {"q": D}}],
        }
    )
    exact = _repairman(m, N, D, Z)
    assert amva.solve_schweitzer(net).throughput[0] == pytest.approx(exact, rel=tol_schweitzer)
    assert amva.solve_linearizer(net).throughput[0] == pytest.approx(exact, rel=tol_linearizer)


def test_marginal_correction_matches_a_direct_computation() -> None:
    """The batched binomial sum against math.comb and a plain convolution, for one arrival."""
    net = net_from(
        {
            "stations": [{"name": "q", "servers": 3}, {"name": "r", "rates": [1.0, 1.5, 1.7, 2.0]}],
            "classes": [
                {"name": "a", "population": 4, "demands": {"q": 1.0, "r": 0.5}},
                {"name": "b", "population": 2, "demands": {"q": 0.5, "r": 0.2}},
                {"name": "c", "population": 5, "demands": {"q": 0.1, "r": 1.0}},
            ],
        }
    )
    prep = amva._prepare(net)
    pops = net.population[None, :].astype(float)
    Q = np.random.default_rng(3).uniform(0.1, 1.0, (1, 3, 2))
    got = amva._marginal_correction(prep, Q, amva._batch(prep, pops), None)
    for c in range(3):
        for s_idx, k in enumerate(prep.ld):
            dist = np.array([1.0])
            for i in range(3):
                K = int(pops[0, i]) - (i == c)
                p = Q[0, i, k] / pops[0, i]
                binom = np.array(
                    [math.comb(K, j) * p**j * (1 - p) ** (K - j) for j in range(K + 1)]
                )
                dist = np.convolve(dist, binom)
            a = net.alpha[k]
            want = sum(j * (1 / a[j - 1] - 1 / a[-1]) * dist[j - 1] for j in range(1, a.size))
            assert got[0, c, s_idx] == pytest.approx(want, rel=1e-10, abs=1e-14)


def test_many_servers_switch_to_the_normal_law_smoothly(monkeypatch: pytest.MonkeyPatch) -> None:
    """The normal approximation (many servers) stays close to the exact binomial sum."""
    net = net_from(
        {
            "stations": [{"name": "q", "servers": 20}, {"name": "r"}],
            "classes": [
                {
                    "name": "a",
                    "population": 60,
                    "think_time": 3.0,
                    "demands": {"q": 1.0, "r": 0.03},
                },
                {"name": "b", "population": 40, "think_time": 1.0, "demands": {"q": 0.5}},
            ],
        }
    )
    exact = amva.solve_linearizer(net)
    monkeypatch.setattr(amva, "EXACT_MARGINAL_LIMIT", 0)
    normal = amva.solve_linearizer(net)
    np.testing.assert_allclose(normal.throughput, exact.throughput, rtol=5e-3)


def test_two_job_class_at_a_two_server_station() -> None:
    """Per-class binomials see that the other job of the small class is nearly always there.

    One binomial over all nine other jobs got this case 13 % wrong with Linearizer.
    """
    net = net_from(
        {
            "stations": [{"name": "s0", "servers": 2}, {"name": "s1"}],
            "classes": [
                {
                    "name": "a",
                    "population": 8,
                    "think_time": 10.0,
                    "demands": {"s0": 0.05, "s1": 0.05},
                },
                {"name": "b", "population": 2, "demands": {"s0": 1.692, "s1": 0.05}},
            ],
        }
    )
    X, _ = _exact(net)
    assert _rel_error(amva.solve_schweitzer(net), X) < 0.02
    assert _rel_error(amva.solve_linearizer(net), X) < 1e-3


@pytest.mark.parametrize(("rates", "exact"), [([2.0, 1.0], 0.5), ([2.0, 0.5], 0.375)])
def test_linearizer_rounds_settle_where_plain_updates_cycle(
    rates: list[float], exact: float
) -> None:
    """One class of 2 jobs: Linearizer's fixed point is exact MVA (Q'(2) = Q(1)).

    Plain deviation updates alternate between 0.24 and 0.67 for rates [2, 0.5]; the relaxed
    updates reach the fixed point within the allowed rounds.
    """
    net = net_from(
        {
            "stations": [
                {"name": "z1", "type": "delay"},
                {"name": "z2", "type": "delay"},
                {"name": "q", "rates": rates},
            ],
            "classes": [
                {"name": "c", "population": 2, "demands": {"z1": 1.0, "z2": 1.0, "q": 2.0}}
            ],
        }
    )
    assert _exact(net)[0][0] == pytest.approx(exact, rel=1e-12)
    sol = amva.solve_linearizer(net)
    assert sol.throughput[0] == pytest.approx(exact, rel=1e-4)
    assert sol.extra["rounds"] <= amva.LINEARIZER_ROUNDS


def test_load_dependent_rates_stay_close_to_exact() -> None:
    net = net_from(
        {
            "stations": [{"name": "cpu", "rates": [1.0, 1.8, 2.4]}, {"name": "disk"}],
            "classes": [
                {
                    "name": "a",
                    "population": 4,
                    "think_time": 2.0,
                    "demands": {"cpu": 0.8, "disk": 0.5},
                },
                {"name": "b", "population": 3, "demands": {"cpu": 0.4, "disk": 0.9}},
            ],
        }
    )
    X, _ = _exact(net)
    assert _rel_error(amva.solve_schweitzer(net), X) < 0.1  # 7.4 %
    assert _rel_error(amva.solve_linearizer(net), X) < 0.01  # 0.5 %


# ---- contract ----------------------------------------------------------------------------------


@pytest.mark.parametrize("solve", SOLVERS.values(), ids=SOLVERS.keys())
def test_operational_laws_and_extra(solve: Any, bolch_8_3: Network) -> None:
    sol = solve(bolch_8_3)
    assert max(consistency_errors(sol).values()) < 1e-12
    assert sol.extra["converged"] is True
    assert sol.extra["tolerance"] == 1e-10
    assert sol.extra["iterations"] >= 1
    d = sol.to_dict()
    assert d["method"] == ("amva-schweitzer" if solve is amva.solve_schweitzer else "linearizer")
    assert d["converged"] is True


@pytest.mark.parametrize("solve", SOLVERS.values(), ids=SOLVERS.keys())
def test_empty_class_has_zero_throughput(solve: Any) -> None:
    net = net_from(
        {
            "stations": [{"name": "a"}, {"name": "b"}],
            "classes": [
                {"name": "x", "population": 0, "demands": {"a": 1.0, "b": 0.5}},
                {"name": "y", "population": 5, "demands": {"a": 0.2, "b": 0.4}},
            ],
        }
    )
    sol = solve(net)
    assert sol.throughput[0] == 0.0
    assert np.all(sol.queue_length_ck[0] == 0.0)
    # Alone, class y is a single-class network: compare with exact MVA.
    X, _ = _exact(net.with_population([0, 5]))
    assert sol.throughput[1] == pytest.approx(X[1], rel=0.05)


@pytest.mark.parametrize("solve", SOLVERS.values(), ids=SOLVERS.keys())
def test_max_iter_reached_is_reported(solve: Any, bolch_8_3: Network) -> None:
    sol = solve(bolch_8_3, max_iter=2)
    assert sol.extra["converged"] is False
    assert any("did not converge" in n for n in sol.notes)
    assert max(consistency_errors(sol).values()) < 1e-12  # the laws hold at every step


@pytest.mark.parametrize("solve", SOLVERS.values(), ids=SOLVERS.keys())
def test_open_class_is_rejected(solve: Any) -> None:
    net = net_from(
        {
            "stations": [{"name": "a"}],
            "classes": [
                {"name": "o", "arrival_rate": 0.5, "demands": {"a": 0.2}},
                {"name": "c", "population": 2, "demands": {"a": 0.3}},
            ],
        }
    )
    with pytest.raises(UnsupportedModelError, match="exact"):
        solve(net)


@pytest.mark.parametrize("solve", SOLVERS.values(), ids=SOLVERS.keys())
def test_simulation_only_model_is_rejected(solve: Any) -> None:
    net = net_from(
        {
            "stations": [{"name": "a", "capacity": 3}],
            "classes": [{"name": "c", "population": 2, "demands": {"a": 0.3}}],
        }
    )
    with pytest.raises(UnsupportedModelError, match="simulator"):
        solve(net)


@pytest.mark.parametrize(("option", "value"), [("tol", 0.0), ("tol", -1e-3), ("max_iter", 0)])
def test_bad_options(option: str, value: float, bolch_8_3: Network) -> None:
    with pytest.raises(InputError, match=option):
        amva.solve_schweitzer(bolch_8_3, **{option: value})


def _big_model(servers: dict[int, int], seed: int) -> Network:
    rng = np.random.default_rng(seed)
    M, C = 20, 10
    stations: list[dict[str, Any]] = [{"name": f"s{k}"} for k in range(M)]
    for k, m in servers.items():
        stations[k]["servers"] = m
    classes = [
        {
            "name": f"c{c}",
            "population": 1000,
            "think_time": float(rng.uniform(0, 10)),
            "demands": {f"s{k}": float(rng.uniform(0.01, 1.0)) for k in range(M)},
        }
        for c in range(C)
    ]
    return net_from({"stations": stations, "classes": classes})


@pytest.mark.parametrize(
    ("servers", "seed"),
    [({}, 7), ({}, 9), ({0: 4, 3: 16}, 9)],
    ids=["single-server", "single-server-2", "multi-server"],
)
def test_ten_classes_of_a_thousand_jobs(servers: dict[int, int], seed: int) -> None:
    """Large models converge and keep the laws (their speed is measured in benchmarks/)."""
    net = _big_model(servers, seed)
    sol = amva.solve_linearizer(net)
    assert sol.extra["converged"]
    assert max(consistency_errors(sol).values()) < 1e-9
    sch = amva.solve_schweitzer(net)
    assert sch.extra["converged"]
    np.testing.assert_allclose(sch.throughput, sol.throughput, rtol=0.01)
