"""What every estimator reads: observation windows and, where measured, per-request records.

Design decision: one plain container (:class:`Observations`) for every source — the observation
CSV, a measured run folder, a simulation — so estimators never know where data came from.
Utilisations are kept per server (0–1) with the server count beside them; estimators work on
busy servers ``u * m`` so that demands come out in seconds of one server (for a run folder: CPU
seconds, with the tier's cores as servers).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl

from tierscope.errors import InputError
from tierscope.spec.observations import ObservationLayout


@dataclass(frozen=True, eq=False)
class RequestRecords:
    """Per-request records for complete-information estimation.

    ``requests`` has one row per request (``request``, ``cls``): every request of every class,
    including those that visit no station. ``segments`` has one row per interval a request
    spends at a station node (``station``, ``node``, ``request``, ``start``, ``end``); a visit
    interrupted by a call downstream is several segments. ``cpu`` optionally holds the measured
    busy cores of each node over monitor intervals (``station``, ``node``, ``t_start``,
    ``t_end``, ``cores``); without it a node is a processor-sharing server with ``servers``.
    """

    requests: pl.DataFrame
    segments: pl.DataFrame
    servers: dict[tuple[str, str], float]
    cpu: pl.DataFrame | None = None


@dataclass(frozen=True, eq=False)
class Observations:
    """Observation windows (rows) of class throughputs and station utilisations, with optional
    response times, queue-length samples, populations and per-request records."""

    classes: tuple[str, ...]
    stations: tuple[str, ...]
    throughput: np.ndarray  # [W, C] 1/s
    servers: np.ndarray  # [K] servers (or cores) of each station
    utilization: np.ndarray | None = None  # [W, K] per server, 0-1
    response_time: np.ndarray | None = None  # [W, C] s (NaN: not measured)
    window: np.ndarray | None = None  # [W] s
    population: np.ndarray | None = None  # [W, C] closed populations during each window
    think_time: np.ndarray | None = None  # [C] s
    queue: np.ndarray | None = None  # [S, K, C] queue-length samples
    queue_population: np.ndarray | None = None  # [S, C] population when each sample was taken
    queue_weight: np.ndarray | None = None  # [S] weight of each sample (default: equal)
    records: RequestRecords | None = None
    source: str = "<observations>"
    unit: str = "s"
    notes: tuple[str, ...] = field(default=())

    # ---- shape -----------------------------------------------------------------------------
    @property
    def n_windows(self) -> int:
        return int(self.throughput.shape[0])

    @property
    def busy(self) -> np.ndarray:
        """[W, K] busy servers (utilisation x servers)."""
        if self.utilization is None:
            raise InputError("u_<station>", None, "utilisation columns", source=self.source)
        return self.utilization * self.servers[None, :]

    @property
    def weights(self) -> np.ndarray:
        """[W] window weights (their lengths, or 1)."""
        return np.ones(self.n_windows) if self.window is None else self.window

    def available(self) -> list[str]:
        """What was measured, in the words the estimators' requirements use."""
        out = ["throughput"]
        if self.utilization is not None:
            out.append("utilization")
        if self.response_time is not None and np.isfinite(self.response_time).any():
            out.append("response_time")
        if self.queue is not None and self.queue.shape[0] > 0:
            out.append("queue")
        if self.population is not None:
            out.append("population")
        if self.records is not None:
            out.append("records")
        return out

    def rows(self, index: np.ndarray) -> Observations:
        """The same observations restricted to (or resampled as) the windows ``index``."""

        def take(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[index]

        return replace(
            self,
            throughput=self.throughput[index],
            utilization=take(self.utilization),
            response_time=take(self.response_time),
            window=take(self.window),
            population=take(self.population),
        )

    def samples(self, index: np.ndarray) -> Observations:
        """The same observations with the queue-length samples ``index``."""
        assert self.queue is not None
        qp = None if self.queue_population is None else self.queue_population[index]
        qw = None if self.queue_weight is None else self.queue_weight[index]
        return replace(self, queue=self.queue[index], queue_population=qp, queue_weight=qw)

    # ---- construction ----------------------------------------------------------------------
    @classmethod
    def from_table(
        cls, layout: ObservationLayout, columns: dict[str, np.ndarray], *, source: str
    ) -> Observations:
        """Observations from a checked CSV (:func:`tierscope.spec.load_observations_csv`)."""
        classes, stations = layout.classes, layout.stations
        W = len(next(iter(columns.values())))
        X = np.column_stack([columns[layout.throughput[c]] for c in classes])
        servers = np.array(
            [columns[layout.servers[s]][0] if s in layout.servers else 1.0 for s in stations]
        )
        U = None
        if layout.utilization:
            missing = [s for s in stations if s not in layout.utilization]
            if missing:
                raise InputError(
                    "header", f"n_{missing[0]}_…", f"a column u_{missing[0]}", source=source
                )
            U = np.column_stack([columns[layout.utilization[s]] for s in stations])
        R = None
        if layout.response_time:
            R = np.column_stack(
                [
                    columns[layout.response_time[c]]
                    if c in layout.response_time
                    else np.full(W, np.nan)
                    for c in classes
                ]
            )
        Q = None
        if layout.queue:
            Q = np.zeros((W, len(stations), len(classes)))
            for k, st in enumerate(stations):
                for c, cl in enumerate(classes):
                    col = layout.queue.get(st, {}).get(cl)
                    if col is not None:
                        Q[:, k, c] = columns[col]
            keep = ~np.isnan(Q).any(axis=(1, 2))
            Q = Q[keep]
        pop = None
        if layout.population:
            missing = [c for c in classes if c not in layout.population]
            if missing:
                raise InputError("header", missing[0], f"a column pop_{missing[0]}", source=source)
            pop = np.column_stack([columns[layout.population[c]] for c in classes])
        Z = None
        if layout.think_time:
            Z = np.array(
                [
                    columns[layout.think_time[c]][0] if c in layout.think_time else 0.0
                    for c in classes
                ]
            )
        return cls(
            classes=tuple(classes),
            stations=tuple(stations),
            throughput=X,
            servers=servers,
            utilization=U,
            response_time=R,
            window=None if layout.window is None else columns[layout.window],
            population=pop,
            think_time=Z,
            queue=Q,
            queue_population=None if Q is None or pop is None else pop[keep],
            source=source,
        )


def demands_doc(
    stations: tuple[str, ...], classes: tuple[str, ...], D: np.ndarray
) -> dict[str, dict[str, float]]:
    """{station: {class: D}} from a [K, C] array."""
    return {
        st: {cl: float(D[k, c]) for c, cl in enumerate(classes)} for k, st in enumerate(stations)
    }


def jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.floating | np.integer):
        return value.item()
    return value
