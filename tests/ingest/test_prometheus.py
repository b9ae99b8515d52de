"""``tierscope import prometheus``: query_range answers as Prometheus's HTTP API documents them
(resultType matrix; values are [epoch seconds, "string"]), one file per query."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from tierscope.cli import main
from tierscope.errors import InputError
from tierscope.ingest import import_prometheus
from tierscope.store import read_run

T0 = 1_652_565_600


def answer(series: list[tuple[dict[str, str], list[float | str]]], step: float = 15) -> dict:
    return {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [
                {"metric": labels,
                 "values": [[T0 + i * step, str(v)] for i, v in enumerate(values)]}
                for labels, values in series
            ],
        },
    }  # fmt: skip


def write(path: Path, doc: object) -> Path:
    path.write_text(json.dumps(doc))
    return path


def test_series_become_components_with_units_read(tmp_path: Path) -> None:
    # rate(container_cpu_usage_seconds_total[1m]) * 100 per container: percent of one core
    cpu = write(tmp_path / "cpu.json", answer([
        ({"container": "carts", "pod": "carts-1"}, [10, 50, 100.2]),
        ({"container": "orders", "pod": "orders-1"}, [1, 2, "NaN"]),
    ]))  # fmt: skip
    # a counter: seconds of CPU, to become cores
    counter = write(tmp_path / "used.json", answer([
        ({"__name__": "container_cpu_usage_seconds_total", "container": "carts"}, [0, 7.5, 15]),
    ]))  # fmt: skip
    out, notes = import_prometheus(tmp_path / "run", [cpu])
    m = read_run(out).metrics
    assert m is not None and set(m["tier"]) == {"carts", "orders"}
    carts = m.filter(pl.col("tier") == "carts").sort("t")
    assert carts["metric"].unique().to_list() == ["cpu_cores"]
    assert carts["value"].to_list() == pytest.approx([0.1, 0.5, 1.002])
    assert carts["t"].to_list() == [0.0, 15.0, 30.0]
    assert m.filter(pl.col("tier") == "orders").height == 2  # NaN is no value
    assert any("percent of one core" in n for n in notes)
    out2, notes2 = import_prometheus(tmp_path / "run2", [counter])
    rate = read_run(out2).metrics.sort("t")["value"].to_list()  # type: ignore[union-attr]
    assert rate == pytest.approx([0.5, 0.5])  # 7.5 s of CPU per 15 s
    assert any("counters as rates" in n for n in notes2)


def test_the_component_label_and_the_metric_can_be_given(tmp_path: Path) -> None:
    mem = write(tmp_path / "q1.json", answer([({"service": "web", "job": "k8s"}, [1e8, 2e8])]))
    with pytest.raises(InputError, match="--metric"):
        import_prometheus(tmp_path / "a", [mem])  # q1 is no metric name
    out, _ = import_prometheus(tmp_path / "b", [mem], metric="mem", component_label=["service"])
    m = read_run(out).metrics
    assert m is not None and set(m["tier"]) == {"web"} and set(m["metric"]) == {"mem_bytes"}


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ({"status": "success", "data": {"resultType": "vector", "result": []}}, "matrix"),
        ({"status": "success", "data": {"resultType": "matrix", "result": []}}, "at least one"),
        (answer([({"instance": "x"}, [1])]), "a label naming the component"),
        (answer([({"job": "a"}, [1]), ({"job": "a"}, [2])]), "one series per component"),
        (
            {
                "data": {
                    "resultType": "matrix",
                    "result": [{"metric": {"job": "a"}, "values": [[1, 2, 3]]}],
                }
            },
            r"\[time, \"value\"\]",
        ),
        (answer([({"job": "a"}, ["abc"])]), "expected a number"),
        ("not json at all", "JSON"),
    ],
)
def test_bad_answers_are_named(
    tmp_path: Path, doc: object, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    f = tmp_path / "cpu.json"
    f.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(InputError, match=words):
        import_prometheus(tmp_path / "run", [f])
    assert main(["import", "prometheus", str(f), "--out", str(tmp_path / "run")]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
