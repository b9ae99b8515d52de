"""Traced Cassandra reads become per-node stage rows (issue 19's probabilistic tracing): four
real traces captured from a 3-node Cassandra 5.0.9 cluster of this target (RF 2: a local and a
remote read at ONE and at QUORUM), with the stage lengths read off their events by hand."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tierscope.experiment.cassandra_traces import _Session, trace_rows

TRACES = Path(__file__).with_name("cassandra_traces.json")
NAMES = {"127.0.0.21": "node-1", "127.0.0.22": "node-2", "127.0.0.23": "node-3"}


def _sessions() -> list[_Session]:
    out = []
    for s in json.loads(TRACES.read_text()):
        events = [(e["source"], e["activity"], e["elapsed"], e["thread"],
                   (uuid.UUID(e["t"]).time - 0x01B21DD213814000) / 1e7)
                  for e in s["events"]]  # fmt: skip
        started = datetime.fromisoformat(s["started_at"]).replace(tzinfo=UTC).timestamp()
        out.append(_Session(s["session"], s["coordinator"], started, s["duration"],
                            s["parameters"]["consistency_level"].lower(), events))  # fmt: skip
    return out


def _stages() -> dict[tuple[int, str, str], tuple[float, float]]:
    rows = trace_rows(_sessions(), NAMES)
    ids = list(dict.fromkeys(rows["request_id"]))
    return {
        (ids.index(r["request_id"]), r["node"], r["interaction"]): (r["start"], r["end"])
        for r in rows.iter_rows(named=True)
    }


def us(span: tuple[float, float]) -> float:
    return round((span[1] - span[0]) * 1e6)


def test_each_reads_stages_at_each_node() -> None:
    st = _stages()
    # a local read at ONE: the coordinator reads itself, asks nobody
    assert {k[1:] for k in st if k[0] == 0} == {("node-1", "coordinate"), ("node-1", "read")}
    assert us(st[0, "node-1", "coordinate"]) == 832
    assert us(st[0, "node-1", "read"]) == 682 - 471
    # a remote read at ONE: the coordinator asks node-2 for the data after 461 µs and
    # answers 216 µs after the response; node-2 serves it in 3,658 µs, reading in 343
    assert us(st[1, "node-1", "parse"]) == 461
    assert us(st[1, "node-1", "end"]) == 7311 - 7095
    assert us(st[1, "node-2", "replica"]) == 3658
    assert us(st[1, "node-2", "read"]) == 1611 - 1268
    assert (1, "node-1", "read") not in st
    # a local read at QUORUM: node-2 reads itself and asks node-3 for a digest
    assert us(st[2, "node-2", "parse"]) == 795
    assert us(st[2, "node-2", "end"]) == 54734 - 54026
    assert us(st[2, "node-2", "read"]) == 1591 - 1316
    assert us(st[2, "node-3", "replica"]) == 777
    # a remote read at QUORUM: node-2 asks node-3 (data) and node-1 (digest)
    assert us(st[3, "node-2", "parse"]) == 787
    assert us(st[3, "node-2", "end"]) == 51252 - 49929
    assert us(st[3, "node-1", "replica"]) == 2608
    assert us(st[3, "node-3", "replica"]) == 47265


@pytest.mark.parametrize("i", [1, 2, 3])
def test_a_replicas_part_lies_inside_its_coordinators(i: int) -> None:
    """Each node's part is placed by its own clock (the event ids, milliseconds): a replica
    begins after its coordinator asked and ends before the coordinator answered."""
    st = _stages()
    coord = next(v for k, v in st.items() if k[0] == i and k[2] == "coordinate")
    for k, (a, b) in st.items():
        if k[0] == i and k[2] == "replica":
            assert coord[0] - 1e-3 <= a and b <= coord[1] + 1e-3, (k, a, b, coord)
