"""Costs and capacities of the experiment runner's parts, measured on real processes.

1. **Monitor overhead** at 50 ms and 10 ms on the demo stack (three tiers, demo quotas) under
   load: CPU seconds the sampling thread uses per wall second (fraction of one core). Target:
   <= 2 % of one core at 50 ms. Anchor: the same metrics sampled with psutil (per-process CPU,
   I/O, context switches of every process of the nodes), which feasibility.md measured at about
   3x the cost of raw /proc reads; the ratio is printed.
2. **Capacity of the embedded system per tier core**: each tier gets a whole core (quota 1.0),
   no configured costs, and wrk drives it with enough connections to saturate; throughput divided
   by each tier's measured CPU gives requests per second per tier core, for a page that crosses
   all three tiers (``/story``) and for a static file (web tier only).

wrk comes from Debian (``apt-get install -y wrk``; the benchmark installs it when missing).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tierscope.experiment.cgroups import open_hierarchy
from tierscope.experiment.monitor import Monitor, NodeProbe
from tierscope.experiment.processes import Supervisor
from tierscope.experiment.targets import Deployment
from tierscope.experiment.targets.embedded import start_embedded
from tierscope.spec.experiment import SystemSpec

Recorder = Callable[[str, Mapping[str, Any]], Path]
pytestmark = pytest.mark.timeout(900)

MONITOR_TARGET = 0.02  # cores, at 50 ms
SAMPLE_S = 10.0


def _wrk() -> str:
    path = shutil.which("wrk")
    if path is None:
        subprocess.run(["apt-get", "install", "-y", "-q", "wrk"], check=False, capture_output=True)
        path = shutil.which("wrk")
    if path is None:
        pytest.fail("wrk is not installed and apt-get could not install it", pytrace=False)
    return path


@contextmanager
def deployed(system: SystemSpec) -> Iterator[Deployment]:
    workdir = Path(tempfile.mkdtemp(prefix="tierscope-bench-"))
    hierarchy = open_hierarchy(f"tierscope-bench-{uuid.uuid4().hex[:6]}")
    sup = Supervisor(workdir)
    sup.start_reaper()
    try:
        yield start_embedded(system, workdir, sup, hierarchy)
    finally:
        sup.stop_all()
        hierarchy.remove()
        sup.close()
        shutil.rmtree(workdir, ignore_errors=True)


def probes(dep: Deployment) -> list[NodeProbe]:
    return [
        NodeProbe(n.tier, n.name, n.cgroup, quota_cores=n.quota, gauges=n.gauges) for n in dep.nodes
    ]


def wrk_run(url: str, connections: int, seconds: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [_wrk(), "-t1", f"-c{connections}", f"-d{seconds:g}s", url],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def psutil_sampler(
    dep: Deployment, interval: float, stop: threading.Event, cpu: list[float]
) -> None:
    """The same per-node readings with psutil: CPU times, I/O and context switches of every
    process of every node, plus cgroup-free memory, each tick."""
    import psutil

    t_cpu, t_wall = time.thread_time(), time.monotonic()
    procs: dict[int, Any] = {}
    next_tick = time.monotonic()
    while not stop.is_set():
        for n in dep.nodes:
            for pid in n.pids():
                p = procs.get(pid) or procs.setdefault(pid, psutil.Process(pid))
                try:
                    with p.oneshot():
                        p.cpu_times()
                        p.io_counters()
                        p.num_ctx_switches()
                        p.memory_info()
                        p.threads()
                except psutil.Error:
                    procs.pop(pid, None)
        psutil.cpu_times()
        next_tick += interval
        stop.wait(max(0.0, next_tick - time.monotonic()))
    cpu.append((time.thread_time() - t_cpu) / (time.monotonic() - t_wall))


def test_monitor_overhead(record: Recorder) -> None:
    pytest.importorskip("psutil", reason="pip install psutil (the bench extra)")
    system = SystemSpec(tiers={"web": {"cpu": 0.5}, "app": {"cpu": 0.5}, "db": {"cpu": 0.3}})
    results: dict[str, Any] = {}
    with deployed(system) as dep:
        load = wrk_run(dep.entry_urls[0] + "/story?id=5", 4, SAMPLE_S * 3 + 5)
        try:
            time.sleep(1.0)
            for interval in (0.05, 0.01):
                mon = Monitor(interval, time.monotonic(), probes(dep)).start()
                time.sleep(SAMPLE_S)
                mon.stop()
                rows = mon.drain().height
                results[f"tierscope_{int(interval * 1000)}ms"] = {
                    "cores": mon.overhead,
                    "ticks": mon.ticks,
                    "late_ticks": mon.late_ticks,
                    "rows": rows,
                }
            stop, cpu = threading.Event(), []
            th = threading.Thread(target=psutil_sampler, args=(dep, 0.05, stop, cpu))
            th.start()
            time.sleep(SAMPLE_S)
            stop.set()
            th.join()
            results["psutil_50ms"] = {"cores": cpu[0]}
        finally:
            load.kill()
            load.communicate()
    ts50 = results["tierscope_50ms"]["cores"]
    ts10 = results["tierscope_10ms"]["cores"]
    ratio = results["psutil_50ms"]["cores"] / ts50
    print(
        "\nmonitor overhead on the demo stack under load (fraction of one core):\n"
        f"  tierscope 50 ms: {ts50:.4f} ({results['tierscope_50ms']['ticks']} ticks, "
        f"{results['tierscope_50ms']['late_ticks']} late)\n"
        f"  tierscope 10 ms: {ts10:.4f} ({results['tierscope_10ms']['ticks']} ticks, "
        f"{results['tierscope_10ms']['late_ticks']} late)\n"
        f"  psutil    50 ms: {results['psutil_50ms']['cores']:.4f} (fewer metrics, no gauges)\n"
        f"  psutil / tierscope at 50 ms: {ratio:.1f}x; target tierscope <= {MONITOR_TARGET:.0%}"
    )
    record("runner_monitor_overhead", {**results, "psutil_over_tierscope_50ms": ratio})
    assert ts50 <= MONITOR_TARGET, f"monitor uses {ts50:.3%} of a core at 50 ms"


def _tier_cores(dep: Deployment, fn: Callable[[], None]) -> dict[str, float]:
    def usage() -> dict[str, float]:
        out = {}
        for n in dep.nodes:
            assert n.cgroup is not None
            path, kind = n.cgroup.cpu_usage_file()
            text = path.read_text()
            ns = int(text) if kind == "v1" else 1000 * int(re.search(r"usage_usec (\d+)", text)[1])  # type: ignore[index]
            out[n.tier] = out.get(n.tier, 0.0) + ns / 1e9
        return out

    a, t = usage(), time.monotonic()
    fn()
    b, dt = usage(), time.monotonic() - t
    return {k: (b[k] - a[k]) / dt for k in a}


def test_embedded_capacity_per_tier_core(record: Recorder) -> None:
    system = SystemSpec(
        tiers={
            "web": {"cpu": 1.0},
            "app": {"cpu": 1.0, "cpu_cost": 0.0, "workers": 16},
            "db": {"cpu": 1.0, "cpu_cost": 0.0},
        }
    )
    out: dict[str, Any] = {}
    with deployed(system) as dep:
        for name, path, conns in (
            ("story", "/story?id=42", 32),
            ("static", "/static/logo.png", 16),
        ):
            box: dict[str, str] = {}

            def drive(url: str = dep.entry_urls[0] + path, c: int = conns, b: dict = box) -> None:
                b["out"] = wrk_run(url, c, 8).communicate()[0]

            cores = _tier_cores(dep, drive)
            m = re.search(r"Requests/sec:\s+([\d.]+)", box["out"])
            assert m, box["out"]
            rps = float(m.group(1))
            per_core = {t: rps / c for t, c in cores.items() if c > 0.05}
            out[name] = {
                "requests_per_s": rps,
                "tier_cores": cores,
                "requests_per_tier_core": per_core,
            }
            print(
                f"\n{name}: {rps:,.0f} req/s; tier cores "
                + ", ".join(f"{t} {c:.2f}" for t, c in cores.items())
                + "; req/s per tier core "
                + ", ".join(f"{t} {v:,.0f}" for t, v in per_core.items())
            )
    record("runner_embedded_capacity", {**out, "load_1min": os.getloadavg()[0]})
    assert out["story"]["requests_per_s"] > 100
