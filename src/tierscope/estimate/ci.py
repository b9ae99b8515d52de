"""Complete information (CI): demands from per-request records (Pérez, Pacheco-Sanchez, Casale).

Every node is a processor-sharing server. While n requests are present on a node with m
servers, each receives min(n, m)/n of a server, so a request's demand is the integral of that
share over the time it is present — exact for a PS server, whatever the arrival process. Where
the node's CPU was *measured* (a run folder's 50 ms ``cpu_cores``), the measured CPU of each
monitor interval is shared out instead, in proportion to the time each request was present in
it: this stays right when the node is throttled by a CPU quota, blocked on I/O, or waiting for
a tier downstream (those waits are cut out of the segments by the run-folder reader).

The per-request demands are kept (``request_demands_``): their distribution, not only the mean,
is what a simulation of the calibrated system needs. Intervals come from resampling requests.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import polars as pl

from tierscope.errors import InputError
from tierscope.estimate._data import Observations, RequestRecords
from tierscope.estimate.base import Estimator


class CI(Estimator):
    """Per-request demands by sharing each node's service among the requests present."""

    name = "ci"
    needs: ClassVar[tuple[str, ...]] = ("records",)
    summary = "complete information: per-request records (processor-sharing attribution)"

    def fit(self, data: Observations):  # type: ignore[override]
        self._matrix: tuple[np.ndarray, np.ndarray] | None = None
        return super().fit(data)

    def _estimate(self, data: Observations) -> np.ndarray:
        assert data.records is not None
        per_request, cls = request_demand_matrix(data.records, data.stations, data.classes)
        self._matrix = (per_request, cls)
        self.request_demands_ = pl.DataFrame(
            {"request": data.records.requests["request"], "cls": np.asarray(data.classes)[cls]}
            | {st: per_request[:, k] for k, st in enumerate(data.stations)}
        )
        return class_means(per_request, cls, len(data.classes))

    def _bootstrap(self, data: Observations) -> None:
        assert self._matrix is not None
        per_request, cls = self._matrix
        rng = np.random.default_rng(self.seed)
        C = len(data.classes)
        groups = [np.flatnonzero(cls == c) for c in range(C)]
        draws = []
        for _ in range(self.n_boot_):
            idx = np.concatenate([g[rng.integers(0, g.size, g.size)] for g in groups if g.size])
            draws.append(class_means(per_request[idx], cls[idx], C))
        alpha = (1 - self.confidence) / 2
        stack = np.stack(draws)
        self.ci_low_ = np.quantile(stack, alpha, axis=0)
        self.ci_high_ = np.quantile(stack, 1 - alpha, axis=0)


def class_means(per_request: np.ndarray, cls: np.ndarray, C: int) -> np.ndarray:
    """[K, C] mean demand of each class's requests."""
    K = per_request.shape[1]
    D = np.zeros((K, C))
    for c in range(C):
        rows = per_request[cls == c]
        if rows.shape[0]:
            D[:, c] = rows.mean(axis=0)
    return D


def request_demand_matrix(
    records: RequestRecords, stations: tuple[str, ...], classes: tuple[str, ...]
) -> tuple[np.ndarray, np.ndarray]:
    """Demand of every request at every station ([N, K]) and its class index ([N])."""
    req = records.requests
    if req.height == 0:
        raise InputError("requests", 0, "at least one request record")
    index = {c: i for i, c in enumerate(classes)}
    unknown = set(req["cls"].unique().to_list()) - set(index)
    if unknown:
        raise InputError("requests.cls", sorted(unknown)[0], "a class of " + ", ".join(classes))
    seg = records.segments.with_columns(
        pl.Series("demand", segment_demands(records), dtype=pl.Float64)
    )
    per = seg.group_by("request", "station").agg(pl.col("demand").sum())
    wide = per.pivot(on="station", index="request", values="demand")
    table = req.select("request", "cls").join(wide, on="request", how="left")
    matrix = np.column_stack(
        [
            table[st].fill_null(0.0).to_numpy() if st in table.columns else np.zeros(table.height)
            for st in stations
        ]
    )
    cls = np.array([index[c] for c in table["cls"].to_list()], dtype=np.int64)
    return matrix, cls


def segment_demands(records: RequestRecords) -> np.ndarray:
    """Service attributed to every segment (in the row order of ``records.segments``)."""
    seg = records.segments.with_row_index("_row")
    out = np.zeros(seg.height)
    cpu = records.cpu
    for (station, node), part in seg.group_by("station", "node"):
        rows = part["_row"].to_numpy()
        start, end = part["start"].to_numpy(), part["end"].to_numpy()
        if np.any(end < start):
            raise InputError("segments", f"{station}/{node}", "segments with end >= start")
        measured = None
        if cpu is not None:
            measured = cpu.filter((pl.col("station") == station) & (pl.col("node") == node))
        if measured is not None and measured.height:
            out[rows] = _cpu_share(start, end, measured)
        else:
            m = records.servers.get((str(station), str(node)), 1.0)
            out[rows] = _ps_share(start, end, m)
    return out


def _ps_share(start: np.ndarray, end: np.ndarray, servers: float) -> np.ndarray:
    """Integral of min(n, m)/n over each segment."""
    t = np.unique(np.concatenate([start, end]))
    if t.size < 2:
        return np.zeros(start.size)
    s_sorted, e_sorted = np.sort(start), np.sort(end)
    n = np.searchsorted(s_sorted, t[:-1], side="right") - np.searchsorted(
        e_sorted, t[:-1], side="right"
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(n > 0, np.minimum(n, servers) / n, 0.0)
    S = np.concatenate([[0.0], np.cumsum(share * np.diff(t))])
    return S[np.searchsorted(t, end)] - S[np.searchsorted(t, start)]


def _cpu_share(start: np.ndarray, end: np.ndarray, cpu: pl.DataFrame) -> np.ndarray:
    """Measured CPU of each monitor interval, shared by presence time in it."""
    iv = cpu.sort("t_start")
    a, b = iv["t_start"].to_numpy(), iv["t_end"].to_numpy()
    work = iv["cores"].to_numpy() * (b - a)
    presence = _presence(start, end, b) - _presence(start, end, a)  # time-integral of n(t)
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(presence > 0, work / presence, 0.0)  # CPU per unit presence
    # S(t) = integral of the rate up to t; piecewise linear over the monitor intervals.
    S = np.concatenate([[0.0], np.cumsum(rate * (b - a))])

    def S_at(t: np.ndarray) -> np.ndarray:
        i = np.clip(np.searchsorted(b, t, side="left"), 0, b.size - 1)
        inside = np.clip(t - a[i], 0.0, b[i] - a[i])
        return S[i] + rate[i] * inside

    return S_at(end) - S_at(start)


def _presence(start: np.ndarray, end: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Integral over (-inf, t] of the number of segments present, at every t."""
    s, e = np.sort(start), np.sort(end)
    cs, ce = np.concatenate([[0.0], np.cumsum(s)]), np.concatenate([[0.0], np.cumsum(e)])
    i, j = np.searchsorted(s, t, side="right"), np.searchsorted(e, t, side="right")
    return (i * t - cs[i]) - (j * t - ce[j])


__all__ = ["CI", "request_demand_matrix", "segment_demands"]
