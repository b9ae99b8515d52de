"""The producer controller of ``tierscope kafka adapt`` without brokers: the trace's condition
over time, Algorithm 1 and reactive batching deciding on a predictor fitted to rows drawn from
a planted law (judged by that law, not by the predictor), the per-window measurements against
hand counts, and the checks made before anything is deployed."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
import yaml

from tierscope.domains.kafka import kpi
from tierscope.domains.kafka_reliability import fit_reliability
from tierscope.errors import InputError
from tierscope.experiment.adapt import Controller, check, condition_at, measure_windows
from tierscope.spec.experiment import ExperimentSpec
from tierscope.spec.kafka import ControlSpec

pytest.importorskip("sklearn")

SPEC = """
system: {kind: kafka, brokers: 1}
workload:
  message_size: 100
  producer: {acks: 1, batch_messages: 1, timeout_ms: 5000, linger_ms: 1}
sweep: {levels: [1000]}
phases: {steady: 30}
control:
  interval: 5
  target: 0.8
  deadline_ms: 1000
  candidates: {acks: [0, 1, all], batch_messages: [1, 2, 5, 10], timeout_ms: [500, 5000]}
faults:
  - {kind: network, link: producer-brokers, at: 10, duration: 10,
     delay: {dist: pareto, mean: 0.05, jitter: 0.01}, loss: {model: bernoulli, p: 0.1}}
  - {kind: network, link: producer-brokers, at: 20, duration: 10, delay: {mean: 0.02},
     loss: {model: gilbert_elliott, p: 0.01, r: 0.1, bad_loss: 0.7, good_loss: 0.001}}
"""


def _spec(text: str = SPEC, **changes: Any) -> ExperimentSpec:
    doc = yaml.safe_load(text)
    for path, value in changes.items():
        node = doc
        *parents, leaf = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return ExperimentSpec.model_validate(doc)


def _law(acks: str, batch: int, timeout: int, delay_ms: float, loss: float) -> dict[str, float]:
    """A planted truth shaped like the thesis's findings: loss worst with acks=0 and eased by
    batching, duplicates with acks=1 under loss, timeouts near the delay failing messages."""
    guard = {"0": 1.5, "1": 1.0, "all": 0.3}[acks]
    p_l = min(1.0, loss * guard / batch + (0.3 * loss if timeout < 10 * delay_ms else 0.0))
    return {
        "loss_rate": p_l,
        "duplicate_rate": 0.02 * loss if acks == "1" else 0.0,
        "relative_payload": 100 * batch / (100 * batch + 121),
        "service_ratio": 1.0 - 0.9 * p_l,
        "late_rate": min(1.0, (2 * delay_ms + 20 * batch) / 1000 * 0.5),
        "acked_lost_rate": 0.8 * loss if acks == "0" else 0.0,
    }


@pytest.fixture(scope="module")
def model() -> Any:
    rows = []
    grid = (("0", "1", "all"), (1, 2, 5, 10), (500, 5000), (0.0, 20.0, 50.0),
            (0.0, 0.01, 0.05, 0.1))  # fmt: skip
    for acks, b, to, d, lo in itertools.product(*grid):
        rows.append({"message_size": 100, "timeliness_ms": 1000.0, "delay_ms": d, "loss": lo,
                     "acks": acks, "batch_messages": b, "poll_ms": 0.0, "timeout_ms": to,
                     **_law(acks, b, to, d, lo)})  # fmt: skip
    return fit_reliability(pl.DataFrame(rows))


def _true_gamma(config: dict[str, Any], cond: tuple[float, float], weights: Any) -> float:
    t = _law(str(config["acks"]), config["batch_messages"], config["timeout_ms"],
             cond[0] * 1000, cond[1])  # fmt: skip
    return kpi(t["relative_payload"], t["service_ratio"], t["loss_rate"], t["duplicate_rate"],
               weights=weights)  # fmt: skip


def test_condition_follows_the_trace() -> None:
    spec = _spec()
    assert condition_at(spec, 5.0) == (0.0, 0.0)
    assert condition_at(spec, 10.0) == (0.05, 0.1)
    delay, loss = condition_at(spec, 25.0)
    assert delay == 0.02
    assert loss == pytest.approx((0.01 * 0.7 + 0.1 * 0.001) / 0.11)  # stationary GE loss


def test_dynamic_configuration_meets_the_target_by_the_planted_law(model: Any) -> None:
    spec = _spec()
    control = spec.control
    assert control is not None
    c = Controller("dynamic", spec, control, model)
    start = {"acks": 1, "batch_messages": 1, "timeout_ms": 5000}
    calm = (0.0, 0.0)
    assert _true_gamma(start, calm, control.weights) >= control.target
    new, why = c.decide(dict(start), calm)
    assert new == start and why["steps"] == []  # γ already met: Algorithm 1 changes nothing
    stormy = (0.05, 0.1)
    assert _true_gamma(start, stormy, control.weights) < control.target
    new, why = c.decide(dict(start), stormy)
    assert new != start and why["steps"]
    assert why["gamma_predicted"] >= control.target
    truth = _true_gamma(new, stormy, control.weights)
    assert truth >= control.target - 0.01  # what it chose is good by the law itself
    assert truth > _true_gamma(start, stormy, control.weights) + 0.02


def test_reactive_batching_picks_the_best_timely_throughput(model: Any) -> None:
    spec = _spec()
    assert spec.control is not None
    c = Controller("reactive", spec, spec.control, model)
    start = {"acks": 0, "batch_messages": 1, "timeout_ms": 5000}
    for cond in ((0.0, 0.0), (0.05, 0.1), (0.01, 0.05)):
        new, why = c.decide(dict(start), cond)
        assert {k: v for k, v in new.items() if k != "batch_messages"} == {
            k: v for k, v in start.items() if k != "batch_messages"}  # fmt: skip

        def chi(b: int, cond: tuple[float, float] = cond) -> float:
            t = _law("0", b, 5000, cond[0] * 1000, cond[1])
            return 1000 * t["service_ratio"] * (1 - t["late_rate"]) * (1 - t["acked_lost_rate"])

        best = max(chi(b) for b in (1, 2, 5, 10))
        assert chi(new["batch_messages"]) >= 0.97 * best
        assert why["timely_throughput_predicted"] == pytest.approx(best, rel=0.05)


def test_windows_count_what_happened() -> None:
    """Two windows of 2 s: counts, φ from the byte counters, μ, P_l, P_d, γ and the timely
    throughput by hand."""
    rows = []
    for i in range(10):  # window 0: 10 offered, 9 sent, 8 ok (2 late), 1 lost, 1 duplicated
        sent = i != 9
        ok = i < 8
        rows.append({"start": 0.1 + 0.15 * i, "actual_start": 0.1 + 0.15 * i if sent else None,
                     "end": 0.1 + 0.15 * i + (1.5 if i in (0, 1) else 0.2) if sent else None,
                     "status": "ok" if ok else ("msg_timed_out" if sent else "not_delivered"),
                     "copies": 0 if i in (2, 8) else 2 if i == 3 else (1 if sent else None),
                     "config": 0})  # fmt: skip
    for i in range(4):  # window 1: 4 offered, all sent, ok, in time, read once; config 1
        rows.append({"start": 2.5 + 0.3 * i, "actual_start": 2.5 + 0.3 * i,
                     "end": 2.6 + 0.3 * i, "status": "ok", "copies": 1, "config": 1})  # fmt: skip
    requests = pl.DataFrame(rows)
    counters = pl.DataFrame(
        {
            "t": [1.9, 3.9, 3.0],
            "producer": [0, 0, 0],
            "version": [0, 0, 1],
            "tx": [5, 6, 2],
            "tx_bytes": [1000, 1100, 900],
            "txmsgs": [9, 9, 4],
            "txmsg_bytes": [800, 800, 400],
        }
    ).with_columns(pl.col("producer", "version").cast(pl.Int32))
    control = ControlSpec(interval=2.0, target=0.79, deadline_ms=1000.0)
    versions = [{"acks": 1}, {"acks": "all"}]
    w = measure_windows(requests, counters, 0.0, 4.0, control, versions, lambda t: (0.01, 0.02),
                        80)  # fmt: skip
    assert len(w) == 2
    a, b = w
    assert (a["offered"], a["sent"], a["ok"], a["late"]) == (10, 9, 8, 2)
    assert (a["lost"], a["duplicated"]) == (2, 1)  # 2 and 8 never read (8 was not acked)
    assert a["timely"] == 8 - 2 - 1  # ok, in time and read: not 0, 1 (late) nor 2 (lost)
    assert a["relative_payload"] == pytest.approx(9 * 80 / 1000)  # 9 messages of 80 B
    assert a["service_ratio"] == pytest.approx(8 / 10)
    assert a["loss_rate"] == pytest.approx(2 / 9) and a["duplicate_rate"] == pytest.approx(1 / 9)
    assert a["gamma"] == pytest.approx(0.3 * 0.72 + 0.3 * 0.8 + 0.3 * (7 / 9) + 0.1 * (8 / 9))
    assert a["meets_target"] is False and a["timely_throughput"] == pytest.approx(5 / 2)
    assert a["version"] == 0 and b["version"] == 1 and b["config"] == {"acks": "all"}
    # window 1: version 0 sent 100 bytes (no message), version 1 900 bytes (4 messages)
    assert b["relative_payload"] == pytest.approx(4 * 80 / 1000)
    assert (b["offered"], b["timely"], b["loss_rate"]) == (4, 4, 0.0)
    assert b["gamma"] == pytest.approx(0.3 * 0.32 + 0.3 + 0.3 + 0.1) and b["meets_target"]
    assert (a["delay_ms"], a["loss"]) == (10.0, 0.02)


def test_checks_before_deploying(model: Any) -> None:
    spec = _spec()
    with pytest.raises(InputError, match="--policy"):
        check(spec, ["greedy"], source="s.yaml")
    off = _spec(**{"workload.producer.batch_messages": 3})
    with pytest.raises(InputError, match=r"workload\.producer\.batch_messages"):
        check(off, ["static"], source="s.yaml")
    assert spec.control is not None
    with pytest.raises(InputError, match="--rows"):
        Controller("dynamic", spec, spec.control, None)
    thin = fit_reliability(pl.DataFrame(
        [{"acks": "1", "loss": x / 10, "delay_ms": 0.0, "batch_messages": 1,
          "loss_rate": x / 20, "duplicate_rate": 0.0} for x in range(10)]))  # fmt: skip
    with pytest.raises(InputError, match="relative_payload, service_ratio"):
        Controller("dynamic", spec, spec.control, thin)
    Controller("static", spec, spec.control, None)  # needs nothing


def test_control_belongs_to_kafka(tmp_path: Path) -> None:
    from tierscope.errors import SpecError
    from tierscope.spec.experiment import load_experiment

    path = tmp_path / "web.yaml"
    path.write_text("system: {kind: embedded}\nsweep: {levels: [1]}\ncontrol: {interval: 5}\n")
    with pytest.raises(SpecError, match="control"):
        load_experiment(path)
    bad = tmp_path / "bad.yaml"
    bad.write_text(SPEC.replace("target: 0.8", "target: 0.8\n  weights: [1, 1, 0, 0]"))
    with pytest.raises(SpecError, match="weights"):
        load_experiment(bad)
    assert np.isclose(sum(_spec().control.weights), 1.0)  # type: ignore[union-attr]


def test_cli_refuses_before_deploying(tmp_path: Path, capsys: Any) -> None:
    """Exit 2 naming what to fix, and nothing started: no rows for the dynamic policy, an
    unknown policy, a spec that is not kafka; `kafka throughput` on three brokers."""
    from tierscope.cli import main

    spec = tmp_path / "adapt.yaml"
    spec.write_text(SPEC)
    assert main(["kafka", "adapt", str(spec), "--policy", "dynamic"]) == 2
    assert "--rows" in capsys.readouterr().err
    assert main(["kafka", "adapt", str(spec), "--policy", "static,greedy"]) == 2
    assert "greedy" in capsys.readouterr().err
    web = tmp_path / "web.yaml"
    web.write_text("system: {kind: embedded}\nsweep: {levels: [1]}\n")
    assert main(["kafka", "adapt", str(web), "--policy", "static"]) == 2
    assert "system.kind" in capsys.readouterr().err
    three = tmp_path / "three.yaml"
    three.write_text("system: {kind: kafka, brokers: 3}\nsweep: {levels: [1000], grid: "
                     "{batch_messages: [1, 10]}}\n")  # fmt: skip
    assert main(["kafka", "throughput", str(three)]) == 2
    assert "system.brokers" in capsys.readouterr().err
