"""Observations from a run of a cluster whose client records name the node that coordinated
each request (``system.kind: cassandra``): the stations are the client and every node.

* **Stations.** ``client``, the load generator (its worker processes' main threads issue every
  operation: one server per worker), and every node (``node-1``, …: its CPU, with its quota as
  servers, or the host's cores without one). Demands are CPU seconds per request.
* **Windows.** Throughput and response time of the client's requests; busy cores of each node
  from its 50 ms cgroup samples, of the client from its own.
* **Records** (complete information). A request is present at the client and at its
  coordinator from its start to its end, and each node's measured CPU is shared among the
  requests it coordinated that were in flight. A node's CPU also serves the replica reads of
  requests coordinated elsewhere; with coordinators chosen evenly these even out, and a node's
  demand is its CPU per request of the whole workload, as the utilisation law has it.
* **Queue-length samples** (SD, closed workloads). A node's state is the requests its
  coordinator holds: the Native-Transport-Requests pool's active and pending tasks, read over JMX
  at every poll (the thesis's "new-query" observable, seed 004 §7.5, from the pool instead of
  packet captures), one sample per poll (about a second). The client's state is not observed
  (the nodes are polled at different instants, so the level less their samples is no state the
  client was ever in); the nodes' marginals, which depend on it, fit its demand.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from tierscope.domains.ntier import TierFacts, tier_facts
from tierscope.errors import InputError
from tierscope.estimate._data import Observations, RequestRecords
from tierscope.estimate._run import (
    CLIENT,
    _steady,
    class_rates,
    cpu_intervals,
    measured,
    point_windows,
    window_busy,
)
from tierscope.spec.experiment import ExperimentSpec
from tierscope.store import Run

#: The pool whose tasks are a node's coordinated requests (active: being served or waiting for
#: replicas; pending: queued for a thread).
STATE_METRICS = ("native_transport_active", "native_transport_pending")


def cluster_observations(
    run: Run,
    spec: ExperimentSpec,
    points: pl.DataFrame,
    client: pl.DataFrame,
    metrics: pl.DataFrame,
    classes: tuple[str, ...],
    *,
    window: float,
) -> Observations:
    """Observations of one setup (see the module); ``client`` has the class column ``cls``."""
    source = str(run.path)
    nodes = tuple(sorted(client["coordinator"].drop_nulls().unique().to_list(), key=_node_order))
    cpu = metrics.filter(pl.col("metric") == "cpu_cores")
    node_cpu = cpu.filter(pl.col("node").is_in(nodes), pl.col("tier") != CLIENT)
    client_cpu = cpu.filter(pl.col("tier") == CLIENT)
    missing = [n for n in nodes if node_cpu.filter(pl.col("node") == n).height == 0]
    if missing or client_cpu.height == 0:
        raise InputError(
            "metrics.parquet", missing[0] if missing else CLIENT, "cpu_cores samples", source=source
        )
    stations = (CLIENT, *nodes)
    tier = node_cpu["tier"][0]
    per_node = _node_servers(run, tier_facts(spec, (tier,))[tier])
    servers = np.array([_client_servers(spec), *(per_node for _ in nodes)])

    a, b, level, rep = point_windows(points, window)
    X, R = class_rates(client, classes, a, b, level, rep)
    busy = np.column_stack(
        [window_busy(client_cpu, a, b)]
        + [window_busy(node_cpu.filter(pl.col("node") == n), a, b) for n in nodes]
    )
    steady = _steady(client, points).filter(pl.col("coordinator").is_not_null())
    spans = steady.select(pl.col("request_id").alias("request"), "start", "end", "coordinator")
    segments = pl.concat(
        [
            spans.select(
                pl.lit(CLIENT).alias("station"), pl.lit(CLIENT).alias("node"), "request",
                "start", "end",
            ),
            spans.select(
                pl.col("coordinator").alias("station"), pl.col("coordinator").alias("node"),
                "request", "start", "end",
            ),
        ]
    ).with_columns(pl.lit(False).alias("write"))  # fmt: skip
    # the client's samples under the client station's name; each node's under its own
    as_stations = pl.concat(
        [
            client_cpu.with_columns(pl.lit(CLIENT).alias("tier"), pl.lit(CLIENT).alias("node")),
            node_cpu.with_columns(pl.col("node").alias("tier")),
        ]
    )
    records = RequestRecords(
        requests=steady.select(pl.col("request_id").alias("request"), "cls"),
        segments=segments,
        servers={(st, st): float(servers[k]) for k, st in enumerate(stations)},
        cpu=cpu_intervals(as_stations, stations),
    )
    closed = spec.workload_mode == "closed"
    one_class = closed and len(classes) == 1
    population = level[:, None].repeat(len(classes), axis=1) if one_class else None
    queue, qpop = None, None
    if population is not None:
        queue, qpop = pool_states(metrics, points, nodes)
    return measured(
        classes, stations, X, R, servers, busy, b - a, population, (queue, qpop), records, source,
        points,
    )  # fmt: skip


def pool_states(
    metrics: pl.DataFrame, points: pl.DataFrame, nodes: tuple[str, ...]
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """[S, 1 + nodes, 1] queue-length samples (the client first, not observed: NaN) and [S, 1]
    their level: one per round of polls in each point's steady window (every node read once);
    None without the pool's metrics."""
    polled = metrics.filter(pl.col("metric").is_in(STATE_METRICS), pl.col("node").is_in(nodes))
    if polled.height == 0:
        return None, None
    tasks = polled.group_by("node", "t").agg(
        pl.col("value").sum().alias("n"), pl.col("metric").n_unique().alias("parts")
    ).filter(pl.col("parts") == len(STATE_METRICS))  # fmt: skip
    rows, pops = [], []
    for p in points.iter_rows(named=True):
        inside = tasks.filter(pl.col("t") >= p["t_start"], pl.col("t") < p["t_end"])
        per_node = [inside.filter(pl.col("node") == n).sort("t")["n"].to_numpy() for n in nodes]
        rounds = min(v.size for v in per_node)
        if rounds == 0:
            continue
        at_nodes = np.column_stack([v[:rounds] for v in per_node])
        # the client's state is not observed: the nodes are polled apart, and the level less
        # their samples would not be a state the client ever was in
        rows.append(np.column_stack([np.full(rounds, np.nan), at_nodes]))
        pops.append(np.full(rounds, round(p["level"])))
    if not rows:
        return None, None
    queue = np.concatenate(rows).astype(float)[:, :, None]
    return queue, np.concatenate(pops)[:, None]


def _client_servers(spec: ExperimentSpec) -> float:
    """The client's worker processes (each issues its share of the operations from one
    thread)."""
    return float(spec.workload.get("clients") or 1)


def _node_servers(run: Run, facts: TierFacts) -> float:
    """A node's CPU: its quota, or the host's cores without one (a node is a JVM of many
    threads, not one process per core)."""
    if facts.cpu is not None:
        return float(facts.cpu)
    host = run.info.get("host") or {}
    return float(host.get("usable_cores") or host.get("cores") or 1)


def _node_order(name: str) -> tuple[int, str]:
    tail = name.rsplit("-", 1)[-1]
    return (int(tail), name) if tail.isdigit() else (1 << 30, name)
