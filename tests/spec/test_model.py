"""The model schema reports every problem with its location."""

from __future__ import annotations

from typing import Any

import pytest

from tierscope.errors import SpecError
from tierscope.qn.network import Network
from tierscope.spec import parse_model


def _doc(**cls: Any) -> dict[str, Any]:
    base = {"name": "c", "population": 3, "visits": {"cpu": 2}, "service": {"cpu": 0.1}}
    base.update(cls)
    return {"stations": [{"name": "cpu"}, {"name": "disk"}], "classes": [base]}


def _locations(doc: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_model(doc, source="m.yaml")
    assert str(info.value).startswith("m.yaml: field '")
    return [loc for loc, _ in info.value.errors]


def test_valid_model_compiles() -> None:
    net = Network.from_model(parse_model(_doc()))
    assert net.demands[0, 0] == pytest.approx(0.2)


def test_unknown_station_in_visits() -> None:
    assert _locations(_doc(visits={"dsk": 1}, service={"dsk": 0.1})) == [
        "classes[0].visits.dsk",
        "classes[0].service.dsk",
    ]


def test_population_and_arrival_rate_together() -> None:
    with pytest.raises(SpecError, match="exactly one of 'population'"):
        parse_model(_doc(arrival_rate=1.0))


def test_negative_service_time_names_the_station() -> None:
    assert _locations(_doc(service={"cpu": -0.1})) == ["classes[0].service.cpu"]


def test_negative_think_time() -> None:
    assert _locations(_doc(think_time=-1)) == ["classes[0].think_time"]


def test_missing_service_for_visited_station() -> None:
    assert _locations(_doc(visits={"cpu": 1, "disk": 1})) == ["classes[0].service"]


def test_unknown_field_is_rejected() -> None:
    assert _locations(_doc(popullation=3)) == ["classes[0].popullation"]


def test_duplicate_station_names() -> None:
    doc = _doc()
    doc["stations"].append({"name": "cpu"})
    assert _locations(doc) == ["stations"]


def test_closed_routing_rows_must_sum_to_one() -> None:
    doc = _doc(
        visits=None,
        routing={"cpu": {"disk": 0.5}, "disk": {"cpu": 1.0}},
        service={"cpu": 0.1, "disk": 0.2},
    )
    del doc["classes"][0]["visits"]
    assert _locations(doc) == ["classes[0].routing.cpu"]


def test_closed_routing_gives_visit_ratios() -> None:
    doc = _doc(
        routing={"cpu": {"disk": 0.25, "cpu": 0.75}, "disk": {"cpu": 1.0}},
        service={"cpu": 0.1, "disk": 0.2},
        reference="cpu",
    )
    del doc["classes"][0]["visits"]
    net = Network.from_model(parse_model(doc))
    assert net.visits[0].tolist() == pytest.approx([1.0, 0.25])


def test_distribution_service_uses_its_mean() -> None:
    doc = _doc(service={"cpu": {"dist": "uniform", "low": 0.1, "high": 0.3}})
    assert Network.from_model(parse_model(doc)).service[0, 0] == pytest.approx(0.2)


def test_distribution_missing_parameter() -> None:
    assert _locations(_doc(service={"cpu": {"dist": "erlang", "mean": 0.1}})) == [
        "classes[0].service.cpu"
    ]


def test_servers_must_be_positive_integers() -> None:
    doc = _doc()
    doc["stations"][0]["servers"] = 0
    assert _locations(doc) == ["stations[0].servers"]


def test_schedule_from_csv_trace(tmp_path: Any) -> None:
    from tierscope.spec import load_model

    (tmp_path / "load.csv").write_text("t,value\n0,1.0\n10,2.5\n20,1.0\n")
    (tmp_path / "m.yaml").write_text(
        "stations: [{name: cpu}]\n"
        "classes: [{name: c, arrival_rate: 1.0, demands: {cpu: 0.1}}]\n"
        "simulation: {schedules: [{class: c, file: load.csv}]}\n"
    )
    sch = load_model(tmp_path / "m.yaml").simulation.schedules[0]
    assert sch.times == [0, 10, 20] and sch.values == [1.0, 2.5, 1.0]


def test_schedule_csv_with_bad_row_names_file_and_line(tmp_path: Any) -> None:
    from tierscope.spec import load_model

    (tmp_path / "load.csv").write_text("t,value\n0,1.0\n10,abc\n")
    (tmp_path / "m.yaml").write_text(
        "stations: [{name: cpu}]\n"
        "classes: [{name: c, arrival_rate: 1.0, demands: {cpu: 0.1}}]\n"
        "simulation: {schedules: [{class: c, file: load.csv}]}\n"
    )
    with pytest.raises(SpecError, match=r"simulation.schedules\[0\].file.*line 3"):
        load_model(tmp_path / "m.yaml")


def test_class_switching_errors_name_the_routing_entry() -> None:
    doc = {
        "stations": [{"name": "cpu"}, {"name": "disk"}],
        "classes": [
            {
                "name": "a",
                "population": 2,
                "routing": {"cpu": {"disk:zz": 0.5, "disk:b": 0.25, "disk:o": 0.25}},
                "service": {"cpu": 0.1, "disk": 0.1},
            },
            {"name": "b", "population": 0, "routing": {"cpu": {"cpu": 1.0}}, "service": {}},
            {"name": "o", "arrival_rate": 1, "demands": {"cpu": 0.1}},
            {"name": "q", "arrival_rate": 0, "routing": {"cpu": {}}, "service": {"cpu": 0.1}},
        ],
    }
    with pytest.raises(SpecError) as info:
        parse_model(doc, source="m.yaml")
    got = dict(info.value.errors)
    assert "unknown class 'zz'" in got["classes[0].routing.cpu.disk:zz"]
    # b has no service time at disk (and, closed, no row from it); o is open and not routed
    assert "no service time at 'disk'" in got["classes[0].routing.cpu.disk:b"]
    assert "open and a closed class" in got["classes[0].routing.cpu.disk:o"]
    assert "no class switches into" in got["classes[3].arrival_rate"]


def test_station_names_with_colons_are_stations() -> None:
    doc = {
        "stations": [{"name": "db:primary"}, {"name": "web"}],
        "classes": [
            {
                "name": "c",
                "population": 1,
                "routing": {"web": {"db:primary": 1.0}, "db:primary": {"web": 1.0}},
                "service": {"web": 0.1, "db:primary": 0.2},
            }
        ],
    }
    net = Network.from_model(parse_model(doc))
    assert net.visits.tolist() == [[1.0, 1.0]]
    assert not net.simulation_only
