"""Normalising constant of closed product-form networks by convolution (method ``"nc"``).

The stationary distribution of a closed BCMP network is a product of station factors divided by
the normalising constant G(N). For a population vector n at station k,

* queue: F_k(n) = |n|!/prod n_c! * prod D_ck^n_c / prod_{j=1}^{|n|} alpha_k(j),
* delay (and the think time Z_c, an extra delay station): F_k(n) = prod D_ck^n_c / n_c!,

and G is the convolution of the F_k over the population lattice {n : 0 <= n <= N}. Throughputs
are X_c = G(N - e_c)/G(N); the distribution of the jobs at station k is
P(n_k = m) = F_k(m) G_{-k}(N - m)/G(N), where G_{-k} leaves station k out. Mean queue lengths
and the marginal probabilities of the total number at each station (``extra["marginals"]``)
both come from that distribution, so load-dependent and multi-server stations need no special
case.

Main design decision: every quantity is a logarithm. G(N) for thousands of jobs with demands in
the hundreds is far outside the float range (and D^n/n! at a delay station spans thousands of
orders of magnitude along the lattice, which no single scale factor can fix), so convolutions
add log terms with ``logaddexp``. Each station is folded in by the cheapest exact rule: a
load-independent queue by Buzen's recursion G_k(n) = G_{k-1}(n) + sum_c D_ck G_k(n - e_c)
(O(lattice) work; a cumulative log-sum-exp when one class visits it), a delay station by one
1-D convolution per class (its factor is separable), a load-dependent queue by the recursion
K_s(n) = sum_c D_ck K_{s-1}(n - e_c), G_k = sum_s K_s/A_k(s) over the total s at the station.
The leave-one-out constants G_{-k} come from a divide-and-conquer over the stations, which costs
O(M log M) station convolutions instead of O(M^2).

Cost and limits: the lattice has prod (N_c + 1) points (``max_lattice``, default 100,000). A
load-independent queue costs O(lattice * classes); a delay or load-dependent queue costs
O(lattice * |N|), i.e. O(N^2) for one class (a few seconds at N = 10,000).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral
from typing import Literal

import numpy as np
from scipy.special import gammaln, xlogy

from tierscope.errors import InputError, UnsupportedModelError
from tierscope.qn.network import Network
from tierscope.qn.result import Solution

__all__ = ["DEFAULT_MAX_LATTICE", "class_marginals", "log_normalizing_constant", "solve"]

#: Largest population lattice (prod (N_c + 1)) solved by default.
DEFAULT_MAX_LATTICE = 100_000

_NEG_INF = -np.inf


@dataclass(frozen=True)
class _Factor:
    """One station's factor: demands (as logs) and, if load-dependent, log A(s)."""

    kind: Literal["queue", "ld", "delay"]
    demand: np.ndarray  # [C] D_ck (0 where class c does not visit)
    log_a: np.ndarray | None  # [|N| + 1] log prod_{j<=s} alpha(j) (load-dependent only)

    @property
    def log_d(self) -> np.ndarray:
        with np.errstate(divide="ignore"):
            return np.log(self.demand)

    @property
    def visitors(self) -> np.ndarray:
        return np.flatnonzero(self.demand > 0)


class _Lattice:
    """The population lattice {0..N_1} x ... x {0..N_C}, flattened in C order."""

    def __init__(self, population: np.ndarray) -> None:
        self.dims = tuple(int(n) + 1 for n in population)
        self.size = math.prod(self.dims)
        self.total_max = int(population.sum())
        grids = np.indices(self.dims).reshape(len(self.dims), -1)
        self.counts = grids.T.copy()  # [P, C]
        self.total = self.counts.sum(axis=1)
        self.strides = np.array(
            [math.prod(self.dims[c + 1 :]) for c in range(len(self.dims))], dtype=np.int64
        )
        self._levels: list[np.ndarray] | None = None

    @property
    def levels(self) -> list[np.ndarray]:
        """Flat indices grouped by total population |n| = 0, 1, ..., |N| (built on demand)."""
        if self._levels is None:
            order = np.argsort(self.total, kind="stable")
            bounds = np.searchsorted(self.total[order], np.arange(self.total_max + 2))
            self._levels = [order[bounds[s] : bounds[s + 1]] for s in range(self.total_max + 1)]
        return self._levels

    def log_factor(self, f: _Factor) -> np.ndarray:
        """log F(n) at every lattice point (flat)."""
        n = self.counts
        powers = xlogy(n, f.demand[None, :]).sum(axis=1)  # xlogy: 0 * log 0 = 0
        if f.kind == "delay":
            return powers - gammaln(n + 1.0).sum(axis=1)
        multinomial = gammaln(self.total + 1.0) - gammaln(n + 1.0).sum(axis=1)
        out = multinomial + powers
        if f.log_a is not None:
            out = out - f.log_a[self.total]
        return out


# --------------------------------------------------------------------------- convolutions


def _shift(g: np.ndarray, axis: int, j: int) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
    """Index pair (dst, src) with dst = src + j along ``axis``."""
    dst = [slice(None)] * g.ndim
    src = [slice(None)] * g.ndim
    dst[axis] = slice(j, None)
    src[axis] = slice(None, g.shape[axis] - j)
    return tuple(dst), tuple(src)


def _conv_axis(g: np.ndarray, log_f: np.ndarray, axis: int) -> np.ndarray:
    """out(n) = sum_j g(n - j e_axis) f(j), in logs; f(0) = 1 for every factor used here."""
    out = g.copy()
    for j in range(1, g.shape[axis]):
        if log_f[j] == _NEG_INF:
            continue
        dst, src = _shift(g, axis, j)
        out[dst] = np.logaddexp(out[dst], g[src] + log_f[j])
    return out


def _geometric_axis(g: np.ndarray, log_d: float, axis: int) -> np.ndarray:
    """Buzen's recursion along one axis: out(n) = sum_j D^j g(n - j e_axis).

    Written as D^n * cumsum(g(i) / D^i), so it is one vectorised cumulative log-sum-exp.
    """
    shape = [1] * g.ndim
    shape[axis] = g.shape[axis]
    tilt = (np.arange(g.shape[axis]) * log_d).reshape(shape)
    return tilt + np.logaddexp.accumulate(g - tilt, axis=axis)


def _buzen_lattice(g: np.ndarray, f: _Factor, lat: _Lattice) -> np.ndarray:
    """G_k(n) = G_{k-1}(n) + sum_c D_c G_k(n - e_c), one population level at a time."""
    prev = g.ravel()
    out = prev.copy()
    visitors, log_d = f.visitors, f.log_d
    for idx in lat.levels[1:]:
        acc = prev[idx].copy()
        for c in visitors:
            has = lat.counts[idx, c] > 0
            at = idx[has]
            acc[has] = np.logaddexp(acc[has], log_d[c] + out[at - lat.strides[c]])
        out[idx] = acc
    return out.reshape(g.shape)


def _ld_lattice(g: np.ndarray, f: _Factor, lat: _Lattice) -> np.ndarray:
    """Load-dependent queue visited by several classes.

    K_s(n) = sum_{|m|=s} multinomial(m) D^m g(n - m) obeys K_s(n) = sum_c D_c K_{s-1}(n - e_c),
    and the convolution is sum_s K_s(n) / A(s).
    """
    assert f.log_a is not None
    log_d = f.log_d
    out = g.copy()
    k = g
    for s in range(1, lat.total_max + 1):
        nxt = np.full_like(g, _NEG_INF)
        for c in f.visitors:
            dst, src = _shift(g, int(c), 1)
            nxt[dst] = np.logaddexp(nxt[dst], k[src] + log_d[c])
        k = nxt
        out = np.logaddexp(out, k - f.log_a[s])
    return out


def _convolve(g: np.ndarray, f: _Factor, lat: _Lattice) -> np.ndarray:
    """Fold station factor ``f`` into the lattice function ``g`` (both in logs)."""
    visitors = f.visitors
    if f.kind == "delay":
        # prod_c D_c^n_c / n_c! is separable: one 1-D convolution per visiting class.
        for c in visitors:
            j = np.arange(g.shape[c])
            g = _conv_axis(g, j * f.log_d[c] - gammaln(j + 1.0), int(c))
        return g
    if visitors.size == 1:
        # One visiting class: the multinomial is 1 and the lattice problem is 1-D per fibre.
        c = int(visitors[0])
        if f.kind == "queue":
            return _geometric_axis(g, float(f.log_d[c]), c)
        assert f.log_a is not None
        j = np.arange(g.shape[c])
        return _conv_axis(g, j * f.log_d[c] - f.log_a[j], c)
    if f.kind == "queue":
        return _buzen_lattice(g, f, lat)
    return _ld_lattice(g, f, lat)


def _leave_one_out(base: np.ndarray, factors: list[_Factor], lat: _Lattice) -> list[np.ndarray]:
    """[G_{-k}] for every factor k, with O(M log M) convolutions (divide and conquer)."""
    out: list[np.ndarray] = [base] * len(factors)

    def split(acc: np.ndarray, idx: list[int]) -> None:
        if len(idx) == 1:
            out[idx[0]] = acc
            return
        half = len(idx) // 2
        for mine, others in ((idx[:half], idx[half:]), (idx[half:], idx[:half])):
            a = acc
            for i in others:
                a = _convolve(a, factors[i], lat)
            split(a, mine)

    if factors:
        split(base, list(range(len(factors))))
    return out


# --------------------------------------------------------------------------- set-up


def _check_closed(net: Network, method: str) -> None:
    if net.is_open.any():
        names = ", ".join(np.asarray(net.class_names)[net.is_open])
        raise UnsupportedModelError(
            "method",
            method,
            f'a closed model (open classes: {names}); use method "open" or "exact"',
        )
    D = net.demands
    for c in range(net.n_classes):
        if net.population[c] > 0 and D[c].sum() + net.think_time[c] <= 0:
            raise InputError(
                f"classes[{c}]",
                net.class_names[c],
                "a closed class with a positive demand or think time",
            )


def _check_max(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or int(value) < 1:
        raise InputError(name, value, "an integer >= 1")
    return int(value)


def _factors(net: Network) -> tuple[list[_Factor], list[int]]:
    """Factors of the visited stations (and the think time), with their station index (-1)."""
    total = int(net.population.sum())
    D = net.demands
    factors: list[_Factor] = []
    where: list[int] = []
    for k in range(net.n_stations):
        if not np.any(D[:, k] > 0):
            continue  # F_k = 1 at n = 0 only: the identity of the convolution
        if net.is_delay[k]:
            factors.append(_Factor("delay", D[:, k], None))
        elif net.is_load_dependent[k]:
            s = np.arange(1, total + 1)
            log_a = np.concatenate([[0.0], np.cumsum(np.log(net.alpha_at(k, s)))])
            factors.append(_Factor("ld", D[:, k], log_a))
        else:
            factors.append(_Factor("queue", D[:, k], None))
        where.append(k)
    if np.any(net.think_time > 0):
        factors.append(_Factor("delay", net.think_time.astype(float), None))
        where.append(-1)
    return factors, where


def _lattice(net: Network, max_lattice: int, method: str) -> _Lattice:
    size = math.prod(int(n) + 1 for n in net.population)
    if size > max_lattice:
        raise UnsupportedModelError(
            "population",
            [int(n) for n in net.population],
            f"a population lattice of at most {max_lattice:,} points for method '{method}' "
            f'(this one has {size:,}); raise max_lattice or use method "exact" or "amva"',
        )
    return _Lattice(net.population)


def _delta(lat: _Lattice) -> np.ndarray:
    g = np.full(lat.dims, _NEG_INF)
    g.flat[0] = 0.0
    return g


# --------------------------------------------------------------------------- public


def log_normalizing_constant(net: Network, *, max_lattice: int = DEFAULT_MAX_LATTICE) -> np.ndarray:
    """log G(n) at every population vector 0 <= n <= N, as an array of shape (N_1+1, ...).

    Think times are included (as a delay station), so G is the constant of the whole network.
    """
    net.require_product_form("nc")
    _check_closed(net, "nc")
    lat = _lattice(net, _check_max("max_lattice", max_lattice), "nc")
    g = _delta(lat)
    for f in _factors(net)[0]:
        g = _convolve(g, f, lat)
    return g


def solve(net: Network, *, max_lattice: int = DEFAULT_MAX_LATTICE) -> Solution:
    """Solve a closed product-form network by convolution of the normalising constant.

    Returns throughputs and mean queue lengths; ``extra["log_G"]`` is log G(N) (demands in the
    model's time unit) and ``extra["marginals"][station]`` the array P(n_k = j), j = 0..|N|, of
    the total number of jobs (all classes) at each station.
    """
    net.require_product_form("nc")
    _check_closed(net, "nc")
    lat = _lattice(net, _check_max("max_lattice", max_lattice), "nc")
    C, M = net.n_classes, net.n_stations
    factors, where = _factors(net)
    without = _leave_one_out(_delta(lat), factors, lat)
    log_g = _convolve(without[0], factors[0], lat) if factors else _delta(lat)
    top = tuple(d - 1 for d in lat.dims)
    log_gn = float(log_g[top])

    X = np.zeros(C)
    for c in range(C):
        if net.population[c] > 0:
            below = list(top)
            below[c] -= 1
            X[c] = math.exp(float(log_g[tuple(below)]) - log_gn)

    Q = np.zeros((C, M))
    empty = np.zeros(lat.total_max + 1)
    empty[0] = 1.0
    marginals = {name: empty.copy() for name in net.station_names}
    for f, k, g_rest in zip(factors, where, without, strict=True):
        if k < 0:
            continue  # think time: not a station of the result
        # P(n_k = m) = F_k(m) G_{-k}(N - m) / G(N); flipping every axis maps m to N - m.
        log_p = lat.log_factor(f) + np.flip(g_rest).ravel() - log_gn
        p = np.exp(log_p)
        Q[:, k] = p @ lat.counts
        marginals[net.station_names[k]] = np.bincount(
            lat.total, weights=p, minlength=lat.total_max + 1
        )
    extra = {"log_G": log_gn, "marginals": marginals}
    return Solution(
        "nc", net, X, Q, notes=net.product_form_notes(), extra=extra, queue_marginals=marginals
    )


def class_marginals(
    net: Network, *, max_lattice: int = DEFAULT_MAX_LATTICE
) -> tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]:
    """Per-class marginal distributions of every station (Eq. 5.1 of seed 004).

    Returns ``(counts, marginals, X)``: ``counts[P, C]`` lists every population vector n of the
    lattice, ``marginals[station][p]`` is P(station holds exactly ``counts[p]``) and ``X`` the
    class throughputs. Used by state-divergence demand estimation, which compares these model
    probabilities with observed queue-length states.
    """
    net.require_product_form("nc")
    _check_closed(net, "nc")
    lat = _lattice(net, _check_max("max_lattice", max_lattice), "nc")
    factors, where = _factors(net)
    without = _leave_one_out(_delta(lat), factors, lat)
    log_g = _convolve(without[0], factors[0], lat) if factors else _delta(lat)
    top = tuple(d - 1 for d in lat.dims)
    log_gn = float(log_g[top])
    X = np.zeros(net.n_classes)
    for c in range(net.n_classes):
        if net.population[c] > 0:
            below = list(top)
            below[c] -= 1
            X[c] = math.exp(float(log_g[tuple(below)]) - log_gn)
    at_zero = (lat.total == 0).astype(float)
    marginals = {name: at_zero.copy() for name in net.station_names}
    for f, k, g_rest in zip(factors, where, without, strict=True):
        if k >= 0:
            marginals[net.station_names[k]] = np.exp(
                lat.log_factor(f) + np.flip(g_rest).ravel() - log_gn
            )
    return lat.counts, marginals, X
