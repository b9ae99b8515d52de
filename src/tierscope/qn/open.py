"""Open product-form (Jackson/BCMP) networks: multi-class, multi-server and load-dependent.

Design decision: every queue station is solved as one load-dependent birth-death chain driven by
the aggregate offered work rho_k = sum_c lambda_c D_ck, with rates alpha_k(j) that become constant
beyond L_k. The chain has a closed-form geometric tail, so M/M/1, M/M/m (Erlang C) and general
load-dependent rates are one computation, done in log space so hundreds of servers do not
overflow. Classes share a station's mean population in proportion to their offered work, which is
exact for product-form stations.
"""

from __future__ import annotations

import numpy as np

from tierscope.errors import UnstableError, UnsupportedModelError
from tierscope.qn.network import Network
from tierscope.qn.result import Solution


def ld_station_mean(rho: float, alpha: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean number at an open load-dependent station and its probabilities p(0..L-1).

    ``rho`` is the offered work per second (sum of lambda * demand); ``alpha`` = alpha(1..L) with
    alpha(j) = alpha(L) for j >= L. Requires rho < alpha(L).
    """
    L = alpha.size
    aL = float(alpha[-1])
    if rho == 0:
        p = np.zeros(L)
        p[0] = 1.0
        return 0.0, p
    r = rho / aL
    # log of the unnormalised p(j) = prod_{i<=j} rho/alpha(i), j = 0..L-1
    logp = np.concatenate(([0.0], np.cumsum(np.log(rho) - np.log(alpha[: L - 1]))))
    shift = logp.max()
    head = np.exp(logp - shift)
    # tail j >= L: p(L-1) r^(j-L+1); sums of r^i and i r^i for i >= 1
    s0 = r / (1 - r)
    s1 = r / (1 - r) ** 2
    total = head.sum() + head[-1] * s0
    mean = (np.arange(L) @ head + head[-1] * ((L - 1) * s0 + s1)) / total
    return float(mean), head / total


def solve(net: Network) -> Solution:
    """Solve a network whose classes are all open."""
    net.require_product_form("open")
    if not net.is_open.all():
        raise UnsupportedModelError(
            "method", "open", "only open classes (use 'exact' for closed or mixed models)"
        )
    Q = open_queue_lengths(net, net.arrival_rate, np.ones(net.n_stations))
    notes = net.product_form_notes()
    rho = net.arrival_rate @ net.demands
    heads = {
        net.station_names[k]: ld_station_mean(float(rho[k]), net.alpha[k])[1]
        for k in np.flatnonzero(net.has_rate_law)
    }
    return Solution("open", net, net.arrival_rate.copy(), Q, notes=notes, queue_marginals=heads)


def open_queue_lengths(net: Network, lam: np.ndarray, inflate: np.ndarray) -> np.ndarray:
    """Q[c, k] of the open classes at arrival rates ``lam`` (closed classes: rate 0).

    ``inflate[k]`` multiplies the residence time at queue station k (used by mixed networks, where
    open jobs also wait behind the closed ones). Raises :class:`UnstableError` naming the
    saturated station when its offered work reaches its capacity.
    """
    D = net.demands
    work = lam[:, None] * D  # [C, M] offered work per class
    rho = work.sum(axis=0)
    Q = np.zeros_like(D)
    for k in range(net.n_stations):
        if net.is_delay[k]:
            Q[:, k] = work[:, k]
            continue
        cap = float(net.alpha[k][-1])
        if rho[k] >= cap * (1 - 1e-12):
            raise UnstableError(
                "arrival_rate",
                float(rho[k] / cap),
                f"utilisation < 1 at station '{net.station_names[k]}' "
                f"(offered work {rho[k]:.6g} s/s, capacity {cap:g})",
            )
        if rho[k] == 0:
            continue
        mean, _ = ld_station_mean(float(rho[k]), net.alpha[k])
        Q[:, k] = mean * work[:, k] / rho[k] * inflate[k]
    return Q
