"""Message loss and duplication of Kafka producer configurations under network faults: the
TRAK protocol of Wu's thesis (seed 002 §1.2), on real brokers.

For every configuration of ``sweep.grid`` (every combination of its values; producer settings
by their spec names, ``message_size``, and the producer link's packet ``loss`` probability
and one-way ``delay`` in seconds) on one running cluster:

1. a fresh topic (the spec's partitions, replication and ``min.insync.replicas``); the grid's
   values replace the spec's producer settings (idempotence goes off where the grid sets acks
   to 0 or 1 and does not set idempotence itself: librdkafka refuses the pair);
2. faults on: the grid's loss and delay on producer-brokers in both directions, as the
   thesis's netem on every container, plus the spec's own network faults for the whole phase;
3. the producers send ``messages`` messages in all at ``sweep.levels[0]`` messages/s each and
   wait for every delivery report (at most the message timeout);
4. faults off; the consumers read the topic from the beginning until nothing new arrives;
5. ids are compared: ``lost`` = sent − distinct ids read, ``duplicated`` = ids read more than
   once, ``redundant`` = reads − distinct ids; the rates are over the messages sent.

The thesis rebuilt the cluster for every test; a fresh topic per configuration keeps the
configurations apart at a fraction of the cost (a broker restart costs 5–10 s here). Rows also
say how many messages the producer was told had failed (``reported_failed``) and how many it
was told had succeeded but were never read (``acked_lost``: loss the producer never saw), and
the terms of Wu's KPI and timely throughput that ``kafka adapt`` predicts from them: the
relative payload φ (messages transmitted times their size over the bytes librdkafka sent to
the brokers, from its own counters), the normalised service rate μ (messages acknowledged ok
over messages sent), the late share η_v (acknowledged ok later than ``timeliness_ms`` after the
intended send, over those acknowledged ok; ``control.deadline_ms``, default 1 s) and the
acknowledged-but-lost share η_l.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np
from pydantic import ValidationError

from tierscope.errors import InputError
from tierscope.experiment.netem import Emulator, LinkFault
from tierscope.load.kafka import wire_counters, wire_totals
from tierscope.progress import step
from tierscope.spec.experiment import ExperimentSpec, FaultSpec
from tierscope.spec.kafka import PRODUCER_FIELDS, ControlSpec, KafkaWorkload

T = TypeVar("T")
R = TypeVar("R")

#: Messages per configuration by default (the thesis sent 10^6; CI-sized runs send fewer).
DEFAULT_MESSAGES = 10_000


def measure_each(
    items: Sequence[T], stage: str, measure: Callable[[int, T], R]
) -> tuple[list[R], dict[str, Any]]:
    """``measure(i, item)`` for every item in turn (progress under ``stage``). A failure or an
    interruption (Ctrl-C, SIGTERM) stops it and keeps what was measured: returns the results
    and ``{"partial": False}``, or ``{"partial": True, "interrupted": True}``, or
    ``{"partial": True, "failure": "..."}``."""
    out: list[R] = []
    try:
        for i, item in enumerate(items):
            step(stage, i, len(items))
            out.append(measure(i, item))
        step(stage, len(items), len(items))
    except KeyboardInterrupt:
        return out, {"partial": True, "interrupted": True}
    except Exception as exc:  # the cluster or a worker failed: what was measured stands
        return out, {"partial": True, "failure": f"{type(exc).__name__}: {exc}"}
    return out, {"partial": False}


def configurations(spec: ExperimentSpec) -> Iterator[dict[str, Any]]:
    """Every combination of ``sweep.grid``'s values, in the grid's order."""
    grid = spec.sweep.grid or {}
    keys = list(grid)
    for values in itertools.product(*(grid[k] for k in keys)):
        yield dict(zip(keys, values, strict=True))


def configured_workload(spec: ExperimentSpec, config: dict[str, Any]) -> KafkaWorkload:
    """The spec's workload with ``config``'s producer settings and message size."""
    doc = dict(spec.workload)
    producer = dict(doc.get("producer") or {})
    producer |= {k: v for k, v in config.items() if k in PRODUCER_FIELDS}
    if str(config.get("acks", "all")) not in ("all", "-1") and "idempotence" not in config:
        producer["idempotence"] = False  # idempotence needs acks=all: off where acks is not
    doc["producer"] = producer
    if "message_size" in config:
        doc["message_size"] = config["message_size"]
    try:
        return KafkaWorkload.model_validate(doc)
    except ValidationError as exc:
        shown = ", ".join(f"{k}={v}" for k, v in config.items())
        why = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise InputError("sweep.grid", shown, f"a valid producer configuration ({why})") from None


def _flows(
    spec: ExperimentSpec, config: dict[str, Any], links: Callable[[str], list[LinkFault]]
) -> list[LinkFault]:
    """The emulated flows of one configuration (empty: no fault)."""
    out = []
    for f in spec.faults:
        if f.kind == "network" and f.link is not None:
            delay = f.delay.native() if f.delay else None
            loss = f.loss.native() if f.loss else None
            if f.link == "producer-brokers" and ("loss" in config or "delay" in config):
                continue  # the grid's condition replaces the spec's on this link
            out += [replace(x, delay=delay, loss=loss) for x in links(f.link)]
    loss, delay = float(config.get("loss", 0) or 0), float(config.get("delay", 0) or 0)
    if loss > 0 or delay > 0:
        d = {"dist": "constant", "mean": delay} if delay > 0 else None
        lo = {"model": "bernoulli", "p": loss} if loss > 0 else None
        out += [replace(x, delay=d, loss=lo) for x in links("producer-brokers")]
    return out


def measure(
    spec: ExperimentSpec, *, messages: int = DEFAULT_MESSAGES, source: str = "<spec>"
) -> dict[str, Any]:
    """The reliability rows of every configuration of ``spec`` (see the module), on a cluster
    deployed for them and removed after."""
    from tierscope.experiment.runner import deployed_system

    check(spec, messages=messages, source=source)
    with deployed_system(spec.system, source=source) as (dep, run_id):
        return measure_on(dep, run_id, spec, messages=messages)


def check(spec: ExperimentSpec, *, messages: int, source: str) -> None:
    """InputError for what cannot be measured (before anything is deployed)."""
    if spec.system.kind != "kafka":
        raise InputError("system.kind", spec.system.kind, "kafka", source=source)
    if messages < 1:
        raise InputError("--messages", messages, "at least 1 message", source=source)
    for key, values in (spec.sweep.grid or {}).items():
        for v in values:
            if key in ("loss", "delay") and (
                isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < 60
            ):
                raise InputError(f"sweep.grid.{key}", v, "a number >= 0", source=source)
            if key == "loss" and v > 1:
                raise InputError("sweep.grid.loss", v, "a probability 0..1", source=source)
            if key == "partitions" and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise InputError("sweep.grid.partitions", v, "a whole number >= 1", source=source)
    for config in configurations(spec):
        configured_workload(spec, config)


def measure_on(dep: Any, run_id: str, spec: ExperimentSpec, *, messages: int) -> dict[str, Any]:
    """The reliability rows of ``spec``'s configurations on the running deployment ``dep``
    (the run ``run_id`` tags its emulator rules)."""
    configs = list(configurations(spec))
    rate = spec.sweep.level_values[0]
    deadline = (spec.control or ControlSpec()).deadline_ms / 1000.0

    def one(i: int, config: dict[str, Any]) -> dict[str, Any]:
        flows = _flows(spec, config, dep.links) if dep.links is not None else []
        load = configured_load(dep, spec, config, seed=i + 1, prefix=f"config-{i + 1}/")
        condition = producer_condition(spec, config)
        return _one(load, flows, messages, rate, run_id, condition, deadline, seed=i + 1)

    stage = f"measuring {len(configs)} configuration(s) of {messages:,} messages"
    rows, status = measure_each(configs, stage, one)
    return {"messages": messages, "rate": rate, "cluster": dep.facts, "rows": rows, **status}


def producer_condition(spec: ExperimentSpec, config: dict[str, Any]) -> tuple[float, float]:
    """(mean one-way delay in seconds, packet loss probability) of the producer link in one
    configuration: the grid's, else the spec's network fault on that link, else none."""
    if "loss" in config or "delay" in config:
        return float(config.get("delay", 0) or 0), float(config.get("loss", 0) or 0)
    for f in spec.faults:
        if f.kind == "network" and f.link == "producer-brokers":
            return fault_condition(f)
    return 0.0, 0.0


def fault_condition(fault: FaultSpec) -> tuple[float, float]:
    """(mean one-way delay in seconds, packet loss probability) a network fault gives its
    link; a Gilbert–Elliott loss by its stationary rate."""
    delay = fault.delay.mean if fault.delay else 0.0
    loss = fault.loss
    if loss is None:
        return delay, 0.0
    if loss.model == "bernoulli":
        return delay, loss.p
    p, r = loss.p, loss.r or 0.0
    bad = loss.bad_loss if loss.bad_loss is not None else 1.0
    good = loss.good_loss or 0.0
    return delay, (p * bad + r * good) / (p + r) if p + r > 0 else good


def configured_load(
    dep: Any, spec: ExperimentSpec, config: dict[str, Any], *, seed: int, prefix: str
) -> Any:
    """The deployment's load driver for one configuration: its workload, and its topic's
    partitions when the configuration sets them."""
    load = dep.driver.generator(configured_workload(spec, config), seed=seed,
                                request_id_prefix=prefix)  # fmt: skip
    if "partitions" in config:
        parts = config["partitions"]
        if isinstance(parts, bool) or not isinstance(parts, int) or parts < 1:
            raise InputError("sweep.grid.partitions", parts, "a whole number >= 1")
        load.topic_spec = load.topic_spec.model_copy(update={"partitions": parts})
    return load


def _one(
    load: Any,
    flows: list[LinkFault],
    messages: int,
    rate: float,
    tag: str,
    condition: tuple[float, float],
    deadline: float,
    *,
    seed: int,
) -> dict[str, Any]:
    workload = load.workload
    emulator = Emulator(flows, tag=tag, seed=seed) if flows else None
    stats: list[dict[str, Any]] = []
    if emulator is not None:
        emulator.start()
    try:
        handle = load.start_count(messages, rate)
        try:
            while not handle.producers_done:
                handle.snapshot()  # reads the records and samples the workers' CPU
                time.sleep(0.2)
        except BaseException:
            handle.stop()
            raise
    finally:
        if emulator is not None:
            stats = emulator.stop()
    handle.start_consumers()
    result = handle.wait()
    req = result.requests
    sent = int(req.filter(req["actual_start"].is_not_null()).height)
    copies = req["copies"].fill_null(0)
    read = int(copies.sum())
    distinct = int((copies > 0).sum())
    duplicated = int((copies > 1).sum())
    ok = req["status"] == "ok"
    latency = (req.filter(ok)["end"] - req.filter(ok)["start"]).to_numpy()
    n_ok = int(ok.sum())
    acked_lost = int((ok & (copies == 0)).sum())
    wire = wire_totals(wire_counters(handle))
    p = workload.producer
    delay, loss = condition
    row: dict[str, Any] = {
        "delay_ms": delay * 1000.0,
        "loss": loss,
        "acks": p.acks,
        "batch_messages": p.batch_messages,
        "linger_ms": p.linger_ms,
        "timeout_ms": p.timeout_ms,
        "retries": p.retries,
        "idempotence": p.idempotence,
        "poll_ms": p.poll_ms,
        "message_size": workload.message_size,
        "partitions": load.topic_spec.partitions,
        "sent": sent,
        "received": read,
        "distinct": distinct,
        "lost": sent - distinct,
        "duplicated": duplicated,
        "redundant": read - distinct,
        "loss_rate": (sent - distinct) / sent if sent else None,
        "duplicate_rate": duplicated / sent if sent else None,
        "reported_failed": int((~ok).sum()),
        "acked_lost": acked_lost,
        "timeliness_ms": deadline * 1000.0,
        "relative_payload": (
            wire["txmsgs"] * workload.message_size / wire["tx_bytes"] if wire["tx_bytes"] else None
        ),
        "service_ratio": n_ok / sent if sent else None,
        "late_rate": float((latency > deadline).mean()) if latency.size else None,
        "acked_lost_rate": acked_lost / n_ok if n_ok else None,
        "requests_sent": wire["tx"],
        "errors": result.summary.get("errors_by_class", {}),
        "latency_p50_s": float(np.median(latency)) if latency.size else None,
        "packets": sum(s["packets"] for s in stats),
        "packets_lost": sum(s["lost"] for s in stats),
    }
    if result.summary.get("failure"):
        row["failure"] = result.summary["failure"]
    return row


__all__ = [
    "DEFAULT_MESSAGES", "check", "configurations", "configured_load", "configured_workload",
    "measure", "measure_each", "measure_on",
]  # fmt: skip
