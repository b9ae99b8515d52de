"""What the Jolokia pollers make of two bulk reads a second apart, against hand-computed values:
gauges as read, counters as their increase per second (summed over the MBeans a pattern
matched), histograms as the mean of the values recorded between the reads (not their
since-start mean), totals over their counts, a cap where one is set, and nothing but gauges
from the first read."""

from __future__ import annotations

from typing import Any

import pytest

from tierscope.experiment.jolokia import CASSANDRA, KAFKA, JolokiaPoller


def _two_reads(poller: JolokiaPoller, first: dict[str, Any], second: dict[str, Any]
               ) -> tuple[dict[str, float], dict[str, float]]:  # fmt: skip
    a = poller.values(first, 10.0)
    poller.prev = (10.0, first)
    return a, poller.values(second, 12.0)  # two seconds later


def test_kafka_broker_values() -> None:
    poller = JolokiaPoller("http://127.0.0.1:1/jolokia/", KAFKA)
    pattern = "kafka.network:type=RequestMetrics,name=RequestsPerSec,request=Produce,version={}"
    first = {
        "produce_rate": {pattern.format(9): {"Count": 100}, pattern.format(11): {"Count": 50}},
        "produce_total_ms": {"Mean": 2.0, "Count": 100},
        "request_queue": 3,
        "handler_idle": 1.0e9,
        "flush_ms": {"Mean": 10.0, "Count": 4},
    }
    second = {
        "produce_rate": {pattern.format(9): {"Count": 300}, pattern.format(11): {"Count": 70}},
        "produce_total_ms": {"Mean": 3.0, "Count": 300},  # 200 more with mean (900 - 200) / 200
        "request_queue": 5,
        "handler_idle": 4.0e9,  # 3 s of idle per 2 s: more than one thread, capped at 1
        "flush_ms": {"Mean": 10.0, "Count": 8},
    }
    a, b = _two_reads(poller, first, second)
    assert a == {"request_queue": 3.0}
    assert b["request_queue"] == 5.0
    assert b["produce_rate"] == pytest.approx((300 + 70 - 100 - 50) / 2)
    assert b["produce_total_ms"] == pytest.approx((3.0 * 300 - 2.0 * 100) / 200)
    assert b["handler_idle"] == 1.0
    assert (b["flush_ms"], b["flush_rate"]) == (pytest.approx(10.0), pytest.approx(2.0))


def test_cassandra_node_values() -> None:
    poller = JolokiaPoller("http://127.0.0.1:1/jolokia/", CASSANDRA)
    gc = "java.lang:name=G1 {} Generation,type=GarbageCollector"
    first = {
        "read_stage_active": 2, "read_stage_pending": 0, "read_stage_completed_s": 1000,
        "read_ms": 500_000, "read_ms#count": 1000,  # total microseconds, and reads
        "read_quorum_ms": 8000, "read_quorum_ms#count": 10,
        "gc_busy": {gc.format("Young"): {"CollectionTime": 100},
                    gc.format("Old"): {"CollectionTime": 0}},
        "dropped_reads_s": 0,
    }  # fmt: skip
    second = {
        "read_stage_active": 4, "read_stage_pending": 7, "read_stage_completed_s": 1600,
        "read_ms": 860_000, "read_ms#count": 1600,  # 600 more reads of 600 µs on average
        "read_quorum_ms": 8000, "read_quorum_ms#count": 10,  # nothing new: no mean, rate 0
        "gc_busy": {gc.format("Young"): {"CollectionTime": 140},
                    gc.format("Old"): {"CollectionTime": 20}},
        "dropped_reads_s": 6,
    }  # fmt: skip
    a, b = _two_reads(poller, first, second)
    assert a == {"read_stage_active": 2.0, "read_stage_pending": 0.0}
    assert (b["read_stage_active"], b["read_stage_pending"]) == (4.0, 7.0)
    assert b["read_stage_completed_s"] == pytest.approx(300.0)
    assert b["read_ms"] == pytest.approx(0.6)
    assert b["reads_s"] == pytest.approx(300.0)
    assert "read_quorum_ms" not in b and b["read_quorum_s"] == 0.0
    assert b["gc_busy"] == pytest.approx(60 / 2 / 1000)  # 60 ms of pauses in 2 s
    assert b["dropped_reads_s"] == pytest.approx(3.0)
