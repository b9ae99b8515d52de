"""Attach to a running system (``system.kind: attach``): the test starts a small stack itself as
plain processes (front -> middle -> back, tierscope's component server run by hand, the middle
one capped at 0.2 core by a cgroup the test creates), attaches to it by PID, cgroup and command
line, sweeps it, and finds the capped component; afterwards every process is still running,
unchanged. Bad locators exit 2 naming the field."""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.experiment._support import require
from tierscope import cli
from tierscope.analysis import analyze
from tierscope.experiment import run_experiment
from tierscope.experiment.cgroups import (
    CgroupUnavailableError,
    Hierarchy,
    NodeCgroup,
    container_cgroup,
    detect_mounts,
)
from tierscope.spec.analysis import AnalysisOptions
from tierscope.spec.experiment import parse_experiment
from tierscope.store import read_run

CAP = 0.2


@dataclass
class Stack:
    procs: dict[str, subprocess.Popen[bytes]]
    ports: dict[str, int]
    capped: NodeCgroup
    tag: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports['front']}/"

    def state(self, name: str) -> str:
        """The process's state letter (R, S, T: stopped, Z: zombie)."""
        stat = Path(f"/proc/{self.procs[name].pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0]


def hierarchy(name: str) -> Hierarchy:
    try:
        mounts = detect_mounts()
        if mounts is None:
            raise CgroupUnavailableError("no cgroup hierarchy is mounted")
        h = Hierarchy(mounts, name)  # not tierscope-*: no run's leftover
        h.create()
        return h
    except (CgroupUnavailableError, OSError) as exc:
        require("writable cgroups", f"run as root on Linux: {exc}")
        raise


def start(name: str, tmp: Path, tag: str, cost: float, calls: list[Any]) -> tuple[Any, int]:
    """One component server started as the user would, in its own session."""
    files = {k: str(tmp / f"{name}-{tag}.{k}") for k in ("gauges", "log", "ready_file", "io")}
    cfg = {"name": name, "cpu_cost": {"default": cost}, "calls": calls, "port": 0, **files}
    cfg |= {f"calls_{c['to']}": str(tmp / f"{name}-to-{c['to']}-{tag}") for c in calls}
    cfg_file = tmp / f"attach-{name}-{tag}.json"  # its command line names it: `match` finds it
    cfg_file.write_text(json.dumps(cfg))
    argv = [sys.executable, "-m", "tierscope.experiment.embedded.component", str(cfg_file)]
    proc = subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL)
    ready = Path(files["ready_file"])
    deadline = time.monotonic() + 30
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < deadline, f"{name} did not start"
        time.sleep(0.05)
    return proc, int(json.loads(ready.read_text())["port"])


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    tag = secrets.token_hex(4)
    h = hierarchy(f"attach-test-{tag}")
    procs: dict[str, Any] = {}
    try:
        capped = h.node("capped")
        capped.set_cpu(CAP)
        ports: dict[str, int] = {}
        for name, cost, callee in (("back", 0.001, None), ("middle", 0.006, "back"),
                                   ("front", 0.001, "middle")):  # fmt: skip
            calls = [] if callee is None else [{"to": callee, "at": [["127.0.0.1", ports[callee]]]}]
            procs[name], ports[name] = start(name, tmp_path, tag, cost, calls)
        capped.add(procs["middle"].pid)
        yield Stack(procs, ports, capped, tag)
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGCONT)
            p.terminate()
            p.wait(10)
        h.remove()


def spec(stack: Stack, **patch: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "attached",
        "system": {
            "kind": "attach",
            "entry": "front",
            "components": {
                "front": {"pid": stack.procs["front"].pid, "url": stack.url,
                          "calls": [{"to": "middle"}]},
                "middle": {"cgroup": str(next(iter(stack.capped.paths.values()))),
                           "calls": [{"to": "back"}]},
                "back": {"match": f"attach-back-{stack.tag}", "allow_faults": True},
            },
        },
        "workload": {"mode": "closed", "think_time": {"dist": "exp", "mean": 0.2}},
        "sweep": {"levels": [2, 40], "repetitions": 1},
        "phases": {"ramp_up": 2, "steady": 8, "ramp_down": 0.5},
        "faults": [{"kind": "stall", "tier": "back", "at": 3, "duration": 0.2}],
    }  # fmt: skip
    doc.update(patch)
    return doc


@pytest.mark.timing
@pytest.mark.timeout(300)
def test_attach_names_the_capped_component_and_leaves_the_system_as_it_was(
    stack: Stack, tmp_path: Path
) -> None:
    doc = spec(stack)
    out = tmp_path / "run"
    assert run_experiment(parse_experiment(doc), doc, out)["status"] == "complete"
    run = read_run(out)
    a = analyze(run, AnalysisOptions.parse({}))
    light, loaded = a["bottlenecks"]
    assert loaded["primary"] is not None and loaded["primary"]["tier"] == "middle", loaded
    assert loaded["primary"]["resource"] == "cpu"
    assert light["primary"] is None or light["primary"]["tier"] != "front"
    # the capped component's CPU is judged against its own cgroup's quota
    util = run.metrics.filter(tier="middle", metric="cpu_util", level=40.0)["value"]
    assert 0.8 < float(util.mean()) < 1.2
    deploy = run.events.filter(kind="deploy")["detail"][0]
    attached = json.loads(deploy)["attached"]
    assert attached["middle"]["cpu"] == pytest.approx(CAP)
    assert attached["front"]["cpu_from"].startswith("none")
    assert run.events.filter(kind="stall", tier="back").height == 2  # one per level
    # every process is still there, running, unchanged, and the stack still answers
    for name, proc in stack.procs.items():
        assert proc.poll() is None and stack.state(name) in "RS", name
    assert stack.capped.read_cpu_quota() == pytest.approx(CAP)
    assert stack.procs["middle"].pid in stack.capped.pids()
    with urllib.request.urlopen(stack.url, timeout=10) as resp:
        assert resp.status == 200


def test_bad_locators_exit_2_naming_the_field(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    cases = {
        "system.components.front.pid": ("front", {"pid": dead.pid, "url": stack.url}),
        "system.components.middle.cgroup": ("middle", {"cgroup": "/no/such/cgroup"}),
        "system.components.back.match": ("back", {"match": "no-such-process-anywhere-x9",
                                                  "allow_faults": True}),
        "system.components.front.url": ("front", {"pid": stack.procs["front"].pid,
                                                  "url": "http://127.0.0.1:9/"}),
        "faults[0].tier": ("back", {"match": f"attach-back-{stack.tag}"}),  # no allow_faults
    }  # fmt: skip
    for field, (name, locator) in cases.items():
        doc = spec(stack)
        calls = doc["system"]["components"][name].get("calls", [])
        doc["system"]["components"][name] = {**locator, "calls": calls}
        spec_file = tmp_path / "bad.yaml"
        spec_file.write_text(yaml.safe_dump(doc))
        out = tmp_path / "out"
        assert cli.main(["run", str(spec_file), "--out", str(out)]) == 2, field
        err = capsys.readouterr().err
        assert field in err and "Traceback" not in err, (field, err)
        assert not out.exists()
    for name in stack.procs:
        assert stack.state(name) in "RS"


def test_a_container_is_found_by_its_id_prefix() -> None:
    """A cgroup named as Docker's systemd driver names a container's: found by the id's first
    digits, and adopted read-only (tierscope refuses to change or remove it)."""
    cid = secrets.token_hex(32)
    h = hierarchy(f"attach-test-{cid[:8]}")
    try:
        node = h.node(f"docker-{cid}.scope")
        node.set_cpu(0.5)
        path = container_cgroup(cid[:12])
        assert path.endswith(f"/docker-{cid}.scope")
        adopted = NodeCgroup.adopt(path)
        assert adopted.adopted and adopted.read_cpu_quota() == pytest.approx(0.5)
        with pytest.raises(CgroupUnavailableError, match="not tierscope's"):
            adopted.set_cpu(1.0)
        adopted.destroy()
        assert all(p.is_dir() for p in node.paths.values())
        with pytest.raises(CgroupUnavailableError, match="no container"):
            container_cgroup("0123456789ab" if not cid.startswith("0123") else "fedcba987654")
    finally:
        h.remove()
