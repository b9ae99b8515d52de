"""Faults act on real processes and record what really happened."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tierscope.experiment.cgroups import Hierarchy
from tierscope.experiment.faults import FaultScheduler, FaultTarget
from tierscope.spec.experiment import FaultSpec


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()


def _cpu_ticks(pid: int) -> int:
    fields = _stat(pid)
    return int(fields[11]) + int(fields[12])


def test_periodic_stall_freezes_the_node_and_records_measured_times() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        target = FaultTarget("app", "app-1", 1, lambda: [proc.pid], None)
        spec = FaultSpec(kind="stall", tier="app", at=0.2, duration=0.4, every=1.0)
        t0 = time.monotonic()
        sched = FaultScheduler([spec], [target], horizon=2.2).start(t0)
        time.sleep(0.35)
        state = _stat(proc.pid)[0]
        a = _cpu_ticks(proc.pid)
        time.sleep(0.15)
        b = _cpu_ticks(proc.pid)
        assert state == "T" and a == b  # stopped, and no CPU used while stopped
        time.sleep(2.2)
        done = sched.stop()
    finally:
        proc.kill()
        proc.wait()
    starts = [o.t_start - t0 for o in done]
    assert starts == pytest.approx([0.2, 1.2, 2.2][: len(starts)], abs=0.03)
    assert len(done) >= 2
    for o in done:
        assert o.t_end - o.t_start == pytest.approx(0.4, abs=0.03)
        assert (o.kind, o.tier, o.node) == ("stall", "app", "app-1")


def test_stop_continues_a_stalled_node() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        target = FaultTarget("db", "db-1", 1, lambda: [proc.pid], None)
        sched = FaultScheduler(
            [FaultSpec(kind="stall", tier="db", at=0.0, duration=30)], [target], 60
        ).start(time.monotonic())
        time.sleep(0.2)
        done = sched.stop()
        state = _stat(proc.pid)[0]
        assert state != "T"
        assert len(done) == 1 and done[0].t_end - done[0].t_start < 1
    finally:
        proc.kill()
        proc.wait()


def test_cpu_hog_competes_inside_the_nodes_quota(hierarchy: Hierarchy) -> None:
    node = hierarchy.node("hogged")
    node.set_cpu(0.3)
    target = FaultTarget("db", "db-1", 1, node.pids, node)
    usage, kind = node.cpu_usage_file()
    assert kind == "v1" or kind == "v2"

    def cpu_s() -> float:
        text = usage.read_text()
        if kind == "v1":
            return int(text) / 1e9
        return int(dict(line.split() for line in text.splitlines())["usage_usec"]) / 1e6

    spec = FaultSpec(kind="cpu_hog", tier="db", at=0.1, duration=1.5, cores=2)
    t0 = time.monotonic()
    sched = FaultScheduler([spec], [target], horizon=3).start(t0)
    time.sleep(0.4)
    c0, s0 = cpu_s(), time.monotonic()
    time.sleep(1.0)
    cores = (cpu_s() - c0) / (time.monotonic() - s0)
    time.sleep(0.5)
    done = sched.stop()
    assert 0.25 < cores < 0.35, cores  # two spinning processes, capped at the node's 0.3 core
    assert len(done) == 1 and done[0].kind == "cpu_hog" and done[0].detail["cores"] == 2
    assert node.pids() == []  # the hogs are gone
    node.destroy()
