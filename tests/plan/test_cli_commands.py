"""estimate, calibrate, whatif and plan on the command line: one JSON document with --json,
exit status 2 with a message naming the input for bad input, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tierscope.cli import main
from tierscope.spec import parse_model


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def csv_file(tmp_path: Path) -> Path:
    rows = ["x_a,x_b,u_cpu,r_a,r_b"]
    for xa, xb in [(1, 2), (3, 1), (2, 4), (5, 2), (4, 4), (6, 1)]:
        u = 0.02 * xa + 0.05 * xb
        rows.append(f"{xa},{xb},{u},{0.02 / (1 - u)},{0.05 / (1 - u)}")
    path = tmp_path / "obs.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def test_estimate_csv_json(capsys: pytest.CaptureFixture[str], csv_file: Path) -> None:
    code, out, _ = run(capsys, "estimate", str(csv_file), "--json", "--bootstrap", "20")
    assert code == 0
    doc = json.loads(out)
    assert doc["method"] == "ubr" and doc["notes"][0].startswith("auto chose")
    assert doc["demands"]["cpu"]["a"] == pytest.approx(0.02, rel=1e-6)
    assert doc["demands"]["cpu"]["b"] == pytest.approx(0.05, rel=1e-6)
    code, out, _ = run(capsys, "estimate", str(csv_file), "--method", "mle", "--json")
    assert code == 0 and json.loads(out)["demands"]["cpu"]["b"] == pytest.approx(0.05, rel=1e-3)
    code, out, _ = run(capsys, "estimate", str(csv_file))
    assert code == 0 and "demand" in out


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--method", "ci"], "records"),
        (["--method", "magic"], "--method"),
        (["--method", "sd"], "queue"),
    ],
)
def test_estimate_bad_input_exits_2(
    capsys: pytest.CaptureFixture[str], csv_file: Path, args: list[str], match: str
) -> None:
    code, out, err = run(capsys, "estimate", str(csv_file), *args, "--json")
    assert code == 2 and out == "" and match in err and "Traceback" not in err


def test_estimate_missing_and_malformed_inputs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, _, err = run(capsys, "estimate", str(tmp_path / "nope.csv"))
    assert code == 2 and "nope.csv" in err
    bad = tmp_path / "bad.csv"
    bad.write_text("x_a,u_cpu\n1,2\n")
    code, _, err = run(capsys, "estimate", str(bad))
    err = " ".join(err.split())  # the terminal may wrap the message
    assert code == 2 and "bad.csv, line 2" in err and "u_cpu" in err


def test_calibrate_whatif_plan(
    capsys: pytest.CaptureFixture[str], sweep: Path, tmp_path: Path
) -> None:
    model_file = tmp_path / "model.yaml"
    code, out, _ = run(
        capsys, "calibrate", str(sweep), "--out", str(model_file), "--duration", "60", "--json"
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["model_file"] == str(model_file)
    assert parse_model(yaml.safe_load(model_file.read_text())).stations[2].name == "db"
    saved = json.loads((tmp_path / "calibration.json").read_text())
    assert saved["figure"]["level"] == [r["level"] for r in doc["levels"]]
    assert doc["summary"]["peak_throughput"]["error"] is not None

    code, out, _ = run(
        capsys,
        "whatif",
        str(sweep),
        "--set",
        "db.cpu=0.4",
        "--levels",
        "30,80",
        "--duration",
        "60",
        "--json",
    )
    assert code == 0
    doc = json.loads(out)
    assert [r["users"] for r in doc["levels"]] == [30, 80]
    assert doc["levels"][1]["measured"]["measured"]["throughput"] > 0

    prices = tmp_path / "prices.yaml"
    prices.write_text("search: {replicas: [1], cpu: [0.2, 0.4, 0.8]}\n")
    code, out, _ = run(
        capsys,
        "plan",
        str(sweep),
        "--slo",
        "p95<0.05",
        "--levels",
        "40",
        "--prices",
        str(prices),
        "--duration",
        "60",
        "--json",
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["levels"][0]["cheapest"]["overrides"][0].startswith("system.topology=")


@pytest.mark.parametrize(
    "args",
    [
        ["whatif", "{run}", "--set", "db.colour=blue"],
        ["whatif", "{run}"],
        ["whatif", "{run}", "--set", "db.cpu=0.4", "--levels", "ten"],
        ["plan", "{run}", "--slo", "fast"],
        ["plan", "{run}", "--slo", "p95<1", "--prices", "{missing}"],
        ["calibrate", "{missing}"],
        ["calibrate", "{run}", "--solver", "magic"],
    ],
)
def test_bad_input_exits_2(
    capsys: pytest.CaptureFixture[str], sweep: Path, tmp_path: Path, args: list[str]
) -> None:
    argv = [a.format(run=sweep, missing=tmp_path / "missing") for a in args]
    code, out, err = run(capsys, *argv, "--json")
    assert code == 2, err
    assert out == "" and err.startswith("error:") and "Traceback" not in err


def test_calibrate_refuses_a_simulation_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model = tmp_path / "m.yaml"
    model.write_text(
        "stations: [{name: cpu, discipline: ps}]\n"
        "classes: [{name: a, population: 3, think_time: 1, demands: {cpu: 0.1}}]\n"
    )
    trace = tmp_path / "trace"
    assert main(["model", "simulate", str(model), "--max-time", "50", "--trace", str(trace)]) == 0
    capsys.readouterr()
    code, _, err = run(capsys, "calibrate", str(trace))
    assert code == 2 and "measured run folder" in err
    code, out, _ = run(capsys, "estimate", str(trace), "--json", "--bootstrap", "0")
    assert code == 0 and json.loads(out)["method"] == "ci"


def test_the_cli_margin_defaults_are_the_planners() -> None:
    import inspect

    from tierscope.cli import plan as plan_command
    from tierscope.plan.planner import DEFAULT_DEMAND_MARGIN, DEFAULT_MARGIN

    params = inspect.signature(plan_command).parameters
    assert params["margin"].default == DEFAULT_MARGIN
    assert params["demand_margin"].default == DEFAULT_DEMAND_MARGIN


def test_the_report_gains_the_model_vs_measurement_figure(
    capsys: pytest.CaptureFixture[str], sweep: Path, tmp_path: Path
) -> None:
    import shutil

    run_dir = tmp_path / "run"
    shutil.copytree(sweep, run_dir)
    code, out, _ = run(capsys, "calibrate", str(run_dir), "--duration", "60")
    assert code == 0 and "tierscope report" in out
    code, _, _ = run(capsys, "report", str(run_dir))
    assert code == 0
    page = (run_dir / "report.html").read_text()
    saved = json.loads((run_dir / "calibration.json").read_text())
    assert "Model vs measurement" in page
    peak = saved["summary"]["peak_throughput"]["predicted"]
    assert f"{peak:.4g}/s" in page  # the model's peak, as the calibration found it


def test_a_graph_configuration_deploys_with_component_overrides() -> None:
    """A plan for a system given as components is deployed by component fields, which the
    spec accepts (the shorthand's topology would be refused beside components)."""
    from tierscope.plan.planner import Config
    from tierscope.spec.experiment import apply_override, parse_experiment, parse_override

    config = Config(replicas={"gateway": 1, "payment": 2}, cpu={"gateway": None, "payment": 0.3})
    tiers = ("gateway", "payment")
    assert config.overrides(tiers, components=True) == [
        "system.components.gateway.replicas=1",
        "system.components.payment.replicas=2",
        "system.components.payment.cpu=0.3",
    ]
    doc = {
        "name": "g",
        "system": {"entry": "gateway", "components": {"gateway": {"calls": [{"to": "payment"}]},
                                                      "payment": {"cpu": 0.1}}},
        "sweep": {"levels": [1]},
    }  # fmt: skip
    for text in config.overrides(tiers, components=True):
        apply_override(doc, *parse_override(text), source="test")
    system = parse_experiment(doc).system
    assert system.replicas == {"gateway": 1, "payment": 2}
    assert system.components is not None and system.components["payment"].cpu == 0.3
    assert config.overrides(tiers)[0] == "system.topology=1/2"
