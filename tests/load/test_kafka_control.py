"""The producer worker's control file (no broker needed): a document is taken once, only when
its version is newer than the last one taken, and a file being replaced is read again later."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tierscope.load.kafka_worker import _Control


def _write(path: Path, doc: object, *, mtime_ns: int) -> None:
    path.write_text(json.dumps(doc))
    os.utime(path, ns=(mtime_ns, mtime_ns))


def test_newer_versions_only(tmp_path: Path) -> None:
    path = tmp_path / "control.json"
    control = _Control(str(path))
    assert control.newer() is None  # no file yet
    _write(path, {"version": 1, "conf": {"acks": 0}}, mtime_ns=1_000)
    assert control.newer() == {"version": 1, "conf": {"acks": 0}}
    assert control.newer() is None  # unchanged
    _write(path, {"version": 1, "conf": {"acks": 1}}, mtime_ns=2_000)
    assert control.newer() is None  # not newer
    path.write_text('{"version": 2, "co')  # caught half-written
    os.utime(path, ns=(3_000, 3_000))
    assert control.newer() is None
    _write(path, {"version": 3, "poll_s": 0.01}, mtime_ns=4_000)
    assert control.newer() == {"version": 3, "poll_s": 0.01} and control.version == 3
    assert _Control(None).newer() is None


def test_write_control_restarts_the_producer_only_for_librdkafka_settings(tmp_path: Path) -> None:
    from tierscope.load.kafka import write_control
    from tierscope.spec.kafka import KafkaWorkload

    path = tmp_path / "control.json"
    base = KafkaWorkload.model_validate({"producer": {"acks": 1, "poll_ms": 0}})
    polled = KafkaWorkload.model_validate({"producer": {"acks": 1, "poll_ms": 10}})
    batched = KafkaWorkload.model_validate({"producer": {"acks": 1, "batch_messages": 5}})
    write_control(path, 1, polled, base)
    assert json.loads(path.read_text()) == {"version": 1, "conf": None, "poll_s": 0.01}
    write_control(path, 2, batched, polled)
    doc = json.loads(path.read_text())
    assert doc["conf"]["batch.num.messages"] == 5 and doc["poll_s"] is None
    assert not (tmp_path / "control.json.tmp").exists()
