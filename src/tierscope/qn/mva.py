"""Exact Mean Value Analysis for closed and mixed product-form networks.

Design decision: the population recursion runs in Rust (``tierscope._native.mva_exact``): it walks
the population lattice layer by layer, keeping two layers in memory, and handles multi-server and
load-dependent stations with a stable form that needs the marginal probabilities p(0..L-2) only
(plain load-dependent MVA computes p(0) = 1 - sum p(j), which goes negative at high utilisation).
This module validates, prepares the arrays and, for mixed networks, applies the classic reduction:
closed classes see queue demands inflated by 1/(1 - U_open), open classes then wait behind the
closed jobs found at each station.
"""

from __future__ import annotations

import math

import numpy as np

from tierscope import _native
from tierscope.errors import UnsupportedModelError
from tierscope.qn.network import Network
from tierscope.qn.open import open_queue_lengths
from tierscope.qn.open import solve as solve_open
from tierscope.qn.result import Solution


def lattice_size(net: Network) -> int:
    """Number of population vectors the exact recursion visits (closed classes)."""
    return math.prod(int(n) + 1 for n in net.population[net.closed])


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
