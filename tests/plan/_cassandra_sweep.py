"""A Cassandra run's points made by the model itself: Dipietro's model with known event costs,
snitch, client and quota simulated at every level of each setup, and every points column the
calibration reads written as the runner writes them (the nodes' CPU, their Jolokia counters,
the client's CPU). Calibration tests read it like a real run and must recover the truth."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tierscope.domains.cassandra import ROUTER_S, CassandraCluster, ReadCosts, replicas_waited
from tierscope.sim.runner import simulate
from tierscope.store import RunWriter


def write_cassandra_points(
    out: Path,
    *,
    costs: ReadCosts,
    quota: float,
    setups: dict[str, str],
    levels: Sequence[int],
    local_first: float,
    client_cpu: float,
    client_delay: float,
    nodes: int = 3,
    replication: int = 3,
    seed: int = 1,
) -> dict[tuple[str, int], float]:
    """Write the run folder ``out`` (``setups``: name -> consistency level; every node one
    server at ``quota`` speed); returns the true throughput of every (setup, level)."""
    spec = {
        "name": "synthetic-cassandra",
        "system": {"kind": "cassandra", "nodes": nodes, "components": {"node": {"cpu": quota}},
                   "keyspace": {"replication": replication}},
        "workload": {"mode": "closed", "ycsb": {"workload": "c", "records": 1000},
                     "consistency": next(iter(setups.values()))},
        "sweep": {"levels": list(levels),
                  "setups": [{"name": n, "set": {"workload.consistency": cl}}
                             for n, cl in setups.items()]},
        "phases": {"ramp_up": 1, "steady": 30, "ramp_down": 0},
    }  # fmt: skip
    truth = {}
    writer = RunWriter.create(out, kind="experiment", spec=spec, seed=seed)
    with writer:
        t = 0.0
        for name, cl in setups.items():
            for users in levels:
                cpu = costs.cpu(replicas_waited(cl, replication))
                c = CassandraCluster(nodes, replication, cl, users,
                                     {k: v / quota for k, v in cpu.items()}, ROUTER_S, ROUTER_S,
                                     ROUTER_S, client_cpu, cores=1, client_cores=1,
                                     client_delay=client_delay,
                                     local_first=local_first)  # fmt: skip
                out_doc = simulate(c.model(), seed=seed + users, precision=0.01).to_dict()
                x = out_doc["classes"]["client"]["throughput"]
                truth[(name, users)] = x
                writer.append("points", _points_row(out_doc, c, name, users, x, quota, t))
                t += 31.0
    return truth


def _points_row(out: dict[str, Any], c: CassandraCluster, setup: str, users: int, x: float,
                quota: float, t: float) -> Any:  # fmt: skip
    import polars as pl

    st = out["stations"]

    def total(prefix: str, key: str) -> float:
        return sum(v[key] for name, v in st.items() if name.startswith(prefix))

    rt = users / x
    at_client = st["ycsb-cpu"]["residence_time"] + c.client_delay
    return pl.DataFrame([{
        "setup": setup, "level": float(users), "rep": 0, "t_start": t + 1.0, "t_end": t + 31.0,
        "throughput": x, "rt_mean": rt, "rt_p50": rt, "rt_p95": None, "rt_p99": None,
        "errors": 0.0,
        "node.cpu_cores": total("cpu-", "utilization") * quota,
        "node.table_reads_s": total("disk-", "throughput"),
        "node.request_response_completed_s": total("route-", "throughput"),
        "node.read_ms": (rt - at_client) * 1e3,
        "client.cpu_cores": st["ycsb-cpu"]["utilization"],
    }], schema_overrides={"rt_p95": pl.Float64, "rt_p99": pl.Float64})  # fmt: skip
