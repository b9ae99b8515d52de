"""The cassandra spec (issue 19's contract): the example parses with its meaning (YCSB's
workload mixes, the consistency level per operation type, the routing), and every refusal the
issue lists (RF above the nodes, an unknown consistency level or YCSB workload, missing Java or
Maven) is an exit 2 naming the field."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from tierscope.cli import main
from tierscope.errors import SpecError
from tierscope.spec.cassandra import WORKLOADS, replicas_needed
from tierscope.spec.experiment import parse_experiment

#: The issue's contract example, verbatim.
CONTRACT = """
system:
  kind: cassandra
  nodes: 3
  components: {node: {cpu: 0.5, memory: 1G}}
  keyspace: {replication: 3}
workload:
  mode: closed
  ycsb: {workload: b, records: 100000, distribution: zipfian, field_length: 100}
  consistency: quorum            # one | quorum | all; read_consistency / write_consistency override
  routing: round-robin           # round-robin | token-aware
sweep: {levels: [4, 8, 16, 32]}
"""


def doc() -> dict[str, Any]:
    return copy.deepcopy(yaml.safe_load(CONTRACT))


def test_contract_example_parses_with_its_meaning() -> None:
    spec = parse_experiment(doc())
    assert spec.system.replicas == {"node": 3}
    assert spec.system.graph["node"].cpu == 0.5
    assert spec.system.cassandra_keyspace.replication == 3
    w = spec.cassandra_workload
    assert (w.mode, w.routing, w.ycsb.records, w.ycsb.field_length) == (
        "closed", "round-robin", 100_000, 100)  # fmt: skip
    assert w.ycsb.mix == {"read": 0.95, "update": 0.05}  # YCSB's workload B
    assert w.consistency_of("read") == w.consistency_of("update") == "quorum"
    assert spec.sweep.level_values == [4, 8, 16, 32]


def test_ycsb_workloads_and_consistency_overrides() -> None:
    d = doc()
    d["workload"]["ycsb"] = {"workload": "workloadE"}
    d["workload"]["read_consistency"] = "ONE"
    d["workload"]["write_consistency"] = "all"
    w = parse_experiment(d).cassandra_workload
    assert w.ycsb.mix == {"scan": 0.95, "insert": 0.05}
    assert w.ycsb.request_distribution == "zipfian"
    assert (w.consistency_of("scan"), w.consistency_of("insert")) == ("one", "all")
    assert w.levels_used == {"one", "all"}
    assert WORKLOADS["d"] == ({"read": 0.95, "insert": 0.05}, "latest")
    assert [replicas_needed(cl, 3) for cl in ("one", "quorum", "all")] == [1, 2, 3]
    d["workload"]["ycsb"] = {"workload": "a", "proportions": {"read": 0.2, "scan": 0.8}}
    assert parse_experiment(d).cassandra_workload.ycsb.mix == {"read": 0.2, "scan": 0.8}


@pytest.mark.parametrize(
    ("path", "value", "field", "says"),
    [
        (("system", "keyspace", "replication"), 4, "system.keyspace.replication",
         "as many nodes"),
        (("system", "nodes"), 2, "system.keyspace.replication", "as many nodes"),
        (("workload", "consistency"), "two", "workload.consistency", "one, quorum or all"),
        (("workload", "read_consistency"), "any", "workload.read_consistency",
         "one, quorum or all"),
        (("workload", "ycsb", "workload"), "g", "workload.ycsb.workload", "a, b, c, d, e or f"),
        (("workload", "ycsb", "distribution"), "hotspot", "workload.ycsb.distribution",
         "zipfian"),
        (("workload", "ycsb", "proportions"), {"read": 0.5}, "workload.ycsb.proportions",
         "sum to 0.5"),
        (("workload", "routing"), "random", "workload.routing", "round-robin"),
        (("workload", "ycsb", "records"), 0, "workload.ycsb.records", "greater than"),
        (("system", "components", "node", "replicas"), 2, "system.components.node.replicas",
         "cpu, cpuset and memory"),
        (("system", "topology"), "1/1/1", "system.topology", "not tiers"),
        (("system", "brokers"), 2, "system.brokers", "belongs to kind kafka"),
        (("workload", "think_time"), 0.5, None, None),  # valid: closed users think
    ],
)  # fmt: skip
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


def test_cassandra_fields_belong_to_cassandra() -> None:
    base = {"sweep": {"levels": [1]}}
    for extra, field in (({"nodes": 2}, "system.nodes"), ({"keyspace": {}}, "system.keyspace")):
        with pytest.raises(SpecError) as err:
            parse_experiment({**base, "system": {"kind": "kafka", **extra}})
        assert field in [f for f, _ in err.value.errors]
    d = doc()
    d["faults"] = [{"kind": "network", "link": "producer-brokers", "duration": 1,
                    "delay": {"dist": "constant", "mean": 0.01}}]  # fmt: skip
    with pytest.raises(SpecError, match="stall and cpu_hog"):
        parse_experiment(d)


def test_missing_java_or_maven_exits_2_saying_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("cassandra", reason="pip install 'tierscope[cassandra]'")
    from tierscope.experiment import artifacts
    from tierscope.experiment.targets import cassandra as target

    spec = tmp_path / "c.yaml"
    spec.write_text(yaml.safe_dump(doc()))
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
    assert not (tmp_path / "run").exists()


def test_the_example_is_a_valid_spec() -> None:
    from tierscope.spec.experiment import load_experiment

    spec, _ = load_experiment(Path(__file__).resolve().parents[2] / "examples" / "cassandra.yaml")
    assert spec.system.kind == "cassandra" and spec.cassandra_workload.ycsb.mix


def test_the_warm_up_ends_when_the_throughput_stops_climbing() -> None:
    from tierscope.load.cassandra import warmed

    # the shape measured here uncapped (5 s windows): ONE climbed for 40 s, then held
    one = [800.0, 800, 1200, 1000, 1800, 2800, 3100, 3600, 3400, 3000, 3300]
    ends = [n for n in range(1, len(one) + 1) if warmed(one[:n])]
    assert ends == [11]  # 55 s: 3,233 against 3,167 req/s; at 50 s 3,333 against 2,567
    assert warmed([2000.0] * 6) and not warmed([2000.0] * 5)  # six windows at the least
    assert not warmed([0.0] * 6)  # nothing served yet is no plateau
