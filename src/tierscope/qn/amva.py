"""Approximate MVA for closed multi-class networks: Bard-Schweitzer and Chandy-Neuse Linearizer.

Both methods replace the exact recursion over the population lattice by a fixed point at the
target population N. Bard-Schweitzer estimates the queue an arriving class-c job finds at station
k as Q_k(N) - Q_ck(N) / N_c; Linearizer (Chandy and Neuse, CACM 25(2), 1982) adds the fractional
deviations F_ckj = Q_ck(N - e_j) / (N_c - [c = j]) - Q_ck(N) / N_c, estimated from "core"
Schweitzer-type solutions at N and at every N - e_j and assumed constant between N and N - e_j.
Following the original, F is refined in 3 rounds (fewer if it stops changing), then the core is
solved once more at N.

Main design decision: one vectorised core solves a whole batch of populations at once. The state
is an array Q[p, c, k] (population p of the batch, class c, station k) and each step is a handful
of numpy operations, so Linearizer's C + 1 core problems cost about as much as one, and 10 classes
of 1,000 jobs on 20 stations solve in a few tens of milliseconds. The step is plain successive
substitution, which converges slowly (rate about U_k) when a station other than the bottleneck is
nearly saturated; the iteration therefore watches the ratio of successive changes and, once it
is steady, jumps to the limit of the geometric tail (Aitken extrapolation). Returned values always
come from a plain step, so Q = X * W and N_c = X_c (Z_c + sum_k W_ck) hold to rounding.

Multi-server and load-dependent stations (rate alpha_k(j) / S with j jobs present,
alpha_k(j) = a_L for j >= L) use the load-dependent MVA residence time written in the stable form
that the exact solver uses,

    W_ck = (D_ck / a_L) (1 + Q'_ck) + D_ck sum_{j=1}^{L-1} j (1/alpha_k(j) - 1/a_L) p'_ck(j - 1),

where Q'_ck is the Schweitzer (or Linearizer) arrival queue and p'_ck the distribution of the
number of jobs the arriving job finds. We approximate p'_ck by a binomial with K_ck trials (the
other jobs that can be at k: the populations of the classes visiting k, less the arriving job)
and mean Q'_ck. It is exact in three limits: nobody else in the network (K = 0), every other job
at the station (a lone station without think time), and infinite-server behaviour; and it only
needs the binomial CDF for an m-server station, whatever m. We compared it, against exact MVA on
random models with 1-3 classes, 1-4 stations and 1-8 jobs per class, with Seidmann's reduction
(an m-server queue becomes a D/m queue plus a D(m-1)/m delay) and with marginals p'(j) taken from
the open-network recursion p(j) = U p(j-1) / alpha(j) at the current throughputs (Akyildiz and
Bolch). Worst throughput errors of Schweitzer / Linearizer with multi-server stations:
binomial 11 % / 3 % (mean 2.3 % / 0.4 %), open marginals 61 % / 57 %, Seidmann 25 % for
Schweitzer; the open marginals fail when few jobs share many servers. With arbitrary (non-monotone)
rate multipliers the errors are larger (worst about 37 % / 25 %, mean 4 % / 1 %). On single-server
networks plain Schweitzer can be 20 % off for a class of one or two jobs sharing a station with a
larger class; Linearizer stays within about 2 %.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

from tierscope.errors import InputError, UnsupportedModelError
from tierscope.qn.network import Network
from tierscope.qn.result import Solution

__all__ = ["solve_linearizer", "solve_schweitzer"]

#: Rounds of fractional-deviation updates in Linearizer (Chandy and Neuse found 3 sufficient).
LINEARIZER_ROUNDS = 3


@dataclass(frozen=True)
class _Prepared:
    """The arrays the core needs, computed once per network."""

    D: np.ndarray  # [C, M] demands
    Z: np.ndarray  # [C] think times
    visits: np.ndarray  # [C, M] bool: class c visits station k
    delay: np.ndarray  # [M] bool
    cap: np.ndarray  # [M] a_L, the rate multiplier at high load (1 for delay stations)
    multi: np.ndarray  # [M] bool: queue with alpha = min(j, m), m >= 2 (closed-form correction)
    servers: np.ndarray  # [M] m of the multi-server stations
    general: np.ndarray  # [G] indices of other load-dependent queues with L > 1
    coef: np.ndarray  # [G, L_max - 1] j (1/alpha(j) - 1/a_L), zero beyond each station's L - 1

    @property
    def corrected(self) -> bool:
        return bool(self.multi.any() or self.general.size)


@dataclass(frozen=True)
class _Core:
    X: np.ndarray  # [P, C]
    Q: np.ndarray  # [P, C, M]
    iterations: int
    converged: bool
    change: float  # last scaled change max |dQ| / N_c


# ---- public solvers ----------------------------------------------------------------------------


def solve_schweitzer(net: Network, *, tol: float = 1e-10, max_iter: int = 100_000) -> Solution:
    """Bard-Schweitzer approximate MVA: Q_ck(N - e_c) ~ Q_ck(N) (N_c - 1) / N_c.

    ``tol`` bounds the last change of every Q_ck relative to N_c; ``max_iter`` caps the fixed-point
    steps. ``extra`` reports ``iterations``, ``converged`` and ``tolerance``.
    """
    prep, N = _setup(net, "amva", tol, max_iter)
    pops = N[None, :]
    core = _fixed_point(prep, pops, np.zeros((1, *prep.D.shape)), _initial(prep, pops), tol,
                        max_iter)
    notes = _notes(net, prep)
    if not core.converged:
        notes.append(_not_converged(max_iter, core.change, "the fixed point"))
    extra = {"iterations": core.iterations, "converged": core.converged, "tolerance": tol}
    return Solution("amva-schweitzer", net, core.X[0], core.Q[0], notes=notes, extra=extra)


def solve_linearizer(net: Network, *, tol: float = 1e-10, max_iter: int = 1000) -> Solution:
    """Chandy-Neuse Linearizer: Schweitzer cores at N and N - e_j with fractional deviations.

    ``max_iter`` caps the fixed-point steps of each core solve (all N - e_j are solved together in
    one batch); ``extra["iterations"]`` is the total over all core solves and
    ``extra["rounds"]`` the number of deviation updates.
    """
    prep, N = _setup(net, "linearizer", tol, max_iter)
    C, M = prep.D.shape
    present = np.flatnonzero(N > 0)
    # Batch row 0 is N, row 1 + i is N - e_j for the i-th class j with N_j > 0.
    pops = np.vstack([N[None, :], N[None, :] - np.eye(C)[present]])
    F = np.zeros((C, M, C))  # F[c, k, j]
    Q = _initial(prep, pops)
    iterations, converged, rounds = 0, True, 0
    for _ in range(LINEARIZER_ROUNDS):
        core = _fixed_point(prep, pops, _deviation_term(pops, F), Q, tol, max_iter)
        iterations += core.iterations
        converged &= core.converged
        rounds += 1
        Q = core.Q
        F_new = _deviations(N, present, Q)
        change = float(np.max(np.abs(F_new - F), initial=0.0))
        F = F_new
        if change <= tol:
            break
    final = _fixed_point(prep, pops[:1], _deviation_term(pops[:1], F), Q[:1], tol, max_iter)
    iterations += final.iterations
    converged &= final.converged
    notes = _notes(net, prep)
    if not converged:
        notes.append(_not_converged(max_iter, final.change, "a core solve"))
    extra = {
        "iterations": iterations,
        "converged": converged,
        "tolerance": tol,
        "rounds": rounds,
    }
    return Solution("linearizer", net, final.X[0], final.Q[0], notes=notes, extra=extra)


# ---- setup -------------------------------------------------------------------------------------


def _setup(net: Network, method: str, tol: float, max_iter: int) -> tuple[_Prepared, np.ndarray]:
    net.require_product_form(method)
    if net.is_open.any():
        names = ", ".join(np.asarray(net.class_names)[net.is_open])
        raise UnsupportedModelError(
            "method",
            method,
            f"closed classes only (open classes: {names}); use 'exact' for mixed models "
            "or 'open' when every class is open",
        )
    if not (isinstance(tol, float | int) and tol > 0):
        raise InputError("tol", tol, "a number > 0")
    if not (isinstance(max_iter, int) and max_iter >= 1):
        raise InputError("max_iter", max_iter, "an integer >= 1")
    N = net.population.astype(float)
    D = net.demands
    idle = (N > 0) & (net.think_time + D.sum(axis=1) <= 0)
    if idle.any():
        c = int(np.flatnonzero(idle)[0])
        raise InputError(
            f"classes[{c}]", net.class_names[c], "a closed class with a demand or a think time > 0"
        )
    return _prepare(net), N


def _prepare(net: Network) -> _Prepared:
    M = net.n_stations
    cap = np.array([1.0 if net.is_delay[k] else float(net.alpha[k][-1]) for k in range(M)])
    multi = np.zeros(M, dtype=bool)
    general: list[int] = []
    for k, a in enumerate(net.alpha):
        if net.is_delay[k] or a.size == 1:
            continue
        m = a.size
        if np.array_equal(a, np.minimum(np.arange(1, m + 1), m).astype(float)):
            multi[k] = True
        else:
            general.append(k)
    L1 = max((net.alpha[k].size - 1 for k in general), default=0)
    coef = np.zeros((len(general), L1))
    for g, k in enumerate(general):
        a = net.alpha[k]
        j = np.arange(1, a.size)
        coef[g, : a.size - 1] = j * (1.0 / a[:-1] - 1.0 / a[-1])
    return _Prepared(
        D=net.demands,
        Z=net.think_time.astype(float),
        visits=net.demands > 0,
        delay=net.is_delay.astype(bool),
        cap=cap,
        multi=multi,
        servers=np.where(multi, net.servers, 1).astype(float),
        general=np.asarray(general, dtype=np.int64),
        coef=coef,
    )


def _initial(prep: _Prepared, pops: np.ndarray) -> np.ndarray:
    """Spread each class over its stations in proportion to demand (think time included)."""
    total = prep.Z + prep.D.sum(axis=1)
    share = prep.D / np.where(total > 0, total, 1.0)[:, None]
    return pops[:, :, None] * share[None, :, :]


# ---- the core fixed point ----------------------------------------------------------------------


def _step(
    prep: _Prepared, Q: np.ndarray, pops: np.ndarray, G: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """One MVA step from queue lengths Q[p, c, k]: returns X[p, c] and the new Q."""
    n = np.where(pops > 0, pops, 1.0)[:, :, None]
    # Arrival queue: everyone at k less this job's own share, plus Linearizer's deviation term.
    A = np.maximum(Q.sum(axis=1, keepdims=True) - Q / n + G, 0.0)
    W = (1.0 + A) / prep.cap
    if prep.corrected:
        W = W + _marginal_correction(prep, A, pops)
    W = np.where(prep.delay, 1.0, W) * prep.D
    X = pops / (prep.Z + W.sum(axis=2))
    return X, X[:, :, None] * W


def _marginal_correction(prep: _Prepared, A: np.ndarray, pops: np.ndarray) -> np.ndarray:
    """sum_j j (1/alpha(j) - 1/a_L) p'(j-1) with binomial arrival marginals p' (see module doc)."""
    # Other jobs that can be at station k when a class-c job arrives there.
    K = (pops @ prep.visits)[:, None, :] - 1.0
    K = np.broadcast_to(np.maximum(K, 0.0), A.shape)
    q = np.where(K > 0, np.minimum(A, K) / np.where(K > 0, K, 1.0), 0.0)
    out = np.zeros_like(A)
    if prep.multi.any():
        # alpha = min(j, m): the sum is E[(m - 1 - n')^+] / m, from two binomial CDFs.
        k = np.flatnonzero(prep.multi)
        m = prep.servers[k]
        Kk, qk = K[..., k], q[..., k]
        below = (m - 1) * binom.cdf(m - 1, Kk, qk)
        mean_below = np.where(Kk > 0, Kk * qk * binom.cdf(m - 2, np.maximum(Kk - 1, 0), qk), 0.0)
        out[..., k] = (below - mean_below) / m
    if prep.general.size:
        g = prep.general
        j = np.arange(prep.coef.shape[1])
        pmf = binom.pmf(j, K[..., g, None], q[..., g, None])
        out[..., g] = (pmf * prep.coef).sum(axis=-1)
    return out


def _fixed_point(
    prep: _Prepared,
    pops: np.ndarray,
    G: np.ndarray,
    Q0: np.ndarray,
    tol: float,
    max_iter: int,
) -> _Core:
    P = pops.shape[0]
    scale = np.where(pops > 0, pops, 1.0)[:, :, None]
    Q = Q0
    prev = np.zeros((P, Q0[0].size))  # previous scaled change, one row per population
    have_prev = np.zeros(P, dtype=bool)
    prev_ratio = np.full(P, -1.0)
    for it in range(1, max_iter + 1):
        X, Q_new = _step(prep, Q, pops, G)
        d = (Q_new - Q) / scale
        change = float(np.max(np.abs(d), initial=0.0))
        if change <= tol:
            return _Core(X, Q_new, it, True, change)
        flat = d.reshape(P, -1)
        # Aitken: in the linear regime d_t = rho d_(t-1), and the changes still to come sum to
        # d_t rho / (1 - rho). Jump there once rho has been steady for two consecutive steps.
        denom = np.einsum("pi,pi->p", prev, prev)
        ok = have_prev & (denom > 0)
        ratio = np.where(ok, np.einsum("pi,pi->p", flat, prev) / np.where(ok, denom, 1.0), -1.0)
        steady = ok & (ratio > 0.5) & (ratio < 0.999_999) & (
            np.abs(ratio - prev_ratio) <= 1e-3 * ratio
        )
        Q = Q_new
        if steady.any():
            gain = np.where(steady, ratio / np.where(steady, 1.0 - ratio, 1.0), 0.0)
            Q = np.maximum(Q_new + gain[:, None, None] * d * scale, 0.0)
        # After a jump the history no longer describes the iteration: start it again.
        prev, have_prev = flat, ~steady
        prev_ratio = np.where(steady, -1.0, ratio)
    return _Core(X, Q_new, max_iter, False, change)


# ---- Linearizer ----------------------------------------------------------------------------------


def _deviation_term(pops: np.ndarray, F: np.ndarray) -> np.ndarray:
    """G[p, j, k] = sum_c (n_pc - [c = j]) F[c, k, j]: the deviation part of Q'_jk."""
    G = np.einsum("pc,ckj->pjk", pops, F)
    return G - np.einsum("jkj->jk", F)[None, :, :]


def _deviations(N: np.ndarray, present: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """F[c, k, j] = Q_ck(N - e_j) / (N_c - [c = j]) - Q_ck(N) / N_c (0 where undefined)."""
    C, M = Q.shape[1:]
    F = np.zeros((C, M, C))
    base = np.where(N > 0, 1.0 / np.where(N > 0, N, 1.0), 0.0)[:, None] * Q[0]
    for i, j in enumerate(present):
        n_j = N - np.eye(C)[j]
        inv = np.where(n_j > 0, 1.0 / np.where(n_j > 0, n_j, 1.0), 0.0)[:, None]
        F[:, :, j] = np.where(n_j[:, None] > 0, inv * Q[1 + i] - base, 0.0)
    return F


# ---- notes -------------------------------------------------------------------------------------


def _notes(net: Network, prep: _Prepared) -> list[str]:
    notes = []
    fcfs = net.fcfs_class_dependent()
    if fcfs:
        notes.append(
            "FCFS stations with class-dependent service times are not product form; solved as PS: "
            + ", ".join(fcfs)
        )
    ld = [net.station_names[k] for k in np.flatnonzero(~prep.delay & (prep.cap != 1.0))]
    ld += [net.station_names[k] for k in prep.general if net.station_names[k] not in ld]
    if ld:
        notes.append(
            "multi-server/load-dependent stations ("
            + ", ".join(ld)
            + "): load-dependent MVA residence time with binomial arrival-instant marginals "
            "(an approximation on top of the MVA approximation)"
        )
    return notes


def _not_converged(max_iter: int, change: float, what: str) -> str:
    return (
        f"{what} did not converge within max_iter={max_iter} steps "
        f"(last relative change {change:.3g}); results are approximate"
    )
