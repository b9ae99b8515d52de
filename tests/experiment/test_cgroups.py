"""Node emulation: hierarchy detection (v1 and v2) and real CPU quotas on this host."""

from __future__ import annotations

import subprocess
import sys
import time

from tierscope.experiment.cgroups import Hierarchy, detect_mounts

V1 = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""


def test_v1_detection_handles_co_mounted_controllers() -> None:
    m = detect_mounts(V1)
    assert m is not None and m.version == "v1"
    assert str(m.v1["cpu"]) == str(m.v1["cpuacct"]) == "/sys/fs/cgroup/cpu,cpuacct"
    assert str(m.v1["memory"]) == "/sys/fs/cgroup/memory"


def test_v2_detection(tmp_path) -> None:
    root = tmp_path / "cg2"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    info = f"25 1 0:23 / {root} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    m = detect_mounts(info)
    assert m is not None and m.version == "v2" and m.v2_root == root


def test_no_cgroups_at_all() -> None:
    assert detect_mounts("22 1 0:5 / /proc rw - proc proc rw\n") is None


def test_quota_caps_a_busy_loop(hierarchy: Hierarchy) -> None:
    """A process spinning in a node with 0.2 core gets 0.2 core and is throttled every period."""
    node = hierarchy.node("busy")
    node.set_cpu(0.2)
    proc = subprocess.Popen(node.wrap([sys.executable, "-c", "while True: pass"]))
    try:
        time.sleep(0.3)
        usage, kind = node.cpu_usage_file()
        assert node.pids() == [proc.pid]

        def cpu_s() -> float:
            text = usage.read_text()
            if kind == "v1":
                return int(text) / 1e9
            return int(dict(line.split() for line in text.splitlines())["usage_usec"]) / 1e6

        c0, s0, t0 = cpu_s(), node.throttling(), time.monotonic()
        time.sleep(2.0)
        c1, s1, t1 = cpu_s(), node.throttling(), time.monotonic()
        cores = (c1 - c0) / (t1 - t0)
        assert 0.17 < cores < 0.23, cores
        periods = s1["nr_periods"] - s0["nr_periods"]
        assert periods >= 15
        assert (s1["nr_throttled"] - s0["nr_throttled"]) / periods > 0.9
    finally:
        node.destroy()
    assert proc.wait(5) != 0  # killed by destroy
    assert not node.paths["cpu" if node.version == "v1" else ""].exists()
