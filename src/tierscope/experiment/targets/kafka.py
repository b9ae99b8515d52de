"""``system.kind: kafka``: a KRaft cluster of 1–3 brokers (:mod:`tierscope.experiment.kafka`)
driven by producer and consumer workers (:mod:`tierscope.load.kafka`).

Each broker is a node of the component ``broker`` (its own cgroup with the spec's CPU quota,
cpuset and memory limit, so the monitor samples it at the spec's interval and stalls and CPU
hogs act on it); the load is the Kafka workload (messages/s per producer at each level, a fresh
topic per level); network faults act on the links producer-brokers, consumer-brokers and
broker-broker, which the brokers' separate listeners tell apart.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tierscope.errors import InputError, TierscopeError
from tierscope.experiment.artifacts import ARTIFACTS, fetch, java
from tierscope.experiment.cgroups import Hierarchy
from tierscope.experiment.jolokia import JolokiaPoller
from tierscope.experiment.kafka import MAX_BROKERS, KafkaCluster, start_kafka
from tierscope.experiment.processes import Supervisor
from tierscope.experiment.targets import Deployment, Node, register
from tierscope.experiment.targets.embedded import quota_free
from tierscope.spec.experiment import SystemSpec
from tierscope.spec.kafka import KafkaWorkload, TopicSpec, parse_kafka_workload


def kafka_parts_missing() -> InputError | None:
    """What this host lacks to run Kafka (None: nothing): the client, Java, or the jars and
    Maven to fetch them."""
    from tierscope.load.kafka import require_client

    try:
        require_client()
        java()
    except InputError as exc:
        return exc
    art = ARTIFACTS["kafka"]
    if not (art.home / "complete").is_file() and shutil.which("mvn") is None:
        return InputError(
            "system.kind",
            "kafka",
            f"Kafka {art.version}'s jars, fetched once "
            "with Maven: apt-get install maven, then `tierscope fetch kafka`",
        )
    return None


@dataclass
class KafkaDriver:
    """Producers and consumers on the running cluster, a fresh topic per level."""

    cluster: KafkaCluster
    topic: TopicSpec
    workdir: Path
    supervisor: Supervisor

    def workload(self, doc: dict[str, Any], source: str) -> KafkaWorkload:
        return parse_kafka_workload(doc, source)

    def prepare(self, workload: Any) -> dict[str, Any]:
        return {}  # each level writes a fresh topic

    def generator(self, workload: Any, *, seed: int, request_id_prefix: str) -> Any:
        from tierscope.load.kafka import KafkaLoad

        return KafkaLoad(
            workload,
            bootstrap=self.cluster.bootstrap,
            consumer_bootstrap=self.cluster.consumer_bootstrap,
            topic=self.topic,
            workdir=self.workdir,
            spawn=self.supervisor.spawn_task,
            seed=seed,
            request_id_prefix=request_id_prefix,
        )


def start_cluster(
    system: SystemSpec, workdir: Path, supervisor: Supervisor, hierarchy: Hierarchy | None
) -> KafkaCluster:
    """The spec's brokers running (jars fetched first if they are not yet)."""
    broker = (system.components or {})["broker"]
    limits = [k for k in ("cpu", "cpuset", "memory") if getattr(broker, k) is not None]
    if hierarchy is None and limits:
        raise InputError(f"system.components.broker.{limits[0]}", getattr(broker, limits[0]),
                         "a host where cgroups can be written (run as root)")  # fmt: skip
    fetch("kafka")
    kafka_dir = workdir / "kafka"
    kafka_dir.mkdir(exist_ok=True)
    return start_kafka(
        system.brokers or 1, kafka_dir, supervisor, hierarchy,
        cpu=broker.cpu, memory=broker.memory, cpuset=broker.cpuset, jolokia=_jolokia(),
    )  # fmt: skip


def _jolokia() -> bool:
    """Whether the brokers get the Jolokia agent (fetched once; without Maven, or if Maven
    Central does not serve it, the brokers run without: their cgroups are still monitored)."""
    try:
        fetch("jolokia")
    except (InputError, TierscopeError):
        return False
    return True


class KafkaTarget:
    """``system.kind: kafka`` (see the module)."""

    kind = "kafka"
    faults = frozenset({"stall", "cpu_hog", "network"})

    def check(self, system: SystemSpec) -> None:
        missing = kafka_parts_missing()
        if missing is not None:
            raise missing
        if (system.brokers or 1) > MAX_BROKERS:
            raise InputError("system.brokers", system.brokers,
                             f"1 to {MAX_BROKERS} brokers on one machine")  # fmt: skip

    def deploy(
        self, system: SystemSpec, workdir: Path, supervisor: Supervisor, hierarchy: Hierarchy | None
    ) -> Deployment:
        cluster = start_cluster(system, workdir, supervisor, hierarchy)
        quota = (system.components or {})["broker"].cpu
        pollers = [JolokiaPoller(b.jolokia_url).start() for b in cluster.brokers if b.jolokia_url]
        nodes = [
            Node("broker", b.name, b.node_id, b.cgroup, quota, pgids=[b.pid] if b.pid else [],
                 extra_metrics=poller)
            for b, poller in zip(cluster.brokers, pollers or [None] * len(cluster.brokers),
                                 strict=True)
        ]  # fmt: skip

        def stop() -> None:
            for p in pollers:
                p.close()
            cluster.stop()

        return Deployment(
            nodes,
            entry_urls=[],
            workload={},
            stop=stop,
            facts=cluster.facts,
            load_driver=KafkaDriver(cluster, system.kafka_topic, workdir, supervisor),
            links=cluster.links,
        )

    def deployed_as(self, system: SystemSpec) -> dict[str, Any]:
        return quota_free(system, lambda name, spec: 1)


register(KafkaTarget())
