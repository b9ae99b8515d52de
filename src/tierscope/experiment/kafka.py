"""Apache Kafka brokers for experiments: a KRaft cluster of 1–3 brokers started from the jars
``tierscope fetch kafka`` put in the cache, each its own JVM in its own cgroup (CPU quota,
memory limit) on its own loopback address (127.0.0.11, .12, …), so that faults and the network
emulator can single out a broker and its links.

Every broker is both broker and controller (``process.roles=broker,controller``; the controller
quorum is all of them), with its data under the run's scratch folder, formatted with one cluster
id before the first start. A broker is ready when its listener accepts connections and its log
says it started; the cluster is stopped through the run's supervisor (SIGTERM: a controlled
shutdown; SIGKILL for what is left), and nothing is left behind. Topics are created with
Kafka's own tool (partitions, replication factor, ``min.insync.replicas``).
"""

from __future__ import annotations

import base64
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tierscope.errors import InputError
from tierscope.experiment.artifacts import ARTIFACTS, java, libs
from tierscope.experiment.cgroups import Hierarchy, NodeCgroup
from tierscope.experiment.jolokia import agent_argument
from tierscope.experiment.netem import LinkFault
from tierscope.experiment.processes import StartError, Supervisor, free_ports

__all__ = ["Broker", "KafkaCluster", "start_kafka"]

#: The most brokers one machine here runs (each a JVM of a few hundred MB).
MAX_BROKERS = 3
#: Segment size of connections opened on an emulated link: an Ethernet path's (see LinkFault).
ETHERNET_MSS = 1460
LOG4J = """status = error
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.quiet.name = org.apache.kafka.clients
logger.quiet.level = WARN
"""
#: what a broker's log says once it serves
STARTED = "Kafka Server started"
TOPICS = "org.apache.kafka.tools.TopicCommand"


@dataclass
class Broker:
    """One broker: its id, address, ports, cgroup and log.

    Each kind of peer reaches it on a listener of its own — producers and tools on ``port``,
    consumers on ``consumer_port``, the other brokers on ``replication_port`` and
    ``controller_port`` — so that a link (producer-brokers, …) is told apart by its ports alone
    (clients on loopback all send from 127.0.0.1)."""

    node_id: int
    host: str
    port: int
    controller_port: int
    directory: Path
    consumer_port: int = 0
    replication_port: int = 0
    jolokia_port: int = 0
    cgroup: NodeCgroup | None = None
    pid: int | None = None

    @property
    def jolokia_url(self) -> str | None:
        """Where the broker's Jolokia agent serves its MBeans (None: no agent)."""
        return f"http://{self.host}:{self.jolokia_port}/jolokia/" if self.jolokia_port else None

    @property
    def name(self) -> str:
        return f"broker-{self.node_id}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass
class KafkaCluster:
    """A running cluster: its brokers and how to reach and drive it."""

    brokers: list[Broker]
    supervisor: Supervisor
    libs: Path
    cluster_id: str
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers)

    @property
    def consumer_bootstrap(self) -> str:
        return ",".join(f"{b.host}:{b.consumer_port}" for b in self.brokers)

    def links(self, link: str) -> list[LinkFault]:
        """The packet flows of ``link`` (producer-brokers, consumer-brokers, broker-broker),
        both directions, without delay or loss yet (:func:`dataclasses.replace` adds them);
        connections opened while they are emulated carry Ethernet-sized segments."""
        ports = {
            "producer-brokers": lambda b: [b.port],
            "consumer-brokers": lambda b: [b.consumer_port],
            "broker-broker": lambda b: [b.replication_port, b.controller_port],
        }[link]
        out = []
        for b in self.brokers:
            for port in ports(b):
                out.append(LinkFault(None, b.host, protocol="tcp", dport=port, mss=ETHERNET_MSS))
                out.append(LinkFault(b.host, None, protocol="tcp", sport=port, mss=ETHERNET_MSS))
        return out

    def tool(self, name: str, main: str, *args: str, timeout_s: float = 120.0) -> str:
        """Run one of Kafka's command-line tools (``main`` class) against the cluster; its
        output (StartError with it if the tool fails)."""
        self.supervisor.run_once(name, _tool_argv(self.libs, main, *args), timeout_s=timeout_s)
        return (self.supervisor.workdir / f"{name}.log").read_text(errors="replace")

    def create_topic(
        self, topic: str, *, partitions: int = 1, replication: int = 1, min_insync: int = 1
    ) -> None:
        """Create ``topic`` with Kafka's TopicCommand (it returns once the controller has it)."""
        if not 1 <= replication <= len(self.brokers):
            raise InputError("system.topic.replication", replication,
                             f"1 to the {len(self.brokers)} brokers")  # fmt: skip
        if not 1 <= min_insync <= replication:
            raise InputError("system.topic.min_insync", min_insync, f"1 to {replication}")
        if partitions < 1:
            raise InputError("system.topic.partitions", partitions, "at least 1")
        self.tool(f"topic-{topic}", TOPICS,
                  "--bootstrap-server", self.bootstrap, "--create", "--topic", topic,
                  "--partitions", str(partitions), "--replication-factor", str(replication),
                  "--config", f"min.insync.replicas={min_insync}")  # fmt: skip

    def describe_topic(self, topic: str) -> list[dict[str, Any]]:
        """Each partition's leader, replicas and in-sync replicas, as Kafka describes them."""
        text = self.tool(f"describe-{topic}", TOPICS, "--bootstrap-server", self.bootstrap,
                         "--describe", "--topic", topic)  # fmt: skip
        out = []
        for line in text.splitlines():
            fields = dict(part.split(": ", 1) for part in line.strip().split("\t") if ": " in part)
            if "Partition" in fields and "Leader" in fields:
                out.append(
                    {
                        "partition": int(fields["Partition"]),
                        "leader": int(fields["Leader"]),
                        "replicas": [int(r) for r in fields["Replicas"].split(",") if r],
                        "isr": [int(r) for r in fields["Isr"].split(",") if r],
                    }
                )
        return out

    def end_offsets(self, topic: str) -> dict[int, int]:
        """The log-end offset of each partition of ``topic`` (messages appended to it)."""
        text = self.tool(f"offsets-{topic}", "org.apache.kafka.tools.GetOffsetShell",
                         "--bootstrap-server", self.bootstrap, "--topic", topic)  # fmt: skip
        out = {}
        for line in text.splitlines():
            parts = line.strip().split(":")
            if len(parts) == 3 and parts[0] == topic and parts[1].isdigit():
                out[int(parts[1])] = int(parts[2])
        return out

    def stop(self) -> None:
        """Controlled shutdown of every broker (SIGTERM), then SIGKILL what is left."""
        self.supervisor.stop_all(timeout_s=20.0)


def _tool_argv(jars: Path, main: str, *args: str) -> list[str]:
    """A short-lived Kafka tool JVM: small heap, quick start, errors only in its log."""
    quiet = f"-Dlog4j2.configurationFile={jars.parent / 'log4j2-tools.properties'}"
    return [java(), "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", quiet,
            "-cp", f"{jars}/*", main, *args]  # fmt: skip


def _cluster_id() -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding, not starting
    with "-" (a command line would take it for an option; Kafka's own Uuid avoids it too)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not text.startswith("-"):
            return text


def _properties(b: Broker, voters: str) -> str:
    clients = (f"PLAINTEXT://{b.address},CONSUMERS://{b.host}:{b.consumer_port},"
               f"REPLICATION://{b.host}:{b.replication_port}")  # fmt: skip
    lines = {
        "process.roles": "broker,controller",
        "node.id": b.node_id,
        "controller.quorum.voters": voters,
        "listeners": f"{clients},CONTROLLER://{b.host}:{b.controller_port}",
        "advertised.listeners": clients,
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "REPLICATION",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,"
        "CONSUMERS:PLAINTEXT,REPLICATION:PLAINTEXT",
        "log.dirs": b.directory / "data",
        "num.partitions": 1,
        "offsets.topic.replication.factor": 1,
        "transaction.state.log.replication.factor": 1,
        "transaction.state.log.min.isr": 1,
        "share.coordinator.state.topic.replication.factor": 1,
        "share.coordinator.state.topic.min.isr": 1,
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "false",
    }
    return "".join(f"{k}={v}\n" for k, v in lines.items())


def _ready(b: Broker, log: Path, proc: Any, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            started = STARTED in log.read_text(errors="replace")
        except OSError:
            started = False
        if started:
            try:
                with socket.create_connection((b.host, b.port), timeout=1.0):
                    return True
            except OSError:
                pass
        time.sleep(0.2)
    return False


def start_kafka(
    brokers: int,
    workdir: Path,
    supervisor: Supervisor,
    hierarchy: Hierarchy | None,
    *,
    cpu: float | None = None,
    memory: int | None = None,
    cpuset: str | None = None,
    heap_mb: int = 256,
    timeout_s: float = 90.0,
    jolokia: bool = False,
) -> KafkaCluster:
    """``brokers`` brokers running and ready (each in its cgroup when ``hierarchy`` is given,
    with ``cpu`` cores and ``memory`` bytes; with ``jolokia``, each with the Jolokia agent
    serving its MBeans on its own address)."""
    if not 1 <= brokers <= MAX_BROKERS:
        raise InputError("system.brokers", brokers, f"1 to {MAX_BROKERS}")
    jars = libs("kafka")
    java_bin = java()
    if not (jars.parent / "log4j2-tools.properties").is_file():
        (jars.parent / "log4j2-tools.properties").write_text("status = error\n")
    (workdir / "log4j2.properties").write_text(LOG4J)
    nodes = []
    for i in range(1, brokers + 1):
        host = f"127.0.0.{10 + i}"
        d = workdir / f"broker-{i}"
        d.mkdir(parents=True)
        port, controller, consumer, replication, agent = free_ports(host, 5)
        nodes.append(Broker(i, host, port, controller, d, consumer, replication,
                            agent if jolokia else 0))  # fmt: skip
    voters = ",".join(f"{b.node_id}@{b.host}:{b.controller_port}" for b in nodes)
    cluster = KafkaCluster(nodes, supervisor, jars, _cluster_id())
    heap = f"-Xms{heap_mb}m -Xmx{heap_mb}m".split()
    procs = []
    for b in nodes:
        (b.directory / "server.properties").write_text(_properties(b, voters))
        supervisor.run_once(f"{b.name}-format", _tool_argv(
            jars, "kafka.tools.StorageTool", "format", "-t", cluster.cluster_id,
            "-c", str(b.directory / "server.properties")))  # fmt: skip
        b.cgroup = supervisor.server_cgroup(hierarchy, b.name, cpu=cpu, memory=memory,
                                            cpuset=cpuset)  # fmt: skip
        agent = [agent_argument(b.host, b.jolokia_port)] if b.jolokia_port else []
        argv = [java_bin, *heap, *agent, "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
                f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}", "-cp",
                f"{jars}/*", "kafka.Kafka", str(b.directory / "server.properties")]  # fmt: skip
        proc = supervisor.spawn(b.name, argv, node=b.cgroup)
        b.pid = proc.pid
        procs.append(proc)
    for b, proc in zip(nodes, procs, strict=True):
        log = supervisor.workdir / f"{b.name}.log"
        if not _ready(b, log, proc, timeout_s):
            cluster.stop()
            raise StartError(f"Kafka {b.name} did not start in {timeout_s:.0f} s; its log: {log}")
    cluster.facts = {"kafka": ARTIFACTS["kafka"].version, "brokers": brokers,
                     "heap_mb": heap_mb, "bootstrap": cluster.bootstrap,
                     "jolokia": ARTIFACTS["jolokia"].version if jolokia else None}  # fmt: skip
    return cluster
