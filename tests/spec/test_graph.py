"""Components and call graphs in the experiment spec (issue 16's contract), the typed graph, and
the graph a run folder carries."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import polars as pl
import pytest
import yaml

from tierscope import cli
from tierscope.errors import SpecError
from tierscope.spec.experiment import parse_experiment
from tierscope.spec.graph import THREE_TIERS, Call, Component, Graph, cycle
from tierscope.store import RunWriter, read_run

#: The example of the issue, verbatim: its field names are a contract.
CONTRACT = """
name: shop
system:
  kind: embedded                 # embedded | webstack | attach (kafka, cassandra: next issues)
  entry: gateway                 # where the load generator's requests enter
  components:
    gateway:      {cpu: 0.5, calls: [{to: catalogue}, {to: orders, p: 0.3}]}
    catalogue:    {cpu: 0.4, cpu_cost: 0.002, calls: [{to: catalogue-db}]}
    catalogue-db: {cpu: 0.3, cpu_cost: 0.003, storage: true}
    orders:       {cpu: 0.4, cpu_cost: 0.001, parallel: true, calls: [{to: payment}, {to: orders-db}]}
    payment:      {cpu: 0.3, cpu_cost: 0.004}
    orders-db:    {cpu: 0.3, cpu_cost: 0.002, storage: true}
workload: {mode: closed, think_time: {dist: exp, mean: 0.5}}
sweep: {levels: [10, 30, 60, 90], repetitions: 1}
phases: {ramp_up: 3, steady: 15, ramp_down: 1}
faults: [{kind: stall, tier: catalogue-db, at: 2, duration: 0.3, every: 3}]
"""  # noqa: E501 (verbatim)


def contract() -> dict:
    return yaml.safe_load(CONTRACT)


def test_the_contract_example_is_a_graph_front_to_back() -> None:
    spec = parse_experiment(contract())
    graph = spec.system.graph
    assert graph.entry == "gateway"
    assert graph.names == ["gateway", "catalogue", "catalogue-db", "orders", "payment", "orders-db"]
    assert graph.edges() == [
        ("gateway", "catalogue"), ("gateway", "orders"), ("catalogue", "catalogue-db"),
        ("orders", "payment"), ("orders", "orders-db"),
    ]  # fmt: skip
    assert graph["orders"].parallel and graph["orders-db"].storage and graph["payment"].cpu == 0.3
    assert graph.downstream("orders") == {"payment", "orders-db"}
    assert graph.downstream("gateway") == set(graph.names) - {"gateway"}
    assert "payment" not in graph.downstream("catalogue")  # another branch, not behind it
    assert [graph.depth(n) for n in graph.names] == [0, 1, 2, 1, 2, 2]
    # visit ratios: p x times along every path from the entry
    assert graph.visits() == pytest.approx(
        {"gateway": 1, "catalogue": 1, "catalogue-db": 1, "orders": 0.3, "payment": 0.3,
         "orders-db": 0.3}
    )  # fmt: skip
    assert spec.faults[0].tier == "catalogue-db"
    assert spec.system.replicas == dict.fromkeys(graph.names, 1)


def test_visits_multiply_along_paths_and_add_over_them() -> None:
    # a -> b (p 0.5, twice per call) -> d (3 times); a -> c -> d: d is reached both ways
    graph = Graph.build(
        [
            Component("a", calls=(Call("b", 0.5, 2), Call("c"))),
            Component("b", calls=(Call("d", 1.0, 3),)),
            Component("c", calls=(Call("d"),)),
            Component("d"),
        ],
        "a",
    )
    assert graph.visits() == {"a": 1.0, "b": 1.0, "c": 1.0, "d": 4.0}
    assert graph.depth("d") == 2 and graph.names[-1] == "d"


def test_the_three_tier_shorthand_is_the_chain_web_app_db() -> None:
    doc = contract()
    doc["system"] = {"topology": "1/2/1", "tiers": {"db": {"cpu": 0.3}, "web": {"cpu": 0.5}}}
    doc["faults"] = [{"kind": "stall", "tier": "app", "duration": 0.3}]
    graph = parse_experiment(doc).system.graph
    assert graph.names == list(THREE_TIERS) and graph.entry == "web"
    assert graph.edges() == [("web", "app"), ("app", "db")]
    assert [c.replicas for c in graph.components] == [1, 2, 1]
    assert [c.cpu for c in graph.components] == [0.5, None, 0.3]
    assert graph["db"].storage and not graph.inferred


@pytest.mark.parametrize(
    ("path", "value", "field", "words"),
    [
        ("system.components.payment.calls", [{"to": "nope"}],
         "system.components.payment.calls[0].to", "'nope' is not a component"),
        ("system.components.payment.calls", [{"to": "gateway"}],
         "system.components", "cycle gateway -> orders -> payment -> gateway"),
        ("system.components.payment.calls", [{"to": "payment"}],
         "system.components.payment.calls[0].to", "cannot call itself"),
        ("system.entry", "nope", "system.entry", "'nope' is not a component"),
        ("system.entry", "orders", "system.components", "never called from the entry orders"),
        ("system.topology", "1/2/1", "system.topology", "not both"),
        ("system.kind", "webstack", "system.components", "nginx -> app -> PostgreSQL"),
        ("system.kind", "attach", "system.components.gateway", "exactly one of pid, match"),
        ("faults", [{"kind": "stall", "tier": "db", "duration": 0.3}],
         "faults[0].tier", "'db' is not a component"),
        ("faults", [{"kind": "stall", "tier": "payment", "duration": 0.3, "replica": 2}],
         "faults[0].replica", "payment has 1 replica(s)"),
        ("system.components.payment.calls", [{"to": "orders-db", "p": 1.5}],
         "system.components.payment.calls[0].p", "less than or equal to 1"),
        ("system.components.payment.calls", [{"to": "orders-db", "times": 0}],
         "system.components.payment.calls[0].times", "greater than or equal to 1"),
        ("system.components.payment.match", "([", "system.components.payment.match",
         "regular expression"),
    ],
)  # fmt: skip
def test_bad_graphs_name_the_field(path: str, value: object, field: str, words: str) -> None:
    doc = contract()
    node = doc
    *parents, last = path.split(".")
    for key in parents:
        node = node[key]
    node[last] = value
    with pytest.raises(SpecError) as info:
        parse_experiment(doc, source="shop.yaml")
    text = str(info.value)
    assert f"field '{field}'" in text and words in text, text


def test_component_names_and_roots() -> None:
    doc = contract()
    doc["system"]["components"]["bad/name"] = {}
    with pytest.raises(SpecError, match="letters, digits, '-' and '_'"):
        parse_experiment(doc)
    doc = contract()
    del doc["system"]["entry"]  # gateway is the only component nobody calls: the entry
    assert parse_experiment(doc).system.entry_component == "gateway"
    doc["system"]["components"]["batch"] = {"calls": [{"to": "orders-db"}]}
    with pytest.raises(SpecError, match="nobody calls are gateway, batch"):
        parse_experiment(doc)


def test_attach_needs_a_locator_per_component_and_the_entry_url() -> None:
    doc = contract()
    doc["system"]["kind"] = "attach"
    for name, comp in doc["system"]["components"].items():
        comp["match"] = f"{name}-server"
    doc["faults"] = []
    with pytest.raises(SpecError) as info:
        parse_experiment(doc)
    assert "system.components.gateway.url" in str(info.value)
    doc["system"]["components"]["gateway"]["url"] = "http://127.0.0.1:8080/"
    doc["system"]["components"]["payment"] = {"pid": 4242, "calls": []}
    spec = parse_experiment(doc)
    assert spec.system.components["payment"].pid == [4242]


def test_graph_json_round_trip_and_cycles() -> None:
    graph = parse_experiment(contract()).system.graph
    again = Graph.from_json(json.loads(json.dumps(graph.to_json())))
    assert again == graph and again.visits() == graph.visits()
    assert cycle({"a": ["b"], "b": ["c"], "c": ["a"], "d": []}) == ["a", "b", "c", "a"]
    assert cycle({"a": ["b", "c"], "b": ["c"], "c": []}) == []
    with pytest.raises(ValueError, match="cycle"):
        Graph.build([Component("a", calls=(Call("b"),)), Component("b", calls=(Call("a"),))], "a")
    with pytest.raises(ValueError, match="not a components document"):
        Graph.from_json({"components": {"a": {"calls": [{"p": 1}]}}})


def test_a_run_carries_its_graph_and_interval(tmp_path: Path) -> None:
    spec = parse_experiment(contract())
    with RunWriter.create(tmp_path / "run", kind="experiment", spec=contract(),
                          graph=spec.system.graph, interval=0.02):  # fmt: skip
        pass
    run = read_run(tmp_path / "run")
    assert run.graph == spec.system.graph and run.interval == 0.02
    # run.json without them (written before they were recorded): the spec's
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    info.pop("components"), info.pop("interval")
    (tmp_path / "run" / "run.json").write_text(json.dumps(info))
    run = read_run(tmp_path / "run")
    assert run.graph == spec.system.graph and run.interval == 0.05


def test_without_a_graph_the_order_requests_reach_components_is_a_chain(tmp_path: Path) -> None:
    # imported traces: each request visits edge, then api, then store (names nobody knows)
    rows = []
    for i in range(50):
        for j, tier in enumerate(("edge", "api", "store")):
            rows.append({"setup": "s0", "level": 1.0, "rep": 0, "tier": tier,
                         "request_id": f"r{i}", "interaction": "get", "status": 200,
                         "start": i + 0.01 * j, "end": i + 0.1 - 0.01 * j})  # fmt: skip
    with RunWriter.create(tmp_path / "run", kind="import", spec={}) as run:
        run.write("requests", pl.DataFrame(rows))
    graph = read_run(tmp_path / "run").graph
    assert graph.inferred and graph.names == ["edge", "api", "store"]
    assert graph.downstream("edge") == {"api", "store"}


def test_run_checks_the_graph_before_it_starts_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec_file = tmp_path / "shop.yaml"
    spec_file.write_text(CONTRACT.replace("{to: orders, p: 0.3}", "{to: order, p: 0.3}"))
    code = cli.main(["run", str(spec_file), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "system.components.gateway.calls[1].to" in err
    assert not (tmp_path / "out").exists()


def test_a_fault_the_target_cannot_inject_is_refused_before_it_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tierscope.experiment.targets import target_for

    monkeypatch.setattr(type(target_for("embedded")), "faults", frozenset({"stall"}))
    doc = contract()
    doc["faults"] = [{"kind": "cpu_hog", "tier": "payment", "at": 1, "duration": 1}]
    spec_file = tmp_path / "shop.yaml"
    spec_file.write_text(yaml.safe_dump(doc))
    assert cli.main(["run", str(spec_file), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "faults[0].kind" in err and "injects stall, not cpu_hog" in err
    assert not (tmp_path / "out").exists()


def test_long_chains_and_too_many_components() -> None:
    names = [f"c{i}" for i in range(999)]
    chain = {n: {"calls": [{"to": m}]} for n, m in itertools.pairwise(names)}
    chain[names[-1]] = {"calls": [{"to": names[0]}]}  # a loop 999 calls long
    doc = contract()
    doc["system"] = {"entry": "c0", "components": chain}
    doc["faults"] = []
    with pytest.raises(SpecError, match="cycle c0 -> c1 -> c2"):
        parse_experiment(doc)
    chain[names[-1]] = {}
    graph = parse_experiment(doc).system.graph
    assert graph.names == names and graph.depth(names[-1]) == 998
    doc["system"]["components"] = {f"c{i}": {} for i in range(1001)}
    with pytest.raises(SpecError, match="at most 1,000 components"):
        parse_experiment(doc)
