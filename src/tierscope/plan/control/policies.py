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
    #: the operational data store: (throughput vector, config, cost, sla, time)
    ods: list[tuple[np.ndarray, tuple[int, ...], int, float, float]] = field(default_factory=list)

    def decide(self, obs: Observation) -> dict[str, int]:
        names = tuple(obs.config)
        key = tuple(obs.config[c] for c in names)
        if obs.config == obs.running:  # (seconds of a configuration still starting say little)
            for x, s in zip(obs.per_second, obs.sla_per_second, strict=True):
                if np.isfinite(s):
                    self.ods.append((np.array([x]), key, sum(key), float(s), obs.t))
        up = obs.sensitive_sla < self.target
        down = obs.sensitive_sla >= 1.0 and obs.throughput > 0
        if not (up or down):
            return dict(obs.config)
        ahead = fourier_forecast(np.array(obs.loads), obs.interval, obs.horizon)
        change = ahead / max(obs.load, 1e-9)
        y = np.array([obs.throughput * max(change, 0.0)])
        found = self._empirical(y, names)
        # (scaling up, the store may only offer a configuration at least as large)
        larger = found is not None and sum(found.values()) >= sum(obs.config.values())
        if found is not None and found != obs.config and (down or larger):
            return self.bounds.clamp(found)
        return self._horizontal(obs, up)

    def _empirical(self, y: np.ndarray, names: tuple[str, ...]) -> dict[str, int] | None:
        """The cheapest (then most recent) configuration seen near the anticipated load."""
        groups: dict[tuple[int, ...], list[tuple[float, float, int]]] = {}
        for x, config, cost, sla, t in self.ods:
            d = x - y
            dist = math.sqrt(float(np.sum(np.where(d <= 0, d * d, self.alpha * d * d))))
            if dist < self.distance_threshold:
                groups.setdefault(config, []).append((sla, t, cost))
        best = None
        for config, rows in groups.items():
            sla = float(np.mean([r[0] for r in rows]))
            if len(rows) < self.min_support or sla < self.min_sla:
                continue
            rank = (rows[0][2], -max(r[1] for r in rows))
            if best is None or rank < best[0]:
                best = (rank, config)
        return None if best is None else dict(zip(names, best[1], strict=True))

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
    "Static",
    "Threshold",
    "cheapest",
]
