"""YCSB clients as a workload: the load driver of ``system.kind: cassandra``.

:class:`CassandraLoad` has the load generator's shape (``start(level, ramp_up_s, steady_s,
ramp_down_s)`` returns a handle with ``done``, ``snapshot()``, ``wait()``, ``stop()`` and the
phase times), so the runner sweeps a Cassandra cluster as it sweeps a web stack. The level is
split over ``clients`` worker processes (:mod:`tierscope.load.cassandra_worker`, on the DataStax
Python driver): closed users, requests/s or sessions/s. Each operation becomes one ``requests``
row (tier ``client``, interaction the YCSB operation): ``start`` its intended start, ``end`` its
answer, ``status`` ok or the driver's error (``read_timeout``, ``write_timeout``,
``unavailable``, ``overloaded``, ``timeout``, ``no_host``), plus the actual send time, the node
that coordinated it, its consistency level, and the closed user or session.

:func:`prepare` creates the keyspace (SimpleStrategy with the spec's replication factor) and
YCSB's ``usertable``, and :func:`load_records` inserts the records before the sweep.

The client verdict is the HTTP generator's rule on the clients' own measurements: the busiest
client's main thread (which issues every operation), the cores all clients used, and requests
that left late on an open schedule (the client's own lateness: nothing pushes back on it but
its own CPU).
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tierscope.errors import InputError, TierscopeError
from tierscope.load._frames import CLIENT
from tierscope.load._workers import (
    LATE_S,
    Tail,
    Worker,
    WorkerHandle,
    client_samples,
    client_verdict,
    cpu_rows,
    end_workers,
    failures,
    quantiles,
)
from tierscope.load.cassandra_worker import ERRORS, OPS, OPS_ROW, TABLE
from tierscope.spec.cassandra import CassandraWorkload

#: Before the first intended operation: the clients import the driver and connect meanwhile.
START_MARGIN_S = 3.0
#: The warm-up's closed users; it ends when the mean throughput of its last WARMUP_SETTLED
#: windows of WARMUP_WINDOW_S seconds is no more than WARMUP_GAIN above the windows' before
#: (uncapped, a window's throughput varies by 10-15 % once settled: a spread rule waits long).
WARMUP_USERS = 8
WARMUP_WINDOW_S = 5.0
WARMUP_SETTLED = 3
WARMUP_GAIN = 0.10
KEYSPACE = "ycsb"


def require_driver() -> None:
    """InputError saying how to install the Cassandra driver when it is missing."""
    try:
        import cassandra.cluster  # noqa: F401
    except ImportError:
        raise InputError(
            "system.kind", "cassandra", "the Cassandra driver: pip install 'tierscope[cassandra]' "
            "(cassandra-driver, DataStax's Python driver)"
        ) from None  # fmt: skip


def connect(contact_points: list[tuple[str, int]]) -> tuple[Any, Any]:
    """A driver session on the cluster, requests sent round-robin over the nodes."""
    from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
    from cassandra.connection import DefaultEndPoint
    from cassandra.policies import RoundRobinPolicy

    logging.getLogger("cassandra").setLevel(logging.ERROR)  # the driver's notices are ours
    profile = ExecutionProfile(load_balancing_policy=RoundRobinPolicy())
    cluster = Cluster(contact_points=[DefaultEndPoint(h, p) for h, p in contact_points],
                      execution_profiles={EXEC_PROFILE_DEFAULT: profile},
                      connect_timeout=10)  # fmt: skip
    return cluster, cluster.connect()


def prepare(contact_points: list[tuple[str, int]], *, replication: int, fields: int) -> None:
    """The keyspace ``ycsb`` (replication factor ``replication``) and YCSB's ``usertable``
    with ``fields`` text fields, created anew (schema agreed by every node)."""
    cluster, session = connect(contact_points)
    try:
        session.execute(f"DROP KEYSPACE IF EXISTS {KEYSPACE}", timeout=60)
        session.execute(
            f"CREATE KEYSPACE {KEYSPACE} WITH replication = "
            f"{{'class': 'SimpleStrategy', 'replication_factor': {replication}}}", timeout=60,
        )  # fmt: skip
        cols = ", ".join(f"field{i} text" for i in range(fields))
        session.execute(f"CREATE TABLE {KEYSPACE}.{TABLE} (y_id text PRIMARY KEY, {cols})",
                        timeout=60)  # fmt: skip
        if not cluster.control_connection.wait_for_schema_agreement(wait_time=60):
            raise TierscopeError("the Cassandra nodes did not agree on the new table in 60 s")
    finally:
        cluster.shutdown()


@dataclass
class CassandraLoad:
    """Offers a :class:`~tierscope.spec.cassandra.CassandraWorkload` to a cluster (see the
    module); ``hosts`` are the nodes' addresses, in node order."""

    workload: CassandraWorkload
    contact_points: list[tuple[str, int]]
    hosts: list[str]
    workdir: Path
    spawn: Any
    seed: int = 1
    request_id_prefix: str = ""

    def worker_config(self, role: str, index: int, out: Path) -> dict[str, Any]:
        w, y = self.workload, self.workload.ycsb
        return {
            "role": role, "index": index, "out": str(out), "seed": self.seed * 7919 + index,
            "contact_points": [list(c) for c in self.contact_points], "hosts": self.hosts,
            "keyspace": KEYSPACE, "routing": w.routing, "timeout_s": w.timeout_s,
            "records": y.records, "field_count": y.field_count, "field_length": y.field_length,
            "distribution": y.request_distribution, "max_scan_length": y.max_scan_length,
            "mix": y.mix, "clients": w.clients,
            "consistency": {op: w.consistency_of(op) for op in ("read", "scan", "update",
                                                                "insert")},
        }  # fmt: skip

    def _spawn(self, cfg: dict[str, Any], out: Path, files: dict[str, np.dtype]) -> Worker:
        from tierscope.experiment.processes import python_argv

        name = f"{cfg['role']}-{cfg['index']}"
        path = out / f"{name}.json"
        path.write_text(json.dumps(cfg))
        proc = self.spawn(f"{out.name}-{name}",
                          python_argv("tierscope.load.cassandra_worker", str(path)))  # fmt: skip
        tails = {k: Tail(out / f"{name}.{k}", dt) for k, dt in files.items()}
        return Worker(cfg["role"], cfg["index"], proc, tails)

    def start(
        self,
        level: float,
        ramp_up_s: float = 0.0,
        steady_s: float = 10.0,
        ramp_down_s: float = 0.0,
        *,
        setup: str = "load",
        rep: int = 0,
    ) -> CassandraHandle:
        """The clients at ``level`` (closed users, requests/s or sessions/s in all)."""
        if not (level > 0 and math.isfinite(level)):
            raise InputError("level", level, "a level > 0")
        if not (steady_s > 0 and math.isfinite(steady_s)):
            raise InputError("steady_s", steady_s, "a steady window of seconds > 0")
        mode, n = self.workload.mode, self.workload.clients
        if mode == "closed" and (level != int(level) or level < n):
            raise InputError("level", level, f"whole users, at least one per client ({n})")
        out = self.workdir / f"cassandra-{len(list(self.workdir.glob('cassandra-*'))) + 1}"
        out.mkdir(parents=True)
        t0 = time.monotonic() + START_MARGIN_S
        times = (t0, t0 + ramp_up_s, t0 + ramp_up_s + steady_s,
                 t0 + ramp_up_s + steady_s + ramp_down_s)  # fmt: skip
        handle = CassandraHandle(self, out, level=level, setup=setup, rep=rep, times=times)
        for i in range(n):
            cfg = self.worker_config("client", i, out) | {
                "mode": mode, "t0": t0, "ramp_up": ramp_up_s, "steady": steady_s,
                "ramp_down": ramp_down_s, "think_time": self.workload.think_time,
                "arrivals": self.workload.arrivals,
                "session_length": self.workload.session_length,
            }  # fmt: skip
            if mode == "closed":
                cfg["users"] = int(level) // n + (i < int(level) % n)
            else:
                cfg["rate"] = level / n
            handle.clients.append(self._spawn(cfg, out, {"ops": OPS_ROW}))
        return handle


def load_records(load: CassandraLoad, *, loaders: int = 2, timeout_s: float = 1800.0) -> float:
    """Insert the workload's records (``loaders`` worker processes, each a share of them);
    the seconds it took. TierscopeError if a loader fails or time runs out."""
    records = load.workload.ycsb.records
    out = load.workdir / "cassandra-load"
    out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    bounds = np.linspace(0, records, loaders + 1).astype(int)
    workers = [
        load._spawn(
            load.worker_config("loader", i, out)
            | {"first": int(bounds[i]), "last": int(bounds[i + 1])},
            out,
            {},
        )
        for i in range(loaders)
    ]
    try:
        while any(w.proc.poll() is None for w in workers):
            if time.monotonic() - start > timeout_s:
                raise TierscopeError(f"loading {records:,} records took more than "
                                     f"{timeout_s:.0f} s")  # fmt: skip
            time.sleep(0.2)
    finally:
        end_workers(workers)
    failed = failures(workers, out)
    if failed is not None:
        raise TierscopeError(f"loading the records failed: {failed}")
    done = sum(int((out / f"loader-{i}.done").read_text() or 0) for i in range(loaders)
               if (out / f"loader-{i}.done").is_file())  # fmt: skip
    if done != records:
        raise TierscopeError(f"loaded {done:,} of {records:,} records")
    return time.monotonic() - start


def warmed(rates: list[float]) -> bool:
    """Whether a warm-up's window throughputs stopped climbing: the mean of the last
    :data:`WARMUP_SETTLED` no more than :data:`WARMUP_GAIN` above the mean of those before."""
    k = WARMUP_SETTLED
    if len(rates) < 2 * k:
        return False
    last, before = float(np.mean(rates[-k:])), float(np.mean(rates[-2 * k : -k]))
    return before > 0 and last <= (1 + WARMUP_GAIN) * before


def warm_up(load: CassandraLoad, seconds: float, *, users: int = WARMUP_USERS
            ) -> dict[str, Any]:  # fmt: skip
    """The workload's operations from ``users`` closed users (at least one per client) until
    the throughput stops climbing (see :data:`WARMUP_GAIN`), or for at most ``seconds``:
    what the JVMs compile before they are measured. Each window's throughput and whether it
    settled; TierscopeError if a client fails."""
    w = load.workload
    warm = replace(load, workload=w.model_copy(update={"mode": "closed", "think_time": 0.0}))
    n = max(users, w.clients)
    handle = warm.start(n, 0.0, seconds, 0.0, setup="warmup")
    rates: list[float] = []
    settled = False
    try:
        edge, last = handle.t0 + WARMUP_WINDOW_S, 0
        while not handle.done and not settled:
            time.sleep(0.2)
            if time.monotonic() < edge:
                continue
            handle.poll_records()
            rates.append((handle.counts["completed"] - last) / WARMUP_WINDOW_S)
            edge, last = edge + WARMUP_WINDOW_S, handle.counts["completed"]
            settled = warmed(rates)
    finally:
        result = handle.stop()
    if result.summary.get("failure"):
        raise TierscopeError(f"the warm-up failed: {result.summary['failure']}")
    return {"warmup_s": round(time.monotonic() - handle.t0, 1), "warmup_max_s": seconds,
            "warmup_users": n, "warmup_settled": settled,
            "warmup_throughput": [round(r, 1) for r in rates]}  # fmt: skip


class CassandraHandle(WorkerHandle):
    """A running Cassandra load (see :class:`CassandraLoad`). A client writes an operation's
    row when it completes, so ``sent`` counts what completed (none is seen outstanding)."""

    def __init__(self, load: CassandraLoad, out: Path, *, level: float, setup: str, rep: int,
                 times: tuple[float, float, float, float]) -> None:  # fmt: skip
        super().__init__(out, level=level, setup=setup, rep=rep, times=times)
        self.load = load
        self.clients: list[Worker] = []

    @property
    def workers(self) -> list[Worker]:
        return self.clients

    def poll_records(self) -> None:
        now = time.monotonic()
        for c in self.clients:
            new = c.tails["ops"].read()
            if new.size:
                self.counts["completed"] += new.size
                ok = new[new["status"] == 0]
                self.counts["errors"] += new.size - ok.size
                self.keep_recent(now, ok["end"] - ok["intended"])
        self.counts["sent"] = self.counts["completed"]

    def assemble(self, failure: str | None) -> CassandraResult:
        return assemble(self, failure=failure)


@dataclass(frozen=True)
class CassandraResult:
    """What one Cassandra load measured: the summary, one row per operation, the clients'
    CPU samples."""

    summary: dict[str, Any]
    requests: pl.DataFrame
    client_samples: pl.DataFrame

    @property
    def partial(self) -> bool:
        return bool(self.summary.get("partial"))

    def client_metrics(self) -> pl.DataFrame:
        return self.client_samples


def operations_frame(handle: CassandraHandle) -> pl.DataFrame:
    """Every client's records, with the client's index."""
    parts = []
    for c in handle.clients:
        rows = c.tails["ops"].all()
        parts.append(pl.DataFrame({k: rows[k] for k in OPS_ROW.names})
                     .with_columns(pl.lit(c.index, pl.Int64).alias("client")))  # fmt: skip
    if not parts:
        return pl.DataFrame(schema={**{k: pl.Float64 for k in OPS_ROW.names}, "client": pl.Int64})
    return pl.concat(parts)


def assemble(handle: CassandraHandle, *, failure: str | None) -> CassandraResult:
    ops = operations_frame(handle)
    a, b = handle.steady_start, handle.steady_end
    if handle.stopped_at is not None:
        b = min(b, handle.stopped_at)
    w = handle.load.workload
    level_of = {i: w.consistency_of(op) for i, op in enumerate(OPS)}
    nodes = {i: f"node-{i + 1}" for i in range(len(handle.load.hosts))}
    status = pl.col("status").cast(pl.Int64).replace_strict(dict(enumerate(ERRORS)),
                                                           default="error")  # fmt: skip
    requests = ops.select(
        pl.lit(CLIENT).alias("tier"),
        pl.concat_str(pl.lit(handle.load.request_id_prefix), pl.col("client").cast(pl.String),
                      pl.lit("-"), pl.col("seq").cast(pl.String)).alias("request_id"),
        pl.col("intended").alias("start"),
        pl.col("end"),
        pl.lit(handle.setup).alias("setup"),
        pl.lit(float(handle.level)).alias("level"),
        pl.lit(handle.rep, pl.Int64).alias("rep"),
        pl.col("op").cast(pl.Int64).replace_strict(dict(enumerate(OPS))).alias("interaction"),
        status.alias("status"),
        pl.col("intended").alias("intended_start"),
        pl.col("sent").alias("actual_start"),
        pl.when(pl.col("intended") < a).then(pl.lit("ramp-up"))
        .when(pl.col("intended") < handle.steady_end).then(pl.lit("steady"))
        .otherwise(pl.lit("ramp-down")).alias("phase"),
        pl.when(status != "ok").then(status).alias("error"),
        pl.col("coordinator").cast(pl.Int64).replace_strict(nodes, default=None,
                                                            return_dtype=pl.String)
        .alias("coordinator"),
        pl.col("op").cast(pl.Int64).replace_strict(level_of).alias("consistency"),
        pl.when(pl.col("user") >= 0).then(pl.col("user").cast(pl.Int64))
        .alias("user" if w.mode == "closed" else "session"),
    )  # fmt: skip
    cpu = cpu_rows(handle.clients, ("client",))
    summary = _summary(handle, requests, cpu, (a, b), failure)
    return CassandraResult(summary, requests,
                           client_samples(cpu, handle.setup, handle.level, handle.rep))  # fmt: skip


def _summary(handle: CassandraHandle, requests: pl.DataFrame, cpu: pl.DataFrame,
             window: tuple[float, float], failure: str | None) -> dict[str, Any]:  # fmt: skip
    a, b = window
    duration = max(0.0, b - a)
    w = handle.load.workload
    steady = requests.filter((pl.col("end") >= a) & (pl.col("end") < b))
    ok = steady.filter(pl.col("status") == "ok")
    lat = (ok["end"] - ok["start"]).to_numpy()
    uncorrected = (ok["end"] - ok["actual_start"]).to_numpy()
    sent_in = requests.filter((pl.col("start") >= a) & (pl.col("start") < b))
    lag = (sent_in["actual_start"] - sent_in["start"]).drop_nulls().to_numpy()
    open_schedule = w.mode != "closed"
    late = int((lag > LATE_S).sum()) if open_schedule else 0
    total = requests.height
    good = int((requests["status"] == "ok").sum()) if total else 0
    by_op = {
        op: {"throughput": n / duration if duration > 0 else None,
             "latency": quantiles((g["end"] - g["start"]).to_numpy())}
        for (op,), g in ok.group_by("interaction") for n in [g.height]
    }  # fmt: skip
    doc: dict[str, Any] = {
        "mode": w.mode,
        "level": float(handle.level),
        "level_unit": {"closed": "users", "open": "requests/s", "partly-open": "sessions/s"}[
            w.mode
        ],
        "setup": handle.setup,
        "rep": handle.rep,
        "steady": {"start": a, "end": b, "duration_s": duration},
        "throughput": ok.height / duration if duration > 0 else None,
        "requests": total,
        "errors": total - good,
        "error_rate": (total - good) / total if total else None,
        "errors_by_class": dict(
            requests.filter(pl.col("status") != "ok").group_by("status").len().iter_rows()
        ),
        "latency": quantiles(lat),
        "latency_uncorrected": quantiles(uncorrected),
        "operations": by_op,
        "send_lag": quantiles(lag, ("p50", "p99", "max")),
        "late": late,
        "late_threshold_s": LATE_S,
        "lag": {"p50": None, "p99": None, "max": None},
        **client_verdict(cpu, a, b, late=late, sent=sent_in.height if open_schedule else 0),
        "partial": handle.stopped_at is not None or failure is not None,
    }
    if failure is not None:
        doc["failure"] = failure
    return doc


__all__ = ["CassandraHandle", "CassandraLoad", "CassandraResult", "connect", "load_records",
           "prepare", "require_driver", "warm_up"]  # fmt: skip
