"""The embedded system: a RUBBoS-like bulletin board in three tiers, each its own OS process.

``db`` replicas (SQLite query servers) start first, then ``app`` replicas pointed at every db
replica, then ``web`` replicas pointed at every app replica; the load generator is given every
web replica. Each replica runs ``processes`` OS processes sharing one port (SO_REUSEPORT), by
default as many as its CPU quota can keep busy, because one Python process uses at most one core.

Each deployment makes a secret token: the db replicas answer only connections that present it
first, and only the app replicas are given it (in their 0600 config files), so no other local
process can run the database's queries.

Default per-interaction costs make the database the bottleneck of the default topology with the
quotas of ``examples/demo.yaml``; any tier can be made the bottleneck with ``cpu`` and ``cpu_cost``.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tierscope.errors import InputError
from tierscope.experiment.cgroups import Hierarchy, NodeCgroup
from tierscope.experiment.embedded._instrument import read_gauges
from tierscope.experiment.embedded.component import PEERS_POLL_S
from tierscope.experiment.embedded.data import database_copy
from tierscope.experiment.processes import Supervisor, python_argv
from tierscope.experiment.targets import CsvTail, Deployment, Node, VisitTail, register
from tierscope.spec.experiment import ComponentSpec, SystemSpec, TierSpec
from tierscope.spec.graph import THREE_TIERS

#: Defaults per tier: knobs and the extra CPU seconds per request (by interaction).
DEFAULTS: dict[str, dict[str, Any]] = {
    "web": {"workers": 256, "cpu_cost": {"default": 0.0}},
    "app": {"workers": 16, "db_pool": 8, "cpu_cost": {"default": 0.001, "static": 0.0}},
    "db": {"workers": 64, "cpu_cost": {"default": 0.0025}, "io_cost": {"default": 0}},
}
WORKLOAD_FILE = Path(__file__).resolve().parents[1] / "embedded" / "workload.yaml"
#: A replica being scaled away is drained once nothing arrived at it for this long (s): its
#: callers stop calling it within a few peers polls.
QUIET_S = 5 * PEERS_POLL_S
#: The base workload of a graph: every request enters at the entry as one visit.
GRAPH_WORKLOAD: dict[str, Any] = {
    "name": "graph",
    "mode": "closed",
    "think_time": {"dist": "exp", "mean": 0.5},
    "interactions": [{"name": "visit", "method": "GET", "url": "/"}],
}


def tier_config(tier: str, spec: TierSpec) -> dict[str, Any]:
    """The knobs a tier process gets: defaults, overridden by the spec."""
    cfg = json.loads(json.dumps(DEFAULTS[tier]))
    for key in ("workers", "connections", "db_pool", "queue_limit"):
        value = getattr(spec, key)
        if value is not None:
            cfg[key] = value
    for key in ("cpu_cost", "io_cost"):
        value = getattr(spec, key)
        if value:
            cfg[key] = {**cfg.get(key, {}), **value}
    return cfg


def processes_for(spec: TierSpec | ComponentSpec) -> int:
    if spec.processes is not None:
        return spec.processes
    return max(1, math.ceil(spec.cpu)) if spec.cpu is not None else 1


def node_cgroup(
    hierarchy: Hierarchy | None, supervisor: Supervisor, name: str, spec: TierSpec | ComponentSpec
) -> NodeCgroup | None:
    """The node's cgroup with the tier's CPU quota, cpuset and memory limit (None: no cgroups)."""
    if hierarchy is None:
        return None
    cgroup = hierarchy.node(name)
    supervisor.note_cgroup(cgroup)
    cgroup.set_cpu(spec.cpu)
    if spec.cpuset:
        cgroup.set_cpuset(spec.cpuset)
    if spec.memory:
        cgroup.set_memory(spec.memory)
    return cgroup


def write_private(path: Path, text: str) -> None:
    """Write ``path`` readable by its owner only (a tier's config may hold a secret)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), 0o600)  # an existing file keeps its mode otherwise
        fh.write(text)


def spawn_tier_processes(
    supervisor: Supervisor,
    node: Node,
    cfg: dict[str, Any],
    workdir: Path,
    count: int,
    extra_files: dict[str, str] | None = None,
    server: str | None = None,
    tail: type[CsvTail] = CsvTail,
) -> tuple[int, list[dict[str, Path]]]:
    """Start ``count`` processes of the embedded server ``server`` (default: the module named
    after ``node.tier``) on one port (SO_REUSEPORT) and register their process groups, gauges
    and request logs (read by ``tail``) with ``node``. ``extra_files``: more files per process,
    key -> suffix. Returns the port and each process's files."""
    port = 0
    started = []
    for i in range(count):
        label = f"{node.name}.p{i}"
        suffixes = {"ready_file": "ready", "gauges": "gauges", "log": "csv", "io_file": "io"}
        files = {
            k: workdir / f"{label}.{v}" for k, v in {**suffixes, **(extra_files or {})}.items()
        }
        cfg_file = workdir / f"{label}.json"
        write_private(
            cfg_file, json.dumps({**cfg, **{k: str(v) for k, v in files.items()}, "port": port})
        )
        argv = python_argv(f"tierscope.experiment.embedded.{server or node.tier}", str(cfg_file))
        proc = supervisor.spawn(label, argv, node=node.cgroup)
        port = int(supervisor.wait_ready(label, proc, files["ready_file"])["port"])
        node.pgids.append(proc.pid)
        node.gauges.append(files["gauges"])
        node.request_sources.append(tail(files["log"]))
        started.append(files)
    return port, started


class GraphScaler:
    """Starts and stops replicas of an embedded call graph's components (deploy, and
    ``Deployment.scale`` while it runs). Each component's replicas are listed in its peers
    file (``peers-<component>.json``), which its callers follow (``component.PEERS_POLL_S``)."""

    def __init__(
        self, system: SystemSpec, workdir: Path, supervisor: Supervisor, hierarchy: Hierarchy | None
    ) -> None:
        assert system.components is not None
        self.system, self.workdir = system, workdir
        self.supervisor, self.hierarchy = supervisor, hierarchy
        self.graph = system.graph
        self.endpoints: dict[str, dict[str, tuple[str, int]]] = {}  # component -> node -> addr
        self.started: dict[str, int] = {}  # component -> replicas ever started (for names)

    def peers_file(self, component: str) -> Path:
        return self.workdir / f"peers-{component}.json"

    def _publish(self, component: str) -> None:
        """Write the component's replicas for its callers (atomically: they poll the file)."""
        path = self.peers_file(component)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([list(a) for a in self.endpoints[component].values()]))
        os.replace(tmp, path)

    def deploy(self) -> Deployment:
        """Every component's replicas, callees first; the load generator is given the entry's
        replicas and one interaction, ``visit`` (GET /)."""
        nodes: list[Node] = []
        for comp in reversed(self.graph.components):
            self.endpoints[comp.name] = {}
            nodes = self.add(comp.name, comp.replicas) + nodes
        entry = self.graph.entry or self.graph.names[0]
        return Deployment(
            nodes=nodes,
            entry_urls=[f"http://{h}:{p}" for h, p in self.endpoints[entry].values()],
            workload=GRAPH_WORKLOAD,
            stop=self.supervisor.stop_all,
            facts={"endpoints": self.addresses()},
            scaler=self,
        )

    def addresses(self) -> dict[str, list[str]]:
        return {c: [f"{h}:{p}" for h, p in e.values()] for c, e in self.endpoints.items()}

    def _entry_check(self, component: str) -> None:
        if component == (self.graph.entry or self.graph.names[0]) and self.endpoints.get(component):
            raise InputError(
                "component",
                component,
                "a component behind the entry (the load generator drives the entry's replicas "
                "for a whole level)",
            )

    def add(self, component: str, count: int) -> list[Node]:
        self._entry_check(component)
        comp = self.graph[component]
        spec = self.system.components[component]  # type: ignore[index]
        callees = [k.to for k in comp.calls]
        added = []
        for _ in range(count):
            r = self.started[component] = self.started.get(component, 0) + 1
            name = f"{component}-{r}"
            cgroup = node_cgroup(self.hierarchy, self.supervisor, name, spec)
            node = Node(tier=component, name=name, replica=r, cgroup=cgroup, quota=spec.cpu)
            cfg = {
                "name": name,
                "workers": spec.workers,
                "pool": spec.pool,
                "queue_limit": spec.queue_limit,
                "cpu_cost": spec.cpu_cost or {},
                "io_cost": spec.io_cost or {},
                "storage": comp.storage,
                "parallel": comp.parallel,
                "seed": self.system.seed,
                "calls": [
                    {
                        "to": k.to, "p": k.p, "times": k.times,
                        "at": list(self.endpoints[k.to].values()),
                        "peers": str(self.peers_file(k.to)),
                    }
                    for k in comp.calls
                ],
            }  # fmt: skip
            port, files = spawn_tier_processes(
                self.supervisor, node, cfg, self.workdir, processes_for(spec),
                extra_files={f"calls_{c}": f"to-{c}.gauges" for c in callees},
                server="component", tail=VisitTail,
            )  # fmt: skip
            by_callee = {c: [f[f"calls_{c}"] for f in files] for c in callees}
            node.extra_metrics = _callee_metrics(by_callee)
            self.endpoints[component][name] = ("127.0.0.1", port)
            added.append(node)
        self._publish(component)
        return added

    def drain(self, nodes: list[Node], timeout_s: float = 30.0) -> None:
        for node in nodes:
            self._entry_check(node.tier)
            self.endpoints[node.tier].pop(node.name, None)
        for component in {n.tier for n in nodes}:
            self._publish(component)
        # Callers re-read the peers file within PEERS_POLL_S (later on a busy host): drained
        # is nothing in the nodes and no arrival for QUIET_S; a call that still reaches a
        # stopped replica is sent to another one by its caller.
        start = last = time.monotonic()
        seen = _arrivals_present(nodes)
        while (now := time.monotonic()) < start + timeout_s:
            counts = _arrivals_present(nodes)
            if counts[0] != seen[0]:
                seen, last = counts, now
            if counts[1] == 0 and now - last >= QUIET_S:
                break
            time.sleep(0.02)

    def stop(self, nodes: list[Node]) -> None:
        for node in nodes:
            self.supervisor.stop_groups(node.pgids)
            if node.cgroup is not None:
                node.cgroup.destroy()
                if self.hierarchy is not None:
                    self.hierarchy.forget(node.cgroup)


def _arrivals_present(nodes: list[Node]) -> tuple[int, int]:
    """Requests that arrived at the nodes, and those in them, over their processes' gauges."""
    values = [v for n in nodes for v in map(read_gauges, n.gauges) if v]
    return sum(v["arrivals"] for v in values), sum(v["arrivals"] - v["departures"] for v in values)


def start_graph(
    system: SystemSpec, workdir: Path, supervisor: Supervisor, hierarchy: Hierarchy | None
) -> Deployment:
    """Deploy the components of ``system.components``, callees first, each replica its own
    node of :mod:`tierscope.experiment.embedded.component` processes (scalable while it runs:
    :class:`GraphScaler`)."""
    return GraphScaler(system, workdir, supervisor, hierarchy).deploy()


def _callee_metrics(files: dict[str, list[Path]]) -> Callable[[], dict[str, float]] | None:
    """The node's calls to each callee: ``calls_out:<callee>`` (outstanding, holding one of the
    pool's connections or waiting for one), ``pool_util:<callee>`` (connections in use / the
    pool's size), ``pool_waiting:<callee>`` (calls waiting for a connection), and
    ``pool_util``: its fullest pool."""
    if not files:
        return None

    def read() -> dict[str, float]:
        out: dict[str, float] = {}
        for callee, paths in files.items():
            values = [v for v in map(read_gauges, paths) if v]
            active = sum(v["active"] for v in values)
            busy = sum(v["pool_busy"] for v in values)
            size = sum(v["pool_size"] for v in values)
            out[f"calls_out:{callee}"] = float(active)
            out[f"pool_util:{callee}"] = busy / size if size else 0.0
            out[f"pool_waiting:{callee}"] = float(max(0, active - busy))
        out["pool_util"] = max(v for k, v in out.items() if k.startswith("pool_util:"))
        return out

    return read


def start_embedded(
    system: SystemSpec, workdir: Path, supervisor: Supervisor, hierarchy: Hierarchy | None
) -> Deployment:
    if system.components is not None:
        return start_graph(system, workdir, supervisor, hierarchy)
    nodes: list[Node] = []
    endpoints: dict[str, list[tuple[str, int]]] = {}
    token = secrets.token_hex(24)
    for tier in ("db", "app", "web"):
        spec = system.tier(tier)
        endpoints[tier] = []
        for r in range(1, system.replicas[tier] + 1):
            name = f"{tier}-{r}"
            cgroup = node_cgroup(hierarchy, supervisor, name, spec)
            node = Node(tier=tier, name=name, replica=r, cgroup=cgroup, quota=spec.cpu)
            cfg = tier_config(tier, spec)
            if tier == "db":
                cfg["database"] = str(database_copy(workdir / f"{name}.sqlite", seed=system.seed))
                cfg["token"] = token
            elif tier == "app":
                cfg["db"] = endpoints["db"]
                cfg["db_token"] = token
            else:
                cfg["app"] = endpoints["app"]
            port, _ = spawn_tier_processes(supervisor, node, cfg, workdir, processes_for(spec))
            endpoints[tier].append(("127.0.0.1", port))
            nodes.append(node)
    from tierscope.spec._load import load_yaml

    return Deployment(
        nodes=nodes,
        entry_urls=[f"http://{h}:{p}" for h, p in endpoints["web"]],
        workload=load_yaml(WORKLOAD_FILE),
        stop=supervisor.stop_all,
        facts={"endpoints": {t: [f"{h}:{p}" for h, p in e] for t, e in endpoints.items()}},
    )


class EmbeddedTarget:
    """``system.kind: embedded``: tierscope's own servers, any call graph or the three-tier
    shorthand, each replica a node of processes in its own cgroup."""

    kind = "embedded"
    faults = frozenset({"stall", "cpu_hog"})

    def check(self, system: SystemSpec) -> None:
        pass  # everything it needs is in the package

    def deploy(
        self, system: SystemSpec, workdir: Path, supervisor: Supervisor, hierarchy: Hierarchy | None
    ) -> Deployment:
        return start_embedded(system, workdir, supervisor, hierarchy)

    def deployed_as(self, system: SystemSpec) -> dict[str, Any]:
        return quota_free(system, lambda _name, spec: processes_for(spec))


def quota_free(
    system: SystemSpec, processes: Callable[[str, TierSpec | ComponentSpec], int]
) -> dict[str, Any]:
    """``system``'s spec with every component's CPU quota replaced by the processes
    (``processes(name, spec)``) that quota starts: quotas alone can change on the running
    processes (:meth:`NodeCgroup.set_cpu`), the number of processes cannot."""
    doc = system.model_dump(mode="json")
    if system.components is None:
        specs: dict[str, TierSpec | ComponentSpec] = {t: system.tier(t) for t in THREE_TIERS}
        key = "tiers"
    else:
        specs, key = dict(system.components), "components"
    doc[key] = {
        name: {**spec.model_dump(mode="json"), "cpu": None, "processes": processes(name, spec)}
        for name, spec in specs.items()
    }
    return doc


register(EmbeddedTarget())
