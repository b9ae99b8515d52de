"""The HTML report: self-contained, every section present, and it renders in headless Chromium
without console errors (a screenshot is written)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tierscope.cli import main
from tierscope.sim import record_simulated_sweep
from tierscope.spec import load_model

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT_DIR = Path(os.environ.get("TIERSCOPE_SCREENSHOTS", ROOT / ".screenshots"))


@pytest.fixture(scope="module")
def twin_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("report") / "twin"
    model = load_model(ROOT / "examples" / "models" / "millibottleneck-twin.yaml")
    record_simulated_sweep(
        {"s0": model}, run, levels=[20, 60, 100, 140, 180, 220], steady=12, ramp_up=1
    )
    assert main(["report", str(run)]) == 0
    return run


def test_report_is_self_contained_and_complete(twin_report: Path) -> None:
    page = (twin_report / "report.html").read_text()
    assert not re.search(r"<script[^>]+src=", page)  # plotly.js is inlined: works offline
    assert not re.search(r"<link[^>]+href=\"?https?:", page)  # nor stylesheets
    for heading in (
        "Throughput and response time against load",
        "Bottleneck map",
        "Per-tier utilisation",
        "Indicators of saturation",
        "Millibottleneck timeline",
        "What the numbers mean",
    ):
        assert heading in page
    # the client / gray / server zones are drawn (one shaded band per level)
    assert (
        page.count('"fillcolor":"rgba(46,160,67') + page.count('"fillcolor":"rgba(215,58,73') >= 6
    )
    doc = json.loads((twin_report / "analysis.json").read_text())
    assert doc["episodes"]  # the twin's stalls
    # every section key of the JSON is explained in the glossary
    for key in (
        "th95",
        "th_limit",
        "margin",
        "knee_level",
        "first_server_level",
        "usl",
        "saturation_fraction",
        "root_tier",
        "vlrt",
        "indicator_sets",
        "tier_loads",
        "episode_groups",
    ):
        assert key in page


def _system(name: str, path: str | None, install: str) -> str:
    """The executable, or a skip (locally) / failure (CI=true) naming what to install."""
    if path is None:
        message = f"{name} is not installed: apt-get install -y {install}"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.mark.real_system
def test_report_renders_in_headless_chromium(twin_report: Path, tmp_path: Path) -> None:
    chromium = _system(
        "chromium", shutil.which("chromium") or shutil.which("chromium-browser"), "chromium"
    )
    flags = [
        chromium,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        "--virtual-time-budget=20000",
        "--enable-logging=stderr",
        "--v=0",
    ]
    url = (twin_report / "report.html").as_uri()
    dom = subprocess.run(
        [*flags, "--dump-dom", url], capture_output=True, text=True, timeout=180, check=True
    )
    body = re.search(r"<body[^>]*>", dom.stdout)
    assert body is not None
    plots = re.search(r'data-plots="(\d+)"', body.group(0))
    errors = re.search(r'data-errors="([^"]*)"', body.group(0))
    assert plots is not None and int(plots.group(1)) >= 5  # every chart was drawn
    assert errors is not None and errors.group(1) in ("[]", "&quot;[]&quot;")
    console_errors = [
        line
        for line in dom.stderr.splitlines()
        if "CONSOLE" in line and re.search(r"error|uncaught", line, re.I)
    ]
    assert console_errors == []
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOT_DIR / "report.png"
    shot.unlink(missing_ok=True)
    subprocess.run(
        [*flags, "--window-size=1300,4000", f"--screenshot={shot}", url],
        capture_output=True,
        timeout=180,
        check=True,
    )
    assert shot.is_file() and shot.stat().st_size > 50_000


def test_metrics_only_report(tmp_path: Path) -> None:
    """Imported monitoring data without requests or points: the timeline shows each resource's
    saturation score and the episode."""
    lines = ["ts,tier,metric,value"]
    for i in range(400):
        lines.append(f"{i * 0.05:.2f},db,cpu_throttled_ratio,{1.0 if 100 <= i < 300 else 0.1}")
    (tmp_path / "m.csv").write_text("\n".join(lines) + "\n")
    assert (
        main(
            ["import", "csv", "--metrics", str(tmp_path / "m.csv"), "--out", str(tmp_path / "run")]
        )
        == 0
    )
    assert main(["report", str(tmp_path / "run")]) == 0
    page = (tmp_path / "run" / "report.html").read_text()
    assert "resource saturation score" in page
    doc = json.loads((tmp_path / "run" / "analysis.json").read_text())
    (episode,) = doc["episodes"]
    assert (episode["tier"], episode["kind"]) == ("db", "saturation")
    assert episode["start"] == pytest.approx(5.0) and episode["end"] == pytest.approx(15.0)


def test_names_from_the_run_are_text_in_the_figures(tmp_path: Path) -> None:
    # plotly renders a subset of HTML in titles, legends, axes and cell text: a setup named
    # like a link must show as that text, not become a live link
    evil = '<a href="https://evil.example/">s0</a>'
    model = load_model(ROOT / "examples" / "models" / "three-tier-web.yaml")
    run = tmp_path / "run"
    record_simulated_sweep({evil: model}, run, levels=[5, 40], steady=4, ramp_up=1)
    assert main(["report", str(run)]) == 0
    page = (run / "report.html").read_text()
    assert page.count("evil.example") >= 3  # the title, the legend, the maps' axes
    for m in re.finditer("evil.example", page):
        before = page[max(0, m.start() - 40) : m.start()]
        assert "&lt;a href=" in before or "&amp;lt;a href=" in before, before


def test_the_call_graph_is_drawn_with_each_components_worst_state() -> None:
    """A graph run's report draws its components by depth, the primary bottleneck marked
    (a star) and the push-back and untouched components apart, with where they were so."""
    from tierscope.report.html import _graph_section, component_states
    from tierscope.spec.graph import Call, Component, Graph

    graph = Graph.build(
        [
            Component("gateway", calls=(Call("catalogue"), Call("orders", 0.8))),
            Component("catalogue"),
            Component("orders", calls=(Call("payment", times=2),), parallel=False),
            Component("payment"),
        ],
        "gateway",
    )

    def level(lv: float, primary: str | None, push: list[str]) -> dict:
        res = [{"tier": t, "resource": "pool", "role": "push-back"} for t in push]
        if primary:
            res.insert(0, {"tier": primary, "resource": "cpu", "role": "bottleneck"})
        return {"setup": "s0", "level": lv, "resources": res,
                "primary": {"tier": primary, "resource": "cpu"} if primary else None}  # fmt: skip

    doc = {"bottlenecks": [level(10, None, []), level(30, "payment", ["orders"]),
                           level(60, "payment", ["orders", "gateway"])]}  # fmt: skip
    states = component_states(doc)
    assert states == {
        "payment": ("bottleneck", "s0 level 30, s0 level 60"),
        "orders": ("push-back", "s0 level 30, s0 level 60"),
        "gateway": ("push-back", "s0 level 60"),
    }
    page = _graph_section(doc, graph.to_json())
    assert "<h2>Call graph</h2>" in page
    assert page.replace(" ", "").count('"symbol":"star"') == 1  # the primary, payment
    assert "p 0.8" in page and "2 visits" in page
    for name, state in (("catalogue", "never saturated"), ("payment", "bottleneck")):
        assert f"<td>{name}</td><td>{state}</td>" in page
    assert _graph_section(doc, None) == ""
