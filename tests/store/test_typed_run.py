"""One typed run: each kind of run folder reads back as its typed spec (experiment, simulation,
simulated sweep, import, load), with its setups resolved, and a run.json whose kind or spec does
not fit is an InputError naming the field (exit 2 from the CLI), never a traceback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import polars as pl
import pytest

from tierscope.cli import main
from tierscope.errors import InputError
from tierscope.ingest.csv import import_csv
from tierscope.sim import record_simulated_sweep, record_simulation
from tierscope.spec import Model, Workload, load_model, load_workload
from tierscope.spec.experiment import ExperimentSpec
from tierscope.spec.runs import ImportSpec, SimulatedSweepSpec, plus_one_pairs, workload_mode
from tierscope.store import RunWriter, read_run

ROOT = Path(__file__).resolve().parents[2]
TWIN = ROOT / "examples" / "models" / "millibottleneck-twin.yaml"
WEB = ROOT / "examples" / "models" / "three-tier-web.yaml"

EXPERIMENT = {
    "name": "shop",
    "system": {"topology": "1/1/1", "tiers": {"db": {"cpu": 0.4}}},
    "workload": {"mode": "closed"},
    "sweep": {
        "levels": [5, 10],
        "setups": [
            {"name": "small"},
            {"name": "big", "set": {"system.tiers.db.cpu": 0.8}, "plus_one_of": "small"},
        ],
    },
    "monitor": {"interval": 0.1},
}


def test_an_experiment_run_reads_back_as_its_spec_and_setups(tmp_path: Path) -> None:
    RunWriter.create(tmp_path / "run", kind="experiment", spec=EXPERIMENT).close()
    run = read_run(tmp_path / "run")
    assert run.kind == "experiment" and isinstance(run.spec, ExperimentSpec)
    assert run.name == "shop" and run.experiment is run.spec
    # each setup's own overrides applied to the spec as written
    assert set(run.setups) == {"small", "big"}
    assert run.setup("small").system.tier("db").cpu == pytest.approx(0.4)
    assert run.setup("big").system.tier("db").cpu == pytest.approx(0.8)
    with pytest.raises(InputError, match=r"--setup.*one of small, big"):
        run.setup("huge")
    # what the analysis takes from it: the "+1 node" companion, the workload, the interval
    assert plus_one_pairs(run.spec) == {"small": "big"}
    assert workload_mode(run.spec) == "closed"
    assert run.interval == pytest.approx(0.1)
    assert list(run.graph.names) == ["web", "app", "db"]


def test_simulated_runs_read_back_as_their_models(tmp_path: Path) -> None:
    record_simulation(load_model(TWIN), tmp_path / "sim", precision=0.001, max_time=2.0)
    sim = read_run(tmp_path / "sim")
    assert sim.kind == "simulation" and isinstance(sim.spec, Model)
    assert [s.name for s in sim.spec.stations] == [s.name for s in load_model(TWIN).stations]
    with pytest.raises(InputError, match="measured run folder"):
        _ = sim.experiment

    model = load_model(WEB)
    record_simulated_sweep(
        {"base": model, "plus": model}, tmp_path / "sweep", levels=[5, 20], steady=3,
        ramp_up=1, plus_one_of={"plus": "base"},
    )  # fmt: skip
    sweep = read_run(tmp_path / "sweep")
    assert sweep.kind == "simulated-sweep" and isinstance(sweep.spec, SimulatedSweepSpec)
    assert set(sweep.spec.models) == {"base", "plus"}
    assert sweep.spec.models["base"].stations == model.stations
    assert plus_one_pairs(sweep.spec) == {"base": "plus"}
    assert list(sweep.graph.names) == [s.name for s in model.stations]


def test_an_import_keeps_its_time_origin(tmp_path: Path) -> None:
    csv = tmp_path / "m.csv"
    pl.DataFrame(
        {
            "ts": ["2022-05-17T18:37:57+00:00", "2022-05-17T18:37:58+00:00"],
            "tier": ["db", "db"],
            "metric": ["cpu_util", "cpu_util"],
            "value": [0.2, 0.3],
        }
    ).write_csv(csv)
    run = read_run(import_csv(tmp_path / "run", metrics=csv))
    assert run.kind == "import" and isinstance(run.spec, ImportSpec)
    assert run.spec.files == {"metrics": str(csv)}
    assert run.spec.time_origin == "2022-05-17T18:37:57+00:00"
    assert run.name == "run" and run.interval == pytest.approx(1.0)


def test_a_load_run_reads_back_as_its_workload(tmp_path: Path) -> None:
    workload = load_workload(ROOT / "examples" / "workloads" / "shop-sessions.yaml")
    doc = workload.model_dump(mode="json", exclude_none=True)  # as tierscope load records it
    RunWriter.create(tmp_path / "run", kind="load", spec=doc).close()
    run = read_run(tmp_path / "run")
    assert run.kind == "load" and isinstance(run.spec, Workload)
    assert run.spec == workload


@pytest.fixture(scope="module")
def swept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("swept") / "run"
    record_simulated_sweep({"s0": load_model(WEB)}, path, levels=[5, 20], steady=2, ramp_up=1)
    return path


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"kind": "mystery"}, "field 'kind': expected one of experiment, simulation"),
        ({"spec": {"sweep": "every level"}}, "field 'spec'"),
        ({"spec": ["not", "a", "spec"]}, "field 'spec'"),
    ],
)
def test_a_run_json_that_does_not_fit_its_kind_exits_2(
    swept: Path, tmp_path: Path, change: dict, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = Path(shutil.copytree(swept, tmp_path / "run"))
    info = json.loads((path / "run.json").read_text()) | change
    (path / "run.json").write_text(json.dumps(info))
    with pytest.raises(InputError, match=words):
        _ = read_run(path).spec
    capsys.readouterr()
    assert main(["analyze", str(path)]) == 2
    err = capsys.readouterr().err
    assert words.split(":")[0] in err and "Traceback" not in err


def test_a_writer_refuses_an_unknown_kind(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="kind 'mystery'"):
        RunWriter.create(tmp_path / "run", kind="mystery", spec={})  # type: ignore[arg-type]
    assert not (tmp_path / "run").exists()
