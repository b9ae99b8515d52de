"""Progress of long work: steps reach an installed sink, go nowhere without one, and the CLI
shows bars only on a terminal and never with --json."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest
from rich.console import Console

from tierscope import cli
from tierscope.progress import reporting, step, tracked
from tierscope.report.progress import ProgressBars
from tierscope.sim import simulate
from tierscope.spec import load_model

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def test_steps_reach_the_sink_only_inside_the_block() -> None:
    seen: list[tuple[str, float, float]] = []
    step("outside", 1, 2)
    with reporting(lambda *a: seen.append(a)):
        assert list(tracked(["a", "b"], "items")) == ["a", "b"]
    step("after", 1, 2)
    assert seen == [("items", 0, 2), ("items", 1, 2), ("items", 2, 2)]


def test_simulation_reports_events_towards_an_estimated_total() -> None:
    model = load_model(EXAMPLES / "models" / "central-server.yaml")
    seen: list[tuple[str, float, float]] = []
    with reporting(lambda *a: seen.append(a)):
        simulate(model, precision=0.01, seed=3)
    assert len(seen) >= 2
    done = [d for _, d, _ in seen]
    assert done == sorted(done) and all(0 < d <= t for _, d, t in seen)
    # the estimate of what is left tightens: the last total is within a factor of the first's
    assert seen[-1][2] >= seen[-1][1]


def test_bars_render_stage_and_time_left_on_a_terminal() -> None:
    buf = io.StringIO()
    console = Console(file=buf, force_terminal=True, width=100)
    with ProgressBars(console) as bars:
        bars("simulating 3 levels", 1, 3)
        bars._bars.refresh()
    text = buf.getvalue()
    assert "simulating 3 levels" in text and "left" in text


@pytest.mark.parametrize("as_json", [False, True])
def test_bars_on_a_terminal_and_never_with_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    monkeypatch.setattr(cli, "err", Console(file=sys.stderr, force_terminal=True, width=100))
    model = str(EXAMPLES / "models" / "central-server.yaml")
    args = ["model", "simulate", model, "--precision", "0.02"] + (["--json"] if as_json else [])
    assert cli.main(args) == 0
    captured = capsys.readouterr()
    if as_json:
        assert captured.err == ""
        assert captured.out.lstrip().startswith("{")
    else:
        assert "simulating to the target precision" in captured.err
