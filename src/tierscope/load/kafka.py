"""Kafka producers and consumers as a workload: the load driver of ``system.kind: kafka``.

:class:`KafkaLoad` has the load generator's shape (``start(level, ramp_up_s, steady_s,
ramp_down_s)`` returns a handle with ``done``, ``snapshot()``, ``wait()``, ``stop()`` and the
phase times), so the runner sweeps a Kafka cluster exactly as it sweeps a web stack. Each level
writes to a fresh topic (partitions, replication and ``min.insync.replicas`` from the spec,
``LogAppendTime`` so that every delivery report carries the broker's append time). The
producers and consumers are worker processes (:mod:`tierscope.load.kafka_worker`) on
librdkafka; their per-message records become one ``requests`` row per message (tier
``client``, interaction ``produce``): ``start`` is the intended send time of the open schedule,
``end`` the delivery report, ``status`` ok or librdkafka's error name, plus the actual send
time, partition, offset, broker append time, the first consume time and how many times it was
consumed (0: lost, 2 or more: duplicated).

The client verdict is the HTTP generator's rule (:func:`tierscope.load._summary.verdict`) on
the producers' own measurements: the busiest producer's main thread and the cores all workers
used. Late sends are reported (``send_lag``, ``late``) but are no verdict: a full producer
queue, the brokers pushing back, makes them as surely as a slow client does.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from tierscope.errors import InputError, TierscopeError
from tierscope.load._frames import CLIENT
from tierscope.load._workers import (
    LATE_S,
    Tail,
    Worker,
    WorkerHandle,
    client_samples,
    cpu_rows,
    quantiles,
)
from tierscope.load._workers import client_verdict as _verdict
from tierscope.load.kafka_worker import CONSUMED, REPORT, SEND, STATS, STATS_MS, SWITCH
from tierscope.spec.kafka import KafkaWorkload, TopicSpec

#: Before the first intended send: the workers import librdkafka and connect meanwhile.
START_MARGIN_S = 1.5
#: After the producers end, consumers stop once nothing new arrived for this long...
CONSUME_IDLE_S = 3.0
#: ...or at the latest after this long.
CONSUME_MAX_S = 60.0
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def require_client() -> None:
    """InputError saying how to install the Kafka client when it is missing."""
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        raise InputError(
            "system.kind", "kafka", "the Kafka client: pip install 'tierscope[kafka]' "
            "(confluent-kafka, librdkafka's Python binding)"
        ) from None  # fmt: skip


def error_name(code: int) -> str:
    """librdkafka's name of an error code, lower case (``msg_timed_out``)."""
    from confluent_kafka import KafkaError

    try:
        return str(KafkaError(code).name()).lstrip("_").lower()
    except Exception:  # an unknown code is still reported
        return f"error_{code}"


@dataclass
class Topic:
    name: str
    partitions: int
    leaders: dict[int, int]  # partition -> broker node id


class Admin:
    """Topics of a cluster through librdkafka's admin client (no JVM per topic)."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka.admin import AdminClient

        self.client = AdminClient({"bootstrap.servers": bootstrap})

    def create(self, name: str, spec: TopicSpec, *, timeout_s: float = 30.0) -> Topic:
        from confluent_kafka.admin import NewTopic

        config = {
            "min.insync.replicas": str(spec.min_insync),
            "message.timestamp.type": "LogAppendTime",
        }
        new = NewTopic(name, spec.partitions, spec.replication, config=config)
        future = self.client.create_topics([new], operation_timeout=timeout_s)[name]
        try:
            future.result(timeout_s)
        except Exception as exc:  # librdkafka's KafkaException
            raise TierscopeError(f"Kafka did not create topic {name}: {exc}") from None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:  # every partition has a leader
            meta = self.client.list_topics(name, timeout=5.0).topics.get(name)
            if meta is not None and meta.error is None and len(meta.partitions) == spec.partitions:
                leaders = {p: m.leader for p, m in meta.partitions.items()}
                if all(v >= 0 for v in leaders.values()):
                    return Topic(name, spec.partitions, leaders)
            time.sleep(0.1)
        raise TierscopeError(f"topic {name}'s partitions had no leader after {timeout_s:g} s")

    def delete(self, name: str) -> None:
        with contextlib.suppress(Exception):
            self.client.delete_topics([name], operation_timeout=10.0)[name].result(15.0)


class KafkaLoad:
    """Offers a :class:`~tierscope.spec.kafka.KafkaWorkload` to a cluster (see the module)."""

    def __init__(
        self,
        workload: KafkaWorkload,
        *,
        bootstrap: str,
        consumer_bootstrap: str,
        topic: TopicSpec,
        workdir: Path,
        spawn: Any,
        seed: int = 1,
        request_id_prefix: str = "",
    ) -> None:
        require_client()
        self.workload, self.topic_spec = workload, topic
        self.bootstrap, self.consumer_bootstrap = bootstrap, consumer_bootstrap
        self.workdir, self.spawn = workdir, spawn
        self.seed, self.prefix = seed, request_id_prefix
        self.stats_ms = STATS_MS  # how often the producers report librdkafka's counters

    def new_topic(self) -> tuple[Admin, Topic]:
        admin = Admin(self.bootstrap)
        stem = _UNSAFE.sub("_", self.prefix.strip("/"))[:120] or "load"
        return admin, admin.create(f"tierscope-{stem}-{uuid.uuid4().hex[:8]}", self.topic_spec)

    def start(
        self,
        level: float,
        ramp_up_s: float = 0.0,
        steady_s: float = 10.0,
        ramp_down_s: float = 0.0,
        *,
        setup: str = "load",
        rep: int = 0,
        control: Path | None = None,
    ) -> KafkaHandle:
        """Producers at ``level`` messages/s each (ramped), consumers reading along; with
        ``control``, a file the producers read new settings from while they run (written by
        :func:`write_control`)."""
        if not (level > 0 and math.isfinite(level)):
            raise InputError("level", level, "a rate in messages/s > 0")
        if not (steady_s > 0 and math.isfinite(steady_s)):
            raise InputError("steady_s", steady_s, "a steady window of seconds > 0")
        admin, topic = self.new_topic()
        out = self.workdir / f"kafka-{topic.name}"
        out.mkdir(parents=True)
        t0 = time.monotonic() + START_MARGIN_S
        handle = KafkaHandle(self, admin, topic, out, level=level, setup=setup, rep=rep,
                             times=(t0, t0 + ramp_up_s, t0 + ramp_up_s + steady_s,
                                    t0 + ramp_up_s + steady_s + ramp_down_s))  # fmt: skip
        phases = {"ramp_up": ramp_up_s, "steady": steady_s, "ramp_down": ramp_down_s}
        handle.launch(consumers=True, producers=phases, control=control)
        return handle

    def start_count(self, count: int, rate: float) -> KafkaHandle:
        """``count`` messages in all, spread over the producers at ``rate`` messages/s each,
        with no consumer yet (:meth:`KafkaHandle.start_consumers` reads them afterwards)."""
        if not (rate > 0 and math.isfinite(rate)):
            raise InputError("rate", rate, "a rate in messages/s > 0")
        producers = self.workload.producers
        if count < producers:
            raise InputError("messages", count, f"at least one per producer ({producers})")
        admin, topic = self.new_topic()
        out = self.workdir / f"kafka-{topic.name}"
        out.mkdir(parents=True)
        t0 = time.monotonic() + START_MARGIN_S
        end = t0 + count / producers / rate
        handle = KafkaHandle(self, admin, topic, out, level=rate, setup="reliability", rep=0,
                             times=(t0, t0, end, end))  # fmt: skip
        handle.launch(consumers=False, count=count // producers, rate=rate)
        return handle

    def worker_config(self, role: str, index: int, topic: Topic, out: Path) -> dict[str, Any]:
        w = self.workload
        cfg: dict[str, Any] = {"role": role, "index": index, "topic": topic.name, "out": str(out)}
        if role == "producer":
            cfg |= {
                "bootstrap": self.bootstrap,
                "conf": w.producer.librdkafka(),
                "arrivals": w.arrivals,
                "message_size": w.message_size,
                "seed": self.seed * 7919 + index,
                "poll_s": None if w.producer.poll_ms is None else w.producer.poll_ms / 1000.0,
                "stats_ms": self.stats_ms,
            }
        else:
            cfg |= {
                "bootstrap": self.consumer_bootstrap,
                "fetch_wait_ms": w.consumer.fetch_wait_ms,
                "partitions": list(range(index, topic.partitions, max(w.consumers, 1))),
            }
        return cfg


class KafkaHandle(WorkerHandle):
    """A running Kafka load (see :class:`KafkaLoad`): the producers offer it; it is done when
    they have ended and the consumers caught up (then they stop)."""

    def __init__(
        self,
        load: KafkaLoad,
        admin: Admin,
        topic: Topic,
        out: Path,
        *,
        level: float,
        setup: str,
        rep: int,
        times: tuple[float, float, float, float],
    ) -> None:
        super().__init__(out, level=level, setup=setup, rep=rep, times=times)
        self.load, self.admin, self.topic = load, admin, topic
        self.producers: list[Worker] = []
        self.consumers: list[Worker] = []
        self._producers_done_at: float | None = None
        self._last_progress = time.monotonic()
        self.counts["consumed"] = 0

    @property
    def workers(self) -> list[Worker]:
        return [*self.producers, *self.consumers]

    @property
    def offering(self) -> list[Worker]:
        return self.producers

    @property
    def producers_done(self) -> bool:
        return all(p.proc.poll() is not None for p in self.producers)

    # ---- workers -----------------------------------------------------------------------
    def launch(self, *, consumers: bool, producers: dict[str, Any] | None = None,
               count: int | None = None, rate: float | None = None,
               control: Path | None = None) -> None:  # fmt: skip
        """Start the consumers (when asked) and the producers: on the level's ramped
        schedule (``producers``: its phase lengths), or ``count`` messages at ``rate``."""
        w = self.load.workload
        if consumers:
            self.start_consumers()
        for i in range(w.producers):
            cfg = self.load.worker_config("producer", i, self.topic, self.out)
            if count is not None:
                cfg |= {"rate": rate, "count": count, "ramp_up": 0.0, "steady": 0.0,
                        "ramp_down": 0.0}  # fmt: skip
            else:
                cfg |= {"rate": self.level, **(producers or {})}
            cfg["t0"] = self.t0
            if control is not None:
                cfg["control"] = str(control)
            files = {"sends": SEND, "reports": REPORT, "stats": STATS, "switches": SWITCH}
            self.producers.append(self._spawn(cfg, files))

    def start_consumers(self) -> None:
        if self._producers_done_at is not None:  # reading after the producers: wait anew
            self._producers_done_at = self._last_progress = time.monotonic()
        for i in range(self.load.workload.consumers):
            cfg = self.load.worker_config("consumer", i, self.topic, self.out)
            self.consumers.append(self._spawn(cfg, {"consumed": CONSUMED}))

    def _spawn(self, cfg: dict[str, Any], files: dict[str, np.dtype]) -> Worker:
        from tierscope.experiment.processes import python_argv

        name = f"{cfg['role']}-{cfg['index']}"
        path = self.out / f"{name}.json"
        path.write_text(json.dumps(cfg))
        proc = self.load.spawn(f"kafka-{self.topic.name}-{name}",
                               python_argv("tierscope.load.kafka_worker", str(path)))  # fmt: skip
        tails = {k: Tail(self.out / f"{name}.{k}", dt) for k, dt in files.items()}
        return Worker(cfg["role"], cfg["index"], proc, tails)

    # ---- progress ----------------------------------------------------------------------
    def poll_records(self) -> None:
        """Read what the workers appended since the last call into the running counts."""
        now = time.monotonic()
        for p in self.producers:
            sends = p.tails["sends"].read()
            if sends.size:
                p.intended = np.concatenate([p.intended, sends["intended"]])
            new = p.tails["reports"].read()
            if new.size:
                self.counts["completed"] += new.size
                ok = new[new["error"] == 0]
                self.counts["errors"] += new.size - ok.size
                known = ok["seq"] < p.intended.size
                self.keep_recent(now, ok["delivered"][known] - p.intended[ok["seq"][known]])
        self.counts["sent"] = sum(p.tails["sends"].offset // SEND.itemsize for p in self.producers)
        for c in self.consumers:
            c.tails["consumed"].read()
        consumed = sum(c.tails["consumed"].offset // CONSUMED.itemsize for c in self.consumers)
        if consumed != self.counts["consumed"]:
            self.counts["consumed"] = consumed
            self._last_progress = now

    def drained(self) -> bool:
        """Whether the consumers caught up with what was delivered (or stopped progressing)."""
        now = time.monotonic()
        if self._producers_done_at is None:
            self._producers_done_at = now
        if not self.consumers:
            return True
        self.poll_records()
        delivered = self.counts["completed"] - self.counts["errors"]
        idle = now - max(self._last_progress, self._producers_done_at)
        return (
            (self.counts["consumed"] >= delivered and idle >= 0.5)
            or idle >= CONSUME_IDLE_S
            or now - self._producers_done_at >= CONSUME_MAX_S
            or any(c.proc.poll() is not None for c in self.consumers)
        )

    # ---- end ---------------------------------------------------------------------------
    def assemble(self, failure: str | None) -> KafkaResult:
        result = assemble(self, failure=failure)
        self.admin.delete(self.topic.name)
        return result


@dataclass(frozen=True)
class KafkaResult:
    """What one Kafka load measured: the summary document, one row per message, and the
    workers' CPU samples."""

    summary: dict[str, Any]
    requests: pl.DataFrame
    client_samples: pl.DataFrame

    @property
    def partial(self) -> bool:
        return bool(self.summary.get("partial"))

    def client_metrics(self) -> pl.DataFrame:
        """The workers' CPU in the store's long metrics format (tier client)."""
        return self.client_samples


MESSAGE_SCHEMA = {
    "seq": pl.Int64, "intended": pl.Float64, "sent": pl.Float64, "producer": pl.Int32,
    "delivered": pl.Float64, "error": pl.Int32, "partition": pl.Int32, "offset": pl.Int64,
    "append": pl.Float64, "consumed": pl.Float64, "copies": pl.Int64, "config": pl.Int32,
}  # fmt: skip


def _config_of(worker: Worker, seq: np.ndarray) -> np.ndarray:
    """The configuration version each message of ``seq`` was sent with (0: the first)."""
    tail = worker.tails.get("switches")
    switches = tail.all() if tail is not None else np.empty(0, SWITCH)
    if not switches.size:
        return np.zeros(seq.size, dtype=np.int32)
    switches = np.sort(switches, order="seq")
    versions = np.concatenate([[0], switches["version"]]).astype(np.int32)
    return versions[np.searchsorted(switches["seq"], seq, side="right")]


def messages_frame(handle: KafkaHandle) -> pl.DataFrame:
    """One row per message sent: ids, times, delivery, partition/offset, consumption."""
    parts = []
    consumed = np.concatenate([c.tails["consumed"].all() for c in handle.consumers]
                              or [np.empty(0, CONSUMED)])  # fmt: skip
    for p in handle.producers:
        sends, reports = p.tails["sends"].all(), p.tails["reports"].all()
        frame = pl.DataFrame(
            {"seq": sends["seq"], "intended": sends["intended"], "sent": sends["sent"],
             "config": _config_of(p, sends["seq"])}
        ).with_columns(pl.lit(p.index, pl.Int32).alias("producer"))  # fmt: skip
        rep = pl.DataFrame(
            {k: reports[k] for k in ("seq", "delivered", "error", "partition", "offset", "append")}
        ).unique("seq", keep="first")
        mine = consumed[consumed["producer"] == p.index]
        got = (
            pl.DataFrame({"seq": mine["seq"], "consumed": mine["consumed"]})
            .group_by("seq")
            .agg(pl.col("consumed").min(), pl.len().alias("copies"))
        )
        parts.append(frame.join(rep, on="seq", how="left").join(got, on="seq", how="left"))
    if not parts:
        return pl.DataFrame(schema=MESSAGE_SCHEMA)
    out = pl.concat(parts).select(pl.col(k).cast(t) for k, t in MESSAGE_SCHEMA.items())
    # read by nobody: 0 copies (lost); no consumer: unknown
    copies = pl.col("copies").fill_null(0) if handle.consumers else pl.lit(None, pl.Int64)
    return out.with_columns(copies.alias("copies"))


def wire_counters(handle: KafkaHandle) -> pl.DataFrame:
    """librdkafka's counters of every producer, one row per producer, configuration version
    and report (``stats_ms`` apart): ``t``, ``producer``, ``version`` and the cumulative ``tx``
    (requests), ``tx_bytes``, ``txmsgs`` and ``txmsg_bytes`` of that version's producer."""
    parts = []
    for p in handle.producers:
        tail = p.tails.get("stats")
        rows = tail.all() if tail is not None else np.empty(0, STATS)
        frame = pl.DataFrame({k: rows[k] for k in STATS.names})
        parts.append(frame.with_columns(pl.lit(p.index, pl.Int32).alias("producer")))
    if not parts:
        return pl.DataFrame(schema={"t": pl.Float64, "producer": pl.Int32, "version": pl.Int32,
                                    "tx": pl.Int64, "tx_bytes": pl.Int64, "txmsgs": pl.Int64,
                                    "txmsg_bytes": pl.Int64})  # fmt: skip
    return pl.concat(parts).sort("producer", "version", "t")


def wire_totals(counters: pl.DataFrame, until: float | None = None) -> dict[str, int]:
    """The counters summed over producers and versions, as they stood at ``until`` (default:
    their last report): requests, bytes and messages sent, and the messages' bytes."""
    keys = ("tx", "tx_bytes", "txmsgs", "txmsg_bytes")
    if until is not None:
        counters = counters.filter(pl.col("t") <= until)
    if not counters.height:
        return dict.fromkeys(keys, 0)
    last = counters.group_by("producer", "version").agg(pl.col(k).last() for k in keys)
    return {k: int(last[k].sum()) for k in keys}


def write_control(
    path: Path, version: int, workload: KafkaWorkload, previous: KafkaWorkload | None = None
) -> None:
    """Tell the producers reading ``path`` to switch to ``workload``'s producer settings
    (configuration ``version``, greater than the last one written); atomic. Where only the
    poll interval differs from ``previous``, the producers keep their librdkafka producer."""
    p = workload.producer
    conf = p.librdkafka()
    same = previous is not None and previous.producer.librdkafka() == conf
    doc = {"version": version, "conf": None if same else conf,
           "poll_s": None if p.poll_ms is None else p.poll_ms / 1000.0}  # fmt: skip
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def assemble(handle: KafkaHandle, *, failure: str | None) -> KafkaResult:
    msgs = messages_frame(handle)
    a, b = handle.steady_start, handle.steady_end
    if handle.stopped_at is not None:
        b = min(b, handle.stopped_at)
    prefix = handle.load.prefix
    errors = msgs["error"].unique().drop_nulls().to_list() if msgs.height else []
    names = {int(c): ("ok" if c == 0 else error_name(int(c))) for c in errors}
    status = (
        pl.when(pl.col("delivered").is_null()).then(pl.lit("not_delivered"))
        .otherwise(pl.col("error").replace_strict(names, return_dtype=pl.String, default="error"))
    )  # fmt: skip
    requests = msgs.select(
        pl.lit(CLIENT).alias("tier"),
        pl.concat_str(
            pl.lit(prefix),
            pl.col("producer").cast(pl.String),
            pl.lit("-"),
            pl.col("seq").cast(pl.String),
        ).alias("request_id"),
        pl.col("intended").alias("start"),
        pl.col("delivered").alias("end"),
        pl.lit(handle.setup).alias("setup"),
        pl.lit(float(handle.level)).alias("level"),
        pl.lit(handle.rep, pl.Int64).alias("rep"),
        pl.lit("produce").alias("interaction"),
        status.alias("status"),
        pl.col("intended").alias("intended_start"),
        pl.col("sent").alias("actual_start"),
        pl.when(pl.col("intended") < a)
        .then(pl.lit("ramp-up"))
        .when(pl.col("intended") < handle.steady_end)
        .then(pl.lit("steady"))
        .otherwise(pl.lit("ramp-down"))
        .alias("phase"),
        pl.when(status != "ok").then(status).alias("error"),
        pl.col("partition").cast(pl.Int64),
        pl.col("offset").cast(pl.Int64),
        pl.col("append").fill_nan(None).alias("appended"),
        pl.col("consumed"),
        pl.col("copies"),
        pl.col("config").cast(pl.Int64),
    )
    cpu = _cpu_rows(handle)
    summary = _summary(handle, msgs, requests, cpu, (a, b), failure)
    return KafkaResult(summary, requests,
                       client_samples(cpu, handle.setup, handle.level, handle.rep))  # fmt: skip


def _cpu_rows(handle: KafkaHandle) -> pl.DataFrame:
    """Each worker's CPU (cores) and each producer's main thread's busy share."""
    return cpu_rows([*handle.producers, *handle.consumers], ("producer",))


def _client_verdict(cpu: pl.DataFrame, a: float, b: float) -> dict[str, Any]:
    """Whether the client was the bottleneck over [a, b], from the workers' CPU rows. Late
    sends are no verdict here: a full producer queue (the brokers pushing back) makes them as
    surely as a slow client does; a busy producer thread is the client's own limit."""
    return _verdict(cpu, a, b)


def client_verdict(handle: KafkaHandle, a: float, b: float) -> dict[str, Any]:
    """The client verdict over [a, b] (monotonic seconds) of an ended load: the cores the
    workers used, the busiest producer thread, and whether the client was the bottleneck."""
    return _client_verdict(_cpu_rows(handle), a, b)


def _summary(
    handle: KafkaHandle,
    msgs: pl.DataFrame,
    requests: pl.DataFrame,
    samples: pl.DataFrame,
    window: tuple[float, float],
    failure: str | None,
) -> dict[str, Any]:
    a, b = window
    duration = max(0.0, b - a)
    steady = requests.filter((pl.col("end") >= a) & (pl.col("end") < b))
    ok = steady.filter(pl.col("status") == "ok")
    lat = (ok["end"] - ok["start"]).to_numpy()
    uncorrected = (ok["end"] - ok["actual_start"]).to_numpy()
    sent_in = requests.filter((pl.col("start") >= a) & (pl.col("start") < b))
    lag = (sent_in["actual_start"] - sent_in["start"]).drop_nulls().to_numpy()
    by_status = dict(requests.group_by("status").len().iter_rows())
    late = int((lag > LATE_S).sum())
    total = msgs.height
    delivered = int(by_status.get("ok", 0))
    doc: dict[str, Any] = {
        "mode": "open",
        "level": float(handle.level),
        "level_unit": "messages/s per producer",
        "setup": handle.setup,
        "rep": handle.rep,
        "topic": handle.topic.name,
        "steady": {"start": a, "end": b, "duration_s": duration},
        "throughput": ok.height / duration if duration > 0 else None,
        "requests": total,
        "errors": total - delivered,
        "error_rate": (total - delivered) / total if total else None,
        "errors_by_class": {k: v for k, v in by_status.items() if k != "ok"},
        "latency": quantiles(lat),
        "latency_uncorrected": quantiles(uncorrected),
        "send_lag": quantiles(lag, ("p50", "p99", "max")),
        "late": late,
        "late_threshold_s": LATE_S,
        "lag": {"p50": None, "p99": None, "max": None},
        **_client_verdict(samples, a, b),
        "partial": handle.stopped_at is not None or failure is not None,
    }
    if total and "copies" in msgs.columns and handle.consumers:
        copies = msgs["copies"]
        doc["consumed"] = {
            "messages": int(copies.sum()),
            "lost": int((copies == 0).sum()),
            "duplicated": int((copies > 1).sum()),
        }
    if failure is not None:
        doc["failure"] = failure
    return doc


__all__ = [
    "Admin", "KafkaHandle", "KafkaLoad", "KafkaResult", "client_verdict", "require_client",
    "wire_counters",
    "wire_totals", "write_control",
]  # fmt: skip
