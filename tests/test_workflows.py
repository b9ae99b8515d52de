"""The application layer: Python callers get what the CLI prints and writes, from one pipeline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.analysis.test_bottleneck import capped
from tierscope import cli, workflows
from tierscope.errors import InputError
from tierscope.sim import record_simulated_sweep
from tierscope.store import read_analysis


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("wf") / "run"
    model = capped(0.002, 0.004, 0.02)  # the database limits
    record_simulated_sweep({"s0": model}, run, levels=[1, 20, 60], steady=20, ramp_up=2)
    return run


def test_python_and_cli_get_the_same_analysis(
    sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    options = workflows.analysis_options(["permutations=99"], window_s=2.0)
    doc = workflows.analyse_run(sweep, options, write=False)
    assert doc["bottlenecks"][-1]["primary"]["tier"] == "db"
    assert read_analysis(sweep) is None  # write=False wrote nothing
    code = cli.main(
        ["analyze", str(sweep), "--window", "2", "-o", "permutations=99", "--no-write", "--json"]
    )
    assert code == 0
    assert json.loads(capsys.readouterr().out) == doc


def test_report_and_analysis_files_come_from_the_same_calls(sweep: Path) -> None:
    path = workflows.report_run(sweep, ["vlrt_s=0.5"])
    assert path == sweep / "report.html" and path.stat().st_size > 10_000
    written = read_analysis(sweep)
    assert written is not None and written["options"]["vlrt_s"] == 0.5
    # a second report keeps the options of the analysis before it
    workflows.report_run(sweep)
    assert read_analysis(sweep)["options"]["vlrt_s"] == 0.5


def test_bad_input_is_an_input_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="run_dir"):
        workflows.analyse_run(tmp_path / "missing")
    with pytest.raises(InputError, match="--option"):
        workflows.analysis_options(["no-equals-sign"])
    with pytest.raises(InputError, match="--method"):
        workflows.estimate_input(tmp_path, "magic")


MODELS = Path(__file__).resolve().parents[1] / "examples" / "models"


def test_models_queues_and_usl_from_python_are_what_the_cli_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = MODELS / "central-server.yaml"
    doc, title = workflows.solve_model(model, "exact")
    assert doc["method"] == "exact-mva" and title
    assert cli.main(["model", "solve", str(model), "--method", "exact", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == doc
    # M/M/1 at rho = 0.5: R = S / (1 - rho), an independent closed form
    mm1 = workflows.queue_metrics("mm1", 5.0, 0.1)
    assert mm1["response_time"] == pytest.approx(0.2)
    data = Path(__file__).resolve().parents[1] / "examples" / "usl" / "specsdm91.csv"
    usl = workflows.usl_file(data)
    assert cli.main(["usl", str(data), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == usl
    with pytest.raises(InputError, match="--method"):
        workflows.solve_model(model, "magic")
    with pytest.raises(InputError, match="--servers"):
        workflows.queue_metrics("mmm", 5.0, 0.1)
