"""Kafka producers: tierscope's tracked producer against Kafka's own ProducerPerformance.

What is compared, and why:

* Rate and CPU per message against ``org.apache.kafka.tools.ProducerPerformance`` (Kafka
  4.3.1's, the tool Kafka's own docs benchmark with) on the same broker (one broker, uncapped,
  a 3-partition topic each run), the same settings (acks=1, linger 5 ms, batches of 64 KiB,
  100-byte messages, no compression) and as fast as each can (ProducerPerformance
  ``--throughput -1``; tierscope's schedule with every message due at once). ``N`` messages a
  run, the tools alternating, ``ROUNDS`` rounds in this one process run; the ratio of each
  round is paired and the medians are compared with the target. ProducerPerformance's rate is
  what it prints (its own clock, JVM start excluded); tierscope's is the messages over the span
  from the first send to the last delivery report. CPU is each tool's whole cost: the JVM's
  (``RUSAGE_CHILDREN`` around it, start-up included — hence N large) against tierscope's worker
  process (``RUSAGE_CHILDREN``) plus this process's own reading and joining of the records
  (``RUSAGE_SELF``), every message tracked (send, delivery, partition, offset, append time).
* The client verdict on a saturating run: the broker capped at half a core, producers offered
  more than it can take; the summary must not call the client the bottleneck.

Target (issue 18): ≥ 1× ProducerPerformance's rate at ≤ its CPU per message. Results are
appended to ``benchmarks/results/<date>-<hostname>.jsonl``.
"""

from __future__ import annotations

import re
import resource
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from benchmarks.harness import load_average
from tierscope.spec.experiment import parse_experiment

pytestmark = pytest.mark.timeout(1800)
Recorder = Callable[[str, Mapping[str, Any]], Path]

RATE_VS_PRODUCER_PERFORMANCE = 1.0
CPU_VS_PRODUCER_PERFORMANCE = 1.0
N = 500_000
ROUNDS = 3
SIZE = 100


def _spec(cpu: float | None = None, rate: float = 1e9) -> Any:
    broker = {"cpu": cpu} if cpu else {}
    return parse_experiment(
        {
            "system": {
                "kind": "kafka",
                "brokers": 1,
                "components": {"broker": broker},
                "topic": {"partitions": 3},
            },
            "workload": {
                "producers": 1,
                "consumers": 0,
                "message_size": SIZE,
                "producer": {
                    "acks": 1,
                    "linger_ms": 5,
                    "batch_bytes": 65536,
                    "batch_messages": 10000,
                },
            },
            "sweep": {"levels": [rate]},
        }
    )


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    pytest.importorskip("confluent_kafka", reason="pip install 'tierscope[kafka]'")
    from tierscope.experiment.artifacts import fetch
    from tierscope.experiment.runner import deployed_system

    fetch("kafka")
    with deployed_system(_spec().system, source="bench") as (dep, _):
        yield dep


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _ours(dep: Any) -> tuple[float, float]:
    """Messages/s and CPU seconds per message of tierscope's producer."""
    spec = _spec()
    load = dep.driver.generator(
        dep.driver.workload(spec.workload, "bench"), seed=1, request_id_prefix="bench/"
    )
    c0, s0 = _children_cpu(), _self_cpu()
    handle = load.start_count(N, 1e9)
    result = handle.wait()
    cpu = _children_cpu() - c0 + _self_cpu() - s0
    req = result.requests
    assert req.height == N and (req["status"] == "ok").all(), result.summary["errors_by_class"]
    span = float(req["end"].max() - req["actual_start"].min())
    return N / span, cpu / N


def _producer_performance(dep: Any) -> tuple[float, float]:
    cluster = dep.driver.cluster
    from tierscope.load.kafka import Admin

    admin = Admin(cluster.bootstrap)
    topic = admin.create(f"bench-pp-{time.monotonic_ns()}", _spec().system.kafka_topic)
    c0 = _children_cpu()
    text = cluster.tool(
        f"pp-{topic.name}",
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic",
        topic.name,
        "--num-records",
        str(N),
        "--record-size",
        str(SIZE),
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={cluster.bootstrap}",
        "acks=1",
        "linger.ms=5",
        "batch.size=65536",
        "compression.type=none",
        timeout_s=600,
    )
    cpu = _children_cpu() - c0
    admin.delete(topic.name)
    m = re.search(r"(\d+) records sent, ([\d.]+) records/sec", text)
    assert m and int(m.group(1)) == N, text[-500:]
    return float(m.group(2)), cpu / N


def test_rate_and_cpu_per_message_against_producer_performance(
    cluster: Any, record: Recorder
) -> None:
    rounds = []
    for _ in range(ROUNDS):
        theirs = _producer_performance(cluster)
        ours = _ours(cluster)
        rounds.append(
            {
                "ours_rate": ours[0],
                "ours_cpu_us": ours[1] * 1e6,
                "pp_rate": theirs[0],
                "pp_cpu_us": theirs[1] * 1e6,
                "rate_ratio": ours[0] / theirs[0],
                "cpu_ratio": ours[1] / theirs[1],
            }
        )
        print(
            f"round: tierscope {ours[0]:,.0f} msg/s at {ours[1] * 1e6:.2f} µs CPU/msg; "
            f"ProducerPerformance {theirs[0]:,.0f} msg/s at {theirs[1] * 1e6:.2f} µs"
        )
    rate = statistics.median(r["rate_ratio"] for r in rounds)
    cpu = statistics.median(r["cpu_ratio"] for r in rounds)
    print(
        f"median rate ratio {rate:.2f} (target >= {RATE_VS_PRODUCER_PERFORMANCE}), "
        f"CPU per message ratio {cpu:.2f} (target <= {CPU_VS_PRODUCER_PERFORMANCE}); "
        f"load average {load_average()}"
    )
    record(
        "kafka_producer_vs_producer_performance",
        {
            "n": N,
            "size": SIZE,
            "rounds": rounds,
            "rate_ratio": rate,
            "cpu_ratio": cpu,
            "rate_met": rate >= RATE_VS_PRODUCER_PERFORMANCE,
            "cpu_met": cpu <= CPU_VS_PRODUCER_PERFORMANCE,
        },
    )


def test_the_client_is_not_the_bottleneck_of_a_saturated_broker(record: Recorder) -> None:
    pytest.importorskip("confluent_kafka", reason="pip install 'tierscope[kafka]'")
    from tierscope.experiment.runner import deployed_system

    spec = _spec(cpu=0.25)
    with deployed_system(spec.system, source="bench") as (dep, _):
        workload = dep.driver.workload(spec.workload, "bench")
        handle = dep.driver.generator(workload, seed=1, request_id_prefix="sat/").start(
            200_000, 2.0, 10.0, 0.0
        )
        while not handle.done:
            handle.snapshot()
            time.sleep(0.25)
        s = handle.wait().summary
    print(
        f"offered 200,000 msg/s to a broker at 0.25 core: delivered {s['throughput']:,.0f}/s, "
        f"client CPU {s['client_cpu']}, busiest producer thread {s['client_cpu_max_thread']}, "
        f"client bottleneck {s['client_bottleneck']} ({'; '.join(s['client_bottleneck_why'])})"
    )
    record(
        "kafka_client_verdict_saturated_broker",
        {
            k: s[k]
            for k in (
                "throughput",
                "client_cpu",
                "client_cpu_max_thread",
                "client_bottleneck",
                "client_bottleneck_why",
            )
        },
    )
    assert not s["client_bottleneck"], s["client_bottleneck_why"]
