"""Throughput and response-time bounds for single-class closed networks.

Four families, each giving a lower and an upper bound on the throughput X(N) and, through the
response time law R = N / X - Z, on the response time R(N) (think time excluded):

- ``aba``: asymptotic bounds (Lazowska et al., Quantitative System Performance, 1984, §5.2).
- ``bjb``: balanced job bounds with think time (Zahorjan, Sevcik, Eager and Galler, "Balanced job
  bound analysis of queueing networks", CACM 25(2), 1982; QSP §5.4, Table 5.3).
- ``pb``: proportional bounds (Hsieh and Lam, "Two classes of performance bounds for closed
  queueing networks", Performance Evaluation 7(1), 1987). The queue-weighted mean demand
  sum_k D_k Q_k(n) / sum_k Q_k(n) lies between sum D^2 / sum D and sum D^(n+1) / sum D^n, with
  or without think time, because Q_k(n) = sum_{i<=n} D_k^i G(n-i) / G(n); the total queue
  N - 1 - Z X(N-1) is bracketed with the asymptotic bounds at N - 1.
- ``gb``: geometric bounds (Casale, Muntz and Serazzi, "Geometric Bounds: a Noniterative
  Analysis Technique for Closed Queueing Networks", IEEE Trans. Computers 57(6), 2008): geometric
  bounds on the queues of the non-bottleneck stations at N - 1, closed by the quadratic
  "square-root" step when Z > 0 (GSB; it reduces to GB for Z = 0). The optimistic queue bound
  uses the proportional upper bound on X(N - 1), which reproduces the paper's Tables IV and V.

Main design decision: every bound must be a true bound, also for multi-server stations, for which
the classic derivations do not hold. Asymptotic bounds use the per-station facts that a job's
residence time at an m-server station is at least D (no queueing) and at most D + (D/m) Q'
(Q' <= N - 1 jobs found), and that the station saturates at m/D: the bottleneck terms use D/m and
the no-queueing terms use D. The other three families are derived for single servers, so they
are applied to comparison networks: the optimistic bounds to a faster network in which an
m-server station becomes one server of demand D/m, the pessimistic bounds to a slower one in
which it becomes one server of demand D. Throughput of a closed product-form network does not
decrease when service rates increase (the rate functions here are nondecreasing), so both
comparisons keep the bounds valid; they are looser than for single-server networks, and the
combined bounds take the tightest of the requested families. Delay stations are folded into the
think time (a delay is a think time in a single-class product-form network).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tierscope.errors import InputError, UnsupportedModelError
from tierscope.qn.network import Network

__all__ = ["KINDS", "BoundsResult", "KindBounds", "solve", "sweep"]

#: The bound families, in the order they are reported.
KINDS: tuple[str, ...] = ("aba", "bjb", "pb", "gb")

Pair = tuple[float, float]


@dataclass(frozen=True)
class KindBounds:
    """Lower and upper bounds of one family."""

    throughput: Pair
    response_time: Pair  # think time excluded


@dataclass(frozen=True)
class BoundsResult:
    """Bounds on one closed class at one population.

    ``throughput`` and ``response_time`` are the tightest (lower, upper) pairs over ``kinds``;
    ``kinds`` maps each requested family to its own pair.
    """

    class_name: str
    population: int
    think_time: float
    throughput: Pair
    response_time: Pair
    kinds: dict[str, KindBounds]
    notes: list[str] = field(default_factory=list)
    method: str = "bounds"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (non-finite values become null)."""
        out: dict[str, Any] = {
            "method": self.method,
            "classes": {
                self.class_name: {
                    "population": int(self.population),
                    "throughput": _lower_upper(self.throughput),
                    "response_time": _lower_upper(self.response_time),
                }
            },
            "bounds": {
                kind: {
                    "throughput": [_num(v) for v in b.throughput],
                    "response_time": [_num(v) for v in b.response_time],
                }
                for kind, b in self.kinds.items()
            },
        }
        if self.notes:
            out["notes"] = list(self.notes)
        return out


# ---- public API --------------------------------------------------------------------------------


def solve(net: Network, *, kinds: Sequence[str] = KINDS) -> BoundsResult:
    """Bounds on the throughput and response time of a single-class closed network."""
    net.require_product_form("bounds")
    chosen = _check_kinds(kinds)
    if net.n_classes != 1 or net.is_open[0]:
        raise UnsupportedModelError(
            "method",
            "bounds",
            "a network with one closed class (multi-class or open: use 'exact', 'amva' or "
            "'linearizer')",
        )
    D_fast, D_slow, D0, Z_eff, notes = _reduce(net)
    Z = float(net.think_time[0])
    N = int(net.population[0])
    per_kind: dict[str, KindBounds] = {}
    for kind in chosen:
        lo, hi = _throughput_bounds(kind, N, D_fast, D_slow, D0, Z_eff)
        per_kind[kind] = KindBounds((lo, hi), _response_times(N, Z, lo, hi))
    lo = max(b.throughput[0] for b in per_kind.values())
    hi = min(b.throughput[1] for b in per_kind.values())
    return BoundsResult(
        class_name=net.class_names[0],
        population=N,
        think_time=Z,
        throughput=(lo, hi),
        response_time=_response_times(N, Z, lo, hi),
        kinds=per_kind,
        notes=notes,
    )


def sweep(
    net: Network, populations: Iterable[int], *, kinds: Sequence[str] = KINDS
) -> list[BoundsResult]:
    """:func:`solve` at each population in turn (e.g. ``range(1, 101)`` for a bounds plot)."""
    return [solve(net.with_population([int(n)]), kinds=kinds) for n in populations]


# ---- model reduction ---------------------------------------------------------------------------


def _check_kinds(kinds: Sequence[str]) -> list[str]:
    expected = "a non-empty list of " + ", ".join(KINDS)
    if isinstance(kinds, str) or not isinstance(kinds, Sequence) or not kinds:
        raise InputError("kinds", kinds, expected)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise InputError("kinds", list(kinds), expected)
    return list(dict.fromkeys(kinds))


def _reduce(net: Network) -> tuple[np.ndarray, np.ndarray, float, float, list[str]]:
    """Queue demands of the faster and slower comparison networks, sum of D, and Z + delays.

    A station with rates alpha(j) = c * min(j, m) is an m-server station of demand D / c.
    """
    D = net.demands[0]
    fast, slow = [], []
    delay_time = 0.0
    multi: list[str] = []
    for k, name in enumerate(net.station_names):
        if D[k] <= 0:
            continue
        if net.is_delay[k]:
            delay_time += D[k]
            continue
        a = net.alpha[k]
        c = float(a[0])
        m = int(net.servers[k])
        if not np.allclose(a, c * np.minimum(np.arange(1, a.size + 1), m), rtol=1e-12, atol=0.0):
            raise UnsupportedModelError(
                "method",
                "bounds",
                f"single- or multi-server stations (station '{name}' has load-dependent rates "
                f"{a[:6].tolist()}{' …' if a.size > 6 else ''}); use 'exact'",
            )
        d = D[k] / c
        fast.append(d / m)
        slow.append(d)
        if m > 1:
            multi.append(f"{name} (m={m})")
    Z_eff = float(net.think_time[0]) + delay_time
    notes = []
    if multi:
        notes.append(
            "multi-server stations "
            + ", ".join(multi)
            + ": asymptotic bounds use D/m for the bottleneck and D for the no-queueing terms; "
            "bjb/pb/gb use one server of demand D/m (upper) and D (lower)"
        )
    if not fast and Z_eff <= 0:
        raise InputError(
            "classes[0]", net.class_names[0], "a closed class with a demand or a think time > 0"
        )
    D_slow = np.asarray(slow, dtype=float)
    return np.asarray(fast, dtype=float), D_slow, float(D_slow.sum()), Z_eff, notes


def _response_times(N: int, Z: float, X_lo: float, X_hi: float) -> Pair:
    """R = N / X - Z (response time law); undefined for an empty class."""
    if N == 0:
        return (math.nan, math.nan)
    return (N / X_hi - Z, N / X_lo - Z)


# ---- the bound families ------------------------------------------------------------------------


def _throughput_bounds(
    kind: str, N: int, D_fast: np.ndarray, D_slow: np.ndarray, D0: float, Z: float
) -> Pair:
    if N == 0:
        return (0.0, 0.0)
    if D_fast.size == 0:  # only delays: X = N / Z exactly
        return (N / Z, N / Z)
    if kind == "aba":
        return _aba_lower(N, D_fast, D0, Z), _aba_upper(N, D_fast, D0, Z)
    if kind == "bjb":
        return _bjb_lower(N, D_slow, Z), _bjb_upper(N, D_fast, Z)
    if kind == "pb":
        return _pb_lower(N, D_slow, Z), _pb_upper(N, D_fast, Z)
    return _gb(N, D_slow, Z)[0], _gb(N, D_fast, Z)[1]


def _aba_upper(N: float, D_fast: np.ndarray, D0: float, Z: float) -> float:
    """min(N / (D + Z), m / D at the bottleneck): no queueing, or a saturated bottleneck."""
    if N <= 0:
        return 0.0
    return float(min(N / (D0 + Z), 1.0 / D_fast.max()))


def _aba_lower(N: float, D_fast: np.ndarray, D0: float, Z: float) -> float:
    """Each job finds all N - 1 others at every station: R <= D + (N - 1) sum D/m."""
    if N <= 0:
        return 0.0
    return float(N / (Z + D0 + (N - 1) * D_fast.sum()))


def _bjb_upper(N: int, D: np.ndarray, Z: float) -> float:
    D_tot, D_avg = D.sum(), D.mean()
    return float(min(1.0 / D.max(), N / (D_tot + Z + (N - 1) * D_avg / (1.0 + Z / D_tot))))


def _bjb_lower(N: int, D: np.ndarray, Z: float) -> float:
    D_tot = D.sum()
    return float(N / (D_tot + Z + (N - 1) * D.max() / (1.0 + Z / (N * D_tot))))


def _pb_upper(N: int, D: np.ndarray, Z: float) -> float:
    sigma = float((D**2).sum() / D.sum())
    queued = max(N - 1 - Z * _aba_upper(N - 1, D, D.sum(), Z), 0.0)
    return float(min(1.0 / D.max(), N / (Z + D.sum() + sigma * queued)))


def _pb_lower(N: int, D: np.ndarray, Z: float) -> float:
    # sum D^N / sum D^(N-1), scaled by D_max so that large N neither overflows nor underflows
    top = D.max()
    r = D / top
    ratio = float(top * (r**N).sum() / (r ** (N - 1)).sum())
    queued = max(N - 1 - Z * _aba_lower(N - 1, D, D.sum(), Z), 0.0)
    return float(N / (Z + D.sum() + ratio * queued))


def _geometric_sum(y: np.ndarray, n: int) -> np.ndarray:
    """sum_{i=1}^{n} y^i, capped at n (the bound is useless, and n is valid, when y >= 1)."""
    with np.errstate(over="ignore"):
        s = np.where(y < 1.0, (y - y ** (n + 1)) / np.where(y < 1.0, 1.0 - y, 1.0), float(n))
    return np.minimum(s, float(n))


def _gb(N: int, L: np.ndarray, Z: float) -> Pair:
    """Geometric (square-root) bounds of Casale, Muntz and Serazzi on a single-server network."""
    L_tot, L_max = float(L.sum()), float(L.max())
    n = N - 1
    low = L_max > L  # the bottleneck stations are covered by the population constraint
    # Queue bounds at N - 1 for the non-bottleneck stations: Q_k between the geometric sums of
    # L_k X with X a lower bound (n / (Z + L + L_max n)) and an upper bound (proportional).
    y_lo = L * n / (Z + L_tot + L_max * n)
    X_hi_prev = _pb_upper(n, L, Z) if n >= 1 else 0.0
    Q_lo = _geometric_sum(y_lo, n)
    Q_hi = _geometric_sum(L * X_hi_prev, n)
    b_lo = Z + L_tot + L_max * n - float(((L_max - L) * Q_lo)[low].sum())
    b_hi = Z + L_tot + L_max * n - float(((L_max - L) * Q_hi)[low].sum())
    X_lo = 2 * N / (b_lo + math.sqrt(max(b_lo**2 - 4 * Z * L_max * n, 0.0)))
    disc = b_hi**2 - 4 * Z * L_max * N
    # A negative discriminant means the quadratic carries no information: keep 1 / L_max.
    X_hi = 2 * N / (b_hi + math.sqrt(disc)) if disc >= 0 and b_hi > 0 else 1.0 / L_max
    return float(X_lo), float(min(X_hi, 1.0 / L_max))


# ---- output helpers ----------------------------------------------------------------------------


def _num(v: float) -> float | None:
    f = float(v)
    return f if math.isfinite(f) else None


def _lower_upper(p: Pair) -> dict[str, float | None]:
    return {"lower": _num(p[0]), "upper": _num(p[1])}
