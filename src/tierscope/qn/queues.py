"""Closed-form steady-state metrics of single queueing stations.

Covers M/M/1, M/M/m (Erlang C), M/M/m/K, M/G/1 (FCFS, Pollaczek-Khinchine) and M/G/1-PS. Every
function returns the same frozen :class:`QueueMetrics` record so callers (and the ``QUEUE_KINDS``
registry) can treat the kinds interchangeably.

Main design decision: numerical stability over textbook form. Erlang C is obtained from the
Erlang B recursion (no factorials or large powers, fine for hundreds or thousands of servers)
and the M/M/m/K state probabilities are normalised in log space, so neither overflows for
large ``servers`` or ``capacity``. Stations with an infinite buffer raise ``UnstableError`` when
the per-server utilisation is at or above 1; the finite M/M/m/K accepts any arrival rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from numbers import Integral, Real
from typing import Any

import numpy as np
from scipy.special import gammaln, logsumexp

from tierscope.errors import InputError, UnstableError

__all__ = [
    "QUEUE_KINDS",
    "QueueMetrics",
    "erlang_b",
    "mg1",
    "mg1ps",
    "mm1",
    "mmm",
    "mmmk",
]


@dataclass(frozen=True)
class QueueMetrics:
    """Steady-state metrics of one station (times in the unit of ``service_time``).

    ``mean_queue`` (Lq) and ``waiting_time`` (Wq) count only the time before service starts;
    ``mean_number`` (L) and ``response_time`` (W) include service. ``utilization`` is per server.
    ``p_wait`` is the probability that an (admitted) arrival has to wait; ``p_block`` the
    probability that an arrival is rejected (non-zero only for M/M/m/K).
    """

    kind: str
    arrival_rate: float
    service_time: float
    servers: int
    utilization: float
    mean_number: float
    mean_queue: float
    response_time: float
    waiting_time: float
    throughput: float
    p_wait: float
    p_block: float
    extra: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able representation."""
        return {
            "kind": self.kind,
            "arrival_rate": float(self.arrival_rate),
            "service_time": float(self.service_time),
            "servers": int(self.servers),
            "utilization": float(self.utilization),
            "mean_number": float(self.mean_number),
            "mean_queue": float(self.mean_queue),
            "response_time": float(self.response_time),
            "waiting_time": float(self.waiting_time),
            "throughput": float(self.throughput),
            "p_wait": float(self.p_wait),
            "p_block": float(self.p_block),
            "extra": {str(k): float(v) for k, v in self.extra.items()},
        }


# --------------------------------------------------------------------------- validation


def _real(name: str, value: object, *, allow_zero: bool) -> float:
    # bool is an Integral in Python; a flag passed as a rate is always a bug.
    if isinstance(value, bool) or not isinstance(value, Real):
        raise InputError(name, value, "a real number")
    x = float(value)
    if not math.isfinite(x) or x < 0 or (x == 0 and not allow_zero):
        expected = "a finite number >= 0" if allow_zero else "a finite number > 0"
        raise InputError(name, value, expected)
    return x


def _positive_int(name: str, value: object, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise InputError(name, value, f"an integer >= {minimum}")
    n = int(value)
    if n < minimum:
        raise InputError(name, value, f"an integer >= {minimum}")
    return n


def _check_stable(arrival_rate: float, service_time: float, servers: int) -> float:
    rho = arrival_rate * service_time / servers
    if rho >= 1.0:
        raise UnstableError(
            "arrival_rate",
            arrival_rate,
            f"utilization arrival_rate*service_time/servers < 1 (it is {rho:.6g})",
        )
    return rho


# --------------------------------------------------------------------------- stations


def mm1(arrival_rate: float, service_time: float) -> QueueMetrics:
    """M/M/1 FCFS: W = S/(1-rho)."""
    lam = _real("arrival_rate", arrival_rate, allow_zero=True)
    s = _real("service_time", service_time, allow_zero=False)
    rho = _check_stable(lam, s, 1)
    w = s / (1.0 - rho)
    wq = rho * s / (1.0 - rho)
    return QueueMetrics(
        kind="mm1",
        arrival_rate=lam,
        service_time=s,
        servers=1,
        utilization=rho,
        mean_number=lam * w,
        mean_queue=lam * wq,
        response_time=w,
        waiting_time=wq,
        throughput=lam,
        p_wait=rho,
        p_block=0.0,
    )


def erlang_b(offered_load: float, servers: int) -> float:
    """Erlang B blocking probability by the stable recursion B_k = aB_{k-1}/(k + aB_{k-1})."""
    a = _real("offered_load", offered_load, allow_zero=True)
    m = _positive_int("servers", servers)
    b = 1.0
    for k in range(1, m + 1):
        b = a * b / (k + a * b)
    return b


def mmm(arrival_rate: float, service_time: float, servers: int) -> QueueMetrics:
    """M/M/m FCFS with Erlang C waiting probability C = B/(1 - rho(1-B))."""
    lam = _real("arrival_rate", arrival_rate, allow_zero=True)
    s = _real("service_time", service_time, allow_zero=False)
    m = _positive_int("servers", servers)
    rho = _check_stable(lam, s, m)
    a = lam * s
    b = erlang_b(a, m)
    c = b / (1.0 - rho * (1.0 - b))
    wq = c * s / (m * (1.0 - rho))
    w = wq + s
    return QueueMetrics(
        kind="mmm",
        arrival_rate=lam,
        service_time=s,
        servers=m,
        utilization=rho,
        mean_number=lam * w,
        mean_queue=lam * wq,
        response_time=w,
        waiting_time=wq,
        throughput=lam,
        p_wait=c,
        p_block=0.0,
        extra={"offered_load": a, "erlang_b": b},
    )


def mmmk(arrival_rate: float, service_time: float, servers: int, capacity: int) -> QueueMetrics:
    """M/M/m/K FCFS: at most ``capacity`` (K >= m) jobs in the system, the rest are lost.

    Any arrival rate is accepted (the system is finite). Times are per admitted job (Little's
    law with the admitted throughput X = lambda(1 - p_K)); ``p_wait`` is the probability that
    an admitted arrival finds all servers busy, which tends to Erlang C as K grows.
    ``extra`` holds the offered load and the probability of an empty system.
    """
    lam = _real("arrival_rate", arrival_rate, allow_zero=True)
    s = _real("service_time", service_time, allow_zero=False)
    m = _positive_int("servers", servers)
    k_cap = _positive_int("capacity", capacity, minimum=m)
    a = lam * s
    n = np.arange(k_cap + 1, dtype=float)
    if a == 0.0:
        p = np.zeros(k_cap + 1)
        p[0] = 1.0
    else:
        # log p_n (unnormalised): a^n/n! up to m, then geometric with ratio a/m; log space
        # keeps huge m or K from overflowing.
        log_a = math.log(a)
        logw = np.where(
            n <= m,
            n * log_a - gammaln(n + 1.0),
            m * log_a - gammaln(m + 1.0) + (n - m) * (log_a - math.log(m)),
        )
        p = np.exp(logw - logsumexp(logw))
    p_block = float(p[-1])
    x = lam * (1.0 - p_block)
    big_l = float(np.dot(n, p))
    lq = float(np.dot(np.maximum(n - m, 0.0), p))
    if x > 0.0:
        w = big_l / x
        wq = lq / x
        p_wait = min(1.0, float(p[m:k_cap].sum()) / (1.0 - p_block))  # clamp rounding
    else:
        # lambda = 0: limits for a job arriving to an empty system.
        w, wq, p_wait = s, 0.0, 0.0
    return QueueMetrics(
        kind="mmmk",
        arrival_rate=lam,
        service_time=s,
        servers=m,
        utilization=min(1.0, x * s / m),
        mean_number=big_l,
        mean_queue=lq,
        response_time=w,
        waiting_time=wq,
        throughput=x,
        p_wait=p_wait,
        p_block=p_block,
        extra={"offered_load": a, "p_empty": float(p[0]), "capacity": float(k_cap)},
    )


def mg1(arrival_rate: float, service_time: float, scv: float) -> QueueMetrics:
    """M/G/1 FCFS by Pollaczek-Khinchine: Wq = rho S (1+scv) / (2(1-rho)).

    ``scv`` is the squared coefficient of variation of the service time (1: exponential,
    0: deterministic).
    """
    lam = _real("arrival_rate", arrival_rate, allow_zero=True)
    s = _real("service_time", service_time, allow_zero=False)
    c2 = _real("scv", scv, allow_zero=True)
    rho = _check_stable(lam, s, 1)
    wq = rho * s * (1.0 + c2) / (2.0 * (1.0 - rho))
    w = wq + s
    return QueueMetrics(
        kind="mg1",
        arrival_rate=lam,
        service_time=s,
        servers=1,
        utilization=rho,
        mean_number=lam * w,
        mean_queue=lam * wq,
        response_time=w,
        waiting_time=wq,
        throughput=lam,
        p_wait=rho,  # PASTA: an arrival waits iff the server is busy
        p_block=0.0,
        extra={"scv": c2},
    )


def mg1ps(arrival_rate: float, service_time: float) -> QueueMetrics:
    """M/G/1 processor sharing: W = S/(1-rho), insensitive to the service distribution.

    Nobody queues under PS, so ``waiting_time`` is the delay beyond the job's own service
    (W - S) and ``mean_queue`` its Little's-law counterpart; ``p_wait`` is the probability that
    an arrival finds the server busy and has to share it.
    """
    # Same means as M/M/1 (PS is insensitive to the service distribution).
    return replace(mm1(arrival_rate, service_time), kind="mg1ps")


QUEUE_KINDS: dict[str, Callable[..., QueueMetrics]] = {
    "mm1": mm1,
    "mmm": mmm,
    "mmmk": mmmk,
    "mg1": mg1,
    "mg1ps": mg1ps,
}
