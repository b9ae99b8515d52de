"""Speed, timer accuracy and memory of tierscope's load generator against wrk.

What is compared, and why:

* Throughput and CPU per request against wrk 4 (Debian's ``wrk``), the fastest common HTTP load
  tool, on a local nginx (``nginx-light``, one worker, access log off) serving a 612-byte static
  file: closed loop, zero think time, one thread each, the same number of connections (32, one
  per tierscope user), both at normal scheduling priority. Each tool runs for ``RUN_S`` seconds,
  alternating, ``ROUNDS`` times, in this one process run; each round gives a paired ratio (the
  two runs are seconds apart, so a busy neighbour on the machine affects both) and the median
  of the paired ratios is compared with the target. wrk's CPU is its process's (``RUSAGE_CHILDREN``
  delta); tierscope's is this whole Python process's from ``start()`` to the end of ``wait()``
  (``RUSAGE_SELF`` delta), which also covers building the per-request table that wrk does not
  make, and Python idling in ``wait()``. The generator threads' own CPU is printed beside it.
* Think-time accuracy: 2,000 users with exponential think times (mean 0.4 s) offer about
  5,000 req/s to the accurate test server (1 ms responses, in this process); the overshoot of a
  request is ``actual start − intended start`` (the end of its think time). The server's own
  arrival time of each request (joined by X-Request-Id) bounds it independently from above.
* Memory: a child process runs 10,000 users (think time 2 s, 5,000 req/s) against the test
  server in this process (users connect at their first request, so nearly all are connected in
  the steady window); its resident memory (VmRSS) during the steady window minus its
  resident memory just before ``start()``, divided by the number of users. A run with 1,000 users
  gives the slope (memory per additional user) as a cross-check.

Targets (the acceptance of the load generator): throughput >= 0.9x wrk's at no more CPU per
request; think-time overshoot p99 <= 2 ms at 5 k req/s with 2,000 users; <= 50 KB per emulated
user at 10,000 users. Results are appended to ``benchmarks/results/<date>-<hostname>.jsonl``.

``python -m benchmarks.test_bench_load rss URL USERS`` is the child process of the memory test.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from benchmarks.harness import load_average

pytestmark = pytest.mark.timeout(1800)

Recorder = Callable[[str, Mapping[str, Any]], Path]

# ---- targets -----------------------------------------------------------------------------------
THROUGHPUT_VS_WRK = 0.9
CPU_PER_REQUEST_VS_WRK = 1.0
OVERSHOOT_P99_S = 0.002
BYTES_PER_USER = 50_000

# ---- run shapes --------------------------------------------------------------------------------
CONNECTIONS = 32
RUN_S = 4
ROUNDS = 9
THINK_USERS = 2000
THINK_MEAN_S = 0.4
THINK_RAMP_S = 4.0
THINK_STEADY_S = 10.0
MEM_USERS = (1_000, 10_000)
MEM_THINK_S = 2.0
MEM_RAMP_S = 5.0
MEM_STEADY_S = 10.0


# ---- nginx and wrk -----------------------------------------------------------------------------
def _ensure_debian(binary: str, package: str) -> str:
    """Path of ``binary``, installing ``package`` from Debian if it is missing."""
    found = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/bin")
    if found is None:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "-q", "nginx-light", "wrk"]
        if subprocess.run(install, env=env, capture_output=True, check=False).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], env=env, capture_output=True, check=False)
            subprocess.run(install, env=env, capture_output=True, check=False)
        found = shutil.which(binary) or shutil.which(binary, path="/usr/sbin:/usr/bin")
    if found is None:
        pytest.fail(f"{binary} is missing and `apt-get install -y {package}` failed", False)
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def nginx() -> Iterator[str]:
    """A one-worker nginx serving /index.html (612 bytes); yields the file's URL."""
    binary = _ensure_debian("nginx", "nginx-light")
    root = Path(tempfile.mkdtemp(prefix="tierscope-bench-nginx-"))
    www = root / "www"
    www.mkdir()
    (www / "index.html").write_text("x" * 612)
    for p in (root, www):
        p.chmod(0o755)
    port = _free_port()
    (root / "nginx.conf").write_text(
        f"""worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/error.log;
events {{ worker_connections 8192; }}
http {{
  access_log off;
  keepalive_requests 10000000;
  client_body_temp_path {root}/body; proxy_temp_path {root}/proxy;
  fastcgi_temp_path {root}/fcgi; uwsgi_temp_path {root}/uwsgi; scgi_temp_path {root}/scgi;
  server {{ listen 127.0.0.1:{port} backlog=4096; root {www}; }}
}}
"""
    )
    proc = subprocess.Popen(
        [binary, "-c", str(root / "nginx.conf"), "-g", "daemon off;"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(250):
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                time.sleep(0.02)
        yield f"http://127.0.0.1:{port}/index.html"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)


def _cpu(usage: resource.struct_rusage) -> float:
    return usage.ru_utime + usage.ru_stime


def run_wrk(wrk: str, url: str) -> dict[str, float]:
    before = _cpu(resource.getrusage(resource.RUSAGE_CHILDREN))
    out = subprocess.run(
        [wrk, "-t1", f"-c{CONNECTIONS}", f"-d{RUN_S}s", url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    cpu = _cpu(resource.getrusage(resource.RUSAGE_CHILDREN)) - before
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    return {"rps": rps, "cpu_s": cpu, "us_per_request": cpu / (rps * RUN_S) * 1e6}


def run_tierscope(url: str) -> dict[str, float]:
    from tierscope.load import LoadGenerator
    from tierscope.spec.workload import url_workload

    # Normal priority, like wrk: the comparison is of the engines, not of scheduling classes.
    gen = LoadGenerator(url_workload(url), keep_requests=True, priority="normal")
    before = _cpu(resource.getrusage(resource.RUSAGE_SELF))
    result = gen.start(CONNECTIONS, 0.0, RUN_S, 0.0).wait()
    cpu = _cpu(resource.getrusage(resource.RUSAGE_SELF)) - before
    s = result.summary
    done = s["totals"]["completed"]
    assert s["errors"] == 0 and result.requests.height == done
    return {
        "rps": s["throughput"],
        "cpu_s": cpu,
        "us_per_request": cpu / done * 1e6,
        "thread_us_per_request": s["totals"]["cpu_s"] / done * 1e6,
        "p50_ms": s["latency"]["p50"] * 1e3,
    }


def test_throughput_and_cpu_per_request_vs_wrk(nginx: str, record: Recorder) -> None:
    wrk = _ensure_debian("wrk", "wrk")
    run_tierscope(nginx)  # warm up nginx and the page cache
    rounds: list[tuple[dict[str, float], dict[str, float]]] = []
    for _ in range(ROUNDS):
        rounds.append((run_wrk(wrk, nginx), run_tierscope(nginx)))
    med = {
        who: {k: statistics.median(r[i][k] for r in rounds) for k in rounds[0][i]}
        for i, who in enumerate(("wrk", "tierscope"))
    }
    x_ratio = statistics.median(t["rps"] / w["rps"] for w, t in rounds)
    cpu_ratio = statistics.median(t["us_per_request"] / w["us_per_request"] for w, t in rounds)
    thread_ratio = statistics.median(
        t["thread_us_per_request"] / w["us_per_request"] for w, t in rounds
    )
    print(f"\n{'=' * 78}\nclosed loop, no think time, {CONNECTIONS} connections, 1 thread, "
          f"{RUN_S} s x {ROUNDS} rounds, nginx static 612 B\n{'=' * 78}")  # fmt: skip
    for i, (w, t) in enumerate(rounds):
        print(f"round {i}: wrk {w['rps']:>9,.0f} req/s {w['us_per_request']:6.2f} µs/req | "
              f"tierscope {t['rps']:>9,.0f} req/s {t['us_per_request']:6.2f} µs/req "
              f"(threads {t['thread_us_per_request']:.2f})")  # fmt: skip
    print(f"throughput ratio tierscope/wrk (median of paired rounds): {x_ratio:.3f} "
          f"(target >= {THROUGHPUT_VS_WRK})")  # fmt: skip
    print(f"CPU per request ratio, whole process: {cpu_ratio:.3f} (target <= "
          f"{CPU_PER_REQUEST_VS_WRK}); generator threads only: {thread_ratio:.3f}; "
          f"load 1 min: {load_average()}")  # fmt: skip
    record(
        "load_vs_wrk",
        {"connections": CONNECTIONS, "run_s": RUN_S, "rounds": ROUNDS, "median": med,
         "throughput_ratio": x_ratio, "cpu_per_request_ratio": cpu_ratio,
         "thread_cpu_per_request_ratio": thread_ratio,
         "rounds_detail": [{"wrk": w, "tierscope": t} for w, t in rounds]},
    )  # fmt: skip
    assert x_ratio >= THROUGHPUT_VS_WRK
    assert cpu_ratio <= CPU_PER_REQUEST_VS_WRK


def test_think_time_overshoot_at_5k_requests_per_second(record: Recorder) -> None:
    from tierscope.load import LoadGenerator, TestServer
    from tierscope.spec.workload import parse_workload

    w = parse_workload(
        {
            "think_time": {"dist": "exp", "mean": THINK_MEAN_S},
            "interactions": [{"name": "get", "url": "/"}],
        }
    )
    with TestServer(0.001, record=True) as server:
        gen = LoadGenerator(w, [server.url], seed=11)
        result = gen.start(THINK_USERS, THINK_RAMP_S, THINK_STEADY_S).wait()
        log = server.take_log()
    s = result.summary
    req = result.requests.filter(result.requests["phase"] == "steady")
    overshoot = (req["actual_start"] - req["intended_start"]).to_numpy()
    joined = req.join(log, on="request_id")
    arrival = (joined["received"] - joined["intended_start"]).to_numpy()
    q = [0.5, 0.9, 0.99, 0.999]
    os_q = np.quantile(overshoot, q)
    arr_q = np.quantile(arrival, q)
    print(f"\n{'=' * 78}\nthink-time overshoot: {THINK_USERS} users, exp think {THINK_MEAN_S} s, "
          f"{s['throughput']:,.0f} req/s, {THINK_STEADY_S:g} s steady\n{'=' * 78}")  # fmt: skip
    print("quantile            " + "  ".join(f"{p:>8}" for p in q))
    print("send − intended     " + "  ".join(f"{v * 1e3:6.3f}ms" for v in os_q))
    print("server − intended   " + "  ".join(f"{v * 1e3:6.3f}ms" for v in arr_q))
    print(f"client CPU {s['client_cpu']:.3f} cores, timer lag p99 {s['lag']['p99'] * 1e3:.3f} ms, "
          f"bottleneck: {s['client_bottleneck']}; load 1 min: {load_average()}")  # fmt: skip
    record(
        "load_think_overshoot",
        {"users": THINK_USERS, "throughput": s["throughput"], "requests": len(overshoot),
         "overshoot_s": dict(zip(map(str, q), os_q.tolist(), strict=True)),
         "server_arrival_minus_intended_s": dict(zip(map(str, q), arr_q.tolist(), strict=True)),
         "client_cpu": s["client_cpu"]},
    )  # fmt: skip
    assert s["throughput"] == pytest.approx(THINK_USERS / (THINK_MEAN_S + 0.001), rel=0.05)
    assert s["errors"] == 0
    assert os_q[2] <= OVERSHOOT_P99_S


def _rss_child(url: str, users: int) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.test_bench_load", "rss", url, str(users)],
        capture_output=True,
        text=True,
        check=False,
        cwd=Path(__file__).resolve().parents[1],
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_memory_per_emulated_user(record: Recorder) -> None:
    from tierscope.load import TestServer

    with TestServer(0.001) as server:
        runs = {users: _rss_child(server.url, users) for users in MEM_USERS}
    small, big = (runs[u] for u in MEM_USERS)
    per_user = big["grown_bytes"] / MEM_USERS[1]
    slope = (big["grown_bytes"] - small["grown_bytes"]) / (MEM_USERS[1] - MEM_USERS[0])
    print(f"\n{'=' * 78}\nmemory of the generator process (VmRSS), think time {MEM_THINK_S} s\n"
          f"{'=' * 78}")  # fmt: skip
    for users, r in runs.items():
        print(f"{users:>6} users: baseline {r['base_bytes'] / 2**20:7.1f} MiB, steady "
              f"{r['steady_bytes'] / 2**20:7.1f} MiB, {r['throughput']:,.0f} req/s, "
              f"{r['connections']} connections")  # fmt: skip
    print(
        f"per user at {MEM_USERS[1]:,}: {per_user / 1e3:.2f} KB (target <= "
        f"{BYTES_PER_USER / 1e3:.0f} KB); slope {slope / 1e3:.2f} KB per added user"
    )
    record(
        "load_memory",
        {"runs": {str(k): v for k, v in runs.items()}, "bytes_per_user": per_user,
         "slope_bytes_per_user": slope},
    )  # fmt: skip
    assert big["connections"] >= 0.98 * MEM_USERS[1]
    assert per_user <= BYTES_PER_USER


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _rss_main(url: str, users: int) -> None:
    """Child: run ``users`` users and print baseline and steady-state resident memory."""
    from tierscope.load import LoadGenerator
    from tierscope.spec.workload import parse_workload

    w = parse_workload(
        {
            "think_time": {"dist": "exp", "mean": MEM_THINK_S},
            "interactions": [{"name": "get", "url": "/"}],
        }
    )
    gen = LoadGenerator(w, [url], keep_requests=False)
    gen.start(1, 0, 0.2).wait()  # imports, first allocations
    base = _rss_bytes()
    handle = gen.start(users, MEM_RAMP_S, MEM_STEADY_S)
    peak, connections = base, 0
    while not handle.join(0.25):
        snap = handle.snapshot()
        if snap.phase == "steady":
            peak = max(peak, _rss_bytes())
            connections = max(connections, snap.connections)
    result = handle.wait()
    print(
        json.dumps(
            {
                "users": users,
                "base_bytes": base,
                "steady_bytes": peak,
                "grown_bytes": peak - base,
                "connections": connections,
                "throughput": result.summary["throughput"],
            }
        )
    )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "rss":
        _rss_main(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit("usage: python -m benchmarks.test_bench_load rss URL USERS")
