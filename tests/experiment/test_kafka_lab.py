"""The Kafka lab on real brokers (issue 18's acceptance): message loss and duplication counted
by id under emulated network faults (the thesis's TRAK protocol), and a sweep of a Kafka
cluster through the same runner, analysis and store as any system.

- no fault, acks=all with idempotence: 0 lost and 0 duplicated of 10^5 messages;
- 10 % packet loss on the producer's link with acks=0 and the thesis's 500 ms message timeout:
  messages are lost, and counted;
- a message timeout below the round trip the delay makes: every message fails, as the rule
  T_p = min(1/μ + D, T_o) of the thesis says, and none does with a timeout above it;
- acks=1 with retries and no idempotence, a round trip near the client's response timeout and
  some loss: requests that time out after the broker appended them are sent again, and the
  copies are counted;
- ``tierscope run`` on a kafka spec: one row per message with its delivery, partition, offset,
  broker append and consume times; the network fault's window shows in the latencies and in
  the event the emulator wrote; the brokers are monitored; nothing is left behind.
"""

from __future__ import annotations

import copy
import itertools
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
import yaml

from tests.experiment._support import require
from tierscope.cli import main
from tierscope.experiment.netem import COMMENT
from tierscope.spec.experiment import ExperimentSpec, parse_experiment
from tierscope.store import read_run

pytestmark = [pytest.mark.real_system, pytest.mark.timing, pytest.mark.timeout(900)]

BASE: dict[str, Any] = {
    "name": "kafka-lab",
    "system": {"kind": "kafka", "brokers": 1, "topic": {"partitions": 3}},
    "workload": {"producers": 1, "consumers": 1, "message_size": 100,
                 "producer": {"acks": "all", "linger_ms": 5}},
    "sweep": {"levels": [2000]},
}  # fmt: skip


def spec_with(**changes: Any) -> ExperimentSpec:
    doc = copy.deepcopy(BASE)
    for path, value in changes.items():
        node = doc
        keys = path.split("__")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        node[keys[-1]] = value
    return parse_experiment(doc)


def _prerequisites(faults: bool = True) -> None:
    if shutil.which("java") is None or shutil.which("mvn") is None:
        require("Java 17 and Maven", "apt-get install openjdk-17-jre-headless maven")
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        require("the Kafka client", "pip install 'tierscope[kafka]'")
    if faults and (shutil.which("iptables") is None or os.geteuid() != 0):
        require("root and iptables", "run as root; apt-get install iptables")


def _rules() -> str:
    return subprocess.run(["iptables", "-w", "-t", "mangle", "-S", "OUTPUT"],
                          capture_output=True, text=True, check=False).stdout  # fmt: skip


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[Any, str]]:
    """One broker for the reliability cases (each on a topic of its own)."""
    _prerequisites()
    from tierscope.experiment.artifacts import fetch
    from tierscope.experiment.runner import deployed_system

    fetch("kafka")
    with deployed_system(spec_with().system, source="test") as (dep, run_id):
        yield dep, run_id
        pids = [p for n in dep.nodes for p in n.pids()]
    assert f"{COMMENT} {run_id}" not in _rules()
    assert not any(os.path.exists(f"/proc/{p}") for p in pids)


def measure(cluster: tuple[Any, str], spec: ExperimentSpec, messages: int) -> list[dict[str, Any]]:
    from tierscope.experiment.reliability import check, measure_on

    check(spec, messages=messages, source="test")
    dep, run_id = cluster
    rows = measure_on(dep, run_id, spec, messages=messages)["rows"]
    print(json.dumps(rows, indent=1))  # the measured figures, in the test's output
    return rows


def test_no_fault_acks_all_idempotent_loses_and_duplicates_nothing(cluster: Any) -> None:
    spec = spec_with(workload__producer={"acks": "all", "idempotence": True, "linger_ms": 5},
                     sweep__levels=[25_000])  # fmt: skip
    (row,) = measure(cluster, spec, 100_000)
    assert row["sent"] == 100_000
    assert (row["lost"], row["duplicated"], row["redundant"]) == (0, 0, 0)
    assert row["received"] == 100_000 and row["reported_failed"] == 0


def test_packet_loss_with_acks_0_loses_messages_and_they_are_counted(cluster: Any) -> None:
    """At 10 % loss and 100 ms round trips TCP carries a few tens of kB/s (Mathis: MSS/RTT x
    1.22/sqrt(p)), far below 5,000 messages/s of 100 B: the producer's queue backs up and
    messages older than the 500 ms timeout are dropped before they are sent — lost, as the
    thesis's at-most-once runs lost them. Without the delay, TCP repairs every loss in time."""
    spec = spec_with(workload__producer={"acks": 0, "timeout_ms": 500, "linger_ms": 5},
                     sweep__levels=[5000],
                     sweep__grid={"loss": [0.1], "delay": [0.05]})  # fmt: skip
    (row,) = measure(cluster, spec, 20_000)
    n = row["packets"]
    assert n > 100 and abs(row["packets_lost"] / n - 0.1) < 4 * (0.09 / n) ** 0.5  # the emulator
    assert row["sent"] == 20_000
    assert row["lost"] > 0, "no message lost at 10 % packet loss with acks=0"
    assert row["lost"] == row["sent"] - row["distinct"]
    # with acks=0 the producer never hears of it: what it was told failed is at most the loss
    assert row["reported_failed"] <= row["lost"]


def test_a_timeout_below_the_round_trip_fails_the_messages(cluster: Any) -> None:
    """T_p = min(1/μ + D, T_o): with a one-way delay of 150 ms no acknowledgement can come back
    within a 100 ms message timeout, and all come back within 3 s at a rate the link carries.
    librdkafka's timer runs on the producer's broker thread, so an acknowledgement that comes
    in while the thread is late still succeeds: 16 of 1,000 did on a quiet machine, a quarter
    beside a CPU hog; most fail either way, none when the timeout works."""
    spec = spec_with(workload__producer={"acks": 1, "retries": 0, "linger_ms": 5},
                     sweep__levels=[100],
                     sweep__grid={"delay": [0.15], "timeout_ms": [100, 3000]})  # fmt: skip
    short, long = measure(cluster, spec, 500)
    assert short["timeout_ms"] == 100 and long["timeout_ms"] == 3000
    assert short["sent"] == long["sent"] == 500
    assert short["reported_failed"] >= 0.5 * short["sent"]
    assert set(short["errors"]) == {"msg_timed_out"}
    assert long["reported_failed"] == 0 and long["lost"] == 0
    assert long["latency_p50_s"] >= 0.3  # the round trip of the emulated delay


def test_retries_without_idempotence_duplicate_when_requests_time_out_late(cluster: Any) -> None:
    """A 180 ms round trip, 5 % loss and a client that gives up on a response after 300 ms
    (socket.timeout.ms): a request or response that loses a segment waits for TCP's
    retransmission (at least 200 ms more), so the client times out on a request the broker has
    appended (or will) and sends it again — a duplicate without idempotence. Batches of at
    most 10 messages keep each request within a segment or two, so requests that lose nothing
    answer in 180 ms, well inside the timeout even beside a CPU hog (large batches need several
    round trips at this loss, time out and resend without end), and the client retries as
    often as it takes within the 30 s message timeout: nothing is lost."""
    faults = [{"kind": "network", "link": "producer-brokers", "duration": 1,
               "delay": {"dist": "constant", "mean": 0.09}, "loss": {"p": 0.05}}]  # fmt: skip
    spec = spec_with(
        workload__producer={"acks": 1, "idempotence": False, "linger_ms": 5,
                            "batch_messages": 10, "socket_timeout_ms": 300,
                            "timeout_ms": 30_000},
        sweep__levels=[200], faults=faults,
    )  # fmt: skip
    (row,) = measure(cluster, spec, 1000)
    # every message reached the log, some more than once
    assert row["sent"] == 1000 and row["lost"] == 0
    assert row["duplicated"] > 0, "no duplicate although requests timed out after the append"
    assert row["redundant"] >= row["duplicated"]


def test_a_sweep_of_a_kafka_cluster_records_every_message(tmp_path: Path) -> None:
    _prerequisites()
    doc = copy.deepcopy(BASE)
    doc["system"]["components"] = {"broker": {"cpu": 1.0}}
    doc["sweep"] = {"levels": [500, 2000]}
    doc["phases"] = {"ramp_up": 1, "steady": 6, "ramp_down": 0}
    doc["faults"] = [{"kind": "network", "link": "producer-brokers", "at": 3, "duration": 2,
                      "delay": {"dist": "constant", "mean": 0.02}}]  # fmt: skip
    spec_file, out = tmp_path / "kafka.yaml", tmp_path / "run"
    spec_file.write_text(yaml.safe_dump(doc))
    assert main(["run", str(spec_file), "--out", str(out), "--json"]) == 0
    run = read_run(out)
    points = run.points.sort("level")
    assert points["level"].to_list() == [500.0, 2000.0]
    for p in points.iter_rows(named=True):
        assert abs(p["throughput"] / p["level"] - 1) < 0.15, p
    req = run.requests.filter(pl.col("tier") == "client")
    assert set(req["interaction"]) == {"produce"} and set(req["status"]) == {"ok"}
    assert req["copies"].to_list() == [1] * req.height  # each read once: none lost, none twice
    assert req["partition"].is_between(0, 2).all() and req["offset"].min() >= 0
    ok = req.filter(pl.col("appended").is_not_null())
    assert ok.height == req.height
    # the broker appended each message after it was sent (its clock has ms resolution) and
    # before the acknowledgement came back; it was consumed after it was appended
    assert (ok["appended"] >= ok["actual_start"] - 0.002).all()
    assert (ok["appended"] <= ok["end"] + 0.002).all()
    assert (ok["consumed"] >= ok["appended"] - 0.002).all()
    # the fault's window (3–5 s into each level) holds the emulated round trip of 40 ms
    events = run.events
    net = events.filter(pl.col("kind") == "network")
    assert net.height == 2
    for e in net.iter_rows(named=True):
        d = json.loads(e["detail"])
        assert d["packets"] > 0 and abs(d["mean_delay"] - 0.02) < 0.001, d
        lvl = req.filter(pl.col("level") == d["level"])
        inside = lvl.filter(pl.col("actual_start").is_between(e["t_start"] + 0.1, e["t_end"] - 0.2))
        before = lvl.filter(pl.col("actual_start") < e["t_start"] - 0.1)
        rt_in = float(np.median((inside["end"] - inside["actual_start"]).to_numpy()))
        rt_out = float(np.median((before["end"] - before["actual_start"]).to_numpy()))
        assert rt_in >= 0.04 and rt_out < 0.03, (rt_in, rt_out)
    metrics = run.metrics
    broker = metrics.filter((pl.col("tier") == "broker") & (pl.col("metric") == "cpu_cores"))
    assert broker.height > 50 and broker["node"].unique().to_list() == ["broker-1"]
    run_id = run.info["options"]["run_id"]
    assert f"{COMMENT} {run_id}" not in _rules()
    assert not list(Path("/sys/fs/cgroup").glob(f"**/tierscope-{run_id}"))


def test_a_live_producer_takes_new_settings_mid_run(cluster: Any) -> None:
    """A 150 ms one-way delay on the producer's link; half way through, the control file
    lowers the message timeout from 5 s to 100 ms. Messages sent before the switch are all
    acknowledged (the old producer drains them), those after it time out, each message says
    which configuration sent it, and librdkafka's own counters cover both producers."""
    import time
    from dataclasses import replace

    from tierscope.experiment.netem import Emulator
    from tierscope.experiment.reliability import configured_workload
    from tierscope.load.kafka import wire_counters, wire_totals, write_control

    dep, run_id = cluster
    spec = spec_with(workload__producer={"acks": 1, "retries": 0, "linger_ms": 5,
                                         "timeout_ms": 5000}, sweep__levels=[100])  # fmt: skip
    load = dep.driver.generator(spec.kafka_workload, seed=5, request_id_prefix="live/")
    control = Path(load.workdir) / "live-control.json"
    delay = {"dist": "constant", "mean": 0.15}
    flows = [replace(x, delay=delay) for x in dep.links("producer-brokers")]
    with Emulator(flows, tag=run_id, seed=5):
        handle = load.start(100, 0.0, 6.0, 0.0, setup="live", control=control)
        while time.monotonic() < handle.t0 + 3.0:
            handle.snapshot()
            time.sleep(0.05)
        switched_at = time.monotonic()
        write_control(control, 1, configured_workload(spec, {"timeout_ms": 100}))
        result = handle.wait()
    req = result.requests
    before, after = req.filter(pl.col("config") == 0), req.filter(pl.col("config") == 1)
    assert before.height > 200 and after.height > 200, (before.height, after.height)
    assert set(before["status"]) == {"ok"}  # drained by the old producer within its 5 s
    assert (after["status"] == "msg_timed_out").mean() >= 0.9, after["status"].value_counts()
    # the switch took effect within a quarter second (the worker's check) and a margin
    assert switched_at - 0.1 <= before["actual_start"].max() <= switched_at + 0.6
    wire = wire_totals(wire_counters(handle))
    assert wire["txmsgs"] >= before.height and wire["tx"] > 0
    assert 0 < wire["txmsgs"] * 100 < wire["tx_bytes"]


def test_kafka_adapt_switches_batch_size_when_the_loss_begins(tmp_path: Path, capsys: Any) -> None:
    """`tierscope kafka adapt` over a two-stage trace (calm, then 5 % loss and 20 ms), with a
    predictor fitted to rows where batching pays only under loss: the reactive policy starts
    at batch size 1 and switches to the batch the rows' law makes best (5) when the loss
    begins; the static policy never switches; every message is accounted for in the windows."""
    _prerequisites()
    rows = []
    for b, loss, delay in itertools.product((1, 2, 5, 10), (0.0, 0.05), (0.0, 20.0)):
        rows.append({"message_size": 100, "timeliness_ms": 1000.0, "delay_ms": delay,
                     "loss": loss, "acks": "1", "batch_messages": b, "poll_ms": 0.0,
                     "timeout_ms": 5000, "loss_rate": loss / b, "duplicate_rate": 0.0,
                     "service_ratio": 1 - 3 * loss / b, "late_rate": 0.01 * b,
                     "acked_lost_rate": 2 * loss / b})  # fmt: skip
    rows_file = tmp_path / "rows.json"
    rows_file.write_text(json.dumps({"rows": rows}))
    doc = copy.deepcopy(BASE)
    doc["workload"]["producer"] = {"acks": 1, "batch_messages": 1, "linger_ms": 5,
                                   "timeout_ms": 5000}  # fmt: skip
    doc["sweep"] = {"levels": [500]}
    doc["phases"] = {"steady": 12}
    doc["control"] = {"interval": 3, "deadline_ms": 1000,
                      "candidates": {"batch_messages": [1, 2, 5, 10]}}  # fmt: skip
    doc["faults"] = [{"kind": "network", "link": "producer-brokers", "at": 6, "duration": 6,
                      "delay": {"dist": "constant", "mean": 0.02},
                      "loss": {"model": "bernoulli", "p": 0.05}}]  # fmt: skip
    spec_file = tmp_path / "adapt.yaml"
    spec_file.write_text(yaml.safe_dump(doc))
    capsys.readouterr()
    argv = ["kafka", "adapt", str(spec_file), "--policy", "static,reactive", "--rows",
            str(rows_file), "--json"]  # fmt: skip
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    static, reactive = out["runs"]
    assert static["policy"] == "static" and static["reconfigurations"] == 0
    assert reactive["reconfigurations"] >= 1

    def timely(b: int, loss: float) -> float:  # the planted law's chi' per offered message
        return (1 - 3 * loss / b) * (1 - 0.01 * b) * (1 - 2 * loss / b)

    best = max((1, 2, 5, 10), key=lambda b: timely(b, 0.05))  # 5
    sizes = [d["config"]["batch_messages"] for d in reactive["decisions"]]
    assert sizes[0] == 1 and sizes[-1] == best, reactive["decisions"]
    windows = reactive["windows"]
    assert [w["loss"] for w in windows] == [0.0, 0.0, 0.05, 0.05]
    assert windows[0]["version"] == 0 and windows[-1]["config"]["batch_messages"] == best
    for run in out["runs"]:
        ws = run["windows"]
        assert sum(w["offered"] for w in ws) == run["summary"]["messages"] > 5000
        assert all(0 < w["relative_payload"] < 1 for w in ws), ws
        assert run["faults"] and run["faults"][0]["packets"] > 0
