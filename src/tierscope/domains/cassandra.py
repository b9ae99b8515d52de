"""Dipietro's queueing model of a Cassandra cluster (seed 004 §5), with the replication factor
and the consistency level explicit, built as a tierscope model for the simulator.

Per node k: a network queue ``net-k`` (FCFS), a CPU ``cpu-k`` (processor sharing on the node's
cores), a disk ``disk-k`` (FCFS), forks ``fork-k-local`` and ``fork-k-remote`` with their join
``join-k``, and routers ``route-k-i`` that send a replica request to a node chosen at random
among the others. As in the thesis, the CPU is a finite capacity region of
``concurrent_reads`` requests (Cassandra's default, 32): every way into ``cpu-k`` passes a
zero-time station ``wait-k`` where requests wait, holding nothing, while the region is full (the
read stage's pending queue); ``concurrent_reads=None`` leaves the region out. The YCSB client is
a CPU
queue and a network queue (``ycsb-cpu``, ``ycsb-net``); its threads are the closed population.

A request leaves the client for a coordinator chosen uniformly (the driver not token-aware, as
in the thesis): a share RF/N of them land on a node that holds a replica (``local``), the rest,
(N − RF)/N, on one that does not (``remote``). Let w be the replicas the consistency level
waits for (ONE 1, QUORUM ⌊RF/2⌋ + 1, ALL RF):

* local: net → CPU (parse) → fork into the local disk read and w − 1 replica requests → join
  (all w) → CPU (``local-end``) → net → client;
* remote: net → CPU (parse) → fork into w replica requests → join → CPU (``remote-end``) →
  net → client;
* a replica request from coordinator k (class ``task-k``, which remembers k as the thesis's
  read-remote-ID classes do) at node j: net → CPU → disk → net (class ``ret-k``, the data going
  back) → the join of k.

Each replica request picks its node independently among the N − 1 others, as the thesis's
routers did (a real coordinator asks distinct replicas). Demands are seconds per visit; the
thesis's Tables 3.2 and 3.3 (milliseconds in the text, by the bound check of the digest) are
:data:`THESIS_DEMANDS`.

:func:`cpu_per_request` and :func:`throughput_bound` are the asymptotic analysis: the CPU a
request costs the cluster, and the throughput no population can exceed (the busiest station's
servers over its demand per request).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tierscope.errors import InputError
from tierscope.spec.cassandra import CONSISTENCY, replicas_needed
from tierscope.spec.model import Model, parse_model

__all__ = [
    "CONSISTENCY",
    "THESIS_DEMANDS",
    "CassandraCluster",
    "ReadCosts",
    "cpu_per_request",
    "replicas_waited",
    "throughput_bound",
]

_MS = 1e-3

#: Table 3.2 (CPU per class and consistency level) and Table 3.3 (network, disk, client), in
#: seconds: the private-cloud demands of the thesis (4 nodes of 2 cores, RF 3, 1 KB records).
THESIS_DEMANDS: dict[str, dict[str, float]] = {
    "one": {"local": 0.8028 * _MS, "remote": 0.374 * _MS, "replica": 0.6309 * _MS,
            "local_end": 0.0, "remote_end": 0.4994 * _MS},
    "quorum": {"local": 0.4078 * _MS, "remote": 0.5712 * _MS, "replica": 0.6423 * _MS,
               "local_end": 0.4968 * _MS, "remote_end": 0.8917 * _MS},
    "all": {"local": 0.5 * _MS, "remote": 0.6 * _MS, "replica": 0.6 * _MS,
            "local_end": 0.5 * _MS, "remote_end": 1.0 * _MS},
    "shared": {"net_request": 0.01333 * _MS, "net_data": 0.1333 * _MS, "disk": 0.0679 * _MS,
               "client_cpu": 0.428 * _MS},
}  # fmt: skip

#: A router (the choice of the node a replica request goes to) takes no time; the model format
#: wants a positive service time, so it takes a nanosecond.
ROUTER_S = 1e-9
#: The CPU demands of a class per consistency level (keys of :data:`THESIS_DEMANDS`).
CPU_CLASSES = ("local", "remote", "replica", "local_end", "remote_end")


def replicas_waited(consistency: str, replication: int) -> int:
    """w: the replica responses a read waits for (ONE 1, QUORUM ⌊RF/2⌋ + 1, ALL RF)."""
    if consistency not in CONSISTENCY:
        raise InputError("consistency", consistency, "one, quorum or all")
    return replicas_needed(consistency, replication)


@dataclass(frozen=True)
class CassandraCluster:
    """A read-only YCSB workload on N nodes (see the module); demands in seconds per visit."""

    nodes: int
    replication: int
    consistency: str
    clients: int
    cpu: Mapping[str, float]  # local, remote, replica, local_end, remote_end
    net_request: float
    net_data: float
    disk: float
    client_cpu: float
    cores: int = 2
    client_cores: int = 4
    think_time: float = 0.0
    #: §5.9's variant: ask every replica (RF) and go on with the first w answers
    replicated_quorum: bool = False
    #: requests a node's CPU holds at once (the read stage's threads); None: no limit
    concurrent_reads: int | None = 32
    #: what a request spends outside the nodes' and the clients' CPU (the driver's threads,
    #: the loopback, wake-ups): a delay station between the client's CPU and its network
    client_delay: float = 0.0
    #: the chance that a coordinator holding a replica reads its own under ONE (the dynamic
    #: snitch ranks the replicas by their latency, and now and then its own below another's;
    #: 1 is the thesis's static choice); see :attr:`local_kept`
    local_first: float = 1.0
    #: the client sends each request to a replica of its key (no coordinator without one)
    token_aware: bool = False

    def __post_init__(self) -> None:
        if self.nodes < 1:
            raise InputError("nodes", self.nodes, "at least 1")
        if not 1 <= self.replication <= self.nodes:
            raise InputError("replication", self.replication, f"1 to the {self.nodes} nodes")
        w = replicas_waited(self.consistency, self.replication)
        if self.nodes == 1 and (w > 1 or self.replication < self.nodes):
            raise InputError("nodes", 1, "two or more nodes for replica requests")
        if self.clients < 1:
            raise InputError("clients", self.clients, "at least 1 client thread")
        if self.concurrent_reads is not None and self.concurrent_reads < 1:
            raise InputError("concurrent_reads", self.concurrent_reads, "at least 1, or none")
        if not 0 <= self.local_first <= 1:
            raise InputError("local_first", self.local_first, "a probability from 0 to 1")
        missing = [c for c in CPU_CLASSES if c not in self.cpu]
        if missing:
            raise InputError("cpu", missing[0], "a CPU demand for " + ", ".join(CPU_CLASSES))
        for name, v in [*self.cpu.items(), ("net_request", self.net_request),
                        ("net_data", self.net_data), ("disk", self.disk),
                        ("client_cpu", self.client_cpu),
                        ("client_delay", self.client_delay)]:  # fmt: skip
            if not v >= 0:
                raise InputError(name, v, "a demand in seconds >= 0")

    @classmethod
    def thesis(cls, consistency: str, *, clients: int, nodes: int = 4, replication: int = 3,
               **kw: Any) -> CassandraCluster:  # fmt: skip
        """The thesis's private cloud (Tables 3.2, 3.3) at ``consistency``."""
        if consistency not in CONSISTENCY:
            raise InputError("consistency", consistency, "one, quorum or all")
        s = THESIS_DEMANDS["shared"]
        return cls(nodes, replication, consistency, clients, dict(THESIS_DEMANDS[consistency]),
                   s["net_request"], s["net_data"], s["disk"], s["client_cpu"], **kw)  # fmt: skip

    @property
    def waited(self) -> int:
        return replicas_waited(self.consistency, self.replication)

    @property
    def asked(self) -> int:
        """Replicas a read asks: w, or RF in the replicated-quorum variant."""
        return self.replication if self.replicated_quorum else self.waited

    @property
    def local_kept(self) -> float:
        """The chance that a coordinator holding a replica reads its own: that its replica is
        among the ``asked`` the snitch ranks first. Its own first with :attr:`local_first`,
        the others in any order alike: p + (asked − 1)(1 − p)/(RF − 1)."""
        p, rf = self.local_first, self.replication
        if rf == 1 or self.asked >= rf:
            return 1.0
        return p + (self.asked - 1) * (1 - p) / (rf - 1)

    @property
    def remote_share(self) -> float:
        """Requests whose coordinator asks only other nodes: (N − RF)/N hold no replica (none
        when the client is token-aware), and of the rest those whose own replica the snitch
        ranked out (1 − :attr:`local_kept`)."""
        holders = 1.0 if self.token_aware else self.replication / self.nodes
        return (1 - holders) + holders * (1 - self.local_kept)

    # ---- the model -------------------------------------------------------------------------
    def model(self) -> Model:
        """The queueing network for the simulator (``tierscope model simulate`` reads its
        ``to_doc()``)."""
        return parse_model(self.to_doc(), source="cassandra model")

    def to_doc(self) -> dict[str, Any]:
        n, w, asked = self.nodes, self.waited, self.asked
        nodes = range(1, n + 1)
        p_remote = self.remote_share
        kinds = ("local", "remote") if p_remote > 0 else ("local",)
        stations: list[dict[str, Any]] = [
            {"name": "ycsb-cpu", "servers": self.client_cores, "discipline": "ps"},
            {"name": "ycsb-net"},
        ]
        if self.think_time > 0:
            stations.append({"name": "think", "type": "delay"})
        if self.client_delay > 0:
            stations.append({"name": "ycsb-delay", "type": "delay"})
        # local reads send asked - 1 replica requests, remote ones asked
        fan_out = asked if p_remote > 0 else asked - 1
        routers = {k: [f"route-{k}-{i}" for i in range(1, fan_out + 1)] for k in nodes}
        region = self.concurrent_reads is not None
        for k in nodes:
            cpu: dict[str, Any] = {"name": f"cpu-{k}", "servers": self.cores, "discipline": "ps"}
            if self.concurrent_reads is not None:
                # fewer requests than cores: each has a core of its own
                cpu |= {"servers": min(self.cores, self.concurrent_reads),
                        "capacity": self.concurrent_reads, "on_full": "block"}  # fmt: skip
                stations.append({"name": f"wait-{k}", "type": "delay"})
            stations += [{"name": f"net-{k}"}, cpu, {"name": f"disk-{k}"}]
            # local: the disk read and asked - 1 replica requests; remote: asked replica requests
            branches = {"local": [f"disk-{k}", *routers[k][: asked - 1]], "remote": routers[k]}
            stations += [{"name": f"fork-{k}-{kind}", "type": "fork", "branches": branches[kind],
                          "join": f"join-{k}"} for kind in kinds]  # fmt: skip
            join: dict[str, Any] = {"name": f"join-{k}", "type": "join"}
            if asked > w:  # the first w answers release the request
                join["quorum"] = w
            stations.append(join)
            stations += [{"name": r, "type": "delay"} for r in routers[k]]

        c = self.cpu

        def into_cpu(k: int, rows: dict[str, dict[str, float]], service: dict[str, float]) -> str:
            """The way into cpu-k for a class: through wait-k when the region is on."""
            if not region:
                return f"cpu-{k}"
            rows[f"wait-{k}"] = {f"cpu-{k}": 1.0}
            service[f"wait-{k}"] = ROUTER_S
            return f"wait-{k}"

        classes: list[dict[str, Any]] = []
        entry = {f"net-{k}:local": (1 - p_remote) / n for k in nodes} | (
            {f"net-{k}:remote": p_remote / n for k in nodes} if p_remote > 0 else {})  # fmt: skip
        client_rows: dict[str, dict[str, float]] = {
            "ycsb-cpu": {"ycsb-net": 1.0},
            "ycsb-net": entry,
        }
        client_service = {"ycsb-cpu": self.client_cpu, "ycsb-net": self.net_request}
        if self.client_delay > 0:
            client_rows |= {"ycsb-cpu": {"ycsb-delay": 1.0}, "ycsb-delay": {"ycsb-net": 1.0}}
            client_service["ycsb-delay"] = self.client_delay
        if self.think_time > 0:
            client_rows = {"think": {"ycsb-cpu": 1.0}, **client_rows}
            client_service["think"] = self.think_time
        classes.append({"name": "client", "population": self.clients, "reference": "ycsb-cpu",
                        "routing": client_rows, "service": client_service})  # fmt: skip
        back = "think:client" if self.think_time > 0 else "ycsb-cpu:client"
        classes.append({"name": "reply", "population": 0,
                        "routing": {"ycsb-net": {back: 1.0}},
                        "service": {"ycsb-net": self.net_data}})  # fmt: skip

        for kind in kinds:
            rows: dict[str, dict[str, float]] = {}
            service: dict[str, float] = {}
            end_rows: dict[str, dict[str, float]] = {}
            end_service: dict[str, float] = {}
            for k in nodes:
                others = [j for j in nodes if j != k]
                rows[f"net-{k}"] = {into_cpu(k, rows, service): 1.0}
                rows[f"cpu-{k}"] = {f"fork-{k}-{kind}": 1.0}
                # the end operations on the CPU (none under ONE for a local read)
                if c[f"{kind}_end"] > 0:
                    end_at = into_cpu(k, end_rows, end_service)
                    end_rows[f"cpu-{k}"] = {f"net-{k}": 1.0}
                    end_service[f"cpu-{k}"] = c[f"{kind}_end"]
                else:
                    end_at = f"net-{k}"
                rows[f"join-{k}"] = {f"{end_at}:{kind}-end": 1.0}
                end_rows[f"net-{k}"] = {"ycsb-net:reply": 1.0}
                end_service[f"net-{k}"] = self.net_data
                service |= {f"net-{k}": self.net_request, f"cpu-{k}": c[kind]}
                if kind == "local":
                    rows[f"disk-{k}"] = {f"join-{k}": 1.0}
                    service[f"disk-{k}"] = self.disk
                for r in routers[k]:  # a replica request picks one of the other nodes
                    rows[r] = {f"net-{j}:task-{k}": 1.0 / len(others) for j in others}
                    service[r] = ROUTER_S
            classes.append({"name": kind, "population": 0, "routing": rows, "service": service})
            classes.append({"name": f"{kind}-end", "population": 0, "routing": end_rows,
                            "service": end_service})  # fmt: skip
        if asked > 1 or p_remote > 0:
            for k in nodes:  # replica requests of coordinator k at node j, out and back
                out_rows: dict[str, dict[str, float]] = {}
                out_service: dict[str, float] = {}
                back_rows: dict[str, dict[str, float]] = {}
                back_service: dict[str, float] = {}
                for j in (j for j in nodes if j != k):
                    out_rows |= {f"net-{j}": {into_cpu(j, out_rows, out_service): 1.0},
                                 f"cpu-{j}": {f"disk-{j}": 1.0},
                                 f"disk-{j}": {f"net-{j}:ret-{k}": 1.0}}  # fmt: skip
                    out_service |= {f"net-{j}": self.net_request, f"cpu-{j}": c["replica"],
                                    f"disk-{j}": self.disk}  # fmt: skip
                    back_rows[f"net-{j}"] = {f"join-{k}": 1.0}
                    back_service[f"net-{j}"] = self.net_data
                classes.append({"name": f"task-{k}", "population": 0, "routing": out_rows,
                                "service": out_service})  # fmt: skip
                # never taken (a replica request ends at its coordinator's join), but every
                # station a closed class reaches needs a row
                back_rows[f"join-{k}"] = {f"net-{k}:local-end": 1.0}
                classes.append({"name": f"ret-{k}", "population": 0, "routing": back_rows,
                                "service": back_service})  # fmt: skip
        variant = "-replicated" if self.replicated_quorum else ""
        return {"name": f"cassandra-{n}n-rf{self.replication}-{self.consistency}{variant}",
                "stations": stations, "classes": classes}  # fmt: skip


@dataclass(frozen=True)
class ReadCosts:
    """The CPU (seconds of one core) of the events a read is made of, whatever the consistency
    level: ``coordinate``, its coordinator's own work (parse, answer the client); ``read``, one
    replica's read of the row (its coordinator's own or another node's); ``message``, one side
    of a replica request (the coordinator sending it and taking the answer, or the replica
    taking it and answering). A read that waits for w replicas with a answers from other nodes
    costs c + w r + 2 a h (seed 004 §5's classes, one formula: :meth:`cpu`)."""

    coordinate: float
    read: float
    message: float

    @classmethod
    def thesis(cls) -> ReadCosts:
        """The thesis's ONE demands (Table 3.2) split into events, with the two sides of a
        replica request alike: local = c + r, remote + remote end = c + h, replica = r + h."""
        d = THESIS_DEMANDS["one"]
        local, remote, replica = d["local"], d["remote"] + d["remote_end"], d["replica"]
        return cls((local + remote - replica) / 2, (local - remote + replica) / 2,
                   (remote - local + replica) / 2)  # fmt: skip

    def per_read(self, reads: float, answers: float) -> float:
        """CPU of a read that made ``reads`` replica reads, ``answers`` of them on other
        nodes."""
        return self.coordinate + reads * self.read + 2 * answers * self.message

    def scaled(self, factor: float) -> ReadCosts:
        return ReadCosts(self.coordinate * factor, self.read * factor, self.message * factor)

    def cpu(self, asked: int) -> dict[str, float]:
        """:attr:`CassandraCluster.cpu` for reads that ask ``asked`` replicas: the coordinator's
        work half before and half after the answers, its own read (a local read) before it."""
        c, r, h = self.coordinate, self.read, self.message
        return {"local": c / 2 + r + (asked - 1) * h / 2, "local_end": c / 2 + (asked - 1) * h / 2,
                "remote": c / 2 + asked * h / 2, "remote_end": c / 2 + asked * h / 2,
                "replica": r + h}  # fmt: skip

    def to_dict(self) -> dict[str, float]:
        return {"coordinate": self.coordinate, "read": self.read, "message": self.message}


def cpu_per_request(cluster: CassandraCluster) -> float:
    """Seconds of CPU a request costs the whole cluster: parse and end on its coordinator,
    and one replica read per replica request (w − 1 for local requests, w for remote ones; RF − 1
    and RF in the replicated-quorum variant, whose late answers still cost)."""
    c, w, r = cluster.cpu, cluster.asked, cluster.remote_share
    local = c["local"] + c["local_end"] + (w - 1) * c["replica"]
    remote = c["remote"] + c["remote_end"] + w * c["replica"]
    return (1 - r) * local + r * remote


def throughput_bound(cluster: CassandraCluster) -> dict[str, Any]:
    """The asymptotic bound: every station's servers over its demand per request (the nodes
    share the load evenly: coordinators uniform, replica requests uniform over the others),
    the smallest of them, and which station it is."""
    n, w, r = cluster.nodes, cluster.asked, cluster.remote_share
    tasks = (1 - r) * (w - 1) + r * w  # replica requests per request
    disk_reads = (1 - r) + tasks
    per_node = {
        "cpu": (cpu_per_request(cluster) / n, cluster.cores),
        "net": ((cluster.net_request + cluster.net_data) * (1 + tasks) / n, 1),
        "disk": (cluster.disk * disk_reads / n, 1),
    }
    limits = {k: (servers / d if d > 0 else float("inf")) for k, (d, servers) in per_node.items()}
    limits["ycsb-cpu"] = cluster.client_cores / cluster.client_cpu if cluster.client_cpu else float(
        "inf")  # fmt: skip
    client_net = cluster.net_request + cluster.net_data
    limits["ycsb-net"] = 1 / client_net if client_net else float("inf")
    station = min(limits, key=lambda k: limits[k])
    return {"throughput": limits[station], "bottleneck": station, "per_station": limits,
            "cpu_per_request": cpu_per_request(cluster)}  # fmt: skip
