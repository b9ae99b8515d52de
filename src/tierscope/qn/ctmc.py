"""Exact solution of small closed networks from their Markov chain (method ``"ctmc"``).

This solver builds the continuous-time Markov chain of the network and solves pi Q = 0. It does
not rely on product form. It is therefore an independent cross-check of the product-form
solvers (``nc``, exact MVA), and it gives the full joint distribution of the jobs over the
stations (:func:`joint_distribution`), not only means.

Model. A state gives the number of class-c jobs at each station that class c visits. A job's
think time Z_c > 0 is one more delay station. Every station is processor sharing with a
class-blind, load-dependent capacity. With n_k jobs present, class c leaves station k at rate
alpha_k(n_k) * (n_ck / n_k) / S_ck at a queue and n_ck / S_ck at a delay. FCFS queues are
solved as PS, which is equivalent when their service times are class-independent (the
product-form case). The ``Network`` keeps visit ratios, not the routing matrix. Product-form
measures depend only on demands, so the chain uses the random routing that reproduces the visit
ratios: after any completion, a class-c job moves to station j with probability
V_cj / sum_j V_cj. The think station has V = 1, one visit per system completion. The system
throughput is X_c = (class-c completions per second at station k) / V_ck, summed over k.

Main design decision: the chain is never explored state by state. The states of each class are
the compositions of N_c over its stations, listed in lexicographic order. A composition's
position comes from a closed-form binomial ranking. Each possible move of a job is therefore one
vectorised index computation over all states, and the generator is assembled as one sparse
matrix (about a second for 10^5 states). One state, chosen likely so that the system stays
well conditioned, is pinned at pi = 1 and its balance equation dropped. The rest is solved with
SuperLU (``spsolve``) up to 2,000 states and with diagonally preconditioned BiCGSTAB (GMRES
if it falls short) beyond, because LU factors of these chains fill in almost completely. The
iterative solve takes seconds at 10^5 states. If the balance equations, each divided by its
state's outflow rate, are left with a residual above 1e-11 of max pi, ``UnsupportedModelError``
is raised rather than an inaccurate answer returned. ``max_states`` (default 200,000) bounds the
chain, whose size grows combinatorially with stations and populations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from numbers import Integral
from typing import Literal

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import bicgstab, gmres, spsolve
from scipy.special import gammaln, xlogy

from tierscope.errors import InputError, UnsupportedModelError
from tierscope.qn.nc import _check_closed
from tierscope.qn.network import Network
from tierscope.qn.result import Solution

__all__ = ["DEFAULT_MAX_STATES", "JointDistribution", "joint_distribution", "solve", "state_count"]

#: Largest chain solved by default.
DEFAULT_MAX_STATES = 200_000

#: ``"auto"`` solves chains up to this size directly (SuperLU), larger ones iteratively.
_DIRECT_LIMIT = 2_000
#: ... and falls back to SuperLU up to this size if the iterative solvers do not converge.
_DIRECT_FALLBACK = 10_000
#: Largest relative residual of the balance equations accepted as a solution.
_RESIDUAL_TOL = 1e-11

LinearSolver = Literal["auto", "direct", "iterative"]


@dataclass(frozen=True, eq=False)
class JointDistribution:
    """Stationary distribution of the chain.

    ``counts[s, c, k]`` is the number of class-c jobs at station k in state s, and
    ``thinking[s, c]`` the number of class-c jobs in think time. ``probabilities[s]`` is
    pi(s). ``completions[c, k]`` is the rate of class-c service completions at station k,
    self-transitions included.
    """

    counts: np.ndarray  # [S, C, M] int
    thinking: np.ndarray  # [S, C] int
    probabilities: np.ndarray  # [S]
    completions: np.ndarray  # [C, M]
    think_completions: np.ndarray  # [C]
    residual: float  # max_s |(pi Q)_s / Q_ss| / max pi of the solved chain
    linear_solver: str  # "direct", "bicgstab", "gmres", "gmres-repinned" or "trivial"

    @property
    def n_states(self) -> int:
        return int(self.probabilities.size)


# --------------------------------------------------------------------------- compositions


@cache
def _compositions(total: int, parts: int) -> np.ndarray:
    """All ways to put ``total`` jobs on ``parts`` stations, in lexicographic order."""
    if parts == 0:
        return np.zeros((1, 0), dtype=np.int64)
    if parts == 1:
        return np.array([[total]], dtype=np.int64)
    blocks = []
    for first in range(total + 1):
        rest = _compositions(total - first, parts - 1)
        blocks.append(np.hstack([np.full((rest.shape[0], 1), first, dtype=np.int64), rest]))
    return np.vstack(blocks)


def _n_compositions(total: int, parts: int) -> int:
    return 1 if parts == 0 else math.comb(total + parts - 1, parts - 1)


@cache
def _binomials(total: int, parts: int) -> np.ndarray:
    """binom[x, a] = C(x + a, a) for x <= total, a < parts (all <= the number of states)."""
    return np.array(
        [[math.comb(x + a, a) for a in range(parts)] for x in range(total + 1)], dtype=np.int64
    )


def _rank(rows: np.ndarray, total: int) -> np.ndarray:
    """Position of each composition in :func:`_compositions` order (vectorised).

    At part i, with r jobs still to place and a = parts - i - 1 parts after it, the
    compositions that agree so far but put fewer jobs on part i number
    C(r + a, a) - C(r - n_i + a, a) (hockey-stick identity).
    """
    parts = rows.shape[1]
    out = np.zeros(rows.shape[0], dtype=np.int64)
    if parts <= 1:
        return out
    binom = _binomials(total, parts)
    left = np.full(rows.shape[0], total, dtype=np.int64)
    for i in range(parts - 1):
        a = parts - i - 1
        out += binom[left, a] - binom[left - rows[:, i], a]
        left = left - rows[:, i]
    return out


# --------------------------------------------------------------------------- chain


@dataclass(frozen=True)
class _ClassChain:
    """Stations visited by one class (index M is its think time) and their parameters."""

    stations: np.ndarray  # route, station indices (M = think)
    visits: np.ndarray  # relative visit ratios along the route
    service: np.ndarray  # mean service time per visit along the route
    population: int

    @property
    def n_states(self) -> int:
        return _n_compositions(self.population, self.stations.size)


def _class_chains(net: Network) -> list[_ClassChain]:
    M = net.n_stations
    out = []
    for c in range(net.n_classes):
        route = np.flatnonzero(net.visits[c] > 0)
        V, S = net.visits[c, route], net.service[c, route]
        if net.think_time[c] > 0:
            route = np.append(route, M)
            V, S = np.append(V, 1.0), np.append(S, net.think_time[c])
        out.append(_ClassChain(route, V, S, int(net.population[c])))
    return out


def state_count(net: Network) -> int:
    """Number of states of the chain :func:`joint_distribution` would build."""
    return math.prod(ch.n_states for ch in _class_chains(net))


def _check_options(max_states: object, solver: object) -> tuple[int, str]:
    if isinstance(max_states, bool) or not isinstance(max_states, Integral) or max_states < 1:
        raise InputError("max_states", max_states, "an integer >= 1")
    if solver not in ("auto", "direct", "iterative"):
        raise InputError("solver", solver, "one of auto, direct, iterative")
    return int(max_states), str(solver)


def _anchor(counts: np.ndarray, net: Network, chains: list[_ClassChain]) -> int:
    """The state whose balance equation is dropped (pinned at pi = 1), chosen for conditioning.

    Pinning an unlikely state leaves a system whose solution spans dozens of orders of magnitude
    above the pin, which iterative solvers cannot resolve on stiff chains; pinning a likely one
    keeps it well conditioned. The guess is the heaviest state under product-form weights. It is
    only a guess: the chain itself is solved exactly whatever state is pinned.
    """
    C, M = net.n_classes, net.n_stations
    D = np.zeros((C, M + 1))
    for c, ch in enumerate(chains):
        D[c, ch.stations] = ch.visits * ch.service
    log_w = xlogy(counts, D[None, :, :]).sum(axis=1) - gammaln(counts + 1.0).sum(axis=1)
    total = counts.sum(axis=1)
    for k in range(M):
        if not net.is_delay[k]:
            log_a = np.concatenate(
                [[0.0], np.cumsum(np.log(net.alpha_at(k, np.arange(1, total[:, k].max() + 1))))]
            )
            log_w[:, k] += gammaln(total[:, k] + 1.0) - log_a[total[:, k]]
    return int(np.argmax(log_w.sum(axis=1)))


def _pinned(At: sp.csc_array, anchor: int, method: str) -> np.ndarray:
    """Solve the balance equations with pi(anchor) = 1 and its equation dropped."""
    keep = np.ones(At.shape[0], dtype=bool)
    keep[anchor] = False
    rows = At[keep]
    A = sp.csr_array(rows[:, keep])
    b = -rows[:, [anchor]].toarray().ravel()
    if method == "direct":
        x = spsolve(sp.csc_array(A), b)
    else:
        # Divide each balance equation by the state's outflow rate: the equations then read in
        # units of probability, so the stopping test weighs slow states like fast ones (on the
        # raw equations the fastest states dominate the residual norm of stiff chains).
        scale = 1.0 / A.diagonal()  # the diagonal is minus the outflow rate: never 0
        A = sp.csr_array(sp.diags_array(scale) @ A)
        b = b * scale
        if method == "bicgstab":
            x, _ = bicgstab(A, b, rtol=1e-13, atol=0.0, maxiter=2_000)
        else:  # short restarts: scipy's orthogonalisation dominates the cost on long ones
            x, _ = gmres(A, b, rtol=1e-13, atol=0.0, restart=30, maxiter=100)
    pi = np.empty(At.shape[0])
    pi[keep] = x
    pi[anchor] = 1.0
    pi = np.maximum(pi, 0.0)  # round-off leaves -1e-17 on states of negligible probability
    total = pi.sum()
    # A Krylov breakdown can leave NaN; the caller's residual test then rejects this answer.
    return pi / total if np.isfinite(total) and total > 0 else np.full_like(pi, np.nan)


def _residual(At: sp.csc_array, pi: np.ndarray) -> float:
    """max_s |(pi Q)_s| / |Q_ss|, relative to max pi: the balance error in probability units."""
    if not np.all(np.isfinite(pi)):
        return math.inf
    return float(np.abs((At @ pi) / At.diagonal()).max() / pi.max())


def _solve_balance(Qgen: sp.csr_array, solver: str, anchor: int) -> tuple[np.ndarray, str, float]:
    """pi with pi Q = 0 and sum(pi) = 1, the linear solver that found it, and its residual.

    One state is pinned at pi = 1 and its balance equation dropped: what remains is nonsingular
    for an irreducible chain and keeps the sparsity (a normalisation row of ones would be
    dense). LU factors of these chains fill in almost completely (every station exchanges jobs
    with every other, so the chain is a high-dimensional lattice), hence Krylov solvers with a
    diagonal preconditioner beyond a few thousand states: they cost a few sparse products per
    iteration. BiCGSTAB is tried first (fastest here); if it falls short, GMRES, then GMRES
    pinned at the heaviest state found, then (in ``"auto"``, for moderate chains) SuperLU.
    """
    n = Qgen.shape[0]
    if n == 1:
        return np.ones(1), "trivial", 0.0
    At = sp.csc_array(Qgen.T)
    if solver == "direct" or (solver == "auto" and n <= _DIRECT_LIMIT):
        pi = _pinned(At, anchor, "direct")
        return pi, "direct", _residual(At, pi)
    best: tuple[np.ndarray, str, float] | None = None
    for method in ("bicgstab", "gmres", "gmres-repinned"):
        if method == "gmres-repinned":
            assert best is not None
            if int(best[0].argmax()) == anchor:
                continue
            anchor = int(best[0].argmax())
        pi = _pinned(At, anchor, method.removesuffix("-repinned"))
        res = _residual(At, pi)
        if best is None or res < best[2]:
            best = (pi, method, res)
        if res <= _RESIDUAL_TOL:
            return best
    assert best is not None
    if solver == "auto" and n <= _DIRECT_FALLBACK:
        pi = _pinned(At, int(best[0].argmax()), "direct")
        return pi, "direct", _residual(At, pi)
    return best


def joint_distribution(
    net: Network, *, max_states: int = DEFAULT_MAX_STATES, solver: LinearSolver = "auto"
) -> JointDistribution:
    """Build and solve the Markov chain of a closed network (see the module docstring)."""
    net.require_product_form("ctmc")
    _check_closed(net, "ctmc")
    max_states, solver = _check_options(max_states, solver)
    chains = _class_chains(net)
    n_states = math.prod(ch.n_states for ch in chains)
    if n_states > max_states:
        raise UnsupportedModelError(
            "max_states",
            max_states,
            f"a chain of at most {max_states:,} states for method 'ctmc' (this model has "
            f'{n_states:,}); raise max_states or use method "nc" or "exact"',
        )
    jobs = int(net.population.sum())
    if jobs >= max_states:  # the marginals have jobs + 1 entries, even where states are few
        raise UnsupportedModelError(
            "max_states",
            max_states,
            f"fewer jobs than max_states ({max_states:,}) for method 'ctmc' (this model has "
            f'{jobs:,}); use method "exact" or "linearizer"',
        )
    C, M = net.n_classes, net.n_stations

    # Global state s = sum_c rank_c * stride_c (C order over classes).
    sizes = [ch.n_states for ch in chains]
    strides = [math.prod(sizes[c + 1 :]) for c in range(C)]
    ranks = np.unravel_index(np.arange(n_states), sizes)
    counts = np.zeros((n_states, C, M + 1), dtype=np.int64)
    for c, ch in enumerate(chains):
        counts[:, c, ch.stations] = _compositions(ch.population, ch.stations.size)[ranks[c]]
    at_station = counts.sum(axis=1)  # [S, M + 1]

    rows, cols, vals = [], [], []
    completions = np.zeros((n_states, C, M + 1))
    for c, ch in enumerate(chains):
        comp = _compositions(ch.population, ch.stations.size)
        p_next = ch.visits / ch.visits.sum()
        for a, k in enumerate(ch.stations):
            n_ck = counts[:, c, k]
            if k < M and not net.is_delay[k]:
                n_k = np.maximum(at_station[:, k], 1)
                rate = net.alpha_at(int(k), n_k) * n_ck / n_k / ch.service[a]
            else:
                rate = n_ck / ch.service[a]
            completions[:, c, k] = rate
            busy = np.flatnonzero(n_ck > 0)
            for b in range(ch.stations.size):
                if b == a:
                    continue  # a self-loop changes no state (it still counts as a completion)
                moved = comp.copy()
                moved[:, a] -= 1
                moved[:, b] += 1
                valid = comp[:, a] > 0
                delta = np.zeros(comp.shape[0], dtype=np.int64)
                delta[valid] = _rank(moved[valid], ch.population) - np.flatnonzero(valid)
                rows.append(busy)
                cols.append(busy + delta[ranks[c][busy]] * strides[c])
                vals.append(rate[busy] * p_next[b])
    if rows:
        r, k_, v = np.concatenate(rows), np.concatenate(cols), np.concatenate(vals)
    else:
        r = k_ = np.zeros(0, dtype=np.int64)
        v = np.zeros(0)
    off = sp.coo_array((v, (r, k_)), shape=(n_states, n_states)).tocsr()
    Qgen = (off - sp.diags_array(np.asarray(off.sum(axis=1)).ravel())).tocsr()
    pi, used, residual = _solve_balance(Qgen, solver, _anchor(counts, net, chains))
    if residual > _RESIDUAL_TOL:
        raise UnsupportedModelError(
            "solver",
            solver,
            f"a chain that '{used}' solves to a relative residual <= {_RESIDUAL_TOL:g} (reached "
            f'{residual:.2g} on {n_states:,} states); try solver "direct" or method "nc"',
        )
    flow = np.einsum("s,sck->ck", pi, completions)
    return JointDistribution(
        counts=counts[:, :, :M],
        thinking=counts[:, :, M],
        probabilities=pi,
        completions=flow[:, :M],
        think_completions=flow[:, M],
        residual=residual,
        linear_solver=used,
    )


def solve(
    net: Network, *, max_states: int = DEFAULT_MAX_STATES, solver: LinearSolver = "auto"
) -> Solution:
    """Solve a closed network exactly from its Markov chain.

    ``extra["marginals"][station]`` is P(n_k = j), j = 0..|N|, for the total number of jobs
    (all classes) at each station. ``extra["states"]`` is the number of states of the chain.
    ``extra["residual"]`` is max_s |(pi Q)_s / Q_ss| / max pi (at most 1e-11, or
    ``UnsupportedModelError`` is raised). ``solver`` picks SuperLU (``"direct"``; slow and
    memory-hungry beyond ~10^4 states, whose LU factors fill in), Jacobi-preconditioned
    BiCGSTAB then GMRES (``"iterative"``), or the first up to 2,000 states and the second
    beyond (``"auto"``, which falls back to SuperLU up to 10,000 states if both stall).
    """
    joint = joint_distribution(net, max_states=max_states, solver=solver)
    pi = joint.probabilities
    C = net.n_classes
    chains = _class_chains(net)
    X = np.zeros(C)
    for c, ch in enumerate(chains):
        if ch.population > 0:
            flow = np.append(joint.completions[c], joint.think_completions[c])[ch.stations]
            X[c] = flow.sum() / ch.visits.sum()
    Q = np.einsum("s,sck->ck", pi, joint.counts)
    total = int(net.population.sum())
    at_station = joint.counts.sum(axis=1)
    marginals = {
        name: np.bincount(at_station[:, k], weights=pi, minlength=total + 1)
        for k, name in enumerate(net.station_names)
    }
    extra = {"marginals": marginals, "states": joint.n_states, "residual": joint.residual}
    return Solution(
        "ctmc", net, X, Q, notes=net.product_form_notes(), extra=extra, queue_marginals=marginals
    )
