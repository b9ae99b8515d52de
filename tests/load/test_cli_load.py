"""``tierscope load``: one JSON document with --json, run folders with --out, exit 2 on bad
input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tierscope.cli import main
from tierscope.load import TestServer
from tierscope.store import read_run

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ROOT / "examples" / "workloads"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_url_closed_loop_json(capsys: pytest.CaptureFixture[str], server: TestServer) -> None:
    server.set_delay(0.001)
    code, out, err = run(
        capsys, "load", server.url + "/", "--users", "4", "--think", "0.01", "--duration", "1",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)  # exactly one document
    assert doc["mode"] == "closed" and doc["level"] == 4
    assert doc["throughput"] > 100
    assert set(doc["latency"]) >= {"p50", "p95", "p99", "max"}
    assert 0.001 < doc["latency"]["p50"] < 0.01
    assert doc["errors"] == 0 and doc["requests"] > 100
    assert 0 <= doc["client_cpu"] < 1
    assert doc["client_bottleneck"] is False


def test_open_loop_from_url(capsys: pytest.CaptureFixture[str], server: TestServer) -> None:
    code, out, err = run(
        capsys, "load", server.url, "--rate", "300", "--arrival", "constant", "--duration", "1",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["mode"] == "open"
    assert doc["requests"] == 300
    assert doc["throughput"] == pytest.approx(300, rel=0.01)


def test_workload_file_with_mix_and_human_output(
    capsys: pytest.CaptureFixture[str], server: TestServer
) -> None:
    code, out, err = run(
        capsys, "load", str(WORKLOADS / "bulletin-board.yaml"), "--base-url", server.url,
        "--users", "10", "--think", "0.005", "--duration", "1", "--mix", "read-write",
    )  # fmt: skip
    assert code == 0, err
    assert "read-write" in out and "post-comment" in out and "p95" in out


def test_partly_open_from_url(capsys: pytest.CaptureFixture[str], server: TestServer) -> None:
    code, out, err = run(
        capsys, "load", server.url, "--session-rate", "20", "--session-length", "3",
        "--think", "0.01", "--duration", "1", "--json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["mode"] == "partly-open"
    assert doc["sessions"]["started"] > 5


def test_out_writes_a_run_folder(
    capsys: pytest.CaptureFixture[str], server: TestServer, tmp_path: Path
) -> None:
    code, out, err = run(
        capsys, "load", server.url, "--users", "3", "--think", "0.01", "--duration", "1",
        "--warmup", "0.2", "--out", str(tmp_path / "r"), "--json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    r = read_run(tmp_path / "r")
    assert r.status == "complete" and r.info["kind"] == "load"
    assert r.requests is not None and r.requests.height == doc["totals"]["sent"]
    assert r.points is not None and r.points["level"][0] == 3


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["http://127.0.0.1:9/"], "reachable"),
        (["https://127.0.0.1:9/"], "plain HTTP"),
        (["http://no-such-host.invalid/"], "resolves"),
        (["URL", "--rate", "-5"], "--rate"),
        (["URL", "--users", "3", "--rate", "5"], "--users"),
        (["URL", "--mode", "sideways"], "--mode"),
        (["URL", "--think-dist", "gamma", "--think", "1"], "--think-dist"),
        ([str(WORKLOADS / "bulletin-board.yaml"), "--mix", "nope", "--base-url", "URL"], "mix"),
        ([str(WORKLOADS / "bulletin-board.yaml")], "base URL"),
        (["/nonexistent/workload.yaml"], "cannot read"),
    ],
)
def test_bad_input_exits_2_with_a_message(
    capsys: pytest.CaptureFixture[str], server: TestServer, args: list[str], needle: str
) -> None:
    args = [a.replace("URL", server.url) for a in args]
    code, out, err = run(capsys, "load", *args, "--duration", "0.2", "--json")
    assert code == 2, err
    assert out == ""
    assert needle in err and "Traceback" not in err


def test_malformed_workload_file_exits_2_naming_the_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "w.yaml"
    bad.write_text(
        "mode: closed\ninteractions:\n  - {name: a, url: '/a?id={int:1:1O}'}\n"
        "mixes: {m: {initial: {a: 1}, transitions: {b: {a: 1}}}}\n"
    )
    code, _, err = run(capsys, "load", str(bad), "--json")
    assert code == 2
    assert str(bad) in err
    assert "interactions[0].url" in err
    malformed = tmp_path / "m.yaml"
    malformed.write_text("interactions: [{name: a\n")
    code, _, err = run(capsys, "load", str(malformed))
    assert code == 2 and "malformed YAML" in err


def test_console_script_exit_status_for_an_unreachable_url() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tierscope.cli", "load", "http://127.0.0.1:9/", "--duration", "1"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "reachable" in proc.stderr and "Traceback" not in proc.stderr
