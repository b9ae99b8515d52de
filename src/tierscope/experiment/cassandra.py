"""Apache Cassandra nodes for experiments: a cluster of 1–3 nodes started from the jars
``tierscope fetch cassandra`` put in the cache (5.0.9), each its own JVM in its own cgroup (CPU
quota, memory limit) on its own loopback address (127.0.0.21, .22, …), so that faults and the
network emulator can single out a node and its links.

Each node gets a minimal ``cassandra.yaml`` (the one ``feasibility.md`` §2 started here) with
its data under the run's scratch folder, one token, evenly spaced over the Murmur3 ring (the
ring is balanced from the first start, and all nodes start at once without bootstrapping: the
cluster holds no data yet; every node is a seed, so none gives up for want of a peer that
is still starting), the read and write stages' threads (``concurrent_reads``,
``concurrent_writes``), and the JVM 17 flags of Cassandra's own ``jvm17-server.options`` with a
small heap. The Jolokia agent serves each node's MBeans over HTTP: a node is ready when its
native port accepts connections and its ``StorageService`` says ``NORMAL`` with every node live
(``nodetool status`` shows them ``UN``). The cluster is stopped through the run's supervisor
(SIGTERM, then SIGKILL for what is left), and nothing is left behind.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierscope.errors import InputError
from tierscope.experiment.artifacts import ARTIFACTS, java, libs
from tierscope.experiment.cgroups import Hierarchy, NodeCgroup
from tierscope.experiment.jolokia import agent_argument
from tierscope.experiment.processes import StartError, Supervisor, free_ports

__all__ = ["MAX_NODES", "CassandraCluster", "CassandraNode", "start_cassandra"]

#: The most nodes one machine here runs (each a JVM of about 1 GB).
MAX_NODES = 3
#: What a node's log says once it serves clients.
STARTED = "Startup complete"
STORAGE_SERVICE = "org.apache.cassandra.db:type=StorageService"
LOGBACK = """<configuration>
  <appender name="OUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level [%thread] %logger{0} %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="OUT"/></root>
</configuration>
"""
#: Cassandra's conf/jvm17-server.options (the module opens and exports it needs on Java 17),
#: with the G1 settings of its jvm-server.options.
JVM17 = """-Xss256k
-XX:+UseG1GC
-XX:+ParallelRefProcEnabled
-XX:MaxTenuringThreshold=1
-XX:G1HeapRegionSize=16m
-XX:MaxGCPauseMillis=300
-Djdk.attach.allowAttachSelf=true
-Djava.net.preferIPv4Stack=true
--add-exports java.base/jdk.internal.misc=ALL-UNNAMED
--add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED
--add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED
--add-exports java.rmi/sun.rmi.server=ALL-UNNAMED
--add-exports java.sql/java.sql=ALL-UNNAMED
--add-exports java.base/java.lang.ref=ALL-UNNAMED
--add-exports jdk.unsupported/sun.misc=ALL-UNNAMED
--add-exports jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED
--add-exports jdk.attach/sun.tools.attach=ALL-UNNAMED
--add-opens java.base/java.lang.module=ALL-UNNAMED
--add-opens java.base/jdk.internal.loader=ALL-UNNAMED
--add-opens java.base/jdk.internal.ref=ALL-UNNAMED
--add-opens java.base/jdk.internal.reflect=ALL-UNNAMED
--add-opens java.base/jdk.internal.math=ALL-UNNAMED
--add-opens java.base/jdk.internal.module=ALL-UNNAMED
--add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED
--add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED
--add-opens java.base/sun.nio.ch=ALL-UNNAMED
--add-opens java.base/java.io=ALL-UNNAMED
--add-opens java.base/java.lang.reflect=ALL-UNNAMED
--add-opens jdk.compiler/com.sun.tools.javac=ALL-UNNAMED
--add-opens java.base/java.lang=ALL-UNNAMED
--add-opens java.base/java.util=ALL-UNNAMED
-Dio.netty.tryReflectionSetAccessible=true
-Dio.netty.allocator.useCacheForAllThreads=true
-Dio.netty.allocator.maxOrder=11
-Dcassandra-foreground=yes
-Dcassandra.skip_wait_for_gossip_to_settle=0
-Dcassandra.ring_delay_ms=100
"""


@dataclass
class CassandraNode:
    """One node: its index, address, ports, token, folder, cgroup and process."""

    index: int
    host: str
    storage_port: int
    native_port: int
    jolokia_port: int
    directory: Path
    token: int
    cgroup: NodeCgroup | None = None
    pid: int | None = None

    @property
    def name(self) -> str:
        return f"node-{self.index}"

    @property
    def jolokia_url(self) -> str:
        return f"http://{self.host}:{self.jolokia_port}/jolokia/"

    @property
    def contact(self) -> tuple[str, int]:
        """Where clients connect (the native protocol)."""
        return self.host, self.native_port


@dataclass
class CassandraCluster:
    """A running cluster: its nodes and how to reach them."""

    nodes: list[CassandraNode]
    supervisor: Supervisor
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def contact_points(self) -> list[tuple[str, int]]:
        return [n.contact for n in self.nodes]

    def status(self, node: CassandraNode) -> dict[str, Any]:
        """``node``'s StorageService: its operation mode and the nodes it sees live and
        unreachable (the columns of ``nodetool status``); OSError/ValueError if it does not
        answer."""
        return jolokia_read(node.jolokia_url, STORAGE_SERVICE,
                            ["OperationMode", "LiveNodes", "UnreachableNodes"])  # fmt: skip

    def stop(self) -> None:
        """SIGTERM to every node (Cassandra drains on it), then SIGKILL what is left."""
        self.supervisor.stop_all(timeout_s=20.0)


def jolokia_read(url: str, mbean: str, attributes: list[str]) -> dict[str, Any]:
    """The ``attributes`` of ``mbean`` read through a Jolokia agent."""
    body = json.dumps({"type": "read", "mbean": mbean, "attribute": attributes}).encode()
    req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=2.0) as resp:  # loopback only
        answer = json.loads(resp.read())
    if not isinstance(answer, dict) or answer.get("status") != 200:
        raise ValueError(f"Jolokia answered {str(answer)[:200]}")
    value = answer.get("value")
    if not isinstance(value, dict):
        raise ValueError(f"Jolokia answered {str(value)[:200]}")
    return value


def tokens(n: int) -> list[int]:
    """``n`` tokens evenly spaced over the Murmur3 ring [-2^63, 2^63)."""
    return [-(2**63) + i * (2**64 // n) for i in range(n)]


def _yaml(node: CassandraNode, seeds: list[CassandraNode], *, concurrent_reads: int,
          concurrent_writes: int) -> str:  # fmt: skip
    d = node.directory / "data"
    lines = {
        "cluster_name": "tierscope",
        "num_tokens": 1,
        "initial_token": node.token,
        "auto_bootstrap": "false",
        "partitioner": "org.apache.cassandra.dht.Murmur3Partitioner",
        "data_file_directories": f"[{d / 'data'}]",
        "commitlog_directory": d / "commitlog",
        "saved_caches_directory": d / "saved_caches",
        "hints_directory": d / "hints",
        "cdc_raw_directory": d / "cdc_raw",
        "commitlog_sync": "periodic",
        "commitlog_sync_period": "10000ms",
        "commitlog_segment_size": "32MiB",
        "listen_address": node.host,
        "rpc_address": node.host,
        "storage_port": node.storage_port,
        "native_transport_port": node.native_port,
        "start_native_transport": "true",
        "endpoint_snitch": "SimpleSnitch",
        "concurrent_reads": concurrent_reads,
        "concurrent_writes": concurrent_writes,
        "disk_access_mode": "mmap_index_only",
        "compaction_throughput": "0MiB/s",
    }
    text = "".join(f"{k}: {v}\n" for k, v in lines.items())
    return text + (
        "seed_provider:\n"
        "  - class_name: org.apache.cassandra.locator.SimpleSeedProvider\n"
        "    parameters:\n"
        f'      - seeds: "{",".join(f"{s.host}:{s.storage_port}" for s in seeds)}"\n'
    )


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _started(log: Path) -> bool:
    try:
        return STARTED in log.read_text(errors="replace")
    except OSError:
        return False


def _wait_ready(cluster: CassandraCluster, procs: list[Any], timeout_s: float) -> str | None:
    """None once every node serves and sees all of them live; else why not."""
    deadline = time.monotonic() + timeout_s
    n = len(cluster.nodes)
    why = "not started"
    while time.monotonic() < deadline:
        for node, proc in zip(cluster.nodes, procs, strict=True):
            if proc.poll() is not None:
                return f"{node.name} exited with status {proc.returncode}"
        why = ""
        for node in cluster.nodes:
            log = cluster.supervisor.workdir / f"{node.name}.log"
            if not _started(log) or not _listening(*node.contact):
                why = f"{node.name} not serving clients yet"
                break
            try:
                st = cluster.status(node)
            except (OSError, ValueError) as exc:
                why = f"{node.name}'s status unreadable ({exc})"
                break
            live = st.get("LiveNodes") or []
            if st.get("OperationMode") != "NORMAL" or len(live) < n:
                why = f"{node.name} is {st.get('OperationMode')} and sees {len(live)} of {n} live"
                break
        if not why:
            return None
        time.sleep(0.5)
    return why


def start_cassandra(
    count: int,
    workdir: Path,
    supervisor: Supervisor,
    hierarchy: Hierarchy | None,
    *,
    cpu: float | None = None,
    memory: int | None = None,
    cpuset: str | None = None,
    heap_mb: int = 512,
    concurrent_reads: int = 32,
    concurrent_writes: int = 32,
    timeout_s: float = 240.0,
) -> CassandraCluster:
    """``count`` nodes running, each seeing all of them live (each in its cgroup when
    ``hierarchy`` is given, with ``memory`` bytes, and ``cpu`` cores once they serve)."""
    if not 1 <= count <= MAX_NODES:
        raise InputError("system.nodes", count, f"1 to {MAX_NODES}")
    jars = libs("cassandra")
    java_bin = java()
    jamm = sorted(jars.glob("jamm-*.jar"))
    (workdir / "logback.xml").write_text(LOGBACK)
    (workdir / "jvm17.args").write_text(JVM17)
    nodes = []
    for i, token in enumerate(tokens(count), start=1):
        host = f"127.0.0.{20 + i}"
        d = workdir / f"node-{i}"
        (d / "data").mkdir(parents=True)
        storage, native, agent = free_ports(host, 3)
        nodes.append(CassandraNode(i, host, storage, native, agent, d, token))
    cluster = CassandraCluster(nodes, supervisor)
    procs = []
    for node in nodes:
        conf = node.directory / "cassandra.yaml"
        conf.write_text(_yaml(node, nodes, concurrent_reads=concurrent_reads,
                              concurrent_writes=concurrent_writes))  # fmt: skip
        node.cgroup = supervisor.server_cgroup(hierarchy, node.name, memory=memory,
                                               cpuset=cpuset)  # fmt: skip
        argv = [java_bin, f"-Xms{heap_mb}m", f"-Xmx{heap_mb}m", f"@{workdir / 'jvm17.args'}",
                *[f"-javaagent:{j}" for j in jamm[:1]],
                agent_argument(node.host, node.jolokia_port),
                f"-Dcassandra.config=file://{conf}",
                f"-Dlogback.configurationFile={workdir / 'logback.xml'}",
                f"-Dcassandra.storagedir={node.directory / 'data'}",
                f"-Dcassandra.logdir={node.directory}",
                "-cp", f"{jars}/*", "org.apache.cassandra.service.CassandraDaemon"]  # fmt: skip
        proc = supervisor.spawn(node.name, argv, node=node.cgroup)
        node.pid = proc.pid
        procs.append(proc)
    why = _wait_ready(cluster, procs, timeout_s)
    if why is not None:
        cluster.stop()
        logs = ", ".join(str(supervisor.workdir / f"{n.name}.log") for n in nodes)
        raise StartError(f"Cassandra did not start in {timeout_s:.0f} s ({why}); logs: {logs}")
    for node in nodes:  # capped once started: a JVM's start takes tens of core-seconds
        if node.cgroup is not None:
            node.cgroup.set_cpu(cpu)
    cluster.facts = {"cassandra": ARTIFACTS["cassandra"].version, "nodes": count,
                     "heap_mb": heap_mb, "concurrent_reads": concurrent_reads,
                     "concurrent_writes": concurrent_writes,
                     "contact_points": [f"{h}:{p}" for h, p in cluster.contact_points]}  # fmt: skip
    return cluster
