"""One Kafka producer or consumer of a load run, in a process of its own
(``python -I -m tierscope.load.kafka_worker CONFIG.json``), on librdkafka (confluent-kafka).

A **producer** offers its messages on an open schedule fixed before it starts (Poisson or
evenly spaced arrivals at the rate of the level, ramped like the HTTP load), each keyed by
its unique id (producer index, sequence number), and records per message the intended and
the actual send time and then the delivery report: when it came, its error, partition and
offset, and the broker's append time (the topic keeps ``LogAppendTime``). A producer that
falls behind its schedule sends at once and keeps the intended times, so latencies count
the wait a slow system imposed (no coordinated omission). With ``poll_ms`` it calls
``poll(δ)`` before every message, as the thesis's producer did.

A producer given a **control file** (``control`` in its configuration) is reconfigured while it
runs: whenever the file holds a newer ``version``, a new librdkafka producer with the file's
``conf`` takes over the schedule (librdkafka cannot change a live producer's settings) and the
old one drains in the background until every message it holds has its delivery report; the
poll interval ``poll_s`` changes at once. The switch (version, first sequence number, time) is
recorded. Twice a second the producer also records librdkafka's own counters (requests, bytes
and messages sent; statistics.interval.ms), from which the bytes on the wire per payload byte
come.

A **consumer** reads its share of the partitions from the beginning until it is told to stop
(SIGTERM) and records each message's id, the time it was consumed, its partition and offset.

Records go to binary files of fixed-size rows (the dtypes below), appended every quarter of a
second, so that whatever happens the parent keeps what was measured up to then. Times are
``CLOCK_MONOTONIC`` seconds, the same clock as the runner's.
"""

from __future__ import annotations

import json
import struct
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from tierscope.load._records import FLUSH_EVERY_S, Appender, run_worker, schedule, stop_flag

SEND = np.dtype([("seq", "<i8"), ("intended", "<f8"), ("sent", "<f8")])
REPORT = np.dtype(
    [("seq", "<i8"), ("delivered", "<f8"), ("error", "<i4"), ("partition", "<i4"),
     ("offset", "<i8"), ("append", "<f8")]
)  # fmt: skip
CONSUMED = np.dtype(
    [("producer", "<i4"), ("seq", "<i8"), ("consumed", "<f8"), ("partition", "<i4"),
     ("offset", "<i8")]
)  # fmt: skip
#: librdkafka's counters (statistics callback): requests, bytes, messages and message bytes
#: sent since the producer of that configuration ``version`` started
STATS = np.dtype(
    [("t", "<f8"), ("version", "<i4"), ("tx", "<i8"), ("tx_bytes", "<i8"), ("txmsgs", "<i8"),
     ("txmsg_bytes", "<i8")]
)  # fmt: skip
#: a live reconfiguration: from message ``seq`` on, configuration ``version`` sends
SWITCH = np.dtype([("version", "<i4"), ("seq", "<i8"), ("t", "<f8")])
KEY = struct.Struct("<iq")  # producer index, sequence number
STATS_MS = 500


class _Control:
    """The control file of a reconfigurable producer: the newest document it holds."""

    def __init__(self, path: str | None) -> None:
        self.path = None if path is None else Path(path)
        self.version, self._seen = 0, (0, -1)

    def newer(self) -> dict[str, Any] | None:
        """The file's document when it holds a version newer than the last one returned."""
        if self.path is None:
            return None
        try:
            st = self.path.stat()
        except OSError:
            return None
        if (st.st_mtime_ns, st.st_size) == self._seen:
            return None
        self._seen = (st.st_mtime_ns, st.st_size)
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError):  # replaced meanwhile: read again on the next change
            return None
        if not isinstance(doc, dict) or int(doc.get("version", 0)) <= self.version:
            return None
        self.version = int(doc["version"])
        return doc


def produce(cfg: dict[str, Any]) -> None:
    from confluent_kafka import KafkaException, Producer

    out = Path(cfg["out"])
    index, topic = int(cfg["index"]), cfg["topic"]
    wall_minus_mono = time.time() - time.monotonic()
    reports: list[tuple[int, float, int, int, int, float]] = []
    stats: list[tuple[float, int, int, int, int, int]] = []
    switches: list[tuple[int, int, float]] = []

    clock, unpack, keep, nan = time.monotonic, KEY.unpack, reports.append, float("nan")

    def delivered(err: Any, msg: Any) -> None:
        now = clock()
        kind, ms = msg.timestamp()
        offset = msg.offset()  # -1001 (or None) when the broker does not say (acks=0)
        partition = msg.partition()  # None when it timed out before the topic's metadata came
        keep((unpack(msg.key())[1], now, 0 if err is None else err.code(),
              -1 if partition is None else partition, -1 if offset is None else offset,
              ms / 1000.0 - wall_minus_mono if kind == 2 else nan))  # 2: LogAppendTime  # fmt: skip

    def new_producer(conf: dict[str, Any], version: int) -> Any:
        def counters(text: str) -> None:
            d = json.loads(text)
            stats.append((clock(), version, d.get("tx", 0), d.get("tx_bytes", 0),
                          d.get("txmsgs", 0), d.get("txmsg_bytes", 0)))  # fmt: skip

        return Producer({**conf, "bootstrap.servers": cfg["bootstrap"], "on_delivery": delivered,
                         "statistics.interval.ms": stats_ms, "stats_cb": counters})  # fmt: skip

    stats_ms = int(cfg.get("stats_ms", STATS_MS))

    producer = new_producer(cfg["conf"], 0)
    timeout_s = float(cfg["conf"].get("message.timeout.ms", 30000)) / 1000.0  # the longest seen
    draining: list[Any] = []  # producers of earlier configurations with messages in flight
    control = _Control(cfg.get("control"))
    offsets = schedule(
        cfg["rate"], cfg["ramp_up"], cfg["steady"], cfg["ramp_down"],
        arrivals=cfg["arrivals"], seed=cfg["seed"], count=cfg.get("count"),
    )  # fmt: skip
    n = len(offsets)
    intended = offsets + float(cfg["t0"])
    sent_at: list[float] = []
    payload = bytes(int(cfg["message_size"]))
    poll_s = cfg.get("poll_s")
    sends = Appender(out / f"producer-{index}.sends")
    reps = Appender(out / f"producer-{index}.reports")
    counts = Appender(out / f"producer-{index}.stats")
    switch_log = Appender(out / f"producer-{index}.switches")
    flushed, next_flush = 0, time.monotonic() + FLUSH_EVERY_S
    stop = stop_flag()
    mono, pack = time.monotonic, KEY.pack

    def flush_records(upto: int) -> None:
        nonlocal flushed
        rows = np.empty(upto - flushed, SEND)
        rows["seq"] = np.arange(flushed, upto)
        rows["intended"], rows["sent"] = intended[flushed:upto], sent_at[flushed:upto]
        sends.write(rows)
        flushed = upto
        for log, dtype, items in ((reps, REPORT, reports), (counts, STATS, stats),
                                  (switch_log, SWITCH, switches)):  # fmt: skip
            taken = len(items)
            log.write(np.array(items[:taken], dtype=dtype))
            del items[:taken]

    def serve_drained() -> None:
        for old in list(draining):
            old.poll(0)
            if not len(old):
                old.flush(0)
                draining.remove(old)

    def tick(k: int, now: float) -> None:
        """Every quarter second: records out, reconfiguration in."""
        nonlocal producer, produce, poll, poll_s, next_flush, timeout_s
        flush_records(k)
        next_flush = now + FLUSH_EVERY_S
        doc = control.newer()
        if doc is None:
            return
        if "poll_s" in doc:
            poll_s = doc["poll_s"]
        if doc.get("conf") is not None:
            draining.append(producer)
            producer = new_producer(doc["conf"], control.version)
            timeout_s = max(timeout_s, float(doc["conf"].get("message.timeout.ms", 30000)) / 1000)
            produce, poll = producer.produce, producer.poll
        switches.append((control.version, k, now))

    k = 0
    due_at = intended.tolist()  # plain floats: the loop below is the producer's hot path
    produce, poll = producer.produce, producer.poll
    while k < n and not stop.set:
        if poll_s is not None:
            poll(poll_s)
        due, now = due_at[k], mono()
        while now < due and not stop.set:  # serve delivery reports while waiting
            poll(min(due - now, 0.005 if draining else 0.05))
            if draining:
                serve_drained()
            now = mono()
            if now >= next_flush:
                tick(k, now)
        try:
            produce(topic, payload, pack(index, k))
        except BufferError:  # the local queue is full: the system pushes back
            poll(0.001)
            continue
        except KafkaException as exc:  # a fatal client error: keep what was measured
            print(f"producer {index}: {exc}", file=sys.stderr)
            break
        sent_at.append(now)  # handed to the client (what a send() call is)
        k += 1
        if not k & 63:
            poll(0)
            if draining:
                serve_drained()
            if now >= next_flush:
                tick(k, now)
    # every message sent gets its delivery report (at most its timeout, or until stopped)
    deadline = mono() + timeout_s + 5.0
    while (len(producer) or draining) and mono() < deadline and not stop.set:
        producer.poll(0.02 if draining else 0.1)
        serve_drained()
        if mono() >= next_flush:
            flush_records(k)
            next_flush = mono() + FLUSH_EVERY_S
    last = mono()  # the counters once more, with every message in them
    while (
        not stop.set
        and mono() < last + 1.5 * stats_ms / 1000
        and not (stats and stats[-1][0] > last)
    ):
        producer.poll(0.05)
    flush_records(k)
    for log in (sends, reps, counts, switch_log):
        log.close()


def consume(cfg: dict[str, Any]) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    out = Path(cfg["out"])
    index = int(cfg["index"])
    consumer = Consumer(
        {
            "bootstrap.servers": cfg["bootstrap"],
            "group.id": f"tierscope-{cfg['topic']}-{index}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": int(cfg["fetch_wait_ms"]),
        }
    )
    consumer.assign([TopicPartition(cfg["topic"], p, OFFSET_BEGINNING) for p in cfg["partitions"]])
    rows = Appender(out / f"consumer-{index}.consumed")
    stop = stop_flag()
    got: list[tuple[int, int, float, int, int]] = []
    next_flush = time.monotonic() + FLUSH_EVERY_S
    unpack, mono = KEY.unpack, time.monotonic
    while not stop:
        for m in consumer.consume(num_messages=1000, timeout=0.1):
            if m.error() is None and m.key() is not None and len(m.key()) == KEY.size:
                producer, seq = unpack(m.key())
                got.append((producer, seq, mono(), m.partition(), m.offset()))
        if mono() >= next_flush:
            rows.write(np.array(got, dtype=CONSUMED))
            got.clear()
            next_flush = mono() + FLUSH_EVERY_S
    rows.write(np.array(got, dtype=CONSUMED))
    rows.close()
    consumer.close()


def main(argv: list[str]) -> int:
    return run_worker(argv, lambda cfg: (produce if cfg["role"] == "producer" else consume)(cfg))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
