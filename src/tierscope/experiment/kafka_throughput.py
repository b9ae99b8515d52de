"""A Kafka producer's throughput at full load over ``sweep.grid`` (batch sizes, partitions,
message sizes, …), and Wu's throughput model (eq. 4.1) calibrated on it and checked on the
configurations it was not calibrated on (seed 002 §2.3).

For every configuration, on one running cluster and a fresh topic: the producers offer
``--messages`` messages as fast as they can (an open schedule far beyond any broker, so the
producer's queue stays full and its batches fill), with librdkafka's counters reported every
200 ms. Between the first report with a message sent and the report where the last one was,
the row has the messages/s, the requests/s (the thesis's packets), the mean request size S_r
in bytes, the mean send interval G = 1/requests-per-s per producer, the messages per request,
and the client verdict (a producer thread at its limit means the client, not Kafka, set the
pace).

The model: S_r = h_p + P (h_b + S_m B) by least squares over the rows (P the leader partitions
on the broker, B the batch size), f_p(S_r) the line through the (S_r, G) pairs, and messages/s =
B P / f_p(S_r) per broker (:func:`tierscope.domains.kafka.fit_throughput`). Each row is
predicted by the model calibrated on the others (leave one configuration out); the document
gives each error and their median and maximum.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import polars as pl

from tierscope.domains.kafka import fit_throughput
from tierscope.errors import InputError
from tierscope.experiment.reliability import configurations, configured_load, measure_each
from tierscope.load.kafka import client_verdict, wire_counters
from tierscope.spec.experiment import ExperimentSpec

#: messages/s per producer offered: beyond what any configuration here reaches
FULL_RATE = 10_000_000.0
DEFAULT_MESSAGES = 200_000
STATS_MS = 200


def check(spec: ExperimentSpec, *, messages: int, source: str) -> None:
    from tierscope.experiment.reliability import check as check_grid

    check_grid(spec, messages=messages, source=source)
    brokers = spec.system.brokers or 1
    if brokers != 1:
        why = "1 (the model here is per broker: every leader on it)"
        raise InputError("system.brokers", brokers, why, source=source)
    for key in ("loss", "delay"):
        if key in (spec.sweep.grid or {}):
            raise InputError(f"sweep.grid.{key}", spec.sweep.grid[key],  # type: ignore[index]
                             "no network fault: throughput is calibrated on a clean link",
                             source=source)  # fmt: skip


def measure(spec: ExperimentSpec, *, messages: int = DEFAULT_MESSAGES, source: str = "<spec>"
            ) -> dict[str, Any]:  # fmt: skip
    """The rows of every configuration and the model checked on them (see the module)."""
    from tierscope.experiment.runner import deployed_system

    check(spec, messages=messages, source=source)
    with deployed_system(spec.system, source=source) as (dep, _):
        rows, status = measure_on(dep, spec, messages=messages)
    return {"messages": messages, "rows": rows, **calibrate(rows), **status}


def measure_on(
    dep: Any, spec: ExperimentSpec, *, messages: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows of the spec's configurations on the running deployment ``dep``, and whether
    that is all of them (:func:`~tierscope.experiment.reliability.measure_each`)."""
    configs = list(configurations(spec))

    def one(i: int, config: dict[str, Any]) -> dict[str, Any]:
        load = configured_load(dep, spec, config, seed=i + 1, prefix=f"speed-{i + 1}/")
        load.stats_ms = STATS_MS
        return _one(load, messages)

    return measure_each(configs, f"measuring {len(configs)} configuration(s) at full load", one)


def _one(load: Any, messages: int) -> dict[str, Any]:
    handle = load.start_count(messages, FULL_RATE)
    try:
        while not handle.producers_done:
            handle.snapshot()
            time.sleep(0.2)
    except BaseException:
        handle.stop()
        raise
    result = handle.wait()
    w, p = load.workload, load.workload.producer
    row: dict[str, Any] = {
        "batch_messages": p.batch_messages, "partitions": load.topic_spec.partitions,
        "message_size": w.message_size, "linger_ms": p.linger_ms, "acks": p.acks,
        "producers": w.producers, "messages": messages,
    }  # fmt: skip
    counters = wire_counters(handle)
    steady = _steady(counters)
    if steady is None:
        return row | {"failure": result.summary.get("failure") or "no message was sent"}
    (a, b), d = steady
    seconds = b - a
    row |= {
        "seconds": seconds,
        "messages_per_s": d["txmsgs"] / seconds,
        "requests_per_s": d["tx"] / seconds,
        "packet_bytes": d["tx_bytes"] / d["tx"],
        "send_interval_ms": 1000.0 * seconds * w.producers / d["tx"],
        "messages_per_request": d["txmsgs"] / d["tx"],
        "errors": result.summary.get("errors"),
        **client_verdict(handle, a, b),
    }
    return row


def _steady(counters: pl.DataFrame) -> tuple[tuple[float, float], dict[str, float]] | None:
    """The window from the first report with a message sent to the report where the last one
    was (per producer, summed), and the counters' increase over it."""
    keys = ("tx", "tx_bytes", "txmsgs")
    starts, ends, delta = [], [], dict.fromkeys(keys, 0.0)
    for _, rows in counters.group_by("producer", "version"):
        rows = rows.sort("t")
        sending = rows.filter(pl.col("txmsgs") > 0)
        if sending.height < 2:
            continue
        final = int(sending["txmsgs"].max())  # type: ignore[arg-type]
        first = sending.row(0, named=True)
        last = sending.filter(pl.col("txmsgs") == final).row(0, named=True)
        if last["t"] <= first["t"]:
            continue
        starts.append(first["t"])
        ends.append(last["t"])
        for k in keys:
            delta[k] += last[k] - first[k]
    if not starts or delta["tx"] <= 0:
        return None
    return (float(np.median(starts)), float(np.median(ends))), delta


def packing_of(rows: list[dict[str, Any]]) -> str:
    """How the producer packed its batches, from the messages it sent per request: about B·P
    (one request per broker, the Java client's way) or about B (one per partition,
    librdkafka's)."""
    by_broker = np.median(
        [
            abs(np.log(r["messages_per_request"] / (r["batch_messages"] * r["partitions"])))
            for r in rows
        ]
    )
    by_partition = np.median([abs(np.log(r["messages_per_request"] / r["batch_messages"]))
                              for r in rows])  # fmt: skip
    return "broker" if by_broker < by_partition else "partition"


def calibrate(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The model fitted to every row, and each row predicted by the model fitted to the
    others: ``predicted_messages_per_s`` and ``error`` (relative) added to the rows."""
    good = [r for r in rows if "messages_per_s" in r]
    if len(good) < 3:
        return {"model": None, "held_out": None}

    packing = packing_of(good)

    def fit(sub: list[dict[str, Any]]) -> Any:
        return fit_throughput([r["batch_messages"] for r in sub], [r["partitions"] for r in sub],
                              [r["packet_bytes"] for r in sub],
                              [r["send_interval_ms"] / 1000.0 for r in sub], packing)  # fmt: skip

    errors = []
    for i, r in enumerate(good):
        others = good[:i] + good[i + 1 :]
        try:
            model = fit(others)
        except InputError:  # the others do not determine the model
            continue
        got = model.predict(r["batch_messages"], [r["partitions"]])
        predicted = got.messages_per_s * r["producers"]
        r["predicted_messages_per_s"] = predicted
        r["predicted_packet_bytes"] = float(got.packet_bytes[0])
        r["error"] = predicted / r["messages_per_s"] - 1.0
        errors.append(abs(r["error"]))
    held = None
    if errors:
        held = {"configurations": len(errors), "median_error": float(np.median(errors)),
                "max_error": float(np.max(errors)),
                "within_10pct": int(sum(e <= 0.10 for e in errors))}  # fmt: skip
    return {"model": fit(good).to_dict(), "held_out": held}


__all__ = ["DEFAULT_MESSAGES", "calibrate", "check", "measure", "measure_on"]
