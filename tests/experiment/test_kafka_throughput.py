"""Wu's throughput model calibrated on full-load rows without brokers: the steady window of
librdkafka's counters, each configuration predicted by the model fitted to the others
(planted rows obeying eq. 4.1 come back exactly; a row off the law shows its error), and the
checks made before anything is deployed."""

from __future__ import annotations

import itertools
from typing import Any

import polars as pl
import pytest
import yaml

from tierscope.domains.kafka import fit_throughput
from tierscope.errors import InputError
from tierscope.experiment.kafka_throughput import _steady, calibrate, check
from tierscope.spec.experiment import ExperimentSpec

H_P, H_B, S_M = 70.0, 61.0, 120.0  # request header, batch header, message with framing
G0, G1 = 80e-6, 4e-9  # send interval: 80 µs + 4 ns a byte


def _row(b: int, p: int, per_request: int | None = None) -> dict[str, Any]:
    """A configuration obeying eq. 4.1 with ``per_request`` batches a request (default P: the
    Java client's packing)."""
    k = p if per_request is None else per_request
    size = H_P + k * (H_B + S_M * b)
    g = G0 + G1 * size
    return {"batch_messages": b, "partitions": p, "producers": 1, "packet_bytes": size,
            "send_interval_ms": 1000 * g, "messages_per_s": b * k / g,
            "messages_per_request": b * k}  # fmt: skip


def test_planted_rows_are_predicted_when_left_out() -> None:
    rows = [_row(b, p) for b, p in itertools.product((1, 10, 100), (1, 3, 6))]
    doc = calibrate(rows)
    m = doc["model"]
    assert m["packing"] == "broker"
    assert m["packet_header"] == pytest.approx(H_P) and m["batch_header"] == pytest.approx(H_B)
    assert m["message_bytes"] == pytest.approx(S_M)
    assert m["send_interval_intercept_s"] == pytest.approx(G0)
    assert doc["held_out"]["max_error"] < 1e-9 and doc["held_out"]["within_10pct"] == 9
    off = [*rows[:-1], rows[-1] | {"messages_per_s": rows[-1]["messages_per_s"] * 1.5}]
    doc = calibrate(off)
    assert off[-1]["error"] == pytest.approx(1 / 1.5 - 1, rel=1e-6)  # the law's, not the row's
    assert doc["held_out"]["within_10pct"] == 8


def test_one_batch_per_request_is_recognised_and_predicted() -> None:
    """librdkafka sends one partition's batch per ProduceRequest: messages per request are B,
    not B·P, and the model is fitted that way (the batch header then folds into the request's)."""
    rows = [_row(b, p, per_request=1) for b, p in itertools.product((1, 10, 100), (1, 3, 6))]
    doc = calibrate(rows)
    assert doc["model"]["packing"] == "partition"
    assert doc["model"]["packet_header"] == pytest.approx(H_P + H_B)
    assert doc["held_out"]["max_error"] < 1e-9


def test_one_partition_count_folds_the_batch_header() -> None:
    rows = [_row(b, 3) for b in (1, 10, 100)]
    m = fit_throughput([r["batch_messages"] for r in rows], [3, 3, 3],
                       [r["packet_bytes"] for r in rows],
                       [r["send_interval_ms"] / 1000 for r in rows])  # fmt: skip
    assert m.batch_header == 0.0 and m.packet_header == pytest.approx(H_P + 3 * H_B)
    got = m.predict(50, [3])
    assert got.messages_per_s == pytest.approx(_row(50, 3)["messages_per_s"])
    with pytest.raises(InputError, match="batch_messages"):
        fit_throughput([5, 5], [1, 1], [100, 100], [0.001, 0.001])


def test_steady_window_from_counters() -> None:
    """From the first report with a message sent to the first report of the last count;
    each producer (and configuration) on its own counters."""
    counters = pl.DataFrame({
        "t": [0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 0.4, 0.6, 0.8],
        "producer": [0, 0, 0, 0, 0, 0, 1, 1, 1],
        "version": [0] * 9,
        "tx": [1, 3, 13, 23, 24, 25, 2, 12, 22],
        "tx_bytes": [50, 150, 1150, 2150, 2200, 2260, 100, 1100, 2100],
        "txmsgs": [0, 20, 220, 420, 420, 420, 10, 210, 410],
        "txmsg_bytes": [0] * 9,
    })  # fmt: skip
    (a, b), d = _steady(counters)  # type: ignore[misc]
    assert (a, b) == (pytest.approx(0.4), pytest.approx(0.8))
    assert d == {"tx": (23 - 3) + (22 - 2), "tx_bytes": 2000 + 2000, "txmsgs": 400 + 400}


def test_checks_before_deploying() -> None:
    def spec(**grid: Any) -> ExperimentSpec:
        return ExperimentSpec.model_validate(yaml.safe_load(
            "system: {kind: kafka, brokers: 1}\nsweep: {levels: [1000]}\n"
        ) | {"sweep": {"levels": [1000], "grid": grid}})  # fmt: skip

    check(spec(batch_messages=[1, 10], partitions=[1, 3]), messages=1000, source="s")
    with pytest.raises(InputError, match=r"sweep\.grid\.loss"):
        check(spec(loss=[0.1]), messages=1000, source="s")
    with pytest.raises(InputError, match=r"sweep\.grid\.partitions"):
        check(spec(partitions=[0]), messages=1000, source="s")
    three = ExperimentSpec.model_validate(
        {"system": {"kind": "kafka", "brokers": 3}, "sweep": {"levels": [1000]}}
    )
    with pytest.raises(InputError, match=r"system\.brokers"):
        check(three, messages=1000, source="s")
