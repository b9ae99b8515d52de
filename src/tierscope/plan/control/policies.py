"""Elastic controllers, one interface: observe the last interval, decide the replicas.

Every controller gets an :class:`Observation` at the end of each control interval and returns
the replicas each component should have (within the bounds it was given); the evaluation loop
(:mod:`tierscope.plan.control.evaluate`) applies the change — a replica added serves after its
start-up delay, one removed takes no new request and finishes those it holds.

- ``static``: a fixed configuration (the spec's, or one sized for the trace's peak or mean by
  the calibrated model: ``static-peak``, ``static-mean``).
- ``threshold``: a Kubernetes HPA per component: desired = ceil(replicas x utilisation /
  target) outside a ±10 % tolerance, scaled down only to the highest desire of the last
  ``stabilization`` seconds.
- ``iae``: Malkowski's Integrative Adaptation Engine (seed 001 §1.6, §2.4): an operational data
  store of per-second throughput vectors with configuration, cost and SLA; on a violated
  *sensitive* SLA (scale up) or a fully met one (scale down), the anticipated throughput (the
  current one times the Fourier forecast's relative change) is looked up with the asymmetric
  distance (α = 0: only shortfalls count) below a threshold of 50 requests/s, configurations
  with support >= 30 and mean SLA >= 90 % are kept and the cheapest, most recently used one is
  chosen; without one the horizontal scale model adds a replica to the component with the
  highest CPU utilisation (or removes one from the lowest).
- ``model``: tierscope's own: the cheapest configuration whose calibrated queueing model meets
  the SLO at the forecast load (the Fourier forecast, never below the current load).
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from tierscope.plan.control.forecast import fourier_forecast


@dataclass(frozen=True)
class Observation:
    """What a controller sees at the end of a control interval.

    ``config``: the replicas it decided last (some may still be starting); ``running``: those
    serving; ``utilization``: per component, CPU used over the CPU its running replicas may use
    (their quotas, or their processes); ``sla``: the share of the interval's requests answered
    within the SLO's threshold, ``sensitive_sla`` within half of it; ``per_second``: requests
    completed in each second of the interval, and ``sla_per_second`` each second's SLA;
    ``loads``: the trace's load at the end of every interval so far; ``horizon``: how far ahead
    a decision taken now must look (a replica's start-up delay, then one interval).
    """

    t: float
    interval: float
    load: float
    config: dict[str, int]
    running: dict[str, int]
    throughput: float
    utilization: dict[str, float]
    sla: float
    sensitive_sla: float
    per_second: np.ndarray
    sla_per_second: np.ndarray
    loads: tuple[float, ...]
    horizon: float


class Controller(Protocol):
    name: str

    def decide(self, obs: Observation) -> dict[str, int]:
        """The replicas each component should have from now on."""
        ...


@dataclass(frozen=True)
class Bounds:
    """Replicas each component may have."""

    low: dict[str, int]
    high: dict[str, int]

    def clamp(self, config: dict[str, int]) -> dict[str, int]:
        return {c: min(max(n, self.low[c]), self.high[c]) for c, n in config.items()}


@dataclass
class Static:
    config: dict[str, int]
    name: str = "static"

    def decide(self, obs: Observation) -> dict[str, int]:
        return dict(self.config)


@dataclass
class Threshold:
    """A Kubernetes HPA on CPU utilisation, one per component."""

    bounds: Bounds
    target: float = 0.6
    tolerance: float = 0.1
    stabilization: float = 300.0
    name: str = "threshold"
    _desires: deque = field(default_factory=deque)

    def decide(self, obs: Observation) -> dict[str, int]:
        desired = {}
        for c, n in obs.config.items():
            ratio = obs.utilization.get(c, 0.0) / self.target
            running = obs.running.get(c, n)
            desired[c] = n if abs(ratio - 1) <= self.tolerance else math.ceil(running * ratio)
        desired = self.bounds.clamp(desired)
        self._desires.append((obs.t, desired))
        while self._desires and self._desires[0][0] < obs.t - self.stabilization:
            self._desires.popleft()
        # Up at once; down only as far as every desire of the window allows.
        return {
            c: max(n, *(d[c] for _, d in self._desires)) if n < obs.config[c] else n
            for c, n in desired.items()
        }


class OperationalDataStore:
    """IAE's append-only store (seed 001 §1.6): one row per second of observed throughput
    vector, the configuration it ran on, its SLA, and when. Kept as arrays that grow by
    doubling, with each configuration numbered, so a query over 10^5 rows is a few vector
    operations (cost = replicas in all, as in the thesis)."""

    def __init__(self) -> None:
        self._ids: dict[tuple[int, ...], int] = {}
        self._n = 0
        self._x = np.empty((0, 0))
        self._config = np.empty(0, dtype=np.int64)
        self._sla = np.empty(0)
        self._t = np.empty(0)

    def __len__(self) -> int:
        return self._n

    def configurations(self) -> set[tuple[int, ...]]:
        return set(self._ids)

    def rows(self) -> tuple[np.ndarray, list[tuple[int, ...]], np.ndarray, np.ndarray]:
        """Every row: throughput vectors, configurations, SLAs, times."""
        keys = list(self._ids)
        n = self._n
        return self._x[:n], [keys[i] for i in self._config[:n]], self._sla[:n], self._t[:n]

    def append(self, x: np.ndarray, config: tuple[int, ...], sla: np.ndarray, t: float) -> None:
        """Rows ``x`` (seconds x interaction types) observed on ``config`` with their SLA."""
        x = np.asarray(x, dtype=float)
        n = len(x)
        if not n:
            return
        if self._n + n > len(self._sla):
            size = max(2 * len(self._sla), self._n + n, 1024)
            grow = lambda a, shape: np.resize(a, shape)  # noqa: E731 (keeps the data)
            self._x = grow(self._x, (size, x.shape[1])) if self._n else np.empty((size, x.shape[1]))
            self._config, self._sla, self._t = (
                grow(a, size) for a in (self._config, self._sla, self._t)
            )
        i = self._ids.setdefault(tuple(int(v) for v in config), len(self._ids))
        rows = slice(self._n, self._n + n)
        self._x[rows], self._config[rows] = x, i
        self._sla[rows], self._t[rows] = sla, float(t)
        self._n += n

    def query(
        self, y: np.ndarray, *, threshold: float, alpha: float, min_support: int, min_sla: float
    ) -> tuple[int, ...] | None:
        """The cheapest (then most recently used) configuration among those with at least
        ``min_support`` rows within ``threshold`` of ``y`` by the asymmetric distance
        (shortfalls in full, over-capacity times ``alpha``) whose mean SLA is ``min_sla`` or
        more (the thesis's query, eq. 24-25)."""
        if not self._n:
            return None
        d = self._x[: self._n] - y[None, :]
        near = np.sum(np.where(d <= 0, d * d, alpha * d * d), axis=1) < threshold**2
        k = len(self._ids)
        group = self._config[: self._n][near]
        support = np.bincount(group, minlength=k)
        mean_sla = np.bincount(group, weights=self._sla[: self._n][near], minlength=k) / np.maximum(
            support, 1
        )
        last = np.full(k, -np.inf)
        np.maximum.at(last, group, self._t[: self._n][near])
        keys = list(self._ids)
        ok = [i for i in range(k) if support[i] >= min_support and mean_sla[i] >= min_sla]
        if not ok:
            return None
        return keys[min(ok, key=lambda i: (sum(keys[i]), -last[i]))]


@dataclass
class IAE:
    """Malkowski's Integrative Adaptation Engine (see the module notes)."""

    bounds: Bounds
    #: the sensitive SLA's target: below it the controller scales up
    target: float = 0.95
    distance_threshold: float = 50.0
    alpha: float = 0.0
    min_support: int = 30
    min_sla: float = 0.9
    name: str = "iae"
    ods: OperationalDataStore = field(default_factory=OperationalDataStore)

    def decide(self, obs: Observation) -> dict[str, int]:
        names = tuple(obs.config)
        key = tuple(obs.config[c] for c in names)
        if obs.config == obs.running:  # (seconds of a configuration still starting say little)
            seen = np.isfinite(obs.sla_per_second)
            self.ods.append(obs.per_second[seen, None], key, obs.sla_per_second[seen], obs.t)
        up = obs.sensitive_sla < self.target
        down = obs.sensitive_sla >= 1.0 and obs.throughput > 0
        if not (up or down):
            return dict(obs.config)
        ahead = fourier_forecast(np.array(obs.loads), obs.interval, obs.horizon)
        change = ahead / max(obs.load, 1e-9)
        y = np.array([obs.throughput * max(change, 0.0)])
        near = self.ods.query(y, threshold=self.distance_threshold, alpha=self.alpha,
                              min_support=self.min_support, min_sla=self.min_sla)  # fmt: skip
        found = None if near is None else dict(zip(names, near, strict=True))
        # (scaling up, the store may only offer a configuration at least as large)
        larger = found is not None and sum(found.values()) >= sum(obs.config.values())
        if found is not None and found != obs.config and (down or larger):
            return self.bounds.clamp(found)
        return self._horizontal(obs, up)

    def _horizontal(self, obs: Observation, up: bool) -> dict[str, int]:
        """One replica more for the busiest component (or less for the idlest)."""
        config = dict(obs.config)
        pick = max if up else min
        candidates = [
            c
            for c in config
            if (config[c] < self.bounds.high[c] if up else config[c] > self.bounds.low[c])
        ]
        if candidates:
            c = pick(candidates, key=lambda c: obs.utilization.get(c, 0.0))
            config[c] += 1 if up else -1
        return config


@dataclass
class ModelPolicy:
    """The cheapest configuration whose model meets the SLO at the forecast load.

    ``meets(config, load)`` answers from the calibrated model (cached by the caller);
    configurations are tried cheapest first (cost: replicas in all)."""

    bounds: Bounds
    meets: Callable[[dict[str, int], float], bool]
    name: str = "model"

    def decide(self, obs: Observation) -> dict[str, int]:
        forecast = fourier_forecast(np.array(obs.loads), obs.interval, obs.horizon)
        load = max(forecast, obs.load)
        return cheapest(self.bounds, lambda c: self.meets(c, load)) or dict(self.bounds.high)


def cheapest(bounds: Bounds, ok: Callable[[dict[str, int]], bool]) -> dict[str, int] | None:
    """The configuration within ``bounds`` with the fewest replicas for which ``ok`` holds
    (assumed monotone: a configuration no larger than a failed one anywhere fails too)."""
    names = list(bounds.low)
    ranges = [range(bounds.low[c], bounds.high[c] + 1) for c in names]
    failed: list[tuple[int, ...]] = []
    for combo in sorted(itertools.product(*ranges), key=lambda r: (sum(r), r)):
        if any(all(a <= b for a, b in zip(combo, f, strict=True)) for f in failed):
            continue
        config = dict(zip(names, combo, strict=True))
        if ok(config):
            return config
        failed.append(combo)
    return None


POLICIES = ("static", "static-peak", "static-mean", "threshold", "iae", "model")

__all__ = [
    "IAE",
    "POLICIES",
    "Bounds",
    "Controller",
    "ModelPolicy",
    "Observation",
    "OperationalDataStore",
    "Static",
    "Threshold",
    "cheapest",
]
