"""The one result shape every analytic solver returns, and its JSON form (PRODUCT.md §4.2).

Design decision: a solver hands over only class throughputs X[c] and mean queue lengths Q[c, k];
everything else (per-visit and residence times, station throughputs, utilisations, aggregates) is
derived here with the operational laws. Little's law and the forced-flow law X_k = X * V_k then
hold by construction for every method, and no solver can return inconsistent columns. Solvers
that know the queue-length distribution hand it over too: the utilisation of a station whose rate
falls with the jobs present (a contention law) is the busy share it gives.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tierscope.qn.network import Network


@dataclass(eq=False)
class Solution:
    """Steady-state mean performance of a network.

    Attributes ending in ``_ck`` are [class, station] arrays.
    """

    method: str
    network: Network
    throughput: np.ndarray  # [C] system completions per second
    queue_length_ck: np.ndarray  # [C, M] mean number of class-c jobs at station k
    utilization_ck: np.ndarray | None = None  # default: X_c V_ck S_ck / alpha_k(L) (delay: Q_ck)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    # Measured end-to-end times, for networks where residence times do not add up (fork-join:
    # branches run in parallel); None means the sum of residence times.
    measured_response_time: np.ndarray | None = None
    # Measured visits per second of class c at station k, for networks where a class's station
    # throughput is not X_c V_ck (class switching: jobs visit stations as classes other than the
    # one their request began as, so a class entered only by switching has X_c = 0); visits are
    # then per request of the class's chain, and W_ck = Q_ck / T_ck.
    measured_station_throughput: np.ndarray | None = None
    # P(n_k = j), j = 0, 1, ... (at least up to servers - 1) of the number of jobs at station k,
    # by station name, where the solver knows it: the utilisation of a station with a rate law
    # (has_rate_law) is then its mean share of busy servers, as the simulator measures it.
    queue_marginals: Mapping[str, np.ndarray] | None = None

    def __post_init__(self) -> None:
        self.throughput = np.asarray(self.throughput, dtype=float)
        self.queue_length_ck = np.asarray(self.queue_length_ck, dtype=float)
        net = self.network
        if self.utilization_ck is None:
            # per server: X S / m; with load-dependent rates, relative to the saturation
            # capacity alpha(L) (= m for plain multi-server stations). Delays: the jobs there,
            # per server for a station with more servers than jobs (solved as a delay).
            capacity = net.saturation_rate[None, :]
            busy = self.station_throughput_ck * net.service / capacity
            self.utilization_ck = np.where(
                net.is_delay[None, :], self.queue_length_ck / capacity, busy
            )
            if self.queue_marginals:
                self._busy_share_at_rate_laws()
        self.utilization_ck = np.asarray(self.utilization_ck, dtype=float)

    def _busy_share_at_rate_laws(self) -> None:
        """Utilisation of stations with a rate law from their queue-length distribution.

        With rates that fall as jobs are added (contention) X S / alpha(L) is not a busy share:
        it exceeds 1 below saturation. The busy share is E[min(n, m)] / m, split over the
        classes by their work at the station.
        """
        net, marginals = self.network, self.queue_marginals
        assert marginals is not None and self.utilization_ck is not None
        work = self.station_throughput_ck * net.service
        for k in np.flatnonzero(net.has_rate_law):
            p = marginals.get(net.station_names[k])
            m = int(net.servers[k])
            if p is None or (len(p) < m and not math.isclose(float(np.sum(p)), 1.0)):
                continue  # not enough of the distribution known: keep X S / alpha(L)
            # E[min(n, m)] from p(0..m-1); no array of m entries (m can be huge)
            head = np.asarray(p, dtype=float)[:m]
            busy = float(np.arange(head.size) @ head + m * max(0.0, 1.0 - head.sum()))
            total = work[:, k].sum()
            share = work[:, k] / total if total > 0 else np.zeros(net.n_classes)
            self.utilization_ck[:, k] = busy / m * share

    # ---- per class and station ---------------------------------------------------------------
    @property
    def station_throughput_ck(self) -> np.ndarray:
        """Visits per second of class c at station k (forced-flow law)."""
        if self.measured_station_throughput is not None:
            return np.asarray(self.measured_station_throughput, dtype=float)
        return self.throughput[:, None] * self.network.visits

    @property
    def residence_time_ck(self) -> np.ndarray:
        """Time a class-c job spends at station k per system visit (Little: Q / X)."""
        if self.measured_station_throughput is not None:
            return self.response_time_ck * self.network.visits
        X = self.throughput[:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(X > 0, self.queue_length_ck / np.where(X > 0, X, 1), 0.0)

    @property
    def response_time_ck(self) -> np.ndarray:
        """Time per visit of class c at station k (residence / visits)."""
        if self.measured_station_throughput is not None:
            T = self.station_throughput_ck
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(T > 0, self.queue_length_ck / np.where(T > 0, T, 1), 0.0)
        V = self.network.visits
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(V > 0, self.residence_time_ck / np.where(V > 0, V, 1), 0.0)

    # ---- per class ---------------------------------------------------------------------------
    @property
    def response_time(self) -> np.ndarray:
        """[C] system response time, think time excluded."""
        if self.measured_response_time is not None:
            return np.asarray(self.measured_response_time, dtype=float)
        return self.residence_time_ck.sum(axis=1)

    @property
    def jobs_in_system(self) -> np.ndarray:
        """[C] mean number of class-c jobs at the stations (thinking jobs excluded)."""
        return self.queue_length_ck.sum(axis=1)

    # ---- per station -------------------------------------------------------------------------
    @property
    def utilization(self) -> np.ndarray:
        assert self.utilization_ck is not None
        return self.utilization_ck.sum(axis=0)

    @property
    def queue_length(self) -> np.ndarray:
        return self.queue_length_ck.sum(axis=0)

    @property
    def station_throughput(self) -> np.ndarray:
        return self.station_throughput_ck.sum(axis=0)

    @property
    def station_response_time(self) -> np.ndarray:
        """Mean time per visit over all classes (Little at the station)."""
        T = self.station_throughput
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(T > 0, self.queue_length / np.where(T > 0, T, 1), 0.0)

    @property
    def station_residence_time(self) -> np.ndarray:
        """Residence time per system completion, weighted over classes by throughput."""
        X = self.throughput.sum()
        return self.queue_length / X if X > 0 else np.zeros(self.network.n_stations)

    # ---- lookup ------------------------------------------------------------------------------
    def cls(self, name: str) -> int:
        return self.network.class_names.index(name)

    def station(self, name: str) -> int:
        return self.network.station_names.index(name)

    # ---- output ------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        net = self.network
        classes: dict[str, Any] = {}
        for c, cname in enumerate(net.class_names):
            entry: dict[str, Any] = {
                "throughput": _num(self.throughput[c]),
                "response_time": _num(self.response_time[c]),
            }
            if net.is_open[c]:
                entry["arrival_rate"] = _num(net.arrival_rate[c])
                entry["mean_jobs"] = _num(self.jobs_in_system[c])
            else:
                entry["population"] = int(net.population[c])
                if net.think_time[c] > 0:
                    entry["think_time"] = _num(net.think_time[c])
            classes[cname] = entry
        stations: dict[str, Any] = {}
        T_ck, W_ck, Rres_ck = (
            self.station_throughput_ck,
            self.response_time_ck,
            self.residence_time_ck,
        )
        assert self.utilization_ck is not None
        for k, sname in enumerate(net.station_names):
            per_class = {
                cname: _measures(
                    self.utilization_ck[c, k],
                    self.queue_length_ck[c, k],
                    W_ck[c, k],
                    Rres_ck[c, k],
                    T_ck[c, k],
                )
                for c, cname in enumerate(net.class_names)
                if net.visits[c, k] > 0
            }
            stations[sname] = _measures(
                self.utilization[k],
                self.queue_length[k],
                self.station_response_time[k],
                self.station_residence_time[k],
                self.station_throughput[k],
            ) | {"per_class": per_class}
        out: dict[str, Any] = {"method": self.method, "classes": classes, "stations": stations}
        if self.notes:
            out["notes"] = list(self.notes)
        out.update({k: _jsonable(v) for k, v in self.extra.items()})
        return out


def _measures(u: float, q: float, w: float, r: float, x: float) -> dict[str, float | None]:
    return {
        "utilization": _num(u),
        "queue_length": _num(q),
        "response_time": _num(w),
        "residence_time": _num(r),
        "throughput": _num(x),
    }


def _num(v: Any) -> float | None:
    f = float(v)
    return f if math.isfinite(f) else None


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return [_jsonable(x) for x in v.tolist()]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, float | np.floating):
        return _num(v)
    if isinstance(v, np.integer):
        return int(v)
    return v


def consistency_errors(sol: Solution) -> dict[str, float]:
    """Largest violations of the operational laws (all ~1e-12 for a correct solver).

    Used by the tests of every method: Little at each station and class, the forced-flow law,
    and the population constraint N = X (R + Z) of closed classes.
    """
    net = sol.network
    X = sol.throughput
    out = {
        "little_station": float(
            np.max(
                np.abs(sol.queue_length_ck - sol.station_throughput_ck * sol.response_time_ck)
                * (net.visits > 0),
                initial=0.0,
            )
        ),
        "little_residence": float(
            np.max(np.abs(sol.queue_length_ck - X[:, None] * sol.residence_time_ck), initial=0.0)
        ),
        "forced_flow": float(
            np.max(np.abs(sol.station_throughput_ck - X[:, None] * net.visits), initial=0.0)
        ),
    }
    closed = net.closed
    if closed.any():
        N = net.population[closed]
        lhs = X[closed] * (sol.response_time[closed] + net.think_time[closed])
        out["population"] = float(np.max(np.abs(lhs - N) / np.maximum(N, 1)))
    return out
