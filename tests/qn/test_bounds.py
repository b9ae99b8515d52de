"""Bounds (asymptotic, balanced job, proportional, geometric) against published values and MVA.

The published numbers are Tables IV and V of Casale, Muntz and Serazzi (IEEE Trans. Computers
57(6), 2008) for D = (0.1, 0.1, 0.09, 0.08), as transcribed in the test blocks of the GNU Octave
``queueing`` package (``qncsgb.m`` for GB, ``qncspb.m`` for PB). The exact reference for the
bracketing property is ``_mva``, a single-class convolution with multi-server stations written
here and checked against ``tierscope.qn.mva``.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import net_from
from tierscope.errors import InputError, UnsupportedModelError
from tierscope.qn import bounds, mva
from tierscope.qn.network import Network

CASALE_D = {"s1": 0.1, "s2": 0.1, "s3": 0.09, "s4": 0.08}


def _single(
    demands: dict[str, float],
    *,
    Z: float = 0.0,
    N: int = 1,
    stations: list[dict[str, Any]] | None = None,
) -> Network:
    return net_from(
        {
            "stations": stations or [{"name": s} for s in demands],
            "classes": [{"name": "c", "population": N, "think_time": Z, "demands": demands}],
        }
    )


def _mva(net: Network, n_max: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact X(n) and R(n), n = 0..n_max, of a single-class network by convolution.

    G(n) convolves the station factors D^j / prod_{i<=j} min(i, m) (queues) and D^j / j!
    (delays, think time); X(n) = G(n - 1) / G(n) and R(n) = n / X(n) - Z.
    """
    D, Z = net.demands[0], float(net.think_time[0])
    j = np.arange(n_max + 1)
    log_fact = np.concatenate([[0.0], np.cumsum(np.log(j[1:]))])
    G = np.zeros(n_max + 1)
    G[0] = 1.0
    for k in range(D.size + 1):
        d = Z if k == D.size else D[k]
        if d == 0:
            continue
        if k == D.size or net.is_delay[k]:
            log_f = j * math.log(d) - log_fact
        else:
            rates = np.minimum(j[1:], net.servers[k])
            log_f = j * math.log(d) - np.concatenate([[0.0], np.cumsum(np.log(rates))])
        G = np.convolve(G, np.exp(log_f))[: n_max + 1]
    X = np.zeros(n_max + 1)
    X[1:] = G[:-1] / G[1:]
    R = np.zeros(n_max + 1)
    R[1:] = j[1:] / X[1:] - Z
    return X, R


# ---- published values --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("Z", "N", "lower", "upper"),
    [
        (0.0, 2, 4.3040, 4.3174),
        (0.0, 5, 6.6859, 6.7524),
        (0.0, 10, 8.1521, 8.2690),
        (0.0, 20, 9.0947, 9.2431),
        (0.0, 80, 9.8233, 9.8765),
        (1.0, 2, 1.4319, 1.5195),
        (1.0, 5, 3.3432, 3.5582),
        (1.0, 10, 5.7569, 6.1410),
        (1.0, 20, 8.0856, 8.6467),
        (1.0, 80, 9.7147, 9.8594),
    ],
)
def test_geometric_bounds_casale_tables_iv_v(Z: float, N: int, lower: float, upper: float) -> None:
    b = bounds.solve(_single(CASALE_D, Z=Z, N=N), kinds=["gb"])
    assert b.kinds["gb"].throughput == pytest.approx((lower, upper), abs=1e-4)


@pytest.mark.parametrize(
    ("N", "lower", "upper"),
    [
        (2, 4.3174, 4.3174),
        (5, 6.6600, 6.7297),
        (10, 8.0219, 8.2700),
        (20, 8.8672, 9.3387),
        (80, 9.6736, 10.000),
    ],
)
def test_proportional_bounds_table_iv(N: int, lower: float, upper: float) -> None:
    b = bounds.solve(_single(CASALE_D, N=N), kinds=["pb"])
    assert b.kinds["pb"].throughput == pytest.approx((lower, upper), abs=1e-4)


def test_asymptotic_bounds_by_hand() -> None:
    """QSP §5.2 style example: D = (5, 4, 3), Z = 15, so N* = (D + Z) / D_max = 5.4."""
    net = _single({"cpu": 5.0, "d1": 4.0, "d2": 3.0}, Z=15.0)
    one = bounds.solve(net.with_population([1]), kinds=["aba"]).kinds["aba"]
    assert one.throughput == pytest.approx((1 / 27, 1 / 27))
    assert one.response_time == pytest.approx((12.0, 12.0))
    ten = bounds.solve(net.with_population([10]), kinds=["aba"]).kinds["aba"]
    assert ten.throughput == pytest.approx((10 / 135, 0.2))  # N / (N D + Z), 1 / D_max
    assert ten.response_time == pytest.approx((35.0, 120.0))  # N D_max - Z, N D


def test_balanced_job_bounds_are_exact_for_a_balanced_network() -> None:
    """K equal demands, no think time: X(N) = N / (D + (N - 1) D / K) and BJB is tight."""
    net = _single({f"s{k}": 0.25 for k in range(4)})
    for N in (1, 2, 7, 40):
        b = bounds.solve(net.with_population([N]), kinds=["bjb"]).kinds["bjb"]
        exact = N / (1.0 + (N - 1) * 0.25)
        assert b.throughput == pytest.approx((exact, exact), rel=1e-12)


def test_balanced_job_bounds_formula() -> None:
    """QSP Table 5.3 with think time, computed by hand for D = (0.4, 0.2, 0.1), Z = 2, N = 6."""
    b = bounds.solve(_single({"a": 0.4, "b": 0.2, "c": 0.1}, Z=2.0, N=6), kinds=["bjb"])
    D, D_avg, D_max, Z, N = 0.7, 0.7 / 3, 0.4, 2.0, 6
    lower = N / (D + Z + (N - 1) * D_max / (1 + Z / (N * D)))
    upper = min(1 / D_max, N / (D + Z + (N - 1) * D_avg / (1 + Z / D)))
    assert b.kinds["bjb"].throughput == pytest.approx((lower, upper), rel=1e-12)


# ---- bracketing exact MVA ----------------------------------------------------------------------


@st.composite
def single_class_networks(draw: st.DrawFn, multi: bool = False) -> Network:
    n_queues = draw(st.integers(1, 6))
    stations: list[dict[str, Any]] = []
    demands: dict[str, float] = {}
    for k in range(n_queues):
        doc: dict[str, Any] = {"name": f"q{k}"}
        if multi:
            doc["servers"] = draw(st.sampled_from([1, 1, 2, 3, 8]))
        stations.append(doc)
        demands[f"q{k}"] = draw(st.floats(0.01, 1.0))
    if draw(st.booleans()):
        stations.append({"name": "d", "type": "delay"})
        demands["d"] = draw(st.floats(0.01, 5.0))
    Z = draw(st.sampled_from([0.0, 0.5, 5.0, 40.0]))
    return _single(demands, Z=Z, stations=stations)


def _check_brackets(net: Network, n_max: int = 50) -> None:
    X, R = _mva(net, n_max)
    for b in bounds.sweep(net, range(1, n_max + 1)):
        N = b.population
        for kind, kb in [*b.kinds.items(), ("combined", b)]:
            lo, hi = kb.throughput
            assert lo <= X[N] * (1 + 1e-9) and X[N] <= hi * (1 + 1e-9), (kind, N, lo, X[N], hi)
            lo, hi = kb.response_time
            assert lo <= R[N] * (1 + 1e-9) and R[N] <= hi * (1 + 1e-9), (kind, N, lo, R[N], hi)


@settings(max_examples=60, deadline=None)
@given(single_class_networks())
def test_every_kind_brackets_exact_mva(net: Network) -> None:
    _check_brackets(net)


@settings(max_examples=40, deadline=None)
@given(single_class_networks(multi=True))
def test_every_kind_brackets_exact_mva_with_multiserver_stations(net: Network) -> None:
    _check_brackets(net)


def test_reference_matches_exact_mva() -> None:
    net = _single(
        {"a": 0.3, "b": 0.5, "d": 2.0},
        Z=1.5,
        stations=[{"name": "a", "servers": 3}, {"name": "b"}, {"name": "d", "type": "delay"}],
    )
    X, R = _mva(net, 30)
    for n in (1, 7, 30):
        sol = mva.solve(net.with_population([n]))
        assert X[n] == pytest.approx(sol.throughput[0], rel=1e-12)
        assert R[n] == pytest.approx(sol.response_time[0], rel=1e-12)


def test_reference_mva_matches_a_closed_form() -> None:
    """One 2-server station, N = 2, no think time: both jobs in service, X = 2 / D."""
    X, R = _mva(_single({"q": 0.5}, stations=[{"name": "q", "servers": 2}]), 2)
    assert X[2] == pytest.approx(4.0)
    assert R[2] == pytest.approx(0.5)


def test_geometric_bounds_are_the_tightest_on_the_casale_example() -> None:
    for b in bounds.sweep(_single(CASALE_D, Z=1.0), [5, 10, 20, 80]):
        width = {k: v.throughput[1] - v.throughput[0] for k, v in b.kinds.items()}
        assert width["gb"] == min(width.values())


# ---- result shape and contract -----------------------------------------------------------------


def test_combined_bounds_and_to_dict() -> None:
    net = _single({"cpu": 0.3, "disk": 0.2}, Z=1.0, N=8)
    b = bounds.solve(net)
    assert list(b.kinds) == list(bounds.KINDS)
    assert b.throughput[0] == max(k.throughput[0] for k in b.kinds.values())
    assert b.throughput[1] == min(k.throughput[1] for k in b.kinds.values())
    assert b.response_time == pytest.approx((8 / b.throughput[1] - 1.0, 8 / b.throughput[0] - 1.0))
    d = json.loads(json.dumps(b.to_dict()))
    assert d["method"] == "bounds"
    assert d["classes"]["c"] == {
        "population": 8,
        "throughput": {"lower": b.throughput[0], "upper": b.throughput[1]},
        "response_time": {"lower": b.response_time[0], "upper": b.response_time[1]},
    }
    assert set(d["bounds"]) == {"aba", "bjb", "pb", "gb"}
    assert d["bounds"]["aba"]["throughput"] == list(b.kinds["aba"].throughput)
    assert "notes" not in d


def test_delay_station_counts_in_response_time_not_think_time() -> None:
    with_delay = bounds.solve(
        _single(
            {"q": 0.2, "d": 1.0},
            Z=2.0,
            N=4,
            stations=[{"name": "q"}, {"name": "d", "type": "delay"}],
        )
    )
    as_think = bounds.solve(_single({"q": 0.2}, Z=3.0, N=4))
    assert with_delay.throughput == pytest.approx(as_think.throughput, rel=1e-12)
    # R excludes only the think time: the delay's 1.0 s is part of it.
    assert with_delay.response_time[0] == pytest.approx(as_think.response_time[0] + 1.0)


def test_multiserver_note_and_saturation_bound() -> None:
    net = _single(
        {"q": 0.9, "r": 0.1}, N=200, stations=[{"name": "q", "servers": 3}, {"name": "r"}]
    )
    b = bounds.solve(net)
    assert b.throughput[1] == pytest.approx(3 / 0.9)  # m / D at the bottleneck
    assert any("D/m" in n for n in b.notes)


def test_sweep_and_zero_population() -> None:
    res = bounds.sweep(_single({"a": 0.1, "b": 0.3}, Z=1.0), [0, 1, 2])
    assert [r.population for r in res] == [0, 1, 2]
    assert res[0].throughput == (0.0, 0.0)
    assert all(math.isnan(v) for v in res[0].response_time)
    assert res[0].to_dict()["classes"]["c"]["response_time"] == {"lower": None, "upper": None}
    assert res[1].throughput == pytest.approx((1 / 1.4, 1 / 1.4))  # N = 1: no queueing


def test_only_delays() -> None:
    b = bounds.solve(_single({"d": 2.0}, Z=3.0, N=5, stations=[{"name": "d", "type": "delay"}]))
    assert b.throughput == pytest.approx((1.0, 1.0))
    assert b.response_time == pytest.approx((2.0, 2.0))


def test_multiclass_is_rejected(lazowska_two_class: Network) -> None:
    with pytest.raises(UnsupportedModelError, match="one closed class"):
        bounds.solve(lazowska_two_class)


def test_open_class_is_rejected() -> None:
    net = net_from(
        {
            "stations": [{"name": "a"}],
            "classes": [{"name": "o", "arrival_rate": 1.0, "demands": {"a": 0.1}}],
        }
    )
    with pytest.raises(UnsupportedModelError):
        bounds.solve(net)


def test_load_dependent_rates_are_rejected() -> None:
    net = _single({"a": 0.1}, N=3, stations=[{"name": "a", "rates": [1.0, 1.5]}])
    with pytest.raises(UnsupportedModelError, match="load-dependent"):
        bounds.solve(net)


def test_rate_multiplier_scales_the_demand() -> None:
    fast = bounds.solve(_single({"a": 0.2}, N=3, stations=[{"name": "a", "rates": [2.0]}]))
    plain = bounds.solve(_single({"a": 0.1}, N=3))
    assert fast.throughput == pytest.approx(plain.throughput, rel=1e-12)


@pytest.mark.parametrize("kinds", [[], ["aba", "nope"], "aba"])
def test_bad_kinds(kinds: Any) -> None:
    with pytest.raises(InputError, match="kinds"):
        bounds.solve(_single({"a": 0.1}, N=2), kinds=kinds)
