"""The experiment spec: the documented contract example, overrides, setups and errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tierscope.errors import SpecError
from tierscope.spec.experiment import (
    apply_override,
    load_experiment,
    parse_experiment,
    parse_override,
    setup_specs,
)

#: The example of the runner issue, verbatim: its field names are a contract.
CONTRACT = """
name: demo
system:
  kind: embedded
  topology: 1/1/1
  tiers: {web: {cpu: 0.5}, app: {cpu: 0.5}, db: {cpu: 0.3}}
workload: {mode: closed, think_time: {dist: exp, mean: 0.5}, mix: browse-only}
sweep: {levels: [10, 20, 40, 60, 80, 100], repetitions: 1}
phases: {ramp_up: 5, steady: 20, ramp_down: 2}
monitor: {interval: 0.05}
faults: [{kind: stall, tier: app, at: 10, duration: 0.3, every: 5}]
"""


@pytest.fixture
def spec_file(tmp_path: Path) -> Path:
    path = tmp_path / "demo.yaml"
    path.write_text(CONTRACT)
    return path


def test_contract_example_parses_with_its_meaning(spec_file: Path) -> None:
    spec, _ = load_experiment(spec_file)
    assert spec.system.replicas == {"web": 1, "app": 1, "db": 1}
    assert spec.system.tier("db").cpu == 0.3
    assert spec.sweep.level_values == [10, 20, 40, 60, 80, 100]
    assert spec.phases.total == 27
    assert spec.monitor.interval == 0.05
    assert spec.workload_mode == "closed"
    stall = spec.faults[0]
    assert stall.windows(27) == [(10, 10.3), (15, 15.3), (20, 20.3), (25, 25.3)]


def test_packaged_demo_is_the_example_file() -> None:
    from tierscope.experiment import DEMO_SPEC

    examples = Path(__file__).resolve().parents[2] / "examples" / "demo.yaml"
    assert yaml.safe_load(DEMO_SPEC.read_text()) == yaml.safe_load(examples.read_text())
    assert yaml.safe_load(DEMO_SPEC.read_text()) == yaml.safe_load(CONTRACT)


def test_overrides_are_read_as_yaml_and_validated(spec_file: Path) -> None:
    spec, doc = load_experiment(
        spec_file,
        ["system.tiers.db.cpu=0.15", "phases.steady=10", "sweep.levels=[5, 15]", "faults=[]"],
    )
    assert spec.system.tier("db").cpu == 0.15
    assert spec.phases.steady == 10
    assert spec.sweep.level_values == [5, 15]
    assert spec.faults == []
    assert doc["system"]["tiers"]["db"]["cpu"] == 0.15


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("system.tiers.dbx.cpu=1", "system.tiers.dbx"),
        ("system.tiers.db.cpu=-0.2", "system.tiers.db.cpu"),
        ("phases.stedy=10", "phases.stedy"),
        ("system.topology=1/x/1", "system.topology"),
        ("faults.3.at=1", "faults.3"),
        ("name.first=x", "name"),
    ],
)
def test_bad_overrides_name_the_field(spec_file: Path, override: str, field: str) -> None:
    with pytest.raises(SpecError) as info:
        load_experiment(spec_file, [override])
    assert field in str(info.value)
    assert str(spec_file) in str(info.value)


def test_override_syntax() -> None:
    assert parse_override("a.b=[1, 2]") == ("a.b", [1, 2])
    assert parse_override("a=text") == ("a", "text")
    with pytest.raises(SpecError):
        parse_override("no-equals-sign")
    with pytest.raises(SpecError):
        parse_override("a..b=1")
    doc: dict = {"x": [{"y": 1}]}
    apply_override(doc, "x.0.y", 2, source="t")
    assert doc == {"x": [{"y": 2}]}


def test_setups_are_overrides_of_the_base(spec_file: Path) -> None:
    doc = yaml.safe_load(CONTRACT)
    doc["sweep"]["setups"] = [
        {"name": "base"},
        {"name": "plus-db", "set": {"system.topology": "1/1/2"}, "plus_one_of": "base"},
    ]
    spec = parse_experiment(doc)
    setups = setup_specs(spec, doc, source="x")
    assert list(setups) == ["base", "plus-db"]
    assert setups["base"].system.replicas["db"] == 1
    assert setups["plus-db"].system.replicas["db"] == 2
    doc["sweep"]["setups"][1]["plus_one_of"] = "nope"
    with pytest.raises(SpecError, match="plus_one_of"):
        parse_experiment(doc)


def test_no_setups_means_one_named_s0(spec_file: Path) -> None:
    spec, doc = load_experiment(spec_file)
    assert list(setup_specs(spec, doc, source="x")) == ["s0"]


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"sweep": {"levels": []}}, "sweep.levels"),
        ({"monitor": {"interval": 0}}, "monitor.interval"),
        ({"faults": [{"kind": "stall", "tier": "app", "duration": 1, "every": 0.5}]}, "faults[0]"),
        (
            {"faults": [{"kind": "stall", "tier": "app", "duration": 1, "replica": 3}]},
            "faults[0].replica",
        ),
        ({"system": {"tiers": {"db": {"memory": "lots"}}}}, "system.tiers.db.memory"),
        ({"system": {"tiers": {"db": {"cpuset": "one"}}}}, "system.tiers.db.cpuset"),
        ({"system": {"kind": "webstack", "topology": "1/1/2"}}, "topology must end in /1"),
    ],
)
def test_invalid_documents_name_the_field(patch: dict, field: str) -> None:
    doc = yaml.safe_load(CONTRACT)
    for key, value in patch.items():
        doc[key] = {**doc[key], **value} if isinstance(value, dict) else value
    with pytest.raises(SpecError) as info:
        parse_experiment(doc, source="spec.yaml")
    assert field in str(info.value)


def test_sizes_and_scalar_costs() -> None:
    doc = yaml.safe_load(CONTRACT)
    doc["system"]["tiers"]["db"] = {
        "memory": "256M",
        "cpu_cost": 0.002,
        "io_cost": {"post_comment": 4096},
    }
    tier = parse_experiment(doc).system.tier("db")
    assert tier.memory == 256 * 1024 * 1024
    assert tier.cpu_cost == {"default": 0.002}
    assert tier.io_cost == {"post_comment": 4096}
