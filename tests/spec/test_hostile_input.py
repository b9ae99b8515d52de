"""Input a new user (or a fuzzer) can give the spec layer: each is refused with a SpecError that
names the field, on one line per problem, short, and at once (no recursion, no blow-up)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tierscope.errors import VALUE_CHARS, InputError, SpecError, clip, show_value
from tierscope.spec import load_model, parse_model
from tierscope.spec._load import MAX_DEPTH, MAX_VALUES, shape_problem
from tierscope.spec.experiment import (
    check_host,
    host_cpus,
    host_memory,
    load_experiment,
    parse_experiment,
    parse_override,
)

ONE_STATION: dict[str, Any] = {"stations": [{"name": "cpu"}]}


def _closed(**cls: Any) -> dict[str, Any]:
    return {**ONE_STATION, "classes": [{"name": "c", "demands": {"cpu": 0.1}, **cls}]}


def _refused(path: Path) -> SpecError:
    t0 = time.monotonic()
    with pytest.raises(SpecError) as err:
        load_model(path)
    assert time.monotonic() - t0 < 5
    for line in str(err.value).splitlines():
        assert len(line) < 400
    return err.value


# ---- messages ------------------------------------------------------------------------------------


def test_messages_cut_long_values_short_and_stay_on_one_line() -> None:
    err = InputError("x" * 10**6, "y" * (64 << 20), "a\nmulti-line\nexpectation", source="f")
    text = str(err)
    assert "\n" not in text and len(text) < 500 and "…" in text
    assert clip("a" * 200) == "a" * (VALUE_CHARS - 1) + "…"
    assert clip("short") == "short"
    assert clip("/very/long/" * 30 + "model.yaml", 40, middle=True).endswith("model.yaml")
    assert show_value(list(range(10**6))).endswith("...]")


def test_spec_errors_list_at_most_twenty_problems() -> None:
    err = SpecError("m.yaml", [(f"stations[{i}]", "bad") for i in range(1000)])
    lines = str(err).splitlines()
    assert len(lines) == 21 and "980 more problems" in lines[-1]


# ---- numbers -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "field"),
    [
        ({"population": True}, "classes[0].population"),
        ({"population": 1, "think_time": True}, "classes[0].think_time"),
        ({"population": 10**19}, "classes[0].population"),
        ({"population": 1, "demands": {"cpu": 1e300}}, "classes[0].demands.cpu"),
        ({"population": 1, "demands": {"cpu": 1e-300}}, "classes[0].demands.cpu"),
    ],
)
def test_numbers_outside_what_a_solver_can_take_are_refused(cls: dict, field: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_model(_closed(**cls))
    assert f"field '{field}'" in str(err.value)


def test_a_class_with_jobs_but_no_demand_or_think_time_is_refused() -> None:
    doc = _closed(population=3, demands={"cpu": 0.0})
    with pytest.raises(SpecError, match=r"classes\[0\].*unbounded"):
        parse_model(doc)
    parse_model(_closed(population=3, demands={"cpu": 0.0}, think_time=1.0))
    parse_model(_closed(population=0, demands={"cpu": 0.0}))


# ---- document shape ------------------------------------------------------------------------------


@pytest.mark.parametrize("opener", ["[", "{a: "])
def test_deeply_nested_yaml_is_refused_not_a_recursion_error(tmp_path: Path, opener: str) -> None:
    depth = 3000
    closer = "]" if opener == "[" else "}"
    path = tmp_path / "deep.yaml"
    path.write_text("stations: " + opener * depth + "1" * (opener != "[") + closer * depth + "\n")
    assert "nested more than" in str(_refused(path))


def test_nesting_just_below_the_yaml_limit_is_refused_by_depth(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("stations: " + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "\n")
    assert f"nested more than {MAX_DEPTH} levels" in str(_refused(path))


def test_alias_bombs_and_self_references_are_refused(tmp_path: Path) -> None:
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")  # 10^9 values once expanded
    assert f"{MAX_VALUES:,} values" in str(_refused(bomb))
    loop = tmp_path / "loop.yaml"
    loop.write_text("stations: &s [*s]\n")
    assert "contains itself" in str(_refused(loop))
    shared = [list(range(10))] * 100  # aliases used a few times are fine
    assert shape_problem({"x": shared}) is None


def test_yaml_values_python_cannot_build_are_malformed_yaml(tmp_path: Path) -> None:
    path = tmp_path / "date.yaml"
    path.write_text("name: 2001-13-45\n")
    assert "malformed YAML" in str(_refused(path))


def test_overrides_get_the_same_checks() -> None:
    with pytest.raises(SpecError, match="nested more than"):
        parse_override("sweep.levels=" + "[" * 3000 + "]" * 3000)
    assert parse_override("sweep.levels=[10, 20]") == ("sweep.levels", [10, 20])
    assert parse_override("name=null") == ("name", None)


# ---- experiment spec: names and host limits ------------------------------------------------------


@pytest.mark.parametrize("name", ["../../x", "a/b", ".hidden", "..", "", "x" * 101, "a b"])
def test_run_names_are_safe_folder_names(name: str) -> None:
    with pytest.raises(SpecError, match="field 'name'"):
        parse_experiment({"name": name, "sweep": {"levels": [1]}})
    with pytest.raises(SpecError, match=r"sweep\.setups\[0\]\.name"):
        parse_experiment({"sweep": {"levels": [1], "setups": [{"name": name or "/"}]}})


def test_good_names_still_parse() -> None:
    spec = parse_experiment(
        {"name": "db-bottleneck_2.1", "sweep": {"levels": [1], "setups": [{"name": "app+1"}]}}
    )
    assert spec.name == "db-bottleneck_2.1"


@pytest.mark.parametrize(
    ("tier", "field", "needle"),
    [
        ({"memory": -5}, "memory", "> 0"),
        ({"memory": 0}, "memory", "> 0"),
        ({"cpuset": "3-1"}, "cpuset", "low-high"),
        ({"cpuset": "1,,2"}, "cpuset", "such as"),
    ],
)
def test_bad_limits_are_refused_by_the_schema(tier: dict, field: str, needle: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_experiment({"system": {"tiers": {"db": tier}}, "sweep": {"levels": [1]}})
    assert f"system.tiers.db.{field}" in str(err.value) and needle in str(err.value)


def test_limits_are_checked_against_this_host(tmp_path: Path) -> None:
    absent = max(host_cpus()) + 1
    memory = host_memory()
    assert memory is not None
    spec = parse_experiment(
        {
            "system": {"tiers": {"db": {"cpuset": f"0,{absent}"}, "app": {"memory": 2 * memory}}},
            "sweep": {"levels": [1]},
        }
    )
    with pytest.raises(SpecError) as err:
        check_host(spec, source="spec.yaml")
    text = str(err.value)
    assert f"system.tiers.db.cpuset': CPU {absent} is not available" in text
    assert "system.tiers.app.memory" in text
    path = tmp_path / "spec.yaml"
    path.write_text(f"system: {{tiers: {{db: {{cpuset: '{absent}'}}}}}}\nsweep: {{levels: [1]}}\n")
    with pytest.raises(SpecError, match="cpuset"):
        load_experiment(path)
    ok = parse_experiment(
        {"system": {"tiers": {"db": {"cpuset": str(min(host_cpus()))}}}, "sweep": {"levels": [1]}}
    )
    check_host(ok, source="spec.yaml")
