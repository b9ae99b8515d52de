"""Every CLI command honours --json and the exit codes (0 ok, 2 bad input, never a traceback)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tierscope.cli import main

ROOT = Path(__file__).resolve().parents[1]
MODELS = sorted((ROOT / "examples" / "models").glob("*.yaml"))


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("model", MODELS, ids=[m.stem for m in MODELS])
def test_example_models_solve_as_json(capsys: pytest.CaptureFixture[str], model: Path) -> None:
    code, out, _ = run(capsys, "model", "solve", str(model), "--json")
    assert code == 0
    doc = json.loads(out)
    assert set(doc) >= {"method", "classes", "stations"}
    for st in doc["stations"].values():
        assert set(st) >= {
            "utilization",
            "queue_length",
            "response_time",
            "residence_time",
            "throughput",
            "per_class",
        }


def test_auto_says_which_method(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(
        capsys, "model", "solve", str(ROOT / "examples/models/central-server.yaml"), "--json"
    )
    doc = json.loads(out)
    assert doc["method"] == "exact-mva"
    assert doc["notes"][0].startswith("auto chose 'exact'")
    assert doc["classes"]["interactive"]["throughput"] == pytest.approx(0.33325, abs=1e-5)


@pytest.mark.parametrize("method", ["exact", "amva", "linearizer", "nc", "ctmc", "bounds"])
def test_methods_on_bolch(capsys: pytest.CaptureFixture[str], method: str) -> None:
    code, out, _ = run(
        capsys,
        "model",
        "solve",
        str(ROOT / "examples/models/bolch-8-3.yaml"),
        "--method",
        method,
        "--json",
    )
    assert code == 0, out
    doc = json.loads(out)
    if method == "bounds":
        x = doc["classes"]["jobs"]["throughput"]
        assert x["lower"] <= 9.920 <= x["upper"]
    else:
        tol = 1e-3 if method in ("exact", "nc", "ctmc") else 0.05
        assert doc["stations"]["cpu"]["throughput"] == pytest.approx(9.920, rel=tol)


def test_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "model", "solve", str(ROOT / "examples/models/three-tier-web.yaml"))
    assert code == 0
    assert "exact-mva" in out and "app" in out and "network" in out


def test_queue_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "model",
        "queue",
        "--kind",
        "mmm",
        "--arrival-rate",
        "1",
        "--service-time",
        "1",
        "--servers",
        "2",
        "--json",
    )
    assert code == 0
    assert json.loads(out)["response_time"] == pytest.approx(4 / 3)


def test_usl_command(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "usl", str(ROOT / "examples/usl/specsdm91.csv"), "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["sigma"] == pytest.approx(0.0277285, rel=1e-3)
    assert doc["n_peak"] == pytest.approx(96.5, abs=0.1)


BAD_MODELS = {
    "unknown-station": (
        "stations: [{name: cpu}]\nclasses: [{name: c, population: 2, "
        "visits: {dsk: 1}, service: {dsk: 0.1}}]\n",
        "classes[0].visits.dsk",
    ),
    "both-population-and-rate": (
        "stations: [{name: cpu}]\nclasses: [{name: c, population: 2, "
        "arrival_rate: 1, demands: {cpu: 0.1}}]\n",
        "population",
    ),
    "negative-time": (
        "stations: [{name: cpu}]\nclasses: [{name: c, population: 2, demands: {cpu: -0.1}}]\n",
        "classes[0].demands.cpu",
    ),
    "unstable-open": (
        "stations: [{name: cpu}]\nclasses: [{name: c, arrival_rate: 20, demands: {cpu: 0.1}}]\n",
        "cpu",
    ),
    "malformed-yaml": ("stations: [{name: cpu}\nclasses: x\n", "malformed YAML at line"),
}


@pytest.mark.parametrize("case", BAD_MODELS, ids=list(BAD_MODELS))
def test_bad_models_exit_2_naming_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, case: str
) -> None:
    text, needle = BAD_MODELS[case]
    path = tmp_path / "m.yaml"
    path.write_text(text)
    code, out, err = run(capsys, "model", "solve", str(path), "--json")
    assert code == 2
    assert out == ""
    assert needle in err and "Traceback" not in err
    if case != "unstable-open":
        assert str(path) in err


def test_bad_option_values_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    model = str(ROOT / "examples/models/bolch-8-3.yaml")
    assert run(capsys, "model", "solve", model, "--method", "magic")[0] == 2
    assert run(capsys, "model", "solve", "/nonexistent.yaml")[0] == 2
    assert (
        run(
            capsys, "model", "queue", "--kind", "mm1", "--arrival-rate", "2", "--service-time", "1"
        )[0]
        == 2
    )
    assert (
        run(
            capsys,
            "model",
            "queue",
            "--kind",
            "mm1",
            "--arrival-rate",
            "0.5",
            "--service-time",
            "1",
            "--servers",
            "3",
        )[0]
        == 2
    )
    assert run(capsys, "model", "nosuchcommand")[0] == 2


def test_console_script_exit_status(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("stations: []\nclasses: []\n")
    proc = subprocess.run(
        [sys.executable, "-m", "tierscope.cli", "model", "solve", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "bad.yaml" in proc.stderr and "Traceback" not in proc.stderr
