"""Exact Mean Value Analysis for closed and mixed product-form networks.

Design decision: the population recursion runs in Rust (``tierscope._native.mva_exact``): it walks
the population lattice layer by layer, keeping two layers in memory, and handles multi-server and
load-dependent stations with a stable form that needs the marginal probabilities p(0..L-2) only
(plain load-dependent MVA computes p(0) = 1 - sum p(j), which goes negative at high utilisation).
This module validates, prepares the arrays and, for mixed networks, applies the classic reduction:
closed classes see queue demands inflated by 1/(1 - U_open), open classes then wait behind the
closed jobs found at each station.

The recursion's cost is known before it starts: :func:`exact_cost` estimates it from the lattice
size, the classes and the rate levels, and models above :data:`EXACT_SECONDS_LIMIT` (or whose
lattice layers would not fit :data:`EXACT_LAYER_VALUES`) are refused with the estimate and the
methods that answer them, instead of running for hours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tierscope import _native
from tierscope.errors import UnsupportedModelError
from tierscope.qn.network import Network
from tierscope.qn.open import open_queue_lengths
from tierscope.qn.open import solve as solve_open
from tierscope.qn.result import Solution

#: Longest estimated run of the exact recursion that is started (seconds on a 2020s core).
EXACT_SECONDS_LIMIT = 30.0
#: Values one lattice layer may hold (the native recursion's own limit: 1 GiB a layer).
EXACT_LAYER_VALUES = 1 << 27
#: Measured cost of the native recursion: about 10 ns per class and station or rate level
#: visited at each population vector, plus about 60 ns per vector.
_NS_PER_UNIT = 10.0
_UNITS_PER_VECTOR = 6


@dataclass(frozen=True)
class ExactCost:
    """What exact MVA on a network would take, estimated before it runs."""

    vectors: int  # population vectors in the lattice
    seconds: float
    layer_values: int  # floats of the largest lattice layer (an upper bound)

    @property
    def memory_bytes(self) -> int:
        return 2 * 8 * self.layer_values  # two layers are kept

    def feasible(self) -> bool:
        return self.seconds <= EXACT_SECONDS_LIMIT and self.layer_values <= EXACT_LAYER_VALUES

    def describe(self) -> str:
        return (
            f"{self.vectors:,} population vectors, about {_duration(self.seconds)} "
            f"and {_size(self.memory_bytes)}"
        )


def lattice_size(net: Network) -> int:
    """Number of population vectors the exact recursion visits (closed classes)."""
    return math.prod(int(n) + 1 for n in net.population[net.closed])


def exact_cost(net: Network) -> ExactCost:
    """Estimate of the exact recursion's time and memory on ``net`` (closed classes)."""
    pops = sorted(int(n) for n in net.population[net.closed])
    vectors = math.prod(n + 1 for n in pops)
    total = sum(pops)
    levels = sum(
        min(a.size, total + 1)
        for a, d in zip(net.alpha, net.is_delay, strict=True)
        if not d and a.size > 1
    )
    per_vector = _UNITS_PER_VECTOR + len(pops) * (net.n_stations + levels)
    # A layer (vectors of equal total) has at most one vector per choice of all classes but
    # the largest.
    layer = math.prod(n + 1 for n in pops[:-1]) if pops else 1
    values = min(layer, vectors) * (net.n_stations + 2 * levels + 1)
    return ExactCost(vectors, vectors * per_vector * _NS_PER_UNIT * 1e-9, values)


def _duration(seconds: float) -> str:
    for unit, size in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.2g} s"


def _size(n: int) -> str:
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def check_exact_cost(net: Network) -> None:
    """Refuse (``UnsupportedModelError``, with the estimate) a model exact MVA cannot finish
    in about :data:`EXACT_SECONDS_LIMIT` seconds or whose layers would not fit in memory."""
    cost = exact_cost(net)
    if cost.feasible():
        return
    if net.is_open.any():
        instead = "smaller closed populations, or `tierscope model simulate`"
    else:
        instead = "--method linearizer or amva (any population) or bounds"
    raise UnsupportedModelError(
        "method",
        "exact",
        f"a model exact MVA solves within {EXACT_SECONDS_LIMIT:g} s (this one: "
        f"{cost.describe()}); use {instead}",
    )


def solve(net: Network, *, marginals: bool = False) -> Solution:
    """Exact MVA (closed), the mixed-network reduction (open + closed), or the open solver."""
    net.require_product_form("exact")
    if net.is_open.all():
        return solve_open(net)
    if net.is_open.any():
        return _solve_mixed(net)
    # The recursion keeps the marginals of load-dependent stations anyway; stations with a rate
    # law need them for their utilisation.
    X, Q, p = _closed(net, net.demands, marginals=marginals or bool(net.has_rate_law.any()))
    heads = {net.station_names[k]: p[k] for k in range(len(p)) if len(p[k])}
    extra = {"marginals_head": heads} if marginals else {}
    return Solution(
        "exact-mva", net, X, Q, notes=net.product_form_notes(), extra=extra, queue_marginals=heads
    )


def _closed(
    net: Network, demands: np.ndarray, *, marginals: bool = False
) -> tuple[np.ndarray, np.ndarray, list[list[float]]]:
    check_exact_cost(net)
    closed = net.closed
    D = demands[closed]
    args = (
        D.tolist(),
        net.is_delay.tolist(),
        [a.tolist() for a in net.alpha],
        [int(n) for n in net.population[closed]],
        net.think_time[closed].tolist(),
    )
    p: list[list[float]] = []
    if marginals:
        Xc, Qc, _, p = _native.mva_exact_marginals(*args)
    else:
        Xc, Qc, _ = _native.mva_exact(*args)
    X = np.zeros(net.n_classes)
    Q = np.zeros((net.n_classes, net.n_stations))
    X[closed] = Xc
    Q[closed] = Qc
    return X, Q, p


def _solve_mixed(net: Network) -> Solution:
    ld = net.is_load_dependent
    if ld.any():
        names = ", ".join(np.asarray(net.station_names)[ld])
        raise UnsupportedModelError(
            "method",
            "exact",
            "a mixed network whose queue stations are load-independent single servers "
            f"(multi-server or load-dependent: {names}); use the simulator",
        )
    lam = np.where(net.is_open, net.arrival_rate, 0.0)
    D = net.demands
    U_open = (lam[:, None] * D).sum(axis=0)
    # Stability of the open part is checked (and reported by station) by open_queue_lengths.
    open_queue_lengths(net, lam, np.ones(net.n_stations))
    slow = np.where(net.is_delay, 1.0, 1.0 / (1.0 - U_open))
    X, Q, _ = _closed(net, D * slow[None, :])
    Q_closed = Q.sum(axis=0)
    inflate = np.where(net.is_delay, 1.0, 1.0 + Q_closed)
    Q = Q + open_queue_lengths(net, lam, inflate)
    X = np.where(net.is_open, net.arrival_rate, X)
    return Solution("mixed-mva", net, X, Q, notes=net.product_form_notes())
