"""The Kafka workers' records joined into one row per message (no broker needed): ids,
statuses from delivery reports, copies read by the consumers (0: lost, 2: duplicated), and the
summary's counts, on records written as the workers write them."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from tierscope.load._workers import Tail, Worker
from tierscope.load.kafka import KafkaHandle, Topic, assemble, wire_counters, wire_totals
from tierscope.load.kafka_worker import CONSUMED, REPORT, SEND, STATS, SWITCH

pytest.importorskip("confluent_kafka", reason="pip install 'tierscope[kafka]'")


class _Ended:
    pid, returncode = 999_999_999, 0

    def poll(self) -> int:
        return 0


def _rows(dtype: np.dtype, rows: list[tuple]) -> np.ndarray:
    return np.array(rows, dtype=dtype)


def test_statuses_copies_and_counts(tmp_path: Path) -> None:
    t0 = 100.0
    _rows(SEND, [(i, t0 + 0.1 * i, t0 + 0.1 * i + 0.001) for i in range(10)]).tofile(
        tmp_path / "producer-0.sends"
    )
    reports = [
        (i, t0 + 0.1 * i + 0.01, -192 if i == 3 else 0, i % 3, i, t0 + 0.1 * i + 0.005)
        for i in range(9)
    ]  # fmt: skip  (message 9 never got its report)
    _rows(REPORT, reports).tofile(tmp_path / "producer-0.reports")
    reads = [(0, i, t0 + 0.1 * i + 0.02, i % 3, i) for i in (0, 1, 2, 3, 4, 5, 5, 6, 7)]
    _rows(CONSUMED, reads).tofile(tmp_path / "consumer-0.consumed")

    load = SimpleNamespace(prefix="s/100/0/")
    handle = KafkaHandle(load, None, Topic("t", 3, {0: 1, 1: 1, 2: 1}), tmp_path, level=100.0,
                         setup="s", rep=0, times=(t0, t0, t0 + 2, t0 + 2))  # fmt: skip
    handle.producers = [Worker("producer", 0, _Ended(), {
        "sends": Tail(tmp_path / "producer-0.sends", SEND),
        "reports": Tail(tmp_path / "producer-0.reports", REPORT)})]  # fmt: skip
    read = Tail(tmp_path / "consumer-0.consumed", CONSUMED)
    handle.consumers = [Worker("consumer", 0, _Ended(), {"consumed": read})]
    result = assemble(handle, failure=None)
    req = result.requests.sort("request_id")
    assert req["request_id"][0] == "s/100/0/0-0"
    seq = req["request_id"].str.split("-").list.last().cast(int).to_list()
    status = dict(zip(seq, req["status"], strict=True))
    assert status[3] == "msg_timed_out" and status[9] == "not_delivered"
    assert {status[i] for i in (0, 1, 2, 4, 5, 6, 7, 8)} == {"ok"}
    copies = dict(zip(seq, req["copies"], strict=True))
    assert copies == {0: 1, 1: 1, 2: 1, 3: 1, 4: 1, 5: 2, 6: 1, 7: 1, 8: 0, 9: 0}
    ok = req.filter(pl.col("status") == "ok")
    assert np.allclose((ok["end"] - ok["start"]).to_numpy(), 0.01)  # from the intended time
    assert np.allclose((ok["appended"] - ok["start"]).to_numpy(), 0.005)
    s = result.summary
    assert s["requests"] == 10 and s["errors"] == 2
    assert s["errors_by_class"] == {"msg_timed_out": 1, "not_delivered": 1}
    assert s["consumed"] == {"messages": 9, "lost": 2, "duplicated": 1}


def test_live_switches_and_wire_counters(tmp_path: Path) -> None:
    """Messages carry the configuration that sent them (switch records by sequence number);
    librdkafka's counters restart with each configuration's producer, so totals add the last
    report of every (producer, version) up to the time asked."""
    t0 = 50.0
    _rows(SEND, [(i, t0 + i, t0 + i) for i in range(10)]).tofile(tmp_path / "producer-0.sends")
    _rows(REPORT, [(i, t0 + i + 0.01, 0, 0, i, t0 + i) for i in range(10)]).tofile(
        tmp_path / "producer-0.reports"
    )
    _rows(SWITCH, [(1, 4, t0 + 3.9), (2, 7, t0 + 6.9)]).tofile(tmp_path / "producer-0.switches")
    stats = [(t0 + 1, 0, 2, 300, 2, 200), (t0 + 3, 0, 4, 600, 4, 400),
             (t0 + 5, 1, 1, 150, 2, 200), (t0 + 6, 0, 5, 700, 4, 400),
             (t0 + 8, 2, 3, 500, 3, 300)]  # fmt: skip
    _rows(STATS, stats).tofile(tmp_path / "producer-0.stats")
    load = SimpleNamespace(prefix="")
    handle = KafkaHandle(load, None, Topic("t", 1, {0: 1}), tmp_path, level=1.0, setup="s",
                         rep=0, times=(t0, t0, t0 + 10, t0 + 10))  # fmt: skip
    files = {"sends": SEND, "reports": REPORT, "stats": STATS, "switches": SWITCH}
    handle.producers = [Worker("producer", 0, _Ended(), {
        k: Tail(tmp_path / f"producer-0.{k}", dt) for k, dt in files.items()})]  # fmt: skip
    req = assemble(handle, failure=None).requests.sort("start")
    assert req["config"].to_list() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    counters = wire_counters(handle)
    total = {"tx": 5 + 1 + 3, "tx_bytes": 700 + 150 + 500, "txmsgs": 4 + 2 + 3,
             "txmsg_bytes": 400 + 200 + 300}  # fmt: skip
    assert wire_totals(counters) == total
    early = {"tx": 4 + 1, "tx_bytes": 600 + 150, "txmsgs": 4 + 2, "txmsg_bytes": 400 + 200}
    assert wire_totals(counters, t0 + 5.5) == early
    assert wire_totals(counters, t0) == dict.fromkeys(
        ("tx", "tx_bytes", "txmsgs", "txmsg_bytes"), 0
    )


def test_a_failed_worker_says_why(tmp_path: Path) -> None:
    class _Failed(_Ended):
        returncode = 1

        def wait(self, timeout: float | None = None) -> int:
            return 1

    _rows(SEND, [(0, 1.0, 1.0)]).tofile(tmp_path / "producer-0.sends")
    (tmp_path / "producer-0.error").write_text(
        "Traceback (most recent call last):\n  File ...\nKeyError: 'message.timeout.ms'\n"
    )
    handle = KafkaHandle(SimpleNamespace(prefix=""), SimpleNamespace(delete=lambda name: None),
                         Topic("t", 1, {0: 1}), tmp_path, level=1.0, setup="s", rep=0,
                         times=(0.0, 0.0, 2.0, 2.0))  # fmt: skip
    handle.producers = [Worker("producer", 0, _Failed(), {
        "sends": Tail(tmp_path / "producer-0.sends", SEND),
        "reports": Tail(tmp_path / "producer-0.reports", REPORT)})]  # fmt: skip
    result = handle.stop()
    assert result.summary["failure"] == (
        "producer 0 exited with status 1: KeyError: 'message.timeout.ms'"
    )
    assert result.partial
