"""``system.kind: cassandra``: a cluster of 1–3 Cassandra nodes
(:mod:`tierscope.experiment.cassandra`) driven by YCSB clients (:mod:`tierscope.load.cassandra`).

Each node is a replica of the component ``node`` (its own cgroup with the spec's CPU quota,
cpuset and memory limit, so the monitor samples it at the spec's interval and stalls and CPU
hogs act on it; its thread pools, coordinator latencies, dropped messages, compaction and GC
polled over JMX every second; with ``system.tracing`` its share of traced requests, stage by
stage, as its request records: :mod:`tierscope.experiment.cassandra_traces`). Before the
first level the driver creates the keyspace with the spec's replication factor and YCSB's
table and loads the records (once: setups that share the deployment and the records share the
data); every level then runs the workload's operations on the same data.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierscope.errors import InputError
from tierscope.experiment.artifacts import ARTIFACTS, fetch, java
from tierscope.experiment.cassandra import MAX_NODES, CassandraCluster, start_cassandra
from tierscope.experiment.cassandra_traces import TraceCollector
from tierscope.experiment.cgroups import Hierarchy
from tierscope.experiment.jolokia import CASSANDRA, JolokiaPoller
from tierscope.experiment.processes import Supervisor
from tierscope.experiment.targets import Deployment, Node, register
from tierscope.experiment.targets.embedded import quota_free
from tierscope.spec.cassandra import CassandraWorkload, parse_cassandra_workload
from tierscope.spec.experiment import SystemSpec


def cassandra_parts_missing() -> InputError | None:
    """What this host lacks to run Cassandra (None: nothing): the driver, Java, or the jars
    and Maven to fetch them."""
    from tierscope.load.cassandra import require_driver

    try:
        require_driver()
        java()
    except InputError as exc:
        return exc
    for name in ("cassandra", "jolokia"):
        art = ARTIFACTS[name]
        if not (art.home / "complete").is_file() and shutil.which("mvn") is None:
            return InputError(
                "system.kind", "cassandra", f"{name} {art.version}'s jars, fetched once with "
                f"Maven: apt-get install maven, then `tierscope fetch {name}`",
            )  # fmt: skip
    return None


@dataclass
class CassandraDriver:
    """YCSB clients on the running cluster; :meth:`prepare` loads a workload's records."""

    cluster: CassandraCluster
    replication: int
    workdir: Path
    supervisor: Supervisor
    seed: int = 1
    loaded: tuple[int, int, int] | None = None  # records, fields, field length
    warmed: set[tuple[Any, ...]] = field(default_factory=set)  # operations, their levels

    def workload(self, doc: dict[str, Any], source: str) -> CassandraWorkload:
        return parse_cassandra_workload(doc, source)

    def generator(self, workload: Any, *, seed: int, request_id_prefix: str) -> Any:
        from tierscope.load.cassandra import CassandraLoad

        return CassandraLoad(
            workload,
            self.cluster.contact_points,
            [n.host for n in self.cluster.nodes],
            self.workdir,
            self.supervisor.spawn_task,
            seed=seed,
            request_id_prefix=request_id_prefix,
        )

    def prepare(self, workload: Any) -> dict[str, Any]:
        """The keyspace and table created and ``workload``'s records loaded, unless the same
        records are loaded already (setups that differ in their operations share them); then
        the warm-up of its operations, unless the same operations at the same consistency
        levels warmed the nodes already."""
        from tierscope.load.cassandra import load_records, prepare, warm_up

        y = workload.ycsb
        shape = (y.records, y.field_count, y.field_length)
        facts: dict[str, Any] = {}
        if self.loaded != shape:
            prepare(self.cluster.contact_points, replication=self.replication,
                    fields=y.field_count)  # fmt: skip
            seconds = load_records(self.generator(workload, seed=self.seed, request_id_prefix=""))
            self.loaded = shape
            self.warmed.clear()
            facts |= {"records": y.records, "field_count": y.field_count,
                      "field_length": y.field_length, "replication": self.replication,
                      "load_s": round(seconds, 1)}  # fmt: skip
        ops = (tuple(sorted(y.mix)), tuple(workload.consistency_of(op) for op in sorted(y.mix)))
        if workload.warmup > 0 and ops not in self.warmed:
            load = self.generator(workload, seed=self.seed, request_id_prefix="warmup/")
            facts |= warm_up(load, workload.warmup)
            self.warmed.add(ops)
        return facts


class CassandraTarget:
    """``system.kind: cassandra`` (see the module)."""

    kind = "cassandra"
    faults = frozenset({"stall", "cpu_hog"})

    def check(self, system: SystemSpec) -> None:
        missing = cassandra_parts_missing()
        if missing is not None:
            raise missing
        if (system.nodes or 1) > MAX_NODES:
            raise InputError("system.nodes", system.nodes, f"1 to {MAX_NODES} nodes on one machine")

    def deploy(
        self, system: SystemSpec, workdir: Path, supervisor: Supervisor, hierarchy: Hierarchy | None
    ) -> Deployment:
        node = (system.components or {})["node"]
        limits = [k for k in ("cpu", "cpuset", "memory") if getattr(node, k) is not None]
        if hierarchy is None and limits:
            raise InputError(f"system.components.node.{limits[0]}", getattr(node, limits[0]),
                             "a host where cgroups can be written (run as root)")  # fmt: skip
        fetch("cassandra")
        fetch("jolokia")
        home = workdir / "cassandra"
        home.mkdir(exist_ok=True)
        # uncapped until the first level (the runner sets the quotas): loading the records and
        # the warm-up run at the host's speed
        cluster = start_cassandra(system.nodes or 1, home, supervisor, hierarchy,
                                  memory=node.memory, cpuset=node.cpuset)  # fmt: skip
        pollers = [JolokiaPoller(n.jolokia_url, CASSANDRA).start() for n in cluster.nodes]
        traces = None
        if system.tracing:
            try:
                traces = TraceCollector(cluster, system.tracing).start()
            except (OSError, ValueError):
                for p in pollers:
                    p.close()
                cluster.stop()
                raise
        nodes = [
            Node("node", n.name, n.index, n.cgroup, None, pgids=[n.pid] if n.pid else [],
                 extra_metrics=poller,
                 request_sources=[traces.source(n.name)] if traces is not None else [])
            for n, poller in zip(cluster.nodes, pollers, strict=True)
        ]  # fmt: skip

        def stop() -> None:
            for p in pollers:
                p.close()
            if traces is not None:
                traces.close()
            cluster.stop()

        driver = CassandraDriver(cluster, system.cassandra_keyspace.replication, workdir,
                                 supervisor, seed=system.seed)  # fmt: skip
        return Deployment(nodes, entry_urls=[], workload={}, stop=stop, facts=cluster.facts,
                          load_driver=driver)  # fmt: skip

    def deployed_as(self, system: SystemSpec) -> dict[str, Any]:
        return quota_free(system, lambda name, spec: 1)


register(CassandraTarget())
