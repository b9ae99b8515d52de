"""A server's own metrics (JMX) through the Jolokia JVM agent, JSON over HTTP on loopback.

Each server JVM starts with ``-javaagent:jolokia-agent-jvm-…-javaagent.jar=host=…,port=…``
(:func:`agent_argument`); :class:`JolokiaPoller` reads a fixed set of MBeans (:data:`KAFKA` for
a broker, :data:`CASSANDRA` for a node) in one bulk request every second on a thread of its own,
and hands the monitor the new values once (the monitor asks at every 50 ms tick: between polls
it gets nothing, so the metrics table has one row per metric and second). Each :class:`Metric`
says how its attribute becomes a value: a ``gauge`` as it is; a ``rate``, a counter's increase
per second over the poll interval (summed over the MBeans a pattern matches); an
``interval_mean``, the mean of a histogram's values recorded over the interval from its running
mean and count (Δ(mean·count)/Δcount), not the since-start mean they report; a
``total_per_count``, a total's increase over its events' (Cassandra's latency totals: its
timers' Mean is a decaying estimate).

Kafka (per broker): ``produce_rate``, ``fetch_rate`` (requests/s), ``messages_in_s``,
``bytes_in_s``; ``produce_total_ms``, ``produce_queue_ms``, ``produce_local_ms``,
``produce_remote_ms``, ``produce_response_queue_ms``, ``produce_send_ms`` and the same for
``fetch_`` (consumer fetches); ``request_queue`` (requests waiting for a handler thread),
``handler_idle`` and ``network_idle`` (fractions), ``under_replicated`` (partitions),
``flush_rate`` and ``flush_ms`` (log flushes).

Cassandra (per node): the thread pools ``read_stage``, ``mutation_stage``,
``request_response`` (the replicas' answers its coordinators took) and ``native_transport``
(``_active``, ``_pending`` tasks, ``_completed_s`` per second); the
coordinator's request latency ``read_ms``, ``write_ms`` and per consistency level
(``read_one_ms``, ``read_quorum_ms``, ``read_all_ms``, ``write_…``) with their rates (``reads_s``,
``read_one_s``, …); the reads and writes of YCSB's table the node executed itself, for its
own requests or as another coordinator's replica (``table_reads_s``, ``table_writes_s``) and
their mean time there (``table_read_ms``, ``table_write_ms``); dropped messages
(``dropped_reads_s``, ``dropped_mutations_s``); compaction (``compaction_pending``,
``compaction_bytes_s``); and ``gc_busy``, the share of time in G1's stop-the-world pauses.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any, Literal

from tierscope.experiment.artifacts import fetched, libs

__all__ = ["CASSANDRA", "KAFKA", "JolokiaPoller", "Metric", "agent_argument", "available"]

POLL_S = 1.0


@dataclass(frozen=True)
class Metric:
    """One value polled: ``attribute`` of ``mbean`` (a pattern may end in ``,*``) read as
    ``kind`` (see the module), times ``scale``; a ``rate`` may be capped at ``cap``; an
    ``interval_mean`` or a ``total_per_count`` may also give its count's rate as
    ``rate_key``."""

    key: str
    mbean: str
    attribute: str
    kind: Literal["gauge", "rate", "interval_mean", "total_per_count"]
    scale: float = 1.0
    cap: float | None = None
    rate_key: str | None = None
    #: total_per_count: the counter of the events whose total ``mbean`` counts
    count_mbean: str | None = None

    def requests(self) -> list[tuple[str, dict[str, Any]]]:
        """(raw key, Jolokia read) of what this metric reads."""
        attribute: Any = ["Mean", "Count"] if self.kind == "interval_mean" else self.attribute
        out = [(self.key, {"type": "read", "mbean": self.mbean, "attribute": attribute})]
        if self.count_mbean is not None:
            count = {"type": "read", "mbean": self.count_mbean, "attribute": "Count"}
            out.append((f"{self.key}#count", count))
        return out


def _kafka() -> tuple[Metric, ...]:
    req = "kafka.network:type=RequestMetrics,name={name},request={request}"
    times = {"total_ms": "TotalTimeMs", "queue_ms": "RequestQueueTimeMs",
             "local_ms": "LocalTimeMs", "remote_ms": "RemoteTimeMs",
             "response_queue_ms": "ResponseQueueTimeMs",
             "send_ms": "ResponseSendTimeMs"}  # fmt: skip
    out = []
    for short, request in {"produce": "Produce", "fetch": "FetchConsumer"}.items():
        out.append(Metric(f"{short}_rate", req.format(name="RequestsPerSec", request=request)
                          + ",*", "Count", "rate"))  # fmt: skip
        out += [Metric(f"{short}_{key}", req.format(name=name, request=request), "",
                       "interval_mean") for key, name in times.items()]  # fmt: skip
    topic = "kafka.server:type=BrokerTopicMetrics,name={}"
    return (
        *out,
        Metric("messages_in_s", topic.format("MessagesInPerSec"), "Count", "rate"),
        Metric("bytes_in_s", topic.format("BytesInPerSec"), "Count", "rate"),
        Metric("request_queue", "kafka.network:type=RequestChannel,name=RequestQueueSize",
               "Value", "gauge"),
        # idle nanoseconds (per thread) marked per second
        Metric("handler_idle", "kafka.server:type=KafkaRequestHandlerPool,"
               "name=RequestHandlerAvgIdlePercent", "Count", "rate", scale=1e-9, cap=1.0),
        Metric("network_idle", "kafka.network:type=SocketServer,"
               "name=NetworkProcessorAvgIdlePercent", "Value", "gauge"),
        Metric("under_replicated", "kafka.server:type=ReplicaManager,"
               "name=UnderReplicatedPartitions", "Value", "gauge"),
        Metric("flush_ms", "kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs", "",
               "interval_mean", rate_key="flush_rate"),
    )  # fmt: skip


def _cassandra() -> tuple[Metric, ...]:
    m = "org.apache.cassandra.metrics:"
    out = []
    for short, path, scope in (
        ("read_stage", "request", "ReadStage"),
        ("mutation_stage", "request", "MutationStage"),
        ("request_response", "request", "RequestResponseStage"),
        ("native_transport", "transport", "Native-Transport-Requests"),
    ):
        pool = f"{m}type=ThreadPools,path={path},scope={scope},name="
        out += [
            Metric(f"{short}_active", pool + "ActiveTasks", "Value", "gauge"),
            Metric(f"{short}_pending", pool + "PendingTasks", "Value", "gauge"),
            Metric(f"{short}_completed_s", pool + "CompletedTasks", "Value", "rate"),
        ]
    # coordinator latency, overall and per level: its total (microseconds) over its count (a
    # Latency timer's Mean is a decaying estimate, not a running mean)
    for op in ("Read", "Write"):
        low = op.lower()
        scopes = [(op, f"{low}_ms", f"{low}s_s")] + [
            (f"{op}-{cl}", f"{low}_{cl.lower()}_ms", f"{low}_{cl.lower()}_s")
            for cl in ("ONE", "QUORUM", "ALL")
        ]
        for scope, key, rate in scopes:
            req = f"{m}type=ClientRequest,scope={scope},name="
            out.append(Metric(key, req + "TotalLatency", "Count", "total_per_count", scale=1e-3,
                              rate_key=rate, count_mbean=req + "Latency"))  # fmt: skip
    # the reads and writes of YCSB's table a node executed itself (for its own requests or as
    # a replica of another coordinator's), and their mean latency there
    table = f"{m}type=Table,keyspace=ycsb,scope=usertable,name="
    for op in ("Read", "Write"):
        low = op.lower()
        out.append(Metric(f"table_{low}_ms", table + f"{op}TotalLatency", "Count",
                          "total_per_count", scale=1e-3, rate_key=f"table_{low}s_s",
                          count_mbean=table + f"{op}Latency"))  # fmt: skip
    return (
        *out,
        Metric("dropped_reads_s", f"{m}type=DroppedMessage,scope=READ,name=Dropped", "Count",
               "rate"),
        Metric("dropped_mutations_s", f"{m}type=DroppedMessage,scope=MUTATION,name=Dropped",
               "Count", "rate"),
        Metric("compaction_pending", f"{m}type=Compaction,name=PendingTasks", "Value", "gauge"),
        Metric("compaction_bytes_s", f"{m}type=Compaction,name=BytesCompacted", "Count", "rate"),
        # milliseconds of stop-the-world pauses per second (G1's young and full collections)
        Metric("gc_busy", "java.lang:type=GarbageCollector,name=G1 *Generation",
               "CollectionTime", "rate", scale=1e-3),
    )  # fmt: skip


#: What a Kafka broker's and a Cassandra node's pollers read (see the module).
KAFKA = _kafka()
CASSANDRA = _cassandra()


def available() -> bool:
    """Whether the agent's jar is in the cache (``tierscope fetch jolokia``)."""
    return fetched("jolokia")


def agent_argument(host: str, port: int) -> str:
    """The JVM option that serves the JVM's MBeans on ``host:port``."""
    jar = next(iter(sorted(libs("jolokia").glob("jolokia-agent-jvm-*-javaagent.jar"))))
    return f"-javaagent:{jar}=host={host},port={port},discoveryEnabled=false"


class JolokiaPoller:
    """Polls one server's agent every second (see the module); call it for the new values."""

    def __init__(self, url: str, metrics: tuple[Metric, ...] = KAFKA, *,
                 interval_s: float = POLL_S) -> None:  # fmt: skip
        self.url, self.metrics, self.interval_s = url, metrics, interval_s
        self.prev: tuple[float, dict[str, Any]] | None = None
        self.fresh: dict[str, float] = {}
        self.errors = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="jolokia", daemon=True)

    def start(self) -> JolokiaPoller:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def __call__(self) -> dict[str, float]:
        with self._lock:
            out, self.fresh = self.fresh, {}
        return out

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                raw = self.poll()
            except (OSError, ValueError):
                self.errors += 1
                continue
            now = time.monotonic()
            values = self.values(raw, now)
            self.prev = (now, raw)
            with self._lock:
                self.fresh = values

    def poll(self) -> dict[str, Any]:
        """The raw values of one bulk read (key -> value; failed reads left out)."""
        reads = [r for m in self.metrics for r in m.requests()]
        body = json.dumps([r for _, r in reads]).encode()
        req = urllib.request.Request(self.url, body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=2.0) as resp:  # loopback only
            answers = json.loads(resp.read())
        out = {}
        for (key, _), a in zip(reads, answers, strict=False):
            if isinstance(a, dict) and a.get("status") == 200:
                out[key] = a.get("value")
        return out

    def values(self, raw: dict[str, Any], now: float) -> dict[str, float]:
        """The metrics of one poll: gauges as they are, counters and histograms over the
        interval since the previous poll."""
        out: dict[str, float] = {}
        for m in self.metrics:
            if m.kind == "gauge":
                with contextlib.suppress(KeyError, TypeError, ValueError):
                    out[m.key] = float(raw[m.key]) * m.scale
        if self.prev is None:
            return out
        t0, before = self.prev
        dt = now - t0
        if dt <= 0:
            return out
        for m in self.metrics:
            if m.kind == "rate":
                a, b = _count(before.get(m.key), m.attribute), _count(raw.get(m.key), m.attribute)
                if a is not None and b is not None:
                    rate = max(0.0, b - a) / dt * m.scale
                    out[m.key] = min(rate, m.cap) if m.cap is not None else rate
            elif m.kind == "interval_mean":
                mean = _interval_mean(before.get(m.key), raw.get(m.key))
                if mean is not None:
                    out[m.key] = mean * m.scale
                if m.rate_key is not None:
                    a = _count((before.get(m.key) or {}).get("Count"))
                    b = _count((raw.get(m.key) or {}).get("Count"))
                    if a is not None and b is not None:
                        out[m.rate_key] = max(0.0, b - a) / dt
            elif m.kind == "total_per_count":
                total = (_count(before.get(m.key)), _count(raw.get(m.key)))
                count = (_count(before.get(f"{m.key}#count")), _count(raw.get(f"{m.key}#count")))
                if None in total or None in count:
                    continue
                (s0, s1), (n0, n1) = total, count
                if n1 > n0:  # type: ignore[operator]
                    out[m.key] = (s1 - s0) / (n1 - n0) * m.scale  # type: ignore[operator]
                if m.rate_key is not None:
                    out[m.rate_key] = max(0.0, n1 - n0) / dt  # type: ignore[operator]
        return out


def _count(value: Any, attribute: str = "Count") -> float | None:
    """A counter: a number, or the sum over the MBeans a pattern matched (each a mapping of
    ``attribute`` to its value)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, dict):
        parts = [_count(v.get(attribute) if isinstance(v, dict) else v) for v in value.values()]
        nums = [p for p in parts if p is not None]
        return sum(nums) if nums else None
    return None


def _interval_mean(before: Any, now: Any) -> float | None:
    """The mean of a histogram's values recorded between two reads of {Mean, Count}."""
    if not (isinstance(before, dict) and isinstance(now, dict)):
        return None
    try:
        n0, n1 = float(before["Count"]), float(now["Count"])
        s0, s1 = float(before["Mean"]) * n0, float(now["Mean"]) * n1
    except (KeyError, TypeError, ValueError):
        return None
    return (s1 - s0) / (n1 - n0) if n1 > n0 else None
