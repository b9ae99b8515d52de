"""Mean response times of fork-join and k-of-n quorum joins.

A request is forked to n parallel branches and completes when k of them have answered (k = n
is the classic fork-join; k < n is a quorum read/write as in Cassandra or Dynamo-style stores).

Provides the Nelson-Tantawi results for homogeneous M/M/1 branches (exact for n = 2, their
approximation for n > 2), the exact mean of the k-th order statistic of independent, possibly
heterogeneous exponentials, and the quorum join response time built on it.

Main design decision: heterogeneous order statistics are computed exactly with the memoryless
race (a forward recursion over the multiset of still-running branches, so equal rates collapse
and n <= 16 distinct rates is always exact); only when that state space exceeds
``EXACT_STATE_LIMIT`` do we fall back to integrating the survival function of the order
statistic (Poisson-binomial) with ``scipy.integrate.quad``. Branch sojourn times are treated as
independent, which is the usual approximation (see :func:`quorum_fork_join_mm1`).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from numbers import Integral, Real
from typing import Literal

import numpy as np
from scipy.integrate import quad

from tierscope.errors import InputError, UnstableError

__all__ = [
    "EXACT_STATE_LIMIT",
    "exp_order_stat_mean",
    "harmonic",
    "nelson_tantawi_2way",
    "nelson_tantawi_kway",
    "quorum_fork_join_mm1",
    "quorum_wait",
]

#: Largest number of race states (product of (count+1) over distinct rates) solved exactly.
EXACT_STATE_LIMIT = 1 << 16

OrderStatMethod = Literal["auto", "exact", "integrate"]


# --------------------------------------------------------------------------- validation


def _real(name: str, value: object, *, allow_zero: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise InputError(name, value, "a real number")
    x = float(value)
    if not math.isfinite(x) or x < 0 or (x == 0 and not allow_zero):
        raise InputError(
            name, value, "a finite number >= 0" if allow_zero else "a finite number > 0"
        )
    return x


def _positive_list(name: str, values: object) -> list[float]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise InputError(name, values, "a non-empty sequence of finite numbers > 0")
    out = [_real(name, v, allow_zero=False) for v in values]
    if not out:
        raise InputError(name, values, "a non-empty sequence of finite numbers > 0")
    return out


def _k(value: object, n: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or not 1 <= int(value) <= n:
        raise InputError("k", value, f"an integer in [1, {n}]")
    return int(value)


def _rho(arrival_rate: float, service_rate: float) -> float:
    lam = _real("arrival_rate", arrival_rate, allow_zero=True)
    mu = _real("service_rate", service_rate, allow_zero=False)
    if lam >= mu:
        raise UnstableError("arrival_rate", arrival_rate, f"arrival_rate < service_rate ({mu:.6g})")
    return lam / mu


# --------------------------------------------------------------------------- Nelson-Tantawi


def harmonic(n: int) -> float:
    """The n-th harmonic number H_n = 1 + 1/2 + ... + 1/n."""
    if isinstance(n, bool) or not isinstance(n, Integral) or n < 1:
        raise InputError("n", n, "an integer >= 1")
    return math.fsum(1.0 / i for i in range(1, int(n) + 1))


def nelson_tantawi_2way(arrival_rate: float, service_rate: float) -> float:
    """Exact mean response time of a 2-way fork-join of identical M/M/1 servers.

    R_2 = (12 - rho)/8 * 1/(mu - lambda)  (Flatto & Hahn 1984; Nelson & Tantawi 1988).
    """
    rho = _rho(arrival_rate, service_rate)
    return (12.0 - rho) / 8.0 / (float(service_rate) - float(arrival_rate))


def nelson_tantawi_kway(arrival_rate: float, service_rate: float, k: int) -> float:
    """Nelson-Tantawi approximation for a k-way fork-join of identical M/M/1 servers.

    R_k ~ [H_k/H_2 + (4/11)(1 - H_k/H_2) rho] * R_2. For k = 1 it is the M/M/1 response time
    and for k = 2 the exact :func:`nelson_tantawi_2way`; Nelson & Tantawi report it within
    about 5% of simulation for k <= 32.
    """
    rho = _rho(arrival_rate, service_rate)
    if isinstance(k, bool) or not isinstance(k, Integral) or k < 1:
        raise InputError("k", k, "an integer >= 1")
    mm1 = 1.0 / (float(service_rate) - float(arrival_rate))
    if k == 1:
        return mm1
    ratio = harmonic(int(k)) / 1.5  # H_2 = 3/2
    return (ratio + (4.0 / 11.0) * (1.0 - ratio) * rho) * (12.0 - rho) / 8.0 * mm1


# --------------------------------------------------------------------------- order statistics


def _race_exact(groups: list[tuple[float, int]], k: int) -> float:
    # While the set A of branches runs, the next completion comes after Exp(sum A) and is
    # branch i with probability r_i/sum A (memorylessness). Sum the expected holding times of
    # the first k states, propagating state probabilities forward; states are the remaining
    # counts per distinct rate, so equal rates do not multiply the state space.
    rates = [r for r, _ in groups]
    layer: dict[tuple[int, ...], float] = {tuple(c for _, c in groups): 1.0}
    total = 0.0
    for step in range(k):
        nxt: defaultdict[tuple[int, ...], float] = defaultdict(float)
        for state, prob in layer.items():
            lam = math.fsum(c * r for c, r in zip(state, rates, strict=True))
            total += prob / lam
            if step == k - 1:
                continue
            for g, c in enumerate(state):
                if c:
                    child = (*state[:g], c - 1, *state[g + 1 :])
                    nxt[child] += prob * c * rates[g] / lam
        layer = nxt
    return total


def _race_integrate(rates: np.ndarray, k: int) -> float:
    # E[X_(k)] = integral of P(fewer than k finished by t); that count is Poisson-binomial
    # with p_i = 1 - exp(-r_i t), evaluated by a DP truncated to k states.
    def survival(t: float) -> float:
        done = -np.expm1(-rates * t)
        dp = np.zeros(k)
        dp[0] = 1.0
        for q in done:
            dp[1:] = dp[1:] * (1.0 - q) + dp[:-1] * q
            dp[0] *= 1.0 - q
        return float(dp.sum())

    n = rates.size
    tail = math.fsum(1.0 / i for i in range(n - k + 1, n + 1))
    lo, hi = tail / float(rates.max()), tail / float(rates.min())  # equal-rate bounds
    split = 4.0 * hi
    head, _ = quad(survival, 0.0, split, points=[lo, hi], limit=200, epsabs=0.0, epsrel=1e-10)
    rest, _ = quad(survival, split, math.inf, limit=200, epsabs=1e-14 * hi, epsrel=1e-10)
    return head + rest


def exp_order_stat_mean(
    rates: Sequence[float] | np.ndarray, k: int, *, method: OrderStatMethod = "auto"
) -> float:
    """Mean of the k-th smallest of independent exponentials with the given rates.

    Equal rates use the closed form sum_{i=n-k+1}^{n} 1/(i mu) and k = 1 gives 1/sum(rates).
    Otherwise ``method="exact"`` runs the race recursion (cost ~ product of (count+1) over the
    distinct rates, i.e. 2^n for n distinct rates) and ``"integrate"`` integrates the
    survival function numerically (O(n k) per evaluation, ~1e-10 relative accuracy);
    ``"auto"`` picks exact when the state space is at most ``EXACT_STATE_LIMIT``.
    """
    values = _positive_list("rates", rates)
    n = len(values)
    kk = _k(k, n)
    if method not in ("auto", "exact", "integrate"):
        raise InputError("method", method, "one of 'auto', 'exact', 'integrate'")
    counts = Counter(values)
    if len(counts) == 1:
        return math.fsum(1.0 / (i * values[0]) for i in range(n - kk + 1, n + 1))
    if kk == 1:
        return 1.0 / math.fsum(values)
    groups = sorted(counts.items())
    states = math.prod(c + 1 for _, c in groups)
    if method == "exact" or (method == "auto" and states <= EXACT_STATE_LIMIT):
        return _race_exact(groups, kk)
    return _race_integrate(np.asarray(values, dtype=float), kk)


def quorum_wait(response_time_means: Sequence[float] | np.ndarray, k: int) -> float:
    """Mean time until k of n branches have answered, each branch time exponential and independent.

    ``response_time_means`` are the per-branch mean response times (an M/M/1 sojourn time is
    exponential, so this is exact for independent M/M/1 branches).
    """
    means = _positive_list("response_time_means", response_time_means)
    return exp_order_stat_mean([1.0 / m for m in means], k)


def quorum_fork_join_mm1(
    arrival_rate: float, service_rates: Sequence[float] | np.ndarray, k: int
) -> float:
    """Mean response time of a k-of-n quorum join over M/M/1 branches.

    Every request is forked to all n branches (each sees Poisson ``arrival_rate``); branch i is
    an M/M/1 with exponential sojourn time of rate mu_i - lambda, and the request completes at
    the k-th answer. Branches are treated as independent. In reality they share the arrival
    stream and are positively correlated (associated random variables); for k = n the
    independence value is therefore an upper bound (Nelson & Tantawi's argument: the maximum of
    associated variables is stochastically smaller than that of independent copies), for k = 1
    it is a lower bound, and in between it is an approximation. For n = 2, k = 2 and identical
    branches the exact value is :func:`nelson_tantawi_2way`.
    """
    lam = _real("arrival_rate", arrival_rate, allow_zero=True)
    mus = _positive_list("service_rates", service_rates)
    slowest = min(mus)
    if lam >= slowest:
        raise UnstableError(
            "arrival_rate", arrival_rate, f"arrival_rate < every service rate (min {slowest:.6g})"
        )
    return exp_order_stat_mean([mu - lam for mu in mus], k)
