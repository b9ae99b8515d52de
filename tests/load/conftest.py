"""Fixtures of the load-generator tests: the accurate in-process test server, and nginx.

Tests that need a real server are marked ``real_system``: without it they skip with a message
naming what to install, and under ``CI=true`` that skip is a failure.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tierscope.load import LoadGenerator, LoadResult, TestServer
from tierscope.spec.workload import parse_workload


@pytest.fixture
def server() -> Iterator[TestServer]:
    """A test server with no delay (tests set one) that logs every request."""
    with TestServer(record=True) as srv:
        yield srv


def workload(**doc: Any) -> Any:
    """A workload from keyword fields; one interaction ``get`` on ``/`` unless given."""
    doc.setdefault("interactions", [{"name": "get", "url": "/"}])
    return parse_workload(doc)


def run(
    srv: TestServer,
    w: Any,
    level: float,
    steady_s: float,
    *,
    ramp_up_s: float = 0.0,
    during: Any = None,
    **options: Any,
) -> LoadResult:
    """Run one level against ``srv``; ``during(handle)`` is called right after the start."""
    options.setdefault("seed", 7)
    handle = LoadGenerator(w, [srv.url], **options).start(level, ramp_up_s, steady_s)
    if during is not None:
        during(handle)
    return handle.wait()


def joined(result: LoadResult, srv: TestServer) -> pl.DataFrame:
    """The generator's requests joined with the server's log by request id."""
    log = srv.take_log()
    return result.requests.join(log, on="request_id", how="inner")


def blocking_client_gaps(srv: TestServer, requests: int, think_s: float) -> np.ndarray:
    """Client latency less the server's own time for each request of a minimal blocking client.

    One keep-alive connection, a request, a blocking read of the whole response, an exponential
    think time: the loopback round trip and the thread wake-ups of this machine, which every
    client pays, with nothing of a load generator's machinery. The accuracy tests hold the
    generator to their bound above this floor where the machine's floor alone exceeds it.
    """
    host, port = srv.url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    rng = np.random.default_rng(3)
    times: dict[str, tuple[float, float]] = {}
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def more() -> bytes:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError("the test server closed the floor client's connection")
            return chunk

        for i in range(requests):
            rid = f"floor-{i}"
            head = f"GET / HTTP/1.1\r\nHost: {host}\r\nX-Request-Id: {rid}\r\n\r\n"
            start = time.monotonic()
            sock.sendall(head.encode())
            data = b""
            while b"\r\n\r\n" not in data:
                data += more()
            header, _, body = data.partition(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in header.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            while len(body) < length:
                body += more()
            times[rid] = (start, time.monotonic())
            time.sleep(rng.exponential(think_s))
    log = srv.take_log().filter(pl.col("request_id").is_in(list(times)))
    client = np.array([times[r][1] - times[r][0] for r in log["request_id"]])
    return client - (log["sent"] - log["received"]).to_numpy()


def require(binary: str, package: str) -> str:
    """Path of ``binary``; skip (fail under CI=true) naming the Debian package to install."""
    path = shutil.which(binary) or (
        f"/usr/sbin/{binary}" if Path(f"/usr/sbin/{binary}").exists() else None
    )
    if path is None:
        message = f"needs {binary}: apt-get install -y {package}"
        if os.environ.get("CI") == "true":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def nginx() -> Iterator[str]:
    """nginx serving a small static file and a 404, on a free loopback port; yields its URL."""
    binary = require("nginx", "nginx-light")
    # Not under pytest's tmp dirs: nginx workers run as nobody and need to read the files.
    root = Path(tempfile.mkdtemp(prefix="tierscope-nginx-"))
    www = root / "www"
    www.mkdir()
    (www / "index.html").write_text("x" * 612)
    port = _free_port()
    conf = root / "nginx.conf"
    conf.write_text(
        f"""worker_processes 1;
pid {root}/nginx.pid;
error_log {root}/error.log;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {root}/body; proxy_temp_path {root}/proxy;
  fastcgi_temp_path {root}/fcgi; uwsgi_temp_path {root}/uwsgi; scgi_temp_path {root}/scgi;
  server {{ listen 127.0.0.1:{port}; root {www}; }}
}}
"""
    )
    root.chmod(0o755)
    www.chmod(0o755)
    (www / "index.html").chmod(0o644)
    log = root / "nginx.out"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary, "-c", str(conf), "-g", "daemon off;"], stdout=out, stderr=out
        )
    deadline = time.monotonic() + 5
    try:
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"nginx did not start: {log.read_text()}")
                time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(root, ignore_errors=True)
