"""Real Kafka brokers (issue 18's target, first part): ``tierscope fetch kafka`` puts Kafka 4.3.1
from Maven Central in the cache; three KRaft brokers start, each its own JVM in its own cgroup
on its own loopback address; a topic is replicated to all three as asked; messages produced
with acks=all are all in its partitions (Kafka's own offsets say so); and the cluster stops
with no process or cgroup left."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.experiment._support import require
from tierscope.errors import InputError
from tierscope.experiment.artifacts import fetch
from tierscope.experiment.cgroups import CgroupUnavailableError, open_hierarchy
from tierscope.experiment.kafka import start_kafka
from tierscope.experiment.processes import Supervisor

pytestmark = [pytest.mark.real_system, pytest.mark.timing, pytest.mark.timeout(600)]

MESSAGES = 3000


def test_three_brokers_replicate_a_topic_and_leave_nothing_behind(tmp_path: Path) -> None:
    if shutil.which("java") is None or shutil.which("mvn") is None:
        require("Java 17 and Maven", "apt-get install openjdk-17-jre-headless maven")
    fetch("kafka")
    try:
        hierarchy = open_hierarchy(f"kafka-test-{os.getpid()}")
    except CgroupUnavailableError as exc:
        require("writable cgroups", f"run as root on Linux: {exc}")
        raise
    supervisor = Supervisor(tmp_path)
    pids: list[int] = []
    try:
        cluster = start_kafka(3, tmp_path, supervisor, hierarchy, cpu=0.5, memory=640 << 20)
        assert [b.host for b in cluster.brokers] == ["127.0.0.11", "127.0.0.12", "127.0.0.13"]
        for b in cluster.brokers:
            assert b.cgroup is not None and b.pid in b.cgroup.pids()
        pids = [b.pid for b in cluster.brokers if b.pid]

        with pytest.raises(InputError, match="replication"):
            cluster.create_topic("bad", partitions=1, replication=4)
        cluster.create_topic("events", partitions=6, replication=3, min_insync=2)
        parts = cluster.describe_topic("events")
        assert sorted(p["partition"] for p in parts) == list(range(6))
        for p in parts:
            assert sorted(p["replicas"]) == [1, 2, 3] and p["leader"] in (1, 2, 3)
        assert {p["leader"] for p in parts} == {1, 2, 3}  # leaders spread over the brokers

        cluster.tool("produce", "org.apache.kafka.tools.ProducerPerformance",
                     "--topic", "events", "--num-records", str(MESSAGES), "--record-size", "100",
                     "--throughput", "-1", "--command-property",
                     f"bootstrap.servers={cluster.bootstrap}", "acks=all")  # fmt: skip
        offsets = cluster.end_offsets("events")
        assert sorted(offsets) == list(range(6))
        assert sum(offsets.values()) == MESSAGES
    finally:
        supervisor.stop_all(timeout_s=20.0)
        hierarchy.remove()
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}"), f"broker {pid} still running"
    assert not any(p.exists() for p in hierarchy.roots.values())
