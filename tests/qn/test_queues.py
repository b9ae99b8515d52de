"""Single-station closed forms against textbook values and independent computations."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import gammaln, logsumexp

from tierscope.errors import InputError, UnstableError
from tierscope.qn.queues import QUEUE_KINDS, QueueMetrics, erlang_b, mg1, mg1ps, mm1, mmm, mmmk


def _ctmc_mmmk(lam: float, s: float, m: int, k: int) -> np.ndarray:
    """Stationary distribution of M/M/m/K by solving pi Q = 0 on the full generator."""
    mu = 1.0 / s
    q = np.zeros((k + 1, k + 1))
    for n in range(k + 1):
        if n < k:
            q[n, n + 1] = lam
        if n > 0:
            q[n, n - 1] = min(n, m) * mu
        q[n, n] = -q[n].sum()
    a = np.vstack([q.T, np.ones(k + 1)])
    b = np.zeros(k + 2)
    b[-1] = 1.0
    pi, *_ = np.linalg.lstsq(a, b, rcond=None)
    return pi


def _erlang_c_direct(a: float, m: int) -> float:
    """Erlang C from its defining sum, in log space."""
    terms = np.arange(m) * math.log(a) - gammaln(np.arange(m) + 1.0)
    last = m * math.log(a) - gammaln(m + 1.0) + math.log(m / (m - a))
    return math.exp(last - logsumexp(np.append(terms, last)))


# --------------------------------------------------------------------------- textbook values


def test_mm1_textbook() -> None:
    r = mm1(0.5, 1.0)
    assert r.response_time == pytest.approx(2.0)
    assert r.waiting_time == pytest.approx(1.0)
    assert r.mean_number == pytest.approx(1.0)
    assert r.mean_queue == pytest.approx(0.5)
    assert r.utilization == pytest.approx(0.5)
    assert r.p_wait == pytest.approx(0.5)
    assert r.throughput == 0.5 and r.p_block == 0.0 and r.servers == 1 and r.kind == "mm1"


@pytest.mark.parametrize(
    ("lam", "m", "expected"),
    [(1.0, 2, 1.0 / 3.0), (8.0, 10, 0.4092), (1.0, 1, 1.0), (0.5, 1, 0.5)],
)
def test_erlang_c_table(lam: float, m: int, expected: float) -> None:
    if m == 1 and lam == 1.0:
        with pytest.raises(UnstableError):
            mmm(lam, 1.0, m)
        return
    assert mmm(lam, 1.0, m).p_wait == pytest.approx(expected, abs=5e-5)


def test_erlang_b_table() -> None:
    # a=1, m=2: B = (1/2)/(1 + 1 + 1/2) = 0.2
    assert erlang_b(1.0, 2) == pytest.approx(0.2)
    assert erlang_b(0.0, 5) == 0.0


@pytest.mark.parametrize(("a", "m"), [(8.0, 10), (95.0, 100), (480.0, 500), (2900.0, 3000)])
def test_erlang_c_many_servers(a: float, m: int) -> None:
    r = mmm(a, 1.0, m)
    assert r.p_wait == pytest.approx(_erlang_c_direct(a, m), rel=1e-9)
    assert r.waiting_time == pytest.approx(r.p_wait / (m - a), rel=1e-12)
    assert 0.0 < r.p_wait < 1.0


def test_mmm_single_server_is_mm1() -> None:
    a, b = mmm(0.7, 1.2, 1), mm1(0.7, 1.2)
    assert a.response_time == pytest.approx(b.response_time)
    assert a.p_wait == pytest.approx(b.p_wait)


@pytest.mark.parametrize(
    ("lam", "s", "m", "k"),
    [
        (0.5, 1.0, 1, 1),
        (0.5, 1.0, 1, 5),
        (3.0, 0.5, 2, 6),
        (5.0, 1.0, 2, 5),
        (9.0, 1.0, 10, 10),
        (40.0, 1.0, 8, 30),
    ],
)
def test_mmmk_against_ctmc(lam: float, s: float, m: int, k: int) -> None:
    pi = _ctmc_mmmk(lam, s, m, k)
    n = np.arange(k + 1)
    r = mmmk(lam, s, m, k)
    x = lam * (1 - pi[-1])
    assert r.p_block == pytest.approx(pi[-1], abs=1e-12)
    assert r.throughput == pytest.approx(x, rel=1e-9)
    assert r.mean_number == pytest.approx(float(n @ pi), rel=1e-9)
    assert r.mean_queue == pytest.approx(float(np.maximum(n - m, 0) @ pi), rel=1e-9, abs=1e-12)
    assert r.response_time == pytest.approx(float(n @ pi) / x, rel=1e-9)
    assert r.utilization == pytest.approx(float(np.minimum(n, m) @ pi) / m, rel=1e-9)
    assert r.p_wait == pytest.approx(float(pi[m:k].sum()) / (1 - pi[-1]), rel=1e-9, abs=1e-12)


def test_mmmk_erlang_loss_is_erlang_b() -> None:
    r = mmmk(7.0, 1.0, 10, 10)
    assert r.p_block == pytest.approx(erlang_b(7.0, 10), rel=1e-12)
    assert r.mean_queue == 0.0 and r.waiting_time == 0.0


def test_mmmk_huge_is_finite() -> None:
    r = mmmk(1500.0, 1.0, 1000, 100_000)  # overloaded, large: must not overflow
    assert math.isfinite(r.mean_number) and r.throughput == pytest.approx(1000.0, rel=1e-9)
    assert r.utilization == pytest.approx(1.0, rel=1e-9)


def test_mmmk_zero_arrivals() -> None:
    r = mmmk(0.0, 2.0, 3, 4)
    assert r.mean_number == 0.0 and r.throughput == 0.0 and r.response_time == 2.0


def test_mg1_special_cases() -> None:
    lam, s = 0.6, 1.0
    assert mg1(lam, s, 1.0).response_time == pytest.approx(mm1(lam, s).response_time)
    md1 = mg1(lam, s, 0.0)
    rho = lam * s
    assert md1.waiting_time == pytest.approx(rho * s / (2 * (1 - rho)))
    assert md1.extra == {"scv": 0.0}


def test_mg1ps() -> None:
    r = mg1ps(0.8, 0.5)
    assert r.response_time == pytest.approx(0.5 / 0.6)
    assert r.mean_number == pytest.approx(0.4 / 0.6)
    assert r.response_time == pytest.approx(mm1(0.8, 0.5).response_time)


def test_to_dict_is_json() -> None:
    for r in (mm1(0.5, 1.0), mmm(3, 1, 4), mmmk(3, 1, 2, 4), mg1(0.5, 1, 2), mg1ps(0.5, 1)):
        d = r.to_dict()
        assert json.loads(json.dumps(d)) == d
        assert d["kind"] == r.kind
    assert set(QUEUE_KINDS) == {"mm1", "mmm", "mmmk", "mg1", "mg1ps"}


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: mm1(1.0, 1.0), "arrival_rate"),
        (lambda: mmm(4.0, 1.0, 3), "arrival_rate"),
        (lambda: mg1(2.0, 0.5, 1.0), "arrival_rate"),
        (lambda: mg1ps(3.0, 1.0), "arrival_rate"),
    ],
)
def test_unstable(call: object, field: str) -> None:
    with pytest.raises(UnstableError) as info:
        call()  # type: ignore[operator]
    assert info.value.field == field


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: mm1(0.5, 0.0), "service_time"),
        (lambda: mm1(0.5, -1.0), "service_time"),
        (lambda: mm1(-0.1, 1.0), "arrival_rate"),
        (lambda: mm1(math.nan, 1.0), "arrival_rate"),
        (lambda: mm1("1", 1.0), "arrival_rate"),
        (lambda: mmm(0.5, 1.0, 2.5), "servers"),
        (lambda: mmm(0.5, 1.0, 0), "servers"),
        (lambda: mmm(0.5, 1.0, True), "servers"),
        (lambda: mmmk(0.5, 1.0, 3, 2), "capacity"),
        (lambda: mg1(0.5, 1.0, -0.5), "scv"),
        (lambda: mg1ps(0.5, math.inf), "service_time"),
    ],
)
def test_invalid_inputs(call: object, field: str) -> None:
    with pytest.raises(InputError) as info:
        call()  # type: ignore[operator]
    assert info.value.field == field
    assert not isinstance(info.value, UnstableError)
    assert f"field '{field}'" in str(info.value)


# --------------------------------------------------------------------------- properties


def _make(kind: str, rho: float, s: float, m: int, extra: int, scv: float) -> QueueMetrics:
    servers = 1 if kind in ("mm1", "mg1", "mg1ps") else m
    lam = rho * servers / s
    if kind == "mm1":
        return mm1(lam, s)
    if kind == "mmm":
        return mmm(lam, s, m)
    if kind == "mmmk":
        return mmmk(lam * 1.5, s, m, m + extra)  # finite: may exceed capacity
    if kind == "mg1":
        return mg1(lam, s, scv)
    return mg1ps(lam, s)


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(sorted(QUEUE_KINDS)),
    rho=st.floats(0.01, 0.98),
    s=st.floats(1e-3, 1e3),
    m=st.integers(1, 300),
    extra=st.integers(0, 200),
    scv=st.floats(0.0, 20.0),
)
def test_littles_law_and_consistency(
    kind: str, rho: float, s: float, m: int, extra: int, scv: float
) -> None:
    r = _make(kind, rho, s, m, extra, scv)
    x = r.throughput
    assert r.mean_number == pytest.approx(x * r.response_time, rel=1e-9)
    assert r.mean_queue == pytest.approx(x * r.waiting_time, rel=1e-9, abs=1e-300)
    assert r.response_time == pytest.approx(r.waiting_time + r.service_time, rel=1e-9)
    # busy servers = X S (utilisation law)
    assert r.utilization == pytest.approx(x * r.service_time / r.servers, rel=1e-9)
    assert 0.0 <= r.p_wait <= 1.0 and 0.0 <= r.p_block <= 1.0
    assert 0.0 <= r.utilization <= 1.0


@settings(max_examples=100, deadline=None)
@given(rho=st.floats(0.01, 0.9), m=st.integers(1, 200), s=st.floats(0.01, 10.0))
def test_mmmk_tends_to_mmm(rho: float, m: int, s: float) -> None:
    lam = rho * m / s
    inf = mmm(lam, s, m)
    fin = mmmk(lam, s, m, m + 600)  # rho^600 <= 0.9^600 ~ 3e-28
    assert fin.p_block < 1e-20
    assert fin.response_time == pytest.approx(inf.response_time, rel=1e-9)
    assert fin.p_wait == pytest.approx(inf.p_wait, rel=1e-9, abs=1e-300)
    assert fin.mean_queue == pytest.approx(inf.mean_queue, rel=1e-8, abs=1e-300)


@settings(max_examples=100, deadline=None)
@given(rho=st.floats(0.01, 0.95), m=st.integers(1, 400))
def test_erlang_c_matches_direct_sum(rho: float, m: int) -> None:
    a = rho * m
    assert mmm(a, 1.0, m).p_wait == pytest.approx(_erlang_c_direct(a, m), rel=1e-9)
