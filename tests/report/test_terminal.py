"""Terminal tables: every number shown is whole at 80 columns (a log file, a CI job), columns
that do not fit are named in the caption, and a wider terminal shows them."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from tierscope.analysis import analyze
from tierscope.report.terminal import analysis_summary, run_summary
from tierscope.sim import record_simulated_sweep
from tierscope.spec import load_model
from tierscope.store import read_run

ROOT = Path(__file__).resolve().parents[2]
TIERS = ("frontend", "catalogue-service", "orders", "payment", "postgres-primary")


def rendered(renderable: object, width: int) -> str:
    console = Console(width=width, record=True, file=io.StringIO())
    console.print(renderable)
    return console.export_text()


def cells(text: str) -> list[str]:
    """The stripped cells of every table row (between the box rules)."""
    out: list[str] = []
    for line in text.splitlines():
        if line.startswith("│"):
            out += [c.strip() for c in line.strip("│").split("│")]
    return out


def points(n: int = 6) -> list[dict]:
    # awkward numbers: long fractions, thousands, tiny response times, five tiers with long names
    rows = []
    for i in range(n):
        p = {"setup": "s0", "level": 10.0 * (i + 1), "throughput": 12345.678901 / (i + 1),
             "rt_mean": 0.000123456 * 10**i, "rt_p95": 0.000987654 * 10**i, "errors": 123456 * i,
             "client.cpu_cores": 0.123456}  # fmt: skip
        p |= {f"{t}.cpu_util": 0.987654 - 0.1 * k for k, t in enumerate(TIERS)}
        rows.append(p)
    return rows


@pytest.mark.parametrize("width", [80, 100])
def test_run_summary_numbers_are_whole(width: int) -> None:
    doc = {"points": points(), "warnings": [], "run_dir": "runs/x", "status": "complete"}
    text = rendered(run_summary(doc), width)
    assert max(len(line) for line in text.splitlines() if line.startswith(("│", "┏"))) <= width
    shown = cells(text)
    assert "…" not in "".join(shown)
    for p in doc["points"]:
        assert f"{p['throughput']:.4g}" in shown  # throughput, 4 significant digits
        assert f"{1e3 * p['rt_mean']:.3g}" in shown or f"{1e3 * p['rt_mean']:,.0f}" in shown
    assert "not shown" in text  # five long tier names do not fit: the caption says so


def test_a_wide_terminal_shows_every_column() -> None:
    doc = {"points": points(), "warnings": [], "run_dir": "runs/x", "status": "complete"}
    text = re.sub(r"\s+", " ", rendered(run_summary(doc), 200))
    for t in TIERS:
        assert f"{t} CPU" in text
    assert "client CPU [cores]" in text and "not shown" not in text


def test_analysis_summary_of_a_sweep_at_80_columns(tmp_path: Path) -> None:
    model = load_model(ROOT / "examples" / "models" / "millibottleneck-twin.yaml")
    record_simulated_sweep({"s0": model}, tmp_path / "run", levels=[20, 100, 180], steady=8)
    doc = analyze(read_run(tmp_path / "run"))
    text = rendered(analysis_summary(doc, "analysis"), 80)
    assert all(len(line) <= 80 for line in text.splitlines())
    shown = cells(text)
    assert "…" not in "".join(shown)
    for c in doc["saturation"][0]["curve"]:
        assert f"{c['throughput']:.4g}" in shown
