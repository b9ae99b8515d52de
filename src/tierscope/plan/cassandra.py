"""Dipietro's Cassandra model (:mod:`tierscope.domains.cassandra`) calibrated from a run of the
``cassandra`` target, checked level by level against every setup of the run, and changed for
what-ifs (consistency level, replication factor, nodes, CPU per node, the replicated quorum).

What the calibration takes from one setup of the run (by default the first; its levels are
reads, YCSB's workload C — other operations are counted as reads, and a note says so):

* **CPU per read**: the nodes' CPU (their cgroups, summed) over the throughput at the level
  where it is least; the client's likewise (its worker processes). Idle threads burn CPU too —
  a JVM's pool workers spin before they park, and under a quota they spend it: measured here
  on 3 nodes capped at 0.3 core, one user's reads at ONE cost 1.2 ms of CPU each, sixteen
  users' 0.46 ms — so the least is the reads' own.
* **What a read was made of**, from the nodes' own counters (Jolokia): the replica reads per
  read (``table_reads_s``: ONE 1, QUORUM 2 and a few speculative retries) and the answers a
  coordinator took from other nodes (``request_response_completed_s``).
* **The CPU of each event** (:class:`~tierscope.domains.cassandra.ReadCosts`: a coordinator's
  own work c, a replica's read r, one side of a replica request h): the thesis's ONE demands
  (Table 3.2) split so, with both sides of a replica request alike, set the proportions, and the
  measured CPU per read the scale: c + t r + 2 a h equals it at the measured t and a. (One
  setup's reads are all alike, so they cannot split c, r and h themselves: a read at ONE reads
  once.) The split of the thesis's ONE demands gives the CPU per read of its own QUORUM
  demands within 7 % (+6.1 %).
* **The snitch**: a coordinator holding a replica reads its own only if the dynamic snitch
  ranks it first; the share that did (``local_first``) follows from the answers per read, and
  the model asks other nodes for the rest (:attr:`CassandraCluster.local_kept` carries it to
  other consistency levels: the own replica first with that chance, the others alike).
* **Capacity and throttling**: a node's CPU quota as max(1, round(quota)) servers (one for a
  quota of 0.3 core). A quota below a core throttles: a node nowhere near its quota runs a
  read at full speed, one that spends it all runs at the quota's worth (0.3), and in between
  the kernel's periods (100 ms, the quota's share of it usable) stretch some reads and not
  others. No queueing station does that, so the model gives the node's servers a speed
  between the two that depends on the share of the quota the node uses: at each of the
  calibration setup's levels, the speed at which the model gives the measured throughput,
  against the share of the quota its reads need there (CPU per read x throughput / quota),
  interpolated between full speed at none and the quota's worth at all of it (:class:`Node`).
  A prediction solves for the share the nodes' reads then need (the speed changes with it,
  the throughput with the speed: bisection).
  Without a quota, the host's cores at full speed (the nodes then share them with each other
  and the client, which the model does not know: a note says so). The client: one server per
  worker process (its main thread issues the operations).
* **The outside delay**: the lightest level's response time less the coordinators' own
  latency (Cassandra's, over JMX) and the client's CPU: the driver's threads, the loopback,
  wake-ups — a delay station every read passes.

Every setup of the run is then predicted at its levels (its consistency level, routing and
quota; the calibration setup's other facts) by the simulator, the response time by Little's
law (N / X − Z); the rows give both and the errors.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import polars as pl

from tierscope.domains.cassandra import (
    ROUTER_S,
    CassandraCluster,
    ReadCosts,
    cpu_per_request,
    replicas_waited,
    throughput_bound,
)
from tierscope.domains.ntier import finite, tier_facts
from tierscope.errors import InputError
from tierscope.spec.cassandra import READS, CassandraWorkload, parse_cassandra_workload
from tierscope.spec.experiment import ExperimentSpec
from tierscope.store import Run

__all__ = [
    "CHANGES",
    "CassandraCalibration",
    "Node",
    "calibrate_cassandra",
    "cassandra_whatif",
    "parse_changes",
]

#: Bisection steps for a node's speed (1/64 of the range).
SPEED_STEPS = 6

#: What a what-if may change: consistency level, replication factor, nodes, CPU per node (cores;
#: "none" for uncapped), the replicated-quorum variant (true/false).
CHANGES = ("consistency", "replication", "nodes", "node.cpu", "replicated")


@dataclass(frozen=True)
class Setup:
    """What the model needs of a setup: its levels' measurements and its facts."""

    name: str
    spec: ExperimentSpec
    workload: CassandraWorkload
    points: pl.DataFrame

    @property
    def consistency(self) -> str:
        return self.workload.consistency_of("read")

    @property
    def quota(self) -> float | None:
        return tier_facts(self.spec, ("node",))["node"].cpu

    def per_read(self, column: str) -> list[float]:
        """A points column per read at each of the setup's levels that measured it."""
        if column not in self.points.columns:
            raise InputError("points.parquet", column, "a cassandra run's node counters")
        values = (self.points[column] / self.points["throughput"]).drop_nulls().to_list()
        if not values:
            raise InputError("points.parquet", column, "measured values at the setup's levels")
        return values


@dataclass(frozen=True)
class Node:
    """A node's CPU in the model: ``servers`` of which each runs at ``speed`` while
    throttling slows it, between its quota's worth (``quota`` / servers: a quota spent) and
    full speed (a quota nowhere near spent); ``free`` is the measured curve of how far towards
    full speed (0 to 1) it runs at each share of its quota its reads need (see the module)."""

    servers: int
    quota: float | None
    free: tuple[tuple[float, float], ...] = ((0.0, 1.0), (1.0, 0.0))

    @classmethod
    def of(cls, quota: float | None, host_cores: float) -> Node:
        if quota is None:
            return cls(max(1, round(host_cores)), None)
        return cls(max(1, round(quota)), quota)

    @property
    def throttled(self) -> bool:
        """A quota below its servers' cores throttles: the node runs at full speed until it
        has spent the quota of a period."""
        return self.quota is not None and self.quota < self.servers

    def speed(self, used: float) -> float:
        """Each server's speed when the node's reads need this share of its quota."""
        if self.quota is None:
            return 1.0
        floor = self.quota / self.servers
        if not self.throttled:
            return floor
        u, g = zip(*self.free, strict=True)
        return floor + (1 - floor) * float(np.interp(used, u, g))


@dataclass(frozen=True)
class Prediction:
    """The model's throughput, the cluster solved, its nodes' speed, and the share of their
    quota its reads need (CPU per read x throughput / quota)."""

    throughput: float
    cluster: CassandraCluster
    speed: float
    used: float

    @property
    def cpu_per_read(self) -> float:
        return cpu_per_request(self.cluster) * self.speed

    @property
    def rt_mean(self) -> float:
        return self.cluster.clients / self.throughput - self.cluster.think_time


@dataclass(frozen=True)
class CassandraCalibration:
    """The calibrated model of one setup (:attr:`cluster`, at its top level), the event costs
    and the node it rests on, and every setup's measured levels beside the model's
    prediction."""

    setup: str
    cluster: CassandraCluster
    costs: ReadCosts
    node: Node
    measured: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def at(
        self,
        *,
        consistency: str | None = None,
        clients: int | None = None,
        replication: int | None = None,
        nodes: int | None = None,
        node: Node | None = None,
        replicated: bool | None = None,
        token_aware: bool | None = None,
        speed: float = 1.0,
    ) -> CassandraCluster:
        """The calibrated cluster with other facts, its nodes' servers at ``speed``."""
        c = self.cluster
        probe = replace(
            c,
            nodes=nodes or c.nodes,
            replication=replication or c.replication,
            consistency=consistency or c.consistency,
            replicated_quorum=c.replicated_quorum if replicated is None else replicated,
            clients=clients or c.clients,
            cores=(node or self.node).servers,
            token_aware=c.token_aware if token_aware is None else token_aware,
        )
        return replace(probe, cpu={k: v / speed for k, v in self.costs.cpu(probe.asked).items()})

    def predict(
        self, *, seed: int, precision: float, node: Node | None = None, **facts: Any
    ) -> Prediction:
        """The throughput with the nodes' speed where it meets the share of the quota the
        reads then need (throttling grows with the share, the throughput falls with it):
        bisection on the share."""
        node = node or self.node
        lo, hi = 0.0, 1.0
        best = None
        for _ in range(SPEED_STEPS if node.throttled else 1):
            mid = (lo + hi) / 2
            speed = node.speed(mid)
            cluster = self.at(node=node, speed=speed, **facts)
            x = _simulate(cluster, seed=seed, precision=precision)
            best = Prediction(x, cluster, speed, _used(cluster, x, speed, node))
            lo, hi = (mid, hi) if best.used > mid else (lo, mid)
        assert best is not None
        return best

    def model_document(self) -> dict[str, Any]:
        """The model file of the calibration setup at its top level."""
        return self.cluster.to_doc()

    def to_dict(self) -> dict[str, Any]:
        c = self.cluster
        setups: dict[str, dict[str, Any]] = {}
        for setup in dict.fromkeys(r["setup"] for r in self.rows):
            rows = [r for r in self.rows if r["setup"] == setup]
            setups[setup] = {
                "role": rows[0]["role"],
                "consistency": rows[0]["consistency"],
                "throughput_error_mean": _mean_abs(r["throughput_error"] for r in rows),
                "throughput_error_max": max(abs(r["throughput_error"]) for r in rows),
                "rt_error_mean": _mean_abs(r["rt_error"] for r in rows),
                "rt_error_max": max(abs(r["rt_error"]) for r in rows),
            }
        own = [r for r in self.rows if r["setup"] == self.setup]
        top = max(own, key=lambda r: r["throughput"]) if own else None
        peak = None if top is None else {"measured": top["throughput"],
                                         "predicted": top["throughput_model"],
                                         "error": top["throughput_error"]}  # fmt: skip
        return finite(
            {
                "kind": "cassandra",
                "solver": "simulation",
                "setup": self.setup,
                "model": {
                    "nodes": c.nodes,
                    "replication": c.replication,
                    "consistency": c.consistency,
                    "servers_per_node": self.node.servers,
                    "quota": self.node.quota,
                    "unthrottled": [list(p) for p in self.node.free],
                    "client_servers": c.client_cores,
                    "client_cpu": c.client_cpu,
                    "client_delay": c.client_delay,
                    "local_first": c.local_first,
                    "token_aware": c.token_aware,
                    "costs": self.costs.to_dict(),
                },
                "measured": self.measured,
                "levels": self.rows,
                "summary": {"setups": setups, "peak_throughput": peak},
                "notes": list(self.notes),
            }
        )

    def figure(self) -> dict[str, list[Any]]:
        """The calibration setup's "model vs measurement" columns (as the report draws them)."""
        rows = [r for r in self.rows if r["setup"] == self.setup]
        none = [None] * len(rows)
        return {
            "level": [r["level"] for r in rows],
            "measured_throughput": [r["throughput"] for r in rows],
            "predicted_throughput": [r["throughput_model"] for r in rows],
            "predicted_throughput_hw": none,
            "measured_rt_mean": [r["rt_mean"] for r in rows],
            "predicted_rt_mean": [r["rt_model"] for r in rows],
            "predicted_rt_mean_hw": none,
            "measured_rt_p95": [r["rt_p95"] for r in rows],
            "predicted_rt_p95": none,
        }


def local_first(answers: float, asked: int, replication: int, holders: float) -> float | None:
    """The chance a coordinator holding a replica reads its own under ONE, from the answers per
    read it took from other nodes (see :attr:`CassandraCluster.local_kept`); None where the
    level tells nothing (every replica asked, or one replica)."""
    if replication == 1 or asked >= replication or holders <= 0:
        return None
    kept = asked - (answers - (1 - holders) * asked) / holders
    q = (asked - 1) / (replication - 1)
    return min(1.0, max(0.0, (kept - q) / (1 - q)))


def calibrate_cassandra(
    run: Run,
    *,
    setup: str | None = None,
    seed: int = 1,
    precision: float = 0.03,
    validate: bool = True,
) -> CassandraCalibration:
    """Calibrate the model on ``setup`` (default: the run's first) and, with ``validate``,
    predict every setup's levels (see the module)."""
    setups = _setups(run)
    name = setup or next(iter(setups))
    if name not in setups:
        raise InputError("--setup", name, "one of " + ", ".join(setups), source=str(run.path))
    cal = setups[name]
    notes: list[str] = []
    nodes = cal.spec.system.nodes or 1
    rf = cal.spec.system.cassandra_keyspace.replication
    token_aware = cal.workload.routing == "token-aware"
    if set(cal.workload.ycsb.mix) - set(READS):
        notes.append("the model is of reads: the workload's writes are counted as reads")
    # idle threads burn CPU too (a JVM's pool workers spin before they park, a client polls):
    # per read it is least at the level with the least idle time
    cpu = min(cal.per_read("node.cpu_cores"))
    client = min(cal.per_read("client.cpu_cores"))
    reads = statistics.median(cal.per_read("node.table_reads_s"))
    answers = statistics.median(cal.per_read("node.request_response_completed_s"))
    host = run.info.get("host") or {}
    host_cores = float(host.get("usable_cores") or host.get("cores") or 1)
    node = Node.of(cal.quota, host_cores)
    if cal.quota is None:
        notes.append(
            "the nodes have no CPU quota: the model gives each the host's "
            f"{host_cores:g} cores, though they share them with each other and the client"
        )
    shape = ReadCosts.thesis()
    costs = shape.scaled(cpu / shape.per_read(reads, answers))
    asked = replicas_waited(cal.consistency, rf)
    holders = 1.0 if token_aware else rf / nodes
    first = local_first(answers, asked, rf, holders)
    if first is None:
        first = 1.0
        notes.append(
            f"{cal.consistency.upper()} with RF {rf} cannot show how often a coordinator skips "
            "its own replica: the model takes it never does"
        )
    levels = cal.points.sort("level")
    light = levels.row(0, named=True)
    # outside the nodes and the client's CPU: the lightest level's response time less the
    # coordinators' own latency (Cassandra's) and the client's CPU
    coordinator_ms = light.get("node.read_ms")
    if coordinator_ms is None or light.get("rt_mean") is None:
        delay = 0.0
        notes.append(
            "no coordinator latency (node.read_ms) at the lightest level: no outside delay"
        )
    else:
        delay = max(0.0, light["rt_mean"] - coordinator_ms * 1e-3 - client)
    base = CassandraCluster(
        nodes, rf, cal.consistency, round(levels["level"][-1]),
        {k: v / node.speed(1.0) for k, v in costs.cpu(asked).items()},
        ROUTER_S, ROUTER_S, ROUTER_S, client, cores=node.servers,
        client_cores=cal.workload.clients, think_time=cal.workload.think_time,
        client_delay=delay, local_first=first, token_aware=token_aware,
    )  # fmt: skip
    calibration = CassandraCalibration(name, base, costs, node, {}, notes=notes)
    free: list[tuple[float, float]] = []
    if node.throttled:
        for p in levels.iter_rows(named=True):
            users = round(p["level"])
            speed = _speed_for(calibration, users, p["throughput"], seed, precision)
            probe = calibration.at(clients=users, speed=speed)
            floor = node.speed(1.0)
            used = _used(probe, p["throughput"], speed, node)
            free.append((used, (speed - floor) / (1 - floor)))
        node = replace(node, free=_curve(free))
    measured = {
        "cpu_per_read": cpu,
        "reads_per_read": reads,
        "answers_per_read": answers,
        "client_cpu_per_read": client,
        "host_cores": host_cores,
        "quota": cal.quota,
        "unthrottled_at_levels": [list(p) for p in free],
    }
    calibration = replace(calibration, node=node, measured=measured)
    rows: list[dict[str, Any]] = []
    for other in setups.values() if validate else ():
        if (other.spec.system.nodes or 1) != nodes:
            notes.append(f"setup {other.name}: other nodes than the calibration's; not predicted")
            continue
        other_node = replace(Node.of(other.quota, host_cores), free=node.free)
        for p in other.points.sort("level").iter_rows(named=True):
            pred = calibration.predict(
                seed=seed, precision=precision, node=other_node, consistency=other.consistency,
                clients=round(p["level"]),
                replication=other.spec.system.cassandra_keyspace.replication,
                token_aware=other.workload.routing == "token-aware",
            )  # fmt: skip
            rows.append(_row(other, other.name == name, p, pred, other_node))
    return replace(calibration, rows=rows)


def parse_changes(changes: list[str]) -> dict[str, Any]:
    """``consistency=quorum``, ``replication=2``, ``nodes=4``, ``node.cpu=0.5`` (or ``none``),
    ``replicated=true`` -> their values (InputError naming a bad one)."""
    out: dict[str, Any] = {}
    for text in changes:
        key, sep, raw = (part.strip() for part in text.partition("="))
        if not sep or key not in CHANGES or not raw:
            raise InputError("--set", text, "one of " + ", ".join(f"{k}=…" for k in CHANGES))
        try:
            if key == "consistency":
                replicas_waited(raw.lower(), 1)
                out[key] = raw.lower()
            elif key in ("replication", "nodes"):
                out[key] = int(raw)
                if out[key] < 1:
                    raise ValueError
            elif key == "node.cpu":
                out[key] = None if raw == "none" else float(raw)
                if out[key] is not None and not out[key] > 0:
                    raise ValueError
            else:
                if raw.lower() not in ("true", "false"):
                    raise ValueError
                out[key] = raw.lower() == "true"
        except ValueError:
            expected = {"consistency": "one, quorum or all", "node.cpu": "cores > 0, or none",
                        "replicated": "true or false"}.get(key, "an integer >= 1")  # fmt: skip
            raise InputError("--set", text, expected) from None
    return out


def cassandra_whatif(
    calibration: CassandraCalibration,
    changes: list[str],
    levels: list[int],
    *,
    measured: dict[int, dict[str, float]] | None = None,
    seed: int = 1,
    precision: float = 0.03,
) -> dict[str, Any]:
    """The calibrated model with ``changes`` (see :func:`parse_changes`) at ``levels``: each
    level's throughput and response time as calibrated and as changed, beside the measured
    ones; and the throughput no population exceeds, before and after (the what-if document
    of :func:`tierscope.plan.whatif`)."""
    given = parse_changes(changes)
    facts = {k: given[k] for k in ("consistency", "replication", "nodes") if k in given}
    if "replicated" in given:
        facts["replicated"] = given["replicated"]
    node = calibration.node
    if "node.cpu" in given:
        host = float(calibration.measured.get("host_cores") or 1)
        node = replace(Node.of(given["node.cpu"], host), free=node.free)
    probe = calibration.at(node=node, speed=node.speed(1.0), **facts)  # refuses RF > nodes
    rows = []
    for users in levels:
        before = calibration.predict(seed=seed, precision=precision, clients=users)
        after = calibration.predict(
            seed=seed, precision=precision, node=node, clients=users, **facts
        )
        rows.append(
            {
                "users": users,
                "measured": {"measured": (measured or {}).get(users, {})},
                "baseline": {"throughput": before.throughput, "rt_mean": before.rt_mean},
                "changed": {"throughput": after.throughput, "rt_mean": after.rt_mean},
            }
        )
    # no population exceeds these: the nodes at their quota's worth
    base = throughput_bound(calibration.at(speed=calibration.node.speed(1.0)))
    changed = throughput_bound(probe)
    return {
        "kind": "cassandra",
        "changes": list(changes),
        "levels": rows,
        "capacity": {
            "baseline": base["throughput"],
            "baseline_bottleneck": base["bottleneck"],
            "changed": changed["throughput"],
            "changed_bottleneck": changed["bottleneck"],
        },
    }


def _setups(run: Run) -> dict[str, Setup]:
    """Every setup of a cassandra run with its points."""
    if run.points is None or run.points.height == 0:
        raise InputError("points.parquet", str(run.path), "a run with measured points")
    out = {}
    for name in run.points["setup"].unique(maintain_order=True).to_list():
        spec = run.setup(name)
        if spec.system.kind != "cassandra":
            raise InputError("system.kind", spec.system.kind, "a cassandra run")
        if spec.workload_mode != "closed":
            raise InputError(
                "workload.mode", spec.workload_mode, "a closed workload (the YCSB threads)",
                source=str(run.path),
            )  # fmt: skip
        workload = parse_cassandra_workload(spec.workload, str(run.path))
        # a level that served nothing tells no cost and has nothing to predict
        served = run.points.filter(pl.col("setup") == name, pl.col("throughput") > 0)
        if served.height == 0:
            raise InputError("points.parquet", name, "a setup with reads served at some level")
        out[name] = Setup(name, spec, workload, served)
    return out


def _used(cluster: CassandraCluster, x: float, speed: float, node: Node) -> float:
    """The share of its quota a node's reads need at throughput ``x`` (their CPU: the model's
    at ``speed`` times the speed), whatever idle threads burn besides."""
    if node.quota is None:
        return 0.0
    return min(1.0, x * cpu_per_request(cluster) * speed / (cluster.nodes * node.quota))


def _speed_for(
    calibration: CassandraCalibration, users: int, throughput: float, seed: int, precision: float
) -> float:
    """The nodes' speed at which the model gives the measured ``throughput`` at ``users``
    (bisection between the quota's worth and full speed, in logarithms)."""
    floor = calibration.node.speed(1.0)
    lo, hi = math.log(floor), 0.0
    for _ in range(SPEED_STEPS):
        mid = (lo + hi) / 2
        cluster = calibration.at(clients=users, speed=math.exp(mid))
        if _simulate(cluster, seed=seed, precision=precision) < throughput:
            lo = mid
        else:
            hi = mid
    return math.exp((lo + hi) / 2)


def _curve(points: list[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """The measured (share of the quota the reads need, how far towards full speed) points,
    sorted, with full speed at none and the quota's worth at all of it (points at one share
    averaged). Not forced to fall with the share: at light load a JVM's idle workers spin and
    spend the quota themselves, so its reads may run slower there than under more load."""
    by_share: dict[float, list[float]] = {}
    for u, g in [(0.0, 1.0), *points, (1.0, 0.0)]:
        by_share.setdefault(round(min(max(u, 0.0), 1.0), 6), []).append(min(max(g, 0.0), 1.0))
    return tuple((u, float(np.mean(g))) for u, g in sorted(by_share.items()))


def _simulate(cluster: CassandraCluster, *, seed: int, precision: float) -> float:
    """The model's throughput (reads/s)."""
    from tierscope.sim.runner import simulate

    out = simulate(cluster.model(), seed=seed, precision=precision).to_dict()
    return float(out["classes"]["client"]["throughput"])


def _row(setup: Setup, calibration: bool, p: dict[str, Any], pred: Prediction, node: Node
         ) -> dict[str, Any]:  # fmt: skip
    x = pred.throughput
    return {
        "setup": setup.name,
        "role": "calibration" if calibration else "prediction",
        "consistency": setup.consistency,
        "level": pred.cluster.clients,
        "throughput": p["throughput"],
        "throughput_model": x,
        "throughput_error": x / p["throughput"] - 1,
        "rt_mean": p["rt_mean"],
        "rt_p95": p["rt_p95"],
        "rt_model": pred.rt_mean,
        "rt_error": pred.rt_mean / p["rt_mean"] - 1,
        "cpu_per_read": p["node.cpu_cores"] / p["throughput"],
        "cpu_per_read_model": pred.cpu_per_read,
        "quota_cpu": None
        if node.quota is None
        else p["node.cpu_cores"] / (pred.cluster.nodes * node.quota),
        "quota_needed_model": pred.used,
        "speed_model": pred.speed,
    }


def _mean_abs(values: Any) -> float:
    v = [abs(x) for x in values]
    return sum(v) / len(v)
