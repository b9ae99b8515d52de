"""A broker's own metrics (JMX) through the Jolokia JVM agent, JSON over HTTP on loopback.

Each broker JVM starts with ``-javaagent:jolokia-agent-jvm-…-javaagent.jar=host=…,port=…``
(:func:`agent_argument`); :class:`JolokiaPoller` reads a fixed set of MBeans in one bulk request
every second on a thread of its own, and hands the monitor the new values once (the monitor
asks at every 50 ms tick: between polls it gets nothing, so the metrics table has one row per
metric and second). Counters become rates over the poll interval; Yammer histograms (the
request times) become the mean over the interval from their running mean and count
(Δ(mean·count)/Δcount), not the since-start mean they report.

Metrics (per broker): ``produce_rate``, ``fetch_rate`` (requests/s), ``messages_in_s``,
``bytes_in_s``; ``produce_total_ms``, ``produce_queue_ms``, ``produce_local_ms``,
``produce_remote_ms``, ``produce_response_queue_ms``, ``produce_send_ms`` and the same for
``fetch_`` (consumer fetches); ``request_queue`` (requests waiting for a handler thread),
``handler_idle`` and ``network_idle`` (fractions), ``under_replicated`` (partitions),
``flush_rate`` and ``flush_ms`` (log flushes).
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.request
from typing import Any

from tierscope.experiment.artifacts import fetched, libs

__all__ = ["JolokiaPoller", "agent_argument", "available"]

POLL_S = 1.0
_REQ = "kafka.network:type=RequestMetrics,name={name},request={request}"
TIMES = {
    "total_ms": "TotalTimeMs",
    "queue_ms": "RequestQueueTimeMs",
    "local_ms": "LocalTimeMs",
    "remote_ms": "RemoteTimeMs",
    "response_queue_ms": "ResponseQueueTimeMs",
    "send_ms": "ResponseSendTimeMs",
}
REQUESTS = {"produce": "Produce", "fetch": "FetchConsumer"}


def available() -> bool:
    """Whether the agent's jar is in the cache (``tierscope fetch jolokia``)."""
    return fetched("jolokia")


def agent_argument(host: str, port: int) -> str:
    """The JVM option that serves the JVM's MBeans on ``host:port``."""
    jar = next(iter(sorted(libs("jolokia").glob("jolokia-agent-jvm-*-javaagent.jar"))))
    return f"-javaagent:{jar}=host={host},port={port},discoveryEnabled=false"


def _reads() -> list[tuple[str, dict[str, Any]]]:
    """(key, Jolokia read request) of every value polled."""
    out: list[tuple[str, dict[str, Any]]] = []
    for short, request in REQUESTS.items():
        out.append((f"{short}_rate", {"mbean": _REQ.format(name="RequestsPerSec", request=request)
                                      + ",*", "attribute": "Count"}))  # fmt: skip
        for key, name in TIMES.items():
            mbean = _REQ.format(name=name, request=request)
            out.append((f"{short}_{key}", {"mbean": mbean, "attribute": ["Mean", "Count"]}))
    topic = "kafka.server:type=BrokerTopicMetrics,name={}"
    out += [
        ("messages_in_s", {"mbean": topic.format("MessagesInPerSec"), "attribute": "Count"}),
        ("bytes_in_s", {"mbean": topic.format("BytesInPerSec"), "attribute": "Count"}),
        ("request_queue", {"mbean": "kafka.network:type=RequestChannel,name=RequestQueueSize",
                           "attribute": "Value"}),
        ("handler_idle", {"mbean": "kafka.server:type=KafkaRequestHandlerPool,"
                          "name=RequestHandlerAvgIdlePercent", "attribute": "Count"}),
        ("network_idle", {"mbean": "kafka.network:type=SocketServer,"
                          "name=NetworkProcessorAvgIdlePercent", "attribute": "Value"}),
        ("under_replicated", {"mbean": "kafka.server:type=ReplicaManager,"
                              "name=UnderReplicatedPartitions", "attribute": "Value"}),
        ("flush", {"mbean": "kafka.log:type=LogFlushStats,name=LogFlushRateAndTimeMs",
                   "attribute": ["Mean", "Count"]}),
    ]  # fmt: skip
    return [(k, {"type": "read", **r}) for k, r in out]


class JolokiaPoller:
    """Polls one broker's agent every second (see the module); call it for the new values."""

    def __init__(self, url: str, *, interval_s: float = POLL_S) -> None:
        self.url, self.interval_s = url, interval_s
        self.reads = _reads()
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
        body = json.dumps([r for _, r in self.reads]).encode()
        req = urllib.request.Request(self.url, body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=2.0) as resp:  # loopback only
            answers = json.loads(resp.read())
        out = {}
        for (key, _), a in zip(self.reads, answers, strict=False):
            if isinstance(a, dict) and a.get("status") == 200:
                out[key] = a.get("value")
        return out

    def values(self, raw: dict[str, Any], now: float) -> dict[str, float]:
        """The metrics of one poll: gauges as they are, counters and histograms over the
        interval since the previous poll."""
        out: dict[str, float] = {}
        for key in ("request_queue", "network_idle", "under_replicated"):
            with contextlib.suppress(TypeError, ValueError):
                out[key] = float(raw[key])
        if self.prev is None:
            return out
        t0, before = self.prev
        dt = now - t0
        if dt <= 0:
            return out
        for key in ("produce_rate", "fetch_rate", "messages_in_s", "bytes_in_s"):
            a, b = _count(before.get(key)), _count(raw.get(key))
            if a is not None and b is not None:
                out[key] = max(0.0, b - a) / dt
        a, b = _count(before.get("handler_idle")), _count(raw.get("handler_idle"))
        if a is not None and b is not None:  # idle nanoseconds (per thread) marked per second
            out["handler_idle"] = min(1.0, max(0.0, (b - a) / (dt * 1e9)))
        for key in [f"{s}_{t}" for s in REQUESTS for t in TIMES] + ["flush"]:
            mean = _interval_mean(before.get(key), raw.get(key))
            if mean is not None:
                out["flush_ms" if key == "flush" else key] = mean
        flush = (_count((before.get("flush") or {}).get("Count")),
                 _count((raw.get("flush") or {}).get("Count")))  # fmt: skip
        if None not in flush:
            out["flush_rate"] = max(0.0, flush[1] - flush[0]) / dt  # type: ignore[operator]
        return out


def _count(value: Any) -> float | None:
    """A counter: a number, or the sum over the MBeans a pattern matched."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, dict):
        parts = [_count(v.get("Count") if isinstance(v, dict) else v) for v in value.values()]
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
