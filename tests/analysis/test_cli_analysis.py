"""``tierscope analyze`` and ``report``: one JSON document with --json, analysis.json written,
exit status 2 with the field named on bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tierscope.cli import main
from tierscope.sim import record_simulated_sweep
from tierscope.spec import load_model
from tierscope.spec.analysis import AnalysisDocument

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli") / "twin"
    model = load_model(ROOT / "examples" / "models" / "millibottleneck-twin.yaml")
    record_simulated_sweep({"s0": model}, path, levels=[50, 100, 150, 200], steady=8, ramp_up=1)
    return path


def test_analyze_json_is_one_document_and_is_written(
    run_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["analyze", str(run_dir), "--json", "--vlrt", "0.25", "-o", "permutations=99"])
    out = capsys.readouterr().out
    assert code == 0
    doc = json.loads(out)  # exactly one document, nothing else on stdout
    AnalysisDocument.model_validate(doc)
    assert list(doc)[:5] == ["saturation", "bottlenecks", "indicators", "episodes", "vlrt"]
    assert doc["options"]["vlrt_s"] == 0.25 and doc["options"]["permutations"] == 99
    assert json.loads((run_dir / "analysis.json").read_text()) == doc
    # the labels follow the throughput rule exactly
    for s in doc["saturation"]:
        th95, limit, server = s["th95"], s["th_limit"], False
        for c in s["curve"]:
            server = server or c["throughput"] >= th95 * (1 - 1e-9)
            want = (
                "server"
                if server
                else "gray"
                if c["throughput"] >= limit * (1 - 1e-9)
                else "client"
            )
            assert c["label"] == want


def test_analyze_terminal_summary(run_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(run_dir), "--no-write"]) == 0
    out = capsys.readouterr().out
    assert "setup s0" in out and "episodes" in out


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["analyze", "/nonexistent/run"], "run_dir"),
        (["analyze", "RUN", "--threshold", "1.5"], "saturation_threshold"),
        (["analyze", "RUN", "-o", "bogus=1"], "bogus"),
        (["analyze", "RUN", "-o", "novalue"], "--option"),
        (["report", "/nonexistent/run"], "run_dir"),
    ],
)
def test_bad_input_exits_2(
    run_dir: Path, capsys: pytest.CaptureFixture[str], args: list[str], named: str
) -> None:
    args = [str(run_dir) if a == "RUN" else a for a in args]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err


def test_empty_run_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tierscope.store import RunWriter

    RunWriter.create(tmp_path / "empty", kind="import", spec={}).close()
    assert main(["analyze", str(tmp_path / "empty")]) == 2
    assert "empty" in capsys.readouterr().err


def test_report_out_file(run_dir: Path, tmp_path: Path) -> None:
    assert main(["report", str(run_dir), "--out", str(tmp_path / "r.html")]) == 0
    assert (tmp_path / "r.html").read_text().startswith("<!DOCTYPE html>")
