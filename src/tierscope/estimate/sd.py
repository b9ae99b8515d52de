"""State-divergence estimation (SD, seed 004 ch. 5): demands whose model queue-length
distributions are closest to the observed ones.

The model is the closed product-form network of the observations: the stations (processor
sharing, ``servers`` each), the classes with their populations and think times. For demands Θ
the per-class marginal probability of every station state n_k = (n_k1..n_kC) follows from the
normalising constant (Eq. 5.1; :func:`tierscope.qn.nc.class_marginals`). SD minimises a
divergence between the empirical marginals P (queue-length samples) and the model's Q over a
truncated set of states — ``k_states`` per station and population, the rest lumped into one
"unobserved" state on both sides — subject, optionally, to the model throughput staying within
``delta`` of the measured one (|X̃ - X| <= δ X̃), with 1e-10 <= θ <= R̃ (R̃: the measured
response time, or the cycle time N/X̃ when response times were not measured).

State selection (seed 004 §7.6): ``largest`` keeps the k most probable observed states;
``bands`` drops states with p <= 1e-5, splits the rest into high, medium and low probability
bands and keeps the most probable k/3 of each. Search (§4, the MATLAB optimisers it used):
``local`` (fmincon: one local solve from θ = R̃/2; fast, may stop in a poor optimum),
``multistart`` (MultiStart: a Latin hypercube of starts, a local solve from each) and
``global`` (GlobalSearch: scatter starts scored by the objective, local solves from the most
promising few). Divergences: Hellinger (default; the thesis' choice), Bhattacharyya,
Kullback–Leibler, Jensen–Shannon.

Run time grows with the states kept and the starts; ``run_time_`` reports it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import ClassVar

import numpy as np
from scipy.optimize import minimize, minimize_scalar
from scipy.stats import qmc

from tierscope.errors import InputError
from tierscope.estimate._data import Observations
from tierscope.estimate.base import Estimator, block_indices
from tierscope.qn.nc import class_marginals
from tierscope.qn.network import Network, rate_multipliers

DIVERGENCES = ("hellinger", "bhattacharyya", "kl", "js")
SEARCHES = ("local", "multistart", "global")
STATES = ("largest", "bands")
#: States this improbable are dropped before the bands are formed (seed 004 §7.6).
NEGLIGIBLE = 1e-5
_EPS = 1e-300
#: Think times below this share of the response time leave the demands' scale to the throughput.
NO_THINK = 0.01


def divergence(kind: str, p: np.ndarray, q: np.ndarray) -> float:
    """D(P, Q) of two distributions on the same states."""
    q = np.maximum(q, 0.0)
    if kind in ("hellinger", "bhattacharyya"):
        bc = float(np.sum(np.sqrt(p * q)))
        if kind == "hellinger":
            return math.sqrt(max(0.0, 1.0 - bc))
        return -math.log(max(bc, _EPS))
    if kind == "kl":
        has = p > 0
        return float(np.sum(p[has] * np.log(p[has] / np.maximum(q[has], _EPS))))
    m = (p + q) / 2
    has_p, has_q = p > 0, q > 0
    kl_pm = np.sum(p[has_p] * np.log2(p[has_p] / m[has_p]))
    kl_qm = np.sum(q[has_q] * np.log2(q[has_q] / m[has_q]))
    return float((kl_pm + kl_qm) / 2)


class SD(Estimator):
    """Demands of a closed product-form model matched to observed queue-length distributions."""

    name = "sd"
    needs: ClassVar[tuple[str, ...]] = ("queue", "population")
    summary = "state divergence: model vs observed queue-length distributions (seed 004 ch. 5)"
    default_boot = 20

    def __init__(
        self,
        *,
        k_states: int = 15,
        states: str = "largest",
        search: str = "multistart",
        divergence: str = "hellinger",
        delta: float | None = None,
        starts: int = 16,
        n_boot: int | None = None,
        confidence: float = 0.95,
        seed: int = 1,
    ) -> None:
        super().__init__(n_boot=n_boot, confidence=confidence, seed=seed)
        self.k_states = k_states
        self.states = states
        self.search = search
        self.divergence = divergence
        self.delta = delta
        self.starts = starts

    # ---- contract ----------------------------------------------------------------------------
    def _check_params(self) -> None:
        super()._check_params()
        k = self.k_states
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise InputError("k_states", k, "an integer >= 1")
        for name, value, allowed in (
            ("states", self.states, STATES),
            ("search", self.search, SEARCHES),
            ("divergence", self.divergence, DIVERGENCES),
        ):
            if value not in allowed:
                raise InputError(name, value, "one of " + ", ".join(allowed))
        if self.delta is not None and not (isinstance(self.delta, float | int) and self.delta > 0):
            raise InputError("delta", self.delta, "a tolerance > 0, or None (unconstrained)")
        if isinstance(self.starts, bool) or not isinstance(self.starts, int) or self.starts < 1:
            raise InputError("starts", self.starts, "an integer >= 1")

    def fit(self, data: Observations):  # type: ignore[override]
        started = time.perf_counter()
        super().fit(data)
        self.run_time_ = time.perf_counter() - started
        return self

    def divergences(self, data: Observations, demands: np.ndarray) -> dict[str, float]:
        """Every divergence between the observed marginals of ``data`` and the model's with
        ``demands`` [K, C] (CPU s: another method's, to set beside SD's own), over the states
        this fit keeps; averaged over stations and populations as the fit does."""
        problem = _Problem.build(data, self)
        x = np.asarray(demands, dtype=float) / problem.scale[None, :]
        out = {}
        for kind in DIVERGENCES:
            value = problem.evaluate(x.ravel(), kind)[0]
            out[kind] = math.sqrt(value) if kind == "hellinger" else value
        return out

    def _bootstrap(self, data: Observations) -> None:
        # replicates go through _estimate too: keep the point estimate's diagnostics
        kept = (self.objective_, self.states_kept_, self.fit_time_)
        super()._bootstrap(data)
        self.objective_, self.states_kept_, self.fit_time_ = kept

    def _resample(self, data: Observations, rng: np.random.Generator) -> Observations:
        assert data.queue is not None
        return data.rows(block_indices(data.n_windows, rng)).samples(
            block_indices(data.queue.shape[0], rng)
        )

    def _estimate(self, data: Observations) -> np.ndarray:
        started = time.perf_counter()
        problem = _Problem.build(data, self)
        theta = problem.throughput_scaled(self._search(problem))
        self.fit_time_ = time.perf_counter() - started
        objective = problem.objective(theta)
        self.objective_ = math.sqrt(objective) if self.divergence == "hellinger" else objective
        self.states_kept_ = problem.states_kept
        return problem.demands(theta)

    # ---- search --------------------------------------------------------------------------------
    def _search(self, problem: _Problem) -> np.ndarray:
        d = problem.dim
        lo, hi = problem.lower, np.ones(d)
        rng_seed = self.seed
        if self.search == "local":
            starts = [np.full(d, 0.5)]
        elif self.search == "multistart":
            starts = list(
                lo + (hi - lo) * qmc.LatinHypercube(d=d, seed=rng_seed).random(self.starts)
            )
        else:  # global: scatter starts scored by the objective, local solves from the best few
            cand = lo + (hi - lo) * qmc.LatinHypercube(d=d, seed=rng_seed).random(10 * self.starts)
            scores = np.array([problem.objective(x) for x in cand])
            starts = list(cand[np.argsort(scores)[: max(2, self.starts // 4)]])
        best_x, best_f = starts[0], math.inf
        for x0 in starts:
            x, f = problem.local(x0)
            if f < best_f:
                best_x, best_f = x, f
        return best_x


class _Problem:
    """The optimisation problem of one SD fit: targets, kept states and the model."""

    def __init__(self) -> None:
        self.groups: list[dict] = []

    @classmethod
    def build(cls, data: Observations, sd: SD) -> _Problem:
        assert data.queue is not None
        self = cls()
        self.sd = sd
        K, C = len(data.stations), len(data.classes)
        self.K, self.C = K, C
        self.stations, self.classes = data.stations, data.classes
        self.servers = data.servers
        queue = data.queue
        qweight = np.ones(queue.shape[0]) if data.queue_weight is None else data.queue_weight
        qpop = data.queue_population
        if qpop is None:
            if data.population is None or np.ptp(data.population, axis=0).max() > 0:
                raise InputError(
                    "pop_<class>",
                    None,
                    "the population of every queue-length sample",
                    source=data.source,
                )
            qpop = np.repeat(data.population[:1], queue.shape[0], axis=0)
        think = _think_times(data)
        self.think = think
        x_meas, r_bound = _targets(data, think)
        self.scale = r_bound  # [C] θ = x * scale, x in [lower, 1]
        self.lower = np.full(K * C, 0.0)
        self.lower[:] = np.maximum(1e-10 / np.tile(r_bound, K), 1e-12)
        for pop in np.unique(qpop, axis=0):
            rows = np.all(qpop == pop, axis=1)
            if pop.sum() == 0:
                continue
            group = {
                "population": pop.astype(int),
                "weight": float(qweight[rows].sum()),
                "stations": [],
            }
            samples, w = queue[rows], qweight[rows]
            for k in range(K):
                seen = ~np.isnan(samples[:, k, :]).any(axis=1)
                if not seen.any():  # a station not observed: the others' marginals fit
                    group["stations"].append(None)
                    continue
                states, inverse = np.unique(samples[seen, k, :], axis=0, return_inverse=True)
                probs = np.bincount(inverse.ravel(), weights=w[seen], minlength=len(states))
                probs = probs / probs.sum()
                keep = _select(states, probs, sd.k_states, sd.states)
                group["stations"].append(
                    {
                        "states": states[keep].astype(int),
                        "p": np.append(probs[keep], max(0.0, 1 - probs[keep].sum())),
                    }
                )
            group["x"] = x_meas.get(tuple(pop.tolist()))
            self.groups.append(group)
        if not self.groups:
            raise InputError("n_<station>_<class>", None, "queue-length samples with jobs present")
        self.states_kept = int(
            sum(len(s["states"]) for g in self.groups for s in g["stations"] if s is not None)
        )
        self._cache: dict[bytes, float] = {}
        return self

    @property
    def dim(self) -> int:
        return self.K * self.C

    def demands(self, x: np.ndarray) -> np.ndarray:
        return np.asarray(x).reshape(self.K, self.C) * self.scale[None, :]

    def network(self, D: np.ndarray, pop: np.ndarray) -> Network:
        """The model with demands D [K, C]: a station of c cores (c may be a fraction: a
        quota) is m = max(1, round(c)) servers, each at speed c / m."""
        K, C = self.K, self.C
        m = np.maximum(np.rint(self.servers), 1)
        speed = self.servers / m
        return Network(
            station_names=self.stations,
            class_names=self.classes,
            is_delay=np.zeros(K, dtype=bool),
            servers=m.astype(np.int64),
            alpha=tuple(rate_multipliers(int(k), None) for k in m),
            discipline=("ps",) * K,
            visits=np.ones((C, K)),
            service=(D / speed[:, None]).T.copy(),
            is_open=np.zeros(C, dtype=bool),
            population=pop.astype(np.int64),
            arrival_rate=np.zeros(C),
            think_time=self.think,
        )

    def evaluate(self, x: np.ndarray, kind: str | None = None) -> tuple[float, list[np.ndarray]]:
        """Divergence (``kind``, default the fit's; Hellinger squared) averaged over groups and
        stations, and each group's model throughputs."""
        kind = kind or self.sd.divergence
        D = self.demands(np.maximum(x, self.lower))
        total, weights, xs = 0.0, 0.0, []
        for g in self.groups:
            _counts, marg, X = class_marginals(self.network(D, g["population"]))
            strides = np.array([math.prod(g["population"][c + 1 :] + 1) for c in range(self.C)])
            xs.append(X)
            for k, st in enumerate(g["stations"]):
                if st is None:
                    continue
                q_all = marg[self.stations[k]]
                idx = st["states"] @ strides
                q = q_all[idx]
                q = np.append(q, max(0.0, 1 - q.sum()))
                d = divergence(kind, st["p"], q)
                # Hellinger is searched squared: same minimiser, smooth where it reaches 0
                total += g["weight"] * (d * d if kind == "hellinger" else d)
                weights += g["weight"]
        return total / weights, xs

    def objective(self, x: np.ndarray) -> float:
        key = np.asarray(x).tobytes()
        if key not in self._cache:
            self._cache[key] = self.evaluate(x)[0]
        return self._cache[key]

    def throughput_scaled(self, x: np.ndarray) -> np.ndarray:
        """``x`` scaled so that the model's throughputs match the measured ones (least squares
        of their logarithms), when nothing else sets the scale: without think times, demands
        all multiplied by one factor leave every marginal as it was (think times below
        :data:`NO_THINK` of the response time count as none)."""
        groups = [(i, g["x"]) for i, g in enumerate(self.groups) if g["x"] is not None]
        if np.any(self.think > NO_THINK * self.scale) or not groups:
            return x

        def misfit(log_s: float) -> float:
            xs = self.evaluate(x * math.exp(log_s))[1]
            return float(
                sum(
                    np.sum((np.log(np.maximum(xs[i], _EPS)) - np.log(np.maximum(t, _EPS))) ** 2)
                    for i, t in groups
                )
            )

        best = minimize_scalar(misfit, bounds=(-12.0, 12.0), method="bounded")
        return x * math.exp(float(best.x))

    def constraints(self) -> list[dict[str, Callable]]:
        delta = self.sd.delta
        if delta is None:
            return []
        groups = [(i, g) for i, g in enumerate(self.groups) if g["x"] is not None]

        def slack(x: np.ndarray) -> np.ndarray:
            xs = self.evaluate(x)[1]
            out = []
            for i, g in groups:
                target = g["x"]
                out.append(delta * target - np.abs(target - xs[i]))
            return np.concatenate(out) if out else np.zeros(1)

        return [{"type": "ineq", "fun": slack}] if groups else []

    def local(self, x0: np.ndarray) -> tuple[np.ndarray, float]:
        bounds = list(zip(self.lower, np.ones(self.dim), strict=True))
        cons = self.constraints()
        if cons:
            res = minimize(
                self.objective,
                x0,
                method="SLSQP",
                bounds=bounds,
                constraints=cons,
                options={"maxiter": 200, "ftol": 1e-10},
            )
            feasible = np.all(cons[0]["fun"](res.x) >= -1e-6)
            return res.x, float(res.fun) if feasible else math.inf
        res = minimize(self.objective, x0, method="L-BFGS-B", bounds=bounds)
        return res.x, float(res.fun)


def _select(states: np.ndarray, probs: np.ndarray, k: int, how: str) -> np.ndarray:
    """Indices of the observed states kept."""
    order = np.argsort(-probs, kind="stable")
    if how == "largest":
        return order[:k]
    order = order[probs[order] > NEGLIGIBLE]
    if order.size <= k:
        return order
    bands = np.array_split(order, 3)
    per = [k // 3 + (1 if i < k % 3 else 0) for i in range(3)]
    return np.concatenate([b[:n] for b, n in zip(bands, per, strict=True)])


def _think_times(data: Observations) -> np.ndarray:
    if data.think_time is not None:
        return data.think_time.astype(float)
    if data.response_time is None or data.population is None:
        raise InputError(
            "z_<class>",
            None,
            "think times (columns z_<class>), or response times and populations to derive them",
            source=data.source,
        )
    X, R, N = data.throughput, data.response_time, data.population
    with np.errstate(divide="ignore", invalid="ignore"):
        z = N / X - R
    return np.maximum(np.nanmean(np.where(np.isfinite(z), z, np.nan), axis=0), 0.0)


def _targets(data: Observations, think: np.ndarray) -> tuple[dict[tuple, np.ndarray], np.ndarray]:
    """Measured throughput per population group, and the upper bound R̃ of each class's θ."""
    X = data.throughput
    pops = data.population
    x_by_pop: dict[tuple, np.ndarray] = {}
    if pops is not None:
        for pop in np.unique(pops, axis=0):
            rows = np.all(pops == pop, axis=1)
            x_by_pop[tuple(pop.astype(int).tolist())] = X[rows].mean(axis=0)
    if data.response_time is not None and np.isfinite(data.response_time).any():
        bound = np.nanmax(data.response_time, axis=0)
    else:
        assert pops is not None
        with np.errstate(divide="ignore", invalid="ignore"):
            bound = np.nanmax(np.where(X > 0, pops / X, np.nan), axis=0) - think
    bound = np.where(np.isfinite(bound) & (bound > 0), bound, 1.0)
    return x_by_pop, bound


__all__ = ["DIVERGENCES", "SD", "SEARCHES", "STATES", "divergence"]
