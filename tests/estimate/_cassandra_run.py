"""A simulated sweep of a Cassandra cluster written as a *measured* ``cassandra`` run folder.

The simulator plays a closed network with known demands: the client (one processor-sharing
server: the worker's main thread) and three nodes (each one server at the speed of its CPU
quota), every request going from the client to a node chosen uniformly and back. Every table
is written in the runner's format: client records naming their coordinator, 50 ms
``cpu_cores`` of every node (its quota while it serves) and 250 ms of the client, the
Native-Transport-Requests pool's tasks of every node polled once a second (the nodes a third of
a second apart, as the Jolokia poller reads them), the points, and the resolved spec.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tierscope.sim import record_simulation
from tierscope.spec.model import parse_model
from tierscope.store import RunWriter, read_run

NODES = ("node-1", "node-2", "node-3")
CLIENT_STEP, NODE_STEP, POLL = 0.25, 0.05, 1.0


def write_cassandra_sweep(
    out: Path,
    *,
    levels: Sequence[int],
    client_demand: float,
    node_demand: float,
    quota: float,
    ramp: float = 2.0,
    steady: float = 60.0,
    seed: int = 1,
) -> None:
    """Simulate every level and write the run folder ``out``. ``node_demand``: CPU seconds a
    request costs its coordinator (a third of the requests each)."""
    spec = {
        "name": "synthetic-cassandra",
        "system": {
            "kind": "cassandra",
            "nodes": len(NODES),
            "components": {"node": {"cpu": quota}},
            "keyspace": {"replication": 3},
        },
        "workload": {"mode": "closed", "ycsb": {"workload": "c", "records": 1000}},
        "sweep": {"levels": list(levels)},
        "phases": {"ramp_up": ramp, "steady": steady, "ramp_down": 0.0},
    }
    model_stations = [{"name": "ycsb", "discipline": "ps"}] + [
        {"name": n, "discipline": "ps"} for n in NODES
    ]
    writer = RunWriter.create(out, kind="experiment", spec=spec, seed=seed)
    with writer:
        offset = 0.0
        for i, level in enumerate(levels):
            model = parse_model(
                {
                    "stations": model_stations,
                    "classes": [
                        {
                            "name": "request",
                            "population": int(level),
                            "reference": "ycsb",
                            "routing": {"ycsb": {n: 1 / len(NODES) for n in NODES}}
                            | {n: {"ycsb": 1.0} for n in NODES},
                            "service": {"ycsb": client_demand}
                            | {n: node_demand / quota for n in NODES},
                        }
                    ],
                }
            )
            sim_dir = out.parent / f"{out.name}-sim-{i}"
            record_simulation(model, sim_dir, seed=seed + i, max_time=ramp + steady, window=1.0)
            trace = read_run(sim_dir).requests
            assert trace is not None
            _write_level(writer, trace, float(level), offset, ramp, steady, quota)
            offset += ramp + steady + 1.0


def _write_level(
    writer: RunWriter,
    trace: pl.DataFrame,
    level: float,
    offset: float,
    ramp: float,
    steady: float,
    quota: float,
) -> None:
    tag = {"setup": "s0", "level": level, "rep": 0}
    trace = trace.with_columns(pl.col("start") + offset, pl.col("end") + offset)
    visits = trace.filter(pl.col("tier") != "client")
    coordinator = visits.filter(pl.col("tier").is_in(NODES)).select(
        "request_id", pl.col("tier").alias("coordinator")
    )
    cycles = trace.filter(pl.col("tier") == "client").join(coordinator, on="request_id")
    requests = cycles.select(
        pl.lit("client").alias("tier"),
        pl.concat_str(pl.lit(f"L{level:g}-"), pl.col("request_id")).alias("request_id"),
        "start",
        "end",
        *[pl.lit(v).alias(k) for k, v in tag.items()],
        pl.lit("read").alias("interaction"),
        pl.lit("ok").alias("status"),
        "coordinator",
    )
    writer.append("requests", requests)
    t0, t1 = offset, offset + ramp + steady
    frames = []

    def cpu(station: str, tier: str, node: str, step: float, cores: float) -> None:
        rows = visits.filter(pl.col("tier") == station)
        t = np.arange(t0 + step, t1 + 1e-9, step)
        busy = _busy_share(rows["start"].to_numpy(), rows["end"].to_numpy(), t - step, t)
        frames.append(_metric(t, tier, node, "cpu_cores", cores * busy, tag))

    cpu("ycsb", "client", "client", CLIENT_STEP, 1.0)
    for k, node in enumerate(NODES):
        cpu(node, "node", node, NODE_STEP, quota)
        rows = visits.filter(pl.col("tier") == node)
        t = np.arange(t0 + POLL * (k + 1) / len(NODES), t1, POLL)
        starts, ends = np.sort(rows["start"].to_numpy()), np.sort(rows["end"].to_numpy())
        present = np.searchsorted(starts, t, side="right") - np.searchsorted(ends, t, "right")
        frames.append(_metric(t, "node", node, "native_transport_active", present, tag))
        frames.append(_metric(t, "node", node, "native_transport_pending", 0 * present, tag))
    writer.append("metrics", pl.concat(frames))
    steady_rows = requests.filter(pl.col("end") >= t0 + ramp, pl.col("end") < t1)
    rt = steady_rows["end"] - steady_rows["start"]
    point: dict[str, Any] = tag | {
        "t_start": t0 + ramp,
        "t_end": t1,
        "throughput": steady_rows.height / steady,
        "rt_mean": float(rt.mean()),
        "rt_p50": float(rt.quantile(0.5)),
        "rt_p95": float(rt.quantile(0.95)),
        "rt_p99": float(rt.quantile(0.99)),
        "errors": 0.0,
    }
    writer.append("points", pl.DataFrame([point]))


def _busy_share(start: np.ndarray, end: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The share of each interval [a, b) in which at least one visit was present."""
    order = np.argsort(start)
    start, end = start[order], end[order]
    # merge overlapping visits into busy periods
    reach = np.maximum.accumulate(end)
    new = np.concatenate([[True], start[1:] > reach[:-1]])
    first = np.flatnonzero(new)
    p_start = start[first]
    p_end = np.maximum.reduceat(end, first) if first.size else end[:0]
    cum = np.concatenate([[0.0], np.cumsum(p_end - p_start)])

    def busy_until(t: np.ndarray) -> np.ndarray:
        i = np.searchsorted(p_start, t, side="right")  # periods started by t
        last = np.clip(i - 1, 0, None)
        inside = np.where(i > 0, np.clip(t - p_start[last], 0, p_end[last] - p_start[last]), 0)
        return np.where(i > 0, cum[last] + inside, 0.0)

    return (busy_until(b) - busy_until(a)) / (b - a)


def _metric(
    t: np.ndarray, tier: str, node: str, metric: str, value: np.ndarray, tag: dict[str, Any]
) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "t": t,
            "setup": tag["setup"],
            "level": tag["level"],
            "rep": tag["rep"],
            "tier": tier,
            "node": node,
            "metric": metric,
            "value": np.asarray(value, dtype=float),
        }
    )
