"""The kafka spec (issue 18's contract): the example parses with its meaning, producer settings
map onto librdkafka's names, and every refusal the issue lists (an unknown acks, partitions
below 1, a fault on a link that does not exist, missing Java or Maven) is an exit 2 naming the
field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tierscope.cli import main
from tierscope.errors import SpecError
from tierscope.experiment import reliability
from tierscope.spec.experiment import parse_experiment

#: The issue's contract example, verbatim, plus the reliability grid of its contract.
CONTRACT = """
system:
  kind: kafka
  brokers: 3
  components: {broker: {cpu: 0.5, memory: 1G}}
  topic: {partitions: 6, replication: 3, min_insync: 2}
workload:
  mode: open                      # messages/s per producer
  producers: 1
  consumers: 1
  message_size: 200
  producer: {acks: all, batch_messages: 100, linger_ms: 5, timeout_ms: 30000, retries: 3, idempotence: true}
sweep: {levels: [1000, 5000, 20000], grid: {acks: [0, 1, all], loss: [0, 0.1], delay: [0, 0.05]}}
faults:
  - {kind: network, link: producer-brokers, at: 5, duration: 20,
     delay: {dist: pareto, mean: 0.04, jitter: 0.01}, loss: {model: bernoulli, p: 0.05}}
"""  # noqa: E501


def doc() -> dict[str, Any]:
    return copy.deepcopy(yaml.safe_load(CONTRACT))


def test_contract_example_parses_with_its_meaning() -> None:
    spec = parse_experiment(doc())
    assert spec.system.replicas == {"broker": 3}
    assert spec.system.graph["broker"].cpu == 0.5
    assert (spec.system.kafka_topic.partitions, spec.system.kafka_topic.min_insync) == (6, 2)
    w = spec.kafka_workload
    assert (w.producers, w.consumers, w.message_size) == (1, 1, 200)
    assert w.producer.librdkafka() == {
        "acks": -1, "batch.num.messages": 100, "linger.ms": 5.0, "message.timeout.ms": 30000,
        "message.send.max.retries": 3, "retry.backoff.ms": 100, "enable.idempotence": True,
    }  # fmt: skip
    fault = spec.faults[0]
    assert fault.link == "producer-brokers" and fault.windows(30) == [(5, 25)]
    assert fault.delay.native() == {"dist": "pareto", "mean": 0.04, "jitter": 0.01,
                                    "correlation": 0.0}  # fmt: skip
    assert fault.loss.native() == {"model": "bernoulli", "p": 0.05}
    configs = list(reliability.configurations(spec))
    assert len(configs) == 12 and configs[0] == {"acks": 0, "loss": 0, "delay": 0}
    w = reliability.configured_workload(spec, {"acks": 1, "loss": 0.1})
    assert w.producer.acks == 1 and w.producer.batch_messages == 100
    # a request times out no later than its messages
    short = reliability.configured_workload(spec, {"timeout_ms": 200, "acks": "all"})
    assert short.producer.librdkafka()["request.timeout.ms"] == 200


@pytest.mark.parametrize(
    ("path", "value", "field", "says"),
    [
        (("workload", "producer", "acks"), 2, "workload.producer.acks", "0, 1 or all"),
        (("workload", "producer", "acks"), "some", "workload.producer.acks", "0, 1 or all"),
        (("system", "topic", "partitions"), 0, "system.topic.partitions", "greater than or equal"),
        (("system", "topic", "replication"), 4, "system.topic.replication", "as many brokers"),
        (("system", "topic", "min_insync"), 4, "system.topic.min_insync", "replication factor"),
        (("faults", 0, "link"), "producer-db", "faults[0].link", "is not a link"),
        (("system", "brokers"), 1, "system.topic.replication", "as many brokers"),
        (("workload", "consumers"), 0, None, None),  # valid: no consumer
        (("workload", "producer", "idempotence"), True, None, None),
        (("sweep", "grid", "colour"), [1], "sweep.grid.colour", "not something the grid varies"),
        (("faults", 0, "delay", "jitter"), 0, "faults[0].delay", "Pareto delay needs jitter"),
        (("faults", 0, "loss", "r"), 0.5, "faults[0].loss", "belongs to model gilbert_elliott"),
        (
            ("system", "components", "broker", "calls"),
            [],
            "system.components.broker.calls",
            "cpu, cpuset and memory",
        ),
        (("system", "topology"), "1/1/1", "system.topology", "not tiers"),
    ],
)
def test_bad_fields_are_named(path: tuple[Any, ...], value: Any, field: str | None,
                              says: str | None) -> None:  # fmt: skip
    d = doc()
    node = d
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    if field is None:
        parse_experiment(d)
        return
    with pytest.raises(SpecError) as err:
        parse_experiment(d)
    fields = [f for f, _ in err.value.errors]
    assert field in fields, err.value.errors
    assert says in str(err.value)


def test_links_that_do_not_exist_in_this_system() -> None:
    d = doc()
    d["system"] = {"kind": "kafka"}  # one broker
    d["faults"][0]["link"] = "broker-broker"
    with pytest.raises(SpecError, match="broker-broker needs at least 2 brokers"):
        parse_experiment(d)
    d = doc()
    d["workload"]["consumers"] = 0
    d["faults"][0]["link"] = "consumer-brokers"
    with pytest.raises(SpecError, match="at least one consumer"):
        parse_experiment(d)


def test_kafka_fields_belong_to_kafka() -> None:
    base = {"sweep": {"levels": [1]}}
    for extra, field in (({"brokers": 2}, "system.brokers"), ({"topic": {}}, "system.topic")):
        with pytest.raises(SpecError) as err:
            parse_experiment({**base, "system": {"kind": "embedded", **extra}})
        assert field in [f for f, _ in err.value.errors]
    with pytest.raises(SpecError, match=r"network faults|link"):
        parse_experiment({**base, "faults": [{"kind": "stall", "tier": "app", "duration": 1,
                                              "link": "producer-brokers"}]})  # fmt: skip
    with pytest.raises(SpecError, match="names its component"):
        parse_experiment({**base, "faults": [{"kind": "stall", "duration": 1}]})


def test_missing_java_or_maven_exits_2_saying_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("confluent_kafka", reason="pip install 'tierscope[kafka]'")
    from tierscope.experiment import artifacts
    from tierscope.experiment.targets import kafka as target

    spec = tmp_path / "k.yaml"
    d = doc()
    d["sweep"].pop("grid")
    spec.write_text(yaml.safe_dump(d))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # nothing fetched
    monkeypatch.setattr(artifacts.shutil, "which", lambda name: None)
    assert main(["run", str(spec), "--out", str(tmp_path / "run")]) == 2
    assert "Java 17" in capsys.readouterr().err
    monkeypatch.setattr(
        artifacts.shutil, "which", lambda n: None if n == "mvn" else f"/usr/bin/{n}"
    )
    monkeypatch.setattr(target.shutil, "which", lambda n: None if n == "mvn" else f"/usr/bin/{n}")
    assert main(["run", str(spec), "--out", str(tmp_path / "run")]) == 2
    assert "apt-get install maven" in capsys.readouterr().err
    assert main(["kafka", "reliability", str(spec)]) == 2  # no grid: still checked first
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "name",
    [
        "kafka.yaml",
        "kafka-reliability.yaml",
        "kafka-plus-one.yaml",
        "kafka-adapt.yaml",
        "kafka-throughput.yaml",
        "kafka-corpus.yaml",
    ],
)
def test_the_examples_are_valid_specs(name: str) -> None:
    from tierscope.spec.experiment import load_experiment

    spec, _ = load_experiment(Path(__file__).resolve().parents[2] / "examples" / name)
    assert spec.system.kind == "kafka"
    for config in reliability.configurations(spec):
        reliability.configured_workload(spec, config)


def test_a_rows_network_condition_is_the_grids_else_the_specs() -> None:
    spec = parse_experiment(doc())
    assert reliability.producer_condition(spec, {"loss": 0.1, "delay": 0.05}) == (0.05, 0.1)
    assert reliability.producer_condition(spec, {"acks": 1}) == (0.04, 0.05)
    d = doc()
    d["faults"][0]["loss"] = {"model": "gilbert_elliott", "p": 0.01, "r": 0.1, "bad_loss": 0.7,
                              "good_loss": 0.001}  # fmt: skip
    _, loss = reliability.producer_condition(parse_experiment(d), {})
    assert abs(loss - 0.0645) < 1e-4  # the thesis trace's stage 0: 6.45 %
    d["faults"] = []
    assert reliability.producer_condition(parse_experiment(d), {}) == (0.0, 0.0)


def test_a_merged_workload_is_checked_by_field() -> None:
    """What the kafka target's driver validates (the spec's workload over its base)."""
    from tierscope.spec.kafka import parse_kafka_workload

    with pytest.raises(SpecError) as err:
        parse_kafka_workload({"producer": {"acks": 5}, "consumers": -1}, "spec.yaml: workload")
    fields = [f for f, _ in err.value.errors]
    assert "producer.acks" in fields and "consumers" in fields
    assert "spec.yaml" in str(err.value)
